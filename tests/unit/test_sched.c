// SPDX-License-Identifier: MIT
// The schedules (src/offload/sched.c): what each policy asks the engine to
// do with every layer, checked against the policy's own definition.
#include <criterion/criterion.h>
#include <string.h>

#include "offload/sched.h"

static ao_sched_t S;

static ao_config_t cfg(const char *layers, unsigned prefetch)
{
    ao_config_t c;
    char err[256];
    cr_assert_eq(ao_config_load(&c, (char *[]){NULL}, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ao_config_set(&c, "OFFLOAD_LAYERS", layers, err, sizeof err), 0, "%s", err);
    c.prefetch = prefetch;
    return c;
}

static void make(const ao_config_t *c, int n, const ao_plan_t *plan)
{
    ao_sched_make(&(ao_sched_in_t){.cfg = c, .nlayers = n, .plan = plan, .budget = 1000, .late_from = -1}, &S);
}

static int count(int n)
{
    int k = 0;
    for (int l = 0; l < n; l++)
        k += S.layer[l].offload;
    return k;
}

// 'all': every layer but the last 2 + prefetch, each copied at its release
// point, given back when the copy is done, reloaded prefetch layers ahead.
Test(sched, all_skips_the_layers_reloaded_at_once)
{
    ao_config_t c = cfg("all", 2);
    make(&c, 12, NULL);
    cr_assert_eq(count(12), 8); // 0 .. 12-3-2 = 7
    cr_assert(S.layer[7].offload && !S.layer[8].offload);
    for (int l = 0; l < 8; l++) {
        cr_expect_eq(S.layer[l].copy_at, l + 1);
        cr_expect_eq(S.layer[l].release_at, -1);
        cr_expect_eq(S.layer[l].reload_at, l + 3);
    }
    cr_assert(!S.none && !S.reload_after_compute && !S.release_waits && S.min_held == 0);
    // The first step: the count is not known, every layer goes.
    make(&c, 0, NULL);
    cr_assert(S.layer[100].offload && !S.none);
}

Test(sched, counts_lists_percentages_and_none)
{
    ao_config_t c = cfg("3", 1);
    make(&c, 12, NULL);
    cr_assert_eq(count(12), 3);
    c = cfg("2,5-6,11", 1);
    make(&c, 12, NULL);
    cr_assert(S.layer[2].offload && S.layer[5].offload && S.layer[6].offload);
    cr_assert(!S.layer[11].offload, "the last layer is never offloaded");
    cr_assert_eq(count(12), 3);
    c = cfg("50%", 1);
    make(&c, 12, NULL);
    cr_assert_eq(count(12), 6);
    c = cfg("none", 1);
    make(&c, 12, NULL);
    cr_assert(S.none);
    make(&c, 0, NULL);
    cr_assert(S.none, "a set naming no layer is none from the start");
    c = cfg("50%", 1);
    make(&c, 0, NULL);
    cr_assert(!S.none, "a percentage is not known before the layer count is");
    c = cfg("1", 1);
    make(&c, 0, NULL);
    cr_assert(!S.none);
}

// auto: before its plan, 'all' once the device holds half the budget; then
// the plan's first layers and prefetch distance; a plan of nothing is none.
Test(sched, auto_follows_its_plan)
{
    ao_config_t c = cfg("auto", 1);
    make(&c, 12, NULL);
    cr_assert_eq(S.min_held, 1000);
    cr_assert_eq(S.min_held_floor, 500);
    cr_assert_eq(S.margin_layers, 3);
    cr_assert_eq(count(12), 9);
    ao_plan_t p = {.count = 4, .prefetch = 3};
    make(&c, 12, &p);
    cr_assert_eq(count(12), 4);
    cr_assert(S.layer[3].offload && !S.layer[4].offload);
    cr_assert_eq(S.layer[0].reload_at, 4);
    cr_assert_eq(S.min_held, 0);
    p.count = 0;
    make(&c, 12, &p);
    cr_assert(S.none);
}

// TransformerEngine's default schedule for num_layers = K of N: layer i
// done copying when layer N-K+i begins (the end of N-K+i-1), reloaded when
// the backward of N-1-K+i begins, reloads after the compute stream's work.
Test(sched, te_is_transformer_engines_default)
{
    ao_sched_te(3, 12, &S);
    cr_assert_eq(count(12), 3);
    cr_assert(S.reload_after_compute && S.release_waits);
    cr_assert_str_eq(S.name, "te");
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(S.layer[i].copy_at, i);
        cr_expect_eq(S.layer[i].release_at, 12 - 3 + i - 1);
        cr_expect_eq(S.layer[i].reload_at, 12 - 1 - 3 + i);
    }
    // K = N-1: each copy is waited for as the next layer begins, and comes
    // back at its own backward.
    ao_sched_te(11, 12, &S);
    cr_assert_eq(count(12), 11);
    cr_expect_eq(S.layer[4].release_at, 4);
    cr_expect_eq(S.layer[4].reload_at, 4);
    // More than N-1 is N-1 (TransformerEngine asserts; the engine says so).
    ao_sched_te(40, 12, &S);
    cr_assert_eq(count(12), 11);
    // Through the options: AOSHIM_SCHEDULE=te with a count, once N is known.
    ao_config_t c = cfg("5", 1);
    char err[256];
    cr_assert_eq(ao_config_set(&c, "SCHEDULE", "te", err, sizeof err), 0, "%s", err);
    make(&c, 12, NULL);
    cr_assert_str_eq(S.name, "te");
    cr_assert_eq(count(12), 5);
    make(&c, 0, NULL); // the first step: as AOSHIM_OFFLOAD_LAYERS=5
    cr_assert_str_eq(S.name, "aoshim");
    cr_assert(S.layer[4].offload && !S.layer[5].offload);
}

// AOSHIM_SCHEDULE's values, and te without a count refused at start.
Test(sched, the_option)
{
    unsigned v;
    cr_assert_eq(ao_parse_schedule("aoshim", &v), 0);
    cr_assert_eq(v, AO_SCHEDULE_AOSHIM);
    cr_assert_eq(ao_parse_schedule("TE", &v), 0);
    cr_assert_eq(v, AO_SCHEDULE_TE);
    const char *bad[] = {"", "t", "te ", "te:4", "auto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_schedule(bad[i], &v), -1, "accepted '%s'", bad[i]);
    ao_config_t c;
    char err[256];
    cr_assert_eq(ao_config_load(&c, (char *[]){"AOSHIM_SCHEDULE=te", "AOSHIM_OFFLOAD_LAYERS=4",
                                               NULL},
                                err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(ao_config_load(&c, (char *[]){"AOSHIM_SCHEDULE=te", "AOSHIM_OFFLOAD_LAYERS=all",
                                               NULL},
                                err, sizeof err),
                 -1);
    cr_assert(strstr(err, "AOSHIM_SCHEDULE='te': TransformerEngine's schedule needs"), "%s", err);
}
