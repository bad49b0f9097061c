// SPDX-License-Identifier: MIT
// The offload engine: start-up, the offload and reload state machine, and
// the control calls. See engine.h for the interface and internal.h for the
// model; the other parts of offload/ hold the rest (docs/design.md).
#include <sys/mman.h>
#include <unistd.h>

#include "offload/internal.h"

ao_engine_t ao_eng = {.mu = PTHREAD_MUTEX_INITIALIZER, .max_fwd_layer = -1};
ao_ptrmap_t ao_buffers = AO_PTRMAP_INIT;
ao_sched_t ao_sched_now;

bool ao_engine_off;
const char *ao_engine_declined;
AO_TLS CUstream ao_tls_stream;
AO_TLS bool ao_tls_stream_set;
AO_TLS bool ao_tls_stream_explicit; // set by aoshim_set_stream: launches do not change it
AO_TLS CUstream ao_tls_noted;
void *ao_engine_open_scope; // ao_eng.open, for the lock-free check

// --- start-up ---------------------------------------------------------------------------
// The driver is brought up at the first tracked allocation, or at a control
// call once the program has used CUDA; never in the constructor. The calling
// thread may have no current context (a framework's autograd thread): use
// the primary context then.
bool ao_engine_ensure_ready(void)
{
    CUcontext c = NULL;
    if (ao_eng.ready) {
        if (ao_real.cuCtxGetCurrent(&c) == CUDA_SUCCESS && !c) ao_real.cuCtxSetCurrent(ao_eng.ctx);
        return true;
    }
    if (ao_eng.failed || !ao_real_driver()) return ao_eng.failed = true, false;
    CUresult r = ao_real.cuInit(0);
    if (r == CUDA_SUCCESS) r = ao_real.cuCtxGetCurrent(&c);
    if (r == CUDA_SUCCESS && !c) {
        r = ao_real.cuDevicePrimaryCtxRetain(&c, 0);
        if (r == CUDA_SUCCESS) r = ao_real.cuCtxSetCurrent(c);
    }
    if (r == CUDA_SUCCESS) r = ao_vmm_init();
    // Granule handles (any idle memory backs any range) while serving.
    ao_vmm.fine = ao_config.serve == AO_SERVE_ON && !ao_config.check;
    __atomic_store_n(&ao_engine_serving, ao_vmm.fine, __ATOMIC_RELAXED); // hooks read it unlocked
    if (ao_vmm.fine) ao_stat_max(AO_STAT_SERVED_FROM_STEP, 1);
    if (r == CUDA_SUCCESS) r = ao_real.cuStreamCreate(&ao_eng.d2h, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS) r = ao_real.cuStreamCreate(&ao_eng.h2d, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
        ao_log(AO_LOG_WARN,
               "cannot set up device memory management (CUDA error %d): offloading disabled",
               (int)r);
        return ao_eng.failed = true, false;
    }
    ao_eng.ctx = c;
    ao_eng.ready = true;
    ao_eng.t0 = ao_ev_record(ao_eng.d2h, true);
    ao_eng.last_reload = ao_event_get(false);
    char name[256] = "";
    size_t total = 0;
    ao_real.cuDeviceGetName(name, sizeof name, ao_vmm.device);
    ao_real.cuDeviceTotalMem_v2(&total, ao_vmm.device);
    ao_rec_device(name, total);
    ao_note_stream_locked(CU_STREAM_LEGACY);
    ao_auto.on = ao_config.offload_layers.kind == AO_LAYERS_AUTO;
    ao_auto.timing = ao_auto.on || ao_config.report_html || ao_config.trace;
    if (ao_auto.on) ao_auto_budget();
    ao_device_sampling_on();
    ao_sched_update();
    return true;
}

// --- offload and reload ---------------------------------------------------------------------
static bool chunk_has_kept(const ao_chunk_t *c)
{
    for (const ao_buffer_t *b = c->buffers; b; b = b->next)
        if (b->kept && !b->freed) return true;
    return false;
}

void ao_host_slots_free(ao_chunk_t *c)
{
    for (ao_buffer_t *b = c->buffers; b; b = b->next)
        if (b->host) {
            ao_host_free(b->host, b->size);
            b->host = NULL;
        }
}

// A host slot being filled by copies queued on the offload stream: given
// back once the stream is past them.
static void defer_host_slot(ao_buffer_t *b)
{
    ao_deferred_t *d = calloc(1, sizeof *d);
    if (d) {
        d->host = b->host;
        d->host_size = b->size;
        d->ev[d->nev++] = ao_ev_record(ao_eng.d2h, false);
        ao_defer(d);
    } else {
        WARN_ONCE("out of host memory: a pinned slot is not reused");
    }
    b->host = NULL;
}

static void defer_host_slots(ao_chunk_t *c)
{
    for (ao_buffer_t *b = c->buffers; b; b = b->next)
        if (b->host) defer_host_slot(b);
}

// --- early copies ----------------------------------------------------------------------------
// A layer's copy out starts at its release point, the next layer's end:
// that layer may still write the outputs it reads (a fused residual update,
// an in-place set). But only the outputs: the layer's other saved buffers
// are final at its own end. So the buffers the next layer did not use in
// the last step are copied at the layer's end, a layer earlier on the link
// (train_step --pytorch served, under a budget: layer 0's copy out began
// 1.4 ms into a step whose peak came at 5.5, and the forward stopped for
// it). From the layer's end to its release point its chunks are watched:
// every use goes through the engine (touch.c), which makes a stream that
// uses a buffer copied early wait for that copy on the GPU (it may write)
// and copies the buffer again at the release point; and the step learns
// which buffers the next layer uses (LEARN_TOUCHED), which do not go early
// in the next. Not in the first step (the layer count unknown), for a
// schedule that copies later than the release point, or under
// AOSHIM_CHECK.
static bool layer_selected(int layer);

// Layer l (0 <= l < AO_MAX_LAYERS) is no longer copied early (early_unlearnt).
static bool early_off(int l)
{
    return (ao_eng.early_off[l / 64] >> (l % 64)) & 1;
}

static bool early_ok(const ao_scope_t *s)
{
    const int l = s->layer;
    return ao_early_copies() && ao_eng.nlayers > 0 && !s->recompute && !s->passthrough && l >= 0 &&
           l < AO_MAX_LAYERS && ao_sched_now.layer[l].copy_at == l + 1 &&
           ao_sched_now.layer[l].offload && !early_off(l);
}

bool ao_early_copies(void)
{
    return !ao_eng.manual && !ao_config.check;
}

static bool early_chunk(const ao_chunk_t *c)
{
    return c->state == AO_RESIDENT && c->mapped && c->nlive && !c->stays && !c->graph_pins &&
           !c->retiring && !chunk_has_kept(c);
}

// At the layer's end, before last step's record of it goes: the buffers to
// copy early (those the same layer made last step, of the same size, that
// no later layer used before the release point, and that lived on).
static void early_choose(ao_scope_t *s)
{
    const ao_learn_t *p = s->plan;
    if (!p || !early_ok(s)) return;
    for (ao_chunk_t *c = s->chunks; c; c = c->next)
        for (ao_buffer_t *b = c->buffers; b && early_chunk(c); b = b->next)
            b->early = !b->freed && !b->kept && b->seq < p->n && p->size[b->seq] == b->size &&
                       !(p->flags[b->seq] & (LEARN_TOUCHED | LEARN_GONE | LEARN_TEMP));
}

// A buffer the next layers used in any step so far is not copied early in
// the next (the same layer's allocation of the same size): the step's own
// record starts without touches. The H200 Llama's recorded step has a word
// in a copy kernel's parameters that lands inside a different buffer of
// layer 1 from one step to the next (seq 34, then 45, then 34): learned one
// step at a time, each step copied early the buffer the last step had not
// seen touched, and the next layer's first kernel waited on the GPU for
// that copy, 30 ms behind layer 0's (replayed under a budget the link can
// hide, 3 steps in 5 took 1.26x the step without aoshim). A buffer kept
// from going early is copied at its release point, as before early copies.
static void learn_touched(ao_scope_t *s)
{
    const ao_learn_t *was = &ao_eng.learned[s->layer];
    if (s->plan != was) return; // another layer's record stood in for this one's
    for (unsigned i = 0; i < s->rec.n && i < was->n; i++)
        if (was->size[i] == s->rec.size[i]) s->rec.flags[i] |= was->flags[i] & LEARN_TOUCHED;
}

