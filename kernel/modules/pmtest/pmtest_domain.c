// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_domain.c - Devices under a struct dev_pm_domain of pmtest's own.
 *
 * The PM core runs a device's PM domain callbacks instead of its bus's
 * (drivers/base/power/main.c), and the domain hands the driver what it
 * chooses.  pmtest_pm_domain's ops are pmtest_layer_pm_ops (pmtest_layer.c):
 * every system-sleep callback, including quiesce* and recover* when the
 * kernel has them, logged and passed on to the driver's through the
 * pm_generic_* helpers, as a simple real domain does.  Its records and knobs
 * name it "<device>/pd"; the device's
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

static struct platform_device *pmtest_pd_pdevs[PMTEST_PD_DEVICES];

/* Its ops are pmtest_layer_pm_ops, copied in at init. */
static struct dev_pm_domain pmtest_pm_domain;

static struct platform_driver pmtest_domain_driver = {
	.probe = pmtest_leaf_probe,
	.remove = pmtest_platform_remove,
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
		pmtest_layer_del(&pmtest_pd_pdevs[i]->dev);
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

	return pmtest_layer_add(&pdev->dev, "pd");
}

/**
 * pmtest_domain_init - Register the driver and the devices in the domain.
 */
int pmtest_domain_init(void)
{
	int i, ret;

	pmtest_pm_domain.ops = pmtest_layer_pm_ops;
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
