// SPDX-License-Identifier: MIT
// What the parts of the offload engine share: the scope, chunk and buffer
// types, the engine's state (ao_eng), the automatic plan's (ao_auto), the
// schedule being carried out (ao_sched_now), and the functions one part
// calls in another. Only offload/'s own .c files include it. The model:
//
//   scope (layer, microbatch) --< chunk (one VA range, mapped as a unit)
//                                    --< buffer (a program allocation)
//
// A chunk moves as a unit: it is resident, being copied out, offloaded
// (unmapped), or being copied back. Buffers are sub-allocated in their
// scope's chunks, so a layer costs one map, one set-access and one unmap per
// offload/reload cycle however many tensors it saves. From the second step
// on, each layer's chunk is sized from what the same layer saved in the last
// step, and allocations that were freed inside their layer (temporaries)
// pass straight through to the real allocator, which reuses them best.
//
// Everything here is under ao_eng.mu unless its comment says otherwise.
#ifndef AO_OFFLOAD_INTERNAL_H
#define AO_OFFLOAD_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aoshim.h"
#include "config.h"
#include "cuda/guard.h"
#include "cuda/real.h"
#include "log.h"
#include "mem/extent.h"
#include "mem/hostpool.h"
#include "mem/ptrmap.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "offload/fence.h"
#include "offload/plan.h"
#include "offload/sched.h"
#include "report/record.h"
#include "stats.h"

#define AO_MAX_MB          1024 // microbatch ids 0..1023
#define AO_MAX_STREAMS     64   // streams a cudaFree must wait for
#define AO_MAX_FREE_EVENTS (AO_MAX_STREAMS + 2)
#define AO_ALIGN           512ull // sub-allocation alignment (cudaMalloc guarantees 256)
#define AO_EVENT_CACHE     256
#define AO_MAX_TIMED       256 // GPU intervals waiting to be read; past that, not timed

typedef struct ao_scope_s ao_scope_t;
typedef struct ao_chunk_s ao_chunk_t;

typedef struct ao_buffer_s {
    CUdeviceptr addr;
    size_t size;  // as requested
    size_t rsize; // rounded to AO_ALIGN: what it occupies in its chunk
    ao_chunk_t *chunk;
    void *host;   // pinned slot while a host copy exists
    unsigned seq; // allocation number within its scope
    int site;     // the report's call site, -1 if none
    bool kept, freed;
    // Copied out at its layer's end, before its release point (engine.c,
    // early copies); dirty: touched since, so copied again there.
    bool early, dirty;
    struct ao_buffer_s *next;
} ao_buffer_t;

struct ao_chunk_s {
    CUdeviceptr base;
    size_t size;  // mapped, from base: what its memory counts
    size_t vsize; // its address range: a layer's chunk maps it as its buffers come (chunk.c)
    ao_phys_t phys;
    bool mapped;
    ao_state_t state;
    ao_scope_t *scope;
    ao_buffer_t *buffers;
    unsigned nlive;    // buffers not freed
    bool retiring;     // every buffer freed: released when its events complete
    // The program's own allocation (serve.c): one buffer, accounted as the
    // program's, never offloaded; its memory is aoshim's again once freed.
    bool served;
    ao_extents_t free; // unused space inside the chunk
    // The one stream a launch may use this chunk on without the engine: while
    // being copied out, before its release point, the layer's own stream;
    // while reloading, the stream already made to wait for the reload.
    CUstream safe_stream;
    // Captured work that a graph may replay touches it: while any pin lasts,
    // it stays on the device (a replay cannot wait for a reload). One per
    // pin set (graph pins below) naming it with this generation.
    unsigned graph_pins;
    unsigned gen;  // bumped at each recycle: a pin of an earlier life is stale
    // Bumped as it goes away at its release point (ao_offload): a launch's
    // waiver of it from before (fence.h; touch.c made it safe as it was)
    // no longer holds. Kept across recycles, as gen.
    unsigned waive_gen;
    bool reloaded; // came back this step: another stream must wait for that once
    // Brought back ahead of its backward (prefetch) and untouched since: its
    // host copy is kept, so the memory can be taken back when the program
    // runs out (ao_engine_trim) and the layer reloaded at its backward.
    bool prefetched;
    bool prepared;   // host slots taken, copies about to be queued
    bool stays;      // the part of a layer the schedule keeps on the device
    bool split;      // a chunk of a layer offloaded in part (stays or not): sizes the pool lacks
    CUevent ev_copy; // after copies still reading it (a cancelled offload, early copies)
    // After its copies out at the release point (and every copy queued
    // before): the chunk may go then, before its layer's last copy is done
    // (ao_poll_locked). out_seq: the order those copies were queued in.
    CUevent ev_out;
    bool out_early; // ... or ev_copy: every copy was made at the layer's end
    uint64_t out_seq;
    // From its layer's end to its release point every use goes through the
    // engine (touch.c): the early copies' buffers a use may write are
    // copied again, and the next step learns which buffers the next layer
    // uses (LEARN_TOUCHED).
    bool watched;
    // Frees that the scope's own stream does not order (another stream's
    // cudaFreeAsync, a cudaFree): their events, which any release waits for.
    int nfree_ev;
    // A use no event could be made for (ao_free_event): before the chunk's
    // memory goes, the thread giving it back waits for every stream.
    bool free_unordered;
    CUevent free_ev[AO_MAX_FREE_EVENTS];
    CUstream free_ev_stream[AO_MAX_FREE_EVENTS];
    struct ao_chunk_s *next;
};

