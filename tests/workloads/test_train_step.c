// SPDX-License-Identifier: MIT
// The training-step workload's contract: its last line is reproducible, its
// checksum sees every input byte and no allocator or schedule detail, its
// activations match the paper's formula, it is race-free on the simulated GPU
// in every mode, and it fails cleanly (status=oom, exit 3) out of memory.
//
// Every test runs the real binary, as a user and the later preload tests do.
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// --- running the binary ------------------------------------------------------
typedef struct run_s {
    int status; // exit status, or 128+signal
    char last[2048];
} run_t;

static const char *binary(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("TRAIN_STEP");
    if (env && *env) return env;
    if (!path[0]) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
        self[n] = 0;
        snprintf(path, sizeof path, "%s/train_step", dirname(self));
    }
    return path;
}

// The small model most tests use: four layers, fast in data mode.
#define SMALL "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "128", "--batch", "2"

// Runs train_step with the NULL-terminated arguments; keeps the last line of
// stdout (stderr passes through to the test log).
static run_t run_args(const char *const *args)
{
    run_t r = {0};
    const char *argv[64];
    int n = 0;
    argv[n++] = binary();
    for (; *args; args++) {
        cr_assert(n < 63);
        argv[n++] = *args;
    }
    argv[n] = NULL;
    int fds[2];
    cr_assert(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    cr_assert(f);
    char line[sizeof r.last];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) strcpy(r.last, line);
    }
    fclose(f);
    int ws;
    cr_assert(waitpid(pid, &ws, 0) == pid);
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    return r;
}

#define RUN(...) run_args((const char *const[]){__VA_ARGS__, NULL})

// Value of key=... in the result line, or "" when absent.
static const char *field(const run_t *r, const char *key, char *buf, size_t len)
{
    size_t kl = strlen(key);
    const char *p = r->last;
    buf[0] = 0;
    while ((p = strstr(p, key))) {
        if ((p == r->last || p[-1] == ' ') && p[kl] == '=') {
            p += kl + 1;
            size_t n = strcspn(p, " ");
            if (n >= len) n = len - 1;
            memcpy(buf, p, n);
            buf[n] = 0;
            return buf;
        }
        p += kl;
    }
    return buf;
}

static uint64_t num(const run_t *r, const char *key)
{
    char buf[64];
    field(r, key, buf, sizeof buf);
    cr_assert(buf[0], "no %s= in '%s'", key, r->last);
    char *end;
    uint64_t v = strtoull(buf, &end, 10);
    cr_assert(*end == 0, "%s=%s is not a number", key, buf);
    return v;
}

static void expect_ok(const run_t *r)
{
    cr_assert_eq(r->status, 0, "exit %d, last line '%s'", r->status, r->last);
    cr_assert(strncmp(r->last, "train_step status=ok ", 21) == 0, "last line '%s'", r->last);
    cr_assert_eq(num(r, "races"), 0, "races in '%s'", r->last);
}

static void checksum(const run_t *r, char *buf)
{
    field(r, "checksum", buf, 40);
    cr_assert(strlen(buf) == 16, "checksum '%s' in '%s'", buf, r->last);
}

// --- reproducibility ---------------------------------------------------------
static void same_twice(const char *const *args)
{
    run_t a = run_args(args), b = run_args(args);
    expect_ok(&a);
    expect_ok(&b);
    cr_assert_str_eq(a.last, b.last);
    cr_assert(num(&a, "step_ns") > 0);
}

Test(workload, repeat_default_identical)
{
    same_twice((const char *const[]){SMALL, NULL});
}

Test(workload, repeat_malloc_identical)
{
    same_twice((const char *const[]){SMALL, "--alloc", "malloc", NULL});
}

Test(workload, repeat_1f1b_identical)
{
    same_twice((const char *const[]){SMALL, "--microbatches", "4", "--schedule", "1f1b", NULL});
}

Test(workload, repeat_checkpoint_skip_fused_identical)
{
    same_twice((const char *const[]){SMALL, "--checkpoint", "1,3", "--skip", "--fused", NULL});
}

Test(workload, repeat_nodata_identical)
{
    same_twice((const char *const[]){SMALL, "--nodata", NULL});
}

// --- race-free in every mode ---------------------------------------------------
Test(workload, race_free_variants)
{
    const char *const *sets[] = {
        (const char *const[]){SMALL, NULL},
        (const char *const[]){SMALL, "--alloc", "malloc", NULL},
        (const char *const[]){SMALL, "--microbatches", "4", "--schedule", "1f1b", NULL},
        (const char *const[]){SMALL, "--microbatches", "3", "--schedule", "gpipe", NULL},
        (const char *const[]){SMALL, "--checkpoint", "1,3", NULL},
        (const char *const[]){SMALL, "--skip", NULL},
        (const char *const[]){SMALL, "--fused", "--alloc", "malloc", "--checkpoint", "0-3", NULL},
        (const char *const[]){SMALL, "--profile", "a100", "--steps", "3", NULL},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        run_t r = run_args(sets[i]);
        expect_ok(&r);
    }
}

