/*
 * The tables gen-cuda.py generates for libcuda.so.1 from cuda_calls.list
 * and CUDA's headers.  This header sees no cuda.h: the generated file
 * declares every entry point as void(void) to take its address.
 */
#ifndef VCU_CUDA_GEN_H
#define VCU_CUDA_GEN_H

#include <stddef.h>

/*
 * One ABI variant cuGetProcAddress can hand out: base name, the CUDA
 * version that introduced it, 1 for a per-thread default stream variant
 * (_ptds/_ptsz), the version of the default variant whose ABI it has, and
 * the exported function.  Sorted by base (strcmp), then per_thread, then
 * version.
 */
typedef struct vcu__proc_s {
    const char *base;
    int version;
    int per_thread;
    int abi;
    void *fn;
} vcu__proc_t;

extern const vcu__proc_t vcu__procs[];
extern const size_t vcu__nprocs;

/* Every CUresult of cuda.h: value, name, message. */
typedef struct vcu__errname_s {
    int code;
    const char *name;
    const char *msg;
} vcu__errname_t;

extern const vcu__errname_t vcu__errnames[];
extern const size_t vcu__nerrnames;

/* The generated stubs' body: logs "libcuda (virtio-cuda): <name> is not
 * supported" the first time and returns CUDA_ERROR_NOT_SUPPORTED. */
int vcu__cu_unsupported(int *once, const char *name);

#endif /* VCU_CUDA_GEN_H */
