// SPDX-License-Identifier: MIT
// Internals of the simulated CUDA runtime (libcudart.so.13 look-alike, and
// libcudart.so.12 from the same sources with SIMRT_CUDA12 defined).
//
// Layering as in the real library: the runtime never links the driver. At
// first use it dlopens libcuda.so.1, takes cuGetProcAddress_v2 with dlsym
// (the only symbol it looks up that way) and resolves every other driver entry
// point through it, into one table (rt_drv). Programs that interpose the
// driver's cuGetProcAddress therefore see every call the runtime makes.
#ifndef SIM_RT_H
#define SIM_RT_H

// cuda.h first, with its default (legacy) names, so the driver prototypes
// used for the table's types are the ones any program sees.
#include <cuda.h>

// The runtime defines both the legacy entry points and their _ptsz/_ptds
// twins. With __CUDA_API_VERSION_INTERNAL the header declares the twins
// (its renaming macros expand in the main declarations) and then, after
// #undef-ing the macros, the legacy names too: every definition below is
// checked against a real prototype. cuda.h is already included (include
// guard), so the driver names are not affected.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda_runtime_api.h>
#undef __CUDA_API_VERSION_INTERNAL

#include <stdbool.h>

#include "simgpu.h"

#define RT_EXPORT __attribute__((visibility("default")))

// The runtime's own CUDA version: what cudaRuntimeGetVersion reports, the
// ABI it asks the driver for, and the version cudaGetDriverEntryPoint
// resolves at. These headers are CUDA 13's; the libcudart.so.12 build
// (SIMRT_CUDA12) answers as CUDA 12.9, the last CUDA 12 release, so every
// base name resolves to the ABI a CUDA 12 runtime gets (cuCtxSynchronize
// without a context, not CUDA 13's cuCtxSynchronize_v2).
#ifdef SIMRT_CUDA12
#define SIMRT_VERSION 12090
#else
#define SIMRT_VERSION CUDART_VERSION
#endif

// --- driver entry points -------------------------------------------------------
// X(name): resolved with CU_GET_PROC_ADDRESS_LEGACY_STREAM into field `name`
// (cuda.h's macros turn cuMemAlloc into cuMemAlloc_v2 in the field name and
// the type alike; the string looked up is the base name, as cuGetProcAddress
// wants). P(field, name): the per-thread-default-stream version, looked up
// with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, same prototype.
// S(name): simulator extensions (simgpu.h), same lookup as X.
// clang-format off
#define RT_DRIVER_TABLE(X, P, S)                                                \
    X(cuInit) X(cuDriverGetVersion) X(cuGetProcAddress) X(cuGetErrorName)        \
    X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetUuid)     \
    X(cuDeviceTotalMem) X(cuDeviceGetAttribute)                                  \
    X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxGetCurrent)            \
    X(cuCtxSynchronize)                                                          \
    X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemAllocHost)                 \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemHostRegister)                      \
    X(cuMemHostUnregister) X(cuPointerGetAttribute)                              \
    X(cuMemAllocAsync) X(cuMemFreeAsync)                                         \
    X(cuMemAllocFromPoolAsync) X(cuDeviceGetDefaultMemPool)                     \
    X(cuDeviceGetMemPool) X(cuDeviceSetMemPool) X(cuMemPoolSetAttribute)         \
    X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo)                                  \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD)                              \
    X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)               \
    X(cuMemsetD8) X(cuMemsetD8Async)                                             \
    X(cuMemcpy2D) X(cuMemcpy2DAsync) X(cuMemcpy3D) X(cuMemcpy3DAsync)            \
    X(cuMemcpyPeer) X(cuMemcpyPeerAsync) X(cuMemsetD2D8) X(cuMemsetD2D8Async)    \
    X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamDestroy)           \
    X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent)                 \
    X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuStreamIsCapturing)         \
    X(cuEventCreate) X(cuEventRecord) X(cuEventRecordWithFlags)                  \
    X(cuEventSynchronize) X(cuEventQuery) X(cuEventDestroy)                      \
    X(cuEventElapsedTime)                                                        \
    X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuFuncGetParamInfo) X(cuFuncGetName) \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphDestroy)            \
    X(cuGraphExecDestroy) X(cuGraphInstantiateWithParams) X(cuGraphClone)        \
    P(cuMemAllocAsync_ptsz, cuMemAllocAsync)                                     \
    P(cuMemFreeAsync_ptsz, cuMemFreeAsync)                                       \
    P(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)                     \
    P(cuMemcpyHtoD_ptds, cuMemcpyHtoD) P(cuMemcpyDtoH_ptds, cuMemcpyDtoH)        \
    P(cuMemcpyDtoD_ptds, cuMemcpyDtoD)                                           \
    P(cuMemcpyHtoDAsync_ptsz, cuMemcpyHtoDAsync)                                 \
    P(cuMemcpyDtoHAsync_ptsz, cuMemcpyDtoHAsync)                                 \
    P(cuMemcpyDtoDAsync_ptsz, cuMemcpyDtoDAsync)                                 \
    P(cuMemsetD8_ptds, cuMemsetD8) P(cuMemsetD8Async_ptsz, cuMemsetD8Async)      \
    P(cuMemcpy2D_ptds, cuMemcpy2D) P(cuMemcpy2DAsync_ptsz, cuMemcpy2DAsync)      \
    P(cuMemcpy3D_ptds, cuMemcpy3D) P(cuMemcpy3DAsync_ptsz, cuMemcpy3DAsync)      \
    P(cuMemsetD2D8_ptds, cuMemsetD2D8)                                           \
    P(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async)                                 \
    P(cuStreamSynchronize_ptsz, cuStreamSynchronize)                             \
    P(cuStreamQuery_ptsz, cuStreamQuery)                                         \
    P(cuStreamWaitEvent_ptsz, cuStreamWaitEvent)                                 \
    P(cuStreamBeginCapture_ptsz, cuStreamBeginCapture)                           \
    P(cuStreamEndCapture_ptsz, cuStreamEndCapture)                               \
    P(cuStreamIsCapturing_ptsz, cuStreamIsCapturing)                             \
    P(cuEventRecord_ptsz, cuEventRecord)                                         \
    P(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)                       \
    P(cuLaunchKernel_ptsz, cuLaunchKernel)                                       \
    P(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)                                   \
    P(cuGraphLaunch_ptsz, cuGraphLaunch)                                         \
    P(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams)           \
    S(simKernelCreate) S(simGetStats) S(simResetStats) S(simResetPeak)
