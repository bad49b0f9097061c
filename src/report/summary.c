// SPDX-License-Identifier: MIT
// The exit summary (text) and the JSON report: one set of emitter calls
// writes both (emitter.h), so every number the text shows is the JSON's.
// Neither calls CUDA: the driver may already be torn down at exit.
#define _GNU_SOURCE 1
#include "summary.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aoshim.h"
#include "config.h"
#include "emitter.h"
#include "mem/poolmodel.h"
#include "report.h"
#include "stats.h"

#define R ao_rec

static double gbps(uint64_t bytes, uint64_t ns)
{
    return ns ? (double)bytes / (double)ns : 0.0; // bytes per ns = GB/s
}

unsigned long long ao_device_peak(void)
{
    return ao_stat_get(AO_STAT_DEVICE_PEAK_BYTES);
}

// Without offloading. Where no layer was offloaded and nothing served, the
// driver's peak itself. Where the program's pool keeps what it frees
// (PyTorch's), modelled: the program's own allocations in one pool with
// the fragments the driver's pool makes (mem/poolmodel.h), plus what the
// device held beyond every allocator (the context). aoshim moved the
// program's buffers out of that pool, so the real one no longer shows them
// (the replayed H200 GPT under all: 22.11 GiB when modelled without the
// fragments, 24.48 from the pool beside aoshim's memory, 22.90 without
// aoshim). Otherwise the allocations' peak with the offloaded bytes
// resident (aoshim's count), plus what the device held beyond the
// allocations at the peaks (the context, the pool's unused reserve).
// Within 3% of the run without aoshim on the replayed real steps
// (test_replay.py gpu).
static bool without_pool_modelled(void)
{
    bool seen = false;
    ao_poolmodel_peak(&seen);
    return seen && ao_stat_get(AO_STAT_POOL_KEEPS) && ao_stat_get(AO_STAT_DEVICE_OTHER_MIN);
}

unsigned long long ao_device_peak_without(void)
{
    uint64_t dev = ao_stat_get(AO_STAT_DEVICE_PEAK_BYTES);
    if (!dev) return 0;
    if (ao_device_without_measured()) return dev;
    if (without_pool_modelled())
        return ao_poolmodel_peak(NULL) + ao_stat_get(AO_STAT_DEVICE_OTHER_MIN) - 1;
    uint64_t peak = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
    uint64_t without = ao_stat_get(AO_STAT_PEAK_WITHOUT_BYTES);
    return without + (dev > peak ? dev - peak : 0);
}

// Without aoshim, from the program's side: its own allocations at their
// peak (each tracked buffer from its allocation to its free, as one pool
// would hold it), plus the prog the device held beyond every allocator
// (the context) and the program's pool's slack at its high. aoshim's memory
// and the program's pool side by side can hold more than one pool would (a
// layer's freed memory kept for the next step while the pool grows for the
// gradients: train_step --pytorch with one layer offloaded, 24% more than
// without aoshim); the model above counts that as the step's own, this one
// does not. Neither is exact: the pool's slack differs with and without
// aoshim (the replayed H200 GPT: 3.3 GB under aoshim, 2.7 without).
unsigned long long ao_device_without_program(void)
{
    uint64_t other = ao_stat_get(AO_STAT_DEVICE_OTHER_MIN);
    if (!ao_stat_get(AO_STAT_DEVICE_PEAK_BYTES) || !other) return 0;
    return ao_stat_get(AO_STAT_PEAK_NEED_BYTES) + (other - 1) +
           ao_stat_get(AO_STAT_POOL_SLACK_BYTES);
}

unsigned long long ao_device_maybe_more(void)
{
    uint64_t dev = ao_stat_get(AO_STAT_DEVICE_PEAK_BYTES), prog = ao_device_without_program();
    // Within 3% (and 16 MiB), a pool's fragments may explain it.
    if (!prog || dev <= prog + prog / 32 + (16u << 20)) return 0;
    return dev - prog;
}

const char *ao_device_without_how(void)
{
    return ao_device_without_measured() ? "measured"
           : without_pool_modelled()    ? "pool"
                                        : "allocations";
}

bool ao_device_without_measured(void)
{
    return ao_stat_get(AO_STAT_LAYERS_OFFLOADED) == 0 && ao_stat_get(AO_STAT_SERVED_ALLOCS) == 0;
}

// --- the part the text and the JSON share -------------------------------------------------
// A value the JSON has and the text leaves out (the text says it in words).
static void json_only(ao_emitter_t *e, const char *key, ao_emit_val_t v)
{
    if (e->fmt == AO_EMIT_JSON) ao_emit_val(e, NULL, key, v);
}

