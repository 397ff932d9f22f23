/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The NVMe controllers dedicated to tutti (nvme.c) as the lease code (lease.c) sees them, and
 * the rule for which page of a controller's BAR 0 may be mapped as a queue pair's doorbell
 * page: plain C, outside __KERNEL__, so that tests/kmod/kmod_test.c checks it for page sizes
 * the QEMU guest does not have.
 */
#ifndef TUTTI_NVME_H
#define TUTTI_NVME_H

#define TUTTI_NVME_DOORBELLS 0x1000ull /* registers below, doorbells from here */

/*
 * Does the page at byte offset `page` of BAR 0, `page_bytes` long, hold doorbells and nothing
 * else? It must start at or after the first doorbell (below are CC, AQA, ASQ, ACQ: whoever
 * writes those owns the controller) and end by the 4 KiB boundary that follows the doorbells
 * of the last queue the controller granted (`max_queues` I/O queues, stride 4 << dstrd bytes):
 * nothing else may share a 4 KiB range with them (an MSI-X table in BAR 0 is kept out of any
 * 4 KiB range with other registers by PCI). With 4 KiB pages every queue's doorbell page
 * passes; with larger ones the page of the first doorbells also holds the registers.
 */
static inline int tutti_doorbell_page_ok(unsigned long long page, unsigned long long page_bytes, unsigned int dstrd,
					 unsigned int max_queues)
{
	unsigned long long end = TUTTI_NVME_DOORBELLS + 2ull * (max_queues + 1) * (4ull << dstrd);

	end = (end + 4095) & ~4095ull;
	return page >= TUTTI_NVME_DOORBELLS && page + page_bytes <= end;
}

#ifdef __KERNEL__
#include <linux/kref.h>
#include <linux/mm_types.h>
#include <linux/mutex.h>
#include <linux/pci.h>

#include "uapi/tutti_kmod.h"

#define TUTTI_MAX_QUEUES 64   /* I/O queue pairs asked of a controller */
#define TUTTI_MAX_DEPTH 1024  /* entries per I/O queue */

struct tutti_ctrl {
	struct list_head node; /* in the list of bound controllers */
	struct kref ref;       /* the binding, and every queue pair and DMA mapping on it */
	struct pci_dev *pdev;
	unsigned int index;
	void __iomem *bar;
	resource_size_t bar_phys;
	u32 dstrd, mqes, max_queues;

	struct mutex admin_lock; /* the admin queue, qids, dead; doorbell faults */
	bool dead;               /* disabled (removed, or its admin queue timed out): it does no DMA */
	void *asq, *acq;
	dma_addr_t asq_dma, acq_dma;
	u16 asq_tail;            /* the entry the next admin command goes to */
	u16 acq_head, admin_cid; /* admin command ids are never 0: a zeroed entry's is */
	u8 acq_phase;
	struct mutex scratch_lock; /* scratch, one caller at a time */
	void *scratch;           /* one page for Identify data */
	dma_addr_t scratch_dma;
	DECLARE_BITMAP(qids, TUTTI_MAX_QUEUES + 1);
};

/* An I/O queue pair with its command-id list pages, polled by user space. */
struct tutti_qp_mem {
	struct list_head node; /* in the lease */
	struct tutti_ctrl *ctrl;
	u64 token;
	u16 qid;
	u32 depth;
	void *mem[TUTTI_QP_REGIONS];            /* SQ, CQ, -, lists */
	dma_addr_t dma[TUTTI_QP_REGIONS];
	u32 region_bytes[TUTTI_QP_REGIONS];
	resource_size_t doorbell_page;          /* bus address of the page with its doorbells */
	u32 sq_doorbell, cq_doorbell;           /* offsets in that page */
	dma_addr_t lists_dma;
	atomic_t mappings;                      /* user mappings: no delete while there are any */
};

int tutti_nvme_register(void);
void tutti_nvme_unregister(void);

struct tutti_ctrl *tutti_ctrl_get(unsigned int index); /* NULL if none is bound there */
void tutti_ctrl_put(struct tutti_ctrl *c);

/* Identify (CNS cns, namespace nsid) into 4096 bytes of user memory. */
int tutti_identify(struct tutti_ctrl *c, u32 cns, u32 nsid, void __user *out);

struct tutti_qp_mem *tutti_qp_create(struct tutti_ctrl *c, u32 depth);
void tutti_qp_destroy(struct tutti_qp_mem *q);
int tutti_qp_mmap(struct tutti_qp_mem *q, unsigned int region, struct vm_area_struct *vma);

void tutti_zap_mappings(void); /* lease.c */

#endif /* __KERNEL__ */
#endif
