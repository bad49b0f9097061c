// SPDX-License-Identifier: MIT
// cuGetProcAddress: the driver's entry-point table. The real runtime looks up
// ~440 driver entry points this way at start, and libraries with a static
// runtime (cuBLAS, cuDNN, NCCL) reach the driver only through it, so the
// table covers every name of cudaTypedefs.h, keyed by (name, version) as in
// the real driver: the caller's CUDA version picks the newest ABI of a name
// that is not newer than it, and the flags pick the per-thread-default-stream
// twin (_ptsz / _ptds) where one exists.
//
// Entries are resolved with dlsym on this library's own handle, not by
// symbol references: a reference to an exported function goes through the
// GOT and binds to an LD_PRELOADed definition of the same name (aoshim's
// hook), which would then be handed back to aoshim as "the real function"
// and recurse. The real driver never returns an interposer either.
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; the v1 entry point
// (4 arguments, CUDA 11.3) is a distinct exported symbol.
#undef cuGetProcAddress

// Generated from cudaTypedefs.h: PFN_<name>_v<version> gives the version at
// which each exported symbol appeared; the n-th version of a name is
// exported as <name>_v<n> (the first as <name>), its per-thread twin as
// <symbol>_ptsz / _ptds. Symbols this simulator does not export resolve to
// NULL at run time and are "not found".
#define SIM_PROC_ENTRIES(X)                                                                        \
    X("cuArray3DCreate", 2000, "cuArray3DCreate", NULL, 0)                                         \
    X("cuArray3DCreate", 3020, "cuArray3DCreate_v2", NULL, 0)                                      \
    X("cuArray3DGetDescriptor", 2000, "cuArray3DGetDescriptor", NULL, 0)                           \
    X("cuArray3DGetDescriptor", 3020, "cuArray3DGetDescriptor_v2", NULL, 0)                        \
    X("cuArrayCreate", 2000, "cuArrayCreate", NULL, 0)                                             \
    X("cuArrayCreate", 3020, "cuArrayCreate_v2", NULL, 0)                                          \
    X("cuArrayDestroy", 2000, "cuArrayDestroy", NULL, 0)                                           \
    X("cuArrayGetDescriptor", 2000, "cuArrayGetDescriptor", NULL, 0)                               \
    X("cuArrayGetDescriptor", 3020, "cuArrayGetDescriptor_v2", NULL, 0)                            \
    X("cuArrayGetMemoryRequirements", 11060, "cuArrayGetMemoryRequirements", NULL, 0)              \
    X("cuArrayGetPlane", 11020, "cuArrayGetPlane", NULL, 0)                                        \
    X("cuArrayGetSparseProperties", 11010, "cuArrayGetSparseProperties", NULL, 0)                  \
    X("cuCheckpointProcessCheckpoint", 12080, "cuCheckpointProcessCheckpoint", NULL, 0)            \
    X("cuCheckpointProcessGetRestoreThreadId", 12080, "cuCheckpointProcessGetRestoreThreadId",     \
      NULL, 0)                                                                                     \
    X("cuCheckpointProcessGetState", 12080, "cuCheckpointProcessGetState", NULL, 0)                \
    X("cuCheckpointProcessLock", 12080, "cuCheckpointProcessLock", NULL, 0)                        \
    X("cuCheckpointProcessRestore", 12080, "cuCheckpointProcessRestore", NULL, 0)                  \
    X("cuCheckpointProcessUnlock", 12080, "cuCheckpointProcessUnlock", NULL, 0)                    \
    X("cuCtxAttach", 2000, "cuCtxAttach", NULL, 0)                                                 \
    X("cuCtxCreate", 2000, "cuCtxCreate", NULL, 0)                                                 \
    X("cuCtxCreate", 3020, "cuCtxCreate_v2", NULL, 0)                                              \
    X("cuCtxCreate", 11040, "cuCtxCreate_v3", NULL, 0)                                             \
    X("cuCtxCreate", 12050, "cuCtxCreate_v4", NULL, 0)                                             \
    X("cuCtxDestroy", 2000, "cuCtxDestroy", NULL, 0)                                               \
    X("cuCtxDestroy", 4000, "cuCtxDestroy_v2", NULL, 0)                                            \
    X("cuCtxDetach", 2000, "cuCtxDetach", NULL, 0)                                                 \
    X("cuCtxDisablePeerAccess", 4000, "cuCtxDisablePeerAccess", NULL, 0)                           \
    X("cuCtxEnablePeerAccess", 4000, "cuCtxEnablePeerAccess", NULL, 0)                             \
    X("cuCtxGetApiVersion", 3020, "cuCtxGetApiVersion", NULL, 0)                                   \
    X("cuCtxGetCacheConfig", 3020, "cuCtxGetCacheConfig", NULL, 0)                                 \
    X("cuCtxGetCurrent", 4000, "cuCtxGetCurrent", NULL, 0)                                         \
    X("cuCtxGetDevice", 2000, "cuCtxGetDevice", NULL, 0)                                           \
    X("cuCtxGetDevice", 13000, "cuCtxGetDevice_v2", NULL, 0)                                       \
    X("cuCtxGetExecAffinity", 11040, "cuCtxGetExecAffinity", NULL, 0)                              \
    X("cuCtxGetFlags", 7000, "cuCtxGetFlags", NULL, 0)                                             \
    X("cuCtxGetId", 12000, "cuCtxGetId", NULL, 0)                                                  \
    X("cuCtxGetLimit", 3010, "cuCtxGetLimit", NULL, 0)                                             \
    X("cuCtxGetSharedMemConfig", 4020, "cuCtxGetSharedMemConfig", NULL, 0)                         \
    X("cuCtxGetStreamPriorityRange", 5050, "cuCtxGetStreamPriorityRange", NULL, 0)                 \
    X("cuCtxPopCurrent", 2000, "cuCtxPopCurrent", NULL, 0)                                         \
    X("cuCtxPopCurrent", 4000, "cuCtxPopCurrent_v2", NULL, 0)                                      \
    X("cuCtxPushCurrent", 2000, "cuCtxPushCurrent", NULL, 0)                                       \
    X("cuCtxPushCurrent", 4000, "cuCtxPushCurrent_v2", NULL, 0)                                    \
    X("cuCtxResetPersistingL2Cache", 11000, "cuCtxResetPersistingL2Cache", NULL, 0)                \
    X("cuCtxSetCacheConfig", 3020, "cuCtxSetCacheConfig", NULL, 0)                                 \
    X("cuCtxSetCurrent", 4000, "cuCtxSetCurrent", NULL, 0)                                         \
    X("cuCtxSetFlags", 12010, "cuCtxSetFlags", NULL, 0)                                            \
    X("cuCtxSetLimit", 3010, "cuCtxSetLimit", NULL, 0)                                             \
    X("cuCtxSetSharedMemConfig", 4020, "cuCtxSetSharedMemConfig", NULL, 0)                         \
    X("cuCtxSynchronize", 2000, "cuCtxSynchronize", NULL, 0)                                       \
    X("cuCtxSynchronize", 13000, "cuCtxSynchronize_v2", NULL, 0)                                   \
    X("cuDestroyExternalMemory", 10000, "cuDestroyExternalMemory", NULL, 0)                        \
    X("cuDestroyExternalSemaphore", 10000, "cuDestroyExternalSemaphore", NULL, 0)                  \
    X("cuDeviceCanAccessPeer", 4000, "cuDeviceCanAccessPeer", NULL, 0)                             \
    X("cuDeviceComputeCapability", 2000, "cuDeviceComputeCapability", NULL, 0)                     \
    X("cuDeviceGet", 2000, "cuDeviceGet", NULL, 0)                                                 \
    X("cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", NULL, 0)                               \
    X("cuDeviceGetByPCIBusId", 4010, "cuDeviceGetByPCIBusId", NULL, 0)                             \
    X("cuDeviceGetCount", 2000, "cuDeviceGetCount", NULL, 0)                                       \
    X("cuDeviceGetDefaultMemPool", 11020, "cuDeviceGetDefaultMemPool", NULL, 0)                    \
    X("cuDeviceGetExecAffinitySupport", 11040, "cuDeviceGetExecAffinitySupport", NULL, 0)          \
    X("cuDeviceGetGraphMemAttribute", 11040, "cuDeviceGetGraphMemAttribute", NULL, 0)              \
    X("cuDeviceGetHostAtomicCapabilities", 13000, "cuDeviceGetHostAtomicCapabilities", NULL, 0)    \
    X("cuDeviceGetLuid", 10000, "cuDeviceGetLuid", NULL, 0)                                        \
    X("cuDeviceGetMemPool", 11020, "cuDeviceGetMemPool", NULL, 0)                                  \
    X("cuDeviceGetName", 2000, "cuDeviceGetName", NULL, 0)                                         \
    X("cuDeviceGetNvSciSyncAttributes", 10020, "cuDeviceGetNvSciSyncAttributes", NULL, 0)          \
    X("cuDeviceGetP2PAtomicCapabilities", 13000, "cuDeviceGetP2PAtomicCapabilities", NULL, 0)      \
    X("cuDeviceGetP2PAttribute", 8000, "cuDeviceGetP2PAttribute", NULL, 0)                         \
    X("cuDeviceGetPCIBusId", 4010, "cuDeviceGetPCIBusId", NULL, 0)                                 \
    X("cuDeviceGetProperties", 2000, "cuDeviceGetProperties", NULL, 0)                             \
    X("cuDeviceGetTexture1DLinearMaxWidth", 11010, "cuDeviceGetTexture1DLinearMaxWidth", NULL, 0)  \
    X("cuDeviceGetUuid", 9020, "cuDeviceGetUuid", NULL, 0)                                         \
    X("cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", NULL, 0)                                     \
    X("cuDeviceGraphMemTrim", 11040, "cuDeviceGraphMemTrim", NULL, 0)                              \
    X("cuDevicePrimaryCtxGetState", 7000, "cuDevicePrimaryCtxGetState", NULL, 0)                   \
    X("cuDevicePrimaryCtxRelease", 7000, "cuDevicePrimaryCtxRelease", NULL, 0)                     \
    X("cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", NULL, 0)                 \
    X("cuDevicePrimaryCtxReset", 7000, "cuDevicePrimaryCtxReset", NULL, 0)                         \
    X("cuDevicePrimaryCtxReset", 11000, "cuDevicePrimaryCtxReset_v2", NULL, 0)                     \
    X("cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", NULL, 0)                       \
    X("cuDevicePrimaryCtxSetFlags", 7000, "cuDevicePrimaryCtxSetFlags", NULL, 0)                   \
    X("cuDevicePrimaryCtxSetFlags", 11000, "cuDevicePrimaryCtxSetFlags_v2", NULL, 0)               \
    X("cuDeviceSetGraphMemAttribute", 11040, "cuDeviceSetGraphMemAttribute", NULL, 0)              \
    X("cuDeviceSetMemPool", 11020, "cuDeviceSetMemPool", NULL, 0)                                  \
    X("cuDeviceTotalMem", 2000, "cuDeviceTotalMem", NULL, 0)                                       \
    X("cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", NULL, 0)                                    \
    X("cuDriverGetVersion", 2020, "cuDriverGetVersion", NULL, 0)                                   \
    X("cuEventCreate", 2000, "cuEventCreate", NULL, 0)                                             \
    X("cuEventDestroy", 2000, "cuEventDestroy", NULL, 0)                                           \
    X("cuEventDestroy", 4000, "cuEventDestroy_v2", NULL, 0)                                        \
    X("cuEventElapsedTime", 2000, "cuEventElapsedTime", NULL, 0)                                   \
    X("cuEventElapsedTime", 12080, "cuEventElapsedTime_v2", NULL, 0)                               \
    X("cuEventQuery", 2000, "cuEventQuery", NULL, 0)                                               \
    X("cuEventRecord", 2000, "cuEventRecord", "cuEventRecord_ptsz", 7000)                          \
    X("cuEventRecordWithFlags", 11010, "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz",    \
      11010)                                                                                       \
    X("cuEventSynchronize", 2000, "cuEventSynchronize", NULL, 0)                                   \
    X("cuExternalMemoryGetMappedBuffer", 10000, "cuExternalMemoryGetMappedBuffer", NULL, 0)        \
    X("cuExternalMemoryGetMappedMipmappedArray", 10000, "cuExternalMemoryGetMappedMipmappedArray", \
      NULL, 0)                                                                                     \
    X("cuFlushGPUDirectRDMAWrites", 11030, "cuFlushGPUDirectRDMAWrites", NULL, 0)                  \
    X("cuFuncGetAttribute", 2020, "cuFuncGetAttribute", NULL, 0)                                   \
    X("cuFuncGetModule", 11000, "cuFuncGetModule", NULL, 0)                                        \
    X("cuFuncGetName", 12030, "cuFuncGetName", NULL, 0)                                            \
    X("cuFuncGetParamInfo", 12040, "cuFuncGetParamInfo", NULL, 0)                                  \
    X("cuFuncIsLoaded", 12040, "cuFuncIsLoaded", NULL, 0)                                          \
    X("cuFuncLoad", 12040, "cuFuncLoad", NULL, 0)                                                  \
    X("cuFuncSetAttribute", 9000, "cuFuncSetAttribute", NULL, 0)                                   \
    X("cuFuncSetBlockShape", 2000, "cuFuncSetBlockShape", NULL, 0)                                 \
    X("cuFuncSetCacheConfig", 3000, "cuFuncSetCacheConfig", NULL, 0)                               \
    X("cuFuncSetSharedMemConfig", 4020, "cuFuncSetSharedMemConfig", NULL, 0)                       \
    X("cuFuncSetSharedSize", 2000, "cuFuncSetSharedSize", NULL, 0)                                 \
    X("cuGetErrorName", 6000, "cuGetErrorName", NULL, 0)                                           \
    X("cuGetErrorString", 6000, "cuGetErrorString", NULL, 0)                                       \
    X("cuGetExportTable", 3000, "cuGetExportTable", NULL, 0)                                       \
    X("cuGraphAddBatchMemOpNode", 11070, "cuGraphAddBatchMemOpNode", NULL, 0)                      \
    X("cuGraphAddChildGraphNode", 10000, "cuGraphAddChildGraphNode", NULL, 0)                      \
    X("cuGraphAddDependencies", 10000, "cuGraphAddDependencies", NULL, 0)                          \
    X("cuGraphAddDependencies", 12030, "cuGraphAddDependencies_v2", NULL, 0)                       \
    X("cuGraphAddEmptyNode", 10000, "cuGraphAddEmptyNode", NULL, 0)                                \
    X("cuGraphAddEventRecordNode", 11010, "cuGraphAddEventRecordNode", NULL, 0)                    \
    X("cuGraphAddEventWaitNode", 11010, "cuGraphAddEventWaitNode", NULL, 0)                        \
    X("cuGraphAddExternalSemaphoresSignalNode", 11020, "cuGraphAddExternalSemaphoresSignalNode",   \
      NULL, 0)                                                                                     \
    X("cuGraphAddExternalSemaphoresWaitNode", 11020, "cuGraphAddExternalSemaphoresWaitNode", NULL, \
      0)                                                                                           \
    X("cuGraphAddHostNode", 10000, "cuGraphAddHostNode", NULL, 0)                                  \
    X("cuGraphAddKernelNode", 10000, "cuGraphAddKernelNode", NULL, 0)                              \
    X("cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2", NULL, 0)                           \
    X("cuGraphAddMemAllocNode", 11040, "cuGraphAddMemAllocNode", NULL, 0)                          \
    X("cuGraphAddMemFreeNode", 11040, "cuGraphAddMemFreeNode", NULL, 0)                            \
    X("cuGraphAddMemcpyNode", 10000, "cuGraphAddMemcpyNode", NULL, 0)                              \
    X("cuGraphAddMemsetNode", 10000, "cuGraphAddMemsetNode", NULL, 0)                              \
    X("cuGraphAddNode", 12020, "cuGraphAddNode", NULL, 0)                                          \
    X("cuGraphAddNode", 12030, "cuGraphAddNode_v2", NULL, 0)                                       \
    X("cuGraphBatchMemOpNodeGetParams", 11070, "cuGraphBatchMemOpNodeGetParams", NULL, 0)          \
    X("cuGraphBatchMemOpNodeSetParams", 11070, "cuGraphBatchMemOpNodeSetParams", NULL, 0)          \
    X("cuGraphChildGraphNodeGetGraph", 10000, "cuGraphChildGraphNodeGetGraph", NULL, 0)            \
    X("cuGraphClone", 10000, "cuGraphClone", NULL, 0)                                              \
    X("cuGraphConditionalHandleCreate", 12030, "cuGraphConditionalHandleCreate", NULL, 0)          \
    X("cuGraphCreate", 10000, "cuGraphCreate", NULL, 0)                                            \
    X("cuGraphDebugDotPrint", 11030, "cuGraphDebugDotPrint", NULL, 0)                              \
    X("cuGraphDestroy", 10000, "cuGraphDestroy", NULL, 0)                                          \
    X("cuGraphDestroyNode", 10000, "cuGraphDestroyNode", NULL, 0)                                  \
    X("cuGraphEventRecordNodeGetEvent", 11010, "cuGraphEventRecordNodeGetEvent", NULL, 0)          \
    X("cuGraphEventRecordNodeSetEvent", 11010, "cuGraphEventRecordNodeSetEvent", NULL, 0)          \
    X("cuGraphEventWaitNodeGetEvent", 11010, "cuGraphEventWaitNodeGetEvent", NULL, 0)              \
    X("cuGraphEventWaitNodeSetEvent", 11010, "cuGraphEventWaitNodeSetEvent", NULL, 0)              \
    X("cuGraphExecBatchMemOpNodeSetParams", 11070, "cuGraphExecBatchMemOpNodeSetParams", NULL, 0)  \
    X("cuGraphExecChildGraphNodeSetParams", 11010, "cuGraphExecChildGraphNodeSetParams", NULL, 0)  \
    X("cuGraphExecDestroy", 10000, "cuGraphExecDestroy", NULL, 0)                                  \
    X("cuGraphExecEventRecordNodeSetEvent", 11010, "cuGraphExecEventRecordNodeSetEvent", NULL, 0)  \
    X("cuGraphExecEventWaitNodeSetEvent", 11010, "cuGraphExecEventWaitNodeSetEvent", NULL, 0)      \
    X("cuGraphExecExternalSemaphoresSignalNodeSetParams", 11020,                                   \
      "cuGraphExecExternalSemaphoresSignalNodeSetParams", NULL, 0)                                 \
    X("cuGraphExecExternalSemaphoresWaitNodeSetParams", 11020,                                     \
      "cuGraphExecExternalSemaphoresWaitNodeSetParams", NULL, 0)                                   \
    X("cuGraphExecGetFlags", 12000, "cuGraphExecGetFlags", NULL, 0)                                \
    X("cuGraphExecHostNodeSetParams", 10020, "cuGraphExecHostNodeSetParams", NULL, 0)              \
    X("cuGraphExecKernelNodeSetParams", 10010, "cuGraphExecKernelNodeSetParams", NULL, 0)          \
    X("cuGraphExecKernelNodeSetParams", 12000, "cuGraphExecKernelNodeSetParams_v2", NULL, 0)       \
    X("cuGraphExecMemcpyNodeSetParams", 10020, "cuGraphExecMemcpyNodeSetParams", NULL, 0)          \
    X("cuGraphExecMemsetNodeSetParams", 10020, "cuGraphExecMemsetNodeSetParams", NULL, 0)          \
    X("cuGraphExecNodeSetParams", 12020, "cuGraphExecNodeSetParams", NULL, 0)                      \
    X("cuGraphExecUpdate", 10020, "cuGraphExecUpdate", NULL, 0)                                    \
    X("cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2", NULL, 0)                                 \
    X("cuGraphExternalSemaphoresSignalNodeGetParams", 11020,                                       \
      "cuGraphExternalSemaphoresSignalNodeGetParams", NULL, 0)                                     \
    X("cuGraphExternalSemaphoresSignalNodeSetParams", 11020,                                       \
      "cuGraphExternalSemaphoresSignalNodeSetParams", NULL, 0)                                     \
    X("cuGraphExternalSemaphoresWaitNodeGetParams", 11020,                                         \
      "cuGraphExternalSemaphoresWaitNodeGetParams", NULL, 0)                                       \
    X("cuGraphExternalSemaphoresWaitNodeSetParams", 11020,                                         \
      "cuGraphExternalSemaphoresWaitNodeSetParams", NULL, 0)                                       \
    X("cuGraphGetEdges", 10000, "cuGraphGetEdges", NULL, 0)                                        \
    X("cuGraphGetEdges", 12030, "cuGraphGetEdges_v2", NULL, 0)                                     \
    X("cuGraphGetNodes", 10000, "cuGraphGetNodes", NULL, 0)                                        \
    X("cuGraphGetRootNodes", 10000, "cuGraphGetRootNodes", NULL, 0)                                \
    X("cuGraphHostNodeGetParams", 10000, "cuGraphHostNodeGetParams", NULL, 0)                      \
    X("cuGraphHostNodeSetParams", 10000, "cuGraphHostNodeSetParams", NULL, 0)                      \
    X("cuGraphInstantiate", 10000, "cuGraphInstantiate", NULL, 0)                                  \
    X("cuGraphInstantiate", 11000, "cuGraphInstantiate_v2", NULL, 0)                               \
    X("cuGraphInstantiateWithFlags", 11040, "cuGraphInstantiateWithFlags", NULL, 0)                \
    X("cuGraphInstantiateWithParams", 12000, "cuGraphInstantiateWithParams",                       \
      "cuGraphInstantiateWithParams_ptsz", 12000)                                                  \
    X("cuGraphKernelNodeCopyAttributes", 11000, "cuGraphKernelNodeCopyAttributes", NULL, 0)        \
    X("cuGraphKernelNodeGetAttribute", 11000, "cuGraphKernelNodeGetAttribute", NULL, 0)            \
    X("cuGraphKernelNodeGetParams", 10000, "cuGraphKernelNodeGetParams", NULL, 0)                  \
    X("cuGraphKernelNodeGetParams", 12000, "cuGraphKernelNodeGetParams_v2", NULL, 0)               \
    X("cuGraphKernelNodeSetAttribute", 11000, "cuGraphKernelNodeSetAttribute", NULL, 0)            \
    X("cuGraphKernelNodeSetParams", 10000, "cuGraphKernelNodeSetParams", NULL, 0)                  \
    X("cuGraphKernelNodeSetParams", 12000, "cuGraphKernelNodeSetParams_v2", NULL, 0)               \
    X("cuGraphLaunch", 10000, "cuGraphLaunch", "cuGraphLaunch_ptsz", 10000)                        \
    X("cuGraphMemAllocNodeGetParams", 11040, "cuGraphMemAllocNodeGetParams", NULL, 0)              \
    X("cuGraphMemFreeNodeGetParams", 11040, "cuGraphMemFreeNodeGetParams", NULL, 0)                \
    X("cuGraphMemcpyNodeGetParams", 10000, "cuGraphMemcpyNodeGetParams", NULL, 0)                  \
    X("cuGraphMemcpyNodeSetParams", 10000, "cuGraphMemcpyNodeSetParams", NULL, 0)                  \
    X("cuGraphMemsetNodeGetParams", 10000, "cuGraphMemsetNodeGetParams", NULL, 0)                  \
    X("cuGraphMemsetNodeSetParams", 10000, "cuGraphMemsetNodeSetParams", NULL, 0)                  \
    X("cuGraphNodeFindInClone", 10000, "cuGraphNodeFindInClone", NULL, 0)                          \
    X("cuGraphNodeGetDependencies", 10000, "cuGraphNodeGetDependencies", NULL, 0)                  \
    X("cuGraphNodeGetDependencies", 12030, "cuGraphNodeGetDependencies_v2", NULL, 0)               \
    X("cuGraphNodeGetDependentNodes", 10000, "cuGraphNodeGetDependentNodes", NULL, 0)              \
    X("cuGraphNodeGetDependentNodes", 12030, "cuGraphNodeGetDependentNodes_v2", NULL, 0)           \
    X("cuGraphNodeGetEnabled", 11060, "cuGraphNodeGetEnabled", NULL, 0)                            \
    X("cuGraphNodeGetType", 10000, "cuGraphNodeGetType", NULL, 0)                                  \
    X("cuGraphNodeSetEnabled", 11060, "cuGraphNodeSetEnabled", NULL, 0)                            \
    X("cuGraphNodeSetParams", 12020, "cuGraphNodeSetParams", NULL, 0)                              \
    X("cuGraphReleaseUserObject", 11030, "cuGraphReleaseUserObject", NULL, 0)                      \
    X("cuGraphRemoveDependencies", 10000, "cuGraphRemoveDependencies", NULL, 0)                    \
    X("cuGraphRemoveDependencies", 12030, "cuGraphRemoveDependencies_v2", NULL, 0)                 \
    X("cuGraphRetainUserObject", 11030, "cuGraphRetainUserObject", NULL, 0)                        \
    X("cuGraphUpload", 11010, "cuGraphUpload", "cuGraphUpload_ptsz", 11010)                        \
    X("cuGraphicsMapResources", 3000, "cuGraphicsMapResources", "cuGraphicsMapResources_ptsz",     \
      7000)                                                                                        \
    X("cuGraphicsResourceGetMappedMipmappedArray", 5000,                                           \
      "cuGraphicsResourceGetMappedMipmappedArray", NULL, 0)                                        \
    X("cuGraphicsResourceGetMappedPointer", 3000, "cuGraphicsResourceGetMappedPointer", NULL, 0)   \
    X("cuGraphicsResourceGetMappedPointer", 3020, "cuGraphicsResourceGetMappedPointer_v2", NULL,   \
      0)                                                                                           \
    X("cuGraphicsResourceSetMapFlags", 3000, "cuGraphicsResourceSetMapFlags", NULL, 0)             \
    X("cuGraphicsResourceSetMapFlags", 6050, "cuGraphicsResourceSetMapFlags_v2", NULL, 0)          \
    X("cuGraphicsSubResourceGetMappedArray", 3000, "cuGraphicsSubResourceGetMappedArray", NULL, 0) \
    X("cuGraphicsUnmapResources", 3000, "cuGraphicsUnmapResources",                                \
      "cuGraphicsUnmapResources_ptsz", 7000)                                                       \
    X("cuGraphicsUnregisterResource", 3000, "cuGraphicsUnregisterResource", NULL, 0)               \
    X("cuGreenCtxStreamCreate", 12050, "cuGreenCtxStreamCreate", NULL, 0)                          \
    X("cuImportExternalMemory", 10000, "cuImportExternalMemory", NULL, 0)                          \
    X("cuImportExternalSemaphore", 10000, "cuImportExternalSemaphore", NULL, 0)                    \
    X("cuInit", 2000, "cuInit", NULL, 0)                                                           \
    X("cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle", NULL, 0)                                 \
    X("cuIpcGetEventHandle", 4010, "cuIpcGetEventHandle", NULL, 0)                                 \
    X("cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle", NULL, 0)                                     \
    X("cuIpcOpenEventHandle", 4010, "cuIpcOpenEventHandle", NULL, 0)                               \
    X("cuIpcOpenMemHandle", 4010, "cuIpcOpenMemHandle", NULL, 0)                                   \
    X("cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2", NULL, 0)                               \
    X("cuKernelGetAttribute", 12000, "cuKernelGetAttribute", NULL, 0)                              \
    X("cuKernelGetFunction", 12000, "cuKernelGetFunction", NULL, 0)                                \
    X("cuKernelGetLibrary", 12050, "cuKernelGetLibrary", NULL, 0)                                  \
    X("cuKernelGetName", 12030, "cuKernelGetName", NULL, 0)                                        \
    X("cuKernelGetParamInfo", 12040, "cuKernelGetParamInfo", NULL, 0)                              \
    X("cuKernelSetAttribute", 12000, "cuKernelSetAttribute", NULL, 0)                              \
    X("cuKernelSetCacheConfig", 12000, "cuKernelSetCacheConfig", NULL, 0)                          \
    X("cuLaunch", 2000, "cuLaunch", NULL, 0)                                                       \
    X("cuLaunchCooperativeKernel", 9000, "cuLaunchCooperativeKernel",                              \
      "cuLaunchCooperativeKernel_ptsz", 9000)                                                      \
    X("cuLaunchCooperativeKernelMultiDevice", 9000, "cuLaunchCooperativeKernelMultiDevice", NULL,  \
      0)                                                                                           \
    X("cuLaunchGrid", 2000, "cuLaunchGrid", NULL, 0)                                               \
    X("cuLaunchGridAsync", 2000, "cuLaunchGridAsync", NULL, 0)                                     \
    X("cuLaunchHostFunc", 10000, "cuLaunchHostFunc", "cuLaunchHostFunc_ptsz", 10000)               \
    X("cuLaunchKernel", 4000, "cuLaunchKernel", "cuLaunchKernel_ptsz", 7000)                       \
    X("cuLaunchKernelEx", 11060, "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", 11060)               \
    X("cuLibraryEnumerateKernels", 12040, "cuLibraryEnumerateKernels", NULL, 0)                    \
    X("cuLibraryGetGlobal", 12000, "cuLibraryGetGlobal", NULL, 0)                                  \
    X("cuLibraryGetKernel", 12000, "cuLibraryGetKernel", NULL, 0)                                  \
    X("cuLibraryGetKernelCount", 12040, "cuLibraryGetKernelCount", NULL, 0)                        \
    X("cuLibraryGetManaged", 12000, "cuLibraryGetManaged", NULL, 0)                                \
    X("cuLibraryGetModule", 12000, "cuLibraryGetModule", NULL, 0)                                  \
    X("cuLibraryGetUnifiedFunction", 12000, "cuLibraryGetUnifiedFunction", NULL, 0)                \
    X("cuLibraryLoadData", 12000, "cuLibraryLoadData", NULL, 0)                                    \
    X("cuLibraryLoadFromFile", 12000, "cuLibraryLoadFromFile", NULL, 0)                            \
    X("cuLibraryUnload", 12000, "cuLibraryUnload", NULL, 0)                                        \
    X("cuLinkAddData", 5050, "cuLinkAddData", NULL, 0)                                             \
    X("cuLinkAddData", 6050, "cuLinkAddData_v2", NULL, 0)                                          \
    X("cuLinkAddFile", 5050, "cuLinkAddFile", NULL, 0)                                             \
    X("cuLinkAddFile", 6050, "cuLinkAddFile_v2", NULL, 0)                                          \
    X("cuLinkComplete", 5050, "cuLinkComplete", NULL, 0)                                           \
    X("cuLinkCreate", 5050, "cuLinkCreate", NULL, 0)                                               \
    X("cuLinkCreate", 6050, "cuLinkCreate_v2", NULL, 0)                                            \
    X("cuLinkDestroy", 5050, "cuLinkDestroy", NULL, 0)                                             \
    X("cuLogsCurrent", 12090, "cuLogsCurrent", NULL, 0)                                            \
    X("cuLogsDumpToFile", 12090, "cuLogsDumpToFile", NULL, 0)                                      \
    X("cuLogsDumpToMemory", 12090, "cuLogsDumpToMemory", NULL, 0)                                  \
    X("cuLogsRegisterCallback", 12090, "cuLogsRegisterCallback", NULL, 0)                          \
    X("cuLogsUnregisterCallback", 12090, "cuLogsUnregisterCallback", NULL, 0)                      \
    X("cuMemAddressFree", 10020, "cuMemAddressFree", NULL, 0)                                      \
    X("cuMemAddressReserve", 10020, "cuMemAddressReserve", NULL, 0)                                \
    X("cuMemAdvise", 8000, "cuMemAdvise", NULL, 0)                                                 \
    X("cuMemAdvise", 12020, "cuMemAdvise_v2", NULL, 0)                                             \
    X("cuMemAlloc", 2000, "cuMemAlloc", NULL, 0)                                                   \
    X("cuMemAlloc", 3020, "cuMemAlloc_v2", NULL, 0)                                                \
    X("cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz", 11020)                  \
    X("cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", \
      11020)                                                                                       \
    X("cuMemAllocHost", 2000, "cuMemAllocHost", NULL, 0)                                           \
    X("cuMemAllocHost", 3020, "cuMemAllocHost_v2", NULL, 0)                                        \
    X("cuMemAllocManaged", 6000, "cuMemAllocManaged", NULL, 0)                                     \
    X("cuMemAllocPitch", 2000, "cuMemAllocPitch", NULL, 0)                                         \
    X("cuMemAllocPitch", 3020, "cuMemAllocPitch_v2", NULL, 0)                                      \
    X("cuMemBatchDecompressAsync", 12060, "cuMemBatchDecompressAsync",                             \
      "cuMemBatchDecompressAsync_ptsz", 12060)                                                     \
    X("cuMemCreate", 10020, "cuMemCreate", NULL, 0)                                                \
    X("cuMemDiscardAndPrefetchBatchAsync", 13000, "cuMemDiscardAndPrefetchBatchAsync",             \
      "cuMemDiscardAndPrefetchBatchAsync_ptsz", 13000)                                             \
    X("cuMemDiscardBatchAsync", 13000, "cuMemDiscardBatchAsync", "cuMemDiscardBatchAsync_ptsz",    \
      13000)                                                                                       \
    X("cuMemExportToShareableHandle", 10020, "cuMemExportToShareableHandle", NULL, 0)              \
    X("cuMemFree", 2000, "cuMemFree", NULL, 0)                                                     \
    X("cuMemFree", 3020, "cuMemFree_v2", NULL, 0)                                                  \
    X("cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz", 11020)                     \
    X("cuMemFreeHost", 2000, "cuMemFreeHost", NULL, 0)                                             \
    X("cuMemGetAccess", 10020, "cuMemGetAccess", NULL, 0)                                          \
    X("cuMemGetAddressRange", 2000, "cuMemGetAddressRange", NULL, 0)                               \
    X("cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2", NULL, 0)                            \
    X("cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", NULL, 0)            \
    X("cuMemGetAllocationPropertiesFromHandle", 10020, "cuMemGetAllocationPropertiesFromHandle",   \
      NULL, 0)                                                                                     \
    X("cuMemGetDefaultMemPool", 13000, "cuMemGetDefaultMemPool", NULL, 0)                          \
    X("cuMemGetHandleForAddressRange", 11070, "cuMemGetHandleForAddressRange", NULL, 0)            \
    X("cuMemGetInfo", 2000, "cuMemGetInfo", NULL, 0)                                               \
    X("cuMemGetInfo", 3020, "cuMemGetInfo_v2", NULL, 0)                                            \
    X("cuMemGetMemPool", 13000, "cuMemGetMemPool", NULL, 0)                                        \
    X("cuMemHostAlloc", 2020, "cuMemHostAlloc", NULL, 0)                                           \
    X("cuMemHostGetDevicePointer", 2020, "cuMemHostGetDevicePointer", NULL, 0)                     \
    X("cuMemHostGetDevicePointer", 3020, "cuMemHostGetDevicePointer_v2", NULL, 0)                  \
    X("cuMemHostGetFlags", 2030, "cuMemHostGetFlags", NULL, 0)                                     \
    X("cuMemHostRegister", 4000, "cuMemHostRegister", NULL, 0)                                     \
    X("cuMemHostRegister", 6050, "cuMemHostRegister_v2", NULL, 0)                                  \
    X("cuMemHostUnregister", 4000, "cuMemHostUnregister", NULL, 0)                                 \
    X("cuMemImportFromShareableHandle", 10020, "cuMemImportFromShareableHandle", NULL, 0)          \
    X("cuMemMap", 10020, "cuMemMap", NULL, 0)                                                      \
    X("cuMemMapArrayAsync", 11010, "cuMemMapArrayAsync", "cuMemMapArrayAsync_ptsz", 11010)         \
    X("cuMemPoolCreate", 11020, "cuMemPoolCreate", NULL, 0)                                        \
    X("cuMemPoolDestroy", 11020, "cuMemPoolDestroy", NULL, 0)                                      \
    X("cuMemPoolExportPointer", 11020, "cuMemPoolExportPointer", NULL, 0)                          \
    X("cuMemPoolExportToShareableHandle", 11020, "cuMemPoolExportToShareableHandle", NULL, 0)      \
    X("cuMemPoolGetAccess", 11020, "cuMemPoolGetAccess", NULL, 0)                                  \
    X("cuMemPoolGetAttribute", 11020, "cuMemPoolGetAttribute", NULL, 0)                            \
    X("cuMemPoolImportFromShareableHandle", 11020, "cuMemPoolImportFromShareableHandle", NULL, 0)  \
    X("cuMemPoolImportPointer", 11020, "cuMemPoolImportPointer", NULL, 0)                          \
    X("cuMemPoolSetAccess", 11020, "cuMemPoolSetAccess", NULL, 0)                                  \
    X("cuMemPoolSetAttribute", 11020, "cuMemPoolSetAttribute", NULL, 0)                            \
    X("cuMemPoolTrimTo", 11020, "cuMemPoolTrimTo", NULL, 0)                                        \
    X("cuMemPrefetchAsync", 8000, "cuMemPrefetchAsync", "cuMemPrefetchAsync_ptsz", 8000)           \
    X("cuMemPrefetchAsync", 12020, "cuMemPrefetchAsync_v2", "cuMemPrefetchAsync_v2_ptsz", 12020)   \
    X("cuMemPrefetchBatchAsync", 13000, "cuMemPrefetchBatchAsync", "cuMemPrefetchBatchAsync_ptsz", \
      13000)                                                                                       \
    X("cuMemRangeGetAttribute", 8000, "cuMemRangeGetAttribute", NULL, 0)                           \
    X("cuMemRangeGetAttributes", 8000, "cuMemRangeGetAttributes", NULL, 0)                         \
    X("cuMemRelease", 10020, "cuMemRelease", NULL, 0)                                              \
    X("cuMemRetainAllocationHandle", 11000, "cuMemRetainAllocationHandle", NULL, 0)                \
    X("cuMemSetAccess", 10020, "cuMemSetAccess", NULL, 0)                                          \
    X("cuMemSetMemPool", 13000, "cuMemSetMemPool", NULL, 0)                                        \
    X("cuMemUnmap", 10020, "cuMemUnmap", NULL, 0)                                                  \
    X("cuMemcpy", 4000, "cuMemcpy", "cuMemcpy_ptds", 7000)                                         \
    X("cuMemcpy2D", 2000, "cuMemcpy2D", NULL, 0)                                                   \
    X("cuMemcpy2D", 3020, "cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds", 7000)                             \
    X("cuMemcpy2DAsync", 2000, "cuMemcpy2DAsync", NULL, 0)                                         \
    X("cuMemcpy2DAsync", 3020, "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz", 7000)              \
    X("cuMemcpy2DUnaligned", 2000, "cuMemcpy2DUnaligned", NULL, 0)                                 \
    X("cuMemcpy2DUnaligned", 3020, "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds", 7000)  \
    X("cuMemcpy3D", 2000, "cuMemcpy3D", NULL, 0)                                                   \
    X("cuMemcpy3D", 3020, "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds", 7000)                             \
    X("cuMemcpy3DAsync", 2000, "cuMemcpy3DAsync", NULL, 0)                                         \
    X("cuMemcpy3DAsync", 3020, "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz", 7000)              \
    X("cuMemcpy3DBatchAsync", 12080, "cuMemcpy3DBatchAsync", "cuMemcpy3DBatchAsync_ptsz", 12080)   \
    X("cuMemcpy3DBatchAsync", 13000, "cuMemcpy3DBatchAsync_v2", "cuMemcpy3DBatchAsync_v2_ptsz",    \
      13000)                                                                                       \
    X("cuMemcpy3DPeer", 4000, "cuMemcpy3DPeer", "cuMemcpy3DPeer_ptds", 7000)                       \
    X("cuMemcpy3DPeerAsync", 4000, "cuMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync_ptsz", 7000)        \
    X("cuMemcpyAsync", 4000, "cuMemcpyAsync", "cuMemcpyAsync_ptsz", 7000)                          \
    X("cuMemcpyAtoA", 2000, "cuMemcpyAtoA", NULL, 0)                                               \
    X("cuMemcpyAtoA", 3020, "cuMemcpyAtoA_v2", "cuMemcpyAtoA_v2_ptds", 7000)                       \
    X("cuMemcpyAtoD", 2000, "cuMemcpyAtoD", NULL, 0)                                               \
    X("cuMemcpyAtoD", 3020, "cuMemcpyAtoD_v2", "cuMemcpyAtoD_v2_ptds", 7000)                       \
    X("cuMemcpyAtoH", 2000, "cuMemcpyAtoH", NULL, 0)                                               \
    X("cuMemcpyAtoH", 3020, "cuMemcpyAtoH_v2", "cuMemcpyAtoH_v2_ptds", 7000)                       \
    X("cuMemcpyAtoHAsync", 2000, "cuMemcpyAtoHAsync", NULL, 0)                                     \
    X("cuMemcpyAtoHAsync", 3020, "cuMemcpyAtoHAsync_v2", "cuMemcpyAtoHAsync_v2_ptsz", 7000)        \
    X("cuMemcpyBatchAsync", 12080, "cuMemcpyBatchAsync", "cuMemcpyBatchAsync_ptsz", 12080)         \
    X("cuMemcpyBatchAsync", 13000, "cuMemcpyBatchAsync_v2", "cuMemcpyBatchAsync_v2_ptsz", 13000)   \
    X("cuMemcpyDtoA", 2000, "cuMemcpyDtoA", NULL, 0)                                               \
    X("cuMemcpyDtoA", 3020, "cuMemcpyDtoA_v2", "cuMemcpyDtoA_v2_ptds", 7000)                       \
    X("cuMemcpyDtoD", 2000, "cuMemcpyDtoD", NULL, 0)                                               \
    X("cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds", 7000)                       \
    X("cuMemcpyDtoDAsync", 3000, "cuMemcpyDtoDAsync", NULL, 0)                                     \
    X("cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz", 7000)        \
    X("cuMemcpyDtoH", 2000, "cuMemcpyDtoH", NULL, 0)                                               \
    X("cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", 7000)                       \
    X("cuMemcpyDtoHAsync", 2000, "cuMemcpyDtoHAsync", NULL, 0)                                     \
    X("cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz", 7000)        \
    X("cuMemcpyHtoA", 2000, "cuMemcpyHtoA", NULL, 0)                                               \
    X("cuMemcpyHtoA", 3020, "cuMemcpyHtoA_v2", "cuMemcpyHtoA_v2_ptds", 7000)                       \
    X("cuMemcpyHtoAAsync", 2000, "cuMemcpyHtoAAsync", NULL, 0)                                     \
    X("cuMemcpyHtoAAsync", 3020, "cuMemcpyHtoAAsync_v2", "cuMemcpyHtoAAsync_v2_ptsz", 7000)        \
    X("cuMemcpyHtoD", 2000, "cuMemcpyHtoD", NULL, 0)                                               \
    X("cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", 7000)                       \
    X("cuMemcpyHtoDAsync", 2000, "cuMemcpyHtoDAsync", NULL, 0)                                     \
    X("cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz", 7000)        \
    X("cuMemcpyPeer", 4000, "cuMemcpyPeer", "cuMemcpyPeer_ptds", 7000)                             \
    X("cuMemcpyPeerAsync", 4000, "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz", 7000)              \
    X("cuMemsetD16", 2000, "cuMemsetD16", NULL, 0)                                                 \
    X("cuMemsetD16", 3020, "cuMemsetD16_v2", "cuMemsetD16_v2_ptds", 7000)                          \
    X("cuMemsetD16Async", 3020, "cuMemsetD16Async", "cuMemsetD16Async_ptsz", 7000)                 \
    X("cuMemsetD2D16", 2000, "cuMemsetD2D16", NULL, 0)                                             \
    X("cuMemsetD2D16", 3020, "cuMemsetD2D16_v2", "cuMemsetD2D16_v2_ptds", 7000)                    \
    X("cuMemsetD2D16Async", 3020, "cuMemsetD2D16Async", "cuMemsetD2D16Async_ptsz", 7000)           \
    X("cuMemsetD2D32", 2000, "cuMemsetD2D32", NULL, 0)                                             \
    X("cuMemsetD2D32", 3020, "cuMemsetD2D32_v2", "cuMemsetD2D32_v2_ptds", 7000)                    \
    X("cuMemsetD2D32Async", 3020, "cuMemsetD2D32Async", "cuMemsetD2D32Async_ptsz", 7000)           \
    X("cuMemsetD2D8", 2000, "cuMemsetD2D8", NULL, 0)                                               \
    X("cuMemsetD2D8", 3020, "cuMemsetD2D8_v2", "cuMemsetD2D8_v2_ptds", 7000)                       \
    X("cuMemsetD2D8Async", 3020, "cuMemsetD2D8Async", "cuMemsetD2D8Async_ptsz", 7000)              \
    X("cuMemsetD32", 2000, "cuMemsetD32", NULL, 0)                                                 \
    X("cuMemsetD32", 3020, "cuMemsetD32_v2", "cuMemsetD32_v2_ptds", 7000)                          \
    X("cuMemsetD32Async", 3020, "cuMemsetD32Async", "cuMemsetD32Async_ptsz", 7000)                 \
    X("cuMemsetD8", 2000, "cuMemsetD8", NULL, 0)                                                   \
    X("cuMemsetD8", 3020, "cuMemsetD8_v2", "cuMemsetD8_v2_ptds", 7000)                             \
    X("cuMemsetD8Async", 3020, "cuMemsetD8Async", "cuMemsetD8Async_ptsz", 7000)                    \
    X("cuMipmappedArrayCreate", 5000, "cuMipmappedArrayCreate", NULL, 0)                           \
    X("cuMipmappedArrayDestroy", 5000, "cuMipmappedArrayDestroy", NULL, 0)                         \
    X("cuMipmappedArrayGetLevel", 5000, "cuMipmappedArrayGetLevel", NULL, 0)                       \
    X("cuMipmappedArrayGetMemoryRequirements", 11060, "cuMipmappedArrayGetMemoryRequirements",     \
      NULL, 0)                                                                                     \
    X("cuMipmappedArrayGetSparseProperties", 11010, "cuMipmappedArrayGetSparseProperties", NULL,   \
      0)                                                                                           \
    X("cuModuleEnumerateFunctions", 12040, "cuModuleEnumerateFunctions", NULL, 0)                  \
    X("cuModuleGetFunction", 2000, "cuModuleGetFunction", NULL, 0)                                 \
    X("cuModuleGetFunctionCount", 12040, "cuModuleGetFunctionCount", NULL, 0)                      \
    X("cuModuleGetGlobal", 2000, "cuModuleGetGlobal", NULL, 0)                                     \
    X("cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2", NULL, 0)                                  \
    X("cuModuleGetLoadingMode", 11070, "cuModuleGetLoadingMode", NULL, 0)                          \
    X("cuModuleGetSurfRef", 3000, "cuModuleGetSurfRef", NULL, 0)                                   \
    X("cuModuleGetTexRef", 2000, "cuModuleGetTexRef", NULL, 0)                                     \
    X("cuModuleLoad", 2000, "cuModuleLoad", NULL, 0)                                               \
    X("cuModuleLoadData", 2000, "cuModuleLoadData", NULL, 0)                                       \
    X("cuModuleLoadDataEx", 2010, "cuModuleLoadDataEx", NULL, 0)                                   \
    X("cuModuleLoadFatBinary", 2000, "cuModuleLoadFatBinary", NULL, 0)                             \
    X("cuModuleUnload", 2000, "cuModuleUnload", NULL, 0)                                           \
    X("cuMulticastAddDevice", 12010, "cuMulticastAddDevice", NULL, 0)                              \
    X("cuMulticastBindAddr", 12010, "cuMulticastBindAddr", NULL, 0)                                \
    X("cuMulticastBindMem", 12010, "cuMulticastBindMem", NULL, 0)                                  \
    X("cuMulticastCreate", 12010, "cuMulticastCreate", NULL, 0)                                    \
    X("cuMulticastGetGranularity", 12010, "cuMulticastGetGranularity", NULL, 0)                    \
    X("cuMulticastUnbind", 12010, "cuMulticastUnbind", NULL, 0)                                    \
    X("cuOccupancyAvailableDynamicSMemPerBlock", 10020, "cuOccupancyAvailableDynamicSMemPerBlock", \
      NULL, 0)                                                                                     \
    X("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050,                                         \
      "cuOccupancyMaxActiveBlocksPerMultiprocessor", NULL, 0)                                      \
    X("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,                                \
      "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", NULL, 0)                             \
    X("cuOccupancyMaxActiveClusters", 11070, "cuOccupancyMaxActiveClusters", NULL, 0)              \
    X("cuOccupancyMaxPotentialBlockSize", 6050, "cuOccupancyMaxPotentialBlockSize", NULL, 0)       \
    X("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000,                                           \
      "cuOccupancyMaxPotentialBlockSizeWithFlags", NULL, 0)                                        \
    X("cuOccupancyMaxPotentialClusterSize", 11070, "cuOccupancyMaxPotentialClusterSize", NULL, 0)  \
    X("cuParamSetSize", 2000, "cuParamSetSize", NULL, 0)                                           \
    X("cuParamSetTexRef", 2000, "cuParamSetTexRef", NULL, 0)                                       \
    X("cuParamSetf", 2000, "cuParamSetf", NULL, 0)                                                 \
    X("cuParamSeti", 2000, "cuParamSeti", NULL, 0)                                                 \
    X("cuParamSetv", 2000, "cuParamSetv", NULL, 0)                                                 \
    X("cuPointerGetAttribute", 4000, "cuPointerGetAttribute", NULL, 0)                             \
    X("cuPointerGetAttributes", 7000, "cuPointerGetAttributes", NULL, 0)                           \
    X("cuPointerSetAttribute", 6000, "cuPointerSetAttribute", NULL, 0)                             \
    X("cuSignalExternalSemaphoresAsync", 10000, "cuSignalExternalSemaphoresAsync",                 \
      "cuSignalExternalSemaphoresAsync_ptsz", 10000)                                               \
    X("cuStreamAddCallback", 5000, "cuStreamAddCallback", "cuStreamAddCallback_ptsz", 7000)        \
    X("cuStreamAttachMemAsync", 6000, "cuStreamAttachMemAsync", "cuStreamAttachMemAsync_ptsz",     \
      7000)                                                                                        \
    X("cuStreamBatchMemOp", 8000, "cuStreamBatchMemOp", "cuStreamBatchMemOp_ptsz", 8000)           \
    X("cuStreamBatchMemOp", 11070, "cuStreamBatchMemOp_v2", "cuStreamBatchMemOp_v2_ptsz", 11070)   \
    X("cuStreamBeginCapture", 10000, "cuStreamBeginCapture", "cuStreamBeginCapture_ptsz", 10000)   \
    X("cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz",    \
      10010)                                                                                       \
    X("cuStreamBeginCaptureToGraph", 12030, "cuStreamBeginCaptureToGraph",                         \
      "cuStreamBeginCaptureToGraph_ptsz", 12030)                                                   \
    X("cuStreamCopyAttributes", 11000, "cuStreamCopyAttributes", "cuStreamCopyAttributes_ptsz",    \
      11000)                                                                                       \
    X("cuStreamCreate", 2000, "cuStreamCreate", NULL, 0)                                           \
    X("cuStreamCreateWithPriority", 5050, "cuStreamCreateWithPriority", NULL, 0)                   \
    X("cuStreamDestroy", 2000, "cuStreamDestroy", NULL, 0)                                         \
    X("cuStreamDestroy", 4000, "cuStreamDestroy_v2", NULL, 0)                                      \
    X("cuStreamEndCapture", 10000, "cuStreamEndCapture", "cuStreamEndCapture_ptsz", 10000)         \
    X("cuStreamGetAttribute", 11000, "cuStreamGetAttribute", "cuStreamGetAttribute_ptsz", 11000)   \
    X("cuStreamGetCaptureInfo", 10010, "cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_ptsz",    \
      10010)                                                                                       \
    X("cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2",                                \
      "cuStreamGetCaptureInfo_v2_ptsz", 11030)                                                     \
    X("cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3",                                \
      "cuStreamGetCaptureInfo_v3_ptsz", 12030)                                                     \
    X("cuStreamGetCtx", 9020, "cuStreamGetCtx", "cuStreamGetCtx_ptsz", 9020)                       \
    X("cuStreamGetCtx", 12050, "cuStreamGetCtx_v2", "cuStreamGetCtx_v2_ptsz", 12050)               \
    X("cuStreamGetDevice", 12080, "cuStreamGetDevice", "cuStreamGetDevice_ptsz", 12080)            \
    X("cuStreamGetFlags", 5050, "cuStreamGetFlags", "cuStreamGetFlags_ptsz", 7000)                 \
    X("cuStreamGetId", 12000, "cuStreamGetId", "cuStreamGetId_ptsz", 12000)                        \
    X("cuStreamGetPriority", 5050, "cuStreamGetPriority", "cuStreamGetPriority_ptsz", 7000)        \
    X("cuStreamIsCapturing", 10000, "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz", 10000)      \
    X("cuStreamQuery", 2000, "cuStreamQuery", "cuStreamQuery_ptsz", 7000)                          \
    X("cuStreamSetAttribute", 11000, "cuStreamSetAttribute", "cuStreamSetAttribute_ptsz", 11000)   \
    X("cuStreamSynchronize", 2000, "cuStreamSynchronize", "cuStreamSynchronize_ptsz", 7000)        \
    X("cuStreamUpdateCaptureDependencies", 11030, "cuStreamUpdateCaptureDependencies",             \
      "cuStreamUpdateCaptureDependencies_ptsz", 11030)                                             \
    X("cuStreamUpdateCaptureDependencies", 12030, "cuStreamUpdateCaptureDependencies_v2",          \
      "cuStreamUpdateCaptureDependencies_v2_ptsz", 12030)                                          \
    X("cuStreamWaitEvent", 3020, "cuStreamWaitEvent", "cuStreamWaitEvent_ptsz", 7000)              \
    X("cuStreamWaitValue32", 8000, "cuStreamWaitValue32", "cuStreamWaitValue32_ptsz", 8000)        \
    X("cuStreamWaitValue32", 11070, "cuStreamWaitValue32_v2", "cuStreamWaitValue32_v2_ptsz",       \
      11070)                                                                                       \
    X("cuStreamWaitValue64", 9000, "cuStreamWaitValue64", "cuStreamWaitValue64_ptsz", 9000)        \
    X("cuStreamWaitValue64", 11070, "cuStreamWaitValue64_v2", "cuStreamWaitValue64_v2_ptsz",       \
      11070)                                                                                       \
    X("cuStreamWriteValue32", 8000, "cuStreamWriteValue32", "cuStreamWriteValue32_ptsz", 8000)     \
    X("cuStreamWriteValue32", 11070, "cuStreamWriteValue32_v2", "cuStreamWriteValue32_v2_ptsz",    \
      11070)                                                                                       \
    X("cuStreamWriteValue64", 9000, "cuStreamWriteValue64", "cuStreamWriteValue64_ptsz", 9000)     \
    X("cuStreamWriteValue64", 11070, "cuStreamWriteValue64_v2", "cuStreamWriteValue64_v2_ptsz",    \
      11070)                                                                                       \
    X("cuSurfObjectCreate", 5000, "cuSurfObjectCreate", NULL, 0)                                   \
    X("cuSurfObjectDestroy", 5000, "cuSurfObjectDestroy", NULL, 0)                                 \
    X("cuSurfObjectGetResourceDesc", 5000, "cuSurfObjectGetResourceDesc", NULL, 0)                 \
    X("cuSurfRefGetArray", 3000, "cuSurfRefGetArray", NULL, 0)                                     \
    X("cuSurfRefSetArray", 3000, "cuSurfRefSetArray", NULL, 0)                                     \
    X("cuTensorMapEncodeIm2col", 12000, "cuTensorMapEncodeIm2col", NULL, 0)                        \
    X("cuTensorMapEncodeIm2colWide", 12080, "cuTensorMapEncodeIm2colWide", NULL, 0)                \
    X("cuTensorMapEncodeTiled", 12000, "cuTensorMapEncodeTiled", NULL, 0)                          \
    X("cuTensorMapReplaceAddress", 12000, "cuTensorMapReplaceAddress", NULL, 0)                    \
    X("cuTexObjectCreate", 5000, "cuTexObjectCreate", NULL, 0)                                     \
    X("cuTexObjectDestroy", 5000, "cuTexObjectDestroy", NULL, 0)                                   \
    X("cuTexObjectGetResourceDesc", 5000, "cuTexObjectGetResourceDesc", NULL, 0)                   \
    X("cuTexObjectGetResourceViewDesc", 5000, "cuTexObjectGetResourceViewDesc", NULL, 0)           \
    X("cuTexObjectGetTextureDesc", 5000, "cuTexObjectGetTextureDesc", NULL, 0)                     \
    X("cuTexRefCreate", 2000, "cuTexRefCreate", NULL, 0)                                           \
    X("cuTexRefDestroy", 2000, "cuTexRefDestroy", NULL, 0)                                         \
    X("cuTexRefGetAddress", 2000, "cuTexRefGetAddress", NULL, 0)                                   \
    X("cuTexRefGetAddress", 3020, "cuTexRefGetAddress_v2", NULL, 0)                                \
    X("cuTexRefGetAddressMode", 2000, "cuTexRefGetAddressMode", NULL, 0)                           \
    X("cuTexRefGetArray", 2000, "cuTexRefGetArray", NULL, 0)                                       \
    X("cuTexRefGetBorderColor", 8000, "cuTexRefGetBorderColor", NULL, 0)                           \
    X("cuTexRefGetFilterMode", 2000, "cuTexRefGetFilterMode", NULL, 0)                             \
    X("cuTexRefGetFlags", 2000, "cuTexRefGetFlags", NULL, 0)                                       \
    X("cuTexRefGetFormat", 2000, "cuTexRefGetFormat", NULL, 0)                                     \
    X("cuTexRefGetMaxAnisotropy", 5000, "cuTexRefGetMaxAnisotropy", NULL, 0)                       \
    X("cuTexRefGetMipmapFilterMode", 5000, "cuTexRefGetMipmapFilterMode", NULL, 0)                 \
    X("cuTexRefGetMipmapLevelBias", 5000, "cuTexRefGetMipmapLevelBias", NULL, 0)                   \
    X("cuTexRefGetMipmapLevelClamp", 5000, "cuTexRefGetMipmapLevelClamp", NULL, 0)                 \
    X("cuTexRefGetMipmappedArray", 5000, "cuTexRefGetMipmappedArray", NULL, 0)                     \
    X("cuTexRefSetAddress", 2000, "cuTexRefSetAddress", NULL, 0)                                   \
    X("cuTexRefSetAddress", 3020, "cuTexRefSetAddress_v2", NULL, 0)                                \
    X("cuTexRefSetAddress2D", 2020, "cuTexRefSetAddress2D", NULL, 0)                               \
    X("cuTexRefSetAddress2D", 3020, "cuTexRefSetAddress2D_v2", NULL, 0)                            \
    X("cuTexRefSetAddress2D", 4010, "cuTexRefSetAddress2D_v3", NULL, 0)                            \
    X("cuTexRefSetAddressMode", 2000, "cuTexRefSetAddressMode", NULL, 0)                           \
    X("cuTexRefSetArray", 2000, "cuTexRefSetArray", NULL, 0)                                       \
    X("cuTexRefSetBorderColor", 8000, "cuTexRefSetBorderColor", NULL, 0)                           \
    X("cuTexRefSetFilterMode", 2000, "cuTexRefSetFilterMode", NULL, 0)                             \
    X("cuTexRefSetFlags", 2000, "cuTexRefSetFlags", NULL, 0)                                       \
    X("cuTexRefSetFormat", 2000, "cuTexRefSetFormat", NULL, 0)                                     \
    X("cuTexRefSetMaxAnisotropy", 5000, "cuTexRefSetMaxAnisotropy", NULL, 0)                       \
    X("cuTexRefSetMipmapFilterMode", 5000, "cuTexRefSetMipmapFilterMode", NULL, 0)                 \
    X("cuTexRefSetMipmapLevelBias", 5000, "cuTexRefSetMipmapLevelBias", NULL, 0)                   \
    X("cuTexRefSetMipmapLevelClamp", 5000, "cuTexRefSetMipmapLevelClamp", NULL, 0)                 \
    X("cuTexRefSetMipmappedArray", 5000, "cuTexRefSetMipmappedArray", NULL, 0)                     \
    X("cuThreadExchangeStreamCaptureMode", 10010, "cuThreadExchangeStreamCaptureMode", NULL, 0)    \
    X("cuUserObjectCreate", 11030, "cuUserObjectCreate", NULL, 0)                                  \
    X("cuUserObjectRelease", 11030, "cuUserObjectRelease", NULL, 0)                                \
    X("cuUserObjectRetain", 11030, "cuUserObjectRetain", NULL, 0)                                  \
    X("cuWaitExternalSemaphoresAsync", 10000, "cuWaitExternalSemaphoresAsync",                     \
      "cuWaitExternalSemaphoresAsync_ptsz", 10000)

typedef void (*sim_fn)(void);
typedef struct proc_entry_s {
    const char *name;
    int version;      // first CUDA version with this ABI of the name
    const char *sym;  // exported symbol of that ABI (legacy default stream)
    const char *psym; // its per-thread default stream twin, or NULL
    int ptsz_version; // first version with that twin
} proc_entry_t;

static const proc_entry_t table[] = {
#define X(n, v, s, p, pv) {n, v, s, p, pv},
    SIM_PROC_ENTRIES(X)
#undef X
    // CUDA 12 turned cuGraphInstantiate into cuGraphInstantiateWithFlags
    // (cuda.h's macro); no PFN_cuGraphInstantiate_v12000 typedef says so.
    {"cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags", NULL, 0},
    // Itself: v1 from CUDA 11.3, v2 (with symbolStatus) from 12.0.
    {"cuGetProcAddress", 11030, "cuGetProcAddress", NULL, 0},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2", NULL, 0},
    // The simulator's own extensions (simgpu.h), any version.
    {"simKernelCreate", 0, "simKernelCreate", NULL, 0},
    {"simGetStats", 0, "simGetStats", NULL, 0},
    {"simResetStats", 0, "simResetStats", NULL, 0},
    {"simResetPeak", 0, "simResetPeak", NULL, 0},
    {"simLastRace", 0, "simLastRace", NULL, 0},
    {"simInjectedCount", 0, "simInjectedCount", NULL, 0},
    {"simInjectedGet", 0, "simInjectedGet", NULL, 0},
};
#define NENT (sizeof table / sizeof table[0])

static void *fn[NENT], *pfn_ptsz[NENT];
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve(void)
{
    Dl_info info;
    void *self = NULL;
    if (dladdr((void *)resolve, &info) && info.dli_fname)
        self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self) {
        sim_log("error: cuGetProcAddress cannot open its own library: %s", dlerror());
        return; // every lookup then reports "not found"
    }
    for (size_t i = 0; i < NENT; i++) {
        fn[i] = dlsym(self, table[i].sym);
        pfn_ptsz[i] = table[i].psym ? dlsym(self, table[i].psym) : NULL;
    }
    // The handle stays open: this library cannot be unloaded under itself.
}

