// SPDX-License-Identifier: MIT
// Internals of the simulated driver (libcuda.so.1 look-alike).
//
// Model (see tests/sim/README.md):
//  - one lock around every call (sim_enter/sim_leave); a test double, not a GPU;
//  - work is scheduled at enqueue on a virtual clock and its effect on memory
//    runs at once, in program order;
//  - a happens-before checker (vector clocks per stream and host thread)
//    reports conflicting accesses the program did not order;
//  - device memory is host memory inside one reserved region; what is not
//    mapped and accessible faults.
//
// Files: core.c (init, config, devices, contexts, errors, stats, exit line),
//        mem.c (region, allocations, pools, VMM, host memory, pointer attrs,
//               accessibility table, fault diagnostics),
//        stream.c (streams, events, virtual clock, capture),
//        hb.c (happens-before checker), exec.c (launch, copies, memset,
//        kernel registry, param info), proc.c (cuGetProcAddress table),
//        graph.c (instantiate, launch = replay of captured nodes, destroy),
//        fail.c (SIM_FAIL fault injection), pitched.c (2D/3D and peer
//        copies, 16-bit and 2D sets).
#ifndef SIM_INTERNAL_H
#define SIM_INTERNAL_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simgpu.h"

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_GRANULE (2ull << 20) // cuMemGetAllocationGranularity, as on Hopper/Ampere
#define SIM_MAX_AGENTS 256       // streams + host threads over the process lifetime

// --- configuration and counters (core.c) ------------------------------------
typedef struct {
    uint64_t ns;       // per call: per handle, or per mapping the range covers
    double ns_per_mib; // and per MiB of it
} sim_vmm_cost_t;

typedef struct sim_config_s {
    uint64_t capacity;
    uint64_t context_bytes; // SIM_CONTEXT_BYTES: held from the start, as a context's own memory
    bool nodata, quiet, race_fatal;
    bool trace_gaps;     // SIM_TRACE_GAPS: compute idle gaps and host waits, on stderr
    bool deinit_at_exit; // SIM_DEINIT_AT_EXIT: calls after exit began answer DEINITIALIZED
    const char *profile_name;
    double d2h_gbps, h2d_gbps;         // pinned
    double pageable_gbps;              // pageable copies, either direction
    double d2d_gbps;                   // device-to-device (compute engine)
    uint64_t copy_latency_ns;
    double tflops;
    // host-side API costs, ns
    uint64_t api_ns, launch_ns, reserve_ns, alloc_ns, free_ns;
    // Virtual memory: a fixed cost per handle or per mapping, and one per MiB
    // (sim_vmm_cost). Set-access and unmap pay it for each mapping the range
    // covers.
    sim_vmm_cost_t mem_create, mem_map, set_access, unmap, release;
    // What cuMemMap and cuMemSetAccess cost more per mapping while a copy
    // between the host and the device is on the link (core.c).
    sim_vmm_cost_t map_in_copy, set_access_in_copy;
    double pin_ns_per_byte;            // cuMemHostAlloc / cuMemHostRegister
} sim_config_t;

extern sim_config_t sim_cfg;
extern sim_stats_t sim_st; // counters live here; peak/current kept by mem.c
extern bool sim_initialized; // cuInit called

// Every exported entry point: sim_enter() takes the global lock, charges the
// host clock api cost and returns CUDA_ERROR_NOT_INITIALIZED before cuInit
// (the caller then unlocks with sim_leave and returns it).
CUresult sim_enter(void);
void sim_leave(void);
void sim_lock(void);   // lock only (for calls valid before cuInit)
void sim_unlock(void);
// Calls that need a context: CUDA_SUCCESS when the calling thread has a
// current (live) context, else CUDA_ERROR_INVALID_CONTEXT (none current) or
// CUDA_ERROR_CONTEXT_IS_DESTROYED. Lock held. (core.c; added by helper A)
CUresult sim_ctx_check(void);
// The device's primary context (pointer attribute CONTEXT). (core.c; helper A)
CUcontext sim_primary_ctx(void);
// The last race's description, kept in core.c so simLastRace works whatever
// hb.c does: hb.c calls sim_set_last_race with the text it printed. Lock held.
void sim_set_last_race(const char *text);
// The exit line (peak, races, faults, times, counters, live resources) on
// stderr unless SIM_QUIET, then the injected-failure lines (sim_fail_report,
// whatever SIM_QUIET says); sim_fault and a SIM_RACE_FATAL exit call it before _exit,
// because _exit skips the destructor that prints it otherwise. Reads only
// counters, never freed state.
void sim_exit_line(void);
// Convention (core.c reads it for simGetStats and the exit line): stream.c
// keeps sim_st.elapsed_ns = the latest end_ns of any enqueued op, and
// sim_st.busy_ns_* / launches / copies up to date; core.c reports
// elapsed = max(sim_host_ns, sim_st.elapsed_ns).

