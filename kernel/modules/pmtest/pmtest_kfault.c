// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_kfault.c - Make a real driver's system sleep callback fail.
 *
 * pmtest's fault knob makes pmtest's own devices fail.  This module does
 * the same to any device, a real driver's included, without changing the
 * driver: the lab asks whether the PM core unwinds a failed NVMe, USB or
 * sound device as it should, and whether the device still works afterwards.
 *
 * A kprobe on dpm_run_callback(), through which the PM core runs every
 * suspend, resume, freeze, thaw, poweroff and restore callback of the
 * main, late/early and noirq phases, replaces the callback the core
 * resolved for the named device (power domain, type, class, bus or driver,
 * whichever the core picked) by one that returns the error.  On the way
 * down (suspend, freeze, poweroff, quiesce) the device's own callback is
 * not run: the device stays as it was, as after a callback that failed
 * before touching the hardware, and the core must unwind.  On the way up
 * (resume, thaw, restore, recover) it is run first and its success turned
 * into the error: the device is back, the core must carry on and report
 * it.  The core's trace events and initcall_debug report the failure as
 * the device's.  The kprobe is registered only while a fault is set.
 *
 * Not covered: ->prepare() and ->complete(), which the core calls directly,
 * and the legacy bus and class callbacks.
 *
 * Knob, /sys/kernel/debug/pmtest_kfault/fault (one per write, as pmtest's):
 *
 *   <device> <callback> <errno> <count>
 *
 * device is dev_name() (e.g. 0000:00:0b.0, 1-1, 2:0:0:0), unique among all
 * devices; callback is a struct dev_pm_ops member run by dpm_run_callback()
 * (suspend, suspend_late, ..., restore_noirq; quiesce* and recover* when
 * the kernel has them); errno 1..4095, written negative or positive; the
 * next count (>= 1) calls fail.  A device that does not exist is -ENODEV;
 * an unknown callback, or one the core would not run for that device (none
 * resolved), is -EINVAL; nothing is changed then.  "clear" removes every
 * fault.  Reading lists the faults with calls left, in the write syntax.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/kprobes.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>

#ifndef CONFIG_X86_64
#error "pmtest_kfault replaces a call's first argument in x86-64 registers"
#endif

#define KFAULT_MAX		16	/* faults set at once */

/* A dev_pm_ops member, as drivers/base/power/main.c calls it. */
typedef int (*kfault_callback_t)(struct device *dev);
#define KFAULT_NAME_LEN		64

/* The phase of a callback: which dev_pm_ops member of its event it is. */
enum kfault_level { KFAULT_MAIN, KFAULT_LATE_EARLY, KFAULT_NOIRQ };

struct kfault_callback {
	const char *name;
	int event;			/* PM_EVENT_* */
	enum kfault_level level;
	size_t offset;			/* the member in struct dev_pm_ops */
	size_t fallback;		/* used when it is NULL (or the same) */
};

#define KFAULT_CB(_name, _event, _level, _fallback)			\
	{ #_name, PM_EVENT_##_event, KFAULT_##_level,			\
	  offsetof(const struct dev_pm_ops, _name),				\
	  offsetof(const struct dev_pm_ops, _fallback) }

static const struct kfault_callback kfault_callbacks[] = {
	KFAULT_CB(suspend, SUSPEND, MAIN, suspend),
	KFAULT_CB(suspend_late, SUSPEND, LATE_EARLY, suspend_late),
	KFAULT_CB(suspend_noirq, SUSPEND, NOIRQ, suspend_noirq),
	KFAULT_CB(resume_noirq, RESUME, NOIRQ, resume_noirq),
	KFAULT_CB(resume_early, RESUME, LATE_EARLY, resume_early),
	KFAULT_CB(resume, RESUME, MAIN, resume),
	KFAULT_CB(freeze, FREEZE, MAIN, freeze),
	KFAULT_CB(freeze_late, FREEZE, LATE_EARLY, freeze_late),
	KFAULT_CB(freeze_noirq, FREEZE, NOIRQ, freeze_noirq),
	KFAULT_CB(thaw_noirq, THAW, NOIRQ, thaw_noirq),
	KFAULT_CB(thaw_early, THAW, LATE_EARLY, thaw_early),
	KFAULT_CB(thaw, THAW, MAIN, thaw),
	KFAULT_CB(poweroff, HIBERNATE, MAIN, poweroff),
	KFAULT_CB(poweroff_late, HIBERNATE, LATE_EARLY, poweroff_late),
	KFAULT_CB(poweroff_noirq, HIBERNATE, NOIRQ, poweroff_noirq),
	KFAULT_CB(restore_noirq, RESTORE, NOIRQ, restore_noirq),
	KFAULT_CB(restore_early, RESTORE, LATE_EARLY, restore_early),
	KFAULT_CB(restore, RESTORE, MAIN, restore),
#ifdef PM_OPS_HAS_QUIESCE
	/* The series' hibernation-restore callbacks fall back as pm_op() does. */
	KFAULT_CB(quiesce, QUIESCE, MAIN, freeze),
	KFAULT_CB(quiesce_late, QUIESCE, LATE_EARLY, freeze_late),
	KFAULT_CB(quiesce_noirq, QUIESCE, NOIRQ, freeze_noirq),
	KFAULT_CB(recover_noirq, RECOVER, NOIRQ, thaw_noirq),
	KFAULT_CB(recover_early, RECOVER, LATE_EARLY, thaw_early),
	KFAULT_CB(recover, RECOVER, MAIN, thaw),
#endif
};

struct kfault {
	struct device *dev;		/* a reference is held */
	const struct kfault_callback *cb;
	int error;			/* negative */
	unsigned int left;		/* calls that will still fail */
};

/* A replaced call in flight: which error the replacement returns. */
struct kfault_pending {
	struct device *dev;
	int error;
	kfault_callback_t run;	/* the device's own callback, run first */
};

static DEFINE_MUTEX(kfault_mutex);	/* faults' set up and the kprobe */
static DEFINE_SPINLOCK(kfault_lock);	/* what the kprobe handler reads */
static struct kfault kfaults[KFAULT_MAX];
static struct kfault_pending kfault_pending[KFAULT_MAX];
static bool kfault_probing;
static struct dentry *kfault_dir;

/**
 * kfault_fail - The callback run instead of the device's resolved one.
 * @dev: Device whose callback was replaced.
 *
 * Runs the device's own callback first when the fault is on the way up.
 *
 * Return: the error of the fault that replaced it, or the device's own
 * callback's error if that failed first.
 */
static int kfault_fail(struct device *dev)
{
	kfault_callback_t run = NULL;
	unsigned long flags;
	int error = -EIO, ret = 0, i;

	spin_lock_irqsave(&kfault_lock, flags);
	for (i = 0; i < KFAULT_MAX; i++) {
		if (kfault_pending[i].dev == dev) {
			error = kfault_pending[i].error;
			run = kfault_pending[i].run;
			kfault_pending[i].dev = NULL;
			break;
		}
	}
	spin_unlock_irqrestore(&kfault_lock, flags);
	if (run)
		ret = run(dev);
	dev_info(dev, "pmtest_kfault: callback fails with %d%s\n", ret ?: error,
		 run ? " (after running it)" : "");
	return ret ?: error;
}

/* The way up: the transition goes on whatever these return. */
static bool kfault_runs_callback(int event)
{
	return event & (PM_EVENT_RESUME | PM_EVENT_THAW | PM_EVENT_RESTORE |
			PM_EVENT_RECOVER);
}

static enum kfault_level kfault_level_of(const char *info)
{
	if (info && !strncmp(info, "noirq ", 6))
		return KFAULT_NOIRQ;
	if (info && (!strncmp(info, "late ", 5) || !strncmp(info, "early ", 6)))
		return KFAULT_LATE_EARLY;
	return KFAULT_MAIN;
}

/*
 * dpm_run_callback(kfault_callback_t cb, struct device *dev, pm_message_t state,
 * const char *info), at its first instruction: swap cb when a fault matches.
 */
static int kfault_pre_handler(struct kprobe *p, struct pt_regs *regs)
{
	struct device *dev = (struct device *)regs_get_kernel_argument(regs, 1);
	int event = (int)regs_get_kernel_argument(regs, 2);
	enum kfault_level level;
	unsigned long flags;
	int i, j;

	if (!regs_get_kernel_argument(regs, 0))
		return 0;	/* no callback: the core runs nothing */
	level = kfault_level_of((const char *)regs_get_kernel_argument(regs, 3));
	spin_lock_irqsave(&kfault_lock, flags);
	for (i = 0; i < KFAULT_MAX; i++) {
		struct kfault *f = &kfaults[i];

		if (f->dev != dev || !f->left || f->cb->event != event ||
		    f->cb->level != level)
			continue;
		for (j = 0; j < KFAULT_MAX; j++) {
			if (!kfault_pending[j].dev) {
				kfault_pending[j].dev = dev;
				kfault_pending[j].error = f->error;
				kfault_pending[j].run = kfault_runs_callback(event) ?
					(kfault_callback_t)regs->di : NULL;
				f->left--;
				regs->di = (unsigned long)kfault_fail;
				break;
			}
		}
		break;
	}
	spin_unlock_irqrestore(&kfault_lock, flags);
	return 0;
}

static struct kprobe kfault_kprobe = {
	.symbol_name = "dpm_run_callback",
	.pre_handler = kfault_pre_handler,
};

static kfault_callback_t kfault_op(const struct dev_pm_ops *ops,
				   const struct kfault_callback *cb)
{
	kfault_callback_t fn = *(kfault_callback_t *)((const char *)ops + cb->offset);

	return fn ?: *(kfault_callback_t *)((const char *)ops + cb->fallback);
}

/* The callback the PM core would run for @dev (drivers/base/power/main.c). */
static kfault_callback_t kfault_resolve(struct device *dev,
					const struct kfault_callback *cb)
{
	const struct dev_pm_ops *ops = NULL;
	kfault_callback_t fn = NULL;

	if (dev->pm_domain)
		ops = &dev->pm_domain->ops;
	else if (dev->type && dev->type->pm)
		ops = dev->type->pm;
	else if (dev->class && dev->class->pm)
		ops = dev->class->pm;
	else if (dev->bus && dev->bus->pm)
		ops = dev->bus->pm;
	if (ops)
		fn = kfault_op(ops, cb);
	if (!fn && dev->driver && dev->driver->pm)
		fn = kfault_op(dev->driver->pm, cb);
	return fn;
}

/*
 * Every device is in the devices kset, platform_bus's among them: find the
 * one named @name and take a reference.  Two of that name: -EINVAL.
 */
static struct device *kfault_find_device(const char *name)
{
	struct kset *devices = platform_bus.kobj.kset;
	struct device *found = NULL;
	struct kobject *kobj;
	int matches = 0;

	spin_lock(&devices->list_lock);
	list_for_each_entry(kobj, &devices->list, entry) {
		struct device *dev = kobj_to_dev(kobj);

		if (strcmp(dev_name(dev), name))
			continue;
		if (!matches++)
			found = get_device(dev);
	}
	spin_unlock(&devices->list_lock);
	if (matches > 1) {
		put_device(found);
		return ERR_PTR(-EINVAL);
	}
	return found ?: ERR_PTR(-ENODEV);
}

static const struct kfault_callback *kfault_callback_named(const char *name)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(kfault_callbacks); i++)
		if (!strcmp(kfault_callbacks[i].name, name))
			return &kfault_callbacks[i];
	return NULL;
}

