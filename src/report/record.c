// SPDX-License-Identifier: MIT
// The run's record, kept for the exit report (see report.h for what and how
// much). Every ao_rec_* call comes under the engine's lock; the record has
// its own lock too, so that a report written while the program runs
// (aoshim_report_now) reads a consistent state. Steady state allocates
// nothing: buffers are allocated once, or grown by doubling up to a cap.
#define _GNU_SOURCE 1
#include "record.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef AO_HAVE_LIBUNWIND
#define AO_HAVE_LIBUNWIND 1
#endif
#if AO_HAVE_LIBUNWIND
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#endif

#include "clock.h"
#include "log.h"
#include "report.h"
#include "stats.h"

ao_rec_t ao_rec = {.max_layer = -1, .step_stride = 1};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define R ao_rec

// --- time -------------------------------------------------------------------------------
static void start_locked(void)
{
    if (R.started) return;
    R.started = true;
    R.origin_ns = ao_mono_ns();
}

static uint64_t now_locked(void)
{
    start_locked();
    uint64_t t = ao_mono_ns();
    return t > R.origin_ns ? t - R.origin_ns : 0;
}

static ao_rec_layer_t *layer_of(int layer)
{
    if (layer < -1 || layer >= AO_MAX_LAYERS) layer = -1;
    ao_rec_layer_t *l = &R.layer[layer + 1];
    if (!l->seen) {
        l->seen = true;
        if (layer > R.max_layer) R.max_layer = layer;
    }
    return l;
}

// --- the timeline -----------------------------------------------------------------------
static int tl_slot(int layer)
{
    int s = layer + 1;
    return s < AO_TL_LAYERS ? s : AO_TL_LAYERS - 1;
}

static void tl_merge(int a, int b) // bucket b (later) into a
{
    ao_rec_bucket_t *x = &R.tl[a], *y = &R.tl[b];
    if (y->peak > x->peak) x->peak = y->peak, x->t_peak = y->t_peak;
    if (y->peak_without > x->peak_without)
        x->peak_without = y->peak_without, x->t_peak_without = y->t_peak_without;
    x->t1 = y->t1;
    x->device = y->device, x->without = y->without, x->passthrough = y->passthrough;
    x->offloaded = y->offloaded, x->pinned = y->pinned;
    memcpy(&R.tl_layer[(size_t)a * AO_TL_LAYERS], &R.tl_layer[(size_t)b * AO_TL_LAYERS],
           AO_TL_LAYERS * sizeof *R.tl_layer);
}

// Halve the timeline: neighbours merge, keeping the higher peaks, so a peak
// is never decimated away.
static void tl_halve(void)
{
    int n = 0;
    for (int i = 0; i < R.ntl; i += 2, n++) {
        if (i != n) {
            R.tl[n] = R.tl[i];
            memcpy(&R.tl_layer[(size_t)n * AO_TL_LAYERS], &R.tl_layer[(size_t)i * AO_TL_LAYERS],
                   AO_TL_LAYERS * sizeof *R.tl_layer);
        }
        if (i + 1 < R.ntl) tl_merge(n, i + 1);
    }
    R.ntl = n;
    uint64_t span = R.ntl ? R.tl[R.ntl - 1].t1 - R.tl[0].t0 : 0;
    uint64_t w = span / (AO_TL_MAX / 2);
    R.tl_width = R.tl_width * 2 > w ? R.tl_width * 2 : w;
    if (!R.tl_width) R.tl_width = 1000;
}

