// SPDX-License-Identifier: MIT
// The offload engine: scopes, buffers, their state machine, the copies and
// the deferred releases.
//
// A scope is one forward layer of one microbatch, (layer, mb). Allocations
// made while a forward scope is open are its buffers. At the scope's release
// point (the end of the next forward layer, whose kernels read this layer's
// output) its buffers are copied to pinned host memory on the offload
// stream, after every write the program made to them until then; their
// device memory is released once the copy has completed, known from events
// the host polls, never by blocking the host or the compute stream. At backward_begin(L+d)
// scope L is mapped again at the same addresses and copied back on the
// reload stream; at backward_begin(L) the compute stream waits on the GPU.
//
//   buffer: RESIDENT -> OFFLOADING -> OFFLOADED -> RELOADING -> RESIDENT
//           (freed from any state: the release waits for the events that
//           cover its last uses and any copy in flight)
#ifndef AO_ENGINE_H
#define AO_ENGINE_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

typedef enum ao_state_e {
    AO_RESIDENT,
    AO_OFFLOADING,
    AO_OFFLOADED,
    AO_RELOADING,
} ao_state_t;

// The forward scope allocations go to, NULL outside one: read without a lock
// on every allocation (a stale answer only means one buffer is or is not
// tracked, which the engine re-checks under its lock).
extern void *ao_engine_open_scope;
static inline bool ao_engine_in_scope(void)
{
    return __atomic_load_n(&ao_engine_open_scope, __ATOMIC_ACQUIRE) != NULL;
}
// Whether aoshim's memory serves the program's own stream-ordered
// allocations (offload/serve.c): AOSHIM_SERVE=1 from the start, auto once
// a forward began where the program's pool would hold memory unused beside
// aoshim's. Read without a lock on every allocation; ao_engine_serve checks
// again under it (ao_serve_active: not paused).
extern bool ao_engine_serving;
static inline bool ao_engine_serves(void)
{
    return __atomic_load_n(&ao_engine_serving, __ATOMIC_RELAXED);
}
// A tracked allocation in the open scope, stream-ordered on stream when
// async (cudaMallocAsync: the legacy stream is NULL). CUDA_SUCCESS and *out;
// CUDA_ERROR_OUT_OF_MEMORY; or CUDA_ERROR_NOT_SUPPORTED when aoshim cannot
// track it (no VMM, scope closed meanwhile): the caller passes it through.
CUresult ao_engine_alloc(size_t size, CUstream stream, bool async, CUdeviceptr *out);
// One of the program's own stream-ordered allocations, from aoshim's memory
// while layers are tracked (serve.c). CUDA_SUCCESS and *out, or
// CUDA_ERROR_NOT_SUPPORTED: the caller passes it to the real allocator.
CUresult ao_engine_serve(size_t size, CUstream stream, CUdeviceptr *out);
// Free of a pointer inside aoshim's range. async: stream-ordered on stream
// (cudaFreeAsync); otherwise after all work on every stream aoshim knows.
CUresult ao_engine_free(CUdeviceptr p, CUstream stream, bool async);
// Give pooled device memory back after a failed real allocation; true if
// anything was given back (the caller retries once).
bool ao_engine_trim(void);
// The calling thread used this stream (launch, async allocation): one
// thread-local compare on the hot path, the lock only when it changes.
extern AO_TLS CUstream ao_tls_stream;
extern AO_TLS bool ao_tls_stream_set;
extern AO_TLS bool ao_tls_stream_explicit;
extern AO_TLS CUstream ao_tls_noted; // the last stream this thread used
void ao_engine_note_stream_slow(CUstream s);
static inline void ao_engine_note_stream(CUstream s)
{
    if (!ao_tls_stream_set || ao_tls_noted != s) ao_engine_note_stream_slow(s);
}
// This thread used CUDA through aoshim: counted until it exits, so that the
// clean-up at exit knows whether another such thread may still touch a
// buffer (one TLS test on the paths that call it).
extern AO_TLS bool ao_tls_thread_seen;
void ao_engine_thread_seen_slow(void);
static inline void ao_engine_thread_seen(void)
{
    if (!ao_tls_thread_seen) ao_engine_thread_seen_slow();
}
// The program destroyed this stream: never record on it again.
void ao_engine_forget_stream(CUstream s);

// The control API (aoshim.h), returning AOSHIM_* codes.
int ao_engine_layer_begin(int layer);
int ao_engine_layer_end(int layer);
int ao_engine_backward_begin(int layer);
int ao_engine_backward_end(int layer);
int ao_engine_step_end(void);
int ao_engine_set_microbatch(int mb);
int ao_engine_set_stream(CUstream s);
int ao_engine_set_schedule(int schedule);
int ao_engine_offload_layer(int layer);
int ao_engine_release_layer(int layer);
int ao_engine_reload_layer(int layer);
int ao_engine_keep(CUdeviceptr p);

// CUDA graphs: what captured work touches stays on the device until the
// graph made from the capture and every executable graph instantiated from
// it are destroyed (engine.c, graph pins). The hooks call these around the
// real calls, which return the handles.
// The id of the capture s is in, 0 if none: asked before the capture ends.
uint64_t ao_engine_capture_id(CUstream s);
// The end of a capture on s: g is the graph it produced, NULL if it failed.
// False when s still captures (the call failed without ending the capture).
bool ao_engine_capture_end(uint64_t capture, CUgraph g, CUstream s);
void ao_engine_graph_instantiated(CUgraph g, CUgraphExec x);
void ao_engine_graph_exec_destroyed(CUgraphExec x);
void ao_engine_graph_destroyed(CUgraph g);
void ao_engine_graph_cloned(CUgraph from, CUgraph clone);

// The stream a reloading chunk is already safe on (see scan.h).
CUstream ao_engine_safe_stream(const void *chunk);
// The engine's slow path for one word the fast check did not clear: on
// return the launch may use it (the chunk is returned for the waiver, *gen
// its waive_gen then), or
// ao_scan_failed is set and the launch must not be issued. n: the bytes from
// p the work may touch in p's chunk (a word: 1; a copy's range: to its end);
// 0: any buffer of that chunk (a launch with more words into watched chunks
// than the scan keeps: the chunk's watch ends). stale (NULL: a copy's range,
// always acted on): p is in a chunk but in no live buffer of it, a word the
// launch cannot use (scan.h, leftover words): *stale is set and nothing is
// done.
const void *ao_engine_touch(CUdeviceptr p, uint64_t n, CUstream s, const char *what, bool *stale,
                            unsigned *gen);
// The chunk's waive_gen (a launch's waiver of it holds while unchanged).
unsigned ao_engine_waive_gen(const void *chunk);

// At exit, after the report: give back what aoshim holds on the device and
// in pinned host memory, when the driver is still there; never hangs. From
// then on everything passes through.
void ao_engine_shutdown(void);
// Before a report: wait for the GPU intervals (copies, waits) not yet read,
// so that the report's copy times hold every copy issued. Never blocks for
// long on aoshim's own lock.
void ao_engine_flush(void);

// Set in a forked child and under AOSHIM_ENABLE=0: everything passes through.
extern bool ao_engine_off;
// Why the engine will not offload in this process (NULL: it will): said once
// at the first layer boundary, after which the control calls do nothing.
extern const char *ao_engine_declined;

#endif // AO_ENGINE_H
