// SPDX-License-Identifier: MIT
// The step trace's records (steptrace.h): per-thread buffers, the small
// integers that name streams, events, pools and kernels, and one function
// per record kind. The format is docs/trace-format.md's.
#define _GNU_SOURCE 1
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "cuda/guard.h"
#include "cuda/real.h"
#include "log.h"
#include "offload/scan.h"
#include "steptrace/internal.h"

bool ao_tr_on;

static bool started, forked;
static uint64_t origin_ns;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); // the vDSO: no system call
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ao_tr_now(void)
{
    uint64_t t = mono_ns();
    return t > origin_ns ? t - origin_ns : 0;
}

// --- per-thread buffers ---------------------------------------------------------------------
// The owner appends without a lock and publishes its length (release); its
// lock is taken only to hand the buffer to the writer (full, step end,
// thread exit) and by the exit, which writes every thread's published bytes
// (done: how far that got) while the threads may still append.
typedef struct tbuf_s {
    char *buf;
    size_t len; // atomic: written by the owner
    size_t done;
    uint32_t tid;
    pthread_mutex_t mu;
    struct tbuf_s *next, **prevp;
} tbuf_t;

static AO_TLS tbuf_t *tls_buf;
static pthread_key_t buf_key;
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf_t *bufs;
static uint32_t next_tid;

static void hand_over(tbuf_t *b, bool sync)
{
    pthread_mutex_lock(&b->mu);
    size_t len = __atomic_load_n(&b->len, __ATOMIC_ACQUIRE);
    if (len > b->done) ao_trw_put(b->buf + b->done, len - b->done, sync);
    b->done = len;
    pthread_mutex_unlock(&b->mu);
}

// The owner only: its records go, its buffer starts again.
static void flush_own(tbuf_t *b, bool sync)
{
    pthread_mutex_lock(&b->mu);
    size_t len = __atomic_load_n(&b->len, __ATOMIC_RELAXED);
    if (len > b->done) ao_trw_put(b->buf + b->done, len - b->done, sync);
    b->done = 0;
    __atomic_store_n(&b->len, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&b->mu);
}

// A thread ends: its records go, its buffer is freed. Not in a forked child,
// whose locks may have been held by a thread of the parent at the fork.
static void thread_exit(void *arg)
{
    tbuf_t *b = arg;
    if (!b || forked) return;
    pthread_mutex_lock(&list_mu);
    flush_own(b, false);
    *b->prevp = b->next;
    if (b->next) b->next->prevp = b->prevp;
    pthread_mutex_unlock(&list_mu);
    if (tls_buf == b) tls_buf = NULL;
    free(b->buf);
    free(b);
}

// Once per thread: the buffer, and the thread's number.
static tbuf_t *tbuf_new(void)
{
    tbuf_t *b = calloc(1, sizeof *b);
    char *buf = b ? malloc(AO_TR_BUF) : NULL;
    if (!buf) {
        free(b);
        static int once;
        ao_warn_once(&once, "AOSHIM_RECORD: no memory for a thread's buffer: that thread's "
                            "calls are not recorded");
        return NULL;
    }
    b->buf = buf;
    pthread_mutex_init(&b->mu, NULL);
    pthread_mutex_lock(&list_mu);
    b->tid = next_tid++;
    b->next = bufs;
    b->prevp = &bufs;
    if (bufs) bufs->prevp = &b->next;
    bufs = b;
    pthread_mutex_unlock(&list_mu);
    pthread_setspecific(buf_key, b);
    tls_buf = b;
    return b;
}

