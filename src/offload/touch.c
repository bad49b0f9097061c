// SPDX-License-Identifier: MIT
// The safety net's slow path: a launch, copy or set touches memory that is
// not plainly resident.
#include "offload/internal.h"

// --- the safety net's slow path ---------------------------------------------------------------
CUstream ao_engine_safe_stream(const void *chunk)
{
    // Relaxed: the scan read the chunk's state (seq_cst) first, and the
    // field is written before chunk_set's release store of that state, so
    // this is that state's value or a later one: a later one either comes
    // with a GPU wait already issued for that stream, or is NULL, which only
    // sends the launch to the slow path.
    return chunk ? __atomic_load_n(&((const ao_chunk_t *)chunk)->safe_stream, __ATOMIC_RELAXED)
                 : NULL;
}

// Whether s is capturing; *id: the capture sequence while it is active (0:
// none, or invalidated, when the captured work will never be part of a graph).
static bool stream_capturing(CUstream s, uint64_t *id)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    *id = 0;
    if (!__atomic_load_n(&ao_capturing, __ATOMIC_RELAXED) ||
        ao_real.cuStreamGetCaptureInfo_v3(s, &cs, &cid, NULL, NULL, NULL, NULL) != CUDA_SUCCESS)
        return false;
    if (cs == CU_STREAM_CAPTURE_STATUS_ACTIVE) *id = cid;
    return cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Whether p lies in a buffer of c the program has not freed.
static bool in_live_buffer(const ao_chunk_t *c, CUdeviceptr p)
{
    for (const ao_buffer_t *b = c->buffers; b; b = b->next)
        if (!b->freed && p - b->addr < b->rsize) return true;
    return false;
}

// A use of a watched chunk, between its layer's end and its release point
// (engine.c, early copies), of the bytes [p, p + n) (n = 0: any of them):
// the step learns that the buffers there are used then; one copied early is
// copied again at the release point, and stream s waits for its copy first
// (the use may write it; captured work cannot wait on an event from outside
// its capture: the host waits). Another stream's later use of such a buffer
// is ordered after this one by the program (a write after a read, or any
// use after a write), so one wait serves. n = 0 ends the chunk's watch:
// every buffer is taken as used, and the early copies as cancelled.
static void watched_use(ao_chunk_t *c, CUdeviceptr p, uint64_t n, CUstream s, bool capturing)
{
    ao_learn_t *l = &ao_eng.learned[c->scope->layer];
    bool wait = false;
    for (ao_buffer_t *b = c->buffers; b; b = b->next) {
        if (b->freed || (n && (b->addr - p >= n && p - b->addr >= b->rsize))) continue;
        if (b->seq < l->n) l->flags[b->seq] |= LEARN_TOUCHED;
        if (!b->early || b->dirty) continue;
        b->dirty = true;
        wait = true;
    }
    if (!n)
        ao_early_undo(c); // the next use on each stream waits for the copies
    else if (wait && capturing)
        ao_ev_wait(c->ev_copy);
    else if (wait)
        ao_gpu_wait(s, c->ev_copy);
}

unsigned ao_engine_waive_gen(const void *chunk)
{
    return chunk ? __atomic_load_n(&((const ao_chunk_t *)chunk)->waive_gen, __ATOMIC_SEQ_CST) : 0;
}

