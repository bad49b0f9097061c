// SPDX-License-Identifier: MIT
// The planner (AOSHIM_OFFLOAD_LAYERS=auto): measurements in, a schedule out.
// No CUDA, no state, no locks: the engine measures a step and carries out
// what comes back, and tests call it with figures of their own.
//
// The model, for one step of n layers whose forward saves bytes[l] each:
// - a plan offloads layers 0 .. k-1 (the earliest have the most time to be
//   copied out and are needed last) and reloads each d layers ahead (layer j
//   comes back when the backward of j+1+d begins);
// - copies out start at each layer's release point (the end of layer l+1),
//   one after another on the link; copies still running when the forward
//   would end hold it back (the engine waits for a release rather than map
//   more memory): exposed time;
// - in backward, when layer L's backward begins, L and everything below it
//   not offloaded, or already reloaded, is on the device; the compute
//   stream waits for a reload still under way (the exposed time);
// - everything else (weights, temporaries) is peak_without minus the sum of
//   bytes, and stays.
// The budget comes first: the smallest k whose predicted peak fits, with the
// d that exposes the least copy time (then the lower peak). When no plan
// fits, the one with the lowest peak, and budget_met is false.
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

#endif // AO_PLAN_H
