// SPDX-License-Identifier: MIT
// Events, the streams aoshim knows of, and polling: the engine acts on what
// the GPU has finished, and never blocks for it. Under the engine's lock.
#include "offload/internal.h"

// --- events ---------------------------------------------------------------------------
CUevent ao_event_get(bool timing)
{
    // Before the engine is up (boundaries in a process that has not used
    // CUDA yet) there is nothing to order, and no driver to ask.
    if (!ao_eng.ready) return NULL;
    if (timing && ao_eng.ntiming_events) return ao_eng.timing_events[--ao_eng.ntiming_events];
    if (!timing && ao_eng.nsync_events) return ao_eng.sync_events[--ao_eng.nsync_events];
    CUevent e = NULL;
    if (ao_real.cuEventCreate(&e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING) !=
        CUDA_SUCCESS)
        return NULL;
    return e;
}

void ao_event_put(CUevent e, bool timing)
{
    if (!e) return;
    int *n = timing ? &ao_eng.ntiming_events : &ao_eng.nsync_events;
    CUevent *v = timing ? ao_eng.timing_events : ao_eng.sync_events;
    if (*n < AO_EVENT_CACHE)
        v[(*n)++] = e;
    else
        ao_real.cuEventDestroy_v2(e);
}

// A fresh event recorded on s. When no event can be created or recorded,
// the host waits for s instead and NULL is returned: NULL always means
// "complete", and is never a guess (treating a missing event as complete
// released memory that kernels still used).
// Errors that say the driver is shutting down at exit are not the user's
// concern (log.h: ao_cuda_gone_at_exit): no warning for them.
static void record_failed(CUstream s, CUresult r)
{
    if (!ao_cuda_gone_at_exit(r))
        WARN_ONCE("recording a CUDA event failed (CUDA error %d): the host waits for the stream "
                  "instead",
                  (int)r);
    ao_real.cuStreamSynchronize(s);
}

CUevent ao_ev_record(CUstream s, bool timing)
{
    CUevent e = ao_event_get(timing);
    CUresult r = CUDA_ERROR_INVALID_HANDLE; // no event to record: none could be created
    if (e && (r = ao_real.cuEventRecord(e, s)) == CUDA_SUCCESS) return e;
    // Once more (the failure may have been passing): an event other threads
    // can wait on orders their streams on the GPU; a host wait orders only
    // this thread's later work (the simulator's race checker showed a reload
    // not ordered before another thread's copy).
    if (e && (r = ao_real.cuEventRecord(e, s)) == CUDA_SUCCESS) return e;
    ao_event_put(e, timing);
    record_failed(s, r);
    return NULL;
}

// Record again an event that others may already wait on (a later point of
// the same stream covers the earlier one); on failure, as record().
void ao_ev_rerecord(CUevent e, CUstream s)
{
    CUresult r = ao_real.cuEventRecord(e, s);
    if (r != CUDA_SUCCESS && (r = ao_real.cuEventRecord(e, s)) != CUDA_SUCCESS) record_failed(s, r);
}

// The host waits for e. Where the driver refuses (an error of its own, such
// as the fault matrix injects), the host waits for the whole device instead:
// an unmap or reuse that trusted the failed wait raced the work e stood for
// (stress_threads, cuEventSynchronize failing: a program's copy into a layer
// on one thread against its release on another).
void ao_ev_wait(CUevent e)
{
    if (!e || ao_real.cuEventSynchronize(e) == CUDA_SUCCESS) return;
    if (ao_real.cuCtxSynchronize) ao_real.cuCtxSynchronize();
}

// Stream s waits on the GPU for e; if the driver refuses, the host waits for
// e before anything more is enqueued on s.
void ao_gpu_wait(CUstream s, CUevent e)
{
    CUresult r;
    if (!e || (r = ao_real.cuStreamWaitEvent(s, e, 0)) == CUDA_SUCCESS) return;
    if (!ao_cuda_gone_at_exit(r))
        WARN_ONCE("cuStreamWaitEvent failed (CUDA error %d): the host waits for the event instead",
                  (int)r);
    ao_ev_wait(e);
}

