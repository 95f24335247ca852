/*
 * virtio-cuda PCI bindings (modern only)
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"

#include "hw/virtio/virtio-pci.h"
#include "hw/virtio/virtio-cuda.h"
#include "hw/qdev-properties.h"
#include "qapi/error.h"
#include "qemu/module.h"
#include "qom/object.h"

typedef struct VirtIOCudaPCI VirtIOCudaPCI;

#define TYPE_VIRTIO_CUDA_PCI "virtio-cuda-pci-base"
DECLARE_INSTANCE_CHECKER(VirtIOCudaPCI, VIRTIO_CUDA_PCI,
                         TYPE_VIRTIO_CUDA_PCI)

struct VirtIOCudaPCI {
    VirtIOPCIProxy parent_obj;
    VirtIOCuda vdev;
};

static const Property virtio_cuda_pci_properties[] = {
    DEFINE_PROP_UINT32("vectors", VirtIOPCIProxy, nvectors,
                       DEV_NVECTORS_UNSPECIFIED),
};

static void virtio_cuda_pci_realize(VirtIOPCIProxy *vpci_dev, Error **errp)
{
    VirtIOCudaPCI *vcu = VIRTIO_CUDA_PCI(vpci_dev);
    DeviceState *vdev = DEVICE(&vcu->vdev);

    /* A new virtio ID has no legacy interface: modern (virtio 1.0) only. */
    virtio_pci_force_virtio_1(vpci_dev);

    if (vpci_dev->nvectors == DEV_NVECTORS_UNSPECIFIED) {
        /* One for the request queue, one for configuration changes. */
        vpci_dev->nvectors = 2;
    }

    qdev_realize(vdev, BUS(&vpci_dev->bus), errp);
}

static void virtio_cuda_pci_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    VirtioPCIClass *k = VIRTIO_PCI_CLASS(klass);
    PCIDeviceClass *pcidev_k = PCI_DEVICE_CLASS(klass);

    k->realize = virtio_cuda_pci_realize;
    set_bit(DEVICE_CATEGORY_MISC, dc->categories);
    device_class_set_props(dc, virtio_cuda_pci_properties);
    pcidev_k->class_id = PCI_CLASS_OTHERS;
}

static void virtio_cuda_pci_instance_init(Object *obj)
{
    VirtIOCudaPCI *dev = VIRTIO_CUDA_PCI(obj);

    virtio_instance_init_common(obj, &dev->vdev, sizeof(dev->vdev),
                                TYPE_VIRTIO_CUDA);
}

static const VirtioPCIDeviceTypeInfo virtio_cuda_pci_info = {
    .base_name     = TYPE_VIRTIO_CUDA_PCI,
    .generic_name  = "virtio-cuda-pci",
    .instance_size = sizeof(VirtIOCudaPCI),
    .instance_init = virtio_cuda_pci_instance_init,
    .class_init    = virtio_cuda_pci_class_init,
};

static void virtio_cuda_pci_register(void)
{
    virtio_pci_types_register(&virtio_cuda_pci_info);
}

type_init(virtio_cuda_pci_register)
