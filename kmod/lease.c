// SPDX-License-Identifier: GPL-2.0
/*
 * tutti_kmod: gives a process (root only) what it needs to drive NVMe queues itself. Each open
 * of /dev/tutti is a lease; everything a lease holds is released when its file is closed,
 * which the kernel also does when the process is killed. See kmod/README.md for the threat
 * model.
 *
 * A lease pins its own memory and DMA-maps it (or a dma-buf) for an NVMe controller that an
 * operator dedicated to tutti (nvme.c in this folder), and gets polled I/O queue pairs on that
 * controller, mapped into its address space with their doorbells. Release order: queues are
 * deleted first (the controller stops touching memory), then DMA mappings, then pins. Pins are
 * charged as locked memory (RLIMIT_MEMLOCK); CAP_SYS_ADMIN is checked at open and again at
 * every call that makes a controller act, since the file can outlive its opener's privilege.
 */
#include <linux/dma-buf.h>
#include <linux/dma-map-ops.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "tutti_nvme.h"
#include "uapi/tutti_kmod.h"

#define TUTTI_MAJOR 0
#define TUTTI_MINOR 2
#define TUTTI_PATCH 0

struct tutti_pinned {
	struct list_head node;
	u64 handle;
	struct page **pages;
	unsigned long npages;
	unsigned int maps; /* DMA mappings of this range: it cannot be unpinned while mapped */
	struct user_struct *user; /* charged with npages against RLIMIT_MEMLOCK, or NULL */
	struct mm_struct *mm;     /* whose pinned_vm counts them (VmPin) */
};

/* A DMA mapping for one controller: of a pinned range, or of a dma-buf attachment. */
struct tutti_map {
	struct list_head node;
	u64 handle;
	struct tutti_ctrl *ctrl;
	struct tutti_pinned *pinned;
	struct sg_table sgt;            /* pinned */
	struct dma_buf *dmabuf;         /* dma-buf */
	struct dma_buf_attachment *attach;
	struct sg_table *dmabuf_sgt;
};

struct tutti_lease {
	struct list_head node; /* in tutti_leases */
	struct mutex lock;     /* everything below */
	struct list_head pinned;
	struct list_head maps;
	struct list_head qps;
	u64 next_handle;
	struct file *file;     /* its mappings are zapped if a controller goes away */
};

/* The entry of a lease's `list` of `type` whose `field` is `value`, or NULL; under lease->lock. */
#define tutti_find(list, type, field, value)               \
	({                                                 \
		type *e_, *found_ = NULL;                  \
		list_for_each_entry(e_, list, node)        \
			if (e_->field == (value)) {        \
				found_ = e_;               \
				break;                     \
			}                                  \
		found_;                                    \
	})

static LIST_HEAD(tutti_leases);
static DEFINE_MUTEX(tutti_leases_lock);
static atomic_long_t tutti_pinned_pages = ATOMIC_LONG_INIT(0);

/* /sys/module/tutti_kmod/parameters/{leases,pinned_pages}: what is held right now. */
static int leases_get(char *buf, const struct kernel_param *kp)
{
	struct list_head *p;
	int n = 0;

	mutex_lock(&tutti_leases_lock);
	list_for_each(p, &tutti_leases)
		n++;
	mutex_unlock(&tutti_leases_lock);
	return sysfs_emit(buf, "%d\n", n);
}
static const struct kernel_param_ops leases_ops = { .get = leases_get };
module_param_cb(leases, &leases_ops, NULL, 0444);
MODULE_PARM_DESC(leases, "open /dev/tutti files");

static int pinned_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(&tutti_pinned_pages));
}
static const struct kernel_param_ops pinned_ops = { .get = pinned_get };
module_param_cb(pinned_pages, &pinned_ops, NULL, 0444);
MODULE_PARM_DESC(pinned_pages, "pages pinned by all leases");

static atomic_t tutti_qps = ATOMIC_INIT(0);

