// SPDX-License-Identifier: MIT
// The fault matrix: every injectable driver call (SIM_FAIL) failed at its
// first, a middle and its last occurrence in a run with offloading, under
// aoshim. Each cell must end in one of two ways:
//
//   same   the run completes with the bytes of a run without aoshim
//   error  the program sees a CUDA error code (its own check reports it)
//
// and never "wrong": a different checksum, a fault on unmapped memory
// (exit 86), a race, a crash, or a hang (60 s). Two workloads: train_step
// (3 steps, one thread) and stress_threads (a training loop against three
// other threads). The matrix is printed; docs/testing.md carries it.
//
// Also wrong: something left behind at exit (the simulator's live_handles,
// live_mappings, live_pinned_bytes differ from those of the same program run
// without aoshim), in every cell of train_step and in the cells of
// stress_threads that end normally (an error exit there leaves the program's
// other threads running, and aoshim then leaves its memory to the driver);
// and, in an error cell, the wrong number of aoshim lines: exactly one (what failed, what aoshim
// did) when the call that failed was aoshim's own, none when it was the program's and aoshim passed
// the error through. Whose call it was, the simulator says (SIM_FAIL_CALLERS=1: the modules on the
// stack of the failed call).
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_run.h"

#define TRAIN_ARGS "--layers 6 --hidden 256 --seq 256 --steps 3"

typedef enum { SAME, ERROR, WRONG } outcome_t;
static const char *const outcome_name[] = {"same", "error", "WRONG"};

typedef struct workload_s {
    const char *name;
    const char *prog_var; // harness variable with the program's path
    const char *args;
    const char *const *env;
    // An error exit (one thread's exit() while the others run) leaves other
    // threads of the program running: aoshim then gives nothing back at exit
    // (a running thread could still touch a buffer; the driver reclaims it),
    // so only the cells that end normally are checked for leaks.
    bool threads;
} workload_t;

// Offloading on in every workload ('auto' with its default budget would
// keep these small steps on the device, and the cells would test
// pass-through only). The third is auto's own path: a measuring step, then
// plans from the order a 1F1B step of 4 microbatches ran in, under a budget
// of 100 MiB (148 without).
static const char *const train_env[] = {"AOSHIM_OFFLOAD_LAYERS=all", NULL};
static const char *const stress_env[] = {"AOSHIM_OFFLOAD_LAYERS=4", NULL};
static const char *const auto_env[] = {"AOSHIM_BUDGET=100M", NULL};
#define AUTO_ARGS TRAIN_ARGS " --microbatches 4 --schedule 1f1b"
// The served path (train_step --pytorch: its pool keeps what it frees, so
// aoshim's memory serves the program's own allocations by default), where
// idle memory is lent to layers and reloads on the GPU (offload/chunk.c):
// 144 MiB lent in the clean run.
#define SERVED_ARGS "--pytorch --layers 6 --hidden 256 --seq 512 --batch 2 --steps 3"

static void run_as(const workload_t *w, const char *fail, bool preload, e2e_result_t *r)
{
    const char *env[16];
    int n = 0;
    for (const char *const *e = w->env; *e; e++)
        env[n++] = *e;
    env[n++] = "SIM_QUIET=0";
    env[n++] = "AOSHIM_QUIET=1";
    char spec[128];
    if (fail) {
        snprintf(spec, sizeof spec, "SIM_FAIL=%s", fail);
        env[n++] = spec;
        env[n++] = "SIM_FAIL_CALLERS=1";
    } else {
        env[n++] = "SIM_COUNT_CALLS=1";
    }
    env[n] = NULL;
    const char *argv[32];
    int a = 0;
    argv[a++] = "/usr/bin/timeout"; // coreutils: a hang ends as exit 124
    argv[a++] = "60";
    argv[a++] = e2e_path(w->prog_var);
    char *copy = strdup(w->args);
    e2e_split(copy, argv, a, 32);
    e2e_run(r, preload, env, argv);
    free(copy);
}

static void run(const workload_t *w, const char *fail, e2e_result_t *r)
{
    run_as(w, fail, true, r);
}

// --- what a cell must also get right ---------------------------------------------------------
// What the program holds at exit as the simulator counts it.
typedef struct live_s {
    uint64_t handles, mappings, pinned;
} live_t;

