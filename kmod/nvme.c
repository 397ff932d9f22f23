// SPDX-License-Identifier: GPL-2.0
/*
 * A minimal NVMe controller driver for controllers an operator dedicates to tutti. The kernel
 * keeps the admin queue (polled, no interrupts); user space gets I/O queue pairs whose memory
 * and doorbells it maps, and submits and polls them itself (lib/nvme/queue). The stock nvme
 * driver keeps every other controller, so the filesystem holding tutti's pool stays mounted
 * through a controller of the same NVM subsystem (a second port, an SR-IOV function).
 *
 * The driver matches no device by itself: only a device whose driver_override names
 * "tutti_nvme" binds to it.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/io-64-nonatomic-lo-hi.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "tutti_nvme.h"

/* Controller registers (NVMe Base Specification 2.0, 3.1.3). */
enum {
	REG_CAP = 0x00,
	REG_VS = 0x08,
	REG_CC = 0x14,
	REG_CSTS = 0x1c,
	REG_AQA = 0x24,
	REG_ASQ = 0x28,
	REG_ACQ = 0x30,
	REG_DOORBELLS = TUTTI_NVME_DOORBELLS,
};
#define CC_ENABLE 1u
#define CC_IOSQES (6u << 16) /* 64-byte SQEs */
#define CC_IOCQES (4u << 20) /* 16-byte CQEs */
#define CC_SHN_NORMAL (1u << 14)
#define CSTS_RDY 1u
#define CSTS_CFS 2u
#define CSTS_SHST_MASK (3u << 2)
#define CSTS_SHST_DONE (2u << 2)

/* Admin opcodes. */
enum {
	ADM_DELETE_SQ = 0x00,
	ADM_CREATE_SQ = 0x01,
	ADM_DELETE_CQ = 0x04,
	ADM_CREATE_CQ = 0x05,
	ADM_IDENTIFY = 0x06,
	ADM_SET_FEATURES = 0x09,
};
#define FEAT_NUM_QUEUES 0x07

#define ADMIN_DEPTH 32
#define ADMIN_TIMEOUT_MS 10000

struct cqe {
	__le32 result;
	__le32 reserved;
	__le16 sq_head, sq_id;
	__le16 cid;
	__le16 status; /* bit 0: phase */
};

static LIST_HEAD(tutti_ctrls);
static DEFINE_MUTEX(tutti_ctrls_lock);

static u32 doorbell(const struct tutti_ctrl *c, u16 qid, bool cq)
{
	return REG_DOORBELLS + (2 * qid + cq) * (4u << c->dstrd);
}

static int wait_csts(struct tutti_ctrl *c, u32 mask, u32 want);

/*
 * Under admin_lock: the controller stops (CC.EN = 0, then no bus mastering), so it touches no
 * memory any more; then it is dead, and user mappings of its doorbells and queues go (a later
 * doorbell fault sees `dead` under admin_lock and gets SIGBUS).
 */
static void ctrl_stop(struct tutti_ctrl *c)
{
	writel(0, c->bar + REG_CC);
	if (wait_csts(c, CSTS_RDY, 0))
		dev_warn(&c->pdev->dev, "tutti_nvme: the controller did not report disabled\n");
	pci_clear_master(c->pdev);
	c->dead = true;
	tutti_zap_mappings();
}

/* Waits until (CSTS & mask) == want, for at most CAP.TO (500 ms units). */
static int wait_csts(struct tutti_ctrl *c, u32 mask, u32 want)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(((lo_hi_readq(c->bar + REG_CAP) >> 24) & 0xff) * 500 + 500);

	while ((readl(c->bar + REG_CSTS) & mask) != want) {
		if (readl(c->bar + REG_CSTS) & CSTS_CFS)
			return -EIO;
		if (time_after(jiffies, deadline))
			return -ETIMEDOUT;
		msleep(1);
	}
	return 0;
}

