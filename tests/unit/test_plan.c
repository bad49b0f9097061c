// SPDX-License-Identifier: MIT
// The planner (src/offload/plan.c) on figures of our own: a step of n equal
// layers of T bytes each, forward and backward times per layer, a link.
#include <criterion/criterion.h>
#include <math.h>

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

// Early copies: a layer's copy out starts at its own end. A layer whose
// uses after its end were not learnt (ao_plan_in_t.early_off, engine.c's
// early_unlearnt) is modelled with its copy at its release point, the next
// layer's end, as without early copies: on a link slower than the forward,
// the first copy a layer later exposes a layer's forward more.
Test(plan, a_layer_not_copied_early_starts_its_copy_at_its_release_point)
{
    ao_plan_in_t in = step(1000000, 5, W + 2 * T);
    ao_plan_t early, off, late;
    in.early_copy = true;
    ao_plan_predict(&in, 3, 1, &early);
    const uint64_t layer0[1] = {1};
    in.early_off = layer0;
    ao_plan_predict(&in, 3, 1, &off);
    in.early_off = NULL;
    in.early_copy = false;
    ao_plan_predict(&in, 3, 1, &late);
    cr_assert_eq(off.exposed_ns, late.exposed_ns, "%llu against %llu without early copies",
                 (unsigned long long)off.exposed_ns, (unsigned long long)late.exposed_ns);
    cr_assert_geq((double)off.exposed_ns, (double)early.exposed_ns + 1e6 - 1e3,
                  "%llu against %llu with layer 0 early", (unsigned long long)off.exposed_ns,
                  (unsigned long long)early.exposed_ns);
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

// A slow link, by hand (f = 1 ms forward, b = 2 ms backward, a copy c = 21
// ms each way, 3 of 12 layers offloaded). The host runs ahead of the GPU and
// the device keeps what the 9 other layers hold, so:
// - forward: the copies run back to back from the end of layer 1 (2f); layer
//   9 waits for copy 0, 10 for 1, 11 for 2: the forward ends at 3f + 3c;
// - backward: the device is full until layer 11's backward frees its memory
//   (b later); the reloads then run back to back (2, 1, 0), and layers 1
//   and 0 follow the last one: the step ends at 3f + 3c + b + 3c + 2b.
// Exposed: that, less the compute (12f + 12b) = 6c - 9f - 9b.
Test(plan, a_slow_link_paces_both_passes)
{
    ao_plan_in_t in = step(1000000, 5, W + 2 * T);
    ao_plan_t p;
    ao_plan_predict(&in, 3, 1, &p);
    double c = (double)T / 5.0, want = 6 * c - 9e6 - 9 * 2e6;
    cr_assert_gt(p.fwd_late, 0);
    cr_assert_leq(fabs((double)p.exposed_ns - want), 2.0, "exposed %llu, want %.0f",
                  (unsigned long long)p.exposed_ns, want);
    cr_assert_eq(p.peak, W + 9 * T, "the device holds what the other layers hold");
}

// Reloads are paced by memory, not by the prefetch distance: the host runs
// ahead and reloads a layer as soon as a backward has freed room for it. A
// long forward (every copy out done in time; 6 of 12 layers away, 6 kept),
// backward 2 ms a layer, a reload 21 ms: the reloads run back to back from
// the end of layer 11's backward, and layers 1 and 0 follow the last one:
// exposed 6c + 3b - 12b, whatever the distance.
Test(plan, memory_paces_the_reloads_not_the_prefetch_distance)
{
    ao_plan_in_t in = step(1000000, 5, 0);
    for (int l = 0; l < N; l++)
        fwd[l] = 30000000;
    ao_plan_t d1, d3;
    ao_plan_predict(&in, 6, 1, &d1);
    ao_plan_predict(&in, 6, 3, &d3);
    double c = (double)T / 5.0, want = 6 * c - 9 * 2e6;
    cr_assert_eq(d1.fwd_late, 0);
    cr_assert_leq(fabs((double)d1.exposed_ns - want), 2.0, "exposed %llu, want %.0f",
                  (unsigned long long)d1.exposed_ns, want);
    cr_assert_eq(d3.exposed_ns, d1.exposed_ns);
    cr_assert_eq(d3.peak, d1.peak);
    cr_assert_eq(d1.peak, W + 6 * T);
}

// A link that keeps up with the backward (a reload ~0.21 ms, a backward 2
// ms): the reloads hide behind it.
Test(plan, a_link_that_keeps_up_with_the_backward_hides_the_reloads)
{
    ao_plan_in_t in = step(1000000, 500, 0); // a copy ~0.21 ms, a backward 2 ms
    for (int l = 0; l < N; l++)
        fwd[l] = 30000000;
    ao_plan_t p;
    ao_plan_predict(&in, 6, 1, &p);
    cr_assert_eq(p.exposed_ns, 0, "exposed %llu", (unsigned long long)p.exposed_ns);
}

// Half a layer under the need, a link that carries about 0.7 of a layer in
// the forward (copy of a layer 2.1 ms, the forward after layer 1 1.5 ms): a
// whole layer 0 holds the forward back; part of it (its largest buffers,
// in sixteenths, one more than the least that fits) does not.
Test(plan, part_of_a_layer)
{
    ao_plan_in_t in = step(150000, 50, W + N * T - T / 2);
    ao_plan_t whole, p;
    ao_plan_predict(&in, 1, 1, &whole);
    cr_assert(whole.budget_met);
    cr_assert_gt(whole.exposed_ns, 0, "a whole layer's copy outlasts the forward");
    ao_plan_make(&in, &p);
    cr_log_info("part %llu of %llu, exposed %llu (whole: %llu)", (unsigned long long)p.part,
                (unsigned long long)T, (unsigned long long)p.exposed_ns,
                (unsigned long long)whole.exposed_ns);
    cr_assert_eq(p.count, 1);
    cr_assert(p.part > T / 2 && p.part < T, "part %llu", (unsigned long long)p.part);
    cr_assert_eq(p.part % (T / 16), 0, "in sixteenths");
    cr_assert(p.budget_met);
    cr_assert_lt(p.exposed_ns, whole.exposed_ns);
}

// A budget that needs more of layer 0 than the forward hides (0.8 of it,
// the link carrying about 0.7): the part is exposed too, less than the
// whole. With a handle per chunk the plan takes the whole layer (a part's
// two chunk sizes made the engine wait more than the model says); with
// granule handles (fine_handles, serving) it takes the part.
Test(plan, an_exposed_part_with_granule_handles)
{
    ao_plan_in_t in = step(150000, 50, W + N * T - T * 8 / 10);
    ao_plan_t whole, p;
    ao_plan_predict(&in, 1, 1, &whole);
    cr_assert(whole.budget_met);
    ao_plan_make(&in, &p);
    cr_assert_eq(p.count, 1);
    cr_assert_eq(p.part, 0, "a handle per chunk: the whole layer (part %llu)",
                 (unsigned long long)p.part);
    in.fine_handles = true;
    ao_plan_make(&in, &p);
    cr_log_info("part %llu of %llu, exposed %llu (whole: %llu)", (unsigned long long)p.part,
                (unsigned long long)T, (unsigned long long)p.exposed_ns,
                (unsigned long long)whole.exposed_ns);
    cr_assert_eq(p.count, 1);
    cr_assert(p.part > T * 8 / 10 && p.part < T, "part %llu", (unsigned long long)p.part);
    cr_assert(p.budget_met);
    cr_assert_gt(p.exposed_ns, 0);
    cr_assert_lt(p.exposed_ns, whole.exposed_ns);
    // The least sixty-fourth that fits (no chunk rounds with granule
    // handles): one less does not.
    ao_plan_t less;
    ao_plan_predict_part(&in, 1, p.prefetch, p.part - T / 64, &less);
    cr_assert(!less.budget_met, "%llu fits too", (unsigned long long)(p.part - T / 64));
}

// Serving (fine_handles), the program's own allocations in the backward
// wait for the memory the layers before free: the host issues a reload only
// once the backward before it has begun on the GPU. A reload longer than
// the backward left after that is exposed at distance 1 (with the host
// ahead, the model saw it hidden), and hidden deeper: the plan goes deeper.
Test(plan, serving_issues_reloads_as_the_backward_goes)
{
    // 100 MiB at 20 GB/s: 5.2 ms each way; a layer's backward 1 ms.
    ao_plan_in_t in = step(500000, 20, W + N * T - T);
    ao_plan_t ahead, synced, deeper, p;
    ao_plan_predict(&in, 1, 1, &ahead);
    in.fine_handles = true;
    ao_plan_predict(&in, 1, 1, &synced);
    ao_plan_predict(&in, 1, 4, &deeper);
    cr_log_info("exposed at distance 1: %llu ns with the host ahead, %llu with it synced; at 4: "
                "%llu",
                (unsigned long long)ahead.exposed_ns, (unsigned long long)synced.exposed_ns,
                (unsigned long long)deeper.exposed_ns);
    cr_assert_gt(synced.exposed_ns, ahead.exposed_ns + 1000000);
    cr_assert_lt(deeper.exposed_ns + 1000000, synced.exposed_ns);
    ao_plan_make(&in, &p);
    cr_assert(p.budget_met);
    cr_assert_gt(p.prefetch, 1);
    cr_assert_lt(p.exposed_ns, synced.exposed_ns);
}

// Serving under a tight budget the program's allocations in a backward
// layer wait for the memory the layer before it frees as its backward ends:
// the host reaches backward L only once L+1's has ended on the GPU, and a
// reload issued there starts a layer later than from a host a layer ahead.
// Layer 0's reload (5.2 ms, needed by layer 1's backward) at distance d is
// issued as backward d+1 begins on the GPU: each layer deeper starts it a
// backward layer (1 ms) earlier, until it hides. With the host a layer
// ahead the model saw distances 4 and 5 alike, and the engine took 4
// (train_step --pytorch served, the budget the link could hide: 1.18x,
// where distance 5 gave 1.12x).
Test(plan, serving_reaches_a_backward_layer_when_the_one_before_ends)
{
    ao_plan_in_t in = step(500000, 20, W + N * T - T);
    in.fine_handles = true;
    ao_plan_t d4, d5;
    ao_plan_predict(&in, 1, 4, &d4);
    ao_plan_predict(&in, 1, 5, &d5);
    cr_log_info("exposed at distance 4: %llu ns; at 5: %llu", (unsigned long long)d4.exposed_ns,
                (unsigned long long)d5.exposed_ns);
    cr_assert(d4.budget_met && d5.budget_met);
    cr_assert_geq(d4.exposed_ns, d5.exposed_ns + 900000);
    cr_assert_leq(d4.exposed_ns, d5.exposed_ns + 1100000);
}

// A part of a layer is searched at every prefetch distance the count
// allows, not only at the one best for the whole layer: served, with part
// of a layer's bytes over the budget, the plan exposes no more than the
// least part that keeps the budget (in sixteenths) at any other distance.
Test(plan, a_part_at_the_distance_that_exposes_it_least)
{
    ao_plan_in_t in = step(500000, 6, W + N * T - T / 2);
    in.fine_handles = true;
    ao_plan_t p, q;
    ao_plan_make(&in, &p);
    cr_assert(p.budget_met);
    cr_assert_eq(p.count, 1);
    cr_assert(p.part > 0 && p.part < T, "part %llu", (unsigned long long)p.part);
    for (int d = 1; d <= N - 3 && d <= AO_PLAN_MAX_PREFETCH; d++)
        for (int i = 1; i < 15; i++) {
            ao_plan_predict_part(&in, 1, d, T / 16 * (uint64_t)i, &q);
            if (!q.budget_met) continue;
            cr_log_info("distance %d: %d/16 exposes %llu ns", d, i,
                        (unsigned long long)q.exposed_ns);
            cr_assert_leq(p.exposed_ns, q.exposed_ns, "distance %d exposes less than %d", d,
                          p.prefetch);
            break;
        }
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

// --- microbatches: the step's order decides what is live at once -----------------------------
#define M 4

// A 1F1B order as the first stage of two: one warm-up forward, then one
// forward and one backward, then the last backward.
static int one_f_one_b(ao_plan_op_t *ops)
{
    int i = 0, nf = 0;
    for (int l = 0; l < N; l++)
        ops[i++] = (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)nf};
    nf++;
    for (int nb = 0; nb < M; nb++) {
        for (int l = 0; nf < M && l < N; l++)
            ops[i++] = (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)nf};
        if (nf < M) nf++;
        for (int l = N - 1; l >= 0; l--)
            ops[i++] = (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)nb, .bwd = true};
    }
    return i;
}