// A layer's copies back: stream s waits for them on the GPU. Where no event
// could be made for them (ao_ev_record gave none: the thread that issued
// them waited for the copy stream itself, which orders that thread's later
// work only), this thread waits for the copy stream too before it enqueues
// on s: another thread's launch would otherwise read the layer unordered
// with its copy (the fault matrix's stress_threads, cuEventCreate failing:
// a reader thread's kernels against the first reload, 1 run in about 25
// under load).
void ao_wait_reload(CUstream s, const ao_scope_t *sc)
{
    if (sc->ev_reloaded)
        ao_gpu_wait(s, sc->ev_reloaded);
    else if (sc->reload_unordered) // (none at all: never reloaded, nothing to wait for)
        ao_real.cuStreamSynchronize(ao_eng.h2d);
}

// Complete as far as the host can tell. A query that fails (rather than
// answering "not ready") is no answer: the host waits for the event, and
// only if that fails too (a context torn down, where nothing can still run)
// does it count as complete.
bool ao_ev_done(CUevent e)
{
    if (!e) return true;
    CUresult r = ao_real.cuEventQuery(e);
    if (r == CUDA_SUCCESS) return true;
    if (r == CUDA_ERROR_NOT_READY) return false;
    if (!ao_cuda_gone_at_exit(r))
        WARN_ONCE("cuEventQuery failed (CUDA error %d): the host waits for the event instead",
                  (int)r);
    ao_ev_wait(e);
    return true;
}

static uint64_t elapsed_ns(CUevent a, CUevent b)
{
    float ms = 0;
    if (!a || !b || ao_real.cuEventElapsedTime_v2(&ms, a, b) != CUDA_SUCCESS || ms < 0) return 0;
    return (uint64_t)((double)ms * 1e6 + 0.5);
}

// Time [ev0, ev1] on the GPU once both have completed (timing events).
void ao_timed_add(CUevent ev0, CUevent ev1, int kind, int layer, int mb, uint64_t bytes)
{
    if (ev0 && ev1 && ao_eng.ntimed < AO_MAX_TIMED) {
        ao_eng.timed[ao_eng.ntimed].ev0 = ev0;
        ao_eng.timed[ao_eng.ntimed].ev1 = ev1;
        ao_eng.timed[ao_eng.ntimed].kind = (uint8_t)kind;
        ao_eng.timed[ao_eng.ntimed].layer = layer;
        ao_eng.timed[ao_eng.ntimed].mb = mb;
        ao_eng.timed[ao_eng.ntimed].bytes = bytes;
        ao_eng.ntimed++;
        return;
    }
    ao_event_put(ev0, true);
    ao_event_put(ev1, true);
}

// --- streams ----------------------------------------------------------------------------
CUstream ao_current_stream(void)
{
    return ao_tls_stream_set ? ao_tls_stream : CU_STREAM_LEGACY;
}

void ao_note_stream_locked(CUstream s)
{
    for (int i = 0; i < ao_eng.nstreams; i++)
        if (ao_eng.streams[i] == s) return;
    if (ao_eng.nstreams < AO_MAX_STREAMS)
        ao_eng.streams[ao_eng.nstreams++] = s;
    else
        WARN_ONCE("more than %d streams in use: a cudaFree of a tracked buffer waits for the first "
                  "%d only",
                  AO_MAX_STREAMS, AO_MAX_STREAMS);
}

// Threads of the program that went through aoshim and have not exited (the
// main thread never runs key destructors: it counts until the process ends).
int ao_user_threads;
static pthread_key_t user_key;
static pthread_once_t user_once = PTHREAD_ONCE_INIT;
AO_TLS bool ao_tls_thread_seen;

static void user_gone(void *unused)
{
    (void)unused;
    __atomic_sub_fetch(&ao_user_threads, 1, __ATOMIC_ACQ_REL);
}

static void user_key_init(void)
{
    pthread_key_create(&user_key, user_gone);
}

void ao_engine_thread_seen_slow(void)
{
    ao_tls_thread_seen = true;
    pthread_once(&user_once, user_key_init);
    pthread_setspecific(user_key, (void *)1);
    __atomic_add_fetch(&ao_user_threads, 1, __ATOMIC_ACQ_REL);
}

void ao_engine_note_stream_slow(CUstream s)
{
    ao_engine_thread_seen();
    if (!ao_tls_stream_explicit || !ao_tls_stream_set) ao_tls_stream = s;
    ao_tls_noted = s;
    ao_tls_stream_set = true;
    pthread_mutex_lock(&ao_eng.mu);
    ao_note_stream_locked(s);
    pthread_mutex_unlock(&ao_eng.mu);
}

