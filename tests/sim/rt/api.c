// SPDX-License-Identifier: MIT
// The simulated runtime's memory, copy, stream, event, launch and entry-point
// calls: each decodes its arguments and calls the driver through rt_drv.
//
// Streams: cudaStream_t and CUstream are the same pointers. The legacy entry
// points pass 0 to the driver's legacy functions (0 = legacy default stream);
// the _ptsz/_ptds twins pass it to the driver's per-thread functions, which
// read 0 as the calling thread's per-thread default stream. cudaStreamLegacy
// and cudaStreamPerThread equal CU_STREAM_LEGACY / CU_STREAM_PER_THREAD and
// pass through unchanged.
#include "rt.h"

#include <stdint.h>
#include <string.h>

#define RT_ENTER()                                                                                 \
    do {                                                                                           \
        cudaError_t enter_err_ = rt_enter();                                                       \
        if (enter_err_ != cudaSuccess) return rt_ret(enter_err_);                                  \
    } while (0)

// Pick the legacy or the per-thread driver function.
#define RT_PICK(ptds, legacy_fn, ptds_fn) ((ptds) ? rt_drv.ptds_fn : rt_drv.legacy_fn)

_Static_assert(sizeof(cudaStream_t) == sizeof(CUstream), "stream handles are the same pointers");
_Static_assert(sizeof(struct cudaLaunchAttribute_st) == sizeof(CUlaunchAttribute),
               "runtime and driver launch attributes share their layout");

// --- memory ----------------------------------------------------------------------
RT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    // The runtime answers a zero-byte request with NULL and success; the
    // driver (cuMemAlloc) would reject it.
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    CUresult r = rt_drv.cuMemAlloc(&d, size);
    if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)d;
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaFree(void *devPtr)
{
    // cudaFree(NULL) is the customary way to initialise the runtime: it must
    // start it (and fail as start-up fails) before being a no-op.
    RT_ENTER();
    if (!devPtr) return cudaSuccess;
    return rt_ret_cu(rt_drv.cuMemFree((CUdeviceptr)(uintptr_t)devPtr));
}

static cudaError_t rt_malloc_async(void **devPtr, size_t size, cudaStream_t s, bool ptds)
{
    if (!devPtr) return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    CUdeviceptr d = 0;
    CUresult r = RT_PICK(ptds, cuMemAllocAsync, cuMemAllocAsync_ptsz)(&d, size, s);
    if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)d;
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return rt_malloc_async(devPtr, size, hStream, false);
}

RT_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return rt_malloc_async(devPtr, size, hStream, true);
}

static cudaError_t rt_free_async(void *devPtr, cudaStream_t s, bool ptds)
{
    RT_ENTER();
    return rt_ret_cu(
        RT_PICK(ptds, cuMemFreeAsync, cuMemFreeAsync_ptsz)((CUdeviceptr)(uintptr_t)devPtr, s));
}

RT_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return rt_free_async(devPtr, hStream, false);
}

RT_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return rt_free_async(devPtr, hStream, true);
}

static cudaError_t rt_malloc_from_pool(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s,
                                       bool ptds)
{
    if (!ptr) return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    CUdeviceptr d = 0;
    CUresult r =
        RT_PICK(ptds, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz)(&d, size, pool, s);
    if (r == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)d;
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                              cudaStream_t stream)
{
    return rt_malloc_from_pool(ptr, size, memPool, stream, false);
}

RT_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                   cudaStream_t stream)
{
    return rt_malloc_from_pool(ptr, size, memPool, stream, true);
}

// --- memory pools ------------------------------------------------------------------
// cudaMemPool_t is the driver's CUmemoryPool and enum cudaMemPoolAttr numbers
// CUmemPool_attribute's values; the one device's ordinal is its CUdevice.
// What the pool does with them is the driver's (drv/mem.c, "memory pools").
_Static_assert(sizeof(cudaMemPool_t) == sizeof(CUmemoryPool), "pool handles are the same pointers");
_Static_assert((int)cudaMemPoolAttrReleaseThreshold == (int)CU_MEMPOOL_ATTR_RELEASE_THRESHOLD &&
                   (int)cudaMemPoolAttrUsedMemHigh == (int)CU_MEMPOOL_ATTR_USED_MEM_HIGH &&
                   (int)cudaMemPoolReuseFollowEventDependencies ==
                       (int)CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
               "runtime and driver pool attributes share their values");

