// SPDX-License-Identifier: MIT
// The emitter (one set of calls, two formats), file-name expansion, and the
// record's bounds, against the core library.
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "report/emitter.h"
#include "report/record.h"
#include "report/report.h"
#include "stats.h"

static char out[65536];

// Run fn with an emitter of format fmt writing into a pipe; return the text.
static const char *emit(ao_emit_fmt_t fmt, void (*fn)(ao_emitter_t *))
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    ao_emitter_t e;
    ao_emit_init(&e, p[1], fmt);
    fn(&e);
    cr_assert(ao_emit_flush(&e));
    close(p[1]);
    ssize_t n = read(p[0], out, sizeof out - 1);
    close(p[0]);
    out[n > 0 ? n : 0] = '\0';
    return out;
}

static const ao_emit_col_t cols[] = {
    {"layer", "layer", 5}, {"bytes", "bytes", 10}, {"ns", "time", 10}};

static void sample(ao_emitter_t *e)
{
    ao_emit_begin(e);
    ao_emit_json(e, "schema_version", AO_U64(1));
    ao_emit_obj_begin(e, "summary");
    ao_emit_kv(e, "peak device memory", "peak", AO_BYTES(3ull << 30));
    ao_emit_row_begin(e, "offloaded / reloaded");
    ao_emit_val(e, NULL, "off", AO_BYTES(1536ull << 20));
    ao_emit_val(e, " / ", "re", AO_BYTES(512));
    ao_emit_row_end(e);
    ao_emit_kv(e, "name", "name", AO_STR("a \"quoted\"\\ name\n"));
    ao_emit_obj_end(e);
    ao_emit_table_begin(e, "layers", "per layer", cols, 3);
    ao_emit_table_row(e, (ao_emit_val_t[]){AO_I64(0), AO_BYTES(1 << 20), AO_NS(1500000)});
    ao_emit_table_row(e, (ao_emit_val_t[]){AO_I64(1), AO_BYTES(0), AO_NS(0)});
    ao_emit_table_end(e);
    ao_emit_arr_begin(e, "list");
    ao_emit_json(e, NULL, AO_I64(-1));
    ao_emit_json(e, NULL, AO_STR(NULL));
    ao_emit_arr_end(e);
    ao_emit_end(e);
}

Test(emitter, text_rows)
{
    const char *t = emit(AO_EMIT_TEXT, sample);
    cr_expect(strstr(t, "aoshim: peak device memory                 3.0 GiB\n"), "%s", t);
    cr_expect(strstr(t, "aoshim: offloaded / reloaded               1.5 GiB / 512 B\n"), "%s", t);
    cr_expect(strstr(t, "aoshim: per layer\naoshim: layer      bytes       time\n"), "%s", t);
    cr_expect(strstr(t, "aoshim:     0    1.0 MiB   1.500 ms\n"), "%s", t);
    cr_expect(strstr(t, "schema_version") == NULL, "a JSON-only value shows in the text");
}

Test(emitter, json_is_the_same_numbers)
{
    const char *j = emit(AO_EMIT_JSON, sample);
    cr_expect(strstr(j, "\"schema_version\": 1"), "%s", j);
    cr_expect(strstr(j, "\"peak\": 3221225472"), "%s", j);
    cr_expect(strstr(j, "\"off\": 1610612736,"), "%s", j);
    cr_expect(strstr(j, "\"re\": 512"), "%s", j);
    cr_expect(strstr(j, "\"name\": \"a \\\"quoted\\\"\\\\ name\\u000a\""), "%s", j);
    cr_expect(strstr(j, "\"layer\": 0,"), "%s", j);
    cr_expect(strstr(j, "\"ns\": 1500000"), "%s", j);
    cr_expect(strstr(j, "-1,"), "%s", j);
    cr_expect(strstr(j, "null"), "%s", j);
    // Parses as JSON (python3 is a build dependency).
    FILE *p = popen("python3 -c 'import json,sys; d=json.load(sys.stdin); "
                    "assert d[\"layers\"][1][\"bytes\"] == 0 and d[\"list\"] == [-1, None]'",
                    "w");
    cr_assert(p);
    fputs(j, p);
    cr_expect_eq(pclose(p), 0, "not valid JSON:\n%s", j);
}

// A string that is not UTF-8 (a command line, a file or symbol name) still
// makes valid JSON: each stray byte a U+FFFD; valid characters kept whole.
static void bad_utf8(ao_emitter_t *e)
{
    ao_emit_begin(e);
    ao_emit_arr_begin(e, "command_line");
    ao_emit_json(e, NULL, AO_STR("train\xffstep"));
    ao_emit_json(e, NULL, AO_STR("caf\xc3\xa9 \xf0\x9f\x98\x80 \xed\xa0\x80 \xc0\xaf \xc3"));
    ao_emit_arr_end(e);
    ao_emit_json(e, "k\xfe", AO_U64(1));
    ao_emit_end(e);
}