// A bad SIM_* value: "simgpu: error: VAR='value': accepted" on stderr (one
// line, whatever its length) and _exit(2). (core.c)
__attribute__((noreturn)) void sim_cfg_die(const char *var, const char *val, const char *accepted);
// The CUDA version the driver reports (SIM_DRIVER_VERSION, 13000 by default).
int sim_driver_version(void);
// CUresult by its cuda.h name ("CUDA_ERROR_OUT_OF_MEMORY"); false if unknown.
bool sim_error_by_name(const char *name, CUresult *out);
// cuda.h name of a code, or NULL for a code cuda.h does not define.
const char *sim_error_name(CUresult e);

// --- fault injection (fail.c) -------------------------------------------------------
// X(call, default error): every entry point SIM_FAIL can fail, named as in
// cuda.h without the _v2 suffix. The _ptsz/_ptds twins of an entry point count
// as the same call (cuda.h names them alike under per-thread default streams).
// Default error: the resource error the call documents in cuda.h when it
// documents one (CUDA_ERROR_OUT_OF_MEMORY); otherwise the call allocates
// nothing it could run out of, and the only failure cuda.h documents for it
// beyond the caller's own mistakes is \notefnerr ("may also return error
// codes from previous, asynchronous launches"): CUDA_ERROR_LAUNCH_FAILED, the
// error a failed kernel leaves. Launches: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
// the documented error of a launch that did not happen (LAUNCH_FAILED is for
// one that ran and failed, which would have side effects).
// Adding a call: one line here and SIM_FAIL_POINT(call) atop its entry points.
// clang-format off
#define SIM_FAIL_CALLS(X)                                                        \
    /* memory: each documents CUDA_ERROR_OUT_OF_MEMORY */                        \
    X(cuMemAlloc, CUDA_ERROR_OUT_OF_MEMORY)                                      \
    X(cuMemAllocAsync, CUDA_ERROR_OUT_OF_MEMORY)                                 \
    X(cuMemAllocFromPoolAsync, CUDA_ERROR_OUT_OF_MEMORY)                         \
    X(cuMemAllocHost, CUDA_ERROR_OUT_OF_MEMORY)                                  \
    X(cuMemHostAlloc, CUDA_ERROR_OUT_OF_MEMORY)                                  \
    X(cuMemHostRegister, CUDA_ERROR_OUT_OF_MEMORY)                               \
    /* cuda.h lists OUT_OF_MEMORY for unregistering too (page tables) */         \
    X(cuMemHostUnregister, CUDA_ERROR_OUT_OF_MEMORY)                             \
    X(cuMemCreate, CUDA_ERROR_OUT_OF_MEMORY)                                     \
    X(cuMemAddressReserve, CUDA_ERROR_OUT_OF_MEMORY)                             \
    /* a mapping needs page tables: OUT_OF_MEMORY is in cuMemMap's list */       \
    X(cuMemMap, CUDA_ERROR_OUT_OF_MEMORY)                                        \
    X(cuEventCreate, CUDA_ERROR_OUT_OF_MEMORY)                                   \
    X(cuStreamCreate, CUDA_ERROR_OUT_OF_MEMORY)                                  \
    X(cuStreamCreateWithPriority, CUDA_ERROR_OUT_OF_MEMORY)                      \
    /* no resource error documented: \notefnerr */                               \
    X(cuMemSetAccess, CUDA_ERROR_LAUNCH_FAILED)                                  \
    X(cuMemUnmap, CUDA_ERROR_LAUNCH_FAILED)                                      \
    X(cuMemRelease, CUDA_ERROR_LAUNCH_FAILED)                                    \
    X(cuMemFree, CUDA_ERROR_LAUNCH_FAILED)                                       \
    X(cuMemFreeHost, CUDA_ERROR_LAUNCH_FAILED)                                   \
    X(cuMemcpy, CUDA_ERROR_LAUNCH_FAILED)                                        \
    X(cuMemcpyAsync, CUDA_ERROR_LAUNCH_FAILED)                                   \
    X(cuMemcpyDtoH, CUDA_ERROR_LAUNCH_FAILED)                                    \
    X(cuMemcpyHtoD, CUDA_ERROR_LAUNCH_FAILED)                                    \
    X(cuMemcpyDtoD, CUDA_ERROR_LAUNCH_FAILED)                                    \
    X(cuMemcpyDtoHAsync, CUDA_ERROR_LAUNCH_FAILED)                               \
    X(cuMemcpyHtoDAsync, CUDA_ERROR_LAUNCH_FAILED)                               \
    X(cuMemcpyDtoDAsync, CUDA_ERROR_LAUNCH_FAILED)                               \
    X(cuMemsetD8, CUDA_ERROR_LAUNCH_FAILED)                                      \
    X(cuMemsetD32, CUDA_ERROR_LAUNCH_FAILED)                                     \
    X(cuMemsetD8Async, CUDA_ERROR_LAUNCH_FAILED)                                 \
    X(cuMemsetD32Async, CUDA_ERROR_LAUNCH_FAILED)                                \
    X(cuEventRecord, CUDA_ERROR_LAUNCH_FAILED)                                   \
    X(cuEventRecordWithFlags, CUDA_ERROR_LAUNCH_FAILED)                          \
    /* a real error, never CUDA_ERROR_NOT_READY (which is no failure) */         \
    X(cuEventQuery, CUDA_ERROR_LAUNCH_FAILED)                                    \
    X(cuEventSynchronize, CUDA_ERROR_LAUNCH_FAILED)                              \
    X(cuStreamWaitEvent, CUDA_ERROR_LAUNCH_FAILED)                               \
    X(cuStreamQuery, CUDA_ERROR_LAUNCH_FAILED)                                   \
    X(cuStreamSynchronize, CUDA_ERROR_LAUNCH_FAILED)                             \
    X(cuCtxSynchronize, CUDA_ERROR_LAUNCH_FAILED)                                \
    X(cuGraphLaunch, CUDA_ERROR_LAUNCH_FAILED)                                   \
    X(cuLaunchKernel, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)                        \
    X(cuLaunchKernelEx, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
// clang-format on

// clang-format off
enum sim_fail_call_e {
#define SIM_FAIL_ENUM(call, err) SIM_FAIL_##call,
    SIM_FAIL_CALLS(SIM_FAIL_ENUM)
#undef SIM_FAIL_ENUM
    SIM_FAIL_NCALLS
};
// clang-format on

// Parse SIM_FAIL (cuInit, lock held); a bad value exits 2.
void sim_fail_load(void);
// Count one call of an injectable entry point; the error to return when this
// occurrence is to fail (CUDA_SUCCESS otherwise). Takes the lock: call it
// first thing in the entry point, before sim_enter.
CUresult sim_fail_check(int call);
// Every entry point SIM_FAIL can fail starts with this line. An injected
// failure returns before the call does anything: no state changes, outputs
// untouched (cuda.h documents none written on failure).
#define SIM_FAIL_POINT(call)                                                                       \
    do {                                                                                           \
        CUresult fi_ = sim_fail_check(SIM_FAIL_##call);                                            \
        if (fi_ != CUDA_SUCCESS) return fi_;                                                       \
    } while (0)
// One "simgpu: injected <call>:<n> -> <error>" line per injected failure
// (from sim_exit_line; reads plain arrays only, no lock).
void sim_fail_report(void);

// --- virtual host clock (core.c) -----------------------------------------------
extern uint64_t sim_host_ns;
static inline void sim_host_advance(uint64_t ns) { sim_host_ns += ns; }
// A virtual-memory call's host cost for bytes of one handle or mapping, also
// counted apart (sim_stats_t vmm_host_ns).
static inline void sim_vmm_advance(sim_vmm_cost_t c, uint64_t bytes)
{
    uint64_t ns = c.ns + (uint64_t)(c.ns_per_mib * (double)bytes / (double)(1u << 20));
    sim_host_advance(ns);
    sim_st.vmm_host_ns += ns;
}
// The host blocks until t (a synchronisation): SIM_TRACE_GAPS prints waits
// of 0.1 ms or more (stream.c).
void sim_trace_host_wait(uint64_t from, uint64_t to);
static inline void sim_host_wait_until(uint64_t t)
{
    if (t <= sim_host_ns) return;
    if (sim_cfg.trace_gaps) sim_trace_host_wait(sim_host_ns, t);
    sim_st.host_wait_ns += t - sim_host_ns;
    sim_host_ns = t;
}

// --- vector clocks (hb.c) -------------------------------------------------------
typedef struct sim_vc_s {
    uint32_t c[SIM_MAX_AGENTS];
} sim_vc_t;

typedef struct sim_epoch_s {
    uint16_t agent;
    uint32_t clk;
} sim_epoch_t;

int sim_agent_new(const char *what);     // aborts with a message past SIM_MAX_AGENTS
void sim_vc_join(sim_vc_t *dst, const sim_vc_t *src);
static inline bool sim_vc_covers(const sim_vc_t *v, sim_epoch_t e) { return v->c[e.agent] >= e.clk; }

// The calling host thread as an agent: its vector clock and epoch counter.
typedef struct sim_thread_s {
    int agent;
    sim_vc_t vc;
} sim_thread_t;
sim_thread_t *sim_thread(void);

// --- streams and events (stream.c) ----------------------------------------------
enum sim_engine_e { SIM_ENG_NONE = -1, SIM_ENG_COMPUTE = 0, SIM_ENG_D2H, SIM_ENG_H2D, SIM_ENG_COUNT };

typedef struct sim_graph_s sim_graph_t;

struct CUstream_st {
    uint32_t magic;    // SIM_STREAM_MAGIC while alive
    uint32_t id;       // printed in diagnostics: 0 legacy, then creation order
    int agent;
    unsigned flags;    // CU_STREAM_NON_BLOCKING
    bool legacy;       // the legacy default stream (NULL / CU_STREAM_LEGACY)
    bool per_thread;   // a thread's per-thread default stream
    uint64_t tail_ns;  // completion time of the last enqueued op
    sim_vc_t vc;
    CUstreamCaptureStatus capture;
    sim_graph_t *graph; // while capturing
    // (helper B, additive) captured work on a stream that joined another
    // stream's capture, not yet joined back into the origin stream
    bool cap_pending;
};
#define SIM_STREAM_MAGIC 0x5354524du
typedef struct CUstream_st sim_stream_t;

struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    bool recorded;
    uint64_t time_ns;  // completion time of the last record
    sim_vc_t vc;
    uint32_t stream_id;
    // (helper B, additive) last recorded inside this capture (NULL: a real
    // record or none); a wait on it joins the waiting stream to the capture
    sim_graph_t *cap_graph;
};
#define SIM_EVENT_MAGIC 0x45564e54u

// Resolve a handle given by the program. ptds: the call came through a _ptsz /
// _ptds entry point, so NULL means the calling thread's per-thread stream.
// Returns NULL (and sets *err = CUDA_ERROR_INVALID_HANDLE) for a bad handle.
sim_stream_t *sim_stream_resolve(CUstream h, bool ptds, CUresult *err);

// An operation enqueued on a stream: its virtual times and its epoch in the
// happens-before order. Filled by sim_op_begin.
typedef struct sim_op_s {
    sim_stream_t *stream;
    const char *what;   // "kernel", "cuMemcpyDtoHAsync", ...
    const char *kernel; // kernel name, or NULL
    uint64_t start_ns, end_ns;
    sim_epoch_t epoch;
    const sim_vc_t *vc; // stream's clock including this op
} sim_op_t;

// Order the op after the host thread's past, the stream's tail and (legacy
// semantics) the other blocking streams, pick its start on its engine, give
// it cost_ns, advance the stream. engine SIM_ENG_NONE takes no engine time.
// While the stream is capturing, returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// for ops that cannot be captured (capturable=false); capturable ops are
// appended to the graph and *captured is set (the caller then skips effects).
CUresult sim_op_begin(sim_op_t *op, sim_stream_t *s, int engine, uint64_t cost_ns,
                      const char *what, const char *kernel);
// Host waits for everything ordered before the op, as a synchronous call does.
void sim_host_wait_op(const sim_op_t *op);
// Host waits for the whole device (cuCtxSynchronize, cuMemFree of plain memory).
void sim_device_sync(void);
// The clock an op enqueued on s now would carry (sim_op_begin's), without
// enqueueing it: what a cuMemAllocAsync may reuse is decided before it is
// known to succeed.
void sim_stream_next_vc(const sim_stream_t *s, sim_vc_t *out);

// --- happens-before checker (hb.c) ----------------------------------------------
// Check and record an access to [addr, addr+bytes) by an op (stream agent) or
// by the host thread (op == NULL: unmap, release, free, synchronous host use).
// A conflict not ordered by the program is counted and described (stderr,
// and simLastRace), and with SIM_RACE_FATAL exits SIM_EXIT_RACE.
enum sim_hb_mode { SIM_HB_READ = 1, SIM_HB_WRITE = 2, SIM_HB_FREE = 3 };
void sim_hb_access(const sim_op_t *op, uint64_t addr, uint64_t bytes, int mode);
void sim_hb_host_access(uint64_t addr, uint64_t bytes, int mode, const char *what);
// Drop the history of a range (added by helper B; optional, nothing needs to
// call it). The checker already never counts an earlier free/unmap as a
// conflict with a later access: the later access passed classification, so
// the range has a new owner, and its reuse was ordered by the allocator's
// lock, which the checker cannot see (e.g. one thread unmaps, another maps
// the same VA again). Use after free is the classifier's fault, not a race.
void sim_hb_forget(uint64_t addr, uint64_t bytes);
void sim_hb_alias(uint64_t from, uint64_t to, uint64_t bytes);

// --- memory (mem.c) -----------------------------------------------------------------
typedef enum sim_memkind_e {
    SIM_MEM_INACCESSIBLE = 0, // inside the device region but not mapped+accessible
    SIM_MEM_DEVICE,           // fully inside accessible device memory
    SIM_MEM_PINNED,           // fully inside pinned (page-locked) host memory
    SIM_MEM_PAGEABLE,         // ordinary host memory
} sim_memkind_t;

void sim_mem_init(void);            // reserve the region (called from cuInit)
bool sim_mem_in_region(uint64_t addr);
sim_memkind_t sim_mem_classify(uint64_t addr, uint64_t bytes);
// One line: what [addr] belongs to now or last belonged to ("cuMemAlloc
// buffer 0x..+4096, freed", "VMM range 0x..., unmapped", ...).
void sim_mem_describe(uint64_t addr, char *buf, size_t len);
uint64_t sim_mem_current_bytes(void);
// What is still held now (exit line, simGetStats): cuMemCreate handles not
// released, cuMemMap mappings not unmapped, pinned host bytes (cuMemHostAlloc
// / cuMemAllocHost not freed, cuMemHostRegister not unregistered).
void sim_mem_live(uint64_t *handles, uint64_t *mappings, uint64_t *pinned_bytes);
uint64_t sim_mem_peak_bytes(void);
void sim_mem_reset_peak(void);
// The high-water mark of cuMemGetInfo's total - free (simResetStats resets
// it, simResetPeak does not), and the bytes the memory pools hold now.
uint64_t sim_mem_peak_in_use_bytes(void);
void sim_mem_reset_peak_in_use(void);
uint64_t sim_mem_pool_reserved_bytes(void);
// The pools' reserved-but-unused bytes when the peak was last raised (set
// back with it by sim_mem_reset_peak).
uint64_t sim_mem_peak_pool_unused_bytes(void);
// After a successful stream, event or context synchronize (the host has
// joined what it waited for): each pool releases what the calling thread has
// seen unused above its release threshold, and plain memory freed in stream
// order that the thread has seen freed goes back to the device.
void sim_mem_synced(void);

// A touch of inaccessible memory: print the diagnostic (op, kernel, stream,
// address, owner) and exit SIM_EXIT_FAULT.
__attribute__((noreturn)) void sim_fault(const char *what, const char *kernel,
                                         const sim_stream_t *s, uint64_t addr, uint64_t bytes);
// SIGSEGV backstop for kernel bodies touching memory they did not declare:
// exec.c sets the op being run; the handler reports it through sim_fault.
void sim_fault_set_current(const sim_op_t *op);

// --- kernels (exec.c) ---------------------------------------------------------------
struct CUfunc_st {
    uint32_t magic;
    sim_kernel_desc_t desc;
    uint32_t param_offset[SIM_MAX_PARAMS];
    uint32_t param_bytes; // total packed size
};
#define SIM_FUNC_MAGIC 0x46554e43u
// (helper S, additive) Run one launch of f on s, which is not capturing:
// footprint and cost from the descriptor, schedule, classify (fault), race
// check, count, run the body with args[i] -> parameter i. cuLaunchKernel and
// graph replay (graph.c) share it. Lock held.
CUresult sim_kernel_exec(sim_stream_t *s, CUfunction f, void **args, const sim_launch_t *L);

// --- proc table (proc.c) ------------------------------------------------------------
CUresult sim_proc_lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status);