// Note the state now. The device total is the stats' own gauge (pass-through
// plus tracked resident); when the stats' peak rose since the last sample,
// that peak happened since then, and it is placed here, so the timeline's
// highest point is always the reported peak.
static void sample_locked(void)
{
    uint64_t t = now_locked();
    if (!R.tl) {
        R.tl = calloc(AO_TL_MAX, sizeof *R.tl);
        R.tl_layer = calloc((size_t)AO_TL_MAX * AO_TL_LAYERS, sizeof *R.tl_layer);
        if (!R.tl || !R.tl_layer) {
            free(R.tl), free(R.tl_layer);
            R.tl = NULL, R.tl_layer = NULL;
            return;
        }
    }
    uint64_t pt = ao_stat_get(AO_STAT_PASSTHROUGH_BYTES);
    uint64_t res = ao_stat_get(AO_STAT_TRACKED_RESIDENT_BYTES);
    uint64_t live = ao_stat_get(AO_STAT_TRACKED_LIVE_BYTES);
    uint64_t device = pt + res, without = pt + live;
    uint64_t peak = device, peak_without = without;
    uint64_t gp = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
    uint64_t gw = ao_stat_get(AO_STAT_PEAK_WITHOUT_BYTES);
    if (gp > R.seen_peak) {
        R.seen_peak = gp, peak = gp > peak ? gp : peak;
        // What each call site had on the device when the peak was raised (at
        // the first recorded event after it: pass-through allocations raise
        // it without telling the record).
        for (uint32_t i = 0; R.sites && R.nsites && i < AO_SITES_MAX; i++)
            if (R.sites[i].hash)
                R.sites[i].peak_resident =
                    R.sites[i].resident > 0 ? (uint64_t)R.sites[i].resident : 0;
    }
    if (gw > R.seen_peak_without)
        R.seen_peak_without = gw, peak_without = gw > peak_without ? gw : peak_without;
    uint64_t pinned = ao_stat_get(AO_STAT_PINNED_HOST_BYTES);
    if (pinned > R.pinned_peak) R.pinned_peak = pinned;
    if (peak > R.cur.peak) R.cur.peak = peak;
    if (peak_without > R.cur.peak_without) R.cur.peak_without = peak_without;

    ao_rec_bucket_t *b = R.ntl ? &R.tl[R.ntl - 1] : NULL;
    if (!b || t - b->t0 >= R.tl_width) {
        if (R.ntl == AO_TL_MAX) tl_halve();
        b = &R.tl[R.ntl];
        memset(b, 0, sizeof *b);
        b->t0 = t;
        R.ntl++;
    }
    b->t1 = t;
    b->device = device, b->without = without, b->passthrough = pt;
    b->offloaded = live > res ? live - res : 0;
    b->pinned = pinned;
    if (peak >= b->peak) b->peak = peak, b->t_peak = t;
    if (peak_without >= b->peak_without) b->peak_without = peak_without, b->t_peak_without = t;
    uint64_t *row = &R.tl_layer[(size_t)(R.ntl - 1) * AO_TL_LAYERS];
    memset(row, 0, AO_TL_LAYERS * sizeof *row);
    for (int l = -1; l <= R.max_layer; l++) {
        int64_t v = R.layer[l + 1].resident;
        if (v > 0) row[tl_slot(l)] += (uint64_t)v;
    }
}

// --- events from the engine ---------------------------------------------------------------
void ao_rec_interval(int kind, int layer, int mb, uint64_t bytes, uint64_t s, uint64_t e)
{
    ao_rec_interval_busy(kind, layer, mb, bytes, s, e, e > s ? e - s : 0);
}

void ao_rec_interval_busy(int kind, int layer, int mb, uint64_t bytes, uint64_t s, uint64_t e,
                          uint64_t d)
{
    pthread_mutex_lock(&mu);
    start_locked();
    ao_rec_layer_t *l = layer_of(layer);
    switch (kind) {
    case AO_REC_D2H:
        l->d2h_ns += d, l->d2h_bytes += bytes, l->d2h_n++, R.cur.d2h_ns += d, R.timed[0]++;
        break;
    case AO_REC_H2D:
        l->h2d_ns += d, l->h2d_bytes += bytes, l->h2d_n++, R.cur.h2d_ns += d, R.timed[1]++;
        break;
    case AO_REC_WAIT:
        l->wait_ns += d, l->waits++, R.cur.wait_ns += d;
        break;
    default:
        break;
    }
    if (R.nspans == R.spans_cap && R.spans_cap < AO_SPANS_MAX) {
        uint32_t cap = R.spans_cap ? R.spans_cap * 2 : 256;
        ao_rec_span_t *n = realloc(R.spans, cap * sizeof *n);
        if (n) R.spans = n, R.spans_cap = cap;
    }
    if (R.nspans < R.spans_cap)
        R.spans[R.nspans++] = (ao_rec_span_t){s, e, bytes, layer, mb, (uint8_t)kind};
    else
        R.spans_dropped++;
    pthread_mutex_unlock(&mu);
}