static int qps_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&tutti_qps));
}
static const struct kernel_param_ops qps_ops = { .get = qps_get };
module_param_cb(queue_pairs, &qps_ops, NULL, 0444);
MODULE_PARM_DESC(queue_pairs, "NVMe I/O queue pairs held by all leases");

static void tutti_unmap(struct tutti_map *m)
{
	struct device *dev = &m->ctrl->pdev->dev;

	if (m->dmabuf) {
		dma_buf_unmap_attachment_unlocked(m->attach, m->dmabuf_sgt, DMA_BIDIRECTIONAL);
		dma_buf_detach(m->dmabuf, m->attach);
		dma_buf_put(m->dmabuf);
	} else {
		dma_unmap_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
		sg_free_table(&m->sgt);
		m->pinned->maps--;
	}
	tutti_ctrl_put(m->ctrl);
	kfree(m);
}

/*
 * Charges a range about to be pinned to the caller, as io_uring does for its buffers: to its
 * user's locked memory, held against RLIMIT_MEMLOCK unless it has CAP_IPC_LOCK, and to its
 * mm's pinned_vm (VmPin in /proc/PID/status). The charge goes with the pin, whoever ends it:
 * UNPIN, the close of the file, or the death of the process.
 */
static int tutti_charge(struct tutti_pinned *p)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	struct user_struct *user = current_user();
	long cur, next;

	if (!capable(CAP_IPC_LOCK)) {
		cur = atomic_long_read(&user->locked_vm);
		do {
			next = cur + p->npages;
			if (next < cur || (unsigned long)next > limit)
				return -ENOMEM;
		} while (!atomic_long_try_cmpxchg(&user->locked_vm, &cur, next));
		p->user = get_uid(user);
	}
	mmgrab(current->mm);
	p->mm = current->mm;
	atomic64_add(p->npages, &p->mm->pinned_vm);
	return 0;
}

static void tutti_uncharge(struct tutti_pinned *p)
{
	if (p->user) {
		atomic_long_sub(p->npages, &p->user->locked_vm);
		free_uid(p->user);
	}
	atomic64_sub(p->npages, &p->mm->pinned_vm);
	mmdrop(p->mm);
}

static void tutti_unpin(struct tutti_pinned *p)
{
	unpin_user_pages(p->pages, p->npages);
	tutti_uncharge(p);
	atomic_long_sub(p->npages, &tutti_pinned_pages);
	kvfree(p->pages);
	kfree(p);
}

/*
 * May the caller make a controller do anything: send it commands, get queues on it, DMA-map
 * memory for it? The file may have been opened by root and then handed on (inherited over
 * fork, passed over a socket) or kept by a process that dropped its privileges: the check is
 * made at every such call, not only at open. Calls that only release what the lease holds,
 * and PIN (the caller's own memory, held against its RLIMIT_MEMLOCK), need no privilege.
 */
static bool tutti_may_drive(void)
{
	return capable(CAP_SYS_ADMIN);
}

static int tutti_open(struct inode *inode, struct file *file)
{
	struct tutti_lease *lease;

	/* The device node is root's (0600); DMA is not for anyone else either. */
	if (!tutti_may_drive())
		return -EPERM;
	lease = kzalloc(sizeof(*lease), GFP_KERNEL);
	if (!lease)
		return -ENOMEM;
	mutex_init(&lease->lock);
	INIT_LIST_HEAD(&lease->pinned);
	INIT_LIST_HEAD(&lease->maps);
	INIT_LIST_HEAD(&lease->qps);
	lease->next_handle = 1;
	lease->file = file;
	mutex_lock(&tutti_leases_lock);
	list_add(&lease->node, &tutti_leases);
	mutex_unlock(&tutti_leases_lock);
	file->private_data = lease;
	return 0;
}

