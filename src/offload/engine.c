// SPDX-License-Identifier: MIT
#include "engine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "config.h"
#include "hook/real.h"
#include "log.h"
#include "mem/hostpool.h"
#include "mem/vmm.h"
#include "stats.h"

#define AO_MAX_MB 1024      // microbatch ids 0..1023
#define AO_MAX_STREAMS 64   // streams a cudaFree must wait for
#define AO_MAX_FREE_EVENTS (AO_MAX_STREAMS + 2)

typedef struct ao_scope_s ao_scope_t;

typedef struct ao_buffer_s {
    CUdeviceptr addr;
    size_t size; // as requested
    size_t span; // granule-rounded, what is mapped
    ao_scope_t *scope;
    void *host; // pinned slot while a host copy exists
    ao_state_t state;
    bool kept;
    struct ao_buffer_s *next;
} ao_buffer_t;

struct ao_scope_s {
    int layer, mb;
    unsigned step;
    bool recompute, ended, offload_deferred, release_recorded;
    ao_state_t state;
    CUstream stream; // the compute stream at layer_begin
    ao_buffer_t *buffers;
    CUevent ev_end;                 // compute stream, layer_end
    CUevent ev_d2h0, ev_copied;     // offload stream, around the copies
    CUevent ev_release;             // compute stream, end of the next layer
    CUevent ev_h2d0, ev_reloaded;   // reload stream, around the copies
    ao_scope_t *next;
};

// Memory released when its events complete: a freed buffer (device memory
// if still mapped, its address range, its host slot), or just a host slot.
typedef struct ao_deferred_s {
    ao_buffer_t *buf; // NULL: only the host slot
    bool mapped;
    void *host;
    size_t host_size;
    int nev;
    CUevent ev[AO_MAX_FREE_EVENTS];
    struct ao_deferred_s *next;
} ao_deferred_t;

typedef enum { PHASE_FORWARD, PHASE_BACKWARD } ao_phase_t;

static struct {
    pthread_mutex_t mu;
    bool ready, failed, used;
    CUcontext ctx;
    CUstream d2h, h2d;     // one stream per copy direction: both engines stay busy
    ao_scope_t *scopes;    // newest first
    ao_scope_t *open;      // the forward scope allocations go to
    ao_deferred_t *deferred;
    CUevent free_events[256]; // idle events, timing disabled
    int nfree_events;
    CUevent timing_events[256];
    int ntiming_events;
    CUstream streams[AO_MAX_STREAMS];
    int nstreams;
    CUevent waits[64][2];  // compute-stream waits on reloads, timed by events
    int nwaits;
    unsigned step;
    int mb;
    int nlayers;           // layers in a forward pass, once one backward has begun
    int max_fwd_layer;
    ao_phase_t phase[AO_MAX_MB];
    int bwd_seen[AO_MAX_MB]; // last backward_begin layer + 1, 0 if none
} E = {.mu = PTHREAD_MUTEX_INITIALIZER, .max_fwd_layer = -1};

bool ao_engine_off;
static _Thread_local CUstream tls_stream;
static _Thread_local bool tls_stream_set;

// --- small helpers -----------------------------------------------------------
#define WARN_ONCE(...)                                                                             \
    do {                                                                                           \
        static int once_;                                                                          \
        ao_warn_once(&once_, __VA_ARGS__);                                                         \
    } while (0)

static CUevent event_get(bool timing)
{
    CUevent e = NULL;
    if (timing ? E.ntiming_events : E.nfree_events)
        return timing ? E.timing_events[--E.ntiming_events] : E.free_events[--E.nfree_events];
    if (ao_real.cuEventCreate(&e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING) !=
        CUDA_SUCCESS)
        return NULL;
    return e;
}

static void event_put(CUevent e, bool timing)
{
    if (!e) return;
    int *n = timing ? &E.ntiming_events : &E.nfree_events;
    CUevent *v = timing ? E.timing_events : E.free_events;
    if (*n < 256) v[(*n)++] = e;
    else ao_real.cuEventDestroy_v2(e);
}

