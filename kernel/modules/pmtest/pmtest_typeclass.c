// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_typeclass.c - Devices reached through type->pm and class->pm.
 *
 * The PM core runs a device's PM domain callbacks, else its device type's,
 * else its class's, else its bus's (drivers/base/power/main.c).  Two rows:
 *
 *   pmtest_typed.0, children .1 and .2   platform devices with a struct
 *       device_type whose ->pm implements every callback, logs it as
 *       "<device>/type" and calls the driver's (pmtest_typed, with
 *       pmtest_full's callbacks) through the pm_generic_* helpers; the
 *       platform bus's own callbacks are bypassed
 *   pmtest_class.0, child .1                devices of a struct class with
 *       ->pm and no driver, as class devices are: the class callbacks are
 *       the device's PM, logged under the device's name
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/device.h>
#include <linux/err.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/string.h>

#include "pmtest.h"

#define PMTEST_TYPED_DEVICES	3
#define PMTEST_CLASS_DEVICES	2
#define PMTEST_FANOUT		2

static struct platform_device *pmtest_typed_pdevs[PMTEST_TYPED_DEVICES];
static char pmtest_typed_names[PMTEST_TYPED_DEVICES][PMTEST_NAME_LEN];
static struct device *pmtest_class_devs[PMTEST_CLASS_DEVICES];

/* Name of @dev's type records; the devices never change after init. */
static const char *pmtest_type_name(struct device *dev)
{
	int i;

	for (i = 0; i < PMTEST_TYPED_DEVICES; i++) {
		if (pmtest_typed_pdevs[i] && &pmtest_typed_pdevs[i]->dev == dev)
			return pmtest_typed_names[i];
	}

	return dev_name(dev);
}

static int pmtest_type_run(struct device *dev, enum pmtest_cb cb,
			   int (*driver_cb)(struct device *dev))
{
	const char *name = pmtest_type_name(dev);
	int event = pmtest_event_current(cb);
	int ret;

	ret = pmtest_knobs_apply(name, NULL, cb, event);
	if (!ret)
		ret = driver_cb(dev);
	pmtest_log(name, cb, event, ret);

	return ret;
}

/* pm_generic_prepare() and pm_generic_complete() are not exported. */
static int pmtest_type_driver_prepare(struct device *dev)
{
	if (dev->driver && dev->driver->pm && dev->driver->pm->prepare)
		return dev->driver->pm->prepare(dev);

	return 0;
}

static int pmtest_type_prepare(struct device *dev)
{
	return pmtest_type_run(dev, PMTEST_CB_PREPARE,
			       pmtest_type_driver_prepare);
}

static void pmtest_type_complete(struct device *dev)
{
	const char *name = pmtest_type_name(dev);
	int event = pmtest_event_current(PMTEST_CB_COMPLETE);

	pmtest_knobs_apply(name, NULL, PMTEST_CB_COMPLETE, event);
	if (dev->driver && dev->driver->pm && dev->driver->pm->complete)
		dev->driver->pm->complete(dev);
	pmtest_log(name, PMTEST_CB_COMPLETE, event, 0);
}

