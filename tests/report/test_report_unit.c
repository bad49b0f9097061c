// SPDX-License-Identifier: MIT
// The emitter (one set of calls, two formats), file-name expansion, and the
// record's bounds, against the core library.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    cr_expect_eq(ao_config_set(&cfg, "TRACE", "", err, sizeof err), -1);
    cr_expect(strstr(err, "aoshim: error: AOSHIM_TRACE='': a file name"), "%s", err);
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
