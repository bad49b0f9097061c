// SPDX-License-Identifier: MIT
// The automatic plan's bookkeeping (src/offload/auto.c) without a driver:
// the budget from AOSHIM_BUDGET and the device's figures, a step's
// measurements turned into the next plan, re-plans when a layer's shapes
// change, and what a copy late for its reload does to the schedule. The
// engine's state is set by hand, as the engine would have left it.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "offload/internal.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define N   8

static void fresh(const char *const *env)
{
    char err[512];
    cr_assert_eq(ao_config_load(&ao_config, (char *const *)env, err, sizeof err), 0, "%s", err);
    ao_plan_op_t *ops = ao_auto.ops, *rec = ao_auto.rec_ops;
    free(ops);
    free(rec);
    memset(&ao_auto, 0, sizeof ao_auto);
    ao_eng.nlayers = 0;
    ao_eng.steps = 0;
    ao_eng.manual = false;
    ao_vmm.granule = 2 * MiB; // what ao_vmm_round rounds to, as on a real device
    ao_stat_step_reset();
}

static void fresh_auto(void)
{
    static const char *const env[] = {"AOSHIM_OFFLOAD_LAYERS=auto", NULL};
    fresh(env);
    ao_auto.on = true;
}

// One measured step of N equal layers of per bytes, forward f ns and
// backward 2f, over a link of gbps both ways; every layer tracked.
static void measured_step(uint64_t per, uint64_t f, double gbps)
{
    ao_eng.nlayers = N;
    for (int l = 0; l < N; l++) {
        ao_auto.cur[l] = per;
        ao_auto.tracked[l / 64] |= 1ull << (l % 64);
        ao_auto.fwd_ns[l] = f;
        ao_auto.bwd_ns[l] = 2 * f;
    }
    ao_auto.d2h_bytes = ao_auto.h2d_bytes = (uint64_t)(gbps * 1e9);
    ao_auto.d2h_ns = ao_auto.h2d_ns = 1000000000ull;
}

// --- the budget ---------------------------------------------------------------------------
Test(auto_budget, bytes_given_win)
{
    ao_share_t b = {.bytes = 3 * GiB};
    cr_assert_eq(ao_auto_budget_of(&b, 10 * GiB, 80 * GiB, 1 * GiB), 3 * GiB);
}

Test(auto_budget, a_percent_is_of_the_whole_device)
{
    ao_share_t b = {.percent = 50};
    cr_assert_eq(ao_auto_budget_of(&b, 10 * GiB, 80 * GiB, 1 * GiB), 80 * GiB / 100 * 50);
}

// Unset: what was free, plus what the program already holds, less 5% of the
// device; at least 256 MiB of headroom on a small one.
Test(auto_budget, unset_is_free_and_held_less_headroom)
{
    ao_share_t none = {0};
    cr_assert_eq(ao_auto_budget_of(&none, 60 * GiB, 80 * GiB, 4 * GiB), 64 * GiB - 4 * GiB);
    cr_assert_eq(ao_auto_budget_of(&none, 3 * GiB, 4 * GiB, 0), 3 * GiB - 256 * MiB);
}

Test(auto_budget, nothing_known_is_no_limit)
{
    ao_share_t none = {0};
    cr_assert_eq(ao_auto_budget_of(&none, 0, 0, 0), UINT64_MAX);
}

// --- a step's end: the next plan ----------------------------------------------------------
// What plan.c makes of the step the tests measure (equal layers, forward 5 ms,
// backward 10, a 50 GB/s link), under budget.
static void plan_for(uint64_t budget, ao_plan_t *want)
{
    uint64_t fwd[N], bwd[N];
    for (int l = 0; l < N; l++)
        fwd[l] = 5000000, bwd[l] = 10000000;
    ao_plan_in_t in = {.nlayers = N,
                       .mbs = 1,
                       .bytes = ao_auto.bytes,
                       .fwd_ns = fwd,
                       .bwd_ns = bwd,
                       .peak_without = ao_auto.peak_without,
                       .budget = budget,
                       .d2h = 50,
                       .h2d = 50,
                       .late_d = ao_auto.late_d};
    ao_plan_make(&in, want);
}

