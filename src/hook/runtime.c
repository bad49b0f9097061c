// SPDX-License-Identifier: MIT
// Interposed CUDA runtime entry points.
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "hook.h"
#include "offload/engine.h"
#include "offload/scan.h"
#include "cuda/real.h"

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

// The step trace's (AOSHIM_RECORD): the address the program got.
static inline void rec_alloc(const char *api, size_t n, CUstream s, void **p)
{
    if (AO_TR_ON()) ao_tr_alloc(api, n, s, (uint64_t)(uintptr_t)*p);
}

// --- the step trace's copies and sets (AOSHIM_RECORD) ------------------------------------------
// Pitched ones as the range covering every row of each side.
static void rec_copy(enum cudaMemcpyKind k, const void *d, const void *src, uint64_t n,
                     uint64_t src_n, CUstream s, bool async, bool pitched)
{
    ao_tr_copy(ao_tr_copy_kind_rt(k), (uintptr_t)d, (uintptr_t)src, n, src_n, s, async, pitched);
}

// One side of a cudaMemcpy3DParms / cudaMemset3D: its first byte (0 for an
// array) and the bytes it covers.
static uint64_t side3d(cudaArray_t a, struct cudaPitchedPtr ptr, struct cudaPos pos,
                       struct cudaExtent e, uint64_t *n)
{
    uint64_t slice = (uint64_t)ptr.ysize * ptr.pitch;
    *n = ao_tr_span(e.width, e.height, e.depth, ptr.pitch, slice);
    if (a || !ptr.ptr) return 0;
    return (uintptr_t)ptr.ptr + pos.z * slice + pos.y * ptr.pitch + pos.x;
}

static void rec_copy3d(const struct cudaMemcpy3DParms *p, CUstream s, bool async)
{
    uint64_t dn, sn;
    uint64_t d = side3d(p->dstArray, p->dstPtr, p->dstPos, p->extent, &dn);
    uint64_t src = side3d(p->srcArray, p->srcPtr, p->srcPos, p->extent, &sn);
    ao_tr_copy(ao_tr_copy_kind_rt(p->kind), d, src, dn, sn, s, async, true);
}

static void rec_memset3d(struct cudaPitchedPtr p, int v, struct cudaExtent e, CUstream s)
{
    uint64_t n;
    uint64_t d = side3d(NULL, p, (struct cudaPos){0, 0, 0}, e, &n);
    ao_tr_memset(d, n, (unsigned char)v, 1, s, true);
}

// --- allocation ----------------------------------------------------------------------
AO_EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    NEED(cudaMalloc);
    if (ao_hook_track((CUdeviceptr *)p, n, NULL, false)) {
        rec_alloc("cudaMalloc", n, NULL, p);
        return cudaSuccess;
    }
    cudaError_t r = AO_REAL_CALL(ao_real.cudaMalloc(p, n));
    if (r == cudaErrorMemoryAllocation && ao_hook_retry())
        r = AO_REAL_CALL(ao_real.cudaMalloc(p, n));
    if (r == cudaSuccess && p) {
        ao_hook_passed((CUdeviceptr)*p, n, false);
        rec_alloc("cudaMalloc", n, NULL, p);
    }
    return r;
}

AO_EXPORT cudaError_t cudaFree(void *p)
{
    NEED(cudaFree);
    if (p && AO_TR_ON()) ao_tr_free("cudaFree", (uint64_t)(uintptr_t)p, NULL);
    int own = ao_hook_free((CUdeviceptr)p, NULL, false);
    if (own) return own > 0 ? cudaSuccess : cudaErrorInvalidValue;
    return AO_REAL_CALL(ao_real.cudaFree(p));
}

