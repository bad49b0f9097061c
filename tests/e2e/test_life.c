// SPDX-License-Identifier: MIT
// Process life under aoshim (life.c): exit with copies in flight, exit()
// from a signal handler, SIGTERM to a training program (with and without a
// handler), fork() while another thread holds aoshim's lock, exit after the
// driver's own teardown. Each ends in bounded time (/usr/bin/timeout), with
// the report written exactly once by the right process, and nothing of
// aoshim's left at exit (the simulator's live_* counts, which are 0 for this
// program without aoshim; not after the driver's teardown, which reclaims).
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "e2e_run.h"

typedef struct sig_s {
    int sig;
    bool sent;
} sig_t_;

// Once the program says it trains, signal it (its own pid, not timeout's).
static void signal_when_ready(const char *out, void *arg)
{
    sig_t_ *s = arg;
    const char *pid = strstr(out, "life pid=");
    if (s->sent || !pid || !strstr(out, "life ready\n")) return;
    s->sent = true;
    kill((pid_t)atoi(pid + strlen("life pid=")), s->sig);
}

// extra: one more variable for the child, or NULL.
static void run_life_env(e2e_result_t *r, const char *dir, const char *mode, const char *arg,
                         int sig, const char *extra)
{
    char report[400];
    snprintf(report, sizeof report, "AOSHIM_REPORT=%s/report-%%p.json", dir);
    const char *env[] = {report, "AOSHIM_OFFLOAD_LAYERS=4", "SIM_QUIET=0", extra, NULL};
    const char *argv[] = {"/usr/bin/timeout", "-s", "KILL", "30", e2e_path("AO_LIFE"),
                          mode, arg, NULL};
    sig_t_ s = {sig, false};
    e2e_run_ex(r, true, env, argv, sig ? signal_when_ready : NULL, &s);
    if (sig) cr_assert(s.sent, "%s: never ready:\n%s\n%s", mode, r->out, r->err);
    cr_assert_neq(r->status, 128 + SIGKILL, "%s: did not end within 30 s:\n%s", mode, r->err);
}

static void run_life(e2e_result_t *r, const char *dir, const char *mode, const char *arg, int sig)
{
    run_life_env(r, dir, mode, arg, sig, NULL);
}

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

// The report files in dir: exactly one, the one of the process that printed
// "life pid=", holding its pid; its summary on stderr once.
static void report_once(const e2e_result_t *r, const char *dir)
{
    const char *p = strstr(r->out, "life pid=");
    cr_assert(p, "no pid line:\n%s", r->out);
    int pid = atoi(p + strlen("life pid="));
    int files = 0;
    DIR *d = opendir(dir);
    cr_assert(d);
    char want[64];
    snprintf(want, sizeof want, "report-%d.json", pid);
    bool mine = false;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') {
            files++;
            mine |= strcmp(e->d_name, want) == 0;
            cr_expect(strcmp(e->d_name, want) == 0, "a report by another process: %s",
                      e->d_name);
        }
    closedir(d);
    cr_expect_eq(files, 1, "%d report files, want 1 (%s)", files, want);
    cr_assert(mine, "no %s", want);
    char path[512], key[64];
    snprintf(path, sizeof path, "%s/%s", dir, want);
    char *json = e2e_slurp(path);
    cr_assert(json, "cannot read %s", path);
    snprintf(key, sizeof key, "\"pid\": %d", pid);
    char key2[64];
    snprintf(key2, sizeof key2, "\"pid\":%d", pid);
    cr_expect(strstr(json, key) || strstr(json, key2), "%s names another pid:\n%.400s", path,
              json);
    free(json);
    cr_expect_eq(count(r->err, "aoshim: memory summary"), 1, "summary %d times:\n%s",
                 count(r->err, "aoshim: memory summary"), r->err);
}

// Nothing of aoshim's at exit, no race, no fault; copies had been issued.
static void clean_exit_line(const e2e_result_t *r)
{
    uint64_t v;
    cr_assert(e2e_kv(r->err, "simgpu: ", "live_handles", &v), "no exit line:\n%s", r->err);
    static const char *const zero[] = {"live_handles", "live_mappings", "live_pinned_bytes",
                                       "races", "faults"};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
        cr_assert(e2e_kv(r->err, "simgpu: ", zero[i], &v));
        cr_expect_eq(v, 0, "%s=%llu at exit:\n%s", zero[i], (unsigned long long)v, r->err);
    }
    cr_assert(e2e_kv(r->err, "simgpu: ", "busy_d2h_ns", &v));
    cr_expect_gt(v, 0, "no copy out was ever issued: the case is not tested");
    cr_expect_eq(count(r->err, "simgpu: peak_device_bytes="), 1, "exit lines:\n%s", r->err);
}