void ao_engine_forget_stream(CUstream s)
{
    if (ao_tls_stream_set && ao_tls_stream == s) ao_tls_stream_set = ao_tls_stream_explicit = false;
    if (ao_tls_noted == s) ao_tls_noted = NULL;
    pthread_mutex_lock(&ao_eng.mu);
    for (int i = 0; i < ao_eng.nstreams; i++)
        if (ao_eng.streams[i] == s) ao_eng.streams[i] = ao_eng.streams[--ao_eng.nstreams];
    pthread_mutex_unlock(&ao_eng.mu);
}

// --- polling: act on what the GPU has finished; never blocks -----------------------------
// The intervals of kind timed inside (layer, mb)'s own interval [a, b],
// read with it and taken out: the time of those inside [a, b]. One of an
// earlier pass of the layer (its own interval went untimed) is outside
// [a, b]: taken out, not counted. all_ns and all_bytes, when given, add
// every one's time and bytes, inside or not.
static uint64_t take_inside(int kind, int layer, int mb, uint64_t a, uint64_t b, uint64_t *all_ns,
                            uint64_t *all_bytes)
{
    uint64_t in = 0;
    for (int j = 0; j < ao_eng.ntimed;) {
        ao_timed_t *t = &ao_eng.timed[j];
        if (t->kind != kind || t->layer != layer || t->mb != mb || !ao_ev_done(t->ev1)) {
            j++;
            continue;
        }
        uint64_t ia = elapsed_ns(ao_eng.t0, t->ev0), ib = elapsed_ns(ao_eng.t0, t->ev1);
        if (ib > ia) {
            if (all_ns) *all_ns += ib - ia, *all_bytes += t->bytes;
            if (ia >= a && ib <= b) in += ib - ia;
        }
        ao_event_put(t->ev0, true);
        ao_event_put(t->ev1, true);
        ao_eng.timed[j] = ao_eng.timed[--ao_eng.ntimed];
    }
    return in;
}

// The stream's idle time of kind (TIMED_IDLE, TIMED_IDLE_BWD) that
// chunk_map timed inside a layer's forward or backward [a, b].
static uint64_t idle_ns(int kind, int layer, int mb, uint64_t a, uint64_t b)
{
    uint64_t idle = take_inside(kind, layer, mb, a, b, NULL, NULL);
    return idle < b - a ? idle : 0;
}

// The copies' own time inside a reload's span [a, b] of (layer, mb): its
// chunks' intervals (TIMED_H2D_LINK), which also give the planner its link
// rate. The span holds the gaps where the H2D stream idled while the host
// mapped the next chunk (over 1 ms a page while a copy runs on the H200:
// design.md "VMM costs"), which are not the copies' time.
static uint64_t h2d_link_ns(int layer, int mb, uint64_t a, uint64_t b)
{
    uint64_t busy =
        take_inside(TIMED_H2D_LINK, layer, mb, a, b, &ao_auto.h2d_ns, &ao_auto.h2d_bytes);
    return busy < b - a ? busy : b - a;
}

// Whether a reload span of (layer, mb) waits to be read: a chunk's copies
// back are read with it. One whose span was not timed (no event for it, the
// list full) is read alone, for the planner's link rate only.
static bool h2d_span_pending(int layer, int mb)
{
    for (int j = 0; j < ao_eng.ntimed; j++)
        if (ao_eng.timed[j].kind == AO_REC_H2D && ao_eng.timed[j].layer == layer &&
            ao_eng.timed[j].mb == mb)
            return true;
    return false;
}