static void emit_summary(ao_emitter_t *e)
{
    uint64_t peak = ao_stat_get(AO_STAT_PEAK_DEVICE_BYTES);
    uint64_t without = ao_stat_get(AO_STAT_PEAK_WITHOUT_BYTES);
    uint64_t saved = without > peak ? without - peak : 0;
    uint64_t d2h_b = 0, d2h_ns = 0, h2d_b = 0, h2d_ns = 0, reloads = 0;
    for (int l = -1; l <= R.max_layer; l++) {
        const ao_rec_layer_t *x = &R.layer[l + 1];
        d2h_b += x->d2h_bytes, d2h_ns += x->d2h_ns, h2d_b += x->h2d_bytes, h2d_ns += x->h2d_ns;
        reloads += x->reloads;
    }
    ao_emit_obj_begin(e, "summary");
    // The device's memory as the driver counts it (offload/auto.c: sampled
    // at the layer boundaries and at new highs of the allocations), first:
    // it is what the program can use. More than without offloading is said
    // here, at the top.
    uint64_t dev = ao_device_peak(), dev_without = ao_device_peak_without();
    bool measured = ao_device_without_measured();
    bool more = dev > dev_without;
    ao_emit_row_begin(e, "device memory in use");
    ao_emit_val(e, NULL, "device_peak_bytes", AO_BYTES(dev));
    ao_emit_val(e, " at peak, ", "device_peak_without_bytes", AO_BYTES(dev_without));
    const char *how = ao_device_without_how();
    ao_emit_val(e, NULL, NULL,
                AO_STR(measured ? " without offloading (measured: nothing offloaded)"
                       : strcmp(how, "pool") == 0
                           ? " without offloading (modelled: the program's allocations in one "
                             "pool, with its fragments)"
                           : " without offloading (modelled)"));
    json_only(e, "device_without_model", AO_STR(how));
    json_only(e, "device_without_measured", AO_BOOL(measured));
    ao_emit_val(e, more ? ": " : ", saved ", more ? "device_more_bytes" : "device_saved_bytes",
                AO_BYTES(more ? dev - dev_without : dev_without - dev));
    json_only(e, more ? "device_saved_bytes" : "device_more_bytes", AO_U64(0));
    if (more) ao_emit_val(e, NULL, NULL, AO_STR(" MORE than without offloading"));
    ao_emit_val(e, " (driver's count, ", "device_samples",
                AO_U64(ao_stat_get(AO_STAT_DEVICE_SAMPLES)));
    ao_emit_val(e, " samples)", NULL, AO_STR(""));
    ao_emit_row_end(e);
    uint64_t prog = ao_device_without_program(), maybe = ao_device_maybe_more();
    json_only(e, "device_without_program_bytes", AO_BYTES(prog));
    json_only(e, "device_maybe_more_bytes", AO_BYTES(maybe));
    json_only(e, "program_peak_bytes", AO_BYTES(ao_stat_get(AO_STAT_PEAK_NEED_BYTES)));
    if (maybe) {
        ao_emit_row_begin(e, "may have used more");
        ao_emit_val(e, "about ", NULL, AO_BYTES(maybe));
        ao_emit_val(
            e, " MORE than without aoshim by the program's side: its own allocations peaked at ",
            NULL, AO_BYTES(ao_stat_get(AO_STAT_PEAK_NEED_BYTES)));
        ao_emit_val(e, ", ", NULL, AO_BYTES(prog));
        ao_emit_val(
            e, NULL, NULL,
            AO_STR(" with the device's own memory and the pool's slack; aoshim's memory and the "
                   "program's pool held more side by side (docs/report.md)"));
        ao_emit_row_end(e);
    }
    // Serving (AOSHIM_SERVE): from which step, and under auto why then.
    const uint64_t from = ao_stat_get(AO_STAT_SERVED_FROM_STEP),
                   unused = ao_stat_get(AO_STAT_SERVE_POOL_UNUSED);
    if (from) { // the JSON has the keys always
        ao_emit_row_begin(e, "served from aoshim's memory");
        ao_emit_val(e, NULL, "served_allocs", AO_U64(ao_stat_get(AO_STAT_SERVED_ALLOCS)));
        ao_emit_val(e, " of the program's own allocations, at most ", "served_peak_bytes",
                    AO_BYTES(ao_stat_get(AO_STAT_SERVED_PEAK_BYTES)));
        ao_emit_val(e, " at once, from step ", "served_from_step", AO_U64(from - 1));
        if (unused)
            ao_emit_val(e, " (the program's pool held ", "serve_pool_unused_bytes",
                        AO_BYTES(unused));
        ao_emit_val(e, NULL, NULL,
                    AO_STR(unused ? " unused as that step's forward began; one pool for them and "
                                    "the layers: AOSHIM_SERVE)"
                                  : " (one pool for them and the layers: AOSHIM_SERVE)"));
        if (!unused) json_only(e, "serve_pool_unused_bytes", AO_BYTES(0));
        // Idle memory a layer or a reload took before its last uses were
        // done, ordered on the GPU (offload/chunk.c, lending).
        const uint64_t lent = ao_stat_get(AO_STAT_LENT_BYTES);
        const uint64_t lent_served = ao_stat_get(AO_STAT_LENT_SERVED_BYTES);
        if (lent) {
            ao_emit_val(e, "; ", "lent_bytes", AO_BYTES(lent));
            ao_emit_val(e, NULL, NULL,
                        AO_STR(" of idle memory mapped anew before its last uses were done"));
            ao_emit_val(e, " (", "lent_served_bytes", AO_BYTES(lent_served));
            ao_emit_val(e, NULL, NULL, AO_STR(" of it for the program's own)"));
        } else {
            json_only(e, "lent_bytes", AO_BYTES(0));
            json_only(e, "lent_served_bytes", AO_BYTES(0));
        }
        // A layer's memory mapped as its buffers came, where the whole was
        // not there at its first (offload/chunk.c, ao_chunk_grow).
        const uint64_t grown = ao_stat_get(AO_STAT_GROWN_BYTES);
        if (grown) {
            ao_emit_val(e, "; ", "grown_bytes", AO_BYTES(grown));
            ao_emit_val(
                e, NULL, NULL,
                AO_STR(" of layers' memory mapped as their buffers came, not at the first"));
        } else {
            json_only(e, "grown_bytes", AO_BYTES(0));
        }
        ao_emit_row_end(e);
    } else {
        json_only(e, "served_allocs", AO_U64(0));
        json_only(e, "served_peak_bytes", AO_BYTES(0));
        json_only(e, "served_from_step", AO_I64(-1));
        json_only(e, "serve_pool_unused_bytes", AO_BYTES(0));
        json_only(e, "lent_bytes", AO_BYTES(0));
        json_only(e, "lent_served_bytes", AO_BYTES(0));
        json_only(e, "grown_bytes", AO_BYTES(0));
    }
    ao_emit_kv(e, "peak allocated", "peak_device_bytes", AO_BYTES(peak));
    ao_emit_row_begin(e, "peak allocated without offloading");
    ao_emit_val(e, NULL, "peak_without_offloading_bytes", AO_BYTES(without));
    ao_emit_val(e, " (saved ", "saved_bytes", AO_BYTES(saved));
    ao_emit_val(e, ", ", "saved_percent",
                AO_PCT(without ? 100.0 * (double)saved / (double)without : 0.0));
    ao_emit_val(e, ")", NULL, AO_STR(""));
    ao_emit_row_end(e);
    ao_emit_row_begin(e, "offloaded / reloaded");
    ao_emit_val(e, NULL, "offloaded_bytes", AO_BYTES(ao_stat_get(AO_STAT_OFFLOADED_BYTES)));
    ao_emit_val(e, " / ", "reloaded_bytes", AO_BYTES(ao_stat_get(AO_STAT_RELOADED_BYTES)));
    ao_emit_row_end(e);
    ao_emit_row_begin(e, "layer offloads / reloads");
    ao_emit_val(e, NULL, "layer_offloads", AO_U64(ao_stat_get(AO_STAT_LAYERS_OFFLOADED)));
    ao_emit_val(e, " / ", "layer_reloads", AO_U64(reloads));
    ao_emit_val(e, " (buffers offloaded ", "buffers_offloaded",
                AO_U64(ao_stat_get(AO_STAT_OFFLOADED_BUFFERS)));
    ao_emit_val(e, ", tracked ", "buffers_tracked", AO_U64(ao_stat_get(AO_STAT_TRACKED_BUFFERS)));
    ao_emit_val(e, ")", NULL, AO_STR(""));
    ao_emit_row_end(e);
    ao_emit_row_begin(e, "offload copies (D2H)");
    ao_emit_val(e, NULL, "d2h_gbps", AO_GBPS(gbps(d2h_b, d2h_ns)));
    ao_emit_val(e, " (", "d2h_bytes_timed", AO_BYTES(d2h_b));
    ao_emit_val(e, " in ", "d2h_ns", AO_NS(d2h_ns));
    ao_emit_val(e, "; ", "d2h_bytes_early", AO_BYTES(ao_stat_get(AO_STAT_EARLY_COPY_BYTES)));
    ao_emit_val(e, " from a layer's end, ", "d2h_buffers_again",
                AO_U64(ao_stat_get(AO_STAT_EARLY_COPIED_AGAIN)));
    ao_emit_val(e, " buffers of them copied again, early copies stopped for ",
                "d2h_layers_early_off", AO_U64(ao_stat_get(AO_STAT_EARLY_OFF_LAYERS)));
    ao_emit_val(e, " layers)", NULL, AO_STR(""));
    ao_emit_row_end(e);
    ao_emit_row_begin(e, "reload copies (H2D)");
    ao_emit_val(e, NULL, "h2d_gbps", AO_GBPS(gbps(h2d_b, h2d_ns)));
    ao_emit_val(e, " (", "h2d_bytes_timed", AO_BYTES(h2d_b));
    ao_emit_val(e, " in ", "h2d_ns", AO_NS(h2d_ns));
    ao_emit_val(e, ")", NULL, AO_STR(""));
    ao_emit_row_end(e);
    ao_emit_kv(e, "compute stream waited on reloads", "reload_wait_ns",
               AO_NS(ao_stat_get(AO_STAT_RELOAD_WAIT_NS)));
    ao_emit_kv(e, "prefetches missed", "prefetches_missed",
               AO_U64(ao_stat_get(AO_STAT_PREFETCH_MISSED)));
    // Late: a kernel needed a buffer the schedule had not brought back, so
    // the reload started then; apart, those that only waited for the
    // schedule's reload still on the link (offload/touch.c).
    ao_emit_row_begin(e, "late reloads");
    ao_emit_val(e, NULL, "late_reloads", AO_U64(ao_stat_get(AO_STAT_LATE_RELOADS)));
    ao_emit_val(e, " (and ", "reload_under_way_waits",
                AO_U64(ao_stat_get(AO_STAT_RELOAD_UNDER_WAY)));
    ao_emit_val(e, " buffers waited for a scheduled reload still on the link)", NULL, AO_STR(""));
    ao_emit_row_end(e);
    // Parameter words taken as the host stack's leftovers (offload/scan.h):
    // touches of offloaded memory the scan did not act on.
    ao_emit_row_begin(e, "leftover words");
    ao_emit_val(e, NULL, "leftover_skips", AO_U64(ao_stat_get(AO_STAT_LEFTOVER_SKIPS)));
    ao_emit_val(e, " not read as touches, at ", "leftover_places",
                AO_U64(ao_stat_get(AO_STAT_LEFTOVER_PLACES)));
    ao_emit_val(e, " parameter places that hold no pointer", NULL, AO_STR(""));
    ao_emit_row_end(e);
    // Copies out that ran for nothing: the layer was needed back before its
    // memory could go (a plan should issue none in the steady state).
    ao_emit_kv(e, "offloads cancelled", "offloads_cancelled",
               AO_U64(ao_stat_get(AO_STAT_OFFLOADS_CANCELLED)));
    // Physical memory moved between address ranges: each mapping made costs
    // the host a cuMemMap and a share of a cuMemSetAccess, and later a
    // cuMemUnmap (about 50 us for a page on the H200), which the GPU waits
    // for whenever the host is not ahead of it. The host's time in those
    // calls is the JSON's only: the summary has no clock in it.
    ao_emit_row_begin(e, "mappings");
    ao_emit_val(e, NULL, "vmm_mappings", AO_U64(ao_stat_get(AO_STAT_VMM_MAPPINGS)));
    ao_emit_val(e, " made (", "vmm_mapped_bytes", AO_BYTES(ao_stat_get(AO_STAT_VMM_MAPPED_BYTES)));
    ao_emit_val(e, "), ", "vmm_unmappings", AO_U64(ao_stat_get(AO_STAT_VMM_UNMAPPINGS)));
    ao_emit_val(e, " unmapped, ", "vmm_handles_made",
                AO_U64(ao_stat_get(AO_STAT_MEM_CREATE_CALLS)));
    ao_emit_val(e, " handles made", NULL, AO_STR(""));
    json_only(e, "vmm_host_ns", AO_NS(ao_stat_get(AO_STAT_VMM_HOST_NS)));
    if (R.nsteps) {
        const ao_rec_step_t *last = &R.steps[R.nsteps - 1];
        ao_emit_val(e, "; step ", "vmm_last_step", AO_U64(last->step));
        ao_emit_val(e, ": ", "vmm_last_step_mappings", AO_U64(last->vmm_mappings));
        ao_emit_val(e, " made, ", "vmm_last_step_handles_made", AO_U64(last->vmm_handles));
        ao_emit_val(e, " handles made", NULL, AO_STR(""));
        json_only(e, "vmm_last_step_host_ns", AO_NS(last->vmm_host_ns));
    } else {
        json_only(e, "vmm_last_step", AO_I64(-1));
        json_only(e, "vmm_last_step_mappings", AO_U64(0));
        json_only(e, "vmm_last_step_handles_made", AO_U64(0));
        json_only(e, "vmm_last_step_host_ns", AO_NS(0));
    }
    ao_emit_row_end(e);
    ao_emit_row_begin(e, "pinned host pool");
    ao_emit_val(e, NULL, "pinned_host_bytes", AO_BYTES(ao_stat_get(AO_STAT_PINNED_HOST_BYTES)));
    ao_emit_val(e, " in ", "pin_calls", AO_U64(ao_stat_get(AO_STAT_PIN_CALLS)));
    ao_emit_val(e, " pin calls, peak ", "pinned_host_peak_bytes",
                AO_BYTES(R.pinned_peak > ao_stat_get(AO_STAT_PINNED_HOST_BYTES)
                             ? R.pinned_peak
                             : ao_stat_get(AO_STAT_PINNED_HOST_BYTES)));
    ao_emit_row_end(e);
    ao_emit_row_begin(e, "kept resident");
    ao_emit_obj_begin(e, "kept_resident");
    ao_emit_val(e, "too small ", "too_small", AO_U64(ao_stat_get(AO_STAT_KEPT_SMALL)));
    ao_emit_val(e, ", host limit ", "host_limit", AO_U64(ao_stat_get(AO_STAT_KEPT_HOST_LIMIT)));
    ao_emit_val(e, ", pin failed ", "pin_failed", AO_U64(ao_stat_get(AO_STAT_KEPT_PIN_FAILED)));
    ao_emit_val(e, ", aoshim_keep ", "aoshim_keep", AO_U64(ao_stat_get(AO_STAT_KEPT_BY_USER)));
    ao_emit_val(e, ", no device memory ", "no_device_memory",
                AO_U64(ao_stat_get(AO_STAT_KEPT_NO_DEVICE_SPACE)));
    ao_emit_val(e, ", graph ", "graph", AO_U64(ao_stat_get(AO_STAT_KEPT_GRAPH)));
    ao_emit_obj_end(e);
    ao_emit_row_end(e);
    // The allocator as the process configured it: each of PyTorch's two
    // variables that is set (aoshim sets PYTORCH_CUDA_ALLOC_CONF itself when
    // neither is), else "(unset)". The JSON always has
    // pytorch_cuda_alloc_conf; pytorch_alloc_conf only when it is set.
    const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
    const char *conf2 = getenv("PYTORCH_ALLOC_CONF");
    const char *nocache = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    ao_emit_row_begin(e, "allocator");
    ao_emit_obj_begin(e, "allocator");
    if (conf || !conf2)
        ao_emit_val(e, "PYTORCH_CUDA_ALLOC_CONF=", "pytorch_cuda_alloc_conf",
                    AO_STR(conf ? conf : "(unset)"));
    else
        ao_emit_json(e, "pytorch_cuda_alloc_conf", AO_STR("(unset)"));
    if (conf2)
        ao_emit_val(e, conf ? ", PYTORCH_ALLOC_CONF=" : "PYTORCH_ALLOC_CONF=", "pytorch_alloc_conf",
                    AO_STR(conf2));
    if (nocache)
        ao_emit_val(e, ", PYTORCH_NO_CUDA_MEMORY_CACHING=", "pytorch_no_cuda_memory_caching",
                    AO_STR(nocache));
    ao_emit_val(e, "; ", "offloading", AO_STR(R.off ? "off" : R.declined ? "declined" : "on"));
    if (R.declined) ao_emit_json(e, "declined_because", AO_STR(R.declined));
    ao_emit_obj_end(e);
    ao_emit_row_end(e);
    // A GPU run that never declared a layer offloads nothing, and "saved 0 B"
    // alone does not say why: one line that does, and where boundaries come
    // from.
    bool seen = ao_stat_get(AO_STAT_LAYER_BEGINS) > 0;
    ao_emit_json(e, "layers_seen", AO_BOOL(seen));
    ao_emit_note(e, "layers_note",
                 seen ? NULL
                      : "no layer boundaries seen: nothing was offloaded. Python: run under "
                        "LD_PRELOAD with torch (AOSHIM_TORCH=auto finds the block list) or call "
                        "aoshim.torch.offload(blocks); C: aoshim_layer_begin/aoshim_layer_end "
                        "(include/aoshim.h)");
    // Who marked the layers, when the program (or aoshim's Python side) said.
    if (R.frontend[0])
        ao_emit_kv(e, "layers marked by", "frontend", AO_STR(R.frontend));
    else
        ao_emit_json(e, "frontend", AO_STR(NULL));
    // AOSHIM_OFFLOAD_LAYERS=auto: what the planner chose last, and how often
    // it chose anew (a change of shapes, an allocation that failed).
    if (R.plan[0]) {
        char plan[740];
        snprintf(plan, sizeof plan, "%s (plan %u)", R.plan, R.plans);
        ao_emit_kv(e, "offload plan", "plan", AO_STR(plan));
    } else {
        ao_emit_json(e, "plan", AO_STR(NULL));
    }
    ao_emit_json(e, "plans", AO_U64(R.plans));
    ao_emit_obj_end(e);
}