// Room for need bytes (at most AO_TR_BUF / 2) in this thread's buffer, and
// the record's start ("<kind> t=<now>[ tid=N]"): the cursor, or NULL.
static char *rec_begin(const char *kind, size_t klen, size_t need)
{
    tbuf_t *b = tls_buf;
    if (!b && !(b = tbuf_new())) return NULL;
    size_t len = __atomic_load_n(&b->len, __ATOMIC_RELAXED);
    if (len + need + 64 > AO_TR_BUF) {
        flush_own(b, true);
        len = 0;
    }
    char *p = ao_tr_put(b->buf + len, kind, klen);
    p = AO_TR_PUTS(p, " t=");
    p = ao_tr_u64(p, ao_tr_now());
    if (b->tid) {
        p = AO_TR_PUTS(p, " tid=");
        p = ao_tr_u64(p, b->tid);
    }
    return p;
}
#define REC_BEGIN(kind, need) rec_begin(kind, sizeof(kind) - 1, (need))

static void rec_end(char *p)
{
    *p++ = '\n';
    __atomic_store_n(&tls_buf->len, (size_t)(p - tls_buf->buf), __ATOMIC_RELEASE);
}

// --- names: streams, events, pools ------------------------------------------------------------
// Handle -> small integer, read without a lock (the id is stored before
// the key is published), declared under decl_mu. A forgotten handle (a
// stream or event destroyed) keeps its slot with id 0, and a later handle
// may take the slot over.
#define TAB 4096

typedef struct tslot_s {
    const void *key; // atomic
    uint32_t id;     // atomic; 0: forgotten
} tslot_t;

static tslot_t streams[TAB], events[TAB], pools[256];
static pthread_mutex_t decl_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_stream = 2, next_event = 1, next_pool = 1, next_kernel = 1;
static unsigned stream_gen; // bumped at every stream destroyed: the per-thread cache's age

