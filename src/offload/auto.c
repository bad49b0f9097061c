// SPDX-License-Identifier: MIT
// AOSHIM_OFFLOAD_LAYERS=auto: what the steps measured, the budget, and the
// plan made from them (the planner itself is plan.c). Under the engine's
// lock.
#include "offload/internal.h"

ao_auto_t ao_auto;

// The budget, from AOSHIM_BUDGET (b) and the device: b's bytes, or its share
// of total, or what was free at start (plus what the program already had,
// have, which counts against it too) less a headroom of 5% of the device (at
// least 256 MiB). UINT64_MAX when nothing is known: no limit, every plan fits.
uint64_t ao_auto_budget_of(const ao_share_t *b, uint64_t free_b, uint64_t total, uint64_t have)
{
    uint64_t headroom = total / 20 > (256ull << 20) ? total / 20 : 256ull << 20;
    uint64_t budget;
    if (b->bytes)
        budget = b->bytes;
    else if (b->percent)
        budget = total / 100 * b->percent;
    else
        budget = free_b + have > headroom ? free_b + have - headroom : 0;
    return budget ? budget : UINT64_MAX;
}

// The budget, once the device is known: the one driver query of the
// automatic plan, kept here at its edge.
void ao_auto_budget(void)
{
    size_t free_b = 0, total = 0;
    if (ao_real.cuMemGetInfo_v2(&free_b, &total) != CUDA_SUCCESS) total = free_b = 0;
    uint64_t have =
        ao_stat_get(AO_STAT_PASSTHROUGH_BYTES) + ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES);
    ao_auto.budget = ao_auto_budget_of(&ao_config.budget, free_b, total, have);
}

// --- the program's pool, as the driver counts it ---------------------------------------------
// The planner models allocations: what the program holds and aoshim maps.
// The driver counts more. A stream-ordered pool (cudaMallocAsync's, the
// device's default) keeps what the program frees until a synchronisation
// (PyTorch's, for good: its release threshold is the maximum), and its
// unused reserve between live blocks (freed temporaries it could not fit
// again) is memory in use all the same: on train_step's GPT-2-small shape,
// 82 MiB at the peak; a plan held to the budget by its allocations kept the
// device 2% over it. So the plan is held to the budget less that reserve.
//
// Sampled at layer boundaries: the pool's reserve less its live blocks
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, USED_MEM_CURRENT; the _HIGH marks
// are PyTorch's to read and reset, never aoshim's), added to aoshim's own
// count of the device then. The step's most of that, less the most aoshim
// counted (its allocation-level peak), is the reserve at the peak. Not the
// most the pool held unused: in backward the program frees its activations
// into the pool, which keeps them unused while its reserve stays where the
// peak left it; that is no memory added to the peak.
void ao_auto_pool_note(uint64_t reserved, uint64_t used)
{
    uint64_t held = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES) +
                    ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES) +
                    (reserved > used ? reserved - used : 0);
    if (held > ao_auto.pool_held) ao_auto.pool_held = held;
    ao_auto.pool_unused_now = reserved > used ? reserved - used : 0;
}

// The device's own count (total less free) at the same boundaries: beside
// the pool's reserve it holds what no allocation shows, the context's
// memory first (0.70 GiB on the H200 before the model, which a plan held to
// AOSHIM_BUDGET by allocations and pool left the device 3.7% over).
void ao_auto_device_note(uint64_t in_use)
{
    if (in_use > ao_auto.pool_held) ao_auto.pool_held = in_use;
}

// Total less free, as the driver counts it; 0 when it does not answer.
uint64_t ao_device_in_use(void)
{
    size_t free_b = 0, total = 0;
    if (ao_real.cuMemGetInfo_v2(&free_b, &total) != CUDA_SUCCESS || total <= free_b) return 0;
    return total - free_b;
}

// --- the device's memory, as the driver counts it, for the report ---------------------------
// Sampled at every layer boundary (under the engine's lock) and whenever
// the allocations reach a new high (ao_stat_device, any thread): the most
// seen is the report's peak (report/summary.c models the peak without
// offloading from it).
// The program's pool (the device's default one, which cudaMallocAsync
// serves): found once; NULL where the driver has none.
CUmemoryPool ao_program_pool(void)
{
    if (!ao_auto.pool && !ao_auto.pool_none) {
        CUmemoryPool p = NULL;
        if (ao_real.cuDeviceGetDefaultMemPool && ao_real.cuMemPoolGetAttribute &&
            ao_real.cuDeviceGetDefaultMemPool(&p, ao_vmm.device) == CUDA_SUCCESS && p)
            ao_auto.pool = p;
        else
            ao_auto.pool_none = true;
    }
    return ao_auto.pool;
}

