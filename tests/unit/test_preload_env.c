// SPDX-License-Identifier: MIT
// A bad AOSHIM_* value stops a preloaded program before main: exit status 2
// and exactly one line naming the variable. A good one changes nothing.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// Run `true` under the shim with NAME=VALUE; return its exit status and stderr.
static int run_with(const char *name, const char *value, char *out, size_t outlen)
{
    const char *lib = getenv("AO_TEST_SHIM");
    cr_assert(lib, "AO_TEST_SHIM not set by the test harness");
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        setenv("LD_PRELOAD", lib, 1);
        if (name) setenv(name, value, 1);
        execlp("true", "true", (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    size_t n = 0;
    ssize_t r;
    while (n < outlen - 1 && (r = read(pipefd[0], out + n, outlen - 1 - n)) > 0) n += (size_t)r;
    out[n] = '\0';
    close(pipefd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const struct {
    const char *name, *value;
} bad[] = {
    {"AOSHIM_ENABLE", "2"},           {"AOSHIM_ENABLE", ""},
    {"AOSHIM_ENABLE", "maybe"},       {"AOSHIM_OFFLOAD_LAYERS", "-3"},
    {"AOSHIM_OFFLOAD_LAYERS", "5-2"}, {"AOSHIM_OFFLOAD_LAYERS", "1,,2"},
    {"AOSHIM_OFFLOAD_LAYERS", "150%"}, {"AOSHIM_OFFLOAD_LAYERS", "half"},
    {"AOSHIM_OFFLOAD_LAYERS", ""},    {"AOSHIM_PREFETCH", "-1"},
    {"AOSHIM_PREFETCH", "65"},        {"AOSHIM_PREFETCH", "1.5"},
    {"AOSHIM_PREFETCH", "0x2"},       {"AOSHIM_MIN_BYTES", "1Q"},
    {"AOSHIM_MIN_BYTES", "-4K"},      {"AOSHIM_MIN_BYTES", "4 K"},
    {"AOSHIM_HOST_LIMIT", "lots"},    {"AOSHIM_HOST_LIMIT", "99999999999999T"},
    {"AOSHIM_VERBOSE", "3"},          {"AOSHIM_QUIET", "yess"},
    {"AOSHIM_MIN_BYTES", "1e6"},      {"AOSHIM_OFFLOAD_LAYERS", "0-2,x"},
    {"AOSHIM_CONTROL_LOG", ""},       {"AOSHIM_TORCH", ""},
    {"AOSHIM_TORCH", "1"},            {"AOSHIM_TORCH", "on"},
    {"AOSHIM_TORCH", "model..layers"}, {"AOSHIM_TORCH", "0.blocks"},
    {"AOSHIM_TORCH", "model.layers."}, {"AOSHIM_TORCH", "model/layers"},
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
    // Opened at the first control call only: `true` makes none, so no file.
    cr_assert_eq(run_with("AOSHIM_CONTROL_LOG", "/nonexistent/ctl.log", out, sizeof out), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(run_with("AOSHIM_VERBOSE", "1", out, sizeof out), 0);
    cr_assert(strstr(out, "aoshim: version 0.1.0") == out, "%s", out);
    cr_assert(strstr(out, "AOSHIM_PREFETCH=1 (default)") != NULL, "%s", out);
}