// The plan taken is the planner's answer to what the step measured: the
// same as asking plan.c directly with those figures.
Test(auto_step, the_plan_is_the_planners_answer_to_the_measured_step)
{
    fresh_auto();
    ao_auto.budget = 1 * GiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device(0, 0, (int64_t)(N * 200 * MiB)); // the step held all of it at once
    uint64_t peak = ao_stat_step_peak_without();
    ao_auto_step();
    cr_assert(ao_auto.planned);
    cr_assert_eq(ao_auto.plans, 1);
    cr_assert_eq(ao_auto.mbs, 1);
    cr_assert_eq(ao_auto.peak_without, peak);
    for (int l = 0; l < N; l++) {
        cr_assert_eq(ao_auto.bytes[l], 200 * MiB, "layer %d", l);
        cr_assert_eq(ao_auto.cur[l], 0, "layer %d: this step's bytes start again", l);
        cr_assert_eq(ao_auto.want[l], 200 * MiB);
    }
    ao_plan_t want;
    plan_for(1 * GiB, &want); // peak_without is the step's peak, asserted above
    cr_assert_gt(want.count, 0, "the budget is under the need: layers go");
    cr_assert_eq(ao_auto.plan.count, want.count);
    cr_assert_eq(ao_auto.plan.prefetch, want.prefetch);
    cr_assert_eq(ao_auto.plan.peak, want.peak);
    // ... and the schedule follows it.
    cr_assert(ao_sched_now.layer[0].offload);
    cr_assert(!ao_sched_now.layer[want.count].offload);
}

// A step that ends holding more outside its layers than it began with (the
// optimizer's state, made in the first step's optimizer, after the step's
// peak) carries that into the next plan: the planner's answer to the step's
// peak plus it. A step that leaves nothing more carries nothing.
Test(auto_step, what_a_step_leaves_comes_into_the_next_plans_peak)
{
    fresh_auto();
    ao_auto.budget = 2 * GiB;
    ao_stat_device(300 * MiB, 0, 0); // the weights, before the step
    ao_auto.live_start = 300 * MiB;  // as the step's first layer_begin leaves it
    ao_auto.live_start_set = true;
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device(0, 0, (int64_t)(N * 200 * MiB)); // the layers, at the step's peak
    ao_stat_device(0, 0, -(int64_t)(N * 200 * MiB));
    ao_stat_device(600 * MiB, 0, 0); // AdamW's state, in the optimizer
    uint64_t peak = ao_stat_step_peak_without();
    cr_assert_eq(peak, 300 * MiB + N * 200 * MiB, "the state came after the peak");
    ao_auto_step();
    cr_assert_eq(ao_auto.carry, 600 * MiB);
    ao_plan_t want, unheld;
    plan_for(2 * GiB, &unheld);
    ao_auto.peak_without = peak + 600 * MiB;
    plan_for(2 * GiB, &want);
    cr_assert_gt(want.count, unheld.count, "the state takes more layers off: %d, %d", want.count,
                 unheld.count);
    cr_assert_eq(ao_auto.plan.count, want.count);
    cr_assert_eq(ao_auto.plan.peak, want.peak);
    // The next step begins and ends with the state: nothing carried.
    ao_auto.peak_without = peak;
    measured_step(200 * MiB, 5000000, 50);
    ao_auto_step();
    cr_assert_eq(ao_auto.carry, 0);
}

// A step run under one plan from its start that allocated more than the
// plan predicted (what the model does not see: train_step --pytorch's
// gradients beside aoshim's kept memory) holds the plans after it that much
// under the budget, for good; the measuring step, under no plan, teaches
// nothing.
Test(auto_step, what_a_plan_missed_is_held_off_the_next_budget)
{
    fresh_auto();
    ao_auto.budget = 1 * GiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device(0, 0, (int64_t)(N * 200 * MiB));
    ao_auto_step(); // the measuring step: no plan to have missed
    cr_assert_eq(ao_auto.model_slack, 0);
    uint64_t predicted = ao_auto.plan.peak;
    int count = ao_auto.plan.count;
    // The next step, under that plan, allocates 300 MiB more than predicted
    // at its peak (aoshim's count with offloading).
    ao_stat_device(0, 0, -(int64_t)(N * 200 * MiB));
    ao_stat_step_reset();
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device((int64_t)(predicted + 300 * MiB), 0, 0);
    ao_stat_device(0, 0, (int64_t)(N * 200 * MiB));
    ao_auto_step();
    cr_assert_eq(ao_auto.model_slack, 300 * MiB);
    cr_assert_eq(ao_auto_plan_budget(), 1 * GiB - 300 * MiB);
    cr_assert_geq(ao_auto.plan.count, count, "a plan held lower moves no fewer layers");
    // Once seen, kept: a step that allocates as predicted lowers nothing.
    uint64_t slack = ao_auto.model_slack;
    ao_stat_device(-(int64_t)(predicted + 300 * MiB), 0, -(int64_t)(N * 200 * MiB));
    ao_stat_step_reset();
    measured_step(200 * MiB, 5000000, 50);
    ao_auto_step();
    cr_assert_eq(ao_auto.model_slack, slack);
}

