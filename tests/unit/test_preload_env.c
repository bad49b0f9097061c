// SPDX-License-Identifier: MIT
// A bad AOSHIM_* value stops a preloaded program before main: exit status 2
// and exactly one line naming the variable. A good one changes nothing.
#define _GNU_SOURCE 1 // execvpe
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// Run `true` under the shim, its stderr into out; the exit status (128 +
// signal). envp: exactly that environment; NULL: this process's, with
// LD_PRELOAD and NAME=VALUE (name NULL: none) added.
static int run_true(char *const *envp, const char *name, const char *value, char *out,
                    size_t outlen)
{
    const char *lib = getenv("AO_TEST_SHIM");
    cr_assert(lib, "AO_TEST_SHIM not set by the test harness");
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        char *argv[] = {"true", NULL};
        if (envp) {
            execvpe("true", argv, envp);
        } else {
            setenv("LD_PRELOAD", lib, 1);
            if (name) setenv(name, value, 1);
            execvp("true", argv);
        }
        _exit(127);
    }
    close(pipefd[1]);
    size_t n = 0;
    ssize_t r;
    while (n < outlen - 1 && (r = read(pipefd[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(pipefd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Run `true` under the shim with NAME=VALUE; return its exit status and stderr.
static int run_with(const char *name, const char *value, char *out, size_t outlen)
{
    return run_true(NULL, name, value, out, outlen);
}

static int run_envp(const char *const *vars, char *out, size_t outlen);

static const struct {
    const char *name, *value;
} bad[] = {
    {"AOSHIM_ENABLE", "2"},
    {"AOSHIM_ENABLE", ""},
    {"AOSHIM_ENABLE", "maybe"},
    {"AOSHIM_OFFLOAD_LAYERS", "-3"},
    {"AOSHIM_OFFLOAD_LAYERS", "5-2"},
    {"AOSHIM_OFFLOAD_LAYERS", "1,,2"},
    {"AOSHIM_OFFLOAD_LAYERS", "150%"},
    {"AOSHIM_OFFLOAD_LAYERS", "half"},
    {"AOSHIM_OFFLOAD_LAYERS", ""},
    {"AOSHIM_PREFETCH", "-1"},
    {"AOSHIM_PREFETCH", "65"},
    {"AOSHIM_PREFETCH", "1.5"},
    {"AOSHIM_PREFETCH", "0x2"},
    {"AOSHIM_MIN_BYTES", "1Q"},
    {"AOSHIM_MIN_BYTES", "-4K"},
    {"AOSHIM_MIN_BYTES", "4 K"},
    {"AOSHIM_HOST_LIMIT", "lots"},
    {"AOSHIM_HOST_LIMIT", "99999999999999T"},
    {"AOSHIM_VERBOSE", "3"},
    {"AOSHIM_QUIET", "yess"},
    {"AOSHIM_MIN_BYTES", "1e6"},
    {"AOSHIM_OFFLOAD_LAYERS", "0-2,x"},
    {"AOSHIM_TORCH", ""},
    {"AOSHIM_TORCH", "1"},
    {"AOSHIM_TORCH", "on"},
    {"AOSHIM_TORCH", "model..layers"},
    {"AOSHIM_TORCH", "0.blocks"},
    {"AOSHIM_TORCH", "model.layers."},
    {"AOSHIM_TORCH", "model/layers"},
    {"AOSHIM_TORCH", "auto "},
};

Test(preload_env, bad_values_exit_2_with_one_line)
{
    char out[2048];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int st = run_with(bad[i].name, bad[i].value, out, sizeof out);
        cr_expect_eq(st, 2, "%s='%s': exit %d", bad[i].name, bad[i].value, st);
        char want[256];
        snprintf(want, sizeof want, "aoshim: error: %s='%s': ", bad[i].name, bad[i].value);
        cr_expect(strncmp(out, want, strlen(want)) == 0, "%s='%s': got '%s'", bad[i].name,
                  bad[i].value, out);
        char *nl = strchr(out, '\n');
        cr_expect(nl && nl[1] == '\0', "%s='%s': not exactly one line: '%s'", bad[i].name,
                  bad[i].value, out);
    }
}

Test(preload_env, good_values_are_silent)
{
    char out[2048];
    cr_assert_eq(run_with(NULL, NULL, out, sizeof out), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(run_with("AOSHIM_OFFLOAD_LAYERS", "0-11,14", out, sizeof out), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(run_with("AOSHIM_OFLOAD_LAYERS", "4", out, sizeof out), 0);
    cr_assert_str_eq(out, "aoshim: warning: unknown variable AOSHIM_OFLOAD_LAYERS ignored; did you "
                          "mean AOSHIM_OFFLOAD_LAYERS?\n");
    const char *torch[] = {"auto", "0", "off", "model.layers", "stages.1.blocks"};
    for (size_t i = 0; i < sizeof torch / sizeof *torch; i++) {
        cr_assert_eq(run_with("AOSHIM_TORCH", torch[i], out, sizeof out), 0, "%s", torch[i]);
        cr_assert_str_eq(out, "", "AOSHIM_TORCH=%s", torch[i]);
    }
    // Opened at the first control call only: `true` makes none, so no file
    // (its directory is checked at load, though: see below).
    char dir[] = "/tmp/aoshim-preload-env.XXXXXX", ctl[64];
    cr_assert(mkdtemp(dir));
    snprintf(ctl, sizeof ctl, "%s/ctl-%%p.log", dir);
    cr_assert_eq(run_with("AOSHIM_CONTROL_LOG", ctl, out, sizeof out), 0);
    cr_assert_str_eq(out, "");
    cr_expect_eq(rmdir(dir), 0, "the control log was created in %s", dir);
    cr_assert_eq(run_with("AOSHIM_VERBOSE", "1", out, sizeof out), 0);
    cr_assert(strstr(out, "aoshim: version 0.2.0") == out, "%s", out);
    cr_assert(strstr(out, "AOSHIM_PREFETCH=1 (default)") != NULL, "%s", out);
}

// Run `true` under the shim with exactly envp (plus LD_PRELOAD, first):
// execve allows a variable twice, which setenv cannot make.
static int run_envp(const char *const *vars, char *out, size_t outlen)
{
    char preload[1024];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", getenv("AO_TEST_SHIM"));
    char *envp[32] = {preload};
    size_t n = 1;
    for (; *vars && n < 31; vars++)
        envp[n++] = (char *)*vars;
    envp[n] = NULL;
    return run_true(envp, NULL, NULL, out, outlen);
}

// A value holding a newline or a terminal escape: still one line, the
// value shown escaped.
Test(preload_env, control_characters_are_escaped)
{
    char out[2048];
    cr_assert_eq(run_with("AOSHIM_PREFETCH", "1\n2", out, sizeof out), 2);
    cr_expect_str_eq(out, "aoshim: error: AOSHIM_PREFETCH='1\\n2': an integer from 0 to 64\n");
    cr_assert_eq(run_with("AOSHIM_VERBOSE", "\x1b]0;pwned\x07\x1b[2J", out, sizeof out), 2);
    cr_expect_str_eq(out,
                     "aoshim: error: AOSHIM_VERBOSE='\\x1b]0;pwned\\x07\\x1b[2J': 0, 1 or 2\n");
}

// An empty file option is the documented default, no file: silent, exit 0.
Test(preload_env, empty_paths_mean_no_file)
{
    char out[2048];
    const char *vars[] = {"AOSHIM_REPORT", "AOSHIM_TRACE", "AOSHIM_REPORT_HTML",
                          "AOSHIM_CONTROL_LOG"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        cr_expect_eq(run_with(vars[i], "", out, sizeof out), 0, "%s=''", vars[i]);
        cr_expect_str_eq(out, "", "%s=''", vars[i]);
    }
}

// A file that cannot be created is a bad value: one line at load naming
// the variable, its value and the expanded name with open(2)'s reason, and
// exit 2 before main (true never runs; test_options checks that a program's
// main never runs).
Test(preload_env, unwritable_paths_fail_at_load)
{
    char out[2048], want[512];
    const char *vars[] = {"AOSHIM_REPORT", "AOSHIM_TRACE", "AOSHIM_REPORT_HTML",
                          "AOSHIM_CONTROL_LOG"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        cr_expect_eq(run_with(vars[i], "/nonexistent-aoshim/dir/r.json", out, sizeof out), 2);
        snprintf(want, sizeof want,
                 "aoshim: error: %s='/nonexistent-aoshim/dir/r.json': cannot write "
                 "/nonexistent-aoshim/dir/r.json: No such file or directory\n",
                 vars[i]);
        cr_expect_str_eq(out, want);
        cr_expect_eq(run_with(vars[i], "/etc/passwd/r.json", out, sizeof out), 2);
        snprintf(want, sizeof want,
                 "aoshim: error: %s='/etc/passwd/r.json': cannot write /etc/passwd/r.json: Not a "
                 "directory\n",
                 vars[i]);
        cr_expect_str_eq(out, want);
    }
    // After %p/%r/%h expansion: the value as given, then the expanded name.
    cr_expect_eq(run_with("AOSHIM_REPORT", "/nonexistent-aoshim-%r/%p.json", out, sizeof out), 2);
    const char *head = "aoshim: error: AOSHIM_REPORT='/nonexistent-aoshim-%r/%p.json': cannot "
                       "write /nonexistent-aoshim-0/";
    cr_expect(strncmp(out, head, strlen(head)) == 0, "%s", out);
    cr_expect(strstr(out, ".json: No such file or directory\n"), "%s", out);
    // A directory without write permission (root may write anywhere).
    if (geteuid() != 0) {
        char dir[] = "/tmp/aoshim-ro.XXXXXX", path[64];
        cr_assert(mkdtemp(dir));
        chmod(dir, 0555);
        snprintf(path, sizeof path, "%s/r.json", dir);
        cr_expect_eq(run_with("AOSHIM_TRACE", path, out, sizeof out), 2);
        snprintf(want, sizeof want,
                 "aoshim: error: AOSHIM_TRACE='%s': cannot write %s: Permission denied\n", path,
                 path);
        cr_expect_str_eq(out, want);
        rmdir(dir);
    }
    // The program's own streams are not files in /dev.
    cr_expect_eq(run_with("AOSHIM_CONTROL_LOG", "/dev/stderr", out, sizeof out), 0);
    cr_expect_str_eq(out, "");
    cr_expect_eq(run_with("AOSHIM_REPORT", "/dev/stdout", out, sizeof out), 0);
    cr_expect_str_eq(out, "");
    // The control log is written in place: a device is fine there.
    cr_expect_eq(run_with("AOSHIM_CONTROL_LOG", "/dev/null", out, sizeof out), 0);
    cr_expect_str_eq(out, "");
    // With AOSHIM_ENABLE=0 no report is ever written: nothing to check.
    const char *off[] = {"AOSHIM_ENABLE=0", "AOSHIM_REPORT=/nonexistent-aoshim/r.json", NULL};
    cr_expect_eq(run_envp(off, out, sizeof out), 0);
    cr_expect_str_eq(out, "");
}

// %p and %r still name one file per process and per rank: a directory per
// rank that exists passes, and nothing is created by the check.
Test(preload_env, per_rank_paths_checked_after_expansion)
{
    char dir[] = "/tmp/aoshim-rank.XXXXXX", sub[64], pattern[96], out[2048], want[512];
    cr_assert(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/rank3", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(pattern, sizeof pattern, "AOSHIM_REPORT=%s/rank%%r/r-%%p.json", dir);
    const char *rank3[] = {"RANK=3", pattern, NULL};
    cr_expect_eq(run_envp(rank3, out, sizeof out), 0, "%s", out);
    cr_expect_str_eq(out, "");
    const char *rank4[] = {"RANK=4", pattern, NULL};
    cr_expect_eq(run_envp(rank4, out, sizeof out), 2);
    snprintf(want, sizeof want,
             "aoshim: error: AOSHIM_REPORT='%s/rank%%r/r-%%p.json': cannot write %s/rank4/r-", dir,
             dir);
    cr_expect(strncmp(out, want, strlen(want)) == 0, "%s", out);
    cr_expect_eq(rmdir(sub), 0, "the check created a file in %s", sub);
    cr_expect_eq(rmdir(dir), 0);
}

// The same variable twice in the environment: the first is used, as getenv
// (and so AOSHIM_VERBOSE and the report) sees it, with one warning.
Test(preload_env, first_of_a_repeated_variable_wins)
{
    char out[8192];
    const char *env[] = {"AOSHIM_PREFETCH=2", "AOSHIM_VERBOSE=1", "AOSHIM_PREFETCH=lots",
                         "AOSHIM_PREFETCH=7", NULL};
    cr_assert_eq(run_envp(env, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "aoshim: warning: AOSHIM_PREFETCH is set more than once in the "
                          "environment; the first value, '2', is used\n"),
              "%s", out);
    cr_expect(strstr(out, "aoshim: option AOSHIM_PREFETCH=2\n"), "%s", out);
    const char *bad[] = {"AOSHIM_PREFETCH=lots", "AOSHIM_PREFETCH=2", NULL};
    cr_assert_eq(run_envp(bad, out, sizeof out), 2, "%s", out);
    cr_expect_str_eq(out, "aoshim: error: AOSHIM_PREFETCH='lots': an integer from 0 to 64\n");
}

// AOSHIM_VERBOSE with a long value: every line whole, with its newline.
Test(preload_env, verbose_long_value_keeps_newlines)
{
    // Long, yet a name that can be written (checked at load): "/tmp/./././..."
    // with a short file name, as one long component is past NAME_MAX.
    char out[16384], path[400];
    memcpy(path, "/tmp", 4);
    for (size_t i = 4; i < sizeof path - 3; i += 2)
        path[i] = '/', path[i + 1] = '.';
    memcpy(path + sizeof path - 3, "/r", 3);
    const char *env[] = {"AOSHIM_VERBOSE=1", NULL, NULL};
    char var[450];
    snprintf(var, sizeof var, "AOSHIM_REPORT=%s", path);
    env[1] = var;
    cr_assert_eq(run_envp(env, out, sizeof out), 0, "%s", out);
    char want[500];
    snprintf(want, sizeof want, "aoshim: option AOSHIM_REPORT=%s\naoshim: option ", path);
    cr_expect(strstr(out, want), "%s", out);
    for (const char *l = out; *l;) {
        const char *nl = strchr(l, '\n');
        cr_assert(nl, "no newline: '%.60s'", l);
        cr_expect(strncmp(l, "aoshim: ", 8) == 0, "'%.60s'", l);
        l = nl + 1;
    }
}