/* Called on the last close, including the one the kernel does for a killed process. */
static int tutti_release(struct inode *inode, struct file *file)
{
	struct tutti_lease *lease = file->private_data;
	struct tutti_pinned *p, *tmp;
	struct tutti_qp_mem *q, *qtmp;
	struct tutti_map *m, *mtmp;

	/* The controller stops using a lease's memory before that memory is unmapped and unpinned. */
	list_for_each_entry_safe(q, qtmp, &lease->qps, node) {
		list_del(&q->node);
		tutti_qp_destroy(q);
		atomic_dec(&tutti_qps);
	}
	list_for_each_entry_safe(m, mtmp, &lease->maps, node) {
		list_del(&m->node);
		tutti_unmap(m);
	}
	list_for_each_entry_safe(p, tmp, &lease->pinned, node) {
		list_del(&p->node);
		tutti_unpin(p);
	}
	mutex_lock(&tutti_leases_lock);
	list_del(&lease->node);
	mutex_unlock(&tutti_leases_lock);
	kfree(lease);
	return 0;
}

static long tutti_get_version(void __user *arg)
{
	struct tutti_version v;

	if (copy_from_user(&v, arg, sizeof(v)))
		return -EFAULT;
	if (v.size != sizeof(v))
		return -EINVAL;
	memset(&v, 0, sizeof(v));
	v.size = sizeof(v);
	v.abi = TUTTI_KMOD_ABI;
	v.major = TUTTI_MAJOR;
	v.minor = TUTTI_MINOR;
	v.patch = TUTTI_PATCH;
	return copy_to_user(arg, &v, sizeof(v)) ? -EFAULT : 0;
}

static long tutti_pin(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_pin req;
	struct tutti_pinned *p;
	long got, ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.size != sizeof(req) || req.reserved)
		return -EINVAL;
	if (!req.length || req.length > TUTTI_PIN_MAX || !PAGE_ALIGNED(req.addr) || !PAGE_ALIGNED(req.length) ||
	    req.addr + req.length < req.addr)
		return -EINVAL;
	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		return -ENOMEM;
	p->npages = req.length >> PAGE_SHIFT;
	ret = tutti_charge(p);
	if (ret)
		goto out_free;
	ret = -ENOMEM;
	p->pages = kvmalloc_array(p->npages, sizeof(*p->pages), GFP_KERNEL);
	if (!p->pages)
		goto out_uncharge;
	/* Long-term pins: the device may DMA into these pages at any time until unpinned. */
	got = pin_user_pages_fast(req.addr, p->npages, FOLL_WRITE | FOLL_LONGTERM, p->pages);
	if (got != (long)p->npages) {
		if (got > 0)
			unpin_user_pages(p->pages, got);
		ret = got < 0 ? got : -EFAULT;
		goto out_uncharge;
	}
	atomic_long_add(p->npages, &tutti_pinned_pages);
	mutex_lock(&lease->lock);
	p->handle = lease->next_handle++;
	list_add(&p->node, &lease->pinned);
	mutex_unlock(&lease->lock);
	req.handle = p->handle;
	if (copy_to_user(arg, &req, sizeof(req)))
		return -EFAULT; /* still pinned: released with the handle or the lease */
	return 0;

out_uncharge:
	tutti_uncharge(p);
	kvfree(p->pages);
out_free:
	kfree(p);
	return ret;
}

static long tutti_unpin_handle(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_pinned *found;
	u64 handle;

	if (copy_from_user(&handle, arg, sizeof(handle)))
		return -EFAULT;
	mutex_lock(&lease->lock);
	found = tutti_find(&lease->pinned, struct tutti_pinned, handle, handle);
	if (found && found->maps) {
		mutex_unlock(&lease->lock);
		return -EBUSY; /* still DMA-mapped for a controller */
	}
	if (found)
		list_del(&found->node);
	mutex_unlock(&lease->lock);
	if (!found)
		return -ENOENT;
	tutti_unpin(found);
	return 0;
}

