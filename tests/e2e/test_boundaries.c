// SPDX-License-Identifier: MIT
// Layer boundaries end to end (boundaries.c under LD_PRELOAD):
//
// - the control log (AOSHIM_CONTROL_LOG) holds exactly the calls the
//   program made, with a GPU, without a CUDA driver at all, with the engine
//   off, across a fork;
// - control calls never bring CUDA up in a process that did not use it;
// - layers whose buffers are all under AOSHIM_MIN_BYTES (every layer, or
//   only the last) run forward, backward and a recomputation with every call
//   answering 0, no warning, and the bytes of a run without the shim.
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "e2e_run.h"

#define LAYERS   4 // as boundaries.c
#define MBS      2
#define STEPS    2
#define CKPT     1
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

static char dir[256];

static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

// --- what the program did ----------------------------------------------------------------
static void add(char **s, size_t *len, const char *call, int layer, int mb)
{
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d %d\n", call, layer, mb);
    *s = realloc(*s, *len + (size_t)n + 1);
    memcpy(*s + *len, line, (size_t)n + 1);
    *len += (size_t)n;
}

// The control log boundaries.c must produce, from the same loops.
static char *expected_log(bool misuse)
{
    char *s = calloc(1, 1);
    size_t n = 0;
    if (misuse) {
        add(&s, &n, "layer_end", 7, 0);
        add(&s, &n, "set_microbatch", -1, -1); // refused: later lines stay in microbatch 0
    }
    for (int step = 0; step < STEPS; step++) {
        for (int mb = 0; mb < MBS; mb++) {
            add(&s, &n, "set_microbatch", -1, mb);
            for (int l = 0; l < LAYERS; l++) {
                add(&s, &n, "layer_begin", l, mb);
                add(&s, &n, "layer_end", l, mb);
            }
        }
        for (int mb = MBS - 1; mb >= 0; mb--) {
            add(&s, &n, "set_microbatch", -1, mb);
            for (int l = LAYERS - 1; l >= 0; l--) {
                add(&s, &n, "backward_begin", l, mb);
                if (l == CKPT) {
                    add(&s, &n, "layer_begin", l, mb);
                    add(&s, &n, "layer_end", l, mb);
                }
                add(&s, &n, "backward_end", l, mb);
            }
        }
        add(&s, &n, "step_end", -1, -1);
    }
    return s;
}

// Every "call <name> <arg> rc=<rc>" line answers ok, except the two refused
// calls of --misuse (the first layer_end(7) and set_microbatch(-1)); returns
// the number of calls seen.
static int expect_codes(const char *out, int ok, bool misuse)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, "call ")) != NULL; p++) {
        if (p != out && p[-1] != '\n') continue;
        char name[64];
        int arg, rc;
        cr_assert_eq(sscanf(p, "call %63s %d rc=%d", name, &arg, &rc), 3, "%.60s", p);
        int want = ok;
        if (misuse && !strcmp(name, "layer_end") && arg == 7)
            want = ok == AOSHIM_EDISABLED ? ok : AOSHIM_ESTATE;
        if (misuse && !strcmp(name, "set_microbatch") && arg == -1) want = AOSHIM_EINVAL;
        cr_expect_eq(rc, want, "%s(%d) answered %d, want %d", name, arg, rc, want);
        n++;
    }
    return n;
}

static double sum_of(const char *out)
{
    const char *p = strstr(out, "check sum=");
    cr_assert(p, "no sum in:\n%s", out);
    return strtod(p + 10, NULL);
}

static int pid_of(const char *out, const char *key)
{
    const char *p = strstr(out, key);
    cr_assert(p, "no '%s' in:\n%s", key, out);
    return atoi(p + strlen(key));
}

static void run(e2e_result_t *r, bool preload, const char *const *env, const char *prog,
                const char *a1, const char *a2, const char *a3)
{
    const char *argv[] = {e2e_path(prog), a1, a2, a3, NULL};
    e2e_run(r, preload, env, argv);
    if (r->status != 0 || !strstr(r->out, "done\n"))
        cr_log_warn("stdout:\n%s\nstderr:\n%s", r->out, r->err);
    cr_assert_eq(r->status, 0, "%s exit %d", prog, r->status);
    cr_assert(strstr(r->out, "done\n"), "%s did not finish", prog);
}

