// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_platform.c - Platform test drivers and their device trees.
 *
 * Three drivers, each bound to its own tree of platform devices:
 *
 *   pmtest_full    every dev_pm_ops system-sleep callback, including the
 *                  quiesce and recover callbacks of the project's patch
 *                  series when PM_OPS_HAS_QUIESCE is defined (Kbuild does
 *                  when the kernel's struct dev_pm_ops has ->quiesce)
 *   pmtest_compat  only the callbacks Linux 6.1 has
 *   pmtest_legacy  platform_driver.suspend/.resume, logging the
 *                  pm_message_t event ->suspend() receives
 *   pmtest_async   pmtest_full's callbacks, every device suspended and
 *                  resumed asynchronously (device_enable_async_suspend()),
 *                  one level deeper than the other trees, so that only the
 *                  PM core's waits for children and parents keep the order
 *
 * Each tree has a root and @depth levels below it, every device having
 * @fanout children.  Devices are named "<driver>.<id>" with ids in
 * breadth-first order: the root is id 0 and the parent of id i is id
 * (i - 1) / fanout.  Parents are registered before their children, so the
 * dpm_list holds them first.  Children that the "child" knob registers get
 * the next free ids of their parent's driver.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/atomic.h>
#include <linux/err.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "pmtest.h"

/* Most devices in one driver's tree. */
#define PMTEST_TREE_MAX		256

enum pmtest_kind {
	PMTEST_FULL,
	PMTEST_COMPAT,
	PMTEST_LEGACY,
	PMTEST_ASYNC,
	PMTEST_NR_KIND,
};

static const char * const pmtest_kind_name[PMTEST_NR_KIND] = {
	[PMTEST_FULL] = "pmtest_full",
	[PMTEST_COMPAT] = "pmtest_compat",
	[PMTEST_LEGACY] = "pmtest_legacy",
	[PMTEST_ASYNC] = "pmtest_async",
};

/**
 * struct pmtest_pdev - A platform device this module registered.
 * @node: Entry in pmtest_pdevs, in registration order.
 * @pdev: The device.
 */
struct pmtest_pdev {
	struct list_head node;
	struct platform_device *pdev;
};

static LIST_HEAD(pmtest_pdevs);
static DEFINE_MUTEX(pmtest_pdevs_lock);
static atomic_t pmtest_next_id[PMTEST_NR_KIND];

#define PMTEST_PM_CB(fn, cb)					\
static int pmtest_pm_##fn(struct device *dev)			\
{								\
	return pmtest_cb_run(dev, cb);				\
}

PMTEST_PM_CB(prepare, PMTEST_CB_PREPARE)
PMTEST_PM_CB(suspend, PMTEST_CB_SUSPEND)
PMTEST_PM_CB(suspend_late, PMTEST_CB_SUSPEND_LATE)
PMTEST_PM_CB(suspend_noirq, PMTEST_CB_SUSPEND_NOIRQ)
PMTEST_PM_CB(resume_noirq, PMTEST_CB_RESUME_NOIRQ)
PMTEST_PM_CB(resume_early, PMTEST_CB_RESUME_EARLY)
PMTEST_PM_CB(resume, PMTEST_CB_RESUME)
PMTEST_PM_CB(freeze, PMTEST_CB_FREEZE)
PMTEST_PM_CB(freeze_late, PMTEST_CB_FREEZE_LATE)
PMTEST_PM_CB(freeze_noirq, PMTEST_CB_FREEZE_NOIRQ)
PMTEST_PM_CB(thaw_noirq, PMTEST_CB_THAW_NOIRQ)
PMTEST_PM_CB(thaw_early, PMTEST_CB_THAW_EARLY)
PMTEST_PM_CB(thaw, PMTEST_CB_THAW)
PMTEST_PM_CB(poweroff, PMTEST_CB_POWEROFF)
PMTEST_PM_CB(poweroff_late, PMTEST_CB_POWEROFF_LATE)
PMTEST_PM_CB(poweroff_noirq, PMTEST_CB_POWEROFF_NOIRQ)
PMTEST_PM_CB(restore_noirq, PMTEST_CB_RESTORE_NOIRQ)
PMTEST_PM_CB(restore_early, PMTEST_CB_RESTORE_EARLY)
PMTEST_PM_CB(restore, PMTEST_CB_RESTORE)
#ifdef PM_OPS_HAS_QUIESCE
PMTEST_PM_CB(quiesce, PMTEST_CB_QUIESCE)
PMTEST_PM_CB(quiesce_late, PMTEST_CB_QUIESCE_LATE)
PMTEST_PM_CB(quiesce_noirq, PMTEST_CB_QUIESCE_NOIRQ)
PMTEST_PM_CB(recover, PMTEST_CB_RECOVER)
PMTEST_PM_CB(recover_early, PMTEST_CB_RECOVER_EARLY)
PMTEST_PM_CB(recover_noirq, PMTEST_CB_RECOVER_NOIRQ)
#endif

static void pmtest_pm_complete(struct device *dev)
{
	pmtest_cb_run(dev, PMTEST_CB_COMPLETE);
}

#define PMTEST_PM_OPS_6_1					\
	.prepare = pmtest_pm_prepare,				\
	.complete = pmtest_pm_complete,				\
	PMTEST_PM_OPS_LEVELS_6_1

/* The leveled callbacks of 6.1 (neither prepare nor complete). */
#define PMTEST_PM_OPS_LEVELS_6_1				\
	.suspend = pmtest_pm_suspend,				\
	.suspend_late = pmtest_pm_suspend_late,			\
	.suspend_noirq = pmtest_pm_suspend_noirq,		\
	.resume_noirq = pmtest_pm_resume_noirq,			\
	.resume_early = pmtest_pm_resume_early,			\
	.resume = pmtest_pm_resume,				\
	.freeze = pmtest_pm_freeze,				\
	.freeze_late = pmtest_pm_freeze_late,			\
	.freeze_noirq = pmtest_pm_freeze_noirq,			\
	.thaw_noirq = pmtest_pm_thaw_noirq,			\
	.thaw_early = pmtest_pm_thaw_early,			\
	.thaw = pmtest_pm_thaw,					\
	.poweroff = pmtest_pm_poweroff,				\
	.poweroff_late = pmtest_pm_poweroff_late,		\
	.poweroff_noirq = pmtest_pm_poweroff_noirq,		\
	.restore_noirq = pmtest_pm_restore_noirq,		\
	.restore_early = pmtest_pm_restore_early,		\
	.restore = pmtest_pm_restore

#ifdef PM_OPS_HAS_QUIESCE
#define PMTEST_PM_OPS_QUIESCE					\
	.quiesce = pmtest_pm_quiesce,				\
	.quiesce_late = pmtest_pm_quiesce_late,			\
	.quiesce_noirq = pmtest_pm_quiesce_noirq,		\
	.recover = pmtest_pm_recover,				\
	.recover_early = pmtest_pm_recover_early,		\
	.recover_noirq = pmtest_pm_recover_noirq,
#else
#define PMTEST_PM_OPS_QUIESCE
#endif

const struct dev_pm_ops pmtest_full_pm_ops = {
	PMTEST_PM_OPS_6_1,
	PMTEST_PM_OPS_QUIESCE
};

/* pmtest_full's, but for ->prepare (pmtest_flags.c). */
const struct dev_pm_ops pmtest_flags_pm_ops = {
	.prepare = pmtest_flags_prepare,
	.complete = pmtest_pm_complete,
	PMTEST_PM_OPS_LEVELS_6_1,
	PMTEST_PM_OPS_QUIESCE
};

static const struct dev_pm_ops pmtest_compat_pm_ops = {
	PMTEST_PM_OPS_6_1,
};

static int pmtest_legacy_suspend(struct platform_device *pdev,
				 pm_message_t state)
{
	int ret;

	ret = pmtest_cb_begin(&pdev->dev, PMTEST_CB_SUSPEND, state.event);
	pmtest_cb_end(&pdev->dev, PMTEST_CB_SUSPEND, state.event, ret);

	return ret;
}

static int pmtest_legacy_resume(struct platform_device *pdev)
{
	return pmtest_cb_run(&pdev->dev, PMTEST_CB_RESUME);
}

static int pmtest_platform_probe(struct platform_device *pdev)
{
	return pmtest_dev_add(&pdev->dev, true);
}

/**
 * pmtest_leaf_probe - Probe a device of a driver with pmtest_full_pm_ops
 * @pdev: the device
 *
 * For the drivers of the PM domain, genpd, ACPI and type/class devices:
 * every callback and fault knob of pmtest_full, but no child knob (their
 * children are not pmtest's to add).
 */
int pmtest_leaf_probe(struct platform_device *pdev)
{
	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

/**
 * pmtest_platform_remove - Forget a pmtest platform device's knobs
 * @pdev: the device
 */
pmtest_remove_t pmtest_platform_remove(struct platform_device *pdev)
{
	pmtest_dev_del(&pdev->dev);

	return PMTEST_REMOVED;
}

static struct platform_driver pmtest_full_driver = {
	.probe = pmtest_platform_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_full",
		.pm = &pmtest_full_pm_ops,
	},
};

static struct platform_driver pmtest_compat_driver = {
	.probe = pmtest_platform_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_compat",
		.pm = &pmtest_compat_pm_ops,
	},
};