#define MALLOC_ASYNC(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(void **p, size_t n, cudaStream_t s)                                 \
    {                                                                                              \
        NEED(name);                                                                                \
        if (ao_hook_track((CUdeviceptr *)p, n, stream_of(s, ptsz), true)) {                        \
            rec_alloc("cudaMallocAsync", n, stream_of(s, ptsz), p);                                \
            return cudaSuccess;                                                                    \
        }                                                                                          \
        cudaError_t r = AO_REAL_CALL(ao_real.name(p, n, s));                                       \
        if (r == cudaErrorMemoryAllocation && ao_hook_retry())                                     \
            r = AO_REAL_CALL(ao_real.name(p, n, s));                                               \
        if (r == cudaSuccess && p) {                                                               \
            ao_hook_passed((CUdeviceptr)*p, n, true);                                              \
            rec_alloc("cudaMallocAsync", n, stream_of(s, ptsz), p);                                \
        }                                                                                          \
        return r;                                                                                  \
    }
MALLOC_ASYNC(cudaMallocAsync, false)
MALLOC_ASYNC(cudaMallocAsync_ptsz, true)

#define FREE_ASYNC(name, ptsz)                                                                     \
    AO_EXPORT cudaError_t name(void *p, cudaStream_t s)                                            \
    {                                                                                              \
        NEED(name);                                                                                \
        if (p && AO_TR_ON())                                                                       \
            ao_tr_free("cudaFreeAsync", (uint64_t)(uintptr_t)p, stream_of(s, ptsz));               \
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

// With AOSHIM_RECORD: the launch around the hook's own work (steptrace.h);
// a timed launch's first event goes right before the real call.
#define RECORDED(fn, kind, cs, grid, block, shm, args, checked, call)                              \
    ({                                                                                             \
        ao_tr_launch_t tl_;                                                                        \
        ao_tr_launch_begin(&tl_, (fn), (kind), (cs));                                              \
        cudaError_t rr_ = CHECKED(checked, (ao_tr_launch_arm(&tl_), call));                        \
        ao_tr_launch_end(&tl_, rr_ == cudaSuccess, (grid).x, (grid).y, (grid).z, (block).x,        \
                         (block).y, (block).z, (unsigned)(shm), (args), NULL);                     \
        rr_;                                                                                       \
    })

#define LAUNCH(name, ptsz)                                                                         \
    AO_EXPORT cudaError_t name(const void *f, dim3 g, dim3 b, void **args, size_t shm,             \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        if (AO_TR_ON())                                                                            \
            return RECORDED(f, AO_FN_HOST, stream_of(s, ptsz), g, b, shm, args,                    \
                            launch_check(f, AO_FN_HOST, args, stream_of(s, ptsz)),                 \
                            ao_real.name(f, g, b, args, shm, s));                                  \
        return CHECKED(launch_check(f, AO_FN_HOST, args, stream_of(s, ptsz)),                      \
                       ao_real.name(f, g, b, args, shm, s));                                       \
    }
LAUNCH(cudaLaunchKernel, false)
LAUNCH(cudaLaunchKernel_ptsz, true)

#define LAUNCH_EXC(name, ptsz)                                                                     \
    AO_EXPORT cudaError_t name(const cudaLaunchConfig_t *c, const void *f, void **args)            \
    {                                                                                              \
        NEED(name);                                                                                \
        if (c && AO_TR_ON())                                                                       \
            return RECORDED(f, AO_FN_HOST, stream_of(c->stream, ptsz), c->gridDim, c->blockDim,    \
                            c->dynamicSmemBytes, args,                                             \
                            launch_check(f, AO_FN_HOST, args, stream_of(c->stream, ptsz)),         \
                            ao_real.name(c, f, args));                                             \
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
        if (AO_TR_ON())                                                                            \
            return RECORDED(k, AO_FN_KERNEL, stream_of(s, ptsz), g, b, shm, args,                  \
                            launch_check(k, AO_FN_KERNEL, args, stream_of(s, ptsz)),               \
                            ao_real.name(k, g, b, args, shm, s));                                  \
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
        cudaError_t r = CHECKED(ranges_check(d, src, n, stream_of(NULL, ptsz), #name),             \
                                ao_real.name(d, src, n, k));                                       \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            rec_copy(k, d, src, n, 0, stream_of(NULL, ptsz), false, false);                        \
        return r;                                                                                  \
    }
MEMCPY(cudaMemcpy, false)
MEMCPY(cudaMemcpy_ptds, true)

#define MEMCPY_ASYNC(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(void *d, const void *src, size_t n, enum cudaMemcpyKind k,          \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(ranges_check(d, src, n, stream_of(s, ptsz), #name),                \
                                ao_real.name(d, src, n, k, s));                                    \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            rec_copy(k, d, src, n, 0, stream_of(s, ptsz), true, false);                            \
        return r;                                                                                  \
    }
