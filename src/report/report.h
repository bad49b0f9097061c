// SPDX-License-Identifier: MIT
// The run's record as the report writers read it, and the writers.
//
// record.c keeps, with bounded memory however long the run: per-layer
// totals, a peak-preserving memory timeline (at most AO_TL_MAX buckets; when
// full, neighbours merge and the bucket width doubles), per-step figures (at
// most AO_STEPS_MAX; when full, every other step is dropped and the stride
// doubles), GPU intervals for the trace (at most AO_SPANS_MAX, later ones
// counted as dropped), late reloads, and allocation call sites.
#ifndef AO_REPORT_H
#define AO_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "aoshim.h"
#include "config.h"

// aoshim's version (aoshim_version() lives in init.c, outside the core).
#define AO_REPORT_STR2(x) #x
#define AO_REPORT_STR(x)  AO_REPORT_STR2(x)
#define AO_REPORT_VERSION                                                                          \
    AO_REPORT_STR(AOSHIM_VERSION_MAJOR)                                                            \
    "." AO_REPORT_STR(AOSHIM_VERSION_MINOR) "." AO_REPORT_STR(AOSHIM_VERSION_PATCH)

#define AO_TL_MAX     512       // timeline buckets
#define AO_TL_LAYERS  256       // layers with their own timeline series; later ones share the last
#define AO_STEPS_MAX  1024      // per-step entries
#define AO_SPANS_MAX  (1 << 16) // GPU intervals kept for the trace
#define AO_LATE_MAX   4096      // late reloads kept for the trace
#define AO_SITE_DEPTH 16        // frames kept per call site
#define AO_SITES_MAX  4096      // distinct call sites

typedef struct ao_rec_layer_s {
    uint64_t buffers, tracked_bytes; // tracked allocations
    uint64_t offloads, offloaded_buffers, offloaded_bytes;
    uint64_t reloads, reloaded_buffers, reloaded_bytes, missed;
    uint64_t d2h_ns, d2h_bytes, d2h_n, h2d_ns, h2d_bytes, h2d_n, wait_ns, waits;
    uint64_t late;
    int64_t resident, offloaded; // now
    uint64_t peak_resident;
    bool seen;
} ao_rec_layer_t;

// One bucket of the timeline: the state at its end (t1) and the highest
// device and "without offloading" totals inside it, with their times.
typedef struct ao_rec_bucket_s {
    uint64_t t0, t1;
    uint64_t device, without, passthrough, offloaded, pinned; // at t1
    uint64_t peak, t_peak, peak_without, t_peak_without;
} ao_rec_bucket_t;

typedef struct ao_rec_step_s {
    uint64_t step, t_ns;
    uint64_t peak, peak_without, offloaded_bytes, reloaded_bytes;
    uint64_t d2h_ns, h2d_ns, wait_ns, offloads, reloads, missed, late;
    uint64_t vmm_mappings, vmm_host_ns; // in this step (stats.h's VMM counters)
    uint64_t vmm_handles;               // in this step: cuMemCreate calls (memory made)
} ao_rec_step_t;

typedef struct ao_rec_span_s {
    uint64_t start, end, bytes; // GPU ns since the engine's reference event
    int32_t layer, mb;
    uint8_t kind; // enum ao_rec_kind
} ao_rec_span_t;

typedef struct ao_rec_late_s {
    uint64_t t_ns; // host clock
    int32_t layer, mb;
    char kernel[48];
} ao_rec_late_t;

typedef struct ao_rec_site_s {
    uint64_t hash, count, bytes;
    int64_t resident;       // bytes of the site's buffers on the device now
    uint64_t offloaded;     // bytes copied out and released, in all
    uint64_t peak_resident; // resident when the device peak was last raised
    int32_t layer_min, layer_max;
    uint32_t depth;
    void *pc[AO_SITE_DEPTH];
} ao_rec_site_t;