// What the same layer did in the last step: per allocation, its size and
// whether it was a temporary (freed inside the layer) or kept.
// LEARN_GONE: tracked, but freed after its layer ended and before its copy
// out started (a later layer consumed it): offloading it saves nothing.
// LEARN_TOUCHED: used after its layer ended and before its release point
// (the next layer reads it): its copy out does not start early.
// LEARN_SHORT: of a page or more, freed after its layer ended and before
// its microbatch's backward began: it does not live to be read there
// (alloc.c).
enum { LEARN_TEMP = 1, LEARN_KEPT = 2, LEARN_GONE = 4, LEARN_TOUCHED = 8, LEARN_SHORT = 16 };
typedef struct ao_learn_s {
    unsigned n;
    uint64_t saved; // bytes (rounded) alive at layer_end in tracked chunks
    uint64_t *size;
    uint8_t *flags;
} ao_learn_t;

struct ao_scope_s {
    int layer, mb;
    bool recompute, ended, release_recorded;
    bool reload_unordered; // its last reload got no event (ao_wait_reload)
    bool offload_pending; // ended forward layer: copied out at its release point
    bool release_passed;  // ...which has passed, but the copy waits for the next layer_begin
                          // (or, in the manual schedule, for aoshim_offload_layer)
    bool skipped;         // its release point passed while the schedule did not select it
    bool wanted;          // manual schedule: aoshim_offload_layer asked for this layer
    bool small_later;     // a prefetch left its chunks under a page for the next backward
                          // boundary (ao_reload)
    bool passthrough;     // a layer the policy does not offload: nothing of it is tracked
    ao_state_t state;
    CUstream stream;  // the compute stream at layer_begin
    pthread_t thread; // the thread that began the layer
    ao_chunk_t *chunks;
    CUevent ev_copied;      // offload stream, after the copies
    CUevent ev_release;     // compute stream, end of the next layer: the copies start there
    CUevent ev_reloaded;    // reload stream, after the copies
    CUevent ev_fwd0;        // timing, at layer_begin (ao_auto.timing)
    ao_learn_t rec;         // this scope's allocations, learned at layer_end
    const ao_learn_t *plan; // last step's record of this layer, if any
    // A layer offloaded in part (the schedule's part): per allocation of the
    // plan, 1 if it stays; and the bytes planned for each kind of chunk.
    uint8_t *stays;
    uint64_t part_goes, part_stays;
    uint64_t pt0; // passthrough: the real allocator's bytes at layer_begin (auto)
    struct ao_scope_s *next;
};

// Memory released when its events complete: a chunk whose buffers are all
// freed, or a host slot.
typedef struct ao_deferred_s {
    ao_chunk_t *chunk; // NULL: only the host slot below
    void *host;
    size_t host_size;
    int nev;
    CUevent ev[AO_MAX_FREE_EVENTS];
    struct ao_deferred_s *next;
} ao_deferred_t;

typedef enum { PHASE_FORWARD, PHASE_BACKWARD } ao_phase_t;