MEMCPY_ASYNC(cudaMemcpyAsync, false)
MEMCPY_ASYNC(cudaMemcpyAsync_ptsz, true)

#define MEMSET(name, ptsz)                                                                         \
    AO_EXPORT cudaError_t name(void *d, int v, size_t n)                                           \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(ranges_check(d, NULL, n, stream_of(NULL, ptsz), #name),            \
                                ao_real.name(d, v, n));                                            \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            ao_tr_memset((uintptr_t)d, n, (unsigned char)v, 1, stream_of(NULL, ptsz), false);      \
        return r;                                                                                  \
    }
MEMSET(cudaMemset, false)
MEMSET(cudaMemset_ptds, true)

#define MEMSET_ASYNC(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(void *d, int v, size_t n, cudaStream_t s)                           \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(ranges_check(d, NULL, n, stream_of(s, ptsz), #name),               \
                                ao_real.name(d, v, n, s));                                         \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            ao_tr_memset((uintptr_t)d, n, (unsigned char)v, 1, stream_of(s, ptsz), false);         \
        return r;                                                                                  \
    }
MEMSET_ASYNC(cudaMemsetAsync, false)
MEMSET_ASYNC(cudaMemsetAsync_ptsz, true)

// --- pitched and peer copies and sets --------------------------------------------------------
// The bytes a 2D/3D call touches: rows of width bytes, pitch apart, slices
// ysize rows apart (offload/scan.h, ao_scan_pitched: exact to the granule).
static inline bool check_begin(void)
{
    if (ao_in_hook || ao_engine_off || !__atomic_load_n(&ao_vmm.size, __ATOMIC_ACQUIRE))
        return false;
    ao_scan_begin();
    return true;
}

static inline bool pitched2d_check(const void *d, size_t dp, const void *src, size_t sp, size_t w,
                                   size_t h, CUstream s, const char *what)
{
    if (!check_begin()) return false;
    ao_scan_pitched((uint64_t)(uintptr_t)d, w, h, 1, dp, 0, s, what);
    ao_scan_pitched((uint64_t)(uintptr_t)src, w, h, 1, sp, 0, s, what);
    return true;
}

#define MEMCPY2D(name, ptsz)                                                                       \
    AO_EXPORT cudaError_t name(void *d, size_t dp, const void *src, size_t sp, size_t w, size_t h, \
                               enum cudaMemcpyKind k)                                              \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r =                                                                            \
            CHECKED(pitched2d_check(d, dp, src, sp, w, h, stream_of(NULL, ptsz), #name),           \
                    ao_real.name(d, dp, src, sp, w, h, k));                                        \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            rec_copy(k, d, src, ao_tr_span(w, h, 1, dp, 0), ao_tr_span(w, h, 1, sp, 0),            \
                     stream_of(NULL, ptsz), false, true);                                          \
        return r;                                                                                  \
    }
MEMCPY2D(cudaMemcpy2D, false)
MEMCPY2D(cudaMemcpy2D_ptds, true)

#define MEMCPY2D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(void *d, size_t dp, const void *src, size_t sp, size_t w, size_t h, \
                               enum cudaMemcpyKind k, cudaStream_t s)                              \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(pitched2d_check(d, dp, src, sp, w, h, stream_of(s, ptsz), #name),  \
                                ao_real.name(d, dp, src, sp, w, h, k, s));                         \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            rec_copy(k, d, src, ao_tr_span(w, h, 1, dp, 0), ao_tr_span(w, h, 1, sp, 0),            \
                     stream_of(s, ptsz), true, true);                                              \
        return r;                                                                                  \
    }