// Read the GPU intervals that are complete: layers' forward and backward
// times for the planner, copies and waits for the report.
void ao_timed_read(void)
{
    static const ao_stat_t stat_of[] = {
        [AO_REC_D2H] = AO_STAT_D2H_COPY_NS, [AO_REC_WAIT] = AO_STAT_RELOAD_WAIT_NS};
    for (int i = 0; i < ao_eng.ntimed;) {
        // An idle interval is read with its layer's, a chunk's copies back
        // with their reload's span (below): each completes first.
        if (ao_eng.timed[i].kind == TIMED_IDLE || ao_eng.timed[i].kind == TIMED_IDLE_BWD ||
            (ao_eng.timed[i].kind == TIMED_H2D_LINK &&
             h2d_span_pending(ao_eng.timed[i].layer, ao_eng.timed[i].mb)) ||
            !ao_ev_done(ao_eng.timed[i].ev1)) {
            i++;
            continue;
        }
        // Taken out before it is read: reading a layer's interval takes its
        // idle intervals out too, which moves entries.
        ao_timed_t t = ao_eng.timed[i];
        ao_eng.timed[i] = ao_eng.timed[--ao_eng.ntimed];
        uint64_t a = elapsed_ns(ao_eng.t0, t.ev0), b = elapsed_ns(ao_eng.t0, t.ev1);
        int kind = t.kind, layer = t.layer;
        // A layer's time is the least measured, less the stream's idle time
        // that chunk_map timed inside it: the GPU idling while the host
        // waited is not the layer's compute.
        if (kind == TIMED_FWD) {
            uint64_t f = b - a - idle_ns(TIMED_IDLE, layer, t.mb, a, b);
            if (!ao_auto.fwd_ns[layer] || f < ao_auto.fwd_ns[layer]) ao_auto.fwd_ns[layer] = f;
            ao_rec_interval(AO_REC_FWD, layer, t.mb, 0, a, b);
        } else if (kind == TIMED_BWD) {
            uint64_t f = b - a - idle_ns(TIMED_IDLE_BWD, layer, t.mb, a, b);
            if (!ao_auto.bwd_ns[layer] || f < ao_auto.bwd_ns[layer]) ao_auto.bwd_ns[layer] = f;
            ao_rec_interval(AO_REC_BWD, layer, t.mb, 0, a, b);
        } else if (kind == TIMED_H2D_LINK) { // its span untimed
            ao_auto.h2d_bytes += t.bytes, ao_auto.h2d_ns += b - a;
        } else if (kind == AO_REC_H2D) {
            uint64_t busy = h2d_link_ns(layer, t.mb, a, b);
            ao_stat_add(AO_STAT_H2D_COPY_NS, (int64_t)busy);
            ao_rec_interval_busy(kind, layer, t.mb, t.bytes, a, b, busy);
        } else {
            ao_stat_add(stat_of[kind], (int64_t)(b - a));
            ao_rec_interval(kind, layer, t.mb, t.bytes, a, b);
            if (kind == AO_REC_D2H) ao_auto.d2h_bytes += t.bytes, ao_auto.d2h_ns += b - a;
        }
        ao_event_put(t.ev0, true);
        ao_event_put(t.ev1, true);
    }
}

// A layer's copies out and its release point are behind it. An event that
// could not be made (ao_ev_record gave none) ordered only the thread that
// made the copies, which waited for the stream itself: this thread, about
// to give the layer's memory back, waits for the stream too (the fault
// matrix's stress_threads, cuEventCreate failing: another thread unmapped a
// layer unordered with its copy out).
static bool copied_out(ao_scope_t *s)
{
    if (!s->ev_copied) ao_real.cuStreamSynchronize(ao_eng.d2h);
    if (!s->ev_release) ao_real.cuStreamSynchronize(s->stream);
    if (!s->ev_copied || !s->ev_release) // and so does any thread that unmaps them later
        for (ao_chunk_t *c = s->chunks; c; c = c->next)
            c->free_unordered = true;
    return ao_ev_done(s->ev_copied) && ao_ev_done(s->ev_release);
}

// One chunk of a layer still being copied out: its own copies and the
// layer's release point are behind it (the layer's other copies may not be).
static CUevent chunk_out_event(const ao_chunk_t *c)
{
    return c->out_early ? c->ev_copy : c->ev_out;
}

static bool chunk_copied_out(const ao_scope_t *s, const ao_chunk_t *c)
{
    CUevent e = chunk_out_event(c);
    return s->state == AO_OFFLOADING && s->release_recorded && e && s->ev_release &&
           ao_ev_done(e) && ao_ev_done(s->ev_release);
}