// The pool's reserve and what of it is allocated; false if not known.
bool ao_pool_keeps(CUmemoryPool pool)
{
    cuuint64_t t = 0;
    return ao_real.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t) ==
               CUDA_SUCCESS &&
           t >= AO_SERVE_UNUSED_MIN;
}

bool ao_pool_figures(CUmemoryPool p, cuuint64_t *reserved, cuuint64_t *used)
{
    return p &&
           ao_real.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, reserved) ==
               CUDA_SUCCESS &&
           ao_real.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, used) == CUDA_SUCCESS;
}

static uint64_t device_sample(void)
{
    uint64_t in_use = ao_device_in_use();
    if (!in_use) return 0;
    ao_stat_max(AO_STAT_DEVICE_PEAK_BYTES, in_use);
    ao_stat_add(AO_STAT_DEVICE_SAMPLES, 1);
    return in_use;
}

// A new high of the allocations (stats.c calls it, any thread, once the
// engine is ready).
static void device_high(void)
{
    device_sample();
}

void ao_device_sampling_on(void)
{
    __atomic_store_n(&ao_stat_on_high, device_high, __ATOMIC_RELEASE);
    if (ao_auto.on)
        __atomic_store_n(&ao_stat_on_peak_without, ao_auto_live_at_peak, __ATOMIC_RELEASE);
}

// What the allocators hold on the device now: the program's allocations
// (passed through or tracked) and aoshim's idle memory, mapped or not.
// Under the engine's lock, which aoshim's idle memory is under.
static uint64_t allocators_hold(void)
{
    return ao_stat_get(AO_STAT_PASSTHROUGH_BYTES) + ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES) +
           ao_idle_mapped_bytes + ao_phys_idle();
}

// What the device holds beyond every allocator (the context, the
// libraries' own memory), and the program's pool's slack at its high: with
// the program's own allocations at their peak, the device without aoshim
// from the program's side (report/summary.c, ao_device_without_program).
// Under the engine's lock, which aoshim's idle memory is under.
static void others_sample(uint64_t in_use, CUmemoryPool p, cuuint64_t reserved, cuuint64_t used)
{
    uint64_t known = allocators_hold() + (reserved > used ? reserved - used : 0);
    uint64_t other = in_use > known ? in_use - known : 0;
    uint64_t was = ao_stat_get(AO_STAT_DEVICE_OTHER_MIN);
    if (!was || other + 1 < was)
        __atomic_store_n(&ao_stats[AO_STAT_DEVICE_OTHER_MIN], other + 1, __ATOMIC_RELAXED);
    // Latched: once seen keeping, not asked again at every boundary.
    if (p && !ao_stat_get(AO_STAT_POOL_KEEPS) && ao_pool_keeps(p))
        ao_stat_max(AO_STAT_POOL_KEEPS, 1);
    cuuint64_t rh = 0, uh = 0;
    if (p &&
        ao_real.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &rh) == CUDA_SUCCESS &&
        ao_real.cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &uh) == CUDA_SUCCESS &&
        rh > uh)
        ao_stat_max(AO_STAT_POOL_SLACK_BYTES, rh - uh);
}

void ao_boundary_sample(bool fwd)
{
    if (!ao_eng.ready) return;
    uint64_t in_use = device_sample();
    cuuint64_t reserved = 0, used = 0;
    CUmemoryPool p = ao_program_pool();
    bool known = ao_pool_figures(p, &reserved, &used);
    if (in_use) others_sample(in_use, known ? p : NULL, reserved, used);
    if (!ao_auto.on) return;
    ao_auto_device_note(in_use);
    if (known) ao_auto_pool_note(reserved, used);
    // What the device held beyond the allocations and aoshim's idle memory
    // at this boundary (the context, the pool's unused reserve), from the
    // same moment's counts; in the forward only: in the backward the
    // program's pool keeps the activations it frees, unused, while its
    // reserve stays where the peak left it (train_step beside the pool: 7.7
    // GiB "beyond", none of it added to the peak).
    if (fwd) {
        uint64_t mine = allocators_hold();
        if (in_use > mine && in_use - mine > ao_auto.beyond_step)
            ao_auto.beyond_step = in_use - mine;
    }
}

// The budget a plan is held to: what the device has left for allocations
// once the program's pool holds its unused reserve at the peak.
// At least what the device holds beyond every allocator (the context):
// the boundaries' samples measure the pool's slack against the step's
// peak of allocations, which falls between them; once aoshim gave its idle
// memory back at once (serving, mem/vmm.c), they measured none, and the
// H200 GPT replayed under its budget was over by the context, 0.74 GiB.
static uint64_t held_beyond(void)
{
    uint64_t other = ao_stat_get(AO_STAT_DEVICE_OTHER_MIN);
    uint64_t slack =
        ao_auto.pool_slack > ao_auto.slack_once ? ao_auto.pool_slack : ao_auto.slack_once;
    return other > slack + 1 ? other - 1 : slack;
}

