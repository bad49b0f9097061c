// SPDX-License-Identifier: MIT
// AOSHIM_RECORD, end to end: the step trace a real program leaves
// (docs/trace-format.md), with aoshim offloading and with AOSHIM_ENABLE=0.
//
//  - record_paths (record_paths.c) makes one call of each kind, by runtime,
//    exported driver symbol and driver entry point, and prints the record
//    each must leave: the trace holds exactly those, in that order, and its
//    declarations;
//  - train_step: every allocation freed once and only once, the peak the
//    allocations reach (at the simulator's 4 KiB page) the peak of the same
//    run without aoshim, as many launch records as the simulator ran
//    launches, each naming a live allocation, one timed launch in 64 of
//    each kernel with its duration, and the layer records the control
//    calls the control log saw;
//  - a bad file name stops the program at start with one line; a process
//    that never calls CUDA writes no file; a forked child writes none and
//    leaves its parent's whole; a killed process leaves a trace that reads
//    back to its last step.
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "e2e_run.h"

// --- reading a trace ---------------------------------------------------------------------
// libz's gzread reads gzip and plain files alike (as a trace reader must).
typedef struct gz_s {
    void *(*open)(const char *, const char *);
    int (*read)(void *, void *, unsigned);
    int (*close)(void *);
} gz_t;

static bool have_zlib(gz_t *z)
{
    void *h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    z->open = (void *(*)(const char *, const char *))dlsym(h, "gzopen");
    z->read = (int (*)(void *, void *, unsigned))dlsym(h, "gzread");
    z->close = (int (*)(void *))dlsym(h, "gzclose");
    return z->open && z->read && z->close;
}

typedef struct trace_s {
    char *text;  // the whole trace, lines split in place
    char **line; // its lines
    size_t nline;
    bool gzip; // the file began with gzip's magic
    bool cut;  // the compressed stream ended early (a killed process)
} trace_t;

static void read_trace(trace_t *t, const char *path)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "no trace at %s", path);
    unsigned char magic[2] = {0, 0};
    size_t m = fread(magic, 1, 2, f);
    fclose(f);
    t->gzip = m == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    gz_t z;
    size_t len = 0, cap = 1 << 20;
    t->text = malloc(cap);
    if (have_zlib(&z)) {
        void *g = z.open(path, "rb");
        cr_assert(g, "gzopen %s", path);
        for (;;) {
            if (cap - len < (1 << 16)) t->text = realloc(t->text, cap *= 2);
            int n = z.read(g, t->text + len, (unsigned)(cap - len - 1));
            if (n < 0) t->cut = true;
            if (n <= 0) break;
            len += (size_t)n;
        }
        z.close(g);
    } else {
        cr_assert(!t->gzip, "a gzip trace and no libz.so.1 to read it");
        free(t->text);
        t->text = e2e_slurp(path);
        len = strlen(t->text);
    }
    t->text[len] = '\0';
    size_t lcap = 1024;
    t->line = malloc(lcap * sizeof *t->line);
    for (char *p = t->text; *p;) {
        char *eol = strchr(p, '\n');
        if (!eol) { // a last line cut short (a killed process): not a record
            t->cut = true;
            break;
        }
        *eol = '\0';
        if (t->nline == lcap) t->line = realloc(t->line, (lcap *= 2) * sizeof *t->line);
        t->line[t->nline++] = p;
        p = eol + 1;
    }
}

static void free_trace(trace_t *t)
{
    free(t->text);
    free(t->line);
}

static bool is_kind(const char *line, const char *kind)
{
    size_t n = strlen(kind);
    return strncmp(line, kind, n) == 0 && (line[n] == ' ' || line[n] == '\0');
}

// The value of key= in a record (up to the next space, copied), or NULL.
static const char *field(const char *line, const char *key, char *out, size_t size)
{
    size_t n = strlen(key);
    for (const char *p = strchr(line, ' '); p; p = strchr(p + 1, ' ')) {
        if (strncmp(p + 1, key, n) == 0 && p[1 + n] == '=') {
            const char *v = p + 2 + n;
            size_t k = strcspn(v, " ");
            if (k >= size) k = size - 1;
            memcpy(out, v, k);
            out[k] = '\0';
            return out;
        }
    }
    return NULL;
}