typedef struct ao_rec_s {
    bool started;
    uint64_t origin_ns; // CLOCK_MONOTONIC at the first event (or ao_rec_device)
    char device_name[128];
    char frontend[256];   // who marks the layers (aoshim_set_frontend), "" if no one said
    char plan[704];       // the latest plan (AOSHIM_OFFLOAD_LAYERS=auto), "" if none
    unsigned plans;       // plans made
    bool off;             // offloading off (AOSHIM_ENABLE=0)
    const char *declined; // offloading declined: why (a static string), NULL if not
    uint64_t device_capacity;
    ao_rec_layer_t layer[AO_MAX_LAYERS + 1]; // [0]: memory of no layer (layer -1)
    int max_layer;                           // highest layer seen, -1 if none
    int64_t resident, offloaded;             // tracked, all layers
    uint64_t seen_peak, seen_peak_without;   // the global peaks already placed
    uint64_t pinned_peak;
    // Timeline.
    ao_rec_bucket_t *tl; // AO_TL_MAX
    uint64_t *tl_layer;  // AO_TL_MAX x AO_TL_LAYERS, resident bytes per layer at t1
    int ntl;
    uint64_t tl_width; // minimum bucket width (ns); doubles when the timeline is halved
    // Steps.
    ao_rec_step_t *steps; // AO_STEPS_MAX
    int nsteps;
    uint64_t step_stride, nstep; // steps recorded every stride; steps ended
    ao_rec_step_t cur;           // the step under way
    // Trace.
    ao_rec_span_t *spans;
    uint32_t nspans, spans_cap;
    uint64_t spans_dropped;
    uint64_t issued[2], timed[2]; // offload (0) and reload (1) copies: issued, timed by now
    uint64_t early;               // of the offload copies issued, those at a layer's end
    ao_rec_late_t *late;
    uint32_t nlate;
    uint64_t late_dropped;
    // Call sites.
    ao_rec_site_t *sites; // open addressing, AO_SITES_MAX
    uint32_t nsites;
    uint64_t sites_dropped_bytes, sites_dropped_count, stacks_captured;
} ao_rec_t;

extern ao_rec_t ao_rec;

// Lock the record against the engine while reading it; false when it could
// not be had in time (at exit another thread may be stopped holding it): the
// caller reads it anyway, as a best effort.
bool ao_rec_lock_for_report(void);
void ao_rec_unlock(bool locked);
// Close the timeline with a last sample (at exit or for aoshim_report_now).
void ao_rec_finish_locked(void);
// Symbolize a frame: module base name, symbol, offset (dladdr). Never allocates.
void ao_rec_symbolize(void *pc, const char **module, const char **symbol, uint64_t *offset);

// --- writers (no CUDA call: the driver may be gone) ---------------------------------
// The text summary on fd.
void ao_summary_write(int fd);
// The JSON report on fd.
void ao_report_json(int fd);
// The Chrome/Perfetto trace on fd.
void ao_report_trace(int fd);
// The HTML page on fd.
void ao_report_html(int fd);
// Expand %p, %r, %h (and %%) of pattern into out; false if it does not fit.
bool ao_report_path(const char *pattern, char *out, size_t size);
// Every output asked for: the summary when summary is true (the callers pass
// !AOSHIM_QUIET), AOSHIM_REPORT, AOSHIM_TRACE, AOSHIM_REPORT_HTML. An
// unwritable file gives one warning.
void ao_report_all(bool summary);
// At load: whether each file asked for (the reports when reports is true,
// AOSHIM_CONTROL_LOG and AOSHIM_RECORD) can be created, its directory existing
// and writable after %p/%r/%h expansion and nothing but a regular file at its
// name (a device too for the control log and the step trace, which are
// written in place as the program runs), so a bad name is found at start,
// not after a long run. Creates nothing. 0, or -1 with err holding the one
// line "aoshim: error: AOSHIM_X='v': cannot write <path>: <why>" (the
// caller exits 2, as for a bad value).
int ao_report_check_paths(bool reports, char *err, size_t errlen);
// A warning about var's file (var: "AOSHIM_REPORT", ..., "AOSHIM_CONTROL_LOG"):
// printed for the first one per variable over the whole run, then silent.
void ao_report_path_warn(const char *var, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Write one file of pattern (expanded) with writer: to a new temporary name
// created with O_EXCL|O_NOFOLLOW, then renamed over the name. A name that
// exists and is not a regular file (a symlink, FIFO, device, directory) is
// refused, never opened; /dev/stdout and /dev/stderr are the program's
// streams. false (after one warning) if nothing was written.
bool ao_report_write(const char *var, const char *pattern, void (*writer)(int fd));
// The temporary name of attempt n (0, 1, ...) at writing path; false if it
// does not fit. Exposed for tests.
bool ao_report_tmp_name(const char *path, unsigned attempt, char *out, size_t size);
// The rank of this process: RANK, else LOCAL_RANK, else 0.
int ao_report_rank(void);

#endif // AO_REPORT_H
