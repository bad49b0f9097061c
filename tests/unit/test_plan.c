// SPDX-License-Identifier: MIT
// The planner (src/offload/plan.c) on figures of our own: a step of n equal
// layers of T bytes each, forward and backward times per layer, a link.
#include <criterion/criterion.h>

#include "offload/plan.h"

#define N 12
#define T (100ull << 20)  // one layer's saved bytes
#define W (2000ull << 20) // weights and temporaries

static uint64_t bytes[N], fwd[N], bwd[N];

// Equal layers: forward f ns, backward 2f; link GB/s each way.
static ao_plan_in_t step(uint64_t f, double link, uint64_t budget)
{
    for (int l = 0; l < N; l++)
        bytes[l] = T, fwd[l] = f, bwd[l] = 2 * f;
    return (ao_plan_in_t){.nlayers = N,
                          .bytes = bytes,
                          .fwd_ns = fwd,
                          .bwd_ns = bwd,
                          .peak_without = W + N * T,
                          .budget = budget,
                          .d2h = link,
                          .h2d = link};
}

Test(plan, a_step_that_fits_moves_nothing)
{
    ao_plan_in_t in = step(5000000, 50, W + N * T);
    ao_plan_t p;
    ao_plan_make(&in, &p);
    cr_assert_eq(p.count, 0);
    cr_assert(p.budget_met);
    cr_assert_eq(p.peak, W + N * T);
    cr_assert_eq(p.exposed_ns, 0);
}

// A fast link (a layer's copy takes a fifth of its forward): the smallest
// count that fits, and one fewer does not.
Test(plan, the_smallest_count_under_the_budget)
{
    uint64_t budget = W + N * T - 4 * T;
    ao_plan_in_t in = step(10000000, 50, budget); // 100 MiB at 50 GB/s: ~2.1 ms of 10
    ao_plan_t p, q;
    ao_plan_make(&in, &p);
    cr_assert(p.budget_met, "peak %llu > budget %llu", (unsigned long long)p.peak,
              (unsigned long long)budget);
    cr_assert_leq(p.peak, budget);
    cr_assert_geq(p.count, 4);
    cr_assert_eq(p.exposed_ns, 0, "copies hidden: %llu ns exposed",
                 (unsigned long long)p.exposed_ns);
    cr_assert_eq(p.fwd_late, 0);
    ao_plan_predict(&in, p.count - 1, p.prefetch, &q);
    cr_assert(!q.budget_met, "count %d - 1 also fits", p.count);
}

// The prediction itself, by hand: k layers away at the end of a forward
// whose copies all finish in time save k*T, and the first backward layers
// hold the rest.
Test(plan, prediction_by_hand)
{
    ao_plan_in_t in = step(10000000, 50, 0);
    ao_plan_t p;
    ao_plan_predict(&in, 5, 1, &p);
    cr_assert_eq(p.fwd_late, 0);
    cr_assert_eq(p.peak, W + (N - 5) * T);
    cr_assert_eq(p.exposed_ns, 0);
}

// A slow link: copies out that cannot finish within the forward hold it
// back; the prediction says by how much.
Test(plan, a_slow_link_costs_forward_time)
{
    ao_plan_in_t in = step(1000000, 5, W + 2 * T); // 1 ms forward, 100 MiB takes ~21 ms
    ao_plan_t p;
    ao_plan_predict(&in, 3, 1, &p);
    cr_assert_gt(p.fwd_late, 0, "copies late at the end of the forward");
    // The third copy starts at the end of layer 3 (3 ms) behind two others:
    // done at 3 + 3 x 21 ms, against a forward of 12 ms.
    double copy = (double)T / 5.0;
    double want = 1e6 + 3 * copy - 12e6;
    cr_assert_geq((double)p.exposed_ns, want - 1e3, "exposed %llu, want >= %.0f",
                  (unsigned long long)p.exposed_ns, want);
}

// No plan meets an impossible budget: the lowest peak, said.
Test(plan, an_impossible_budget_is_said)
{
    ao_plan_in_t in = step(1000000, 50, W); // the layers cannot all go
    ao_plan_t p;
    ao_plan_make(&in, &p);
    cr_assert(!p.budget_met);
    cr_assert_gt(p.count, 0);
    cr_assert_lt(p.peak, W + N * T);
}

// Reloads slower than the backward: the compute stream waits, and a longer
// prefetch distance waits less.
Test(plan, prefetch_hides_slow_reloads)
{
    ao_plan_in_t in = step(1000000, 50, 0); // backward 2 ms a layer, a reload ~2.1 ms
    for (int l = 0; l < N; l++)
        fwd[l] = 20000000; // a long forward: every copy out is done in time
    ao_plan_t d1, d3;
    ao_plan_predict(&in, 6, 1, &d1);
    ao_plan_predict(&in, 6, 3, &d3);
    cr_assert_gt(d1.exposed_ns, 0);
    cr_assert_lt(d3.exposed_ns, d1.exposed_ns);
    cr_assert_geq(d3.peak, d1.peak, "reloading earlier never lowers the peak");
}

// A copy the steps saw still running when its reload came (late_d): no plan
// offloads that layer, or one after it, at that prefetch distance or more.
Test(plan, a_copy_seen_late_is_not_planned_again)
{
    uint64_t budget = W + N * T - 4 * T;
    ao_plan_in_t in = step(10000000, 50, budget);
    ao_plan_t p, q;
    ao_plan_make(&in, &p);
    cr_assert_gt(p.count, 1);
    uint8_t late[N] = {0};
    late[p.count - 1] = (uint8_t)p.prefetch; // the plan's last layer, at its distance
    in.late_d = late;
    ao_plan_make(&in, &q);
    cr_assert(q.count < p.count || q.prefetch < p.prefetch,
              "planned again: %d layers at prefetch %d", q.count, q.prefetch);
    // At distance 1 nothing shorter is left: fewer layers.
    late[p.count - 1] = 1;
    ao_plan_make(&in, &q);
    cr_assert_lt(q.count, p.count, "layer %d planned again at prefetch %d", p.count - 1,
                 q.prefetch);
}
