// SPDX-License-Identifier: MIT
// The real CUDA entry points, in one table, resolved once at first use.
//
// libaoshim.so links neither libcudart nor libcuda: runtime functions come
// from dlsym(RTLD_NEXT, ...) (the next definition after the shim, i.e. the
// program's own libcudart), driver functions from dlopen("libcuda.so.1") and
// that library's own cuGetProcAddress. So a process that never touches CUDA
// pays nothing, and aoshim's own driver calls never re-enter its hooks.
#ifndef AO_REAL_H
#define AO_REAL_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>

// X(name, return type, parameter list): runtime entry points hooked by aoshim.
// One build serves libcudart.so.12 and .13: every name here has the same
// prototype in CUDA 12.x and 13.0 (the names whose prototypes differ, such
// as cudaMemPrefetchAsync, cudaMemAdvise, cudaStreamGetCaptureInfo and the
// graph edge calls, are not hooked; tests/e2e/test_entry_points.c holds the
// list and fails if one is exported).
#define AO_REAL_RUNTIME(X)                                                                         \
    X(cudaMalloc, cudaError_t, (void **p, size_t n))                                               \
    X(cudaFree, cudaError_t, (void *p))                                                            \
    X(cudaMallocAsync, cudaError_t, (void **p, size_t n, cudaStream_t s))                          \
    X(cudaMallocAsync_ptsz, cudaError_t, (void **p, size_t n, cudaStream_t s))                     \
    X(cudaFreeAsync, cudaError_t, (void *p, cudaStream_t s))                                       \
    X(cudaFreeAsync_ptsz, cudaError_t, (void *p, cudaStream_t s))                                  \
    X(cudaLaunchKernel, cudaError_t,                                                               \
      (const void *f, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s))                    \
    X(cudaLaunchKernel_ptsz, cudaError_t,                                                          \
      (const void *f, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s))                    \
    X(cudaStreamDestroy, cudaError_t, (cudaStream_t s))                                            \
    X(cudaGetFuncBySymbol, cudaError_t, (cudaFunction_t * f, const void *sym))                     \
    X(cudaLaunchKernelExC, cudaError_t, (const cudaLaunchConfig_t *c, const void *f, void **args)) \
    X(cudaLaunchKernelExC_ptsz, cudaError_t,                                                       \
      (const cudaLaunchConfig_t *c, const void *f, void **args))                                   \
    X(__cudaLaunchKernel, cudaError_t,                                                             \
      (cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s))                   \
    X(__cudaLaunchKernel_ptsz, cudaError_t,                                                        \
      (cudaKernel_t k, dim3 g, dim3 b, void **args, size_t shm, cudaStream_t s))                   \
    X(cudaMemcpy, cudaError_t, (void *d, const void *s, size_t n, enum cudaMemcpyKind k))          \
    X(cudaMemcpy_ptds, cudaError_t, (void *d, const void *s, size_t n, enum cudaMemcpyKind k))     \
    X(cudaMemcpyAsync, cudaError_t,                                                                \
      (void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st))                  \
    X(cudaMemcpyAsync_ptsz, cudaError_t,                                                           \
      (void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st))                  \
    X(cudaStreamBeginCapture, cudaError_t, (cudaStream_t s, enum cudaStreamCaptureMode m))         \
    X(cudaStreamBeginCapture_ptsz, cudaError_t, (cudaStream_t s, enum cudaStreamCaptureMode m))    \
    X(cudaStreamEndCapture, cudaError_t, (cudaStream_t s, cudaGraph_t * g))                        \
    X(cudaStreamEndCapture_ptsz, cudaError_t, (cudaStream_t s, cudaGraph_t * g))                   \
    X(cudaGraphInstantiate, cudaError_t,                                                           \
      (cudaGraphExec_t * x, cudaGraph_t g, unsigned long long fl))                                 \
    X(cudaGraphInstantiateWithFlags, cudaError_t,                                                  \
      (cudaGraphExec_t * x, cudaGraph_t g, unsigned long long fl))                                 \
    X(cudaGraphInstantiateWithParams, cudaError_t,                                                 \
      (cudaGraphExec_t * x, cudaGraph_t g, cudaGraphInstantiateParams * p))                        \
    X(cudaGraphInstantiateWithParams_ptsz, cudaError_t,                                            \
      (cudaGraphExec_t * x, cudaGraph_t g, cudaGraphInstantiateParams * p))                        \
    X(cudaGraphExecDestroy, cudaError_t, (cudaGraphExec_t x))                                      \
    X(cudaGraphDestroy, cudaError_t, (cudaGraph_t g))                                              \
    X(cudaGraphClone, cudaError_t, (cudaGraph_t * clone, cudaGraph_t g))                           \
    X(cudaGraphLaunch, cudaError_t, (cudaGraphExec_t x, cudaStream_t s))                           \
    X(cudaGraphLaunch_ptsz, cudaError_t, (cudaGraphExec_t x, cudaStream_t s))                      \
    X(cudaMemset, cudaError_t, (void *d, int v, size_t n))                                         \
    X(cudaMemset_ptds, cudaError_t, (void *d, int v, size_t n))                                    \
    X(cudaMemsetAsync, cudaError_t, (void *d, int v, size_t n, cudaStream_t st))                   \
    X(cudaMemsetAsync_ptsz, cudaError_t, (void *d, int v, size_t n, cudaStream_t st))              \
    X(cudaMemcpy2D, cudaError_t,                                                                   \
      (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k))   \
    X(cudaMemcpy2D_ptds, cudaError_t,                                                              \
      (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k))   \
    X(cudaMemcpy2DAsync, cudaError_t,                                                              \
      (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k,    \
       cudaStream_t st))                                                                           \
    X(cudaMemcpy2DAsync_ptsz, cudaError_t,                                                         \
      (void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k,    \
       cudaStream_t st))                                                                           \
    X(cudaMemcpy3D, cudaError_t, (const struct cudaMemcpy3DParms *p))                              \
    X(cudaMemcpy3D_ptds, cudaError_t, (const struct cudaMemcpy3DParms *p))                         \
    X(cudaMemcpy3DAsync, cudaError_t, (const struct cudaMemcpy3DParms *p, cudaStream_t st))        \
    X(cudaMemcpy3DAsync_ptsz, cudaError_t, (const struct cudaMemcpy3DParms *p, cudaStream_t st))   \
    X(cudaMemcpyPeer, cudaError_t, (void *d, int dd, const void *s, int sd, size_t n))             \
    X(cudaMemcpyPeerAsync, cudaError_t,                                                            \
      (void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st))                         \
    X(cudaMemset2D, cudaError_t, (void *d, size_t p, int v, size_t w, size_t h))                   \
    X(cudaMemset2D_ptds, cudaError_t, (void *d, size_t p, int v, size_t w, size_t h))              \
    X(cudaMemset2DAsync, cudaError_t, (void *d, size_t p, int v, size_t w, size_t h, cudaStream_t st)) \
    X(cudaMemset2DAsync_ptsz, cudaError_t,                                                         \
      (void *d, size_t p, int v, size_t w, size_t h, cudaStream_t st))                             \
    X(cudaMemset3D, cudaError_t, (struct cudaPitchedPtr p, int v, struct cudaExtent e))            \
    X(cudaMemset3D_ptds, cudaError_t, (struct cudaPitchedPtr p, int v, struct cudaExtent e))       \
    X(cudaMemset3DAsync, cudaError_t,                                                              \
      (struct cudaPitchedPtr p, int v, struct cudaExtent e, cudaStream_t st))                      \
    X(cudaMemset3DAsync_ptsz, cudaError_t,                                                         \
      (struct cudaPitchedPtr p, int v, struct cudaExtent e, cudaStream_t st))                      \
    X(cudaGetDriverEntryPoint, cudaError_t,                                                        \
      (const char *sym, void **fn, unsigned long long flags,                                       \
       enum cudaDriverEntryPointQueryResult *st))                                                  \
    X(cudaGetDriverEntryPoint_ptsz, cudaError_t,                                                   \
      (const char *sym, void **fn, unsigned long long flags,                                       \
       enum cudaDriverEntryPointQueryResult *st))                                                  \
    X(cudaGetDriverEntryPointByVersion, cudaError_t,                                               \
      (const char *sym, void **fn, unsigned int ver, unsigned long long flags,                     \
       enum cudaDriverEntryPointQueryResult *st))                                                  \
    X(cudaGetDriverEntryPointByVersion_ptsz, cudaError_t,                                          \
      (const char *sym, void **fn, unsigned int ver, unsigned long long flags,                     \
       enum cudaDriverEntryPointQueryResult *st))                                                  \
    /* called, not hooked: which CUDA the program's runtime is (12 or 13) */                       \
    X(cudaRuntimeGetVersion, cudaError_t, (int *v))

