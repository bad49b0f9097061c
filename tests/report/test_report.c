// SPDX-License-Identifier: MIT
// The per-run report, end to end: train_step runs under LD_PRELOAD on the
// simulated GPU and what aoshim wrote is checked the way a user would read
// it. The text summary is pinned by a golden file (the simulator's virtual
// clock makes every figure in it deterministic); the JSON, trace and HTML go
// through check_report.py (schema rows read from docs/report-schema.md).
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../e2e/e2e_run.h"

// Small and quick (data mode, real checksum), with offloads, reloads and a
// second step.
#define WORKLOAD "--layers 6 --hidden 512 --seq 512 --batch 2 --heads 8 --fused --steps 2"
// The memory model of the e2e tests (sizes and times only): every saved
// buffer is a multiple of 2 MiB, so aoshim's chunks hold exactly the bytes
// the program asked for and the counterfactual peak can be held to 1%.
#define MODEL    "--layers 8 --hidden 4096 --seq 2048 --batch 1 --heads 32 --fused --nodata --steps 2"
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})
// Reports of runs with offloads: the default policy ('auto') keeps these
// steps on the device (they fit), so the tests that read the copies, the
// lanes or the per-layer rows say AOSHIM_OFFLOAD_LAYERS=all.
#define ALL "AOSHIM_OFFLOAD_LAYERS=all"

static char dir[256];

static void expect_run_ok(const char *what, const e2e_result_t *r)
{
    if (r->status != 0 || !r->have_line) {
        size_t n = strlen(r->err);
        cr_log_warn("%s stderr (tail): %s", what, r->err + (n > 2000 ? n - 2000 : 0));
    }
    cr_assert_eq(r->status, 0, "%s: exit status %d", what, r->status);
    cr_assert(r->have_line, "%s: no 'train_step status=' line", what);
    cr_assert_str_eq(r->ts_status, "ok", "%s", what);
}

// check_report.py MODE ARGS...: exit status 0 when every check passed.
static int check(const char *mode, const char *a, const char *b)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s' %s '%s' '%s' 2>&1", e2e_path("AO_REPORT_CHECK"), mode,
             a, b ? b : "");
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen");
    char line[512];
    while (fgets(line, sizeof line, p))
        cr_log_info("%s: %s", mode, line);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// The summary from its first line on, without that line (it holds the pid).
static char *summary_of(const char *err)
{
    const char *s = strstr(err, "aoshim: memory summary");
    if (!s) return NULL;
    const char *nl = strchr(s, '\n');
    return strdup(nl ? nl + 1 : "");
}

// --- the text summary -------------------------------------------------------------------
Test(report, golden_summary, .timeout = 120)
{
    e2e_result_t r;
    e2e_train(&r, true, ENV(ALL), WORKLOAD);
    expect_run_ok("with aoshim", &r);
    char *got = summary_of(r.err);
    cr_assert(got, "no summary on stderr:\n%s", r.err);
    const char *golden = e2e_path("AO_REPORT_GOLDEN");
    if (getenv("AO_REPORT_GOLDEN_UPDATE")) { // regenerate after an intended change
        FILE *f = fopen(golden, "w");
        cr_assert(f);
        fputs(got, f);
        fclose(f);
    }
    char *want = e2e_slurp(golden);
    cr_assert(want, "cannot read %s", golden);
    cr_expect_str_eq(got, want,
                     "the summary differs from %s (AO_REPORT_GOLDEN_UPDATE=1 rewrites it):\n%s",
                     golden, got);
    // And it is the same run after run (no clock, no pid past the first line).
    e2e_result_t again;
    e2e_train(&again, true, ENV(ALL), WORKLOAD);
    char *got2 = summary_of(again.err);
    cr_expect_str_eq(got2, got, "two runs of the same workload gave different summaries");
    free(got), free(got2), free(want);
    e2e_free(&r), e2e_free(&again);
}

