// SPDX-License-Identifier: MIT
// Every counter aoshim keeps, defined once: the summary, aoshim_get_stats and
// (later) the JSON report all read this table.
#ifndef AO_STATS_H
#define AO_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

// X(NAME, label in the summary)
#define AO_STATS(X)                                                                                \
    X(PASSTHROUGH_BYTES, "device bytes allocated outside aoshim (live)")                           \
    X(TRACKED_RESIDENT_BYTES, "tracked bytes with device memory (live)")                           \
    X(TRACKED_LIVE_BYTES, "tracked bytes, resident or offloaded (live)")                           \
    X(PEAK_DEVICE_BYTES, "peak device memory")                                                     \
    X(PEAK_WITHOUT_BYTES, "peak without offloading")                                               \
    X(TRACKED_NEED_BYTES, "tracked buffers the program has not freed (live)")                      \
    X(PEAK_NEED_BYTES, "peak of the program's own allocations, tracked or not")                    \
    X(DEVICE_PEAK_BYTES, "device memory in use at its peak (the driver's count)")                  \
    X(DEVICE_SAMPLES, "samples of the device's memory in use")                                     \
    X(DEVICE_OTHER_MIN, "least the device held beyond every allocator, plus one (0: not sampled)") \
    X(POOL_SLACK_BYTES, "most the program's pool held beyond its allocations at its high")         \
    X(POOL_KEEPS, "1: the program's pool keeps what it frees (its release threshold)")             \
    X(TRACKED_BUFFERS, "buffers tracked")                                                          \
    X(SERVED_BYTES, "the program's own bytes served from aoshim's memory (live)")                  \
    X(SERVED_ALLOCS, "the program's own allocations served from aoshim's memory")                  \
    X(SERVED_PEAK_BYTES, "the most of the program's own bytes aoshim's memory served at once")     \
    X(SERVED_FROM_STEP, "the step serving began in, plus one (0: never)")                          \
    X(SERVE_POOL_UNUSED, "the program's pool's unused reserve when serving began (auto)")          \
    X(LENT_BYTES, "idle memory mapped anew before its last uses were done, ordered on the GPU")    \
    X(LENT_SERVED_BYTES, "of that, mapped for the program's own allocations aoshim served")        \
    X(GROWN_BYTES, "layers' memory mapped after their first buffer, as they came (no wait)")       \
    X(OFFLOADED_BYTES, "bytes offloaded (copied out and released)")                                \
    X(RELOADED_BYTES, "bytes reloaded")                                                            \
    X(OFFLOADED_BUFFERS, "buffers offloaded")                                                      \
    X(LAYERS_OFFLOADED, "layer offloads")                                                          \
    X(COPIES_SKIPPED, "buffers freed before their copy")                                           \
    X(EARLY_COPY_BYTES, "bytes whose copy out started at their layer's end")                       \
    X(EARLY_COPIED_AGAIN, "buffers copied out early and again: used before their release point")   \
    X(EARLY_OFF_LAYERS, "layers no longer copied early: their uses were not learnt")               \
    X(OFFLOADS_CANCELLED, "offloads cancelled by an early reload")                                 \
    X(PREFETCH_MISSED, "reloads issued late, at the layer's own backward")                         \
    X(PREFETCH_EVICTED, "prefetched layers given back when the program ran out of memory")         \
    X(LATE_RELOADS, "late reloads (buffers a kernel needed outside the schedule)")                 \
    X(RELOAD_UNDER_WAY, "buffers a kernel needed while their scheduled reload was on the link")    \
    X(LEFTOVER_PLACES, "kernel parameter places found holding leftovers, not pointers")            \
    X(LEFTOVER_SKIPS, "words at those places pointing at offloaded memory, not read as touches")   \
    X(RELOAD_WAIT_NS, "compute stream waited on reloads (ns)")                                     \
    X(D2H_COPY_NS, "device-to-host copy time (ns)")                                                \
    X(H2D_COPY_NS, "host-to-device copy time (ns)")                                                \
    X(KEPT_SMALL, "kept resident: below AOSHIM_MIN_BYTES")                                         \
    X(KEPT_HOST_LIMIT, "kept resident: AOSHIM_HOST_LIMIT reached")                                 \
    X(KEPT_PIN_FAILED, "kept resident: pinning host memory failed")                                \
    X(KEPT_BY_USER, "kept resident: aoshim_keep")                                                  \
    X(KEPT_NO_DEVICE_SPACE, "kept resident: no device memory to reload into")                      \
    X(KEPT_GRAPH, "kept resident: used by a captured CUDA graph")                                  \
    X(PINNED_HOST_BYTES, "pinned host pool")                                                       \
    X(PIN_CALLS, "host pinning calls")                                                             \
    X(MEM_CREATE_CALLS, "cuMemCreate calls")                                                       \
    X(VMM_MAPPINGS, "mappings made (a cuMemMap each, their access set)")                           \
    X(VMM_MAPPED_BYTES, "bytes mapped")                                                            \
    X(VMM_UNMAPPINGS, "mappings unmapped")                                                         \
    X(VMM_HOST_NS, "host time in aoshim's cuMemCreate/Map/SetAccess/Unmap/Release calls (ns)")     \
    X(ADDRESS_RESERVE_CALLS, "cuMemAddressReserve calls")                                          \
    X(OOM_RETRIES, "allocations retried after giving back pooled memory")                          \
    X(LAYER_BEGINS, "aoshim_layer_begin calls (forward and recomputation)")