// An event after a chunk's copies out, in *ev, and their place in the
// order the copies were queued (ao_wait_one_release waits for the first).
static void out_mark(ao_chunk_t *c, CUevent *ev)
{
    static uint64_t seq;
    ao_event_put(*ev, false);
    *ev = ao_ev_record(ao_eng.d2h, false);
    c->out_seq = ++seq;
}

// The copies of the buffers chosen, and the watch of the layer's chunks.
static void early_start(ao_scope_t *s)
{
    bool watch = early_ok(s) && layer_selected(s->layer);
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        c->watched = watch && early_chunk(c);
        for (ao_buffer_t *b = c->buffers; b; b = b->next)
            b->early = b->early && c->watched;
        if (c->watched) ao_chunk_set(c, AO_RESIDENT);
    }
    if (!watch) return;
    ao_eng.early_watches[s->layer]++;
    // Every launch checked before the watch has enqueued, then slots.
    ao_scan_quiesce();
    uint64_t bytes = 0;
    for (ao_chunk_t *c = s->chunks; c; c = c->next)
        for (ao_buffer_t *b = c->buffers; b; b = b->next) {
            if (!b->early) continue;
            if (ao_host_alloc(b->size, &b->host) != AO_HOST_OK) {
                b->host = NULL;
                b->early = false; // copied at the release point, or kept then
                continue;
            }
            bytes += b->size;
        }
    if (!bytes) return;
    // After every use enqueued so far, on every stream (the layer's writes
    // come before its end), and after the reloads that read host slots.
    ao_gpu_wait(ao_eng.d2h, ao_eng.last_reload);
    for (int i = -1; i < ao_eng.nstreams; i++) {
        CUstream st = i < 0 ? s->stream : ao_eng.streams[i];
        if (i >= 0 && st == s->stream) continue;
        CUevent e = ao_ev_record(st, false); // none: the host waited for st
        ao_gpu_wait(ao_eng.d2h, e);
        ao_event_put(e, false);
    }
    CUevent t0 = ao_ev_record(ao_eng.d2h, true);
    bytes = 0;
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        bool any = false;
        for (ao_buffer_t *b = c->buffers; b; b = b->next) {
            if (!b->early) continue;
            if (ao_real.cuMemcpyDtoHAsync_v2(b->host, b->addr, b->size, ao_eng.d2h) !=
                CUDA_SUCCESS) {
                ao_host_free(b->host, b->size); // nothing was queued into it
                b->host = NULL;
                b->early = false; // copied at the release point
                continue;
            }
            bytes += b->size;
            any = true;
        }
        if (!any) continue;
        // The copies read the chunk: a release waits for them (ao_chunk_retire).
        out_mark(c, &c->ev_copy);
        if (!c->ev_copy) c->free_unordered = true; // (no event: see ao_free_events_done)
    }
    if (!bytes) {
        ao_event_put(t0, true);
        return;
    }
    ao_timed_add(t0, ao_ev_record(ao_eng.d2h, true), AO_REC_D2H, s->layer, s->mb, bytes);
    ao_rec_early_copy(s->layer, s->mb);
    ao_stat_add(AO_STAT_EARLY_COPY_BYTES, (int64_t)bytes);
}

// A watched chunk that is not copied out at its release point (the schedule
// passed it over, its backward came first, no host memory): its early copies
// still read it, so a stream that uses it next waits for them once (as after
// a cancelled offload), and their host slots go back once they are done.
void ao_early_undo(ao_chunk_t *c)
{
    if (!c->watched) return;
    c->watched = false;
    bool any = false;
    for (ao_buffer_t *b = c->buffers; b; b = b->next) {
        if (!b->early) continue;
        any = true;
        b->early = b->dirty = false;
        if (b->host) defer_host_slot(b);
    }
    if (any) {
        ao_set_safe_stream(c, NULL);
        c->reloaded = true;
    }
    ao_chunk_set(c, c->state);
}

static void early_undo_scope(ao_scope_t *s)
{
    for (ao_chunk_t *c = s->chunks; c; c = c->next)
        ao_early_undo(c);
}

// A buffer copied early was used before its release point. In a layer's
// first watch that is how the step learns the next layer's uses; after it,
// the uses were not those of the steps before: the H200 Llama's recorded
// step has a word in a copy kernel's parameters that lands inside a
// different buffer of layers 1 and 2 from one step to the next, at no
// buffer's start, and each step the next layer waited on the GPU for that
// layer's early copies, queued behind the layer before's on the link
// (replayed under the budget its link hides: 30 ms, steps 4 and 5 of 8 at
// 1.27x the step without aoshim, against 1.11x). Such a layer's copies
// start at its release point from then on: its link time is the same
// (the link is busy with the layers before it), its uses are free.
static void early_unlearnt(const ao_scope_t *s)
{
    ao_stat_add(AO_STAT_EARLY_COPIED_AGAIN, 1);
    const int l = s->layer;
    if (l >= 0 && l < AO_MAX_LAYERS && ao_eng.early_watches[l] > 1 && !early_off(l)) {
        ao_eng.early_off[l / 64] |= 1ull << (l % 64);
        ao_stat_add(AO_STAT_EARLY_OFF_LAYERS, 1);
        if (ao_config.verbose)
            ao_log(AO_LOG_INFO,
                   "layer %d: a buffer copied out at its end was used before its release point, "
                   "where the steps before had not used it; its copies start at its release "
                   "point from now on",
                   l);
    }
}

// Copy a chunk out: every live buffer gets a host slot, or none is copied
// (the chunk is unmapped as a whole, so it goes as a whole).
// Host slots for every live buffer of a chunk, or none (the chunk then stays).
// Pinning new host memory is slow: done before the copies are timed.
static bool offload_prepare(ao_chunk_t *c)
{
    if (c->state != AO_RESIDENT || !c->nlive || c->stays) return false;
    if (c->graph_pins) {
        ao_stat_add(AO_STAT_KEPT_GRAPH, 1);
        return false;
    }
    if (chunk_has_kept(c)) {
        ao_stat_add(AO_STAT_KEPT_BY_USER, 1);
        return false;
    }
    for (ao_buffer_t *b = c->buffers; b; b = b->next) {
        if (b->freed || b->early) continue; // an early copy's slot is taken
        int h = ao_host_alloc(b->size, &b->host);
        if (h == AO_HOST_OK) continue;
        b->host = NULL;
        ao_early_undo(c);
        ao_host_slots_free(c);
        if (h == AO_HOST_LIMIT) {
            ao_stat_add(AO_STAT_KEPT_HOST_LIMIT, c->nlive);
            WARN_ONCE("AOSHIM_HOST_LIMIT reached: some layers stay on the device");
        } else {
            ao_stat_add(AO_STAT_KEPT_PIN_FAILED, c->nlive);
            WARN_ONCE("pinning host memory failed: some layers stay on the device");
        }
        return false;
    }
    return true;
}