/* Drop faults with no calls left and every fault if @all; mutex held. */
static void kfault_drop(bool all)
{
	struct device *put[KFAULT_MAX];
	unsigned long flags;
	int i, n = 0;

	spin_lock_irqsave(&kfault_lock, flags);
	for (i = 0; i < KFAULT_MAX; i++) {
		if (kfaults[i].dev && (all || !kfaults[i].left)) {
			put[n++] = kfaults[i].dev;
			kfaults[i].dev = NULL;
		}
	}
	spin_unlock_irqrestore(&kfault_lock, flags);
	while (n)
		put_device(put[--n]);
}

static bool kfault_any(void)
{
	int i;

	for (i = 0; i < KFAULT_MAX; i++)
		if (kfaults[i].dev)
			return true;
	return false;
}

/* Register the kprobe while a fault is set, and only then; mutex held. */
static int kfault_sync_probe(void)
{
	int ret;

	if (kfault_any() == kfault_probing)
		return 0;
	if (kfault_probing) {
		unregister_kprobe(&kfault_kprobe);
		kfault_kprobe.addr = NULL;	/* registered again by name */
		kfault_kprobe.flags = 0;
		kfault_probing = false;
		return 0;
	}
	ret = register_kprobe(&kfault_kprobe);
	if (ret) {
		pr_err("cannot probe dpm_run_callback: %d\n", ret);
		return ret;
	}
	kfault_probing = true;
	return 0;
}