// Model scale: 8 layers of hidden 8192, seq 4096 is ~52 GB of activations and
// ~26 GB of weights and gradients; only sizes and times are simulated.
Test(workload, nodata_model_scale)
{
    run_t r = RUN("--nodata", "--layers", "8", "--hidden", "8192", "--heads", "64", "--seq", "4096",
                  "--batch", "1", "--steps", "1", "--capacity", "256G");
    expect_ok(&r);
    char cs[64];
    field(&r, "checksum", cs, sizeof cs);
    cr_assert(strncmp(cs, "nodata-", 7) == 0, "checksum '%s'", cs);
    uint64_t act = num(&r, "activation_bytes_per_layer");
    uint64_t stat = num(&r, "static_bytes");
    uint64_t peak = num(&r, "peak_device_bytes");
    cr_assert(peak > (40ULL << 30), "peak %" PRIu64 " is not tens of GiB", peak);
    // At the end of the forward every layer but the last still holds its
    // saved tensors (the last one's output went to the loss).
    cr_assert(peak >= stat + 7 * act, "peak %" PRIu64 " < static %" PRIu64 " + 7 x %" PRIu64, peak,
              stat, act);
}

// --- activations against the formula --------------------------------------------
static void within_5pct(const char *const *args, uint64_t expect_formula)
{
    run_t r = run_args(args);
    expect_ok(&r);
    uint64_t act = num(&r, "activation_bytes_per_layer");
    uint64_t formula = num(&r, "formula_bytes_per_layer");
    cr_assert_eq(formula, expect_formula);
    double dev = ((double)act - (double)formula) / (double)formula;
    cr_assert(dev >= 0 && dev < 0.05, "actual %" PRIu64 " vs formula %" PRIu64 " (%.2f%%)", act,
              formula, 100 * dev);
}

Test(workload, activations_match_formula_unfused)
{
    // s*b*h*(34 + 5as/h) = 128*2*256*34 + 5*4*128*128*2
    within_5pct((const char *const[]){SMALL, "--no-fused", "--steps", "1", NULL},
                128ULL * 2 * 256 * 34 + 5ULL * 4 * 128 * 128 * 2);
}

Test(workload, activations_match_formula_fused)
{
    within_5pct((const char *const[]){SMALL, "--fused", "--steps", "1", NULL},
                128ULL * 2 * 256 * 34);
}

Test(workload, checkpoint_saves_only_inputs)
{
    run_t all = RUN(SMALL, "--steps", "1", "--checkpoint", "0-3");
    run_t none = RUN(SMALL, "--steps", "1");
    expect_ok(&all);
    expect_ok(&none);
    // Every layer checkpointed: each keeps only its output (the next input).
    cr_assert_eq(num(&all, "activation_bytes_per_layer"), 2ULL * 128 * 2 * 256);
    cr_assert(num(&all, "peak_device_bytes") < num(&none, "peak_device_bytes"));
}

// --- the checksum ------------------------------------------------------------------
Test(workload, checksum_sees_the_input)
{
    run_t a = RUN(SMALL, "--seed", "1"), b = RUN(SMALL, "--seed", "2");
    expect_ok(&a);
    expect_ok(&b);
    char ca[40], cb[40];
    checksum(&a, ca);
    checksum(&b, cb);
    cr_assert_str_neq(ca, cb);
}

Test(workload, checksum_sees_the_skip_connection)
{
    run_t a = RUN(SMALL), b = RUN(SMALL, "--skip");
    expect_ok(&a);
    expect_ok(&b);
    char ca[40], cb[40];
    checksum(&a, ca);
    checksum(&b, cb);
    cr_assert_str_neq(ca, cb);
}

static void same_checksum(const char *const *x, const char *const *y)
{
    run_t a = run_args(x), b = run_args(y);
    expect_ok(&a);
    expect_ok(&b);
    char ca[40], cb[40];
    checksum(&a, ca);
    checksum(&b, cb);
    cr_assert_str_eq(ca, cb, "'%s' vs '%s'", a.last, b.last);
}

Test(workload, checksum_independent_of_allocator)
{
    same_checksum((const char *const[]){SMALL, "--alloc", "async", NULL},
                  (const char *const[]){SMALL, "--alloc", "malloc", NULL});
}

Test(workload, checksum_independent_of_schedule)
{
    // Wrapping-add accumulation: 1F1B lands microbatch gradients in another
    // order than GPipe and must give the same bits.
    same_checksum((const char *const[]){SMALL, "--microbatches", "4", "--schedule", "gpipe", NULL},
                  (const char *const[]){SMALL, "--microbatches", "4", "--schedule", "1f1b",
                                        "--stages", "3", NULL});
}

Test(workload, checksum_independent_of_recomputation)
{
    // Recomputed activations are the saved ones, bit for bit.
    same_checksum((const char *const[]){SMALL, "--skip", NULL},
                  (const char *const[]){SMALL, "--skip", "--checkpoint", "1,3", NULL});
}