static struct platform_driver pmtest_legacy_driver = {
	.probe = pmtest_platform_probe,
	.remove = pmtest_platform_remove,
	.suspend = pmtest_legacy_suspend,
	.resume = pmtest_legacy_resume,
	.driver = {
		.name = "pmtest_legacy",
	},
};

static struct platform_driver pmtest_async_driver = {
	.probe = pmtest_platform_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_async",
		.pm = &pmtest_full_pm_ops,
	},
};

static struct platform_driver * const pmtest_drivers[PMTEST_NR_KIND] = {
	[PMTEST_FULL] = &pmtest_full_driver,
	[PMTEST_COMPAT] = &pmtest_compat_driver,
	[PMTEST_LEGACY] = &pmtest_legacy_driver,
	[PMTEST_ASYNC] = &pmtest_async_driver,
};

/* Register the next device of @kind under @parent (NULL: a root). */
static struct platform_device *pmtest_pdev_create(enum pmtest_kind kind,
						  struct device *parent)
{
	struct platform_device_info info = {
		.parent = parent,
		.name = pmtest_kind_name[kind],
	};
	struct pmtest_pdev *pd;

	pd = kzalloc(sizeof(*pd), GFP_KERNEL);
	if (!pd)
		return ERR_PTR(-ENOMEM);