// X(field, name looked up, version introduced, flags, return type, parameter
// list): driver entry points, both those aoshim calls and those it wraps.
// Each is asked for at the headers' CUDA_VERSION, so the newest ABI of the
// name comes back (cuMemAlloc -> cuMemAlloc_v2).
#define AO_REAL_DRIVER(X)                                                                          \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0, CUresult,                                 \
      (const char *s, void **p, int v, cuuint64_t f, CUdriverProcAddressQueryResult *r))           \
    X(cuInit, "cuInit", 2000, 0, CUresult, (unsigned fl))                                          \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", 4000, 0, CUresult, (CUcontext * c))                      \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0, CUresult, (CUcontext c))                        \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0, CUresult,                     \
      (CUcontext * c, CUdevice d))                                                                 \
    X(cuCtxGetDevice, "cuCtxGetDevice", 2000, 0, CUresult, (CUdevice * d))                         \
    X(cuDeviceGetName, "cuDeviceGetName", 2000, 0, CUresult, (char *n, int len, CUdevice d))       \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0, CUresult, (size_t * b, CUdevice d))        \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0, CUresult, (CUdeviceptr * p, size_t n))                 \
    X(cuMemFree_v2, "cuMemFree", 3020, 0, CUresult, (CUdeviceptr p))                               \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 1, CUresult,                                      \
      (CUdeviceptr * p, size_t n, CUstream s))                                                     \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 2, CUresult,                                 \
      (CUdeviceptr * p, size_t n, CUstream s))                                                     \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 1, CUresult, (CUdeviceptr p, CUstream s))           \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 2, CUresult, (CUdeviceptr p, CUstream s))      \
    X(cuMemAddressReserve, "cuMemAddressReserve", 10020, 0, CUresult,                              \
      (CUdeviceptr * p, size_t n, size_t align, CUdeviceptr addr, unsigned long long fl))          \
    X(cuMemAddressFree, "cuMemAddressFree", 10020, 0, CUresult, (CUdeviceptr p, size_t n))         \
    X(cuMemCreate, "cuMemCreate", 10020, 0, CUresult,                                              \
      (CUmemGenericAllocationHandle * h, size_t n, const CUmemAllocationProp *prop,                \
       unsigned long long fl))                                                                     \
    X(cuMemRelease, "cuMemRelease", 10020, 0, CUresult, (CUmemGenericAllocationHandle h))          \
    X(cuMemMap, "cuMemMap", 10020, 0, CUresult,                                                    \
      (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,                        \
       unsigned long long fl))                                                                     \
    X(cuMemUnmap, "cuMemUnmap", 10020, 0, CUresult, (CUdeviceptr p, size_t n))                     \
    X(cuMemSetAccess, "cuMemSetAccess", 10020, 0, CUresult,                                        \
      (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count))                           \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020, 0, CUresult,          \
      (size_t * g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags o))           \
    X(cuMemHostAlloc, "cuMemHostAlloc", 2020, 0, CUresult, (void **p, size_t n, unsigned fl))      \
    X(cuMemFreeHost, "cuMemFreeHost", 2000, 0, CUresult, (void *p))                                \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0, CUresult, (size_t * fr, size_t * total))           \
    X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", 3020, 1, CUresult,                                \
      (void *dst, CUdeviceptr src, size_t n, CUstream s))                                          \
    X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", 3020, 1, CUresult,                                \
      (CUdeviceptr dst, const void *src, size_t n, CUstream s))                                    \
    X(cuStreamCreate, "cuStreamCreate", 2000, 0, CUresult, (CUstream * s, unsigned fl))            \
    X(cuStreamSynchronize, "cuStreamSynchronize", 2000, 1, CUresult, (CUstream s))                 \
    X(cuStreamGetFlags, "cuStreamGetFlags", 2000, 1, CUresult, (CUstream s, unsigned *fl))         \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, 1, CUresult,                                   \
      (CUstream s, CUevent e, unsigned fl))                                                        \
    X(cuStreamIsCapturing, "cuStreamIsCapturing", 10000, 1, CUresult,                              \
      (CUstream s, CUstreamCaptureStatus * st))                                                    \
    X(cuLaunchKernel, "cuLaunchKernel", 4000, 1, CUresult,                                         \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
       unsigned shm, CUstream s, void **params, void **extra))                                     \
    X(cuLaunchKernel_ptsz, "cuLaunchKernel", 4000, 2, CUresult,                                    \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
       unsigned shm, CUstream s, void **params, void **extra))                                     \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 1, CUresult,                                    \
      (const CUlaunchConfig *c, CUfunction f, void **params, void **extra))                        \
    X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, 2, CUresult,                               \
      (const CUlaunchConfig *c, CUfunction f, void **params, void **extra))                        \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD", 3020, 1, CUresult,                                          \
      (CUdeviceptr d, const void *s, size_t n))                                                    \
    X(cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", 3020, 2, CUresult,                                     \
      (CUdeviceptr d, const void *s, size_t n))                                                    \
    X(cuMemcpyDtoH_v2, "cuMemcpyDtoH", 3020, 1, CUresult, (void *d, CUdeviceptr s, size_t n))      \
    X(cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH", 3020, 2, CUresult, (void *d, CUdeviceptr s, size_t n)) \
    X(cuMemcpyDtoD_v2, "cuMemcpyDtoD", 3020, 1, CUresult,                                          \
      (CUdeviceptr d, CUdeviceptr s, size_t n))                                                    \
    X(cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD", 3020, 2, CUresult,                                     \
      (CUdeviceptr d, CUdeviceptr s, size_t n))                                                    \
    X(cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync", 3020, 2, CUresult,                           \
      (CUdeviceptr d, const void *s, size_t n, CUstream st))                                       \
    X(cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync", 3020, 2, CUresult,                           \
      (void *d, CUdeviceptr s, size_t n, CUstream st))                                             \
    X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync", 3020, 1, CUresult,                                \
      (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st))                                       \
    X(cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync", 3020, 2, CUresult,                           \
      (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st))                                       \
    X(cuMemcpy, "cuMemcpy", 4000, 1, CUresult, (CUdeviceptr d, CUdeviceptr s, size_t n))           \
    X(cuMemcpy_ptds, "cuMemcpy", 4000, 2, CUresult, (CUdeviceptr d, CUdeviceptr s, size_t n))      \
    X(cuMemcpyAsync, "cuMemcpyAsync", 4000, 1, CUresult,                                           \
      (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st))                                       \
    X(cuMemcpyAsync_ptsz, "cuMemcpyAsync", 4000, 2, CUresult,                                      \
      (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st))                                       \
    X(cuMemsetD8_v2, "cuMemsetD8", 3020, 1, CUresult, (CUdeviceptr d, unsigned char v, size_t n))  \
    X(cuMemsetD8_v2_ptds, "cuMemsetD8", 3020, 2, CUresult,                                         \
      (CUdeviceptr d, unsigned char v, size_t n))                                                  \
    X(cuMemsetD32_v2, "cuMemsetD32", 3020, 1, CUresult, (CUdeviceptr d, unsigned v, size_t n))     \
    X(cuMemsetD32_v2_ptds, "cuMemsetD32", 3020, 2, CUresult,                                       \
      (CUdeviceptr d, unsigned v, size_t n))                                                       \
    X(cuMemsetD8Async, "cuMemsetD8Async", 3020, 1, CUresult,                                       \
      (CUdeviceptr d, unsigned char v, size_t n, CUstream st))                                     \
    X(cuMemsetD8Async_ptsz, "cuMemsetD8Async", 3020, 2, CUresult,                                  \
      (CUdeviceptr d, unsigned char v, size_t n, CUstream st))                                     \
    X(cuMemsetD32Async, "cuMemsetD32Async", 3020, 1, CUresult,                                     \
      (CUdeviceptr d, unsigned v, size_t n, CUstream st))                                          \
    X(cuMemsetD32Async_ptsz, "cuMemsetD32Async", 3020, 2, CUresult,                                \
      (CUdeviceptr d, unsigned v, size_t n, CUstream st))                                          \
    X(cuMemcpy2D_v2, "cuMemcpy2D", 3020, 1, CUresult, (const CUDA_MEMCPY2D *p))                    \
    X(cuMemcpy2D_v2_ptds, "cuMemcpy2D", 3020, 2, CUresult, (const CUDA_MEMCPY2D *p))               \
    X(cuMemcpy2DUnaligned_v2, "cuMemcpy2DUnaligned", 3020, 1, CUresult, (const CUDA_MEMCPY2D *p))  \
    X(cuMemcpy2DUnaligned_v2_ptds, "cuMemcpy2DUnaligned", 3020, 2, CUresult,                       \
      (const CUDA_MEMCPY2D *p))                                                                    \
    X(cuMemcpy3D_v2, "cuMemcpy3D", 3020, 1, CUresult, (const CUDA_MEMCPY3D *p))                    \
    X(cuMemcpy3D_v2_ptds, "cuMemcpy3D", 3020, 2, CUresult, (const CUDA_MEMCPY3D *p))               \
    X(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync", 3020, 1, CUresult,                                    \
      (const CUDA_MEMCPY2D *p, CUstream st))                                                       \
    X(cuMemcpy2DAsync_v2_ptsz, "cuMemcpy2DAsync", 3020, 2, CUresult,                               \
      (const CUDA_MEMCPY2D *p, CUstream st))                                                       \
    X(cuMemcpy3DAsync_v2, "cuMemcpy3DAsync", 3020, 1, CUresult,                                    \
      (const CUDA_MEMCPY3D *p, CUstream st))                                                       \
    X(cuMemcpy3DAsync_v2_ptsz, "cuMemcpy3DAsync", 3020, 2, CUresult,                               \
      (const CUDA_MEMCPY3D *p, CUstream st))                                                       \
    X(cuMemcpyPeer, "cuMemcpyPeer", 4000, 1, CUresult,                                             \
      (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n))                        \
    X(cuMemcpyPeer_ptds, "cuMemcpyPeer", 4000, 2, CUresult,                                        \
      (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n))                        \
    X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 4000, 1, CUresult,                                   \
      (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st))           \
    X(cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync", 4000, 2, CUresult,                              \
      (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st))           \
    X(cuMemsetD16_v2, "cuMemsetD16", 3020, 1, CUresult,                                            \
      (CUdeviceptr d, unsigned short v, size_t n))                                                 \
    X(cuMemsetD16_v2_ptds, "cuMemsetD16", 3020, 2, CUresult,                                       \
      (CUdeviceptr d, unsigned short v, size_t n))                                                 \
    X(cuMemsetD16Async, "cuMemsetD16Async", 3020, 1, CUresult,                                     \
      (CUdeviceptr d, unsigned short v, size_t n, CUstream st))                                    \
    X(cuMemsetD16Async_ptsz, "cuMemsetD16Async", 3020, 2, CUresult,                                \
      (CUdeviceptr d, unsigned short v, size_t n, CUstream st))                                    \
    X(cuMemsetD2D8_v2, "cuMemsetD2D8", 3020, 1, CUresult,                                          \
      (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h))                              \
    X(cuMemsetD2D8_v2_ptds, "cuMemsetD2D8", 3020, 2, CUresult,                                     \
      (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h))                              \
    X(cuMemsetD2D8Async, "cuMemsetD2D8Async", 3020, 1, CUresult,                                   \
      (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st))                 \
    X(cuMemsetD2D8Async_ptsz, "cuMemsetD2D8Async", 3020, 2, CUresult,                              \
      (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st))                 \
    X(cuMemsetD2D16_v2, "cuMemsetD2D16", 3020, 1, CUresult,                                        \
      (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h))                             \
    X(cuMemsetD2D16_v2_ptds, "cuMemsetD2D16", 3020, 2, CUresult,                                   \
      (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h))                             \
    X(cuMemsetD2D16Async, "cuMemsetD2D16Async", 3020, 1, CUresult,                                 \
      (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream st))                \
    X(cuMemsetD2D16Async_ptsz, "cuMemsetD2D16Async", 3020, 2, CUresult,                            \
      (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream st))                \
    X(cuMemsetD2D32_v2, "cuMemsetD2D32", 3020, 1, CUresult,                                        \
      (CUdeviceptr d, size_t p, unsigned v, size_t w, size_t h))                                   \
    X(cuMemsetD2D32_v2_ptds, "cuMemsetD2D32", 3020, 2, CUresult,                                   \
      (CUdeviceptr d, size_t p, unsigned v, size_t w, size_t h))                                   \
    X(cuMemsetD2D32Async, "cuMemsetD2D32Async", 3020, 1, CUresult,                                 \
      (CUdeviceptr d, size_t p, unsigned v, size_t w, size_t h, CUstream st))                      \
    X(cuMemsetD2D32Async_ptsz, "cuMemsetD2D32Async", 3020, 2, CUresult,                            \
      (CUdeviceptr d, size_t p, unsigned v, size_t w, size_t h, CUstream st))                      \
    X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, 1, CUresult,                         \
      (CUstream s, CUstreamCaptureMode m))                                                         \
    X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, 2, CUresult,                    \
      (CUstream s, CUstreamCaptureMode m))                                                         \
    X(cuStreamEndCapture, "cuStreamEndCapture", 10000, 1, CUresult, (CUstream s, CUgraph * g))     \
    X(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, 2, CUresult,                           \
      (CUstream s, CUgraph * g))                                                                   \
    X(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo", 12030, 1, CUresult,                     \
      (CUstream s, CUstreamCaptureStatus * st, cuuint64_t * id, CUgraph * g,                       \
       const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n))                        \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, 0, CUresult,              \
      (CUgraphExec * x, CUgraph g, unsigned long long fl))                                         \
    X(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, 1, CUresult,            \
      (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS * p))                             \
    X(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams", 12000, 2, CUresult,       \
      (CUgraphExec * x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS * p))                             \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", 10000, 0, CUresult, (CUgraphExec x))               \
    X(cuGraphDestroy, "cuGraphDestroy", 10000, 0, CUresult, (CUgraph g))                           \
    X(cuGraphClone, "cuGraphClone", 10000, 0, CUresult, (CUgraph * clone, CUgraph g))              \
    X(cuGraphLaunch, "cuGraphLaunch", 10000, 1, CUresult, (CUgraphExec x, CUstream s))             \
    X(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, 2, CUresult, (CUgraphExec x, CUstream s))        \
    X(cuFuncGetParamInfo, "cuFuncGetParamInfo", 12040, 0, CUresult,                                \
      (CUfunction f, size_t i, size_t * off, size_t * size))                                       \
    X(cuKernelGetParamInfo, "cuKernelGetParamInfo", 12040, 0, CUresult,                            \
      (CUkernel k, size_t i, size_t * off, size_t * size))                                         \
    X(cuFuncGetName, "cuFuncGetName", 12030, 0, CUresult, (const char **n, CUfunction f))          \
    X(cuKernelGetName, "cuKernelGetName", 12030, 0, CUresult, (const char **n, CUkernel k))        \
    X(cuEventCreate, "cuEventCreate", 2000, 0, CUresult, (CUevent * e, unsigned fl))               \
    X(cuEventDestroy_v2, "cuEventDestroy", 4000, 0, CUresult, (CUevent e))                         \
    X(cuEventRecord, "cuEventRecord", 2000, 1, CUresult, (CUevent e, CUstream s))                  \
    X(cuEventQuery, "cuEventQuery", 2000, 0, CUresult, (CUevent e))                                \
    X(cuEventSynchronize, "cuEventSynchronize", 2000, 0, CUresult, (CUevent e))                    \
    X(cuEventElapsedTime_v2, "cuEventElapsedTime", 12080, 0, CUresult,                             \
      (float *ms, CUevent a, CUevent b))                                                           \
    /* the step trace's record-only wrappers (hook/record.c) and its names */                      \
    X(cuEventRecord_ptsz, "cuEventRecord", 2000, 2, CUresult, (CUevent e, CUstream s))             \
    X(cuEventRecordWithFlags, "cuEventRecordWithFlags", 11010, 1, CUresult,                        \
      (CUevent e, CUstream s, unsigned fl))                                                        \
    X(cuEventRecordWithFlags_ptsz, "cuEventRecordWithFlags", 11010, 2, CUresult,                   \
      (CUevent e, CUstream s, unsigned fl))                                                        \
    X(cuStreamWaitEvent_ptsz, "cuStreamWaitEvent", 3020, 2, CUresult,                              \
      (CUstream s, CUevent e, unsigned fl))                                                        \
    X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 2000, 2, CUresult, (CUstream s))            \
    X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050, 0, CUresult,                 \
      (CUstream * s, unsigned fl, int prio))                                                       \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020, 0, CUresult,                          \
      (CUmemoryPool p, CUmemPool_attribute a, void *v))                                            \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, 0, CUresult, (CUmemoryPool p, size_t keep))       \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0, CUresult,                  \
      (CUmemoryPool * p, CUdevice d))                                                              \
    X(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, 0, CUresult,                                \
      (CUmemoryPool * p, CUdevice d))                                                              \
    /* the program's pool as the driver counts it (offload/auto.c; optional: without them its */   \
    /* unused reserve is taken for 0). Read only: the _HIGH marks are PyTorch's to reset */        \
    X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 11020, 0, CUresult,                          \
      (CUmemoryPool p, CUmemPool_attribute a, void *v))                                            \
    /* at exit (ao_engine_shutdown) */                                                             \
    X(cuStreamDestroy_v2, "cuStreamDestroy", 4000, 0, CUresult, (CUstream s))                      \
    X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 7000, 0, CUresult,                 \
      (CUdevice d, unsigned *fl, int *active))

