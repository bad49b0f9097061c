// SPDX-License-Identifier: MIT
// End-to-end: train_step on the simulated GPU, with and without libaoshim.so
// preloaded. What a user would check: the gradients are the same bits, the
// peak device memory drops by what the offloaded layers hold, the step is no
// slower when the link keeps up (and slower by what the link costs when it
// does not), a model that does not fit runs, and the steady state makes no
// slow driver calls. All figures come from the simulator, never from aoshim.
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "e2e_run.h"

// --- configurations --------------------------------------------------------------------
// Data mode (real kernels, real checksum), small enough for ~1-2 s a run on
// one core, large enough that the saved activations (2sbh = 1 MiB and up)
// reach AOSHIM_MIN_BYTES (1 MiB) and are really offloaded.
#define DATA "--layers 8 --hidden 512 --seq 512 --batch 2 --heads 8 --fused --steps 2"
// Four microbatches of the same per-microbatch size; 4 layers keep it fast.
#define MB4                                                                                        \
    "--layers 4 --hidden 512 --seq 1024 --batch 1 --heads 8 --fused --steps 1 --microbatches 4"
// The memory and speed model: N = 8 equal layers whose every saved buffer is
// a multiple of 2 MiB (s*b*h = 8 Mi), no data: sizes and times only.
#define N_LAYERS  8
#define K_OFFLOAD 6
#define MODEL_S   2048
#define MODEL_B   1
#define MODEL_H   4096
#define MODEL_A   32
#define MODEL     "--layers 8 --hidden 4096 --seq 2048 --batch 1 --heads 32 --fused --nodata"

#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})
// The static policy that offloads every layer worth it. The default is
// 'auto', which offloads nothing where the step fits the device (every
// model here fits the simulated 80 GiB): a test that needs layers to move
// says so.
#define ALL "AOSHIM_OFFLOAD_LAYERS=all"

static void dump(const char *what, const e2e_result_t *r)
{
    // The tail of the child's stderr explains most failures (a fault line,
    // an aoshim warning): log it so a red test says why.
    size_t n = strlen(r->err);
    cr_log_warn("%s: exit %d, last line: %s%s", what, r->status, r->have_line ? "" : "(none)",
                r->have_line ? strstr(r->out, "train_step status=") : "");
    cr_log_warn("%s stderr (tail): %s", what, r->err + (n > 1500 ? n - 1500 : 0));
}

static void expect_ok(const char *what, const e2e_result_t *r)
{
    if (r->status != 0 || !r->have_line || strcmp(r->ts_status, "ok") != 0 || r->races != 0)
        dump(what, r);
    cr_assert_eq(r->status, 0, "%s: exit status %d (86: the simulator saw a fault)", what,
                 r->status);
    cr_assert(r->have_line, "%s: no 'train_step status=' line", what);
    cr_assert_str_eq(r->ts_status, "ok", "%s: status=%s", what, r->ts_status);
    cr_assert_eq(r->races, 0, "%s: races=%" PRIu64, what, r->races);
}

// Bytes aoshim says it offloaded (from its exit summary), so a same-bits
// test cannot pass because nothing was offloaded at all.
static double offloaded_bytes(const e2e_result_t *r)
{
    const char *v = e2e_summary(r->err, "offloaded / reloaded");
    cr_assert(v, "no 'offloaded / reloaded' row in aoshim's summary:\n%s", r->err);
    return e2e_bytes(v);
}

static void same_bits(const char *args, const char *const *aoenv)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, aoenv, args);
    expect_ok("with aoshim", &with);
    cr_log_info("%s: checksum %s / %s, peak %" PRIu64 " / %" PRIu64 ", step %" PRIu64 " / %" PRIu64
                " ns (without / with)",
                args, base.checksum, with.checksum, base.peak, with.peak, base.step_ns,
                with.step_ns);
    cr_assert_str_eq(with.checksum, base.checksum, "gradients differ under aoshim (%s)", args);
    double off = offloaded_bytes(&with);
    cr_assert_gt(off, 0, "aoshim offloaded nothing: the comparison proves nothing");
    // Nothing lost on the way: train_step frees no offloaded buffer before
    // its backward, so every byte released to the host comes back.
    const char *row = e2e_summary(with.err, "offloaded / reloaded");
    const char *slash = row ? strstr(row, " / ") : NULL;
    cr_assert(slash);
    cr_assert_eq(e2e_bytes(slash + 3), off, "offloaded and reloaded differ: %.40s", row);
    e2e_free(&base);
    e2e_free(&with);
}

// Early copies (engine.c): from the second step, a layer's buffers that the
// next layer does not use are copied out at the layer's own end. train_step
// under 'all', 4 steps with data: most of the bytes go early (the next layer
// reads only a layer's output), the few the first early step copied early
// and then saw used are copied again (at most one per layer, then learned),
// and the bits are those without aoshim.
Test(e2e, early_copies_same_bits, .timeout = 60)
{
    const char *args = "--layers 8 --hidden 512 --seq 512 --batch 2 --heads 8 --fused --steps 4";
    same_bits(args, ENV(ALL));
    e2e_result_t with;
    e2e_train(&with, true, ENV(ALL), args);
    expect_ok("all", &with);
    const char *row = e2e_summary(with.err, "offload copies (D2H)");
    cr_assert(row, "no D2H row:\n%s", with.err);
    const char *semi = strchr(row, ';');
    cr_assert(semi, "no early copies in: %.200s", row);
    double early = e2e_bytes(semi + 2), off = offloaded_bytes(&with);
    const char *again = strstr(semi, "end, ");
    cr_assert(again, "%.200s", row);
    long n_again = strtol(again + 5, NULL, 10);
    cr_log_info("early %.0f of %.0f bytes offloaded, %ld buffers copied again: %.*s", early, off,
                n_again, (int)strcspn(row, "\n"), row);
    // Steps 2 to 4 of 4 copy early, each all but the outputs of the 7 layers
    // 'all' offloads.
    cr_assert_gt(early, 0.5 * off, "%.0f of %.0f bytes early", early, off);
    cr_assert_leq(n_again, 8, "%ld buffers copied again", n_again);
    e2e_free(&with);
}

// --- same bits ----------------------------------------------------------------------------
Test(e2e, same_bits_all, .timeout = 60)
{
    same_bits(DATA, ENV(ALL));
}
Test(e2e, same_bits_1f1b, .timeout = 60)
{
    same_bits(MB4 " --schedule 1f1b", ENV(ALL));
}
Test(e2e, same_bits_gpipe, .timeout = 60)
{
    same_bits(MB4 " --schedule gpipe", ENV(ALL));
}
Test(e2e, same_bits_checkpoint, .timeout = 60)
{
    same_bits(DATA " --checkpoint 1,3", ENV(ALL));
}
Test(e2e, same_bits_alloc_malloc, .timeout = 60)
{
    same_bits(DATA " --alloc malloc", ENV(ALL));
}
Test(e2e, same_bits_prefetch1, .timeout = 60)
{
    same_bits(DATA, ENV(ALL, "AOSHIM_PREFETCH=1"));
}
Test(e2e, same_bits_prefetch3, .timeout = 60)
{
    same_bits(DATA, ENV(ALL, "AOSHIM_PREFETCH=3"));
}
// AOSHIM_OFFLOAD_LAYERS=auto under budgets the steps do not fit without
// offloading (peaks without: 243, 199, 334 and 210 MiB): the plan's layers
// move, the same bits, no race.
Test(e2e, same_bits_auto, .timeout = 60)
{
    same_bits(DATA, ENV("AOSHIM_OFFLOAD_LAYERS=auto", "AOSHIM_BUDGET=200M"));
}
Test(e2e, same_bits_auto_1f1b, .timeout = 60)
{
    same_bits(MB4 " --schedule 1f1b", ENV("AOSHIM_OFFLOAD_LAYERS=auto", "AOSHIM_BUDGET=180M"));
}
Test(e2e, same_bits_auto_gpipe, .timeout = 60)
{
    same_bits(MB4 " --schedule gpipe", ENV("AOSHIM_OFFLOAD_LAYERS=auto", "AOSHIM_BUDGET=280M"));
}
// TransformerEngine's schedule run through aoshim's manual one (train_step
// --te-schedule, as aoshim.torch.get_cpu_offload_context drives it).
Test(e2e, same_bits_te_schedule, .timeout = 60)
{
    same_bits(DATA " --te-schedule 4", NULL);
}
// A plan that offloads part of a layer, with data: a GPT-2-width step
// whose layer-0 copy outlasts the forward on a 25 GB/s link while part of
// it does not, half a layer under the need as aoshim counts it (at 35 GB/s
// the whole layer's copy hides once it starts at the layer's own end). The part's
// buffers go, the others stay in a chunk of their own; the bits are the
// same, no race.
Test(e2e, same_bits_auto_part, .timeout = 120)
{
    const char *args = "--layers 12 --hidden 768 --seq 512 --batch 2 --heads 12 --fused --steps 3";
    const char *const link[] = {"SIM_D2H_GBPS=25", "SIM_H2D_GBPS=25", NULL};
    e2e_result_t base, with;
    e2e_train(&base, false, link, args);
    expect_ok("without aoshim", &base);
    // The budget comes from what the program allocates at most (alloc_peak,
    // 645.9 MiB; T = 25.6 MiB): aoshim holds the plan to the budget less the
    // pool's unused reserve at the step's peak (2.1 MiB here, 0.08 T: the
    // pool grows at its end, tests/sim/README.md; 40.6 MiB when it left
    // each tail behind), so the need as it counts it is about alloc_peak +
    // 0.1 T. The budget alloc_peak - T/4 leaves it half a layer to find:
    // measured, 12.0 MiB of layer 0's 24.0 (parts from - 0.25 T to + 0 T;
    // - 0.4 T to - 0.75 T the whole of layer 0, - T layers 0-1).
    char budget[64];
    cr_assert_gt(base.alloc_peak, 0, "train_step printed no alloc_peak_bytes");
    snprintf(budget, sizeof budget, "AOSHIM_BUDGET=%" PRIu64,
             base.alloc_peak - base.act_per_layer / 4);
    const char *const env[] = {"SIM_D2H_GBPS=25", "SIM_H2D_GBPS=25", "AOSHIM_OFFLOAD_LAYERS=auto",
                               budget, NULL};
    e2e_train(&with, true, env, args);
    expect_ok("auto, part of a layer", &with);
    const char *row = e2e_summary(with.err, "offload plan");
    cr_assert(row, "no 'offload plan' row:\n%s", with.err);
    cr_log_info("part: checksum %s / %s, peak %" PRIu64 " / %" PRIu64 ", races %" PRIu64 ": %.*s",
                base.checksum, with.checksum, base.peak, with.peak, with.races,
                (int)strcspn(row, "\n"), row);
    cr_assert(strstr(row, "(of layer "), "no part in the plan: %.200s", row);
    cr_assert_str_eq(with.checksum, base.checksum);
    cr_assert_eq(with.races, 0);
    e2e_free(&base);
    e2e_free(&with);
}

// The same schedule carried out by the engine (AOSHIM_SCHEDULE=te).
Test(e2e, same_bits_te_engine, .timeout = 60)
{
    same_bits(DATA, ENV("AOSHIM_SCHEDULE=te", "AOSHIM_OFFLOAD_LAYERS=4"));
}
Test(e2e, same_bits_auto_checkpoint, .timeout = 60)
{
    same_bits(DATA " --checkpoint 1,3", ENV("AOSHIM_OFFLOAD_LAYERS=auto", "AOSHIM_BUDGET=180M"));
}

