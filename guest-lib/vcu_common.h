/*
 * What libcudart.so.13 and libcuda.so.1 share beyond the transport: the
 * handle registry, log-once messages, and the view of the VM's devices a
 * program gets (CUDA_VISIBLE_DEVICES, virtual PCI addresses).  Each
 * library links its own copy (hidden symbols): state is per library.
 * Private names: vcu__.
 */
#ifndef VCU_COMMON_H
#define VCU_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "vcu_transport.h"

/* Writes the message to stderr the first time *flag is seen clear. */
void vcu__log_once(int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Handle registry: is this pointer one of ours, alive, of this kind?  A
 * handle a program passes is looked up by value before it is ever
 * dereferenced.  Kinds are the library's own small positive numbers.
 * vcu__reg_add returns 0 or VCU_ENOMEM.
 */
int vcu__reg_add(const void *p, int kind);
int vcu__reg_has(const void *p, int kind);
void vcu__reg_del(const void *p);

/*
 * The host's description of virtual device vord (CU_DEVICE_INFO): 0 with
 * out filled (its name NUL-terminated, r.result the driver's answer), or
 * the transport's VCU_E* code.
 */
int vcu__device_info(vcu_conn_t *conn, uint32_t vord, struct vcu_cu_device_info_resp *out);

/* The device file: $VCU_DEVICE, else /dev/vcuda0. */
const char *vcu__dev_path(void);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" as nvidia-smi writes it. */
void vcu__uuid_str(const uint8_t *u, char *buf, size_t len);

/*
 * The VM's devices (virtual ordinals 0..n-1) a program sees, in its
 * order: CUDA_VISIBLE_DEVICES (env, may be NULL: all) as NVIDIA's driver
 * reads it, indices or GPU-<uuid prefix>, the list ending at the first
 * invalid or repeated entry.  uuid_of(arg, vord, uuid) gives a device's
 * UUID (0) or fails (-1).  Fills vord[0..] (at most max) and returns how
 * many.
 */
int vcu__visible_devices(const char *env, uint32_t n,
                         int (*uuid_of)(void *arg, uint32_t vord, uint8_t uuid[16]),
                         void *arg, uint32_t *vord, int max);

/*
 * The guest PCI address of the device file's virtio device (the virtual
 * GPUs behind it take consecutive device numbers from its slot).
 * Returns 1 and fills the three, or 0 where sysfs does not say.
 */
int vcu__pci_addr(const char *devpath, unsigned int *dom, unsigned int *bus,
                  unsigned int *slot);

/*
 * Device printf output the host captured for the session (CU_TAKE_OUTPUT
 * in vcu_proto.h), moved to stdout with fwrite(): through the program's
 * own stdio buffer, so that it lands in order with what the program
 * printed before the call that flushed it.  vord: the device on the
 * wire; flags: VCU_CU_TAKE_F_*.  A host that does not capture (loopback:
 * the output already went to this process's stdout) answers len 0.
 * Sent straight on the connection: it must not take an earlier call's
 * deferred error.  Errors end it quietly: the output is lost, not the
 * program's call.
 */
void vcu__output_take(vcu_conn_t *c, uint32_t vord, uint64_t flags);

/*
 * How a module goes to the host (vcu_modhash.c): sent (CU_MODULE_LOAD, or
 * with keep CU_MODULE_LOAD_KEEP, whose reply's hash vcu__module_remember()
 * keeps), or first named by req (CU_MODULE_LOAD_HASH), the hash computed
 * here or remembered; a miss (CUDA_ERROR_FILE_NOT_FOUND) is then sent.
 */
#define VCU__MN_SEND 0
#define VCU__MN_NAMED 1
#define VCU__MN_REMEMBERED 2

typedef struct vcu__modname_s {
    int how;                        /* VCU__MN_* */
    int keep;                       /* send with CU_MODULE_LOAD_KEEP, remember the hash */
    int dfd;                        /* the memo directory */
    char memo[65];                  /* the memo file of this image */
    struct vcu_cu_module_hash_req req;
} vcu__modname_t;

/*
 * Where the image at src (src_len bytes) comes from, as the memo knows
 * images: the file of the read-only mapping holding it (device, inode,
 * size, mtime, ctime), the offset and the length, into id (cap bytes;
 * 128 are enough).  1, or 0 with id "" (not in such a mapping, or
 * $VCU_MODULE_MEMO is "off").  To be taken while the bytes at src are
 * those that will be loaded (a library's copy: when it is made).
 */
#define VCU__SRC_ID_LEN 160
int vcu__module_src_id(const void *src, uint64_t src_len, char *id, size_t cap);

/*
 * Decides, for the image img (len bytes, as it would be sent, trimmed
 * for arch from the source src_id names, NULL or "": none), on device
 * vord: nothing of the cache without VCU_FEAT_MODULE_CACHE or with
 * $VCU_MODULE_CACHE "off".
 */
void vcu__module_name(const vcu_conn_t *c, uint32_t vord, const void *img, uint64_t len,
                      const char *src_id, unsigned int arch, vcu__modname_t *n);

/* After a CU_MODULE_LOAD_KEEP that succeeded: remembers its hash. */
void vcu__module_remember(const vcu__modname_t *n, const unsigned char *sha256);

/*
 * The request of one launch (CU_LAUNCH or CU_LAUNCH_EX: the header, the
 * launch attributes, then the parameters), built in a buffer the calling
 * thread keeps from one launch to the next, so that a launch allocates
 * nothing: vcu__launch_buf() gives it (NULL: out of memory), and
 * vcu__launch_buf_put() takes it back once the request is sent.  A
 * thread's buffer is freed when the thread ends; a launch that starts
 * while its thread's buffer is taken (a nested call) gets one of its own.
 */
typedef struct {
    struct vcu_cu_launch_ex_req r;  /* CU_LAUNCH's request is its first member */
    struct vcu_cu_launch_attr attrs[VCU_CU_MAX_LAUNCH_ATTRS + 1];
    uint8_t params[VCU_CU_MAX_PARAM_BYTES];
} vcu__launch_req_t;
vcu__launch_req_t *vcu__launch_buf(void);
void vcu__launch_buf_put(vcu__launch_req_t *buf);

#endif /* VCU_COMMON_H */