Test(auto_step, a_step_that_fits_offloads_nothing)
{
    fresh_auto();
    ao_auto.budget = 8 * GiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device(0, 0, (int64_t)(N * 200 * MiB));
    ao_auto_step();
    cr_assert(ao_auto.planned);
    cr_assert_eq(ao_auto.plan.count, 0);
    for (int l = 0; l < N; l++)
        cr_assert(!ao_sched_now.layer[l].offload, "layer %d", l);
}

// The program's pool held unused reserve at the step's peak (what the
// driver counts beside aoshim's count): the plan is held to the budget less
// it, and is the planner's answer to that budget. Sampled as the engine does
// at a boundary: aoshim counts the step's allocations (all passed through
// here), the pool says what it reserves and uses.
static void pool_step(uint64_t reserved, uint64_t used)
{
    fresh_auto();
    ao_auto.budget = 1 * GiB + 600 * MiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device((int64_t)(N * 200 * MiB), 0, 0); // the step's peak, all the pool's
    ao_auto_pool_note(reserved, used);
    ao_auto_step();
}

Test(auto_step, the_pools_unused_reserve_lowers_the_budget_planned_to)
{
    pool_step(N * 200 * MiB + 300 * MiB, N * 200 * MiB); // 300 MiB unused at the peak
    cr_assert_eq(ao_auto.pool_slack, 300 * MiB);
    cr_assert_eq(ao_auto_plan_budget(), 1 * GiB + 300 * MiB);
    ao_plan_t want, unheld;
    plan_for(1 * GiB + 300 * MiB, &want);
    plan_for(1 * GiB + 600 * MiB, &unheld);
    cr_assert_gt(want.count, unheld.count, "the reserve takes more layers off: %d, %d", want.count,
                 unheld.count);
    cr_assert_eq(ao_auto.plan.count, want.count);
    cr_assert_eq(ao_auto.plan.peak, want.peak);
    cr_assert_leq(ao_auto.plan.peak + ao_auto.pool_slack, ao_auto.budget,
                  "with the reserve, the device keeps the budget");
    // A later step that measured less keeps the most seen: the plan it made
    // would not hold where the reserve came back.
    ao_stat_step_reset();
    measured_step(200 * MiB, 5000000, 50);
    ao_auto_pool_note(N * 200 * MiB + 10 * MiB, N * 200 * MiB);
    ao_auto_step();
    cr_assert_eq(ao_auto.pool_slack, 300 * MiB);
}

Test(auto_step, no_unused_reserve_changes_nothing)
{
    pool_step(N * 200 * MiB, N * 200 * MiB);
    cr_assert_eq(ao_auto.pool_slack, 0);
    cr_assert_eq(ao_auto_plan_budget(), ao_auto.budget);
    ao_plan_t want;
    plan_for(ao_auto.budget, &want);
    cr_assert_eq(ao_auto.plan.count, want.count);
    cr_assert_eq(ao_auto.plan.prefetch, want.prefetch);
    cr_assert_eq(ao_auto.plan.peak, want.peak);
}