/* Admin completions that answered no command the module was waiting for. */
static atomic_long_t admin_foreign = ATOMIC_LONG_INIT(0);

/* For tests (tests/kmod/nvme_test.cpp): the next admin command is written this many entries
 * further on, so that the controller first runs as many zeroed entries, whose completions
 * arrive while the command is awaited. Read once and reset; at most ADMIN_DEPTH - 2. */
static unsigned int admin_skip;
module_param(admin_skip, uint, 0600);
MODULE_PARM_DESC(admin_skip, "test: zeroed admin entries the controller runs before the next admin command");

static int admin_foreign_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(&admin_foreign));
}
static const struct kernel_param_ops admin_foreign_ops = { .get = admin_foreign_get };
module_param_cb(admin_foreign_completions, &admin_foreign_ops, NULL, 0444);
MODULE_PARM_DESC(admin_foreign_completions, "admin completions skipped: their command id was not the one awaited");

/*
 * Under admin_lock: takes every completion the controller has posted on the admin queue.
 * Returns true if one of them answers command id `cid` (0: none is awaited), submitted in
 * submission-queue entry `slot`; its status and result go to *status and *result.
 *
 * Any other completion is foreign. The doorbell page is shared with user space, so a stale
 * write of the admin doorbell can make the controller run entries the module zeroed (command
 * id 0, which the module never uses): their completions answer nothing and are skipped, so
 * they can never pass for the completion of a command that creates or deletes a queue. Each
 * tells how far the controller has read the submission queue; the next command goes there.
 */
static bool admin_reap(struct tutti_ctrl *c, u16 cid, u16 slot, u16 *status, u32 *result, unsigned int *foreign)
{
	bool found = false, reaped = false;
	struct cqe *cqe;
	u16 head;

	for (;;) {
		cqe = c->acq + c->acq_head * sizeof(*cqe);
		if ((le16_to_cpu(READ_ONCE(cqe->status)) & 1) != c->acq_phase)
			break;
		dma_rmb();
		if (cid && !found && le16_to_cpu(READ_ONCE(cqe->cid)) == cid && !le16_to_cpu(cqe->sq_id)) {
			found = true;
			*status = le16_to_cpu(cqe->status) >> 1;
			*result = le32_to_cpu(cqe->result);
			c->asq_tail = (slot + 1) % ADMIN_DEPTH;
		} else {
			atomic_long_inc(&admin_foreign);
			(*foreign)++;
			head = le16_to_cpu(cqe->sq_head);
			if (head < ADMIN_DEPTH)
				c->asq_tail = head;
		}
		if (++c->acq_head == ADMIN_DEPTH) {
			c->acq_head = 0;
			c->acq_phase ^= 1;
		}
		reaped = true;
	}
	if (reaped)
		writel(c->acq_head, c->bar + doorbell(c, 0, true));
	return found;
}

/*
 * Runs one admin command (16 dwords; the command id is set here) and polls for its
 * completion: the one that carries its command id. Returns 0, a negative errno, or the NVMe
 * status (positive) the command ended with.
 */