uint64_t ao_auto_plan_budget(void)
{
    if (ao_auto.budget == UINT64_MAX) return UINT64_MAX;
    uint64_t slack = held_beyond() + ao_auto.model_slack;
    return ao_auto.budget > slack ? ao_auto.budget - slack : 0;
}

static void fmt_bytes(char *out, size_t n, uint64_t v)
{
    if (v >= (1ull << 30))
        snprintf(out, n, "%.2f GiB", (double)v / (1ull << 30));
    else
        snprintf(out, n, "%.1f MiB", (double)v / (1ull << 20));
}

// A scheduled reload found layer s's copy out still running and cancelled
// it: the copy saved nothing and cost its time on the link (and the wait of
// the backward that reads the layer). The plan's model counts on copies late
// at the forward's end holding it back, and on measured times; the engine
// holds the forward only when it must wait for memory, and a step that
// measured slow (the one whose shapes changed) misleads. What the steps show
// wins: no plan offloads the layer at this prefetch distance or more (the
// next is made at the step's end), nor does 'all' offload it or any layer
// after it, until the shapes change. The manual schedule is the program's.
void ao_auto_copy_too_late(const ao_scope_t *s)
{
    if (ao_eng.manual || ao_eng.steps == 0) return;
    const int l = s->layer;
    if (ao_auto.on && ao_auto.planned && ao_auto.plan.count > l) {
        int d = ao_auto.plan.prefetch > 0 ? ao_auto.plan.prefetch : 1;
        if (ao_auto.late_d[l] && ao_auto.late_d[l] <= d) return;
        ao_auto.late_d[l] = (uint8_t)d;
        snprintf(ao_auto.late_why, sizeof ao_auto.late_why,
                 "re-planned: layer %d's copy out was late for its reload (prefetch %d)", l, d);
        ao_auto.why = ao_auto.late_why;
    } else if (ao_config.offload_layers.kind == AO_LAYERS_ALL && !ao_auto.on) {
        if (ao_auto.late && l >= ao_auto.late_from) return;
        ao_auto.late = true;
        ao_auto.late_from = l;
        ao_sched_update();
        snprintf(ao_auto.late_why, sizeof ao_auto.late_why,
                 "layer %d on not offloaded: its copy out was late for its reload", l);
    } else {
        return;
    }
    if (ao_config.verbose) ao_log(AO_LOG_INFO, "%s", ao_auto.late_why);
}

// A layer's forward or backward begins (auto): the step's order, for the
// planner. A step too long to record (over a million) plans as GPipe's.
void ao_auto_op_record(int layer, int mb, bool bwd)
{
    if (!ao_auto.on || ao_auto.rec_over) return;
    if (ao_auto.rec_nops == ao_auto.rec_cap) {
        int cap = ao_auto.rec_cap ? 2 * ao_auto.rec_cap : 256;
        ao_plan_op_t *o =
            cap <= (1 << 20) ? realloc(ao_auto.rec_ops, (size_t)cap * sizeof *o) : NULL;
        if (!o) {
            ao_auto.rec_over = true;
            return;
        }
        ao_auto.rec_ops = o;
        ao_auto.rec_cap = cap;
    }
    ao_auto.rec_ops[ao_auto.rec_nops++] =
        (ao_plan_op_t){.layer = (int16_t)layer, .mb = (int16_t)mb, .bwd = bwd};
}

// At a step's end: its order becomes the plan's if it is a whole step (each
// layer's forward and backward for every microbatch), else none is known.
static void ops_take(int n)
{
    ao_auto.nops = 0;
    if (!ao_auto.rec_over && ao_plan_ops_valid(ao_auto.rec_ops, ao_auto.rec_nops, n, ao_auto.mbs)) {
        ao_plan_op_t *t = ao_auto.ops;
        int c = ao_auto.ops_cap;
        ao_auto.ops = ao_auto.rec_ops, ao_auto.ops_cap = ao_auto.rec_cap,
        ao_auto.nops = ao_auto.rec_nops;
        ao_auto.rec_ops = t, ao_auto.rec_cap = c;
    }
    ao_auto.rec_nops = 0;
    ao_auto.rec_over = false;
}

