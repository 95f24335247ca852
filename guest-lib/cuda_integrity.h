/*
 * MD2 (RFC 1319) and the integrity check of NVIDIA's INTEGRITY_CHECK
 * export table (HMAC-MD2 over what the runtime and the driver both know:
 * docs/driver-api.md).  No CUDA and no I/O here: the unit tests build
 * this file on its own.  Private names: vcu__.
 */
#ifndef VCU_CUDA_INTEGRITY_H
#define VCU_CUDA_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

typedef struct vcu__md2_s {
    uint8_t x[48];                  /* state; x[0..16) is the digest */
    uint8_t c[16];                  /* checksum */
    uint8_t buf[16];                /* the block being filled */
    uint8_t l;                      /* last checksum byte */
    unsigned int n;                 /* bytes in buf */
} vcu__md2_t;

void vcu__md2_init(vcu__md2_t *m);
void vcu__md2_update(vcu__md2_t *m, const void *data, size_t len);
void vcu__md2_final(vcu__md2_t *m, uint8_t digest[16]);

/* HMAC (RFC 2104) over MD2, whose block is 16 bytes: the key is one block. */
void vcu__hmac_md2(const uint8_t key[16], const void *msg, size_t len, uint8_t mac[16]);

/* What the check hashes, in this layout (48 bytes, then one record of 28
 * bytes per device in device order). */
typedef struct vcu__integrity_in_s {
    uint32_t driver_version;        /* cuDriverGetVersion */
    uint32_t version;               /* the caller's argument */
    uint32_t pid;                   /* getpid() */
    uint32_t tid;                   /* pthread_self(), truncated */
    const void *cudart_table;       /* CUDART_INTERFACE as cuGetExportTable gave it */
    const void *integrity_table;    /* INTEGRITY_CHECK as cuGetExportTable gave it */
    const void *integrity_fn;       /* its slot 1 */
    uint64_t unix_seconds;          /* the caller's argument */
} vcu__integrity_in_t;

typedef struct vcu__integrity_dev_s {
    uint8_t uuid[16];               /* cuDeviceGetUuid_v2 */
    int32_t pci_domain, pci_bus, pci_device;    /* cuDeviceGetAttribute */
} vcu__integrity_dev_t;

/*
 * The check's answer for version: two constants where version % 10 is 0
 * or 1, else HMAC-MD2 of in and devs[0..ndev) under the driver's key,
 * as two native-order 64-bit words.
 */
void vcu__integrity(const vcu__integrity_in_t *in, const vcu__integrity_dev_t *devs, int ndev,
                    uint64_t out[2]);

#endif /* VCU_CUDA_INTEGRITY_H */
