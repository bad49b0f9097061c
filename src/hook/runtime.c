// SPDX-License-Identifier: MIT
// Interposed CUDA runtime entry points.
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "hook.h"
#include "offload/engine.h"
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
    if (r == cudaErrorMemoryAllocation && ao_hook_retry()) r = AO_REAL_CALL(ao_real.cudaMalloc(p, n));
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

// --- launches: remember the stream each thread works on ---------------------------------
#define LAUNCH(name, ptsz)                                                                         \
    AO_EXPORT cudaError_t name(const void *f, dim3 g, dim3 b, void **args, size_t shm,             \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        if (!ao_in_hook && !ao_engine_off) ao_engine_note_stream(stream_of(s, ptsz));              \
        return ao_real.name(f, g, b, args, shm, s);                                                \
    }
LAUNCH(cudaLaunchKernel, false)
LAUNCH(cudaLaunchKernel_ptsz, true)

AO_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    NEED(cudaStreamDestroy);
    if (!ao_engine_off && s) ao_engine_forget_stream((CUstream)s);
    return ao_real.cudaStreamDestroy(s);
}

// --- driver entry points handed out by the runtime ----------------------------------------
#define ENTRY_POINT(name, ptsz)                                                                    \
    AO_EXPORT cudaError_t name(const char *sym, void **fn, unsigned long long flags,               \
                               enum cudaDriverEntryPointQueryResult *st)                           \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = ao_real.name(sym, fn, flags, st);                                          \
        if (r == cudaSuccess && fn && *fn)                                                         \
            ao_hook_substitute(sym, fn, CUDART_VERSION,                                            \
                               flags == cudaEnableDefault && ptsz ? cudaEnablePerThreadDefaultStream \
                                                                  : flags);                        \
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
            ao_hook_substitute(sym, fn, (int)ver,                                                  \
                               flags == cudaEnableDefault && ptsz ? cudaEnablePerThreadDefaultStream \
                                                                  : flags);                        \
        return r;                                                                                  \
    }
ENTRY_POINT_V(cudaGetDriverEntryPointByVersion, false)
ENTRY_POINT_V(cudaGetDriverEntryPointByVersion_ptsz, true)
