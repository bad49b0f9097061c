// SPDX-License-Identifier: MIT
// Error codes of the simulated runtime: driver results to runtime errors, and
// the names and descriptions cudaGetErrorName / cudaGetErrorString return.
#include "rt.h"

#include <stddef.h>

// --- CUresult -> cudaError_t -------------------------------------------------
// The switch below was generated from the CUDA 13 headers (pairing the enums by
// value, then checked by name): the runtime has one error for each driver
// result. Two have no runtime twin: CUDA_ERROR_CONTEXT_ALREADY_CURRENT
// (deprecated, no CUDA 13 call returns it) and CUDA_ERROR_KEY_ROTATION (not
// something the simulator can produce); both become generic errors.
cudaError_t rt_error_from_cu(CUresult r)
{
    // One line per pair reads as the table it is.
    // clang-format off
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_PROFILER_DISABLED: return cudaErrorProfilerDisabled;
    case CUDA_ERROR_PROFILER_NOT_INITIALIZED: return cudaErrorProfilerNotInitialized;
    case CUDA_ERROR_PROFILER_ALREADY_STARTED: return cudaErrorProfilerAlreadyStarted;
    case CUDA_ERROR_PROFILER_ALREADY_STOPPED: return cudaErrorProfilerAlreadyStopped;
    case CUDA_ERROR_STUB_LIBRARY: return cudaErrorStubLibrary;
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER: return cudaErrorCallRequiresNewerDriver;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return cudaErrorDevicesUnavailable;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_DEVICE_NOT_LICENSED: return cudaErrorDeviceNotLicensed;
    case CUDA_ERROR_INVALID_IMAGE: return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT: return cudaErrorInvalidValue;
    case CUDA_ERROR_MAP_FAILED: return cudaErrorMapBufferObjectFailed;
    case CUDA_ERROR_UNMAP_FAILED: return cudaErrorUnmapBufferObjectFailed;
    case CUDA_ERROR_ARRAY_IS_MAPPED: return cudaErrorArrayIsMapped;
    case CUDA_ERROR_ALREADY_MAPPED: return cudaErrorAlreadyMapped;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return cudaErrorNoKernelImageForDevice;
    case CUDA_ERROR_ALREADY_ACQUIRED: return cudaErrorAlreadyAcquired;
    case CUDA_ERROR_NOT_MAPPED: return cudaErrorNotMapped;
    case CUDA_ERROR_NOT_MAPPED_AS_ARRAY: return cudaErrorNotMappedAsArray;
    case CUDA_ERROR_NOT_MAPPED_AS_POINTER: return cudaErrorNotMappedAsPointer;
    case CUDA_ERROR_ECC_UNCORRECTABLE: return cudaErrorECCUncorrectable;
    case CUDA_ERROR_UNSUPPORTED_LIMIT: return cudaErrorUnsupportedLimit;
    case CUDA_ERROR_CONTEXT_ALREADY_IN_USE: return cudaErrorDeviceAlreadyInUse;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return cudaErrorPeerAccessUnsupported;
    case CUDA_ERROR_INVALID_PTX: return cudaErrorInvalidPtx;
    case CUDA_ERROR_INVALID_GRAPHICS_CONTEXT: return cudaErrorInvalidGraphicsContext;
    case CUDA_ERROR_NVLINK_UNCORRECTABLE: return cudaErrorNvlinkUncorrectable;
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND: return cudaErrorJitCompilerNotFound;
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return cudaErrorUnsupportedPtxVersion;
    case CUDA_ERROR_JIT_COMPILATION_DISABLED: return cudaErrorJitCompilationDisabled;
    case CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY: return cudaErrorUnsupportedExecAffinity;
    case CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC: return cudaErrorUnsupportedDevSideSync;
    case CUDA_ERROR_CONTAINED: return cudaErrorContained;
    case CUDA_ERROR_INVALID_SOURCE: return cudaErrorInvalidSource;
    case CUDA_ERROR_FILE_NOT_FOUND: return cudaErrorFileNotFound;
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: return cudaErrorSharedObjectSymbolNotFound;
    case CUDA_ERROR_SHARED_OBJECT_INIT_FAILED: return cudaErrorSharedObjectInitFailed;
    case CUDA_ERROR_OPERATING_SYSTEM: return cudaErrorOperatingSystem;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_LOSSY_QUERY: return cudaErrorLossyQuery;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return cudaErrorLaunchOutOfResources;
    case CUDA_ERROR_LAUNCH_TIMEOUT: return cudaErrorLaunchTimeout;
    case CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING: return cudaErrorLaunchIncompatibleTexturing;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return cudaErrorPeerAccessAlreadyEnabled;
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return cudaErrorPeerAccessNotEnabled;
    case CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: return cudaErrorSetOnActiveProcess;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_ASSERT: return cudaErrorAssert;
    case CUDA_ERROR_TOO_MANY_PEERS: return cudaErrorTooManyPeers;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_HARDWARE_STACK_ERROR: return cudaErrorHardwareStackError;
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: return cudaErrorIllegalInstruction;
    case CUDA_ERROR_MISALIGNED_ADDRESS: return cudaErrorMisalignedAddress;
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: return cudaErrorInvalidAddressSpace;
    case CUDA_ERROR_INVALID_PC: return cudaErrorInvalidPc;
    case CUDA_ERROR_LAUNCH_FAILED: return cudaErrorLaunchFailure;
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: return cudaErrorCooperativeLaunchTooLarge;
    case CUDA_ERROR_TENSOR_MEMORY_LEAK: return cudaErrorTensorMemoryLeak;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_SYSTEM_NOT_READY: return cudaErrorSystemNotReady;
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return cudaErrorSystemDriverMismatch;
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: return cudaErrorCompatNotSupportedOnDevice;
    case CUDA_ERROR_MPS_CONNECTION_FAILED: return cudaErrorMpsConnectionFailed;
    case CUDA_ERROR_MPS_RPC_FAILURE: return cudaErrorMpsRpcFailure;
    case CUDA_ERROR_MPS_SERVER_NOT_READY: return cudaErrorMpsServerNotReady;
    case CUDA_ERROR_MPS_MAX_CLIENTS_REACHED: return cudaErrorMpsMaxClientsReached;
    case CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED: return cudaErrorMpsMaxConnectionsReached;
    case CUDA_ERROR_MPS_CLIENT_TERMINATED: return cudaErrorMpsClientTerminated;
    case CUDA_ERROR_CDP_NOT_SUPPORTED: return cudaErrorCdpNotSupported;
    case CUDA_ERROR_CDP_VERSION_MISMATCH: return cudaErrorCdpVersionMismatch;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_CAPTURED_EVENT: return cudaErrorCapturedEvent;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_TIMEOUT: return cudaErrorTimeout;
    case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: return cudaErrorGraphExecUpdateFailure;
    case CUDA_ERROR_EXTERNAL_DEVICE: return cudaErrorExternalDevice;
    case CUDA_ERROR_INVALID_CLUSTER_SIZE: return cudaErrorInvalidClusterSize;
    case CUDA_ERROR_FUNCTION_NOT_LOADED: return cudaErrorFunctionNotLoaded;
    case CUDA_ERROR_INVALID_RESOURCE_TYPE: return cudaErrorInvalidResourceType;
    case CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION: return cudaErrorInvalidResourceConfiguration;
    case CUDA_ERROR_KEY_ROTATION: return cudaErrorUnknown;
    case CUDA_ERROR_UNKNOWN: return cudaErrorUnknown;
    default: return cudaErrorUnknown;
    }
    // clang-format on
}

