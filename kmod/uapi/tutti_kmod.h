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

#define TUTTI_KMOD_ABI 1 /* bumped when a command is added */

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

#define TUTTI_IOC_MAGIC 0xB7
#define TUTTI_IOC_GET_VERSION _IOWR(TUTTI_IOC_MAGIC, 0x00, struct tutti_version)
#define TUTTI_IOC_PIN _IOWR(TUTTI_IOC_MAGIC, 0x01, struct tutti_pin)
#define TUTTI_IOC_UNPIN _IOW(TUTTI_IOC_MAGIC, 0x02, __u64)

#endif