// --- the safety net ------------------------------------------------------------------------
// Late reloads as the summary counts them.
// train_step --pytorch: autocast's weight casts saved inside each block,
// gradients made by the backward, AdamW's states and its transient. The
// same bits under 'all', and with recomputed layers and interleaved
// microbatches.
Test(e2e, same_bits_pytorch_like, .timeout = 60)
{
    same_bits(DATA " --pytorch --steps 3", ENV(ALL));
}
Test(e2e, same_bits_pytorch_like_checkpoint_1f1b, .timeout = 60)
{
    same_bits(MB4 " --pytorch --schedule 1f1b --checkpoint 2", ENV(ALL));
}

// AOSHIM_SERVE=1 (offload/serve.c): the program's own stream-ordered
// allocations (its gradients, AdamW's states and transient, the backward's
// temporaries) come from aoshim's memory, one pool with the layers'. The
// same bits, no race, under 'all', one layer, auto, and with recomputed
// layers and interleaved microbatches (two streams' allocations).
static uint64_t served_allocs(const e2e_result_t *r)
{
    const char *v = e2e_summary(r->err, "served from aoshim's memory");
    cr_assert(v, "no 'served from aoshim's memory' row:\n%s", r->err);
    return strtoull(v, NULL, 10);
}

Test(e2e, same_bits_served, .timeout = 60)
{
    const char *const env[] = {"AOSHIM_SERVE=1", "AOSHIM_OFFLOAD_LAYERS=all", NULL};
    same_bits(DATA " --pytorch --steps 3", env);
    e2e_result_t r;
    e2e_train(&r, true, env, DATA " --pytorch --steps 3");
    expect_ok("served", &r);
    cr_assert_gt(served_allocs(&r), 0, "nothing served: the comparison proves nothing");
    // Served, the step without offloading is modelled: the program's
    // allocations in one pool, with its fragments, and the row says so
    // (docs/report.md).
    cr_assert(strstr(r.err, "without offloading (modelled: the program's allocations in one "
                            "pool, with its fragments)"),
              "the device row does not say its model is the pool's:\n%s", r.err);
    e2e_free(&r);
}
Test(e2e, same_bits_served_one_layer, .timeout = 60)
{
    same_bits(DATA " --pytorch --steps 3", ENV("AOSHIM_SERVE=1", "AOSHIM_OFFLOAD_LAYERS=1"));
}
Test(e2e, same_bits_served_checkpoint_1f1b, .timeout = 60)
{
    same_bits(MB4 " --pytorch --schedule 1f1b --checkpoint 2",
              ENV("AOSHIM_SERVE=1", "AOSHIM_OFFLOAD_LAYERS=all"));
}

// Served under a budget half a layer under the program's most: the plan
// takes a part of a layer (of layer 0; since the plan holds off the budget
// what a forward boundary held beyond the allocations, 44 MiB here, layer 0
// and a part of layer 1), whose buffers each have a chunk, and each chunk
// goes back as soon as its own copy is done (ao_poll_locked), before the
// layer's last copy: the same bits, no race, no fault (a chunk unmapped
// under a copy still reading it would fault).
// 67 s on two CPUs beside one other test (twice that beside the suite).
Test(e2e, same_bits_served_part, .timeout = 240)
{
    const char *args = "--layers 8 --hidden 512 --seq 1024 --batch 2 --heads 8 --steps 4 --pytorch";
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    char budget[64];
    snprintf(budget, sizeof budget, "AOSHIM_BUDGET=%" PRIu64,
             base.alloc_peak - base.act_per_layer / 2);
    e2e_train(&with, true, ENV("AOSHIM_SERVE=1", budget), args);
    expect_ok("served, part of a layer", &with);
    const char *row = e2e_summary(with.err, "offload plan");
    cr_assert(row, "no 'offload plan' row:\n%s", with.err);
    cr_log_info("served part: checksum %s / %s, peak %" PRIu64 " / %" PRIu64 ": %.*s",
                base.checksum, with.checksum, base.peak, with.peak, (int)strcspn(row, "\n"), row);
    cr_assert(strstr(row, "(of layer "), "no part in the plan: %.200s", row);
    cr_assert_str_eq(with.checksum, base.checksum);
    cr_assert_eq(with.races, 0);
    cr_assert_lt(with.peak, base.peak);
    e2e_free(&base);
    e2e_free(&with);
}

// Served, one layer offloaded holds less than without aoshim, where the
// program's pool beside aoshim's memory held more (a layer's freed memory
// kept while the pool grew for the gradients): the device's peak by the
// driver's count (the simulator's physical peak). The default
// (AOSHIM_SERVE=auto) serves from the first step, since train_step
// --pytorch sets the pool's release threshold to the maximum as PyTorch
// does: the same peak as AOSHIM_SERVE=1.
Test(e2e, served_one_layer_lowers_the_device, .timeout = 60)
{
    const char *args = " --pytorch --nodata --steps 4 --layers 8 --hidden 1024 --seq 1024 "
                       "--batch 4 --heads 16";
    e2e_result_t base, pool, served, dflt;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    e2e_train(&pool, true, ENV("AOSHIM_SERVE=0", "AOSHIM_OFFLOAD_LAYERS=1"), args);
    expect_ok("the program's pool", &pool);
    e2e_train(&served, true, ENV("AOSHIM_SERVE=1", "AOSHIM_OFFLOAD_LAYERS=1"), args);
    expect_ok("served", &served);
    e2e_train(&dflt, true, ENV("AOSHIM_OFFLOAD_LAYERS=1"), args);
    expect_ok("the default", &dflt);
    cr_log_info("one layer offloaded: device peak %" PRIu64 " without aoshim, %" PRIu64
                " beside the pool, %" PRIu64 " served, %" PRIu64 " by default",
                base.peak, pool.peak, served.peak, dflt.peak);
    cr_expect_gt(pool.peak, base.peak, "the pool beside aoshim held no more");
    cr_expect_lt(served.peak, base.peak, "served, the device held no less");
    const char *row = e2e_summary(dflt.err, "served from aoshim's memory");
    cr_assert(row, "the default served nothing:\n%s", dflt.err);
    cr_expect(strstr(row, " at once, from step 0 (one pool"), "%.*s", (int)strcspn(row, "\n"), row);
    cr_expect_eq(dflt.peak, served.peak, "the default held %" PRIu64 ", served %" PRIu64, dflt.peak,
                 served.peak);
    e2e_free(&base);
    e2e_free(&pool);
    e2e_free(&served);
    e2e_free(&dflt);
}

static uint64_t late_reloads(const e2e_result_t *r)
{
    const char *v = e2e_summary(r->err, "late reloads");
    cr_assert(v, "no 'late reloads' row in aoshim's summary:\n%s", r->err);
    return strtoull(v, NULL, 10);
}

// A long skip connection: the last layer's forward reads layer 0's output,
// which the schedule has offloaded. The launch scan finds the pointer in the
// kernel's parameters and reloads layer 0 before the launch: same bits, no
// fault, no race, and one late reload per step, on layer 0.
Test(e2e_safety_net, same_bits_skip, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, DATA " --skip");
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV(ALL), DATA " --skip");
    expect_ok("with aoshim", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    cr_assert_geq(late_reloads(&with), 2, "a late reload per step (2 steps)");
    cr_assert(strstr(with.err, "touched layer 0 ") != NULL, "the late reload names layer 0:\n%s",
              with.err);
    e2e_free(&base);
    e2e_free(&with);
}

// A schedule that never announces the backward of layers 2 and 4: their
// backward kernels find their buffers away (a late reload) or still on the
// way back, prefetched as the layer above's backward began (a wait on a
// reload under way, counted apart: here all 40 buffers are); the bits are
// the same.
Test(e2e_safety_net, same_bits_missing_backward_begin, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, DATA " --no-backward-begin 2,4");
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV(ALL), DATA " --no-backward-begin 2,4");
    expect_ok("with aoshim", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    const char *v = e2e_summary(with.err, "late reloads");
    const char *w = v ? strstr(v, "(and ") : NULL;
    cr_assert(w, "no reloads under way in the 'late reloads' row:\n%s", with.err);
    cr_assert_geq(late_reloads(&with) + strtoull(w + 5, NULL, 10), 4, "2 layers x 2 steps: %.120s",
                  v);
    e2e_free(&base);
    e2e_free(&with);
}

// The schedule alone is complete: no late reload at all.
Test(e2e_safety_net, no_late_reload_on_a_complete_schedule, .timeout = 60)
{
    e2e_result_t with;
    e2e_train(&with, true, ENV(ALL), DATA);
    expect_ok("with aoshim", &with);
    cr_assert_gt(offloaded_bytes(&with), 0, "nothing offloaded: no reload could be late");
    cr_assert_eq(late_reloads(&with), 0, "%s", with.err);
    e2e_free(&with);
}

// --- memory ---------------------------------------------------------------------------------
// N equal layers of T activation bytes, k offloaded: at the peak, N-k+1
// layers are on the device (the resident tail, and the layer whose reload
// is prefetched). So peak_with - static <= 1.02*(N-k+1)*T + one layer's
// temporaries (the most temporaries train_step has alive at once inside a
// layer, which it prints), and the saving is at least 0.98*(k-1)*T. The
// model is train_step's default (unfused attention), where every buffer is a
// multiple of 2 MiB. (With --fused, whose backward temporaries are a larger
// share of T, the saving measured 0.976*(k-1)*T: the temporaries at aoshim's
// peak exceed those at the baseline's by 4*s*b*h.)
// The bounds are arithmetic over allocations, so they are checked against
// what was allocated at the device's peak: peak - pool_slack_at_peak (the
// simulator's figures; the pool's freed-but-kept reserve is no layer's).
// Under the driver's pool the device's own peaks missed them by 0.5-3%
// (saving 4.877 T, activations 3.844 T, for these bounds' 4.90 T and
// 3.709 T). The device's count keeps its own check: the peak with aoshim is
// lower than without by at least the saving the bound asks less the larger
// of the two runs' slack at their peaks.
#define MEMORY_MODEL "--layers 8 --hidden 4096 --seq 2048 --batch 1 --heads 32 --nodata --steps 3"
Test(e2e, memory_saving, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, MEMORY_MODEL);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=6"), MEMORY_MODEL);
    expect_ok("with aoshim", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    const double N = N_LAYERS, k = K_OFFLOAD, T = (double)base.act_per_layer;
    cr_assert_gt(T, 0);
    cr_assert_eq(with.act_per_layer, base.act_per_layer);
    cr_assert_eq(with.static_bytes, base.static_bytes);
    cr_assert_gt(base.temp_peak, 0, "train_step printed no temp_bytes_peak");
    double temps = (double)base.temp_peak;
    cr_assert_leq(base.pool_slack, base.peak);
    cr_assert_leq(with.pool_slack, with.peak);
    const double base_at = (double)(base.peak - base.pool_slack),
                 with_at = (double)(with.peak - with.pool_slack);
    double saving = base_at - with_at;
    double act_with = with_at - (double)base.static_bytes;
    double bound = 1.02 * (N - k + 1) * T + temps;
    cr_log_info("memory: T=%.0f static=%" PRIu64 " peak without=%" PRIu64 " (pool slack %" PRIu64
                ") with=%" PRIu64 " (pool slack %" PRIu64 ") temps=%.0f (%.2f T)",
                T, base.static_bytes, base.peak, base.pool_slack, with.peak, with.pool_slack, temps,
                temps / T);
    cr_log_info("memory: saving %.0f = %.3f T (want >= 0.98*(k-1) = %.2f T); activations with "
                "aoshim %.0f = %.3f T (want <= %.0f = 1.02*(N-k+1) T + temps = %.3f T)",
                saving, saving / T, 0.98 * (k - 1), act_with, act_with / T, bound, bound / T);
    cr_expect_geq(saving, 0.98 * (k - 1) * T, "saving %.3f T < %.2f T", saving / T, 0.98 * (k - 1));
    cr_expect_leq(act_with, bound, "peak_with - static = %.0f (%.4f T) > bound %.0f (%.4f T)",
                  act_with, act_with / T, bound, bound / T);
    // By the device's count.
    double slack = (double)(base.pool_slack > with.pool_slack ? base.pool_slack : with.pool_slack);
    double dev_saving = (double)base.peak - (double)with.peak;
    cr_log_info("memory: device saving %.0f = %.3f T (want >= 0.98*(k-1) T - slack %.0f = %.3f T)",
                dev_saving, dev_saving / T, slack, (0.98 * (k - 1) * T - slack) / T);
    cr_expect_geq(dev_saving, 0.98 * (k - 1) * T - slack,
                  "device saving %.3f T < %.2f T less the pool's slack %.3f T", dev_saving / T,
                  0.98 * (k - 1), slack / T);
    e2e_free(&base);
    e2e_free(&with);
}

