// SPDX-License-Identifier: MIT
// Interposed CUDA driver entry points: the exported symbols (for programs
// that link libcuda) and the same wrappers handed out by cuGetProcAddress.
#include <string.h>

#include "hook.h"
#include "offload/engine.h"
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
    if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_hook_retry()) r = AO_REAL_CALL(ao_real.cuMemAlloc_v2(p, n));
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
        if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_hook_retry()) r = AO_REAL_CALL(ao_real.name(p, n, s)); \
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
    int min_version;  // the version at which the wrapped ABI is what the name returns
    void *legacy, *ptsz;
} wrap_t;

void ao_hook_substitute(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    static const wrap_t wraps[] = {
        {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2, (void *)cuMemAlloc_v2},
        {"cuMemFree", 3020, (void *)cuMemFree_v2, (void *)cuMemFree_v2},
        {"cuMemAllocAsync", 11020, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
        {"cuMemFreeAsync", 11020, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz},
    };
    if (!sym || strncmp(sym, "cu", 2) != 0) return;
    if (strcmp(sym, "cuGetProcAddress") == 0) {
        // The answer's ABI follows the version: 4 arguments before 12.0.
        if (ver >= 12000) *pfn = (void *)cuGetProcAddress_v2;
        else if (ver >= 11030) *pfn = (void *)cuGetProcAddress;
        return;
    }
    for (size_t i = 0; i < sizeof wraps / sizeof *wraps; i++) {
        if (strcmp(sym, wraps[i].name) != 0) continue;
        if (ver < wraps[i].min_version) return;
        *pfn = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? wraps[i].ptsz : wraps[i].legacy;
        return;
    }
}