MEMCPY2D_ASYNC(cudaMemcpy2DAsync, false)
MEMCPY2D_ASYNC(cudaMemcpy2DAsync_ptsz, true)

// One side of a cudaMemcpy3DParms: linear memory only (an array's memory is
// never aoshim's); the extent's width is in bytes then.
static inline void scan3d_side(cudaArray_t a, struct cudaPitchedPtr ptr, struct cudaPos pos,
                               struct cudaExtent e, CUstream s, const char *what)
{
    if (a || !ptr.ptr) return;
    uint64_t base = (uint64_t)(uintptr_t)ptr.ptr, slice, zo, yo, start;
    if (__builtin_mul_overflow((uint64_t)ptr.ysize, (uint64_t)ptr.pitch, &slice) ||
        __builtin_mul_overflow((uint64_t)pos.z, slice, &zo) ||
        __builtin_mul_overflow((uint64_t)pos.y, (uint64_t)ptr.pitch, &yo) ||
        __builtin_add_overflow(base, zo, &start) || __builtin_add_overflow(start, yo, &start) ||
        __builtin_add_overflow(start, (uint64_t)pos.x, &start)) {
        ao_scan_span(base, 0, true, s, what); // nonsense geometry: everything from the base on
        return;
    }
    ao_scan_pitched(start, e.width, e.height, e.depth, ptr.pitch, slice, s, what);
}

static inline bool memcpy3d_check(const struct cudaMemcpy3DParms *p, CUstream s, const char *what)
{
    if (!p || !check_begin()) return false;
    scan3d_side(p->dstArray, p->dstPtr, p->dstPos, p->extent, s, what);
    scan3d_side(p->srcArray, p->srcPtr, p->srcPos, p->extent, s, what);
    return true;
}

#define MEMCPY3D(name, ptsz)                                                                       \
    AO_EXPORT cudaError_t name(const struct cudaMemcpy3DParms *p)                                  \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(memcpy3d_check(p, stream_of(NULL, ptsz), #name), ao_real.name(p)); \
        if (r == cudaSuccess && p && AO_TR_ON()) rec_copy3d(p, stream_of(NULL, ptsz), false);      \
        return r;                                                                                  \
    }
MEMCPY3D(cudaMemcpy3D, false)
MEMCPY3D(cudaMemcpy3D_ptds, true)

#define MEMCPY3D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(const struct cudaMemcpy3DParms *p, cudaStream_t s)                  \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(memcpy3d_check(p, stream_of(s, ptsz), #name), ao_real.name(p, s)); \
        if (r == cudaSuccess && p && AO_TR_ON()) rec_copy3d(p, stream_of(s, ptsz), true);          \
        return r;                                                                                  \
    }
MEMCPY3D_ASYNC(cudaMemcpy3DAsync, false)
MEMCPY3D_ASYNC(cudaMemcpy3DAsync_ptsz, true)

// The runtime has no per-thread twins of the peer copies.
AO_EXPORT cudaError_t cudaMemcpyPeer(void *d, int dd, const void *src, int sd, size_t n)
{
    NEED(cudaMemcpyPeer);
    cudaError_t r = CHECKED(ranges_check(d, src, n, stream_of(NULL, false), "cudaMemcpyPeer"),
                            ao_real.cudaMemcpyPeer(d, dd, src, sd, n));
    if (r == cudaSuccess && AO_TR_ON())
        rec_copy(cudaMemcpyDeviceToDevice, d, src, n, 0, stream_of(NULL, false), false, false);
    return r;
}

AO_EXPORT cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *src, int sd, size_t n,
                                          cudaStream_t s)
{
    NEED(cudaMemcpyPeerAsync);
    cudaError_t r = CHECKED(ranges_check(d, src, n, stream_of(s, false), "cudaMemcpyPeerAsync"),
                            ao_real.cudaMemcpyPeerAsync(d, dd, src, sd, n, s));
    if (r == cudaSuccess && AO_TR_ON())
        rec_copy(cudaMemcpyDeviceToDevice, d, src, n, 0, stream_of(s, false), true, false);
    return r;
}

