// SPDX-License-Identifier: MIT
// The planner (plan.h): a small event model of one step as the engine runs
// it, evaluated for each (count, prefetch), and the cheapest plan under the
// budget kept.
#include "offload/plan.h"

#include <stddef.h>
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
void ao_plan_predict(const ao_plan_in_t *in, int k, int d, ao_plan_t *out)
{
    ao_plan_predict_part(in, k, d, 0, out);
}

void ao_plan_predict_part(const ao_plan_in_t *in, int k, int d, uint64_t part, ao_plan_t *out)
{
    const int n = in->nlayers;
    const uint64_t *B = in->bytes;
    memset(out, 0, sizeof *out);
    out->count = k;
    out->prefetch = d;
    const int nn = n > 0 ? n : 1;
    // What each layer's copy moves: all of it, or part of the last one's.
    uint64_t A[nn];
    uint64_t total = 0, away = 0;
    double compute = 0, fwd = 0;
    for (int l = 0; l < n; l++) {
        A[l] = l < k && l + 1 < n ? B[l] : 0;
        if (l == k - 1 && part && part < A[l]) A[l] = part;
        if (l == k - 1 && A[l] < B[l]) out->part = A[l];
        total += B[l];
        away += A[l];
        fwd += (double)in->fwd_ns[l];
        compute += (double)in->fwd_ns[l] + (double)in->bwd_ns[l];
    }
    // What is not the layers' (weights, temporaries): stays whatever the plan.
    uint64_t base = in->peak_without > total ? in->peak_without - total : 0;

    int ql[2][nn];
    double qt[2][nn], qb[2][nn], copied[nn], back_at[nn];
    bool gone[2][nn], back[nn];
    memset(gone, 0, sizeof gone);
    ao_model_t m = {.in = in,
                    .pool = (double)(total - away),
                    .copies = {.layer = ql[0], .t = qt[0], .b = qb[0], .gone = gone[0]},
                    .frees = {.layer = ql[1], .t = qt[1], .b = qb[1], .gone = gone[1]}};

    // Forward. The host runs ahead of the GPU: it stops only where a layer's
    // memory must wait for a release. The pool holds what the layers not
    // offloaded need at the forward's end (the engine trims it to that), so
    // from the layer that fills it on, each layer's memory waits for a copy
    // out: a link slower than the forward paces the forward (exposed time).
    // Layer l's copy starts at its release point, the end of layer l+1, after
    // the copies before it.
    double gpu = 0, d2h = 0, h2d = 0;
    for (int l = 0; l < n; l++) {
        poll(&m);
        if (B[l]) map(&m, B[l]);
        gpu = max2(gpu, m.h) + (double)in->fwd_ns[l];
        copied[l] = 0;
        if (l >= 1 && A[l - 1]) {
            d2h = max2(d2h, gpu) + (double)A[l - 1] / bw(in->d2h);
            copied[l - 1] = d2h;
            push(&m.copies, l - 1, d2h, (double)A[l - 1]);
            if (d2h > fwd) out->fwd_late += A[l - 1];
        }
    }

    // Backward, last layer first. At layer L's backward_begin the host
    // reloads L, L-1 (needed now) and L-2 .. L-1-d (prefetch), each into
    // memory got as in the forward, so reloads run as far ahead as the pool
    // and the link let them (a model that issues them when the GPU reaches
    // L+1+d's backward predicts waits the engine does not have); a layer
    // whose copy out the host has not seen done yet is not released, and
    // stays. The compute stream waits for L's and L-1's reloads; L's memory
    // goes when its backward is done.
    for (int l = 0; l < n; l++) {
        back[l] = !A[l];
        back_at[l] = 0;
    }
    for (int L = n - 1; L >= 0; L--) {
        poll(&m);
        for (int j = L; j >= L - 1 - d && j >= 0; j--) {
            if (back[j]) continue;
            back[j] = true;
            if (!m.copies.gone[j]) { // still being copied out: the copy is cancelled
                m.copies.gone[j] = true;
                continue;
            }
            map(&m, A[j]);
            h2d = max2(max2(h2d, m.h), copied[j]) + (double)A[j] / bw(in->h2d);
            back_at[j] = h2d;
        }
        double ready = max2(back_at[L], L > 0 ? back_at[L - 1] : 0);
        gpu = max2(max2(gpu, m.h), ready) + (double)in->bwd_ns[L];
        if (B[L]) push(&m.frees, L, gpu, (double)B[L]);
    }
    // Forward times not measured: the copies are taken to be in time.
    if (fwd > 0 && gpu > compute) out->exposed_ns = (uint64_t)(gpu - compute);
    if (fwd <= 0) out->fwd_late = 0;
    out->peak = base + (uint64_t)m.top;
    out->budget_met = out->peak <= in->budget;
}

void ao_plan_make(const ao_plan_in_t *in, ao_plan_t *out)
{
    const int n = in->nlayers;
    ao_plan_predict(in, 0, 0, out);
    if (out->budget_met || n < 4) return; // it fits (or is too short to gain)
    ao_plan_t best = *out, p;
    bool found = false;
    // The smallest count that fits, for each prefetch distance; of those the
    // least exposed time, then the lower peak. The last layer is never
    // offloaded, nor one whose reload would be issued as backward begins.
    for (int d = 1; d <= AO_PLAN_MAX_PREFETCH && d <= n - 3; d++) {
        for (int k = 1; k <= n - 2 - d; k++) {
            // That copy would be cancelled again, saving nothing, and the
            // copies after it are later still (the reloads earlier).
            if (in->late_d && in->late_d[k - 1] && d >= in->late_d[k - 1]) break;
            ao_plan_predict(in, k, d, &p);
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
    if (found && best.count > 0 && best.exposed_ns > 0) {
        // One sixteenth more than the least that fits: the engine's chunks
        // round up, and its buffers do not split at the sixteenth.
        uint64_t whole = in->bytes[best.count - 1];
        for (int i = 1; i < 15; i++) {
            ao_plan_predict_part(in, best.count, best.prefetch, whole / 16 * (uint64_t)i, &p);
            if (!p.budget_met) continue;
            ao_plan_predict_part(in, best.count, best.prefetch, whole / 16 * (uint64_t)(i + 1), &p);
            if (p.budget_met && p.exposed_ns == 0) best = p;
            break;
        }
    }
    *out = best;
}
