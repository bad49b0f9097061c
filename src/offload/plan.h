// SPDX-License-Identifier: MIT
// The planner (AOSHIM_OFFLOAD_LAYERS=auto): measurements in, a schedule out.
// No CUDA, no state, no locks: the engine measures a step and carries out
// what comes back, and tests call it with figures of their own.
//
// The model: one step of n layers whose forward saves bytes[l] each, as the
// engine runs it, event by event (on the simulated GPU it predicts the
// exposed time within about 1% of the step; tests/e2e's
// speed_auto_link_bound holds it to 5%).
// - a plan offloads layers 0 .. k-1 (the earliest have the most time to be
//   copied out and are needed last); layer l's copy out starts at its
//   release point, the end of layer l+1, one copy after another;
// - the host runs ahead of the GPU and stops only where chunk_map waits: a
//   layer's memory comes from the engine's pool of physical memory, and with
//   the pool full the host waits for the oldest release under way (a copy
//   out done, or in backward a layer's backward done); with none under way
//   the pool grows. The pool holds what the layers not offloaded need at
//   the forward's end (the engine trims it to that when a plan is made), so
//   from layer n-k on, each layer's memory waits for a copy out: a link
//   slower than the forward paces the forward (exposed time);
// - in backward the host reloads L, L-1 and L-2 .. L-1-d at L's
//   backward_begin, each as soon as the pool has room (a reload whose copy
//   out the host has not yet seen done is cancelled: the layer stays), so
//   reloads run as far ahead as memory and the link let them, whatever d;
//   the compute stream waits for L's and L-1's reloads (exposed time);
// - everything else (weights, temporaries) is peak_without minus the sum of
//   bytes, and stays.
// exposed_ns: the step's end less its compute (forward and backward times).
// A plan may offload part of its last layer (the engine moves that layer's
// largest buffers, at least part bytes): the least part that still fits
// moves the least over the link.
// The budget comes first: the smallest k whose predicted peak fits, with the
// d that exposes the least copy time (then the lower peak, then the smaller
// d, which holds the least memory should the host not run ahead). When no
// plan fits, the one with the lowest peak, and budget_met is false.
#ifndef AO_PLAN_H
#define AO_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#define AO_PLAN_MAX_PREFETCH 8

typedef struct ao_plan_in_s {
    int nlayers;
    const uint64_t *bytes;  // saved by each layer's forward (all microbatches of a step)
    const uint64_t *fwd_ns; // GPU time of each layer's forward (0: not measured)
    const uint64_t *bwd_ns; // ... and of its backward
    uint64_t peak_without;  // device bytes at the step's peak without offloading
    uint64_t budget;        // the limit to keep
    double d2h, h2d;        // link bandwidth, bytes per ns (0: not measured)
    // Per layer, the shortest prefetch distance at which a step saw its copy
    // out still running when its reload came (0: never; NULL: none seen). A
    // plan offloads it (or a layer after it) only at shorter distances.
    const uint8_t *late_d;
} ao_plan_in_t;

typedef struct ao_plan_s {
    int count;           // layers 0 .. count-1 are offloaded
    uint64_t part;       // ... the last of them only this many bytes of it (0: all)
    int prefetch;        // reload distance d
    bool budget_met;     // predicted peak <= budget
    uint64_t peak;       // predicted peak
    uint64_t exposed_ns; // predicted copy time the compute stream waits for, per step
    uint64_t fwd_late;   // bytes whose copy out is not done when the forward would end
} ao_plan_t;

// The link bandwidth assumed until one is measured (bytes per ns = GB/s).
#define AO_PLAN_DEFAULT_BW 25.0

void ao_plan_make(const ao_plan_in_t *in, ao_plan_t *out);
// Predict one (count, prefetch) choice: what ao_plan_make compares.
void ao_plan_predict(const ao_plan_in_t *in, int count, int prefetch, ao_plan_t *out);
// The same with only part bytes of layer count-1 offloaded (0: all of it).
void ao_plan_predict_part(const ao_plan_in_t *in, int count, int prefetch, uint64_t part,
                          ao_plan_t *out);

#endif // AO_PLAN_H