// Queue a prepared chunk's copies on the offload stream; the bytes that go
// (*now: those copied now, not at the layer's end). The chunk may go once
// its own copies are done (ao_poll_locked): those queued now (ev_out), or,
// when every one was made at the layer's end, those (out_early: ev_copy,
// recorded after them by early_start).
static uint64_t offload_chunk(ao_chunk_t *c, unsigned *buffers, uint64_t *now)
{
    uint64_t bytes = 0, before = *now;
    for (ao_buffer_t *b = c->buffers; b; b = b->next) {
        if (b->freed) continue;
        // Copied at the layer's end and unused since: its host copy stands.
        bool copied = b->early && !b->dirty;
        if (b->early && b->dirty) early_unlearnt(c->scope);
        b->early = b->dirty = false;
        if (!copied) {
            if (ao_real.cuMemcpyDtoHAsync_v2(b->host, b->addr, b->size, ao_eng.d2h) !=
                CUDA_SUCCESS) {
                // The chunk must stay: the copies queued before this one still
                // run, and their slots are freed once the offload stream is past.
                WARN_ONCE("offload copy failed: the layer stays on the device");
                ao_cancel_chunk(c);
                return 0;
            }
            *now += b->size;
        }
        bytes += b->size;
        (*buffers)++;
        ao_stat_add(AO_STAT_OFFLOADED_BUFFERS, 1);
    }
    c->out_early = bytes && *now == before;
    if (!c->out_early) out_mark(c, &c->ev_out);
    return bytes;
}

// AOSHIM_BUDGET was given (bytes or a share of the device).
bool ao_budget_given(void)
{
    return ao_config.budget.bytes || ao_config.budget.percent;
}

// Whether the schedule offloads this layer now. In the first step of auto,
// only once the device holds nearly the budget (ao_sched_now.min_held and its margin).
static bool layer_selected(int layer)
{
    if (layer < 0 || layer >= AO_MAX_LAYERS || !ao_sched_now.layer[layer].offload) return false;
    if (!ao_sched_now.min_held) return true;
    uint64_t margin = (uint64_t)ao_sched_now.margin_layers * ao_eng.max_saved;
    uint64_t at = ao_sched_now.min_held > margin ? ao_sched_now.min_held - margin : 0;
    if (at < ao_sched_now.min_held_floor) at = ao_sched_now.min_held_floor;
    if (ao_stat_get(AO_STAT_PASSTHROUGH_BYTES) + ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES) >= at)
        return true;
    // A budget the program gave is the device's count: the pool's unused
    // reserve and the context's memory count too (a driver query per layer,
    // in this step). The default budget (the free memory, less 5%) is the
    // device's edge, which the safety net keeps: there a step that fits by
    // its allocations moves nothing while it is measured.
    return ao_budget_given() && ao_device_in_use() >= at;
}

// The measuring step under a given budget, once the device holds nearly
// the budget (layer_selected said yes): the layers before, passed over
// while it held less, go too (a late copy is as safe as any: every use
// enqueued so far comes first); the host waits for their copies and
// releases, and the memory they gave back, aoshim's idle physical memory,
// which the program's own allocator cannot use, goes to the driver (the
// next step maps it again, once). On the H200's GPT (gpu-check, budget 25%
// under the need) the forward makes a layer's 0.87 GiB in about 3 ms and
// the link takes 17 ms to carry it: copies started near the budget alone
// came too late (20.22 GiB against 17.29 in the first step; replayed, 15.33
// with this). This step is slower; the plan's steps are not.
// The measuring step (auto, no plan yet) under a budget the program gave.
static bool measuring_under_budget(void)
{
    return ao_sched_now.min_held && !ao_eng.manual && ao_budget_given();
}

// A layer of microbatch mb's forward that its release point passed over,
// still on the device.
static bool passed_over(const ao_scope_t *s, int mb)
{
    return s->mb == mb && s->skipped && !s->recompute && s->state == AO_RESIDENT &&
           ao_eng.phase[mb] == PHASE_FORWARD;
}

// Layers passed over were sent: the host waits for their copies and
// releases, and aoshim's idle memory goes to the driver.
static void caught_up(void)
{
    ao_auto.caught_up = true;
    ao_drain_locked();
    ao_idle_give_back();
}

static void measuring_catch_up(const ao_scope_t *now)
{
    static bool busy; // the layers caught up come through ao_offload too
    if (!measuring_under_budget() || busy) return;
    busy = true;
    bool any = false;
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
        if (s != now && passed_over(s, now->mb) && s->layer < now->layer) {
            s->skipped = false;
            ao_offload(s);
            any = true;
        }
    busy = false;
    if (!any && ao_device_in_use() < ao_sched_now.min_held) return;
    caught_up();
}

// The measuring step under a given budget, past its last layer (its head:
// the loss and its logits), where no layer boundary comes: a served
// allocation that would take the device over the budget first sends the
// layers passed over, oldest first, until their bytes cover the excess,
// and waits for their copies and releases (as measuring_catch_up). On the
// replayed H200 GPT under a budget 25% under the need (19.40 GiB) the
// forward stayed under the margin with every layer on the device, then the
// head's 3.2 GiB of logits took the measuring step to 20.23 GiB.
void ao_measuring_room(size_t size)
{
    const int mb = ao_eng.mb;
    if (!measuring_under_budget() || ao_eng.open || ao_eng.phase[mb] != PHASE_FORWARD ||
        !ao_eng.scopes)
        return;
    uint64_t in_use = ao_device_in_use(), need = in_use + AO_PAGE_ROUND(size);
    if (need <= ao_sched_now.min_held) return;
    uint64_t over = need - ao_sched_now.min_held, sent = 0;
    while (sent < over) {
        ao_scope_t *oldest = NULL;
        for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
            if (passed_over(s, mb) && s->ended && (!oldest || s->layer < oldest->layer)) oldest = s;
        if (!oldest) break;
        uint64_t bytes = 0;
        for (ao_chunk_t *c = oldest->chunks; c; c = c->next)
            bytes += c->mapped ? c->size : 0;
        oldest->skipped = false; // not picked again, whatever ao_offload does
        ao_offload(oldest);
        if (oldest->state != AO_RESIDENT) sent += bytes;
    }
    if (sent) caught_up();
}

// The measuring step keeps its layers' memory in aoshim's handles through
// the backward, for the next layer and step to reuse. But a step may peak
// after its backward, in the optimizer, whose transients the program's pool
// serves: held there, the handles add the layers' memory to that peak (the
// 24-layer GPT at batch 1, replayed under auto: 32.50 GB in use against
// 27.27 without aoshim, 5.6 GiB of layers on top of AdamW's peak). So once
// the measuring step's backward is over, the copies under way end and the
// idle handles go to the driver, where the optimizer's transients find
// them. Not under a given budget: there the measuring step has already
// given back what the budget needed (measuring_catch_up), and the pool
// keeps what the optimizer takes (PyTorch sets its release threshold to the
// maximum), so the next forward would need the layers' memory anew beside
// it (gpu-check's GPT under its budget: 12 GiB held beyond the allocations
// in the next step, the budget missed by a third; trimming the pool as that
// forward begins only moved the excess into that step's optimizer, where
// the pool grew again beside aoshim's handles).
static void measuring_yields(void)
{
    if (ao_eng.manual || !ao_auto.on || ao_eng.steps != 0 || ao_auto.yielded || ao_budget_given())
        return;
    ao_drain_locked();
    ao_idle_give_back();
    ao_auto.yielded = true;
}

// The schedule offloads no layer at all (none, 0, 0%, a list of none, a plan
// of nothing); known from the start for a set naming no layer, otherwise
// once the layer count is.
bool ao_offloads_nothing(void)
{
    return ao_sched_now.none;
}

// Copy a layer out at its release point: every kernel that reads its
// outputs in this forward pass has been enqueued (the next layer has ended),
// and so has every write the program made to them since its layer_end (a
// fused residual update of the previous layer's output, an in-place set):
// the copies start after all of it, on the GPU, whatever the stream. From
// here on any use is the engine's business (the scan sees the chunk away
// and cancels the offload, keeping the device copy), so no write can be
// lost. The cost: a layer's copy starts one layer later than its end.
static void offload_scope(ao_scope_t *s);

// Callers walk the scopes: none goes while this one offloads (a catch-up
// below drains the copies, and the poll there frees scopes left empty).
void ao_offload(ao_scope_t *s)
{
    ao_eng.scope_hold++;
    offload_scope(s);
    ao_eng.scope_hold--;
}