// A percentage of the layers saves what the same count saves: the layer
// count is not known in the first step, which offloads every layer rather
// than none (offloading none made the first step's peak, the peak without
// aoshim, the run's peak: 50% saved nothing).
Test(e2e, percent_saves_like_count, .timeout = 60)
{
    e2e_result_t count, pct;
    e2e_train(&count, true, ENV("AOSHIM_OFFLOAD_LAYERS=4"), MEMORY_MODEL);
    expect_ok("AOSHIM_OFFLOAD_LAYERS=4", &count);
    e2e_train(&pct, true, ENV("AOSHIM_OFFLOAD_LAYERS=50%"), MEMORY_MODEL);
    expect_ok("AOSHIM_OFFLOAD_LAYERS=50%", &pct);
    cr_log_info("percent: peak 4 layers %" PRIu64 ", 50%% %" PRIu64, count.peak, pct.peak);
    cr_assert_str_eq(pct.checksum, count.checksum);
    cr_expect_leq((double)pct.peak, 1.01 * (double)count.peak,
                  "50%% of 8 layers: peak %" PRIu64 " > 1.01 x the peak with 4 (%" PRIu64 ")",
                  pct.peak, count.peak);
    e2e_free(&count);
    e2e_free(&pct);
}

// The summary's copy times are the GPU's: every copy issued is read back
// before the report (the last reloads were left out), and the waits before a
// reload are not part of its time (a map waiting for a release fell inside
// it). Checked against the simulator's busy time of each copy engine.
static double copy_ms(const e2e_result_t *r, const char *label)
{
    const char *row = e2e_summary(r->err, label);
    cr_assert(row, "no '%s' row:\n%s", label, r->err);
    const char *in = strstr(row, " in ");
    cr_assert(in, "%.80s", row);
    return strtod(in + 4, NULL);
}

Test(e2e, copy_times_are_the_gpus, .timeout = 60)
{
    e2e_result_t with;
    e2e_train(
        &with, true, ENV("SIM_QUIET=0", ALL),
        "--layers 12 --hidden 768 --seq 1024 --batch 8 --heads 12 --fused --nodata --steps 1");
    expect_ok("all", &with);
    uint64_t d2h = 0, h2d = 0;
    cr_assert(e2e_kv(with.err, "simgpu: ", "busy_d2h_ns", &d2h) && d2h > 0);
    cr_assert(e2e_kv(with.err, "simgpu: ", "busy_h2d_ns", &h2d) && h2d > 0);
    double out = copy_ms(&with, "offload copies (D2H)"),
           back = copy_ms(&with, "reload copies (H2D)");
    cr_log_info("copy times: D2H %.3f ms (simulator %.3f), H2D %.3f ms (simulator %.3f)", out,
                (double)d2h / 1e6, back, (double)h2d / 1e6);
    cr_expect_leq(fabs(out - (double)d2h / 1e6), 0.002 * (double)d2h / 1e6 + 0.002);
    cr_expect_leq(fabs(back - (double)h2d / 1e6), 0.002 * (double)h2d / 1e6 + 0.002);
    e2e_free(&with);
}

// --- AOSHIM_OFFLOAD_LAYERS=auto: planned from a measured step ------------------------------
// Four steps of the memory model: the first measures, the others follow the
// plan made at its end. step_ns is train_step's last step.
#define AUTO_MODEL_BASE "--layers 8 --hidden 4096 --seq 2048 --batch 1 --heads 32 --nodata"
#define AUTO_MODEL      AUTO_MODEL_BASE " --steps 4"

static const char *plan_row(const e2e_result_t *r)
{
    const char *row = e2e_summary(r->err, "offload plan");
    cr_assert(row, "no 'offload plan' row in the summary:\n%s", r->err);
    return row;
}

// A step that fits the device (the budget: its free memory less 5%) moves
// nothing and costs nothing once planned.
Test(e2e, auto_fits_moves_nothing, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, AUTO_MODEL);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=auto"), AUTO_MODEL);
    expect_ok("auto", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    const char *row = plan_row(&with);
    cr_log_info("auto, fits: %.120s; step %" PRIu64 " / %" PRIu64 " ns", row, with.step_ns,
                base.step_ns);
    cr_assert(strncmp(row, "nothing offloaded", 17) == 0, "plan: %.200s", row);
    cr_expect_leq((double)with.step_ns, 1.005 * (double)base.step_ns,
                  "a step that fits costs %.4fx", (double)with.step_ns / (double)base.step_ns);
    e2e_free(&base);
    e2e_free(&with);
}

// A policy that offloads nothing costs nothing from the second step on: the
// layers pass through to the real allocator (before: every layer's chunk
// was mapped and unmapped each step, 1.8% of this GPT-2-small-shaped step).
Test(e2e, none_costs_nothing, .timeout = 60)
{
    const char *gpt2 = "--layers 12 --hidden 768 --seq 1024 --batch 8 --heads 12 --fused --nodata "
                       "--steps 3";
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, gpt2);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=none"), gpt2);
    expect_ok("none", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    cr_log_info("none: step %" PRIu64 " / %" PRIu64 " ns, peak %" PRIu64 " / %" PRIu64,
                with.step_ns, base.step_ns, with.peak, base.peak);
    cr_expect_leq((double)with.step_ns, 1.001 * (double)base.step_ns, "none costs %.4fx",
                  (double)with.step_ns / (double)base.step_ns);
    cr_expect_leq((double)with.peak, 1.01 * (double)base.peak, "none: peak %.4fx",
                  (double)with.peak / (double)base.peak);
    e2e_free(&base);
    e2e_free(&with);
}

// A layer left on the device costs no driver call per step: its chunk,
// freed in backward, stays mapped for the same layer's next forward. With 2
// of 8 layers offloaded, a step maps (cuMemSetAccess) and unmaps exactly
// twice: the offloaded layers' reloads and copies out (the simulator counts
// the calls; one step more, two calls more). Before: every layer's chunk,
// each step.
static uint64_t sim_calls(const e2e_result_t *r, const char *call)
{
    char key[64];
    snprintf(key, sizeof key, " %s=", call);
    const char *p = strstr(r->err, "simgpu: calls");
    p = p ? strstr(p, key) : NULL;
    cr_assert(p, "no %s count in:\n%s", call, r->err);
    return strtoull(p + strlen(key), NULL, 10);
}

Test(e2e, resident_layers_cost_no_mapping, .timeout = 60)
{
    e2e_result_t a, b;
    const char *const env[] = {"SIM_COUNT_CALLS=1", "AOSHIM_OFFLOAD_LAYERS=2", NULL};
    e2e_train(&a, true, env, AUTO_MODEL_BASE " --steps 4");
    expect_ok("4 steps", &a);
    e2e_train(&b, true, env, AUTO_MODEL_BASE " --steps 5");
    expect_ok("5 steps", &b);
    uint64_t access = sim_calls(&b, "cuMemSetAccess") - sim_calls(&a, "cuMemSetAccess");
    uint64_t unmap = sim_calls(&b, "cuMemUnmap") - sim_calls(&a, "cuMemUnmap");
    cr_log_info("one step more: cuMemSetAccess +%" PRIu64 ", cuMemUnmap +%" PRIu64, access, unmap);
    cr_expect_eq(access, 2, "mappings per step");
    cr_expect_eq(unmap, 2, "unmaps per step");
    // The synthetic step's pool gives back what it does not use (it
    // synchronises), so the default (AOSHIM_SERVE=auto) serves nothing.
    cr_expect(!strstr(b.err, "served from aoshim's memory"), "served:\n%s", b.err);
    e2e_free(&a);
    e2e_free(&b);
}

// Under a budget 2.5 layers below the step's need, the peak keeps under it.
Test(e2e, auto_keeps_under_the_budget, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, AUTO_MODEL);
    expect_ok("without aoshim", &base);
    uint64_t budget = base.peak - base.act_per_layer * 5 / 2;
    char env[64];
    snprintf(env, sizeof env, "AOSHIM_BUDGET=%" PRIu64, budget);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=auto", env), AUTO_MODEL);
    expect_ok("auto", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    const char *row = plan_row(&with);
    cr_log_info("auto, budget %" PRIu64 ": peak %" PRIu64 " (without %" PRIu64 "), step %.3fx: "
                "%.200s",
                budget, with.peak, base.peak, (double)with.step_ns / (double)base.step_ns, row);
    cr_assert(strstr(row, "cannot be met") == NULL, "plan: %.200s", row);
    cr_assert_leq(with.peak, budget, "peak %" PRIu64 " over the budget %" PRIu64, with.peak,
                  budget);
    e2e_free(&base);
    e2e_free(&with);
}

// An allocation that fails for lack of memory (injected in step 3) makes the
// next plan keep under what the device held then: a second plan, saying why.
Test(e2e, auto_replans_after_an_allocation_fails, .timeout = 60)
{
    e2e_result_t with;
    e2e_train(
        &with, true,
        ENV("AOSHIM_OFFLOAD_LAYERS=auto", "AOSHIM_BUDGET=12G", "SIM_FAIL=cuMemAllocAsync:500"),
        AUTO_MODEL);
    expect_ok("auto, an allocation failed", &with);
    const char *row = plan_row(&with);
    cr_log_info("auto, out of memory once: %.240s", row);
    cr_assert(strstr(row, "re-planned after the device ran out of memory"), "plan: %.240s", row);
    // Not the first plan (the second re-plans once the step is measured, if
    // its figures change the plan; the one after the failure comes next).
    const char *n = strstr(row, "(plan ");
    cr_assert(n && atoi(n + 6) >= 2, "plan: %.240s", row);
    e2e_free(&with);
}