// --- names ----------------------------------------------------------------------
static const char *rt_error_name(cudaError_t e)
{
    // clang-format off
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorProfilerDisabled: return "cudaErrorProfilerDisabled";
    case cudaErrorProfilerNotInitialized: return "cudaErrorProfilerNotInitialized";
    case cudaErrorProfilerAlreadyStarted: return "cudaErrorProfilerAlreadyStarted";
    case cudaErrorProfilerAlreadyStopped: return "cudaErrorProfilerAlreadyStopped";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
    case cudaErrorInvalidHostPointer: return "cudaErrorInvalidHostPointer";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidTexture: return "cudaErrorInvalidTexture";
    case cudaErrorInvalidTextureBinding: return "cudaErrorInvalidTextureBinding";
    case cudaErrorInvalidChannelDescriptor: return "cudaErrorInvalidChannelDescriptor";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorAddressOfConstant: return "cudaErrorAddressOfConstant";
    case cudaErrorTextureFetchFailed: return "cudaErrorTextureFetchFailed";
    case cudaErrorTextureNotBound: return "cudaErrorTextureNotBound";
    case cudaErrorSynchronizationError: return "cudaErrorSynchronizationError";
    case cudaErrorInvalidFilterSetting: return "cudaErrorInvalidFilterSetting";
    case cudaErrorInvalidNormSetting: return "cudaErrorInvalidNormSetting";
    case cudaErrorMixedDeviceExecution: return "cudaErrorMixedDeviceExecution";
    case cudaErrorNotYetImplemented: return "cudaErrorNotYetImplemented";
    case cudaErrorMemoryValueTooLarge: return "cudaErrorMemoryValueTooLarge";
    case cudaErrorStubLibrary: return "cudaErrorStubLibrary";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorCallRequiresNewerDriver: return "cudaErrorCallRequiresNewerDriver";
    case cudaErrorInvalidSurface: return "cudaErrorInvalidSurface";
    case cudaErrorDuplicateVariableName: return "cudaErrorDuplicateVariableName";
    case cudaErrorDuplicateTextureName: return "cudaErrorDuplicateTextureName";
    case cudaErrorDuplicateSurfaceName: return "cudaErrorDuplicateSurfaceName";
    case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
    case cudaErrorIncompatibleDriverContext: return "cudaErrorIncompatibleDriverContext";
    case cudaErrorMissingConfiguration: return "cudaErrorMissingConfiguration";
    case cudaErrorPriorLaunchFailure: return "cudaErrorPriorLaunchFailure";
    case cudaErrorLaunchMaxDepthExceeded: return "cudaErrorLaunchMaxDepthExceeded";
    case cudaErrorLaunchFileScopedTex: return "cudaErrorLaunchFileScopedTex";
    case cudaErrorLaunchFileScopedSurf: return "cudaErrorLaunchFileScopedSurf";
    case cudaErrorSyncDepthExceeded: return "cudaErrorSyncDepthExceeded";
    case cudaErrorLaunchPendingCountExceeded: return "cudaErrorLaunchPendingCountExceeded";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorDeviceNotLicensed: return "cudaErrorDeviceNotLicensed";
    case cudaErrorSoftwareValidityNotEstablished: return "cudaErrorSoftwareValidityNotEstablished";
    case cudaErrorStartupFailure: return "cudaErrorStartupFailure";
    case cudaErrorInvalidKernelImage: return "cudaErrorInvalidKernelImage";
    case cudaErrorDeviceUninitialized: return "cudaErrorDeviceUninitialized";
    case cudaErrorMapBufferObjectFailed: return "cudaErrorMapBufferObjectFailed";
    case cudaErrorUnmapBufferObjectFailed: return "cudaErrorUnmapBufferObjectFailed";
    case cudaErrorArrayIsMapped: return "cudaErrorArrayIsMapped";
    case cudaErrorAlreadyMapped: return "cudaErrorAlreadyMapped";
    case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
    case cudaErrorAlreadyAcquired: return "cudaErrorAlreadyAcquired";
    case cudaErrorNotMapped: return "cudaErrorNotMapped";
    case cudaErrorNotMappedAsArray: return "cudaErrorNotMappedAsArray";
    case cudaErrorNotMappedAsPointer: return "cudaErrorNotMappedAsPointer";
    case cudaErrorECCUncorrectable: return "cudaErrorECCUncorrectable";
    case cudaErrorUnsupportedLimit: return "cudaErrorUnsupportedLimit";
    case cudaErrorDeviceAlreadyInUse: return "cudaErrorDeviceAlreadyInUse";
    case cudaErrorPeerAccessUnsupported: return "cudaErrorPeerAccessUnsupported";
    case cudaErrorInvalidPtx: return "cudaErrorInvalidPtx";
    case cudaErrorInvalidGraphicsContext: return "cudaErrorInvalidGraphicsContext";
    case cudaErrorNvlinkUncorrectable: return "cudaErrorNvlinkUncorrectable";
    case cudaErrorJitCompilerNotFound: return "cudaErrorJitCompilerNotFound";
    case cudaErrorUnsupportedPtxVersion: return "cudaErrorUnsupportedPtxVersion";
    case cudaErrorJitCompilationDisabled: return "cudaErrorJitCompilationDisabled";
    case cudaErrorUnsupportedExecAffinity: return "cudaErrorUnsupportedExecAffinity";
    case cudaErrorUnsupportedDevSideSync: return "cudaErrorUnsupportedDevSideSync";
    case cudaErrorContained: return "cudaErrorContained";
    case cudaErrorInvalidSource: return "cudaErrorInvalidSource";
    case cudaErrorFileNotFound: return "cudaErrorFileNotFound";
    case cudaErrorSharedObjectSymbolNotFound: return "cudaErrorSharedObjectSymbolNotFound";
    case cudaErrorSharedObjectInitFailed: return "cudaErrorSharedObjectInitFailed";
    case cudaErrorOperatingSystem: return "cudaErrorOperatingSystem";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorLossyQuery: return "cudaErrorLossyQuery";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorLaunchIncompatibleTexturing: return "cudaErrorLaunchIncompatibleTexturing";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorPeerAccessNotEnabled: return "cudaErrorPeerAccessNotEnabled";
    case cudaErrorSetOnActiveProcess: return "cudaErrorSetOnActiveProcess";
    case cudaErrorContextIsDestroyed: return "cudaErrorContextIsDestroyed";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorTooManyPeers: return "cudaErrorTooManyPeers";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorHardwareStackError: return "cudaErrorHardwareStackError";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorInvalidAddressSpace: return "cudaErrorInvalidAddressSpace";
    case cudaErrorInvalidPc: return "cudaErrorInvalidPc";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
    case cudaErrorTensorMemoryLeak: return "cudaErrorTensorMemoryLeak";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorSystemNotReady: return "cudaErrorSystemNotReady";
    case cudaErrorSystemDriverMismatch: return "cudaErrorSystemDriverMismatch";
    case cudaErrorCompatNotSupportedOnDevice: return "cudaErrorCompatNotSupportedOnDevice";
    case cudaErrorMpsConnectionFailed: return "cudaErrorMpsConnectionFailed";
    case cudaErrorMpsRpcFailure: return "cudaErrorMpsRpcFailure";
    case cudaErrorMpsServerNotReady: return "cudaErrorMpsServerNotReady";
    case cudaErrorMpsMaxClientsReached: return "cudaErrorMpsMaxClientsReached";
    case cudaErrorMpsMaxConnectionsReached: return "cudaErrorMpsMaxConnectionsReached";
    case cudaErrorMpsClientTerminated: return "cudaErrorMpsClientTerminated";
    case cudaErrorCdpNotSupported: return "cudaErrorCdpNotSupported";
    case cudaErrorCdpVersionMismatch: return "cudaErrorCdpVersionMismatch";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge: return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorTimeout: return "cudaErrorTimeout";
    case cudaErrorGraphExecUpdateFailure: return "cudaErrorGraphExecUpdateFailure";
    case cudaErrorExternalDevice: return "cudaErrorExternalDevice";
    case cudaErrorInvalidClusterSize: return "cudaErrorInvalidClusterSize";
    case cudaErrorFunctionNotLoaded: return "cudaErrorFunctionNotLoaded";
    case cudaErrorInvalidResourceType: return "cudaErrorInvalidResourceType";
    case cudaErrorInvalidResourceConfiguration: return "cudaErrorInvalidResourceConfiguration";
    case cudaErrorUnknown: return "cudaErrorUnknown";
    default: return NULL;
    }
    // clang-format on
}

// --- descriptions ---------------------------------------------------------------
// The real library's text for the errors programs on the simulator meet; the
// others fall back to the enum name (a simplification: the real library has a
// sentence for each).
static const char *rt_error_text(cudaError_t e)
{
    // clang-format off
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorContextIsDestroyed: return "context is destroyed";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorIllegalState: return "the resource is not in a valid state";
    case cudaErrorUnknown: return "unknown error";
    default: return rt_error_name(e);
    }
    // clang-format on
}

// --- exported ---------------------------------------------------------------------
RT_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    const char *n = rt_error_name(error);
    return n ? n : "unrecognized error code";
}

RT_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    const char *n = rt_error_text(error);
    return n ? n : "unrecognized error code";
}