// M microbatches of equal layers (T each per microbatch), in ops' order
// (NULL: GPipe's), peak_without as that order holds them.
static ao_plan_in_t step_mb(const ao_plan_op_t *ops, uint64_t budget)
{
    ao_plan_in_t in = step(10000000 * M, 50, budget); // times and bytes are a step's
    for (int l = 0; l < N; l++)
        bytes[l] = M * T;
    in.mbs = M;
    in.ops = ops;
    in.peak_without = W + (ops ? 2 : M) * N * T;
    return in;
}

Test(plan, a_step_order_is_checked)
{
    ao_plan_op_t ops[2 * N * M];
    cr_assert_eq(one_f_one_b(ops), 2 * N * M);
    cr_assert(ao_plan_ops_valid(ops, 2 * N * M, N, M));
    cr_assert(!ao_plan_ops_valid(ops, 2 * N * M - 1, N, M), "a backward missing");
    cr_assert(!ao_plan_ops_valid(ops, 2 * N * M, N, M - 1), "a microbatch out of range");
    ao_plan_op_t t = ops[N]; // microbatch 1's first forward
    ops[N] = ops[2 * N];     // ... swapped with microbatch 0's first backward: still whole
    ops[2 * N] = t;
    cr_assert(ao_plan_ops_valid(ops, 2 * N * M, N, M));
    ops[0] = ops[2 * N * M - 1]; // microbatch 0's layer 0 backward before its forward
    cr_assert(!ao_plan_ops_valid(ops, 2 * N * M, N, M));
}

