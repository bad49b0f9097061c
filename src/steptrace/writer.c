// SPDX-License-Identifier: MIT
// The step trace's file: opened when the first records are handed over (a
// process that records nothing creates nothing), written as they come by a
// writer thread, gzip-compressed with a libz opened at run time. libaoshim.so links no libz: a
// preloaded library's dependencies come into every program it is loaded into, ahead of the
// program's own (report/record.c says the same of libunwind). Without a libz.so.1 the trace is
// written uncompressed, said once; readers accept both (they look at the first two bytes).
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aoshim.h"
#include "config.h"
#include "cuda/guard.h"
#include "cuda/real.h"
#include "log.h"
#include "report/report.h"
#include "steptrace/internal.h"

// --- libz, as zlib 1.x defines its stream (its ABI since 1.0) ---------------------------------
// zlib.h is not needed to build: the structure and the constants below are
// zlib's own, and deflateInit2_ checks the structure's size and zlib's major
// version, refusing a mismatch rather than misreading it.
typedef struct ao_zstream_s {
    const unsigned char *next_in;
    unsigned avail_in;
    unsigned long total_in;
    unsigned char *next_out;
    unsigned avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *zalloc, *zfree, *opaque;
    int data_type;
    unsigned long adler, reserved;
} ao_zstream_t;

enum { Z_NO_FLUSH = 0, Z_SYNC_FLUSH = 2, Z_FINISH = 4 };
enum { Z_OK = 0, Z_STREAM_END = 1, Z_BUF_ERROR = -5 };
#define Z_DEFLATED 8
#define Z_LEVEL    1         // the fastest: the trace is text, 1 already gives most of the gain
#define Z_GZIP     (15 + 16) // a 32 KiB window, gzip's header and trailer

static struct {
    int (*init2)(ao_zstream_t *, int, int, int, int, int, const char *, int);
    int (*deflate)(ao_zstream_t *, int);
    int (*end)(ao_zstream_t *);
    const char *(*version)(void);
} zlib;

void ao_trw_init(void)
{
    void *h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    zlib.init2 = (__typeof__(zlib.init2))dlsym(h, "deflateInit2_");
    zlib.deflate = (__typeof__(zlib.deflate))dlsym(h, "deflate");
    zlib.end = (__typeof__(zlib.end))dlsym(h, "deflateEnd");
    zlib.version = (__typeof__(zlib.version))dlsym(h, "zlibVersion");
    if (!zlib.init2 || !zlib.deflate || !zlib.end || !zlib.version) memset(&zlib, 0, sizeof zlib);
}

// --- the file (zmu) ---------------------------------------------------------------------------
enum { W_NEW, W_OPEN, W_FAILED, W_DONE, W_FORKED };

static pthread_mutex_t zmu = PTHREAD_MUTEX_INITIALIZER; // the file and the compressor
static int state = W_NEW;
static int fd = -1;
static bool gz;
static ao_zstream_t z;
static unsigned char out[256 << 10];
static char header_text[2048]; // made on a program thread (the writer has no CUDA context)
static size_t header_len;

static void fail(const char *what, int err)
{
    state = W_FAILED;
    __atomic_store_n(&ao_tr_on, false, __ATOMIC_RELAXED);
    if (fd > 2) close(fd);
    fd = -1;
    ao_report_path_warn("AOSHIM_RECORD", "AOSHIM_RECORD: %s: %s; the step trace stops here", what,
                        strerror(err));
}

static bool write_all(const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fail("cannot write the file", w < 0 ? errno : EIO);
            return false;
        }
        c += w;
        n -= (size_t)w;
    }
    return true;
}

// Through the compressor (or straight to the file): flush Z_NO_FLUSH,
// Z_SYNC_FLUSH or Z_FINISH.
static void emit(const char *data, size_t n, int flush)
{
    if (!gz) {
        if (n) write_all(data, n);
        return;
    }
    z.next_in = (const unsigned char *)data;
    z.avail_in = (unsigned)n;
    // zlib's own loop (zpipe.c): call again while the output filled up; at
    // Z_FINISH the last call ends the stream with room to spare.
    do {
        z.next_out = out;
        z.avail_out = sizeof out;
        int r = zlib.deflate(&z, flush);
        if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
            fail("the compressor failed", EIO);
            return;
        }
        size_t have = sizeof out - z.avail_out;
        if (have && !write_all(out, have)) return;
    } while (z.avail_out == 0);
}

