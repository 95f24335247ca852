/*
 * One stub per entry of VCU__UNSUPPORTED_MAP.  This file sees the list
 * and driver_types.h only: the stubs' (void) prototypes must not meet the
 * real ones of cuda_runtime_api.h.
 */
#include "cudart_unsupported.h"

#define VCU__STUB(name, why)                                                     \
    __attribute__((visibility("default"))) cudaError_t name(void);              \
    __attribute__((visibility("default"))) cudaError_t name(void)               \
    {                                                                            \
        static int once;                                                         \
        return vcu__unsupported(&once, #name, VCU__WHY_##why);                   \
    }

VCU__UNSUPPORTED_MAP(VCU__STUB)