static int kfault_set(const char *line)
{
	char name[KFAULT_NAME_LEN], cb_name[32];
	const struct kfault_callback *cb;
	struct device *dev, *old = NULL;
	unsigned long flags;
	unsigned int count;
	int error, i, free = -1, ret;

	if (sscanf(line, "%63s %31s %d %u", name, cb_name, &error, &count) != 4)
		return -EINVAL;
	if (error < 0)
		error = -error;
	cb = kfault_callback_named(cb_name);
	if (!cb || error < 1 || error > MAX_ERRNO || !count)
		return -EINVAL;
	dev = kfault_find_device(name);
	if (IS_ERR(dev))
		return PTR_ERR(dev);
	device_lock(dev);
	ret = kfault_resolve(dev, cb) ? 0 : -EINVAL;
	device_unlock(dev);
	if (ret) {
		put_device(dev);
		return ret;
	}

	mutex_lock(&kfault_mutex);
	kfault_drop(false);
	spin_lock_irqsave(&kfault_lock, flags);
	for (i = 0; i < KFAULT_MAX; i++) {
		if (kfaults[i].dev == dev && kfaults[i].cb == cb)
			break;		/* replaced */
		if (!kfaults[i].dev && free < 0)
			free = i;
	}
	if (i == KFAULT_MAX)
		i = free;
	if (i >= 0) {
		old = kfaults[i].dev;
		kfaults[i] = (struct kfault){ dev, cb, -error, count };
	}
	spin_unlock_irqrestore(&kfault_lock, flags);
	if (old)
		put_device(old);
	if (i < 0) {
		put_device(dev);
		ret = -ENOSPC;
	} else {
		ret = kfault_sync_probe();
	}
	mutex_unlock(&kfault_mutex);
	return ret;
}