static const ao_emit_col_t layer_cols[] = {
    {"layer", "layer", 5},
    {"buffers", "buffers", 8},
    {"tracked_bytes", "tracked", 10},
    {"offloads", "offloads", 8},
    {"offloaded_bytes", "offloaded", 10},
    {"offload_ns", "offload", 11},
    {"reloads", "reloads", 7},
    {"reload_ns", "reload", 11},
    {"wait_ns", "wait", 11},
    {"prefetches_missed", "missed", 6},
    {"late_reloads", "late", 5},
};
#define NLAYER_COLS ((int)(sizeof layer_cols / sizeof *layer_cols))

static void emit_layers(ao_emitter_t *e)
{
    ao_emit_table_begin(e, "layers", "per layer (times are GPU time, all steps)", layer_cols,
                        NLAYER_COLS);
    for (int l = -1; l <= R.max_layer; l++) {
        const ao_rec_layer_t *x = &R.layer[l + 1];
        if (!x->seen || (l < 0 && !x->buffers && !x->offloads)) continue;
        ao_emit_val_t v[NLAYER_COLS] = {
            AO_I64(l),
            AO_U64(x->buffers),
            AO_BYTES(x->tracked_bytes),
            AO_U64(x->offloads),
            AO_BYTES(x->offloaded_bytes),
            AO_NS(x->d2h_ns),
            AO_U64(x->reloads),
            AO_NS(x->h2d_ns),
            AO_NS(x->wait_ns),
            AO_U64(x->missed),
            AO_U64(x->late),
        };
        ao_emit_table_row(e, v);
    }
    ao_emit_table_end(e);
}