Test(emitter, invalid_utf8_is_replaced)
{
    const char *j = emit(AO_EMIT_JSON, bad_utf8);
    cr_expect(strstr(j, "\"train\\ufffdstep\""), "%s", j);
    cr_expect(strstr(j, "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \\ufffd\\ufffd\\ufffd \\ufffd\\ufffd "
                        "\\ufffd\""),
              "%s", j);
    cr_expect(strstr(j, "\"k\\ufffd\": 1"), "%s", j);
    // Strict: the bytes decode as UTF-8 and the text parses as JSON.
    FILE *p = popen("python3 -c 'import json,sys; d=json.loads(sys.stdin.buffer.read()"
                    ".decode(\"utf-8\")); assert d[\"command_line\"][0] == \"train\\ufffdstep\"'",
                    "w");
    cr_assert(p);
    fputs(j, p);
    cr_expect_eq(pclose(p), 0, "not valid UTF-8 JSON:\n%s", j);
}

static void html_bad_utf8(ao_emitter_t *e)
{
    ao_emit_escaped(e, "<a\xff>", true);
    ao_emit_flush(e);
}

Test(emitter, invalid_utf8_in_html_is_replaced)
{
    cr_expect_str_eq(emit(AO_EMIT_TEXT, html_bad_utf8), "&lt;a\xef\xbf\xbd&gt;");
}

Test(report_path, expands_pid_rank_host)
{
    char buf[512], want[512], host[256] = "";
    gethostname(host, sizeof host - 1);
    setenv("RANK", "3", 1);
    cr_assert(ao_report_path("/tmp/r%r-%p-%h-%%-%x.json", buf, sizeof buf));
    snprintf(want, sizeof want, "/tmp/r3-%d-%s-%%-%%x.json", (int)getpid(), host);
    cr_expect_str_eq(buf, want);
    unsetenv("RANK");
    setenv("LOCAL_RANK", "5", 1);
    cr_assert(ao_report_path("r%r", buf, sizeof buf));
    cr_expect_str_eq(buf, "r5");
    unsetenv("LOCAL_RANK");
    cr_assert(ao_report_path("r%r", buf, sizeof buf));
    cr_expect_str_eq(buf, "r0");
    cr_expect(!ao_report_path("/tmp/%p%p%p%p", buf, 8), "a name past the buffer must fail");
}

Test(config, report_paths_parse)
{
    ao_config_t cfg;
    char err[256];
    char *env[] = {"AOSHIM_REPORT=/tmp/x-%p.json", NULL};
    cr_assert_eq(ao_config_load(&cfg, env, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(cfg.report, "/tmp/x-%p.json");
    cr_expect_null(cfg.trace);
    cr_expect_null(cfg.report_html);
    cr_expect(cfg.stacks);
    cr_expect_eq(ao_config_set(&cfg, "TRACE", "/tmp/t.json", err, sizeof err), 0);
    cr_expect_eq(ao_config_set(&cfg, "TRACE", "", err, sizeof err), 0, "empty is no file");
    cr_expect_null(cfg.trace);
    cr_expect_eq(ao_config_set(&cfg, "STACKS", "0", err, sizeof err), 0);
    cr_expect(!cfg.stacks);
}

// However many memory events, the timeline stays within its bound and its
// highest point is the stats' peak.
Test(record, timeline_bounded_and_keeps_the_peak)
{
    ao_config.stacks = false;
    uint64_t peak = 0;
    for (int i = 0; i < 200000; i++) {
        int64_t d = (i % 7 == 3) ? (int64_t)(i % 1000 + 1) << 20 : 0;
        ao_stat_device(0, d, d);
        ao_rec_memory(i % 16, d, 0);
        ao_stat_device(0, -d, -d);
        ao_rec_memory(i % 16, -d, 0);
        uint64_t p = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
        if (p > peak) peak = p;
        if (i % 1000 == 999) ao_rec_step();
    }
    bool locked = ao_rec_lock_for_report();
    ao_rec_finish_locked();
    cr_expect_leq(ao_rec.ntl, AO_TL_MAX);
    uint64_t top = 0;
    for (int i = 0; i < ao_rec.ntl; i++)
        if (ao_rec.tl[i].peak > top) top = ao_rec.tl[i].peak;
    cr_expect_eq(top, peak, "timeline max %llu, peak %llu", (unsigned long long)top,
                 (unsigned long long)peak);
    cr_expect_eq(ao_rec.nstep, 200);
    cr_expect_leq(ao_rec.nsteps, AO_STEPS_MAX);
    ao_rec_unlock(locked);
}

// --- report files: never written through anything but a regular file ----------------
static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/aoshim-report-unit.XXXXXX");
    cr_assert(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)system(cmd);
}

static void write_report(int fd)
{
    static const char text[] = "{\"report\": 1}\n";
    (void)!write(fd, text, sizeof text - 1);
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static char *get_file(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

// The names in dir, sorted, space-separated.
static char *names_in(const char *d, char *buf, size_t size)
{
    char *names[64];
    int n = 0;
    DIR *dp = opendir(d);
    cr_assert(dp);
    for (struct dirent *de; (de = readdir(dp)) && n < 64;)
        if (de->d_name[0] != '.' || (de->d_name[1] && (de->d_name[1] != '.' || de->d_name[2])))
            names[n++] = strdup(de->d_name);
    closedir(dp);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j], names[j] = t;
            }
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i ? " " : "", names[i]);
        free(names[i]);
    }
    return buf;
}

