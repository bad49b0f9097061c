// SPDX-License-Identifier: MIT
// replay: a step trace (docs/trace-format.md) issued on the simulated GPU.
//
//   replay TRACE [--steps N] [--check] [--scale K] [--scan-leftovers]
//
// Reads the trace (gzip or plain), then issues its records in file order
// from one thread: streams, events, records, waits and synchronisations;
// each allocation through the entry point the trace names (cudaMallocAsync
// from the default pool, after the trace's pool attributes, ...); frees,
// sets and copies; the control calls (through the aoshim_try_* wrappers, so
// the program runs with or without the shim); and for every launch a
// simulated kernel whose parameters hold the replayed addresses, with the
// trace's duration. docs/replay.md (## run) says what each figure means;
// scripts/aoshim_replay/run.py sets the simulator up and runs this.
//
// The last line of stdout is always one line
//   replay status=... steps=N peak_device_bytes=B peak_in_use_bytes=B
//          fwd_in_use_bytes=B step_ns=T late_reloads=K races=R faults=F
//          [wrong=W] [scale=K]
// Exit status: 0 the replay ran (its figures say how it went), 1 a CUDA call
// failed, 2 bad command line or trace, 3 device memory ran out. A fault
// stops the process inside the simulator (exit 86, SIM_EXIT_FAULT) before
// this line: run.py prints it for the replay then.
#include <aoshim.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <simgpu.h>
#include <stdarg.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "kernels.h" // ts_mix64, the workload's bijective mix

#define PROG       "replay"
#define LINE_MAX_  (64 * 1024)  // docs/trace-format.md: lines are at most 64 KiB
#define ALIGN      512ull       // --scale rounds sizes and offsets up to this
#define SAMPLE     64ull        // --check: bytes per sampled word
#define SAMPLE_GAP (2ull << 20) // --check: one sampled word every 2 MiB of a range
#define MAX_DECL   15           // pointers with declared accesses, (2 * 15 + 2) params
#define MAX_BLOB   512          // extra pointers in the blob parameter (4 KiB)

// --- the records ---------------------------------------------------------------------------
typedef enum kind_e {
    K_META,
    K_STREAM,
    K_STREAM_DESTROY,
    K_EVENT,
    K_RECORD,
    K_WAIT,
    K_SYNC,
    K_ALLOC,
    K_FREE,
    K_POOL,
    K_KERNEL,
    K_LAUNCH,
    K_MEMSET,
    K_COPY,
    K_LAYER,
    K_PHASE,
    K_MAP,
    K_UNMAP,
    K_END,
    K_SAMPLE,
    K_NKINDS
} kind_e;

// The entry points of alloc and free records.
typedef enum api_e {
    A_CUDA_MALLOC,
    A_CUDA_MALLOC_ASYNC,
    A_CUDA_MALLOC_POOL,
    A_CU_MEM_ALLOC,
    A_CU_MEM_ALLOC_ASYNC,
    A_CU_MEM_ALLOC_POOL,
    A_CU_MEM_CREATE,
    A_CUDA_FREE,
    A_CUDA_FREE_ASYNC,
    A_CU_MEM_FREE,
    A_CU_MEM_FREE_ASYNC,
    A_CU_MEM_RELEASE,
    A_COUNT,
} api_e;
static const char *const api_name[A_COUNT] = {
    "cudaMalloc",  "cudaMallocAsync", "cudaMallocFromPoolAsync",
    "cuMemAlloc",  "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
    "cuMemCreate", "cudaFree",        "cudaFreeAsync",
    "cuMemFree",   "cuMemFreeAsync",  "cuMemRelease",
};

enum { SY_DEVICE, SY_STREAM, SY_EVENT };
enum { CP_H2D, CP_D2H, CP_D2D, CP_H2H };
enum { PO_CREATE, PO_ATTR, PO_TRIM, PO_DESTROY };
enum { LO_BEGIN, LO_END, LO_BWD_BEGIN, LO_BWD_END, LO_STEP_END, LO_MICROBATCH, LO_KEEP };
enum { RF_ASYNC = 1, RF_PAGEABLE = 2, RF_DUR = 4, RF_T = 8 };
enum { M_UNKNOWN = 0, M_R = 1, M_W = 2, M_RW = 3 };
#define LEN_UNKNOWN UINT64_MAX

typedef struct rec_s {
    uint8_t kind, op, flags;
    int32_t s;   // stream, -1 when the record has none
    int32_t id;  // stream, event, kernel, pool, layer or phase
    int32_t id2; // microbatch, pool attribute, stream priority, shared bytes
    uint32_t line, nptr;
    uint64_t a, b, c, d; // addresses and sizes, by kind (see parse_record)
    uint64_t dur;
    uint64_t t; // host time (t=); a record without one takes the next record's
    size_t ptr0;
} rec_t;

typedef struct ptr_s {
    uint64_t addr, len; // len LEN_UNKNOWN: to the end of its allocation
    uint8_t mode;
    bool junk; // a raw word in a slot that is no pointer (classify_raw_words)
} ptr_t;

typedef struct kdecl_s {
    char *name;
    uint64_t dur_sum, dur_n; // measured launches, for those without dur=
} kdecl_t;

static rec_t *recs;
static size_t nrecs, caprecs;
static ptr_t *ptrs;
static size_t nptrs, capptrs;
static kdecl_t *kdecls;
static size_t nkdecls;
static uint64_t *sample_ns; // a recorded trace's timed launches: sample id -> GPU ns (0: none)
static size_t nsamples, capsamples;
static char **phases; // phase names, by id
static size_t nphases;

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return p;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    p = realloc(p, n * elem);
    if (!p) abort(); // a test tool: no way on without memory
    *cap = n;
    return p;
}

// --- options and figures --------------------------------------------------------------------
static const char *trace_path;
static long opt_steps = -1; // -1: the trace's own number of steps
static bool opt_check;
// Leftover words (classify_raw_words) in the blob parameter too, for
// aoshim's launch scan alone, as it sees them on a GPU: the simulator
// neither checks nor orders them. Off: they are left out.
static bool opt_scan_leftovers;
// The host's pace (pace_before): on for a trace recorded on a GPU (its meta
// says source=record), whose t= are that program's host times; off for a
// converted one, whose t= only order its records, for one recorded on the
// simulated GPU or under aoshim (its gaps hold aoshim's own host time), and
// with --no-host-pace.
static bool opt_no_host_pace, trace_recorded, trace_simulated, trace_under_aoshim;
static uint64_t opt_scale = 1;

static struct {
    int steps; // completed
    uint64_t live, peak_device;
    uint64_t peak_in_use, fwd_in_use;
    uint64_t wrong;
    uint64_t *step_ns;
    size_t nstep_ns, capstep_ns;
    uint64_t program_host;       // the program's own host work paced in (pace_before) ...
    uint64_t program_host_setup; // ... of it before the first step
    uint64_t step_in_use;     // the driver's count at its most in the step under way
    uint64_t *in_use_of_step; // ... and in each step done (with step_ns)
    size_t nin_use, capin_use;
    // Where the peaks were, for the stderr note.
    size_t peak_device_line, peak_in_use_line;
    int peak_device_step, peak_in_use_step;
    int peak_device_phase, peak_in_use_phase;
} M = {.peak_device_phase = -1, .peak_in_use_phase = -1};

// What the replay skipped or made up, said once at the end.
static struct {
    uint64_t unknown_frees, unmapped_ptrs, dropped_ptrs, implicit_frees, skipped_copies,
        merged_pools, unknown_attrs, undeclared_kernels, stale_words, reordered, junk_words;
} note;

static int cur_step; // 1-based replayed step, 0 in the setup
// The most allocated in each forward layer: this step's, the last whole
// step's; the forward layer open (-1: none). The same in each backward
// layer, and in the head: from the forward's last layer's end to the
// step's first backward layer (head_open: in it).
#define FWD_END_MAX 4096
static uint64_t fwd_end_now[FWD_END_MAX], fwd_end_last[FWD_END_MAX];
static int fwd_end_n, fwd_open = -1;
static uint64_t bwd_most_now[FWD_END_MAX], bwd_most_last[FWD_END_MAX];
static int bwd_most_n, bwd_open = -1;
static uint64_t head_now, head_step, head_last;
static bool head_open;
static int cur_phase = -1;
static size_t cur_line;

static uint64_t median(uint64_t *v, size_t n);
static uint64_t late_reloads(void);

static void print_line(const char *status)
{
    sim_stats_t st;
    memset(&st, 0, sizeof st);
    (void)simrtGetStats(&st);
    uint64_t in_use = M.peak_in_use;
#ifdef HAVE_SIM_PEAK_IN_USE
    if (st.peak_in_use_bytes > in_use) in_use = st.peak_in_use_bytes;
#endif
    char extra[96] = "";
    size_t o = 0;
    if (opt_check) o += (size_t)snprintf(extra + o, sizeof extra - o, " wrong=%" PRIu64, M.wrong);
    if (opt_scale != 1) snprintf(extra + o, sizeof extra - o, " scale=%" PRIu64, opt_scale);
    fflush(stderr);
    printf("replay status=%s steps=%d peak_device_bytes=%" PRIu64 " peak_in_use_bytes=%" PRIu64
           " fwd_in_use_bytes=%" PRIu64 " step_ns=%" PRIu64 " late_reloads=%" PRIu64
           " races=%" PRIu64 " faults=%" PRIu64 "%s\n",
           status, M.steps, M.peak_device, in_use, M.fwd_in_use, median(M.step_ns, M.nstep_ns),
           late_reloads(), st.races, st.faults, extra);
    fflush(stdout);
}

// A replay that cannot go on: one line on stderr saying why, the figures
// line with the short reason, the exit status.
static void stop(const char *status, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, PROG ": error: %s\n", msg);
    print_line(status);
    exit(code);
}

// Before CUDA is up (bad command line or trace): no simulator figures.
static void stop_early(const char *status, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, PROG ": error: %s\n", msg);
    char extra[96] = "";
    size_t o = 0;
    if (opt_check) o += (size_t)snprintf(extra + o, sizeof extra - o, " wrong=0");
    if (opt_scale != 1) snprintf(extra + o, sizeof extra - o, " scale=%" PRIu64, opt_scale);
    printf("replay status=%s steps=0 peak_device_bytes=0 peak_in_use_bytes=0 fwd_in_use_bytes=0 "
           "step_ns=0 late_reloads=0 races=0 faults=0%s\n",
           status, extra);
    fflush(stdout);
    exit(code);
}

static void ck_rt(cudaError_t e, const char *call)
{
    if (e == cudaSuccess) return;
    if (e == cudaErrorMemoryAllocation)
        stop("oom", 3, "trace line %zu: %s: out of device memory", cur_line, call);
    stop("cuda_error", 1, "trace line %zu: %s failed: %s", cur_line, call, cudaGetErrorName(e));
}

static void ck_cu(CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS) return;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        stop("oom", 3, "trace line %zu: %s: out of device memory", cur_line, call);
    const char *n = NULL;
    cuGetErrorName(r, &n);
    stop("cuda_error", 1, "trace line %zu: %s failed: %s", cur_line, call, n ? n : "?");
}

// --- reading the trace ----------------------------------------------------------------------
typedef struct field_s {
    const char *k, *v;
} field_t;

static size_t parse_lineno;

static void bad(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    stop_early("bad_trace", 2, "%s line %zu: %s", trace_path, parse_lineno, msg);
}

static const char *fget(const field_t *f, int n, const char *k)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].k, k)) return f[i].v;
    return NULL;
}

static const char *freq(const field_t *f, int n, const char *kind, const char *k)
{
    const char *v = fget(f, n, k);
    if (!v) bad("'%s' without %s=", kind, k);
    return v;
}

static uint64_t num(const char *k, const char *v)
{
    errno = 0;
    char *end;
    int base = (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) ? 16 : 10;
    if (*v == '-' || *v == '+') bad("%s=%s: not a number", k, v);
    unsigned long long x = strtoull(v, &end, base);
    if (end == v || *end || errno) bad("%s=%s: not a number", k, v);
    return x;
}

static int32_t small(const char *k, const char *v)
{
    errno = 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < -1000000000L || x > 1000000000L)
        bad("%s=%s: not a small integer", k, v);
    return (int32_t)x;
}

static int32_t ident(const char *k, const char *v)
{
    int32_t x = small(k, v);
    if (x < 0 || x > 1000000) bad("%s=%s: not an identifier (0 to 1000000)", k, v);
    return x;
}

static void triple(const char *k, const char *v, uint32_t out[3])
{
    const char *p = v;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        char *end;
        unsigned long x = strtoul(p, &end, 10);
        if (end == p || errno || x > 0x7fffffffUL || (i < 2 && *end != ',') || (i == 2 && *end))
            bad("%s=%s: expected x,y,z", k, v);
        out[i] = (uint32_t)x;
        p = end + 1;
    }
}

