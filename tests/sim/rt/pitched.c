// SPDX-License-Identifier: MIT
// The simulated runtime's pitched and peer copies and sets: cudaMemcpy2D,
// cudaMemcpy3D, cudaMemcpyPeer, cudaMemset2D, cudaMemset3D, their Async
// forms and per-thread twins. Each decodes its arguments into the driver's
// (cuMemcpy2D, cuMemcpy3D, cuMemcpyPeer, cuMemsetD2D8) and calls it through
// rt_drv, as the real runtime does.
//
// Not provided: the array forms (cudaMemcpy2DToArray, cudaMemcpy2DFromArray,
// cudaMemcpy2DArrayToArray...) and cudaMemcpy3DPeer: the simulator has no
// CUDA arrays. A cudaMemcpy3DParms naming an array is cudaErrorInvalidValue.
#include <stdint.h>

#include "rt.h"

#define RT_ENTER()                                                                                 \
    do {                                                                                           \
        cudaError_t enter_err_ = rt_enter();                                                       \
        if (enter_err_ != cudaSuccess) return rt_ret(enter_err_);                                  \
    } while (0)
#define RT_PICK(ptds, legacy_fn, ptds_fn) ((ptds) ? rt_drv.ptds_fn : rt_drv.legacy_fn)

// The pitch cudaDeviceGetAttribute(cudaDevAttrMaxPitch) reports.
#define MAX_PITCH 2147483647ull

// The memory types a runtime copy kind names for the driver (unified
// addressing: cudaMemcpyDefault lets the pointers say). false: no such kind.
static bool types_of(enum cudaMemcpyKind k, CUmemorytype *src, CUmemorytype *dst)
{
    switch (k) {
    case cudaMemcpyHostToHost:
        *src = *dst = CU_MEMORYTYPE_HOST;
        return true;
    case cudaMemcpyHostToDevice:
        *src = CU_MEMORYTYPE_HOST, *dst = CU_MEMORYTYPE_DEVICE;
        return true;
    case cudaMemcpyDeviceToHost:
        *src = CU_MEMORYTYPE_DEVICE, *dst = CU_MEMORYTYPE_HOST;
        return true;
    case cudaMemcpyDeviceToDevice:
        *src = *dst = CU_MEMORYTYPE_DEVICE;
        return true;
    case cudaMemcpyDefault:
        *src = *dst = CU_MEMORYTYPE_UNIFIED;
        return true;
    default:
        return false;
    }
}

// --- cudaMemcpy2D ----------------------------------------------------------------------
// cuda_runtime_api.h: width must not exceed either pitch, and a pitch above
// the maximum is an error: both cudaErrorInvalidPitchValue.
static cudaError_t rt_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                               size_t width, size_t height, enum cudaMemcpyKind kind,
                               cudaStream_t s, bool async, bool ptds)
{
    RT_ENTER();
    CUDA_MEMCPY2D p = {0};
    if (!types_of(kind, &p.srcMemoryType, &p.dstMemoryType))
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (width > dpitch || width > spitch || dpitch > MAX_PITCH || spitch > MAX_PITCH)
        return rt_ret(cudaErrorInvalidPitchValue);
    p.srcHost = src;
    p.srcDevice = (CUdeviceptr)(uintptr_t)src;
    p.srcPitch = spitch;
    p.dstHost = dst;
    p.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    p.dstPitch = dpitch;
    p.WidthInBytes = width;
    p.Height = height;
    CUresult r = async ? RT_PICK(ptds, cuMemcpy2DAsync, cuMemcpy2DAsync_ptsz)(&p, s)
                       : RT_PICK(ptds, cuMemcpy2D, cuMemcpy2D_ptds)(&p);
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL, false, false);
}
RT_EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL, false, true);
}
RT_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind,
                                        cudaStream_t stream)
{
    return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream, true, false);
}
RT_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                             size_t spitch, size_t width, size_t height,
                                             enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream, true, true);
}

// --- cudaMemcpy3D ----------------------------------------------------------------------
// Linear memory only: positions and the extent's width in bytes; the pitched
// pointer's ysize is the allocation's height (the driver's srcHeight).
static cudaError_t rt_memcpy3d(const struct cudaMemcpy3DParms *q, cudaStream_t s, bool async,
                               bool ptds)
{
    RT_ENTER();
    if (!q || q->srcArray || q->dstArray) return rt_ret(cudaErrorInvalidValue);
    CUDA_MEMCPY3D p = {0};
    if (!types_of(q->kind, &p.srcMemoryType, &p.dstMemoryType))
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (q->srcPtr.pitch > MAX_PITCH || q->dstPtr.pitch > MAX_PITCH)
        return rt_ret(cudaErrorInvalidPitchValue);
    p.srcXInBytes = q->srcPos.x, p.srcY = q->srcPos.y, p.srcZ = q->srcPos.z;
    p.srcHost = q->srcPtr.ptr;
    p.srcDevice = (CUdeviceptr)(uintptr_t)q->srcPtr.ptr;
    p.srcPitch = q->srcPtr.pitch, p.srcHeight = q->srcPtr.ysize;
    p.dstXInBytes = q->dstPos.x, p.dstY = q->dstPos.y, p.dstZ = q->dstPos.z;
    p.dstHost = q->dstPtr.ptr;
    p.dstDevice = (CUdeviceptr)(uintptr_t)q->dstPtr.ptr;
    p.dstPitch = q->dstPtr.pitch, p.dstHeight = q->dstPtr.ysize;
    p.WidthInBytes = q->extent.width, p.Height = q->extent.height, p.Depth = q->extent.depth;
    CUresult r = async ? RT_PICK(ptds, cuMemcpy3DAsync, cuMemcpy3DAsync_ptsz)(&p, s)
                       : RT_PICK(ptds, cuMemcpy3D, cuMemcpy3D_ptds)(&p);
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
    return rt_memcpy3d(p, NULL, false, false);
}
RT_EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p)
{
    return rt_memcpy3d(p, NULL, false, true);
}
RT_EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return rt_memcpy3d(p, stream, true, false);
}
RT_EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return rt_memcpy3d(p, stream, true, true);
}

