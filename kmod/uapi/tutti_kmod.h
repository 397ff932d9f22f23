/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * tutti_kmod.h — the interface between the tutti kernel module (/dev/tutti) and user space,
 * shared by kmod/ and lib/. Fixed-width fields only; every struct starts with its size. A new
 * layout of a struct gets a new command number; commands the module does not know fail with
 * ENOTTY. TUTTI_IOC_GET_VERSION never changes.
 */
#ifndef TUTTI_KMOD_UAPI_H
#define TUTTI_KMOD_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define TUTTI_KMOD_ABI 2 /* bumped when a command is added */

struct tutti_version {
	__u32 size;  /* sizeof(struct tutti_version), set by the caller */
	__u32 abi;   /* TUTTI_KMOD_ABI of the module */
	__u32 major, minor, patch;
	__u32 reserved;
};

/* Pins a page-aligned range of the caller's memory for DMA until TUTTI_IOC_UNPIN or until
 * the file is closed (also when the process dies). */
struct tutti_pin {
	__u32 size;      /* sizeof(struct tutti_pin) */
	__u32 reserved;
	__u64 addr;      /* page aligned */
	__u64 length;    /* page multiple, at most TUTTI_PIN_MAX */
	__u64 handle;    /* out: names the pinned range */
};

#define TUTTI_PIN_MAX (1ULL << 32)

/*
 * NVMe controllers dedicated to tutti: an operator hands a controller to the module with
 *   echo tutti_nvme > /sys/bus/pci/devices/BDF/driver_override   (then unbind it from nvme and
 *   echo BDF > /sys/bus/pci/drivers_probe). The module matches no device on its own.
 * Controllers are numbered from 0 in the order they were bound.
 */
struct tutti_ctrl_info {
	__u32 size;       /* sizeof(struct tutti_ctrl_info) */
	__u32 ctrl;       /* in: controller number */
	__u32 max_queues; /* I/O queue pairs the controller granted */
	__u32 mqes;       /* largest queue depth (CAP.MQES + 1) */
	__u32 dstrd;      /* doorbell stride: 4 << dstrd bytes */
	__u32 nsid;       /* in: the namespace for identify_ns (0: namespace 1) */
	__u64 identify;   /* in: user address of 4096 bytes: Identify Controller data is copied there */
	__u64 identify_ns;/* in: user address of 4096 bytes for Identify Namespace nsid, or 0 */
	char bdf[16];     /* out: PCI address, e.g. "0000:00:05.0" */
};

/*
 * An I/O queue pair on a controller, polled (no interrupts), owned by the lease. Its memory is
 * mapped with mmap() on /dev/tutti at offset (token * TUTTI_QP_REGIONS + region) * page size:
 * the submission queue, the completion queue, the page holding its two doorbells, and one
 * page per command id for PRP lists or SGL segments (bus address: lists_dma + cid * page).
 */
enum { TUTTI_QP_SQ = 0, TUTTI_QP_CQ = 1, TUTTI_QP_DOORBELLS = 2, TUTTI_QP_LISTS = 3, TUTTI_QP_REGIONS = 4 };

struct tutti_qp {
	__u32 size;      /* sizeof(struct tutti_qp) */
	__u32 ctrl;      /* in */
	__u32 depth;     /* in: entries per queue, 2..mqes */
	__u32 qid;       /* out: the queue id on the controller */
	__u64 token;     /* out: names the pair in mmap offsets and TUTTI_IOC_DELETE_QP */
	__u32 sq_doorbell;  /* out: byte offsets of the doorbells in the doorbell page */
	__u32 cq_doorbell;
	__u64 lists_dma; /* out: bus address of the command-id pages */
	__u32 region_bytes[TUTTI_QP_REGIONS]; /* out: length to mmap for each region */
};

/*
 * DMA-maps memory for a controller: a range pinned with TUTTI_IOC_PIN (dmabuf_fd = -1) or a
 * dma-buf (GPU memory on real hardware). The bus address of every page is written to the
 * user array iovas (capacity npages). Unmapped with TUTTI_IOC_UNMAP_DMA or with the lease.
 */
struct tutti_dma_map {
	__u32 size;      /* sizeof(struct tutti_dma_map) */
	__u32 ctrl;      /* in */
	__s32 dmabuf_fd; /* in: a dma-buf, or -1 for the pinned range `pinned` */
	__u32 reserved;
	__u64 pinned;    /* in: handle from TUTTI_IOC_PIN when dmabuf_fd is -1 */
	__u64 iovas;     /* in: user address of npages __u64s */
	__u64 npages;    /* in: capacity of iovas; out: pages mapped */
	__u64 handle;    /* out: names the mapping */
};

#define TUTTI_IOC_MAGIC 0xB7
#define TUTTI_IOC_GET_VERSION _IOWR(TUTTI_IOC_MAGIC, 0x00, struct tutti_version)
#define TUTTI_IOC_PIN _IOWR(TUTTI_IOC_MAGIC, 0x01, struct tutti_pin)
#define TUTTI_IOC_UNPIN _IOW(TUTTI_IOC_MAGIC, 0x02, __u64)
#define TUTTI_IOC_CTRL_INFO _IOWR(TUTTI_IOC_MAGIC, 0x03, struct tutti_ctrl_info)
#define TUTTI_IOC_CREATE_QP _IOWR(TUTTI_IOC_MAGIC, 0x04, struct tutti_qp)
#define TUTTI_IOC_DELETE_QP _IOW(TUTTI_IOC_MAGIC, 0x05, __u64)
#define TUTTI_IOC_MAP_DMA _IOWR(TUTTI_IOC_MAGIC, 0x06, struct tutti_dma_map)
#define TUTTI_IOC_UNMAP_DMA _IOW(TUTTI_IOC_MAGIC, 0x07, __u64)

#endif