static long tutti_ctrl_info(void __user *arg)
{
	struct tutti_ctrl_info req;
	struct tutti_ctrl *c;
	long ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.size != sizeof(req))
		return -EINVAL;
	c = tutti_ctrl_get(req.ctrl);
	if (!c)
		return -ENODEV;
	req.max_queues = c->max_queues;
	req.mqes = c->mqes;
	req.dstrd = c->dstrd;
	strscpy(req.bdf, pci_name(c->pdev), sizeof(req.bdf));
	ret = tutti_identify(c, 1, 0, u64_to_user_ptr(req.identify));
	if (!ret && req.identify_ns)
		ret = tutti_identify(c, 0, req.nsid ? req.nsid : 1, u64_to_user_ptr(req.identify_ns));
	tutti_ctrl_put(c);
	if (ret)
		return ret;
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long tutti_create_qp(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_qp req;
	struct tutti_qp_mem *q;
	struct tutti_ctrl *c;
	int i;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.size != sizeof(req))
		return -EINVAL;
	c = tutti_ctrl_get(req.ctrl);
	if (!c)
		return -ENODEV;
	q = tutti_qp_create(c, req.depth); /* holds its own reference on c */
	tutti_ctrl_put(c);
	if (IS_ERR(q))
		return PTR_ERR(q);
	atomic_inc(&tutti_qps);
	mutex_lock(&lease->lock);
	q->token = lease->next_handle++;
	list_add(&q->node, &lease->qps);
	mutex_unlock(&lease->lock);
	req.qid = q->qid;
	req.token = q->token;
	req.sq_doorbell = q->sq_doorbell;
	req.cq_doorbell = q->cq_doorbell;
	req.lists_dma = q->lists_dma;
	for (i = 0; i < TUTTI_QP_REGIONS; i++)
		req.region_bytes[i] = q->region_bytes[i];
	if (copy_to_user(arg, &req, sizeof(req)))
		return -EFAULT; /* the pair stays with the lease */
	return 0;
}

static long tutti_delete_qp(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_qp_mem *found;
	u64 token;

	if (copy_from_user(&token, arg, sizeof(token)))
		return -EFAULT;
	mutex_lock(&lease->lock);
	found = tutti_find(&lease->qps, struct tutti_qp_mem, token, token);
	/* Mapped queue memory must not be freed under the mapping: munmap first. */
	if (found && atomic_read(&found->mappings)) {
		mutex_unlock(&lease->lock);
		return -EBUSY;
	}
	if (found)
		list_del(&found->node);
	mutex_unlock(&lease->lock);
	if (!found)
		return -ENOENT;
	tutti_qp_destroy(found);
	atomic_dec(&tutti_qps);
	return 0;
}

/*
 * Would the device's writes land in a bounce buffer instead of these pages? Nothing copies a
 * bounce buffer back to a lease's memory, so such a mapping is refused. dma-direct bounces
 * through swiotlb (dma_need_sync says so per address); iommu-dma, whose dma_need_sync is
 * always true, bounces only for untrusted devices.
 */
static bool tutti_bounced(struct device *dev, dma_addr_t addr)
{
	if (!get_dma_ops(dev))
		return dma_need_sync(dev, addr);
	return dev_is_pci(dev) && to_pci_dev(dev)->untrusted;
}

/*
 * The bus address of every page of a DMA-mapped table, in a kernel array (copied out later,
 * with no lock held: a copy to user memory may fault and take mmap_lock, which tutti_mmap
 * holds when it takes the lease's lock).
 */
