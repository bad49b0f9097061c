// SPDX-License-Identifier: MIT
// The tracked allocation path: sub-allocation in a scope's chunks, frees,
// and giving memory back when the program runs out (ao_engine_trim).
#include "offload/internal.h"

// --- allocation -----------------------------------------------------------------------------
static ao_buffer_t *suballoc(ao_scope_t *s, size_t rsize, bool stays, ao_order_t by)
{
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        uint64_t lo;
        // Not a retiring chunk's free tail: its release, once its last uses
        // are done, would take the new buffer's memory with it (a layer that
        // freed a 3 MiB buffer the GPU still used, then allocated 512 KiB:
        // the new buffer went there, and its bytes were overwritten by the
        // next layer that got the chunk's kept mapping).
        if (c->state != AO_RESIDENT || c->retiring || c->stays != stays ||
            ao_extents_take(&c->free, rsize, &lo) < 0)
            continue;
        // Past what is mapped (buffers are placed from the chunk's start
        // up): the chunk maps more, in pages, the rest if it is there.
        if (lo + rsize > c->base + c->size && ao_chunk_grow(c, lo + rsize, by) != CUDA_SUCCESS) {
            ao_extents_give(&c->free, lo, rsize);
            continue;
        }
        ao_buffer_t *b = calloc(1, sizeof *b);
        if (!b) {
            ao_extents_give(&c->free, lo, rsize);
            return NULL;
        }
        b->addr = lo;
        b->chunk = c;
        b->next = c->buffers;
        c->buffers = b;
        c->nlive++;
        return b;
    }
    return NULL;
}

CUresult ao_engine_alloc(size_t size, CUstream stream, bool async, CUdeviceptr *out)
{
    if (!async) stream = NULL;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&ao_eng.mu);
    ao_scope_t *s = ao_eng.open;
    if (!s || s->passthrough || !ao_engine_ensure_ready()) goto out;
    // The layer's allocations are those its thread makes, or any made on its
    // stream. Another thread's buffers on other streams (a data loader, a
    // communication thread) are not the layer's to move.
    if (!pthread_equal(pthread_self(), s->thread) && stream != s->stream) goto out;
    if (stream) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
        if (ao_real.cuStreamIsCapturing(stream, &cs) == CUDA_SUCCESS &&
            cs != CU_STREAM_CAPTURE_STATUS_NONE)
            goto out; // graph memory belongs to the graph
        ao_note_stream_locked(stream);
    }
    ao_poll_locked();
    unsigned seq = s->rec.n;
    const ao_learn_t *plan = s->plan;
    bool planned = plan && seq < plan->n && plan->size[seq] == size;
    // Not the size the layer allocated last step (shapes changing): the
    // kept mappings are of the old sizes, and the pool tiles new ones best
    // (serving, ao_vmm.fine: any idle memory backs any size).
    if (plan && !planned && ao_idle_mapped && !ao_vmm.fine) ao_idle_unmap(SIZE_MAX);
    // A temporary last step (or kept): the real allocator serves it. So does
    // one that did not live to its layer's backward, while serving: in the
    // layer's chunk its memory stayed taken until that backward ended, where
    // served it is the program's again at its free. The H200 Llama's head
    // frees two 32 MiB buffers of every layer before its peak; in the
    // chunks they held 0.23 GiB there that the plan under a budget moved to
    // the host too (replayed under the budget its link hides: 1.09x -> 1.05x
    // the step without aoshim, 25% under 1.08x -> 1.04x). Copied out with
    // an offloaded layer, such a buffer is link time for memory the program
    // gives back anyway; served, it stays on the device until its free. Of
    // a page or more only (LEARN_SHORT's free below): a smaller one shares
    // a page with others, which goes back when they all have (train_step
    // --pytorch's 8 MiB of layer 7, served, took its step under the budget
    // its link hides in its forward's time from 1.15x to 1.22x).
    if (planned && ao_learn_untracked(plan->flags[seq])) {
        ao_learn_push(&s->rec, size, plan->flags[seq]);
        goto out;
    }
    size_t rsize = (size + AO_ALIGN - 1) & ~(AO_ALIGN - 1);
    // A layer offloaded in part: the buffers the schedule keeps have chunks
    // of their own, which are never copied out.
    bool stays = planned && s->stays && s->stays[seq];
    // AOSHIM_CHECK: every buffer its own chunk, so that its free can unmap it.
    const ao_order_t by = async ? AO_BY_STREAM(stream) : AO_BY_HOST;
    ao_buffer_t *b = ao_config.check ? NULL : suballoc(s, rsize, stays, by);
    if (!b) {
        // One chunk for the layer's whole saved set (or for each part) when
        // last step told us its size; otherwise a chunk of this buffer's size.
        size_t want = ao_vmm_round(rsize);
        bool first = planned;
        for (ao_chunk_t *c = s->chunks; c && first; c = c->next)
            first = c->stays != stays;
        // Serving (ao_vmm.fine), each buffer of the part that goes has a
        // chunk of its own: a chunk goes back as soon as its own copy is
        // done (ao_poll_locked), not when the layer's last copy is.
        uint64_t saved = !first        ? 0
                         : !s->stays   ? plan->saved
                         : stays       ? s->part_stays
                         : ao_vmm.fine ? 0 // a chunk per buffer
                                       : s->part_goes;
        if (saved > want) want = ao_vmm_round(saved);
        ao_chunk_t *c = ao_chunk_new(s, want, rsize, s->stays != NULL, by);
        if (c) c->stays = stays, b = suballoc(s, rsize, stays, by);
    }
    if (!b) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    b->size = size;
    b->rsize = rsize;
    b->seq = seq;
    ao_learn_push(&s->rec, size, 0);
    if (!ao_ptrmap_put(&ao_buffers, b->addr, (uint64_t)(uintptr_t)b)) {
        b->freed = true; // unreachable by free: release it now
        if (--b->chunk->nlive == 0) ao_chunk_retire(b->chunk);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    ao_stat_add(AO_STAT_TRACKED_BUFFERS, 1);
    ao_stat_need((int64_t)rsize);
    b->site = ao_rec_alloc(s->layer, size);
    *out = b->addr;
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&ao_eng.mu);
    return r;
}

