// SPDX-License-Identifier: MIT
// Shutdown: what aoshim holds goes back before the process ends, and the
// rules for calling a driver that may be gone.
#include <unistd.h>

#include "offload/internal.h"

// --- exit -----------------------------------------------------------------------------------
// What aoshim holds goes back before the process ends: pinned host memory,
// idle and mapped physical handles, the address reservation, events and
// its two streams. The driver would reclaim them anyway when the process
// dies; given back, a leak checker (the simulated GPU's live_* counts, a
// real tool) sees aoshim leave nothing behind, and a long-lived process
// that unloads the shim gets its memory back.
//
// Called from the destructor, after the report is written. It must never
// hang and never call into a driver that is gone:
//  - the engine's lock is taken only if it comes free soon: a thread stopped
//    at exit while holding it (or this very thread, exit() from a signal
//    handler that interrupted aoshim) keeps it for ever;
//  - libaoshim.so's destructor runs before those of libcudart and libcuda
//    (it is preloaded, they are loaded after it, and glibc finalizes in load
//    order, dependents first), so the simulated driver is still there. On
//    real CUDA the runtime's own exit handler (atexit, which runs before
//    any destructor) may already have released the primary context, and
//    with it every allocation of that context; whether a handle of a
//    destroyed context may still be passed to the driver is not documented.
//    So, the stricter choice: no clean-up unless the driver answers and the
//    device's primary context is still active, and the first call that
//    says the driver or the context is gone ends the clean-up silently.
//  - CUDA calls made by the program after this point pass through:
//    ao_engine_off is set and nothing is aoshim's any more.
static bool shut;

static bool driver_gone(CUresult r)
{
    return r == CUDA_ERROR_DEINITIALIZED || r == CUDA_ERROR_NOT_INITIALIZED ||
           r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

static void event_destroy(CUevent *e)
{
    if (*e) ao_real.cuEventDestroy_v2(*e);
    *e = NULL;
}

// The layers' scopes, then those serving the program's own allocations.
#define EVERY_SCOPE(s)                                                                             \
    for (int list_ = 0; list_ < 2; list_++)                                                        \
        for (ao_scope_t *s = list_ ? ao_eng.servers : ao_eng.scopes; s; s = s->next)

static void events_destroy_all(void)
{
    EVERY_SCOPE(s)
    {
        event_destroy(&s->ev_copied);
        event_destroy(&s->ev_release);
        event_destroy(&s->ev_reloaded);
        event_destroy(&s->ev_fwd0);
        for (ao_chunk_t *c = s->chunks; c; c = c->next) {
            event_destroy(&c->ev_copy);
            event_destroy(&c->ev_out);
            for (int i = 0; i < c->nfree_ev; i++)
                event_destroy(&c->free_ev[i]);
            c->nfree_ev = 0;
        }
    }
    for (ao_deferred_t *d = ao_eng.deferred; d; d = d->next)
        for (int i = 0; i < d->nev; i++)
            event_destroy(&d->ev[i]);
    for (int i = 0; i < ao_eng.ntimed; i++) {
        event_destroy(&ao_eng.timed[i].ev0);
        event_destroy(&ao_eng.timed[i].ev1);
    }
    ao_eng.ntimed = 0;
    for (int i = 0; i < AO_MAX_MB; i++)
        event_destroy(&ao_eng.bwd0[i]);
    while (ao_eng.nsync_events)
        event_destroy(&ao_eng.sync_events[--ao_eng.nsync_events]);
    while (ao_eng.ntiming_events)
        event_destroy(&ao_eng.timing_events[--ao_eng.ntiming_events]);
    event_destroy(&ao_eng.t0);
    event_destroy(&ao_eng.last_reload);
}

// Everything given back; the first failure that stayed (after a second
// try), with what it concerned.
static CUresult release_all(const char **what)
{
    // Kernels may still use resident chunks and copies still read or fill
    // host slots (a program that exits without synchronising): all of it
    // must be complete before anything is unmapped or unpinned.
    CUresult r = ao_real.cuCtxSynchronize ? ao_real.cuCtxSynchronize() : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS && !driver_gone(r) && ao_real.cuCtxSynchronize)
        r = ao_real.cuCtxSynchronize();
    if (r != CUDA_SUCCESS) {
        *what = "waiting for the device"; // nothing given back: it may be in use
        return r;
    }
    events_destroy_all();
    bool all_unmapped = true;
    CUresult first = CUDA_SUCCESS;
    EVERY_SCOPE(s)
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        ao_vmm_mark(c->base, c->size, AO_GS_NONE, NULL);
        for (ao_buffer_t *b = c->buffers; b; b = b->next)
            b->host = NULL; // the pinned pool goes as a whole
        if (!c->mapped) continue;
        r = ao_phys_unmap(c->base, c->size, &c->phys);
        if (r != CUDA_SUCCESS && !driver_gone(r)) r = ao_phys_unmap(c->base, c->size, &c->phys);
        if (driver_gone(r)) return r;
        if (r != CUDA_SUCCESS) {
            all_unmapped = false;
            if (first == CUDA_SUCCESS) first = r, *what = "unmapping device memory";
            continue;
        }
        c->mapped = false;
        }
    ao_lenders_to_idle(); // their lent granules were unmapped with the chunks above
    while (ao_idle_mapped) { // the cache's mappings too
        ao_idle_t *i = ao_idle_mapped;
        ao_idle_mapped = i->next;
        i->nev = 0; // every event is gone (events_destroy_all); the context is synchronized
        r = ao_phys_unmap(i->base, i->size, &i->phys);
        if (r != CUDA_SUCCESS && !driver_gone(r)) r = ao_phys_unmap(i->base, i->size, &i->phys);
        free(i);
        if (driver_gone(r)) return r;
        if (r != CUDA_SUCCESS) {
            all_unmapped = false;
            if (first == CUDA_SUCCESS) first = r, *what = "unmapping device memory";
        }
    }
    ao_idle_mapped_bytes = 0;
    r = ao_vmm_fini(all_unmapped);
    if (driver_gone(r)) return r;
    if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r, *what = "releasing device memory";
    r = (CUresult)ao_host_fini();
    if (driver_gone(r)) return r;
    if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r, *what = "unpinning host memory";
    ao_real.cuStreamDestroy_v2(ao_eng.d2h);
    ao_real.cuStreamDestroy_v2(ao_eng.h2d);
    ao_eng.d2h = ao_eng.h2d = NULL;
    return first;
}