	info.id = atomic_inc_return(&pmtest_next_id[kind]) - 1;
	pd->pdev = platform_device_register_full(&info);
	if (IS_ERR(pd->pdev)) {
		struct platform_device *err = pd->pdev;

		kfree(pd);
		return err;
	}
	/* Before any transition: the flag is read when one starts. */
	if (kind == PMTEST_ASYNC)
		device_enable_async_suspend(&pd->pdev->dev);

	mutex_lock(&pmtest_pdevs_lock);
	list_add_tail(&pd->node, &pmtest_pdevs);
	mutex_unlock(&pmtest_pdevs_lock);

	return pd->pdev;
}

/* Unregister every device this module registered, children first. */
static void pmtest_pdevs_remove(void)
{
	struct pmtest_pdev *pd, *tmp;
	LIST_HEAD(list);

	mutex_lock(&pmtest_pdevs_lock);
	list_splice_init(&pmtest_pdevs, &list);
	mutex_unlock(&pmtest_pdevs_lock);

	list_for_each_entry_safe_reverse(pd, tmp, &list, node) {
		platform_device_unregister(pd->pdev);
		list_del(&pd->node);
		kfree(pd);
	}
}

/**
 * pmtest_platform_add_child - Register a child device from a PM callback.
 * @parent: pmtest platform device whose callback runs.
 * @cb: That callback, for the kernel log.
 * @event: PM event of that callback, for the log.
 *
 * Registers a device of the parent's driver under @parent synchronously,
 * in the caller's context: that is the race the "child" knob tests.  The
 * PM core has blocked probing, so the child binds after ->complete.  A
 * "register" record logs the child's name (the parent's on failure).
 */
