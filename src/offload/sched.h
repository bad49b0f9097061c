// SPDX-License-Identifier: MIT
// A schedule: which forward layers of a step are offloaded, and when each
// one's copy starts, its memory goes and it comes back. The engine carries
// a schedule out and decides none of it; the policies that make one live
// here (sched.c), so one program on one simulator can compare them:
//
// - static: AOSHIM_OFFLOAD_LAYERS as 'all', 'none', a count, a list or a
//   percentage, with AOSHIM_PREFETCH;
// - planned: AOSHIM_OFFLOAD_LAYERS=auto, from the planner's choice (plan.h);
// - te: TransformerEngine's default schedule for its num_layers = K
//   (AOSHIM_SCHEDULE=te, AOSHIM_OFFLOAD_LAYERS=K): the first K layers; layer
//   i's copy must be done, the compute stream waiting for it, when layer
//   N-K+i begins its forward; it is reloaded when the backward of N-1-K+i
//   begins, after the compute stream's work so far.
//
// Layer l, when offloaded, in the engine's terms:
// - its copy out starts at the end of layer copy_at's forward; the engine
//   never starts it before the end of l+1 (the release point: every read and
//   late write of l's outputs is enqueued by then), whatever the schedule;
// - its memory goes when the copy is done (release_at < 0: found at the next
//   boundary, the compute stream never waits), or at the end of layer
//   release_at's forward, where the compute stream waits for the copy;
// - it comes back when the backward of layer reload_at begins (or of l+1 or
//   l, whichever comes first: the backward of L waits for L and L-1), after
//   the compute stream's work so far with reload_after_compute.
// In the first step the layer count is not known (nlayers 0): every entry
// is filled as if the model were long enough.
#ifndef AO_SCHED_H
#define AO_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "offload/plan.h"

typedef struct ao_sched_layer_s {
    bool offload;
    int16_t copy_at, release_at, reload_at;
    uint64_t part; // offload only the layer's largest buffers, at least this many bytes (0: all)
} ao_sched_layer_t;

typedef struct ao_sched_s {
    int nlayers;               // the layer count it was made for, 0: not known yet
    bool none;                 // offloads no layer (from the start for a set naming none)
    bool reload_after_compute; // reloads wait for the compute stream's work so far
    bool release_waits;        // some layer's release_at is set (else no layer end looks)
    // Offload only while the device holds at least min_held less
    // margin_layers of the largest layer seen, and at least min_held_floor
    // (auto before it has a plan: within three layers of the budget, six
    // with interleaved microbatches, and
    // half of it: a step that fits moves nothing while it is measured, one
    // that does not starts its copies three layers before it would run
    // out). min_held 0: always.
    uint64_t min_held, min_held_floor;
    unsigned margin_layers;
    const char *name; // for the report: "aoshim", "te", ...
    ao_sched_layer_t layer[AO_MAX_LAYERS];
} ao_sched_t;

// What a schedule is made from.
typedef struct ao_sched_in_s {
    const ao_config_t *cfg; // AOSHIM_OFFLOAD_LAYERS, AOSHIM_PREFETCH, AOSHIM_SCHEDULE
    int nlayers;            // 0 in the first step
    const ao_plan_t *plan;  // auto: the planner's latest choice, NULL before it has one
    uint64_t budget;        // auto
    int late_from;    // 'all': from this layer on, copies were late for their reloads (-1: none)
    bool interleaved; // microbatches interleave: one's layers wait while another runs
                      // (GPipe, 1F1B; not gradient accumulation)
} ao_sched_in_t;

// The schedule the options ask for. Never fails: an option that cannot
// apply yet (TE's K before the layer count is known) gives its first-step
// form.
void ao_sched_make(const ao_sched_in_t *in, ao_sched_t *out);
// TransformerEngine's schedule for K of n layers (K <= n-1; clamped).
void ao_sched_te(int k, int n, ao_sched_t *out);

#endif // AO_SCHED_H