RT_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuDeviceGetDefaultMemPool(memPool, (CUdevice)device));
}

RT_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuDeviceGetMemPool(memPool, (CUdevice)device));
}

RT_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuDeviceSetMemPool((CUdevice)device, memPool));
}

RT_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuMemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

RT_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuMemPoolGetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

RT_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuMemPoolTrimTo(memPool, minBytesToKeep));
}

RT_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (!ptr) return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuMemAllocHost(ptr, size));
}

RT_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost) return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    // cudaHostAlloc* flags equal CU_MEMHOSTALLOC_* (portable 1, mapped 2,
    // write-combined 4); the driver rejects the others.
    return rt_ret_cu(rt_drv.cuMemHostAlloc(pHost, size, flags));
}

RT_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    RT_ENTER();
    if (!ptr) return cudaSuccess;
    return rt_ret_cu(rt_drv.cuMemFreeHost(ptr));
}

RT_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    RT_ENTER();
    // cudaHostRegister* flags equal CU_MEMHOSTREGISTER_*.
    return rt_ret_cu(rt_drv.cuMemHostRegister(ptr, size, flags));
}

RT_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuMemHostUnregister(ptr));
}

RT_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuMemGetInfo(free, total));
}

// --- copies ------------------------------------------------------------------------
// Whether p is device memory (unified addressing: the driver knows every
// device and pinned pointer; it answers CUDA_ERROR_INVALID_VALUE for memory it
// never saw, which is pageable host memory).
static bool rt_is_device(const void *p)
{
    CUmemorytype t = (CUmemorytype)0;
    CUresult r = rt_drv.cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                              (CUdeviceptr)(uintptr_t)p);
    return r == CUDA_SUCCESS && (t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED);
}

// Host to host through the runtime. Real CUDA orders it on the stream like any
// copy; the simulator does the stricter equivalent: the host waits for the
// stream first, then copies, so the copy sees everything enqueued before it
// and nothing enqueued later can overtake it. A capturing stream cannot be
// synchronised, so the copy is refused there (real CUDA would capture a
// memcpy node; the simulator does not model host-to-host nodes).
static cudaError_t rt_copy_host(void *dst, const void *src, size_t count, cudaStream_t s, bool ptds)
{
    // A device pointer under cudaMemcpyHostToHost is a wrong direction.
    if (rt_is_device(dst) || rt_is_device(src)) return rt_ret(cudaErrorInvalidValue);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = RT_PICK(ptds, cuStreamIsCapturing, cuStreamIsCapturing_ptsz)(s, &cs);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    if (cs != CU_STREAM_CAPTURE_STATUS_NONE) return rt_ret(cudaErrorStreamCaptureUnsupported);
    r = RT_PICK(ptds, cuStreamSynchronize, cuStreamSynchronize_ptsz)(s);
    if (r != CUDA_SUCCESS) return rt_ret_cu(r);
    if (count) memmove(dst, src, count);
    return cudaSuccess;
}