// TransformerEngine's default schedule as the engine's second policy
// (AOSHIM_SCHEDULE=te, offload/sched.h): K=3 of N=12 layers leave, saving
// what aoshim's timing saves for the same K (K-1 layers' activations here:
// see memory_saving), and its forced waits (the compute stream waits for
// layer i's copy when layer N-K+i begins) cost time that aoshim's timing
// for the same K does not: same peak, slower step on this short-forward
// GPT-2-small shape. Its memory is that of TE's schedule through the manual
// one (train_step --te-schedule, the path of aoshim.torch's drop-in).
// The saving's bound is arithmetic over allocations: it is checked on what
// was allocated at each device peak (peak - pool_slack_at_peak; by the
// device's own peaks it measured 1.76 T for the 1.8 T, the pool's
// freed-but-kept reserve counted in them), and by the device's count less
// the larger slack of the two runs.
Test(e2e, te_schedule_is_a_policy, .timeout = 60)
{
    const char *gpt2 = "--layers 12 --hidden 768 --seq 1024 --batch 8 --heads 12 --fused --nodata "
                       "--steps 4";
    char manual[256];
    snprintf(manual, sizeof manual, "%s --te-schedule 3", gpt2);
    e2e_result_t base, te, man, own;
    e2e_train(&base, false, NULL, gpt2);
    expect_ok("without aoshim", &base);
    e2e_train(&te, true, ENV("AOSHIM_SCHEDULE=te", "AOSHIM_OFFLOAD_LAYERS=3"), gpt2);
    expect_ok("te", &te);
    e2e_train(&man, true, NULL, manual);
    expect_ok("te through the manual schedule", &man);
    e2e_train(&own, true, ENV("AOSHIM_OFFLOAD_LAYERS=3"), gpt2);
    expect_ok("aoshim's timing, 3 layers", &own);
    double T = (double)base.act_per_layer;
    cr_log_info("te K=3: peak %.2f T below, step %.3fx; manual %.2f T, %.3fx; aoshim's %.2f T, "
                "%.3fx",
                (double)(base.peak - te.peak) / T, (double)te.step_ns / (double)base.step_ns,
                (double)(base.peak - man.peak) / T, (double)man.step_ns / (double)base.step_ns,
                (double)(base.peak - own.peak) / T, (double)own.step_ns / (double)base.step_ns);
    const double base_at = (double)(base.peak - base.pool_slack),
                 te_at = (double)(te.peak - te.pool_slack);
    const double slack =
        (double)(base.pool_slack > te.pool_slack ? base.pool_slack : te.pool_slack);
    cr_log_info("te K=3: allocated at the peaks %.3f T below (pool slack %.3f T without, %.3f T "
                "with); the device's %.3f T (want >= %.3f T)",
                (base_at - te_at) / T, (double)base.pool_slack / T, (double)te.pool_slack / T,
                ((double)base.peak - (double)te.peak) / T, (0.9 * 2 * T - slack) / T);
    cr_expect_geq(base_at - te_at, 0.9 * 2 * T, "TE's K=3 saves about K-1 layers");
    cr_expect_geq((double)base.peak - (double)te.peak, 0.9 * 2 * T - slack,
                  "TE's K=3 saves about K-1 layers less the pool's slack, by the device's count");
    cr_expect_leq((double)te.peak, 1.01 * (double)own.peak, "TE's peak above aoshim's at equal K");
    cr_expect_eq(te.peak, man.peak, "the engine's TE schedule and the manual path differ");
    cr_expect_gt(te.step_ns, own.step_ns, "TE's forced waits cost nothing?");
    e2e_free(&base);
    e2e_free(&te);
    e2e_free(&man);
    e2e_free(&own);
}

// Half a layer under the device's count without aoshim, on GPT-2-small over
// the H100 link (which carries about 0.7 of one layer's activations during
// the forward): the plan offloads layer 0 only (whole or a part), and the
// peak, by the device's count, is kept under the budget.
// Measured: under the driver's pool the plan offloads the whole of layer 0
// at 1.068x (bound 1.07); before, on the simulator that released freed
// pool memory at once, part of layer 0 at 1.000x (bound 1.01). The pool's
// slack differs between plans (106.3 MiB unused at the step's peak with
// the plan, which aoshim takes off the budget it plans to), so half a
// layer of budget no longer buys half a layer of offloading. (Earlier: a
// whole layer 0 at 1.084x, its copy outlasting the forward; 1.018x while
// every tracked layer's chunk was mapped and unmapped each step.)
Test(e2e, auto_half_a_layer, .timeout = 60)
{
    const char *gpt2 = "--layers 12 --hidden 768 --seq 1024 --batch 8 --heads 12 --fused --nodata "
                       "--steps 6";
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, gpt2);
    expect_ok("without aoshim", &base);
    uint64_t budget = base.peak - base.act_per_layer / 2;
    char env[64];
    snprintf(env, sizeof env, "AOSHIM_BUDGET=%" PRIu64, budget);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=auto", env), gpt2);
    expect_ok("auto", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    const char *row = plan_row(&with);
    double ratio = (double)with.step_ns / (double)base.step_ns;
    cr_log_info("auto, half a layer under: peak %" PRIu64 " for %" PRIu64 ", step %.4fx: %.200s",
                with.peak, budget, ratio, row);
    cr_assert(strncmp(row, "layers 0-0 of 12 offloaded", 26) == 0, "plan: %.200s", row);
    cr_expect_leq(with.peak, budget, "peak %" PRIu64 " over the budget %" PRIu64, with.peak,
                  budget);
    cr_expect_leq(ratio, 1.07, "half a layer costs %.4fx", ratio);
    e2e_free(&base);
    e2e_free(&with);
}

// --- the default policy is 'auto' ------------------------------------------------------------
// No AOSHIM_* variable at all, as a user starts. A step that fits the device
// (13.7 GiB of 80) moves nothing, not even while the first step is measured
// (the device never comes within three layers of the budget), the summary's
// plan row says so, and it costs nothing once planned.
Test(e2e, default_is_auto_fits_moves_nothing, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, AUTO_MODEL);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, NULL, AUTO_MODEL);
    expect_ok("default", &with);
    cr_assert_str_eq(with.checksum, base.checksum);
    const char *row = plan_row(&with);
    cr_log_info("default, fits: %.*s; step %" PRIu64 " / %" PRIu64 " ns, peak %" PRIu64
                " / %" PRIu64,
                (int)strcspn(row, "\n"), row, with.step_ns, base.step_ns, with.peak, base.peak);
    cr_assert(strncmp(row, "nothing offloaded", 17) == 0, "plan: %.200s", row);
    cr_expect_eq(offloaded_bytes(&with), 0, "the default offloaded a step that fits");
    cr_expect_leq((double)with.step_ns, 1.005 * (double)base.step_ns,
                  "by default a step that fits costs %.4fx",
                  (double)with.step_ns / (double)base.step_ns);
    cr_expect_leq((double)with.peak, 1.01 * (double)base.peak, "default: peak %.4fx",
                  (double)with.peak / (double)base.peak);
    e2e_free(&base);
    e2e_free(&with);
}

// --- auto: shapes that change, offloads that run for nothing -------------------------------
// train_step's per-step lines ("train_step step=N seq=S peak_device_bytes=P
// step_ns=T alloc_peak_bytes=A", the simulator's peak of that step alone) into peak[1..max];
// returns how many steps it printed.
static int step_peaks(const e2e_result_t *r, uint64_t *peak, int max)
{
    int n = 0;
    for (const char *p = r->out; (p = strstr(p, "train_step step=")) != NULL; p++) {
        int step, seq;
        unsigned long long pk, ns;
        if (sscanf(p, "train_step step=%d seq=%d peak_device_bytes=%llu step_ns=%llu", &step, &seq,
                   &pk, &ns) == 4 &&
            step >= 1 && step <= max) {
            peak[step] = pk;
            n = step > n ? step : n;
            cr_log_info("  step %d: seq %d, peak %.1f MiB, %.3f ms", step, seq,
                        (double)pk / (1 << 20), (double)ns / 1e6);
        }
    }
    return n;
}

// The number N of the summary's "(plan N)", 0 if none.
static unsigned plan_number(const char *row)
{
    const char *p = strstr(row, "(plan ");
    return p ? (unsigned)strtoul(p + 6, NULL, 10) : 0;
}

// The sequence length changes at step 3 of 5 (train_step --seq-from): the
// layer that first saves other bytes than planned re-plans at once, so the
// budget holds in that very step and after; the report says why. In data
// mode the gradients are the same bits as without aoshim (in no-data mode,
// for time, the checksum is of the sizes and work).
#define SHAPES "--layers 8 --hidden 512 --heads 8 --batch 2 --fused --steps 5"
static void replans_when_shapes_change(const char *seqs, uint64_t budget)
{
    char args[256], env[64];
    snprintf(args, sizeof args, SHAPES " %s", seqs);
    snprintf(env, sizeof env, "AOSHIM_BUDGET=%" PRIu64, budget);
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=auto", env), args);
    expect_ok("auto", &with);
    cr_log_info("%s, budget %.1f MiB: checksum %s / %s (without / with)", seqs,
                (double)budget / (1 << 20), base.checksum, with.checksum);
    cr_assert_str_eq(with.checksum, base.checksum, "gradients differ under aoshim (%s)", args);
    cr_assert_gt(offloaded_bytes(&with), 0, "aoshim offloaded nothing");
    uint64_t peak[6] = {0};
    cr_assert_eq(step_peaks(&with, peak, 5), 5, "not 5 step lines:\n%s", with.out);
    for (int st = 3; st <= 5; st++)
        cr_expect_leq(peak[st], budget, "step %d: peak %.1f MiB over the budget %.1f MiB", st,
                      (double)peak[st] / (1 << 20), (double)budget / (1 << 20));
    char row[512];
    snprintf(row, sizeof row, "%.*s", (int)strcspn(plan_row(&with), "\n"), plan_row(&with));
    cr_log_info("plan: %s", row);
    cr_expect(strstr(row, "(shapes changed)"), "plan: %s", row);
    cr_expect_geq(plan_number(row), 2, "plan: %s", row);
    e2e_free(&base);
    e2e_free(&with);
}

// A step that fits a 16 GiB device (13.7 GiB of a 15.2 GiB default budget)
// moves nothing even while it is measured: the first step starts copies
// only within three layers of the budget (it used to from half of it: 5.3
// GiB moved and 5.5 GiB pinned in step 1, 2.7 s against 0.056 s).
Test(e2e, default_fits_moves_nothing_when_full, .timeout = 60)
{
    e2e_result_t with;
    e2e_train(&with, true, NULL, AUTO_MODEL " --capacity 16G");
    expect_ok("default, 16 GiB device", &with);
    const char *row = plan_row(&with);
    const char *pin = e2e_summary(with.err, "pinned host pool");
    cr_assert(pin, "no 'pinned host pool' row:\n%s", with.err);
    cr_log_info("default, 16 GiB: %.*s; pinned host pool %.*s", (int)strcspn(row, "\n"), row,
                (int)strcspn(pin, "\n"), pin);
    cr_assert(strncmp(row, "nothing offloaded", 17) == 0, "plan: %.200s", row);
    cr_expect_eq(offloaded_bytes(&with), 0, "the measuring step moved memory");
    cr_expect(strncmp(pin, "0 B in 0 pin calls", 18) == 0, "pinned: %.120s", pin);
    e2e_free(&with);
}

// Within three layers of its budget (14 GiB for 13.7), the measuring step
// copies layers out; the plan then offloads nothing, and the host memory
// those copies pinned goes back (it used to stay pinned for the whole run).
Test(e2e, auto_fits_gives_pinned_memory_back, .timeout = 60)
{
    e2e_result_t with;
    e2e_train(&with, true, ENV("AOSHIM_BUDGET=14G"), AUTO_MODEL);
    expect_ok("auto, 14 GiB budget", &with);
    const char *row = plan_row(&with);
    const char *pin = e2e_summary(with.err, "pinned host pool");
    cr_assert(pin, "no 'pinned host pool' row:\n%s", with.err);
    cr_log_info("auto, 14 GiB: %.*s; pinned host pool %.*s", (int)strcspn(row, "\n"), row,
                (int)strcspn(pin, "\n"), pin);
    cr_assert(strncmp(row, "nothing offloaded", 17) == 0, "plan: %.200s", row);
    cr_expect(strstr(pin, "peak 0 B") == NULL, "premise: the first step pinned memory: %.120s",
              pin);
    cr_expect(strncmp(pin, "0 B in ", 7) == 0, "still pinned: %.120s", pin);
    e2e_free(&with);
}

