// SPDX-License-Identifier: MIT
// The step trace (AOSHIM_RECORD, docs/trace-format.md): what the program
// asked of CUDA, recorded at the interposed entry points before aoshim acts,
// written gzip-compressed as the program runs.
//
// The hooks call in only where the program itself called (ao_in_hook is 0:
// aoshim's own CUDA calls, and the driver calls a hooked runtime call makes,
// are not the program's) and only while ao_tr_on is set, so a process that
// does not record pays one well-predicted branch per hook.
//
// The launch path takes no lock and allocates nothing: each thread appends
// its records to its own fixed buffer (AO_TR_BUF bytes), handed to the
// shared writer under its lock once full (once per buffer), at the step's
// end and at exit. Kernels are declared once, through the layout cache's
// slot for the kernel (offload/scan.h, trace_id); streams and events by
// small lock-free tables. Every 64th launch of each kernel is timed with two
// events, read at the step's end or at exit (never on the launch path).
#ifndef AO_STEPTRACE_H
#define AO_STEPTRACE_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/guard.h"

// Set while this process records: AOSHIM_RECORD set, not a forked child, not
// finished, the file not failed.
extern bool ao_tr_on;

// Whether a hook records this call: recording, and the program's own call.
#define AO_TR_ON()                                                                                 \
    (__builtin_expect(__atomic_load_n(&ao_tr_on, __ATOMIC_RELAXED), 0) && !ao_in_hook)

#define AO_TR_BUF          (1u << 20) // per-thread buffer
#define AO_TR_SAMPLE_EVERY 64         // a kernel's launches timed: one in this many

// --- life ---------------------------------------------------------------------------
// At load (the constructor), after the configuration: starts the clock and
// opens libz. Creates no file: the file is made at the first record.
void ao_tr_init(void);
// In a forked child: record nothing, write nothing of the parent's.
void ao_tr_forked(void);
// aoshim_step_end: read the timings that completed, hand this thread's
// records to the file and flush it (a crash then loses no step before).
void ao_tr_step(void);
// At exit (the destructor): every thread's records, the timings, the `end`
// record and gzip's trailer; the file closed. Later records are dropped.
void ao_tr_finish(void);

// --- records --------------------------------------------------------------------------
// api: the entry point's name as the program called it, without _ptsz. s:
// the stream as stream_of gives it (CU_STREAM_LEGACY / CU_STREAM_PER_THREAD
// for the default streams), NULL for a call that has none.
void ao_tr_alloc(const char *api, uint64_t size, CUstream s, uint64_t addr);
// Recorded before the real free (so no other thread can be handed the
// address and record it first).
void ao_tr_free(const char *api, uint64_t addr, CUstream s);

enum ao_tr_copy_kind { AO_TR_H2H, AO_TR_H2D, AO_TR_D2H, AO_TR_D2D, AO_TR_DEFAULT };
// A copy: dst and src the first bytes of each side (0: an array side),
// n the bytes of the destination's range, src_n the source's when it
// differs (pitched copies: the ranges covering every row), 0 otherwise.
void ao_tr_copy(int kind, uint64_t dst, uint64_t src, uint64_t n, uint64_t src_n, CUstream s,
                bool async, bool pitched);
// A set of n bytes from dst (pitched: the covering range); width the
// element's bytes (1, 2, 4), value the element.
void ao_tr_memset(uint64_t dst, uint64_t n, uint32_t value, unsigned width, CUstream s,
                  bool pitched);
// The runtime's enum cudaMemcpyKind as the trace's kind.
int ao_tr_copy_kind_rt(int kind);
// The bytes a pitched access covers from its first: depth slices, slice
// bytes apart, of height rows of width bytes, pitch apart. 0 when empty,
// UINT64_MAX when it overflows (the call will fail anyway).
static inline uint64_t ao_tr_span(uint64_t width, uint64_t height, uint64_t depth, uint64_t pitch,
                                  uint64_t slice)
{
    uint64_t a, b, n;
    if (!width || !height || !depth) return 0;
    if (__builtin_mul_overflow(depth - 1, slice, &a) ||
        __builtin_mul_overflow(height - 1, pitch, &b) || __builtin_add_overflow(a, b, &n) ||
        __builtin_add_overflow(n, width, &n))
        return UINT64_MAX;
    return n;
}

// A launch: begin before the hook's work (finds the kernel, decides whether
// this launch is timed), arm right before the real call (the timed launch's
// first event), end after it (the record, when the launch was accepted).
typedef struct ao_tr_launch_s {
    const void *layout; // const ao_layout_t *, NULL when the kernel is unknown
    int slot;           // the timing slot, -1 when not timed
    CUstream s;
} ao_tr_launch_t;
void ao_tr_launch_begin(ao_tr_launch_t *l, const void *fn, int kind, CUstream s);
void ao_tr_launch_arm(ao_tr_launch_t *l);
void ao_tr_launch_end(ao_tr_launch_t *l, bool ok, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned shm, void *const *args,
                      const void *packed);

// Streams, events, waits and host synchronisation, as the program asked.
enum ao_tr_sync_what { AO_TR_SYNC_DEVICE, AO_TR_SYNC_STREAM, AO_TR_SYNC_EVENT };
void ao_tr_stream_created(CUstream s, unsigned flags, int prio, bool have_prio);
void ao_tr_stream_destroyed(CUstream s);
void ao_tr_event_created(CUevent e, unsigned flags);
void ao_tr_event_destroyed(CUevent e);
void ao_tr_event_record(CUevent e, CUstream s);
void ao_tr_wait(CUstream s, CUevent e);
void ao_tr_sync(int what, CUstream s, CUevent e);
// Memory-pool calls: an attribute set (value as cuMemPoolSetAttribute takes
// it), a trim.
void ao_tr_pool_attr(CUmemoryPool pool, int attr, const void *value);
void ao_tr_pool_trim(CUmemoryPool pool, uint64_t keep);

// The control calls (control.c), with what they named: op is one of the
// names of docs/trace-format.md's `layer` record.
enum ao_tr_layer_op {
    AO_TR_BEGIN,
    AO_TR_END,
    AO_TR_BACKWARD_BEGIN,
    AO_TR_BACKWARD_END,
    AO_TR_STEP_END,
    AO_TR_MICROBATCH,
    AO_TR_SCHEDULE,
    AO_TR_OFFLOAD,
    AO_TR_RELEASE,
    AO_TR_RELOAD,
};
void ao_tr_layer(int op, int arg);
// aoshim_set_stream: the calling thread's stream, which its control calls
// refer to (their `layer` records name it; the replay sets it again).
void ao_tr_set_stream(CUstream s);
void ao_tr_keep(uint64_t addr);

#endif // AO_STEPTRACE_H