static void one(const char *mode, const char *arg, int sig, int want_status, bool exits)
{
    char dir[128];
    e2e_make_dir(dir, sizeof dir, "life");
    e2e_result_t r;
    run_life(&r, dir, mode, arg, sig);
    cr_expect_eq(r.status, want_status, "%s %s: exit %d, want %d:\n%s\n%s", mode, arg ? arg : "",
                 r.status, want_status, r.out, r.err);
    if (exits) {
        report_once(&r, dir);
        clean_exit_line(&r);
    } else { // killed: no destructor ran, nothing written
        DIR *d = opendir(dir);
        int files = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            files += e->d_name[0] != '.';
        closedir(d);
        cr_expect_eq(files, 0, "a report from a process killed by SIGTERM");
        cr_expect_eq(count(r.err, "aoshim: memory summary"), 0);
    }
    e2e_free(&r);
    e2e_remove_dir(dir);
}

Test(life, exit_with_copies_in_flight, .timeout = 60)
{
    one("inflight", NULL, 0, 0, true);
}

Test(life, exit_from_a_signal_handler, .timeout = 60)
{
    one("sigexit", NULL, 0, 5, true);
}

Test(life, sigterm_default_action, .timeout = 60)
{
    one("forever", NULL, SIGTERM, 128 + SIGTERM, false);
}

Test(life, sigterm_handler_calls_exit, .timeout = 60)
{
    one("forever", "handler", SIGTERM, 7, true);
}

// The driver shut down before aoshim's destructor, as the real one does at
// exit (SIM_DEINIT_AT_EXIT: every call then answers CUDA_ERROR_DEINITIALIZED),
// with offload copies and their events still pending: no CUDA error line,
// no warning at all (on an H200, 8 runs in 10 ended with "cuEventQuery
// failed (CUDA error 4)"), and the report written once, as usual. What aoshim
// held is the driver's to reclaim then, so the leak check does not apply.
Test(life, exit_after_the_driver_shut_down, .timeout = 60)
{
    char dir[128];
    e2e_make_dir(dir, sizeof dir, "life");
    e2e_result_t r;
    run_life_env(&r, dir, "inflight", NULL, 0, "SIM_DEINIT_AT_EXIT=1");
    cr_expect_eq(r.status, 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
    cr_expect(strstr(r.out, "life exiting\n"), "did not reach its exit:\n%s", r.out);
    cr_expect_null(strstr(r.err, "CUDA error"), "a CUDA error line at exit:\n%s", r.err);
    cr_expect_null(strstr(r.err, "aoshim: warning: "), "a warning at exit:\n%s", r.err);
    report_once(&r, dir);
    uint64_t v;
    cr_assert(e2e_kv(r.err, "simgpu: ", "deinit_refused", &v), "no exit line:\n%s", r.err);
    cr_expect_gt(v, 0, "aoshim made no call after the driver's teardown: the case is not tested");
    cr_assert(e2e_kv(r.err, "simgpu: ", "busy_d2h_ns", &v));
    cr_expect_gt(v, 0, "no copy out was ever issued: the case is not tested");
    cr_assert(e2e_kv(r.err, "simgpu: ", "races", &v));
    cr_expect_eq(v, 0, "races=%llu:\n%s", (unsigned long long)v, r.err);
    cr_assert(e2e_kv(r.err, "simgpu: ", "faults", &v));
    cr_expect_eq(v, 0, "faults=%llu:\n%s", (unsigned long long)v, r.err);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// 200 forks while another thread takes aoshim's lock over and over: no
// child hangs (a child that took a lock copied held would), each finds
// aoshim passing through and writes no report (report-<its pid>.json).
Test(life, fork_while_the_lock_is_held, .timeout = 120)
{
    char dir[128];
    e2e_make_dir(dir, sizeof dir, "life");
    e2e_result_t r;
    run_life(&r, dir, "fork", NULL, 0);
    cr_expect_eq(r.status, 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
    cr_expect(strstr(r.out, "life fork children=200 hung=0 passed_through=200 no_report=200\n"),
              "%s", r.out);
    report_once(&r, dir);
    clean_exit_line(&r);
    e2e_free(&r);
    e2e_remove_dir(dir);
}