void ao_rec_offload(int layer, int mb, unsigned buffers, uint64_t bytes)
{
    (void)mb;
    pthread_mutex_lock(&mu);
    ao_rec_layer_t *l = layer_of(layer);
    l->offloads++, l->offloaded_buffers += buffers, l->offloaded_bytes += bytes;
    R.cur.offloads++, R.cur.offloaded_bytes += bytes;
    R.issued[0]++;
    pthread_mutex_unlock(&mu);
}

void ao_rec_early_copy(int layer, int mb)
{
    (void)layer, (void)mb;
    pthread_mutex_lock(&mu);
    R.issued[0]++;
    R.early++;
    pthread_mutex_unlock(&mu);
}

void ao_rec_reload(int layer, int mb, unsigned buffers, uint64_t bytes, bool missed, bool rest)
{
    (void)mb;
    pthread_mutex_lock(&mu);
    ao_rec_layer_t *l = layer_of(layer);
    l->reloads += !rest, l->reloaded_buffers += buffers, l->reloaded_bytes += bytes;
    if (missed) l->missed++, R.cur.missed++;
    R.cur.reloads += !rest, R.cur.reloaded_bytes += bytes;
    R.issued[1]++;
    pthread_mutex_unlock(&mu);
}

void ao_rec_late_reload(int layer, int mb, const char *kernel)
{
    pthread_mutex_lock(&mu);
    ao_rec_layer_t *l = layer_of(layer);
    l->late++, R.cur.late++;
    if (!R.late && !(R.late = calloc(AO_LATE_MAX, sizeof *R.late)))
        R.late_dropped++;
    else if (R.nlate < AO_LATE_MAX) {
        ao_rec_late_t *x = &R.late[R.nlate++];
        x->t_ns = now_locked(), x->layer = layer, x->mb = mb;
        if (kernel) {
            strncpy(x->kernel, kernel, sizeof x->kernel - 1);
            x->kernel[sizeof x->kernel - 1] = '\0';
        }
    } else {
        R.late_dropped++;
    }
    pthread_mutex_unlock(&mu);
}

void ao_rec_memory(int layer, int64_t resident_delta, int64_t offloaded_delta)
{
    pthread_mutex_lock(&mu);
    ao_rec_layer_t *l = layer_of(layer);
    l->resident += resident_delta, l->offloaded += offloaded_delta;
    if (l->resident > 0 && (uint64_t)l->resident > l->peak_resident)
        l->peak_resident = (uint64_t)l->resident;
    R.resident += resident_delta, R.offloaded += offloaded_delta;
    sample_locked();
    pthread_mutex_unlock(&mu);
}

// --- call sites -----------------------------------------------------------------------------
// The capture buffer is per thread: unw_backtrace writes into it without any
// allocation, and two threads allocating at once never share it.
static AO_TLS void *tls_pc[AO_SITE_DEPTH + 2];

#if defined(__SANITIZE_THREAD__)
#define AO_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AO_TSAN 1
#endif
#endif

#ifdef AO_TSAN
// Under ThreadSanitizer (a test build): glibc's backtrace instead.
// unw_backtrace keeps a per-thread cache that a thread-exit destructor frees
// in the last destructor round, taking a lock; ThreadSanitizer tears the
// thread's state down in that same round, earlier, and the lock's
// interceptor then crashes every thread that ever captured a stack.
#define unw_backtrace_fn backtrace
static bool unwinder(void)
{
    return true;
}
#elif !AO_HAVE_LIBUNWIND
// Built without libunwind's headers (meson said so): no call sites. Said
// once at run time too, since the one who runs a build is often not the one
// who made it. Callers hold the engine's lock.
static int (*unw_backtrace_fn)(void **, int);
static bool unwinder(void)
{
    static int once;
    if (!once)
        ao_log(AO_LOG_INFO, "call sites are off: this library was built without libunwind's "
                            "headers, so the report lists no allocation call sites "
                            "(AOSHIM_STACKS=0 silences this)");
    once = 1;
    return false;
}
#else
// libunwind, opened once with RTLD_LOCAL (see src/meson.build for why it is
// not linked): 0 not tried, 1 ready, -1 unavailable (no call sites). Callers
// hold the engine's lock; the function pointer is written before the
// release store of the state and read after an acquire load of it.
static int unw_state;
#define AO_UNW_NAME2(x) #x
#define AO_UNW_NAME(x)  AO_UNW_NAME2(x)
static int (*unw_backtrace_fn)(void **, int);

