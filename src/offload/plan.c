// SPDX-License-Identifier: MIT
// The planner (plan.h): a small event model of one step as the engine runs
// it, evaluated for each (count, prefetch), and the cheapest plan under the
// budget kept.
#include "offload/plan.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static double bw(double measured)
{
    return measured > 0 ? measured : AO_PLAN_DEFAULT_BW;
}

static double max2(double a, double b)
{
    return a > b ? a : b;
}

// --- the model's state -------------------------------------------------------------------
// Releases under way complete in the order they were issued (one copy engine
// out; one compute stream in backward): two queues, oldest first.
typedef struct ao_releases_s {
    int head, tail;
    int *layer;
    double *t;  // when the release completes on the GPU
    double *b;  // the bytes it gives back
    bool *gone; // per layer: its release completed, or was cancelled
} ao_releases_t;

typedef struct ao_model_s {
    const ao_plan_in_t *in;
    double h;             // the host: ahead of the GPU, except where it waited
    double level;         // tracked bytes mapped
    double pool;          // physical memory the engine holds for them
    double top;           // the highest level
    ao_releases_t copies; // copies out: a layer's memory goes when its copy is done
    ao_releases_t frees;  // backward: a layer's memory goes when its backward is done
} ao_model_t;

static void push(ao_releases_t *q, int layer, double t, double bytes)
{
    q->layer[q->tail] = layer;
    q->b[q->tail] = bytes;
    q->t[q->tail++] = t;
}

// The oldest release still under way: waited for (the host's clock moves
// to its end), or else taken only if done by the host's time. False if none.
static bool pop(ao_model_t *m, ao_releases_t *q, bool wait)
{
    while (q->head < q->tail && q->gone[q->layer[q->head]])
        q->head++; // cancelled
    if (q->head == q->tail || (!wait && q->t[q->head] > m->h)) return false;
    if (wait) m->h = max2(m->h, q->t[q->head]);
    q->gone[q->layer[q->head]] = true;
    m->level -= q->b[q->head];
    q->head++;
    return true;
}

// What the engine does at every boundary and allocation: act on what the
// GPU has finished by now (the host's time), never waiting.
static void poll(ao_model_t *m)
{
    while (pop(m, &m->copies, false) || pop(m, &m->frees, false)) {
    }
}

// A layer's memory, as chunk_map gets it: from the pool while it has room;
// otherwise the host waits for the oldest release under way (a copy out
// before a free); with none under way, the pool grows.
static void map(ao_model_t *m, uint64_t bytes)
{
    poll(m);
    while (m->level + (double)bytes > m->pool &&
           (pop(m, &m->copies, true) || pop(m, &m->frees, true)))
        poll(m);
    m->level += (double)bytes;
    if (m->level > m->pool) m->pool = m->level;
    if (m->level > m->top) m->top = m->level;
}

// --- one step ------------------------------------------------------------------------------
bool ao_plan_ops_valid(const ao_plan_op_t *ops, int n, int nlayers, int mbs)
{
    if (!ops || nlayers <= 0 || mbs <= 0 || n != 2 * nlayers * mbs) return false;
    unsigned char *seen = calloc((size_t)nlayers * (size_t)mbs, 1);
    bool ok = seen != NULL;
    for (int i = 0; ok && i < n; i++) {
        const ao_plan_op_t *o = &ops[i];
        ok = o->layer >= 0 && o->layer < nlayers && o->mb >= 0 && o->mb < mbs;
        unsigned char *x = ok ? &seen[(size_t)o->mb * (size_t)nlayers + (size_t)o->layer] : NULL;
        ok = ok && *x == (o->bwd ? 1 : 0);
        if (ok) (*x)++;
    }
    free(seen);
    return ok;
}

// The most the scopes hold at once, each holding x[layer] from its forward
// to its backward's end.
static double live_top(const ao_plan_op_t *ops, int nops, const double *x)
{
    double live = 0, top = 0;
    for (int i = 0; i < nops; i++) {
        live += ops[i].bwd ? -x[ops[i].layer] : x[ops[i].layer];
        if (live > top) top = live;
    }
    return top;
}

uint64_t ao_plan_live(const ao_plan_in_t *in, const uint64_t *x)
{
    const int n = in->nlayers, M = in->mbs > 1 ? in->mbs : 1;
    double xd[n > 0 ? n : 1], all = 0; // exact: byte counts below 2^53
    for (int l = 0; l < n; l++)
        all += xd[l] = (double)x[l];
    return (uint64_t)(in->ops ? live_top(in->ops, 2 * n * M, xd) : M * all); // GPipe: all at once
}