// --- text -------------------------------------------------------------------------------------
void ao_summary_write(int fd)
{
    bool locked = ao_rec_lock_for_report();
    ao_rec_finish_locked();
    ao_emitter_t e;
    ao_emit_init(&e, fd, AO_EMIT_TEXT);
    // The pid goes on the first line only, so the rest is the same for the
    // same workload (the golden test skips this line).
    ao_emit_printf(&e, "aoshim: %-34s pid %d\n", "memory summary", (int)getpid());
    emit_summary(&e);
    emit_layers(&e);
    ao_emit_flush(&e);
    ao_rec_unlock(locked);
}

// --- JSON: the rest -------------------------------------------------------------------------
static void emit_cmdline(ao_emitter_t *e)
{
    char buf[8192];
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
    }
    if (n < 0) n = 0;
    buf[n] = '\0';
    ao_emit_arr_begin(e, "command_line");
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
        ao_emit_json(e, NULL, AO_STR(buf + i));
    ao_emit_arr_end(e);
}

static void emit_options(ao_emitter_t *e)
{
    const char *name, *def, *help;
    ao_emit_obj_begin(e, "options");
    for (size_t i = 0; ao_config_describe(i, &name, &def, &help); i++) {
        char var[80];
        snprintf(var, sizeof var, "AOSHIM_%s", name);
        const char *v = getenv(var);
        ao_emit_json(e, var, AO_STR(v ? v : def)); // every value parsed: the text is the effect
    }
    ao_emit_obj_end(e);
}