// A GPU interval between two timing events, read once both are complete.
typedef struct ao_timed_s {
    CUevent ev0, ev1;
    uint8_t kind; // enum ao_rec_kind, or the engine's own TIMED_* below
    int layer, mb;
    uint64_t bytes;
} ao_timed_t;

// A mapping kept for a chunk of the same size to come, with the events of
// its last uses (chunk.c: the idle-mapping cache).
typedef struct ao_idle_s {
    CUdeviceptr base;
    size_t size;
    ao_phys_t phys;
    int nev;
    CUevent ev[AO_MAX_FREE_EVENTS + 2];
    bool unordered; // its chunk had a use no event orders (ao_chunk_t.free_unordered)
    CUstream on;    // a served chunk's freed on its own stream: its one event is there; else NULL
    struct ao_idle_s *next;
} ao_idle_t;

// The engine's state.
typedef struct ao_engine_s {
    pthread_mutex_t mu;
    bool ready, failed;
    CUcontext ctx;
    CUstream d2h, h2d;  // one stream per copy direction: both copy engines work
    ao_scope_t *scopes; // newest first
    // Scopes are being walked (ao_offload, called from loops over scopes,
    // may drain the copies and poll): the poll frees no scope meanwhile.
    int scope_hold;
    ao_scope_t *servers; // one per stream served on (layer -1): not in scopes, never offloaded
    ao_scope_t *open;   // the forward scope allocations go to
    ao_deferred_t *deferred;
    CUevent sync_events[AO_EVENT_CACHE], timing_events[AO_EVENT_CACHE];
    int nsync_events, ntiming_events;
    CUstream streams[AO_MAX_STREAMS];
    int nstreams;
    CUevent t0;                     // the reference for GPU times in the report
    CUevent last_reload;            // re-recorded after every batch of copies back
    ao_timed_t timed[AO_MAX_TIMED]; // GPU intervals (copies, waits) not yet read
    int ntimed;
    int mb;
    // The manual schedule (aoshim_set_schedule): only the layers the program
    // names are copied out, and nothing comes back before it asks, except
    // what a kernel needs now.
    bool manual;
    int nlayers;    // layers in a forward pass, known once a backward began
    unsigned steps; // step_end calls
    int max_fwd_layer;
    uint64_t max_saved; // the most a layer's forward saved (the measuring step's margin)
    ao_phase_t phase[AO_MAX_MB];
    int bwd_open[AO_MAX_MB]; // layer + 1 of the open backward, 0 if none
    int live[AO_MAX_MB];     // forwards begun this step less backwards begun
    // Per microbatch, one bit per layer whose forward began this step
    // (allocated at the microbatch's first layer). Scopes cannot answer
    // "did layer L run forward": one that tracked nothing is gone at the
    // next boundary, and any layer may track nothing.
    uint64_t *fwd_ran[AO_MAX_MB];
    ao_learn_t learned[AO_MAX_LAYERS];
    // Early copies (engine.c): the watches each layer has had, and the
    // layers whose later uses were not learnt, which no longer go early.
    unsigned early_watches[AO_MAX_LAYERS];
    uint64_t early_off[AO_MAX_LAYERS / 64];
    CUevent bwd0[AO_MAX_MB]; // timing, at backward_begin (auto)
} ao_engine_t;
extern ao_engine_t ao_eng;

extern ao_ptrmap_t ao_buffers; // address -> ao_buffer_t *

