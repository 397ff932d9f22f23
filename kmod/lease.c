// SPDX-License-Identifier: GPL-2.0
/*
 * tutti_kmod: gives a process (root only) what it needs to drive NVMe queues itself. Each open
 * of /dev/tutti is a lease; everything a lease holds is released when its file is closed,
 * which the kernel also does when the process is killed. See kmod/README.md for the threat
 * model.
 *
 * This first version holds pinned user memory (the DMA targets of later commands); queue
 * pairs and controller binding come next.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "uapi/tutti_kmod.h"

#define TUTTI_MAJOR 0
#define TUTTI_MINOR 1
#define TUTTI_PATCH 0

struct tutti_pinned {
	struct list_head node;
	u64 handle;
	struct page **pages;
	unsigned long npages;
};

struct tutti_lease {
	struct list_head node; /* in tutti_leases */
	struct mutex lock;     /* pinned, next_handle */
	struct list_head pinned;
	u64 next_handle;
};

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

static void tutti_unpin(struct tutti_pinned *p)
{
	unpin_user_pages(p->pages, p->npages);
	atomic_long_sub(p->npages, &tutti_pinned_pages);
	kvfree(p->pages);
	kfree(p);
}

static int tutti_open(struct inode *inode, struct file *file)
{
	struct tutti_lease *lease;

	/* The device node is root's (0600); DMA is not for anyone else either. */
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	lease = kzalloc(sizeof(*lease), GFP_KERNEL);
	if (!lease)
		return -ENOMEM;
	mutex_init(&lease->lock);
	INIT_LIST_HEAD(&lease->pinned);
	lease->next_handle = 1;
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
	long got;

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
	p->pages = kvmalloc_array(p->npages, sizeof(*p->pages), GFP_KERNEL);
	if (!p->pages) {
		kfree(p);
		return -ENOMEM;
	}
	/* Long-term pins: the device may DMA into these pages at any time until unpinned. */
	got = pin_user_pages_fast(req.addr, p->npages, FOLL_WRITE | FOLL_LONGTERM, p->pages);
	if (got != (long)p->npages) {
		if (got > 0)
			unpin_user_pages(p->pages, got);
		kvfree(p->pages);
		kfree(p);
		return got < 0 ? got : -EFAULT;
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
}

static long tutti_unpin_handle(struct tutti_lease *lease, void __user *arg)
{
	struct tutti_pinned *p, *found = NULL;
	u64 handle;

	if (copy_from_user(&handle, arg, sizeof(handle)))
		return -EFAULT;
	mutex_lock(&lease->lock);
	list_for_each_entry(p, &lease->pinned, node) {
		if (p->handle == handle) {
			found = p;
			list_del(&p->node);
			break;
		}
	}
	mutex_unlock(&lease->lock);
	if (!found)
		return -ENOENT;
	tutti_unpin(found);
	return 0;
}

static long tutti_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct tutti_lease *lease = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case TUTTI_IOC_GET_VERSION:
		return tutti_get_version(uarg);
	case TUTTI_IOC_PIN:
		return tutti_pin(lease, uarg);
	case TUTTI_IOC_UNPIN:
		return tutti_unpin_handle(lease, uarg);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations tutti_fops = {
	.owner = THIS_MODULE,
	.open = tutti_open,
	.release = tutti_release,
	.unlocked_ioctl = tutti_ioctl,
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
	return misc_register(&tutti_misc);
}

static void __exit tutti_exit(void)
{
	misc_deregister(&tutti_misc);
}

module_init(tutti_init);
module_exit(tutti_exit);
MODULE_DESCRIPTION("tutti: user- and GPU-driven NVMe queues for KV-cache I/O");
MODULE_LICENSE("GPL");