void pmtest_platform_add_child(struct device *parent, enum pmtest_cb cb,
			       int event)
{
	struct platform_device *pdev;
	int kind;

	if (!dev_is_platform(parent))
		return;

	for (kind = 0; kind < PMTEST_NR_KIND; kind++) {
		if (!strcmp(to_platform_device(parent)->name,
			    pmtest_kind_name[kind]))
			break;
	}
	if (kind == PMTEST_NR_KIND)
		return;

	pdev = pmtest_pdev_create(kind, parent);
	if (IS_ERR(pdev)) {
		dev_err(parent, "registering a child in %s failed: %ld\n",
			pmtest_cb_name(cb), PTR_ERR(pdev));
		pmtest_log(dev_name(parent), PMTEST_CB_REGISTER, event,
			   PTR_ERR(pdev));
		return;
	}

	dev_info(parent, "registered child %s in %s (event %s)\n",
		 dev_name(&pdev->dev), pmtest_cb_name(cb),
		 pmtest_event_name(event));
	pmtest_log(dev_name(&pdev->dev), PMTEST_CB_REGISTER, event, 0);
}

/* Devices in a tree with @depth levels below the root, or -EINVAL. */
static int pmtest_tree_size(unsigned int depth, unsigned int fanout)
{
	unsigned int level = 1, total = 1, d;

	for (d = 0; d < depth && fanout; d++) {
		if (check_mul_overflow(level, fanout, &level))
			return -EINVAL;
		total += level;
		if (total > PMTEST_TREE_MAX)
			return -EINVAL;
	}

	return total;
}

/* Register the @total devices of @kind's tree, breadth first. */
static int pmtest_tree_create(enum pmtest_kind kind, unsigned int total,
			      unsigned int fanout)
{
	struct platform_device **tree;
	struct device *parent;
	unsigned int i;
	int ret = 0;

	tree = kcalloc(total, sizeof(*tree), GFP_KERNEL);
	if (!tree)
		return -ENOMEM;

	for (i = 0; i < total; i++) {
		parent = i ? &tree[(i - 1) / fanout]->dev : NULL;
		tree[i] = pmtest_pdev_create(kind, parent);
		if (IS_ERR(tree[i])) {
			ret = PTR_ERR(tree[i]);
			break;
		}
	}

	kfree(tree);

	return ret;
}

/**
 * pmtest_platform_init - Register the platform drivers and device trees.
 * @depth: Levels below each root.
 * @fanout: Children of each non-leaf device.
 *
 * Return: 0, -EINVAL if a tree would exceed PMTEST_TREE_MAX devices, or the
 * error of a failed registration.
 */
int pmtest_platform_init(unsigned int depth, unsigned int fanout)
{
	int kind, total, async_total, ret;

	total = pmtest_tree_size(depth, fanout);
	if (total < 0) {
		pr_err("depth=%u fanout=%u: more than %u devices per tree\n",
		       depth, fanout, PMTEST_TREE_MAX);
		return total;
	}
	/* One level deeper, where that still fits. */
	async_total = pmtest_tree_size(depth + 1, fanout);
	if (async_total < 0)
		async_total = total;

	for (kind = 0; kind < PMTEST_NR_KIND; kind++) {
		ret = platform_driver_register(pmtest_drivers[kind]);
		if (ret)
			goto err_drivers;
	}

	for (kind = 0; kind < PMTEST_NR_KIND; kind++) {
		ret = pmtest_tree_create(kind, kind == PMTEST_ASYNC ?
					 async_total : total, fanout);
		if (ret) {
			pmtest_pdevs_remove();
			kind = PMTEST_NR_KIND;
			goto err_drivers;
		}
	}

	return 0;

err_drivers:
	while (--kind >= 0)
		platform_driver_unregister(pmtest_drivers[kind]);

	return ret;
}

/**
 * pmtest_platform_exit - Unregister the devices, then the drivers.
 */
void pmtest_platform_exit(void)
{
	int kind;

	pmtest_pdevs_remove();

	for (kind = PMTEST_NR_KIND - 1; kind >= 0; kind--)
		platform_driver_unregister(pmtest_drivers[kind]);
}
