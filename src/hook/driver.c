// SPDX-License-Identifier: MIT
// Interposed CUDA driver entry points: the exported symbols (for programs
// that link libcuda) and the same wrappers handed out by cuGetProcAddress.
#include <string.h>

#include "hook.h"
#include "mem/vmm.h"
#include "offload/engine.h"
#include "offload/scan.h"
#include "cuda/real.h"

// cuda.h renames cuGetProcAddress to its _v2; aoshim defines both ABIs.
#undef cuGetProcAddress

#define NEED(field)                                                                                \
    if (!ao_real_driver() || !ao_real.field) return CUDA_ERROR_NOT_INITIALIZED

static inline CUstream stream_of(CUstream s, bool ptsz)
{
    return s ? s : ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
}

// The step trace's (AOSHIM_RECORD): the address the program got.
static inline void rec_alloc(const char *api, size_t n, CUstream s, const CUdeviceptr *p)
{
    if (AO_TR_ON()) ao_tr_alloc(api, n, s, *p);
}

// --- allocation ----------------------------------------------------------------------
AO_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    NEED(cuMemAlloc_v2);
    if (ao_hook_track(p, n, NULL, false)) {
        rec_alloc("cuMemAlloc", n, NULL, p);
        return CUDA_SUCCESS;
    }
    CUresult r = AO_REAL_CALL(ao_real.cuMemAlloc_v2(p, n));
    if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_hook_retry())
        r = AO_REAL_CALL(ao_real.cuMemAlloc_v2(p, n));
    if (r == CUDA_SUCCESS && p) {
        ao_hook_passed(*p, n, false);
        rec_alloc("cuMemAlloc", n, NULL, p);
    }
    return r;
}

AO_EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    NEED(cuMemFree_v2);
    if (p && AO_TR_ON()) ao_tr_free("cuMemFree", p, NULL);
    int own = ao_hook_free(p, NULL, false);
    if (own) return own > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    return AO_REAL_CALL(ao_real.cuMemFree_v2(p));
}

#define MEM_ALLOC_ASYNC(name, ptsz)                                                                \
    AO_EXPORT CUresult name(CUdeviceptr *p, size_t n, CUstream s)                                  \
    {                                                                                              \
        NEED(name);                                                                                \
        if (ao_hook_track(p, n, stream_of(s, ptsz), true)) {                                       \
            rec_alloc("cuMemAllocAsync", n, stream_of(s, ptsz), p);                                \
            return CUDA_SUCCESS;                                                                   \
        }                                                                                          \
        CUresult r = AO_REAL_CALL(ao_real.name(p, n, s));                                          \
        if (r == CUDA_ERROR_OUT_OF_MEMORY && ao_hook_retry())                                      \
            r = AO_REAL_CALL(ao_real.name(p, n, s));                                               \
        if (r == CUDA_SUCCESS && p) {                                                              \
            ao_hook_passed(*p, n, true);                                                           \
            rec_alloc("cuMemAllocAsync", n, stream_of(s, ptsz), p);                                \
        }                                                                                          \
        return r;                                                                                  \
    }
MEM_ALLOC_ASYNC(cuMemAllocAsync, false)
MEM_ALLOC_ASYNC(cuMemAllocAsync_ptsz, true)

#define MEM_FREE_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT CUresult name(CUdeviceptr p, CUstream s)                                             \
    {                                                                                              \
        NEED(name);                                                                                \
        if (p && AO_TR_ON()) ao_tr_free("cuMemFreeAsync", p, stream_of(s, ptsz));                  \
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
static inline const void *packed_of(void **params, void **extra)
{
    const void *packed = NULL;
    for (void **e = extra; !params && e && *e != CU_LAUNCH_PARAM_END; e += 2)
        if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) packed = e[1];
    return packed;
}