// Record a fresh event on s; NULL if that failed.
static CUevent record(CUstream s, bool timing)
{
    CUevent e = event_get(timing);
    if (e && ao_real.cuEventRecord(e, s) != CUDA_SUCCESS) {
        event_put(e, timing);
        e = NULL;
    }
    return e;
}

// Complete as far as the host can tell. An error other than "not ready"
// (context torn down) also counts as complete: nothing can still run.
static bool done(CUevent e)
{
    return !e || ao_real.cuEventQuery(e) != CUDA_ERROR_NOT_READY;
}

static uint64_t elapsed_ns(CUevent a, CUevent b)
{
    float ms = 0;
    if (!a || !b || ao_real.cuEventElapsedTime_v2(&ms, a, b) != CUDA_SUCCESS || ms < 0) return 0;
    return (uint64_t)((double)ms * 1e6 + 0.5);
}

static CUstream current_stream(void)
{
    return tls_stream_set ? tls_stream : CU_STREAM_LEGACY;
}

static void note_stream_locked(CUstream s)
{
    for (int i = 0; i < E.nstreams; i++)
        if (E.streams[i] == s) return;
    if (E.nstreams < AO_MAX_STREAMS) E.streams[E.nstreams++] = s;
    else WARN_ONCE("more than %d streams in use: cudaFree of a tracked buffer waits for the first %d only", AO_MAX_STREAMS, AO_MAX_STREAMS);
}

// --- start-up ---------------------------------------------------------------------
// The driver is brought up at the first tracked allocation or control call,
// never in the constructor. The calling thread may not have a context yet
// (a framework's autograd thread): use the primary context then.
static bool ensure_ready(void)
{
    if (E.ready) {
        CUcontext c = NULL;
        if (ao_real.cuCtxGetCurrent(&c) == CUDA_SUCCESS && !c) ao_real.cuCtxSetCurrent(E.ctx);
        return true;
    }
    if (E.failed) return false;
    E.failed = true;
    if (!ao_real_driver()) return false;
    CUresult r = ao_real.cuInit(0);
    CUcontext c = NULL;
    if (r == CUDA_SUCCESS) r = ao_real.cuCtxGetCurrent(&c);
    if (r == CUDA_SUCCESS && !c) {
        r = ao_real.cuDevicePrimaryCtxRetain(&c, 0);
        if (r == CUDA_SUCCESS) r = ao_real.cuCtxSetCurrent(c);
    }
    if (r == CUDA_SUCCESS) r = ao_vmm_init();
    if (r == CUDA_SUCCESS) r = ao_real.cuStreamCreate(&E.d2h, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS) r = ao_real.cuStreamCreate(&E.h2d, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
        ao_log(AO_LOG_WARN, "cannot set up device memory management (CUDA error %d): offloading disabled", (int)r);
        return false;
    }
    E.ctx = c;
    E.failed = false;
    E.ready = true;
    note_stream_locked(CU_STREAM_LEGACY);
    return true;
}

// --- releasing memory -------------------------------------------------------------
static void buffer_unmap(ao_buffer_t *b)
{
    CUresult r = ao_phys_unmap(b->addr, b->span);
    if (r != CUDA_SUCCESS) WARN_ONCE("cuMemUnmap failed (CUDA error %d): device memory not released", (int)r);
    ao_stat_device(0, -(int64_t)b->span, 0);
}

static void buffer_destroy(ao_buffer_t *b, bool mapped)
{
    if (mapped) buffer_unmap(b);
    if (b->host) ao_host_free(b->host, b->size);
    size_t first = ao_vmm_index(b->addr), n = b->span >> ao_vmm.granule_shift;
    for (size_t i = 0; i < n; i++) ao_vmm.owner_at[first + i] = NULL;
    ao_va_free(b->addr, b->span);
    ao_stat_device(0, 0, -(int64_t)b->span);
    free(b);
}

static void scope_unlink_buffer(ao_scope_t *s, ao_buffer_t *b)
{
    for (ao_buffer_t **pp = &s->buffers; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            return;
        }
}