static int admin(struct tutti_ctrl *c, u32 cmd[16], u32 *result)
{
	unsigned int foreign = 0;
	unsigned long deadline;
	u16 cid, slot, status = 0;
	u32 res = 0;
	int ret = 0;

	mutex_lock(&c->admin_lock);
	if (c->dead) {
		ret = -ENODEV;
		goto out;
	}
	admin_reap(c, 0, 0, &status, &res, &foreign); /* foreign completions posted since the last command */
	do
		cid = ++c->admin_cid;
	while (!cid);
	slot = (c->asq_tail + min(xchg(&admin_skip, 0), ADMIN_DEPTH - 2u)) % ADMIN_DEPTH;
	cmd[0] = (cmd[0] & 0xffff) | ((u32)cid << 16);
	memcpy(c->asq + slot * 64, cmd, 64);
	c->asq_tail = (slot + 1) % ADMIN_DEPTH;
	dma_wmb();
	writel(c->asq_tail, c->bar + doorbell(c, 0, false));

	deadline = jiffies + msecs_to_jiffies(ADMIN_TIMEOUT_MS);
	while (!admin_reap(c, cid, slot, &status, &res, &foreign)) {
		if (time_after(jiffies, deadline)) {
			/* A controller that does not answer its admin queue is of no further use; it is
			 * stopped before anyone frees memory it might still reach. */
			dev_err(&c->pdev->dev, "tutti_nvme: admin opcode 0x%02x timed out: disabling\n", cmd[0] & 0xff);
			ctrl_stop(c);
			ret = -ETIMEDOUT;
			goto out;
		}
		usleep_range(10, 100);
	}
	/* A stale entry rung again (the doorbell page is shared with user space) is a no-op:
	 * opcode 0 with queue id 0 is refused by the controller. */
	memset(c->asq + slot * 64, 0, 64);
	if (foreign)
		dev_warn_ratelimited(&c->pdev->dev, "tutti_nvme: %u admin completion(s) of no command awaited skipped\n",
				     foreign);
	if (result)
		*result = res;
	if (status) {
		dev_warn(&c->pdev->dev, "tutti_nvme: admin opcode 0x%02x: status 0x%x\n", cmd[0] & 0xff, status);
		ret = status;
	}
out:
	mutex_unlock(&c->admin_lock);
	return ret;
}

/* A positive NVMe status as an errno for user space. */
static int status_errno(int status)
{
	if (status <= 0)
		return status;
	switch (status & 0x7ff) {
	case 0x101: /* invalid queue identifier */
	case 0x102: /* invalid queue size */
		return -EINVAL;
	default:
		return -EIO;
	}
}

int tutti_identify(struct tutti_ctrl *c, u32 cns, u32 nsid, void __user *out)
{
	u32 cmd[16] = { ADM_IDENTIFY, nsid };
	int ret;

	cmd[6] = lower_32_bits(c->scratch_dma);
	cmd[7] = upper_32_bits(c->scratch_dma);
	cmd[10] = cns;
	mutex_lock(&c->scratch_lock);
	ret = status_errno(admin(c, cmd, NULL));
	if (!ret && copy_to_user(out, c->scratch, 4096))
		ret = -EFAULT;
	mutex_unlock(&c->scratch_lock);
	return ret;
}

static void qp_free_memory(struct tutti_qp_mem *q)
{
	int r;

	for (r = 0; r < TUTTI_QP_REGIONS; r++)
		if (q->mem[r])
			dma_free_coherent(&q->ctrl->pdev->dev, q->region_bytes[r], q->mem[r], q->dma[r]);
}

static void qp_release_qid(struct tutti_qp_mem *q)
{
	mutex_lock(&q->ctrl->admin_lock);
	clear_bit(q->qid, q->ctrl->qids);
	mutex_unlock(&q->ctrl->admin_lock);
}

/* May the page holding queue `qid`'s doorbells be mapped into user space (tutti_nvme.h)? */
static bool doorbells_mappable(struct tutti_ctrl *c, u16 qid)
{
	u64 page = doorbell(c, qid, false) & PAGE_MASK;

	return tutti_doorbell_page_ok(page, PAGE_SIZE, c->dstrd, c->max_queues) &&
	       page + PAGE_SIZE <= pci_resource_len(c->pdev, 0);
}

struct tutti_qp_mem *tutti_qp_create(struct tutti_ctrl *c, u32 depth)
{
	struct tutti_qp_mem *q;
	u32 cmd[16] = {};
	unsigned int qid;
	u32 dboff;
	int r, ret;