// No line on stderr but the refused calls' warnings (when asked) and the
// summary; never an error.
static void expect_quiet(const char *err, bool misuse)
{
    cr_expect_null(strstr(err, "aoshim: error"), "%s", err);
    int warnings = 0;
    for (const char *p = err; (p = strstr(p, "aoshim: warning: ")); p++)
        warnings++;
    cr_expect_eq(warnings, misuse ? 2 : 0, "%d warnings:\n%s", warnings, err);
}

static void expect_log(const char *out, const char *key, const char *want)
{
    char path[400];
    snprintf(path, sizeof path, "%s/ctl.%d.log", dir, pid_of(out, key));
    char *got = e2e_slurp(path);
    cr_assert(got, "no control log %s", path);
    cr_expect_str_eq(got, want, "control log %s:\n%s\nwant:\n%s", path, got, want);
    free(got);
}

// --- the control log ----------------------------------------------------------------------
// No CUDA driver anywhere (the simulator is off LD_LIBRARY_PATH): the program
// runs as without the shim, the log holds every call, a forked child logs
// into its own file (%p), and there is no summary (no GPU was used).
Test(e2e_ctllog, no_cuda_driver, .timeout = 30)
{
    e2e_make_dir(dir, sizeof dir, "boundaries-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_CONTROL_LOG=%s/ctl.%%p.log", dir);
    e2e_result_t r;
    run(&r, true, ENV(env, "LD_LIBRARY_PATH"), "AO_BOUNDARIES", "--misuse", "--fork", NULL);
    int calls = expect_codes(r.out, AOSHIM_OK, true);
    cr_expect_eq(calls, 2 + STEPS * (MBS * (1 + 2 * LAYERS) + MBS * (1 + 2 * LAYERS + 2) + 1));
    char *want = expected_log(true);
    expect_log(r.out, "pid ", want);
    expect_log(r.out, "child ", "step_end -1 -1\n");
    cr_expect_eq(files_in_dir(), 2, "parent's and child's logs only");
    expect_quiet(r.err, true);
    cr_expect_null(strstr(r.err, "memory summary"), "a summary without a GPU:\n%s", r.err);
    free(want);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// A driver is there but the program never uses CUDA (a CPU-only PyTorch
// run): the control calls must not load it, let alone create a context.
Test(e2e_ctllog, control_calls_do_not_start_cuda, .timeout = 30)
{
    e2e_make_dir(dir, sizeof dir, "boundaries-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_CONTROL_LOG=%s/ctl.%%p.log", dir);
    e2e_result_t r;
    run(&r, true, ENV(env), "AO_BOUNDARIES", NULL, NULL, NULL);
    expect_codes(r.out, AOSHIM_OK, false);
    cr_expect_eq(e2e_check_of(r.out, "driver_loaded"), 0,
                 "the shim loaded libcuda.so.1 in a process that never used CUDA");
    char *want = expected_log(false);
    expect_log(r.out, "pid ", want);
    expect_quiet(r.err, false);
    free(want);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// On the simulated GPU, with real offloads under way (the first CUDA call
// comes inside layer 0, after its boundary).
Test(e2e_ctllog, simulated_gpu, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "boundaries-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_CONTROL_LOG=%s/ctl.%%p.log", dir);
    e2e_result_t r;
    run(&r, true, ENV(env, "AOSHIM_OFFLOAD_LAYERS=0-2"), "AO_BOUNDARIES_GPU", "--misuse", NULL,
        NULL);
    expect_codes(r.out, AOSHIM_OK, true);
    cr_expect_eq(e2e_check_of(r.out, "bytes_ok"), 1);
    cr_expect_gt(e2e_check_of(r.out, "offloaded"), 0, "nothing offloaded: the log proves little");
    char *want = expected_log(true);
    expect_log(r.out, "pid ", want);
    expect_quiet(r.err, true);
    free(want);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// The engine off: every call answers AOSHIM_EDISABLED, and is logged all the same.
Test(e2e_ctllog, engine_disabled, .timeout = 30)
{
    e2e_make_dir(dir, sizeof dir, "boundaries-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_CONTROL_LOG=%s/ctl.%%p.log", dir);
    e2e_result_t r;
    run(&r, true, ENV(env, "AOSHIM_ENABLE=0"), "AO_BOUNDARIES_GPU", "--misuse", NULL, NULL);
    expect_codes(r.out, AOSHIM_EDISABLED, true);
    cr_expect_eq(e2e_check_of(r.out, "bytes_ok"), 1);
    char *want = expected_log(true);
    expect_log(r.out, "pid ", want);
    free(want);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// A file name without %p is the parent's: a forked child writes nothing
// there (nor truncates it).
Test(e2e_ctllog, fork_without_pid_in_name, .timeout = 30)
{
    e2e_make_dir(dir, sizeof dir, "boundaries-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_CONTROL_LOG=%s/ctl.log", dir);
    e2e_result_t r;
    run(&r, true, ENV(env), "AO_BOUNDARIES", "--fork", NULL, NULL);
    char path[400];
    snprintf(path, sizeof path, "%s/ctl.log", dir);
    char *got = e2e_slurp(path), *want = expected_log(false);
    cr_assert(got, "no %s", path);
    cr_expect_str_eq(got, want, "the child touched its parent's log:\n%s", got);
    cr_expect_eq(files_in_dir(), 1);
    free(got), free(want);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// The program's stderr (a symlink, which the file rule refuses): the lines
// go there, nothing is truncated.
Test(e2e_ctllog, to_stderr, .timeout = 30)
{
    e2e_result_t r;
    run(&r, true, ENV("AOSHIM_CONTROL_LOG=/dev/stderr"), "AO_BOUNDARIES", NULL, NULL, NULL);
    char *want = expected_log(false);
    cr_expect_str_eq(r.err, want);
    free(want);
    e2e_free(&r);
}

// A file that cannot be opened is a bad value: one line at start, exit 2,
// and the program never makes a call (it prints each call's code on stdout).
Test(e2e_ctllog, unwritable_fails_at_start, .timeout = 30)
{
    e2e_make_dir(dir, sizeof dir, "boundaries-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_CONTROL_LOG=%s/missing/ctl.log", dir);
    e2e_result_t r;
    const char *argv[] = {e2e_path("AO_BOUNDARIES"), NULL};
    e2e_run(&r, true, ENV(env), argv);
    cr_expect_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    cr_expect_str_eq(r.out, "", "the program ran");
    char want[700];
    snprintf(want, sizeof want,
             "aoshim: error: AOSHIM_CONTROL_LOG='%s/missing/ctl.log': cannot write "
             "%s/missing/ctl.log: No such file or directory\n",
             dir, dir);
    cr_expect_str_eq(r.err, want);
    e2e_free(&r);
    cr_expect_eq(files_in_dir(), 0, "the check created something in %s", dir);
    e2e_remove_dir(dir);
}

// --- layers that track nothing ------------------------------------------------------------
// Forward, backward with a recomputation, two steps of two microbatches:
// every call answers 0, nothing is said, the bytes are those of a run
// without the shim, and the simulator saw no race and no fault.
static void small_layers(const char *which, bool expect_offloads)
{
    e2e_result_t base, with;
    run(&base, false, NULL, "AO_BOUNDARIES_GPU", "--small", which, NULL);
    run(&with, true, ENV("AOSHIM_OFFLOAD_LAYERS=0-2", "SIM_QUIET=0"), "AO_BOUNDARIES_GPU",
        "--small", which, NULL);
    int calls = expect_codes(with.out, AOSHIM_OK, false);
    cr_expect_eq(calls, STEPS * (MBS * (1 + 2 * LAYERS) + MBS * (1 + 2 * LAYERS + 2) + 1));
    expect_quiet(with.err, false);
    cr_expect_null(strstr(with.err, "train_step: warning"));
    cr_expect_eq(e2e_check_of(base.out, "bytes_ok"), 1);
    cr_expect_eq(e2e_check_of(with.out, "bytes_ok"), 1, "bytes differ under the shim");
    cr_expect_eq(sum_of(with.out), sum_of(base.out));
    uint64_t races = 1, faults = 1;
    cr_expect(e2e_kv(with.err, "simgpu: ", "races", &races), "no simulator line:\n%s", with.err);
    cr_expect(e2e_kv(with.err, "simgpu: ", "faults", &faults));
    cr_expect_eq(races, 0);
    cr_expect_eq(faults, 0);
    long long off = e2e_check_of(with.out, "offloaded"), rel = e2e_check_of(with.out, "reloaded");
    if (expect_offloads)
        cr_expect_gt(off, 0, "nothing offloaded");
    else
        cr_expect_eq(off, 0);
    cr_expect_eq(rel, off);
    e2e_free(&base);
    e2e_free(&with);
}

Test(e2e_small_layers, every_layer_under_min_bytes, .timeout = 60)
{
    small_layers("all", false);
}

Test(e2e_small_layers, last_layer_under_min_bytes, .timeout = 60)
{
    small_layers("last", true);
}

Test(e2e_small_layers, no_layer_under_min_bytes, .timeout = 60)
{
    small_layers("none", true);
}
