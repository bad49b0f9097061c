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
        return CHECKED(pitched2d_check(d, dp, src, sp, w, h, stream_of(NULL, ptsz), #name),        \
                       ao_real.name(d, dp, src, sp, w, h, k));                                     \
    }
MEMCPY2D(cudaMemcpy2D, false)
MEMCPY2D(cudaMemcpy2D_ptds, true)

#define MEMCPY2D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(void *d, size_t dp, const void *src, size_t sp, size_t w, size_t h, \
                               enum cudaMemcpyKind k, cudaStream_t s)                              \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(pitched2d_check(d, dp, src, sp, w, h, stream_of(s, ptsz), #name),           \
                       ao_real.name(d, dp, src, sp, w, h, k, s));                                  \
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
        return CHECKED(memcpy3d_check(p, stream_of(NULL, ptsz), #name), ao_real.name(p));          \
    }
MEMCPY3D(cudaMemcpy3D, false)
MEMCPY3D(cudaMemcpy3D_ptds, true)

#define MEMCPY3D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(const struct cudaMemcpy3DParms *p, cudaStream_t s)                  \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(memcpy3d_check(p, stream_of(s, ptsz), #name), ao_real.name(p, s));          \
    }
MEMCPY3D_ASYNC(cudaMemcpy3DAsync, false)
MEMCPY3D_ASYNC(cudaMemcpy3DAsync_ptsz, true)

// The runtime has no per-thread twins of the peer copies.
AO_EXPORT cudaError_t cudaMemcpyPeer(void *d, int dd, const void *src, int sd, size_t n)
{
    NEED(cudaMemcpyPeer);
    return CHECKED(ranges_check(d, src, n, stream_of(NULL, false), "cudaMemcpyPeer"),
                   ao_real.cudaMemcpyPeer(d, dd, src, sd, n));
}

AO_EXPORT cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *src, int sd, size_t n,
                                          cudaStream_t s)
{
    NEED(cudaMemcpyPeerAsync);
    return CHECKED(ranges_check(d, src, n, stream_of(s, false), "cudaMemcpyPeerAsync"),
                   ao_real.cudaMemcpyPeerAsync(d, dd, src, sd, n, s));
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
        return CHECKED(pitched2d_check(d, p, NULL, 0, w, h, stream_of(NULL, ptsz), #name),         \
                       ao_real.name(d, p, v, w, h));                                               \
    }
MEMSET2D(cudaMemset2D, false)
MEMSET2D(cudaMemset2D_ptds, true)

#define MEMSET2D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(void *d, size_t p, int v, size_t w, size_t h, cudaStream_t s)       \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(pitched2d_check(d, p, NULL, 0, w, h, stream_of(s, ptsz), #name),            \
                       ao_real.name(d, p, v, w, h, s));                                            \
    }
MEMSET2D_ASYNC(cudaMemset2DAsync, false)
MEMSET2D_ASYNC(cudaMemset2DAsync_ptsz, true)

#define MEMSET3D(name, ptsz)                                                                       \
    AO_EXPORT cudaError_t name(struct cudaPitchedPtr p, int v, struct cudaExtent e)                \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(memset3d_check(p, e, stream_of(NULL, ptsz), #name), ao_real.name(p, v, e)); \
    }
MEMSET3D(cudaMemset3D, false)
MEMSET3D(cudaMemset3D_ptds, true)

#define MEMSET3D_ASYNC(name, ptsz)                                                                 \
    AO_EXPORT cudaError_t name(struct cudaPitchedPtr p, int v, struct cudaExtent e,                \
                               cudaStream_t s)                                                     \
    {                                                                                              \
        NEED(name);                                                                                \
        return CHECKED(memset3d_check(p, e, stream_of(s, ptsz), #name),                            \
                       ao_real.name(p, v, e, s));                                                  \
    }
MEMSET3D_ASYNC(cudaMemset3DAsync, false)
MEMSET3D_ASYNC(cudaMemset3DAsync_ptsz, true)

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