// A device too small for the same step (12 GiB), still no AOSHIM_* variable:
// out of memory without aoshim; with it the default budget (the free memory
// less 5% of the device) is planned for and kept, with the gradients of an
// unconstrained run.
Test(e2e, default_plans_under_memory_pressure, .timeout = 60)
{
    const uint64_t cap = 12ull << 30;
    const char *args = AUTO_MODEL " --capacity 12G";
    e2e_result_t free_run, base, with;
    e2e_train(&free_run, false, NULL, AUTO_MODEL);
    expect_ok("unconstrained, without aoshim", &free_run);
    cr_assert_gt(free_run.peak, cap, "premise: the step does not fit %" PRIu64 " bytes", cap);
    e2e_train(&base, false, NULL, args);
    if (base.status != 3) dump("without aoshim", &base);
    cr_expect_eq(base.status, 3, "without aoshim: exit %d, want 3 (out of memory)", base.status);
    cr_expect_str_eq(base.ts_status, "oom");
    e2e_train(&with, true, NULL, args);
    expect_ok("default, 12 GiB device", &with);
    cr_expect_str_eq(with.checksum, free_run.checksum);
    const char *row = plan_row(&with);
    cr_log_info("default, 12 GiB device: peak %" PRIu64 " (without %" PRIu64 "), step %.3fx: "
                "%.*s",
                with.peak, free_run.peak, (double)with.step_ns / (double)free_run.step_ns,
                (int)strcspn(row, "\n"), row);
    cr_assert(strncmp(row, "layers 0-", 9) == 0, "plan: %.200s", row);
    cr_assert(strstr(row, "cannot be met") == NULL, "plan: %.200s", row);
    cr_expect_leq(with.peak, cap - cap / 20,
                  "peak %" PRIu64 " over the default budget (the device less 5%%)", with.peak);
    e2e_free(&free_run);
    e2e_free(&base);
    e2e_free(&with);
}

// A PyTorch-like step whose sequence doubles at step 3, on a device too
// small for the longer one without aoshim (the default budget: the device
// less 5%). The plan of nothing for the short sequence becomes one that
// offloads, made at layer 0's end; a layer whose buffers were all freed
// there outlives that re-plan (it went at the re-plan's poll, and its own
// layer_end read it freed: a fault, ASan's use after free). By default the
// program's allocations are served from the first step (train_step
// --pytorch sets the pool's release threshold to the maximum), serving is
// paused under the plan of nothing and resumed under the one that
// offloads. Same bits as the unconstrained run, both ways. Four runs of
// train_step: 90 s on two CPUs beside one other test, and beside the whole
// suite it ran past 120 s once in CI (at f1487a7's library as well: 108 s
// alone), hence 300.
Test(e2e, auto_replans_a_pytorch_step_as_its_sequence_doubles, .timeout = 300)
{
    const char *args = "--pytorch --layers 8 --hidden 512 --seq 512 --batch 2 --heads 8 --steps 6 "
                       "--seq-from 3:1024";
    char small[128];
    snprintf(small, sizeof small, "%s --capacity 1300M", args);
    e2e_result_t base, tight, pool, served;
    e2e_train(&base, false, NULL, args);
    expect_ok("unconstrained, without aoshim", &base);
    e2e_train(&tight, false, NULL, small);
    cr_assert_str_eq(tight.ts_status, "oom", "the premise: without aoshim the step fits:\n%s",
                     tight.err);
    e2e_train(&pool, true, ENV("AOSHIM_SERVE=0"), small);
    expect_ok("beside the pool", &pool);
    e2e_train(&served, true, NULL, small);
    expect_ok("by default", &served);
    cr_log_info("sequence doubling under 1300M: checksum %s / %s / %s, peak %" PRIu64 " / %" PRIu64,
                base.checksum, pool.checksum, served.checksum, pool.peak, served.peak);
    cr_assert_str_eq(pool.checksum, base.checksum);
    cr_assert_str_eq(served.checksum, base.checksum);
    cr_assert_eq(pool.races + served.races, 0);
    const char *row = e2e_summary(served.err, "served from aoshim's memory");
    cr_assert(row && strstr(row, " at once, from step 0 (one pool"), "served:\n%s", served.err);
    e2e_free(&base);
    e2e_free(&tight);
    e2e_free(&pool);
    e2e_free(&served);
}

// Lending (offload/chunk.c): while serving, a layer's allocation or a
// reload maps the handles of a kept mapping whose last uses are still
// queued, its stream waiting for them on the GPU, and the old mapping goes
// once they are done. Same bits as without aoshim; the simulator stops the
// run at the first use through the new address unordered with one through
// the old (SIM_RACE_FATAL=1, sim_hb_alias: without the wait, a reload's
// copy raced a gemm's write, exit 87); and memory was lent.
Test(e2e, lent_memory_is_used_after_its_last_uses_and_keeps_the_bits, .timeout = 240)
{
    // Hidden 1024 (4 layers, 3 steps: 6 s a run): at 512 every kept mapping
    // was larger than what a layer lacked, so none lent (a handle lends
    // whole: mem/vmm.c).
    const char *args = "--pytorch --layers 4 --hidden 1024 --seq 512 --batch 2 --heads 8 --steps 3";
    e2e_result_t base, lent;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    e2e_train(&lent, true, ENV("AOSHIM_OFFLOAD_LAYERS=all", "SIM_RACE_FATAL=1"), args);
    expect_ok("all, served", &lent);
    cr_assert_str_eq(lent.checksum, base.checksum);
    cr_assert_eq(lent.races, 0);
    const char *row = e2e_summary(lent.err, "served from aoshim's memory");
    const char *l = row ? strstr(row, "; ") : NULL;
    cr_assert(l && strstr(l, " of idle memory mapped anew before its last uses were done"),
              "no memory lent:\n%s", lent.err);
    cr_assert_gt(e2e_bytes(l + 2), 0, "%.120s", l);
    e2e_free(&base);
    e2e_free(&lent);
}

// The step without aoshim, then under a budget below bytes under its peak
// (served, the default): the same bits, no race. Returns the summary's
// served row (NULL if none).
static const char *served_under_budget(const char *args, uint64_t below, e2e_result_t *base,
                                       e2e_result_t *with)
{
    e2e_train(base, false, NULL, args);
    expect_ok("without aoshim", base);
    char budget[64];
    snprintf(budget, sizeof budget, "AOSHIM_BUDGET=%" PRIu64, base->peak - below);
    e2e_train(with, true, ENV(budget, "SIM_RACE_FATAL=1"), args);
    expect_ok("a budget, served", with);
    cr_assert_str_eq(with->checksum, base->checksum);
    cr_assert_eq(with->races, 0);
    return e2e_summary(with->err, "served from aoshim's memory");
}

// The program's own allocations borrow too, in a backward where no layer
// waits for its reload, from mappings whose last uses were on their own
// stream (offload/chunk.c, served_may_borrow): under a budget 16 MiB under
// the step's peak they do, and the bits are the same, no race.
Test(e2e, served_allocations_borrow_memory_freed_on_their_stream, .timeout = 240)
{
    // Batch 4 (4 layers, 3 steps: 12 s a run alone, 30 s beside the
    // suite's other runs; the test took 49 s beside one other, hence 240 s):
    // at batch 2 the program's
    // allocations each find a kept segment of theirs whole (serve.c), and
    // none borrows.
    const char *args = "--pytorch --layers 4 --hidden 512 --seq 1024 --batch 4 --heads 8 --steps 3";
    e2e_result_t base, lent;
    const char *row = served_under_budget(args, (uint64_t)16 << 20, &base, &lent);
    const char *l =
        row ? strstr(row, " of idle memory mapped anew before its last uses were done (") : NULL;
    cr_assert(l, "no memory lent:\n%s", lent.err);
    l = strchr(l, '(') + 1;
    cr_assert_gt(e2e_bytes(l), 0, "none lent to the program's own: %.160s", row);
    e2e_free(&base);
    e2e_free(&lent);
}

// A layer's chunk that finds its memory not there at its first allocation
// maps what is and more pages as its buffers come (offload/chunk.c,
// ao_chunk_grow), instead of the host waiting for a release under way:
// under a budget 64 MiB under the step's peak it does (616 MiB of it here),
// and every byte comes back as written, no race. It fails without the
// growth (no such row).
Test(e2e, a_layer_maps_its_chunk_as_its_buffers_come, .timeout = 120)
{
    const char *args = "--pytorch --layers 4 --hidden 512 --seq 1024 --batch 4 --heads 8 --steps 2";
    e2e_result_t base, grown;
    const char *row = served_under_budget(args, (uint64_t)64 << 20, &base, &grown);
    const char *l = row ? strstr(row, " of layers' memory mapped as their buffers came") : NULL;
    cr_assert(l, "no layer grew:\n%s", grown.err);
    while (l > row && l[-1] != ';')
        l--;
    cr_assert_gt(e2e_bytes(l + 1), 0, "%.200s", row);
    e2e_free(&base);
    e2e_free(&grown);
}

// 512 -> 768: kept until the step's end, the plan of step 2 (3 layers)
// held 351 MiB in step 3 against 205 MiB; the one made at layer 0's end
// offloads 5.
Test(e2e, auto_replans_when_the_sequence_grows, .timeout = 120)
{
    replans_when_shapes_change("--seq 512 --seq-from 3:768", 205ull << 20);
}
// 768 -> 512: fewer layers need to go (the old plan would hold, at a cost).
Test(e2e, auto_replans_when_the_sequence_shrinks, .timeout = 120)
{
    replans_when_shapes_change("--seq 768 --seq-from 3:512 --nodata", 205ull << 20);
}

static uint64_t cancelled(const e2e_result_t *r)
{
    const char *v = e2e_summary(r->err, "offloads cancelled");
    cr_assert(v, "no 'offloads cancelled' row in the summary:\n%s", r->err);
    return strtoull(v, NULL, 10);
}

// No plan issues an offload that is cancelled in the steady state: the
// cancelled offloads after 2 steps (the first measures, the second follows
// the first plan) are all there are after 5. The six layers' copies (16 MiB,
// 0.36 ms each at 47 GB/s) are long against their compute (the whole step
// takes 0.98 ms without aoshim): 'all' and a plan of 3 layers at prefetch 1
// offload layer 2, whose copy is still running when its reload comes at
// the backward of layer 4.
#define LINK_BOUND "--layers 6 --hidden 512 --seq 512 --batch 2 --heads 8 --fused --nodata"
static void no_cancel_in_steady_state(const char *what, const char *const *env)
{
    e2e_result_t two, five;
    e2e_train(&two, true, env, LINK_BOUND " --steps 2");
    expect_ok(what, &two);
    e2e_train(&five, true, env, LINK_BOUND " --steps 5");
    expect_ok(what, &five);
    uint64_t c2 = cancelled(&two), c5 = cancelled(&five);
    const char *row = e2e_summary(five.err, "offload plan");
    cr_log_info("%s: offloads cancelled after 2 steps %" PRIu64 ", after 5 %" PRIu64
                "; step %.3f ms, peak %.1f MiB; plan: %.*s",
                what, c2, c5, (double)five.step_ns / 1e6, (double)five.peak / (1 << 20),
                row ? (int)strcspn(row, "\n") : 6, row ? row : "(none)");
    cr_assert_gt(offloaded_bytes(&five), 0, "%s offloaded nothing", what);
    cr_assert_eq(c5, c2, "%s: %" PRIu64 " offloads cancelled in steps 3-5", what, c5 - c2);
    e2e_free(&two);
    e2e_free(&five);
}

Test(e2e, auto_no_offload_cancelled_in_steady_state, .timeout = 60)
{
    no_cancel_in_steady_state("auto", ENV("AOSHIM_OFFLOAD_LAYERS=auto", "AOSHIM_BUDGET=140M"));
}
Test(e2e, all_no_offload_cancelled_in_steady_state, .timeout = 60)
{
    no_cancel_in_steady_state("all", ENV("AOSHIM_OFFLOAD_LAYERS=all"));
}