// What a user gets with no AOSHIM_OFFLOAD_LAYERS: the automatic plan. The
// summary has its "offload plan" row (this step fits: nothing offloaded),
// and the JSON names the policy and carries the same plan.
Test(report, default_policy_is_auto, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300], path[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r.json", dir);
    snprintf(path, sizeof path, "%s/r.json", dir);
    e2e_result_t r;
    e2e_train(&r, true, ENV(env), WORKLOAD);
    expect_run_ok("default", &r);
    const char *row = e2e_summary(r.err, "offload plan");
    cr_assert(row, "no 'offload plan' row without AOSHIM_OFFLOAD_LAYERS:\n%s", r.err);
    cr_expect(strncmp(row, "nothing offloaded: ", 19) == 0, "plan: %.200s", row);
    char *j = e2e_slurp(path);
    cr_assert(j, "no report %s", path);
    cr_expect(strstr(j, "\"AOSHIM_OFFLOAD_LAYERS\": \"auto\"") != NULL,
              "the JSON's options do not name auto");
    cr_expect(strstr(j, "\"plan\": \"nothing offloaded: ") != NULL, "the JSON has no plan");
    cr_expect(strstr(j, "\"plans\": 1") != NULL, "not one plan in the JSON");
    free(j);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

Test(report, quiet_silences_summary_but_not_files, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r.json", dir);
    e2e_result_t r;
    e2e_train(&r, true, ENV("AOSHIM_QUIET=1", env), WORKLOAD);
    expect_run_ok("quiet", &r);
    cr_expect(strstr(r.err, "aoshim: memory summary") == NULL, "AOSHIM_QUIET=1 printed a summary");
    char path[300];
    snprintf(path, sizeof path, "%s/r.json", dir);
    struct stat st;
    cr_expect(stat(path, &st) == 0 && st.st_size > 100, "no report written under AOSHIM_QUIET");
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// --- JSON, trace, HTML -------------------------------------------------------------------------
Test(report, json_trace_html, .timeout = 120)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char rep[300], tr[300], html[300], e1[320], e2[320], e3[320];
    snprintf(rep, sizeof rep, "%s/run.json", dir);
    snprintf(tr, sizeof tr, "%s/trace.json", dir);
    snprintf(html, sizeof html, "%s/run.html", dir);
    snprintf(e1, sizeof e1, "AOSHIM_REPORT=%s", rep);
    snprintf(e2, sizeof e2, "AOSHIM_TRACE=%s", tr);
    snprintf(e3, sizeof e3, "AOSHIM_REPORT_HTML=%s", html);
    e2e_result_t base, with;
    e2e_train(&base, false, NULL, MODEL);
    expect_run_ok("without aoshim", &base);
    e2e_train(&with, true, ENV(e1, e2, e3, ALL), MODEL);
    expect_run_ok("with aoshim", &with);
    cr_expect_str_eq(with.checksum, base.checksum);
    cr_expect_eq(check("json", rep, e2e_path("AO_REPORT_SCHEMA")), 0,
                 "the JSON report fails its schema");
    cr_expect_eq(check("trace", tr, rep), 0, "the trace fails its checks");
    cr_expect_eq(check("html", html, NULL), 0, "the HTML page fails its checks");

    // The counterfactual peak against the simulator's peak for the same run
    // without aoshim: within 1%.
    char *j = e2e_slurp(rep);
    cr_assert(j);
    const char *k = strstr(j, "\"peak_without_offloading_bytes\": ");
    cr_assert(k, "no peak_without_offloading_bytes");
    double without = strtod(k + strlen("\"peak_without_offloading_bytes\": "), NULL);
    double sim = (double)base.peak;
    cr_log_info("counterfactual peak %.0f, simulator's peak without aoshim %.0f (%.3f%%)", without,
                sim, 100.0 * (without - sim) / sim);
    cr_expect_leq(fabs(without - sim), 0.01 * sim,
                  "counterfactual peak %.0f is not within 1%% of the simulator's %.0f", without,
                  sim);
    // The driver's count: the device's peak in use as sampled is no more
    // than the simulator's exact one, and within 3% of it; the modelled
    // peak without offloading is within 3% of the run without aoshim.
    const char *dk = strstr(j, "\"device_peak_bytes\": ");
    const char *dw = strstr(j, "\"device_peak_without_bytes\": ");
    cr_assert(dk && dw, "no device_peak_bytes / device_peak_without_bytes");
    double dev = strtod(dk + strlen("\"device_peak_bytes\": "), NULL);
    double dev_without = strtod(dw + strlen("\"device_peak_without_bytes\": "), NULL);
    cr_log_info(
        "driver's count: peak %.0f (simulator %llu), without %.0f (run without aoshim %llu)", dev,
        (unsigned long long)with.peak, dev_without, (unsigned long long)base.peak);
    cr_expect(dev <= (double)with.peak && dev >= 0.97 * (double)with.peak,
              "device_peak_bytes %.0f, the simulator's peak %llu", dev,
              (unsigned long long)with.peak);
    cr_expect_leq(
        fabs(dev_without - sim), 0.03 * sim,
        "device_peak_without_bytes %.0f is not within 3%% of the run without aoshim's %.0f",
        dev_without, sim);
    // The summary's peak is the JSON's (one emitter wrote both).
    const char *pk = strstr(j, "\"peak_device_bytes\": ");
    cr_assert(pk);
    double peak = strtod(pk + strlen("\"peak_device_bytes\": "), NULL);
    const char *row = e2e_summary(with.err, "peak allocated");
    cr_assert(row);
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = peak;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    char want[64];
    if (u)
        snprintf(want, sizeof want, "%.1f %s\n", v, unit[u]);
    else
        snprintf(want, sizeof want, "%.0f B\n", v);
    cr_expect(strncmp(row, want, strlen(want)) == 0, "text %.20s, JSON %.0f (%s)", row, peak, want);
    free(j);
    e2e_free(&base), e2e_free(&with);
    e2e_remove_dir(dir);
}

// --- names, ranks, failures ------------------------------------------------------------------
Test(report, two_ranks_two_reports, .timeout = 120)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r%%r.json", dir);
    for (int rank = 0; rank < 2; rank++) {
        char renv[32];
        snprintf(renv, sizeof renv, "RANK=%d", rank);
        e2e_result_t r;
        e2e_train(&r, true, ENV(env, renv, "LOCAL_RANK"), WORKLOAD);
        expect_run_ok("rank", &r);
        e2e_free(&r);
    }
    for (int rank = 0; rank < 2; rank++) {
        char path[300], want[32];
        snprintf(path, sizeof path, "%s/r%d.json", dir, rank);
        char *j = e2e_slurp(path);
        cr_assert(j, "rank %d wrote no %s", rank, path);
        snprintf(want, sizeof want, "\"rank\": %d,", rank);
        cr_expect(strstr(j, want), "%s does not say %s", path, want);
        free(j);
    }
    e2e_remove_dir(dir);
}