static unsigned hash_of(const void *k, unsigned n)
{
    uint64_t x = (uint64_t)(uintptr_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return (unsigned)(x >> 40) & (n - 1);
}

static uint32_t tab_find(tslot_t *t, unsigned n, const void *k)
{
    for (unsigned i = hash_of(k, n), probe = 0; probe < n; i = (i + 1) & (n - 1), probe++) {
        const void *key = __atomic_load_n(&t[i].key, __ATOMIC_ACQUIRE);
        if (key == k) return __atomic_load_n(&t[i].id, __ATOMIC_RELAXED);
        if (!key) return 0;
    }
    return 0;
}

// Under decl_mu: k's id now id (0: forget it). false when the table is full.
static bool tab_set(tslot_t *t, unsigned n, const void *k, uint32_t id)
{
    int reuse = -1;
    for (unsigned i = hash_of(k, n), probe = 0; probe < n; i = (i + 1) & (n - 1), probe++) {
        const void *key = t[i].key;
        if (key == k) {
            __atomic_store_n(&t[i].id, id, __ATOMIC_RELAXED);
            return true;
        }
        if (!key) {
            if (!id) return true; // not there: nothing to forget
            if (reuse < 0) reuse = (int)i;
            break;
        }
        if (reuse < 0 && !t[i].id) reuse = (int)i; // a forgotten handle's slot
    }
    if (reuse < 0) return false;
    __atomic_store_n(&t[reuse].id, id, __ATOMIC_RELAXED);
    __atomic_store_n(&t[reuse].key, k, __ATOMIC_RELEASE);
    return true;
}

static void declare(const char *line, size_t n)
{
    ao_trw_put(line, n, false);
}

static uint32_t stream_declare(CUstream s, bool created, unsigned flags, int prio, bool have_prio)
{
    pthread_mutex_lock(&decl_mu);
    uint32_t id = created ? 0 : tab_find(streams, TAB, s);
    if (!id) {
        id = next_stream++;
        if (!tab_set(streams, TAB, s, id)) {
            static int once;
            ao_warn_once(&once, "AOSHIM_RECORD: more than %d streams: later ones share a number",
                         TAB);
        }
        // First seen at a use, not at its creation: its flags as the driver says.
        bool have_flags = created;
        if (!created && ao_real_driver() && ao_real.cuStreamGetFlags)
            have_flags = AO_REAL_CALL(ao_real.cuStreamGetFlags(s, &flags)) == CUDA_SUCCESS;
        char line[96], *p = line;
        p = AO_TR_PUTS(p, "stream id=");
        p = ao_tr_u64(p, id);
        if (have_flags) {
            p = AO_TR_PUTS(p, " flags=");
            p = ao_tr_u64(p, flags);
        }
        if (have_prio) {
            p = AO_TR_PUTS(p, " prio=");
            p = ao_tr_i64(p, prio);
        }
        *p++ = '\n';
        declare(line, (size_t)(p - line));
    }
    pthread_mutex_unlock(&decl_mu);
    return id;
}

static AO_TLS const void *c_stream;
static AO_TLS uint32_t c_sid;
static AO_TLS unsigned c_gen;

// 0 the legacy default stream, 1 the per-thread one, the program's from 2.
static uint32_t stream_id(CUstream s)
{
    if (s == CU_STREAM_LEGACY || !s) return 0;
    if (s == CU_STREAM_PER_THREAD) return 1;
    unsigned gen = __atomic_load_n(&stream_gen, __ATOMIC_RELAXED);
    if (s == c_stream && gen == c_gen) return c_sid;
    uint32_t id = tab_find(streams, TAB, s);
    if (!id) id = stream_declare(s, false, 0, 0, false);
    c_stream = s, c_sid = id, c_gen = gen;
    return id;
}

static uint32_t event_declare(CUevent e, bool created, unsigned flags)
{
    pthread_mutex_lock(&decl_mu);
    uint32_t id = created ? 0 : tab_find(events, TAB, e);
    if (!id) {
        id = next_event++;
        if (!tab_set(events, TAB, e, id)) {
            static int once;
            ao_warn_once(&once,
                         "AOSHIM_RECORD: more than %d live events: later ones share a "
                         "number",
                         TAB);
        }
        char line[96], *p = line;
        p = AO_TR_PUTS(p, "event id=");
        p = ao_tr_u64(p, id);
        if (created) {
            p = AO_TR_PUTS(p, " flags=");
            p = ao_tr_u64(p, flags);
        }
        *p++ = '\n';
        declare(line, (size_t)(p - line));
    }
    pthread_mutex_unlock(&decl_mu);
    return id;
}

static uint32_t event_id(CUevent e)
{
    uint32_t id = tab_find(events, TAB, e);
    return id ? id : event_declare(e, false, 0);
}

// 0 the current device's default pool; the program's own from 1, in order
// of first use (pool creation is not hooked). Stored as id + 1.
static uint32_t pool_id(CUmemoryPool pool)
{
    uint32_t v = tab_find(pools, 256, pool);
    if (v) return v - 1;
    pthread_mutex_lock(&decl_mu);
    v = tab_find(pools, 256, pool);
    if (!v) {
        CUdevice dev;
        CUmemoryPool def = NULL;
        if (ao_real_driver() && ao_real.cuDeviceGetDefaultMemPool &&
            AO_REAL_CALL(ao_real.cuCtxGetDevice(&dev)) == CUDA_SUCCESS)
            AO_REAL_CALL(ao_real.cuDeviceGetDefaultMemPool(&def, dev));
        v = def == pool ? 1 : 1 + next_pool++;
        tab_set(pools, 256, pool, v);
    }
    pthread_mutex_unlock(&decl_mu);
    return v - 1;
}

// The kernel's id, declared at its first launch (the layout's slot).
static uint32_t kernel_id(ao_layout_t *L)
{
    uint32_t id = __atomic_load_n(&L->trace_id, __ATOMIC_ACQUIRE);
    if (id) return id;
    pthread_mutex_lock(&decl_mu);
    id = L->trace_id;
    if (!id) {
        id = next_kernel++;
        char line[1400], *p = line;
        p = AO_TR_PUTS(p, "kernel id=");
        p = ao_tr_u64(p, id);
        p = AO_TR_PUTS(p, " name=");
        p = ao_tr_encode(p, L->name ? L->name : "?", 400);
        *p++ = '\n';
        declare(line, (size_t)(p - line));
        __atomic_store_n(&L->trace_id, id, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&decl_mu);
    return id;
}

// --- encoding -------------------------------------------------------------------------------
char *ao_tr_encode(char *p, const char *s, size_t max)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; s[n] && n < max; n++) {
        unsigned char c = (unsigned char)s[n];
        if (c <= ' ' || c >= 0x7f || c == '%' || c == '=') {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    if (!n) *p++ = '?';
    return p;
}

// --- life -------------------------------------------------------------------------------------
void ao_tr_init(void)
{
    if (!ao_config.record || started) return;
    started = true;
    origin_ns = mono_ns();
    pthread_key_create(&buf_key, thread_exit);
    ao_trw_init();
    __atomic_store_n(&ao_tr_on, true, __ATOMIC_RELEASE);
}

// Right after fork(), in the child, no other thread alive.
void ao_tr_forked(void)
{
    if (!started) return;
    forked = true;
    ao_tr_on = false;
    ao_trw_forked();
}

static void stream_field(char **pp, CUstream s)
{
    *pp = AO_TR_PUTS(*pp, " s=");
    *pp = ao_tr_u64(*pp, stream_id(s));
}

void ao_tr_step(void)
{
    if (!__atomic_load_n(&ao_tr_on, __ATOMIC_RELAXED)) return;
    ao_tr_timing_collect(false);
    if (tls_buf) flush_own(tls_buf, true);
}

void ao_tr_finish(void)
{
    if (!started || forked) return;
    bool was_on = __atomic_exchange_n(&ao_tr_on, false, __ATOMIC_ACQ_REL);
    if (!was_on && !ao_trw_opened()) return;
    ao_tr_timing_collect(true);
    bool any = ao_trw_opened();
    pthread_mutex_lock(&list_mu);
    for (tbuf_t *b = bufs; b; b = b->next) {
        any = any || __atomic_load_n(&b->len, __ATOMIC_ACQUIRE) > b->done;
        hand_over(b, false);
    }
    pthread_mutex_unlock(&list_mu);
    if (any) {
        char line[48], *p = line;
        p = AO_TR_PUTS(p, "end t=");
        p = ao_tr_u64(p, ao_tr_now());
        *p++ = '\n';
        ao_trw_put(line, (size_t)(p - line), false);
    }
    ao_trw_finish();
}

// --- allocations --------------------------------------------------------------------------
void ao_tr_alloc(const char *api, uint64_t size, CUstream s, uint64_t addr)
{
    char *p = REC_BEGIN("alloc", 160);
    if (!p) return;
    p = AO_TR_PUTS(p, " api=");
    p = ao_tr_put(p, api, strlen(api));
    p = AO_TR_PUTS(p, " size=");
    p = ao_tr_u64(p, size);
    p = AO_TR_PUTS(p, " addr=");
    p = ao_tr_hex(p, addr);
    if (s) stream_field(&p, s);
    rec_end(p);
}

void ao_tr_free(const char *api, uint64_t addr, CUstream s)
{
    char *p = REC_BEGIN("free", 128);
    if (!p) return;
    p = AO_TR_PUTS(p, " api=");
    p = ao_tr_put(p, api, strlen(api));
    p = AO_TR_PUTS(p, " addr=");
    p = ao_tr_hex(p, addr);
    if (s) stream_field(&p, s);
    rec_end(p);
}

// --- copies and sets ----------------------------------------------------------------------
int ao_tr_copy_kind_rt(int kind)
{
    switch (kind) {
    case 0: // cudaMemcpyHostToHost
        return AO_TR_H2H;
    case 1: // cudaMemcpyHostToDevice
        return AO_TR_H2D;
    case 2: // cudaMemcpyDeviceToHost
        return AO_TR_D2H;
    case 3: // cudaMemcpyDeviceToDevice
        return AO_TR_D2D;
    default: // cudaMemcpyDefault: the addresses say
        return AO_TR_DEFAULT;
    }
}

void ao_tr_copy(int kind, uint64_t dst, uint64_t src, uint64_t n, uint64_t src_n, CUstream s,
                bool async, bool pitched)
{
    static const char *const kinds[] = {"h2h", "h2d", "d2h", "d2d", "default"};
    char *p = REC_BEGIN("copy", 200);
    if (!p) return;
    stream_field(&p, s);
    p = AO_TR_PUTS(p, " kind=");
    p = ao_tr_put(p, kinds[kind], strlen(kinds[kind]));
    // Device sides only; both for a copy whose kind the addresses decide.
    bool dev_dst = kind == AO_TR_H2D || kind == AO_TR_D2D || kind == AO_TR_DEFAULT;
    bool dev_src = kind == AO_TR_D2H || kind == AO_TR_D2D || kind == AO_TR_DEFAULT;
    if (dev_dst && dst) {
        p = AO_TR_PUTS(p, " dst=");
        p = ao_tr_hex(p, dst);
    }
    if (dev_src && src) {
        p = AO_TR_PUTS(p, " src=");
        p = ao_tr_hex(p, src);
    }
    p = AO_TR_PUTS(p, " n=");
    p = ao_tr_u64(p, n);
    if (src_n && src_n != n) {
        p = AO_TR_PUTS(p, " src_n=");
        p = ao_tr_u64(p, src_n);
    }
    p = AO_TR_PUTS(p, " async=");
    *p++ = async ? '1' : '0';
    if (pitched) p = AO_TR_PUTS(p, " pitched=1");
    rec_end(p);
}

void ao_tr_memset(uint64_t dst, uint64_t n, uint32_t value, unsigned width, CUstream s,
                  bool pitched)
{
    char *p = REC_BEGIN("memset", 160);
    if (!p) return;
    stream_field(&p, s);
    p = AO_TR_PUTS(p, " dst=");
    p = ao_tr_hex(p, dst);
    p = AO_TR_PUTS(p, " n=");
    p = ao_tr_u64(p, n);
    p = AO_TR_PUTS(p, " value=");
    p = ao_tr_u64(p, value);
    if (width != 1) {
        p = AO_TR_PUTS(p, " width=");
        p = ao_tr_u64(p, width);
    }
    if (pitched) p = AO_TR_PUTS(p, " pitched=1");
    rec_end(p);
}

// --- launches -------------------------------------------------------------------------------
void ao_tr_launch_begin(ao_tr_launch_t *l, const void *fn, int kind, CUstream s)
{
    l->s = s;
    l->slot = -1;
    ao_layout_t *L = (ao_layout_t *)ao_layout_get(fn, kind);
    l->layout = L;
    if (!L) return;
    uint32_t n = __atomic_fetch_add(&L->trace_launches, 1, __ATOMIC_RELAXED);
    if (n % AO_TR_SAMPLE_EVERY == 0) l->slot = ao_tr_timing_take();
}

void ao_tr_launch_arm(ao_tr_launch_t *l)
{
    if (l->slot >= 0 && !ao_tr_timing_arm(l->slot, l->s)) l->slot = -1;
}

void ao_tr_launch_end(ao_tr_launch_t *l, bool ok, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned shm, void *const *args,
                      const void *packed)
{
    uint32_t sample = l->slot >= 0 ? ao_tr_timing_end(l->slot, l->s, ok) : 0;
    if (!ok) return; // not launched: nothing the program's GPU will run
    ao_layout_t *L = (ao_layout_t *)l->layout;
    uint32_t nwords = L && (args || packed) ? L->nwords : 0;
    uint32_t k = L ? kernel_id(L) : 0;
    char *p = REC_BEGIN("launch", 200 + 20 * (size_t)nwords);
    if (!p) return;
    p = AO_TR_PUTS(p, " k=");
    p = ao_tr_u64(p, k);
    stream_field(&p, l->s);
    p = AO_TR_PUTS(p, " grid=");
    p = ao_tr_u64(p, gx);
    *p++ = ',';
    p = ao_tr_u64(p, gy);
    *p++ = ',';
    p = ao_tr_u64(p, gz);
    p = AO_TR_PUTS(p, " block=");
    p = ao_tr_u64(p, bx);
    *p++ = ',';
    p = ao_tr_u64(p, by);
    *p++ = ',';
    p = ao_tr_u64(p, bz);
    if (shm) {
        p = AO_TR_PUTS(p, " shm=");
        p = ao_tr_u64(p, shm);
    }
    if (sample) {
        p = AO_TR_PUTS(p, " sample=");
        p = ao_tr_u64(p, sample);
    }
    // Every pointer-sized word of the parameters, raw (0 left out): a
    // reader keeps those inside a live recorded allocation.
    char sep = '=';
    for (uint32_t i = 0; i < nwords; i++) {
        uint64_t w;
        const char *src = packed ? (const char *)packed + L->w[i].abs
                                 : (const char *)args[L->w[i].param] + L->w[i].off;
        memcpy(&w, src, sizeof w);
        if (!w) continue;
        if (sep == '=') p = AO_TR_PUTS(p, " ptr");
        *p++ = sep;
        sep = ',';
        p = ao_tr_hex(p, w);
    }
    rec_end(p);
}

// --- streams, events, waits, synchronisation -------------------------------------------------
void ao_tr_stream_created(CUstream s, unsigned flags, int prio, bool have_prio)
{
    stream_declare(s, true, flags, prio, have_prio);
}

void ao_tr_stream_destroyed(CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return;
    uint32_t id = tab_find(streams, TAB, s);
    if (!id) return;
    char *p = REC_BEGIN("stream_destroy", 64);
    if (p) {
        p = AO_TR_PUTS(p, " id=");
        p = ao_tr_u64(p, id);
        rec_end(p);
    }
    pthread_mutex_lock(&decl_mu);
    tab_set(streams, TAB, s, 0);
    __atomic_add_fetch(&stream_gen, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&decl_mu);
}

void ao_tr_event_created(CUevent e, unsigned flags)
{
    event_declare(e, true, flags);
}

void ao_tr_event_destroyed(CUevent e)
{
    if (!tab_find(events, TAB, e)) return;
    pthread_mutex_lock(&decl_mu);
    tab_set(events, TAB, e, 0);
    pthread_mutex_unlock(&decl_mu);
}

void ao_tr_event_record(CUevent e, CUstream s)
{
    uint32_t ev = event_id(e);
    char *p = REC_BEGIN("record", 96);
    if (!p) return;
    p = AO_TR_PUTS(p, " ev=");
    p = ao_tr_u64(p, ev);
    stream_field(&p, s);
    rec_end(p);
}

void ao_tr_wait(CUstream s, CUevent e)
{
    uint32_t ev = event_id(e);
    char *p = REC_BEGIN("wait", 96);
    if (!p) return;
    p = AO_TR_PUTS(p, " ev=");
    p = ao_tr_u64(p, ev);
    stream_field(&p, s);
    rec_end(p);
}

void ao_tr_sync(int what, CUstream s, CUevent e)
{
    uint32_t ev = what == AO_TR_SYNC_EVENT ? event_id(e) : 0;
    char *p = REC_BEGIN("sync", 96);
    if (!p) return;
    if (what == AO_TR_SYNC_DEVICE) {
        p = AO_TR_PUTS(p, " what=device");
    } else if (what == AO_TR_SYNC_STREAM) {
        p = AO_TR_PUTS(p, " what=stream");
        stream_field(&p, s);
    } else {
        p = AO_TR_PUTS(p, " what=event ev=");
        p = ao_tr_u64(p, ev);
    }
    rec_end(p);
}

// --- memory pools -------------------------------------------------------------------------
// cuda.h's CUmemPool_attribute, without the prefix, lower case.
static const char *pool_attr_name(int attr, bool *u64)
{
    *u64 = attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        return "reuse_follow_event_dependencies";
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        return "reuse_allow_opportunistic";
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return "reuse_allow_internal_dependencies";
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        return "release_threshold";
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        return "reserved_mem_current";
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        return "reserved_mem_high";
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        return "used_mem_current";
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        return "used_mem_high";
    default:
        return NULL;
    }
}

void ao_tr_pool_attr(CUmemoryPool pool, int attr, const void *value)
{
    bool u64;
    const char *name = pool_attr_name(attr, &u64);
    uint32_t id = pool_id(pool);
    char *p = REC_BEGIN("pool", 160);
    if (!p) return;
    p = AO_TR_PUTS(p, " op=attr pool=");
    p = ao_tr_u64(p, id);
    p = AO_TR_PUTS(p, " attr=");
    if (name) {
        p = ao_tr_put(p, name, strlen(name));
    } else {
        p = AO_TR_PUTS(p, "attr_");
        p = ao_tr_u64(p, (uint64_t)attr);
    }
    if (value) {
        p = AO_TR_PUTS(p, " value=");
        if (u64) {
            uint64_t v;
            memcpy(&v, value, sizeof v);
            p = ao_tr_u64(p, v);
        } else {
            int v;
            memcpy(&v, value, sizeof v);
            p = ao_tr_i64(p, v);
        }
    }
    rec_end(p);
}

void ao_tr_pool_trim(CUmemoryPool pool, uint64_t keep)
{
    uint32_t id = pool_id(pool);
    char *p = REC_BEGIN("pool", 96);
    if (!p) return;
    p = AO_TR_PUTS(p, " op=trim pool=");
    p = ao_tr_u64(p, id);
    p = AO_TR_PUTS(p, " keep=");
    p = ao_tr_u64(p, keep);
    rec_end(p);
}

// --- the control calls ---------------------------------------------------------------------
static int cur_mb; // the microbatch the program last named; 0 again at each step's end

void ao_tr_layer(int op, int arg)
{
    static const char *const names[] = {
        [AO_TR_BEGIN] = "begin",
        [AO_TR_END] = "end",
        [AO_TR_BACKWARD_BEGIN] = "backward_begin",
        [AO_TR_BACKWARD_END] = "backward_end",
        [AO_TR_STEP_END] = "step_end",
        [AO_TR_MICROBATCH] = "microbatch",
        [AO_TR_SCHEDULE] = "schedule",
        [AO_TR_OFFLOAD] = "offload",
        [AO_TR_RELEASE] = "release",
        [AO_TR_RELOAD] = "reload",
    };
    char *p = REC_BEGIN("layer", 128);
    if (!p) return;
    p = AO_TR_PUTS(p, " op=");
    p = ao_tr_put(p, names[op], strlen(names[op]));
    switch (op) {
    case AO_TR_STEP_END:
        __atomic_store_n(&cur_mb, 0, __ATOMIC_RELAXED);
        break;
    case AO_TR_MICROBATCH:
        __atomic_store_n(&cur_mb, arg, __ATOMIC_RELAXED);
        p = AO_TR_PUTS(p, " mb=");
        p = ao_tr_i64(p, arg);
        break;
    case AO_TR_SCHEDULE:
        p = AO_TR_PUTS(p, " value=");
        p = ao_tr_i64(p, arg);
        break;
    default:
        p = AO_TR_PUTS(p, " layer=");
        p = ao_tr_i64(p, arg);
        p = AO_TR_PUTS(p, " mb=");
        p = ao_tr_i64(p, __atomic_load_n(&cur_mb, __ATOMIC_RELAXED));
        break;
    }
    rec_end(p);
}

void ao_tr_keep(uint64_t addr)
{
    char *p = REC_BEGIN("layer", 96);
    if (!p) return;
    p = AO_TR_PUTS(p, " op=keep addr=");
    p = ao_tr_hex(p, addr);
    rec_end(p);
}
