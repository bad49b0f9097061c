// SPDX-License-Identifier: MIT
// Shared by the interposed entry points. Each hook is thin: decide whether
// aoshim tracks the call, otherwise call the real function and account.
#ifndef AO_HOOK_H
#define AO_HOOK_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

#include "cuda/guard.h"
#include "cuda/real.h"
#include "log.h"
#include "offload/fence.h"
#include "steptrace/steptrace.h"

#define AO_EXPORT __attribute__((visibility("default")))

// The real call, then the end of the launch check that preceded it (checked:
// whether one ran; see offload/scan.h).
// When the engine could not bring back memory the work touches, the work is
// not issued: the caller gets 2, which is CUDA_ERROR_OUT_OF_MEMORY and
// cudaErrorMemoryAllocation alike (ncclSystemError for NCCL), rather than a
// kernel reading unmapped memory.
#define CHECKED(checked, call)                                                                     \
    ({                                                                                             \
        bool c_ = (checked);                                                                       \
        __typeof__(call) r_ = (__typeof__(call))2;                                                 \
        if (!c_ || !ao_scan_failed) r_ = AO_REAL_CALL(call);                                       \
        if (c_) ao_scan_end();                                                                     \
        r_;                                                                                        \
    })

// True if aoshim made the allocation itself (*out set). stream: the stream
// of a stream-ordered call, else NULL.
bool ao_hook_track(CUdeviceptr *out, size_t n, CUstream stream, bool async);
// A real allocation failed for lack of memory: give pooled memory back;
// true if the caller should retry once.
bool ao_hook_retry(void);
// A real allocation succeeded (accounting).
void ao_hook_passed(CUdeviceptr p, size_t n, bool async);
// A free: 1 if aoshim owns p and released it, -1 if aoshim owns the range
// but p is no live buffer (the caller returns its invalid-value code), 0 if
// p is not aoshim's (the caller calls the real free).
int ao_hook_free(CUdeviceptr p, CUstream stream, bool async);

// Whether p is the start of a live allocation aoshim passed through.
bool ao_hook_passthrough(CUdeviceptr p);

// Substitute aoshim's wrapper for an entry point returned by the driver's
// cuGetProcAddress or the runtime's cudaGetDriverEntryPoint, only for the
// exact names and versions aoshim wraps. flags as given by the caller.
void ao_hook_substitute(const char *symbol, void **pfn, int version, cuuint64_t flags);
// The step trace's record-only wrapper (hook/record.c) for a name and
// version as cuGetProcAddress is asked, or for the driver's own symbol name
// (dlsym on libcuda's handle); NULL when there is none or the process does
// not record.
void *ao_hook_record_wrapper(const char *symbol, int version, bool ptsz);
void *ao_hook_record_wrapper_by_symbol(const char *symbol);

#endif // AO_HOOK_H
