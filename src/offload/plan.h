// SPDX-License-Identifier: MIT
// The planner (AOSHIM_OFFLOAD_LAYERS=auto): measurements in, a schedule out.
// No CUDA, no state, no locks: the engine measures a step and carries out
// what comes back, and tests call it with figures of their own.
//
// The model: one step of n layers whose forward saves bytes[l] each, as the
// engine runs it, event by event (on the simulated GPU it predicts the
// exposed time within about 1% of the step; tests/e2e's
// speed_auto_link_bound holds it to 5%). A step of several microbatches is
// the order its layers ran in (ops: GPipe, 1F1B, any), each microbatch's
// scope of a layer a share of the layer's bytes and times; what is live at
// once follows that order (1F1B holds two microbatches where GPipe holds
// them all), and so does the peak.
// - a plan offloads layers 0 .. k-1 of every microbatch (the earliest have
//   the most time to be copied out and are needed last); layer l's copy
//   out starts at its release point, the end of layer l+1 of the same
//   microbatch, one copy after another;
// - the host runs ahead of the GPU and stops only where chunk_map waits: a
//   layer's memory comes from the engine's pool of physical memory, and with
//   the pool full the host waits for the oldest release under way (a copy
//   out done, or in backward a layer's backward done); with none under way
//   the pool grows. The pool starts with what the scopes left on the
//   device hold at once at most (pool; the engine trims it to that when a
//   plan is made), so once it is full each layer's memory waits for a copy
//   out: a link slower than the forward paces the forward (exposed time);
// - in backward the host reloads L, L-1 and L-2 .. L-1-d at L's
//   backward_begin, each as soon as the pool has room (a reload whose copy
//   out the host has not yet seen done is cancelled: the layer stays), so
//   reloads run as far ahead as memory and the link let them, whatever d;
//   the compute stream waits for L's and L-1's reloads (exposed time);
// - everything else (weights, temporaries) is peak_without minus the most
//   the scopes hold at once without offloading, and stays.
// exposed_ns: the step's end less its compute (forward and backward times).
// A plan may offload part of its last layer (the engine moves that layer's
// largest buffers, at least part bytes): the least part that still fits
// moves the least over the link.
// k goes up to n-2-d (a layer reloaded as backward begins saves nothing),
// to n-2 where microbatches interleave (a microbatch's layers wait while
// others run, whatever d).
// The budget comes first: the smallest k whose predicted peak fits, with the
// d that exposes the least copy time (then the lower peak, then the smaller
// d, which holds the least memory should the host not run ahead). When no
// plan fits, the one with the lowest peak, and budget_met is false.
#ifndef AO_PLAN_H
#define AO_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#define AO_PLAN_MAX_PREFETCH 8

// One layer's forward or backward of one microbatch: a step is a sequence
// of them, in the order the program ran them.
typedef struct ao_plan_op_s {
    int16_t layer, mb;
    bool bwd;
} ao_plan_op_t;

typedef struct ao_plan_in_s {
    int nlayers;
    int mbs;                 // microbatches in a step (0: one)
    const ao_plan_op_t *ops; // the step's order, 2 x nlayers x mbs of them, each (layer, mb)'s
                             // forward before its backward (NULL: every microbatch's
                             // forward, then every backward, both in microbatch order)
    const uint64_t *bytes;   // saved by each layer's forward (all microbatches of a step)
    const uint64_t *fwd_ns;  // GPU time of each layer's forward (all microbatches; 0: not measured)
    const uint64_t *bwd_ns;  // ... and of its backward
    uint64_t peak_without;   // device bytes at the step's peak without offloading
    uint64_t budget;         // the limit to keep
    double d2h, h2d;         // link bandwidth, bytes per ns (0: not measured)
    // Per layer, the shortest prefetch distance at which a step saw its copy
    // out still running when its reload came (0: never; NULL: none seen). A
    // plan offloads it (or a layer after it) only at shorter distances.
    const uint8_t *late_d;
    // Any idle memory backs any range (serving: mem/vmm.c). A part of
    // a layer then costs the engine what the model says, and is chosen
    // wherever it exposes less copy time than the whole layer.
    bool fine_handles;
    // A layer's copy out starts at its own end, not at its release point (the
    // engine's early copies: its buffers the next layer does not use); its
    // memory still goes only after the release point.
    bool early_copy;
    // ... but not for the layers set here, one bit each (NULL: none): their
    // uses after their end were not learnt (engine.c, early_unlearnt).
    const uint64_t *early_off;
} ao_plan_in_t;

typedef struct ao_plan_s {
    int count;           // layers 0 .. count-1 are offloaded
    uint64_t part;       // ... the last of them only this many bytes of it (0: all)
    int prefetch;        // reload distance d
    bool budget_met;     // predicted peak <= budget
    uint64_t peak;       // predicted peak
    uint64_t exposed_ns; // predicted copy time the compute stream waits for, per step
    uint64_t fwd_late;   // bytes whose copy out is not done when its forward would end
} ao_plan_t;

// The link bandwidth assumed until one is measured (bytes per ns = GB/s).
#define AO_PLAN_DEFAULT_BW 25.0

void ao_plan_make(const ao_plan_in_t *in, ao_plan_t *out);
// Whether ops (n of them) are a step of nlayers x mbs scopes as ao_plan_in_t
// needs: each scope's forward once, then its backward once.
bool ao_plan_ops_valid(const ao_plan_op_t *ops, int n, int nlayers, int mbs);
// The most in's scopes hold at once, one of layer l holding x[l] from its
// forward to its backward's end (in's order, or GPipe's: mbs x the sum).
uint64_t ao_plan_live(const ao_plan_in_t *in, const uint64_t *x);
// Predict one (count, prefetch) choice: what ao_plan_make compares.
void ao_plan_predict(const ao_plan_in_t *in, int count, int prefetch, ao_plan_t *out);
// The same with only part bytes of layer count-1 offloaded (0: all of it).
void ao_plan_predict_part(const ao_plan_in_t *in, int count, int prefetch, uint64_t part,
                          ao_plan_t *out);

#endif // AO_PLAN_H