	if (depth < 2 || depth > c->mqes || depth > TUTTI_MAX_DEPTH)
		return ERR_PTR(-EINVAL);
	q = kzalloc(sizeof(*q), GFP_KERNEL);
	if (!q)
		return ERR_PTR(-ENOMEM);
	q->ctrl = c;
	q->depth = depth;
	mutex_lock(&c->admin_lock);
	qid = find_next_zero_bit(c->qids, c->max_queues + 1, 1);
	if (qid <= c->max_queues)
		set_bit(qid, c->qids);
	mutex_unlock(&c->admin_lock);
	ret = -EBUSY; /* every queue pair the controller granted is in use */
	if (qid > c->max_queues)
		goto out_free;
	q->qid = qid;
	if (!doorbells_mappable(c, qid)) {
		dev_warn_ratelimited(&c->pdev->dev,
				     "tutti_nvme: the %lu-byte page with the doorbells of queue %u holds other registers too: no queue pair\n",
				     PAGE_SIZE, qid);
		ret = -EOPNOTSUPP;
		goto out_qid;
	}
	q->region_bytes[TUTTI_QP_SQ] = PAGE_ALIGN(depth * 64);
	q->region_bytes[TUTTI_QP_CQ] = PAGE_ALIGN(depth * sizeof(struct cqe));
	q->region_bytes[TUTTI_QP_DOORBELLS] = PAGE_SIZE;
	q->region_bytes[TUTTI_QP_LISTS] = depth * PAGE_SIZE;
	ret = -ENOMEM;
	for (r = 0; r < TUTTI_QP_REGIONS; r++) {
		if (r == TUTTI_QP_DOORBELLS)
			continue;
		q->mem[r] = dma_alloc_coherent(&c->pdev->dev, q->region_bytes[r], &q->dma[r], GFP_KERNEL);
		if (!q->mem[r])
			goto out_memory;
	}
	q->lists_dma = q->dma[TUTTI_QP_LISTS];

	/* Polled: no interrupt vector (IEN = 0); physically contiguous (PC = 1). */
	cmd[0] = ADM_CREATE_CQ;
	cmd[6] = lower_32_bits(q->dma[TUTTI_QP_CQ]);
	cmd[7] = upper_32_bits(q->dma[TUTTI_QP_CQ]);
	cmd[10] = ((depth - 1) << 16) | qid;
	cmd[11] = 1;
	ret = status_errno(admin(c, cmd, NULL));
	if (!ret) {
		memset(cmd, 0, sizeof(cmd));
		cmd[0] = ADM_CREATE_SQ;
		cmd[6] = lower_32_bits(q->dma[TUTTI_QP_SQ]);
		cmd[7] = upper_32_bits(q->dma[TUTTI_QP_SQ]);
		cmd[10] = ((depth - 1) << 16) | qid;
		cmd[11] = (qid << 16) | 1;
		ret = status_errno(admin(c, cmd, NULL));
		if (ret) {
			memset(cmd, 0, sizeof(cmd));
			cmd[0] = ADM_DELETE_CQ;
			cmd[10] = qid;
			if (admin(c, cmd, NULL) && !READ_ONCE(c->dead)) {
				dev_err(&c->pdev->dev, "tutti_nvme: a half-made queue pair %u stays: its memory is kept\n", qid);
				goto out_free;
			}
		}
	}
	if (ret) /* nothing of it is left on the controller, or the controller is stopped */
		goto out_memory;
	dboff = doorbell(c, qid, false);
	q->doorbell_page = c->bar_phys + (dboff & PAGE_MASK);
	q->sq_doorbell = dboff & ~PAGE_MASK;
	q->cq_doorbell = doorbell(c, qid, true) - (dboff & PAGE_MASK);
	kref_get(&c->ref);
	return q;

out_memory:
	qp_free_memory(q);
out_qid:
	qp_release_qid(q);
out_free:
	kfree(q);
	return ERR_PTR(ret);
}

/*
 * Deletes the queues on the controller (it completes or aborts what they hold first), then
 * frees their memory. User mappings of that memory keep their own references to the pages.
 */