static inline bool launch_check(CUfunction f, void **params, void **extra, CUstream s)
{
    if (ao_in_hook || ao_engine_off) return false;
    ao_engine_note_stream(s);
    if (!__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE)) return false;
    const void *packed = packed_of(params, extra);
    if (!params && !packed) return false;
    const ao_layout_t *L = ao_layout(f, AO_FN_FUNC);
    if (!L) return false;
    ao_scan_begin();
    ao_scan_launch(L, params, params ? NULL : packed, s);
    return true;
}

// With AOSHIM_RECORD: the launch around the hook's own work (steptrace.h);
// a timed launch's first event goes right before the real call.
#define RECORDED(f, cs, gx, gy, gz, bx, by, bz, shm, params, extra, checked, call)                 \
    ({                                                                                             \
        ao_tr_launch_t tl_;                                                                        \
        ao_tr_launch_begin(&tl_, (f), AO_FN_FUNC, (cs));                                           \
        CUresult rr_ = CHECKED(checked, (ao_tr_launch_arm(&tl_), call));                           \
        ao_tr_launch_end(&tl_, rr_ == CUDA_SUCCESS, gx, gy, gz, bx, by, bz, shm, (params),         \
                         packed_of((params), (extra)));                                            \
        rr_;                                                                                       \
    })

#define LAUNCH(name, ptsz)                                                                         \
    AO_EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,      \
                            unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,     \
                            void **extra)                                                          \
    {                                                                                              \
        NEED(name);                                                                                \
        if (AO_TR_ON())                                                                            \
            return RECORDED(f, stream_of(s, ptsz), gx, gy, gz, bx, by, bz, shm, params, extra,     \
                            launch_check(f, params, extra, stream_of(s, ptsz)),                    \
                            ao_real.name(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));       \
        return CHECKED(launch_check(f, params, extra, stream_of(s, ptsz)),                         \
                       ao_real.name(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));            \
    }
LAUNCH(cuLaunchKernel, false)
LAUNCH(cuLaunchKernel_ptsz, true)