static uint64_t num(const char *line, const char *key)
{
    char v[64];
    cr_assert(field(line, key, v, sizeof v), "no %s= in: %s", key, line);
    return strtoull(v, NULL, 0);
}

// The record without its host time, thread and timing sample: what a run
// of the same program always writes.
static void canonical(const char *line, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = line; *p;) {
        size_t k = strcspn(p, " ");
        bool drop = p != line && (strncmp(p, "t=", 2) == 0 || strncmp(p, "tid=", 4) == 0 ||
                                  strncmp(p, "sample=", 7) == 0);
        if (!drop && n + k + 2 < size) {
            if (n) out[n++] = ' ';
            memcpy(out + n, p, k);
            n += k;
        }
        p += k;
        while (*p == ' ')
            p++;
    }
    out[n] = '\0';
}

static bool is_declaration(const char *line)
{
    return is_kind(line, "kernel") || is_kind(line, "stream") || is_kind(line, "event") ||
           is_kind(line, "meta") || is_kind(line, "sample") || is_kind(line, "aoshim-trace") ||
           is_kind(line, "end");
}

// The header, the facts, the end; gzip when the system has a libz.
static void check_frame_z(const trace_t *t, const char *enable, bool zlib)
{
    cr_assert_geq(t->nline, 3);
    cr_expect_str_eq(t->line[0], "aoshim-trace 1");
    cr_expect(strncmp(t->line[1], "meta source=record ", 19) == 0, "%s", t->line[1]);
    char v[16];
    cr_expect(field(t->line[1], "enable", v, sizeof v) && strcmp(v, enable) == 0, "%s", t->line[1]);
    cr_expect(is_kind(t->line[t->nline - 1], "end"), "last: %s", t->line[t->nline - 1]);
    cr_expect(!t->cut, "the trace ends early");
    if (zlib)
        cr_expect(t->gzip, "libz.so.1 is here but the trace is not gzip");
    else
        cr_expect(!t->gzip, "no libz.so.1 and yet a gzip trace");
    size_t notes = 0;
    for (size_t i = 0; i < t->nline; i++)
        notes += strcmp(t->line[i], "meta note=uncompressed:%20no%20libz.so.1") == 0;
    cr_expect_eq(notes, zlib ? 0 : 1, "%zu notes that the trace is not compressed", notes);
}

static void check_frame(const trace_t *t, const char *enable)
{
    gz_t z;
    check_frame_z(t, enable, have_zlib(&z));
}

// Each `sample` names a timed launch before or after it, once; its duration
// is the simulated kernel's. Returns the number of timed launches.
static size_t check_samples(const trace_t *t)
{
    size_t timed = 0, samples = 0;
    char v[32];
    for (size_t i = 0; i < t->nline; i++) {
        if (is_kind(t->line[i], "launch") && field(t->line[i], "sample", v, sizeof v)) {
            timed++;
            uint64_t id = strtoull(v, NULL, 10);
            size_t found = 0;
            for (size_t j = 0; j < t->nline; j++)
                if (is_kind(t->line[j], "sample") && num(t->line[j], "id") == id) {
                    found++;
                    cr_expect_gt(num(t->line[j], "dur"), 0, "%s", t->line[j]);
                }
            cr_expect_eq(found, 1, "sample %" PRIu64 ": %zu sample records", id, found);
        }
        samples += is_kind(t->line[i], "sample");
    }
    cr_expect_eq(samples, timed, "%zu sample records, %zu timed launches", samples, timed);
    return timed;
}

static char *trace_path(char *out, size_t size, const char *dir, const char *name)
{
    snprintf(out, size, "%s/%s", dir, name);
    return out;
}