static bool unwinder(void)
{
    int st = __atomic_load_n(&unw_state, __ATOMIC_ACQUIRE);
    if (st) return st > 0;
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    void *bt = h ? dlsym(h, "unw_backtrace") : NULL;
    // The header maps these names to the architecture's own (_ULx86_64_...).
    int (*policy)(unw_addr_space_t, unw_caching_policy_t) =
        h ? (int (*)(unw_addr_space_t, unw_caching_policy_t))dlsym(
                h, AO_UNW_NAME(unw_set_caching_policy))
          : NULL;
    unw_addr_space_t *local =
        h ? (unw_addr_space_t *)dlsym(h, AO_UNW_NAME(unw_local_addr_space)) : NULL;
    if (policy && local) policy(*local, UNW_CACHE_PER_THREAD); // no global lock in the unwinder
    if (bt)
        unw_backtrace_fn = (int (*)(void **, int))bt;
    else {
        static int once;
        ao_warn_once(&once, "libunwind.so.8 not found: no allocation call sites in the report "
                            "(install libunwind, or AOSHIM_STACKS=0)");
    }
    __atomic_store_n(&unw_state, bt ? 1 : -1, __ATOMIC_RELEASE);
    return bt != NULL;
}
#endif

static int site_add(int layer, uint64_t bytes, void **pc, int depth)
{
    if (!R.sites && !(R.sites = calloc(AO_SITES_MAX, sizeof *R.sites))) {
        R.sites_dropped_bytes += bytes, R.sites_dropped_count++;
        return -1;
    }
    uint64_t h = 1469598103934665603ull; // FNV-1a over the addresses
    for (int i = 0; i < depth; i++)
        h = (h ^ (uint64_t)(uintptr_t)pc[i]) * 1099511628211ull;
    if (!h) h = 1;
    for (uint32_t i = 0; i < AO_SITES_MAX; i++) {
        ao_rec_site_t *s = &R.sites[(h + i) & (AO_SITES_MAX - 1)];
        if (s->hash == h && s->depth == (uint32_t)depth &&
            memcmp(s->pc, pc, (size_t)depth * sizeof *pc) == 0) {
            s->count++, s->bytes += bytes, s->resident += (int64_t)bytes;
            if (layer < s->layer_min) s->layer_min = layer;
            if (layer > s->layer_max) s->layer_max = layer;
            return (int)((h + i) & (AO_SITES_MAX - 1));
        }
        if (!s->hash) {
            if (R.nsites >= AO_SITES_MAX * 3 / 4) break; // keep probes short
            s->hash = h, s->depth = (uint32_t)depth, s->count = 1, s->bytes = bytes;
            s->resident = (int64_t)bytes;
            s->layer_min = s->layer_max = layer;
            memcpy(s->pc, pc, (size_t)depth * sizeof *pc);
            R.nsites++;
            return (int)((h + i) & (AO_SITES_MAX - 1));
        }
    }
    R.sites_dropped_bytes += bytes, R.sites_dropped_count++;
    return -1;
}

void ao_rec_site(int site, int64_t resident_delta, uint64_t offloaded)
{
    if (site < 0) return;
    pthread_mutex_lock(&mu);
    if (R.sites) {
        R.sites[site].resident += resident_delta;
        R.sites[site].offloaded += offloaded;
    }
    pthread_mutex_unlock(&mu);
}

int ao_rec_alloc(int layer, uint64_t bytes)
{
    int site = -1;
    int depth = 0;
    if (ao_config.stacks && unwinder()) {
        depth = unw_backtrace_fn(tls_pc, AO_SITE_DEPTH + 1);
        if (depth > 0) depth--; // frame 0 is this function
    }
    pthread_mutex_lock(&mu);
    ao_rec_layer_t *l = layer_of(layer);
    l->buffers++, l->tracked_bytes += bytes;
    if (depth > 0) {
        R.stacks_captured++;
        site = site_add(layer, bytes, tls_pc + 1, depth);
    }
    pthread_mutex_unlock(&mu);
    return site;
}