// clang-format on

#define RT_FIELD_X(name)        __typeof__(name) *name;
#define RT_FIELD_P(field, name) __typeof__(name) *field;
typedef struct rt_drv_s {
    RT_DRIVER_TABLE(RT_FIELD_X, RT_FIELD_P, RT_FIELD_X)
} rt_drv_t;
#undef RT_FIELD_X
#undef RT_FIELD_P

extern rt_drv_t rt_drv;

// --- start-up, last error, kernels (runtime.c) -------------------------------------
// Process start-up (once) and this thread's current context; the error every
// call returns when it fails (cudaErrorInsufficientDriver without a driver).
cudaError_t rt_enter(void);
// Record e as this thread's last error (never cudaErrorNotReady) and return it.
cudaError_t rt_ret(cudaError_t e);
cudaError_t rt_ret_cu(CUresult r);
// The CUfunction registered for a host symbol, or NULL. Lock-free.
CUfunction rt_kernel_lookup(const void *hostFun);
// The same, and when func is no registered host symbol but a kernel handle
// (cudaKernel_t / CUfunction cast to void *, which the runtime accepts where
// cuda_runtime_api.h says so), that handle. After rt_enter.
CUfunction rt_kernel_resolve(const void *func);
// Bind (f != NULL) or unbind (f == NULL) a host symbol; cudaErrorMemoryAllocation
// when the table is full. Readers stay lock-free (see runtime.c).
cudaError_t rt_kernel_bind(const void *hostFun, CUfunction f);

// --- launches (api.c) ----------------------------------------------------------------
// Launch a kernel handle as cudaLaunchKernel does once it has found it: the
// configuration check, then the legacy or per-thread cuLaunchKernel. f NULL:
// cudaErrorInvalidDeviceFunction. Records the last error.
cudaError_t rt_launch_func(CUfunction f, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s,
                           bool ptds);

// --- errors (errors.c) -------------------------------------------------------------
cudaError_t rt_error_from_cu(CUresult r);

#endif // SIM_RT_H