static ssize_t kfault_write(struct file *file, const char __user *ubuf,
			    size_t len, loff_t *ppos)
{
	char buf[128];
	int ret;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	if (sysfs_streq(buf, "clear")) {
		mutex_lock(&kfault_mutex);
		kfault_drop(true);
		ret = kfault_sync_probe();
		mutex_unlock(&kfault_mutex);
	} else {
		ret = kfault_set(buf);
	}
	return ret ?: len;
}

static int kfault_show(struct seq_file *m, void *v)
{
	unsigned long flags;
	int i;

	mutex_lock(&kfault_mutex);
	spin_lock_irqsave(&kfault_lock, flags);
	for (i = 0; i < KFAULT_MAX; i++) {
		if (kfaults[i].dev && kfaults[i].left)
			seq_printf(m, "%s %s %d %u\n", dev_name(kfaults[i].dev),
				   kfaults[i].cb->name, kfaults[i].error,
				   kfaults[i].left);
	}
	spin_unlock_irqrestore(&kfault_lock, flags);
	mutex_unlock(&kfault_mutex);
	return 0;
}

static int kfault_open(struct inode *inode, struct file *file)
{
	return single_open(file, kfault_show, NULL);
}

static const struct file_operations kfault_fops = {
	.owner = THIS_MODULE,
	.open = kfault_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = kfault_write,
};

static int __init kfault_init(void)
{
	kfault_dir = debugfs_create_dir(KBUILD_MODNAME, NULL);
	debugfs_create_file("fault", 0600, kfault_dir, NULL, &kfault_fops);
	return 0;
}

static void __exit kfault_exit(void)
{
	debugfs_remove_recursive(kfault_dir);
	mutex_lock(&kfault_mutex);
	kfault_drop(true);
	kfault_sync_probe();
	mutex_unlock(&kfault_mutex);
}

module_init(kfault_init);
module_exit(kfault_exit);
MODULE_DESCRIPTION("pmtest: make any device's system sleep callback fail");
MODULE_LICENSE("GPL");