static inline bool memset3d_check(struct cudaPitchedPtr p, struct cudaExtent e, CUstream s,
                                  const char *what)
{
    if (!check_begin()) return false;
    uint64_t slice;
    if (__builtin_mul_overflow((uint64_t)p.ysize, (uint64_t)p.pitch, &slice)) slice = UINT64_MAX;
    ao_scan_pitched((uint64_t)(uintptr_t)p.ptr, e.width, e.height, e.depth, p.pitch, slice, s,
                    what);
    return true;
}

#define MEMSET2D(name, ptsz)                                                                       \
    AO_EXPORT cudaError_t name(void *d, size_t p, int v, size_t w, size_t h)                       \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r =                                                                            \
            CHECKED(pitched2d_check(d, p, NULL, 0, w, h, stream_of(NULL, ptsz), #name),            \
                    ao_real.name(d, p, v, w, h));                                                  \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            ao_tr_memset((uintptr_t)d, ao_tr_span(w, h, 1, p, 0), (unsigned char)v, 1,             \
                         stream_of(NULL, ptsz), true);                                             \
        return r;                                                                                  \
    }
MEMSET2D(cudaMemset2D, false)
MEMSET2D(cudaMemset2D_ptds, true)

#define MEMSET2D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(void *d, size_t p, int v, size_t w, size_t h, cudaStream_t s)       \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = CHECKED(pitched2d_check(d, p, NULL, 0, w, h, stream_of(s, ptsz), #name),   \
                                ao_real.name(d, p, v, w, h, s));                                   \
        if (r == cudaSuccess && AO_TR_ON())                                                        \
            ao_tr_memset((uintptr_t)d, ao_tr_span(w, h, 1, p, 0), (unsigned char)v, 1,             \
                         stream_of(s, ptsz), true);                                                \
        return r;                                                                                  \
    }
MEMSET2D_ASYNC(cudaMemset2DAsync, false)
MEMSET2D_ASYNC(cudaMemset2DAsync_ptsz, true)

#define MEMSET3D(name, ptsz)                                                                       \
    AO_EXPORT cudaError_t name(struct cudaPitchedPtr p, int v, struct cudaExtent e)                \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r =                                                                            \
            CHECKED(memset3d_check(p, e, stream_of(NULL, ptsz), #name), ao_real.name(p, v, e));    \
        if (r == cudaSuccess && AO_TR_ON()) rec_memset3d(p, v, e, stream_of(NULL, ptsz));          \
        return r;                                                                                  \
    }
MEMSET3D(cudaMemset3D, false)
MEMSET3D(cudaMemset3D_ptds, true)

#define MEMSET3D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(struct cudaPitchedPtr p, int v, struct cudaExtent e,                \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r =                                                                            \
            CHECKED(memset3d_check(p, e, stream_of(s, ptsz), #name), ao_real.name(p, v, e, s));    \
        if (r == cudaSuccess && AO_TR_ON()) rec_memset3d(p, v, e, stream_of(s, ptsz));             \
        return r;                                                                                  \
    }
MEMSET3D_ASYNC(cudaMemset3DAsync, false)
MEMSET3D_ASYNC(cudaMemset3DAsync_ptsz, true)

AO_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    NEED(cudaStreamDestroy);
    if (s && AO_TR_ON()) ao_tr_stream_destroyed((CUstream)s);
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

// The capture's id is asked for before it ends; the graph it produced, if
// any, then holds the pins of what the captured work touched (engine.h).
#define END_CAPTURE(name, ptsz)                                                                    \
    AO_EXPORT cudaError_t name(cudaStream_t s, cudaGraph_t *g)                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        bool outer = !ao_in_hook;                                                                  \
        uint64_t id = outer ? ao_engine_capture_id(stream_of(s, ptsz)) : 0;                        \
        cudaError_t r = AO_REAL_CALL(ao_real.name(s, g));                                          \
        if (outer && ao_engine_capture_end(id, r == cudaSuccess && g ? (CUgraph)*g : NULL,         \
                                           stream_of(s, ptsz)))                                    \
            ao_capture_ended();                                                                    \
        return r;                                                                                  \
    }
END_CAPTURE(cudaStreamEndCapture, false)
END_CAPTURE(cudaStreamEndCapture_ptsz, true)

// --- graphs: who can still replay captured work (driver.c says why) -----------------------
#define INSTANTIATE(name, params, args)                                                            \
    AO_EXPORT cudaError_t name params                                                              \
    {                                                                                              \
        NEED(name);                                                                                \
        bool outer = !ao_in_hook;                                                                  \
        cudaError_t r = AO_REAL_CALL(ao_real.name args);                                           \
        if (r == cudaSuccess && outer && x)                                                        \
            ao_engine_graph_instantiated((CUgraph)g, (CUgraphExec)*x);                             \
        return r;                                                                                  \
    }
INSTANTIATE(cudaGraphInstantiate, (cudaGraphExec_t * x, cudaGraph_t g, unsigned long long fl),
            (x, g, fl))
INSTANTIATE(cudaGraphInstantiateWithFlags,
            (cudaGraphExec_t * x, cudaGraph_t g, unsigned long long fl), (x, g, fl))
INSTANTIATE(cudaGraphInstantiateWithParams,
            (cudaGraphExec_t * x, cudaGraph_t g, cudaGraphInstantiateParams *p), (x, g, p))
INSTANTIATE(cudaGraphInstantiateWithParams_ptsz,
            (cudaGraphExec_t * x, cudaGraph_t g, cudaGraphInstantiateParams *p), (x, g, p))

AO_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    NEED(cudaGraphExecDestroy);
    bool outer = !ao_in_hook;
    cudaError_t r = AO_REAL_CALL(ao_real.cudaGraphExecDestroy(x));
    if (r == cudaSuccess && outer) ao_engine_graph_exec_destroyed((CUgraphExec)x);
    return r;
}

