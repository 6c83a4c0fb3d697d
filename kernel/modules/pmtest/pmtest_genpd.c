// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_genpd.c - Devices in a generic PM domain (genpd).
 *
 * genpd (drivers/base/power/domain.c) is the PM domain of most SoC devices:
 * its ->prepare, the *_noirq callbacks and ->complete are its own and call
 * the driver's through the pm_generic_* helpers, its other system-sleep
 * callbacks are left to the driver, and once every device in the domain is
 * suspended it powers the domain off (genpd_sync_power_off()).  The driver
 * here, pmtest_genpd, has pmtest_full's callbacks, so the log shows what
 * genpd gave it; the domain's power_off/power_on print a line each on the
 * console.
 *
 * Three devices: pmtest_genpd.0 and its children pmtest_genpd.1 and .2.
 * Without CONFIG_PM_GENERIC_DOMAINS there is no genpd and no device.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/err.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/pm_domain.h>

#include "pmtest.h"

#ifdef CONFIG_PM_GENERIC_DOMAINS

#define PMTEST_GENPD_DEVICES	3
#define PMTEST_GENPD_FANOUT	2

static struct platform_device *pmtest_genpd_pdevs[PMTEST_GENPD_DEVICES];

static int pmtest_genpd_power_off(struct generic_pm_domain *genpd)
{
	pr_info("domain %s power off\n", genpd->name);

	return 0;
}

static int pmtest_genpd_power_on(struct generic_pm_domain *genpd)
{
	pr_info("domain %s power on\n", genpd->name);

	return 0;
}

static struct generic_pm_domain pmtest_genpd_domain = {
	.name = "pmtest_genpd",
	.power_off = pmtest_genpd_power_off,
	.power_on = pmtest_genpd_power_on,
};

static bool pmtest_genpd_domain_ready;

static struct platform_driver pmtest_genpd_driver = {
	.probe = pmtest_leaf_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_genpd",
		.pm = &pmtest_full_pm_ops,
	},
};

static void pmtest_genpd_remove_devices(void)
{
	int i;

	for (i = PMTEST_GENPD_DEVICES - 1; i >= 0; i--) {
		if (!pmtest_genpd_pdevs[i])
			continue;
		pm_genpd_remove_device(&pmtest_genpd_pdevs[i]->dev);
		platform_device_unregister(pmtest_genpd_pdevs[i]);
		pmtest_genpd_pdevs[i] = NULL;
	}
}

/*
 * The device joins the domain before it is added: platform_probe() leaves a
 * device that has a PM domain alone (dev_pm_domain_attach()).  A device added
 * with pm_genpd_add_device() has no ->detach, so it leaves the domain with
 * pm_genpd_remove_device(), before it is unregistered.
 */
static int pmtest_genpd_add_device(int i)
{
	struct platform_device *pdev;
	int ret;

	pdev = platform_device_alloc("pmtest_genpd", i);
	if (!pdev)
		return -ENOMEM;
	if (i)
		pdev->dev.parent =
			&pmtest_genpd_pdevs[(i - 1) / PMTEST_GENPD_FANOUT]->dev;

	ret = pm_genpd_add_device(&pmtest_genpd_domain, &pdev->dev);
	if (ret) {
		platform_device_put(pdev);
		return ret;
	}

	ret = platform_device_add(pdev);
	if (ret) {
		pm_genpd_remove_device(&pdev->dev);
		platform_device_put(pdev);
		return ret;
	}
	pmtest_genpd_pdevs[i] = pdev;

	return 0;
}

/**
 * pmtest_genpd_init - Create the domain, register the driver and the devices.
 */
int pmtest_genpd_init(void)
{
	int i, ret;

	/* Powered on: its devices are active from the start. */
	ret = pm_genpd_init(&pmtest_genpd_domain, NULL, false);
	if (ret)
		return ret;
	pmtest_genpd_domain_ready = true;

	ret = platform_driver_register(&pmtest_genpd_driver);
	if (ret)
		goto err_domain;

	for (i = 0; i < PMTEST_GENPD_DEVICES; i++) {
		ret = pmtest_genpd_add_device(i);
		if (ret)
			goto err_devices;
	}

	return 0;

err_devices:
	pmtest_genpd_remove_devices();
	platform_driver_unregister(&pmtest_genpd_driver);
err_domain:
	pm_genpd_remove(&pmtest_genpd_domain);
	pmtest_genpd_domain_ready = false;

	return ret;
}

/**
 * pmtest_genpd_exit - Unregister the devices and the driver, remove the domain.
 */
void pmtest_genpd_exit(void)
{
	if (!pmtest_genpd_domain_ready)
		return;
	pmtest_genpd_remove_devices();
	platform_driver_unregister(&pmtest_genpd_driver);
	pm_genpd_remove(&pmtest_genpd_domain);
	pmtest_genpd_domain_ready = false;
}

#else /* !CONFIG_PM_GENERIC_DOMAINS */

int pmtest_genpd_init(void)
{
	return 0;
}

void pmtest_genpd_exit(void)
{
}

#endif /* CONFIG_PM_GENERIC_DOMAINS */