// --- every kind of call --------------------------------------------------------------------
// nozlib: with a libz.so.1 that has no zlib in it first on the library path.
static void paths(const char *enable, bool nozlib)
{
    char dir[128], path[256], var[300], en[32], lib[600];
    e2e_make_dir(dir, sizeof dir, "record");
    trace_path(path, sizeof path, dir, "paths.gz");
    snprintf(var, sizeof var, "AOSHIM_RECORD=%s", path);
    snprintf(en, sizeof en, "AOSHIM_ENABLE=%s", enable);
    const char *env[] = {var, en, "AOSHIM_QUIET=1", NULL, NULL};
    if (nozlib) {
        snprintf(lib, sizeof lib, "LD_LIBRARY_PATH=%s:%s", e2e_path("AO_TEST_NO_ZLIB_DIR"),
                 e2e_path("SIM_DIR"));
        env[3] = lib;
    }
    const char *argv[] = {e2e_path("AO_TEST_RECORD_PATHS"), NULL};
    e2e_result_t r;
    e2e_run(&r, true, env, argv);
    cr_assert_eq(r.status, 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "record_paths ok=1\n"), "%s", r.out);
    gz_t z;
    bool zlib = !nozlib && have_zlib(&z);
    if (zlib) {
        cr_expect_str_eq(r.err, "", "stderr:\n%s", r.err);
    } else {
        char want[400];
        snprintf(want, sizeof want,
                 "aoshim: warning: AOSHIM_RECORD: no libz.so.1: the step trace %s is written "
                 "uncompressed\n",
                 path);
        cr_expect_str_eq(r.err, want, "said once, and nothing else");
    }
    trace_t t;
    read_trace(&t, path);
    check_frame_z(&t, enable, zlib);

    // The declarations, each once, as the program said.
    size_t expected = 0;
    for (const char *p = r.out; (p = strstr(p, "declare ")) != NULL; p++) {
        if (p != r.out && p[-1] != '\n') continue;
        char want[512];
        size_t k = strcspn(p + 8, "\n");
        snprintf(want, sizeof want, "%.*s", (int)k, p + 8);
        size_t n = 0;
        for (size_t i = 0; i < t.nline; i++)
            n += strcmp(t.line[i], want) == 0;
        cr_expect_eq(n, 1, "declaration '%s' %zu times in the trace", want, n);
    }
    // The records, in order, exactly.
    size_t at = 0;
    for (const char *p = r.out; (p = strstr(p, "expect ")) != NULL; p++) {
        if (p != r.out && p[-1] != '\n') continue;
        char want[512], got[512];
        size_t k = strcspn(p + 7, "\n");
        snprintf(want, sizeof want, "%.*s", (int)k, p + 7);
        while (at < t.nline && is_declaration(t.line[at]))
            at++;
        cr_assert_lt(at, t.nline, "the trace ends before '%s'", want);
        canonical(t.line[at++], got, sizeof got);
        cr_expect_str_eq(got, want, "record %zu", expected);
        expected++;
    }
    while (at < t.nline && is_declaration(t.line[at]))
        at++;
    cr_expect_eq(at, t.nline, "a record the program did not make: %s",
                 at < t.nline ? t.line[at] : "");
    cr_expect_eq(expected, 39, "%zu expected records: record_paths.c makes 39", expected);
    // Both kernels' first launches are timed (the first of each in 64).
    cr_expect_eq(check_samples(&t), 2);
    free_trace(&t);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

Test(record, every_kind_of_call, .timeout = 60)
{
    paths("1", false);
}

Test(record, every_kind_of_call_enable_0, .timeout = 60)
{
    paths("0", false);
}

// No libz.so.1 to be had: the same trace, as plain text, said once.
Test(record, every_kind_of_call_without_zlib, .timeout = 60)
{
    paths("1", true);
}

// --- a training step ---------------------------------------------------------------------------
#define TRAIN_ARGS "--steps 4 --layers 6"

typedef struct live_s {
    uint64_t addr, size;
} live_t;

static int live_find(const live_t *l, size_t n, uint64_t a)
{
    for (size_t i = 0; i < n; i++)
        if (l[i].addr == a) return (int)i;
    return -1;
}

static bool live_inside(const live_t *l, size_t n, uint64_t a)
{
    for (size_t i = 0; i < n; i++)
        if (a >= l[i].addr && a - l[i].addr < l[i].size) return true;
    return false;
}