// Record an event ordering a free the chunk's scope stream does not order.
void ao_free_event(ao_chunk_t *c, CUstream s)
{
    // One event per stream, re-recorded: a later point on a stream covers
    // the earlier ones, and nothing is dropped, so a reload can still be
    // ordered after every use on the GPU (not only through the host thread
    // that saw them complete).
    for (int i = 0; i < c->nfree_ev; i++)
        if (c->free_ev_stream[i] == s) {
            ao_ev_rerecord(c->free_ev[i], s);
            return;
        }
    if (c->nfree_ev == AO_MAX_FREE_EVENTS) { // more streams than slots: wait for the oldest
        ao_ev_wait(c->free_ev[0]);
        ao_event_put(c->free_ev[0], false);
        c->nfree_ev--;
        memmove(c->free_ev, c->free_ev + 1, (size_t)c->nfree_ev * sizeof *c->free_ev);
        memmove(c->free_ev_stream, c->free_ev_stream + 1,
                (size_t)c->nfree_ev * sizeof *c->free_ev_stream);
    }
    CUevent e = ao_ev_record(s, false);
    if (!e) { // the host waited for s, which orders this thread only
        c->free_unordered = true;
        return;
    }
    c->free_ev_stream[c->nfree_ev] = s;
    c->free_ev[c->nfree_ev++] = e;
}

// A free the chunk's own stream does not order, ordered by events: a
// cudaFree after all work on every stream aoshim knows, another stream's
// cudaFreeAsync after that stream's work.
static void order_free(ao_chunk_t *c, CUstream stream, bool async)
{
    if (!async) {
        for (int i = 0; i < ao_eng.nstreams; i++)
            ao_free_event(c, ao_eng.streams[i]);
    } else if (stream != c->scope->stream) {
        ao_note_stream_locked(stream);
        ao_free_event(c, stream);
    }
}

// One of the program's own allocations (serve.c) freed. In a segment with
// others live: on the segment's stream its space is reusable at once
// (stream order); from elsewhere it stays taken until the segment empties,
// and the segment's release waits for that free. The last: on its own stream, the
// mapping is kept at once with an event at the free: the next allocation
// of its size on any stream waits for that event on the GPU, a layer once
// it is complete. Elsewhere (another stream's free, a cudaFree), it is
// released as a layer's chunk is, once its uses are complete.
static void served_free(ao_chunk_t *c, ao_buffer_t *b, CUstream stream, bool async)
{
    ao_stat_device(-(int64_t)b->size, 0, 0);
    ao_stat_add(AO_STAT_SERVED_BYTES, -(int64_t)b->size);
    bool own = async && stream == c->scope->stream;
    if (c->nlive) { // a segment with other buffers live (serve.c)
        if (own) {
            ao_serve_unlink(c, b);
        } else {
            order_free(c, stream, async);
        }
        return;
    }
    if (own && !c->nfree_ev && !c->free_unordered) {
        CUevent e = ao_ev_record(stream, false);
        if (e && ao_chunk_keep_freed(c, e)) return;
        if (e) ao_event_put(e, false);
    }
    order_free(c, stream, async);
    ao_chunk_retire(c);
}