typedef enum ao_stat_e {
#define X(NAME, label) AO_STAT_##NAME,
    AO_STATS(X)
#undef X
        AO_STAT_COUNT
} ao_stat_t;

extern uint64_t ao_stats[AO_STAT_COUNT];
extern const char *const ao_stat_label[AO_STAT_COUNT];

static inline void ao_stat_add(ao_stat_t s, int64_t d)
{
    __atomic_fetch_add(&ao_stats[s], (uint64_t)d, __ATOMIC_RELAXED);
}
static inline uint64_t ao_stat_get(ao_stat_t s)
{
    return __atomic_load_n(&ao_stats[s], __ATOMIC_RELAXED);
}
static inline void ao_stat_max(ao_stat_t s, uint64_t v)
{
    uint64_t cur = ao_stat_get(s);
    while (v > cur && !__atomic_compare_exchange_n(&ao_stats[s], &cur, v, 1, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED)) {
    }
}
// Device-memory gauges change together; the peaks follow them.
void ao_stat_device(int64_t passthrough, int64_t resident, int64_t live);
// A tracked buffer the program allocated (+) or freed (-), its bytes.
void ao_stat_need(int64_t bytes);
// Called (any thread) when the allocations reach a new high, by 1/256 and
// 2 MiB at least over the last call's: the engine samples the driver's
// count there (offload/auto.c). NULL until the engine is ready.
extern void (*ao_stat_on_high)(void);
// Called (any thread) when this step's peak without offloading rises, and
// at ao_stat_step_reset: the planner notes what each layer holds there
// (offload/auto.c). NULL until the engine is ready.
extern void (*ao_stat_on_peak_without)(void);
// The peak without offloading since the last ao_stat_step_reset (the
// planner's measure of a step's need), the peak with it (what aoshim counts
// on the device: passed through and tracked with device memory), and the
// reset of both, to the current values.
uint64_t ao_stat_step_peak_without(void);
uint64_t ao_stat_step_peak_with(void);
void ao_stat_step_reset(void);
// Where in the step the program is (the engine sets it at each boundary),
// and where this step's peak without offloading came: AO_WHERE_FORWARD + L
// in the forward of layer L, AO_WHERE_ENDED + L after its end and before
// the next layer call (after the forward's last layer: the head, the loss),
// the backward, after the backward (the optimizer, until the step ends),
// before the first forward layer of a step (after the last one's end), or
// unknown (before any layer call). Both forward kinds are >= AO_WHERE_FORWARD:
// a peak that layers ended before it can lower.
enum {
    AO_WHERE_UNKNOWN = 0,
    AO_WHERE_OUTSIDE = 1,
    AO_WHERE_BACKWARD = 2,
    AO_WHERE_AFTER = 3,
    AO_WHERE_FORWARD = 4,
    AO_WHERE_ENDED = AO_WHERE_FORWARD + AO_MAX_LAYERS,
};
extern int ao_stat_where_now;
int ao_stat_step_peak_where(void);
// "the optimizer (after the backward)", "the forward of layer 3", ...; the
// time after the last of nlayers forward layers (0: not known) is "the head".
void ao_stat_where_text(int where, int nlayers, char *out, unsigned n);

#endif // AO_STATS_H