static void emit_steps(ao_emitter_t *e)
{
    ao_emit_obj_begin(e, "steps");
    ao_emit_json(e, "count", AO_U64(R.nstep));
    ao_emit_json(e, "stride", AO_U64(R.step_stride));
    ao_emit_arr_begin(e, "items");
    for (int i = 0; i < R.nsteps; i++) {
        const ao_rec_step_t *s = &R.steps[i];
        ao_emit_obj_begin(e, NULL);
        ao_emit_json(e, "step", AO_U64(s->step));
        ao_emit_json(e, "t_ns", AO_U64(s->t_ns));
        ao_emit_json(e, "peak_device_bytes", AO_U64(s->peak));
        ao_emit_json(e, "peak_without_offloading_bytes", AO_U64(s->peak_without));
        ao_emit_json(e, "offloads", AO_U64(s->offloads));
        ao_emit_json(e, "offloaded_bytes", AO_U64(s->offloaded_bytes));
        ao_emit_json(e, "reloads", AO_U64(s->reloads));
        ao_emit_json(e, "reloaded_bytes", AO_U64(s->reloaded_bytes));
        ao_emit_json(e, "offload_ns", AO_U64(s->d2h_ns));
        ao_emit_json(e, "reload_ns", AO_U64(s->h2d_ns));
        ao_emit_json(e, "wait_ns", AO_U64(s->wait_ns));
        ao_emit_json(e, "vmm_mappings", AO_U64(s->vmm_mappings));
        ao_emit_json(e, "vmm_host_ns", AO_U64(s->vmm_host_ns));
        ao_emit_json(e, "vmm_handles_made", AO_U64(s->vmm_handles));
        ao_emit_json(e, "prefetches_missed", AO_U64(s->missed));
        ao_emit_json(e, "late_reloads", AO_U64(s->late));
        ao_emit_obj_end(e);
    }
    ao_emit_arr_end(e);
    ao_emit_obj_end(e);
}