// --- speed: the cost model ------------------------------------------------------------------
// Per-layer compute time of the fused model on the simulator's h100 profile,
// from train_step's kernel list: each kernel costs 3 us fixed
// (TS_KERNEL_NS_FIXED) plus FLOPs / 600 TFLOP/s; element-wise kernels are
// charged 300 FLOP per byte they read and write (EW_FLOPS_PER_BYTE). Kept
// in step with tests/workloads/train_step.c by hand: the log line below
// compares N*(f+b) with the measured baseline step.
#define TFLOPS 600.0
static double kns(double flops)
{
    return 3000.0 + flops / (TFLOPS * 1e3);
}
static double ew(double bytes)
{
    return kns(300.0 * bytes);
}

static void layer_costs(double *f_fwd, double *f_bwd)
{
    const double s = MODEL_S, b = MODEL_B, h = MODEL_H, a = MODEL_A;
    const double sbh = s * b * h, sb = s * b;
    (void)a;
    double f = 0, g = 0;
    f += ew(2 * sbh + 8 * sb + 2 * sbh + 4 * h);         // ln1
    f += kns(6 * sbh * h);                               // qkv
    f += kns(4 * s * s * b * h);                         // flash attention
    f += kns(2 * sbh * h);                               // proj
    f += ew(3 * sbh + 4 * sbh);                          // dropout + residual
    f += ew(2 * sbh + 8 * sb + 2 * sbh + 4 * h);         // ln2
    f += kns(8 * sbh * h);                               // fc1
    f += ew(16 * sbh);                                   // gelu
    f += kns(8 * sbh * h);                               // fc2
    f += ew(3 * sbh + 4 * sbh);                          // dropout + residual
    g += ew(2 * sbh + 2 * sbh + sbh);                    // mlp dropout bwd
    g += 2 * kns(8 * sbh * h);                           // fc2 dgrad, wgrad
    g += ew(24 * sbh);                                   // gelu bwd
    g += 2 * kns(8 * sbh * h);                           // fc1 dgrad, wgrad
    g += ew(2 * sbh + 4 * h + 6 * sbh + 8 * sb + 4 * h); // ln2 bwd
    g += ew(5 * sbh);                                    // attention dropout bwd
    g += 2 * kns(2 * sbh * h);                           // proj dgrad, wgrad
    g += kns(8 * s * s * b * h);                         // flash attention bwd
    g += 2 * kns(6 * sbh * h);                           // qkv dgrad, wgrad
    g += ew(2 * sbh + 4 * h + 6 * sbh + 8 * sb + 4 * h); // ln1 bwd
    *f_fwd = f;
    *f_bwd = g;
}

// The link carries a layer's activations within that layer's forward
// compute (a Grace-Hopper-class 300 GB/s link), so offloading must be free:
// the copies hide behind compute and nothing waits.
// The speed tests below hold the schedule to the link's arithmetic and the
// plan's stated exposed time to the step. Neither models what a page mapped
// while a copy runs costs the host (over 1 ms on the H200, 2026-11-28: the
// simulator charges it, tests/sim/README.md), so they run without that cost
// (SIM_VMM_IN_COPY=0); with it, on this step, offloading six layers over a
// link that keeps up cost 5.4% and the auto plan's step lost 27.7 ms where
// it stated 19.6. That cost is measured where the plans are judged
// (tests/bench/bench_forward_peak.py; docs/planner.md "What the H200 showed
// on 2026-11-28"); issue 22 stays open on it.
#define NO_IN_COPY_COST "SIM_VMM_IN_COPY=0"

Test(e2e, speed_link_keeps_up, .timeout = 60)
{
    const char *const env_base[] = {"SIM_D2H_GBPS=300", "SIM_H2D_GBPS=300", NULL};
    const char *const env_with[] = {"SIM_D2H_GBPS=300", "SIM_H2D_GBPS=300",
                                    "AOSHIM_OFFLOAD_LAYERS=6", NO_IN_COPY_COST, NULL};
    e2e_result_t base, with;
    e2e_train(&base, false, env_base, MODEL " --steps 3");
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, env_with, MODEL " --steps 3");
    expect_ok("with aoshim", &with);
    double f_fwd, f_bwd;
    layer_costs(&f_fwd, &f_bwd);
    double c = (double)base.act_per_layer / 300.0; // bytes / (GB/s) = ns
    double ratio = (double)with.step_ns / (double)base.step_ns;
    cr_log_info("keeps up: per-layer copy %.3f ms at 300 GB/s, forward %.3f ms, backward %.3f ms "
                "(model: N*(f+b) = %.3f ms, baseline step %.3f ms)",
                c / 1e6, f_fwd / 1e6, f_bwd / 1e6, N_LAYERS * (f_fwd + f_bwd) / 1e6,
                (double)base.step_ns / 1e6);
    cr_log_info("keeps up: step without %" PRIu64 " ns, with %" PRIu64
                " ns, ratio %.4f (want <= 1.01)",
                base.step_ns, with.step_ns, ratio);
    // The premise, checked: the copy of one layer fits in its forward.
    cr_assert_lt(c, f_fwd, "premise broken: copy %.0f ns >= forward %.0f ns", c, f_fwd);
    // 1.01 on the A100's virtual-memory figures, charged per call. On the
    // H200's (tests/sim/drv/core.c: set-access and unmap per mapping), the
    // handles the measuring step made buffer by buffer for layer 0 are
    // tiled into a layer's chunk at its reloads, twelve mappings for one
    // 272 MiB layer: 4.1% of this 3-step run. Replacing them by one handle
    // raised the steady step's memory by a layer (tried; docs/design.md).
    cr_expect_leq(ratio, 1.05, "offloading costs %.1f%% of the step although the link keeps up",
                  100.0 * (ratio - 1));
    e2e_free(&base);
    e2e_free(&with);
}

// The same link under auto and a budget 2.5 layers under the need: the plan
// keeps the peak under it and, the link serving it within the forward,
// costs no more than 1% (issue 10: "a budget that the link can serve").
Test(e2e, speed_auto_link_keeps_up, .timeout = 60)
{
    e2e_result_t base, with;
    const char *const env_base[] = {"SIM_D2H_GBPS=300", "SIM_H2D_GBPS=300", NULL};
    e2e_train(&base, false, env_base, MODEL " --steps 4");
    expect_ok("without aoshim", &base);
    char budget_env[64];
    uint64_t budget = base.peak - base.act_per_layer * 5 / 2;
    snprintf(budget_env, sizeof budget_env, "AOSHIM_BUDGET=%" PRIu64, budget);
    const char *const env_with[] = {"SIM_D2H_GBPS=300", "SIM_H2D_GBPS=300",
                                    "AOSHIM_OFFLOAD_LAYERS=auto", budget_env, NULL};
    e2e_train(&with, true, env_with, MODEL " --steps 4");
    expect_ok("auto", &with);
    double ratio = (double)with.step_ns / (double)base.step_ns;
    const char *row = plan_row(&with);
    cr_log_info("auto, 300 GB/s: peak %" PRIu64 " for %" PRIu64 ", step %.4fx: %.*s", with.peak,
                budget, ratio, (int)strcspn(row, "\n"), row);
    cr_expect_leq(with.peak, budget, "peak %" PRIu64 " over the budget %" PRIu64, with.peak,
                  budget);
    cr_expect_leq(ratio, 1.01, "auto costs %.2f%% of the step although the link keeps up",
                  100.0 * (ratio - 1));
    e2e_free(&base);
    e2e_free(&with);
}

// At the default 50 GB/s the link cannot keep up. From first principles: for
// each offloaded layer, the forward cannot release that layer's memory
// faster than its D2H copy (c = T / bandwidth), and aoshim holds the next
// allocations until memory is released, so the forward of that layer takes
// max(f_fwd, c) instead of f_fwd; in backward the layer's bytes cannot come
// back faster than its H2D copy, so its backward takes max(f_bwd, c). The
// copy engines are serial per direction, one layer after another, so the
// excess adds up:
//   predicted extra = sum over offloaded layers of
//                     max(0, c - f_fwd) + max(0, c - f_bwd)
// (the first layer's copy overlaps the second layer's forward, which this
// ignores; with c >> f the error is a fraction of one layer's forward).
//
// A second, tighter model (logged and checked too): with c >> f the two copy
// engines are the critical path. Layer L cannot be reloaded before its D2H
// copy has finished, and the D2H copies run back to back from the end of
// layer 0's forward, so the H2D chain starts only once the D2H chain is done:
//   step ~ rest + f_fwd + K*c (D2H) + K*c (H2D) + f_bwd
// where rest = baseline - N*(f_fwd + f_bwd) (memsets, loss, optimizer: not
// hidden by either chain). It differs from the additive model above by
// about one layer's f_fwd + f_bwd: the additive one charges layers 6 and 7's
// compute on top of the chains, which in fact run beside them.
Test(e2e, speed_link_too_slow, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, MODEL " --steps 3");
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=6", NO_IN_COPY_COST), MODEL " --steps 3");
    expect_ok("with aoshim", &with);
    double f_fwd, f_bwd;
    layer_costs(&f_fwd, &f_bwd);
    double c = (double)base.act_per_layer / 50.0;
    double extra = K_OFFLOAD * (fmax(0, c - f_fwd) + fmax(0, c - f_bwd));
    double predicted = ((double)base.step_ns + extra) / (double)base.step_ns;
    double ratio = (double)with.step_ns / (double)base.step_ns;
    const char *wait = e2e_summary(with.err, "compute stream waited on reloads");
    double wait_ms = wait ? strtod(wait, NULL) : -1;
    cr_log_info("too slow: c=%.3f ms, f_fwd=%.3f ms, f_bwd=%.3f ms; predicted extra %.3f ms, "
                "ratio %.4f; measured step %.0f / %.0f ns, extra %.3f ms, ratio "
                "%.4f; compute stream waited on reloads %.3f ms",
                c / 1e6, f_fwd / 1e6, f_bwd / 1e6, extra / 1e6, predicted, (double)with.step_ns,
                (double)base.step_ns, ((double)with.step_ns - (double)base.step_ns) / 1e6, ratio,
                wait_ms);
    cr_expect(fabs(ratio - predicted) <= 0.15 * predicted,
              "measured ratio %.4f is not within 15%% of the predicted %.4f", ratio, predicted);
    double rest = (double)base.step_ns - N_LAYERS * (f_fwd + f_bwd);
    double chain = fmax((double)base.step_ns, rest + f_fwd + 2.0 * K_OFFLOAD * c + f_bwd);
    double predicted_chain = chain / (double)base.step_ns;
    cr_log_info("too slow: copy-chain model: rest %.3f ms, step %.3f ms, ratio %.4f (measured "
                "%.4f, %+.1f%%)",
                rest / 1e6, chain / 1e6, predicted_chain, ratio,
                100.0 * (ratio - predicted_chain) / predicted_chain);
    cr_expect(fabs(ratio - predicted_chain) <= 0.15 * predicted_chain,
              "measured ratio %.4f is not within 15%% of the copy-chain model's %.4f", ratio,
              predicted_chain);
    cr_expect(wait_ms > 0 || with.step_ns > base.step_ns,
              "the link is too slow, yet neither a reload wait (%.3f ms) nor a slower step",
              wait_ms);
    e2e_free(&base);
    e2e_free(&with);
}