// AOSHIM_OFFLOAD_LAYERS=auto: what the steps measured, and the plan made
// from them (offload/plan.h). Under the engine's lock.
// Engine-only kinds of ao_eng.timed, beside AO_REC_*. TIMED_IDLE (_BWD): the
// compute stream idled inside a forward (backward) layer while the host
// waited in chunk_map; it is taken off that layer's TIMED_FWD (TIMED_BWD)
// interval when that one is read. TIMED_H2D_LINK: one chunk's reload
// copies, for the link's rate (the reload's AO_REC_H2D interval, from its
// first chunk's copies to its last's, may hold the host's mapping between
// them: engine.c, ao_reload).
enum { TIMED_FWD = 16, TIMED_BWD, TIMED_IDLE, TIMED_IDLE_BWD, TIMED_H2D_LINK };
typedef struct ao_auto_s {
    bool on, planned;
    uint64_t budget;
    uint64_t bytes[AO_MAX_LAYERS], cur[AO_MAX_LAYERS]; // saved per layer: last step, this one
    uint64_t tracked[AO_MAX_LAYERS / 64]; // layers tracked this step (the others kept their bytes)
    uint64_t fwd_ns[AO_MAX_LAYERS], bwd_ns[AO_MAX_LAYERS]; // the latest measured
    uint64_t d2h_bytes, d2h_ns, h2d_bytes, h2d_ns;         // the link, as the copies went
    int mbs, max_mb;                                       // microbatches in a step
    // The order of a step's layers (plan.h): the one being recorded, and the
    // last step's if it was a whole one (nops 0: none, GPipe's assumed).
    ao_plan_op_t *rec_ops, *ops;
    int rec_nops, rec_cap, nops, ops_cap;
    bool rec_over;
    bool interleaved; // a microbatch was left with layers alive for another (not accumulation)
    unsigned plans;
    const char *why;      // what made the next plan necessary, NULL: the step
    const char *said_why; // ... and the current plan's, kept in its report row
    ao_plan_t plan;
    // What a scope of each layer is expected to save this step (one
    // microbatch's): last step's, or scaled when the shapes changed
    // (plan_reshape), which happened this step if reshaped.
    uint64_t want[AO_MAX_LAYERS];
    uint64_t passed[AO_MAX_LAYERS]; // ... and gained by the real allocator, passed through
    uint64_t peak_without;          // the last measured step's
    // A layer's chunks (all microbatches'): now, at this step's peak
    // without offloading, and at the peak of the last step that did not
    // split it (auto.c: split_correct).
    uint64_t live[AO_MAX_LAYERS], live_at_peak[AO_MAX_LAYERS], whole_at_peak[AO_MAX_LAYERS];
    int live_n;                         // the layers live counts (the highest seen + 1)
    uint64_t live_gen, live_gen_copied; // live's changes: made, and as of the last copy
    int peak_where;                 // ... and where in the step it came (AO_WHERE_*)
    uint64_t fwd_est[AO_MAX_LAYERS], bwd_est[AO_MAX_LAYERS]; // times, not measured since
    bool reshaped;
    char shape_why[128];
    // A layer's copy out was still running when its scheduled reload came
    // (the reload cancelled it), see copy_too_late: per layer, the prefetch
    // distance of the plan then; under 'all', late_from on is not offloaded.
    uint8_t late_d[AO_MAX_LAYERS];
    bool late;
    int late_from;
    char late_why[96];
    // Layers' forward and backward GPU time is measured for the planner and
    // for the report's compute lane (AOSHIM_REPORT_HTML, AOSHIM_TRACE): two
    // events per layer and pass, never otherwise.
    bool timing;
    // The program's stream-ordered pool (the device's default pool, which
    // cudaMallocAsync serves) keeps what is freed until a synchronisation:
    // the driver counts its unused reserve as memory in use, aoshim's
    // counters do not (see ao_auto_pool_note). pool_held: the most aoshim's
    // count plus that reserve came to at a layer boundary this step;
    // pool_slack: the unused reserve at a step's peak (the most any step
    // measured), which the plan is held to the budget less.
    CUmemoryPool pool;
    bool pool_none; // no pool to ask (no such driver call, or it failed)
    uint64_t pool_held, pool_slack;
    uint64_t pool_unused_now; // the pool's unused reserve at the last sample
    uint64_t beyond_step;     // this step's most in use beyond the allocations, at a boundary
    uint64_t slack_once;      // held off the budget for one step after a caught-up one
    // What the plan's model missed: the most a step run under one plan from
    // its start allocated beyond that plan's predicted peak (auto.c:
    // ao_auto_step), held off the budget from then on. plans_at_start: the
    // plans made before this step began (-1: none yet).
    uint64_t model_slack;
    int plans_at_start;
    bool caught_up;           // this measuring step caught up under a budget (engine.c)
    bool yielded;             // the measuring step gave its idle memory back (engine.c)
    bool serve_began;         // serving began in this step (serve.c): one pool from now on
    // What the program had allocated outside the layers as the step began
    // (its first layer_begin, then each step's end), and carry, what the
    // last step left beyond that (the optimizer's state, made in the first
    // step's optimizer), which the next step's peak holds too.
    uint64_t live_start, carry;
    bool live_start_set;
} ao_auto_t;
extern ao_auto_t ao_auto;