static long tutti_iovas(struct device *dev, struct sg_table *sgt, u64 **out, u64 *npages)
{
	struct scatterlist *sg;
	u64 k = 0, off, n = 0;
	u64 *v;
	int i;

	for_each_sgtable_dma_sg(sgt, sg, i) {
		if (!PAGE_ALIGNED(sg_dma_address(sg)) || !PAGE_ALIGNED(sg_dma_len(sg)))
			return -EINVAL; /* not describable page by page */
		if (tutti_bounced(dev, sg_dma_address(sg)))
			return -EOPNOTSUPP;
		n += sg_dma_len(sg) >> PAGE_SHIFT;
	}
	v = kvmalloc_array(n ? n : 1, sizeof(*v), GFP_KERNEL);
	if (!v)
		return -ENOMEM;
	for_each_sgtable_dma_sg(sgt, sg, i)
		for (off = 0; off < sg_dma_len(sg); off += PAGE_SIZE)
			v[k++] = sg_dma_address(sg) + off;
	*out = v;
	*npages = n;
	return 0;
}

static long tutti_map_dma(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_dma_map req;
	struct tutti_pinned *p = NULL;
	struct tutti_map *m;
	struct sg_table *sgt;
	struct device *dev;
	u64 *iovas = NULL, n = 0;
	long ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.size != sizeof(req) || req.reserved)
		return -EINVAL;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->ctrl = tutti_ctrl_get(req.ctrl);
	if (!m->ctrl) {
		kfree(m);
		return -ENODEV;
	}
	dev = &m->ctrl->pdev->dev;
	if (req.dmabuf_fd < 0) {
		/* The range stays pinned while mapped: UNPIN refuses it once maps is raised. */
		mutex_lock(&lease->lock);
		p = tutti_find(&lease->pinned, struct tutti_pinned, handle, req.pinned);
		if (p)
			p->maps++;
		mutex_unlock(&lease->lock);
		ret = -ENOENT;
		if (!p)
			goto out_free;
		m->pinned = p;
		ret = sg_alloc_table_from_pages(&m->sgt, p->pages, p->npages, 0, p->npages << PAGE_SHIFT, GFP_KERNEL);
		if (!ret) {
			ret = dma_map_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
			if (ret)
				sg_free_table(&m->sgt);
		}
		if (ret) {
			mutex_lock(&lease->lock);
			p->maps--;
			mutex_unlock(&lease->lock);
			goto out_free;
		}
		sgt = &m->sgt;
	} else {
		m->dmabuf = dma_buf_get(req.dmabuf_fd);
		ret = PTR_ERR_OR_ZERO(m->dmabuf);
		if (ret)
			goto out_free;
		m->attach = dma_buf_attach(m->dmabuf, dev);
		ret = PTR_ERR_OR_ZERO(m->attach);
		if (!ret) {
			m->dmabuf_sgt = dma_buf_map_attachment_unlocked(m->attach, DMA_BIDIRECTIONAL);
			ret = PTR_ERR_OR_ZERO(m->dmabuf_sgt);
			if (ret)
				dma_buf_detach(m->dmabuf, m->attach);
		}
		if (ret) {
			dma_buf_put(m->dmabuf);
			goto out_free;
		}
		sgt = m->dmabuf_sgt;
	}
	ret = tutti_iovas(dev, sgt, &iovas, &n);
	if (!ret && n > req.npages)
		ret = -ENOSPC;
	if (ret) {
		mutex_lock(&lease->lock); /* tutti_unmap changes the pinned range's count */
		tutti_unmap(m);           /* drops the controller reference too */
		mutex_unlock(&lease->lock);
		kvfree(iovas);
		req.npages = n;
		if (ret == -ENOSPC && copy_to_user(arg, &req, sizeof(req)))
			return -EFAULT;
		return ret; /* ENOSPC: npages says how many are needed */
	}
	mutex_lock(&lease->lock);
	m->handle = lease->next_handle++;
	list_add(&m->node, &lease->maps);
	mutex_unlock(&lease->lock);
	req.handle = m->handle;
	req.npages = n;
	/* On a failed copy the mapping stays with the lease, like a pin whose handle was lost. */
	ret = copy_to_user(u64_to_user_ptr(req.iovas), iovas, n * sizeof(*iovas)) ||
	      copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
	kvfree(iovas);
	return ret;

out_free:
	tutti_ctrl_put(m->ctrl);
	kfree(m);
	return ret;
}

