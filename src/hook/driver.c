// SPDX-License-Identifier: MIT
// Interposed CUDA driver entry points: the exported symbols (for programs
// that link libcuda) and the same wrappers handed out by cuGetProcAddress.
#include <string.h>

#include "hook.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "offload/scan.h"
#include "real.h"

// cuda.h renames cuGetProcAddress to its _v2; aoshim defines both ABIs.
#undef cuGetProcAddress

#define NEED(field)                                                                                \
    if (!ao_real_driver() || !ao_real.field) return CUDA_ERROR_NOT_INITIALIZED

static inline CUstream stream_of(CUstream s, bool ptsz)
{
    return s ? s : ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
}

// --- allocation ----------------------------------------------------------------------
AO_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    NEED(cuMemAlloc_v2);
    if (ao_hook_track(p, n, NULL, false)) return CUDA_SUCCESS;
    CUresult r = AO_REAL_CALL(ao_real.cuMemAlloc_v2(p, n));
    if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_hook_retry())
        r = AO_REAL_CALL(ao_real.cuMemAlloc_v2(p, n));
    if (r == CUDA_SUCCESS && p) ao_hook_passed(*p, n);
    return r;
}

AO_EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    NEED(cuMemFree_v2);
    int own = ao_hook_free(p, NULL, false);
    if (own) return own > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    return AO_REAL_CALL(ao_real.cuMemFree_v2(p));
}

#define MEM_ALLOC_ASYNC(name, ptsz)                                                                \
    AO_EXPORT CUresult name(CUdeviceptr *p, size_t n, CUstream s)                                  \
    {                                                                                              \
        NEED(name);                                                                                \
        if (ao_hook_track(p, n, stream_of(s, ptsz), true)) return CUDA_SUCCESS;                    \
        CUresult r = AO_REAL_CALL(ao_real.name(p, n, s));                                          \
        if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_hook_retry())                                      \
            r = AO_REAL_CALL(ao_real.name(p, n, s));                                               \
        if (r == CUDA_SUCCESS && p) ao_hook_passed(*p, n);                                         \
        return r;                                                                                  \
    }
MEM_ALLOC_ASYNC(cuMemAllocAsync, false)
MEM_ALLOC_ASYNC(cuMemAllocAsync_ptsz, true)

#define MEM_FREE_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT CUresult name(CUdeviceptr p, CUstream s)                                             \
    {                                                                                              \
        NEED(name);                                                                                \
        int own = ao_hook_free(p, stream_of(s, ptsz), true);                                       \
        if (own) return own > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;                         \
        return AO_REAL_CALL(ao_real.name(p, s));                                                   \
    }
MEM_FREE_ASYNC(cuMemFreeAsync, false)
MEM_FREE_ASYNC(cuMemFreeAsync_ptsz, true)

// --- launches -----------------------------------------------------------------------------
// Parameters come either as an array (one pointer per parameter) or packed
// in one buffer through `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER).
// True when the check ran: the caller ends it once the launch is enqueued.
static inline bool launch_check(CUfunction f, void **params, void **extra, CUstream s)
{
    if (ao_in_hook || ao_engine_off) return false;
    ao_engine_note_stream(s);
    if (!__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE)) return false;
    const void *packed = NULL;
    for (void **e = extra; !params && e && *e != CU_LAUNCH_PARAM_END; e += 2)
        if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) packed = e[1];
    if (!params && !packed) return false;
    const ao_layout_t *L = ao_layout(f, AO_FN_FUNC);
    if (!L) return false;
    ao_scan_begin();
    ao_scan_launch(L, params, params ? NULL : packed, s);
    return true;
}

#define LAUNCH(name, ptsz)                                                                         \
    AO_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,      \
                            unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,     \
                            void **extra)                                                          \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(launch_check(f, params, extra, stream_of(s, ptsz)),                         \
                       ao_real.name(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));            \
    }