static void offload_scope(ao_scope_t *s)
{
    s->offload_pending = false;
    if (!(ao_eng.manual ? s->wanted : layer_selected(s->layer))) {
        s->skipped = true;
        early_undo_scope(s);
        return;
    }
    if (!ao_eng.manual && ao_sched_now.min_held) measuring_catch_up(s);
    bool any = false;
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        c->prepared = offload_prepare(c);
        if (!c->prepared) ao_early_undo(c);
        any |= c->prepared;
    }
    if (!any) return;
    ao_event_put(s->ev_release, false);
    s->ev_release = ao_ev_record(s->stream, false);
    s->release_recorded = true;
    // Mark the chunks away, let every launch checked before that enqueue,
    // then take a point on every stream: the copies and the release wait for
    // all of them.
    for (ao_chunk_t *c = s->chunks; c; c = c->next)
        if (c->prepared) {
            // A launch that the engine let use the chunk as it was (a watched
            // chunk's use) and has not enqueued yet checks it again.
            __atomic_fetch_add(&c->waive_gen, 1, __ATOMIC_SEQ_CST);
            c->watched = false;
            ao_chunk_set(c, AO_OFFLOADING);
        }
    ao_scan_quiesce();
    ao_gpu_wait(ao_eng.d2h, s->ev_release);
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        if (!c->prepared) continue;
        for (int i = 0; i < ao_eng.nstreams; i++)
            if (ao_eng.streams[i] != s->stream) ao_free_event(c, ao_eng.streams[i]);
        for (int i = 0; i < c->nfree_ev; i++)
            ao_gpu_wait(ao_eng.d2h, c->free_ev[i]);
    }
    // Host slots freed after a reload may be refilled now: the copies out
    // follow the copies back on the GPU, whichever host thread freed them.
    ao_gpu_wait(ao_eng.d2h, ao_eng.last_reload);
    CUevent t0 = ao_ev_record(ao_eng.d2h, true);
    uint64_t bytes = 0, now = 0; // (those copied early were timed then)
    unsigned buffers = 0;
    for (ao_chunk_t *c = s->chunks; c; c = c->next)
        if (c->prepared) bytes += offload_chunk(c, &buffers, &now), c->prepared = false;
    if (!bytes) {
        ao_event_put(t0, true);
        return;
    }
    ao_event_put(s->ev_copied, false);
    s->ev_copied = ao_ev_record(ao_eng.d2h, false);
    if (now)
        ao_timed_add(t0, ao_ev_record(ao_eng.d2h, true), AO_REC_D2H, s->layer, s->mb, now);
    else
        ao_event_put(t0, true);
    ao_rec_offload(s->layer, s->mb, buffers, bytes);
    ao_stat_add(AO_STAT_LAYERS_OFFLOADED, 1);
    s->state = AO_OFFLOADING;
}

// The release point of a microbatch's ended forward layers (but except):
// their copies out start now. At backward_begin (except NULL) nothing is
// copied: those layers are needed at once.
//
// In the first step the layer count is not known: a layer whose release point
// has passed may still be among the last, whose backward (and reload) comes
// at once, so its copy waits for the next layer_begin, which proves the
// forward goes on (copies issued later are still after every earlier write).
// In the manual schedule the program has said which layers go: a layer it
// named is copied at its release point, one not (yet) named waits for it.
//
// A schedule may start a copy later than its release point (copy_at), and
// may give a layer's memory back at a set layer's end, the compute stream
// waiting for the copy there (release_at), as TransformerEngine does.
static void release_due(int mb, const ao_scope_t *at);

static void release_point(int mb, const ao_scope_t *except)
{
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
        if (s->mb == mb && s != except && s->offload_pending) {
            int at = ao_sched_now.layer[s->layer].copy_at;
            if (!except)
                s->offload_pending = false, early_undo_scope(s);
            else if (ao_eng.manual ? !s->wanted : ao_eng.nlayers == 0)
                s->release_passed = true;
            else if (ao_eng.manual || at <= s->layer + 1 || at <= except->layer)
                ao_offload(s);
        }
    if (except && !ao_eng.manual && ao_eng.nlayers > 0 && ao_sched_now.release_waits)
        release_due(mb, except);
}

// The memory of the copies the schedule gives back at the end of this
// layer: the compute stream waits for each copy, and the host (as
// aoshim_release_layer does) before the unmap.
static void release_due(int mb, const ao_scope_t *at)
{
    // (Not timed: the report's waits are the reloads' under aoshim's
    // timing, which never waits for a copy out; here the step time shows it.)
    bool any = false;
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next) {
        int r = ao_sched_now.layer[s->layer].release_at;
        if (s->mb != mb || s->recompute || r < 0 || r > at->layer || s->state != AO_OFFLOADING)
            continue;
        ao_gpu_wait(at->stream, s->ev_copied);
        ao_release_sync(s);
        any = true;
    }
    if (any) ao_poll_locked();
}

// The host waits for a layer's copy out, so that the next poll gives its
// memory back.
void ao_release_sync(const ao_scope_t *s)
{
    if (s->state != AO_OFFLOADING || !s->release_recorded) return;
    if (s->ev_copied) ao_ev_wait(s->ev_copied);
    if (s->ev_release) ao_ev_wait(s->ev_release);
}

// A layer_begin in the first step: copies whose release point has passed go.
static void forward_goes_on(int mb)
{
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
        if (s->mb == mb && s->offload_pending && s->release_passed && (!ao_eng.manual || s->wanted))
            ao_offload(s);
}

// Keep a chunk whose offload is cancelled: its copies still read it (a free
// must wait for them: ev_copy) and fill its host slots (given back after).
void ao_cancel_chunk(ao_chunk_t *c)
{
    ao_event_put(c->ev_copy, false);
    c->ev_copy = ao_ev_record(ao_eng.d2h, false);
    if (!c->ev_copy) c->free_unordered = true; // (no event: see ao_free_events_done)
    defer_host_slots(c);
    ao_set_safe_stream(c, NULL);
    // The copies still read it: every stream that uses it from now on waits
    // for them first (on the GPU, once), as after a reload. A kernel that
    // writes it must not run under a copy still reading.
    c->reloaded = true;
    ao_chunk_set(c, AO_RESIDENT);
    ao_stat_add(AO_STAT_OFFLOADS_CANCELLED, 1);
}