// 1F1B holds two microbatches at once, GPipe all four: the same k layers
// offloaded save 2k T and 4k T (the pool holds what stays; a layer's memory
// waits for a copy out rather than growing it).
Test(plan, one_f_one_b_holds_two_microbatches)
{
    ao_plan_op_t ops[2 * N * M];
    one_f_one_b(ops);
    ao_plan_in_t in = step_mb(ops, 0);
    ao_plan_t p;
    ao_plan_predict(&in, 0, 1, &p);
    cr_assert_eq(p.peak, W + 2 * N * T, "nothing offloaded: the need");
    ao_plan_predict(&in, 4, 1, &p);
    cr_assert_eq(p.peak, W + 2 * (N - 4) * T, "peak %llu", (unsigned long long)p.peak);
    ao_plan_in_t g = step_mb(NULL, 0);
    ao_plan_predict(&g, 4, 1, &p);
    cr_assert_eq(p.peak, W + M * (N - 4) * T, "GPipe: peak %llu", (unsigned long long)p.peak);
}

// The plan under 1F1B: the smallest count whose two microbatches fit, and
// with several microbatches layers near the last are allowed (a microbatch
// waits for the next one's forward whatever its reloads).
Test(plan, one_f_one_b_plan_keeps_the_budget)
{
    ao_plan_op_t ops[2 * N * M];
    one_f_one_b(ops);
    ao_plan_in_t in = step_mb(ops, W + 2 * N * T - 4 * T);
    ao_plan_t p;
    ao_plan_make(&in, &p);
    cr_assert(p.budget_met);
    cr_assert_eq(p.count, 2, "count %d", p.count);
    in.budget = W + 2 * 2 * T; // two layers of each of two microbatches
    ao_plan_make(&in, &p);
    cr_assert(p.budget_met, "peak %llu", (unsigned long long)p.peak);
    cr_assert_gt(p.count, N - 2 - p.prefetch, "count %d at prefetch %d", p.count, p.prefetch);
    cr_assert_leq(p.peak, in.budget);
}