void tutti_qp_destroy(struct tutti_qp_mem *q)
{
	struct tutti_ctrl *c = q->ctrl;
	u32 cmd[16] = { ADM_DELETE_SQ };
	int ret;

	cmd[10] = q->qid;
	ret = admin(c, cmd, NULL);
	if (!ret) {
		memset(cmd, 0, sizeof(cmd));
		cmd[0] = ADM_DELETE_CQ;
		cmd[10] = q->qid;
		ret = admin(c, cmd, NULL);
	}
	if (!ret || READ_ONCE(c->dead)) { /* deleted, or the controller is stopped */
		qp_release_qid(q);
		qp_free_memory(q);
	} else { /* the controller may still use the queues: keep their memory and id */
		dev_err(&c->pdev->dev, "tutti_nvme: deleting queue pair %u failed (%d): its memory is kept\n", q->qid, ret);
	}
	kfree(q);
	tutti_ctrl_put(c);
}

/* Every user mapping of a queue pair is counted: the pair cannot be deleted under one. */
static void qp_vm_open(struct vm_area_struct *vma)
{
	struct tutti_qp_mem *q = vma->vm_private_data;

	atomic_inc(&q->mappings);
}

static void qp_vm_close(struct vm_area_struct *vma)
{
	struct tutti_qp_mem *q = vma->vm_private_data;

	atomic_dec(&q->mappings);
}

static vm_fault_t qp_memory_fault(struct vm_fault *vmf)
{
	return VM_FAULT_SIGBUS; /* mapped whole at mmap; a fault means its controller went away */
}

/* The doorbell page is mapped on first touch, and only while the controller is alive: a
 * mapping made after the controller stopped would ring whatever driver takes the device next. */
static vm_fault_t qp_doorbell_fault(struct vm_fault *vmf)
{
	struct tutti_qp_mem *q = vmf->vma->vm_private_data;
	vm_fault_t ret = VM_FAULT_SIGBUS;

	mutex_lock(&q->ctrl->admin_lock);
	if (!q->ctrl->dead)
		ret = vmf_insert_pfn_prot(vmf->vma, vmf->address, q->doorbell_page >> PAGE_SHIFT, vmf->vma->vm_page_prot);
	mutex_unlock(&q->ctrl->admin_lock);
	return ret;
}

static const struct vm_operations_struct qp_memory_vm_ops = {
	.open = qp_vm_open,
	.close = qp_vm_close,
	.fault = qp_memory_fault,
};

static const struct vm_operations_struct qp_doorbell_vm_ops = {
	.open = qp_vm_open,
	.close = qp_vm_close,
	.fault = qp_doorbell_fault,
};

int tutti_qp_mmap(struct tutti_qp_mem *q, unsigned int region, struct vm_area_struct *vma)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	int ret;

	if (region >= TUTTI_QP_REGIONS || size != q->region_bytes[region])
		return -EINVAL;
	if (READ_ONCE(q->ctrl->dead))
		return -ENODEV;
	vma->vm_flags |= VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP;
	vma->vm_private_data = q;
	if (region == TUTTI_QP_DOORBELLS) {
		vma->vm_flags |= VM_IO | VM_PFNMAP;
		vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
		vma->vm_ops = &qp_doorbell_vm_ops;
	} else {
		vma->vm_pgoff = 0; /* the offset named the region; the mapping starts at its first byte */
		ret = dma_mmap_coherent(&q->ctrl->pdev->dev, vma, q->mem[region], q->dma[region], size);
		if (ret)
			return ret;
		vma->vm_ops = &qp_memory_vm_ops;
	}
	atomic_inc(&q->mappings); /* .open is not called for the first mapping */
	return 0;
}

static void ctrl_free(struct kref *ref)
{
	struct tutti_ctrl *c = container_of(ref, struct tutti_ctrl, ref);
	struct device *dev = &c->pdev->dev;

	if (c->scratch)
		dma_free_coherent(dev, PAGE_SIZE, c->scratch, c->scratch_dma);
	if (c->asq)
		dma_free_coherent(dev, PAGE_SIZE, c->asq, c->asq_dma);
	if (c->acq)
		dma_free_coherent(dev, PAGE_SIZE, c->acq, c->acq_dma);
	pci_dev_put(c->pdev);
	kfree(c);
}