// Bring a scope back. Returns 0, or AOSHIM_ESTATE if some chunk could not
// get device memory (its data stays safe in host memory).
int ao_reload(ao_scope_t *s, bool missed, bool prefetch, bool small_later)
{
    int rc = 0;
    uint64_t bytes = 0;
    unsigned buffers = 0;
    bool any = false;
    // A prefetch with a boundary to go maps its chunks of a page or more now
    // and leaves those under a page for the next boundary. A chunk under a
    // page cannot borrow a kept page (a handle maps whole, chunk.c's lend):
    // it costs a page unmapped and given back, and a handle made, about
    // 95 us of the host's on the H200; and the first of them made the host
    // wait for the oldest kept mapping's last uses. train_step --pytorch's
    // reload of layer 0's part (4, 128, 128, 8, 8 and 2 MiB chunks) at layer
    // 6's backward waited 0.25 ms so and mapped for 0.84 ms, while the GPU,
    // its queue run dry, idled 0.70 ms. At the next boundary the host is
    // ahead again, and the link still carries the large chunks.
    const bool rest = s->small_later; // this call brings what one left
    bool large = false;
    for (ao_chunk_t *c = s->chunks; c && small_later && !large; c = c->next)
        large = c->state == AO_OFFLOADED && c->size >= AO_PAGE;
    s->small_later = false;
    // Each chunk's copies go as soon as it is mapped: mapping the next may
    // wait on the host for a release, or take the host a mapping per page,
    // while the link carries this one. Mapped all first, train_step
    // --pytorch's reload of layer 0's part (six chunks) began 0.8 ms of the
    // host's mapping late, and its backward waited for it on the link. Each
    // chunk's copies are timed on their own for the link's rate, so that a
    // wait of the host's between two chunks is not taken for the link's
    // time; the reload's interval (the report's) spans them all.
    CUevent first = NULL;
    for (ao_chunk_t *c = s->chunks; c; c = c->next) {
        if (large && c->state == AO_OFFLOADED && c->size < AO_PAGE) {
            s->small_later = true;
            continue;
        }
        if (c->state == AO_OFFLOADING) { // not released yet: the device copy is intact
            ao_cancel_chunk(c);
            continue;
        }
        if (c->state != AO_OFFLOADED) continue;
        CUresult r = ao_chunk_map(c, AO_BY_STREAM(ao_eng.h2d)); // the copy back orders it
        if (r != CUDA_SUCCESS) {
            ao_stat_add(AO_STAT_KEPT_NO_DEVICE_SPACE, 1);
            if (r == CUDA_ERROR_OUT_OF_MEMORY)
                WARN_ONCE("out of device memory reloading layer %d (microbatch %d): %zu bytes "
                          "stay in host memory; work that needs them is refused",
                          s->layer, s->mb, c->size);
            else
                WARN_ONCE("mapping device memory failed (CUDA error %d) reloading layer %d "
                          "(microbatch %d): %zu bytes stay in host memory; work that needs "
                          "them is refused",
                          (int)r, s->layer, s->mb, c->size);
            rc = AOSHIM_ESTATE;
            continue;
        }
        // The copy back reads host slots the copy out wrote, and writes
        // memory the last uses before the release read: ordered on the GPU
        // too, whichever host thread saw those complete. Every wait comes
        // before the timing event, so the time is the copies'.
        if (!any) {
            ao_gpu_wait(ao_eng.h2d, s->ev_copied);
            ao_gpu_wait(ao_eng.h2d, s->ev_release);
        }
        for (int i = 0; i < c->nfree_ev; i++)
            ao_gpu_wait(ao_eng.h2d, c->free_ev[i]);
        if (!first) first = ao_ev_record(ao_eng.h2d, true);
        CUevent t0 = ao_ev_record(ao_eng.h2d, true);
        uint64_t cbytes = 0;
        unsigned cbuffers = 0;
        CUresult cr = CUDA_SUCCESS;
        for (ao_buffer_t *b = c->buffers; b && cr == CUDA_SUCCESS; b = b->next) {
            if (b->freed || !b->host) continue;
            cr = ao_real.cuMemcpyHtoDAsync_v2(b->addr, b->host, b->size, ao_eng.h2d);
            if (cr != CUDA_SUCCESS) // once more: the failure may have been passing
                cr = ao_real.cuMemcpyHtoDAsync_v2(b->addr, b->host, b->size, ao_eng.h2d);
            cbytes += b->size;
            cbuffers++;
        }
        if (cr != CUDA_SUCCESS) {
            // Never a resident chunk with wrong bytes: the copies already
            // queued into it finish, it is unmapped again, and its data
            // stays in host memory, to be reloaded when it is next used.
            WARN_ONCE("reload copy failed (CUDA error %d) for layer %d (microbatch %d): its data "
                      "stays in host memory and is reloaded when next used",
                      (int)cr, s->layer, s->mb);
            ao_event_put(t0, true);
            ao_real.cuStreamSynchronize(ao_eng.h2d);
            ao_chunk_unmap(c);
            ao_chunk_set(c, AO_OFFLOADED);
            rc = AOSHIM_ESTATE;
            continue;
        }
        ao_timed_add(t0, ao_ev_record(ao_eng.h2d, true), TIMED_H2D_LINK, s->layer, s->mb, cbytes);
        any = true;
        ao_rec_memory(s->layer, (int64_t)c->size, -(int64_t)c->size);
        for (ao_buffer_t *b = c->buffers; b; b = b->next)
            if (!b->freed && b->host) ao_rec_site(b->site, (int64_t)b->size, 0);
        bytes += cbytes;
        buffers += cbuffers;
        ao_set_safe_stream(c, NULL);
        c->reloaded = true;
        c->prefetched = prefetch;
        ao_chunk_set(c, AO_RELOADING);
    }
    if (any) {
        ao_event_put(s->ev_reloaded, false);
        s->ev_reloaded = ao_ev_record(ao_eng.h2d, false);
        s->reload_unordered = !s->ev_reloaded; // (ao_wait_reload)
        if (ao_eng.last_reload) ao_ev_rerecord(ao_eng.last_reload, ao_eng.h2d);
        ao_timed_add(first, ao_ev_record(ao_eng.h2d, true), AO_REC_H2D, s->layer, s->mb, bytes);
        first = NULL;
        ao_rec_reload(s->layer, s->mb, buffers, bytes, missed, rest);
        s->state = AO_RELOADING;
        ao_stat_add(AO_STAT_RELOADED_BYTES, (int64_t)bytes);
    } else if (s->state == AO_OFFLOADING) {
        s->state = AO_RESIDENT;
    }
    ao_event_put(first, true); // (a first chunk whose copy failed)
    return rc;
}

// --- the schedule carried out (offload/sched.h; the plan it follows: auto.c) --------------
void ao_sched_update(void)
{
    ao_sched_in_t in = {
        .cfg = &ao_config,
        .nlayers = ao_eng.nlayers,
        .plan = ao_auto.on && ao_auto.planned ? &ao_auto.plan : NULL,
        .budget = ao_auto.budget,
        .late_from = ao_auto.late ? ao_auto.late_from : -1,
        .interleaved = ao_auto.interleaved,
    };
    ao_sched_make(&in, &ao_sched_now);
    if (ao_config.schedule == AO_SCHEDULE_TE && ao_eng.nlayers > 0 &&
        ao_config.offload_layers.count > (unsigned)ao_eng.nlayers - 1)
        WARN_ONCE("AOSHIM_SCHEDULE=te: AOSHIM_OFFLOAD_LAYERS=%u of %d layers; TransformerEngine's "
                  "schedule offloads at most %d (the last layer stays)",
                  ao_config.offload_layers.count, ao_eng.nlayers, ao_eng.nlayers - 1);
}

// --- the control API ------------------------------------------------------------------------
int ao_engine_enter(void)
{
    if (ao_engine_off) return AOSHIM_EDISABLED;
    ao_engine_thread_seen();
    if (ao_engine_declined) {
        WARN_ONCE("not offloading: %s", ao_engine_declined);
        return AOSHIM_EDISABLED;
    }
    pthread_mutex_lock(&ao_eng.mu);
    // A control call never brings CUDA up by itself: retaining the primary
    // context costs hundreds of MB of device memory, which a CPU-only run
    // under the shim (PyTorch without a GPU, the Python hooks still calling)
    // must not pay. Until the program uses CUDA the boundaries are kept and
    // checked without the driver (nothing can be tracked, so nothing needs
    // an event); the engine comes up at the program's first allocation,
    // which may be inside a layer already begun.
    bool cuda = ao_eng.ready || __atomic_load_n(&ao_cuda_touched, __ATOMIC_RELAXED);
    if (cuda && !ao_engine_ensure_ready()) {
        pthread_mutex_unlock(&ao_eng.mu);
        return AOSHIM_EDISABLED;
    }
    ao_poll_locked();
    return 0;
}

int ao_engine_leave(int rc)
{
    pthread_mutex_unlock(&ao_eng.mu);
    return rc;
}

bool ao_fwd_ran(int layer, int mb)
{
    return ao_eng.fwd_ran[mb] && (ao_eng.fwd_ran[mb][layer / 64] >> (layer % 64)) & 1;
}

// A layer the schedule offloads in part: its largest saved buffers, as the
// same layer allocated them last step, go until at least part bytes do; the
// others stay (their chunks are never copied out). Without a record of the
// layer, all of it goes.
static const ao_learn_t *part_plan;
static int by_size_desc(const void *a, const void *b)
{
    uint64_t x = part_plan->size[*(const unsigned *)a], y = part_plan->size[*(const unsigned *)b];
    return x < y ? 1 : x > y ? -1 : 0;
}