// A control log line ("layer_begin 3 0") as the trace's layer record says it.
static void as_ctllog(const char *line, char *out, size_t size)
{
    char op[32] = "", layer[16] = "-1", mb[16] = "-1";
    field(line, "op", op, sizeof op);
    field(line, "layer", layer, sizeof layer);
    field(line, "mb", mb, sizeof mb);
    static const char *const names[][2] = {{"begin", "layer_begin"},
                                           {"end", "layer_end"},
                                           {"backward_begin", "backward_begin"},
                                           {"backward_end", "backward_end"},
                                           {"step_end", "step_end"},
                                           {"microbatch", "set_microbatch"},
                                           {"offload", "offload_layer"},
                                           {"release", "release_layer"},
                                           {"reload", "reload_layer"},
                                           {"schedule", "set_schedule"}};
    const char *name = op;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(op, names[i][0]) == 0) name = names[i][1];
    if (strcmp(op, "schedule") == 0) field(line, "value", layer, sizeof layer);
    snprintf(out, size, "%s %s %s", name, layer, mb);
}

static void train(const char *enable)
{
    // The same run without aoshim: its peak is what the allocations reach.
    e2e_result_t base;
    e2e_train(&base, false, NULL, TRAIN_ARGS);
    cr_assert(base.have_line && strcmp(base.ts_status, "ok") == 0, "%s", base.out);

    char dir[128], path[256], var[300], en[32], ctl[300], ctlvar[320];
    e2e_make_dir(dir, sizeof dir, "record");
    snprintf(var, sizeof var, "AOSHIM_RECORD=%s/train.%%p.gz", dir);
    snprintf(ctl, sizeof ctl, "%s/ctl.log", dir);
    snprintf(ctlvar, sizeof ctlvar, "AOSHIM_CONTROL_LOG=%s", ctl);
    snprintf(en, sizeof en, "AOSHIM_ENABLE=%s", enable);
    const char *env[] = {var, en, ctlvar, "AOSHIM_OFFLOAD_LAYERS=all", "SIM_QUIET=0", NULL};
    e2e_result_t r;
    e2e_train(&r, true, env, TRAIN_ARGS);
    cr_assert(r.have_line && strcmp(r.ts_status, "ok") == 0, "%s\n%s", r.out, r.err);
    cr_expect_str_eq(r.checksum, base.checksum, "the bytes changed under aoshim");
    uint64_t launches = 0;
    cr_assert(e2e_kv(r.err, "simgpu: ", "launches", &launches), "%s", r.err);
    const char *pl = strstr(r.out, "launches in the run");
    cr_assert(pl, "%s", r.out);
    while (pl > r.out && pl[-1] != ' ')
        pl--;
    while (pl > r.out && pl[-1] == ' ')
        pl--;
    while (pl > r.out && pl[-1] >= '0' && pl[-1] <= '9')
        pl--;
    uint64_t ts_launches = strtoull(pl, NULL, 10);
    cr_expect_eq(ts_launches, launches, "train_step and the simulator disagree");

    // One trace, named with the program's pid.
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s/train.*.gz", dir);
    FILE *ls = popen(cmd, "r");
    cr_assert(ls && fgets(path, sizeof path, ls), "no trace in %s", dir);
    path[strcspn(path, "\n")] = '\0';
    char extra[256];
    cr_expect(!fgets(extra, sizeof extra, ls), "a second trace: %s", extra);
    pclose(ls);

    trace_t t;
    read_trace(&t, path);
    check_frame(&t, enable);

    size_t cap = 4096, nlive = 0;
    live_t *live = calloc(cap, sizeof *live);
    uint64_t cur = 0, peak = 0, nalloc = 0, nfree = 0, nlaunch = 0, nmemset = 0, ncopy = 0;
    uint64_t declared_k = 0, kcount[256] = {0};
    bool declared_s[64] = {true, true};
    char v[64];
    for (size_t i = 0; i < t.nline; i++) {
        const char *l = t.line[i];
        if (is_kind(l, "kernel")) {
            cr_expect_eq(num(l, "id"), declared_k + 1, "%s", l);
            declared_k = num(l, "id");
        } else if (is_kind(l, "stream")) {
            uint64_t id = num(l, "id");
            cr_assert_lt(id, 64);
            declared_s[id] = true;
        } else if (is_kind(l, "alloc")) {
            nalloc++;
            cr_expect(field(l, "api", v, sizeof v) && strcmp(v, "cudaMallocAsync") == 0, "%s", l);
            uint64_t a = num(l, "addr"), n = num(l, "size");
            cr_expect_eq(live_find(live, nlive, a), -1, "allocated twice: %s", l);
            if (nlive == cap) live = realloc(live, (cap *= 2) * sizeof *live);
            live[nlive++] = (live_t){a, n};
            cur += (n + 4095) & ~4095ull; // the simulator's page
            if (cur > peak) peak = cur;
        } else if (is_kind(l, "free")) {
            nfree++;
            int k = live_find(live, nlive, num(l, "addr"));
            cr_expect_geq(k, 0, "freed and not live: %s", l);
            if (k < 0) continue;
            cur -= (live[k].size + 4095) & ~4095ull;
            live[k] = live[--nlive];
        } else if (is_kind(l, "launch")) {
            nlaunch++;
            uint64_t k = num(l, "k"), s = num(l, "s");
            cr_expect(k >= 1 && k <= declared_k, "kernel not declared before: %s", l);
            cr_expect(s < 64 && declared_s[s], "stream not declared before: %s", l);
            if (k < 256) kcount[k]++;
            // Every train_step kernel takes its buffers' addresses.
            bool hit = false;
            const char *p = strstr(l, " ptr=");
            cr_assert(p, "no pointer words: %s", l);
            for (p += 5; *p && *p != ' ';) {
                char *end;
                uint64_t w = strtoull(p, &end, 16);
                hit = hit || live_find(live, nlive, w) >= 0;
                p = *end == ',' ? end + 1 : end;
            }
            cr_expect(hit, "no live allocation among the words: %s", l);
        } else if (is_kind(l, "memset")) {
            nmemset++;
            cr_expect(live_inside(live, nlive, num(l, "dst")), "set of no live allocation: %s", l);
        } else if (is_kind(l, "copy")) {
            ncopy++;
            cr_expect(field(l, "kind", v, sizeof v) && strcmp(v, "d2h") == 0, "%s", l);
            cr_expect(live_inside(live, nlive, num(l, "src")), "copy of no live allocation: %s", l);
        }
    }
    cr_expect_gt(nalloc, 100);
    cr_expect_eq(nalloc, nfree, "%" PRIu64 " allocations, %" PRIu64 " frees", nalloc, nfree);
    cr_expect_eq(nlive, 0, "%zu allocations alive at the end (train_step frees all)", nlive);
    // The trace's allocations are counted as the simulator counts them (by
    // the page), so their peak is what was allocated at the device's peak
    // without aoshim: its peak less the pool's slack then (the driver's pool
    // keeps freed temporaries until a sync, and the device's count holds
    // them), and never above the device's count.
    cr_expect_eq(peak, base.peak - base.pool_slack,
                 "the allocations' peak %" PRIu64
                 ", allocated at the device's peak without aoshim %" PRIu64 " (%" PRIu64
                 " less the pool's slack %" PRIu64 ")",
                 peak, base.peak - base.pool_slack, base.peak, base.pool_slack);
    cr_expect_leq(peak, base.peak, "above the device's count %" PRIu64, base.peak);
    cr_expect_eq(nlaunch, launches, "%" PRIu64 " launch records, the simulator ran %" PRIu64,
                 nlaunch, launches);
    cr_expect_gt(nmemset, 0);
    cr_expect_gt(ncopy, 0);
    // One launch in 64 of each kernel timed, from its first.
    uint64_t want_timed = 0;
    for (uint64_t k = 1; k <= declared_k && k < 256; k++)
        want_timed += (kcount[k] + 63) / 64;
    cr_expect_eq(check_samples(&t), want_timed);

    // The layer records are the control calls, in order. Each names the
    // stream train_step set for its control calls (aoshim_set_stream, its
    // one stream of its own): replayed without it, the calls referred to the
    // legacy stream, where aoshim timed the host's waits as the layers'.
    uint64_t own = 0;
    for (size_t i = 0; i < t.nline && !own; i++)
        if (is_kind(t.line[i], "stream")) own = num(t.line[i], "id");
    cr_assert_gt(own, 1, "no stream of train_step's own declared");
    char *log = e2e_slurp(ctl);
    cr_assert(log, "no control log");
    size_t nlayer = 0;
    const char *lp = log;
    for (size_t i = 0; i < t.nline; i++) {
        if (!is_kind(t.line[i], "layer")) continue;
        char op[32] = "";
        field(t.line[i], "op", op, sizeof op);
        if (strcmp(op, "microbatch") != 0)
            cr_expect(field(t.line[i], "s", v, sizeof v) && strtoull(v, NULL, 10) == own,
                      "not on stream %" PRIu64 ": %s", own, t.line[i]);
        char got[128], want[128];
        as_ctllog(t.line[i], got, sizeof got);
        size_t k = strcspn(lp, "\n");
        snprintf(want, sizeof want, "%.*s", (int)k, lp);
        cr_expect_str_eq(got, want, "layer record %zu: %s", nlayer, t.line[i]);
        lp += k + (lp[k] == '\n');
        nlayer++;
    }
    cr_expect_eq(*lp, '\0', "control calls the trace lacks: %s", lp);
    cr_expect_gt(nlayer, 4 * 6 * 4, "%zu layer records", nlayer);
    free(log);
    free(live);
    free_trace(&t);
    e2e_free(&r);
    e2e_free(&base);
    e2e_remove_dir(dir);
}