// A layer not tracked this step (passed through) keeps last step's bytes.
// What the device holds beyond the allocations, from the driver's count at
// the step's peak and at the forward's boundaries: a boundary may hold more
// (the program's segments' free space, which the peak fills). The measuring
// step's boundaries hold for the next plan only; a step run under one plan
// keeps the peak's figure where it measured at least the device's own
// memory, and the boundaries' where the samples missed the peak.
static void beyond_step(uint64_t at_peak, uint64_t at_boundary)
{
    __atomic_store_n(&ao_stat_where_now, AO_WHERE_FORWARD + 3, __ATOMIC_RELAXED);
    ao_stat_step_reset();
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device((int64_t)(N * 200 * MiB), 0, 0); // the peak, in layer 3's forward
    ao_auto_device_note(N * 200 * MiB + at_peak);   // the driver's count there
    ao_auto.beyond_step = at_boundary;
    ao_auto_step();
    ao_stat_device(-(int64_t)(N * 200 * MiB), 0, 0);
}

Test(auto_step, the_peaks_figure_is_held_not_a_boundarys_larger_one)
{
    fresh_auto();
    ao_auto.budget = 1 * GiB + 600 * MiB;
    __atomic_store_n(&ao_stats[AO_STAT_DEVICE_OTHER_MIN], 100 * MiB + 1, __ATOMIC_RELAXED);
    beyond_step(300 * MiB, 800 * MiB); // the measuring step
    cr_assert_eq(ao_auto.pool_slack, 300 * MiB, "%llu MiB",
                 (unsigned long long)(ao_auto.pool_slack >> 20));
    cr_assert_eq(ao_auto_plan_budget(), ao_auto.budget - 800 * MiB,
                 "the next plan holds the boundaries' figure");
    beyond_step(300 * MiB, 800 * MiB); // a step under that plan
    cr_assert_eq(ao_auto.pool_slack, 300 * MiB);
    cr_assert_eq(ao_auto_plan_budget() + ao_auto.model_slack, ao_auto.budget - 300 * MiB,
                 "then the peak's");
    beyond_step(50 * MiB, 800 * MiB); // the samples missed the peak: under the device's own
    cr_assert_eq(ao_auto.pool_slack, 800 * MiB);
    __atomic_store_n(&ao_stats[AO_STAT_DEVICE_OTHER_MIN], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ao_stat_where_now, 0, __ATOMIC_RELAXED);
}

// A layer's chunks made (bytes > 0) or gone, as the engine counts them: the
// layer's own count first, then the step's.
static void layer_chunks(int l, int64_t bytes)
{
    ao_auto_layer_live(l, bytes);
    ao_stat_device(0, 0, bytes);
}

// A step under a plan that split layer 2 held 60 MiB less of it at its peak
// than the step before, which mapped it whole (a split layer's buffers
// freed after its end give their chunks back; a whole chunk holds them):
// the next plan, which does not split it, is the planner's answer to the
// peak with the layer as it was whole, not to the peak measured.
Test(auto_step, a_layer_split_last_step_counts_at_the_peak_what_it_held_whole)
{
    fresh_auto();
    ao_stat_on_peak_without = ao_auto_live_at_peak;
    ao_auto.budget = 1 * GiB;
    measured_step(200 * MiB, 5000000, 50); // the measuring step: every layer whole
    for (int l = 0; l < N; l++)
        layer_chunks(l, 210 * MiB);
    ao_auto_step();
    for (int l = 0; l < N; l++)
        layer_chunks(l, -210 * (int64_t)MiB);
    ao_stat_step_reset();
    // The next step ran under a plan that split layer 2.
    ao_auto.plan.count = 3;
    ao_auto.plan.part = 100 * MiB;
    ao_auto.plans_at_start = (int)ao_auto.plans;
    measured_step(200 * MiB, 5000000, 50);
    for (int l = 0; l < N; l++)
        layer_chunks(l, (l == 2 ? 150 : 210) * (int64_t)MiB);
    uint64_t peak = ao_stat_step_peak_without();
    cr_assert_eq(peak, (7 * 210 + 150) * MiB);
    cr_assert_eq(ao_auto.live_at_peak[2], 150 * MiB);
    ao_auto_step();
    cr_assert_eq(ao_auto.peak_without, peak, "the measured figure stays the step's");
    ao_plan_t measured, whole;
    plan_for(ao_auto_plan_budget(), &measured);
    cr_assert(measured.count != 3 || !measured.part, "the test's plan must not split layer 2");
    ao_auto.peak_without = peak + 60 * MiB;
    plan_for(ao_auto_plan_budget(), &whole);
    cr_assert(whole.count != measured.count || whole.part != measured.part,
              "the 60 MiB must change the plan for the test to mean anything");
    cr_assert_eq(ao_auto.plan.count, whole.count);
    cr_assert_eq(ao_auto.plan.part, whole.part);
    cr_assert_eq(ao_auto.plan.peak, whole.peak);
    ao_stat_on_peak_without = NULL;
}