LAUNCH(cuLaunchKernel, false)
LAUNCH(cuLaunchKernel_ptsz, true)

#define LAUNCH_EX(name, ptsz)                                                                      \
    AO_EXPORT CUresult name(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)    \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(c && launch_check(f, params, extra, stream_of(c->hStream, ptsz)),           \
                       ao_real.name(c, f, params, extra));                                         \
    }
LAUNCH_EX(cuLaunchKernelEx, false)
LAUNCH_EX(cuLaunchKernelEx_ptsz, true)

// --- copies and sets ------------------------------------------------------------------------
// Both ranges of a copy (src 0 for a set); true when the check ran.
static inline bool ranges_check(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s,
                                const char *what)
{
    if (ao_in_hook || ao_engine_off || !__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE))
        return false;
    ao_scan_begin();
    ao_scan_range(d, n, s, what);
    if (src) ao_scan_range(src, n, s, what);
    return true;
}

#define COPY(name, ptsz, dtype, stype, async)                                                      \
    AO_EXPORT CUresult name(dtype d, stype src, size_t n CU_ASYNC_##async)                         \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(ranges_check((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)src, n,     \
                                    stream_of(CU_STREAM_ARG_##async, ptsz), #name),                \
                       ao_real.name(d, src, n CU_PASS_##async));                                   \
    }
#define CU_ASYNC_0
#define CU_ASYNC_1      , CUstream st
#define CU_STREAM_ARG_0 NULL
#define CU_STREAM_ARG_1 st
#define CU_PASS_0
#define CU_PASS_1 , st
COPY(cuMemcpyHtoD_v2, false, CUdeviceptr, const void *, 0)
COPY(cuMemcpyHtoD_v2_ptds, true, CUdeviceptr, const void *, 0)
COPY(cuMemcpyDtoH_v2, false, void *, CUdeviceptr, 0)
COPY(cuMemcpyDtoH_v2_ptds, true, void *, CUdeviceptr, 0)
COPY(cuMemcpyDtoD_v2, false, CUdeviceptr, CUdeviceptr, 0)
COPY(cuMemcpyDtoD_v2_ptds, true, CUdeviceptr, CUdeviceptr, 0)
COPY(cuMemcpy, false, CUdeviceptr, CUdeviceptr, 0)
COPY(cuMemcpy_ptds, true, CUdeviceptr, CUdeviceptr, 0)
COPY(cuMemcpyHtoDAsync_v2, false, CUdeviceptr, const void *, 1)
COPY(cuMemcpyHtoDAsync_v2_ptsz, true, CUdeviceptr, const void *, 1)
COPY(cuMemcpyDtoHAsync_v2, false, void *, CUdeviceptr, 1)
COPY(cuMemcpyDtoHAsync_v2_ptsz, true, void *, CUdeviceptr, 1)
COPY(cuMemcpyDtoDAsync_v2, false, CUdeviceptr, CUdeviceptr, 1)
COPY(cuMemcpyDtoDAsync_v2_ptsz, true, CUdeviceptr, CUdeviceptr, 1)
COPY(cuMemcpyAsync, false, CUdeviceptr, CUdeviceptr, 1)
COPY(cuMemcpyAsync_ptsz, true, CUdeviceptr, CUdeviceptr, 1)

#define SET(name, ptsz, vtype, unit, async)                                                        \
    AO_EXPORT CUresult name(CUdeviceptr d, vtype v, size_t n CU_ASYNC_##async)                     \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(                                                                            \
            ranges_check(d, 0, n * (unit), stream_of(CU_STREAM_ARG_##async, ptsz), #name),         \
            ao_real.name(d, v, n CU_PASS_##async));                                                \
    }
SET(cuMemsetD8_v2, false, unsigned char, 1, 0)
SET(cuMemsetD8_v2_ptds, true, unsigned char, 1, 0)
SET(cuMemsetD32_v2, false, unsigned, 4, 0)
SET(cuMemsetD32_v2_ptds, true, unsigned, 4, 0)
SET(cuMemsetD8Async, false, unsigned char, 1, 1)
SET(cuMemsetD8Async_ptsz, true, unsigned char, 1, 1)
SET(cuMemsetD32Async, false, unsigned, 4, 1)
SET(cuMemsetD32Async_ptsz, true, unsigned, 4, 1)

// --- capture: while one runs, what captured work touches stays resident ----------------------
#define BEGIN_CAPTURE(name)                                                                        \
    AO_EXPORT CUresult name(CUstream s, CUstreamCaptureMode m)                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        CUresult r = AO_REAL_CALL(ao_real.name(s, m));                                             \
        if (r == CUDA_SUCCESS && !ao_in_hook) ao_capture_began();                                  \
        return r;                                                                                  \
    }
BEGIN_CAPTURE(cuStreamBeginCapture_v2)
BEGIN_CAPTURE(cuStreamBeginCapture_v2_ptsz)

#define END_CAPTURE(name)                                                                          \
    AO_EXPORT CUresult name(CUstream s, CUgraph *g)                                                \
    {                                                                                              \
        NEED(name);                                                                                \
        CUresult r = AO_REAL_CALL(ao_real.name(s, g));                                             \
        if (!ao_in_hook) ao_capture_ended();                                                       \
        return r;                                                                                  \
    }
END_CAPTURE(cuStreamEndCapture)
END_CAPTURE(cuStreamEndCapture_ptsz)

// --- cuGetProcAddress -------------------------------------------------------------------
// The real function answers first, with the caller's own version and flags;
// aoshim substitutes its wrapper only where the answer is exactly an entry
// point it wraps (HAMi-core's lesson: never by name prefix).
AO_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *st)
{
    NEED(cuGetProcAddress_v2);
    CUresult r = ao_real.cuGetProcAddress_v2(sym, pfn, ver, flags, st);
    if (r == CUDA_SUCCESS && pfn && *pfn) ao_hook_substitute(sym, pfn, ver, flags);
    return r;
}

AO_EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    NEED(cuGetProcAddress_v1);
    CUresult r = ao_real.cuGetProcAddress_v1(sym, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn) ao_hook_substitute(sym, pfn, ver, flags);
    return r;
}

typedef struct wrap_s {
    const char *name;
    int min_version; // the version at which the wrapped ABI is what the name returns
    void *legacy, *ptsz;
} wrap_t;

void ao_hook_substitute(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
#define W(name, ver, legacy, ptsz)                                                                 \
    {                                                                                              \
        name, ver, (void *)legacy, (void *)ptsz                                                    \
    }
    static const wrap_t wraps[] = {
        W("cuMemAlloc", 3020, cuMemAlloc_v2, cuMemAlloc_v2),
        W("cuMemFree", 3020, cuMemFree_v2, cuMemFree_v2),
        W("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
        W("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
        W("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
        W("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
        W("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
        W("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
        W("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
        W("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
        W("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
        W("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
        W("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
        W("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
        W("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
        W("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
        W("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
        W("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
        W("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
        W("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    };
#undef W
    if (!sym || strncmp(sym, "cu", 2) != 0) return;
    if (strcmp(sym, "cuGetProcAddress") == 0) {
        // The answer's ABI follows the version: 4 arguments before 12.0.
        if (ver >= 12000)
            *pfn = (void *)cuGetProcAddress_v2;
        else if (ver >= 11030)
            *pfn = (void *)cuGetProcAddress;
        return;
    }
    for (size_t i = 0; i < sizeof wraps / sizeof *wraps; i++) {
        if (strcmp(sym, wraps[i].name) != 0) continue;
        if (ver < wraps[i].min_version) return;
        *pfn =
            flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? wraps[i].ptsz : wraps[i].legacy;
        return;
    }
}
