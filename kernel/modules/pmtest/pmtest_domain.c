// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_domain.c - Devices under a struct dev_pm_domain of pmtest's own.
 *
 * The PM core runs a device's PM domain callbacks instead of its bus's
 * (drivers/base/power/main.c), and the domain hands the driver what it
 * chooses.  pmtest_pm_domain implements every system-sleep callback,
 * including quiesce* and recover* when the kernel has them, logs each one and
 * calls the driver's through the pm_generic_* helpers, as a simple real
 * domain does.  Its records and knobs name it "<device>/pd"; the device's
 * driver, pmtest_domain, has pmtest_full's callbacks and logs under the
 * device's name, so the log shows what the domain gave the driver.
 *
 * Three devices: pmtest_domain.0 and its children pmtest_domain.1 and .2.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/err.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/pm_domain.h>
#include <linux/string.h>

#include "pmtest.h"

#define PMTEST_PD_DEVICES	3
#define PMTEST_PD_FANOUT	2

/* The devices and the names their domain callbacks log under. */
static struct platform_device *pmtest_pd_pdevs[PMTEST_PD_DEVICES];
static char pmtest_pd_names[PMTEST_PD_DEVICES][PMTEST_NAME_LEN];

/* Name of @dev's domain records; the devices never change after init. */
static const char *pmtest_pd_name(struct device *dev)
{
	int i;

	for (i = 0; i < PMTEST_PD_DEVICES; i++) {
		if (pmtest_pd_pdevs[i] && &pmtest_pd_pdevs[i]->dev == dev)
			return pmtest_pd_names[i];
	}

	return dev_name(dev);
}

static int pmtest_pd_run(struct device *dev, enum pmtest_cb cb,
			 int (*driver_cb)(struct device *dev))
{
	const char *name = pmtest_pd_name(dev);
	int event = pmtest_event_current(cb);
	int ret;

	ret = pmtest_knobs_apply(name, NULL, cb, event);
	if (!ret)
		ret = driver_cb(dev);
	pmtest_log(name, cb, event, ret);

	return ret;
}

/* pm_generic_prepare() and pm_generic_complete() are not exported. */
static int pmtest_pd_driver_prepare(struct device *dev)
{
	if (dev->driver && dev->driver->pm && dev->driver->pm->prepare)
		return dev->driver->pm->prepare(dev);

	return 0;
}

static int pmtest_pd_prepare(struct device *dev)
{
	return pmtest_pd_run(dev, PMTEST_CB_PREPARE, pmtest_pd_driver_prepare);
}

static void pmtest_pd_complete(struct device *dev)
{
	const char *name = pmtest_pd_name(dev);
	int event = pmtest_event_current(PMTEST_CB_COMPLETE);

	pmtest_knobs_apply(name, NULL, PMTEST_CB_COMPLETE, event);
	if (dev->driver && dev->driver->pm && dev->driver->pm->complete)
		dev->driver->pm->complete(dev);
	pmtest_log(name, PMTEST_CB_COMPLETE, event, 0);
}