// Make a plan from in and take it. Said (one line under AOSHIM_VERBOSE, the
// report's "offload plan" row) when it changes; the row follows the latest
// prediction every step (the first plan's came from a step aoshim itself
// slowed).
static void plan_take(const ao_plan_in_t *in, bool estimated)
{
    const int n = in->nlayers;
    ao_plan_t p;
    ao_plan_make(in, &p);
    // A step whose peak comes where no layer's activations are alive (the
    // optimizer's, or before the forward) is not lowered by any layer
    // moved: moving them would cost the link and save nothing. The plan's
    // model knows the layers, not where the step peaked: this does.
    bool unmovable = in->peak_without > in->budget && (ao_auto.peak_where == AO_WHERE_AFTER ||
                                                       ao_auto.peak_where == AO_WHERE_OUTSIDE);
    if (unmovable) ao_plan_predict(in, 0, p.prefetch, &p);
    bool changed = !ao_auto.planned || p.count != ao_auto.plan.count ||
                   p.prefetch != ao_auto.plan.prefetch || p.part != ao_auto.plan.part;
    // A new set of layers: the pool of physical memory keeps no more than
    // the layers left on the device hold. The plan's model (plan.h) takes
    // the pool for that; more, pooled under an earlier plan or in the
    // measuring step, let the steps hold more than predicted, over the
    // budget (GPT-2 small on a 300 GB/s link, a budget 8 layers under its
    // need: 1.26 GiB held for 1.23). The host waits here, once a plan, for
    // the releases under way.
    //
    // A part that changes by less than a page leaves the pool as it is:
    // giving back every kept mapping for it cost the next step all its
    // mappings anew (the Hugging Face GPT-2 replayed under the budget its
    // link hides: 11 MiB more of layer 3 offloaded, and the forward stalled
    // 20 ms, 1.21x -> 1.37x for that step).
    const uint64_t dpart =
        p.part > ao_auto.plan.part ? p.part - ao_auto.plan.part : ao_auto.plan.part - p.part;
    if (p.count > 0 && (!ao_auto.planned || p.count != ao_auto.plan.count ||
                        (p.part != ao_auto.plan.part && dpart >= AO_PAGE))) {
        // What the scopes left on the device hold at once, in chunks, in the
        // step's order (1F1B holds two microbatches' where GPipe holds all).
        uint64_t held[AO_MAX_LAYERS], mbs = ao_auto.mbs > 0 ? (uint64_t)ao_auto.mbs : 1;
        for (int l = 0; l < n; l++)
            held[l] = l < p.count ? 0 : ao_vmm_round(in->bytes[l] / mbs);
        // The last layer offloaded in part: its two chunks are sizes the
        // pool has no handle of, made anew next step, and the last layers'
        // memory then comes from what its part gives back plus new handles:
        // the pool keeps that much less.
        uint64_t keep = ao_plan_live(in, held);
        if (p.part && p.part < in->bytes[p.count - 1]) {
            uint64_t away = mbs * ao_vmm_round(p.part / mbs);
            keep = keep > away ? keep - away : 0;
        }
        ao_drain_locked();
        ao_idle_unmap(SIZE_MAX);
        ao_phys_trim_to(keep);
    }
    ao_auto.plan = p;
    ao_auto.planned = true;
    ao_sched_update(); // mid-step too (a re-plan on changed shapes): the layers still to come
                       // follow it
    if (changed) {
        ao_auto.plans++;
        ao_auto.said_why = ao_auto.why;
        ao_auto.why = NULL;
    }
    char need[32], peak[32], budget[32], line[704], slack[128] = "", where[96], miss[192] = "";
    fmt_bytes(need, sizeof need, in->peak_without);
    ao_stat_where_text(ao_auto.peak_where, n, where, sizeof where);
    if (unmovable) {
        char by[32];
        fmt_bytes(by, sizeof by, in->peak_without - in->budget);
        snprintf(
            miss, sizeof miss,
            ": the budget cannot be met, offloading cannot lower a peak there (it misses by %s, "
            "with what the device held beyond the allocations)",
            by);
    }
    fmt_bytes(peak, sizeof peak, p.peak);
    fmt_bytes(budget, sizeof budget, ao_auto.budget);
    const uint64_t beyond = held_beyond();
    if (beyond) { // the budget the plan was held to is less by this
        char b[32];
        fmt_bytes(b, sizeof b, beyond);
        snprintf(slack, sizeof slack,
                 ", the device held %s beyond the allocations (pool reserve, context)", b);
    }
    if (p.count == 0) {
        snprintf(line, sizeof line,
                 "nothing offloaded: the step needs %s, its peak in %s, the budget is %s%s%s%s%s",
                 need, where, budget, slack, miss, ao_auto.said_why ? "; " : "",
                 ao_auto.said_why ? ao_auto.said_why : "");
    } else {
        char part[96] = "";
        if (p.part) {
            char b0[32], b1[32];
            fmt_bytes(b0, sizeof b0, p.part);
            fmt_bytes(b1, sizeof b1, ao_auto.bytes[p.count - 1]);
            snprintf(part, sizeof part, " (of layer %d, %s of %s)", p.count - 1, b0, b1);
        }
        snprintf(line, sizeof line,
                 "layers 0-%d of %d offloaded%s, prefetch %d: peak %s predicted for a budget of %s "
                 "(%s without, its peak in %s)%s%s, copies exposed %.2f ms per step%s%s",
                 p.count - 1, n, part, p.prefetch, peak, budget, need, where, slack,
                 p.budget_met ? "" : ": the budget cannot be met", (double)p.exposed_ns / 1e6,
                 ao_auto.said_why ? "; " : "", ao_auto.said_why ? ao_auto.said_why : "");
    }
    ao_rec_plan(line, ao_auto.plans);
    if (changed && ao_config.verbose) {
        uint64_t f = 0, b = 0;
        for (int l = 0; l < n; l++)
            f += in->fwd_ns[l], b += in->bwd_ns[l];
        ao_log(AO_LOG_INFO,
               "plan %u: %s (%s: forward %.2f ms, backward %.2f ms, link %.1f / %.1f GB/s)",
               ao_auto.plans, line, estimated ? "estimated" : "measured", (double)f / 1e6,
               (double)b / 1e6, in->d2h, in->h2d);
    }
}