static char *meta_device(char *p)
{
    if (!ao_real_driver()) return p;
    CUdevice dev;
    char name[256];
    size_t total = 0;
    if (AO_REAL_CALL(ao_real.cuCtxGetDevice(&dev)) != CUDA_SUCCESS) return p;
    if (AO_REAL_CALL(ao_real.cuDeviceGetName(name, sizeof name - 1, dev)) == CUDA_SUCCESS) {
        name[sizeof name - 1] = '\0';
        p = AO_TR_PUTS(p, " device=");
        p = ao_tr_encode(p, name, 200);
    }
    if (AO_REAL_CALL(ao_real.cuDeviceTotalMem_v2(&total, dev)) == CUDA_SUCCESS) {
        p = AO_TR_PUTS(p, " total=");
        p = ao_tr_u64(p, total);
    }
    return p;
}

// The header and the facts about the run, before the first record: made by
// the program's thread that first hands records over, which has the context.
static void make_header(void)
{
    char *p = header_text;
    p = AO_TR_PUTS(p, "aoshim-trace 1\nmeta source=record aoshim=");
    p = AO_TR_PUTS(p, AO_REPORT_VERSION);
    p = AO_TR_PUTS(p, " pid=");
    p = ao_tr_u64(p, (uint64_t)getpid());
    extern char *program_invocation_name;
    if (program_invocation_name) {
        p = AO_TR_PUTS(p, " program=");
        p = ao_tr_encode(p, program_invocation_name, 512);
    }
    p = AO_TR_PUTS(p, " enable=");
    *p++ = ao_config.enable ? '1' : '0';
    p = AO_TR_PUTS(p, " sample_every=");
    p = ao_tr_u64(p, AO_TR_SAMPLE_EVERY);
    p = AO_TR_PUTS(p, "\nmeta");
    char *mark = p;
    int rt = ao_real_runtime_version();
    if (rt) {
        p = AO_TR_PUTS(p, " runtime=");
        p = ao_tr_u64(p, (uint64_t)rt);
    }
    p = meta_device(p);
    if (p == mark)
        p -= 5; // no such line
    else
        *p++ = '\n';
    header_len = (size_t)(p - header_text);
}

// Opened in place, as the control log is: the trace grows while the program
// runs, so a crash leaves what was written. O_NOFOLLOW: a planted symlink in
// a shared directory must not redirect the truncation.
static void open_file(void)
{
    char path[4096];
    if (!ao_report_path(ao_config.record, path, sizeof path)) {
        state = W_FAILED;
        __atomic_store_n(&ao_tr_on, false, __ATOMIC_RELAXED);
        ao_report_path_warn("AOSHIM_RECORD", "AOSHIM_RECORD='%s': file name too long; no trace",
                            ao_config.record);
        return;
    }
    if (strcmp(path, "/dev/stdout") == 0)
        fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    else if (strcmp(path, "/dev/stderr") == 0)
        fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    else
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        char what[4200];
        // It passed the start-up check: the directory changed since.
        snprintf(what, sizeof what, "cannot write %s", path);
        fail(what, errno);
        return;
    }
    state = W_OPEN;
    gz = false;
    if (zlib.init2) {
        memset(&z, 0, sizeof z);
        gz = zlib.init2(&z, Z_LEVEL, Z_DEFLATED, Z_GZIP, 8, 0, zlib.version(), (int)sizeof z) ==
             Z_OK;
    }
    if (!gz) {
        static int once;
        ao_warn_once(
            &once, "AOSHIM_RECORD: no libz.so.1: the step trace %s is written uncompressed", path);
    }
    emit(header_text, header_len, Z_NO_FLUSH);
    static const char note[] = "meta note=uncompressed:%20no%20libz.so.1\n";
    if (!gz) emit(note, sizeof note - 1, Z_NO_FLUSH);
}