// --- cudaMemcpyPeer --------------------------------------------------------------------
// One device (0): another ordinal is cudaErrorInvalidDevice. The runtime has
// no per-thread twins of these (cuda_runtime_api.h renames neither).
static cudaError_t rt_memcpy_peer(void *dst, int dd, const void *src, int sd, size_t n,
                                  cudaStream_t s, bool async)
{
    RT_ENTER();
    if (dd != 0 || sd != 0) return rt_ret(cudaErrorInvalidDevice);
    CUcontext c = NULL;
    CUresult r = rt_drv.cuCtxGetCurrent(&c);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    r = async ? rt_drv.cuMemcpyPeerAsync(d, c, sp, c, n, s) : rt_drv.cuMemcpyPeer(d, c, sp, c, n);
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                     size_t count)
{
    return rt_memcpy_peer(dst, dstDevice, src, srcDevice, count, NULL, false);
}
RT_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                          size_t count, cudaStream_t stream)
{
    return rt_memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, true);
}

// --- cudaMemset2D / 3D -----------------------------------------------------------------------
// Bytes (value's low 8 bits), as cudaMemset. 3D: one 2D set per slice, the
// slices ysize rows apart (cuda_runtime_api.h: ysize is "the height of each
// 2D slice in rows"); a slice taller than ysize would overlap the next:
// cudaErrorInvalidValue.
static cudaError_t rt_memset3d(struct cudaPitchedPtr p, int value, struct cudaExtent e,
                               cudaStream_t s, bool async, bool ptds)
{
    RT_ENTER();
    if (!e.width || !e.height || !e.depth) return cudaSuccess;
    if (e.depth > 1 && p.ysize < e.height) return rt_ret(cudaErrorInvalidValue);
    uint64_t slice;
    if (__builtin_mul_overflow((uint64_t)p.ysize, (uint64_t)p.pitch, &slice))
        return rt_ret(cudaErrorInvalidValue);
    unsigned char v = (unsigned char)value;
    for (size_t k = 0; k < e.depth; k++) {
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)p.ptr + k * slice;
        CUresult r = async ? RT_PICK(ptds, cuMemsetD2D8Async,
                                     cuMemsetD2D8Async_ptsz)(d, p.pitch, v, e.width, e.height, s)
                           : RT_PICK(ptds, cuMemsetD2D8, cuMemsetD2D8_ptds)(d, p.pitch, v, e.width,
                                                                            e.height);
        if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    }
    return cudaSuccess;
}

static cudaError_t rt_memset2d(void *devPtr, size_t pitch, int value, size_t width, size_t height,
                               cudaStream_t s, bool async, bool ptds)
{
    struct cudaPitchedPtr p = {.ptr = devPtr, .pitch = pitch, .xsize = width, .ysize = height};
    struct cudaExtent e = {.width = width, .height = height, .depth = 1};
    return rt_memset3d(p, value, e, s, async, ptds);
}

RT_EXPORT cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width,
                                   size_t height)
{
    return rt_memset2d(devPtr, pitch, value, width, height, NULL, false, false);
}
RT_EXPORT cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width,
                                        size_t height)
{
    return rt_memset2d(devPtr, pitch, value, width, height, NULL, false, true);
}
RT_EXPORT cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width,
                                        size_t height, cudaStream_t stream)
{
    return rt_memset2d(devPtr, pitch, value, width, height, stream, true, false);
}
RT_EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value, size_t width,
                                             size_t height, cudaStream_t stream)
{
    return rt_memset2d(devPtr, pitch, value, width, height, stream, true, true);
}
RT_EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value,
                                   struct cudaExtent extent)
{
    return rt_memset3d(pitchedDevPtr, value, extent, NULL, false, false);
}
RT_EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                                        struct cudaExtent extent)
{
    return rt_memset3d(pitchedDevPtr, value, extent, NULL, false, true);
}
RT_EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value,
                                        struct cudaExtent extent, cudaStream_t stream)
{
    return rt_memset3d(pitchedDevPtr, value, extent, stream, true, false);
}
RT_EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                             struct cudaExtent extent, cudaStream_t stream)
{
    return rt_memset3d(pitchedDevPtr, value, extent, stream, true, true);
}