// A symlink planted at the temporary name (an attacker who can guess it):
// the open fails rather than following it, the next name is taken, the
// link's target is untouched and the report is written.
Test(report_file, symlink_at_the_temporary_name)
{
    make_dir();
    char path[128], target[128], tmp[4200], buf[256];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(target, sizeof target, "%s/precious", dir);
    put_file(target, "precious\n");
    cr_assert(ao_report_tmp_name(path, 0, tmp, sizeof tmp));
    cr_assert_eq(symlink(target, tmp), 0);
    // Tomorrow's name differs: a pid and random bits, not just the name.
    char tmp1[4200];
    cr_assert(ao_report_tmp_name(path, 1, tmp1, sizeof tmp1));
    cr_expect_str_neq(tmp, tmp1);
    cr_expect(strncmp(tmp, path, strlen(path)) == 0, "%s", tmp);

    cr_assert(ao_report_write("AOSHIM_REPORT", path, write_report));
    cr_expect_str_eq(get_file(target, buf, sizeof buf), "precious\n", "the target was written");
    cr_expect_str_eq(get_file(path, buf, sizeof buf), "{\"report\": 1}\n");
    struct stat st;
    cr_expect(lstat(tmp, &st) == 0 && S_ISLNK(st.st_mode), "the planted link was replaced");
    // Nothing else left behind: the report, the target, the planted link.
    char want[256], got[512];
    const char *base = strrchr(tmp, '/') + 1;
    snprintf(want, sizeof want, "precious r.json %s", base);
    cr_expect_str_eq(names_in(dir, got, sizeof got), want);
    remove_dir();
}

// A symlink at the report's own name: refused with one warning, the link
// and its target untouched.
Test(report_file, symlink_at_the_final_name)
{
    make_dir();
    char path[128], target[128], buf[256];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(target, sizeof target, "%s/precious", dir);
    put_file(target, "precious\n");
    cr_assert_eq(symlink(target, path), 0);
    cr_redirect_stderr();
    cr_expect(!ao_report_write("AOSHIM_REPORT", path, write_report));
    cr_expect(!ao_report_write("AOSHIM_REPORT", path, write_report)); // said once per variable
    cr_expect_str_eq(get_file(target, buf, sizeof buf), "precious\n", "the target was written");
    struct stat st;
    cr_expect(lstat(path, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
    char got[512];
    cr_expect_str_eq(names_in(dir, got, sizeof got), "precious r.json", "a temporary left behind");
    char want[300];
    snprintf(want, sizeof want,
             "aoshim: warning: AOSHIM_REPORT: cannot write %s: it is a symbolic link; only a "
             "regular file is replaced\n",
             path);
    fflush(stderr);
    cr_expect_stderr_eq_str(want);
    remove_dir();
}

// A FIFO with no reader would block open(2) forever: it is never opened
// (the timeout fails the test if it is). A directory and a device are
// refused the same way.
Test(report_file, fifo_directory_device_refused, .timeout = 10)
{
    make_dir();
    char fifo[128], sub[128];
    snprintf(fifo, sizeof fifo, "%s/r.fifo", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_redirect_stderr();
    cr_expect(!ao_report_write("AOSHIM_REPORT", fifo, write_report));
    cr_expect(!ao_report_write("AOSHIM_TRACE", sub, write_report));
    cr_expect(!ao_report_write("AOSHIM_REPORT_HTML", "/dev/null", write_report));
    struct stat st;
    cr_expect(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    cr_expect(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null was replaced");
    char got[512];
    cr_expect_str_eq(names_in(dir, got, sizeof got), "r.fifo sub");
    cr_expect_str_eq(names_in(sub, got, sizeof got), "");
    char want[1024];
    snprintf(want, sizeof want,
             "aoshim: warning: AOSHIM_REPORT: cannot write %s: it is a FIFO; only a regular file "
             "is replaced\n"
             "aoshim: warning: AOSHIM_TRACE: cannot write %s: it is a directory; only a regular "
             "file is replaced\n"
             "aoshim: warning: AOSHIM_REPORT_HTML: cannot write /dev/null: it is a character "
             "device; only a regular file is replaced\n",
             fifo, sub);
    fflush(stderr);
    cr_expect_stderr_eq_str(want);
    remove_dir();
}

// A regular file at the name is replaced whole (a new inode: a reader that
// has the old one open keeps the old report), and nothing else is left.
Test(report_file, regular_file_replaced)
{
    make_dir();
    char path[128], buf[256], got[512];
    snprintf(path, sizeof path, "%s/r.json", dir);
    put_file(path, "an old report, longer than the new one\n");
    cr_assert(ao_report_write("AOSHIM_REPORT", path, write_report));
    cr_expect_str_eq(get_file(path, buf, sizeof buf), "{\"report\": 1}\n");
    cr_expect_str_eq(names_in(dir, got, sizeof got), "r.json");
    remove_dir();
}