// zmu held: lines to the file.
static void write_locked(const char *data, size_t n, bool sync)
{
    if (state == W_NEW) open_file();
    if (state == W_OPEN && (n || sync)) emit(data, n, sync ? Z_SYNC_FLUSH : Z_NO_FLUSH);
}

// zmu held: a buffer's records as lines, through a staging buffer. A record
// that does not fit what is left (a copy taken at exit is whole records; a
// corrupt size would be a bug) ends the buffer.
static char text[256 << 10];

static void write_records(const ao_trbuf_t *b, bool sync)
{
    size_t n = 0;
    for (size_t at = b->start; at + sizeof(ao_trrec_t) <= b->len;) {
        const ao_trrec_t *r = (const ao_trrec_t *)(b->data + at);
        if (r->size < sizeof *r || r->size > b->len - at) break;
        if (n + AO_TR_LINE_MAX + 20 * (size_t)r->n > sizeof text) {
            write_locked(text, n, false);
            n = 0;
        }
        n += ao_tr_format(r, b->tid, text + n);
        at += r->size;
    }
    write_locked(text, n, sync);
}

// --- the queue, the side lines and the writer thread (mu) ---------------------------------
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;  // something to write, or stop
static pthread_cond_t space = PTHREAD_COND_INITIALIZER; // a buffer back, side room, stopped
static ao_trbuf_t *qhead, **qtail = &qhead, *free_bufs;
static unsigned queued, allocated;
static char side[16 << 10], side_w[16 << 10]; // the side lines, and the writer's copy
static size_t side_len;
static bool used, started, running, stopping, stopped, forked;
static pthread_t writer;

static void *writer_main(void *arg)
{
    (void)arg;
    // SCHED_BATCH: a writer woken does not preempt the program's threads (on
    // a machine with no core to spare, each wake-up would cost the program a
    // time slice); it still gets its share of the processor.
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!qhead && !side_len && !stopping)
            pthread_cond_wait(&work, &mu);
        if (!qhead && !side_len) break; // stopping, and nothing left
        size_t n = side_len;
        memcpy(side_w, side, n);
        side_len = 0;
        ao_trbuf_t *b = qhead;
        if (b && !(qhead = b->next)) qtail = &qhead;
        pthread_cond_broadcast(&space);
        pthread_mutex_unlock(&mu);
        pthread_mutex_lock(&zmu);
        write_locked(side_w, n, false);
        if (b) write_records(b, true);
        pthread_mutex_unlock(&zmu);
        pthread_mutex_lock(&mu);
        if (b) {
            b->next = free_bufs;
            free_bufs = b;
            queued--;
            pthread_cond_broadcast(&space);
        }
    }
    running = false;
    stopped = true;
    pthread_cond_broadcast(&space);
    pthread_mutex_unlock(&mu);
    return NULL;
}

// mu held: the first hand-over makes the header and starts the writer; where
// no thread can be made, the caller writes itself (running stays false).
static void first_use(void)
{
    if (started) return;
    started = used = true;
    make_header();
    // Signals are for the program's threads: the writer blocks them all.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = pthread_create(&writer, NULL, writer_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (running) pthread_detach(writer);
}

ao_trbuf_t *ao_trw_get(void)
{
    pthread_mutex_lock(&mu);
    while (running && !free_bufs && allocated >= AO_TR_BUFS)
        pthread_cond_wait(&space, &mu);
    ao_trbuf_t *b = free_bufs;
    if (b) {
        free_bufs = b->next;
    } else {
        b = malloc(sizeof *b + AO_TR_BUF);
        if (b) allocated++;
    }
    pthread_mutex_unlock(&mu);
    if (b) b->next = NULL, b->start = b->len = 0;
    return b;
}