Test(workload, a100_is_slower_than_h100)
{
    run_t h = RUN(SMALL, "--profile", "h100"), a = RUN(SMALL, "--profile", "a100");
    expect_ok(&h);
    expect_ok(&a);
    cr_assert(num(&a, "step_ns") > num(&h, "step_ns"), "a100 '%s' vs h100 '%s'", a.last, h.last);
    char ch[40], ca[40];
    checksum(&h, ch);
    checksum(&a, ca);
    cr_assert_str_eq(ch, ca); // timing never leaks into the data
}

// --- memory ---------------------------------------------------------------------------
Test(workload, one_f_one_b_holds_fewer_microbatches)
{
    run_t g = RUN(SMALL, "--microbatches", "4", "--schedule", "gpipe");
    run_t f = RUN(SMALL, "--microbatches", "4", "--schedule", "1f1b");
    expect_ok(&g);
    expect_ok(&f);
    uint64_t act = num(&g, "activation_bytes_per_layer");
    // GPipe holds all four microbatches' activations at once, 1F1B (first of
    // two stages) at most two.
    cr_assert(num(&g, "peak_device_bytes") >= num(&f, "peak_device_bytes") + 2 * 3 * act,
              "gpipe %s vs 1f1b %s", g.last, f.last);
}

Test(workload, out_of_memory_exits_3)
{
    run_t ok = RUN(SMALL, "--steps", "1");
    expect_ok(&ok);
    uint64_t peak = num(&ok, "peak_device_bytes");
    uint64_t stat = num(&ok, "static_bytes");

    // Room for the weights but not for every layer's activations.
    char cap[32];
    snprintf(cap, sizeof cap, "%" PRIu64, stat + (peak - stat) / 2);
    run_t r = RUN(SMALL, "--steps", "1", "--capacity", cap);
    cr_assert_eq(r.status, 3, "exit %d, '%s'", r.status, r.last);
    cr_assert(strncmp(r.last, "train_step status=oom failed=", 29) == 0, "'%s'", r.last);
    char failed[128];
    field(&r, "failed", failed, sizeof failed);
    cr_assert(strstr(failed, "@layer"), "failed=%s is not inside a layer", failed);
    cr_assert(num(&r, "bytes") > 0);
    cr_assert(num(&r, "peak_device_bytes") <= stat + (peak - stat) / 2);

    // Exactly the peak it needed: fits.
    snprintf(cap, sizeof cap, "%" PRIu64, peak);
    run_t fits = RUN(SMALL, "--steps", "1", "--capacity", cap);
    expect_ok(&fits);
}

Test(workload, out_of_memory_static)
{
    run_t r = RUN(SMALL, "--capacity", "1M");
    cr_assert_eq(r.status, 3, "exit %d, '%s'", r.status, r.last);
    char failed[128];
    field(&r, "failed", failed, sizeof failed);
    cr_assert(strstr(failed, "@static"), "failed=%s", failed);
}

// --seq-from: the sequence length changes from a step on; the result is as
// reproducible as any, and the checksum sees the change.
Test(workload, seq_from_is_reproducible_and_counted)
{
    const char *const grow[] = {SMALL, "--steps", "3", "--seq-from", "2:192", NULL};
    same_twice(grow);
    run_t a = run_args(grow), b = RUN(SMALL, "--steps", "3");
    expect_ok(&b);
    char ca[40], cb[40];
    checksum(&a, ca);
    checksum(&b, cb);
    cr_assert_str_neq(ca, cb, "the checksum does not see the new sequence length");
    cr_assert_eq(num(&a, "activation_bytes_per_layer"), num(&b, "activation_bytes_per_layer"),
                 "activation_bytes_per_layer is the first step's");
}

// --- command line ---------------------------------------------------------------------
Test(workload, bad_options_exit_2)
{
    cr_assert_eq(RUN("--bogus").status, 2);
    cr_assert_eq(RUN("--layers", "zero").status, 2);
    cr_assert_eq(RUN("--schedule", "zigzag").status, 2);
    cr_assert_eq(RUN("--hidden", "100", "--heads", "3").status, 2);
    cr_assert_eq(RUN("--layers", "4", "--checkpoint", "7").status, 2);
    cr_assert_eq(RUN("--capacity", "lots").status, 2);
    cr_assert_eq(RUN("--profile", "v100").status, 2);
    cr_assert_eq(RUN("--layers").status, 2);
    cr_assert_eq(RUN("--seq-from", "2").status, 2);
    cr_assert_eq(RUN("--seq-from", "x:64").status, 2);
    cr_assert_eq(RUN("--seq-from", "2:0").status, 2);
    cr_assert_eq(RUN("--seq-from", "2:64:1").status, 2);
    cr_assert_eq(RUN("--seq-from", "1:64").status, 2); // from the start: that is --seq
    cr_assert_eq(RUN("--seq-from", "3:64", "--steps", "2").status, 2); // past the last step
    run_t h = RUN("--help");
    cr_assert_eq(h.status, 0);
}
