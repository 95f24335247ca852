/*
 * The cudaError_t values of CUDA 13.0's driver_types.h with their messages
 * (generated from its enum cudaError and doc comments; the common ones use
 * NVIDIA's runtime wording).  XX(name, value, message).
 */
#ifndef VCU_CUDART_ERRLIST_H
#define VCU_CUDART_ERRLIST_H

#define VCU__CUDA_ERROR_MAP(XX) \
    XX(cudaSuccess, 0, "no error") \
    XX(cudaErrorInvalidValue, 1, "invalid argument") \
    XX(cudaErrorMemoryAllocation, 2, "out of memory") \
    XX(cudaErrorInitializationError, 3, "initialization error") \
    XX(cudaErrorCudartUnloading, 4, "driver shutting down") \
    XX(cudaErrorProfilerDisabled, 5, "profiler disabled while using external profiling tool") \
    XX(cudaErrorProfilerNotInitialized, 6, "This error return is deprecated as of CUDA 5.0") \
    XX(cudaErrorProfilerAlreadyStarted, 7, "This error return is deprecated as of CUDA 5.0") \
    XX(cudaErrorProfilerAlreadyStopped, 8, "This error return is deprecated as of CUDA 5.0") \
    XX(cudaErrorInvalidConfiguration, 9, "invalid configuration argument") \
    XX(cudaErrorInvalidPitchValue, 12, "invalid pitch argument") \
    XX(cudaErrorInvalidSymbol, 13, "invalid device symbol") \
    XX(cudaErrorInvalidHostPointer, 16, "invalid host pointer") \
    XX(cudaErrorInvalidDevicePointer, 17, "invalid device pointer") \
    XX(cudaErrorInvalidTexture, 18, "This indicates that the texture passed to the API call is not a valid texture") \
    XX(cudaErrorInvalidTextureBinding, 19, "This indicates that the texture binding is not valid") \
    XX(cudaErrorInvalidChannelDescriptor, 20, "This indicates that the channel descriptor passed to the API call is not valid") \
    XX(cudaErrorInvalidMemcpyDirection, 21, "invalid copy direction for memcpy") \
    XX(cudaErrorAddressOfConstant, 22, "This indicated that the user has taken the address of a constant variable, which was forbidden up until the CUDA 3.1 release") \
    XX(cudaErrorTextureFetchFailed, 23, "This indicated that a texture fetch was not able to be performed") \
    XX(cudaErrorTextureNotBound, 24, "This indicated that a texture was not bound for access") \
    XX(cudaErrorSynchronizationError, 25, "This indicated that a synchronization operation had failed") \
    XX(cudaErrorInvalidFilterSetting, 26, "This indicates that a non-float texture was being accessed with linear filtering") \
    XX(cudaErrorInvalidNormSetting, 27, "This indicates that an attempt was made to read an unsupported data type as a normalized float") \
    XX(cudaErrorMixedDeviceExecution, 28, "Mixing of device and device emulation code was not allowed") \
    XX(cudaErrorNotYetImplemented, 31, "This indicates that the API call is not yet implemented") \
    XX(cudaErrorMemoryValueTooLarge, 32, "This indicated that an emulated device pointer exceeded the 32-bit address range") \
    XX(cudaErrorStubLibrary, 34, "CUDA driver is a stub library") \
    XX(cudaErrorInsufficientDriver, 35, "CUDA driver version is insufficient for CUDA runtime version") \
    XX(cudaErrorCallRequiresNewerDriver, 36, "API call is not supported in the installed CUDA driver") \
    XX(cudaErrorInvalidSurface, 37, "This indicates that the surface passed to the API call is not a valid surface") \
    XX(cudaErrorDuplicateVariableName, 43, "This indicates that multiple global or constant variables (across separate CUDA source files in the application) share the same string name") \
    XX(cudaErrorDuplicateTextureName, 44, "This indicates that multiple textures (across separate CUDA source files in the application) share the same string name") \
    XX(cudaErrorDuplicateSurfaceName, 45, "This indicates that multiple surfaces (across separate CUDA source files in the application) share the same string name") \
    XX(cudaErrorDevicesUnavailable, 46, "CUDA-capable device(s) is/are busy or unavailable") \
    XX(cudaErrorIncompatibleDriverContext, 49, "This indicates that the current context is not compatible with this the CUDA Runtime") \
    XX(cudaErrorMissingConfiguration, 52, "__global__ function call is not configured") \
    XX(cudaErrorPriorLaunchFailure, 53, "This indicated that a previous kernel launch failed") \
    XX(cudaErrorLaunchMaxDepthExceeded, 65, "This error indicates that a device runtime grid launch did not occur because the depth of the child grid would exceed the maximum supported number of nested grid launches") \
    XX(cudaErrorLaunchFileScopedTex, 66, "This error indicates that a grid launch did not occur because the kernel uses file-scoped textures which are unsupported by the device runtime") \
    XX(cudaErrorLaunchFileScopedSurf, 67, "This error indicates that a grid launch did not occur because the kernel uses file-scoped surfaces which are unsupported by the device runtime") \
    XX(cudaErrorSyncDepthExceeded, 68, "This error indicates that a call to cudaDeviceSynchronize made from the device runtime failed because the call was made at grid depth greater than than either the default (2 levels of grids) or user specified device limit cudaLimitDevRuntimeSyncDepth") \
    XX(cudaErrorLaunchPendingCountExceeded, 69, "This error indicates that a device runtime grid launch failed because the launch would exceed the limit cudaLimitDevRuntimePendingLaunchCount") \
    XX(cudaErrorInvalidDeviceFunction, 98, "invalid device function") \
    XX(cudaErrorNoDevice, 100, "no CUDA-capable device is detected") \
    XX(cudaErrorInvalidDevice, 101, "invalid device ordinal") \
    XX(cudaErrorDeviceNotLicensed, 102, "This indicates that the device doesn't have a valid Grid License") \
    XX(cudaErrorSoftwareValidityNotEstablished, 103, "By default, the CUDA runtime may perform a minimal set of self-tests, as well as CUDA driver tests, to establish the validity of both") \
    XX(cudaErrorStartupFailure, 127, "This indicates an internal startup failure in the CUDA runtime") \
    XX(cudaErrorInvalidKernelImage, 200, "device kernel image is invalid") \
    XX(cudaErrorDeviceUninitialized, 201, "invalid device context") \
    XX(cudaErrorMapBufferObjectFailed, 205, "This indicates that the buffer object could not be mapped") \
    XX(cudaErrorUnmapBufferObjectFailed, 206, "This indicates that the buffer object could not be unmapped") \
    XX(cudaErrorArrayIsMapped, 207, "This indicates that the specified array is currently mapped and thus cannot be destroyed") \
    XX(cudaErrorAlreadyMapped, 208, "This indicates that the resource is already mapped") \
    XX(cudaErrorNoKernelImageForDevice, 209, "no kernel image is available for execution on the device") \
    XX(cudaErrorAlreadyAcquired, 210, "This indicates that a resource has already been acquired") \
    XX(cudaErrorNotMapped, 211, "This indicates that a resource is not mapped") \
    XX(cudaErrorNotMappedAsArray, 212, "This indicates that a mapped resource is not available for access as an array") \
    XX(cudaErrorNotMappedAsPointer, 213, "This indicates that a mapped resource is not available for access as a pointer") \
    XX(cudaErrorECCUncorrectable, 214, "This indicates that an uncorrectable ECC error was detected during execution") \
    XX(cudaErrorUnsupportedLimit, 215, "This indicates that the cudaLimit passed to the API call is not supported by the active device") \
    XX(cudaErrorDeviceAlreadyInUse, 216, "This indicates that a call tried to access an exclusive-thread device that is already in use by a different thread") \
    XX(cudaErrorPeerAccessUnsupported, 217, "This error indicates that P2P access is not supported across the given devices") \
    XX(cudaErrorInvalidPtx, 218, "A PTX compilation failed") \
    XX(cudaErrorInvalidGraphicsContext, 219, "This indicates an error with the OpenGL or DirectX context") \
    XX(cudaErrorNvlinkUncorrectable, 220, "This indicates that an uncorrectable NVLink error was detected during the execution") \
    XX(cudaErrorJitCompilerNotFound, 221, "This indicates that the PTX JIT compiler library was not found") \
    XX(cudaErrorUnsupportedPtxVersion, 222, "This indicates that the provided PTX was compiled with an unsupported toolchain") \
    XX(cudaErrorJitCompilationDisabled, 223, "This indicates that the JIT compilation was disabled") \
    XX(cudaErrorUnsupportedExecAffinity, 224, "This indicates that the provided execution affinity is not supported by the device") \
    XX(cudaErrorUnsupportedDevSideSync, 225, "This indicates that the code to be compiled by the PTX JIT contains unsupported call to cudaDeviceSynchronize") \
    XX(cudaErrorContained, 226, "This indicates that an exception occurred on the device that is now contained by the GPU's error containment capability") \
    XX(cudaErrorInvalidSource, 300, "This indicates that the device kernel source is invalid") \
    XX(cudaErrorFileNotFound, 301, "This indicates that the file specified was not found") \
    XX(cudaErrorSharedObjectSymbolNotFound, 302, "This indicates that a link to a shared object failed to resolve") \
    XX(cudaErrorSharedObjectInitFailed, 303, "This indicates that initialization of a shared object failed") \
    XX(cudaErrorOperatingSystem, 304, "This error indicates that an OS call failed") \
    XX(cudaErrorInvalidResourceHandle, 400, "invalid resource handle") \
    XX(cudaErrorIllegalState, 401, "operation not permitted in current state") \
    XX(cudaErrorLossyQuery, 402, "This indicates an attempt was made to introspect an object in a way that would discard semantically important information") \
    XX(cudaErrorSymbolNotFound, 500, "named symbol not found") \
    XX(cudaErrorNotReady, 600, "device not ready") \
    XX(cudaErrorIllegalAddress, 700, "an illegal memory access was encountered") \
    XX(cudaErrorLaunchOutOfResources, 701, "too many resources requested for launch") \
    XX(cudaErrorLaunchTimeout, 702, "the launch timed out and was terminated") \
    XX(cudaErrorLaunchIncompatibleTexturing, 703, "This error indicates a kernel launch that uses an incompatible texturing mode") \
    XX(cudaErrorPeerAccessAlreadyEnabled, 704, "peer access is already enabled") \
    XX(cudaErrorPeerAccessNotEnabled, 705, "peer access has not been enabled") \
    XX(cudaErrorSetOnActiveProcess, 708, "cannot set while device is active in this process") \
    XX(cudaErrorContextIsDestroyed, 709, "context is destroyed") \
    XX(cudaErrorAssert, 710, "device-side assert triggered") \
    XX(cudaErrorTooManyPeers, 711, "This error indicates that the hardware resources required to enable peer access have been exhausted for one or more of the devices passed to cudaEnablePeerAccess()") \
    XX(cudaErrorHostMemoryAlreadyRegistered, 712, "part or all of the requested memory range is already mapped") \
    XX(cudaErrorHostMemoryNotRegistered, 713, "pointer does not correspond to a registered memory region") \
    XX(cudaErrorHardwareStackError, 714, "hardware stack error") \
    XX(cudaErrorIllegalInstruction, 715, "an illegal instruction was encountered") \
    XX(cudaErrorMisalignedAddress, 716, "misaligned address") \
    XX(cudaErrorInvalidAddressSpace, 717, "operation not supported on global/shared address space") \
    XX(cudaErrorInvalidPc, 718, "invalid program counter") \
    XX(cudaErrorLaunchFailure, 719, "unspecified launch failure") \
    XX(cudaErrorCooperativeLaunchTooLarge, 720, "too many blocks in cooperative launch") \
    XX(cudaErrorTensorMemoryLeak, 721, "An exception occurred on the device while exiting a kernel using tensor memory: the tensor memory was not completely deallocated") \
    XX(cudaErrorNotPermitted, 800, "operation not permitted") \
    XX(cudaErrorNotSupported, 801, "operation not supported") \
    XX(cudaErrorSystemNotReady, 802, "This error indicates that the system is not yet ready to start any CUDA work") \
    XX(cudaErrorSystemDriverMismatch, 803, "This error indicates that there is a mismatch between the versions of the display driver and the CUDA driver") \
    XX(cudaErrorCompatNotSupportedOnDevice, 804, "This error indicates that the system was upgraded to run with forward compatibility but the visible hardware detected by CUDA does not support this configuration") \
    XX(cudaErrorMpsConnectionFailed, 805, "This error indicates that the MPS client failed to connect to the MPS control daemon or the MPS server") \
    XX(cudaErrorMpsRpcFailure, 806, "This error indicates that the remote procedural call between the MPS server and the MPS client failed") \
    XX(cudaErrorMpsServerNotReady, 807, "This error indicates that the MPS server is not ready to accept new MPS client requests") \
    XX(cudaErrorMpsMaxClientsReached, 808, "This error indicates that the hardware resources required to create MPS client have been exhausted") \
    XX(cudaErrorMpsMaxConnectionsReached, 809, "This error indicates the the hardware resources required to device connections have been exhausted") \
    XX(cudaErrorMpsClientTerminated, 810, "This error indicates that the MPS client has been terminated by the server") \
    XX(cudaErrorCdpNotSupported, 811, "This error indicates, that the program is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it") \
    XX(cudaErrorCdpVersionMismatch, 812, "This error indicates, that the program contains an unsupported interaction between different versions of CUDA Dynamic Parallelism") \
    XX(cudaErrorStreamCaptureUnsupported, 900, "operation not permitted when stream is capturing") \
    XX(cudaErrorStreamCaptureInvalidated, 901, "operation failed due to a previous error during capture") \
    XX(cudaErrorStreamCaptureMerge, 902, "The operation would have resulted in a merge of two independent capture sequences") \
    XX(cudaErrorStreamCaptureUnmatched, 903, "The capture was not initiated in this stream") \
    XX(cudaErrorStreamCaptureUnjoined, 904, "The capture sequence contains a fork that was not joined to the primary stream") \
    XX(cudaErrorStreamCaptureIsolation, 905, "A dependency would have been created which crosses the capture sequence boundary") \
    XX(cudaErrorStreamCaptureImplicit, 906, "The operation would have resulted in a disallowed implicit dependency on a current capture sequence from cudaStreamLegacy") \
    XX(cudaErrorCapturedEvent, 907, "The operation is not permitted on an event which was last recorded in a capturing stream") \
    XX(cudaErrorStreamCaptureWrongThread, 908, "A stream capture sequence not initiated with the cudaStreamCaptureModeRelaxed argument to cudaStreamBeginCapture was passed to cudaStreamEndCapture in a different thread") \
    XX(cudaErrorTimeout, 909, "wait operation timed out") \
    XX(cudaErrorGraphExecUpdateFailure, 910, "This error indicates that the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
    XX(cudaErrorExternalDevice, 911, "This indicates that an async error has occurred in a device outside of CUDA. If CUDA was waiting for an external device's signal before consuming shared data, the external device signaled an error indicating that the data is not valid for consumption") \
    XX(cudaErrorInvalidClusterSize, 912, "This indicates that a kernel launch error has occurred due to cluster misconfiguration") \
    XX(cudaErrorFunctionNotLoaded, 913, "Indiciates a function handle is not loaded when calling an API that requires a loaded function") \
    XX(cudaErrorInvalidResourceType, 914, "This error indicates one or more resources passed in are not valid resource types for the operation") \
    XX(cudaErrorInvalidResourceConfiguration, 915, "This error indicates one or more resources are insufficient or non-applicable for the operation") \
    XX(cudaErrorUnknown, 999, "unknown error") \
    XX(cudaErrorApiFailureBase, 10000, "cudaErrorApiFailureBase")

#endif /* VCU_CUDART_ERRLIST_H */