void ao_plan_predict(const ao_plan_in_t *in, int k, int d, ao_plan_t *out)
{
    ao_plan_predict_part(in, k, d, 0, out);
}

// late (serving only): the host reaches a backward layer once the one
// before it has ended on the GPU; otherwise once it has begun.
static void predict(const ao_plan_in_t *in, int k, int d, uint64_t part, bool late, ao_plan_t *out)
{
    const int n = in->nlayers, M = in->mbs > 1 ? in->mbs : 1;
    memset(out, 0, sizeof *out);
    out->count = k;
    out->prefetch = d;
    if (n <= 0) return;
    const int S = n * M, nops = 2 * S; // scopes (layer l of microbatch m: m * n + l)
    // The step's order: the program's, or GPipe's.
    ao_plan_op_t *gp = NULL;
    const ao_plan_op_t *ops = in->ops;
    if (!ops) {
        gp = malloc((size_t)nops * sizeof *gp);
        if (!gp) return; // no prediction: nothing fits
        for (int m = 0, i = 0; m < M; m++)
            for (int l = 0; l < n; l++, i++) {
                gp[i] = (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)m};
                gp[S + m * n + (n - 1 - l)] =
                    (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)m, .bwd = true};
            }
        ops = gp;
    }
    // Per scope: what it saves (b), what its copy moves (a: all of it, or
    // part of the last layer's; nothing for the last layer), its times.
    double *b = malloc((size_t)(6 * n + 7 * S + M) * sizeof *b);
    int *ql = malloc((size_t)(2 * S) * sizeof *ql);
    bool *flags = calloc((size_t)(3 * S), sizeof *flags);
    if (!b || !ql || !flags) {
        free(gp), free(b), free(ql), free(flags);
        return;
    }
    double *a = b + n, *stay = a + n, *all = stay + n, *f = all + n, *bw_ns = f + n;
    double *back_at = bw_ns + n, *copied = back_at + S, *qt = copied + S, *qb = qt + 2 * S;
    double *fend = qb + 2 * S, *lend = fend + M; // lend: a scope's forward end
    bool *gone = flags, *back = flags + 2 * S;
    double compute = 0;
    for (int l = 0; l < n; l++) {
        uint64_t A = l < k && l + 1 < n ? in->bytes[l] : 0;
        if (l == k - 1 && part && part < A) A = part;
        if (l == k - 1 && A < in->bytes[l]) out->part = A;
        b[l] = (double)in->bytes[l] / M;
        a[l] = (double)A / M;
        stay[l] = b[l] - a[l];
        all[l] = b[l];
        f[l] = (double)in->fwd_ns[l] / M;
        bw_ns[l] = (double)in->bwd_ns[l] / M;
        compute += (double)in->fwd_ns[l] + (double)in->bwd_ns[l];
    }
    // What is not the layers' (weights, temporaries): stays whatever the plan.
    double held = live_top(ops, nops, all);
    uint64_t base = (double)in->peak_without > held ? in->peak_without - (uint64_t)held : 0;
    ao_model_t m = {.in = in,
                    .pool = live_top(ops, nops, stay),
                    .copies = {.layer = ql, .t = qt, .b = qb, .gone = gone},
                    .frees = {.layer = ql + S, .t = qt + S, .b = qb + S, .gone = gone + S}};
    // Forward of layer l: the host runs ahead of the GPU and stops only where
    // the layer's memory must wait for a release. Once the pool is full each
    // layer's memory waits for a copy out: a link slower than the forward
    // paces the forward (exposed time). Layer l-1's copy starts at its
    // release point, the end of layer l, or with early copies at its own
    // end, after the copies before it; its memory goes after both.
    // Backward of layer L: the host reloads L, L-1 (needed now) and L-2 ..
    // L-1-d (prefetch), each into memory got as in the forward, so reloads
    // run as far ahead as the pool and the link let them (a model that
    // issues them when the GPU reaches L+1+d's backward predicts waits the
    // engine does not have); a layer whose copy out the host has not seen
    // done yet is not released, and stays. The compute stream waits for L's
    // and L-1's reloads; L's memory goes when its backward is done.
    // Serving (fine_handles), the program's own allocations come from the
    // same memory: in the backward under a tight budget they wait for what
    // the layers before free, so the host reaches a backward layer (and
    // issues its reloads) only once the one before it has begun on the GPU
    // (train_step --pytorch served, a budget the link could hide: 3 ms per
    // step waiting for layer 0's reload at distance 1, which the model
    // without this saw hidden), or, late, once it has ended: the memory the
    // program waits for is what that layer's backward frees as it ends.
    double gpu = 0, d2h = 0, h2d = 0, cc = 0, bsync = 0;
    for (int i = 0; i < nops; i++) {
        const int l = ops[i].layer, mb = ops[i].mb, id = mb * n + l;
        if (ops[i].bwd && in->fine_handles) m.h = max2(m.h, bsync);
        poll(&m);
        if (!ops[i].bwd) {
            if (b[l] > 0) map(&m, b[l]);
            gpu = max2(gpu, m.h) + f[l];
            cc += f[l];
            if (l == n - 1) fend[mb] = cc;
            copied[id] = back_at[id] = 0;
            back[id] = a[l] <= 0;
            // Layer l-1's copy starts at its release point (this layer's
            // end), or early at its own end; its memory goes after both.
            if (l >= 1 && a[l - 1] > 0) {
                const bool early =
                    in->early_copy &&
                    !(in->early_off && (in->early_off[(l - 1) / 64] >> ((l - 1) % 64)) & 1);
                d2h = max2(d2h, early ? lend[id - 1] : gpu) + a[l - 1] / bw(in->d2h);
                copied[id - 1] = d2h;
                push(&m.copies, id - 1, max2(d2h, gpu), a[l - 1]);
            }
            lend[id] = gpu;
            continue;
        }
        for (int j = l; j >= l - 1 - d && j >= 0; j--) {
            const int jd = mb * n + j;
            if (back[jd]) continue;
            back[jd] = true;
            back_at[jd] = 0;
            if (!m.copies.gone[jd]) { // still being copied out: the copy is cancelled
                m.copies.gone[jd] = true;
                continue;
            }
            map(&m, a[j]);
            h2d = max2(max2(h2d, m.h), copied[jd]) + a[j] / bw(in->h2d);
            back_at[jd] = h2d;
        }
        double ready = max2(back_at[id], l > 0 ? back_at[id - 1] : 0);
        const double bstart = max2(max2(gpu, m.h), ready);
        gpu = bstart + bw_ns[l];
        bsync = late ? gpu : bstart;
        cc += bw_ns[l];
        if (b[l] > 0) push(&m.frees, id, gpu, b[l]);
    }
    // Bytes whose copy out ends after their microbatch's forward would
    // (its compute alone).
    for (int id = 0; id < S; id++) {
        int l = id % n;
        if (l + 1 < n && a[l] > 0 && copied[id] > fend[id / n]) out->fwd_late += (uint64_t)a[l];
    }
    // Forward times not measured: the copies are taken to be in time.
    double fwd = 0;
    for (int l = 0; l < n; l++)
        fwd += (double)in->fwd_ns[l];
    if (fwd > 0 && gpu > compute) out->exposed_ns = (uint64_t)(gpu - compute);
    if (fwd <= 0) out->fwd_late = 0;
    out->peak = base + (uint64_t)m.top;
    out->budget_met = out->peak <= in->budget;
    free(gp), free(b), free(ql), free(flags);
}

