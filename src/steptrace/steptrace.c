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
#include "clock.h"
#include "log.h"
#include "offload/scan.h"
#include "steptrace/internal.h"

bool ao_tr_on;

static bool started, forked;
static uint64_t origin_ns;

uint64_t ao_tr_now(void)
{
    uint64_t t = ao_mono_ns();
    return t > origin_ns ? t - origin_ns : 0;
}

// --- per-thread buffers ---------------------------------------------------------------------
// The owner appends without a lock and publishes its length (release). Its
// lock is taken only to hand the buffer over (full, at the step's end, at
// thread exit: the buffer goes to the writer, a free one comes back) and by
// the exit, which copies out every thread's published bytes (done: how far
// that got) while the threads may still append.
typedef struct tbuf_s {
    ao_trbuf_t *cur;
    size_t len; // atomic: written by the owner
    size_t done;
    uint64_t handed_ns; // when the owner last handed a buffer over (or made this one)
    uint32_t tid;
    pthread_mutex_t mu;
    struct tbuf_s *next, **prevp;
} tbuf_t;

static AO_TLS tbuf_t *tls_buf;
static pthread_key_t buf_key;
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf_t *bufs;
static uint32_t next_tid;

// At exit, for any thread: a copy of what it published and no one took.
static void copy_out(tbuf_t *b)
{
    pthread_mutex_lock(&b->mu);
    size_t len = __atomic_load_n(&b->len, __ATOMIC_ACQUIRE);
    ao_trbuf_t *c = len > b->done ? ao_trw_get() : NULL;
    if (c) {
        memcpy(c->data, b->cur->data + b->done, len - b->done);
        c->len = len - b->done;
        c->tid = b->tid;
        ao_trw_queue(c);
        b->done = len;
    }
    pthread_mutex_unlock(&b->mu);
}

// The owner only: its buffer goes to the writer, a free one takes its
// place. With no memory for another, the buffer's records are dropped (said
// once) and it is filled again: never one buffer in two hands.
static void hand_over(tbuf_t *b)
{
    pthread_mutex_lock(&b->mu);
    ao_trbuf_t *full = b->cur, *next = ao_trw_get();
    if (next) {
        full->start = b->done;
        full->len = __atomic_load_n(&b->len, __ATOMIC_RELAXED);
        full->tid = b->tid;
        ao_trw_queue(full);
        b->cur = next;
    } else {
        static int once;
        ao_warn_once(&once, "AOSHIM_RECORD: no memory for a buffer: records were dropped, the "
                            "step trace has a gap");
    }
    b->handed_ns = ao_tr_now();
    b->done = 0;
    __atomic_store_n(&b->len, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&b->mu);
}

// A thread ends: its records go, its buffer with them. Not in a forked
// child, whose locks may have been held by a thread of the parent.
static void thread_exit(void *arg)
{
    tbuf_t *b = arg;
    if (!b || forked) return;
    pthread_mutex_lock(&list_mu);
    *b->prevp = b->next;
    if (b->next) b->next->prevp = b->prevp;
    pthread_mutex_unlock(&list_mu);
    b->cur->start = b->done;
    b->cur->len = __atomic_load_n(&b->len, __ATOMIC_RELAXED);
    b->cur->tid = b->tid;
    ao_trw_queue(b->cur);
    if (tls_buf == b) tls_buf = NULL;
    free(b);
}