// The schedule the engine carries out (offload/sched.h): which layers, and
// when their copies start, their memory goes and they come back. Remade
// when what it depends on changes: the layer count, the plan, the budget
// (ao_sched_update).
extern ao_sched_t ao_sched_now;

#define WARN_ONCE(...)                                                                             \
    do {                                                                                           \
        static int once_;                                                                          \
        ao_warn_once(&once_, __VA_ARGS__);                                                         \
    } while (0)

// A control call's id out of range: said once, and the call refused.
#define CHECK_ID(fn, v, max)                                                                       \
    if ((v) < 0 || (v) >= (max)) {                                                                 \
        WARN_ONCE(fn "(%d): ids go from 0 to %d", (v), (max)-1);                                   \
        return AOSHIM_EINVAL;                                                                      \
    }

// --- engine.c --------------------------------------------------------------------------------
bool ao_budget_given(void); // AOSHIM_BUDGET set
void ao_cancel_chunk(ao_chunk_t *c);
bool ao_engine_ensure_ready(void);
int ao_engine_enter(void);
bool ao_fwd_ran(int layer, int mb);
void ao_host_slots_free(ao_chunk_t *c);
int ao_engine_leave(int rc);
void ao_offload(ao_scope_t *s);
// The measuring step under a given budget, past its last layer: room for a
// served allocation of size, by sending layers passed over (engine.c).
void ao_measuring_room(size_t size);
bool ao_offloads_nothing(void);
// Layers' copies out start at their own end where they can (engine.c).
bool ao_early_copies(void);
// A watched chunk's watch ends without its copy out: its early copies are
// waited for by the next use on each stream, and their host slots go back.
void ao_early_undo(ao_chunk_t *c);
void ao_release_sync(const ao_scope_t *s);
// small_later: a prefetch of the schedule's with a backward boundary to go
// before the layer is needed; its chunks under a page wait for that boundary.
int ao_reload(ao_scope_t *s, bool missed, bool prefetch, bool small_later);
void ao_sched_update(void);

// --- events.c --------------------------------------------------------------------------------
CUstream ao_current_stream(void);
bool ao_ev_done(CUevent e);
void ao_ev_wait(CUevent e);
void ao_drain_locked(void);
CUevent ao_event_get(bool timing);
void ao_event_put(CUevent e, bool timing);
void ao_gpu_wait(CUstream s, CUevent e);
void ao_note_stream_locked(CUstream s);
void ao_poll_locked(void);
CUevent ao_ev_record(CUstream s, bool timing);
void ao_ev_rerecord(CUevent e, CUstream s);
void ao_timed_add(CUevent ev0, CUevent ev1, int kind, int layer, int mb, uint64_t bytes);
void ao_timed_read(void);
extern int ao_user_threads;
bool ao_wait_one_release(void);