static double link_bw(uint64_t bytes, uint64_t ns)
{
    return ns ? (double)bytes / (double)ns : 0;
}

// The layer a plan offloads in part, or -1.
static int split_layer(const ao_plan_t *p, const uint64_t *bytes)
{
    return p->count > 0 && p->part && p->part < bytes[p->count - 1] ? p->count - 1 : -1;
}

// A layer offloaded in part has chunks of a buffer or a few each, where
// the whole layer has one: a buffer it frees after its end (the H200
// Llama's head frees two of 32 MiB of every layer) gives its memory back in
// the first, and not in the second until the layer's backward. The step's
// peak without offloading is counted in chunks, so a step that split a
// layer held less at its peak than one that maps it whole: the Llama's
// layer 3, split, held 930 MiB at the peak and 988 whole, and the plan made
// from that step (layer 2 split, layer 3 whole) put the next step 42 MiB
// over the budget the link hides (replayed). So the layer this step split,
// when the next plan does not split it, counts at the peak what it held
// there the last step it was whole. (Split again, it holds what it held.)
static void split_correct(ao_plan_in_t *in, bool under_plan)
{
    const int n = in->nlayers, was = under_plan ? split_layer(&ao_auto.plan, ao_auto.bytes) : -1;
    uint64_t add = 0;
    const uint64_t at =
        was >= 0 ? __atomic_load_n(&ao_auto.live_at_peak[was], __ATOMIC_RELAXED) : 0;
    if (was >= 0 && ao_auto.whole_at_peak[was] > at) add = ao_auto.whole_at_peak[was] - at;
    for (int l = 0; l < n; l++)
        if (l != was)
            ao_auto.whole_at_peak[l] = __atomic_load_n(&ao_auto.live_at_peak[l], __ATOMIC_RELAXED);
    if (!add) return;
    ao_plan_t p;
    ao_plan_make(in, &p);
    if (split_layer(&p, in->bytes) != was) in->peak_without += add;
}