static void emit_timeline(ao_emitter_t *e)
{
    ao_emit_obj_begin(e, "timeline");
    ao_emit_json(e, "clock", AO_STR("CLOCK_MONOTONIC, ns since aoshim's first event"));
    ao_emit_json(e, "max_samples", AO_U64(AO_TL_MAX));
    ao_emit_json(e, "min_interval_ns", AO_U64(R.tl_width));
    int top = R.max_layer + 1 < AO_TL_LAYERS ? R.max_layer + 1 : AO_TL_LAYERS - 1;
    ao_emit_arr_begin(e, "layers"); // the series of layer_bytes; -1: no layer's
    for (int s = 0; s <= top; s++)
        ao_emit_json(e, NULL, AO_I64(s - 1));
    ao_emit_arr_end(e);
    if (R.max_layer + 1 >= AO_TL_LAYERS)
        ao_emit_json(e, "last_series_sums_layers_from", AO_I64(AO_TL_LAYERS - 2));
    ao_emit_arr_begin(e, "samples");
    for (int i = 0; i < R.ntl; i++) {
        const ao_rec_bucket_t *b = &R.tl[i];
        ao_emit_obj_begin(e, NULL);
        ao_emit_json(e, "t_ns", AO_U64(b->t1));
        ao_emit_json(e, "t_start_ns", AO_U64(b->t0));
        ao_emit_json(e, "device_bytes", AO_U64(b->device));
        ao_emit_json(e, "without_offloading_bytes", AO_U64(b->without));
        ao_emit_json(e, "untracked_bytes", AO_U64(b->passthrough));
        ao_emit_json(e, "offloaded_bytes", AO_U64(b->offloaded));
        ao_emit_json(e, "pinned_host_bytes", AO_U64(b->pinned));
        ao_emit_json(e, "peak_device_bytes", AO_U64(b->peak));
        ao_emit_json(e, "peak_t_ns", AO_U64(b->t_peak));
        ao_emit_json(e, "peak_without_offloading_bytes", AO_U64(b->peak_without));
        ao_emit_arr_begin(e, "layer_bytes");
        const uint64_t *row = &R.tl_layer[(size_t)i * AO_TL_LAYERS];
        for (int s = 0; s <= top; s++)
            ao_emit_json(e, NULL, AO_U64(row[s]));
        ao_emit_arr_end(e);
        ao_emit_obj_end(e);
    }
    ao_emit_arr_end(e);
    ao_emit_obj_end(e);
}

