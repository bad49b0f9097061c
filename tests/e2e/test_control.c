// SPDX-License-Identifier: MIT
// The control API misused under LD_PRELOAD: every misuse answers its
// documented code (aoshim.h), warns at most once with the house prefix, and
// never costs the program a byte; without the shim every call answers
// AOSHIM_ENOTLOADED.
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "e2e_run.h"

// "call <name> rc=<n>": the first occurrence's code; INT32_MIN if absent.
static int rc_of(const char *out, const char *name, int nth)
{
    char want[128];
    snprintf(want, sizeof want, "call %s rc=", name);
    const char *p = out;
    for (int i = 0; i <= nth; i++) {
        p = strstr(p, want);
        while (p && p != out && p[-1] != '\n')
            p = strstr(p + 1, want);
        if (!p) return INT32_MIN;
        if (i < nth) p++;
    }
    return atoi(p + strlen(want));
}

static const struct {
    const char *name;
    int want;
    int reps;
} expected[] = {
    {"layer_end_without_begin", AOSHIM_ESTATE, 2},
    {"backward_begin_never_run", AOSHIM_ESTATE, 2},
    {"backward_end_without_begin", AOSHIM_ESTATE, 2},
    {"layer_begin_negative", AOSHIM_EINVAL, 2},
    {"backward_begin_negative", AOSHIM_EINVAL, 2},
    {"set_microbatch_negative", AOSHIM_EINVAL, 2},
    {"keep_null", AOSHIM_EINVAL, 2},
    // aoshim.h: ENOTFOUND is "pointer not in any buffer aoshim knows".
    {"keep_host_pointer", AOSHIM_ENOTFOUND, 2},
    {"set_stream", AOSHIM_OK, 1},
    {"keep_passthrough", AOSHIM_OK, 1},
    {"set_microbatch", AOSHIM_OK, 1},
    {"layer_begin_0", AOSHIM_OK, 1},
    {"layer_begin_0_nested", AOSHIM_ESTATE, 2},
    {"layer_end_0", AOSHIM_OK, 1},
    {"layer_begin_1", AOSHIM_OK, 1},
    {"backward_begin_inside_layer", AOSHIM_ESTATE, 2},
    {"step_end_inside_layer", AOSHIM_ESTATE, 2},
    {"set_stream_garbage", AOSHIM_EINVAL, 2},
    {"layer_end_other_thread", AOSHIM_ESTATE, 2},
    {"layer_end_1", AOSHIM_OK, 1},
    {"layer_begin_2", AOSHIM_OK, 1},
    {"layer_end_2", AOSHIM_OK, 1},
    {"backward_begin_2", AOSHIM_OK, 1},
    {"backward_end_2", AOSHIM_OK, 1},
    {"get_stats_forward", AOSHIM_OK, 1},
    {"backward_begin_1", AOSHIM_OK, 1},
    {"backward_end_1", AOSHIM_OK, 1},
    {"backward_begin_0", AOSHIM_OK, 1},
    {"backward_end_0", AOSHIM_OK, 1},
    {"step_end", AOSHIM_OK, 1},
    {"get_stats_end", AOSHIM_OK, 1},
};
#define NEXPECTED (sizeof expected / sizeof *expected)

// AOSHIM_OFFLOAD_LAYERS=all: layer 0 must really go to host memory and back
// (the default, 'auto', would keep this small step on the device).
static void run_misuse(e2e_result_t *r, bool preload)
{
    const char *const argv[] = {e2e_path("CONTROL_MISUSE"), NULL};
    const char *const env[] = {"AOSHIM_OFFLOAD_LAYERS=all", NULL};
    e2e_run(r, preload, env, argv);
    if (r->status != 0 || !strstr(r->out, "done\n"))
        cr_log_warn("stdout:\n%s\nstderr:\n%s", r->out, r->err);
    cr_assert_eq(r->status, 0, "control_misuse exit %d (86: a fault: bytes were lost)", r->status);
    cr_assert(strstr(r->out, "done\n"), "control_misuse did not finish");
}

Test(e2e_control, misuse_under_preload, .timeout = 30)
{
    e2e_result_t r;
    run_misuse(&r, true);
    for (size_t i = 0; i < NEXPECTED; i++)
        for (int k = 0; k < expected[i].reps; k++) {
            int got = rc_of(r.out, expected[i].name, k);
            cr_expect_eq(got, expected[i].want, "%s (call %d): rc %d, want %d", expected[i].name,
                         k + 1, got, expected[i].want);
        }
    cr_expect_eq(e2e_check_of(r.out, "bytes_intact"), 1, "bytes read back after reload differ");
    // Not vacuous: layer 0's buffer really went to host memory and back.
    long long off = e2e_check_of(r.out, "offloaded_bytes"), rel = e2e_check_of(r.out, "reloaded_bytes");
    cr_log_info("offloaded %lld, reloaded %lld bytes", off, rel);
    cr_expect_geq(off, 2 << 20, "nothing offloaded: the round trip proves nothing");
    cr_expect_eq(rel, off, "offloaded %lld != reloaded %lld", off, rel);
    long long unmaps = e2e_check_of(r.out, "sim_unmap_calls");
    cr_expect_geq(unmaps, 1, "the simulator saw no cuMemUnmap before the bytes were read back");
    e2e_free(&r);
}

// Every line aoshim writes is a summary row or carries the house prefix, no
// warning repeats, and misuse is a warning, never an error.
Test(e2e_control, warnings_once_with_prefix, .timeout = 30)
{
    e2e_result_t r;
    run_misuse(&r, true);
    char *copy = strdup(r.err);
    char *lines[256];
    int n = 0, nwarn = 0;
    for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l && n < 256;
         l = strtok_r(NULL, "\n", &save))
        lines[n++] = l;
    for (int i = 0; i < n; i++) {
        if (strncmp(lines[i], "aoshim: warning: ", 17) == 0) {
            nwarn++;
            for (int j = 0; j < i; j++)
                cr_expect_str_neq(lines[j], lines[i], "warning printed twice: %s", lines[i]);
            continue;
        }
        cr_expect(strncmp(lines[i], "aoshim: error: ", 15) != 0, "misuse logged as an error: %s",
                  lines[i]);
        // Warnings must not appear without the prefix, e.g. "aoshim: aoshim_layer_end".
        cr_expect(strstr(lines[i], "aoshim_") == NULL || strncmp(lines[i], "aoshim: ", 8) != 0 ||
                      strstr(lines[i], "kept resident") != NULL,
                  "a diagnostic without 'aoshim: warning: ': %s", lines[i]);
    }
    cr_log_info("%d warnings:\n%s", nwarn, r.err);
    cr_expect_gt(nwarn, 0, "misuse went unremarked: no 'aoshim: warning: ' line");
    free(copy);
    e2e_free(&r);
}

Test(e2e_control, not_loaded, .timeout = 30)
{
    e2e_result_t r;
    run_misuse(&r, false);
    for (size_t i = 0; i < NEXPECTED; i++)
        for (int k = 0; k < expected[i].reps; k++) {
            int got = rc_of(r.out, expected[i].name, k);
            cr_expect_eq(got, AOSHIM_ENOTLOADED, "%s (call %d) without the shim: rc %d",
                         expected[i].name, k + 1, got);
        }
    cr_expect_eq(e2e_check_of(r.out, "bytes_intact"), 1);
    cr_expect_null(strstr(r.err, "aoshim"), "stderr mentions aoshim without the shim:\n%s", r.err);
    e2e_free(&r);
}