// A name that cannot be written is a bad value: one line at start, exit 2,
// and the program never runs (train_step prints nothing, no summary) rather
// than run for hours and then warn. The first bad variable is the one said.
Test(report, unwritable_path_fails_at_start, .timeout = 60)
{
    e2e_result_t r;
    e2e_train(&r, true,
              ENV("AOSHIM_REPORT=/nonexistent-aoshim-dir/r.json",
                  "AOSHIM_TRACE=/nonexistent-aoshim-dir/t.json"),
              WORKLOAD);
    cr_expect_eq(r.status, 2, "exit %d:\n%s", r.status, r.err);
    cr_expect_str_eq(r.err, "aoshim: error: AOSHIM_REPORT='/nonexistent-aoshim-dir/r.json': cannot "
                            "write /nonexistent-aoshim-dir/r.json: No such file or directory\n");
    cr_expect_str_eq(r.out, "", "the program ran");
    cr_expect(!r.have_line, "the program ran");
    e2e_free(&r);
    // A device (/dev/full) is refused likewise, never opened nor replaced.
    struct stat st;
    if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
        e2e_train(&r, true, ENV("AOSHIM_REPORT=/dev/full"), WORKLOAD);
        cr_expect_eq(r.status, 2, "exit %d:\n%s", r.status, r.err);
        cr_expect_str_eq(r.err, "aoshim: error: AOSHIM_REPORT='/dev/full': cannot write /dev/full: "
                                "it is a character device; only a regular file is replaced\n");
        cr_expect_str_eq(r.out, "", "the program ran");
        cr_expect(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode), "/dev/full was replaced");
        e2e_free(&r);
    }
}

// Empty is the documented default: no file, no message, the run as usual.
Test(report, empty_path_means_no_file, .timeout = 60)
{
    e2e_result_t r;
    e2e_train(&r, true, ENV("AOSHIM_REPORT=", "AOSHIM_TRACE=", "AOSHIM_REPORT_HTML="), WORKLOAD);
    expect_run_ok("empty", &r);
    cr_expect_null(strstr(r.err, "aoshim: error"), "%s", r.err);
    cr_expect_null(strstr(r.err, "aoshim: warning"), "%s", r.err);
    cr_expect(strstr(r.err, "aoshim: memory summary"), "%s", r.err);
    e2e_free(&r);
}

// --- report files that must not be written through ---------------------------------------
static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    return n;
}