void ao_plan_predict_part(const ao_plan_in_t *in, int k, int d, uint64_t part, ao_plan_t *out)
{
    predict(in, k, d, part, in->fine_handles, out);
    if (!in->fine_handles) return;
    // The host's place in the backward sets both when reloads start and
    // when their memory is taken. Times are the late host's (the one the
    // served steps measured: layer 0's reload at distance 4 began as
    // backward 5 did on the GPU); the peak is the higher of the two, as the
    // host is ahead wherever the program's allocations find memory.
    ao_plan_t ahead;
    predict(in, k, d, part, false, &ahead);
    if (ahead.peak > out->peak) out->peak = ahead.peak;
    out->budget_met = out->peak <= in->budget;
}

// Whether a microbatch's forward or backward runs while another's layers
// wait for their backward (GPipe, 1F1B; not gradient accumulation).
static bool interleaved(const ao_plan_in_t *in)
{
    const int n = in->nlayers, M = in->mbs > 1 ? in->mbs : 1;
    if (M == 1) return false;
    if (!in->ops) return true;  // GPipe's
    int waiting = -1, live = 0; // the microbatch with layers alive, and how many
    for (int i = 0; i < 2 * n * M; i++) {
        const ao_plan_op_t *o = &in->ops[i];
        if (live > 0 && o->mb != waiting) return true;
        waiting = o->mb;
        live += o->bwd ? -1 : 1;
    }
    return false;
}