static cudaError_t rt_memcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                             cudaStream_t s, bool async, bool ptds)
{
    RT_ENTER();
    if ((int)kind < (int)cudaMemcpyHostToHost || (int)kind > (int)cudaMemcpyDefault)
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (kind == cudaMemcpyDefault) {
        bool dd = rt_is_device(dst), sd = rt_is_device(src);
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, sp = (CUdeviceptr)(uintptr_t)src;
    CUresult r;
    // The explicit-direction driver copies check the pointers: a wrong kind
    // comes back as CUDA_ERROR_INVALID_VALUE -> cudaErrorInvalidValue.
    switch (kind) {
    case cudaMemcpyHostToDevice:
        r = async ? RT_PICK(ptds, cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_ptsz)(d, src, count, s)
                  : RT_PICK(ptds, cuMemcpyHtoD, cuMemcpyHtoD_ptds)(d, src, count);
        break;
    case cudaMemcpyDeviceToHost:
        r = async ? RT_PICK(ptds, cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_ptsz)(dst, sp, count, s)
                  : RT_PICK(ptds, cuMemcpyDtoH, cuMemcpyDtoH_ptds)(dst, sp, count);
        break;
    case cudaMemcpyDeviceToDevice:
        r = async ? RT_PICK(ptds, cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_ptsz)(d, sp, count, s)
                  : RT_PICK(ptds, cuMemcpyDtoD, cuMemcpyDtoD_ptds)(d, sp, count);
        break;
    default:
        return rt_copy_host(dst, src, count, async ? s : NULL, ptds);
    }
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return rt_memcpy(dst, src, count, kind, NULL, false, false);
}

RT_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind)
{
    return rt_memcpy(dst, src, count, kind, NULL, false, true);
}

RT_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_memcpy(dst, src, count, kind, stream, true, false);
}

RT_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                           enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return rt_memcpy(dst, src, count, kind, stream, true, true);
}

// --- memset -------------------------------------------------------------------------
static cudaError_t rt_memset(void *devPtr, int value, size_t count, cudaStream_t s, bool async,
                             bool ptds)
{
    RT_ENTER();
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)devPtr;
    unsigned char v = (unsigned char)value; // the runtime sets bytes: value's low 8 bits
    CUresult r = async ? RT_PICK(ptds, cuMemsetD8Async, cuMemsetD8Async_ptsz)(d, v, count, s)
                       : RT_PICK(ptds, cuMemsetD8, cuMemsetD8_ptds)(d, v, count);
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return rt_memset(devPtr, value, count, NULL, false, false);
}

RT_EXPORT cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    return rt_memset(devPtr, value, count, NULL, false, true);
}

RT_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return rt_memset(devPtr, value, count, stream, true, false);
}

RT_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                           cudaStream_t stream)
{
    return rt_memset(devPtr, value, count, stream, true, true);
}

// --- streams ---------------------------------------------------------------------------
RT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuStreamCreate(pStream, CU_STREAM_DEFAULT));
}

RT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    RT_ENTER();
    // cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING.
    return rt_ret_cu(rt_drv.cuStreamCreate(pStream, flags));
}

RT_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuStreamCreateWithPriority(pStream, flags, priority));
}

RT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuStreamDestroy(stream));
}

#define RT_STREAM_PAIR(rtname, drvfield, params, args)                                             \
    RT_EXPORT cudaError_t rtname params                                                            \
    {                                                                                              \
        RT_ENTER();                                                                                \
        return rt_ret_cu(rt_drv.drvfield args);                                                    \
    }                                                                                              \
    RT_EXPORT cudaError_t rtname##_ptsz params                                                     \
    {                                                                                              \
        RT_ENTER();                                                                                \
        return rt_ret_cu(rt_drv.drvfield##_ptsz args);                                             \
    }

// cudaStreamQuery: cudaErrorNotReady passes through rt_ret unrecorded.
RT_STREAM_PAIR(cudaStreamSynchronize, cuStreamSynchronize, (cudaStream_t stream), (stream))
RT_STREAM_PAIR(cudaStreamQuery, cuStreamQuery, (cudaStream_t stream), (stream))
RT_STREAM_PAIR(cudaStreamWaitEvent, cuStreamWaitEvent,
               (cudaStream_t stream, cudaEvent_t event, unsigned int flags), (stream, event, flags))
// cudaStreamCaptureMode equals CUstreamCaptureMode (global 0, thread-local 1, relaxed 2).
RT_STREAM_PAIR(cudaStreamBeginCapture, cuStreamBeginCapture,
               (cudaStream_t stream, enum cudaStreamCaptureMode mode),
               (stream, (CUstreamCaptureMode)mode))
// cudaGraph_t is CUgraph.
RT_STREAM_PAIR(cudaStreamEndCapture, cuStreamEndCapture, (cudaStream_t stream, cudaGraph_t *pGraph),
               (stream, (CUgraph *)pGraph))
RT_STREAM_PAIR(cudaEventRecord, cuEventRecord, (cudaEvent_t event, cudaStream_t stream),
               (event, stream))
// cudaEventRecordExternal == CU_EVENT_RECORD_EXTERNAL.
RT_STREAM_PAIR(cudaEventRecordWithFlags, cuEventRecordWithFlags,
               (cudaEvent_t event, cudaStream_t stream, unsigned int flags), (event, stream, flags))

static cudaError_t rt_is_capturing(cudaStream_t s, enum cudaStreamCaptureStatus *out, bool ptds)
{
    RT_ENTER();
    if (!out) return rt_ret(cudaErrorInvalidValue);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = RT_PICK(ptds, cuStreamIsCapturing, cuStreamIsCapturing_ptsz)(s, &cs);
    if (r == CUDA_SUCCESS)
        *out = (enum cudaStreamCaptureStatus)cs; // same values: none 0, active 1, invalidated 2
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return rt_is_capturing(stream, pCaptureStatus, false);
}

RT_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                 enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return rt_is_capturing(stream, pCaptureStatus, true);
}