// At exit another thread may have been stopped while holding the engine's
// lock: wait for it at most 100 ms.
static bool lock_at_exit(void)
{
    for (int i = 0; i < 200; i++) {
        if (pthread_mutex_trylock(&ao_eng.mu) == 0) return true;
        usleep(500);
    }
    return false;
}

void ao_engine_flush(void)
{
    if (!__atomic_load_n(&ao_eng.ready, __ATOMIC_ACQUIRE)) return;
    if (!lock_at_exit()) return; // the report goes without the last intervals rather than hang
    if (ao_eng.ready) {
        for (int i = 0; i < ao_eng.ntimed; i++)
            if (ao_eng.timed[i].ev1) ao_ev_wait(ao_eng.timed[i].ev1);
        ao_poll_locked();
        ao_timed_read();
    }
    pthread_mutex_unlock(&ao_eng.mu);
}

void ao_engine_shutdown(void)
{
    if (!__atomic_load_n(&ao_eng.ready, __ATOMIC_ACQUIRE)) return;
    // Another thread of the program still running (exit() from one thread
    // while others train, an autograd thread pool) could touch a buffer
    // after its memory was given back: a fault. Then everything is left to
    // the driver, which reclaims it with the context.
    if (__atomic_load_n(&ao_user_threads, __ATOMIC_ACQUIRE) > (ao_tls_thread_seen ? 1 : 0)) return;
    if (!lock_at_exit()) return; // left to the driver rather than hang the exit
    if (!ao_eng.ready || shut) {
        pthread_mutex_unlock(&ao_eng.mu);
        return;
    }
    // From here every hook passes through and the engine does nothing: a
    // thread still running, a later destructor, an atexit handler.
    shut = true;
    ao_engine_off = true;
    ao_eng.ready = false;
    ao_eng.failed = true;
    ao_eng.open = NULL;
    __atomic_store_n(&ao_engine_open_scope, NULL, __ATOMIC_RELEASE);
    ao_ptrmap_clear(&ao_buffers);

    CUcontext cur = NULL;
    unsigned flags = 0;
    int active = 0;
    const char *what = "";
    CUresult r = ao_real.cuCtxGetCurrent(&cur);
    if (r == CUDA_SUCCESS) r = ao_real.cuDevicePrimaryCtxGetState(ao_vmm.device, &flags, &active);
    if (r == CUDA_SUCCESS && !active) r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (r == CUDA_SUCCESS && cur != ao_eng.ctx) r = ao_real.cuCtxSetCurrent(ao_eng.ctx);
    if (r == CUDA_SUCCESS) {
        r = release_all(&what);
        if (cur != ao_eng.ctx) ao_real.cuCtxSetCurrent(cur);
    }
    // A driver or context already gone took everything with it: nothing to say.
    if (r != CUDA_SUCCESS && !driver_gone(r))
        ao_log(AO_LOG_WARN,
               "at exit, %s failed (CUDA error %d): what aoshim holds there is left "
               "to the driver",
               what, (int)r);
    pthread_mutex_unlock(&ao_eng.mu);
}