// --- diagnostics ------------------------------------------------------------------
// printf-style line on stderr prefixed "simgpu: ".
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// --- capture graphs and scheduling helpers (stream.c / exec.c; helper B) ----------
// Additive: ops enqueued on a capturing stream are recorded here and do not
// run. exec.c records its own nodes (kernel args are copied so the graph can
// be replayed after the caller's buffers are gone); any other caller of
// sim_op_begin on a capturing stream gets CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// and the capture is invalidated (stricter than CUDA, which captures e.g.
// cuMemAllocAsync as a node). A CUgraph handle is a sim_graph_t pointer.
enum sim_node_kind_e { SIM_NODE_KERNEL, SIM_NODE_MEMCPY, SIM_NODE_MEMSET, SIM_NODE_EVENT_RECORD,
                       SIM_NODE_EVENT_WAIT };
typedef struct sim_node_s {
    int kind;
    const char *what;
    CUfunction func;      // kernel
    sim_launch_t launch;  // kernel (stream = the capturing stream)
    void *argbuf;         // kernel: packed copy of the params, func->param_bytes
    uint64_t dst, src, bytes; // memcpy / memset (bytes = element count for memset)
    int engine;           // memcpy: SIM_ENG_*
    unsigned value, elem; // memset value and element size (1, 2 or 4)
    CUevent event;        // event record / wait
    uint32_t stream_id;
} sim_node_t;
struct sim_graph_s {
    uint32_t magic; // SIM_GRAPH_MAGIC
    sim_node_t *nodes;
    size_t n, cap;
    sim_stream_t *origin; // the stream that began the capture
    bool capturing;       // capture still open
    int mode;             // CUstreamCaptureMode given to cuStreamBeginCapture
    int thread_agent;     // the host thread that began it
    uint64_t capture_id;  // cuStreamGetCaptureInfo's id: unique in the process, never 0
};
#define SIM_GRAPH_MAGIC 0x47525048u
// The stream's capture graph when it is actively capturing (NULL otherwise),
// after the legacy-stream rule (an op on the legacy stream while a blocking
// stream captures invalidates that capture: *err = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
sim_graph_t *sim_capture_graph(sim_stream_t *s, CUresult *err);
sim_node_t *sim_graph_add(sim_graph_t *g, int kind, const char *what, uint32_t stream_id);
// A new empty graph (not capturing), kept for ever like every graph (stale
// handles stay detectable). Lock held.
sim_graph_t *sim_graph_new(void);
// Invalidate the capture on s (an unsupported call was made on it).
void sim_capture_invalidate(sim_stream_t *s);
// A "potentially unsafe" call during capture (cuda.h,
// cuThreadExchangeStreamCaptureMode): one that is not stream-ordered or may
// synchronise (cuMemAlloc, cuMemFree, cuMemCreate/Map/Unmap, host allocation,
// cuCtxSynchronize, synchronous copies, event/stream query and sync...).
// Returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and invalidates the capture,
// when this thread has a non-relaxed capture open or (this thread in GLOBAL
// mode) another thread has a GLOBAL one; CUDA_SUCCESS otherwise. Lock held.
// stream.c calls it for its own calls; mem.c/core.c may for theirs.
CUresult sim_capture_unsafe_call(void);
// Exported by stream.c/exec.c beyond the obvious cuda.h names (helper B):
// cuStreamGetFlags_ptsz, cuStreamBeginCapture (CUDA 10.0, global mode) and
// cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2_ptsz,
// cuThreadExchangeStreamCaptureMode, cuEventElapsedTime (pre-13.0 name),
// cuMemcpy_ptds, cuMemcpyAsync_ptsz.
// Latest completion time of any op on any engine (for simGetStats elapsed_ns);
// sim_op_begin also keeps sim_st.busy_ns_* and sim_st.elapsed_ns (as max of
// op end times; core.c takes the max with the host clock).
uint64_t sim_engines_done_ns(void);
// Whether a copy between the host and the device is on the link at t (a
// copy engine runs one that began by t and ends after it).
bool sim_copy_in_flight(uint64_t t);

// Leave the simulator's lock and return e (entry points that sim_enter()ed).
#define SIM_RET(e)                                                                                 \
    do {                                                                                           \
        CUresult r_ = (e);                                                                         \
        sim_leave();                                                                               \
        return r_;                                                                                 \
    } while (0)

#endif // SIM_INTERNAL_H