// AOSHIM_OFFLOAD_LAYERS=auto under a budget the link cannot serve within the
// forward (issue 10): 3.5 layers' activations under the step's need at the
// default 50 GB/s, where a layer's copy (c = T / 50 GB/s, 5.7 ms) takes three
// times its forward. The plan offloads the first k layers, and the device
// keeps what the other N-k hold (aoshim's pool of physical memory, which the
// plan sizes): from layer N-k on, each layer's memory waits for a copy out.
// From first principles, with layer l's copy starting at the end of layer
// l (an early copy: train_step's next layer reads none of its saved buffers
// but the output, which is small), its memory going after the end of layer
// l+1 (its release point), one copy at a time each way, and c longer than a
// layer's forward and its backward:
//   forward:  the copies run back to back from f_fwd; the last layer waits
//             for the last one: it ends at f_fwd + k c + f_fwd;
//   backward: the device is full until the last layer's backward frees its
//             memory (f_bwd later); the reloads then run back to back, layer
//             k-1 first, layer 0's done k c later; the backward of layers 1
//             and 0 follows (2 f_bwd).
//   step = rest + 2 f_fwd + 2 k c + 3 f_bwd
//        = baseline + 2 k c - (N - 2) f_fwd - (N - 3) f_bwd
// where rest = baseline - N (f_fwd + f_bwd) (memsets, loss, optimizer). The
// chains are the critical path while f_fwd + k c >= (N-1) f_fwd and
// f_bwd + k c >= (N-2) f_bwd: checked, as premises. The plan's row states
// the copy time exposed per step: it must be what the step lost.
Test(e2e, speed_auto_link_bound, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, MODEL " --steps 4");
    expect_ok("without aoshim", &base);
    uint64_t budget = base.peak - base.act_per_layer * 7 / 2;
    char env[64];
    snprintf(env, sizeof env, "AOSHIM_BUDGET=%" PRIu64, budget);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=auto", env, NO_IN_COPY_COST),
              MODEL " --steps 4");
    expect_ok("auto", &with);
    const char *row = plan_row(&with);
    int last = -1;
    cr_assert(sscanf(row, "layers 0-%d of", &last) == 1, "plan: %.200s", row);
    const char *ex = strstr(row, "copies exposed ");
    cr_assert(ex, "plan: %.200s", row);
    double stated = strtod(ex + strlen("copies exposed "), NULL) * 1e6;
    double f_fwd, f_bwd;
    layer_costs(&f_fwd, &f_bwd);
    const double k = last + 1, n = N_LAYERS, c = (double)base.act_per_layer / 50.0;
    double predicted = (double)base.step_ns + 2 * k * c - (n - 2) * f_fwd - (n - 3) * f_bwd;
    double measured = (double)with.step_ns, exposed = measured - (double)base.step_ns;
    cr_log_info("auto, link-bound: budget %" PRIu64 ", peak %" PRIu64 "; k=%.0f, c=%.3f ms, "
                "f_fwd=%.3f ms, f_bwd=%.3f ms; step %.3f ms, predicted %.3f ms (%+.2f%%); exposed "
                "%.3f ms, the plan said %.3f ms (%+.2f%% of the step): %.*s",
                budget, with.peak, k, c / 1e6, f_fwd / 1e6, f_bwd / 1e6, measured / 1e6,
                predicted / 1e6, 100 * (measured - predicted) / predicted, exposed / 1e6,
                stated / 1e6, 100 * (stated - exposed) / measured, (int)strcspn(row, "\n"), row);
    // The premises: the link cannot carry what the budget needs within the
    // forward, and the copy chains are the critical path.
    cr_assert_gt(f_fwd + k * c, n * f_fwd, "premise: the copies fit in the forward");
    cr_assert(c > f_fwd && c > f_bwd, "premise: a copy is no longer than a layer's compute");
    cr_assert_geq(f_fwd + k * c, (n - 1) * f_fwd, "premise: the forward is not link-bound");
    cr_assert_geq(f_bwd + k * c, (n - 2) * f_bwd, "premise: the backward is not link-bound");
    cr_assert_leq(with.peak, budget, "peak %" PRIu64 " over the budget %" PRIu64, with.peak,
                  budget);
    cr_expect_leq(fabs(measured - predicted), 0.05 * predicted,
                  "step %.3f ms, not within 5%% of the link's %.3f ms", measured / 1e6,
                  predicted / 1e6);
    cr_expect_leq(fabs(stated - exposed), 0.05 * measured,
                  "the plan said %.3f ms exposed, the step lost %.3f ms (step %.3f ms)",
                  stated / 1e6, exposed / 1e6, measured / 1e6);
    e2e_free(&base);
    e2e_free(&with);
}

// --- capacity -------------------------------------------------------------------------------
// A device too small for the baseline's peak but big enough for static + the
// activations left resident (+ slack): OOM without aoshim, fine with it, and
// the same gradients as an unconstrained run.
Test(e2e, capacity, .timeout = 60)
{
    e2e_result_t free_run, base, with;
    e2e_train(&free_run, false, NULL, DATA);
    expect_ok("unconstrained, without aoshim", &free_run);
    const double N = N_LAYERS, T = (double)free_run.act_per_layer;
    double temps = (double)free_run.peak - (double)free_run.static_bytes - N * T;
    double lo = (double)free_run.static_bytes + 3.5 * T + temps, hi = (double)free_run.peak;
    uint64_t cap_mib = (uint64_t)((lo + hi) / 2) >> 20;
    cr_log_info("capacity: static %" PRIu64 " T %.0f temps %.0f: between %.0f and %.0f -> %" PRIu64
                " MiB",
                free_run.static_bytes, T, temps, lo, hi, cap_mib);
    cr_assert_gt((double)(cap_mib << 20), lo);
    cr_assert_lt((double)(cap_mib << 20), hi);
    char args[256];
    snprintf(args, sizeof args, DATA " --capacity %" PRIu64 "M", cap_mib);
    e2e_train(&base, false, NULL, args);
    if (base.status != 3) dump("without aoshim", &base);
    cr_expect_eq(base.status, 3, "without aoshim: exit %d, want 3 (out of memory)", base.status);
    cr_expect_str_eq(base.ts_status, "oom");
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=6"), args);
    expect_ok("with aoshim", &with);
    cr_expect_str_eq(with.checksum, free_run.checksum);
    cr_log_info("capacity: peak with aoshim %" PRIu64 " (cap %" PRIu64 ")", with.peak,
                cap_mib << 20);
    e2e_free(&free_run);
    e2e_free(&base);
    e2e_free(&with);
}

// --- steady state ---------------------------------------------------------------------------
// Pinning, cuMemCreate and cuMemAddressReserve are slow (0.4 s/GiB, 190 us,
// 19 us): after the first step, aoshim must reuse what it has. The
// simulator's own counters for 1 and 3 steps must be the same.
Test(e2e, steady_state, .timeout = 60)
{
    const char *const env[] = {"SIM_QUIET", "AOSHIM_OFFLOAD_LAYERS=6", NULL};
    e2e_result_t one, three;
    e2e_train(&one, true, env, MODEL " --steps 1");
    expect_ok("1 step", &one);
    e2e_train(&three, true, env, MODEL " --steps 3");
    expect_ok("3 steps", &three);
    static const char *const keys[] = {"pin_calls", "mem_create", "address_reserve"};
    for (size_t i = 0; i < 3; i++) {
        uint64_t a = 0, b = 0;
        cr_assert(e2e_kv(one.err, "simgpu: ", keys[i], &a), "no simgpu %s:\n%s", keys[i], one.err);
        cr_assert(e2e_kv(three.err, "simgpu: ", keys[i], &b), "no simgpu %s", keys[i]);
        cr_log_info("steady state: %s %" PRIu64 " after 1 step, %" PRIu64 " after 3", keys[i], a,
                    b);
        cr_expect_eq(a, b,
                     "%s: %" PRIu64 " after 1 step, %" PRIu64 " after 3: steps 2-3 made %" PRId64,
                     keys[i], a, b, (int64_t)(b - a));
    }
    e2e_free(&one);
    e2e_free(&three);
}

// Served (train_step --pytorch: the program's own allocations come from
// aoshim's memory, mem/vmm.c and offload/serve.c), memory is made in pages
// that back any range: once a step has its memory, memory moves between the
// layers and the program's allocations by mapping pages. A range takes
// pages, and handles smaller than a page only for its own last part
// (mem/vmm.c): tiled from the small last parts of other ranges, this step
// mapped 27 handles a step, 10 now. The price: a last part's size not
// pooled when it comes (its handle went to the driver for a page) is made
// anew, here a layer's 10 MiB and the page it went for, two handles a step.
// Before the pages, each change in the sizes a step asked for took handles
// apart and made others: 6 handles a step here, 490 on the replayed H200
// GPT.
Test(e2e, served_steady_state_maps_pages, .timeout = 60)
{
    const char *const env[] = {"SIM_QUIET", "AOSHIM_OFFLOAD_LAYERS=1", NULL};
    const char *args = "--pytorch --layers 4 --hidden 512 --seq 512 --batch 2 --heads 8";
    char a3[160], a5[160];
    snprintf(a3, sizeof a3, "%s --steps 3", args);
    snprintf(a5, sizeof a5, "%s --steps 5", args);
    e2e_result_t three, five;
    e2e_train(&three, true, env, a3);
    expect_ok("3 steps", &three);
    e2e_train(&five, true, env, a5);
    expect_ok("5 steps", &five);
    const char *row = e2e_summary(five.err, "served from aoshim's memory");
    cr_assert(row && strstr(row, "from step 0"), "not served:\n%s", five.err);
    uint64_t a = 0, b = 0, sa = 0, sb = 0;
    cr_assert(e2e_kv(three.err, "simgpu: ", "mem_create", &a), "no simgpu line:\n%s", three.err);
    cr_assert(e2e_kv(five.err, "simgpu: ", "mem_create", &b), "no simgpu line:\n%s", five.err);
    cr_assert(e2e_kv(three.err, "simgpu: ", "set_access", &sa));
    cr_assert(e2e_kv(five.err, "simgpu: ", "set_access", &sb));
    const char *maps = e2e_summary(five.err, "mappings");
    const char *last = maps ? strstr(maps, "step 4: ") : NULL;
    cr_assert(last, "no mappings row with the last step's:\n%s", five.err);
    unsigned long mapped = strtoul(last + strlen("step 4: "), NULL, 10);
    cr_log_info("served steady state: cuMemCreate %" PRIu64 " after 3 steps, %" PRIu64
                " after 5; cuMemSetAccess %" PRIu64 " and %" PRIu64 "; the last step mapped %lu",
                a, b, sa, sb, mapped);
    cr_expect_leq(b - a, 4, "steps 4-5 made %" PRId64 " handles", (int64_t)(b - a));
    cr_expect_leq(mapped, 12, "the last step mapped %lu handles", mapped);
    cr_expect_gt(sb, sa, "no memory moved in steps 4-5: is a layer offloaded?");
    e2e_free(&three);
    e2e_free(&five);
}

// --- pass-through ---------------------------------------------------------------------------
Test(e2e, passthrough_enable0, .timeout = 60)
{
    e2e_result_t base, off;
    e2e_train(&base, false, NULL, DATA);
    expect_ok("without aoshim", &base);
    e2e_train(&off, true, ENV("AOSHIM_ENABLE=0"), DATA);
    expect_ok("AOSHIM_ENABLE=0", &off);
    cr_expect_str_eq(off.checksum, base.checksum);
    cr_expect_eq(off.peak, base.peak, "peak %" PRIu64 " != baseline %" PRIu64, off.peak, base.peak);
    cr_expect_eq(off.step_ns, base.step_ns);
    cr_expect_null(strstr(off.err, "aoshim:"), "aoshim printed under AOSHIM_ENABLE=0:\n%s",
                   off.err);
    e2e_free(&base);
    e2e_free(&off);
}

