/*
 * libcuda.so.1: JIT linking (cuLinkCreate .. cuLinkDestroy).  A link
 * state gathers its inputs here, in the guest; cuLinkComplete sends them
 * all in one CU_LINK request, the session's worker links them with the
 * host's driver and returns the image, which the state owns until
 * cuLinkDestroy, as NVIDIA's does.  JIT options: plain values go to the
 * host; the error and info logs are filled here from the host's error
 * log; the wall time is 0 (not measured); others are
 * CUDA_ERROR_NOT_SUPPORTED, logged once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

typedef struct vcu__link_s {
    int dev;
    unsigned char *in;              /* the CU_LINK input records */
    size_t len, cap;
    uint32_t ninputs;
    uint32_t nopts;
    struct vcu_cu_link_opt opt[VCU_CU_MAX_LINK_OPTS];
    char *errlog, *infolog;
    size_t errlog_size, infolog_size;
    void *image;                    /* after cuLinkComplete */
} vcu__link_t;

static CUresult vcu__link_refused(CUjit_option o)
{
    static int logged;

    vcu__log_once(&logged, "libcuda (virtio-cuda): cuLinkCreate: JIT option %d is not "
                           "supported\n", (int)o);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static void vcu__link_free(vcu__link_t *l)
{
    free(l->in);
    free(l->image);
    free(l);
}

VCU__EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options,
                                     void **optionValues, CUlinkState *stateOut)
{
    vcu__link_t *l;
    vcu__ctx_t *c;
    CUresult e;

    if (stateOut == NULL || (numOptions > 0 && (options == NULL || optionValues == NULL)))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    l->dev = c->dev;
    for (unsigned int i = 0; i < numOptions; i++) {
        void *v = optionValues[i];

        switch (options[i]) {
        case CU_JIT_ERROR_LOG_BUFFER:
            l->errlog = v;
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            l->errlog_size = (size_t)(uintptr_t)v;
            break;
        case CU_JIT_INFO_LOG_BUFFER:
            l->infolog = v;
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            l->infolog_size = (size_t)(uintptr_t)v;
            break;
        case CU_JIT_WALL_TIME: {
            float zero = 0.0f;      /* an output in the slot: not measured */

            memcpy(&optionValues[i], &zero, sizeof(zero));
            break;
        }
        default:
            if (!VCU_CU_LINK_OPT_PLAIN((unsigned int)options[i]) ||
                l->nopts == VCU_CU_MAX_LINK_OPTS) {
                vcu__link_free(l);
                return vcu__link_refused(options[i]);
            }
            l->opt[l->nopts].id = (uint32_t)options[i];
            l->opt[l->nopts].value = (uint64_t)(uintptr_t)v;
            l->nopts++;
        }
    }
    if (l->errlog != NULL && l->errlog_size > 0)
        l->errlog[0] = '\0';
    if (l->infolog != NULL && l->infolog_size > 0)
        l->infolog[0] = '\0';
    *stateOut = (CUlinkState)l;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options,
                                  void **optionValues, CUlinkState *stateOut)
{
    return cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}

