// SPDX-License-Identifier: MIT
// Interposed CUDA runtime entry points.
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "hook.h"
#include "offload/engine.h"
#include "offload/scan.h"
#include "real.h"

// The real function, resolved on first use (the runtime may be loaded after
// the shim, by a Python extension); NULL if there is no runtime at all.
#define REAL(name)                                                                                 \
    (__atomic_load_n(&ao_real.name, __ATOMIC_ACQUIRE) ? ao_real.name                               \
                                                      : (ao_real_runtime_init(), ao_real.name))
#define NEED(name)                                                                                 \
    if (!REAL(name)) return cudaErrorSharedObjectSymbolNotFound

// A NULL stream means the legacy stream, or the per-thread one in _ptsz calls.
static inline CUstream stream_of(cudaStream_t s, bool ptsz)
{
    return s ? (CUstream)s : ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
}

// --- allocation ----------------------------------------------------------------------
AO_EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    NEED(cudaMalloc);
    if (ao_hook_track((CUdeviceptr *)p, n, NULL, false)) return cudaSuccess;
    cudaError_t r = AO_REAL_CALL(ao_real.cudaMalloc(p, n));
    if (r == cudaErrorMemoryAllocation && ao_hook_retry())
        r = AO_REAL_CALL(ao_real.cudaMalloc(p, n));
    if (r == cudaSuccess && p) ao_hook_passed((CUdeviceptr)*p, n);
    return r;
}

AO_EXPORT cudaError_t cudaFree(void *p)
{
    NEED(cudaFree);
    int own = ao_hook_free((CUdeviceptr)p, NULL, false);
    if (own) return own > 0 ? cudaSuccess : cudaErrorInvalidValue;
    return AO_REAL_CALL(ao_real.cudaFree(p));
}

#define MALLOC_ASYNC(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(void **p, size_t n, cudaStream_t s)                                 \
    {                                                                                              \
        NEED(name);                                                                                \
        if (ao_hook_track((CUdeviceptr *)p, n, stream_of(s, ptsz), true)) return cudaSuccess;      \
        cudaError_t r = AO_REAL_CALL(ao_real.name(p, n, s));                                       \
        if (r == cudaErrorMemoryAllocation && ao_hook_retry())                                     \
            r = AO_REAL_CALL(ao_real.name(p, n, s));                                               \
        if (r == cudaSuccess && p) ao_hook_passed((CUdeviceptr)*p, n);                             \
        return r;                                                                                  \
    }
MALLOC_ASYNC(cudaMallocAsync, false)
MALLOC_ASYNC(cudaMallocAsync_ptsz, true)

#define FREE_ASYNC(name, ptsz)                                                                     \
    AO_EXPORT cudaError_t name(void *p, cudaStream_t s)                                            \
    {                                                                                              \
        NEED(name);                                                                                \
        int own = ao_hook_free((CUdeviceptr)p, stream_of(s, ptsz), true);                          \
        if (own) return own > 0 ? cudaSuccess : cudaErrorInvalidValue;                             \
        return AO_REAL_CALL(ao_real.name(p, s));                                                   \
    }
FREE_ASYNC(cudaFreeAsync, false)
FREE_ASYNC(cudaFreeAsync_ptsz, true)

// --- launches: remember the stream, check what the kernel touches -----------------------------
// Nothing is checked before the engine has reserved its range (size 0):
// until then nothing can be offloaded.
// True when the check ran: the caller ends it (ao_scan_end) once the launch
// is enqueued.
static inline bool launch_check(const void *fn, int kind, void **args, CUstream s)
{
    if (ao_in_hook || ao_engine_off) return false;
    ao_engine_note_stream(s);
    if (!__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE) || !args) return false;
    const ao_layout_t *L = ao_layout(fn, kind);
    if (!L) return false;
    ao_scan_begin();
    ao_scan_launch(L, args, NULL, s);
    return true;
}

#define LAUNCH(name, ptsz)                                                                         \
    AO_EXPORT cudaError_t name(const void *f, dim3 g, dim3 b, void **args, size_t shm,             \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(launch_check(f, AO_FN_HOST, args, stream_of(s, ptsz)),                      \
                       ao_real.name(f, g, b, args, shm, s));                                       \
    }
LAUNCH(cudaLaunchKernel, false)
LAUNCH(cudaLaunchKernel_ptsz, true)

#define LAUNCH_EXC(name, ptsz)                                                                     \
    AO_EXPORT cudaError_t name(const cudaLaunchConfig_t *c, const void *f, void **args)            \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(c && launch_check(f, AO_FN_HOST, args, stream_of(c->stream, ptsz)),         \
                       ao_real.name(c, f, args));                                                  \
    }
LAUNCH_EXC(cudaLaunchKernelExC, false)
LAUNCH_EXC(cudaLaunchKernelExC_ptsz, true)

// CUDA 13's nvcc host stubs launch through these, with the kernel handle
// __cudaGetKernel gave them: every kernel of a framework built with CUDA 13.
#define LAUNCH_STUB(name, ptsz)                                                                    \
    AO_EXPORT cudaError_t name(cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shm,            \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(launch_check(k, AO_FN_KERNEL, args, stream_of(s, ptsz)),                    \
                       ao_real.name(k, g, b, args, shm, s));                                       \
    }