typedef struct ao_real_s {
#define X(name, ret, params) ret(*name) params;
    AO_REAL_RUNTIME(X)
#undef X
#define X(field, sym, ver, flags, ret, params) ret(*field) params;
    AO_REAL_DRIVER(X)
#undef X
    // The 4-argument cuGetProcAddress of CUDA 11.3, for callers that ask for it.
    CUresult (*cuGetProcAddress_v1)(const char *s, void **p, int v, cuuint64_t f);
    // The CUDA 10.0 and 11.0 ABIs of cuGraphInstantiate (error node and log
    // buffer; from CUDA 12 the name is cuGraphInstantiateWithFlags): asked
    // for by version, NULL where the driver has none.
    CUresult (*cuGraphInstantiate_v1)(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log,
                                      size_t n);
    CUresult (*cuGraphInstantiate_v2)(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log,
                                      size_t n);
    // The argument-less cuCtxSynchronize (at CUDA_VERSION 13000 the name is
    // cuCtxSynchronize_v2, which takes a context): asked for by version.
    CUresult (*cuCtxSynchronize)(void);
    // CUDA 13's, NULL on an older driver (the step trace's wrapper of it).
    CUresult (*cuCtxSynchronize_v2)(CUcontext c);
} ao_real_t;

extern ao_real_t ao_real;

// Runtime functions: resolved at load (dlsym is cheap and touches no GPU).
void ao_real_runtime_init(void);
// The program's runtime's CUDA version (cudaRuntimeGetVersion: 12090 for
// CUDA 12.9), asked once; 0 when there is no runtime or it will not say.
int ao_real_runtime_version(void);
// The real dlsym, for aoshim's own lookups on a handle (aoshim's dlsym
// would hand aoshim its own wrappers); it is found with dlvsym, which aoshim
// does not interpose (real.c says why nothing else may run there).
void *ao_dlsym_real(void *handle, const char *name);
void *ao_dlsym_init(void); // the real dlsym's address
extern void *(*ao_real_dlsym)(void *, const char *);

// Driver functions: dlopen("libcuda.so.1") and cuGetProcAddress, once, on
// first need. Returns false (and warns once) when no driver can be loaded:
// aoshim then stays a pass-through.
bool ao_real_driver(void);

#endif // AO_REAL_H