static void choose_part(ao_scope_t *s, uint64_t part)
{
    const ao_learn_t *p = s->plan;
    if (!p || !p->n) return;
    unsigned *order = malloc(p->n * sizeof *order);
    s->stays = malloc(p->n);
    if (!order || !s->stays) {
        free(order);
        free(s->stays);
        s->stays = NULL;
        return;
    }
    unsigned n = 0;
    for (unsigned i = 0; i < p->n; i++) {
        s->stays[i] = 1;
        // Saved until its copy, tracked (not gone, not the real allocator's).
        if (!(p->flags[i] & LEARN_GONE) && !ao_learn_untracked(p->flags[i])) order[n++] = i;
    }
    part_plan = p;
    qsort(order, n, sizeof *order, by_size_desc);
    // The largest that fit within part, then the smallest one left that
    // makes up the rest (else the largest left, until part goes): the link
    // carries little more than the part (train_step --pytorch's layer 0,
    // a part of 300 MiB: 320 taking the largest until part, 300 now).
    s->part_goes = s->part_stays = 0;
#define RSIZE(i) ((p->size[order[i]] + AO_ALIGN - 1) & ~(uint64_t)(AO_ALIGN - 1))
    for (unsigned i = 0; i < n; i++)
        if (s->part_goes + RSIZE(i) <= part) s->stays[order[i]] = 0, s->part_goes += RSIZE(i);
    while (s->part_goes < part) {
        unsigned best = n;
        for (unsigned i = 0; i < n; i++)
            if (s->stays[order[i]] && RSIZE(i) >= part - s->part_goes) best = i; // smallest last
        for (unsigned i = 0; i < n && best == n; i++)
            if (s->stays[order[i]]) best = i; // none makes it up alone: the largest left
        if (best == n) break;
        s->stays[order[best]] = 0;
        s->part_goes += RSIZE(best);
    }
    for (unsigned i = 0; i < n; i++)
        if (s->stays[order[i]]) s->part_stays += RSIZE(i);
#undef RSIZE
    free(order);
}

