// SPDX-License-Identifier: MIT
// The step trace's file: opened at the first record (a process that records
// nothing creates nothing), written as records come, gzip-compressed with
// a libz opened at run time. libaoshim.so links no libz: a preloaded
// library's dependencies come into every program it is loaded into, ahead
// of the program's own (report/record.c says the same of libunwind). Without
// a libz.so.1 the trace is written uncompressed, said once; readers accept
// both (they look at the first two bytes).
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
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

// --- the file ---------------------------------------------------------------------------------
enum { W_NEW, W_OPEN, W_FAILED, W_DONE, W_FORKED };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int state = W_NEW;
static int fd = -1;
static bool gz;
static ao_zstream_t z;
static unsigned char out[256 << 10];

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

// The header and the facts about the run, before the first record.
static void header(void)
{
    char buf[2048], *p = buf;
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
        p -= 5; // no line at all
    else
        *p++ = '\n';
    if (!gz) p = AO_TR_PUTS(p, "meta note=uncompressed:%20no%20libz.so.1\n");
    emit(buf, (size_t)(p - buf), Z_NO_FLUSH);
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
        snprintf(what, sizeof what, "cannot write %s",
                 path); // passed the start-up check: changed since
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
        ao_warn_once(&once,
                     "AOSHIM_RECORD: no libz.so.1: the step trace %s is written "
                     "uncompressed",
                     path);
    }
    header();
}

void ao_trw_put(const char *data, size_t n, bool sync)
{
    pthread_mutex_lock(&mu);
    if (state == W_NEW) open_file();
    if (state == W_OPEN) emit(data, n, sync ? Z_SYNC_FLUSH : Z_NO_FLUSH);
    pthread_mutex_unlock(&mu);
}

void ao_trw_finish(void)
{
    pthread_mutex_lock(&mu);
    if (state == W_OPEN) {
        if (gz) {
            emit(NULL, 0, Z_FINISH);
            zlib.end(&z);
        }
        if (state == W_OPEN) {
            if (fd > 2 && close(fd) != 0) fail("cannot write the file", errno);
            fd = -1;
        }
    }
    if (state == W_OPEN) state = W_DONE;
    pthread_mutex_unlock(&mu);
}

bool ao_trw_opened(void)
{
    return __atomic_load_n(&state, __ATOMIC_RELAXED) != W_NEW;
}

// Runs in the child right after fork(), no other thread alive: plain stores.
// The parent's descriptor is closed in the child (the parent writes on), the
// compressor's memory left as it is (the parent's state, never used here).
void ao_trw_forked(void)
{
    if (state == W_OPEN && fd > 2) close(fd);
    fd = -1;
    state = W_FORKED;
    pthread_mutex_init(&mu, NULL); // another thread may have held it at the fork
}