static void scope_destroy(ao_scope_t *s)
{
    for (ao_scope_t **pp = &E.scopes; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    if (E.open == s) E.open = NULL;
    event_put(s->ev_end, false);
    event_put(s->ev_release, false);
    event_put(s->ev_d2h0, true);
    event_put(s->ev_copied, true);
    event_put(s->ev_h2d0, true);
    event_put(s->ev_reloaded, true);
    free(s);
}

// Poll every pending event; act on what has completed. Never blocks.
static void poll_locked(void)
{
    for (ao_deferred_t **pp = &E.deferred; *pp;) {
        ao_deferred_t *d = *pp;
        bool all = true;
        for (int i = 0; i < d->nev && all; i++) all = done(d->ev[i]);
        if (!all) {
            pp = &d->next;
            continue;
        }
        for (int i = 0; i < d->nev; i++) event_put(d->ev[i], false);
        if (d->buf) buffer_destroy(d->buf, d->mapped);
        else ao_host_free(d->host, d->host_size);
        *pp = d->next;
        free(d);
    }
    for (int i = 0; i < E.nwaits;) {
        if (!done(E.waits[i][1])) {
            i++;
            continue;
        }
        ao_stat_add(AO_STAT_RELOAD_WAIT_NS, (int64_t)elapsed_ns(E.waits[i][0], E.waits[i][1]));
        event_put(E.waits[i][0], true);
        event_put(E.waits[i][1], true);
        E.waits[i][0] = E.waits[E.nwaits - 1][0];
        E.waits[i][1] = E.waits[E.nwaits - 1][1];
        E.nwaits--;
    }
    for (ao_scope_t *s = E.scopes, *next; s; s = next) {
        next = s->next;
        if (s->state == AO_OFFLOADING && s->release_recorded && done(s->ev_copied) &&
            done(s->ev_release)) {
            ao_stat_add(AO_STAT_D2H_COPY_NS, (int64_t)elapsed_ns(s->ev_d2h0, s->ev_copied));
            for (ao_buffer_t *b = s->buffers; b; b = b->next)
                if (b->state == AO_OFFLOADING) {
                    buffer_unmap(b);
                    b->state = AO_OFFLOADED;
                }
            s->state = AO_OFFLOADED;
        }
        if (s->state == AO_RELOADING && done(s->ev_reloaded)) {
            ao_stat_add(AO_STAT_H2D_COPY_NS, (int64_t)elapsed_ns(s->ev_h2d0, s->ev_reloaded));
            for (ao_buffer_t *b = s->buffers; b; b = b->next)
                if (b->state == AO_RELOADING) {
                    ao_host_free(b->host, b->size);
                    b->host = NULL;
                    b->state = AO_RESIDENT;
                }
            s->state = AO_RESIDENT;
        }
        if (!s->buffers && s->ended && s != E.open &&
            (s->state == AO_RESIDENT || s->state == AO_OFFLOADED))
            scope_destroy(s);
    }
}

// Wait (host side) for every deferred release: only when memory has run out.
static void drain_locked(void)
{
    for (ao_deferred_t *d = E.deferred; d; d = d->next)
        for (int i = 0; i < d->nev; i++)
            if (d->ev[i]) ao_real.cuEventSynchronize(d->ev[i]);
    for (ao_scope_t *s = E.scopes; s; s = s->next)
        if (s->state == AO_OFFLOADING && s->release_recorded) {
            ao_real.cuEventSynchronize(s->ev_copied);
            ao_real.cuEventSynchronize(s->ev_release);
        }
    poll_locked();
}

// --- allocation -------------------------------------------------------------------
bool ao_engine_wants(size_t size)
{
    return !ao_engine_off && __atomic_load_n(&E.open, __ATOMIC_ACQUIRE) != NULL &&
           size >= ao_config.min_bytes && size > 0;
}

bool ao_engine_in_scope(void)
{
    return __atomic_load_n(&E.open, __ATOMIC_ACQUIRE) != NULL;
}

bool ao_engine_used(void) { return E.used; }

// Wait for the oldest release under way; false if none is.
static bool wait_one_release(void)
{
    ao_deferred_t *oldest = NULL;
    for (ao_deferred_t *d = E.deferred; d; d = d->next)
        if (d->buf && d->mapped) oldest = d; // the list is newest first
    ao_scope_t *scope = NULL;
    for (ao_scope_t *s = E.scopes; s; s = s->next)
        if (s->state == AO_OFFLOADING && s->release_recorded) scope = s;
    if (scope) {
        ao_real.cuEventSynchronize(scope->ev_copied);
        ao_real.cuEventSynchronize(scope->ev_release);
    } else if (oldest) {
        for (int i = 0; i < oldest->nev; i++)
            if (oldest->ev[i]) ao_real.cuEventSynchronize(oldest->ev[i]);
    } else {
        return false;
    }
    poll_locked();
    return true;
}

// Physical memory for a tracked range. Memory that is about to be released
// (an offload copy done soon, a freed buffer whose last kernels are queued)
// is waited for rather than adding new device memory: otherwise a host far
// ahead of the GPU would map every layer before any release could happen,
// and the peak would be the peak without offloading. The wait blocks the
// host only while the GPU still has queued work, so the GPU does not idle.
static CUresult map_with_retry(CUdeviceptr p, size_t span)
{
    size_t need = span >> ao_vmm.granule_shift;
    while (ao_vmm.pool_len < need && wait_one_release()) {
    }
    CUresult r = ao_phys_map(p, span);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        drain_locked();
        r = ao_phys_map(p, span);
    }
    return r;
}