// --- events ----------------------------------------------------------------------------
RT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuEventCreate(event, CU_EVENT_DEFAULT));
}

RT_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    RT_ENTER();
    // cudaEvent{BlockingSync,DisableTiming,Interprocess} equal CU_EVENT_*.
    return rt_ret_cu(rt_drv.cuEventCreate(event, flags));
}

RT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuEventSynchronize(event));
}

RT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuEventQuery(event)); // NotReady: not recorded
}

RT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuEventDestroy(event));
}

RT_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    RT_ENTER();
    return rt_ret_cu(rt_drv.cuEventElapsedTime(ms, start, end));
}

// --- launches ---------------------------------------------------------------------------
// The real runtime checks the configuration itself and reports
// cudaErrorInvalidConfiguration; the limits are those of every CUDA 13 part
// (1024 threads per block, block z <= 64, grid y/z <= 65535).
static bool rt_config_ok(dim3 g, dim3 b)
{
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z) return false;
    if (g.x > 0x7fffffffu || g.y > 65535u || g.z > 65535u) return false;
    if (b.x > 1024u || b.y > 1024u || b.z > 64u) return false;
    return (uint64_t)b.x * b.y * b.z <= 1024u;
}

cudaError_t rt_launch_func(CUfunction f, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s,
                           bool ptds)
{
    RT_ENTER();
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    if (!rt_config_ok(g, b) || shmem > 0xffffffffu) return rt_ret(cudaErrorInvalidConfiguration);
    CUresult r = RT_PICK(ptds, cuLaunchKernel, cuLaunchKernel_ptsz)(f, g.x, g.y, g.z, b.x, b.y, b.z,
                                                                    (unsigned)shmem, s, args, NULL);
    return rt_ret_cu(r);
}

static cudaError_t rt_launch(const void *func, dim3 g, dim3 b, void **args, size_t shmem,
                             cudaStream_t s, bool ptds)
{
    RT_ENTER();
    return rt_launch_func(rt_kernel_resolve(func), g, b, args, shmem, s, ptds);
}

RT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream)
{
    return rt_launch(func, gridDim, blockDim, args, sharedMem, stream, false);
}

RT_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                            void **args, size_t sharedMem, cudaStream_t stream)
{
    return rt_launch(func, gridDim, blockDim, args, sharedMem, stream, true);
}