static bool live_of(const e2e_result_t *r, live_t *l)
{
    return e2e_kv(r->err, "simgpu: ", "live_handles", &l->handles) &&
           e2e_kv(r->err, "simgpu: ", "live_mappings", &l->mappings) &&
           e2e_kv(r->err, "simgpu: ", "live_pinned_bytes", &l->pinned);
}

// The failed call was aoshim's own: the simulator found libaoshim nearest on
// its stack, and not as the pass-through of a runtime call (libcudart, or
// NCCL, right behind it: the runtime made the call for the program).
// -1 when no failure fired.
static int aoshim_made_it(const e2e_result_t *r)
{
    const char *l = strstr(r->err, "simgpu: injected ");
    if (!l) return -1;
    const char *eol = strchr(l, '\n'), *from = strstr(l, " from ");
    if (!from || (eol && from > eol)) return 0;
    from += strlen(" from ");
    if (strncmp(from, "libaoshim", 9) != 0) return 0;
    const char *next = strstr(from, " < ");
    if (!next || (eol && next > eol)) return 1;
    next += 3;
    return strncmp(next, "libcudart", 9) != 0 && strncmp(next, "libnccl", 7) != 0;
}

// Lines aoshim wrote that the clean run (under aoshim) did not; a late
// reload warning is not counted where the clean run had one too (whether
// and where the reader thread of stress_threads meets an offloaded layer is
// timing).
static int new_aoshim_lines(const char *err, const char *clean_err)
{
    bool clean_late = strstr(clean_err, "aoshim: warning: late reload") != NULL;
    int n = 0;
    for (const char *p = err; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (strncmp(p, "aoshim: ", 8) == 0 &&
            !(clean_late && strncmp(p, "aoshim: warning: late reload", 28) == 0)) {
            bool seen = false;
            for (const char *q = clean_err; (q = strstr(q, "aoshim: ")) != NULL; q++)
                if ((q == clean_err || q[-1] == '\n') && strncmp(q, p, len) == 0 &&
                    (q[len] == '\n' || q[len] == '\0'))
                    seen = true;
            n += !seen;
        }
        p = eol ? eol + 1 : NULL;
    }
    return n;
}

// What the program reported as its result: the checksum (train_step) or
// the stress line's verdict.
static const char *result_of(const workload_t *w, const e2e_result_t *r, char *buf, size_t n)
{
    if (!strcmp(w->prog_var, "TRAIN_STEP")) return r->have_line ? r->checksum : "";
    const char *s = strstr(r->out, "stress ok=");
    snprintf(buf, n, "%.12s", s ? s : "");
    return buf;
}

static outcome_t classify(const workload_t *w, const e2e_result_t *r, const char *want,
                          const char **why)
{
    char buf[64];
    uint64_t races = 0, faults = 0;
    e2e_kv(r->err, "simgpu: ", "races", &races);
    e2e_kv(r->err, "simgpu: ", "faults", &faults);
    *why = "";
    if (r->status == 124) return *why = "hang", WRONG;
    if (r->status == 86) return *why = "fault", WRONG;
    if (races) return *why = "race", WRONG;
    if (faults) return *why = "fault", WRONG;
    if (r->status == 0) {
        if (strcmp(result_of(w, r, buf, sizeof buf), want) != 0) return *why = "bytes", WRONG;
        return SAME;
    }
    // The program's own error check: train_step's status=error line, or
    // the failed call named by stress_threads' CHECK.
    if (r->status == 1 && (strstr(r->out, "status=error") || strstr(r->err, "failed:")))
        return ERROR;
    if (r->status == 3 && strstr(r->out, "status=oom")) return ERROR; // an allocation's error code

    return *why = "crash", WRONG;
}

// classify, then what every cell must also get right (see the top).
static outcome_t judge(const workload_t *w, const e2e_result_t *r, const char *want,
                       const e2e_result_t *clean, const live_t *bare, const char **why)
{
    outcome_t o = classify(w, r, want, why);
    if (o == WRONG) return o;
    live_t l;
    if (!live_of(r, &l)) return *why = "no exit line", WRONG;
    if ((o == SAME || !w->threads) &&
        (l.handles != bare->handles || l.mappings != bare->mappings || l.pinned != bare->pinned))
        return *why = "leak", WRONG;
    if (o == ERROR) {
        int own = aoshim_made_it(r), lines = new_aoshim_lines(r->err, clean->err);
        if (own < 0) return *why = "nothing injected", WRONG;
        if (lines != own) return *why = own ? "lines (want 1)" : "lines (want 0)", WRONG;
        if (own) *why = "aoshim's call"; // printed: the error cells aoshim answers for
    }
    return o;
}