int ao_engine_layer_begin(int layer)
{
    CHECK_ID("aoshim_layer_begin", layer, AO_MAX_LAYERS);
    ao_stat_add(AO_STAT_LAYER_BEGINS, 1); // the summary says when there were none
    int rc = ao_engine_enter();
    if (rc) return rc;
    if (ao_eng.open) {
        WARN_ONCE("aoshim_layer_begin(%d) while layer %d is open: layers do not nest", layer,
                  ao_eng.open->layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    bool recompute = ao_eng.phase[ao_eng.mb] == PHASE_BACKWARD;
    if (!recompute && !ao_eng.fwd_ran[ao_eng.mb])
        ao_eng.fwd_ran[ao_eng.mb] = calloc(AO_MAX_LAYERS / 64, sizeof *ao_eng.fwd_ran[ao_eng.mb]);
    ao_scope_t *s = calloc(1, sizeof *s);
    if (!s || (!recompute && !ao_eng.fwd_ran[ao_eng.mb])) {
        free(s);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    s->layer = layer;
    s->mb = ao_eng.mb;
    s->stream = ao_current_stream();
    s->thread = pthread_self();
    s->recompute = recompute;
    s->state = AO_RESIDENT;
    s->next = ao_eng.scopes;
    ao_eng.scopes = s;
    if (s->recompute) return ao_engine_leave(0); // recomputed in backward: never offloaded
    if (ao_eng.mb > ao_auto.max_mb) ao_auto.max_mb = ao_eng.mb;
    __atomic_store_n(&ao_stat_where_now, AO_WHERE_FORWARD + layer, __ATOMIC_RELAXED);
    ao_auto_op_record(layer, ao_eng.mb, false);
    ao_boundary_sample(true);      // the device for the report; the program's pool (auto)
    if (!ao_auto.live_start_set) { // what the program held as its first step began
        ao_auto.live_start = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
        ao_auto.live_start_set = true;
    }
    ao_eng.live[ao_eng.mb]++;
    forward_goes_on(ao_eng.mb);
    // Timed after the copies issued just above: pinning their host slots (a
    // first step's) is host time, not this layer's compute.
    if (ao_auto.timing && ao_eng.ready) s->ev_fwd0 = ao_ev_record(s->stream, true);
    ao_eng.fwd_ran[ao_eng.mb][layer / 64] |= 1ull << (layer % 64);
    if (layer > ao_eng.max_fwd_layer) ao_eng.max_fwd_layer = layer;
    // Plan from what this layer did last step; in the first step, and in a
    // step whose shapes changed (plan_reshape), from the layer before, which
    // ran with this step's (transformer layers repeat). A plan that does not
    // match the allocations (sizes differ) is simply not used.
    if (ao_eng.learned[layer].n && !(ao_auto.reshaped && layer > 0 && ao_eng.learned[layer - 1].n))
        s->plan = &ao_eng.learned[layer];
    else if (layer > 0 && ao_eng.learned[layer - 1].n)
        s->plan = &ao_eng.learned[layer - 1];
    if (!ao_eng.manual && ao_sched_now.layer[layer].offload && ao_sched_now.layer[layer].part)
        choose_part(s, ao_sched_now.layer[layer].part);
    // A policy that offloads nothing (from the start, or once the layer
    // count or the plan says so) costs nothing: the layers' allocations go
    // to the real allocator, and no chunk is mapped and unmapped each step.
    // While any layer is offloaded every layer stays tracked: the memory the
    // last layers free in backward is what the first ones are reloaded into
    // (passed through, it would sit in the real allocator's pool while
    // reloads took more: measured, the peak of 4 of 12 offloaded layers rose
    // by 17%). Served (serve.c), it would sit in the program's segments,
    // free space beside live buffers that a reload cannot take: the
    // sequence-doubling step under 1300M then found no memory to reload a
    // layer into. The manual schedule may name any layer.
    if (!ao_sched_now.name) ao_sched_update(); // a layer before the program's first CUDA call
    if (layer == 0 && ao_eng.mb == 0) ao_serve_decide(); // AOSHIM_SERVE=auto, as a forward begins
    s->passthrough = !ao_eng.manual && ao_offloads_nothing();
    if (s->passthrough && ao_auto.on) s->pt0 = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    // The tracked scopes' left over goes back, unless it serves the program.
    if (s->passthrough && !ao_serve_active() && (ao_idle_mapped || ao_phys_idle()))
        ao_idle_give_back();
    ao_eng.open = s;
    __atomic_store_n(&ao_engine_open_scope, s, __ATOMIC_RELEASE);
    return ao_engine_leave(0);
}

int ao_engine_layer_end(int layer)
{
    CHECK_ID("aoshim_layer_end", layer, AO_MAX_LAYERS);
    int rc = ao_engine_enter();
    if (rc) return rc;
    ao_scope_t *s = ao_eng.open;
    pthread_t self = pthread_self();
    if (!s) {
        for (ao_scope_t *r = ao_eng.scopes; r; r = r->next)
            if (r->recompute && !r->ended && r->layer == layer && r->mb == ao_eng.mb &&
                pthread_equal(r->thread, self)) {
                r->ended = true;
                return ao_engine_leave(0);
            }
        WARN_ONCE("aoshim_layer_end(%d) without aoshim_layer_begin(%d)", layer, layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    if (s->layer != layer) {
        WARN_ONCE("aoshim_layer_end(%d) while layer %d is open", layer, s->layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    // A layer belongs to the thread that began it: another thread ending it
    // would close it before its own kernels were enqueued.
    if (!pthread_equal(s->thread, self)) {
        WARN_ONCE("aoshim_layer_end(%d) from a thread that did not begin it: the layer stays open",
                  layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    ao_eng.open = NULL;
    __atomic_store_n(&ao_engine_open_scope, NULL, __ATOMIC_RELEASE);
    // Learn the layer for the next step: which allocations were temporaries
    // or kept, and how much it saves.
    s->rec.saved = 0;
    for (ao_chunk_t *c = s->chunks; c; c = c->next)
        for (ao_buffer_t *b = c->buffers; b; b = b->next) {
            if (b->freed) continue;
            if (b->kept)
                s->rec.flags[b->seq] |= LEARN_KEPT;
            else
                s->rec.saved += b->rsize;
        }
    if (s->rec.saved > ao_eng.max_saved) ao_eng.max_saved = s->rec.saved;
    early_choose(s);
    learn_touched(s);
    if (s->passthrough) { // nothing tracked: what was learned when it was stays
        ao_learn_free(&s->rec);
    } else {
        ao_learn_free(&ao_eng.learned[layer]);
        ao_eng.learned[layer] = s->rec;
        if (ao_auto.on)
            ao_auto.cur[layer] += s->rec.saved, ao_auto.tracked[layer / 64] |= 1ull << (layer % 64);
    }
    ao_boundary_sample(true);
    if (ao_auto.on) ao_auto_check_shapes(s);
    if (s->ev_fwd0)
        ao_timed_add(s->ev_fwd0, ao_ev_record(s->stream, true), TIMED_FWD, layer, s->mb, 0);
    s->ev_fwd0 = NULL;
    memset(&s->rec, 0, sizeof s->rec);
    s->plan = NULL;
    free(s->stays);
    s->stays = NULL;
    // Ended only now: a scope ended with no chunk goes at the next poll
    // (events.c), and a re-plan above polls (plan_take drains the copies):
    // ended before it, a layer whose buffers had all been freed went there,
    // and the lines above read it freed (train_step --pytorch, its sequence
    // doubled under a device too small for it: ASan's use after free, a heap
    // corrupted without it).
    s->ended = true;
    // This layer's kernels have read the previous layers' outputs: their
    // release point, where their copies out start. This one waits for its own.
    release_point(s->mb, s);
    s->offload_pending = true;
    early_start(s);
    // Until the next layer call: after the forward's last layer, the head
    // and the loss, where a peak is named as such.
    __atomic_store_n(&ao_stat_where_now, AO_WHERE_ENDED + layer, __ATOMIC_RELAXED);
    return ao_engine_leave(0);
}

int ao_engine_backward_begin(int layer)
{
    CHECK_ID("aoshim_backward_begin", layer, AO_MAX_LAYERS);
    int rc = ao_engine_enter();
    if (rc) return rc;
    int mb = ao_eng.mb;
    // Misuse changes nothing: every check comes before any state moves.
    if (ao_eng.open) {
        WARN_ONCE("aoshim_backward_begin(%d) inside forward layer %d: end the layer first", layer,
                  ao_eng.open->layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    if (ao_eng.bwd_open[mb]) {
        WARN_ONCE("aoshim_backward_begin(%d) while backward of layer %d is open", layer,
                  ao_eng.bwd_open[mb] - 1);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    if (ao_eng.phase[mb] == PHASE_FORWARD) {
        if (!ao_fwd_ran(layer, mb)) {
            WARN_ONCE("aoshim_backward_begin(%d): layer %d never ran forward (microbatch %d)",
                      layer, layer, mb);
            return ao_engine_leave(AOSHIM_ESTATE);
        }
        ao_eng.phase[mb] = PHASE_BACKWARD;
        if (ao_eng.max_fwd_layer + 1 > ao_eng.nlayers) {
            ao_eng.nlayers = ao_eng.max_fwd_layer + 1;
            ao_sched_update();
        }
    }
    release_point(mb, NULL);
    ao_eng.bwd_open[mb] = layer + 1;
    __atomic_store_n(&ao_stat_where_now, AO_WHERE_BACKWARD, __ATOMIC_RELAXED);
    ao_auto_op_record(layer, mb, true);
    ao_boundary_sample(false);
    if (ao_eng.live[mb] > 0) ao_eng.live[mb]--;
    // Backward of layer L reads L's saved buffers and its input, which layer
    // L-1 produced: both must be back. Prefetch brings L-2 .. L-1-d back
    // while L runs. One needed now but not yet reloaded is a missed prefetch;
    // its reload is still issued asynchronously.
    // Others come back as the schedule says (their reload point is this
    // backward or one already past); in the manual schedule, as the program
    // says. Scopes are newest first: the nearest layers are queued first,
    // and a layer's latest scope is the one its backward reads.
    CUstream cs = ao_current_stream();
    uint64_t seen[AO_MAX_LAYERS / 64] = {0};
    bool after_compute = ao_sched_now.reload_after_compute && !ao_eng.manual;
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next) {
        int l = s->layer;
        if (s->mb != mb || s->recompute || l > layer || (seen[l / 64] >> (l % 64)) & 1) continue;
        seen[l / 64] |= 1ull << (l % 64);
        if (s->state != AO_OFFLOADED && s->state != AO_OFFLOADING && !s->small_later) continue;
        bool needed = l >= layer - 1;
        if (!needed && (ao_eng.manual || ao_sched_now.layer[l].reload_at < layer)) continue;
        if (after_compute) { // after the compute stream's work so far (TransformerEngine)
            CUevent e = ao_ev_record(cs, false);
            ao_gpu_wait(ao_eng.h2d, e);
            ao_event_put(e, false);
            after_compute = false;
        }
        bool missed = needed && s->state == AO_OFFLOADED;
        if (missed) ao_stat_add(AO_STAT_PREFETCH_MISSED, 1);
        if (s->state == AO_OFFLOADING) ao_auto_copy_too_late(s);
        // Needed at layer l + 1's backward: a boundary to go unless that is the next.
        bool later = !needed && l + 1 < layer - 1;
        if (ao_reload(s, missed, !needed, later) != 0 && needed) rc = AOSHIM_ESTATE;
    }
    // Layers needed now are not taken back any more: their host copies go
    // once their reloads are complete.
    for (int l = layer; l >= layer - 1 && l >= 0; l--) {
        ao_scope_t *s = ao_scope_find(l, mb);
        for (ao_chunk_t *c = s ? s->chunks : NULL; c; c = c->next)
            ao_unprefetch(c);
    }
    // The stream that runs this backward waits on the GPU; the host goes on.
    CUevent w0 = NULL;
    for (int l = layer; l >= layer - 1 && l >= 0; l--) {
        ao_scope_t *s = ao_scope_find(l, mb);
        if (!s || s->state != AO_RELOADING) continue;
        if (!w0) w0 = ao_ev_record(cs, true);
        ao_wait_reload(cs, s);
        for (ao_chunk_t *c = s->chunks; c; c = c->next)
            if (c->state == AO_RELOADING) {
                ao_set_safe_stream(c, cs); // launches on cs need no more than this wait
                ao_chunk_set(c, AO_RELOADING);
            }
    }
    if (w0) ao_timed_add(w0, ao_ev_record(cs, true), AO_REC_WAIT, layer, mb, 0);
    if (ao_auto.timing && ao_eng.ready) { // the layer's backward compute, after its waits
        ao_event_put(ao_eng.bwd0[mb], true);
        ao_eng.bwd0[mb] = ao_ev_record(cs, true);
    }
    return ao_engine_leave(rc);
}

int ao_engine_backward_end(int layer)
{
    CHECK_ID("aoshim_backward_end", layer, AO_MAX_LAYERS);
    int rc = ao_engine_enter();
    if (rc) return rc;
    if (ao_eng.bwd_open[ao_eng.mb] != layer + 1) {
        WARN_ONCE("aoshim_backward_end(%d) without aoshim_backward_begin(%d)", layer, layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    ao_eng.bwd_open[ao_eng.mb] = 0;
    // After the backward once no microbatch has a layer left to go back
    // through (with microbatches, another's forward or backward may follow).
    bool after = true;
    for (int i = 0; i < AO_MAX_MB && after; i++)
        after = ao_eng.live[i] == 0 && !ao_eng.bwd_open[i];
    __atomic_store_n(&ao_stat_where_now, after ? AO_WHERE_AFTER : AO_WHERE_BACKWARD,
                     __ATOMIC_RELAXED);
    ao_boundary_sample(false);
    if (layer == 0) measuring_yields();
    if (ao_eng.bwd0[ao_eng.mb]) {
        ao_timed_add(ao_eng.bwd0[ao_eng.mb], ao_ev_record(ao_current_stream(), true), TIMED_BWD,
                     layer, ao_eng.mb, 0);
        ao_eng.bwd0[ao_eng.mb] = NULL;
    }
    return ao_engine_leave(0);
}

int ao_engine_step_end(void)
{
    int rc = ao_engine_enter();
    if (rc) return rc;
    if (ao_eng.open) { // misuse changes nothing: the layer stays open
        WARN_ONCE("aoshim_step_end() while layer %d is open: end the layer first",
                  ao_eng.open->layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    bool first = ao_eng.steps++ == 0;
    __atomic_store_n(&ao_stat_where_now, AO_WHERE_OUTSIDE, __ATOMIC_RELAXED);
    if (ao_eng.max_fwd_layer + 1 > ao_eng.nlayers) ao_eng.nlayers = ao_eng.max_fwd_layer + 1;
    for (int i = 0; i < AO_MAX_MB; i++) {
        ao_eng.phase[i] = PHASE_FORWARD;
        ao_eng.bwd_open[i] = 0;
        ao_eng.live[i] = 0;
        if (ao_eng.fwd_ran[i]) memset(ao_eng.fwd_ran[i], 0, AO_MAX_LAYERS / 8);
    }
    for (ao_scope_t *s = ao_eng.scopes; s; s = s->next) {
        if (s->offload_pending) early_undo_scope(s);
        s->offload_pending = false;
        s->ended = true;
    }
    ao_eng.mb = 0;
    int before = ao_auto.planned ? ao_auto.plan.count : ao_eng.nlayers;
    if (ao_eng.ready) ao_timed_read();
    ao_boundary_sample(false);
    if (ao_auto.on && ao_eng.ready && !ao_eng.manual)
        ao_auto_step(); // the manual schedule is the program's
    ao_sched_update();
    // No layer tracked from now on (a policy or a plan that offloads
    // nothing): the idle physical memory of the tracked steps goes back to
    // the driver, where the real allocator, which serves the layers now, can
    // have it; otherwise the step would hold both (serving, it is the
    // program's pool: kept). The host waits here, once, for the releases
    // under way.
    if (ao_eng.ready && (first || (ao_auto.on && ao_auto.plan.count < before)) &&
        ao_offloads_nothing()) {
        ao_drain_locked();
        if (!ao_serve_active()) ao_idle_give_back();
        ao_host_trim(); // and the host memory its copies pinned
    } else if (ao_eng.ready && ao_auto.reshaped) {
        ao_drain_locked();
        ao_auto_trim_to_learned();
    }
    ao_auto.reshaped = false;
    ao_rec_step();
    return ao_engine_leave(0);
}

int ao_engine_set_microbatch(int mb)
{
    CHECK_ID("aoshim_set_microbatch", mb, AO_MAX_MB);
    int rc = ao_engine_enter(); // a boundary like the others: releases are polled here too
    if (rc) return rc;
    if (ao_eng.open) {
        WARN_ONCE("aoshim_set_microbatch(%d) inside layer %d", mb, ao_eng.open->layer);
        return ao_engine_leave(AOSHIM_ESTATE);
    }
    int prev = ao_eng.mb;
    ao_eng.mb = mb;
    // Another microbatch while this one's layers wait for their backward
    // (GPipe, 1F1B; gradient accumulation ends each backward first): the
    // measuring step's margin widens, 'all' takes every layer but the last
    // (sched.h).
    if (mb != prev && ao_eng.live[prev] > 0 && !ao_auto.interleaved) {
        ao_auto.interleaved = true;
        ao_sched_update();
    }
    // Before a plan: what the schedule left of the other microbatches begun
    // so far is looked at again (the margin may have widened, the device
    // filled): each waits for this microbatch's forward at least, past its
    // release point (a late copy is as safe as any: every use enqueued so
    // far comes first). So do the layers whose copy waited for a next
    // layer_begin of their own microbatch, but never a last layer.
    if (ao_sched_now.min_held && mb != prev)
        for (ao_scope_t *s = ao_eng.scopes; s; s = s->next)
            if (s->mb != mb && !s->recompute && s->state == AO_RESIDENT &&
                ao_eng.phase[s->mb] == PHASE_FORWARD &&
                (s->skipped || (s->offload_pending && s->release_passed))) {
                s->skipped = false;
                ao_offload(s);
            }
    return ao_engine_leave(0);
}

int ao_engine_set_stream(CUstream s)
{
    if (ao_engine_off) return AOSHIM_EDISABLED;
    // 0 is the legacy default stream (PyTorch's current_stream().cuda_stream
    // on the default stream), which the launch hooks name CU_STREAM_LEGACY
    // (hook/runtime.c, stream_of): one name for one stream. Kept as NULL, a
    // reload's safe stream was "none", and every launch on the default
    // stream that touched a reloading layer waited again and counted as a
    // late reload (21 per reload on the H200).
    if (s == NULL) s = CU_STREAM_LEGACY;
    // A handle the driver does not know would be recorded on at the next
    // boundary: refuse it now. (Before the engine is up nothing is recorded
    // yet, and the driver may not even be loaded: it is taken as given.)
    // The legacy and per-thread pseudo-handles are always valid.
    if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD &&
        __atomic_load_n(&ao_eng.ready, __ATOMIC_ACQUIRE)) {
        // A handle is a pointer the driver reads: one that points at no
        // memory of this process would crash it, so ask the kernel first.
        long page = sysconf(_SC_PAGESIZE);
        unsigned char in_core;
        void *pg = (void *)((uintptr_t)s & ~(uintptr_t)(page - 1));
        unsigned flags; // a property query: harmless during a capture, unlike cuStreamQuery
        CUresult r = mincore(pg, (size_t)page, &in_core) != 0 ? CUDA_ERROR_INVALID_HANDLE
                                                              : ao_real.cuStreamGetFlags(s, &flags);
        if (r != CUDA_SUCCESS) {
            WARN_ONCE("aoshim_set_stream(%p): not a stream of this context (CUDA error %d)",
                      (void *)s, (int)r);
            return AOSHIM_EINVAL;
        }
    }
    ao_tls_stream_explicit = false;
    ao_engine_note_stream_slow(s);
    ao_tls_stream_explicit = true;
    return 0;
}

int ao_engine_keep(CUdeviceptr p)
{
    if (!p) return AOSHIM_EINVAL;
    if (ao_engine_off) return AOSHIM_EDISABLED;
    if (!ao_vmm_owns(p)) return 0; // not tracked: it is never offloaded anyway
    pthread_mutex_lock(&ao_eng.mu);
    ao_buffer_t *b = (ao_buffer_t *)(uintptr_t)ao_ptrmap_get(&ao_buffers, p);
    for (ao_scope_t *s = ao_eng.scopes; s && !b; s = s->next) // an interior pointer: search
        for (ao_chunk_t *c = s->chunks; c && !b; c = c->next)
            if (p - c->base < c->size)
                for (ao_buffer_t *x = c->buffers; x && !b; x = x->next)
                    if (!x->freed && p - x->addr < x->size) b = x;
    for (ao_scope_t *s = ao_eng.servers; s && !b; s = s->next) // the program's own (serve.c)
        for (ao_chunk_t *c = s->chunks; c && !b; c = c->next)
            if (p - c->base < c->size && c->buffers && !c->buffers->freed) b = c->buffers;
    int rc = 0;
    if (!b)
        rc = AOSHIM_ENOTFOUND;
    else if (b->chunk->served) {
        // the program's own allocation in aoshim's memory: never offloaded
    } else {
        b->kept = true;
        if (b->chunk->state == AO_OFFLOADED || b->chunk->state == AO_OFFLOADING) rc = AOSHIM_ESTATE;
    }
    pthread_mutex_unlock(&ao_eng.mu);
    if (rc == AOSHIM_ENOTFOUND) WARN_ONCE("aoshim_keep(%p): no live buffer there", (void *)p);
    if (rc == AOSHIM_ESTATE)
        WARN_ONCE("aoshim_keep(%p): the buffer is already offloaded; it comes back at its backward",
                  (void *)p);
    return rc;
}