CUresult ao_engine_alloc(size_t size, CUstream stream, CUdeviceptr *out)
{
    pthread_mutex_lock(&E.mu);
    E.used = true;
    ao_scope_t *s = E.open;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (!s || !ensure_ready()) goto out;
    if (stream) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
        if (ao_real.cuStreamIsCapturing(stream, &cs) == CUDA_SUCCESS &&
            cs != CU_STREAM_CAPTURE_STATUS_NONE)
            goto out; // graph memory is the graph's business
        note_stream_locked(stream);
    }
    poll_locked();
    ao_buffer_t *b = calloc(1, sizeof *b);
    if (!b) goto out;
    b->size = size;
    b->span = ao_vmm_round(size);
    b->scope = s;
    if (ao_va_alloc(b->span, &b->addr) != CUDA_SUCCESS) {
        WARN_ONCE("aoshim's device address range is full: further buffers are not tracked");
        free(b);
        goto out;
    }
    r = map_with_retry(b->addr, b->span);
    if (r != CUDA_SUCCESS) {
        ao_va_free(b->addr, b->span);
        free(b);
        goto out;
    }
    size_t first = ao_vmm_index(b->addr), n = b->span >> ao_vmm.granule_shift;
    for (size_t i = 0; i < n; i++) ao_vmm.owner_at[first + i] = b;
    b->next = s->buffers;
    s->buffers = b;
    ao_stat_add(AO_STAT_TRACKED_BUFFERS, 1);
    ao_stat_device(0, (int64_t)b->span, (int64_t)b->span);
    *out = b->addr;
out:
    pthread_mutex_unlock(&E.mu);
    return r;
}

static ao_buffer_t *buffer_at(CUdeviceptr p)
{
    if (!ao_vmm_owns(p)) return NULL;
    ao_buffer_t *b = ao_vmm.owner_at[ao_vmm_index(p)];
    return b && p >= b->addr && p < b->addr + b->size ? b : NULL;
}