#define LAUNCH_EX(name, ptsz)                                                                      \
    AO_EXPORT CUresult name(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)    \
    {                                                                                              \
        NEED(name);                                                                                \
        if (c && AO_TR_ON())                                                                       \
            return RECORDED(f, stream_of(c->hStream, ptsz), c->gridDimX, c->gridDimY, c->gridDimZ, \
                            c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes, params,   \
                            extra, launch_check(f, params, extra, stream_of(c->hStream, ptsz)),    \
                            ao_real.name(c, f, params, extra));                                    \
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

#define COPY(name, ptsz, dtype, stype, async, kind)                                                \
    AO_EXPORT CUresult name(dtype d, stype src, size_t n CU_ASYNC_##async)                         \
    {                                                                                              \
        NEED(name);                                                                                \
        CUresult r = CHECKED(ranges_check((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)src,  \
                                          n, stream_of(CU_STREAM_ARG_##async, ptsz), #name),       \
                             ao_real.name(d, src, n CU_PASS_##async));                             \
        if (r == CUDA_SUCCESS && AO_TR_ON())                                                       \
            ao_tr_copy(kind, (uintptr_t)d, (uintptr_t)src, n, 0,                                   \
                       stream_of(CU_STREAM_ARG_##async, ptsz), async, false);                      \
        return r;                                                                                  \
    }
#define CU_ASYNC_0
#define CU_ASYNC_1      , CUstream st
#define CU_STREAM_ARG_0 NULL
#define CU_STREAM_ARG_1 st
#define CU_PASS_0
#define CU_PASS_1 , st
COPY(cuMemcpyHtoD_v2, false, CUdeviceptr, const void *, 0, AO_TR_H2D)
COPY(cuMemcpyHtoD_v2_ptds, true, CUdeviceptr, const void *, 0, AO_TR_H2D)
COPY(cuMemcpyDtoH_v2, false, void *, CUdeviceptr, 0, AO_TR_D2H)
COPY(cuMemcpyDtoH_v2_ptds, true, void *, CUdeviceptr, 0, AO_TR_D2H)
COPY(cuMemcpyDtoD_v2, false, CUdeviceptr, CUdeviceptr, 0, AO_TR_D2D)
COPY(cuMemcpyDtoD_v2_ptds, true, CUdeviceptr, CUdeviceptr, 0, AO_TR_D2D)
COPY(cuMemcpy, false, CUdeviceptr, CUdeviceptr, 0, AO_TR_DEFAULT)
COPY(cuMemcpy_ptds, true, CUdeviceptr, CUdeviceptr, 0, AO_TR_DEFAULT)
COPY(cuMemcpyHtoDAsync_v2, false, CUdeviceptr, const void *, 1, AO_TR_H2D)
COPY(cuMemcpyHtoDAsync_v2_ptsz, true, CUdeviceptr, const void *, 1, AO_TR_H2D)
COPY(cuMemcpyDtoHAsync_v2, false, void *, CUdeviceptr, 1, AO_TR_D2H)
COPY(cuMemcpyDtoHAsync_v2_ptsz, true, void *, CUdeviceptr, 1, AO_TR_D2H)
COPY(cuMemcpyDtoDAsync_v2, false, CUdeviceptr, CUdeviceptr, 1, AO_TR_D2D)
COPY(cuMemcpyDtoDAsync_v2_ptsz, true, CUdeviceptr, CUdeviceptr, 1, AO_TR_D2D)
COPY(cuMemcpyAsync, false, CUdeviceptr, CUdeviceptr, 1, AO_TR_DEFAULT)
COPY(cuMemcpyAsync_ptsz, true, CUdeviceptr, CUdeviceptr, 1, AO_TR_DEFAULT)

#define SET(name, ptsz, vtype, unit, async)                                                        \
    AO_EXPORT CUresult name(CUdeviceptr d, vtype v, size_t n CU_ASYNC_##async)                     \
    {                                                                                              \
        NEED(name);                                                                                \
        CUresult r =                                                                               \
            CHECKED(ranges_check(d, 0, n * (unit), stream_of(CU_STREAM_ARG_##async, ptsz), #name), \
                    ao_real.name(d, v, n CU_PASS_##async));                                        \
        if (r == CUDA_SUCCESS && AO_TR_ON())                                                       \
            ao_tr_memset(d, (unit) * (uint64_t)n, v, unit, stream_of(CU_STREAM_ARG_##async, ptsz), \
                         false);                                                                   \
        return r;                                                                                  \
    }
SET(cuMemsetD8_v2, false, unsigned char, 1, 0)
SET(cuMemsetD8_v2_ptds, true, unsigned char, 1, 0)
SET(cuMemsetD32_v2, false, unsigned, 4, 0)
SET(cuMemsetD32_v2_ptds, true, unsigned, 4, 0)
SET(cuMemsetD8Async, false, unsigned char, 1, 1)
SET(cuMemsetD8Async_ptsz, true, unsigned char, 1, 1)
SET(cuMemsetD32Async, false, unsigned, 4, 1)
SET(cuMemsetD32Async_ptsz, true, unsigned, 4, 1)
SET(cuMemsetD16_v2, false, unsigned short, 2, 0)
SET(cuMemsetD16_v2_ptds, true, unsigned short, 2, 0)
SET(cuMemsetD16Async, false, unsigned short, 2, 1)
SET(cuMemsetD16Async_ptsz, true, unsigned short, 2, 1)

// Peer copies: both contexts are the caller's business; the ranges are ours.
#define COPY_PEER(name, ptsz, async)                                                               \
    AO_EXPORT CUresult name(CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc,            \
                            size_t n CU_ASYNC_##async)                                             \
    {                                                                                              \
        NEED(name);                                                                                \
        CUresult r =                                                                               \
            CHECKED(ranges_check(d, src, n, stream_of(CU_STREAM_ARG_##async, ptsz), #name),        \
                    ao_real.name(d, dc, src, sc, n CU_PASS_##async));                              \
        if (r == CUDA_SUCCESS && AO_TR_ON())                                                       \
            ao_tr_copy(AO_TR_D2D, d, src, n, 0, stream_of(CU_STREAM_ARG_##async, ptsz), async,     \
                       false);                                                                     \
        return r;                                                                                  \
    }
COPY_PEER(cuMemcpyPeer, false, 0)
COPY_PEER(cuMemcpyPeer_ptds, true, 0)
COPY_PEER(cuMemcpyPeerAsync, false, 1)
COPY_PEER(cuMemcpyPeerAsync_ptsz, true, 1)

// --- pitched copies and sets ------------------------------------------------------------------
// The bytes a 2D/3D call touches: rows of width bytes, pitch apart, slices
// `height of the allocation` rows apart (offload/scan.h, ao_scan_pitched:
// exact to the granule). An array side is never aoshim's memory.
static inline bool check_begin(void)
{
    if (ao_in_hook || ao_engine_off || !__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE))
        return false;
    ao_scan_begin();
    return true;
}

// One side of a CUDA_MEMCPY2D/3D: its base by memory type (cuda.h: host
// pointers for HOST, device pointers for DEVICE and UNIFIED), then the
// start the header's formula gives.
static inline void scan_side(CUmemorytype t, const void *host, CUdeviceptr dev, uint64_t x,
                             uint64_t y, uint64_t z, uint64_t pitch, uint64_t rows, uint64_t w,
                             uint64_t h, uint64_t d, CUstream s, const char *what)
{
    uint64_t base = t == CU_MEMORYTYPE_HOST                                   ? (uintptr_t)host
                    : t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED ? dev
                                                                              : 0;
    if (!base) return;
    uint64_t slice, zo, yo, start;
    if (__builtin_mul_overflow(rows, pitch, &slice) || __builtin_mul_overflow(z, slice, &zo) ||
        __builtin_mul_overflow(y, pitch, &yo) || __builtin_add_overflow(base, zo, &start) ||
        __builtin_add_overflow(start, yo, &start) || __builtin_add_overflow(start, x, &start)) {
        ao_scan_span(base, 0, true, s, what); // nonsense geometry: everything from the base on
        return;
    }
    ao_scan_pitched(start, w, h, d, pitch, slice, s, what);
}

static inline bool copy2d_check(const CUDA_MEMCPY2D *p, CUstream s, const char *what)
{
    if (!p || !check_begin()) return false;
    scan_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, 0, p->dstPitch,
              0, p->WidthInBytes, p->Height, 1, s, what);
    scan_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, 0, p->srcPitch,
              0, p->WidthInBytes, p->Height, 1, s, what);
    return true;
}

static inline bool copy3d_check(const CUDA_MEMCPY3D *p, CUstream s, const char *what)
{
    if (!p || !check_begin()) return false;
    scan_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
              p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth, s, what);
    scan_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
              p->srcPitch, p->srcHeight, p->WidthInBytes, p->Height, p->Depth, s, what);
    return true;
}

// The step trace's pitched copies: each side's first byte (0 for an array)
// and the range covering its rows; the kind from the two memory types.
static uint64_t rec_side(CUmemorytype t, const void *host, CUdeviceptr dev, uint64_t x, uint64_t y,
                         uint64_t z, uint64_t pitch, uint64_t rows, uint64_t w, uint64_t h,
                         uint64_t d, uint64_t *n, char *where)
{
    uint64_t slice = rows * pitch;
    *n = ao_tr_span(w, h, d, pitch, slice);
    *where = t == CU_MEMORYTYPE_HOST ? 'h' : t == CU_MEMORYTYPE_UNIFIED ? 'u' : 'd';
    uint64_t base = t == CU_MEMORYTYPE_HOST                                   ? (uintptr_t)host
                    : t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED ? dev
                                                                              : 0;
    return base ? base + z * slice + y * pitch + x : 0;
}

static int rec_kind(char dst, char src)
{
    if (dst == 'u' || src == 'u') return AO_TR_DEFAULT;
    return dst == 'h' ? (src == 'h' ? AO_TR_H2H : AO_TR_D2H) : (src == 'h' ? AO_TR_H2D : AO_TR_D2D);
}

static void rec_copy2D(const CUDA_MEMCPY2D *p, CUstream s, bool async)
{
    uint64_t dn, sn;
    char dw, sw;
    uint64_t d = rec_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, 0,
                          p->dstPitch, 0, p->WidthInBytes, p->Height, 1, &dn, &dw);
    uint64_t src = rec_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, 0,
                            p->srcPitch, 0, p->WidthInBytes, p->Height, 1, &sn, &sw);
    ao_tr_copy(rec_kind(dw, sw), d, src, dn, sn, s, async, true);
}

static void rec_copy3D(const CUDA_MEMCPY3D *p, CUstream s, bool async)
{
    uint64_t dn, sn;
    char dw, sw;
    uint64_t d =
        rec_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
                 p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth, &dn, &dw);
    uint64_t src =
        rec_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
                 p->srcPitch, p->srcHeight, p->WidthInBytes, p->Height, p->Depth, &sn, &sw);
    ao_tr_copy(rec_kind(dw, sw), d, src, dn, sn, s, async, true);
}

#define COPY_PITCHED(name, ptsz, dims, async)                                                      \
    AO_EXPORT CUresult name(const CUDA_MEMCPY##dims *p CU_ASYNC_##async)                           \
    {                                                                                              \
        NEED(name);                                                                                \
        CUresult r = CHECKED(copy##dims##_check(p, stream_of(CU_STREAM_ARG_##async, ptsz), #name), \
                             ao_real.name(p CU_PASS_##async));                                     \
        if (r == CUDA_SUCCESS && p && AO_TR_ON())                                                  \
            rec_copy##dims(p, stream_of(CU_STREAM_ARG_##async, ptsz), async);                      \
        return r;                                                                                  \
    }
#define copy2D_check copy2d_check
#define copy3D_check copy3d_check
COPY_PITCHED(cuMemcpy2D_v2, false, 2D, 0)
COPY_PITCHED(cuMemcpy2D_v2_ptds, true, 2D, 0)
COPY_PITCHED(cuMemcpy2DUnaligned_v2, false, 2D, 0)
COPY_PITCHED(cuMemcpy2DUnaligned_v2_ptds, true, 2D, 0)
COPY_PITCHED(cuMemcpy2DAsync_v2, false, 2D, 1)
COPY_PITCHED(cuMemcpy2DAsync_v2_ptsz, true, 2D, 1)
COPY_PITCHED(cuMemcpy3D_v2, false, 3D, 0)
COPY_PITCHED(cuMemcpy3D_v2_ptds, true, 3D, 0)
COPY_PITCHED(cuMemcpy3DAsync_v2, false, 3D, 1)
COPY_PITCHED(cuMemcpy3DAsync_v2_ptsz, true, 3D, 1)

#define SET2D(name, ptsz, vtype, unit, async)                                                      \
    AO_EXPORT CUresult name(CUdeviceptr d, size_t pitch, vtype v, size_t w,                        \
                            size_t h CU_ASYNC_##async)                                             \
    {                                                                                              \
        NEED(name);                                                                                \
        bool checked_ = check_begin();                                                             \
        if (checked_)                                                                              \
            ao_scan_pitched(d, w > UINT64_MAX / (unit) ? UINT64_MAX : (uint64_t)w * (unit), h, 1,  \
                            pitch, 0, stream_of(CU_STREAM_ARG_##async, ptsz), #name);              \
        CUresult r = CHECKED(checked_, ao_real.name(d, pitch, v, w, h CU_PASS_##async));           \
        if (r == CUDA_SUCCESS && AO_TR_ON())                                                       \
            ao_tr_memset(d, ao_tr_span((unit) * (uint64_t)w, h, 1, pitch, 0), v, unit,             \
                         stream_of(CU_STREAM_ARG_##async, ptsz), true);                            \
        return r;                                                                                  \
    }
SET2D(cuMemsetD2D8_v2, false, unsigned char, 1, 0)
SET2D(cuMemsetD2D8_v2_ptds, true, unsigned char, 1, 0)
SET2D(cuMemsetD2D8Async, false, unsigned char, 1, 1)
SET2D(cuMemsetD2D8Async_ptsz, true, unsigned char, 1, 1)
SET2D(cuMemsetD2D16_v2, false, unsigned short, 2, 0)
SET2D(cuMemsetD2D16_v2_ptds, true, unsigned short, 2, 0)
SET2D(cuMemsetD2D16Async, false, unsigned short, 2, 1)
SET2D(cuMemsetD2D16Async_ptsz, true, unsigned short, 2, 1)
SET2D(cuMemsetD2D32_v2, false, unsigned, 4, 0)
SET2D(cuMemsetD2D32_v2_ptds, true, unsigned, 4, 0)
SET2D(cuMemsetD2D32Async, false, unsigned, 4, 1)
SET2D(cuMemsetD2D32Async_ptsz, true, unsigned, 4, 1)

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

// The capture's id is asked for before it ends; the graph it produced, if
// any, then holds the pins of what the captured work touched (engine.h).
#define END_CAPTURE(name, ptsz)                                                                    \
    AO_EXPORT CUresult name(CUstream s, CUgraph *g)                                                \
    {                                                                                              \
        NEED(name);                                                                                \
        bool outer = !ao_in_hook;                                                                  \
        uint64_t id = outer ? ao_engine_capture_id(stream_of(s, ptsz)) : 0;                        \
        CUresult r = AO_REAL_CALL(ao_real.name(s, g));                                             \
        if (outer &&                                                                               \
            ao_engine_capture_end(id, r == CUDA_SUCCESS && g ? *g : NULL, stream_of(s, ptsz)))     \
            ao_capture_ended();                                                                    \
        return r;                                                                                  \
    }
END_CAPTURE(cuStreamEndCapture, false)
END_CAPTURE(cuStreamEndCapture_ptsz, true)

// --- graphs: who can still replay captured work -------------------------------------------
// Each instantiation holds the pins of its graph until it is destroyed.
#define INSTANTIATE(name, params, args)                                                            \
    AO_EXPORT CUresult name params                                                                 \
    {                                                                                              \
        NEED(name);                                                                                \
        bool outer = !ao_in_hook;                                                                  \
        CUresult r = AO_REAL_CALL(ao_real.name args);                                              \
        if (r == CUDA_SUCCESS && outer && x) ao_engine_graph_instantiated(g, *x);                  \
        return r;                                                                                  \
    }
INSTANTIATE(cuGraphInstantiateWithFlags, (CUgraphExec * x, CUgraph g, unsigned long long fl),
            (x, g, fl))
INSTANTIATE(cuGraphInstantiateWithParams,
            (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p), (x, g, p))
INSTANTIATE(cuGraphInstantiateWithParams_ptsz,
            (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p), (x, g, p))
// The exported CUDA 10.0 and 11.0 ABIs, which programs built with older
// headers still call: an instantiation aoshim missed would let the pins go
// while it can still replay.
#undef cuGraphInstantiate
INSTANTIATE(cuGraphInstantiate_v2,
            (CUgraphExec * x, CUgraph g, CUgraphNode *err, char *log, size_t n),
            (x, g, err, log, n))
AO_EXPORT CUresult cuGraphInstantiate(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log,
                                      size_t n)
{
    NEED(cuGraphInstantiate_v1);
    bool outer = !ao_in_hook;
    CUresult r = AO_REAL_CALL(ao_real.cuGraphInstantiate_v1(x, g, err, log, n));
    if (r == CUDA_SUCCESS && outer && x) ao_engine_graph_instantiated(g, *x);
    return r;
}

AO_EXPORT CUresult cuGraphExecDestroy(CUgraphExec x)
{
    NEED(cuGraphExecDestroy);
    bool outer = !ao_in_hook;
    CUresult r = AO_REAL_CALL(ao_real.cuGraphExecDestroy(x));
    if (r == CUDA_SUCCESS && outer) ao_engine_graph_exec_destroyed(x);
    return r;
}

AO_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
    NEED(cuGraphDestroy);
    bool outer = !ao_in_hook;
    CUresult r = AO_REAL_CALL(ao_real.cuGraphDestroy(g));
    if (r == CUDA_SUCCESS && outer) ao_engine_graph_destroyed(g);
    return r;
}

// A clone replays the same work: it holds the same pins.
AO_EXPORT CUresult cuGraphClone(CUgraph *clone, CUgraph g)
{
    NEED(cuGraphClone);
    bool outer = !ao_in_hook;
    CUresult r = AO_REAL_CALL(ao_real.cuGraphClone(clone, g));
    if (r == CUDA_SUCCESS && outer && clone) ao_engine_graph_cloned(g, *clone);
    return r;
}

// A launch's stream is one aoshim must know: once the graph is gone, its
// chunks' release waits for a point on every known stream, which must come
// after the launches still in flight.
#define GRAPH_LAUNCH(name, ptsz)                                                                   \
    AO_EXPORT CUresult name(CUgraphExec x, CUstream s)                                             \
    {                                                                                              \
        NEED(name);                                                                                \
        if (!ao_in_hook && !ao_engine_off) ao_engine_note_stream(stream_of(s, ptsz));              \
        return AO_REAL_CALL(ao_real.name(x, s));                                                   \
    }
GRAPH_LAUNCH(cuGraphLaunch, false)
GRAPH_LAUNCH(cuGraphLaunch_ptsz, true)

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
        W("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
        W("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
        W("cuMemsetD2D8", 3020, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds),
        W("cuMemsetD2D16", 3020, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds),
        W("cuMemsetD2D32", 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds),
        W("cuMemsetD2D8Async", 3020, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz),
        W("cuMemsetD2D16Async", 3020, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz),
        W("cuMemsetD2D32Async", 3020, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz),
        W("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
        W("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds),
        W("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
        W("cuMemcpy3D", 3020, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds),
        W("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz),
        W("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
        W("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
        W("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
        W("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
        // Newest ABI first: an older version asks for the next entry.
        W("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags),
        W("cuGraphInstantiate", 11000, cuGraphInstantiate_v2, cuGraphInstantiate_v2),
        W("cuGraphInstantiate", 10000, cuGraphInstantiate, cuGraphInstantiate),
        W("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags,
          cuGraphInstantiateWithFlags),
        W("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams,
          cuGraphInstantiateWithParams_ptsz),
        W("cuGraphExecDestroy", 10000, cuGraphExecDestroy, cuGraphExecDestroy),
        W("cuGraphDestroy", 10000, cuGraphDestroy, cuGraphDestroy),
        W("cuGraphClone", 10000, cuGraphClone, cuGraphClone),
        W("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
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
    bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    for (size_t i = 0; i < sizeof wraps / sizeof *wraps; i++) {
        if (strcmp(sym, wraps[i].name) != 0) continue;
        if (ver < wraps[i].min_version) continue;
        *pfn = ptsz ? wraps[i].ptsz : wraps[i].legacy;
        return;
    }
    void *rec = ao_hook_record_wrapper(sym, ver, ptsz);
    if (rec) *pfn = rec;
}