// A FIFO at the report's name, no one reading it: refused at start (one
// line, exit 2), never opened (opening it would block forever). The same
// refusal at exit, for one planted during the run, is test_report_unit's.
Test(report, fifo_report_name_refused_at_start, .timeout = 30)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char path[300], env[340], want[700];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s", path);
    cr_assert_eq(mkfifo(path, 0600), 0);
    e2e_result_t r;
    const char *argv[] = {e2e_path("AO_FORK_CHILD"), NULL};
    e2e_run(&r, true, ENV(env), argv);
    cr_expect_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    snprintf(want, sizeof want,
             "aoshim: error: AOSHIM_REPORT='%s': cannot write %s: it is a FIFO; only a regular "
             "file is replaced\n",
             path, path);
    cr_expect_str_eq(r.err, want);
    cr_expect_str_eq(r.out, "", "the program ran");
    struct stat st;
    cr_expect(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// A symlink at the report's name (planted in a shared directory): refused at
// start, its target untouched; a directory at the name likewise.
Test(report, symlink_or_directory_report_name_refused, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char path[300], target[300], sub[300], e1[340], e2[340], want[1000];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(target, sizeof target, "%s/precious", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    FILE *f = fopen(target, "w");
    cr_assert(f);
    fputs("precious\n", f);
    fclose(f);
    cr_assert_eq(symlink(target, path), 0);
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(e1, sizeof e1, "AOSHIM_REPORT=%s", path);
    snprintf(e2, sizeof e2, "AOSHIM_TRACE=%s", sub);
    e2e_result_t r;
    const char *argv[] = {e2e_path("AO_FORK_CHILD"), NULL};
    e2e_run(&r, true, ENV(e1), argv);
    cr_expect_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    snprintf(want, sizeof want,
             "aoshim: error: AOSHIM_REPORT='%s': cannot write %s: it is a symbolic link; only a "
             "regular file is replaced\n",
             path, path);
    cr_expect_str_eq(r.err, want);
    e2e_free(&r);
    e2e_run(&r, true, ENV(e2), argv);
    cr_expect_eq(r.status, 2, "exit %d: %s", r.status, r.err);
    snprintf(want, sizeof want,
             "aoshim: error: AOSHIM_TRACE='%s': cannot write %s: it is a directory; only a "
             "regular file is replaced\n",
             sub, sub);
    cr_expect_str_eq(r.err, want);
    char *t = e2e_slurp(target);
    cr_expect_str_eq(t, "precious\n", "the symlink's target was written");
    free(t);
    struct stat st;
    cr_expect(lstat(path, &st) == 0 && S_ISLNK(st.st_mode), "the symlink was replaced");
    cr_expect(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode), "the directory was replaced");
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// aoshim_report_now writes the files; under AOSHIM_QUIET=1 it prints no
// summary, as the exit does not. Without it, two summaries (now, and exit).
Test(report, report_now_respects_quiet, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[340], path[300];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s", path);
    const char *argv[] = {e2e_path("AO_REPORT_NOW"), NULL};
    e2e_result_t r;
    e2e_run(&r, true, ENV(env, "AOSHIM_QUIET=1"), argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_expect(strstr(r.out, "report_now rc=0"), "%s", r.out);
    cr_expect_null(strstr(r.err, "memory summary"), "a summary under AOSHIM_QUIET=1:\n%s", r.err);
    struct stat st;
    cr_expect(stat(path, &st) == 0 && st.st_size > 100, "no report written under AOSHIM_QUIET");
    e2e_free(&r);
    e2e_run(&r, true, ENV(env), argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_expect_eq(count(r.err, "aoshim: memory summary"), 2, "%s", r.err);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

Test(report, pid_in_name_and_stacks_off, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r-%%p-%%h.json", dir);
    e2e_result_t r;
    e2e_train(&r, true, ENV(env, "AOSHIM_STACKS=0"), WORKLOAD);
    expect_run_ok("pid", &r);
    // The pid is on the summary's first line; the host from gethostname.
    const char *p = strstr(r.err, "memory summary");
    cr_assert(p);
    int pid = atoi(strstr(p, "pid ") + 4);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char path[600];
    snprintf(path, sizeof path, "%s/r-%d-%s.json", dir, pid, host);
    char *j = e2e_slurp(path);
    cr_assert(j, "no %s", path);
    cr_expect(strstr(j, "\"enabled\": false"), "AOSHIM_STACKS=0 but call sites enabled");
    cr_expect(strstr(j, "\"stacks_captured\": 0,"), "AOSHIM_STACKS=0 but stacks captured");
    free(j);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

Test(report, call_sites_name_the_program, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[340], path[300];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s", path);
    e2e_result_t r;
    e2e_train(&r, true, ENV(env), WORKLOAD);
    expect_run_ok("sites", &r);
    char *j = e2e_slurp(path);
    cr_assert(j);
    const char *top = strstr(j, "\"top\": [");
    cr_assert(top, "no call_sites.top");
    // The innermost frame shown is the program's own, not aoshim's or CUDA's.
    const char *m = strstr(top, "\"module\": \"");
    cr_assert(m, "no frames in the top call site");
    cr_expect(strncmp(m + 11, "train_step\"", 11) == 0, "top site's first frame: %.40s", m + 11);
    free(j);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// A forked child (a data-loader worker) exits with its destructors run: it
// must not write its parent's report nor print the parent's summary.
Test(report, forked_child_writes_nothing, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r-%%p.json", dir);
    e2e_result_t r;
    const char *argv[] = {e2e_path("AO_FORK_CHILD"), NULL};
    e2e_run(&r, true, ENV(env), argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    int parent = 0, child = 0;
    cr_assert_eq(sscanf(r.out, "fork_child ok parent=%d child=%d", &parent, &child), 2, "%s",
                 r.out);
    int n = 0;
    for (const char *p = r.err; (p = strstr(p, "aoshim: memory summary")); p++)
        n++;
    cr_expect_eq(n, 1, "%d summaries:\n%s", n, r.err);
    char path[400];
    snprintf(path, sizeof path, "%s/r-%d.json", dir, parent);
    struct stat st;
    cr_expect(stat(path, &st) == 0, "the parent wrote no %s", path);
    snprintf(path, sizeof path, "%s/r-%d.json", dir, child);
    cr_expect(stat(path, &st) != 0, "the forked child wrote %s", path);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// A GPU run that never declared a layer: the summary says why nothing was
// offloaded and where boundaries come from, in one line, and the JSON
// carries the same (one emitter writes both).
#define NO_LAYERS_NOTE                                                                             \
    "no layer boundaries seen: nothing was offloaded. Python: run under LD_PRELOAD with torch "    \
    "(AOSHIM_TORCH=auto finds the block list) or call aoshim.torch.offload(blocks); C: "           \
    "aoshim_layer_begin/aoshim_layer_end (include/aoshim.h)"

Test(report, no_layer_boundaries_says_so, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300], path[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r.json", dir);
    snprintf(path, sizeof path, "%s/r.json", dir);
    e2e_result_t r;
    const char *argv[] = {e2e_path("AO_BOUNDARIES_GPU"), "--no-boundaries", NULL};
    e2e_run(&r, true, ENV(env), argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.out, "check bytes_ok=1"), "%s", r.out);
    // The line, once, inside the summary: after the allocator row, before
    // the per-layer table.
    const char *line = "\naoshim: " NO_LAYERS_NOTE "\n";
    const char *at = strstr(r.err, line);
    cr_assert(at, "no note in the summary:\n%s", r.err);
    cr_expect_null(strstr(at + 1, line), "the note twice:\n%s", r.err);
    const char *alloc = strstr(r.err, "aoshim: allocator "),
               *table = strstr(r.err, "aoshim: per layer");
    cr_expect(alloc && table && alloc < at && at < table, "the note is not in its place:\n%s",
              r.err);
    char *j = e2e_slurp(path);
    cr_assert(j, "no report %s", path);
    cr_expect(strstr(j, "\"layers_seen\": false"), "no layers_seen false in the JSON");
    cr_expect(strstr(j, "\"layers_note\": \"" NO_LAYERS_NOTE "\""), "no layers_note in the JSON");
    cr_expect_eq(check("json", path, e2e_path("AO_REPORT_SCHEMA")), 0,
                 "the report does not match the schema");
    free(j);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// With boundaries there is no such line, and the JSON says they were seen.
Test(report, layer_boundaries_seen, .timeout = 60)
{
    e2e_make_dir(dir, sizeof dir, "report-test");
    char env[300], path[300];
    snprintf(env, sizeof env, "AOSHIM_REPORT=%s/r.json", dir);
    snprintf(path, sizeof path, "%s/r.json", dir);
    e2e_result_t r;
    const char *argv[] = {e2e_path("AO_BOUNDARIES_GPU"), NULL};
    e2e_run(&r, true, ENV(env), argv);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_expect_null(strstr(r.err, "no layer boundaries seen"), "%s", r.err);
    char *j = e2e_slurp(path);
    cr_assert(j, "no report %s", path);
    cr_expect(strstr(j, "\"layers_seen\": true"), "no layers_seen true in the JSON");
    cr_expect(strstr(j, "\"layers_note\": null"), "layers_note is not null in the JSON");
    free(j);
    e2e_free(&r);
    e2e_remove_dir(dir);
}