static cudaError_t rt_launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args,
                                bool ptds)
{
    RT_ENTER();
    if (!config) return rt_ret(cudaErrorInvalidValue);
    CUfunction f = rt_kernel_resolve(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    if (!rt_config_ok(config->gridDim, config->blockDim) || config->dynamicSmemBytes > 0xffffffffu)
        return rt_ret(cudaErrorInvalidConfiguration);
    CUlaunchConfig c = {
        .gridDimX = config->gridDim.x,
        .gridDimY = config->gridDim.y,
        .gridDimZ = config->gridDim.z,
        .blockDimX = config->blockDim.x,
        .blockDimY = config->blockDim.y,
        .blockDimZ = config->blockDim.z,
        .sharedMemBytes = (unsigned)config->dynamicSmemBytes,
        .hStream = config->stream,
        // Same layout and the same attribute ids (static assert above).
        .attrs = (CUlaunchAttribute *)config->attrs,
        .numAttrs = config->numAttrs,
    };
    return rt_ret_cu(RT_PICK(ptds, cuLaunchKernelEx, cuLaunchKernelEx_ptsz)(&c, f, args, NULL));
}

RT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                          void **args)
{
    return rt_launch_ex(config, func, args, false);
}

RT_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                               void **args)
{
    return rt_launch_ex(config, func, args, true);
}

// --- kernels ------------------------------------------------------------------------------
RT_EXPORT cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset,
                                           size_t *paramSize)
{
    RT_ENTER();
    CUfunction f = rt_kernel_resolve(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return rt_ret_cu(rt_drv.cuFuncGetParamInfo(f, paramIndex, paramOffset, paramSize));
}

RT_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    RT_ENTER();
    if (!name) return rt_ret(cudaErrorInvalidValue);
    CUfunction f = rt_kernel_resolve(func);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    return rt_ret_cu(rt_drv.cuFuncGetName(name, f));
}

RT_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
    RT_ENTER();
    if (!functionPtr) return rt_ret(cudaErrorInvalidValue);
    CUfunction f = rt_kernel_lookup(symbolPtr);
    if (!f) return rt_ret(cudaErrorInvalidDeviceFunction);
    *functionPtr = (cudaFunction_t)f; // cudaFunction_t is CUfunction
    return cudaSuccess;
}

// --- driver entry points ---------------------------------------------------------------------
// Forwarded to the driver's cuGetProcAddress with the caller's version and
// flags, so an interposer on the driver sees the same request. The default
// flag means the calling entry point's own stream semantics: legacy for
// cudaGetDriverEntryPoint, per-thread for its _ptsz twin.
static cudaError_t rt_entry_point(const char *symbol, void **funcPtr, unsigned version,
                                  unsigned long long flags,
                                  enum cudaDriverEntryPointQueryResult *driverStatus, bool ptds)
{
    RT_ENTER();
    if (!symbol || !funcPtr) return rt_ret(cudaErrorInvalidValue);
    if (flags == cudaEnableDefault)
        flags = ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                     : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = rt_drv.cuGetProcAddress(symbol, funcPtr, (int)version, flags, &q);
    // cuda_runtime_api.h: an unknown symbol, or one with no ABI-compatible
    // version for the request, is cudaSuccess with *funcPtr = NULL and the
    // reason in driverStatus (the driver says CUDA_ERROR_NOT_FOUND). Other
    // driver errors (a version newer than the driver: invalid value) stay.
    if (q != CU_GET_PROC_ADDRESS_SUCCESS && (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_FOUND)) {
        *funcPtr = NULL;
        r = CUDA_SUCCESS;
    }
    if (driverStatus) {
        switch (q) {
        case CU_GET_PROC_ADDRESS_SUCCESS:
            *driverStatus = cudaDriverEntryPointSuccess;
            break;
        case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
            *driverStatus = cudaDriverEntryPointVersionNotSufficent;
            break;
        default:
            *driverStatus = cudaDriverEntryPointSymbolNotFound;
            break;
        }
    }
    return rt_ret_cu(r);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                              unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *driverStatus)
{
    // Without a version the runtime asks for its own ABI (12.9 or 13.0).
    return rt_entry_point(symbol, funcPtr, SIMRT_VERSION, flags, driverStatus, false);
}

RT_EXPORT cudaError_t
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_entry_point(symbol, funcPtr, SIMRT_VERSION, flags, driverStatus, true);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, false);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, true);
}
