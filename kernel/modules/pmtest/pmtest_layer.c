// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_layer.c - The PM ops of a layer between the PM core and a driver.
 *
 * pmtest's own PM domain (pmtest_domain.c) and device type
 * (pmtest_typeclass.c) are such layers: the PM core runs their callbacks
 * instead of the bus's, and they run the driver's.  pmtest_layer_pm_ops
 * implements every callback, logs it under the device's layer name
 * ("<device>/pd", "<device>/type"), applies that name's knobs, and calls the
 * driver's callback through the pm_generic_* helpers, as a real subsystem
 * does.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/device.h>
#include <linux/errno.h>
#include <linux/pm.h>

#include "pmtest.h"

#define PMTEST_LAYER_DEVICES	8

/* Written by pmtest_layer_add() at module init only, then only read. */
static struct {
	struct device *dev;
	char name[PMTEST_NAME_LEN];
} pmtest_layer_devs[PMTEST_LAYER_DEVICES];

static const char *pmtest_layer_name(struct device *dev)
{
	int i;

	for (i = 0; i < PMTEST_LAYER_DEVICES; i++) {
		if (pmtest_layer_devs[i].dev == dev)
			return pmtest_layer_devs[i].name;
	}

	return dev_name(dev);
}

static int pmtest_layer_run(struct device *dev, enum pmtest_cb cb,
			    int (*driver_cb)(struct device *dev))
{
	const char *name = pmtest_layer_name(dev);
	int event = pmtest_event_current(cb);
	int ret;

	ret = pmtest_knobs_apply(name, NULL, cb, event);
	if (!ret)
		ret = driver_cb(dev);
	pmtest_log(name, cb, event, ret);

	return ret;
}

/* pm_generic_prepare() and pm_generic_complete() are not exported. */
static int pmtest_layer_driver_prepare(struct device *dev)
{
	if (dev->driver && dev->driver->pm && dev->driver->pm->prepare)
		return dev->driver->pm->prepare(dev);

	return 0;
}

static int pmtest_layer_prepare(struct device *dev)
{
	return pmtest_layer_run(dev, PMTEST_CB_PREPARE,
				pmtest_layer_driver_prepare);
}

static void pmtest_layer_complete(struct device *dev)
{
	const char *name = pmtest_layer_name(dev);
	int event = pmtest_event_current(PMTEST_CB_COMPLETE);

	pmtest_knobs_apply(name, NULL, PMTEST_CB_COMPLETE, event);
	if (dev->driver && dev->driver->pm && dev->driver->pm->complete)
		dev->driver->pm->complete(dev);
	pmtest_log(name, PMTEST_CB_COMPLETE, event, 0);
}

