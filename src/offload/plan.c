// SPDX-License-Identifier: MIT
// The planner (plan.h): a small timeline model of one step, evaluated for
// each (count, prefetch) and the cheapest plan under the budget kept.
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

void ao_plan_predict(const ao_plan_in_t *in, int k, int d, ao_plan_t *out)
{
    const int n = in->nlayers;
    const uint64_t *B = in->bytes;
    memset(out, 0, sizeof *out);
    out->count = k;
    out->prefetch = d;
    uint64_t total = 0;
    for (int l = 0; l < n; l++)
        total += B[l];
    // What is not the layers' (weights, temporaries): stays whatever the plan.
    uint64_t base = in->peak_without > total ? in->peak_without - total : 0;

    // Forward: layer l's copy is issued at the end of layer l+1, after the
    // copies before it. A layer's memory is saved once its copy is done; the
    // engine waits for a release under way rather than map more memory, so
    // copies still running at the end of the forward hold it back by as much
    // (exposed time) and save their memory all the same.
    double t = 0, link = 0, end_fwd = 0;
    double end_of[n > 0 ? n : 1];
    for (int l = 0; l < n; l++)
        end_of[l] = (t += (double)in->fwd_ns[l]);
    end_fwd = t;
    // Forward times not measured: the copies are taken to be in time.
    const bool timed = end_fwd > 0;
    uint64_t away = 0;
    for (int l = 0; l < k && l + 1 < n; l++) {
        link = max2(link, end_of[l + 1]) + (double)B[l] / bw(in->d2h);
        if (timed && link > end_fwd) out->fwd_late += B[l];
        away += B[l];
    }
    if (timed && link > end_fwd) out->exposed_ns += (uint64_t)(link - end_fwd);
    uint64_t peak_act = total - away;

    // Backward, last layer first. When layer L's backward begins, layer
    // L-1-d is reloaded (prefetch), and L, L-1 are reloaded now if they are
    // still away; the compute stream waits for L and L-1. Memory then: every
    // layer up to L, less those offloaded and not reloaded yet.
    double now = 0;
    double done[n > 0 ? n : 1];
    bool back[n > 0 ? n : 1];
    for (int l = 0; l < n; l++) {
        done[l] = 0;
        back[l] = !(l < k && l + 1 < n); // resident all along
    }
    double h2d = 0;
    uint64_t up_to = total; // bytes of layers 0 .. L
    for (int L = n - 1; L >= 0; L--) {
        for (int j = L; j >= L - 1 - d && j >= 0; j--) {
            if (back[j]) continue;
            h2d = max2(h2d, now) + (double)B[j] / bw(in->h2d);
            done[j] = h2d;
            back[j] = true;
        }
        uint64_t still_away = 0;
        for (int j = 0; j < k && j < n; j++)
            if (!back[j]) still_away += B[j];
        uint64_t m = up_to - still_away;
        if (m > peak_act) peak_act = m;
        double ready = max2(done[L], L > 0 ? done[L - 1] : 0);
        if (ready > now) {
            out->exposed_ns += (uint64_t)(ready - now);
            now = ready;
        }
        now += (double)in->bwd_ns[L];
        up_to -= B[L];
    }
    out->peak = base + peak_act;
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
    *out = best;
}