void ao_poll_locked(void)
{
    ao_lenders_poll();
    for (ao_deferred_t **pp = &ao_eng.deferred; *pp;) {
        ao_deferred_t *d = *pp;
        bool all = !d->chunk || ao_free_events_done(d->chunk);
        for (int i = 0; i < d->nev && all; i++)
            all = ao_ev_done(d->ev[i]);
        if (!all) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        if (!d->chunk || !ao_chunk_release(d->chunk, d->ev, d->nev))
            for (int i = 0; i < d->nev; i++)
                ao_event_put(d->ev[i], false);
        if (!d->chunk) ao_host_free(d->host, d->host_size);
        free(d);
    }
    // GPU intervals are read at a step's end (the plan needs them), at exit
    // and when half the slots are taken: each read asks the driver about
    // every interval still pending, and at every boundary that was 1500
    // event queries per GPT-2-small step, on the host's critical path.
    if (ao_eng.ntimed > AO_MAX_TIMED / 2) ao_timed_read();
    for (ao_scope_t *s = ao_eng.scopes, *next; s; s = next) {
        next = s->next;
        if (s->state == AO_OFFLOADING && s->release_recorded && copied_out(s)) {
            s->state = AO_OFFLOADED;
        }
        if (s->state == AO_RELOADING && ao_ev_done(s->ev_reloaded)) {
            s->state = AO_RESIDENT;
        }
        for (ao_chunk_t *c = s->chunks, *cn; c; c = cn) {
            cn = c->next;
            // Copied out and past its release point: give the memory back.
            // A freed buffer still pending keeps the chunk until it is done.
            if (c->state == AO_OFFLOADING && (s->state == AO_OFFLOADED || chunk_copied_out(s, c)) &&
                ao_free_events_done(c)) {
                if (!ao_chunk_unmap(c)) { // the device copy is intact: it stays, resident
                    ao_host_slots_free(c);
                    ao_chunk_set(c, AO_RESIDENT);
                    continue;
                }
                for (ao_buffer_t *b = c->buffers; b; b = b->next)
                    if (!b->freed) {
                        ao_stat_add(AO_STAT_OFFLOADED_BYTES, (int64_t)b->size);
                        ao_rec_site(b->site, -(int64_t)b->size, b->size);
                    }
                ao_rec_memory(s->layer, -(int64_t)c->size, (int64_t)c->size);
                ao_chunk_set(c, AO_OFFLOADED);
            }
            if (c->state == AO_RELOADING && s->state == AO_RESIDENT) {
                if (!c->prefetched) ao_host_slots_free(c);
                ao_chunk_set(c, AO_RESIDENT);
            }
        }
        if (!s->chunks && s->ended && s != ao_eng.open && !ao_eng.scope_hold &&
            (s->state == AO_RESIDENT || s->state == AO_OFFLOADED))
            ao_scope_destroy(s);
    }
}

// Wait for the oldest release under way; false if none is.
bool ao_wait_one_release(void)
{
    ao_scope_t *scope = NULL;
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next) // newest first: the last match is oldest
        if (s->state == AO_OFFLOADING && s->release_recorded) scope = s;
    ao_deferred_t *oldest = NULL;
    for (ao_deferred_t *d = ao_eng.deferred; d; d = d->next)
        if (d->chunk && d->chunk->mapped) oldest = d;
    if (scope) {
        // The chunk whose copy was queued first and is not done, if the
        // layer's chunks go one by one; else the layer's last copy.
        ao_chunk_t *first = NULL;
        for (ao_chunk_t *c = scope->chunks; c; c = c->next)
            if (c->state == AO_OFFLOADING && chunk_out_event(c) &&
                !ao_ev_done(chunk_out_event(c)) && (!first || c->out_seq < first->out_seq))
                first = c;
        ao_ev_wait(first ? chunk_out_event(first) : scope->ev_copied);
        ao_ev_wait(scope->ev_release);
    } else if (oldest) {
        for (int i = 0; i < oldest->nev; i++)
            if (oldest->ev[i]) ao_ev_wait(oldest->ev[i]);
        for (int i = 0; i < oldest->chunk->nfree_ev; i++)
            ao_ev_wait(oldest->chunk->free_ev[i]);
    } else {
        return false;
    }
    ao_poll_locked();
    return true;
}

// Wait for every release under way: only when device memory has run out.
void ao_drain_locked(void)
{
    for (ao_deferred_t *d = ao_eng.deferred; d; d = d->next) {
        for (int i = 0; i < d->nev; i++)
            if (d->ev[i]) ao_ev_wait(d->ev[i]);
        for (int i = 0; d->chunk && i < d->chunk->nfree_ev; i++)
            ao_ev_wait(d->chunk->free_ev[i]);
    }
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
        if (s->state == AO_OFFLOADING && s->release_recorded) {
            ao_ev_wait(s->ev_copied);
            ao_ev_wait(s->ev_release);
        }
    ao_poll_locked();
}
