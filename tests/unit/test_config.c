// SPDX-License-Identifier: MIT
// AOSHIM_* parsing: each parser's accepted forms, and the one-line errors.
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

Test(config, sizes)
{
    uint64_t v;
    cr_assert_eq(ao_parse_size("4096", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(ao_parse_size("512K", &v), 0);
    cr_assert_eq(v, 512u << 10);
    cr_assert_eq(ao_parse_size("1MiB", &v), 0);
    cr_assert_eq(v, 1u << 20);
    cr_assert_eq(ao_parse_size("2g", &v), 0);
    cr_assert_eq(v, 2ull << 30);
    cr_assert_eq(ao_parse_size("3TB", &v), 0);
    cr_assert_eq(v, 3ull << 40);
    // A B suffix alone means bytes; with a unit, B and iB are both binary.
    const struct {
        const char *in;
        uint64_t want;
    } good[] = {{"4096B", 4096},    {"0b", 0},           {"1KB", 1024},
                {"1KiB", 1024},     {"1kib", 1024},      {"2MB", 2u << 20},
                {"2MiB", 2u << 20}, {"1GB", 1ull << 30}, {"1TiB", 1ull << 40}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        v = 12345;
        cr_expect_eq(ao_parse_size(good[i].in, &v), 0, "refused '%s'", good[i].in);
        cr_expect_eq(v, good[i].want, "'%s': %llu", good[i].in, (unsigned long long)v);
    }
    const char *bad[] = {"",
                         "-1",
                         "+5",
                         " 5",
                         "5 ",
                         "1.5G",
                         "G",
                         "1X",
                         "1GiBs",
                         "99999999999T",
                         "18446744073709551616",
                         "B",
                         "1BB",
                         "1iB",
                         "1Bi",
                         "1KBB",
                         "1B ",
                         "1Ki"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_size(bad[i], &v), -1, "accepted '%s'", bad[i]);
}

Test(config, bools)
{
    bool b;
    const char *t[] = {"1", "true", "YES", "on"}, *f[] = {"0", "False", "no", "OFF"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(ao_parse_bool(t[i], &b), 0);
        cr_assert(b);
        cr_assert_eq(ao_parse_bool(f[i], &b), 0);
        cr_assert(!b);
    }
    cr_assert_eq(ao_parse_bool("2", &b), -1);
    cr_assert_eq(ao_parse_bool("", &b), -1);
    cr_assert_eq(ao_parse_bool("y", &b), -1);
}

// AOSHIM_SERVE: auto (the default), or a boolean; anything else is one
// error line naming what is accepted.
Test(config, serve_is_auto_or_a_boolean)
{
    ao_config_t c;
    char err[768];
    char *env0[] = {"PATH=/bin", NULL};
    cr_assert_eq(ao_config_load(&c, env0, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.serve, AO_SERVE_AUTO, "unset: %u", c.serve);
    static const struct {
        const char *v;
        unsigned want;
    } forms[] = {{"auto", AO_SERVE_AUTO}, {"AUTO", AO_SERVE_AUTO}, {"1", AO_SERVE_ON},
                 {"on", AO_SERVE_ON},     {"0", AO_SERVE_OFF},     {"false", AO_SERVE_OFF}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        cr_assert_eq(ao_config_set(&c, "SERVE", forms[i].v, err, sizeof err), 0, "%s", err);
        cr_expect_eq(c.serve, forms[i].want, "%s: %u", forms[i].v, c.serve);
    }
    cr_assert_eq(ao_config_set(&c, "SERVE", "sometimes", err, sizeof err), -1);
    cr_expect_str_eq(err, "aoshim: error: AOSHIM_SERVE='sometimes': 'auto' or a boolean (1/0, "
                          "true/false, yes/no, on/off)");
    cr_expect_eq(c.serve, AO_SERVE_OFF, "a bad value changed it: %u", c.serve);
}

Test(config, layers)
{
    ao_layerset_t s;
    cr_assert_eq(ao_parse_layers("12", &s), 0);
    cr_assert(ao_layerset_has(&s, 11, 0) && !ao_layerset_has(&s, 12, 0));
    cr_assert_eq(ao_parse_layers("0-3,7,9-10", &s), 0);
    unsigned want[] = {0, 1, 2, 3, 7, 9, 10};
    unsigned n = 0;
    for (unsigned l = 0; l < 16; l++)
        if (ao_layerset_has(&s, l, 16)) cr_assert_eq(l, want[n++]);
    cr_assert_eq(n, 7);
    cr_assert_eq(ao_parse_layers("50%", &s), 0);
    cr_assert(ao_layerset_has(&s, 7, 0), "a percentage before the layer count is known: all");
    cr_assert(ao_layerset_has(&s, 3, 8) && !ao_layerset_has(&s, 4, 8));
    cr_assert_eq(ao_parse_layers("auto", &s), 0);
    cr_assert_eq(s.kind, AO_LAYERS_AUTO);
    cr_assert_eq(ao_parse_layers("all", &s), 0);
    cr_assert(ao_layerset_has(&s, 100, 0));
    cr_assert_eq(ao_parse_layers("none", &s), 0);
    cr_assert(!ao_layerset_has(&s, 0, 8));
    const char *bad[] = {"",     "-1", "3-1", "1,,2", "1,",     ",1",  "1-",
                         "101%", "%",  "x",   "4097", "0-4096", "1;2", "50 %"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_layers(bad[i], &s), -1, "accepted '%s'", bad[i]);
}

// "N%" for AOSHIM_OFFLOAD_LAYERS and AOSHIM_BUDGET: one reader, its value and
// its three answers (a percentage, a bad one, not a percentage at all).
Test(config, percent)
{
    static const struct {
        const char *in;
        unsigned want;
    } good[] = {{"0%", 0}, {"1%", 1}, {"50%", 50}, {"100%", 100}, {"007%", 7}, {"0000050%", 50}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        unsigned v = 12345;
        cr_expect_eq(ao_parse_percent(good[i].in, &v), 0, "refused '%s'", good[i].in);
        cr_expect_eq(v, good[i].want, "'%s' is %u", good[i].in, v);
    }
    // Ends in '%' but is no percentage from 0 to 100: refused, *out untouched.
    const char *bad[] = {"101%", "1000%", "00000050%", "99999999999999999999%",
                         "-5%",  "+5%",   " 5%",       "5 %",
                         "5.5%", "1e2%",  "5%%",       "x%",
                         "0x1%", "1,2%",  "1-2%"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unsigned v = 12345;
        cr_expect_eq(ao_parse_percent(bad[i], &v), -1, "accepted '%s'", bad[i]);
        cr_expect_eq(v, 12345, "'%s' wrote %u", bad[i], v);
    }
    // Not a percentage: the caller parses it as something else.
    const char *other[] = {"", "%", "50", "50%x", "%50", "5%0", "auto", "40G"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        unsigned v = 12345;
        cr_expect_eq(ao_parse_percent(other[i], &v), 1, "'%s' taken for a percentage", other[i]);
        cr_expect_eq(v, 12345, "'%s' wrote %u", other[i], v);
    }
    // The two options that take it: 0% is a layer share of none, but no budget.
    ao_layerset_t s;
    cr_assert_eq(ao_parse_layers("0%", &s), 0);
    cr_expect_eq(s.kind, AO_LAYERS_PERCENT);
    cr_expect_eq(s.percent, 0);
    cr_expect(!ao_layerset_has(&s, 0, 8), "0%% of 8 layers chose layer 0");
    cr_assert_eq(ao_parse_layers("100%", &s), 0);
    cr_expect_eq(s.percent, 100);
    cr_expect(ao_layerset_has(&s, 7, 8) && !ao_layerset_has(&s, 8, 8));
    cr_assert_eq(ao_parse_layers("25%", &s), 0);
    cr_expect(ao_layerset_has(&s, 1, 8) && !ao_layerset_has(&s, 2, 8), "25%% of 8 is layers 0-1");
    ao_share_t b;
    cr_expect_eq(ao_parse_share("0%", &b), -1);
    cr_assert_eq(ao_parse_share("1%", &b), 0);
    cr_expect(b.percent == 1 && b.bytes == 0);
    cr_assert_eq(ao_parse_share("100%", &b), 0);
    cr_expect(b.percent == 100 && b.bytes == 0);
    cr_expect_eq(ao_parse_share("00000050%", &b), -1, "not read as a size either");
}

// AOSHIM_TORCH: the Python side reads the variable itself; the library
// refuses what it could not mean before the program runs, and normalises
// what it accepts to "auto", "0" or the path.
Test(config, torch)
{
    const char *v = NULL;
    const struct {
        const char *in, *want;
    } good[] = {
        {"auto", "auto"},
        {"AUTO", "auto"},
        {"0", "0"},
        {"false", "0"},
        {"No", "0"},
        {"OFF", "0"},
        {"model.layers", NULL},
        {"transformer.h", NULL},
        {"blocks", NULL},
        {"stages.1.blocks", NULL},
        {"_orig_mod.model.layers", NULL},
        {"m.layers.10", NULL},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cr_expect_eq(ao_parse_torch(good[i].in, &v), 0, "refused '%s'", good[i].in);
        cr_expect_str_eq(v, good[i].want ? good[i].want : good[i].in, "'%s'", good[i].in);
    }
    const char *bad[] = {"",     "1",         "true",         "on",           "yes",
                         ".",    "model.",    ".model",       "a..b",         "0.blocks",
                         "1abc", "model.1x",  "model-layers", "model layers", "model.layers ",
                         "m/l",  "model.x-1", "4.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_torch(bad[i], &v), -1, "accepted '%s'", bad[i]);
    char longpath[300];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    cr_expect_eq(ao_parse_torch(longpath, &v), -1, "accepted a 299-character path");
}

Test(config, load_torch_and_control_log)
{
    ao_config_t c;
    char err[768];
    char *env0[] = {"PATH=/bin", NULL};
    cr_assert_eq(ao_config_load(&c, env0, err, sizeof err), 0);
    cr_assert_str_eq(c.torch, "auto");
    cr_assert_null(c.control_log, "no control log by default");

    char *env1[] = {"AOSHIM_TORCH=Off", "AOSHIM_CONTROL_LOG=/tmp/ctl.%p.log", NULL};
    cr_assert_eq(ao_config_load(&c, env1, err, sizeof err), 0);
    cr_assert_str_eq(c.torch, "0");
    cr_assert_str_eq(c.control_log, "/tmp/ctl.%p.log");

    char *env2[] = {"AOSHIM_TORCH=model.layers", NULL};
    cr_assert_eq(ao_config_load(&c, env2, err, sizeof err), 0);
    cr_assert_str_eq(c.torch, "model.layers");

    char *env3[] = {"AOSHIM_TORCH=on", NULL};
    cr_assert_eq(ao_config_load(&c, env3, err, sizeof err), -1);
    cr_assert_str_eq(err, "aoshim: error: AOSHIM_TORCH='on': 'auto', '0' (off; also "
                          "false/no/off) or a dotted attribute path of identifiers and integers "
                          "(model.layers, stages.1.blocks)");

    // Empty is "no file", as the documented default is.
    char *env4[] = {"AOSHIM_CONTROL_LOG=", NULL};
    cr_assert_eq(ao_config_load(&c, env4, err, sizeof err), 0, "%s", err);
    cr_assert_null(c.control_log);
}

// Every file option: an empty value is the default, no file, not an error.
Test(config, empty_path_means_no_file)
{
    ao_config_t c;
    char err[768];
    char *env[] = {
        "AOSHIM_REPORT=", "AOSHIM_TRACE=", "AOSHIM_REPORT_HTML=", "AOSHIM_CONTROL_LOG=", NULL};
    cr_assert_eq(ao_config_load(&c, env, err, sizeof err), 0, "%s", err);
    cr_expect_null(c.report);
    cr_expect_null(c.trace);
    cr_expect_null(c.report_html);
    cr_expect_null(c.control_log);
}

// A bad value's error is one line whatever the value holds: control
// characters escaped, a backslash doubled (so the text reads back exactly),
// bytes that are not UTF-8 as \xHH, a long value cut so that what is
// accepted still shows.
Test(config, error_line_escapes_the_value)
{
    ao_config_t c;
    char err[768];
    cr_assert_eq(ao_config_set(&c, "PREFETCH", "1\n2", err, sizeof err), -1);
    cr_expect_str_eq(err, "aoshim: error: AOSHIM_PREFETCH='1\\n2': an integer from 0 to 64");
    cr_assert_eq(ao_config_set(&c, "VERBOSE", "\x1b[31mred\x1b[0m", err, sizeof err), -1);
    cr_expect_str_eq(err, "aoshim: error: AOSHIM_VERBOSE='\\x1b[31mred\\x1b[0m': 0, 1 or 2");
    cr_assert_eq(ao_config_set(&c, "QUIET", "y\te\rs\\\xff\xc3\xa9", err, sizeof err), -1);
    cr_expect_str_eq(err, "aoshim: error: AOSHIM_QUIET='y\\te\\rs\\\\\\xff\xc3\xa9': a boolean "
                          "(1/0, true/false, yes/no, on/off)");
    char longv[2000];
    memset(longv, 'x', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    cr_assert_eq(ao_config_set(&c, "PREFETCH", longv, err, sizeof err), -1);
    cr_expect(strstr(err, "xxx...': an integer from 0 to 64") != NULL, "%s", err);
    cr_expect_null(strchr(err, '\n'));
    // An unknown name is shown escaped too.
    cr_assert_eq(ao_config_set(&c, "FO\nO", "1", err, sizeof err), 1);
    cr_expect_str_eq(err, "unknown variable AOSHIM_FO\\nO ignored");
}

// The same variable twice (execve allows it): getenv, and so AOSHIM_VERBOSE
// and the report, show the first; the parser takes the first too, and warns
// once that the others are ignored.
Test(config, first_of_a_repeated_variable_wins)
{
    ao_config_t c;
    char err[768];
    char *env[] = {"AOSHIM_PREFETCH=3", "AOSHIM_MIN_BYTES=4K", "AOSHIM_PREFETCH=5",
                   "AOSHIM_PREFETCH=lots", NULL};
    cr_redirect_stderr();
    cr_assert_eq(ao_config_load(&c, env, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.prefetch, 3);
    cr_expect_eq(c.min_bytes, 4096);
    fflush(stderr);
    cr_expect_stderr_eq_str("aoshim: warning: AOSHIM_PREFETCH is set more than once in the "
                            "environment; the first value, '3', is used\n");
}

Test(config, first_of_a_repeated_variable_is_checked)
{
    ao_config_t c;
    char err[768];
    char *env[] = {"AOSHIM_PREFETCH=lots", "AOSHIM_PREFETCH=2", NULL};
    cr_assert_eq(ao_config_load(&c, env, err, sizeof err), -1);
    cr_expect_str_eq(err, "aoshim: error: AOSHIM_PREFETCH='lots': an integer from 0 to 64");
}

// AOSHIM_VERBOSE's listing: every line ends with its newline, a long value
// (a path) shown whole up to the line's length and cut with "..." past it.
static char *read_all(int fd, char *buf, size_t size)
{
    size_t n = 0;
    ssize_t r;
    while (n < size - 1 && (r = read(fd, buf + n, size - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    return buf;
}

Test(config, verbose_lines_keep_their_newline)
{
    static char out[1 << 16];
    char path[300], huge[3000];
    memset(path, 'a', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    memset(huge, 'b', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    setenv("AOSHIM_REPORT", path, 1);
    setenv("AOSHIM_TRACE", huge, 1);
    setenv("AOSHIM_TORCH", "model.layers", 1);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    ao_config_print(p[1]);
    close(p[1]);
    read_all(p[0], out, sizeof out);
    close(p[0]);
    char want[400];
    snprintf(want, sizeof want, "aoshim: option AOSHIM_REPORT=%s\n", path);
    cr_expect(strstr(out, want) != NULL, "no whole line for the 300-character path:\n%s", out);
    cr_expect(strstr(out, "bbb...\naoshim: option AOSHIM_REPORT_HTML= (default)\n") != NULL,
              "the 3000-character value is not cut with '...':\n%.200s", out);
    cr_expect(strstr(out, "\naoshim: option AOSHIM_TORCH=model.layers\n") != NULL, "%s", out);
    // Every line: "aoshim: option ", at most AO_LOG_LINE bytes with its newline.
    size_t lines = 0;
    for (const char *l = out; *l; lines++) {
        const char *nl = strchr(l, '\n');
        cr_assert(nl, "a line without its newline: '%.80s'", l);
        cr_expect(strncmp(l, "aoshim: option AOSHIM_", 22) == 0, "'%.80s'", l);
        cr_expect_leq((size_t)(nl - l) + 1, AO_LOG_LINE);
        l = nl + 1;
    }
    const char *name, *def, *help;
    size_t nopt = 0;
    while (ao_config_describe(nopt, &name, &def, &help))
        nopt++;
    cr_expect_eq(lines, nopt, "%zu lines for %zu options", lines, nopt);
}

// Every message of aoshim's is one line: a control character in what it
// names (a file name) is escaped, a long one cut with "...".
Test(log, one_line_per_message)
{
    static char out[8192];
    char huge[3000];
    memset(huge, 'c', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    int p[2];
    cr_assert_eq(pipe(p), 0);
    ao_log_fd(p[1], AO_LOG_WARN, "cannot write %s: %s", "/tmp/a\nb\x1b[2J", "No such file");
    ao_log_fd(p[1], AO_LOG_INFO, "%s", huge);
    close(p[1]);
    read_all(p[0], out, sizeof out);
    close(p[0]);
    const char *second = strchr(out, '\n');
    cr_assert(second);
    second++;
    cr_expect(strncmp(out, "aoshim: warning: cannot write /tmp/a\\nb\\x1b[2J: No such file\n",
                      (size_t)(second - out)) == 0,
              "%s", out);
    size_t n = strlen(second);
    cr_expect_eq(n, AO_LOG_LINE, "the long line is %zu bytes", n);
    cr_expect(strncmp(second, "aoshim: ccc", 11) == 0);
    cr_expect(n > 4 && strcmp(second + n - 4, "...\n") == 0, "ends '%s'", second + n - 8);
}

// A driver shutting down at exit is no news: CUDA_ERROR_DEINITIALIZED (the
// driver answers it only then) and, once the exit has begun,
// CUDA_ERROR_NOT_INITIALIZED; any other error is one to warn about.
Test(log, cuda_gone_only_at_exit)
{
    cr_expect_not(ao_exiting());
    cr_expect_not(ao_cuda_gone_at_exit(CUDA_ERROR_NOT_INITIALIZED),
                  "before exit, an uninitialised driver is a real error");
    cr_expect_not(ao_cuda_gone_at_exit(CUDA_ERROR_LAUNCH_FAILED));
    cr_expect_not(ao_cuda_gone_at_exit(CUDA_SUCCESS));
    cr_expect(ao_cuda_gone_at_exit(CUDA_ERROR_DEINITIALIZED));
    cr_expect(ao_exiting(), "the driver's teardown says the exit has begun");
    cr_expect(ao_cuda_gone_at_exit(CUDA_ERROR_NOT_INITIALIZED));
    cr_expect_not(ao_cuda_gone_at_exit(CUDA_ERROR_LAUNCH_FAILED), "a real failure, even at exit");
    cr_expect_not(ao_cuda_gone_at_exit(CUDA_ERROR_INVALID_CONTEXT));
}

Test(log, exit_begun_by_the_destructor)
{
    ao_exit_begin();
    cr_expect(ao_exiting());
    cr_expect(ao_cuda_gone_at_exit(CUDA_ERROR_NOT_INITIALIZED));
    cr_expect(ao_cuda_gone_at_exit(CUDA_ERROR_DEINITIALIZED));
    cr_expect_not(ao_cuda_gone_at_exit(CUDA_ERROR_OUT_OF_MEMORY));
}

Test(log, escape_keeps_characters_whole)
{
    char out[16];
    // "é" is two bytes: a cut never splits it, and "..." says there was more.
    size_t n = ao_escape(out, 10, "abcd\xc3\xa9\xc3\xa9xyz", 12, false);
    cr_expect_str_eq(out, "abcd\xc3\xa9...");
    cr_expect_eq(n, 9);
    ao_escape(out, sizeof out, "a\\b", 3, false);
    cr_expect_str_eq(out, "a\\b", "a backslash is kept as is unless asked");
    char wide[32];
    ao_escape(wide, sizeof wide, "\xed\xa0\x80\xc0\xaf", 5, false);
    cr_expect_str_eq(wide, "\\xed\\xa0\\x80\\xc0\\xaf",
                     "a surrogate or overlong form is not UTF-8");
    // A C1 control (U+009B, CSI) is valid UTF-8 but a terminal may act on it;
    // U+00A0, the first character past the range, is shown as is.
    ao_escape(wide, sizeof wide, "\302\2332J\302\240", 6, false); // octal: "\x9b2" is one escape
    cr_expect_str_eq(wide, "\\xc2\\x9b2J\xc2\xa0");
    cr_expect_eq(ao_utf8_seq("\xf0\x9f\x98\x80", 4), 4);
    cr_expect_eq(ao_utf8_seq("\xf4\x90\x80\x80", 4), 0, "past U+10FFFF");
    cr_expect_eq(ao_utf8_seq("\xc3", 1), 0, "cut short");
}

// The help text is what the verbose listing and the README show: it must say
// what each AOSHIM_TORCH value does.
Test(config, torch_help_documents_values)
{
    const char *name, *def, *help;
    bool found = false;
    for (size_t i = 0; ao_config_describe(i, &name, &def, &help); i++)
        if (strcmp(name, "TORCH") == 0) {
            found = true;
            cr_expect_str_eq(def, "auto");
            cr_expect_str_eq(help, "auto: find the model's repeated block list at the first "
                                   "forward; 0: off; a dotted path (model.layers): that module "
                                   "list");
        }
    cr_expect(found, "no AOSHIM_TORCH in the options table");
}

Test(config, load_defaults_and_errors)
{
    ao_config_t c;
    char err[768];
    char *env0[] = {"PATH=/bin", NULL};
    cr_assert_eq(ao_config_load(&c, env0, err, sizeof err), 0);
    cr_assert(c.enable);
    cr_assert_eq(c.prefetch, 1);
    cr_assert_eq(c.min_bytes, 1u << 20);
    cr_assert_eq(c.offload_layers.kind, AO_LAYERS_AUTO);

    char *env1[] = {"AOSHIM_PREFETCH=3", "AOSHIM_MIN_BYTES=64K", NULL};
    cr_assert_eq(ao_config_load(&c, env1, err, sizeof err), 0);
    cr_assert_eq(c.prefetch, 3);
    cr_assert_eq(c.min_bytes, 64u << 10);

    char *env2[] = {"AOSHIM_PREFETCH=lots", NULL};
    cr_assert_eq(ao_config_load(&c, env2, err, sizeof err), -1);
    cr_assert_str_eq(err, "aoshim: error: AOSHIM_PREFETCH='lots': an integer from 0 to 64");

    char *env3[] = {"AOSHIM_OFFLOAD_LAYER=3", "AOSHIM_PREFETCH=2", NULL};
    cr_redirect_stderr();
    cr_assert_eq(ao_config_load(&c, env3, err, sizeof err), 0, "an unknown name is not fatal");
    cr_assert_eq(c.prefetch, 2);
    cr_assert_eq(c.offload_layers.kind, AO_LAYERS_AUTO, "the unknown name changed nothing");
    fflush(stderr);
    cr_assert_stderr_eq_str("aoshim: warning: unknown variable AOSHIM_OFFLOAD_LAYER ignored; did "
                            "you mean AOSHIM_OFFLOAD_LAYERS?\n");
}

// The default policy is the automatic plan (issue 10): unset,
// AOSHIM_OFFLOAD_LAYERS is 'auto', and the table that documents it (--help,
// AOSHIM_VERBOSE, the README check below) says so. Every explicit form still
// means what it did.
Test(config, default_policy_is_auto)
{
    ao_config_t c;
    char err[768];
    char *env0[] = {"PATH=/bin", NULL};
    cr_assert_eq(ao_config_load(&c, env0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.offload_layers.kind, AO_LAYERS_AUTO, "unset: kind %d", c.offload_layers.kind);
    const char *name, *def, *help;
    bool found = false;
    for (size_t i = 0; ao_config_describe(i, &name, &def, &help); i++)
        if (strcmp(name, "OFFLOAD_LAYERS") == 0) {
            found = true;
            cr_expect_str_eq(def, "auto");
            cr_expect(strstr(help, "'auto' plans") != NULL, "help: %s", help);
        }
    cr_assert(found, "no OFFLOAD_LAYERS in the options table");

    static const struct {
        const char *v;
        ao_layers_kind_t kind;
    } forms[] = {{"all", AO_LAYERS_ALL},     {"ALL", AO_LAYERS_ALL},     {"auto", AO_LAYERS_AUTO},
                 {"none", AO_LAYERS_LIST},   {"0", AO_LAYERS_COUNT},     {"12", AO_LAYERS_COUNT},
                 {"50%", AO_LAYERS_PERCENT}, {"0-11,14", AO_LAYERS_LIST}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        char var[64];
        snprintf(var, sizeof var, "AOSHIM_OFFLOAD_LAYERS=%s", forms[i].v);
        char *env[] = {var, NULL};
        cr_assert_eq(ao_config_load(&c, env, err, sizeof err), 0, "%s: %s", var, err);
        cr_expect_eq(c.offload_layers.kind, forms[i].kind, "%s: kind %d, want %d", var,
                     c.offload_layers.kind, forms[i].kind);
    }
}

// The README's option table is written by hand: every option must be there,
// with its default, so the documentation cannot drift from the parser.
Test(config, readme_documents_every_option)
{
    const char *path = getenv("AO_TEST_README");
    cr_assert(path, "AO_TEST_README not set by the test harness");
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    const char *name, *def, *help;
    for (size_t i = 0; ao_config_describe(i, &name, &def, &help); i++) {
        char row[128];
        snprintf(row, sizeof row, "| `AOSHIM_%s` | `%s` |", name, def);
        cr_expect(strstr(text, row) != NULL, "README has no row starting \"%s\"", row);
    }
}

// AOSHIM_BUDGET: a size, or a percentage of the device's memory.
Test(config, budget_is_a_size_or_a_share)
{
    ao_share_t b;
    cr_assert_eq(ao_parse_share("40G", &b), 0);
    cr_assert(b.bytes == 40ull << 30 && b.percent == 0);
    cr_assert_eq(ao_parse_share("90%", &b), 0);
    cr_assert(b.bytes == 0 && b.percent == 90);
    const char *bad[] = {"", "0", "0%", "101%", "%", "-1G", "1.5G", "90 %"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_share(bad[i], &b), -1, "accepted '%s'", bad[i]);
    ao_config_t c;
    char err[256];
    char *env[] = {"AOSHIM_BUDGET=", NULL};
    cr_assert_eq(ao_config_load(&c, env, err, sizeof err), 0, "%s", err);
    cr_assert(c.budget.bytes == 0 && c.budget.percent == 0, "empty is the default");
}