void tutti_ctrl_put(struct tutti_ctrl *c)
{
	kref_put(&c->ref, ctrl_free);
}

struct tutti_ctrl *tutti_ctrl_get(unsigned int index)
{
	struct tutti_ctrl *c, *found = NULL;

	mutex_lock(&tutti_ctrls_lock);
	list_for_each_entry(c, &tutti_ctrls, node) {
		if (c->index == index) {
			found = c;
			kref_get(&c->ref);
			break;
		}
	}
	mutex_unlock(&tutti_ctrls_lock);
	return found;
}

/* Disable, program the admin queue, enable (NVMe Base Specification 2.0, 3.5.1). */
static int ctrl_enable(struct tutti_ctrl *c)
{
	u64 cap = lo_hi_readq(c->bar + REG_CAP);
	int ret;

	c->mqes = (cap & 0xffff) + 1;
	c->dstrd = (cap >> 32) & 0xf;
	if (((cap >> 48) & 0xf) > PAGE_SHIFT - 12) /* MPSMIN above the CPU page size */
		return -ENODEV;
	if (!(cap & (1ull << 37))) /* the NVM command set */
		return -ENODEV;
	if ((8u << c->dstrd) > PAGE_SIZE) /* a pair's two doorbells must share the page it maps */
		return -ENODEV;
	if (readl(c->bar + REG_CC) & CC_ENABLE) {
		writel(0, c->bar + REG_CC);
		ret = wait_csts(c, CSTS_RDY, 0);
		if (ret)
			return ret;
	}
	writel(((ADMIN_DEPTH - 1) << 16) | (ADMIN_DEPTH - 1), c->bar + REG_AQA);
	lo_hi_writeq(c->asq_dma, c->bar + REG_ASQ);
	lo_hi_writeq(c->acq_dma, c->bar + REG_ACQ);
	writel(CC_ENABLE | CC_IOSQES | CC_IOCQES | ((PAGE_SHIFT - 12) << 7), c->bar + REG_CC);
	return wait_csts(c, CSTS_RDY, CSTS_RDY);
}

static void ctrl_shutdown(struct tutti_ctrl *c)
{
	writel(readl(c->bar + REG_CC) | CC_SHN_NORMAL, c->bar + REG_CC);
	if (wait_csts(c, CSTS_SHST_MASK, CSTS_SHST_DONE))
		dev_warn(&c->pdev->dev, "tutti_nvme: shutdown did not complete\n");
	writel(0, c->bar + REG_CC);
	wait_csts(c, CSTS_RDY, 0);
}