void ao_trw_queue(ao_trbuf_t *b)
{
    pthread_mutex_lock(&mu);
    if (forked || b->len <= b->start || stopped) {
        b->next = free_bufs;
        free_bufs = b;
        pthread_mutex_unlock(&mu);
        return;
    }
    first_use();
    if (running) {
        b->next = NULL;
        *qtail = b;
        qtail = &b->next;
        queued++;
        pthread_cond_signal(&work);
        // The writer keeps up (a buffer compresses faster than a thread fills
        // one); where it does not, the program waits rather than letting
        // records pile up unwritten, which a crash would lose.
        while (running && queued > AO_TR_LAG)
            pthread_cond_wait(&space, &mu);
        pthread_mutex_unlock(&mu);
        return;
    }
    pthread_mutex_unlock(&mu);
    pthread_mutex_lock(&zmu); // no writer thread: this thread writes
    write_records(b, true);
    pthread_mutex_unlock(&zmu);
    pthread_mutex_lock(&mu);
    b->next = free_bufs;
    free_bufs = b;
    pthread_mutex_unlock(&mu);
}

void ao_trw_side(const char *data, size_t n)
{
    pthread_mutex_lock(&mu);
    if (forked || stopped) {
        pthread_mutex_unlock(&mu);
        return;
    }
    first_use();
    while (running && side_len + n > sizeof side) {
        pthread_cond_signal(&work);
        pthread_cond_wait(&space, &mu);
    }
    if (running) {
        // Side lines wait for the next buffer (whose records may use them),
        // unless they fill up: one wake-up of the writer per buffer.
        memcpy(side + side_len, data, n);
        side_len += n;
        if (side_len > sizeof side / 2) pthread_cond_signal(&work);
        pthread_mutex_unlock(&mu);
        return;
    }
    pthread_mutex_unlock(&mu);
    pthread_mutex_lock(&zmu);
    write_locked(data, n, false);
    pthread_mutex_unlock(&zmu);
}

// The writer is given a while to write what it holds (it is not stuck unless
// the file is: a full disk fails, a pipe with no reader blocks); past that
// the trace is left without its trailer, said once.
void ao_trw_finish(const char *last, size_t last_n)
{
    pthread_mutex_lock(&mu);
    stopping = true;
    pthread_cond_signal(&work);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    while (running && pthread_cond_timedwait(&space, &mu, &until) == 0) {
    }
    bool stuck = running;
    stopped = true;
    // What the writer did not take (no writer thread: all of it).
    ao_trbuf_t *rest = qhead;
    size_t n = side_len;
    memcpy(side_w, side, n);
    side_len = 0;
    qhead = NULL, qtail = &qhead;
    pthread_mutex_unlock(&mu);
    if (stuck) {
        ao_report_path_warn("AOSHIM_RECORD", "AOSHIM_RECORD: the trace's writer is stuck: the "
                                             "trace ends without its last records");
        return;
    }
    pthread_mutex_lock(&zmu);
    if (used) write_locked(side_w, n, false);
    for (ao_trbuf_t *b = rest; b; b = b->next)
        write_records(b, false);
    if (used) write_locked(last, last_n, false);
    if (state == W_OPEN) {
        if (gz) {
            emit(NULL, 0, Z_FINISH);
            zlib.end(&z);
        }
        if (state == W_OPEN) {
            if (fd > 2 && close(fd) != 0) fail("cannot write the file", errno);
            fd = -1;
        }
        if (state == W_OPEN) state = W_DONE;
    }
    pthread_mutex_unlock(&zmu);
}

// Runs in the child right after fork(), no other thread alive: plain stores.
// The parent's descriptor is closed in the child (the parent writes on), the
// compressor's memory left as it is (the parent's state, never used here).
// The locks may have been held by the parent's threads at the fork.
void ao_trw_forked(void)
{
    if (state == W_OPEN && fd > 2) close(fd);
    fd = -1;
    state = W_FORKED;
    forked = true;
    running = false;
    stopped = true;
    pthread_mutex_init(&mu, NULL);
    pthread_mutex_init(&zmu, NULL);
    pthread_cond_init(&work, NULL);
    pthread_cond_init(&space, NULL);
}
