/*
 * TEST DOUBLE ONLY.  Kernel twins for the CPU stand-in for libcuda
 * (tests/fakecuda): the repository's own test kernels (the .cu files under
 * tests/cuda and tests/demo) re-written in C, found by the kernel's mangled
 * name when the stand-in's cuModuleGetFunction() is asked for it.  Not part
 * of the product.
 *
 * In the stand-in, device memory is host memory: a CUdeviceptr is a host
 * address, so a twin dereferences the pointers it gets as parameters.
 */
#ifndef VCU_TWIN_H
#define VCU_TWIN_H

#include <stddef.h>
#include <stdint.h>

typedef struct vcu_twin_dim3_s {
    uint32_t x, y, z;
} vcu_twin_dim3_t;

struct vcu_twin_launch_s;

typedef struct vcu_twin_launch_s {
    vcu_twin_dim3_t grid;
    vcu_twin_dim3_t block;
    size_t shared_mem;              /* dynamic shared memory bytes asked for */
    void *shared;                   /* shared_mem bytes, zeroed, per launch */
    int cooperative;                /* launched with cuLaunchCooperativeKernel */
    vcu_twin_dim3_t cluster;        /* blocks per cluster (1, 1, 1 without) */
    /*
     * Set by a twin to report what the GPU would have reported: a
     * CUresult (e.g. 700, CUDA_ERROR_ILLEGAL_ADDRESS, for an out-of-bounds
     * store).  The stand-in makes it the context's sticky error.
     */
    int fault;
    /* The launching module's copy of a device symbol (vcu_twin_globals),
     * or NULL if the module has none of that name. */
    void *(*global)(const struct vcu_twin_launch_s *launch, const char *name);
    void *module;                   /* the stand-in's; for global() */
    /*
     * 1 if [p, p + len) is memory this process's kernels may reach (a
     * device allocation, or registered host memory), as the GPU's page
     * tables would say; a twin that reads a pointer it did not make
     * checks it first and reports CUDA_ERROR_ILLEGAL_ADDRESS otherwise.
     */
    int (*addressable)(const void *p, size_t len);
    /* cudaGraphSetConditional(handle, value): 0, or -1 when handle is
     * none the stand-in made (the twin then reports a fault). */
    int (*set_conditional)(uint64_t handle, unsigned int value);
    /* The SMs the launching context runs on (its execution affinity, else
     * the device's): a twin reading %smid gives block b the SM b % sms. */
    unsigned int sms;
} vcu_twin_launch_t;

/*
 * Runs the whole grid: the twin loops over blocks and threads itself (and
 * so can model __syncthreads() and grid sync by splitting its loops).
 * params is the kernel's parameter buffer, laid out as params[] says.
 */
typedef void (*vcu_twin_fn)(vcu_twin_launch_t *launch, const void *params);

#define VCU_TWIN_MAX_PARAMS 64

typedef struct vcu_twin_s {
    const char *name;               /* mangled name, as in the fatbin */
    vcu_twin_fn fn;
    unsigned int nparams;
    struct {
        uint32_t offset;
        uint32_t size;
    } params[VCU_TWIN_MAX_PARAMS];  /* what cuFuncGetParamInfo reports */
    int num_regs;                   /* for cuFuncGetAttribute */
    size_t static_shared;           /* bytes of static __shared__ */
    /* Bytes of local memory a thread needs (its stack frame), for
     * cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES); past the
     * context's stack limit a launch grows the limit to it. */
    size_t local_size;
} vcu_twin_t;

/* The table of all twins, NULL-name terminated (tests/fakecuda/twins.c). */
extern const vcu_twin_t vcu_twins[];

/*
 * Device symbols (__device__ / __constant__ / __managed__ variables) of the test
 * programs, for cuModuleGetGlobal: each loaded module gets its own zeroed
 * (or init-filled) copy of every symbol whose name its image contains.
 */
typedef struct vcu_twin_global_s {
    const char *name;               /* as in the fatbin */
    size_t size;
    const void *init;               /* initial bytes, or NULL for zeros */
    int managed;                    /* __managed__: page aligned, IS_MANAGED */
} vcu_twin_global_t;

extern const vcu_twin_global_t vcu_twin_globals[];

#endif /* VCU_TWIN_H */