static int tutti_nvme_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	u32 cmd[16] = { ADM_SET_FEATURES }, result = 0;
	struct tutti_ctrl *c, *it;
	unsigned int index = 0, qid;
	int ret;

	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	kref_init(&c->ref);
	mutex_init(&c->admin_lock);
	mutex_init(&c->scratch_lock);
	c->pdev = pci_dev_get(pdev);
	ret = pci_enable_device_mem(pdev);
	if (ret)
		goto out_free;
	pci_set_master(pdev);
	pci_intx(pdev, 0); /* everything is polled */
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto out_disable;
	ret = pci_request_mem_regions(pdev, "tutti_nvme");
	if (ret)
		goto out_disable;
	c->bar_phys = pci_resource_start(pdev, 0);
	c->bar = ioremap(c->bar_phys, pci_resource_len(pdev, 0));
	ret = -ENOMEM;
	if (!c->bar)
		goto out_release;
	c->asq = dma_alloc_coherent(&pdev->dev, PAGE_SIZE, &c->asq_dma, GFP_KERNEL);
	c->acq = dma_alloc_coherent(&pdev->dev, PAGE_SIZE, &c->acq_dma, GFP_KERNEL);
	c->scratch = dma_alloc_coherent(&pdev->dev, PAGE_SIZE, &c->scratch_dma, GFP_KERNEL);
	if (!c->asq || !c->acq || !c->scratch)
		goto out_unmap;
	c->acq_phase = 1;
	ret = ctrl_enable(c);
	if (ret) {
		dev_err(&pdev->dev, "tutti_nvme: the controller did not become ready (%d)\n", ret);
		goto out_unmap;
	}
	/* As many queue pairs as the controller grants, up to TUTTI_MAX_QUEUES. */
	cmd[10] = FEAT_NUM_QUEUES;
	cmd[11] = ((TUTTI_MAX_QUEUES - 1) << 16) | (TUTTI_MAX_QUEUES - 1);
	ret = status_errno(admin(c, cmd, &result));
	if (ret)
		goto out_shutdown;
	c->max_queues = min3((result & 0xffff) + 1, (result >> 16) + 1, (u32)TUTTI_MAX_QUEUES);
	/* Pages above 4 KiB: the page of the first doorbells holds the controller's registers. */
	for (qid = 1; qid <= c->max_queues && !doorbells_mappable(c, qid); qid++)
		;
	ret = -EOPNOTSUPP;
	if (qid > c->max_queues) {
		dev_err(&pdev->dev, "tutti_nvme: with %lu-byte pages no queue's doorbells have a page without other registers: not binding\n",
			PAGE_SIZE);
		goto out_shutdown;
	}

	mutex_lock(&tutti_ctrls_lock);
	list_for_each_entry(it, &tutti_ctrls, node) /* the lowest free number */
		if (it->index >= index)
			index = it->index + 1;
	c->index = index;
	list_add_tail(&c->node, &tutti_ctrls);
	mutex_unlock(&tutti_ctrls_lock);
	pci_set_drvdata(pdev, c);
	dev_info(&pdev->dev, "tutti_nvme: controller %u, NVMe %x.%x, %u I/O queue pairs, depth up to %u\n", c->index,
		 readl(c->bar + REG_VS) >> 16, (readl(c->bar + REG_VS) >> 8) & 0xff, c->max_queues, c->mqes);
	return 0;

out_shutdown:
	ctrl_shutdown(c);
out_unmap:
	iounmap(c->bar);
out_release:
	pci_release_mem_regions(pdev);
out_disable:
	pci_disable_device(pdev);
out_free:
	tutti_ctrl_put(c);
	return ret;
}

/*
 * The controller goes away (unbind, or the module unloads, which only happens with no lease
 * open). Queue pairs that leases still hold lose their device: user mappings are zapped, the
 * controller is shut down so it touches no memory any more, and the memory is freed when the
 * last lease lets go.
 */
static void tutti_nvme_remove(struct pci_dev *pdev)
{
	struct tutti_ctrl *c = pci_get_drvdata(pdev);

	mutex_lock(&tutti_ctrls_lock);
	list_del(&c->node);
	mutex_unlock(&tutti_ctrls_lock);
	mutex_lock(&c->admin_lock);
	if (!c->dead) {
		ctrl_shutdown(c);
		ctrl_stop(c);
	}
	mutex_unlock(&c->admin_lock);
	iounmap(c->bar);
	pci_release_mem_regions(pdev);
	pci_disable_device(pdev);
	tutti_ctrl_put(c);
}

static struct pci_driver tutti_nvme_driver = {
	.name = "tutti_nvme",
	.id_table = NULL, /* driver_override only */
	.probe = tutti_nvme_probe,
	.remove = tutti_nvme_remove,
};

int tutti_nvme_register(void)
{
	return pci_register_driver(&tutti_nvme_driver);
}

void tutti_nvme_unregister(void)
{
	pci_unregister_driver(&tutti_nvme_driver);
}