Test(auto_step, an_untracked_layer_keeps_its_last_bytes)
{
    fresh_auto();
    ao_auto.budget = 8 * GiB;
    ao_auto.bytes[3] = 123 * MiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_auto.tracked[0] &= ~(1ull << 3);
    ao_auto_step();
    cr_assert_eq(ao_auto.bytes[3], 123 * MiB);
    cr_assert_eq(ao_auto.bytes[2], 200 * MiB);
}

// The step's order: a whole GPipe step of two microbatches is taken as the
// plan's model; one with a backward missing is not (GPipe's is assumed).
Test(auto_step, a_whole_step_order_is_taken_a_broken_one_is_not)
{
    fresh_auto();
    ao_auto.budget = 8 * GiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_auto.max_mb = 1;
    for (int mb = 0; mb < 2; mb++)
        for (int l = 0; l < N; l++)
            ao_auto_op_record(l, mb, false);
    for (int mb = 0; mb < 2; mb++)
        for (int l = N - 1; l >= 0; l--)
            ao_auto_op_record(l, mb, true);
    ao_auto_step();
    cr_assert_eq(ao_auto.mbs, 2);
    cr_assert_eq(ao_auto.nops, 4 * N);
    cr_assert_eq(ao_auto.want[0], 100 * MiB, "one microbatch's share");

    measured_step(200 * MiB, 5000000, 50);
    ao_auto.max_mb = 1;
    for (int mb = 0; mb < 2; mb++)
        for (int l = 0; l < N; l++)
            ao_auto_op_record(l, mb, false);
    for (int l = N - 1; l > 0; l--) // layer 0's backward never came
        ao_auto_op_record(l, 0, true);
    ao_auto_step();
    cr_assert_eq(ao_auto.nops, 0);
}

// --- changed shapes -----------------------------------------------------------------------
// A layer that saves twice what the plan expects: every layer is expected
// to grow alike, at once, with its times scaled until measured again.
Test(auto_shapes, a_layer_twice_as_large_rescales_every_layer)
{
    fresh_auto();
    ao_auto.budget = 1 * GiB;
    measured_step(100 * MiB, 4000000, 50);
    ao_auto_step();
    cr_assert(ao_auto.planned);
    unsigned plans = ao_auto.plans;

    ao_scope_t s = {.layer = 2};
    s.rec.saved = 200 * MiB;
    ao_auto_check_shapes(&s);
    cr_assert(ao_auto.reshaped);
    for (int l = 0; l < N; l++) {
        cr_assert_eq(ao_auto.want[l], 200 * MiB, "layer %d", l);
        cr_assert_eq(ao_auto.fwd_est[l], 8000000, "layer %d", l);
        cr_assert_eq(ao_auto.fwd_ns[l], 0, "layer %d: measured again", l);
    }
    cr_assert_str_eq(ao_auto.shape_why, "re-planned: layer 2 saves 200.0 MiB, was 100.0 MiB "
                                        "(shapes changed)");
    cr_assert_geq(ao_auto.plans, plans, "a new plan was taken");
}

Test(auto_shapes, the_same_bytes_change_nothing)
{
    fresh_auto();
    ao_auto.budget = 1 * GiB;
    measured_step(100 * MiB, 4000000, 50);
    ao_auto_step();
    ao_scope_t s = {.layer = 2};
    s.rec.saved = 100 * MiB;
    ao_auto_check_shapes(&s);
    cr_assert(!ao_auto.reshaped);
    cr_assert_eq(ao_auto.fwd_ns[2], 4000000);
}