void ao_rec_symbolize(void *pc, const char **module, const char **symbol, uint64_t *offset)
{
    Dl_info di;
    *module = "?", *symbol = NULL, *offset = (uint64_t)(uintptr_t)pc;
    // A return address points past the call: look up the call itself.
    if (!pc || !dladdr((char *)pc - 1, &di)) return;
    if (di.dli_fname && *di.dli_fname) {
        const char *slash = strrchr(di.dli_fname, '/');
        *module = slash ? slash + 1 : di.dli_fname;
    }
    if (di.dli_sname && di.dli_saddr) {
        *symbol = di.dli_sname;
        *offset = (uint64_t)((char *)pc - (char *)di.dli_saddr);
    } else if (di.dli_fbase) {
        *offset = (uint64_t)((char *)pc - (char *)di.dli_fbase);
    }
}

// --- steps ----------------------------------------------------------------------------------
void ao_rec_step(void)
{
    pthread_mutex_lock(&mu);
    sample_locked();
    R.cur.step = R.nstep++;
    R.cur.t_ns = now_locked();
    static uint64_t maps0, vmm0, made0; // the counters as the step began
    const uint64_t maps = ao_stat_get(AO_STAT_VMM_MAPPINGS), vmm = ao_stat_get(AO_STAT_VMM_HOST_NS),
                   made = ao_stat_get(AO_STAT_MEM_CREATE_CALLS);
    R.cur.vmm_mappings = maps - maps0;
    R.cur.vmm_host_ns = vmm - vmm0;
    R.cur.vmm_handles = made - made0;
    maps0 = maps;
    vmm0 = vmm;
    made0 = made;
    if (R.cur.step % R.step_stride == 0) {
        if (!R.steps) R.steps = calloc(AO_STEPS_MAX, sizeof *R.steps);
        if (R.steps && R.nsteps == AO_STEPS_MAX) { // keep every other one
            int n = 0;
            for (int i = 0; i < R.nsteps; i++)
                if (R.steps[i].step % (R.step_stride * 2) == 0) R.steps[n++] = R.steps[i];
            R.nsteps = n;
            R.step_stride *= 2;
        }
        if (R.steps && R.cur.step % R.step_stride == 0) R.steps[R.nsteps++] = R.cur;
    }
    memset(&R.cur, 0, sizeof R.cur);
    pthread_mutex_unlock(&mu);
}

void ao_rec_offloading(bool off, const char *declined)
{
    pthread_mutex_lock(&mu);
    R.off = off;
    R.declined = declined;
    pthread_mutex_unlock(&mu);
}

void ao_rec_device(const char *name, uint64_t capacity)
{
    pthread_mutex_lock(&mu);
    start_locked();
    if (name) {
        strncpy(R.device_name, name, sizeof R.device_name - 1);
        R.device_name[sizeof R.device_name - 1] = '\0';
    }
    R.device_capacity = capacity;
    pthread_mutex_unlock(&mu);
}

void ao_rec_frontend(const char *text)
{
    pthread_mutex_lock(&mu);
    size_t n = 0;
    for (; text[n] && n < sizeof R.frontend - 1; n++) // one line: control characters become blanks
        R.frontend[n] = (unsigned char)text[n] < 0x20 ? ' ' : text[n];
    R.frontend[n] = '\0';
    pthread_mutex_unlock(&mu);
}

void ao_rec_plan(const char *text, unsigned plans)
{
    pthread_mutex_lock(&mu);
    snprintf(R.plan, sizeof R.plan, "%s", text);
    R.plans = plans;
    pthread_mutex_unlock(&mu);
}

// --- for the writers --------------------------------------------------------------------------
bool ao_rec_lock_for_report(void)
{
    // At exit another thread may have been stopped while holding the lock:
    // wait a little, then read without it rather than hang the exit.
    for (int i = 0; i < 200; i++) {
        if (pthread_mutex_trylock(&mu) == 0) return true;
        usleep(500);
    }
    return false;
}

void ao_rec_unlock(bool locked)
{
    if (locked) pthread_mutex_unlock(&mu);
}

void ao_rec_finish_locked(void)
{
    if (R.started || ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES)) sample_locked();
}
