// SPDX-License-Identifier: MIT
// Fault injection: SIM_FAIL=<call>:<n>[:<count>[:<error>]][,...] makes the
// n-th call of a driver entry point (and the count-1 after it) fail with a
// CUDA error, so a test can drive a program, or the shim under it, through
// the failures a real GPU produces only rarely (out of memory in cuMemMap, a
// copy that never ran), and check that it ends with the right bytes or a
// clear error, never with wrong data.
//
// The failure happens before the call does anything: the simulator's state
// (memory, mappings, events, streams, clocks, counters) and the caller's
// outputs are as if the call had not been made, except the host clock,
// charged the cost of any call. Counting is per process, from cuInit, under
// the simulator's lock, per entry point (its _ptsz/_ptds twin included);
// calls the runtime makes through cuGetProcAddress count like the program's.
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"


static const struct {
    const char *name; // as in cuda.h, without _v2
    CUresult dflt;
} calls[SIM_FAIL_NCALLS] = {
#define X(call, err) [SIM_FAIL_##call] = {#call, err},
    SIM_FAIL_CALLS(X)
#undef X
};

#define MAX_SPECS 64
typedef struct spec_s {
    int call;
    uint64_t n, count;
    CUresult err;
} spec_t;
static spec_t specs[MAX_SPECS];
static size_t nspecs;

// Set once, at cuInit, when SIM_FAIL names anything: every other run pays one
// atomic load per injectable call and never takes the lock for it.
static atomic_bool armed;
static uint64_t counts[SIM_FAIL_NCALLS];

// What fired, in order, for the exit lines and simInjectedGet. A test that
// injects more than this (count 100000, say) gets the first ones listed and
// a line saying how many more.
#define MAX_LOG 4096
#define MAX_CALLERS 3
typedef struct fired_s {
    int call;
    uint64_t n;
    CUresult err;
    const char *by[MAX_CALLERS]; // SIM_FAIL_CALLERS: modules on the stack, innermost first
} fired_t;
static fired_t fired[MAX_LOG];
static bool want_callers; // SIM_FAIL_CALLERS (see callers())
static uint64_t nfired;

// --- parsing ----------------------------------------------------------------------
static const char *env_value;

// The accepted forms, after what was wrong with which spec: one line.
__attribute__((noreturn)) static void bad(const char *spec, const char *what)
{
    char msg[3072];
    int n = snprintf(msg, sizeof msg,
                     "'%s': %s; expected <call>:<n>[:<count>[:<error>]], comma-separated, with n "
                     "and count integers >= 1 (count default 1) and error a CUDA_ERROR_* name or "
                     "number other than 0 (default: the call's own, see tests/sim/README.md); "
                     "calls (an optional _v2 suffix is ignored):",
                     spec, what);
    for (int i = 0; i < SIM_FAIL_NCALLS && n > 0 && (size_t)n < sizeof msg; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, " %s", calls[i].name);
    sim_cfg_die("SIM_FAIL", env_value, msg);
}

// Decimal digits only (no sign, no blanks), at least one, no overflow.
static bool parse_u64(const char *s, uint64_t *out)
{
    if (!*s) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static int call_by_name(const char *name)
{
    size_t len = strlen(name);
    // cuda.h's macros turn cuMemAlloc into cuMemAlloc_v2: either spelling
    // names the entry point a program calls.
    if (len > 3 && strcmp(name + len - 3, "_v2") == 0) len -= 3;
    for (int i = 0; i < SIM_FAIL_NCALLS; i++)
        if (strlen(calls[i].name) == len && strncmp(calls[i].name, name, len) == 0) return i;
    return -1;
}

static void parse_spec(char *spec)
{
    char whole[256];
    snprintf(whole, sizeof whole, "%s", spec);
    char *field[5];
    int nf = 0;
    for (char *p = spec; nf < 5;) {
        field[nf++] = p;
        p = strchr(p, ':');
        if (!p) break;
        *p++ = 0;
    }
    if (nf < 2) bad(whole, "no occurrence given");
    if (nf > 4) bad(whole, "too many fields");
    if (nspecs == MAX_SPECS) bad(whole, "more than 64 specs");
    spec_t s = {.count = 1};
    if ((s.call = call_by_name(field[0])) < 0) bad(whole, "not an injectable call");
    if (!parse_u64(field[1], &s.n) || s.n == 0) bad(whole, "n is not an integer >= 1");
    if (nf > 2 && (!parse_u64(field[2], &s.count) || s.count == 0))
        bad(whole, "count is not an integer >= 1");
    s.err = calls[s.call].dflt;
    if (nf > 3) {
        uint64_t code;
        if (parse_u64(field[3], &code)) {
            if (code > 0x7fffffff || !sim_error_name((CUresult)code))
                bad(whole, "error is not a CUresult of cuda.h");
            s.err = (CUresult)code;
        } else if (!sim_error_by_name(field[3], &s.err)) {
            bad(whole, "error is not a CUresult name of cuda.h");
        }
        if (s.err == CUDA_SUCCESS) bad(whole, "CUDA_SUCCESS is no failure");
    }
    specs[nspecs++] = s;
}

// SIM_COUNT_CALLS=1: count the injectable calls and list them at exit, so a
// test can choose which occurrences to fail (the first, a middle, the last).
static bool count_calls;

void sim_fail_load(void)
{
    const char *c = getenv("SIM_COUNT_CALLS");
    if (c && *c && strcmp(c, "0") != 0) {
        if (strcmp(c, "1") != 0) sim_cfg_die("SIM_COUNT_CALLS", c, "0 or 1");
        count_calls = true;
        atomic_store_explicit(&armed, true, memory_order_release);
    }
    const char *w = getenv("SIM_FAIL_CALLERS");
    if (w && *w && strcmp(w, "0") != 0) {
        if (strcmp(w, "1") != 0) sim_cfg_die("SIM_FAIL_CALLERS", w, "0 or 1");
        want_callers = true;
        // The first backtrace loads the unwinder (dlopen, malloc): done here,
        // not when a failure fires inside some caller's critical section.
        void *warm[2];
        (void)backtrace(warm, 2);
    }
    const char *v = getenv("SIM_FAIL");
    if (!v || !*v) return;
    env_value = v;
    char buf[4096];
    if (strlen(v) >= sizeof buf) sim_cfg_die("SIM_FAIL", v, "longer than 4095 characters");
    memcpy(buf, v, strlen(v) + 1);
    // Every comma separates two specs: an empty one (",," or a trailing
    // comma) is a typo, not nothing.
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (!*p) bad(p, "empty spec");
        parse_spec(p);
        if (!comma) break;
        p = comma + 1;
    }
    atomic_store_explicit(&armed, true, memory_order_release);
}