// Once per thread: the buffer, and the thread's number.
static tbuf_t *tbuf_new(void)
{
    tbuf_t *b = calloc(1, sizeof *b);
    ao_trbuf_t *cur = b ? ao_trw_get() : NULL;
    if (!cur) {
        free(b);
        static int once;
        ao_warn_once(&once, "AOSHIM_RECORD: no memory for a thread's buffer: that thread's "
                            "calls are not recorded");
        return NULL;
    }
    b->cur = cur;
    b->handed_ns = ao_tr_now();
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

// Room for a record of size bytes (with its words; at most AO_TR_BUF / 2)
// in this thread's buffer, its kind and time filled in: the record, or NULL.
static ao_trrec_t *rec_begin(int kind, size_t size)
{
    tbuf_t *b = tls_buf;
    if (!b && !(b = tbuf_new())) return NULL;
    size_t len = __atomic_load_n(&b->len, __ATOMIC_RELAXED);
    if (len + size > AO_TR_BUF) {
        hand_over(b);
        len = 0;
    }
    ao_trrec_t *r = (ao_trrec_t *)(b->cur->data + len);
    r->size = (uint32_t)size;
    r->kind = (uint8_t)kind;
    r->flags = 0;
    r->n = 0;
    r->t = ao_tr_now();
    return r;
}
#define REC_BEGIN(kind) rec_begin(kind, sizeof(ao_trrec_t))

// Published: the exit may now copy it out.
static void rec_end(ao_trrec_t *r)
{
    tbuf_t *b = tls_buf;
    size_t len = (size_t)((char *)r - b->cur->data) + r->size;
    __atomic_store_n(&b->len, len, __ATOMIC_RELEASE);
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
    ao_trw_side(line, n);
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
    origin_ns = ao_mono_ns();
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

// A step's records are handed over at its end once AO_TR_STEP_NS have passed
// since the thread's last hand-over: a crash then loses at most that much
// of the run (or one buffer, whichever is less), and short steps do not each
// cost a hand-over and a compressor flush.
#define AO_TR_STEP_NS 250000000ull

void ao_tr_step(void)
{
    if (!__atomic_load_n(&ao_tr_on, __ATOMIC_RELAXED)) return;
    ao_tr_timing_collect(false);
    tbuf_t *b = tls_buf;
    if (b && __atomic_load_n(&b->len, __ATOMIC_RELAXED) &&
        ao_tr_now() - b->handed_ns >= AO_TR_STEP_NS)
        hand_over(b);
}

void ao_tr_finish(void)
{
    if (!started || forked) return;
    __atomic_store_n(&ao_tr_on, false, __ATOMIC_RELEASE);
    ao_tr_timing_collect(true);
    pthread_mutex_lock(&list_mu);
    for (tbuf_t *b = bufs; b; b = b->next)
        copy_out(b);
    pthread_mutex_unlock(&list_mu);
    char line[48], *p = line;
    p = AO_TR_PUTS(p, "end t=");
    p = ao_tr_u64(p, ao_tr_now());
    *p++ = '\n';
    ao_trw_finish(line, (size_t)(p - line));
}

// --- allocations --------------------------------------------------------------------------
static void alloc_or_free(int kind, const char *api, uint64_t size, CUstream s, uint64_t addr)
{
    uint32_t sid = s ? stream_id(s) : 0;
    ao_trrec_t *r = REC_BEGIN(kind);
    if (!r) return;
    r->u.alloc.api = api;
    r->u.alloc.size = size;
    r->u.alloc.addr = addr;
    r->u.alloc.s = sid;
    r->flags = s ? AO_TRF_STREAM : 0;
    rec_end(r);
}

void ao_tr_alloc(const char *api, uint64_t size, CUstream s, uint64_t addr)
{
    alloc_or_free(AO_TRK_ALLOC, api, size, s, addr);
}

void ao_tr_free(const char *api, uint64_t addr, CUstream s)
{
    alloc_or_free(AO_TRK_FREE, api, 0, s, addr);
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
    uint32_t sid = stream_id(s);
    ao_trrec_t *r = REC_BEGIN(AO_TRK_COPY);
    if (!r) return;
    r->u.copy.dst = dst;
    r->u.copy.src = src;
    r->u.copy.n = n;
    r->u.copy.src_n = src_n;
    r->u.copy.s = sid;
    r->u.copy.kind = (uint32_t)kind;
    r->flags = (async ? AO_TRF_ASYNC : 0) | (pitched ? AO_TRF_PITCHED : 0);
    rec_end(r);
}

void ao_tr_memset(uint64_t dst, uint64_t n, uint32_t value, unsigned width, CUstream s,
                  bool pitched)
{
    uint32_t sid = stream_id(s);
    ao_trrec_t *r = REC_BEGIN(AO_TRK_MEMSET);
    if (!r) return;
    r->u.memset.dst = dst;
    r->u.memset.n = n;
    r->u.memset.value = value;
    r->u.memset.width = width;
    r->u.memset.s = sid;
    r->flags = pitched ? AO_TRF_PITCHED : 0;
    rec_end(r);
}

// --- launches -------------------------------------------------------------------------------
void ao_tr_launch_begin(ao_tr_launch_t *l, const void *fn, int kind, CUstream s)
{
    l->s = s;
    l->slot = -1;
    ao_layout_t *L = (ao_layout_t *)ao_layout_get(fn, kind);
    l->layout = L;
    if (!L) return;
    // A plain increment, not a locked one: threads launching the same kernel
    // at once may lose a count, which only moves which launch is timed.
    uint32_t n = __atomic_load_n(&L->trace_launches, __ATOMIC_RELAXED);
    __atomic_store_n(&L->trace_launches, n + 1, __ATOMIC_RELAXED);
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
    uint32_t k = L ? kernel_id(L) : 0, sid = stream_id(l->s);
    ao_trrec_t *r = rec_begin(AO_TRK_LAUNCH, sizeof *r + 8 * (size_t)nwords);
    if (!r) return;
    r->n = (uint16_t)nwords;
    r->u.launch.k = k;
    r->u.launch.s = sid;
    r->u.launch.grid[0] = gx, r->u.launch.grid[1] = gy, r->u.launch.grid[2] = gz;
    r->u.launch.block[0] = bx, r->u.launch.block[1] = by, r->u.launch.block[2] = bz;
    r->u.launch.shm = shm;
    r->u.launch.sample = sample;
    // The raw words, as the launch scan reads them (scan.h).
    for (uint32_t i = 0; i < nwords; i++) {
        const char *src = packed ? (const char *)packed + L->w[i].abs
                                 : (const char *)args[L->w[i].param] + L->w[i].off;
        memcpy(&r->w[i], src, sizeof r->w[i]);
    }
    rec_end(r);
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
    ao_trrec_t *r = REC_BEGIN(AO_TRK_STREAM_DESTROY);
    if (r) {
        r->u.ids.a = id;
        rec_end(r);
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

static void event_and_stream(int kind, CUevent e, CUstream s)
{
    uint32_t ev = event_id(e), sid = stream_id(s);
    ao_trrec_t *r = REC_BEGIN(kind);
    if (!r) return;
    r->u.ids.a = ev;
    r->u.ids.b = sid;
    rec_end(r);
}

void ao_tr_event_record(CUevent e, CUstream s)
{
    event_and_stream(AO_TRK_RECORD, e, s);
}

void ao_tr_wait(CUstream s, CUevent e)
{
    event_and_stream(AO_TRK_WAIT, e, s);
}

void ao_tr_sync(int what, CUstream s, CUevent e)
{
    uint32_t ev = what == AO_TR_SYNC_EVENT ? event_id(e) : 0;
    uint32_t sid = what == AO_TR_SYNC_STREAM ? stream_id(s) : 0;
    ao_trrec_t *r = REC_BEGIN(AO_TRK_SYNC);
    if (!r) return;
    r->u.ids.a = (uint32_t)what;
    r->u.ids.b = sid;
    r->u.ids.c = ev;
    rec_end(r);
}

// --- memory pools -------------------------------------------------------------------------
void ao_tr_pool_attr(CUmemoryPool pool, int attr, const void *value)
{
    uint32_t id = pool_id(pool);
    ao_trrec_t *r = REC_BEGIN(AO_TRK_POOL_ATTR);
    if (!r) return;
    r->u.pool.pool = id;
    r->u.pool.attr = attr;
    r->u.pool.value = 0;
    if (value) {
        // cuda.h: the reuse flags are ints, the thresholds and counters 64-bit.
        bool u64 = attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        r->flags = AO_TRF_VALUE | (u64 ? AO_TRF_U64 : 0);
        if (u64) {
            memcpy(&r->u.pool.value, value, sizeof(uint64_t));
        } else {
            int v;
            memcpy(&v, value, sizeof v);
            r->u.pool.value = (uint32_t)v;
        }
    }
    rec_end(r);
}

void ao_tr_pool_trim(CUmemoryPool pool, uint64_t keep)
{
    uint32_t id = pool_id(pool);
    ao_trrec_t *r = REC_BEGIN(AO_TRK_POOL_TRIM);
    if (!r) return;
    r->u.pool.pool = id;
    r->u.pool.value = keep;
    rec_end(r);
}

// --- the control calls ---------------------------------------------------------------------
static int cur_mb; // the microbatch the program last named; 0 again at each step's end

static AO_TLS CUstream named_stream;
static AO_TLS bool named;

void ao_tr_set_stream(CUstream s)
{
    named_stream = s;
    named = true;
}

void ao_tr_layer(int op, int arg)
{
    if (op == AO_TR_MICROBATCH) __atomic_store_n(&cur_mb, arg, __ATOMIC_RELAXED);
    // The stream is declared (a `stream` record) before this record begins.
    uint32_t sid = named ? stream_id(named_stream) : 0;
    ao_trrec_t *r = REC_BEGIN(AO_TRK_LAYER);
    if (r) {
        r->u.layer.op = (uint32_t)op;
        r->u.layer.arg = arg;
        r->u.layer.mb = __atomic_load_n(&cur_mb, __ATOMIC_RELAXED);
        r->u.layer.s = sid;
        if (named) r->flags |= AO_TRF_STREAM;
        rec_end(r);
    }
    if (op == AO_TR_STEP_END) __atomic_store_n(&cur_mb, 0, __ATOMIC_RELAXED);
}

void ao_tr_keep(uint64_t addr)
{
    ao_trrec_t *r = REC_BEGIN(AO_TRK_KEEP);
    if (!r) return;
    r->u.keep.addr = addr;
    rec_end(r);
}