// Percent-decoding (%20 %25 %0A %3D, any %XX), in place.
static char *unpercent(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        int hi, lo;
        if (p[0] == '%' && p[1] && p[2] && sscanf(p + 1, "%1x%1x", &hi, &lo) == 2) {
            *o++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return s;
}

static int lookup(const char *v, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    return -1;
}

static int phase_id(const char *name)
{
    for (size_t i = 0; i < nphases; i++)
        if (!strcmp(phases[i], name)) return (int)i;
    static size_t cap;
    phases = grow(phases, &cap, nphases + 1, sizeof *phases);
    phases[nphases] = strdup(name);
    if (!phases[nphases]) abort();
    return (int)nphases++;
}

static void parse_ptrs(char *v, rec_t *r)
{
    r->ptr0 = nptrs;
    for (char *tok = strtok(v, ","); tok; tok = strtok(NULL, ",")) {
        ptr_t p = {0, LEN_UNKNOWN, M_UNKNOWN, false};
        char *mode = strchr(tok, ':');
        if (mode) {
            *mode++ = 0;
            if (!strcmp(mode, "r"))
                p.mode = M_R;
            else if (!strcmp(mode, "w"))
                p.mode = M_W;
            else if (!strcmp(mode, "rw") || !strcmp(mode, "wr"))
                p.mode = M_RW;
            else
                bad("ptr mode ':%s': expected r, w or rw", mode);
        }
        char *plus = strchr(tok, '+');
        if (plus) {
            *plus++ = 0;
            p.len = num("ptr length", plus);
        }
        if (strncmp(tok, "0x", 2) && strncmp(tok, "0X", 2)) bad("ptr '%s': expected 0xADDR", tok);
        p.addr = num("ptr", tok);
        ptrs = grow(ptrs, &capptrs, nptrs + 1, sizeof *ptrs);
        ptrs[nptrs++] = p;
        r->nptr++;
    }
}

static const char *const kind_names[] = {
    "meta", "stream", "stream_destroy", "event",  "record", "wait",  "sync",  "alloc", "free",
    "pool", "kernel", "launch",         "memset", "copy",   "layer", "phase", "map",   "unmap",
    "end",  "sample",
};

// One record line (modified in place). Unknown kinds and fields are skipped
// (a later minor version only adds them).
static void parse_record(char *line)
{
    char *save = NULL;
    char *kw = strtok_r(line, " ", &save);
    if (!kw) return;
    int kind = lookup(kw, kind_names, (int)(sizeof kind_names / sizeof *kind_names));
    if (kind < 0) return;
    field_t f[64];
    int n = 0;
    for (char *tok = strtok_r(NULL, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) bad("'%s': expected key=value", tok);
        *eq = 0;
        if (n < 64) f[n++] = (field_t){tok, eq + 1};
    }
    if (kind == K_META) {
        // Recorded on a GPU: a trace the simulated GPU recorded (its device
        // says so) holds the times of a simulation on this machine's host.
        // Recorded under aoshim (enable=1): the gaps hold that aoshim's own
        // host time, which the replayed aoshim would add again.
        const char *src = fget(f, n, "source"), *dev = fget(f, n, "device"),
                   *on = fget(f, n, "enable");
        if (src && !strcmp(src, "record")) trace_recorded = true;
        if (dev && strstr(dev, "simulated")) trace_simulated = true;
        if (on && strcmp(on, "0")) trace_under_aoshim = true;
    }
    if (kind == K_META || kind == K_END) return;
    const char *kn = kind_names[kind];
    rec_t r;
    memset(&r, 0, sizeof r);
    r.kind = (uint8_t)kind;
    r.line = (uint32_t)parse_lineno;
    r.s = -1;
    const char *v;
    if ((v = fget(f, n, "s"))) r.s = ident("s", v);
    if ((v = fget(f, n, "dur"))) {
        r.dur = num("dur", v);
        r.flags |= RF_DUR;
    }
    if ((v = fget(f, n, "t"))) {
        r.t = num("t", v);
        r.flags |= RF_T;
    }
    switch (kind) {
    case K_STREAM:
        r.id = ident("id", freq(f, n, kn, "id"));
        r.a = (v = fget(f, n, "flags")) ? num("flags", v) : 0;
        r.id2 = (v = fget(f, n, "prio")) ? small("prio", v) : 0;
        if (r.id < 2) bad("stream id=%d: the program's streams are numbered from 2", r.id);
        break;
    case K_STREAM_DESTROY:
        r.id = ident("id", freq(f, n, kn, "id"));
        break;
    case K_EVENT:
        r.id = ident("id", freq(f, n, kn, "id"));
        r.a = (v = fget(f, n, "flags")) ? num("flags", v) : 0;
        break;
    case K_RECORD:
    case K_WAIT:
        r.id = ident("ev", freq(f, n, kn, "ev"));
        if (r.s < 0) bad("'%s' without s=", kn);
        break;
    case K_SYNC: {
        static const char *const w[] = {"device", "stream", "event"};
        v = freq(f, n, kn, "what");
        int x = lookup(v, w, 3);
        if (x < 0) bad("sync what=%s: expected device, stream or event", v);
        r.op = (uint8_t)x;
        if (x == SY_STREAM && r.s < 0) bad("sync what=stream without s=");
        if (x == SY_EVENT) r.id = ident("ev", freq(f, n, kn, "ev"));
        break;
    }
    case K_ALLOC:
    case K_FREE: {
        v = freq(f, n, kn, "api");
        int x = lookup(v, api_name, A_COUNT);
        bool is_alloc = x >= 0 && x <= A_CU_MEM_CREATE;
        if (x < 0 || is_alloc != (kind == K_ALLOC))
            bad("%s api=%s: not an entry point this record names", kn, v);
        r.op = (uint8_t)x;
        r.a = num("addr", freq(f, n, kn, "addr"));
        if (kind == K_ALLOC) {
            r.b = num("size", freq(f, n, kn, "size"));
            r.id = (v = fget(f, n, "pool")) ? ident("pool", v) : 0;
        }
        break;
    }
    case K_POOL: {
        static const char *const ops[] = {"create", "attr", "trim", "destroy"};
        v = freq(f, n, kn, "op");
        int x = lookup(v, ops, 4);
        if (x < 0) return; // a pool call this version does not know
        r.op = (uint8_t)x;
        r.id = (v = fget(f, n, "pool")) ? ident("pool", v) : 0;
        if (x == PO_ATTR) {
            static const char *const attrs[] = {"reuse_follow_event_dependencies",
                                                "reuse_allow_opportunistic",
                                                "reuse_allow_internal_dependencies",
                                                "release_threshold",
                                                "reserved_mem_current",
                                                "reserved_mem_high",
                                                "used_mem_current",
                                                "used_mem_high"};
            v = freq(f, n, kn, "attr");
            r.id2 = lookup(v, attrs, 8);
            r.a = num("value", freq(f, n, kn, "value"));
        } else if (x == PO_TRIM) {
            r.a = num("keep", freq(f, n, kn, "keep"));
        }
        break;
    }
    case K_KERNEL: {
        int32_t id = ident("id", freq(f, n, kn, "id"));
        char *name = unpercent((char *)(uintptr_t)freq(f, n, kn, "name"));
        static size_t cap;
        kdecls = grow(kdecls, &cap, (size_t)id + 1, sizeof *kdecls);
        while (nkdecls <= (size_t)id)
            kdecls[nkdecls++] = (kdecl_t){0};
        free(kdecls[id].name);
        kdecls[id].name = strdup(name);
        if (!kdecls[id].name) abort();
        return; // a declaration, not something to issue
    }
    case K_SAMPLE: { // the GPU time of the launch that names it, anywhere in the file
        uint64_t id = num("id", freq(f, n, kn, "id")), ns = num("dur", freq(f, n, kn, "dur"));
        if (id > (1u << 26)) bad("sample id=%" PRIu64 ": too large", id);
        sample_ns = grow(sample_ns, &capsamples, id + 1, sizeof *sample_ns);
        while (nsamples <= id)
            sample_ns[nsamples++] = 0;
        sample_ns[id] = ns ? ns : 1;
        return; // not something to issue
    }
    case K_LAUNCH: {
        r.id = ident("k", freq(f, n, kn, "k"));
        r.d = (v = fget(f, n, "sample")) ? num("sample", v) + 1 : 0; // 0: not timed
        if (r.s < 0) bad("'launch' without s=");
        uint32_t g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
        if ((v = fget(f, n, "grid"))) triple("grid", v, g);
        if ((v = fget(f, n, "block"))) triple("block", v, b);
        r.a = g[0] | (uint64_t)g[1] << 32;
        r.b = g[2] | (uint64_t)b[0] << 32;
        r.c = b[1] | (uint64_t)b[2] << 32;
        r.id2 = (v = fget(f, n, "shm")) ? small("shm", v) : 0;
        if ((v = fget(f, n, "ptr")) && *v) parse_ptrs((char *)(uintptr_t)v, &r);
        if ((r.flags & RF_DUR) && (size_t)r.id < nkdecls) {
            kdecls[r.id].dur_sum += r.dur;
            kdecls[r.id].dur_n++;
        }
        break;
    }
    case K_MEMSET:
        if (r.s < 0) bad("'memset' without s=");
        r.a = num("dst", freq(f, n, kn, "dst"));
        r.b = num("n", freq(f, n, kn, "n"));
        r.c = (v = fget(f, n, "value")) ? num("value", v) & 0xff : 0;
        break;
    case K_COPY: {
        static const char *const kinds[] = {"h2d", "d2h", "d2d", "h2h"};
        v = freq(f, n, kn, "kind");
        int x = lookup(v, kinds, 4);
        if (x < 0) bad("copy kind=%s: expected h2d, d2h, d2d or h2h", v);
        r.op = (uint8_t)x;
        r.c = num("n", freq(f, n, kn, "n"));
        if (x == CP_D2H || x == CP_D2D) r.a = num("src", freq(f, n, kn, "src"));
        if (x == CP_H2D || x == CP_D2D) r.b = num("dst", freq(f, n, kn, "dst"));
        if ((v = fget(f, n, "async")) && num("async", v)) r.flags |= RF_ASYNC;
        if ((v = fget(f, n, "pinned")) && !num("pinned", v)) r.flags |= RF_PAGEABLE;
        if ((r.flags & RF_ASYNC) && r.s < 0) bad("an asynchronous copy without s=");
        break;
    }
    case K_LAYER: {
        static const char *const ops[] = {
            "begin", "end", "backward_begin", "backward_end", "step_end", "microbatch", "keep"};
        v = freq(f, n, kn, "op");
        int x = lookup(v, ops, 7);
        if (x < 0) return; // a control call this version does not know
        r.op = (uint8_t)x;
        r.id = (v = fget(f, n, "layer")) ? small("layer", v) : -1;
        r.id2 = (v = fget(f, n, "mb")) ? small("mb", v) : -1;
        if ((x <= LO_BWD_END) && r.id < 0) bad("layer op=%s without layer=", ops[x]);
        if (x == LO_MICROBATCH && r.id2 < 0) bad("layer op=microbatch without mb=");
        if (x == LO_KEEP) r.a = num("addr", freq(f, n, kn, "addr"));
        break;
    }
    case K_PHASE:
        r.id = phase_id(unpercent((char *)(uintptr_t)freq(f, n, kn, "name")));
        break;
    case K_MAP:
        r.a = num("addr", freq(f, n, kn, "addr"));
        r.b = num("size", freq(f, n, kn, "size"));
        r.c = num("handle", freq(f, n, kn, "handle"));
        r.d = (v = fget(f, n, "offset")) ? num("offset", v) : 0;
        break;
    case K_UNMAP:
        r.a = num("addr", freq(f, n, kn, "addr"));
        r.b = num("size", freq(f, n, kn, "size"));
        break;
    }
    recs = grow(recs, &caprecs, nrecs + 1, sizeof *recs);
    recs[nrecs++] = r;
}

// The header, then every record into recs. The meta lines are skipped here
// (run.py reads total= for SIM_CAPACITY).
static void read_trace(void)
{
    gzFile z = gzopen(trace_path, "rb");
    if (!z) stop_early("no_trace", 2, "%s: %s", trace_path, strerror(errno ? errno : ENOENT));
    gzbuffer(z, 1 << 17);
    char *buf = malloc(LINE_MAX_ + 2);
    if (!buf) abort();
    for (parse_lineno = 1; gzgets(z, buf, LINE_MAX_ + 2); parse_lineno++) {
        size_t len = strlen(buf);
        if (len == LINE_MAX_ + 1 && buf[len - 1] != '\n') bad("longer than 64 KiB");
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = 0;
        if (parse_lineno == 1) {
            unsigned major = 0, minor = 0;
            char tail;
            int got = sscanf(buf, "aoshim-trace %u.%u%c", &major, &minor, &tail);
            if (got < 1 || got > 2 || strncmp(buf, "aoshim-trace ", 13) ||
                strspn(buf + 13, "0123456789.") != strlen(buf + 13))
                stop_early("bad_header", 2,
                           "%s: not a step trace (first line '%.60s', expected 'aoshim-trace 1')",
                           trace_path, buf);
            if (major != 1)
                stop_early("bad_version", 2,
                           "%s is step trace format version %u; this replay reads version 1",
                           trace_path, major);
            continue;
        }
        if (!len || buf[0] == '#') continue;
        parse_record(buf);
    }
    int err = 0;
    const char *msg = gzerror(z, &err);
    if (err && err != Z_STREAM_END)
        stop_early("bad_trace", 2, "%s: %s", trace_path, err == Z_ERRNO ? strerror(errno) : msg);
    if (parse_lineno == 1)
        stop_early("bad_header", 2, "%s: empty (expected the line 'aoshim-trace 1')", trace_path);
    gzclose(z);
    free(buf);
}

// A recorded trace times one launch in 64 of each kernel and gives its GPU
// time in a `sample` record: that launch gets it as its dur=, and the
// kernel's mean covers its other launches (dur_of).
static void time_sampled_launches(void)
{
    for (size_t i = 0; i < nrecs; i++) {
        rec_t *r = &recs[i];
        if (r->kind != K_LAUNCH || !r->d || (r->flags & RF_DUR)) continue;
        uint64_t id = r->d - 1;
        if (id >= nsamples || !sample_ns[id]) continue;
        r->dur = sample_ns[id];
        r->flags |= RF_DUR;
        if ((size_t)r->id < nkdecls) {
            kdecls[r->id].dur_sum += r->dur;
            kdecls[r->id].dur_n++;
        }
    }
}

// The records in the order the program made them (docs/trace-format.md):
// file order within a thread, the order of t= across threads. A recorded
// trace writes each thread's records in blocks as its buffer fills, so two
// threads' records interleave by block, not by call (the H200's GPT: the
// autograd thread's blocks came up to 0.4 s late, and read in file order
// its frees came before their allocations). A record without t= (a stream
// or event declared at its first use) travels with the next record that
// has one, the use it declares. Ties keep file order.
static int cmp_rec_time(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static size_t order_by_time(void)
{
    uint64_t next = UINT64_MAX;
    for (size_t i = nrecs; i-- > 0;) {
        if (recs[i].flags & RF_T)
            next = recs[i].t;
        else
            recs[i].t = next;
    }
    uint64_t last = 0; // records after the last timed one stay last
    size_t moved = 0;
    for (size_t i = 0; i < nrecs; i++) {
        if (recs[i].t == UINT64_MAX) recs[i].t = last;
        if (recs[i].t < last) moved++;
        if (recs[i].t > last) last = recs[i].t;
    }
    if (moved) qsort(recs, nrecs, sizeof *recs, cmp_rec_time);
    return moved;
}

// --- raw words: which are pointers -------------------------------------------------------------
// A recorded launch lists its parameters' words raw (docs/trace-format.md),
// and a word that falls in a live allocation is not always a pointer the
// kernel uses. PyTorch's elementwise kernels take their OffsetCalculator by
// value, with 25 dimensions of which a few are set: the rest is the host
// stack's leftovers, among them device addresses of tensors freed earlier.
// With the caching allocator such an address is soon another tensor's, and
// read as a pointer it is a touch of that tensor (on the H200's trace of
// gpu-check's GPT, 849 touches of offloaded layers under `all`, against one
// on the GPU itself, where aoshim's own addresses were not reused so soon).
// So the words are classified by slot: a launch's kernel and the word's
// place, counted from the first word and from the last (slot_key). A slot
// whose word is, in some launch, in no live allocation (in freed memory, or
// no device address: a host pointer, a size) is a slot of leftovers, and
// its words are left out; a slot whose word is live in every launch holds
// a pointer. The price: a multi-tensor kernel's slot holds a tensor's
// address in one launch and a count in another, so most of AdamW's words go
// (the optimizer's kernels then touch less than they do; their tensors are
// parameters, gradients and optimizer state, which aoshim never offloads).
// A weaker rule (freed memory only, not host words) left the leftovers of
// the elementwise kernels in: 437 late reloads under `all` on the H200
// trace where the GPU had one. With this one, the three traces recorded
// there give what the GPU gave under `all`: one late reload, 11.0 GiB saved.
//
// Nor is a slot a pointer's that holds two 32-bit integers packed in one
// word (packed_pair): on the H200 the device's addresses begin at 12 GiB,
// so a pair such as (6, 4), 0x400000006, falls among them. GPT-2's cutlass
// gemm (kernel 39 of its trace) holds that word in every launch, always in
// a live allocation; taken as a pointer, it followed that allocation to its
// place in the replay, a layer's buffer under aoshim: 20 late reloads a
// step under `all`, where the GPU's address space kept the integers.
typedef struct ivl_s {
    uint64_t a, n;
    bool live;
} ivl_t;

static ivl_t *ivs; // sorted by a, disjoint
static size_t nivs, capivs;

static size_t ivl_upper(uint64_t a)
{
    size_t lo = 0, hi = nivs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ivs[mid].a <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static ivl_t *ivl_find(uint64_t a)
{
    size_t i = ivl_upper(a);
    return i && a < ivs[i - 1].a + ivs[i - 1].n ? &ivs[i - 1] : NULL;
}

static void ivl_add(uint64_t a, uint64_t n)
{
    if (!n) n = 1;
    size_t hi = ivl_upper(a + n - 1), lo = hi;
    while (lo > 0 && ivs[lo - 1].a + ivs[lo - 1].n > a)
        lo--;
    ivs = grow(ivs, &capivs, nivs + 1, sizeof *ivs);
    memmove(&ivs[lo + 1], &ivs[hi], (nivs - hi) * sizeof *ivs);
    nivs -= hi - lo;
    ivs[lo] = (ivl_t){a, n, true};
    nivs++;
}

typedef struct slot_s {
    uint64_t key; // 0: empty
    uint8_t seen; // 1: in a live allocation, 2: in a freed one, 4: in none, 8: packed_pair
} slot_t;

static slot_t *slots;
static size_t capslots = 1u << 16, nslots;

static slot_t *slot_of(uint64_t key)
{
    if (!slots || 2 * (nslots + 1) > capslots) {
        slot_t *old = slots;
        size_t oldcap = slots ? capslots : 0;
        if (slots) capslots *= 2;
        slots = calloc(capslots, sizeof *slots);
        if (!slots) abort();
        nslots = 0;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].key) {
                slot_t *n = slot_of(old[i].key);
                n->seen = old[i].seen;
            }
        free(old);
    }
    size_t h = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (capslots - 1);
    while (slots[h].key && slots[h].key != key)
        h = (h + 1) & (capslots - 1);
    if (!slots[h].key) {
        slots[h].key = key;
        nslots++;
    }
    return &slots[h];
}

// The slot of word i of a launch: counted from the first word among the
// kernel's launches with as many words, or from the last word among all its
// launches (the words that are 0 are left out of the trace, so one zero
// more shifts every later word by one from the start, none from the end).
static uint64_t slot_key(const rec_t *r, uint32_t i, bool from_end)
{
    uint64_t k = from_end ? (uint64_t)1 << 31 | (r->nptr - 1 - i)
                          : (uint64_t)(r->nptr & 0x7fff) << 16 | (i & 0xffff);
    return ((uint64_t)(uint32_t)r->id << 32 | k) + 1;
}

static bool raw_word(const ptr_t *p)
{
    return p->len == LEN_UNKNOWN && p->mode == M_UNKNOWN;
}

// Two 32-bit integers packed in a word, not an address a kernel reads: its
// low half under 64 KiB and not 16-byte aligned. A tensor's address is
// aligned to its element and most often to 256 bytes (the caching
// allocators' blocks); one within 64 KiB past a 4 GiB boundary and at an
// odd offset would be a small view of an unaligned one. None of the
// repository's traces has such a pointer; every word of this form in them
// is the one above (and sizes below 64 KiB are no address already).
static bool packed_pair(uint64_t w)
{
    return w >> 32 && (w & 0xffffffffull) < 0x10000 && w % 16;
}

// Two passes over the records in their issue order; returns the junk words.
static uint64_t classify_raw_words(void)
{
    for (int pass = 0; pass < 2; pass++) {
        nivs = 0;
        for (size_t ri = 0; ri < nrecs; ri++) {
            const rec_t *r = &recs[ri];
            if ((r->kind == K_ALLOC && r->op != A_CU_MEM_CREATE) || r->kind == K_MAP) {
                ivl_add(r->a, r->b);
            } else if (r->kind == K_FREE || r->kind == K_UNMAP) {
                size_t i = ivl_upper(r->a);
                if (i && ivs[i - 1].a == r->a) ivs[i - 1].live = false;
            } else if (r->kind == K_LAUNCH) {
                for (uint32_t i = 0; i < r->nptr; i++) {
                    ptr_t *p = &ptrs[r->ptr0 + i];
                    if (!raw_word(p)) continue;
                    const ivl_t *x = ivl_find(p->addr);
                    // One slot at a time: slot_of may grow the table.
                    if (pass == 0) {
                        uint8_t b = packed_pair(p->addr) ? 8 : !x ? 4 : x->live ? 1 : 2;
                        slot_of(slot_key(r, i, false))->seen |= b;
                        slot_of(slot_key(r, i, true))->seen |= b;
                    } else {
                        uint8_t seen = slot_of(slot_key(r, i, false))->seen;
                        seen |= slot_of(slot_key(r, i, true))->seen;
                        p->junk = (seen & 14) != 0;
                    }
                }
            }
        }
    }
    uint64_t junk = 0;
    for (size_t i = 0; i < nptrs; i++)
        junk += ptrs[i].junk && ivl_find(ptrs[i].addr) != NULL;
    free(ivs);
    free(slots);
    ivs = NULL;
    slots = NULL;
    nivs = capivs = 0;
    return junk;
}

// --- streams, events, pools ------------------------------------------------------------------
static cudaStream_t *streams;
static size_t nstreams_cap;
static bool *stream_made;
static cudaEvent_t *events;
static size_t nevents_cap;
static CUmemoryPool default_pool;
static CUmemoryPool *pools; // by trace pool id; NULL: not created (the default one)
static size_t npools_cap;

static void stream_slot(int id)
{
    size_t old = nstreams_cap;
    streams = grow(streams, &nstreams_cap, (size_t)id + 1, sizeof *streams);
    if (nstreams_cap == old) return;
    stream_made = realloc(stream_made, nstreams_cap * sizeof *stream_made);
    if (!stream_made) abort();
    for (size_t i = old; i < nstreams_cap; i++)
        stream_made[i] = false;
}

static cudaStream_t stream_of(int id)
{
    if (id <= 0) return 0; // the legacy default stream
    if (id == 1) return cudaStreamPerThread;
    stream_slot(id);
    if (!stream_made[id]) {
        // A stream the trace uses without a stream record: made as a
        // non-blocking stream, as PyTorch's stream pool makes its streams.
        ck_rt(cudaStreamCreateWithFlags(&streams[id], cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags");
        stream_made[id] = true;
    }
    return streams[id];
}

static cudaEvent_t event_of(int id)
{
    size_t old = nevents_cap;
    events = grow(events, &nevents_cap, (size_t)id + 1, sizeof *events);
    for (size_t i = old; i < nevents_cap; i++)
        events[i] = NULL;
    if (!events[id])
        ck_rt(cudaEventCreateWithFlags(&events[id], cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
    return events[id];
}

static CUmemoryPool pool_of(int id)
{
    if (id == 0 || (size_t)id >= npools_cap || !pools[id]) return default_pool;
    return pools[id];
}

// --- device memory: recorded ranges to replayed ones -----------------------------------------
// A live recorded allocation maps its range to the one the replay made; a
// pointer inside it means the same offset there. A freed one stays in the
// map (dead) until a new allocation overlaps its recorded range, so a
// launch that uses memory its allocation already freed uses the replayed
// memory that was freed: the simulator faults, or --check finds the bytes of
// whatever lives there now.
typedef struct word_s {
    uint64_t off, seed;
    uint32_t len;
    int32_t val; // -1: the pattern of seed; 0..255: a memset's byte
} word_t;

typedef struct inst_s {
    uint64_t rec, rec_size; // recorded
    uint64_t rep, rep_size; // replayed
    uint64_t counted;       // bytes counted in peak_device_bytes
    uint8_t api;
    bool live, touched, mapped; // mapped: a cuMemMap range, not an allocation
    int32_t s;
    word_t *w; // --check: the sampled words written, sorted, disjoint
    size_t nw, capw;
} inst_t;

static inst_t **map; // sorted by rec
static size_t nmap, capmap;

static size_t map_upper(uint64_t a) // first entry with rec > a
{
    size_t lo = 0, hi = nmap;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (map[mid]->rec <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// --steps beyond the trace's: its last step again. A step hands objects
// to the next (the loss a training loop reads after the step's end, buffers
// the next step frees): the last step frees and reads, at their recorded
// addresses, objects the step before it made, and leaves its own to the
// step after. Replayed again, those references mean the objects the last
// step itself left in its replay before: the j-th object it is handed (made
// before it, freed in it) is the one of the same size it leaves made at the
// same place in its step (made in it, not freed in it). As each replay
// again begins, each such object left is taken out of the address map and
// bound to the address it is handed at (its own address may be allocated
// again meanwhile, as it was in the trace); references there, until the
// step frees it, mean it. Without this, the step read and freed memory of
// its replay before that was already gone (the H200's Llama, --steps 9 of
// 8: a fault reading the step before's loss).
typedef struct carry_s {
    uint64_t in, n, out;  // the recorded objects: handed in, and left out
    size_t free_at;       // the record freeing the one handed in
    struct inst_s *bound; // this replay's: the object left by the one before
} carry_t;

static carry_t *carry;
static size_t ncarry, capcarry;
static bool carry_on;  // the last step is being replayed again
static size_t cur_rec; // the record being issued

// The object a recorded address handed in means now, and the offset in it;
// NULL when none (the address means what the map says).
static struct inst_s *carried(uint64_t a, uint64_t *off)
{
    if (!carry_on) return NULL;
    for (size_t i = 0; i < ncarry; i++)
        if (carry[i].bound && a - carry[i].in < carry[i].n && cur_rec <= carry[i].free_at) {
            *off = a - carry[i].in;
            return carry[i].bound;
        }
    return NULL;
}

static inst_t *map_find(uint64_t a)
{
    size_t i = map_upper(a);
    if (i == 0) return NULL;
    inst_t *x = map[i - 1];
    return a < x->rec + (x->rec_size ? x->rec_size : 1) ? x : NULL;
}

static void inst_drop(inst_t *x)
{
    free(x->w);
    free(x);
}

static void map_remove_at(size_t i)
{
    memmove(&map[i], &map[i + 1], (nmap - i - 1) * sizeof *map);
    nmap--;
}

static void free_inst(inst_t *x, cudaStream_t s);

// Makes room for [rec, rec + size): dead entries there go; a live one means
// the trace allocates over memory it never freed (a step replayed again
// that keeps what it allocated): the old one is freed first.
static void map_clear(uint64_t rec, uint64_t size)
{
    uint64_t end = rec + (size ? size : 1);
    for (;;) {
        size_t i = map_upper(end - 1);
        if (i == 0) return;
        inst_t *x = map[i - 1];
        if (x->rec + (x->rec_size ? x->rec_size : 1) <= rec) return;
        if (x->live) {
            note.implicit_frees++;
            free_inst(x, x->s >= 0 ? stream_of(x->s) : 0);
        }
        map_remove_at(i - 1);
        inst_drop(x);
    }
}

static void map_insert(inst_t *x)
{
    map_clear(x->rec, x->rec_size);
    map = grow(map, &capmap, nmap + 1, sizeof *map);
    size_t i = map_upper(x->rec);
    memmove(&map[i + 1], &map[i], (nmap - i) * sizeof *map);
    map[i] = x;
    nmap++;
}

static inst_t *map_live_at(uint64_t a) // a live allocation starting exactly at a
{
    uint64_t off = 0;
    inst_t *c = carried(a, &off);
    if (c) return !off && c->live ? c : NULL;
    size_t i = map_upper(a);
    if (i == 0) return NULL;
    inst_t *x = map[i - 1];
    return x->rec == a && x->live && !x->mapped ? x : NULL;
}

// --scale: sizes and offsets divided by K, rounded up to 512 bytes. The same
// monotone rounding for the start and the end of a range keeps disjoint
// ranges disjoint (a range may then vanish, never overlap its neighbour).
static uint64_t scaled(uint64_t x)
{
    if (opt_scale == 1) return x;
    uint64_t q = x / opt_scale + (x % opt_scale != 0);
    return (q + ALIGN - 1) / ALIGN * ALIGN;
}

typedef struct span_s {
    inst_t *x;
    uint64_t off, len; // replayed, inside x
} span_t;

// The replayed range of a recorded address and length (LEN_UNKNOWN: to the
// end of its allocation). false when the address is in no allocation the
// trace made.
static bool span_of(uint64_t addr, uint64_t len, span_t *out)
{
    uint64_t o = 0;
    inst_t *x = carried(addr, &o);
    if (!x) {
        x = map_find(addr);
        if (!x) return false;
        o = addr - x->rec;
    }
    uint64_t start = scaled(o), end;
    if (len == LEN_UNKNOWN || o + len > x->rec_size)
        end = x->rep_size;
    else
        end = scaled(o + len);
    if (start > x->rep_size) start = x->rep_size;
    if (end > x->rep_size) end = x->rep_size;
    if (end < start) end = start;
    *out = (span_t){x, start, end - start};
    return true;
}

// --- the figures taken while issuing -----------------------------------------------------------
static uint64_t in_use_now(void)
{
    size_t fr = 0, tot = 0;
    if (cuMemGetInfo(&fr, &tot) != CUDA_SUCCESS) return 0;
    return tot > fr ? tot - fr : 0;
}

// The driver's count (every pool's reserve and aoshim's handles included),
// after every allocation, free, synchronisation and control call.
static void sample(void)
{
    uint64_t u = in_use_now();
    if (u > M.step_in_use) M.step_in_use = u;
    if (u > M.peak_in_use) {
        M.peak_in_use = u;
        M.peak_in_use_line = cur_line;
        M.peak_in_use_step = cur_step;
        M.peak_in_use_phase = cur_phase;
    }
}

static void fwd_note(void)
{
    if (fwd_open >= 0 && M.live > fwd_end_now[fwd_open]) fwd_end_now[fwd_open] = M.live;
    if (bwd_open >= 0 && M.live > bwd_most_now[bwd_open]) bwd_most_now[bwd_open] = M.live;
    if (head_open && M.live > head_now) head_now = M.live;
}

static void count_alloc(uint64_t bytes)
{
    M.live += bytes;
    fwd_note();
    if (M.live > M.peak_device) {
        M.peak_device = M.live;
        M.peak_device_line = cur_line;
        M.peak_device_step = cur_step;
        M.peak_device_phase = cur_phase;
    }
}

// --- --check: the sampled words --------------------------------------------------------------
static inline uint8_t expect(const word_t *w, uint64_t i)
{
    if (w->val >= 0) return (uint8_t)w->val;
    return (uint8_t)(ts_mix64(w->seed + (i >> 3)) >> ((i & 7) * 8));
}

static size_t w_first(const inst_t *x, uint64_t a) // first word ending after a
{
    size_t lo = 0, hi = x->nw;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x->w[mid].off + x->w[mid].len <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Forget the words a write of [a, a + n) replaces (a word only partly
// inside goes whole: its other bytes are no longer known either way).
static void w_clear(inst_t *x, uint64_t a, uint64_t n)
{
    size_t i = w_first(x, a), j = i;
    while (j < x->nw && x->w[j].off < a + n)
        j++;
    if (j == i) return; // nothing there (also: no words yet, w NULL)
    memmove(&x->w[i], &x->w[j], (x->nw - j) * sizeof *x->w);
    x->nw -= j - i;
}

static void w_add(inst_t *x, word_t w)
{
    x->w = grow(x->w, &x->capw, x->nw + 1, sizeof *x->w);
    size_t i = w_first(x, w.off);
    memmove(&x->w[i + 1], &x->w[i], (x->nw - i) * sizeof *x->w);
    x->w[i] = w;
    x->nw++;
}

// The sampled words of a write of [a, a + n): its first and last 64 bytes
// and one 64-byte word every 2 MiB from its start, so a 24 GiB step keeps
// its host memory sparse. Disjoint, in order.
static size_t samples(uint64_t a, uint64_t n, uint64_t *off, uint32_t *len, size_t max)
{
    size_t k = 0;
    uint64_t end = a + n, at = a;
    for (uint64_t p = a; p < end && k + 1 < max; p += SAMPLE_GAP) {
        if (p < at) continue;
        uint64_t l = end - p < SAMPLE ? end - p : SAMPLE;
        off[k] = p;
        len[k++] = (uint32_t)l;
        at = p + l;
        if (end - p <= SAMPLE_GAP) break;
    }
    uint64_t last = end >= SAMPLE ? end - SAMPLE : 0;
    if (last < at) last = at;
    if (last < end) {
        off[k] = last;
        len[k++] = (uint32_t)(end - last);
    }
    return k;
}

static uint64_t bad_reports;

static void wrong_bytes(uint64_t n, const char *what, uint64_t off)
{
    M.wrong += n;
    if (bad_reports++ < 8)
        fprintf(stderr,
                PROG ": check: %" PRIu64 " wrong byte%s at offset %" PRIu64
                     " of an allocation, read by %s (trace line %zu, step %d)\n",
                n, n == 1 ? "" : "s", off, what, cur_line, cur_step);
}

// Verify the words of x inside [off, off + n) against mem, which holds
// those bytes (mem[0] is byte off).
static void w_verify(const inst_t *x, uint64_t off, uint64_t n, const uint8_t *mem,
                     const char *what)
{
    for (size_t i = w_first(x, off); i < x->nw && x->w[i].off < off + n; i++) {
        const word_t *w = &x->w[i];
        uint64_t lo = w->off > off ? w->off : off;
        uint64_t hi = w->off + w->len < off + n ? w->off + w->len : off + n;
        uint64_t bad = 0;
        for (uint64_t b = lo; b < hi; b++)
            if (mem[b - off] != expect(w, b - w->off)) bad++;
        if (bad) wrong_bytes(bad, what, lo);
    }
}

// Write the pattern of (seed, range) into the sampled words of [off, off + n)
// of mem (mem[0] is byte off) and remember them.
static void w_write(inst_t *x, uint64_t off, uint64_t n, uint8_t *mem, uint64_t seed)
{
    w_clear(x, off, n);
    if (!n) return;
    uint64_t so[4096];
    uint32_t sl[4096];
    size_t k = samples(off, n, so, sl, 4096);
    for (size_t i = 0; i < k; i++) {
        word_t w = {so[i], ts_mix64(seed ^ ts_mix64(so[i] + 1)), sl[i], -1};
        for (uint64_t b = 0; b < w.len; b++)
            mem[w.off - off + b] = expect(&w, b);
        w_add(x, w);
    }
}

static uint64_t seed_of(size_t rec, uint64_t off)
{
    return ts_mix64(((uint64_t)cur_step << 40) ^ ((uint64_t)rec << 1) ^ 0x5bd1e995) ^ ts_mix64(off);
}

// --- kernels -------------------------------------------------------------------------------
// One simulated kernel per (trace kernel, pointer count, access modes),
// registered at its first launch under the trace's kernel name (aoshim's
// late-reload messages name it). Parameters, all 8 bytes:
//   ptr[0..d-1]   pointers with declared accesses (mode as resolved)
//   len[0..d-1]   the bytes each touches from there (the accesses' counts)
//   [blob]        the rest of the pointers, e (<= 512) words in one
//                 parameter of 8*e bytes, with no declared access:
//                 SIM_MAX_PARAMS (32) and SIM_MAX_ACCESSES (16) bound one
//                 kernel, so a launch of more than 15 pointers declares
//                 the first 14 (2*14 + 3 parameters) and passes the others
//                 only for aoshim's scan to see (it classifies every 8-byte
//                 word of every parameter); the simulator then neither
//                 checks nor orders those, and --check does not touch them
//   rec           the record's index (the body finds its launch by it)
//   flops         the duration, in the simulator's currency
// The cost is ns_fixed (0) + flops / (SIM_TFLOPS * 1e3) ns: flops = dur *
// SIM_TFLOPS * 1e3, so the kernel lasts the trace's dur.
typedef struct kkey_s {
    int32_t kid, nd, ne;
    uint8_t modes[MAX_DECL];
} kkey_t;

typedef struct kreg_s {
    kkey_t key;
    const char *sym; // the host "stub" cudaLaunchKernel is called with
} kreg_t;

static kreg_t *kregs;
static size_t capkregs, nkregs; // open addressing, capkregs a power of two

static uint64_t key_hash(const kkey_t *k)
{
    uint64_t h = ts_mix64((uint64_t)k->kid ^ ((uint64_t)k->nd << 32) ^ ((uint64_t)k->ne << 48));
    for (int i = 0; i < k->nd; i++)
        h = ts_mix64(h ^ k->modes[i]);
    return h;
}

// The launch being issued, for the body: the simulator runs a kernel's body
// inside its launch call, in program order, on this thread.
static struct {
    bool active;
    size_t rec;
    const char *name;
    int nd, ne;
    span_t sp[MAX_DECL];
    uint8_t mode[MAX_DECL];
} cur;

static void kernel_body(void **args, const sim_launch_t *L)
{
    (void)L;
    // The rec parameter follows the pointers, their lengths and the blob.
    if (!opt_check || !cur.active || *(uint64_t *)args[2 * cur.nd + (cur.ne > 0)] != cur.rec)
        return;
    // Reads first, then writes: a kernel reads its inputs before it writes
    // its outputs, also where an output range is an input too.
    for (int i = 0; i < cur.nd; i++)
        if (cur.mode[i] & M_R)
            w_verify(cur.sp[i].x, cur.sp[i].off, cur.sp[i].len, *(uint8_t **)args[i], cur.name);
    for (int i = 0; i < cur.nd; i++)
        if (cur.mode[i] & M_W)
            w_write(cur.sp[i].x, cur.sp[i].off, cur.sp[i].len, *(uint8_t **)args[i],
                    seed_of(cur.rec, cur.sp[i].off + 0x100000000ull * (uint64_t)i));
}

static double tflops(void)
{
    // The simulator's figure (tests/sim/drv/core.c: SIM_TFLOPS, else the
    // profile's: h100 600, a100 200).
    const char *v = getenv("SIM_TFLOPS");
    if (v && *v) {
        double x = strtod(v, NULL);
        if (x > 0) return x;
    }
    v = getenv("SIM_PROFILE");
    return v && !strcasecmp(v, "a100") ? 200.0 : 600.0;
}

static uint64_t flops_for(uint64_t ns)
{
    static double k;
    if (!k) k = tflops() * 1e3;
    // The simulator truncates flops / k: the smallest count that gives ns.
    uint64_t f = (uint64_t)((double)ns * k);
    while ((uint64_t)((double)f / k) < ns)
        f++;
    while (f && (uint64_t)((double)(f - 1) / k) >= ns)
        f--;
    return f;
}

static const char *kernel_sym(const kkey_t *key, const char *name)
{
    if (nkregs * 2 >= capkregs) {
        size_t ncap = capkregs ? capkregs * 2 : 256;
        kreg_t *n = calloc(ncap, sizeof *n);
        if (!n) abort();
        for (size_t i = 0; i < capkregs; i++) {
            if (!kregs[i].sym) continue;
            size_t j = key_hash(&kregs[i].key) & (ncap - 1);
            while (n[j].sym)
                j = (j + 1) & (ncap - 1);
            n[j] = kregs[i];
        }
        free(kregs);
        kregs = n;
        capkregs = ncap;
    }
    size_t j = key_hash(key) & (capkregs - 1);
    while (kregs[j].sym) {
        if (!memcmp(&kregs[j].key, key, sizeof *key)) return kregs[j].sym;
        j = (j + 1) & (capkregs - 1);
    }
    sim_kernel_desc_t d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.fn = kernel_body;
    int p = 0;
    for (int i = 0; i < key->nd; i++)
        d.param_size[p++] = 8;
    for (int i = 0; i < key->nd; i++) {
        d.param_size[p] = 8;
        d.access[d.naccess++] = (sim_access_t){i, key->modes[i], p, 1};
        p++;
    }
    if (key->ne) d.param_size[p++] = 8u * (uint32_t)key->ne;
    d.param_size[p++] = 8; // rec
    d.param_size[p] = 8;   // flops
    d.flops_param = p++;
    d.flops_scale = 1.0;
    d.nparams = p;
    d.ns_fixed = 0;
    char *sym = malloc(1); // a distinct address per registration
    if (!sym) abort();
    int rc = simrtRegisterKernel(sym, &d);
    if (rc != 0) stop("cuda_error", 1, "simrtRegisterKernel(%s) failed: %d", name, rc);
    kregs[j] = (kreg_t){*key, sym};
    nkregs++;
    return sym;
}

// The model for a launch without dur= whose kernel was never timed in the
// trace: the bytes it touches (as recorded, unscaled) at 2 TB/s plus 3 us
// (a memory-bound kernel on an H100-class part). A kernel timed elsewhere in
// the trace lasts the mean of its timed launches instead.
static uint64_t dur_of(const rec_t *r)
{
    if (r->flags & RF_DUR) return r->dur;
    if ((size_t)r->id < nkdecls && kdecls[r->id].dur_n)
        return kdecls[r->id].dur_sum / kdecls[r->id].dur_n;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < r->nptr; i++) {
        const ptr_t *p = &ptrs[r->ptr0 + i];
        uint64_t o = 0;
        inst_t *x = carried(p->addr, &o);
        if (!x) {
            x = map_find(p->addr);
            if (!x) continue;
            o = p->addr - x->rec;
        }
        uint64_t rest = x->rec_size - o;
        bytes += p->len == LEN_UNKNOWN || p->len > rest ? rest : p->len;
    }
    return 3000 + bytes / 2000;
}

static void issue_launch(size_t ri, const rec_t *r)
{
    const char *name = (size_t)r->id < nkdecls ? kdecls[r->id].name : NULL;
    static char made_up[32];
    if (!name) {
        snprintf(made_up, sizeof made_up, "kernel_%d", r->id);
        name = made_up;
        note.undeclared_kernels++;
    }
    uint32_t n = 0;
    span_t sp[MAX_DECL + MAX_BLOB];
    uint8_t mode[MAX_DECL + MAX_BLOB];
    uint32_t at[MAX_DECL + MAX_BLOB]; // each pointer's place among the record's words
    // --scan-leftovers: the words taken as no pointer, each at its place
    // among the record's words (the trace leaves out words that are 0), so
    // that aoshim's scan sees each kernel's leftovers where the GPU's did.
    uint64_t raw[MAX_BLOB];
    if (opt_scan_leftovers) memset(raw, 0, sizeof raw);
    for (uint32_t i = 0; i < r->nptr; i++) {
        const ptr_t *p = &ptrs[r->ptr0 + i];
        span_t s;
        if (p->junk) { // counted by classify_raw_words
            // An address of the trace's, where its memory is in the replay;
            // a word no address can be (a size, a stride: below 64 KiB or
            // at 2^57 and above; two integers packed), as it is; any other
            // word (a host address) cannot be placed.
            if (opt_scan_leftovers && i < MAX_BLOB) {
                if (packed_pair(p->addr))
                    raw[i] = p->addr;
                else if (span_of(p->addr, LEN_UNKNOWN, &s))
                    raw[i] = s.x->rep + s.off;
                else if (p->addr < 0x10000 || p->addr >= 1ull << 57)
                    raw[i] = p->addr;
            }
            continue;
        }
        if (!span_of(p->addr, p->len, &s)) {
            note.unmapped_ptrs++;
            continue;
        }
        // A raw parameter word (a recorded launch: no length, no mode) that
        // names memory already freed is not taken as a read. A kernel
        // dereferences only the fields it uses, and PyTorch's parameter
        // structs carry uninitialised padding and unused fields: on the H200
        // (gpu-check's GPT, 2026-11-26) an elementwise `where` kernel's
        // parameters held the address of a 4-byte scratch tensor freed just
        // before, beside its four real operands, and that program ran with
        // the same bits twice. A declared pointer (with a length or a mode,
        // as converted and hand-made traces write them) to freed memory is
        // still the use-after-free it says, and faults.
        if (!s.x->live && p->len == LEN_UNKNOWN && p->mode == M_UNKNOWN) {
            note.stale_words++;
            if (opt_scan_leftovers && i < MAX_BLOB) raw[i] = s.x->rep + s.off;
            continue;
        }
        if (n == MAX_DECL + MAX_BLOB) {
            note.dropped_ptrs++;
            continue;
        }
        // Unknown mode: the range's first touch in the trace writes, every
        // later one reads (docs/trace-format.md).
        mode[n] = p->mode ? p->mode : s.x->touched ? M_R : M_W;
        at[n] = i;
        sp[n++] = s;
    }
    // The blob: in one launch form, the pointers past the declared ones;
    // with --scan-leftovers, all MAX_BLOB places, the leftovers and those
    // pointers each at its place (a kernel's blob then has one layout).
    bool blob_fixed = opt_scan_leftovers;
    int nd = n <= MAX_DECL && !blob_fixed ? (int)n : n < MAX_DECL ? (int)n : MAX_DECL - 1;
    int ne = (int)n - nd;
    if (ne > MAX_BLOB) ne = MAX_BLOB;
    int nb = blob_fixed ? MAX_BLOB : ne;
    kkey_t key;
    memset(&key, 0, sizeof key);
    key.kid = r->id;
    key.nd = nd;
    key.ne = nb;
    for (int i = 0; i < nd; i++)
        key.modes[i] = mode[i];
    const char *sym = kernel_sym(&key, name);

    uint64_t pv[MAX_DECL], lv[MAX_DECL], blob[MAX_BLOB], recv = ri, flops = flops_for(dur_of(r));
    void *args[SIM_MAX_PARAMS];
    int a = 0;
    for (int i = 0; i < nd; i++) {
        pv[i] = sp[i].x->rep + sp[i].off;
        lv[i] = sp[i].len;
    }
    for (int i = 0; i < nd; i++)
        args[a++] = &pv[i];
    for (int i = 0; i < nd; i++)
        args[a++] = &lv[i];
    if (blob_fixed) {
        memcpy(blob, raw, sizeof blob);
        for (int i = 0; i < ne; i++) {
            if (at[nd + i] < MAX_BLOB)
                blob[at[nd + i]] = sp[nd + i].x->rep + sp[nd + i].off;
            else
                note.dropped_ptrs++; // past the blob: the simulator saw it, aoshim does not
        }
    } else {
        for (int i = 0; i < ne; i++)
            blob[i] = sp[nd + i].x->rep + sp[nd + i].off;
    }
    if (nb) args[a++] = blob;
    args[a++] = &recv;
    args[a++] = &flops;

    cur.active = true;
    cur.rec = ri;
    cur.name = name;
    cur.nd = nd;
    cur.ne = nb;
    for (int i = 0; i < nd; i++) {
        cur.sp[i] = sp[i];
        cur.mode[i] = mode[i];
    }
    dim3 grid = {(unsigned)r->a, (unsigned)(r->a >> 32), (unsigned)r->b};
    dim3 block = {(unsigned)(r->b >> 32), (unsigned)r->c, (unsigned)(r->c >> 32)};
    // The simulator checks a launch's shape as a GPU does; a trace's shape
    // only sizes the real kernel, so an odd one is made legal here.
    if (!grid.x) grid.x = 1;
    if (!grid.y) grid.y = 1;
    if (!grid.z) grid.z = 1;
    if (!block.x || !block.y || !block.z || (uint64_t)block.x * block.y * block.z > 1024)
        block = (dim3){128, 1, 1};
    cudaError_t e = cudaLaunchKernel(sym, grid, block, args, (size_t)(r->id2 > 0 ? r->id2 : 0),
                                     stream_of(r->s));
    cur.active = false;
    if (e != cudaSuccess) {
        char call[160];
        snprintf(call, sizeof call, "cudaLaunchKernel(%.120s)", name);
        ck_rt(e, call);
    }
    for (uint32_t i = 0; i < n; i++)
        sp[i].x->touched = true;
}

// --- host buffers for copies -------------------------------------------------------------------
// One pinned and one pageable buffer per stream, as large as that stream's
// largest copy: copies on one stream are ordered, so they can share one.
typedef struct hbuf_s {
    uint8_t *pinned, *pageable;
    uint64_t pinned_n, pageable_n;
} hbuf_t;
static hbuf_t *hbufs;
static size_t caphbufs;

static void hbuf_plan(void)
{
    for (size_t i = 0; i < nrecs; i++) {
        const rec_t *r = &recs[i];
        if (r->kind != K_COPY || (r->op != CP_H2D && r->op != CP_D2H)) continue;
        int s = (r->flags & RF_ASYNC) ? r->s : 0;
        size_t old = caphbufs;
        hbufs = grow(hbufs, &caphbufs, (size_t)s + 1, sizeof *hbufs);
        memset(&hbufs[old], 0, (caphbufs - old) * sizeof *hbufs);
        uint64_t n = scaled(r->c);
        uint64_t *need = (r->flags & RF_PAGEABLE) ? &hbufs[s].pageable_n : &hbufs[s].pinned_n;
        if (n > *need) *need = n;
    }
    for (size_t s = 0; s < caphbufs; s++) {
        hbuf_t *h = &hbufs[s];
        if (h->pinned_n) ck_rt(cudaMallocHost((void **)&h->pinned, h->pinned_n), "cudaMallocHost");
        if (h->pageable_n && !(h->pageable = calloc(1, h->pageable_n))) abort();
    }
}

// --- issuing ---------------------------------------------------------------------------------
// x freed through the free entry point api (A_CUDA_FREE, A_CU_MEM_FREE,
// A_CU_MEM_FREE_ASYNC; anything else: cudaFreeAsync), whatever made it.
static void free_through(int api, inst_t *x, cudaStream_t s)
{
    switch (api) {
    case A_CUDA_FREE:
        ck_rt(cudaFree((void *)(uintptr_t)x->rep), "cudaFree");
        break;
    case A_CU_MEM_FREE:
        ck_cu(cuMemFree((CUdeviceptr)x->rep), "cuMemFree");
        break;
    case A_CU_MEM_FREE_ASYNC:
        ck_cu(cuMemFreeAsync((CUdeviceptr)x->rep, (CUstream)s), "cuMemFreeAsync");
        break;
    default:
        ck_rt(cudaFreeAsync((void *)(uintptr_t)x->rep, s), "cudaFreeAsync");
        break;
    }
    x->live = false;
    M.live -= x->counted;
    x->counted = 0;
}

// x freed by the replay itself, through the free that matches its allocation.
static void free_inst(inst_t *x, cudaStream_t s)
{
    if (!x->live) return;
    if (x->mapped) {
        ck_cu(cuMemUnmap((CUdeviceptr)x->rep, x->rep_size), "cuMemUnmap");
        ck_cu(cuMemAddressFree((CUdeviceptr)x->rep, x->rep_size), "cuMemAddressFree");
        x->live = false;
        return;
    }
    int api = x->api == A_CUDA_MALLOC    ? A_CUDA_FREE
              : x->api == A_CU_MEM_ALLOC ? A_CU_MEM_FREE
              : x->api == A_CU_MEM_ALLOC_ASYNC || x->api == A_CU_MEM_ALLOC_POOL
                  ? A_CU_MEM_FREE_ASYNC
                  : A_CUDA_FREE_ASYNC;
    free_through(api, x, s);
}

// cuMemCreate handles: the trace's handle number to the replay's handle.
typedef struct handle_s {
    uint64_t rec, size;
    CUmemGenericAllocationHandle h;
    bool live;
} handle_t;
static handle_t *handles;
static size_t nhandles, caphandles;

static handle_t *handle_of(uint64_t rec)
{
    for (size_t i = nhandles; i-- > 0;)
        if (handles[i].rec == rec && handles[i].live) return &handles[i];
    return NULL;
}

static uint64_t granularity(void)
{
    static uint64_t g;
    if (g) return g;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gr = 0;
    if (cuMemGetAllocationGranularity(&gr, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        !gr)
        gr = 2u << 20;
    return g = gr;
}

static void issue_alloc(const rec_t *r)
{
    uint64_t size = scaled(r->b);
    if (!size) size = ALIGN;
    cudaStream_t s = r->s >= 0 ? stream_of(r->s) : 0;
    void *p = NULL;
    CUdeviceptr dp = 0;
    const char *call = api_name[r->op];
    switch (r->op) {
    case A_CUDA_MALLOC:
        ck_rt(cudaMalloc(&p, size), call);
        break;
    case A_CUDA_MALLOC_ASYNC:
        ck_rt(cudaMallocAsync(&p, size, s), call);
        break;
    case A_CU_MEM_ALLOC:
        ck_cu(cuMemAlloc(&dp, size), call);
        p = (void *)(uintptr_t)dp;
        break;
    case A_CU_MEM_ALLOC_ASYNC:
        ck_cu(cuMemAllocAsync(&dp, size, (CUstream)s), call);
        p = (void *)(uintptr_t)dp;
        break;
    case A_CUDA_MALLOC_POOL:
    case A_CU_MEM_ALLOC_POOL:
        // The runtime's cudaMallocFromPoolAsync is the driver's call.
        ck_cu(cuMemAllocFromPoolAsync(&dp, size, pool_of(r->id), (CUstream)s), call);
        p = (void *)(uintptr_t)dp;
        break;
    case A_CU_MEM_CREATE: {
        uint64_t g = granularity();
        size = (size + g - 1) / g * g;
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h;
        ck_cu(cuMemCreate(&h, size, &prop, 0), call);
        handles = grow(handles, &caphandles, nhandles + 1, sizeof *handles);
        handles[nhandles++] = (handle_t){r->a, size, h, true};
        count_alloc(size);
        sample();
        return;
    }
    }
    inst_t *x = calloc(1, sizeof *x);
    if (!x) abort();
    *x = (inst_t){.rec = r->a,
                  .rec_size = r->b,
                  .rep = (uint64_t)(uintptr_t)p,
                  .rep_size = size,
                  .counted = size,
                  .api = r->op,
                  .live = true,
                  .s = r->s};
    map_insert(x);
    count_alloc(size);
    sample();
}

static void issue_free(const rec_t *r)
{
    cudaStream_t s = r->s >= 0 ? stream_of(r->s) : 0;
    if (r->op == A_CU_MEM_RELEASE) {
        handle_t *h = handle_of(r->a);
        if (!h) {
            note.unknown_frees++;
            return;
        }
        ck_cu(cuMemRelease(h->h), "cuMemRelease");
        h->live = false;
        M.live -= h->size;
        sample();
        return;
    }
    inst_t *x = map_live_at(r->a);
    if (!x) {
        note.unknown_frees++;
        return;
    }
    // The trace's entry point, whatever made the memory (a trace may free
    // cudaMallocAsync memory with cudaFree, as programs do).
    free_through(r->op, x, s);
    sample();
}

static void issue_map(const rec_t *r)
{
    handle_t *h = handle_of(r->c);
    if (!h) {
        note.unknown_frees++; // a mapping of a handle the trace never made
        return;
    }
    uint64_t g = granularity();
    uint64_t size = scaled(r->b);
    size = (size + g - 1) / g * g;
    if (size > h->size) size = h->size;
    CUdeviceptr va = 0;
    ck_cu(cuMemAddressReserve(&va, size, g, 0, 0), "cuMemAddressReserve");
    ck_cu(cuMemMap(va, size, 0, h->h, 0), "cuMemMap");
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ck_cu(cuMemSetAccess(va, size, &acc, 1), "cuMemSetAccess");
    inst_t *x = calloc(1, sizeof *x);
    if (!x) abort();
    *x = (inst_t){.rec = r->a,
                  .rec_size = r->b,
                  .rep = va,
                  .rep_size = size,
                  .live = true,
                  .mapped = true,
                  .s = -1};
    map_insert(x);
}

static void issue_unmap(const rec_t *r)
{
    size_t i = map_upper(r->a);
    inst_t *x = i ? map[i - 1] : NULL;
    if (!x || x->rec != r->a || !x->live || !x->mapped) {
        note.unknown_frees++;
        return;
    }
    ck_cu(cuMemUnmap((CUdeviceptr)x->rep, x->rep_size), "cuMemUnmap");
    ck_cu(cuMemAddressFree((CUdeviceptr)x->rep, x->rep_size), "cuMemAddressFree");
    x->live = false;
    sample();
}

static void issue_pool(const rec_t *r)
{
    CUmemoryPool p = pool_of(r->id);
    switch (r->op) {
    case PO_CREATE: {
        // cuMemPoolCreate where the driver has it; otherwise the pool is the
        // default one (said at the end).
        typedef CUresult (*create_fn)(CUmemoryPool *, const CUmemPoolProps *);
        create_fn create = (create_fn)dlsym(RTLD_DEFAULT, "cuMemPoolCreate");
        CUmemoryPool np = NULL;
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        if (r->id == 0) break;
        if (!create || create(&np, &props) != CUDA_SUCCESS) {
            note.merged_pools++;
            break;
        }
        size_t old = npools_cap;
        pools = grow(pools, &npools_cap, (size_t)r->id + 1, sizeof *pools);
        for (size_t i = old; i < npools_cap; i++)
            pools[i] = NULL;
        pools[r->id] = np;
        break;
    }
    case PO_ATTR: {
        static const CUmemPool_attribute code[] = {
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
            CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        };
        int a = r->id2;
        // The current figures are read-only: a trace that names them says
        // what it read, which a replay does not repeat.
        if (a < 0 || a == 4 || a == 6) {
            note.unknown_attrs += a < 0;
            break;
        }
        int iv = (int)r->a;
        cuuint64_t uv = r->a;
        if (a == 3 && opt_scale != 1 && r->a != UINT64_MAX) uv = scaled(r->a);
        CUresult e = cuMemPoolSetAttribute(p, code[a], a <= 2 ? (void *)&iv : (void *)&uv);
        ck_cu(e, "cuMemPoolSetAttribute");
        break;
    }
    case PO_TRIM:
        ck_cu(cuMemPoolTrimTo(p, scaled(r->a)), "cuMemPoolTrimTo");
        sample();
        break;
    case PO_DESTROY:
        if (r->id != 0 && (size_t)r->id < npools_cap && pools[r->id]) {
            typedef CUresult (*destroy_fn)(CUmemoryPool);
            destroy_fn destroy = (destroy_fn)dlsym(RTLD_DEFAULT, "cuMemPoolDestroy");
            if (destroy) ck_cu(destroy(pools[r->id]), "cuMemPoolDestroy");
            pools[r->id] = NULL;
        }
        break;
    }
}

static void issue_memset(size_t ri, const rec_t *r)
{
    span_t d;
    if (!span_of(r->a, r->b, &d)) {
        note.skipped_copies++;
        return;
    }
    if (!d.len) return;
    ck_rt(cudaMemsetAsync((void *)(uintptr_t)(d.x->rep + d.off), (int)r->c, d.len, stream_of(r->s)),
          "cudaMemsetAsync");
    d.x->touched = true;
    if (opt_check) {
        // What the set wrote, sampled as a kernel's write is.
        w_clear(d.x, d.off, d.len);
        uint64_t so[4096];
        uint32_t sl[4096];
        size_t k = samples(d.off, d.len, so, sl, 4096);
        for (size_t i = 0; i < k; i++)
            w_add(d.x, (word_t){so[i], 0, sl[i], (int32_t)r->c});
    }
    (void)ri;
}

static void issue_copy(size_t ri, const rec_t *r)
{
    span_t src = {0}, dst = {0};
    if (r->op == CP_H2H) return; // host memory only: nothing the GPU sees
    if ((r->op != CP_H2D && !span_of(r->a, r->c, &src)) ||
        (r->op != CP_D2H && !span_of(r->b, r->c, &dst))) {
        note.skipped_copies++;
        return;
    }
    uint64_t n = r->op == CP_H2D ? dst.len : src.len;
    if (r->op == CP_D2D && dst.len < n) n = dst.len;
    if (!n) return;
    bool async = r->flags & RF_ASYNC;
    cudaStream_t s = async ? stream_of(r->s) : 0;
    uint8_t *host = NULL;
    if (r->op != CP_D2D) {
        const hbuf_t *hb = &hbufs[async ? r->s : 0]; // hbuf_plan made one for every such copy
        host = (r->flags & RF_PAGEABLE) ? hb->pageable : hb->pinned;
    }
    void *to, *from;
    enum cudaMemcpyKind k;
    if (r->op == CP_H2D) {
        to = (void *)(uintptr_t)(dst.x->rep + dst.off);
        from = host;
        k = cudaMemcpyHostToDevice;
        if (opt_check) {
            // The pattern goes into the host buffer, and so onto the device.
            w_clear(dst.x, dst.off, n);
            uint64_t so[4096];
            uint32_t sl[4096];
            size_t m = samples(0, n, so, sl, 4096);
            for (size_t i = 0; i < m; i++) {
                word_t w = {dst.off + so[i], ts_mix64(seed_of(ri, dst.off) ^ so[i]), sl[i], -1};
                for (uint64_t b = 0; b < w.len; b++)
                    host[so[i] + b] = expect(&w, b);
                w_add(dst.x, w);
            }
        }
    } else if (r->op == CP_D2H) {
        to = host;
        from = (void *)(uintptr_t)(src.x->rep + src.off);
        k = cudaMemcpyDeviceToHost;
    } else {
        to = (void *)(uintptr_t)(dst.x->rep + dst.off);
        from = (void *)(uintptr_t)(src.x->rep + src.off);
        k = cudaMemcpyDeviceToDevice;
    }
    if (async)
        ck_rt(cudaMemcpyAsync(to, from, n, k, s), "cudaMemcpyAsync");
    else
        ck_rt(cudaMemcpy(to, from, n, k), "cudaMemcpy");
    if (src.x) src.x->touched = true;
    if (dst.x) dst.x->touched = true;
    if (!opt_check) return;
    if (r->op == CP_D2H) {
        // The simulator runs a copy's effect at its enqueue, in program
        // order: the host buffer holds the bytes now.
        w_verify(src.x, src.off, n, host, "a device-to-host copy");
    } else if (r->op == CP_D2D) {
        // The words inside the source range move with the bytes.
        size_t i = w_first(src.x, src.off), m = 0;
        word_t *moved = NULL;
        size_t capm = 0;
        for (; i < src.x->nw && src.x->w[i].off < src.off + n; i++) {
            word_t w = src.x->w[i];
            if (w.off < src.off || w.off + w.len > src.off + n) continue;
            w.off = w.off - src.off + dst.off;
            moved = grow(moved, &capm, m + 1, sizeof *moved);
            moved[m++] = w;
        }
        w_clear(dst.x, dst.off, n);
        for (size_t j = 0; j < m; j++)
            w_add(dst.x, moved[j]);
        free(moved);
    }
}

static void issue_layer(const rec_t *r)
{
    int rc = AOSHIM_OK;
    const char *call = "";
    // A control call refers to the thread's current stream: the one the
    // trace says, when it says one.
    if (r->s >= 0 && r->op != LO_MICROBATCH) (void)aoshim_try_set_stream(stream_of(r->s));
    switch (r->op) {
    case LO_BEGIN:
        rc = aoshim_try_layer_begin(r->id), call = "aoshim_layer_begin";
        break;
    case LO_END:
        rc = aoshim_try_layer_end(r->id), call = "aoshim_layer_end";
        break;
    case LO_BWD_BEGIN:
        rc = aoshim_try_backward_begin(r->id), call = "aoshim_backward_begin";
        break;
    case LO_BWD_END:
        rc = aoshim_try_backward_end(r->id), call = "aoshim_backward_end";
        break;
    case LO_STEP_END:
        rc = aoshim_try_step_end(), call = "aoshim_step_end";
        break;
    case LO_MICROBATCH:
        rc = aoshim_try_set_microbatch(r->id2), call = "aoshim_set_microbatch";
        break;
    case LO_KEEP: {
        span_t s;
        if (!span_of(r->a, 1, &s)) return;
        rc = aoshim_try_keep((void *)(uintptr_t)(s.x->rep + s.off)), call = "aoshim_keep";
        break;
    }
    }
    static int warned;
    if (rc != AOSHIM_OK && rc != AOSHIM_ENOTLOADED && warned++ < 10)
        fprintf(stderr, PROG ": warning: trace line %zu: %s(%d) returned %d\n", cur_line, call,
                r->id, rc);
    sample();
}

static bool bwd_seen; // this step's first backward_begin passed

// --- the host's pace ---------------------------------------------------------------------------
// On the GPU, the program's own host work (Python, autograd, the framework)
// ran between its CUDA calls: a recorded trace's t= are the calls' return
// times, so the gap before a call is that work plus the call's own cost. On
// the H200 it filled 63% (the Llama) to 99% (gpu-check's GPT) of the step
// (tests/replay/data/h200-2026-11-28/README.md): a host that runs far
// ahead of the GPU hides whatever aoshim does on it, and the GPU showed
// that it does not. So before each call the replay's host works for the
// recorded gap less what the simulator charged the last call of that kind
// (its host waits and virtual-memory calls left out, so that aoshim's are
// added to the program's work, not taken from it). A synchronisation's or
// a blocking copy's gap holds the GPU's time, not the host's: none there.
// aoshim's other calls inside a hooked call (its events and copies, 0.1 to
// 2.5 us each) are taken from the program's work: a little too kind.
static bool pace_on, pace_have; // pace_on: the trace's and the command line's say (main)
static uint64_t pace_prev_t, pace_cost[K_NKINDS], pace_host, pace_vmm, pace_wait;

static bool paced(const rec_t *r)
{
    return pace_on && (r->flags & RF_T);
}

static void pace_before(const rec_t *r)
{
    if (!paced(r)) return;
    bool blocking = r->kind == K_SYNC || (r->kind == K_COPY && !(r->flags & RF_ASYNC));
    if (pace_have && r->t > pace_prev_t && !blocking) {
        uint64_t gap = r->t - pace_prev_t;
        if (gap > pace_cost[r->kind]) {
            (void)simHostWork(gap - pace_cost[r->kind]);
            M.program_host += gap - pace_cost[r->kind];
        }
    }
    pace_prev_t = r->t;
    pace_have = true;
    (void)simHostClock(&pace_host, &pace_vmm, &pace_wait);
}

static void pace_after(const rec_t *r)
{
    if (!paced(r)) return;
    uint64_t host, vmm, wait;
    (void)simHostClock(&host, &vmm, &wait);
    uint64_t spent = host - pace_host, aside = (vmm - pace_vmm) + (wait - pace_wait);
    pace_cost[r->kind] = spent > aside ? spent - aside : 0;
}

static void issue_one(size_t i);

static void issue(size_t i)
{
    pace_before(&recs[i]);
    issue_one(i);
    pace_after(&recs[i]);
}

static void issue_one(size_t i)
{
    const rec_t *r = &recs[i];
    cur_line = r->line;
    cur_rec = i;
    switch (r->kind) {
    case K_STREAM: {
        stream_slot(r->id);
        if (stream_made[r->id]) break; // a step replayed again makes its streams once
        ck_rt(cudaStreamCreateWithPriority(&streams[r->id], (unsigned)r->a, r->id2),
              "cudaStreamCreateWithPriority");
        stream_made[r->id] = true;
        break;
    }
    case K_STREAM_DESTROY:
        if (r->id >= 2 && (size_t)r->id < nstreams_cap && stream_made[r->id]) {
            ck_rt(cudaStreamDestroy(streams[r->id]), "cudaStreamDestroy");
            stream_made[r->id] = false;
        }
        break;
    case K_EVENT: {
        size_t old = nevents_cap;
        events = grow(events, &nevents_cap, (size_t)r->id + 1, sizeof *events);
        for (size_t j = old; j < nevents_cap; j++)
            events[j] = NULL;
        if (!events[r->id])
            ck_rt(cudaEventCreateWithFlags(&events[r->id], (unsigned)r->a),
                  "cudaEventCreateWithFlags");
        break;
    }
    case K_RECORD:
        ck_rt(cudaEventRecord(event_of(r->id), stream_of(r->s)), "cudaEventRecord");
        break;
    case K_WAIT:
        ck_rt(cudaStreamWaitEvent(stream_of(r->s), event_of(r->id), 0), "cudaStreamWaitEvent");
        break;
    case K_SYNC:
        if (r->op == SY_DEVICE)
            ck_rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        else if (r->op == SY_STREAM)
            ck_rt(cudaStreamSynchronize(stream_of(r->s)), "cudaStreamSynchronize");
        else
            ck_rt(cudaEventSynchronize(event_of(r->id)), "cudaEventSynchronize");
        sample();
        break;
    case K_ALLOC:
        issue_alloc(r);
        break;
    case K_FREE:
        issue_free(r);
        break;
    case K_POOL:
        issue_pool(r);
        break;
    case K_LAUNCH:
        issue_launch(i, r);
        break;
    case K_MEMSET:
        issue_memset(i, r);
        break;
    case K_COPY:
        issue_copy(i, r);
        break;
    case K_LAYER:
        // The most the program had allocated in each forward layer, from its
        // begin to its end (the most over microbatches): what any allocator
        // holds there at least, for a floor on any schedule
        // (tests/bench/bench_forward_peak.py). Not the driver's count: a
        // pool that keeps its frees holds its high-water from the first
        // layer on.
        // The same in each backward layer and in the head (from a forward
        // layer's end to the next forward layer or the first backward one),
        // for the floor's backward side: what must still be off the device
        // there, against what the link can have brought back by each later
        // layer's backward.
        if (r->op == LO_BEGIN && r->id >= 0 && r->id < FWD_END_MAX) {
            fwd_open = r->id;
            head_open = false;
            fwd_note();
            if (r->id >= fwd_end_n) fwd_end_n = r->id + 1;
        } else if (r->op == LO_END) {
            fwd_note();
            fwd_open = -1;
            head_open = !bwd_seen;
            head_now = 0;
            fwd_note();
        } else if (r->op == LO_BWD_BEGIN && r->id >= 0 && r->id < FWD_END_MAX) {
            if (head_open) head_step = head_now;
            head_open = false;
            bwd_open = r->id;
            fwd_note();
            if (r->id >= bwd_most_n) bwd_most_n = r->id + 1;
        } else if (r->op == LO_BWD_END) {
            fwd_note();
            bwd_open = -1;
        }
        // Device memory in use when the step's backward begins: after the
        // loss, before the backward's own reloads.
        if (r->op == LO_BWD_BEGIN && !bwd_seen) {
            bwd_seen = true;
            uint64_t u = in_use_now();
            if (u > M.fwd_in_use) M.fwd_in_use = u;
        }
        issue_layer(r);
        break;
    case K_PHASE:
        cur_phase = r->id;
        break;
    case K_MAP:
        issue_map(r);
        break;
    case K_UNMAP:
        issue_unmap(r);
        break;
    }
}

// --- the step --------------------------------------------------------------------------------
// The setup is everything up to the last allocation (or mapping) made
// before the step begins (the first layer or phase record, else the first
// launch, copy or set) that is still alive at the first step_end: the
// memory alive at the trace's start, made once. Step 1 runs from there to
// the first step_end, step k from step_end k-1 to step_end k; what follows
// the last step_end is the teardown. Replayed step i is the trace's step
// min(i, steps in trace).
static size_t setup_end, *step_ends, nstep_ends, trace_end;

static void plan_steps(void)
{
    size_t cap = 0;
    for (size_t i = 0; i < nrecs; i++) {
        if (recs[i].kind == K_LAYER && recs[i].op == LO_STEP_END) {
            step_ends = grow(step_ends, &cap, nstep_ends + 1, sizeof *step_ends);
            step_ends[nstep_ends++] = i;
        }
    }
    trace_end = nrecs;
    size_t first = nrecs;
    for (size_t i = 0; i < nrecs && first == nrecs; i++)
        if (recs[i].kind == K_LAYER || recs[i].kind == K_PHASE) first = i;
    for (size_t i = 0; i < nrecs && first == nrecs; i++)
        if (recs[i].kind == K_LAUNCH || recs[i].kind == K_COPY || recs[i].kind == K_MEMSET)
            first = i;
    size_t e1 = nstep_ends ? step_ends[0] : nrecs;
    // Allocations before the step's first record, and whether each is freed
    // before the first step ends (a linear scan per candidate is enough:
    // a setup has few allocations before its first launch).
    // A map record places setup memory as an allocation does (its end is
    // an unmap).
    for (size_t i = 0; i < first; i++) {
        int k = recs[i].kind;
        if (k != K_ALLOC && k != K_MAP) continue;
        int end = k == K_ALLOC ? K_FREE : K_UNMAP;
        bool freed = false;
        for (size_t j = i + 1; j <= e1 && j < nrecs && !freed; j++) {
            const rec_t *q = &recs[j];
            if (q->kind == end && q->a == recs[i].a) freed = true;
            if (q->kind == k && q->a == recs[i].a) break; // reused: another life
        }
        if (!freed) setup_end = i + 1;
    }
}

static void issue_range(size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        issue(i);
}

static uint64_t elapsed(void)
{
    sim_stats_t st;
    memset(&st, 0, sizeof st);
    (void)simrtGetStats(&st);
    return st.elapsed_ns;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    if (!n) return 0;
    uint64_t *c = malloc(n * sizeof *c);
    if (!c) abort();
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_u64);
    uint64_t m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

// --- aoshim's report -------------------------------------------------------------------------
// late_reloads is the report's summary.late_reloads (docs/report-schema.md):
// aoshim_report_now writes AOSHIM_REPORT, read back here. Without a report
// file, aoshim's statistics (the same counter); without aoshim, 0.
static uint64_t late_cached;
static bool late_done;

static bool report_late(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) abort();
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            if (!buf) abort();
        }
    }
    fclose(f);
    buf[n] = 0;
    bool ok = false;
    const char *s = strstr(buf, "\"summary\"");
    const char *k = s ? strstr(s, "\"late_reloads\"") : NULL;
    if (k) {
        k += strlen("\"late_reloads\"");
        while (*k == ' ' || *k == ':')
            k++;
        char *end;
        unsigned long long v = strtoull(k, &end, 10);
        if (end != k) {
            *out = v;
            ok = true;
        }
    }
    free(buf);
    return ok;
}

// aoshim_report_now writes the summary to stderr as well as the files, and
// the exit writes it again: the replay wants the file only (the summary
// came twice).
static int report_now_quietly(void)
{
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved >= 0 && null >= 0) dup2(null, 2);
    int rc = aoshim_report_now();
    if (saved >= 0 && null >= 0) dup2(saved, 2);
    if (saved >= 0) close(saved);
    if (null >= 0) close(null);
    return rc;
}

static uint64_t late_reloads(void)
{
    if (late_done) return late_cached;
    late_done = true;
    if (!aoshim_loaded()) return late_cached = 0;
    aoshim_stats_t st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    uint64_t from_stats = aoshim_try_get_stats(&st) == AOSHIM_OK ? st.late_reloads : 0;
    const char *path = getenv("AOSHIM_REPORT");
    uint64_t v;
    if (path && *path && !strchr(path, '%') && aoshim_report_now && report_now_quietly() == 0 &&
        report_late(path, &v)) {
        if (v != from_stats)
            fprintf(stderr,
                    PROG ": warning: aoshim's report says %" PRIu64
                         " late reloads, its statistics %" PRIu64 "\n",
                    v, from_stats);
        return late_cached = v;
    }
    return late_cached = from_stats;
}

// --- main ------------------------------------------------------------------------------------
static void usage(FILE *to)
{
    fprintf(
        to,
        "usage: " PROG " TRACE [--steps N] [--check] [--scale K] [--scan-leftovers]\n"
        "       [--no-host-pace]\n"
        "Replays a step trace (docs/trace-format.md) on the simulated GPU, with aoshim when\n"
        "it is preloaded; prints one line 'replay status=... steps=... ...' last.\n"
        "  --steps N   replay the trace's step N times (default: its own steps)\n"
        "  --check     each kernel writes a pattern into what it writes and verifies\n"
        "              what it reads (needs data: not with SIM_NODATA=1)\n"
        "  --scale K   divide every size and offset by K (rounded up to 512 bytes)\n"
        "  --scan-leftovers  give aoshim's launch scan the raw words left out as leftovers\n"
        "              too (the simulator neither checks nor orders them)\n"
        "  --no-host-pace  issue each call as soon as the last one's cost has passed, not\n"
        "              after the program's own host work between them (a recorded trace's t=)\n");
}

static uint64_t parse_pos(const char *opt, const char *v, uint64_t max)
{
    errno = 0;
    char *end;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || *v == '-' || x < 1 || x > max) {
        fprintf(stderr, PROG ": error: %s '%s': expected an integer from 1 to %" PRIu64 "\n", opt,
                v ? v : "", max);
        usage(stderr);
        stop_early("usage", 2, "bad command line");
    }
    return x;
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--check")) {
            opt_check = true;
        } else if (!strcmp(a, "--scan-leftovers")) {
            opt_scan_leftovers = true;
        } else if (!strcmp(a, "--no-host-pace")) {
            opt_no_host_pace = true;
        } else if (!strcmp(a, "--steps")) {
            opt_steps = (long)parse_pos(a, i + 1 < argc ? argv[++i] : NULL, 1000000);
        } else if (!strcmp(a, "--scale")) {
            opt_scale = parse_pos(a, i + 1 < argc ? argv[++i] : NULL, 1ull << 40);
        } else if (a[0] == '-' && a[1]) {
            usage(stderr);
            stop_early("usage", 2, "unknown option '%s'", a);
        } else if (trace_path) {
            usage(stderr);
            stop_early("usage", 2, "unexpected argument '%s'", a);
        } else {
            trace_path = a;
        }
    }
    if (!trace_path) {
        usage(stderr);
        stop_early("usage", 2, "no trace given");
    }
}

// "<name> of each step: v1 v2 ..." on stderr (cut at 512 characters).
static void say_each_step(const char *name, const uint64_t *v, size_t n)
{
    if (!n) return;
    char buf[512];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 24 < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, " %" PRIu64, v[i]);
    fprintf(stderr, PROG ": %s of each step:%s%s\n", name, buf, o + 24 >= sizeof buf ? " ..." : "");
}

static void say_notes(void)
{
    if (M.program_host > M.program_host_setup && M.steps)
        fprintf(stderr,
                PROG ": the program's own host work between its calls, from the trace's t=: "
                     "%.1f ms a step (--no-host-pace: none)\n",
                (double)(M.program_host - M.program_host_setup) / 1e6 / M.steps);
    if (note.unknown_frees)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " frees or unmaps of memory the replay did not make "
                     "were skipped\n",
                note.unknown_frees);
    if (note.unmapped_ptrs)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " launch pointers in no allocation the trace made "
                     "were left out\n",
                note.unmapped_ptrs);
    if (note.reordered)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " records were issued earlier than their place in the "
                     "file, by their t= (another thread's block written late)\n",
                note.reordered);
    if (note.junk_words)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " raw launch parameter words in allocations were left "
                     "out: in another launch of the kernel, their slot held no live allocation "
                     "or two integers packed\n",
                note.junk_words);
    if (note.stale_words)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " raw launch parameter words named freed memory and "
                     "were not taken as pointers (stale fields)\n",
                note.stale_words);
    if (note.dropped_ptrs)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " launch pointers past %d in one launch were left "
                     "out\n",
                note.dropped_ptrs, MAX_DECL - 1 + MAX_BLOB);
    if (note.implicit_frees)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " allocations were freed by the replay before the "
                     "trace allocated over them (a step replayed again that keeps memory)\n",
                note.implicit_frees);
    if (note.skipped_copies)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " copies or sets of memory the replay did not make "
                     "were skipped\n",
                note.skipped_copies);
    if (note.merged_pools)
        fprintf(stderr,
                PROG ": note: the driver has no cuMemPoolCreate: %" PRIu64 " pool%s of the "
                     "trace replayed as the default pool\n",
                note.merged_pools, note.merged_pools == 1 ? "" : "s");
    if (note.unknown_attrs)
        fprintf(stderr,
                PROG ": note: %" PRIu64 " pool attributes this replay does not know were "
                     "skipped\n",
                note.unknown_attrs);
    if (note.undeclared_kernels)
        fprintf(stderr, PROG ": note: %" PRIu64 " launches of kernels without a kernel record\n",
                note.undeclared_kernels);
    say_each_step("step_ns", M.step_ns, M.nstep_ns);
    say_each_step("peak_in_use_bytes", M.in_use_of_step, M.nin_use);
    if (fwd_end_n) {
        fprintf(stderr, PROG ": most allocated_bytes in each forward layer of the last step:");
        for (int l = 0; l < fwd_end_n; l++)
            fprintf(stderr, " %d:%" PRIu64, l, fwd_end_last[l]);
        fprintf(stderr, "\n");
    }
    if (bwd_most_n) {
        fprintf(stderr, PROG ": most allocated_bytes in each backward layer of the last step:");
        for (int l = 0; l < bwd_most_n; l++)
            fprintf(stderr, " %d:%" PRIu64, l, bwd_most_last[l]);
        fprintf(stderr, "\n");
    }
    if (head_last)
        fprintf(stderr,
                PROG ": most allocated_bytes from the forward's last layer to the backward of "
                     "the last step: %" PRIu64 "\n",
                head_last);
    const char *none = "(no phase record)";
    fprintf(stderr,
            PROG ": peak_device_bytes at trace line %zu (step %d, phase %s); peak_in_use_bytes at "
                 "trace line %zu (step %d, phase %s)\n",
            M.peak_device_line, M.peak_device_step,
            M.peak_device_phase >= 0 ? phases[M.peak_device_phase] : none, M.peak_in_use_line,
            M.peak_in_use_step, M.peak_in_use_phase >= 0 ? phases[M.peak_in_use_phase] : none);
}