static void matrix(const workload_t *w)
{
    e2e_result_t clean, bare_run;
    run(w, NULL, &clean);
    cr_assert_eq(clean.status, 0, "%s: clean run failed:\n%s", w->name, clean.err);
    // What the program itself leaves at exit, without aoshim.
    run_as(w, NULL, false, &bare_run);
    live_t bare, mine;
    cr_assert(live_of(&bare_run, &bare) && live_of(&clean, &mine), "no live_* counts:\n%s",
              bare_run.err);
    cr_assert(mine.handles == bare.handles && mine.mappings == bare.mappings &&
                  mine.pinned == bare.pinned,
              "%s: aoshim leaves something at exit: handles %llu/%llu mappings %llu/%llu pinned "
              "%llu/%llu (with/without)",
              w->name, (unsigned long long)mine.handles, (unsigned long long)bare.handles,
              (unsigned long long)mine.mappings, (unsigned long long)bare.mappings,
              (unsigned long long)mine.pinned, (unsigned long long)bare.pinned);
    e2e_free(&bare_run);
    char want[64];
    snprintf(want, sizeof want, "%s", result_of(w, &clean, (char[64]){0}, 64));
    const char *calls = strstr(clean.err, "simgpu: calls ");
    cr_assert(calls, "no call counts (SIM_COUNT_CALLS)");
    calls += strlen("simgpu: calls ");
    char *line = strndup(calls, strcspn(calls, "\n"));
    // Neither program pins host memory itself: a pin is aoshim's pool, so
    // the clean run offloaded and the cells test offloading, not pass-through.
    cr_assert(strstr(line, "cuMemHostAlloc=") != NULL,
              "%s: the clean run pinned no host memory (nothing offloaded): %s", w->name, line);
    int cells = 0, count[3] = {0};
    printf("fault matrix, %s (%s): call occurrence -> outcome\n", w->name, w->args);
    for (char *save = NULL, *t = strtok_r(line, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        *eq = '\0';
        unsigned long long total = strtoull(eq + 1, NULL, 10);
        unsigned long long at[3] = {1, (total + 1) / 2, total};
        printf("  %-22s", t);
        for (int i = 0; i < 3; i++) {
            if (i && at[i] == at[i - 1]) continue;
            char spec[96];
            snprintf(spec, sizeof spec, "%s:%llu", t, at[i]);
            e2e_result_t r;
            run(w, spec, &r);
            const char *why;
            outcome_t o = judge(w, &r, want, &clean, &bare, &why);
            count[o]++;
            cells++;
            printf(" %llu/%llu %s%s%s", at[i], total, outcome_name[o], *why ? ":" : "", why);
            cr_expect_neq(o, WRONG, "%s, %s: %s (exit %d)\n--- stdout\n%s--- stderr\n%s", w->name,
                          spec, why, r.status, r.out, r.err);
            e2e_free(&r);
        }
        printf("\n");
    }
    printf("fault matrix, %s: %d cells: same %d, error %d, wrong %d\n", w->name, cells, count[SAME],
           count[ERROR], count[WRONG]);
    fflush(stdout);
    free(line);
    e2e_free(&clean);
}

Test(fault_matrix, train_step, .timeout = 900)
{
    workload_t w = {"train_step", "TRAIN_STEP", TRAIN_ARGS, train_env, false};
    matrix(&w);
}

Test(fault_matrix, train_step_1f1b_auto, .timeout = 900)
{
    workload_t w = {"train_step 1f1b auto", "TRAIN_STEP", AUTO_ARGS, auto_env, false};
    matrix(&w);
}

Test(fault_matrix, train_step_pytorch_served, .timeout = 900)
{
    workload_t w = {"train_step --pytorch served", "TRAIN_STEP", SERVED_ARGS, train_env, false};
    matrix(&w);
}

Test(fault_matrix, stress_threads, .timeout = 900)
{
    workload_t w = {"stress_threads", "AO_STRESS_THREADS", "", stress_env, true};
    matrix(&w);
}

// Failures in runs, where a single retry does not help.
static void same_as_clean(const char *fail, const char *line, int times)
{
    workload_t w = {"train_step", "TRAIN_STEP", TRAIN_ARGS, train_env, false};
    e2e_result_t clean, r;
    run(&w, NULL, &clean);
    run(&w, fail, &r);
    const char *why;
    cr_expect_eq(classify(&w, &r, clean.checksum, &why), SAME, "%s: %s (exit %d)\n%s", fail, why,
                 r.status, r.err);
    int n = 0;
    for (const char *p = r.err; (p = strstr(p, line)) != NULL; p++)
        n++;
    cr_expect_eq(n, times, "%s: '%s' %d times, want %d:\n%s", fail, line, n, times, r.err);
    e2e_free(&clean);
    e2e_free(&r);
}

// A reload whose copy fails twice keeps the host copy and unmaps the chunk
// again; the first kernel that needs it reloads it (late): the same bytes.
// (Before: the chunk was marked resident and the host copy freed.)
Test(fault_matrix, reload_copy_fails_twice, .timeout = 120)
{
    same_as_clean("cuMemcpyHtoDAsync:5:2", "aoshim: warning: reload copy failed", 1);
}

// Event calls failing for a while: a failed query, record or stream wait
// makes the host wait instead of counting the event as complete. (Before:
// memory was released while kernels still used it: races.)
Test(fault_matrix, event_calls_fail_for_a_while, .timeout = 120)
{
    same_as_clean("cuEventQuery:5:50", "aoshim: warning: cuEventQuery failed", 1);
    same_as_clean("cuEventRecord:10:30", "aoshim: warning: recording a CUDA event failed", 1);
    same_as_clean("cuStreamWaitEvent:10:20", "aoshim: warning: cuStreamWaitEvent failed", 1);
}

// A physical handle whose release fails twice (a trim under auto, mid-run)
// is kept and released at exit: the same bytes, nothing left behind.
// (Before: a release that failed once lost the handle: live_handles=1.)
Test(fault_matrix, a_release_failing_twice_is_kept_for_exit, .timeout = 120)
{
    workload_t w = {"train_step 1f1b auto", "TRAIN_STEP", AUTO_ARGS, auto_env, false};
    e2e_result_t clean, bare, r;
    run(&w, NULL, &clean);
    run_as(&w, NULL, false, &bare);
    run(&w, "cuMemRelease:1:2", &r);
    const char *why;
    cr_expect_eq(classify(&w, &r, clean.checksum, &why), SAME, "%s (exit %d)\n%s", why, r.status,
                 r.err);
    cr_expect(strstr(r.err, "simgpu: injected cuMemRelease:2"), "no second failure:\n%s", r.err);
    live_t a, b;
    cr_assert(live_of(&r, &a) && live_of(&bare, &b));
    cr_expect_eq(a.handles, b.handles, "handles left at exit: %llu, without aoshim %llu",
                 (unsigned long long)a.handles, (unsigned long long)b.handles);
    e2e_free(&clean);
    e2e_free(&bare);
    e2e_free(&r);
}

// Device memory that cannot be had at all (every map, or every set-access,
// fails from some point on): a kernel that needs an offloaded layer is
// refused with an out-of-memory error the program sees, and aoshim says so
// once; never a kernel on unmapped memory. (Before: the simulated GPU
// faulted, exit 86.)
static void clear_error(const char *fail)
{
    workload_t w = {"train_step", "TRAIN_STEP", TRAIN_ARGS, train_env, false};
    e2e_result_t r;
    run(&w, fail, &r);
    const char *why;
    cr_expect_eq(classify(&w, &r, "", &why), ERROR, "%s: %s (exit %d)\n%s", fail, why, r.status,
                 r.err);
    const char *line = "could not be brought back to the device: the call is refused";
    int n = 0;
    for (const char *p = r.err; (p = strstr(p, line)) != NULL; p++)
        n++;
    cr_expect_eq(n, 1, "%s: '%s' %d times:\n%s", fail, line, n, r.err);
    e2e_free(&r);
}

Test(fault_matrix, no_device_memory_is_a_clear_error, .timeout = 120)
{
    clear_error("cuMemMap:20:100000");
    clear_error("cuMemSetAccess:20:100000");
}