CUresult ao_engine_free(CUdeviceptr p, CUstream stream, bool async)
{
    pthread_mutex_lock(&E.mu);
    ao_buffer_t *b = buffer_at(p);
    if (!b || b->addr != p) {
        pthread_mutex_unlock(&E.mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    ao_scope_t *s = b->scope;
    scope_unlink_buffer(s, b);
    ao_deferred_t *d = calloc(1, sizeof *d);
    bool mapped = b->state != AO_OFFLOADED;
    if (!d) {
        // No memory to defer: release after everything on the device is done.
        // Rare enough that blocking this one caller is the honest fallback.
        for (int i = 0; i < E.nstreams; i++) {
            CUevent e = record(E.streams[i], false);
            if (e) ao_real.cuEventSynchronize(e), event_put(e, false);
        }
        buffer_destroy(b, mapped);
        pthread_mutex_unlock(&E.mu);
        return CUDA_SUCCESS;
    }
    d->buf = b;
    d->mapped = mapped;
    if (mapped) {
        // The release must follow every use: on the freeing stream for a
        // stream-ordered free, on every stream aoshim knows for cudaFree.
        if (async) {
            note_stream_locked(stream);
            d->ev[d->nev++] = record(stream, false);
        } else {
            for (int i = 0; i < E.nstreams; i++) d->ev[d->nev++] = record(E.streams[i], false);
        }
    }
    // A copy in flight reads or writes this buffer's device and host memory.
    if (b->state == AO_OFFLOADING) {
        d->ev[d->nev++] = record(E.d2h, false);
        ao_stat_add(AO_STAT_COPIES_SKIPPED, 1);
    } else if (b->state == AO_RELOADING) {
        d->ev[d->nev++] = record(E.h2d, false);
    }
    d->next = E.deferred;
    E.deferred = d;
    poll_locked();
    pthread_mutex_unlock(&E.mu);
    return CUDA_SUCCESS;
}

bool ao_engine_trim(void)
{
    if (!E.ready) return false;
    pthread_mutex_lock(&E.mu);
    drain_locked();
    size_t n = ao_phys_trim();
    pthread_mutex_unlock(&E.mu);
    if (n) ao_stat_add(AO_STAT_OOM_RETRIES, 1);
    return n > 0;
}

void ao_engine_note_stream(CUstream s)
{
    if (tls_stream_set && tls_stream == s) return;
    tls_stream = s;
    tls_stream_set = true;
    pthread_mutex_lock(&E.mu);
    note_stream_locked(s);
    pthread_mutex_unlock(&E.mu);
}

// --- offload and reload -------------------------------------------------------------
static bool is_last_layer(int layer)
{
    return E.nlayers > 0 && layer >= E.nlayers - 1;
}

static void offload(ao_scope_t *s)
{
    s->offload_deferred = false;
    if (!ao_layerset_has(&ao_config.offload_layers, (unsigned)s->layer, (unsigned)E.nlayers))
        return;
    // 'all' skips the layers whose reload is issued as soon as backward
    // begins (the last 2 + prefetch): copying them saves nothing.
    if (ao_config.offload_layers.kind == AO_LAYERS_ALL && E.nlayers > 0 &&
        s->layer > E.nlayers - 3 - (int)ao_config.prefetch)
        return;
    if (ao_real.cuStreamWaitEvent(E.d2h, s->ev_end, 0) != CUDA_SUCCESS) return;
    s->ev_d2h0 = record(E.d2h, true);
    uint64_t bytes = 0;
    for (ao_buffer_t *b = s->buffers; b; b = b->next) {
        if (b->state != AO_RESIDENT) continue;
        if (b->kept) {
            ao_stat_add(AO_STAT_KEPT_BY_USER, 1);
            continue;
        }
        int h = ao_host_alloc(b->size, &b->host);
        if (h != AO_HOST_OK) {
            b->host = NULL;
            if (h == AO_HOST_LIMIT) {
                ao_stat_add(AO_STAT_KEPT_HOST_LIMIT, 1);
                WARN_ONCE("AOSHIM_HOST_LIMIT reached: some buffers stay on the device");
            } else {
                ao_stat_add(AO_STAT_KEPT_PIN_FAILED, 1);
                WARN_ONCE("pinning host memory failed: some buffers stay on the device");
            }
            continue;
        }
        if (ao_real.cuMemcpyDtoHAsync_v2(b->host, b->addr, b->size, E.d2h) != CUDA_SUCCESS) {
            ao_host_free(b->host, b->size);
            b->host = NULL;
            continue;
        }
        b->state = AO_OFFLOADING;
        bytes += b->size;
        ao_stat_add(AO_STAT_OFFLOADED_BUFFERS, 1);
    }
    s->ev_copied = record(E.d2h, true);
    if (!bytes) return;
    ao_stat_add(AO_STAT_OFFLOADED_BYTES, (int64_t)bytes);
    ao_stat_add(AO_STAT_LAYERS_OFFLOADED, 1);
    s->state = AO_OFFLOADING;
}

// Record the release point for the microbatch's scopes still being copied:
// every kernel enqueued so far on their compute stream has been issued.
static void release_point(int mb, const ao_scope_t *except)
{
    for (ao_scope_t *s = E.scopes; s; s = s->next)
        if (s->mb == mb && s != except && s->state == AO_OFFLOADING && !s->release_recorded) {
            s->ev_release = record(s->stream, false);
            s->release_recorded = s->ev_release != NULL;
        }
}

// Bring the scope's buffers back. Returns 0 or AOSHIM_ESTATE if some buffer
// could not get device memory (its data stays safe in host memory).
static int reload(ao_scope_t *s)
{
    int rc = 0;
    uint64_t bytes = 0;
    bool h2d = false;
    for (ao_buffer_t *b = s->buffers; b; b = b->next) {
        if (b->state == AO_OFFLOADING) {
            // Not released yet: the device copy is intact. Keep it, and give
            // the host slot back once the copy that fills it is done.
            ao_deferred_t *d = calloc(1, sizeof *d);
            b->state = AO_RESIDENT;
            ao_stat_add(AO_STAT_OFFLOADS_CANCELLED, 1);
            if (d) {
                d->host = b->host;
                d->host_size = b->size;
                d->ev[d->nev++] = record(E.d2h, false);
                d->next = E.deferred;
                E.deferred = d;
            } else {
                WARN_ONCE("out of host memory: a pinned slot is not reused");
            }
            b->host = NULL;
            continue;
        }
        if (b->state != AO_OFFLOADED) continue;
        if (!h2d) {
            s->ev_h2d0 = record(E.h2d, true);
            h2d = true;
        }
        CUresult r = map_with_retry(b->addr, b->span);
        if (r != CUDA_SUCCESS) {
            ao_stat_add(AO_STAT_KEPT_NO_DEVICE_SPACE, 1);
            ao_log(AO_LOG_ERROR,
                   "out of device memory reloading layer %d (microbatch %d): %zu bytes stay in host "
                   "memory; kernels that read them will fail",
                   s->layer, s->mb, b->size);
            rc = AOSHIM_ESTATE;
            continue;
        }
        ao_stat_device(0, (int64_t)b->span, 0);
        if (ao_real.cuMemcpyHtoDAsync_v2(b->addr, b->host, b->size, E.h2d) != CUDA_SUCCESS) {
            ao_log(AO_LOG_ERROR, "reload copy failed for layer %d: its data stays in host memory",
                   s->layer);
            buffer_unmap(b);
            rc = AOSHIM_ESTATE;
            continue;
        }
        b->state = AO_RELOADING;
        bytes += b->size;
    }
    if (h2d) {
        s->ev_reloaded = record(E.h2d, true);
        s->state = bytes ? AO_RELOADING : AO_OFFLOADED;
        ao_stat_add(AO_STAT_RELOADED_BYTES, (int64_t)bytes);
    } else if (s->state == AO_OFFLOADING) {
        s->state = AO_RESIDENT;
    }
    return rc;
}

static ao_scope_t *scope_find(int layer, int mb)
{
    for (ao_scope_t *s = E.scopes; s; s = s->next)
        if (s->layer == layer && s->mb == mb && !s->recompute) return s;
    return NULL;
}

// --- the control API ----------------------------------------------------------------
static int enter(void)
{
    if (ao_engine_off) return AOSHIM_EDISABLED;
    pthread_mutex_lock(&E.mu);
    if (!ensure_ready()) {
        pthread_mutex_unlock(&E.mu);
        return AOSHIM_EDISABLED;
    }
    poll_locked();
    return 0;
}

static int leave(int rc)
{
    pthread_mutex_unlock(&E.mu);
    return rc;
}

int ao_engine_layer_begin(int layer)
{
    if (layer < 0 || layer >= AO_MAX_LAYERS) {
        WARN_ONCE("aoshim_layer_begin(%d): layer ids go from 0 to %d", layer, AO_MAX_LAYERS - 1);
        return AOSHIM_EINVAL;
    }
    int rc = enter();
    if (rc) return rc;
    if (E.open) {
        WARN_ONCE("aoshim_layer_begin(%d) while layer %d is open: layers do not nest", layer,
                  E.open->layer);
        return leave(AOSHIM_ESTATE);
    }
    ao_scope_t *s = calloc(1, sizeof *s);
    if (!s) return leave(AOSHIM_ESTATE);
    s->layer = layer;
    s->mb = E.mb;
    s->step = E.step;
    s->stream = current_stream();
    s->recompute = E.phase[E.mb] == PHASE_BACKWARD;
    s->state = AO_RESIDENT;
    if (!s->recompute) {
        // A deferred offload of this microbatch's previous layer can go now:
        // it was not the last layer.
        for (ao_scope_t *p = E.scopes; p; p = p->next)
            if (p->mb == E.mb && p->offload_deferred) offload(p);
        if (layer > E.max_fwd_layer) E.max_fwd_layer = layer;
    }
    s->next = E.scopes;
    E.scopes = s;
    if (!s->recompute) __atomic_store_n(&E.open, s, __ATOMIC_RELEASE);
    else s->ended = false;
    E.used = true;
    return leave(0);
}

int ao_engine_layer_end(int layer)
{
    int rc = enter();
    if (rc) return rc;
    ao_scope_t *s = E.open;
    if (!s) {
        // A recomputation scope is not "open" for tracking: find it.
        for (ao_scope_t *r = E.scopes; r; r = r->next)
            if (r->recompute && !r->ended && r->layer == layer && r->mb == E.mb) {
                r->ended = true;
                return leave(0);
            }
        WARN_ONCE("aoshim_layer_end(%d) without aoshim_layer_begin(%d)", layer, layer);
        return leave(AOSHIM_ESTATE);
    }
    if (s->layer != layer) {
        WARN_ONCE("aoshim_layer_end(%d) while layer %d is open", layer, s->layer);
        return leave(AOSHIM_ESTATE);
    }
    __atomic_store_n(&E.open, NULL, __ATOMIC_RELEASE);
    s->ended = true;
    // Kernels of this layer have read the previous layers' outputs: that is
    // their release point.
    release_point(s->mb, s);
    s->ev_end = record(s->stream, false);
    if (!s->ev_end) return leave(0); // cannot order a copy: stay resident
    if (E.nlayers == 0 || is_last_layer(layer)) s->offload_deferred = E.nlayers == 0;
    else offload(s);
    return leave(0);
}

int ao_engine_backward_begin(int layer)
{
    if (layer < 0 || layer >= AO_MAX_LAYERS) {
        WARN_ONCE("aoshim_backward_begin(%d): layer ids go from 0 to %d", layer, AO_MAX_LAYERS - 1);
        return AOSHIM_EINVAL;
    }
    int rc = enter();
    if (rc) return rc;
    int mb = E.mb;
    if (E.phase[mb] == PHASE_FORWARD) {
        E.phase[mb] = PHASE_BACKWARD;
        if (E.max_fwd_layer + 1 > E.nlayers) E.nlayers = E.max_fwd_layer + 1;
        // The scope still waiting for a successor was the last layer: it stays.
        for (ao_scope_t *s = E.scopes; s; s = s->next)
            if (s->mb == mb) s->offload_deferred = false;
    }
    release_point(mb, NULL);
    ao_scope_t *self = scope_find(layer, mb);
    if (!self && layer > E.max_fwd_layer) {
        WARN_ONCE("aoshim_backward_begin(%d): layer %d never ran forward", layer, layer);
        return leave(AOSHIM_ESTATE);
    }
    E.bwd_seen[mb] = layer + 1;
    // Backward of layer L reads L's saved buffers and its input, which layer
    // L-1 produced: both must be back. Prefetch brings L-2 .. L-1-d back
    // while L runs; a scope needed now but not yet reloaded is a missed
    // prefetch (its reload is still issued asynchronously).
    int d = (int)ao_config.prefetch;
    for (int l = layer; l >= layer - 1 - d && l >= 0; l--) {
        ao_scope_t *s = scope_find(l, mb);
        if (!s || (s->state != AO_OFFLOADED && s->state != AO_OFFLOADING)) continue;
        if (l >= layer - 1 && s->state == AO_OFFLOADED) ao_stat_add(AO_STAT_PREFETCH_MISSED, 1);
        if (reload(s) != 0 && l >= layer - 1) rc = AOSHIM_ESTATE;
    }
    CUstream cs = current_stream();
    CUevent w0 = NULL;
    for (int l = layer; l >= layer - 1 && l >= 0; l--) {
        ao_scope_t *s = scope_find(l, mb);
        if (!s || s->state != AO_RELOADING) continue;
        // The stream that runs this backward waits on the GPU; the host goes on.
        if (!w0) w0 = record(cs, true);
        ao_real.cuStreamWaitEvent(cs, s->ev_reloaded, 0);
    }
    if (w0) {
        CUevent w1 = record(cs, true);
        if (w1 && E.nwaits < 64) {
            E.waits[E.nwaits][0] = w0;
            E.waits[E.nwaits][1] = w1;
            E.nwaits++;
        } else {
            event_put(w0, true);
            event_put(w1, true);
        }
    }
    return leave(rc);
}

int ao_engine_backward_end(int layer)
{
    if (layer < 0) return AOSHIM_EINVAL;
    int rc = enter();
    if (rc) return rc;
    if (E.bwd_seen[E.mb] != layer + 1) {
        WARN_ONCE("aoshim_backward_end(%d) without aoshim_backward_begin(%d)", layer, layer);
        return leave(AOSHIM_ESTATE);
    }
    E.bwd_seen[E.mb] = 0;
    return leave(0);
}

int ao_engine_step_end(void)
{
    int rc = enter();
    if (rc) return rc;
    if (E.open) {
        WARN_ONCE("aoshim_step_end() while layer %d is open", E.open->layer);
        __atomic_store_n(&E.open, NULL, __ATOMIC_RELEASE);
    }
    if (E.max_fwd_layer + 1 > E.nlayers) E.nlayers = E.max_fwd_layer + 1;
    for (int i = 0; i < AO_MAX_MB; i++) {
        E.phase[i] = PHASE_FORWARD;
        E.bwd_seen[i] = 0;
    }
    for (ao_scope_t *s = E.scopes; s; s = s->next) {
        s->offload_deferred = false;
        s->ended = true;
    }
    E.step++;
    E.mb = 0;
    return leave(0);
}

int ao_engine_set_microbatch(int mb)
{
    if (mb < 0 || mb >= AO_MAX_MB) {
        WARN_ONCE("aoshim_set_microbatch(%d): microbatch ids go from 0 to %d", mb, AO_MAX_MB - 1);
        return AOSHIM_EINVAL;
    }
    if (ao_engine_off) return AOSHIM_EDISABLED;
    pthread_mutex_lock(&E.mu);
    if (E.open) {
        pthread_mutex_unlock(&E.mu);
        WARN_ONCE("aoshim_set_microbatch(%d) inside layer %d", mb, E.open->layer);
        return AOSHIM_ESTATE;
    }
    E.mb = mb;
    pthread_mutex_unlock(&E.mu);
    return 0;
}

int ao_engine_set_stream(CUstream s)
{
    if (ao_engine_off) return AOSHIM_EDISABLED;
    ao_engine_note_stream(s);
    return 0;
}

int ao_engine_keep(CUdeviceptr p)
{
    if (!p) return AOSHIM_EINVAL;
    if (ao_engine_off) return AOSHIM_EDISABLED;
    if (!ao_vmm_owns(p)) return 0; // not tracked: it is never offloaded anyway
    pthread_mutex_lock(&E.mu);
    ao_buffer_t *b = buffer_at(p);
    int rc = 0;
    if (!b) rc = AOSHIM_ENOTFOUND;
    else if (b->state == AO_RESIDENT || b->state == AO_RELOADING) b->kept = true;
    else {
        b->kept = true;
        rc = AOSHIM_ESTATE;
    }
    pthread_mutex_unlock(&E.mu);
    if (rc == AOSHIM_ENOTFOUND) WARN_ONCE("aoshim_keep(%p): no live buffer there", (void *)p);
    if (rc == AOSHIM_ESTATE)
        WARN_ONCE("aoshim_keep(%p): the buffer is already offloaded; it stays so until its backward", (void *)p);
    return rc;
}