// --- who made the call -----------------------------------------------------------------
// SIM_FAIL_CALLERS=1: each injected line ends in " from <module> < <module> ...", the
// modules on the calling thread's stack outside this driver, innermost first,
// repeats folded (e.g. "from libaoshim.so < libcudart.so.13 < libaoshim.so <
// train_step": the runtime made the call, for a runtime call that passed
// through an interposer). A fact about the stack, not a judgement: a test
// that must tell an interposer's own calls from those it passed through
// reads it (tests/e2e/test_fault_matrix.c). Off by default, so the lines
// stay as they were for everyone else.

static const char *module_of(void *pc, const void *self)
{
    Dl_info info;
    if (!dladdr(pc, &info) || !info.dli_fname) return "?";
    if (info.dli_fbase == self) return NULL; // inside the driver
    const char *slash = strrchr(info.dli_fname, '/');
    const char *name = slash ? slash + 1 : info.dli_fname;
    return *name ? name : "main"; // the executable may have no name here
}

static void callers(fired_t *f)
{
    void *pcs[48];
    int n = backtrace(pcs, 48);
    Dl_info me;
    const void *self = dladdr((void *)sim_fail_check, &me) ? me.dli_fbase : NULL;
    int k = 0;
    for (int i = 0; i < n && k < MAX_CALLERS; i++) {
        const char *m = module_of(pcs[i], self);
        if (m && (k == 0 || strcmp(f->by[k - 1], m) != 0)) f->by[k++] = m;
    }
}

// --- the check ----------------------------------------------------------------------
CUresult sim_fail_check(int call)
{
    if (!atomic_load_explicit(&armed, memory_order_acquire)) return CUDA_SUCCESS;
    sim_lock();
    uint64_t n = ++counts[call];
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < nspecs && r == CUDA_SUCCESS; i++)
        if (specs[i].call == call && n >= specs[i].n && n - specs[i].n < specs[i].count)
            r = specs[i].err;
    if (r != CUDA_SUCCESS) {
        sim_host_advance(sim_cfg.api_ns); // a failed call still costs a call
        sim_st.injected++;
        if (nfired < MAX_LOG) {
            fired[nfired] = (fired_t){call, n, r, {NULL}};
            if (want_callers) callers(&fired[nfired]);
        }
        nfired++;
    }
    sim_unlock();
    return r;
}

void sim_fail_report(void)
{
    if (count_calls) {
        char line[4096];
        int n = snprintf(line, sizeof line, "calls");
        for (int i = 0; i < SIM_FAIL_NCALLS && n > 0 && (size_t)n < sizeof line; i++)
            if (counts[i])
                n += snprintf(line + n, sizeof line - (size_t)n, " %s=%llu", calls[i].name,
                              (unsigned long long)counts[i]);
        sim_log("%s", line);
    }
    if (!nspecs) return;
    uint64_t shown = nfired < MAX_LOG ? nfired : MAX_LOG;
    for (uint64_t i = 0; i < shown; i++) {
        const char *e = sim_error_name(fired[i].err);
        char from[256] = "";
        for (int k = 0; k < MAX_CALLERS && fired[i].by[k]; k++)
            snprintf(from + strlen(from), sizeof from - strlen(from), "%s%s", k ? " < " : " from ",
                     fired[i].by[k]);
        sim_log("injected %s:%llu -> %s%s", calls[fired[i].call].name,
                (unsigned long long)fired[i].n, e ? e : "?", from);
    }
    if (nfired > shown)
        sim_log("injected %llu more failures, not listed", (unsigned long long)(nfired - shown));
}

// --- queries (simgpu.h) ----------------------------------------------------------------
SIM_EXPORT CUresult simInjectedCount(uint64_t *count)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (!count) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    *count = nfired;
    SIM_RET(CUDA_SUCCESS);
}

SIM_EXPORT CUresult simInjectedGet(uint64_t i, const char **call, uint64_t *n, CUresult *error)
{
    CUresult r = sim_enter();
    if (r) SIM_RET(r);
    if (i >= nfired || i >= MAX_LOG) SIM_RET(CUDA_ERROR_INVALID_VALUE);
    if (call) *call = calls[fired[i].call].name;
    if (n) *n = fired[i].n;
    if (error) *error = fired[i].err;
    SIM_RET(CUDA_SUCCESS);
}