// A layer's chunks made (bytes > 0) or gone (< 0), as the peak without
// offloading counts them (ao_stat_device's live), before that count moves.
void ao_auto_layer_live(int layer, int64_t bytes)
{
    if (layer < 0 || layer >= AO_MAX_LAYERS) return;
    __atomic_add_fetch(&ao_auto.live[layer], (uint64_t)bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ao_auto.live_gen, 1, __ATOMIC_RELEASE);
    int n = __atomic_load_n(&ao_auto.live_n, __ATOMIC_RELAXED);
    while (layer >= n && !__atomic_compare_exchange_n(&ao_auto.live_n, &n, layer + 1, true,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

// The step's peak without offloading rose (stats.c's hook): what each
// layer holds at it. Most new peaks are the program's own allocations, which
// change no layer's count: only a count changed since the last copy is
// copied again (one load on that path, not a pass over the layers).
void ao_auto_live_at_peak(void)
{
    const uint64_t gen = __atomic_load_n(&ao_auto.live_gen, __ATOMIC_ACQUIRE);
    if (__atomic_exchange_n(&ao_auto.live_gen_copied, gen, __ATOMIC_RELAXED) == gen) return;
    const int n = __atomic_load_n(&ao_auto.live_n, __ATOMIC_RELAXED); // (the first step's too)
    for (int l = 0; l < n; l++)
        __atomic_store_n(&ao_auto.live_at_peak[l],
                         __atomic_load_n(&ao_auto.live[l], __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

// At a step's end: plan the next from what this one measured.
void ao_auto_step(void)
{
    int n = ao_eng.nlayers;
    if (n <= 0) return;
    for (int l = 0; l < n; l++) {
        if ((ao_auto.tracked[l / 64] >> (l % 64)) & 1) ao_auto.bytes[l] = ao_auto.cur[l];
        ao_auto.cur[l] = 0;
    }
    memset(ao_auto.tracked, 0, sizeof ao_auto.tracked);
    ao_auto.mbs = ao_auto.max_mb + 1;
    ao_auto.max_mb = 0;
    ops_take(n);
    // A layer's times were measured per microbatch; its bytes are a step's.
    // One not measured since its shapes changed: the estimate made then.
    static uint64_t fwd[AO_MAX_LAYERS], bwd[AO_MAX_LAYERS];
    for (int l = 0; l < n; l++) {
        fwd[l] =
            (ao_auto.fwd_ns[l] ? ao_auto.fwd_ns[l] : ao_auto.fwd_est[l]) * (uint64_t)ao_auto.mbs;
        bwd[l] =
            (ao_auto.bwd_ns[l] ? ao_auto.bwd_ns[l] : ao_auto.bwd_est[l]) * (uint64_t)ao_auto.mbs;
        ao_auto.want[l] = ao_auto.bytes[l] / (uint64_t)ao_auto.mbs;
    }
    ao_auto.peak_without = ao_stat_step_peak_without();
    ao_auto.peak_where = ao_stat_step_peak_where();
    // What this step left allocated beyond what it began with (outside the
    // layers: passed through) comes into the next step's peak: AdamW makes
    // its state, twice the parameters, in the first step's optimizer, after
    // that step's peak. Unseen, the plan made from the first step put the
    // H200's GPT 1.4 GiB over its budget in the second (18.82 GiB against
    // 17.38; replayed: 16.45 GiB against 17.29 with it, the second step's
    // peak now 13.84). The gradients alive at the step's end (the program
    // frees them after it) count too: a plan that much more careful for one
    // step.
    uint64_t live_end = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    ao_auto.carry =
        ao_auto.live_start_set && live_end > ao_auto.live_start ? live_end - ao_auto.live_start : 0;
    ao_auto.live_start = live_end;
    ao_auto.live_start_set = true;
    // The pool's unused reserve at this step's peak (ao_auto_pool_note):
    // the most seen, not the latest. It moves with the plan (where the
    // device's peak falls, and what the pool holds then: on GPT-2 small,
    // 106 MiB with layer 0 offloaded, 16 with three quarters of it), and a
    // plan whose own step measured less would be traded for one that does
    // not keep the budget, and back, every other step.
    uint64_t with = ao_stat_step_peak_with();
    uint64_t slack = ao_auto.pool_held > with ? ao_auto.pool_held - with : 0;
    // The plan's model knows the layers' bytes and the step's order, not
    // everything the program does around them (train_step --pytorch: the
    // backward's fp32 gradients come from the program's pool while the
    // layers' freed memory stays in aoshim's handles for the next step; a
    // plan predicted 4.86 GiB, the step allocated 5.17). A step run under
    // one plan from its start that allocated more than that plan predicted
    // says by how much: the plans after it are held that much under the
    // budget (the most seen).
    const bool under_plan = ao_auto.planned && ao_auto.plans_at_start == (int)ao_auto.plans;
    if (under_plan && ao_auto.budget != UINT64_MAX && with > ao_auto.plan.peak &&
        with - ao_auto.plan.peak > ao_auto.model_slack)
        ao_auto.model_slack = with - ao_auto.plan.peak;
    // A measuring step that caught up under a budget (engine.c) gave its
    // layers' memory back mid-step, and its peak is no step's: for the next
    // step only, the pool's unused reserve as this one ends (the
    // optimizer's transients, which the pool keeps) stands in, until a
    // step measures its own. (train_step's GPT-2 small, half a layer
    // under: 59 MiB measured there, 106 at the next step's peak, which a
    // plan held to 59 put 1% over the budget; kept for good, the larger
    // figure cost every later step a layer more.)
    ao_auto.slack_once = ao_auto.caught_up ? ao_auto.pool_unused_now : 0;
    const bool caught_up = ao_auto.caught_up;
    if (caught_up) slack = 0; // not this step's peak
    ao_auto.caught_up = false;
    // Serving began in this step (as its forward began): the pool slack and
    // what the model missed, measured before, were the two allocators side
    // by side (the program's pool has given back its unused reserve).
    if (ao_auto.serve_began) slack = ao_auto.pool_slack = ao_auto.model_slack = 0;
    // The step's peak of allocations falls between boundaries: once aoshim
    // gave its idle memory back at once (serving, mem/vmm.c), the most in
    // use at a boundary was below it, the slack above measured none, and
    // the H200 GPT replayed under its budget went over by the context and
    // the pool's reserve (0.74 GiB). What a forward boundary held beyond its
    // own allocations is held at a peak in the forward too (one in the
    // backward grows into the pool's unused reserve: train_step, a budget
    // 0.25 GiB over its need, moved 114 MiB for it).
    //
    // Where the sample at the peak did measure it (at least the device's own
    // memory), a step run under one plan from its start keeps that figure:
    // a boundary can hold more beyond the allocations than the peak does
    // (the program's segments' free space, filled by the time the peak
    // comes), and held for good, it had the plans move more than the step
    // needs (the Hugging Face GPT-2 replayed under the budget its link
    // hides: 1.77 GiB held for 1.58 at the peak, 2.50 GiB moved a step where
    // 2.26 keep the budget; 1.27x the step without aoshim, 1.22x with
    // plan_take's rule for a part that changes by less than a page). Any
    // other step's boundaries hold for the next plan only (the measuring
    // step measured 0.8 GiB at its peak, 1.6 at the next step's).
    else if (!caught_up && ao_auto.peak_where >= AO_WHERE_FORWARD && ao_auto.beyond_step > slack) {
        if (!under_plan) {
            if (ao_auto.beyond_step > ao_auto.slack_once) ao_auto.slack_once = ao_auto.beyond_step;
        } else if (slack < ao_stat_get(AO_STAT_DEVICE_OTHER_MIN)) {
            slack = ao_auto.beyond_step;
        }
    }
    ao_auto.beyond_step = 0;
    ao_auto.serve_began = false;
    if (slack > ao_auto.pool_slack) ao_auto.pool_slack = slack;
    ao_auto.pool_held = 0;
    ao_plan_in_t in = {
        .nlayers = n,
        .mbs = ao_auto.mbs,
        .ops = ao_auto.nops ? ao_auto.ops : NULL,
        .bytes = ao_auto.bytes,
        .fwd_ns = fwd,
        .bwd_ns = bwd,
        .peak_without = ao_auto.peak_without + ao_auto.carry,
        .budget = ao_auto_plan_budget(),
        .d2h = link_bw(ao_auto.d2h_bytes, ao_auto.d2h_ns),
        .h2d = link_bw(ao_auto.h2d_bytes, ao_auto.h2d_ns),
        .late_d = ao_auto.late_d,
        .fine_handles = ao_vmm.fine,
        .early_copy = ao_early_copies(),
        .early_off = ao_eng.early_off,
    };
    split_correct(&in, under_plan);
    ao_stat_step_reset();
    // The plan made when the shapes changed came from estimates: this one,
    // the first measured, answers the same change (and a later one does not).
    if (ao_auto.reshaped && !ao_auto.why) ao_auto.why = ao_auto.shape_why;
    plan_take(&in, false);
    if (ao_auto.why == ao_auto.shape_why) ao_auto.why = NULL;
    ao_auto.plans_at_start = (int)ao_auto.plans; // the next step runs under this plan
}

void ao_auto_serving_began(void)
{
    ao_auto.serve_began = true;
    if (!ao_auto.why) ao_auto.why = "the program's allocations served from aoshim's memory";
}

// A layer saved other bytes than the plan expects of it: the shapes changed
// (a new sequence length or batch size). The plan made for the old ones
// would hold in this very step only by chance, so a new one is made at
// once, from the old measurements scaled by the same ratio r (transformer
// layers change alike): every layer's bytes and compute time, and what is
// not the layers' when it grows (it holds inputs and temporaries that grow
// with them; weights do not shrink). Made at the layer's end, before its
// predecessor's release point, so a change seen at layer 0 reaches every
// layer of the step. A layer matching the scaled figure changes nothing.
//
// saved, was: the layer's bytes now and as expected; held: the memory it
// holds (its chunks could not follow last step's sizes: each buffer got one
// of its own, rounded up to the granule; the layers after it are sized from
// it, see ao_engine_layer_begin). passed: the layer was not tracked (a plan
// of nothing), its bytes and was are what the real allocator gained over
// the layer: it and the layers before it stay, whatever the new plan.
// Idle physical memory of the old sizes fits none of the new chunks; held,
// it would add to this step's peak, so it goes back now, and what this step
// leaves idle goes back at its end (trim_to_learned).
static void plan_reshape(int layer, uint64_t saved, uint64_t was, uint64_t held, bool passed)
{
    const int n = ao_eng.nlayers;
    if (!ao_auto.planned || n <= 0 || layer >= n || !was || !saved || saved == was) return;
    const double r = (double)saved / (double)was;
    const uint64_t mbs = ao_auto.mbs > 0 ? (uint64_t)ao_auto.mbs : 1;
    uint64_t old_total = 0, total = 0;
    static uint64_t bytes[AO_MAX_LAYERS], fwd[AO_MAX_LAYERS], bwd[AO_MAX_LAYERS];
    for (int l = 0; l < n; l++) {
        old_total += ao_auto.bytes[l];
        ao_auto.want[l] = l == layer && !passed ? saved : (uint64_t)((double)ao_auto.want[l] * r);
        ao_auto.bytes[l] = ao_auto.want[l] * mbs;
        uint64_t mem = l == layer && held > saved ? held * mbs : ao_auto.bytes[l];
        total += mem;
        bytes[l] = passed && l <= layer ? 0 : mem; // 0: it stays (counted with the rest)
        // Times: scaled, until the new shapes are measured (the least
        // measured of the old ones would otherwise stay for good).
        uint64_t f = ao_auto.fwd_ns[l] ? ao_auto.fwd_ns[l] : ao_auto.fwd_est[l];
        uint64_t b = ao_auto.bwd_ns[l] ? ao_auto.bwd_ns[l] : ao_auto.bwd_est[l];
        ao_auto.fwd_est[l] = (uint64_t)((double)f * r);
        ao_auto.bwd_est[l] = (uint64_t)((double)b * r);
        ao_auto.fwd_ns[l] = ao_auto.bwd_ns[l] = 0;
        fwd[l] = ao_auto.fwd_est[l] * mbs;
        bwd[l] = ao_auto.bwd_est[l] * mbs;
    }
    uint64_t rest = ao_auto.peak_without > old_total ? ao_auto.peak_without - old_total : 0;
    if (r > 1) rest = (uint64_t)((double)rest * r);
    if (!ao_auto.reshaped) { // the first layer that showed the change says why
        char now_b[32], was_b[32];
        fmt_bytes(now_b, sizeof now_b, saved);
        fmt_bytes(was_b, sizeof was_b, was);
        snprintf(ao_auto.shape_why, sizeof ao_auto.shape_why,
                 "re-planned: layer %d saves %s, was %s (shapes changed)", layer, now_b, was_b);
        ao_idle_give_back();
    }
    ao_auto.why = ao_auto.shape_why;
    ao_auto.reshaped = true;
    ao_auto.late = false; // the timing changes with the shapes
    ao_sched_update();
    memset(ao_auto.late_d, 0, sizeof ao_auto.late_d);
    ao_plan_in_t in = {
        .nlayers = n,
        .mbs = (int)mbs,
        .ops = ao_auto.nops ? ao_auto.ops : NULL,
        .bytes = bytes,
        .fwd_ns = fwd,
        .bwd_ns = bwd,
        .peak_without = rest + total + ao_auto.carry, // (what the last step left too)
        .budget = ao_auto_plan_budget(),
        .d2h = link_bw(ao_auto.d2h_bytes, ao_auto.d2h_ns),
        .h2d = link_bw(ao_auto.h2d_bytes, ao_auto.h2d_ns),
        .fine_handles = ao_vmm.fine,
        .early_copy = ao_early_copies(),
        .early_off = ao_eng.early_off,
    };
    plan_take(&in, true);
}

// At a layer's end (auto): has its shape changed? A tracked layer is held
// to what the plan expects; one passed through to the real allocator (a
// plan of nothing), to what the same layer gained it last step.
void ao_auto_check_shapes(const ao_scope_t *s)
{
    if (!s->passthrough) {
        uint64_t held = 0;
        for (const ao_chunk_t *c = s->chunks; c; c = c->next)
            if (c->nlive) held += c->size;
        plan_reshape(s->layer, s->rec.saved, ao_auto.want[s->layer], held, false);
        return;
    }
    uint64_t now = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    uint64_t gained = now > s->pt0 ? now - s->pt0 : 0, was = ao_auto.passed[s->layer];
    ao_auto.passed[s->layer] = gained;
    plan_reshape(s->layer, gained, was, 0, true);
}

// At the end of a step whose shapes changed: the idle physical memory the
// next step maps again stays (a chunk per layer and microbatch, sized from
// what this step learned); the rest, chunks of a buffer each made before the
// change was seen, would sit idle for good and count against the budget.
void ao_auto_trim_to_learned(void)
{
    size_t n = (size_t)ao_eng.nlayers * (size_t)(ao_auto.mbs > 0 ? ao_auto.mbs : 1), k = 0;
    size_t *keep = n ? malloc(n * sizeof *keep) : NULL;
    if (!keep) {
        ao_idle_give_back();
        return;
    }
    for (int l = 0; l < ao_eng.nlayers; l++)
        for (int mb = 0; mb < (ao_auto.mbs > 0 ? ao_auto.mbs : 1) && ao_eng.learned[l].saved; mb++)
            keep[k++] = ao_vmm_round(ao_eng.learned[l].saved);
    ao_idle_unmap(SIZE_MAX);
    ao_phys_trim_except(keep, k);
    free(keep);
}
