/*
 * libnvidia-ml.so.1 internals: NVIDIA's nvml.h (every versioned and
 * unversioned name declared, so each can be defined), the export
 * attributes, and the default answer the generated entry points give.
 * Private names: vcu__.
 */
#ifndef VCU_NVML_INT_H
#define VCU_NVML_INT_H

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#define VCU__NVML_EXPORT __attribute__((visibility("default")))
/* Generated defaults (gen-nvml.py): nvml.c's definitions replace them. */
#define VCU__NVML_WEAK __attribute__((weak, visibility("default")))

enum {
    VCU__NVML_UNSUPPORTED,          /* a query the slice cannot answer */
    VCU__NVML_SETTER,               /* a change to the GPU: never the guest's */
};

/*
 * What a name this library does not implement answers:
 * NVML_ERROR_UNINITIALIZED before nvmlInit, else NVML_ERROR_NO_PERMISSION
 * for a setter and NVML_ERROR_NOT_SUPPORTED for anything else.  With
 * VCU_NVML_TRACE set, each such call is named on stderr.
 */
nvmlReturn_t vcu__nvml_default(int kind, const char *name);

#endif /* VCU_NVML_INT_H */