#define PMTEST_PD_CB(fn, cb)					\
static int pmtest_pd_##fn(struct device *dev)			\
{								\
	return pmtest_pd_run(dev, cb, pm_generic_##fn);		\
}

PMTEST_PD_CB(suspend, PMTEST_CB_SUSPEND)
PMTEST_PD_CB(suspend_late, PMTEST_CB_SUSPEND_LATE)
PMTEST_PD_CB(suspend_noirq, PMTEST_CB_SUSPEND_NOIRQ)
PMTEST_PD_CB(resume_noirq, PMTEST_CB_RESUME_NOIRQ)
PMTEST_PD_CB(resume_early, PMTEST_CB_RESUME_EARLY)
PMTEST_PD_CB(resume, PMTEST_CB_RESUME)
PMTEST_PD_CB(freeze, PMTEST_CB_FREEZE)
PMTEST_PD_CB(freeze_late, PMTEST_CB_FREEZE_LATE)
PMTEST_PD_CB(freeze_noirq, PMTEST_CB_FREEZE_NOIRQ)
PMTEST_PD_CB(thaw_noirq, PMTEST_CB_THAW_NOIRQ)
PMTEST_PD_CB(thaw_early, PMTEST_CB_THAW_EARLY)
PMTEST_PD_CB(thaw, PMTEST_CB_THAW)
PMTEST_PD_CB(poweroff, PMTEST_CB_POWEROFF)
PMTEST_PD_CB(poweroff_late, PMTEST_CB_POWEROFF_LATE)
PMTEST_PD_CB(poweroff_noirq, PMTEST_CB_POWEROFF_NOIRQ)
PMTEST_PD_CB(restore_noirq, PMTEST_CB_RESTORE_NOIRQ)
PMTEST_PD_CB(restore_early, PMTEST_CB_RESTORE_EARLY)
PMTEST_PD_CB(restore, PMTEST_CB_RESTORE)
#ifdef PM_OPS_HAS_QUIESCE
PMTEST_PD_CB(quiesce, PMTEST_CB_QUIESCE)
PMTEST_PD_CB(quiesce_late, PMTEST_CB_QUIESCE_LATE)
PMTEST_PD_CB(quiesce_noirq, PMTEST_CB_QUIESCE_NOIRQ)
PMTEST_PD_CB(recover, PMTEST_CB_RECOVER)
PMTEST_PD_CB(recover_early, PMTEST_CB_RECOVER_EARLY)
PMTEST_PD_CB(recover_noirq, PMTEST_CB_RECOVER_NOIRQ)
#endif

static struct dev_pm_domain pmtest_pm_domain = {
	.ops = {
		.prepare = pmtest_pd_prepare,
		.complete = pmtest_pd_complete,
		.suspend = pmtest_pd_suspend,
		.suspend_late = pmtest_pd_suspend_late,
		.suspend_noirq = pmtest_pd_suspend_noirq,
		.resume_noirq = pmtest_pd_resume_noirq,
		.resume_early = pmtest_pd_resume_early,
		.resume = pmtest_pd_resume,
		.freeze = pmtest_pd_freeze,
		.freeze_late = pmtest_pd_freeze_late,
		.freeze_noirq = pmtest_pd_freeze_noirq,
		.thaw_noirq = pmtest_pd_thaw_noirq,
		.thaw_early = pmtest_pd_thaw_early,
		.thaw = pmtest_pd_thaw,
		.poweroff = pmtest_pd_poweroff,
		.poweroff_late = pmtest_pd_poweroff_late,
		.poweroff_noirq = pmtest_pd_poweroff_noirq,
		.restore_noirq = pmtest_pd_restore_noirq,
		.restore_early = pmtest_pd_restore_early,
		.restore = pmtest_pd_restore,
#ifdef PM_OPS_HAS_QUIESCE
		.quiesce = pmtest_pd_quiesce,
		.quiesce_late = pmtest_pd_quiesce_late,
		.quiesce_noirq = pmtest_pd_quiesce_noirq,
		.recover = pmtest_pd_recover,
		.recover_early = pmtest_pd_recover_early,
		.recover_noirq = pmtest_pd_recover_noirq,
#endif
	},
};

static int pmtest_domain_probe(struct platform_device *pdev)
{
	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

static int pmtest_domain_remove(struct platform_device *pdev)
{
	pmtest_dev_del(&pdev->dev);

	return 0;
}

static struct platform_driver pmtest_domain_driver = {
	.probe = pmtest_domain_probe,
	.remove = pmtest_domain_remove,
	.driver = {
		.name = "pmtest_domain",
		.pm = &pmtest_full_pm_ops,
	},
};

static void pmtest_pd_remove_devices(void)
{
	int i;

	for (i = PMTEST_PD_DEVICES - 1; i >= 0; i--) {
		if (!pmtest_pd_pdevs[i])
			continue;
		pmtest_target_del(pmtest_pd_names[i]);
		platform_device_unregister(pmtest_pd_pdevs[i]);
		pmtest_pd_pdevs[i] = NULL;
	}
}

/*
 * The domain is set before the device is added: platform_probe() leaves a
 * device that has one alone (dev_pm_domain_attach()).
 */
static int pmtest_pd_add_device(int i)
{
	struct platform_device *pdev;
	int ret;

	pdev = platform_device_alloc("pmtest_domain", i);
	if (!pdev)
		return -ENOMEM;
	if (i)
		pdev->dev.parent = &pmtest_pd_pdevs[(i - 1) / PMTEST_PD_FANOUT]->dev;
	dev_pm_domain_set(&pdev->dev, &pmtest_pm_domain);

	ret = platform_device_add(pdev);
	if (ret) {
		platform_device_put(pdev);
		return ret;
	}
	pmtest_pd_pdevs[i] = pdev;

	snprintf(pmtest_pd_names[i], PMTEST_NAME_LEN, "%s/pd",
		 dev_name(&pdev->dev));

	return pmtest_target_add(pmtest_pd_names[i], NULL, PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_pm_domain.ops));
}

/**
 * pmtest_domain_init - Register the driver and the devices in the domain.
 */
int pmtest_domain_init(void)
{
	int i, ret;

	ret = platform_driver_register(&pmtest_domain_driver);
	if (ret)
		return ret;

	for (i = 0; i < PMTEST_PD_DEVICES; i++) {
		ret = pmtest_pd_add_device(i);
		if (ret) {
			pmtest_pd_remove_devices();
			platform_driver_unregister(&pmtest_domain_driver);
			return ret;
		}
	}

	return 0;
}

/**
 * pmtest_domain_exit - Unregister the devices, then the driver.
 */
void pmtest_domain_exit(void)
{
	pmtest_pd_remove_devices();
	platform_driver_unregister(&pmtest_domain_driver);
}
