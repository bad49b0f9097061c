// SPDX-License-Identifier: MIT
// The option-parsing table: malformed values across every AOSHIM_* variable,
// each run as a real preloaded process (the constructor's path, not only the
// parser's). Each must exit 2 before main (echo prints nothing), with exactly
// one line on stderr, "aoshim: error: AOSHIM_X='<value escaped>': <why>":
// control characters, newlines and invalid UTF-8 shown as escapes, a long
// value cut with "...". A file option whose file cannot be written is a bad
// value too (issue 11).
#define _GNU_SOURCE 1
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// --- one run -----------------------------------------------------------------------------
typedef struct run_s {
    int status; // exit status, or 128 + signal
    pid_t pid;  // the child's (what %p expands to: exec keeps the pid)
    char out[256], err[4096];
} run_t;

static void slurp_fd(int fd, char *buf, size_t size)
{
    size_t n = 0;
    ssize_t r;
    while (n < size - 1 && (r = read(fd, buf + n, size - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fd);
}

// `echo main-ran` under the shim with name=value and no other AOSHIM_*
// variable (the harness's environment must not change a line).
static void run_echo(run_t *r, const char *name, const char *value)
{
    const char *lib = getenv("AO_TEST_SHIM");
    cr_assert(lib, "AO_TEST_SHIM not set by the test harness");
    int po[2], pe[2];
    cr_assert_eq(pipe(po), 0);
    cr_assert_eq(pipe(pe), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(po[1], 1), dup2(pe[1], 2);
        close(po[0]), close(pe[0]);
        extern char **environ;
        for (char **e = environ; *e;) {
            if (strncmp(*e, "AOSHIM_", 7) == 0) {
                char var[128];
                size_t n = strcspn(*e, "=");
                snprintf(var, sizeof var, "%.*s", (int)n, *e);
                unsetenv(var); // shifts the rest down: look at *e again
            } else {
                e++;
            }
        }
        setenv("LD_PRELOAD", lib, 1);
        setenv(name, value, 1);
        char *argv[] = {"echo", "main-ran", NULL};
        execvp("echo", argv);
        _exit(127);
    }
    close(po[1]), close(pe[1]);
    // Both outputs are a line or two, far below a pipe's buffer: the child
    // never blocks on one while this reads the other.
    slurp_fd(pe[0], r->err, sizeof r->err);
    slurp_fd(po[0], r->out, sizeof r->out);
    int st;
    waitpid(pid, &st, 0);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r->pid = pid;
}

// --- the table ---------------------------------------------------------------------------
// What each variable accepts, as the line says it: copied here rather than
// read from the library, so a change to the text is a change to this test.
static const char *accepted(const char *var)
{
    static const char *const bool_text = "a boolean (1/0, true/false, yes/no, on/off)";
    static const struct {
        const char *var, *text;
    } t[] = {
        {"AOSHIM_ENABLE", bool_text},
        {"AOSHIM_QUIET", bool_text},
        {"AOSHIM_STACKS", bool_text},
        {"AOSHIM_CHECK", bool_text},
        {"AOSHIM_OFFLOAD_LAYERS", "'all', 'auto', 'none', a count of first layers (12), a list "
                                  "with ranges (0-11,14) or a percentage (50%)"},
        {"AOSHIM_BUDGET", "a size such as 40G, or a percentage of the device's memory (90%)"},
        {"AOSHIM_PREFETCH", "an integer from 0 to 64"},
        {"AOSHIM_MIN_BYTES", "a size such as 4096, 512K, 1MiB, 2G"},
        {"AOSHIM_HOST_LIMIT", "a size such as 64G (0: no limit)"},
        {"AOSHIM_VERBOSE", "0, 1 or 2"},
        {"AOSHIM_SCHEDULE", "'aoshim' or 'te'"},
        {"AOSHIM_TORCH", "'auto', '0' (off; also false/no/off) or a dotted attribute path of "
                         "identifiers and integers (model.layers, stages.1.blocks)"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (strcmp(t[i].var, var) == 0) return t[i].text;
    return NULL;
}

typedef struct bad_s {
    const char *var;
    char *value; // as set in the environment
    char *shown; // as the line must show it
    char *why;   // after "': "; NULL: the variable's accepted text
} bad_t;

static bad_t table[128];
static size_t ntable;
static char dir[64]; // fixtures: a FIFO, a symlink, a read-only directory

// "@D" in s becomes the fixture directory.
static char *expand(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    for (const char *p = s; (p = strstr(p, "@D")); p += 2)
        n += strlen(dir);
    char *out = malloc(n), *o = out;
    cr_assert(out);
    for (const char *p = s; *p;) {
        if (p[0] == '@' && p[1] == 'D') {
            o = stpcpy(o, dir), p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

static void add(const char *var, const char *value, const char *shown, const char *why)
{
    cr_assert(ntable < sizeof table / sizeof *table);
    table[ntable++] = (bad_t){var, expand(value), expand(shown), expand(why)};
}

// c repeated n times (heap).
static char *repeat(const char *c, size_t n)
{
    size_t k = strlen(c);
    char *s = malloc(n * k + 1);
    cr_assert(s);
    for (size_t i = 0; i < n; i++)
        memcpy(s + i * k, c, k);
    s[n * k] = '\0';
    return s;
}

static char *concat(const char *a, const char *b)
{
    char *s = malloc(strlen(a) + strlen(b) + 1);
    cr_assert(s);
    return strcat(strcpy(s, a), b);
}

static void fixtures(void)
{
    snprintf(dir, sizeof dir, "/tmp/aoshim-options.XXXXXX");
    cr_assert(mkdtemp(dir));
    char p[256];
    snprintf(p, sizeof p, "%s/fifo", dir);
    cr_assert_eq(mkfifo(p, 0600), 0);
    snprintf(p, sizeof p, "%s/link", dir);
    cr_assert_eq(symlink("/etc/hostname", p), 0);
    snprintf(p, sizeof p, "%s/ro", dir);
    cr_assert_eq(mkdir(p, 0555), 0);
}

static void build_table(void)
{
    // Booleans: near misses, padding, control characters, invalid UTF-8.
    add("AOSHIM_ENABLE", "2", "2", NULL);
    add("AOSHIM_ENABLE", "maybe", "maybe", NULL);
    add("AOSHIM_ENABLE", " 1", " 1", NULL);
    add("AOSHIM_ENABLE", "1\n", "1\\n", NULL);
    add("AOSHIM_ENABLE", "tru\x1b[31m", "tru\\x1b[31m", NULL);
    add("AOSHIM_ENABLE", "\xff", "\\xff", NULL);
    add("AOSHIM_QUIET", "yess", "yess", NULL);
    add("AOSHIM_QUIET", "10", "10", NULL);
    add("AOSHIM_QUIET", "on\toff", "on\\toff", NULL);
    add("AOSHIM_STACKS", "y", "y", NULL);
    add("AOSHIM_STACKS", "0x0", "0x0", NULL);
    add("AOSHIM_STACKS", "\xc3\xa9", "\xc3\xa9", NULL); // é: valid UTF-8, shown as is
    add("AOSHIM_CHECK", "enable", "enable", NULL);
    add("AOSHIM_CHECK", "+1", "+1", NULL);
    add("AOSHIM_CHECK", "1\r", "1\\r", NULL);
    // U+009B is CSI, a C1 control: valid UTF-8, yet a terminal may act on it.
    add("AOSHIM_CHECK", "\302\2332J", "\\xc2\\x9b2J", NULL); // octal: "\x9b2" is one escape
    // Levels and integers.
    add("AOSHIM_VERBOSE", "3", "3", NULL);
    add("AOSHIM_VERBOSE", "-1", "-1", NULL);
    add("AOSHIM_VERBOSE", "true", "true", NULL);
    add("AOSHIM_VERBOSE", "1.0", "1.0", NULL);
    add("AOSHIM_VERBOSE", "\x7f", "\\x7f", NULL);
    add("AOSHIM_PREFETCH", "65", "65", NULL);
    add("AOSHIM_PREFETCH", "1.5", "1.5", NULL);
    add("AOSHIM_PREFETCH", "0x2", "0x2", NULL);
    add("AOSHIM_PREFETCH", " 2", " 2", NULL);
    add("AOSHIM_PREFETCH", "99999999999999999999999", "99999999999999999999999", NULL);
    add("AOSHIM_PREFETCH", "\xef\xbc\x91", "\xef\xbc\x91", NULL); // a fullwidth 1
    add("AOSHIM_PREFETCH", "2\\", "2\\\\", NULL); // a backslash doubled: read back exactly
    // Layer sets.
    add("AOSHIM_OFFLOAD_LAYERS", "-3", "-3", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "5-2", "5-2", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "1,,2", "1,,2", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "150%", "150%", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "half", "half", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "4097", "4097", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "0-4096", "0-4096", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "1,", "1,", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "%", "%", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "50%%", "50%%", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "1-2-3", "1-2-3", NULL);
    add("AOSHIM_OFFLOAD_LAYERS", "all,1", "all,1", NULL);
    // Sizes.
    add("AOSHIM_MIN_BYTES", "1Q", "1Q", NULL);
    add("AOSHIM_MIN_BYTES", "-4K", "-4K", NULL);
    add("AOSHIM_MIN_BYTES", "4 K", "4 K", NULL);
    add("AOSHIM_MIN_BYTES", "1e6", "1e6", NULL);
    add("AOSHIM_MIN_BYTES", "1.5M", "1.5M", NULL);
    add("AOSHIM_MIN_BYTES", "K", "K", NULL);
    add("AOSHIM_MIN_BYTES", "1KK", "1KK", NULL);
    add("AOSHIM_MIN_BYTES", "1KiBB", "1KiBB", NULL);
    add("AOSHIM_MIN_BYTES", "50%", "50%", NULL);
    add("AOSHIM_MIN_BYTES", "18446744073709551616", "18446744073709551616", NULL); // 2^64
    add("AOSHIM_HOST_LIMIT", "lots", "lots", NULL);
    add("AOSHIM_HOST_LIMIT", "99999999999999T", "99999999999999T", NULL);
    add("AOSHIM_HOST_LIMIT", "17179869184G", "17179869184G", NULL); // 2^64 bytes
    add("AOSHIM_HOST_LIMIT", "1iB", "1iB", NULL);
    add("AOSHIM_HOST_LIMIT", "64G\n", "64G\\n", NULL);
    // AOSHIM_BUDGET: a size or a share of the device; never nothing.
    add("AOSHIM_BUDGET", "0", "0", NULL);
    add("AOSHIM_BUDGET", "0%", "0%", NULL);
    add("AOSHIM_BUDGET", "101%", "101%", NULL);
    add("AOSHIM_BUDGET", "40 G", "40 G", NULL);
    add("AOSHIM_BUDGET", "auto", "auto", NULL);
    // AOSHIM_SCHEDULE; te needs a count of layers (the default is not one).
    add("AOSHIM_SCHEDULE", "tee", "tee", NULL);
    add("AOSHIM_SCHEDULE", "te:4", "te:4", NULL);
    add("AOSHIM_SCHEDULE", "te", "te",
        "TransformerEngine's schedule needs AOSHIM_OFFLOAD_LAYERS=K, a count of first layers "
        "(its num_layers)");
    // AOSHIM_TORCH.
    add("AOSHIM_TORCH", "1", "1", NULL);
    add("AOSHIM_TORCH", "on", "on", NULL);
    add("AOSHIM_TORCH", "model..layers", "model..layers", NULL);
    add("AOSHIM_TORCH", "0.blocks", "0.blocks", NULL);
    add("AOSHIM_TORCH", "model/layers", "model/layers", NULL);
    add("AOSHIM_TORCH", "auto ", "auto ", NULL);
    add("AOSHIM_TORCH", "model.-1", "model.-1", NULL);
    // Long values: the line holds what is accepted, the value is cut at a
    // character boundary with "..." (255 bytes shown at most).
    add("AOSHIM_TORCH", repeat("a", 300), concat(repeat("a", 252), "..."), NULL);
    add("AOSHIM_OFFLOAD_LAYERS", repeat("\n", 300), concat(repeat("\\n", 126), "..."), NULL);
    add("AOSHIM_MIN_BYTES", repeat("\xc3\xa9", 300), concat(repeat("\xc3\xa9", 126), "..."), NULL);
    add("AOSHIM_PREFETCH", repeat("\xff", 100), concat(repeat("\\xff", 63), "..."), NULL);
    // File options: the value as given, the name after %p/%r/%h expansion
    // and why it cannot be written, said at start.
    add("AOSHIM_REPORT", "/nonexistent-aoshim/r.json", "/nonexistent-aoshim/r.json",
        "cannot write /nonexistent-aoshim/r.json: No such file or directory");
    add("AOSHIM_REPORT", "@D/fifo", "@D/fifo",
        "cannot write @D/fifo: it is a FIFO; only a regular file is replaced");
    add("AOSHIM_REPORT", "@D", "@D",
        "cannot write @D: it is a directory; only a regular file is replaced");
    add("AOSHIM_REPORT", "/etc/passwd/r.json", "/etc/passwd/r.json",
        "cannot write /etc/passwd/r.json: Not a directory");
    add("AOSHIM_REPORT", "@D/no\ndir/r", "@D/no\\ndir/r",
        "cannot write @D/no\\ndir/r: No such file or directory");
    add("AOSHIM_REPORT", concat("/", repeat("a", 5000)),
        concat(concat("/", repeat("a", 251)), "..."),
        "file name too long (at most 4095 bytes after %p/%r/%h expansion)");
    add("AOSHIM_TRACE", "@D/link", "@D/link",
        "cannot write @D/link: it is a symbolic link; only a regular file is replaced");
    add("AOSHIM_TRACE", "@D/fifo/t.json", "@D/fifo/t.json",
        "cannot write @D/fifo/t.json: Not a directory");
    // One component short of NAME_MAX (255): the file fits, its temporary
    // name (the file's plus ".aoshim-<pid>-<16 hex>.tmp") does not.
    char *tmp_long = concat("@D/", repeat("t", 240));
    add("AOSHIM_TRACE", tmp_long, NULL, NULL); // shown and why: filled in below
    add("AOSHIM_REPORT_HTML", "/dev/null", "/dev/null",
        "cannot write /dev/null: it is a character device; only a regular file is replaced");
    add("AOSHIM_REPORT_HTML", "/nonexistent-aoshim/%r/r.html", "/nonexistent-aoshim/%r/r.html",
        "cannot write /nonexistent-aoshim/0/r.html: No such file or directory");
    if (geteuid() != 0) // root may write in a read-only directory
        add("AOSHIM_REPORT_HTML", "@D/ro/r.html", "@D/ro/r.html",
            "cannot write @D/ro/r.html: Permission denied");
    add("AOSHIM_CONTROL_LOG", "@D", "@D",
        "cannot write @D: it is a directory; only a regular file or a device is written");
    add("AOSHIM_CONTROL_LOG", "@D/fifo", "@D/fifo",
        "cannot write @D/fifo: it is a FIFO; only a regular file or a device is written");
    add("AOSHIM_CONTROL_LOG", "@D/link", "@D/link",
        "cannot write @D/link: it is a symbolic link; only a regular file or a device is written");
    // %p: the child's own pid, which the test knows (exec keeps it).
    add("AOSHIM_CONTROL_LOG", "/nonexistent-aoshim/%p/ctl.log", "/nonexistent-aoshim/%p/ctl.log",
        "cannot write /nonexistent-aoshim/@P/ctl.log: No such file or directory");
    // AOSHIM_RECORD: written in place as the control log is, checked with the
    // engine on or off.
    add("AOSHIM_RECORD", "/nonexistent-aoshim/%p/t.gz", "/nonexistent-aoshim/%p/t.gz",
        "cannot write /nonexistent-aoshim/@P/t.gz: No such file or directory");
    add("AOSHIM_RECORD", "@D/fifo", "@D/fifo",
        "cannot write @D/fifo: it is a FIFO; only a regular file or a device is written");
    add("AOSHIM_RECORD", "@D", "@D",
        "cannot write @D: it is a directory; only a regular file or a device is written");
}

// The shown form of a value (ao_escape's rules, here for the one fixture
// whose text depends on the directory's name): cut to 252 bytes and "...".
static char *cut(const char *s)
{
    return strlen(s) <= 255 ? strdup(s) : concat(strndup(s, 252), "...");
}

Test(options, malformed_values_exit_2_with_one_line, .timeout = 120)
{
    fixtures();
    build_table();
    for (size_t i = 0; i < ntable; i++)
        if (!table[i].shown) { // the temporary-name case
            table[i].shown = cut(table[i].value);
            char *w = concat("cannot write ", cut(table[i].value));
            table[i].why = concat(w, ": File name too long");
        }
    cr_assert_geq(ntable, 60, "the table has %zu entries", ntable);
    // Every variable in the table at least once (the list the library has).
    static const char *const vars[] = {
        "AOSHIM_ENABLE",      "AOSHIM_OFFLOAD_LAYERS", "AOSHIM_PREFETCH", "AOSHIM_MIN_BYTES",
        "AOSHIM_HOST_LIMIT",  "AOSHIM_VERBOSE",        "AOSHIM_QUIET",    "AOSHIM_REPORT",
        "AOSHIM_TRACE",       "AOSHIM_REPORT_HTML",    "AOSHIM_STACKS",   "AOSHIM_CHECK",
        "AOSHIM_CONTROL_LOG", "AOSHIM_TORCH",          "AOSHIM_SCHEDULE", "AOSHIM_RECORD"};
    for (size_t v = 0; v < sizeof vars / sizeof *vars; v++) {
        size_t n = 0;
        for (size_t i = 0; i < ntable; i++)
            n += strcmp(table[i].var, vars[v]) == 0;
        cr_expect_geq(n, 2, "%s: %zu malformed values in the table", vars[v], n);
    }
    size_t failed = 0;
    for (size_t i = 0; i < ntable; i++) {
        const bad_t *b = &table[i];
        run_t r;
        run_echo(&r, b->var, b->value);
        const char *why = b->why ? b->why : accepted(b->var);
        cr_assert(why, "%s: no accepted text", b->var);
        char want[2048], pid[16];
        snprintf(pid, sizeof pid, "%d", (int)r.pid);
        // @P: the child's pid (the %p case).
        char whyp[1024];
        const char *at = strstr(why, "@P");
        if (at)
            snprintf(whyp, sizeof whyp, "%.*s%s%s", (int)(at - why), why, pid, at + 2);
        else
            snprintf(whyp, sizeof whyp, "%s", why);
        snprintf(want, sizeof want, "aoshim: error: %s='%s': %s\n", b->var, b->shown, whyp);
        bool ok = r.status == 2 && strcmp(r.err, want) == 0 && r.out[0] == '\0';
        cr_expect_eq(r.status, 2, "#%zu %s: exit %d", i, b->var, r.status);
        cr_expect_str_eq(r.err, want, "#%zu %s:\ngot:  %s\nwant: %s", i, b->var, r.err, want);
        cr_expect_str_eq(r.out, "", "#%zu %s: the program ran", i, b->var);
        failed += !ok;
    }
    cr_log_info("%zu malformed values, %zu failed", ntable, failed);
    // The checks created nothing: only the fixtures are in the directory.
    DIR *d = opendir(dir);
    cr_assert(d);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    cr_expect_eq(n, 3, "%zu entries in %s: a check created a file", n, dir);
    char p[256];
    const char *names[] = {"fifo", "link", "ro"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        i == 2 ? rmdir(p) : unlink(p);
    }
    rmdir(dir);
}

// A good value of each kind still runs the program, silently: the table
// above fails for the value, not for the harness.
Test(options, good_values_run_the_program)
{
    static const char *const good[][2] = {
        {"AOSHIM_ENABLE", "off"},
        {"AOSHIM_MIN_BYTES", "4096B"},
        {"AOSHIM_MIN_BYTES", "1kib"},
        {"AOSHIM_HOST_LIMIT", "64G"},
        {"AOSHIM_OFFLOAD_LAYERS", "50%"},
        {"AOSHIM_OFFLOAD_LAYERS", "0-11,14"},
        {"AOSHIM_TORCH", "model.layers"},
        {"AOSHIM_REPORT", "/tmp/aoshim-options-%p.json"},
        {"AOSHIM_REPORT", ""},
        {"AOSHIM_CONTROL_LOG", "/dev/null"},
        {"AOSHIM_RECORD", "/tmp/aoshim-options-%p.gz"}, // no CUDA call: no file, no line
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        run_t r;
        run_echo(&r, good[i][0], good[i][1]);
        cr_expect_eq(r.status, 0, "%s=%s: exit %d", good[i][0], good[i][1], r.status);
        cr_expect_str_eq(r.err, "", "%s=%s", good[i][0], good[i][1]);
        cr_expect_str_eq(r.out, "main-ran\n", "%s=%s", good[i][0], good[i][1]);
    }
}