#define PMTEST_TYPE_CB(fn, cb)					\
static int pmtest_type_##fn(struct device *dev)			\
{								\
	return pmtest_type_run(dev, cb, pm_generic_##fn);	\
}

/* A class device has no driver: its class callbacks are all there is. */
#define PMTEST_CLASS_CB(fn, cb)					\
static int pmtest_class_##fn(struct device *dev)		\
{								\
	return pmtest_cb_run(dev, cb);				\
}

PMTEST_TYPE_CB(suspend, PMTEST_CB_SUSPEND)
PMTEST_TYPE_CB(suspend_late, PMTEST_CB_SUSPEND_LATE)
PMTEST_TYPE_CB(suspend_noirq, PMTEST_CB_SUSPEND_NOIRQ)
PMTEST_TYPE_CB(resume_noirq, PMTEST_CB_RESUME_NOIRQ)
PMTEST_TYPE_CB(resume_early, PMTEST_CB_RESUME_EARLY)
PMTEST_TYPE_CB(resume, PMTEST_CB_RESUME)
PMTEST_TYPE_CB(freeze, PMTEST_CB_FREEZE)
PMTEST_TYPE_CB(freeze_late, PMTEST_CB_FREEZE_LATE)
PMTEST_TYPE_CB(freeze_noirq, PMTEST_CB_FREEZE_NOIRQ)
PMTEST_TYPE_CB(thaw_noirq, PMTEST_CB_THAW_NOIRQ)
PMTEST_TYPE_CB(thaw_early, PMTEST_CB_THAW_EARLY)
PMTEST_TYPE_CB(thaw, PMTEST_CB_THAW)
PMTEST_TYPE_CB(poweroff, PMTEST_CB_POWEROFF)
PMTEST_TYPE_CB(poweroff_late, PMTEST_CB_POWEROFF_LATE)
PMTEST_TYPE_CB(poweroff_noirq, PMTEST_CB_POWEROFF_NOIRQ)
PMTEST_TYPE_CB(restore_noirq, PMTEST_CB_RESTORE_NOIRQ)
PMTEST_TYPE_CB(restore_early, PMTEST_CB_RESTORE_EARLY)
PMTEST_TYPE_CB(restore, PMTEST_CB_RESTORE)
#ifdef PM_OPS_HAS_QUIESCE
PMTEST_TYPE_CB(quiesce, PMTEST_CB_QUIESCE)
PMTEST_TYPE_CB(quiesce_late, PMTEST_CB_QUIESCE_LATE)
PMTEST_TYPE_CB(quiesce_noirq, PMTEST_CB_QUIESCE_NOIRQ)
PMTEST_TYPE_CB(recover, PMTEST_CB_RECOVER)
PMTEST_TYPE_CB(recover_early, PMTEST_CB_RECOVER_EARLY)
PMTEST_TYPE_CB(recover_noirq, PMTEST_CB_RECOVER_NOIRQ)
#endif

PMTEST_CLASS_CB(suspend, PMTEST_CB_SUSPEND)
PMTEST_CLASS_CB(suspend_late, PMTEST_CB_SUSPEND_LATE)
PMTEST_CLASS_CB(suspend_noirq, PMTEST_CB_SUSPEND_NOIRQ)
PMTEST_CLASS_CB(resume_noirq, PMTEST_CB_RESUME_NOIRQ)
PMTEST_CLASS_CB(resume_early, PMTEST_CB_RESUME_EARLY)
PMTEST_CLASS_CB(resume, PMTEST_CB_RESUME)
PMTEST_CLASS_CB(freeze, PMTEST_CB_FREEZE)
PMTEST_CLASS_CB(freeze_late, PMTEST_CB_FREEZE_LATE)
PMTEST_CLASS_CB(freeze_noirq, PMTEST_CB_FREEZE_NOIRQ)
PMTEST_CLASS_CB(thaw_noirq, PMTEST_CB_THAW_NOIRQ)
PMTEST_CLASS_CB(thaw_early, PMTEST_CB_THAW_EARLY)
PMTEST_CLASS_CB(thaw, PMTEST_CB_THAW)
PMTEST_CLASS_CB(poweroff, PMTEST_CB_POWEROFF)
PMTEST_CLASS_CB(poweroff_late, PMTEST_CB_POWEROFF_LATE)
PMTEST_CLASS_CB(poweroff_noirq, PMTEST_CB_POWEROFF_NOIRQ)
PMTEST_CLASS_CB(restore_noirq, PMTEST_CB_RESTORE_NOIRQ)
PMTEST_CLASS_CB(restore_early, PMTEST_CB_RESTORE_EARLY)
PMTEST_CLASS_CB(restore, PMTEST_CB_RESTORE)
#ifdef PM_OPS_HAS_QUIESCE
PMTEST_CLASS_CB(quiesce, PMTEST_CB_QUIESCE)
PMTEST_CLASS_CB(quiesce_late, PMTEST_CB_QUIESCE_LATE)
PMTEST_CLASS_CB(quiesce_noirq, PMTEST_CB_QUIESCE_NOIRQ)
PMTEST_CLASS_CB(recover, PMTEST_CB_RECOVER)
PMTEST_CLASS_CB(recover_early, PMTEST_CB_RECOVER_EARLY)
PMTEST_CLASS_CB(recover_noirq, PMTEST_CB_RECOVER_NOIRQ)
#endif

static int pmtest_class_prepare(struct device *dev)
{
	return pmtest_cb_run(dev, PMTEST_CB_PREPARE);
}

static void pmtest_class_complete(struct device *dev)
{
	pmtest_cb_run(dev, PMTEST_CB_COMPLETE);
}

#ifdef PM_OPS_HAS_QUIESCE
#define PMTEST_TC_OPS_QUIESCE(p)				\
	.quiesce = p##_quiesce,					\
	.quiesce_late = p##_quiesce_late,			\
	.quiesce_noirq = p##_quiesce_noirq,			\
	.recover = p##_recover,					\
	.recover_early = p##_recover_early,			\
	.recover_noirq = p##_recover_noirq,
#else
#define PMTEST_TC_OPS_QUIESCE(p)
#endif

#define PMTEST_TC_OPS(p)					\
	.prepare = p##_prepare,					\
	.complete = p##_complete,				\
	.suspend = p##_suspend,					\
	.suspend_late = p##_suspend_late,			\
	.suspend_noirq = p##_suspend_noirq,			\
	.resume_noirq = p##_resume_noirq,			\
	.resume_early = p##_resume_early,			\
	.resume = p##_resume,					\
	.freeze = p##_freeze,					\
	.freeze_late = p##_freeze_late,				\
	.freeze_noirq = p##_freeze_noirq,			\
	.thaw_noirq = p##_thaw_noirq,				\
	.thaw_early = p##_thaw_early,				\
	.thaw = p##_thaw,					\
	.poweroff = p##_poweroff,				\
	.poweroff_late = p##_poweroff_late,			\
	.poweroff_noirq = p##_poweroff_noirq,			\
	.restore_noirq = p##_restore_noirq,			\
	.restore_early = p##_restore_early,			\
	.restore = p##_restore,					\
	PMTEST_TC_OPS_QUIESCE(p)

static const struct dev_pm_ops pmtest_type_pm_ops = {
	PMTEST_TC_OPS(pmtest_type)
};

static const struct dev_pm_ops pmtest_class_pm_ops = {
	PMTEST_TC_OPS(pmtest_class)
};

static const struct device_type pmtest_device_type = {
	.name = "pmtest_typed",
	.pm = &pmtest_type_pm_ops,
};

static struct class pmtest_class = {
	.name = "pmtest",
	.owner = THIS_MODULE,
	.pm = &pmtest_class_pm_ops,
};

static int pmtest_typed_probe(struct platform_device *pdev)
{
	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

static int pmtest_typed_remove(struct platform_device *pdev)
{
	pmtest_dev_del(&pdev->dev);

	return 0;
}

static struct platform_driver pmtest_typed_driver = {
	.probe = pmtest_typed_probe,
	.remove = pmtest_typed_remove,
	.driver = {
		.name = "pmtest_typed",
		.pm = &pmtest_full_pm_ops,
	},
};

static void pmtest_typeclass_remove_devices(void)
{
	int i;

	for (i = PMTEST_CLASS_DEVICES - 1; i >= 0; i--) {
		if (!pmtest_class_devs[i])
			continue;
		pmtest_dev_del(pmtest_class_devs[i]);
		device_unregister(pmtest_class_devs[i]);
		pmtest_class_devs[i] = NULL;
	}

	for (i = PMTEST_TYPED_DEVICES - 1; i >= 0; i--) {
		if (!pmtest_typed_pdevs[i])
			continue;
		pmtest_target_del(pmtest_typed_names[i]);
		platform_device_unregister(pmtest_typed_pdevs[i]);
		pmtest_typed_pdevs[i] = NULL;
	}
}

/* The type is set before the device is added, like a subsystem does. */
static int pmtest_typed_add(int i)
{
	struct platform_device *pdev;
	int ret;

	pdev = platform_device_alloc("pmtest_typed", i);
	if (!pdev)
		return -ENOMEM;
	if (i)
		pdev->dev.parent =
			&pmtest_typed_pdevs[(i - 1) / PMTEST_FANOUT]->dev;
	pdev->dev.type = &pmtest_device_type;

	ret = platform_device_add(pdev);
	if (ret) {
		platform_device_put(pdev);
		return ret;
	}
	pmtest_typed_pdevs[i] = pdev;

	snprintf(pmtest_typed_names[i], PMTEST_NAME_LEN, "%s/type",
		 dev_name(&pdev->dev));

	return pmtest_target_add(pmtest_typed_names[i], NULL,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_type_pm_ops));
}

static int pmtest_class_add(int i)
{
	struct device *parent = i ? pmtest_class_devs[0] : NULL;
	struct device *dev;

	dev = device_create(&pmtest_class, parent, 0, NULL, "pmtest_class.%d",
			    i);
	if (IS_ERR(dev))
		return PTR_ERR(dev);
	pmtest_class_devs[i] = dev;

	return pmtest_target_add(dev_name(dev), dev, PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_class_pm_ops));
}

/**
 * pmtest_typeclass_init - Register the type row's driver and devices, the
 * class and its devices.
 */
int pmtest_typeclass_init(void)
{
	int i, ret;

	ret = platform_driver_register(&pmtest_typed_driver);
	if (ret)
		return ret;

	ret = class_register(&pmtest_class);
	if (ret)
		goto err_driver;

	for (i = 0; i < PMTEST_TYPED_DEVICES; i++) {
		ret = pmtest_typed_add(i);
		if (ret)
			goto err_devices;
	}

	for (i = 0; i < PMTEST_CLASS_DEVICES; i++) {
		ret = pmtest_class_add(i);
		if (ret)
			goto err_devices;
	}

	return 0;

err_devices:
	pmtest_typeclass_remove_devices();
	class_unregister(&pmtest_class);
err_driver:
	platform_driver_unregister(&pmtest_typed_driver);

	return ret;
}

/**
 * pmtest_typeclass_exit - Unregister devices, class and driver.
 */
void pmtest_typeclass_exit(void)
{
	pmtest_typeclass_remove_devices();
	class_unregister(&pmtest_class);
	platform_driver_unregister(&pmtest_typed_driver);
}