LAUNCH_STUB(__cudaLaunchKernel, false)
LAUNCH_STUB(__cudaLaunchKernel_ptsz, true)

// --- copies and sets: their device ranges ------------------------------------------------------
// Both ranges of a copy (src NULL for a set); true when the check ran (the
// caller ends it once the copy is enqueued).
static inline bool ranges_check(const void *d, const void *src, size_t n, CUstream s,
                                const char *what)
{
    if (ao_in_hook || ao_engine_off || !__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE))
        return false;
    ao_scan_begin();
    ao_scan_range((uint64_t)(uintptr_t)d, n, s, what);
    if (src) ao_scan_range((uint64_t)(uintptr_t)src, n, s, what);
    return true;
}

#define MEMCPY(name, ptsz)                                                                         \
    AO_EXPORT cudaError_t name(void *d, const void *src, size_t n, enum cudaMemcpyKind k)          \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(ranges_check(d, src, n, stream_of(NULL, ptsz), #name),                      \
                       ao_real.name(d, src, n, k));                                                \
    }
MEMCPY(cudaMemcpy, false)
MEMCPY(cudaMemcpy_ptds, true)

#define MEMCPY_ASYNC(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(void *d, const void *src, size_t n, enum cudaMemcpyKind k,          \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(ranges_check(d, src, n, stream_of(s, ptsz), #name),                         \
                       ao_real.name(d, src, n, k, s));                                             \
    }
MEMCPY_ASYNC(cudaMemcpyAsync, false)
MEMCPY_ASYNC(cudaMemcpyAsync_ptsz, true)

#define MEMSET(name, ptsz)                                                                         \
    AO_EXPORT cudaError_t name(void *d, int v, size_t n)                                           \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(ranges_check(d, NULL, n, stream_of(NULL, ptsz), #name),                     \
                       ao_real.name(d, v, n));                                                     \
    }
MEMSET(cudaMemset, false)
MEMSET(cudaMemset_ptds, true)

#define MEMSET_ASYNC(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(void *d, int v, size_t n, cudaStream_t s)                           \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(ranges_check(d, NULL, n, stream_of(s, ptsz), #name),                        \
                       ao_real.name(d, v, n, s));                                                  \
    }
MEMSET_ASYNC(cudaMemsetAsync, false)
MEMSET_ASYNC(cudaMemsetAsync_ptsz, true)

AO_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    NEED(cudaStreamDestroy);
    if (!ao_engine_off && s) ao_engine_forget_stream((CUstream)s);
    return AO_REAL_CALL(ao_real.cudaStreamDestroy(s));
}

// --- capture: while one runs, what captured work touches stays resident ----------------------
#define BEGIN_CAPTURE(name)                                                                        \
    AO_EXPORT cudaError_t name(cudaStream_t s, enum cudaStreamCaptureMode m)                       \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = AO_REAL_CALL(ao_real.name(s, m));                                          \
        if (r == cudaSuccess && !ao_in_hook) ao_capture_began();                                   \
        return r;                                                                                  \
    }
BEGIN_CAPTURE(cudaStreamBeginCapture)
BEGIN_CAPTURE(cudaStreamBeginCapture_ptsz)

#define END_CAPTURE(name)                                                                          \
    AO_EXPORT cudaError_t name(cudaStream_t s, cudaGraph_t *g)                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = AO_REAL_CALL(ao_real.name(s, g));                                          \
        if (!ao_in_hook) ao_capture_ended();                                                       \
        return r;                                                                                  \
    }
END_CAPTURE(cudaStreamEndCapture)
END_CAPTURE(cudaStreamEndCapture_ptsz)

// --- driver entry points handed out by the runtime ----------------------------------------
#define ENTRY_POINT(name, ptsz)                                                                    \
    AO_EXPORT cudaError_t name(const char *sym, void **fn, unsigned long long flags,               \
                               enum cudaDriverEntryPointQueryResult *st)                           \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = ao_real.name(sym, fn, flags, st);                                          \
        if (r == cudaSuccess && fn && *fn)                                                         \
            ao_hook_substitute(                                                                    \
                sym, fn, CUDART_VERSION,                                                           \
                flags == cudaEnableDefault && ptsz ? cudaEnablePerThreadDefaultStream : flags);    \
        return r;                                                                                  \
    }
ENTRY_POINT(cudaGetDriverEntryPoint, false)
ENTRY_POINT(cudaGetDriverEntryPoint_ptsz, true)

#define ENTRY_POINT_V(name, ptsz)                                                                  \
    AO_EXPORT cudaError_t name(const char *sym, void **fn, unsigned int ver,                       \
                               unsigned long long flags, enum cudaDriverEntryPointQueryResult *st) \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = ao_real.name(sym, fn, ver, flags, st);                                     \
        if (r == cudaSuccess && fn && *fn)                                                         \
            ao_hook_substitute(                                                                    \
                sym, fn, (int)ver,                                                                 \
                flags == cudaEnableDefault && ptsz ? cudaEnablePerThreadDefaultStream : flags);    \
        return r;                                                                                  \
    }
ENTRY_POINT_V(cudaGetDriverEntryPointByVersion, false)
ENTRY_POINT_V(cudaGetDriverEntryPointByVersion_ptsz, true)