VCU__EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data,
                                      size_t size, const char *name, unsigned int numOptions,
                                      CUjit_option *options, void **optionValues)
{
    vcu__link_t *l = (vcu__link_t *)state;
    struct vcu_cu_link_input r;
    size_t nlen = name != NULL ? strnlen(name, VCU_CU_NAME_MAX + 1) : 0;
    size_t need;

    (void)options;
    (void)optionValues;
    if (l == NULL || data == NULL || size == 0 || (unsigned int)type > CU_JIT_INPUT_LIBRARY ||
        nlen > VCU_CU_NAME_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (numOptions > 0) {
        static int logged;

        vcu__log_once(&logged, "libcuda (virtio-cuda): cuLinkAddData: options of one input "
                               "are not supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (l->image != NULL || l->ninputs == VCU_CU_MAX_LINK_INPUTS)
        return CUDA_ERROR_INVALID_VALUE;
    need = sizeof(r) + nlen + size;
    if (need < size || l->len + need > VCU_CU_MAX_LINK_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    if (l->len + need > l->cap) {
        size_t ncap = l->cap ? l->cap : 65536;
        unsigned char *n;

        while (ncap < l->len + need)
            ncap *= 2;
        n = realloc(l->in, ncap);
        if (n == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        l->in = n;
        l->cap = ncap;
    }
    r.type = (uint32_t)type;
    r.name_len = (uint32_t)nlen;
    r.data_len = size;
    memcpy(l->in + l->len, &r, sizeof(r));
    memcpy(l->in + l->len + sizeof(r), name, nlen);
    memcpy(l->in + l->len + sizeof(r) + nlen, data, size);
    l->len += need;
    l->ninputs++;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data,
                                   size_t size, const char *name, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues)
{
    return cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}

VCU__EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                      unsigned int numOptions, CUjit_option *options,
                                      void **optionValues)
{
    FILE *f;
    char *buf;
    long n;
    CUresult e;

    if (state == NULL || path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    f = fopen(path, "rb");
    if (f == NULL)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 ||
        (unsigned long)n > VCU_CU_MAX_LINK_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return CUDA_ERROR_INVALID_VALUE;
    }
    buf = malloc((size_t)n);
    if (buf == NULL) {
        fclose(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    fclose(f);
    e = cuLinkAddData_v2(state, type, buf, (size_t)n, path, numOptions, options, optionValues);
    free(buf);
    return e;
}

VCU__EXPORT CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
                                   unsigned int numOptions, CUjit_option *options,
                                   void **optionValues)
{
    return cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}

/* Copies the host's error log into the caller's buffers. */
static void vcu__link_logs(vcu__link_t *l, const char *log)
{
    if (l->errlog != NULL && l->errlog_size > 0)
        snprintf(l->errlog, l->errlog_size, "%s", log);
    if (l->infolog != NULL && l->infolog_size > 0)
        l->infolog[0] = '\0';
}

VCU__EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    vcu__link_t *l = (vcu__link_t *)state;
    struct vcu_cu_link_req r;
    struct vcu_cu_link_resp *o;
    size_t room = 1u << 20;
    CUresult e;

    if (l == NULL || cubinOut == NULL || sizeOut == NULL || l->ninputs == 0 || l->image != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    o = malloc(sizeof(*o));
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.nopts = l->nopts;
    r.ninputs = l->ninputs;
    memcpy(r.opt, l->opt, sizeof(r.opt));
    for (;;) {
        void *img = malloc(room);
        vcu_buf_t b[2] = {
            { l->in, l->len, VCU_SEG_TO_DEVICE },
            { img, room, VCU_SEG_FROM_DEVICE },
        };

        if (img == NULL) {
            e = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        memset(o, 0, sizeof(*o));
        e = vcu__call(l->dev, VCU_OP_CU_LINK, &r, sizeof(r), b, 2, o, sizeof(*o));
        o->log[VCU_CU_LINK_LOG - 1] = '\0';
        vcu__link_logs(l, o->log);
        if (e == CUDA_SUCCESS && o->image_len > room && o->image_len <= VCU_CU_MAX_LINK_BYTES) {
            room = (size_t)o->image_len;            /* again, with room for it */
            free(img);
            continue;
        }
        if (e == CUDA_SUCCESS && (o->image_len == 0 || o->image_len > room))
            e = CUDA_ERROR_UNKNOWN;
        if (e != CUDA_SUCCESS) {
            free(img);
            break;
        }
        l->image = img;
        *cubinOut = img;
        *sizeOut = (size_t)o->image_len;
        break;
    }
    free(o);
    return e;
}

VCU__EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
    if (state == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    vcu__link_free((vcu__link_t *)state);
    return CUDA_SUCCESS;
}
