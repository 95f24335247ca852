/*
 * The CUDA runtime entry points this library exports but cannot support:
 * the one list.  Each XX(name, why) becomes a stub (cudart_stub.c) that
 * logs "virtio-cuda: <name> is not supported: <why>" once and returns
 * cudaErrorNotSupported, recorded as the thread's last error.
 *
 * Only functions returning cudaError_t belong here: the stub is defined
 * as cudaError_t name(void) and ignores the caller's arguments, which the
 * x86-64 calling convention allows.  Functions returning a struct, a
 * pointer or void are written out by hand (cudaCreateChannelDesc,
 * __cudaGetProcAddress, __cudaRegisterHostVar).  guest-lib/check-exports.sh
 * checks that this list and the implemented functions together cover every
 * name NVIDIA's libcudart.so.13 exports.
 */
#ifndef VCU_CUDART_UNSUPPORTED_H
#define VCU_CUDART_UNSUPPORTED_H

#include <driver_types.h>

/* Logs "virtio-cuda: name is not supported: why" once per *once and
 * returns cudaErrorNotSupported as the thread's last error (cudart_err.c). */
cudaError_t vcu__unsupported(int *once, const char *name, const char *why);

#define VCU__WHY_EXPORT "the guest has no driver export tables"
#define VCU__WHY_ARRAY "CUDA arrays, textures and surfaces come through NVIDIA's runtime only (libcuda.so.1 has them)"
#define VCU__WHY_EXTERNAL "external memory and semaphores are not in the protocol"
#define VCU__WHY_RDMA "no GPUDirect RDMA in the guest"
#define VCU__WHY_OTHER "not in the protocol"
#define VCU__WHY_NOTIFY "async notifications are not in the protocol"
#define VCU__WHY_GRAPHICS "graphics interop is not available in the guest"
#define VCU__WHY_GRAPH "graphs are built from new kernel, 1D copy, memset, host, empty, child graph and event nodes only"
#define VCU__WHY_IPC "CUDA IPC comes through NVIDIA's runtime only (libcuda.so.1 has it)"
#define VCU__WHY_LIBRARY "the library API is not in the protocol"
#define VCU__WHY_LOGS "the logs API is not offered"
#define VCU__WHY_MANAGED "only cudaMallocManaged, prefetch, advice and attachment are offered"
#define VCU__WHY_POOL "only the default memory pool is offered"
#define VCU__WHY_BATCH "batched copies are not in the protocol"
#define VCU__WHY_CLUSTER "thread block clusters are not in the protocol"