Test(record, train_step_offloading, .timeout = 240)
{
    train("1");
}

Test(record, train_step_enable_0, .timeout = 240)
{
    train("0");
}

// --- files --------------------------------------------------------------------------------------
Test(record, bad_file_name_stops_the_program, .timeout = 60)
{
    char dir[128], var[300], want[600];
    e2e_make_dir(dir, sizeof dir, "record");
    const char *bad[][2] = {
        {"/nonexistent-aoshim/t.gz",
         "cannot write /nonexistent-aoshim/t.gz: No such file or directory"},
        {dir, "it is a directory; only a regular file or a device is written"},
    };
    for (size_t i = 0; i < 2; i++) {
        snprintf(var, sizeof var, "AOSHIM_RECORD=%s", bad[i][0]);
        const char *env[] = {var, NULL};
        e2e_result_t r;
        e2e_train(&r, true, env, "--steps 1 --layers 2");
        if (i == 0)
            snprintf(want, sizeof want, "aoshim: error: AOSHIM_RECORD='%s': %s\n", bad[i][0],
                     bad[i][1]);
        else
            snprintf(want, sizeof want, "aoshim: error: AOSHIM_RECORD='%s': cannot write %s: %s\n",
                     bad[i][0], bad[i][0], bad[i][1]);
        cr_expect_eq(r.status, 2, "%s: exit %d", bad[i][0], r.status);
        cr_expect_str_eq(r.err, want);
        cr_expect_str_eq(r.out, "", "the program ran");
        e2e_free(&r);
    }
    e2e_remove_dir(dir);
}