// --- a copy late for its reload -----------------------------------------------------------
// Under 'all' (which offloads layers 0-4 of 8 at prefetch 1: the last three
// come back first): the late layer and every later one stay on the device
// from then on; a later layer's late copy changes nothing more, an earlier
// one's moves the line down.
Test(auto_late, all_stops_offloading_from_the_late_layer_on)
{
    static const char *const env[] = {"AOSHIM_OFFLOAD_LAYERS=all", NULL};
    fresh(env);
    ao_eng.nlayers = N;
    ao_eng.steps = 1;
    ao_sched_update();
    cr_assert(ao_sched_now.layer[4].offload);
    cr_assert(!ao_sched_now.layer[5].offload);
    ao_scope_t s = {.layer = 3};
    ao_auto_copy_too_late(&s);
    cr_assert(ao_auto.late);
    cr_assert_eq(ao_auto.late_from, 3);
    cr_assert(ao_sched_now.layer[2].offload);
    cr_assert(!ao_sched_now.layer[3].offload);
    cr_assert(!ao_sched_now.layer[4].offload);
    s.layer = 4;
    ao_auto_copy_too_late(&s);
    cr_assert_eq(ao_auto.late_from, 3);
    s.layer = 1;
    ao_auto_copy_too_late(&s);
    cr_assert_eq(ao_auto.late_from, 1);
    cr_assert(ao_sched_now.layer[0].offload);
    cr_assert(!ao_sched_now.layer[1].offload);
    cr_assert_str_eq(ao_auto.late_why,
                     "layer 1 on not offloaded: its copy out was late for its reload");
}

// In the first step (steps 0) the timing is the measuring step's: not held
// against the layer.
Test(auto_late, the_first_step_is_not_held_against_a_layer)
{
    static const char *const env[] = {"AOSHIM_OFFLOAD_LAYERS=all", NULL};
    fresh(env);
    ao_eng.nlayers = N;
    ao_sched_update();
    ao_scope_t s = {.layer = 3};
    ao_auto_copy_too_late(&s);
    cr_assert(!ao_auto.late);
    cr_assert(ao_sched_now.layer[3].offload);
}

// Under a plan: the layer is marked with the plan's prefetch distance, the
// next plan is made with it, and the reason is given.
Test(auto_late, a_planned_layer_is_marked_with_its_prefetch)
{
    fresh_auto();
    ao_eng.steps = 1;
    ao_auto.budget = 1 * GiB;
    measured_step(200 * MiB, 5000000, 50);
    ao_stat_device(0, 0, (int64_t)(N * 200 * MiB));
    ao_auto_step();
    cr_assert_gt(ao_auto.plan.count, 1);
    int d = ao_auto.plan.prefetch > 0 ? ao_auto.plan.prefetch : 1;
    ao_scope_t s = {.layer = 0};
    ao_auto_copy_too_late(&s);
    cr_assert_eq(ao_auto.late_d[0], d);
    cr_assert_not_null(ao_auto.why);
    cr_assert(strstr(ao_auto.why, "layer 0's copy out was late for its reload") != NULL, "%s",
              ao_auto.why);
}

// Where a peak came, in the plan's words: a layer's forward, the time after
// a forward layer's end and before the next layer call (after the last of
// the layers the plan knows: the head), the backward, the optimizer.
Test(auto_step, the_place_of_a_peak_is_named)
{
    char w[96];
    ao_stat_where_text(AO_WHERE_FORWARD + 3, 8, w, sizeof w);
    cr_expect_str_eq(w, "the forward of layer 3");
    ao_stat_where_text(AO_WHERE_ENDED + 3, 8, w, sizeof w);
    cr_expect_str_eq(w, "no layer (after the forward of layer 3)");
    ao_stat_where_text(AO_WHERE_ENDED + 7, 8, w, sizeof w);
    cr_expect_str_eq(w, "the head (after the last layer's forward, layer 7)");
    ao_stat_where_text(AO_WHERE_ENDED + 7, 0, w, sizeof w);
    cr_expect_str_eq(w, "no layer (after the forward of layer 7)");
    ao_stat_where_text(AO_WHERE_ENDED + AO_MAX_LAYERS - 1, 8, w, sizeof w);
    cr_expect_str_eq(w, "no layer (after the forward of layer 4095)");
    ao_stat_where_text(AO_WHERE_BACKWARD, 8, w, sizeof w);
    cr_expect_str_eq(w, "the backward");
    ao_stat_where_text(AO_WHERE_AFTER, 8, w, sizeof w);
    cr_expect_str_eq(w, "the optimizer (after the backward)");
}