#define VCU__UNSUPPORTED_MAP(XX) \
    XX(__cudaRegisterUnifiedTable, EXPORT) \
    XX(cudaGetExportTable, EXPORT) \
    XX(cudaArrayGetInfo, ARRAY) \
    XX(cudaArrayGetMemoryRequirements, ARRAY) \
    XX(cudaArrayGetPlane, ARRAY) \
    XX(cudaArrayGetSparseProperties, ARRAY) \
    XX(cudaCreateSurfaceObject, ARRAY) \
    XX(cudaCreateTextureObject, ARRAY) \
    XX(cudaDestroySurfaceObject, ARRAY) \
    XX(cudaDestroyTextureObject, ARRAY) \
    XX(cudaDeviceGetTexture1DLinearMaxWidth, ARRAY) \
    XX(cudaFreeArray, ARRAY) \
    XX(cudaFreeMipmappedArray, ARRAY) \
    XX(cudaGetChannelDesc, ARRAY) \
    XX(cudaGetMipmappedArrayLevel, ARRAY) \
    XX(cudaGetSurfaceObjectResourceDesc, ARRAY) \
    XX(cudaGetTextureObjectResourceDesc, ARRAY) \
    XX(cudaGetTextureObjectResourceViewDesc, ARRAY) \
    XX(cudaGetTextureObjectTextureDesc, ARRAY) \
    XX(cudaMalloc3DArray, ARRAY) \
    XX(cudaMallocArray, ARRAY) \
    XX(cudaMallocMipmappedArray, ARRAY) \
    XX(cudaMemcpy2DArrayToArray, ARRAY) \
    XX(cudaMemcpy2DArrayToArray_ptds, ARRAY) \
    XX(cudaMemcpy2DFromArray, ARRAY) \
    XX(cudaMemcpy2DFromArrayAsync, ARRAY) \
    XX(cudaMemcpy2DFromArrayAsync_ptsz, ARRAY) \
    XX(cudaMemcpy2DFromArray_ptds, ARRAY) \
    XX(cudaMemcpy2DToArray, ARRAY) \
    XX(cudaMemcpy2DToArrayAsync, ARRAY) \
    XX(cudaMemcpy2DToArrayAsync_ptsz, ARRAY) \
    XX(cudaMemcpy2DToArray_ptds, ARRAY) \
    XX(cudaMemcpyArrayToArray, ARRAY) \
    XX(cudaMemcpyArrayToArray_ptds, ARRAY) \
    XX(cudaMemcpyFromArray, ARRAY) \
    XX(cudaMemcpyFromArrayAsync, ARRAY) \
    XX(cudaMemcpyFromArrayAsync_ptsz, ARRAY) \
    XX(cudaMemcpyFromArray_ptds, ARRAY) \
    XX(cudaMemcpyToArray, ARRAY) \
    XX(cudaMemcpyToArrayAsync, ARRAY) \
    XX(cudaMemcpyToArrayAsync_ptsz, ARRAY) \
    XX(cudaMemcpyToArray_ptds, ARRAY) \
    XX(cudaMipmappedArrayGetMemoryRequirements, ARRAY) \
    XX(cudaMipmappedArrayGetSparseProperties, ARRAY) \
    XX(cudaDestroyExternalMemory, EXTERNAL) \
    XX(cudaDestroyExternalSemaphore, EXTERNAL) \
    XX(cudaDeviceGetNvSciSyncAttributes, EXTERNAL) \
    XX(cudaExternalMemoryGetMappedBuffer, EXTERNAL) \
    XX(cudaExternalMemoryGetMappedMipmappedArray, EXTERNAL) \
    XX(cudaGraphAddExternalSemaphoresSignalNode, EXTERNAL) \
    XX(cudaGraphAddExternalSemaphoresWaitNode, EXTERNAL) \
    XX(cudaGraphExecExternalSemaphoresSignalNodeSetParams, EXTERNAL) \
    XX(cudaGraphExecExternalSemaphoresWaitNodeSetParams, EXTERNAL) \
    XX(cudaGraphExternalSemaphoresSignalNodeGetParams, EXTERNAL) \
    XX(cudaGraphExternalSemaphoresSignalNodeSetParams, EXTERNAL) \
    XX(cudaGraphExternalSemaphoresWaitNodeGetParams, EXTERNAL) \
    XX(cudaGraphExternalSemaphoresWaitNodeSetParams, EXTERNAL) \
    XX(cudaImportExternalMemory, EXTERNAL) \
    XX(cudaImportExternalSemaphore, EXTERNAL) \
    XX(cudaSignalExternalSemaphoresAsync, EXTERNAL) \
    XX(cudaSignalExternalSemaphoresAsync_ptsz, EXTERNAL) \
    XX(cudaWaitExternalSemaphoresAsync, EXTERNAL) \
    XX(cudaWaitExternalSemaphoresAsync_ptsz, EXTERNAL) \
    XX(cudaDeviceFlushGPUDirectRDMAWrites, RDMA) \
    XX(cudaDeviceGetHostAtomicCapabilities, OTHER) \
    XX(cudaDeviceGetP2PAtomicCapabilities, OTHER) \
    XX(cudaDeviceRegisterAsyncNotification, NOTIFY) \
    XX(cudaDeviceUnregisterAsyncNotification, NOTIFY) \
    XX(cudaEGLStreamConsumerAcquireFrame, GRAPHICS) \
    XX(cudaEGLStreamConsumerConnect, GRAPHICS) \
    XX(cudaEGLStreamConsumerConnectWithFlags, GRAPHICS) \
    XX(cudaEGLStreamConsumerDisconnect, GRAPHICS) \
    XX(cudaEGLStreamConsumerReleaseFrame, GRAPHICS) \
    XX(cudaEGLStreamProducerConnect, GRAPHICS) \
    XX(cudaEGLStreamProducerDisconnect, GRAPHICS) \
    XX(cudaEGLStreamProducerPresentFrame, GRAPHICS) \
    XX(cudaEGLStreamProducerReturnFrame, GRAPHICS) \
    XX(cudaEventCreateFromEGLSync, GRAPHICS) \
    XX(cudaGLGetDevices, GRAPHICS) \
    XX(cudaGLMapBufferObject, GRAPHICS) \
    XX(cudaGLMapBufferObjectAsync, GRAPHICS) \
    XX(cudaGLRegisterBufferObject, GRAPHICS) \
    XX(cudaGLSetBufferObjectMapFlags, GRAPHICS) \
    XX(cudaGLSetGLDevice, GRAPHICS) \
    XX(cudaGLUnmapBufferObject, GRAPHICS) \
    XX(cudaGLUnmapBufferObjectAsync, GRAPHICS) \
    XX(cudaGLUnregisterBufferObject, GRAPHICS) \
    XX(cudaGraphicsEGLRegisterImage, GRAPHICS) \
    XX(cudaGraphicsGLRegisterBuffer, GRAPHICS) \
    XX(cudaGraphicsGLRegisterImage, GRAPHICS) \
    XX(cudaGraphicsMapResources, GRAPHICS) \
    XX(cudaGraphicsResourceGetMappedEglFrame, GRAPHICS) \
    XX(cudaGraphicsResourceGetMappedMipmappedArray, GRAPHICS) \
    XX(cudaGraphicsResourceGetMappedPointer, GRAPHICS) \
    XX(cudaGraphicsResourceSetMapFlags, GRAPHICS) \
    XX(cudaGraphicsSubResourceGetMappedArray, GRAPHICS) \
    XX(cudaGraphicsUnmapResources, GRAPHICS) \
    XX(cudaGraphicsUnregisterResource, GRAPHICS) \
    XX(cudaGraphicsVDPAURegisterOutputSurface, GRAPHICS) \
    XX(cudaGraphicsVDPAURegisterVideoSurface, GRAPHICS) \
    XX(cudaVDPAUGetDevice, GRAPHICS) \
    XX(cudaVDPAUSetVDPAUDevice, GRAPHICS) \
    XX(cudaGraphAddDependencies, GRAPH) \
    XX(cudaGraphAddMemcpyNodeFromSymbol, GRAPH) \
    XX(cudaGraphAddMemcpyNodeToSymbol, GRAPH) \
    XX(cudaGraphDebugDotPrint, GRAPH) \
    XX(cudaGraphDestroyNode, GRAPH) \
    XX(cudaGraphExecMemcpyNodeSetParams, GRAPH) \
    XX(cudaGraphExecMemcpyNodeSetParamsFromSymbol, GRAPH) \
    XX(cudaGraphExecMemcpyNodeSetParamsToSymbol, GRAPH) \
    XX(cudaGraphExecNodeSetParams, GRAPH) \
    XX(cudaGraphHostNodeGetParams, GRAPH) \
    XX(cudaGraphKernelNodeCopyAttributes, GRAPH) \
    XX(cudaGraphKernelNodeGetAttribute, GRAPH) \
    XX(cudaGraphKernelNodeGetParams, GRAPH) \
    XX(cudaGraphKernelNodeSetAttribute, GRAPH) \
    XX(cudaGraphMemcpyNodeGetParams, GRAPH) \
    XX(cudaGraphMemcpyNodeSetParams, GRAPH) \
    XX(cudaGraphMemcpyNodeSetParamsFromSymbol, GRAPH) \
    XX(cudaGraphMemcpyNodeSetParamsToSymbol, GRAPH) \
    XX(cudaGraphMemsetNodeGetParams, GRAPH) \
    XX(cudaGraphNodeFindInClone, GRAPH) \
    XX(cudaGraphNodeGetDependencies, GRAPH) \
    XX(cudaGraphNodeGetDependentNodes, GRAPH) \
    XX(cudaGraphNodeSetParams, GRAPH) \
    XX(cudaGraphRemoveDependencies, GRAPH) \
    XX(cudaStreamUpdateCaptureDependencies, GRAPH) \
    XX(cudaStreamUpdateCaptureDependencies_ptsz, GRAPH) \
    XX(cudaIpcCloseMemHandle, IPC) \
    XX(cudaIpcGetEventHandle, IPC) \
    XX(cudaIpcGetMemHandle, IPC) \
    XX(cudaIpcOpenEventHandle, IPC) \
    XX(cudaIpcOpenMemHandle, IPC) \
    XX(cudaMemPoolExportPointer, IPC) \
    XX(cudaMemPoolExportToShareableHandle, IPC) \
    XX(cudaMemPoolImportFromShareableHandle, IPC) \
    XX(cudaMemPoolImportPointer, IPC) \
    XX(cudaLibraryEnumerateKernels, LIBRARY) \
    XX(cudaLibraryGetGlobal, LIBRARY) \
    XX(cudaLibraryGetKernel, LIBRARY) \
    XX(cudaLibraryGetKernelCount, LIBRARY) \
    XX(cudaLibraryGetManaged, LIBRARY) \
    XX(cudaLibraryGetUnifiedFunction, LIBRARY) \
    XX(cudaLibraryLoadData, LIBRARY) \
    XX(cudaLibraryLoadFromFile, LIBRARY) \
    XX(cudaLibraryUnload, LIBRARY) \
    XX(cudaLogsCurrent, LOGS) \
    XX(cudaLogsDumpToFile, LOGS) \
    XX(cudaLogsDumpToMemory, LOGS) \
    XX(cudaLogsRegisterCallback, LOGS) \
    XX(cudaLogsUnregisterCallback, LOGS) \
    XX(cudaMemDiscardAndPrefetchBatchAsync, MANAGED) \
    XX(cudaMemDiscardAndPrefetchBatchAsync_ptsz, MANAGED) \
    XX(cudaMemDiscardBatchAsync, MANAGED) \
    XX(cudaMemDiscardBatchAsync_ptsz, MANAGED) \
    XX(cudaMemPrefetchBatchAsync, MANAGED) \
    XX(cudaMemPrefetchBatchAsync_ptsz, MANAGED) \
    XX(cudaMemRangeGetAttribute, MANAGED) \
    XX(cudaMemRangeGetAttributes, MANAGED) \
    XX(cudaMemPoolCreate, POOL) \
    XX(cudaMemPoolDestroy, POOL) \
    XX(cudaMemPoolGetAccess, POOL) \
    XX(cudaMemPoolSetAccess, POOL) \
    XX(cudaMemcpy3DBatchAsync, BATCH) \
    XX(cudaMemcpy3DBatchAsync_ptsz, BATCH) \
    XX(cudaMemcpyBatchAsync, BATCH) \
    XX(cudaMemcpyBatchAsync_ptsz, BATCH) \
    XX(cudaOccupancyMaxActiveClusters, CLUSTER) \
    XX(cudaOccupancyMaxPotentialClusterSize, CLUSTER)

#endif /* VCU_CUDART_UNSUPPORTED_H */