Test(record, no_cuda_no_file, .timeout = 30)
{
    char dir[128], path[256], var[300];
    e2e_make_dir(dir, sizeof dir, "record");
    trace_path(path, sizeof path, dir, "none.gz");
    snprintf(var, sizeof var, "AOSHIM_RECORD=%s", path);
    const char *env[] = {var, NULL};
    const char *argv[] = {"/bin/sh", "-c", "exit 0", NULL};
    e2e_result_t r;
    e2e_run(&r, true, env, argv);
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.err, "");
    struct stat st;
    cr_expect_neq(stat(path, &st), 0, "a process that never called CUDA wrote %s", path);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// life fork: 200 children forked while another thread records control
// calls (and so holds the trace's locks a good share of the time). No child
// hangs or writes a trace of its own (the name has %p); the parent's trace
// is whole.
Test(record, forked_children_write_nothing, .timeout = 120)
{
    char dir[128], var[300];
    e2e_make_dir(dir, sizeof dir, "record");
    snprintf(var, sizeof var, "AOSHIM_RECORD=%s/life.%%p.gz", dir);
    const char *env[] = {var, "AOSHIM_QUIET=1", NULL};
    const char *argv[] = {"/usr/bin/timeout",  "-s",   "KILL", "60",
                          e2e_path("AO_LIFE"), "fork", NULL};
    e2e_result_t r;
    e2e_run(&r, true, env, argv);
    cr_assert_eq(r.status, 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
    cr_expect(strstr(r.out, "life fork children=200 hung=0 passed_through=200"), "%s", r.out);
    const char *p = strstr(r.out, "life pid=");
    cr_assert(p);
    char cmd[400], path[256], want[300];
    snprintf(want, sizeof want, "%s/life.%d.gz", dir, atoi(p + 9));
    snprintf(cmd, sizeof cmd, "ls %s", dir);
    FILE *ls = popen(cmd, "r");
    int files = 0;
    while (fgets(path, sizeof path, ls))
        files++;
    pclose(ls);
    cr_expect_eq(files, 1, "%d files in %s", files, dir);
    trace_t t;
    read_trace(&t, want);
    check_frame(&t, "1");
    size_t layers = 0;
    for (size_t i = 0; i < t.nline; i++)
        layers += is_kind(t.line[i], "layer");
    cr_expect_gt(layers, 100, "%zu layer records", layers);
    free_trace(&t);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// A process killed mid-run (SIGKILL: no destructor) leaves a trace that
// reads back through its completed steps: a step's end hands the records
// over when a quarter second has passed since the last hand-over, and the
// writer writes them at once. life goes on training for a second before it
// is killed, and longer (up to 10 s) until its file has grown twice since
// it was ready: under a loaded machine (the suite's two processes) a
// second once passed with nothing written yet.
typedef struct kill_arg_s {
    bool sent;
    const char *dir;
} kill_arg_t;

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void kill_when_ready(const char *out, void *arg)
{
    kill_arg_t *k = arg;
    const char *pid = strstr(out, "life pid=");
    if (k->sent || !pid || !strstr(out, "life ready\n")) return;
    k->sent = true;
    char path[300];
    snprintf(path, sizeof path, "%s/life.%d.gz", k->dir, atoi(pid + strlen("life pid=")));
    long was = file_size(path);
    int grew = 0;
    for (int i = 0; i < 100 && (i < 10 || grew < 2); i++) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        long now = file_size(path);
        if (now > was) grew++, was = now;
    }
    kill((pid_t)atoi(pid + strlen("life pid=")), SIGKILL);
}

Test(record, killed_process_leaves_its_steps, .timeout = 60)
{
    char dir[128], var[300], want[300];
    e2e_make_dir(dir, sizeof dir, "record");
    snprintf(var, sizeof var, "AOSHIM_RECORD=%s/life.%%p.gz", dir);
    const char *env[] = {var, "AOSHIM_QUIET=1", NULL};
    const char *argv[] = {e2e_path("AO_LIFE"), "forever", NULL};
    kill_arg_t k = {.dir = dir};
    e2e_result_t r;
    e2e_run_ex(&r, true, env, argv, kill_when_ready, &k);
    cr_assert(k.sent, "never ready:\n%s\n%s", r.out, r.err);
    cr_expect_eq(r.status, 128 + SIGKILL);
    const char *p = strstr(r.out, "life pid=");
    cr_assert(p);
    snprintf(want, sizeof want, "%s/life.%d.gz", dir, atoi(p + 9));
    trace_t t;
    read_trace(&t, want);
    cr_assert_geq(t.nline, 2);
    cr_expect_str_eq(t.line[0], "aoshim-trace 1");
    // The first step whole: 6 layers forward and back, their launches.
    size_t step_end = 0, launches = 0, first_step_launches = 0;
    for (size_t i = 0; i < t.nline; i++) {
        if (is_kind(t.line[i], "layer") && strstr(t.line[i], " op=step_end")) {
            if (!step_end) first_step_launches = launches;
            step_end++;
        }
        launches += is_kind(t.line[i], "launch");
    }
    cr_expect_geq(step_end, 1, "no step end in what the killed process left");
    cr_expect_eq(first_step_launches, 12, "launches of the first step: %zu", first_step_launches);
    cr_expect(!is_kind(t.line[t.nline - 1], "end"), "an end record from a killed process");
    free_trace(&t);
    e2e_free(&r);
    e2e_remove_dir(dir);
}

// Several threads at once (stress_threads: a training thread, two allocating
// on their own streams, one reading offloaded buffers): each thread's
// records in its order, the launch count the simulator's, and the
// allocations and frees of all threads consistent once ordered by t= (as a
// replay orders them), every allocation freed.
typedef struct at_s {
    uint64_t t, addr;
    size_t line;
    bool alloc;
} at_t;

static int by_t(const void *a, const void *b)
{
    const at_t *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

Test(record, threads_ordered_by_t, .timeout = 120)
{
    char dir[128], path[256], var[300];
    e2e_make_dir(dir, sizeof dir, "record");
    trace_path(path, sizeof path, dir, "threads.gz");
    snprintf(var, sizeof var, "AOSHIM_RECORD=%s", path);
    const char *env[] = {var, "AOSHIM_OFFLOAD_LAYERS=4", "AOSHIM_QUIET=1", "SIM_QUIET=0", NULL};
    const char *argv[] = {e2e_path("AO_STRESS_THREADS"), NULL};
    e2e_result_t r;
    e2e_run(&r, true, env, argv);
    cr_assert_eq(r.status, 0, "exit %d:\n%s\n%s", r.status, r.out, r.err);
    cr_assert(strstr(r.out, "stress ok=1 "), "%s", r.out);
    uint64_t launches = 0;
    cr_assert(e2e_kv(r.err, "simgpu: ", "launches", &launches), "%s", r.err);
    trace_t t;
    read_trace(&t, path);
    check_frame(&t, "1");
    uint64_t last_t[64] = {0}, nlaunch = 0;
    size_t nat = 0, tids = 0;
    at_t *at = calloc(t.nline, sizeof *at);
    char v[32];
    for (size_t i = 0; i < t.nline; i++) {
        const char *l = t.line[i];
        if (!field(l, "t", v, sizeof v)) continue;
        uint64_t tt = strtoull(v, NULL, 10),
                 tid = field(l, "tid", v, sizeof v) ? strtoull(v, NULL, 10) : 0;
        cr_assert_lt(tid, 64);
        if (!last_t[tid]) tids++;
        cr_expect_geq(tt, last_t[tid], "thread %" PRIu64 " out of order: %s", tid, l);
        last_t[tid] = tt ? tt : 1;
        nlaunch += is_kind(l, "launch");
        if (is_kind(l, "alloc") || is_kind(l, "free"))
            at[nat++] = (at_t){tt, num(l, "addr"), i, is_kind(l, "alloc")};
    }
    cr_expect_geq(tids, 4, "records of %zu threads", tids);
    cr_expect_eq(nlaunch, launches, "%" PRIu64 " launch records, the simulator ran %" PRIu64,
                 nlaunch, launches);
    qsort(at, nat, sizeof *at, by_t);
    size_t cap = 1024, nlive = 0, bad = 0;
    uint64_t *live = calloc(cap, sizeof *live);
    for (size_t i = 0; i < nat; i++) {
        size_t k = 0;
        while (k < nlive && live[k] != at[i].addr)
            k++;
        if (at[i].alloc) {
            bad += k < nlive;
            if (nlive == cap) live = realloc(live, (cap *= 2) * sizeof *live);
            live[nlive++] = at[i].addr;
        } else if (k == nlive) {
            bad++;
        } else {
            live[k] = live[--nlive];
        }
    }
    cr_expect_gt(nat, 100);
    cr_expect_eq(bad, 0, "%zu allocations or frees out of place once ordered by t", bad);
    cr_expect_eq(nlive, 0, "%zu allocations alive at the end", nlive);
    free(live);
    free(at);
    free_trace(&t);
    e2e_free(&r);
    e2e_remove_dir(dir);
}