AO_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    NEED(cudaGraphDestroy);
    bool outer = !ao_in_hook;
    cudaError_t r = AO_REAL_CALL(ao_real.cudaGraphDestroy(g));
    if (r == cudaSuccess && outer) ao_engine_graph_destroyed((CUgraph)g);
    return r;
}

AO_EXPORT cudaError_t cudaGraphClone(cudaGraph_t *clone, cudaGraph_t g)
{
    NEED(cudaGraphClone);
    bool outer = !ao_in_hook;
    cudaError_t r = AO_REAL_CALL(ao_real.cudaGraphClone(clone, g));
    if (r == cudaSuccess && outer && clone) ao_engine_graph_cloned((CUgraph)g, (CUgraph)*clone);
    return r;
}

#define GRAPH_LAUNCH(name, ptsz)                                                                   \
    AO_EXPORT cudaError_t name(cudaGraphExec_t x, cudaStream_t s)                                  \
    {                                                                                              \
        NEED(name);                                                                                \
        if (!ao_in_hook && !ao_engine_off) ao_engine_note_stream(stream_of(s, ptsz));              \
        return AO_REAL_CALL(ao_real.name(x, s));                                                   \
    }
GRAPH_LAUNCH(cudaGraphLaunch, false)
GRAPH_LAUNCH(cudaGraphLaunch_ptsz, true)

// --- driver entry points handed out by the runtime ----------------------------------------
// Without a version, the runtime answers with the ABI of its own CUDA
// version, which is the program's runtime's (12.x or 13.x), not the one
// aoshim was built against: a wrapper is substituted only for the ABI that
// version gets. Unknown (0): no wrapper, the runtime's answer stands.
#define ENTRY_POINT(name, ptsz)                                                                    \
    AO_EXPORT cudaError_t name(const char *sym, void **fn, unsigned long long flags,               \
                               enum cudaDriverEntryPointQueryResult *st)                           \
    {                                                                                              \
        NEED(name);                                                                                \
        cudaError_t r = ao_real.name(sym, fn, flags, st);                                          \
        if (r == cudaSuccess && fn && *fn)                                                         \
            ao_hook_substitute(                                                                    \
                sym, fn, ao_real_runtime_version(),                                                \
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