#define PMTEST_LAYER_CB(fn, cb)					\
static int pmtest_layer_##fn(struct device *dev)		\
{								\
	return pmtest_layer_run(dev, cb, pm_generic_##fn);	\
}

PMTEST_LAYER_CB(suspend, PMTEST_CB_SUSPEND)
PMTEST_LAYER_CB(suspend_late, PMTEST_CB_SUSPEND_LATE)
PMTEST_LAYER_CB(suspend_noirq, PMTEST_CB_SUSPEND_NOIRQ)
PMTEST_LAYER_CB(resume_noirq, PMTEST_CB_RESUME_NOIRQ)
PMTEST_LAYER_CB(resume_early, PMTEST_CB_RESUME_EARLY)
PMTEST_LAYER_CB(resume, PMTEST_CB_RESUME)
PMTEST_LAYER_CB(freeze, PMTEST_CB_FREEZE)
PMTEST_LAYER_CB(freeze_late, PMTEST_CB_FREEZE_LATE)
PMTEST_LAYER_CB(freeze_noirq, PMTEST_CB_FREEZE_NOIRQ)
PMTEST_LAYER_CB(thaw_noirq, PMTEST_CB_THAW_NOIRQ)
PMTEST_LAYER_CB(thaw_early, PMTEST_CB_THAW_EARLY)
PMTEST_LAYER_CB(thaw, PMTEST_CB_THAW)
PMTEST_LAYER_CB(poweroff, PMTEST_CB_POWEROFF)
PMTEST_LAYER_CB(poweroff_late, PMTEST_CB_POWEROFF_LATE)
PMTEST_LAYER_CB(poweroff_noirq, PMTEST_CB_POWEROFF_NOIRQ)
PMTEST_LAYER_CB(restore_noirq, PMTEST_CB_RESTORE_NOIRQ)
PMTEST_LAYER_CB(restore_early, PMTEST_CB_RESTORE_EARLY)
PMTEST_LAYER_CB(restore, PMTEST_CB_RESTORE)
#ifdef PM_OPS_HAS_QUIESCE
/*
 * The series has no generic late/early quiesce and recover helpers (no
 * in-tree subsystem has late or early hibernation callbacks): the layer
 * does what they would, the driver's callback or its freeze/thaw fallback.
 */
static int pmtest_layer_driver_quiesce_late(struct device *dev)
{
	const struct dev_pm_ops *pm = dev->driver ? dev->driver->pm : NULL;

	if (pm && pm->quiesce_late)
		return pm->quiesce_late(dev);

	return pm_generic_freeze_late(dev);
}

static int pmtest_layer_driver_recover_early(struct device *dev)
{
	const struct dev_pm_ops *pm = dev->driver ? dev->driver->pm : NULL;

	if (pm && pm->recover_early)
		return pm->recover_early(dev);

	return pm_generic_thaw_early(dev);
}

static int pmtest_layer_quiesce_late(struct device *dev)
{
	return pmtest_layer_run(dev, PMTEST_CB_QUIESCE_LATE,
				pmtest_layer_driver_quiesce_late);
}

static int pmtest_layer_recover_early(struct device *dev)
{
	return pmtest_layer_run(dev, PMTEST_CB_RECOVER_EARLY,
				pmtest_layer_driver_recover_early);
}

PMTEST_LAYER_CB(quiesce, PMTEST_CB_QUIESCE)
PMTEST_LAYER_CB(quiesce_noirq, PMTEST_CB_QUIESCE_NOIRQ)
PMTEST_LAYER_CB(recover, PMTEST_CB_RECOVER)
PMTEST_LAYER_CB(recover_noirq, PMTEST_CB_RECOVER_NOIRQ)
#endif

#define PMTEST_LAYER_SLEEP_OPS \
	.prepare = pmtest_layer_prepare, \
	.complete = pmtest_layer_complete, \
	.suspend = pmtest_layer_suspend, \
	.suspend_late = pmtest_layer_suspend_late, \
	.suspend_noirq = pmtest_layer_suspend_noirq, \
	.resume_noirq = pmtest_layer_resume_noirq, \
	.resume_early = pmtest_layer_resume_early, \
	.resume = pmtest_layer_resume, \
	.freeze = pmtest_layer_freeze, \
	.freeze_late = pmtest_layer_freeze_late, \
	.freeze_noirq = pmtest_layer_freeze_noirq, \
	.thaw_noirq = pmtest_layer_thaw_noirq, \
	.thaw_early = pmtest_layer_thaw_early, \
	.thaw = pmtest_layer_thaw, \
	.poweroff = pmtest_layer_poweroff, \
	.poweroff_late = pmtest_layer_poweroff_late, \
	.poweroff_noirq = pmtest_layer_poweroff_noirq, \
	.restore_noirq = pmtest_layer_restore_noirq, \
	.restore_early = pmtest_layer_restore_early, \
	.restore = pmtest_layer_restore,

const struct dev_pm_ops pmtest_layer_pm_ops = {
	PMTEST_LAYER_SLEEP_OPS
#ifdef PM_OPS_HAS_QUIESCE
	.quiesce = pmtest_layer_quiesce,
	.quiesce_late = pmtest_layer_quiesce_late,
	.quiesce_noirq = pmtest_layer_quiesce_noirq,
	.recover = pmtest_layer_recover,
	.recover_early = pmtest_layer_recover_early,
	.recover_noirq = pmtest_layer_recover_noirq,
#endif
};

/*
 * The same layer as a subsystem that has not been converted to ->quiesce*()
 * and ->recover*() (ISHTP, vmbus, xenbus and PCMCIA still are not): the PM
 * core falls back to its freeze and thaw callbacks, which run the driver's,
 * so a driver's ->quiesce*() and ->recover*() are skipped and the core says
 * so with pm_debug_messages set.
 */
const struct dev_pm_ops pmtest_unconverted_layer_pm_ops = {
	PMTEST_LAYER_SLEEP_OPS
};


/**
 * pmtest_layer_add - Log @dev's layer callbacks as "<device>/<suffix>".
 * @dev: Device whose PM domain or type uses pmtest_layer_pm_ops.
 * @suffix: "pd" or "type".
 *
 * Return: 0, -ENOSPC when every slot is taken, or pmtest_target_add()'s
 * error for the knob target of that name.
 */
int pmtest_layer_add(struct device *dev, const char *suffix)
{
	int i;

	for (i = 0; i < PMTEST_LAYER_DEVICES; i++) {
		if (pmtest_layer_devs[i].dev)
			continue;
		snprintf(pmtest_layer_devs[i].name, PMTEST_NAME_LEN, "%s/%s",
			 dev_name(dev), suffix);
		pmtest_layer_devs[i].dev = dev;
		return pmtest_target_add(pmtest_layer_devs[i].name, NULL,
					 PMTEST_KNOBS_DEVICE,
					 pmtest_pm_ops_cbs(&pmtest_layer_pm_ops));
	}

	return -ENOSPC;
}

/**
 * pmtest_layer_del - Forget @dev's layer name and its knob target.
 * @dev: Device given to pmtest_layer_add().
 */
void pmtest_layer_del(struct device *dev)
{
	int i;

	for (i = 0; i < PMTEST_LAYER_DEVICES; i++) {
		if (pmtest_layer_devs[i].dev != dev)
			continue;
		pmtest_target_del(pmtest_layer_devs[i].name);
		pmtest_layer_devs[i].dev = NULL;
	}
}