// The least part of layer k-1 that keeps the budget at prefetch distance
// d; false when none does. In sixteenths, one more than the least that
// fits: the engine's chunks round up, and its buffers do not split at the
// sixteenth. Serving (fine_handles), no chunk rounds, and the engine takes
// buffers that make up at least the part (choose_part): the least
// sixty-fourth that fits, every byte over the need a byte more on the link
// (train_step --pytorch served, the budget the link could hide: the least
// sixteenth that fit was 300 MiB of 480 for a need of about 280, 1.20x
// the step; the least sixty-fourth 277.5 MiB, 1.08x, the budget kept in
// every step. Under the budget 25% under the activations, one step went
// 4.5 MiB over it: the model's margin is the part's rounding no more).
static bool part_plan(const ao_plan_in_t *in, int k, int d, ao_plan_t *out)
{
    const uint64_t whole = in->bytes[k - 1];
    const int steps = in->fine_handles ? 64 : 16;
    for (int i = 1; i < steps - 1; i++) {
        ao_plan_predict_part(in, k, d, whole / steps * (uint64_t)i, out);
        if (!out->budget_met) continue;
        ao_plan_predict_part(in, k, d, whole / steps * (uint64_t)(i + !in->fine_handles), out);
        return out->budget_met;
    }
    return false;
}

void ao_plan_make(const ao_plan_in_t *in, ao_plan_t *out)
{
    const int n = in->nlayers;
    ao_plan_predict(in, 0, 0, out);
    if (out->budget_met || n < 4) return; // it fits (or is too short to gain)
    ao_plan_t best = *out, p;
    bool found = false;
    // The smallest count that fits, for each prefetch distance; of those the
    // least exposed time, then the lower peak. Serving, the count and the
    // distance are chosen with the host a layer ahead in the backward (the
    // model before the late host of ao_plan_predict_part): with the late
    // host's times the 25% budget of train_step --pytorch took two layers at
    // distance 4, whose step came 0.08 GiB over both models' peaks (one step
    // over the budget), where distance 3, chosen this way, kept it. The last layer is never
    // offloaded, nor, unless microbatches interleave, one whose reload would
    // be issued as backward begins (interleaved, a microbatch's layers wait
    // while others run, whenever their reload is issued: the model says
    // what they save).
    const bool inter = interleaved(in);
    for (int d = 1; d <= AO_PLAN_MAX_PREFETCH && d <= n - 3; d++) {
        for (int k = 1; k <= (inter ? n - 1 : n - 2 - d); k++) {
            // That copy would be cancelled again, saving nothing, and the
            // copies after it are later still (the reloads earlier).
            if (in->late_d && in->late_d[k - 1] && d >= in->late_d[k - 1]) break;
            predict(in, k, d, 0, false, &p); // the host a layer ahead: see above
            if (p.budget_met) {
                if (!found || p.exposed_ns < best.exposed_ns ||
                    (p.exposed_ns == best.exposed_ns && p.peak < best.peak)) {
                    best = p;
                    found = true;
                }
                break;
            }
            if (!found && p.peak < best.peak) best = p; // nothing fits yet: the lowest peak
        }
    }
    // Of the last layer, the least that still fits, in sixteenths of it (a
    // coarse step: plans do not change with each step's small differences,
    // and the engine's pool keeps a few sizes): the link carries only what
    // the budget needs.
    // Only where the part hides behind the forward and the whole layer does
    // not: with copies exposed either way, the engine's pool (reshaped for
    // the part's two chunk sizes) waits more than the model says (measured:
    // 25.6 ms exposed for 17.7 predicted, against 21.5 for a whole layer).
    // Serving (fine_handles) there is no reshaping: a part is
    // taken wherever it exposes less than the whole, at whichever prefetch
    // distance exposes it least: a part's memory is not the whole layer's,
    // so the distance best for the whole may not be best for the part
    // (train_step --pytorch served, the budget the link could hide: the
    // whole layer 0 chose distance 4 for its lower peak, where the part at 5
    // fits as well and its reload starts a layer earlier: 1.18x -> 1.12x).
    if (found && best.count > 0 && best.exposed_ns > 0) {
        const ao_plan_t whole_plan = best;
        const int k = best.count;
        for (int d = 1; d <= AO_PLAN_MAX_PREFETCH && d <= n - 3; d++) {
            if (!in->fine_handles && d != whole_plan.prefetch) continue;
            if (!inter && k > n - 2 - d) break;
            if (in->late_d && in->late_d[k - 1] && d >= in->late_d[k - 1]) break;
            ao_plan_t part;
            if (!part_plan(in, k, d, &part)) continue;
            if (part.exposed_ns == 0 && whole_plan.exposed_ns > 0 && !in->fine_handles) {
                best = part;
                break;
            }
            if (in->fine_handles && (part.exposed_ns < best.exposed_ns ||
                                     (part.exposed_ns == best.exposed_ns && part.peak < best.peak)))
                best = part;
        }
    }
    *out = best;
}