// A free costs no driver call in the common case (a stream-ordered free on
// the layer's own stream): the buffer is marked, and the chunk is released
// once its last buffer is freed and its stream has passed that point.
CUresult ao_engine_free(CUdeviceptr p, CUstream stream, bool async)
{
    pthread_mutex_lock(&ao_eng.mu);
    ao_buffer_t *b = (ao_buffer_t *)(uintptr_t)ao_ptrmap_take(&ao_buffers, p);
    if (!b) {
        pthread_mutex_unlock(&ao_eng.mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    ao_chunk_t *c = b->chunk;
    ao_scope_t *s = c->scope;
    b->freed = true;
    c->nlive--;
    if (c->served) {
        served_free(c, b, stream, async);
        pthread_mutex_unlock(&ao_eng.mu);
        return CUDA_SUCCESS;
    }
    ao_stat_need(-(int64_t)b->rsize);
    if (c->mapped) ao_rec_site(b->site, -(int64_t)b->size, 0);
    // The allocation record learns which buffers are temporaries.
    if (s == ao_eng.open && b->seq < s->rec.n) s->rec.flags[b->seq] |= LEARN_TEMP;
    if (s != ao_eng.open && !s->recompute && b->seq < ao_eng.learned[s->layer].n) {
        uint8_t *learnt = &ao_eng.learned[s->layer].flags[b->seq];
        if (c->state == AO_RESIDENT && s->offload_pending) *learnt |= LEARN_GONE;
        if (s->ended && ao_eng.phase[s->mb] == PHASE_FORWARD && b->rsize >= AO_PAGE)
            *learnt |= LEARN_SHORT;
    }
    if (c->state == AO_OFFLOADING) ao_stat_add(AO_STAT_COPIES_SKIPPED, 1);
    if (!c->mapped) {
        // Offloaded: no device memory; its copy out has completed.
        if (b->host) ao_host_free(b->host, b->size);
        b->host = NULL;
    } else {
        order_free(c, stream, async);
    }
    if (c->nlive == 0) {
        ao_chunk_retire(c);
        // AOSHIM_CHECK: unmapped at once. The host waits for the events of
        // the free's point on the GPU (work queued before it may still read
        // the buffer), then the chunk goes. Slow: a debugging mode.
        if (ao_config.check) ao_drain_locked();
    }
    pthread_mutex_unlock(&ao_eng.mu);
    return CUDA_SUCCESS;
}

// A prefetched chunk stops being reclaimable once it is needed or used: its
// host copy goes when its reload is complete (at once if it is).
void ao_unprefetch(ao_chunk_t *c)
{
    if (!c->prefetched) return;
    c->prefetched = false;
    if (c->state == AO_RESIDENT) ao_host_slots_free(c);
}

// The program ran out of device memory: layers brought back ahead of their
// backward and not used since give their memory back (their host copies are
// intact), to be reloaded at their backward. A prefetch never takes memory
// the program needs.
static bool evict_prefetched(void)
{
    bool any = false;
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next) {
        bool all = s->chunks != NULL;
        for (ao_chunk_t *c = s->chunks; c; c = c->next) {
            if (!c->prefetched || !c->mapped || c->retiring ||
                (c->state != AO_RESIDENT && c->state != AO_RELOADING)) {
                all &= c->state == AO_OFFLOADED;
                continue;
            }
            // The copy back must be done before the memory goes; nothing else
            // used the chunk since (a use would have ended its prefetch).
            if (s->ev_reloaded) ao_ev_wait(s->ev_reloaded);
            ao_vmm_mark(c->base, c->size, AO_GS_AWAY, c);
            ao_scan_quiesce();
            if (!ao_chunk_unmap(c)) { // still mapped: it stays as it was
                ao_chunk_set(c, c->state);
                continue;
            }
            for (ao_buffer_t *b = c->buffers; b; b = b->next)
                if (!b->freed) { // released again: counted as the offload it is
                    ao_stat_add(AO_STAT_OFFLOADED_BYTES, (int64_t)b->size);
                    ao_rec_site(b->site, -(int64_t)b->size, b->size);
                }
            ao_rec_memory(s->layer, -(int64_t)c->size, (int64_t)c->size);
            c->prefetched = false;
            ao_set_safe_stream(c, NULL);
            ao_chunk_set(c, AO_OFFLOADED);
            ao_stat_add(AO_STAT_PREFETCH_EVICTED, 1);
            any = true;
        }
        if (any && all) s->state = AO_OFFLOADED;
    }
    return any;
}

bool ao_engine_trim(void)
{
    if (!ao_eng.ready) return false;
    pthread_mutex_lock(&ao_eng.mu);
    if (!ao_eng.ready) { // shut down at exit meanwhile
        pthread_mutex_unlock(&ao_eng.mu);
        return false;
    }
    if (ao_auto.on) {
        // The device ran out under the budget: what it held then is the
        // budget from now on, and the next step's plan keeps under it.
        uint64_t held =
            ao_stat_get(AO_STAT_PASSTHROUGH_BYTES) + ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES);
        if (held && held < ao_auto.budget) {
            ao_auto.budget = held - held / 50;
            ao_auto.why = "re-planned after the device ran out of memory";
            ao_auto.planned =
                ao_auto.planned && ao_auto.plan.count > 0; // a plan of nothing is no plan now
            ao_sched_update();
        }
    }
    ao_drain_locked();
    bool evicted = evict_prefetched();
    size_t n = ao_idle_give_back() + evicted;
    pthread_mutex_unlock(&ao_eng.mu);
    if (n) ao_stat_add(AO_STAT_OOM_RETRIES, 1);
    return n > 0;
}