// No lock: the table is constant once resolved, and the real call is valid
// before cuInit (the runtime finds cuInit itself this way).
CUresult sim_proc_lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const cuuint64_t known =
        CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
    // "If the specified CUDA version is greater than the driver version, the
    // API will return CUDA_ERROR_INVALID_VALUE" (driver API reference).
    if (version > sim_driver_version()) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&resolved, resolve);
    // DEFAULT means LEGACY_STREAM for a caller not built for per-thread
    // streams (cuda.h); such callers' headers pass the flag explicitly.
    bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    size_t best = NENT;
    bool exists = false;
    for (size_t i = 0; i < NENT; i++) {
        if (!fn[i] || strcmp(table[i].name, symbol) != 0)
            continue; // another name, or an ABI this simulator does not export
        exists = true;
        if (table[i].version <= version && (best == NENT || table[i].version > table[best].version))
            best = i;
    }
    if (best == NENT) {
        // The name exists only in a newer ABI than the caller's version.
        if (exists && status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    void *f = fn[best];
    // No per-thread twin: the legacy one (documented fallback).
    if (ptds && pfn_ptsz[best] && table[best].ptsz_version <= version) f = pfn_ptsz[best];
    *pfn = f;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    return sim_proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_EXPORT CUresult proc_v1(const char *symbol, void **pfn, int cudaVersion,
                            cuuint64_t flags) __asm__("cuGetProcAddress");
SIM_EXPORT CUresult proc_v1(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return sim_proc_lookup(symbol, pfn, cudaVersion, flags, NULL);
}