// Gradient accumulation: each microbatch's backward right after its forward,
// so nothing waits for another microbatch and the layers whose reload comes
// as backward begins save nothing, as with one microbatch: never planned.
Test(plan, accumulation_is_one_microbatch_at_a_time)
{
    ao_plan_op_t ops[2 * N * M];
    int i = 0;
    for (int m = 0; m < M; m++) {
        for (int l = 0; l < N; l++)
            ops[i++] = (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)m};
        for (int l = N - 1; l >= 0; l--)
            ops[i++] = (ao_plan_op_t){.layer = (int16_t)l, .mb = (int16_t)m, .bwd = true};
    }
    cr_assert(ao_plan_ops_valid(ops, i, N, M));
    ao_plan_in_t in = step_mb(ops, W); // nothing fits: the lowest peak
    in.peak_without = W + N * T;
    ao_plan_t p;
    ao_plan_make(&in, &p);
    cr_assert(!p.budget_met);
    cr_assert_leq(p.count, N - 2 - p.prefetch, "count %d at prefetch %d", p.count, p.prefetch);
    in.budget = W + N * T - 4 * T;
    ao_plan_make(&in, &p);
    cr_assert(p.budget_met);
    cr_assert_leq(p.peak, in.budget);
    cr_assert_leq(p.count, N - 2 - p.prefetch);
}