Test(e2e, passthrough_layers_none, .timeout = 60)
{
    e2e_result_t base, none;
    e2e_train(&base, false, NULL, DATA);
    expect_ok("without aoshim", &base);
    e2e_train(&none, true, ENV("AOSHIM_OFFLOAD_LAYERS=none"), DATA);
    expect_ok("AOSHIM_OFFLOAD_LAYERS=none", &none);
    cr_expect_str_eq(none.checksum, base.checksum);
    double off = offloaded_bytes(&none);
    cr_expect_eq(off, 0, "AOSHIM_OFFLOAD_LAYERS=none offloaded %.0f bytes", off);
    e2e_free(&base);
    e2e_free(&none);
}

// --- when pinned memory runs out ------------------------------------------------------------
// A small AOSHIM_HOST_LIMIT: layers that find no pinned memory stay on the
// device, counted and warned about once; the results are unchanged.
static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

Test(e2e, host_limit_keeps_layers_resident, .timeout = 60)
{
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, DATA);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV(ALL, "AOSHIM_HOST_LIMIT=6M"), DATA);
    expect_ok("AOSHIM_HOST_LIMIT=6M", &with);
    cr_expect_str_eq(with.checksum, base.checksum);
    cr_expect_eq(count(with.err, "aoshim: warning: AOSHIM_HOST_LIMIT reached"), 1, "%s", with.err);
    const char *kept = e2e_summary(with.err, "kept resident");
    cr_assert(kept);
    const char *h = strstr(kept, "host limit ");
    cr_assert(h);
    cr_expect_gt(strtoull(h + 11, NULL, 10), 0, "no buffer counted as kept for the host limit");
    const char *pool = e2e_summary(with.err, "pinned host pool");
    cr_assert(pool);
    cr_expect_leq(e2e_bytes(pool), 6.0 * 1048576, "pinned pool %.20s over the limit", pool);
    e2e_free(&base);
    e2e_free(&with);
}

// --- PyTorch's allocator ----------------------------------------------------------------------
// Unset, aoshim selects the cudaMallocAsync backend for the process (a shell
// run under the shim sees it); with caching disabled it leaves it alone.
// PYTORCH_ALLOC_CONF (torch >= 2.9) is a user's choice as much as
// PYTORCH_CUDA_ALLOC_CONF: with either set, aoshim sets nothing.
static void env_seen(const char *const *env, const char *want)
{
    e2e_result_t r;
    e2e_run(&r, true, env,
            (const char *const[]){"/bin/sh", "-c",
                                  "printf '%s|%s' \"${PYTORCH_CUDA_ALLOC_CONF-unset}\" "
                                  "\"${PYTORCH_ALLOC_CONF-unset}\"",
                                  NULL});
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.out, want);
    e2e_free(&r);
}

Test(e2e, pytorch_allocator_selected_when_unset)
{
    env_seen(ENV("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING"),
             "backend:cudaMallocAsync|unset");
    env_seen(
        ENV("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING=1"),
        "unset|unset");
    env_seen(ENV("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,release_threshold:0",
                 "PYTORCH_ALLOC_CONF"),
             "backend:cudaMallocAsync,release_threshold:0|unset");
    env_seen(ENV("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF=expandable_segments:True"),
             "unset|expandable_segments:True");
    env_seen(ENV("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync"),
             "unset|backend:cudaMallocAsync");
    env_seen(ENV("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",
                 "PYTORCH_ALLOC_CONF=expandable_segments:True"),
             "backend:cudaMallocAsync|expandable_segments:True");
}

// train_step under the shim with the given allocator variables and
// AOSHIM_OFFLOAD_LAYERS=all (so that offloading nothing is the allocator's
// doing, not the policy's): whether it offloaded, the one warning (NULL:
// none), and the summary's allocator row.
static void allocator_run(const char *const *env, bool offloads, const char *warning,
                          const char *row)
{
    const char *with_env[8];
    size_t k = 0;
    while (env[k] && k < 6)
        with_env[k] = env[k], k++;
    cr_assert_null(env[k], "allocator_run: too many variables");
    with_env[k++] = ALL;
    with_env[k] = NULL;
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, DATA);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, with_env, DATA);
    expect_ok("with aoshim", &with);
    cr_expect_str_eq(with.checksum, base.checksum);
    if (warning) cr_expect_eq(count(with.err, warning), 1, "not once: '%s'\n%s", warning, with.err);
    cr_expect_eq(count(with.err, "aoshim: warning: not offloading"), warning ? 1 : 0, "%s",
                 with.err);
    if (offloads)
        cr_expect_gt(offloaded_bytes(&with), 0);
    else
        cr_expect_eq(offloaded_bytes(&with), 0);
    const char *v = e2e_summary(with.err, "allocator");
    cr_assert(v, "no allocator row:\n%s", with.err);
    size_t n = strcspn(v, "\n");
    cr_expect(strlen(row) == n && strncmp(v, row, n) == 0, "allocator row '%.*s', want '%s'",
              (int)n, v, row);
    e2e_free(&base);
    e2e_free(&with);
}

// A configuration that hides tensors in cached segments: aoshim says once
// that it will not offload, and does not.
Test(e2e, pytorch_caching_allocator_declined, .timeout = 60)
{
    allocator_run(ENV("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "PYTORCH_ALLOC_CONF"),
                  false, "aoshim: warning: not offloading: PYTORCH_CUDA_ALLOC_CONF selects",
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; declined");
}

Test(e2e, pytorch_alloc_conf_declined, .timeout = 60)
{
    allocator_run(ENV("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF=expandable_segments:True"),
                  false, "aoshim: warning: not offloading: PYTORCH_ALLOC_CONF selects",
                  "PYTORCH_ALLOC_CONF=expandable_segments:True; declined");
}

Test(e2e, pytorch_alloc_conf_async_offloads, .timeout = 60)
{
    allocator_run(ENV("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync"),
                  true, NULL, "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync; on");
}

// Both set: every one must select cudaMallocAsync (torch versions disagree on
// which wins); the warning names the one that does not.
Test(e2e, pytorch_both_confs_must_agree, .timeout = 60)
{
    allocator_run(ENV("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",
                      "PYTORCH_ALLOC_CONF=expandable_segments:True"),
                  false, "aoshim: warning: not offloading: PYTORCH_ALLOC_CONF selects",
                  "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, "
                  "PYTORCH_ALLOC_CONF=expandable_segments:True; declined");
    allocator_run(ENV("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",
                      "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync"),
                  true, NULL,
                  "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, "
                  "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync; on");
}

// --- no CUDA, no cost -------------------------------------------------------------------------
// Every process under LD_PRELOAD loads the shim (shells, compilers): one
// that never touches CUDA must see no output and no change.
static void silent(const char *const *argv, const char *dir)
{
    char cwd[4096];
    cr_assert(getcwd(cwd, sizeof cwd));
    if (dir) cr_assert_eq(chdir(dir), 0);
    e2e_result_t r;
    e2e_run(&r, true, NULL, argv);
    if (dir) cr_assert_eq(chdir(cwd), 0);
    cr_expect_eq(r.status, 0, "%s: exit %d", argv[0], r.status);
    cr_expect_str_eq(r.out, "", "%s wrote to stdout under the shim", argv[0]);
    cr_expect_str_eq(r.err, "", "%s wrote to stderr under the shim", argv[0]);
    e2e_free(&r);
}

Test(e2e, no_cuda_true)
{
    silent((const char *const[]){"/bin/true", NULL}, NULL);
}

Test(e2e, no_cuda_ls)
{
    // ls in an empty directory: anything printed at all came from the shim.
    char dir[] = "/tmp/aoshim-e2e-XXXXXX";
    cr_assert(mkdtemp(dir));
    silent((const char *const[]){"/bin/ls", NULL}, dir);
    rmdir(dir);
}

// A prefetch never takes memory the program needs: with every offloaded
// layer prefetched at the first backward (AOSHIM_PREFETCH=6), a capacity
// that fits the run without aoshim also fits it with aoshim: the program's
// allocation that runs out takes the prefetched layers' memory back (they
// are reloaded at their backward). (Before: out of memory.)
// The capacity is the run without aoshim's need: 246.0 MiB under the
// driver's pool, which keeps freed temporaries until the step's sync
// (243 MiB before, when freed pool memory went back at once).
Test(e2e, prefetch_never_takes_needed_memory, .timeout = 120)
{
    const char *args = "--layers 8 --hidden 512 --seq 512 --batch 2 --heads 8 --fused --steps 2 "
                       "--capacity 246M";
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    e2e_train(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=0-4", "AOSHIM_PREFETCH=6", "SIM_QUIET=0"),
              args);
    expect_ok("with aoshim, prefetch 6", &with);
    cr_expect_str_eq(with.checksum, base.checksum);
    uint64_t races = 1, faults = 1;
    cr_expect(e2e_kv(with.err, "simgpu: ", "races", &races) && races == 0, "races %llu",
              (unsigned long long)races);
    cr_expect(e2e_kv(with.err, "simgpu: ", "faults", &faults) && faults == 0);
    const char *off = e2e_summary(with.err, "offloaded / reloaded");
    cr_assert(off, "no summary:\n%s", with.err);
    const char *slash = strstr(off, " / ");
    cr_assert(slash);
    cr_expect_eq(e2e_bytes(off), e2e_bytes(slash + 3), "offloaded != reloaded: %.40s", off);
    e2e_free(&base);
    e2e_free(&with);
}

// --- the budget under microbatched schedules -----------------------------------------------
// Four microbatches of 8 layers. The planner follows the order the step ran
// in (1F1B, as the first of two stages, holds two microbatches at once;
// GPipe all four), so its peak is the step's: budgets k layers of one
// microbatch under the need are kept over the whole run, the measuring step
// included (before, 1F1B at k = 8 held 8% over: the planner summed the
// microbatches into one pass), and the plan says so. Step times: bench_plan.
#define MB_MODEL "--layers 8 --hidden 2048 --seq 2048 --heads 16 --fused --nodata --microbatches 4"

static void budget_kept_mb(const char *schedule, int k)
{
    char args[256], budget_env[64];
    snprintf(args, sizeof args, MB_MODEL " --schedule %s --steps 4", schedule);
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, args);
    expect_ok("without aoshim", &base);
    uint64_t budget = base.peak - (uint64_t)k * base.act_per_layer;
    snprintf(budget_env, sizeof budget_env, "AOSHIM_BUDGET=%" PRIu64, budget);
    e2e_train(&with, true, ENV(budget_env), args);
    expect_ok("auto", &with);
    const char *row = plan_row(&with);
    cr_log_info("%s, %d layers under: peak %" PRIu64 " for %" PRIu64 " (%.4f), step %.3fx: %.*s",
                schedule, k, with.peak, budget, (double)with.peak / (double)budget,
                (double)with.step_ns / (double)base.step_ns, (int)strcspn(row, "\n"), row);
    cr_expect_leq(with.peak, budget, "%s: peak %" PRIu64 " over the budget %" PRIu64 " by %.2f%%",
                  schedule, with.peak, budget, 100.0 * ((double)with.peak / (double)budget - 1));
    cr_expect(strstr(row, "layers 0-") && !strstr(row, "cannot be met"), "%s: %.*s", schedule,
              (int)strcspn(row, "\n"), row);
    cr_expect_str_eq(with.checksum, base.checksum);
    e2e_free(&base);
    e2e_free(&with);
}

Test(e2e, budget_kept_1f1b, .timeout = 120)
{
    budget_kept_mb("1f1b", 4);
    budget_kept_mb("1f1b", 8);
    budget_kept_mb("1f1b", 10);
}

Test(e2e, budget_kept_gpipe, .timeout = 120)
{
    budget_kept_mb("gpipe", 8);
    budget_kept_mb("gpipe", 16);
    budget_kept_mb("gpipe", 24);
}