// A launch, copy or set on stream s is about to touch p, whose chunk is not
// plainly resident (or a capture is in progress). Make it safe before the
// work is enqueued: cancel a release still pending, reload what is away,
// make s wait (on the GPU) for a reload it has not waited for. Captured work
// cannot wait on an event recorded outside its capture, so there the host
// waits for the reload, and the chunk stays on the device as long as a graph
// made from the capture may replay the work (graph pins).
const void *ao_engine_touch(CUdeviceptr p, uint64_t n, CUstream s, const char *what, bool *stale,
                            unsigned *gen)
{
    if (ao_engine_off) return NULL;
    pthread_mutex_lock(&ao_eng.mu);
    ao_chunk_t *c = ao_vmm_owns(p) ? ao_vmm.owner[ao_vmm_index(p)] : NULL;
    if (c && stale && ao_config.skip_leftovers && !in_live_buffer(c, p)) {
        *stale = true;
        // A watched chunk is resident: nothing to do for a word into its
        // freed part, and the chunk is returned for the scan's waiver. Past
        // the scan's watched-word list (n = 0) its watch ends as for a
        // live word, so that the scan does not send the word here again.
        if (!(c->watched && c->state == AO_RESIDENT))
            c = NULL;
        else if (n) {
            *gen = c->waive_gen;
            pthread_mutex_unlock(&ao_eng.mu);
            return c;
        }
    }
    if (!c) {
        pthread_mutex_unlock(&ao_eng.mu);
        return NULL;
    }
    ao_note_stream_locked(s);
    ao_scope_t *sc = c->scope;
    uint64_t capture;
    bool capturing = stream_capturing(s, &capture), late = false, under_way = false;
    ao_unprefetch(c); // used from now on: never taken back
    if (c->watched && c->state == AO_RESIDENT) watched_use(c, p, n, s, capturing);
    if (c->state == AO_OFFLOADING && capturing) {
        // Wanted by a graph: keep it (the device copy is intact). Before its
        // release point any launch may use it.
        ao_cancel_chunk(c);
        late = sc->release_recorded;
    } else if (c->state == AO_OFFLOADED || (c->state == AO_OFFLOADING && sc->release_recorded)) {
        // Away, or past its release point: the layer comes back, its chunks
        // still copying kept (their device copy is intact), those gone
        // reloaded. Each chunk goes back as its own copy is done, and a use
        // of one (a layer boundary off) is a use of the layer (the H200 GPT's
        // measuring step: a memset of layer 0 kept one chunk, and the next
        // memset found another gone, two late reloads for the GPU's one).
        ao_reload(sc, false, false, false);
        late = true;
    }
    if (c->state == AO_RESIDENT && c->reloaded && c->safe_stream != s) {
        // Came back earlier, or its copy out was cancelled: this stream
        // orders itself after the copies on the GPU.
        ao_wait_reload(s, sc);
        ao_gpu_wait(s, c->ev_copy);
        if (!c->safe_stream) {
            ao_set_safe_stream(c, s);
            ao_chunk_set(c, AO_RESIDENT);
        }
    }
    if (c->state == AO_RELOADING) {
        if (capturing) {
            ao_ev_wait(sc->ev_reloaded);
            ao_poll_locked();
        } else if (c->safe_stream != s) {
            // The schedule's reload is under way (a prefetch, or the layer's
            // own backward on another stream): this launch waits for the
            // link, not for a reload it caused. Counted apart from the late
            // ones (issue 22; on the H200, once the host ran ahead, the
            // Llama's late reloads rose from 0 to 236, and the report could
            // not say which kind they were).
            ao_wait_reload(s, sc);
            if (!c->safe_stream) {
                ao_set_safe_stream(c, s);
                ao_chunk_set(c, AO_RELOADING);
            }
            under_way = !late;
        }
    }
    if (capture) ao_pin_for_capture(c, capture);
    if (c->state == AO_OFFLOADED) { // the reload found no device memory: refuse the work
        ao_scan_failed = true;
        WARN_ONCE("%s needs layer %d (microbatch %d), which could not be brought back to the "
                  "device: the call is refused with an out-of-memory error; its data stays in "
                  "host memory",
                  what, sc->layer, sc->mb);
        late = false;
    }
    if (under_way)
        for (ao_buffer_t *b = c->buffers; b; b = b->next)
            if (!b->freed) ao_stat_add(AO_STAT_RELOAD_UNDER_WAY, 1);
    if (late) {
        // Counted per buffer brought back (or kept) for this launch.
        for (ao_buffer_t *b = c->buffers; b; b = b->next)
            if (!b->freed) {
                ao_stat_add(AO_STAT_LATE_RELOADS, 1);
                ao_rec_late_reload(sc->layer, sc->mb, what);
            }
        WARN_ONCE("late reload: %s touched layer %d (microbatch %d) outside the schedule; the "
                  "launch waits for it on the GPU (counted in the summary)",
                  what, sc->layer, sc->mb);
    }
    *gen = c->waive_gen;
    pthread_mutex_unlock(&ao_eng.mu);
    return c;
}