// Sites ranked by one of their figures.
static size_t site_key_offset;
static int site_cmp(const void *a, const void *b)
{
    const ao_rec_site_t *x = *(ao_rec_site_t *const *)a, *y = *(ao_rec_site_t *const *)b;
    uint64_t kx = *(const uint64_t *)((const char *)x + site_key_offset);
    uint64_t ky = *(const uint64_t *)((const char *)y + site_key_offset);
    return kx < ky ? 1 : kx > ky ? -1 : 0;
}

// Frames inside aoshim and the CUDA libraries say nothing about the program.
static bool frame_is_ours(const char *module)
{
    return strstr(module, "libaoshim") || strstr(module, "libcudart") ||
           strncmp(module, "libcuda.", 8) == 0 || strstr(module, "libunwind");
}

// The top sites by one figure (key: offset of a uint64_t field), as an array.
static void emit_site_list(ao_emitter_t *e, const char *name, size_t key, uint64_t total)
{
    enum { TOP = 20, FRAMES = 8 };
    ao_rec_site_t *top[AO_SITES_MAX];
    int n = 0;
    for (uint32_t i = 0; R.sites && i < AO_SITES_MAX; i++)
        if (R.sites[i].hash) top[n++] = &R.sites[i];
    site_key_offset = key;
    qsort(top, (size_t)n, sizeof *top, site_cmp);
    if (n > TOP) n = TOP;
    ao_emit_arr_begin(e, name);
    for (int i = 0; i < n; i++) {
        ao_rec_site_t *s = top[i];
        ao_emit_obj_begin(e, NULL);
        ao_emit_json(e, "bytes", AO_U64(s->bytes));
        ao_emit_json(e, "count", AO_U64(s->count));
        ao_emit_json(e, "share_percent",
                     AO_PCT(total ? 100.0 * (double)s->bytes / (double)total : 0));
        ao_emit_json(e, "offloaded_bytes", AO_U64(s->offloaded));
        ao_emit_json(e, "peak_resident_bytes", AO_U64(s->peak_resident));
        ao_emit_json(
            e, "peak_share_percent",
            AO_PCT(R.seen_peak ? 100.0 * (double)s->peak_resident / (double)R.seen_peak : 0));
        ao_emit_json(e, "layer_first", AO_I64(s->layer_min));
        ao_emit_json(e, "layer_last", AO_I64(s->layer_max));
        ao_emit_arr_begin(e, "frames");
        int shown = 0;
        for (uint32_t f = 0; f < s->depth && shown < FRAMES; f++) {
            const char *mod, *sym;
            uint64_t off;
            ao_rec_symbolize(s->pc[f], &mod, &sym, &off);
            if (shown == 0 && frame_is_ours(mod)) continue;
            shown++;
            ao_emit_obj_begin(e, NULL);
            ao_emit_json(e, "module", AO_STR(mod));
            ao_emit_json(e, "symbol", AO_STR(sym));
            ao_emit_json(e, "offset", AO_U64(off));
            ao_emit_obj_end(e);
        }
        ao_emit_arr_end(e);
        ao_emit_obj_end(e);
    }
    ao_emit_arr_end(e);
}