// --- chunk.c ---------------------------------------------------------------------------------
// What orders a new mapping's first use after the last uses of the memory
// it takes: the host (it waits for them: a cudaMalloc is usable on any
// stream at once), or one stream, on the GPU (a stream-ordered allocation,
// a reload's copy).
typedef struct {
    bool gpu;
    CUstream stream;
} ao_order_t;
#define AO_BY_HOST      ((ao_order_t){.gpu = false})
#define AO_BY_STREAM(s) ((ao_order_t){.gpu = true, .stream = (s)})
CUresult ao_chunk_map(ao_chunk_t *c, ao_order_t by);
// Map more of c's address range, at least up to address to (in whole
// pages, or the rest): the memory for a buffer placed past what is mapped.
CUresult ao_chunk_grow(ao_chunk_t *c, CUdeviceptr to, ao_order_t by);
ao_chunk_t *ao_chunk_new(ao_scope_t *s, size_t size, size_t first, bool split, ao_order_t by);
// Unmap the mappings that lent their memory (chunk.c) once their uses are
// done; at exit, the rest become idle mappings (unmapped with them).
void ao_lenders_poll(void);
void ao_lenders_to_idle(void);
ao_chunk_t *ao_chunk_serve(ao_scope_t *s, size_t size, size_t least, CUstream st);
bool ao_chunk_keep_freed(ao_chunk_t *c, CUevent ev);
void ao_serve_unlink(ao_chunk_t *c, ao_buffer_t *b);
// As a forward begins: under AOSHIM_SERVE=auto, serving begins if the
// program's pool would hold memory unused beside aoshim's; once begun, it
// is paused or resumed with the plan (serve.c).
void ao_serve_decide(void);
// Serving now: begun, and not paused by a plan of nothing without a given
// budget (serve.c).
bool ao_serve_active(void);
// A layer's allocation the real allocator (or serving) takes, as last step
// learnt it: a temporary, one kept, or, while serving, one that did not
// live to the backward (alloc.c).
static inline bool ao_learn_untracked(uint8_t flags)
{
    return flags & (LEARN_TEMP | LEARN_KEPT) || (flags & LEARN_SHORT && ao_serve_active());
}
bool ao_chunk_release(ao_chunk_t *c, CUevent *ev, int nev);
void ao_chunk_retire(ao_chunk_t *c);
void ao_chunk_set(ao_chunk_t *c, ao_state_t st);
bool ao_chunk_unmap(ao_chunk_t *c);
void ao_defer(ao_deferred_t *d);
bool ao_free_events_done(ao_chunk_t *c);
extern ao_idle_t *ao_idle_mapped; // newest first
extern size_t ao_idle_mapped_bytes;
bool ao_idle_unmap(size_t need);
// Every kept mapping unmapped and every idle handle released: aoshim's idle
// device memory goes to the driver. Returns the bytes released.
size_t ao_idle_give_back(void);
void ao_wait_reload(CUstream s, const ao_scope_t *sc);
void ao_learn_free(ao_learn_t *l);
bool ao_learn_push(ao_learn_t *l, uint64_t size, uint8_t flags);
void ao_scope_destroy(ao_scope_t *s);
ao_scope_t *ao_scope_find(int layer, int mb);
void ao_set_safe_stream(ao_chunk_t *c, CUstream s);

// --- alloc.c ---------------------------------------------------------------------------------
void ao_free_event(ao_chunk_t *c, CUstream s);
void ao_unprefetch(ao_chunk_t *c);

// --- auto.c ----------------------------------------------------------------------------------
void ao_auto_copy_too_late(const ao_scope_t *s);
void ao_auto_op_record(int layer, int mb, bool bwd);
void ao_auto_budget(void);
uint64_t ao_auto_budget_of(const ao_share_t *b, uint64_t free_b, uint64_t total, uint64_t have);
void ao_auto_check_shapes(const ao_scope_t *s);
// At each boundary: the device's memory for the report (every policy),
// and the program's pool for the plan (auto).
void ao_boundary_sample(bool fwd); // fwd: a forward layer's begin or end
void ao_device_sampling_on(void);
void ao_auto_pool_note(uint64_t reserved, uint64_t used);
void ao_auto_device_note(uint64_t in_use);
uint64_t ao_device_in_use(void);
uint64_t ao_auto_plan_budget(void);
void ao_auto_step(void);
// The program's pool (the device's default one, which cudaMallocAsync
// serves), found once; NULL where the driver has none. Its reserve and what
// of it is allocated; false if not known.
CUmemoryPool ao_program_pool(void);
bool ao_pool_figures(CUmemoryPool p, cuuint64_t *reserved, cuuint64_t *used);
// Whether pool keeps what it frees across synchronisations: its release
// threshold is at least AO_SERVE_UNUSED_MIN (PyTorch's backend:cudaMallocAsync
// sets the maximum). serve.c serves beside such a pool, the report models it
// (report/summary.c).
#define AO_SERVE_UNUSED_MIN (64ull << 20)
bool ao_pool_keeps(CUmemoryPool pool);
// Serving began (serve.c): what the plans held off the budget for the
// program's pool beside aoshim's is no longer there.
void ao_auto_serving_began(void);
void ao_auto_trim_to_learned(void);
// A layer's chunks made (bytes > 0) or gone, before ao_stat_device counts
// them; and the snapshot of them at the step's peak without offloading.
void ao_auto_layer_live(int layer, int64_t bytes);
void ao_auto_live_at_peak(void);

// --- graph.c ---------------------------------------------------------------------------------
void ao_pin_for_capture(ao_chunk_t *c, uint64_t capture);

#endif // AO_OFFLOAD_INTERNAL_H