static long tutti_unmap_dma(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_map *found;
	u64 handle;

	if (copy_from_user(&handle, arg, sizeof(handle)))
		return -EFAULT;
	mutex_lock(&lease->lock);
	found = tutti_find(&lease->maps, struct tutti_map, handle, handle);
	if (found) {
		list_del(&found->node);
		tutti_unmap(found); /* under the lock: it changes the pinned range's count */
	} /* under the lock: it changes the pinned range's count */
	mutex_unlock(&lease->lock);
	return found ? 0 : -ENOENT;
}

/* Maps a region of a queue pair: offset (token * TUTTI_QP_REGIONS + region) pages. */
static int tutti_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct tutti_lease *lease = file->private_data;
	u64 token = vma->vm_pgoff / TUTTI_QP_REGIONS;
	unsigned int region = vma->vm_pgoff % TUTTI_QP_REGIONS;
	struct tutti_qp_mem *found;
	int ret;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (!tutti_may_drive()) /* queues and doorbells */
		return -EPERM;
	mutex_lock(&lease->lock);
	found = tutti_find(&lease->qps, struct tutti_qp_mem, token, token);
	ret = found ? tutti_qp_mmap(found, region, vma) : -ENOENT;
	mutex_unlock(&lease->lock);
	return ret;
}

/* A controller went away: no process may touch its doorbells or queues any more. */
void tutti_zap_mappings(void)
{
	struct tutti_lease *lease;

	mutex_lock(&tutti_leases_lock);
	list_for_each_entry(lease, &tutti_leases, node)
		unmap_mapping_range(lease->file->f_mapping, 0, 0, 1);
	mutex_unlock(&tutti_leases_lock);
}

static long tutti_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct tutti_lease *lease = file->private_data;
	void __user *uarg = (void __user *)arg;

	/* Commands that make a controller act; the rest read or release what the lease holds. */
	if ((cmd == TUTTI_IOC_CTRL_INFO || cmd == TUTTI_IOC_CREATE_QP || cmd == TUTTI_IOC_MAP_DMA) && !tutti_may_drive())
		return -EPERM;
	switch (cmd) {
	case TUTTI_IOC_GET_VERSION:
		return tutti_get_version(uarg);
	case TUTTI_IOC_PIN:
		return tutti_pin(lease, uarg);
	case TUTTI_IOC_UNPIN:
		return tutti_unpin_handle(lease, uarg);
	case TUTTI_IOC_CTRL_INFO:
		return tutti_ctrl_info(uarg);
	case TUTTI_IOC_CREATE_QP:
		return tutti_create_qp(lease, uarg);
	case TUTTI_IOC_DELETE_QP:
		return tutti_delete_qp(lease, uarg);
	case TUTTI_IOC_MAP_DMA:
		return tutti_map_dma(lease, uarg);
	case TUTTI_IOC_UNMAP_DMA:
		return tutti_unmap_dma(lease, uarg);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations tutti_fops = {
	.owner = THIS_MODULE,
	.open = tutti_open,
	.release = tutti_release,
	.unlocked_ioctl = tutti_ioctl,
	.mmap = tutti_mmap,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice tutti_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "tutti",
	.fops = &tutti_fops,
	.mode = 0600,
};

static int __init tutti_init(void)
{
	int ret = tutti_nvme_register();

	if (ret)
		return ret;
	ret = misc_register(&tutti_misc);
	if (ret)
		tutti_nvme_unregister();
	return ret;
}

static void __exit tutti_exit(void)
{
	misc_deregister(&tutti_misc); /* no lease is left: an open file pins the module */
	tutti_nvme_unregister();
}

module_init(tutti_init);
module_exit(tutti_exit);
MODULE_DESCRIPTION("tutti: user- and GPU-driven NVMe queues for KV-cache I/O");
MODULE_LICENSE("GPL v2");
MODULE_IMPORT_NS(DMA_BUF);