static void emit_sites(ao_emitter_t *e)
{
    ao_emit_obj_begin(e, "call_sites");
    ao_emit_json(e, "enabled", AO_BOOL(ao_config.stacks));
    ao_emit_json(e, "stacks_captured", AO_U64(R.stacks_captured));
    ao_emit_json(e, "distinct", AO_U64(R.nsites));
    ao_emit_json(e, "dropped_count", AO_U64(R.sites_dropped_count));
    ao_emit_json(e, "dropped_bytes", AO_U64(R.sites_dropped_bytes));
    uint64_t total = 0;
    for (uint32_t i = 0; R.sites && i < AO_SITES_MAX; i++)
        total += R.sites[i].bytes;
    emit_site_list(e, "top", offsetof(ao_rec_site_t, bytes), total);
    emit_site_list(e, "top_by_offloaded", offsetof(ao_rec_site_t, offloaded), total);
    emit_site_list(e, "top_by_peak_share", offsetof(ao_rec_site_t, peak_resident), total);
    ao_emit_obj_end(e);
}

static void emit_stats(ao_emitter_t *e)
{
    static const char *const names[] = {
#define X(NAME, label) #NAME,
        AO_STATS(X)
#undef X
    };
    ao_emit_obj_begin(e, "counters"); // every counter of stats.h, by its name
    for (int i = 0; i < AO_STAT_COUNT; i++) {
        char key[64];
        size_t k = 0;
        for (const char *p = names[i]; *p && k < sizeof key - 1; p++)
            key[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        key[k] = '\0';
        ao_emit_json(e, key, AO_U64(ao_stat_get((ao_stat_t)i)));
    }
    ao_emit_obj_end(e);
}

int ao_report_rank(void)
{
    const char *r = getenv("RANK");
    if (!r || !*r) r = getenv("LOCAL_RANK");
    return r && *r ? atoi(r) : 0;
}

void ao_report_json(int fd)
{
    bool locked = ao_rec_lock_for_report();
    ao_rec_finish_locked();
    ao_emitter_t e;
    ao_emit_init(&e, fd, AO_EMIT_JSON);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    ao_emit_begin(&e);
    ao_emit_json(&e, "schema_version", AO_U64(1));
    ao_emit_json(&e, "tool", AO_STR("aoshim"));
    ao_emit_json(&e, "version", AO_STR(AO_REPORT_VERSION));
    ao_emit_json(&e, "pid", AO_U64(getpid()));
    ao_emit_json(&e, "rank", AO_I64(ao_report_rank()));
    ao_emit_json(&e, "host", AO_STR(host));
    emit_cmdline(&e);
    emit_options(&e);
    ao_emit_obj_begin(&e, "device");
    ao_emit_json(&e, "name", AO_STR(R.device_name[0] ? R.device_name : NULL));
    ao_emit_json(&e, "capacity_bytes", AO_U64(R.device_capacity));
    ao_emit_obj_end(&e);
    emit_summary(&e);
    emit_layers(&e);
    emit_steps(&e);
    emit_timeline(&e);
    emit_sites(&e);
    ao_emit_obj_begin(&e, "trace");
    ao_emit_json(&e, "gpu_intervals", AO_U64(R.nspans));
    ao_emit_json(&e, "gpu_intervals_dropped", AO_U64(R.spans_dropped));
    // A copy whose completion the engine had not yet seen at exit has no
    // GPU time (the report never calls CUDA): issued - timed of them.
    ao_emit_json(&e, "offload_copies_issued", AO_U64(R.issued[0]));
    ao_emit_json(&e, "offload_copies_timed", AO_U64(R.timed[0]));
    ao_emit_json(&e, "offload_copies_early", AO_U64(R.early));
    ao_emit_json(&e, "reload_copies_issued", AO_U64(R.issued[1]));
    ao_emit_json(&e, "reload_copies_timed", AO_U64(R.timed[1]));
    ao_emit_json(&e, "late_reloads_dropped", AO_U64(R.late_dropped));
    ao_emit_obj_end(&e);
    emit_stats(&e);
    ao_emit_end(&e);
    ao_rec_unlock(locked);
}