// As a replay again begins: each object the last replay left, out of the
// map, bound to the address it is handed at.
static void carry_bind(void)
{
    for (size_t i = 0; i < ncarry; i++) {
        carry[i].bound = NULL;
        size_t k = map_upper(carry[i].out);
        if (k == 0) continue;
        inst_t *x = map[k - 1];
        if (x->rec != carry[i].out || !x->live || x->mapped) continue;
        map_remove_at(k - 1);
        carry[i].bound = x;
    }
}

// The objects the records [from, to) are handed by the records before
// `prev` .. from, and those they leave, paired (carried(), above).
static void plan_carry(size_t prev, size_t from, size_t to)
{
    typedef struct life_s {
        size_t at, free_at; // free_at SIZE_MAX: never freed
        uint64_t a, n;
    } life_t;
    life_t *lives = NULL;
    size_t nl = 0, capl = 0;
    for (size_t i = 0; i < to; i++) {
        const rec_t *r = &recs[i];
        if (r->kind == K_ALLOC && r->op != A_CU_MEM_CREATE) {
            lives = grow(lives, &capl, nl + 1, sizeof *lives);
            lives[nl++] = (life_t){i, SIZE_MAX, r->a, r->b};
        } else if (r->kind == K_FREE && r->op != A_CU_MEM_RELEASE) {
            for (size_t k = nl; k-- > 0;) // the latest live one there
                if (lives[k].a == r->a && lives[k].free_at == SIZE_MAX) {
                    lives[k].free_at = i;
                    break;
                }
        }
    }
    bool *used = calloc(nl ? nl : 1, sizeof *used);
    if (!used) abort();
    for (size_t k = 0; k < nl; k++) {
        const life_t *in = &lives[k];
        if (in->at < prev || in->at >= from || in->free_at < from || in->free_at >= to) continue;
        // The one of its size made at the same place in its step (the
        // steps repeat: the loss is made near the end of each forward).
        double place = (double)(in->at - prev) / (double)(from - prev), best_d = 2;
        size_t best = SIZE_MAX;
        for (size_t m = 0; m < nl; m++) {
            const life_t *out = &lives[m];
            if (used[m] || out->at < from || out->free_at < to || out->n != in->n) continue;
            double d = fabs((double)(out->at - from) / (double)(to - from) - place);
            if (d < best_d) best_d = d, best = m;
        }
        if (best == SIZE_MAX) continue;
        used[best] = true;
        carry = grow(carry, &capcarry, ncarry + 1, sizeof *carry);
        carry[ncarry++] = (carry_t){in->a, in->n, lives[best].a, in->free_at, NULL};
    }
    free(used);
    free(lives);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    const char *nd = getenv("SIM_NODATA");
    if (opt_check && nd && *nd && strcmp(nd, "0"))
        stop_early("usage", 2, "--check needs the bytes: not with SIM_NODATA=%s", nd);
    read_trace();
    pace_on = trace_recorded && !trace_simulated && !trace_under_aoshim && !opt_no_host_pace;
    time_sampled_launches();
    note.reordered = order_by_time();
    note.junk_words = classify_raw_words();
    plan_steps();
    int trace_steps = (int)nstep_ends;
    int steps = opt_steps > 0 ? (int)opt_steps : trace_steps ? trace_steps : 1;

    ck_rt(cudaSetDevice(0), "cudaSetDevice");
    ck_cu(cuDeviceGetDefaultMemPool(&default_pool, 0), "cuDeviceGetDefaultMemPool");
    hbuf_plan();

    issue_range(0, setup_end);
    M.program_host_setup = M.program_host;
    ck_rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    sample();
    uint64_t t0 = elapsed();
    if (trace_steps && steps > trace_steps)
        plan_carry(
            trace_steps >= 2 ? (trace_steps >= 3 ? step_ends[trace_steps - 3] + 1 : setup_end) : 0,
            trace_steps >= 2 ? step_ends[trace_steps - 2] + 1 : setup_end,
            step_ends[trace_steps - 1] + 1);
    for (int i = 1; i <= steps; i++) {
        cur_step = i;
        bwd_seen = false;
        int k = trace_steps ? (i < trace_steps ? i : trace_steps) : 1;
        carry_on = trace_steps && i > trace_steps;
        if (carry_on) carry_bind();
        size_t from = k == 1 ? setup_end : step_ends[k - 2] + 1;
        size_t to = trace_steps ? step_ends[k - 1] + 1 : trace_end;
        issue_range(from, to);
        // Each step ends with the device drained, as a training loop that
        // reads its loss does: the step's time is then what the GPU took.
        ck_rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        sample();
        uint64_t t = elapsed();
        M.step_ns = grow(M.step_ns, &M.capstep_ns, M.nstep_ns + 1, sizeof *M.step_ns);
        M.step_ns[M.nstep_ns++] = t - t0;
        M.in_use_of_step = grow(M.in_use_of_step, &M.capin_use, M.nin_use + 1, sizeof(uint64_t));
        M.in_use_of_step[M.nin_use++] = M.step_in_use;
        M.step_in_use = 0;
        memcpy(fwd_end_last, fwd_end_now, sizeof fwd_end_now);
        memset(fwd_end_now, 0, sizeof fwd_end_now);
        memcpy(bwd_most_last, bwd_most_now, sizeof bwd_most_now);
        memset(bwd_most_now, 0, sizeof bwd_most_now);
        head_last = head_step;
        head_step = head_now = 0;
        head_open = false;
        t0 = t;
        M.steps = i;
    }
    cur_step = 0;
    carry_on = false;
    // The tail frees what the last step left: after a step replayed again,
    // the objects it left are those of that replay, at the same addresses.
    if (trace_steps) issue_range(step_ends[trace_steps - 1] + 1, trace_end);
    ck_rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    sample();
    say_notes();
    print_line("ok");
    return 0;
}
