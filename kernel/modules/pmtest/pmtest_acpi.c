// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_acpi.c - ACPI-enumerated platform drivers.
 *
 * The lab gives its guests an SSDT (pmtest-ssdt.asl) with two devices of
 * _HID "PMTS0001", the second one inside the first.  The ACPI core
 * enumerates them as platform devices "PMTS0001:00" and "PMTS0001:01" (the
 * second a child of the first) and platform_probe() attaches them to
 * acpi_general_pm_domain (drivers/acpi/device_pm.c), so the PM core reaches
 * this driver through that domain's callbacks, as it reaches any
 * ACPI-enumerated platform, I2C or SPI driver.
 *
 * The driver has the callbacks of pmtest_full (all of them), so the log shows
 * which one the domain hands it for each PM event.
 *
 * A second driver, pmtest_acpi_smart, binds the SSDT's devices of three more
 * _HIDs, each with DPM driver flags the platform bus ignores but the ACPI PM
 * domain honours (acpi_subsys_prepare(), acpi_subsys_suspend() and the
 * dev_pm_skip_suspend()/dev_pm_skip_resume() checks of the core and the
 * domain):
 *
 *   PMTS0002  SMART_PREPARE | SMART_SUSPEND, runtime-suspended from probe on
 *   PMTS0003  the same plus MAY_SKIP_RESUME
 *   PMTS0004  SMART_PREPARE | SMART_SUSPEND, runtime-active (a usage count
 *             held from probe to remove)
 *
 * With SMART_PREPARE the domain's ->prepare returns the driver's 0 instead of
 * asking for direct_complete.  With SMART_SUSPEND, a device the domain leaves
 * runtime-suspended in ->suspend or ->poweroff (it resumes it for ->freeze and
 * ->quiesce, and whenever ACPI needs it resumed) has its late and noirq
 * callbacks skipped; pmtest_cb_run() logs an "rpm_suspended" record after
 * the suspend-side level 1 callback when that is so, for the oracle.  The
 * driver has pmtest_full's callbacks.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/acpi.h>
#include <linux/mod_devicetable.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/pm_runtime.h>

#include "pmtest.h"

static const struct acpi_device_id pmtest_acpi_ids[] = {
	{ "PMTS0001", 0 },
	{ }
};
MODULE_DEVICE_TABLE(acpi, pmtest_acpi_ids);

static struct platform_driver pmtest_acpi_driver = {
	/* Its children are the firmware's to declare: no child knob. */
	.probe = pmtest_leaf_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_acpi",
		.acpi_match_table = pmtest_acpi_ids,
		.pm = &pmtest_full_pm_ops,
	},
};

/* acpi_device_id.driver_data of pmtest_acpi_smart: DPM_FLAG_* plus this. */
#define PMTEST_ACPI_RPM_ACTIVE		BIT(16)	/* runtime-active, held so */
#define PMTEST_ACPI_DPM_FLAGS		(BIT(16) - 1)

static const struct acpi_device_id pmtest_acpi_smart_ids[] = {
	{ "PMTS0002", DPM_FLAG_SMART_PREPARE | DPM_FLAG_SMART_SUSPEND },
	{ "PMTS0003", DPM_FLAG_SMART_PREPARE | DPM_FLAG_SMART_SUSPEND |
		      DPM_FLAG_MAY_SKIP_RESUME },
	{ "PMTS0004", DPM_FLAG_SMART_PREPARE | DPM_FLAG_SMART_SUSPEND |
		      PMTEST_ACPI_RPM_ACTIVE },
	{ }
};
MODULE_DEVICE_TABLE(acpi, pmtest_acpi_smart_ids);

static unsigned long pmtest_acpi_smart_flags(struct device *dev)
{
	const struct acpi_device_id *id;

	id = acpi_match_device(pmtest_acpi_smart_ids, dev);

	return id ? id->driver_data : 0;
}

static int pmtest_acpi_smart_probe(struct platform_device *pdev)
{
	unsigned long flags = pmtest_acpi_smart_flags(&pdev->dev);

	dev_pm_set_driver_flags(&pdev->dev, flags & PMTEST_ACPI_DPM_FLAGS);
	/* A device's runtime PM status starts as suspended. */
	if (flags & PMTEST_ACPI_RPM_ACTIVE) {
		pm_runtime_set_active(&pdev->dev);
		pm_runtime_get_noresume(&pdev->dev);
	}
	pm_runtime_enable(&pdev->dev);

	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

static pmtest_remove_t pmtest_acpi_smart_remove(struct platform_device *pdev)
{
	pmtest_dev_del(&pdev->dev);
	pm_runtime_disable(&pdev->dev);
	if (pmtest_acpi_smart_flags(&pdev->dev) & PMTEST_ACPI_RPM_ACTIVE)
		pm_runtime_put_noidle(&pdev->dev);

	return PMTEST_REMOVED;
}

static struct platform_driver pmtest_acpi_smart_driver = {
	.probe = pmtest_acpi_smart_probe,
	.remove = pmtest_acpi_smart_remove,
	.driver = {
		.name = "pmtest_acpi_smart",
		.acpi_match_table = pmtest_acpi_smart_ids,
		.pm = &pmtest_full_pm_ops,
	},
};

/**
 * pmtest_acpi_init - Register the ACPI platform drivers.
 *
 * They bind whatever PMTS000x devices the firmware declares, none without
 * the SSDT.
 */
int pmtest_acpi_init(void)
{
	int ret;

	ret = platform_driver_register(&pmtest_acpi_driver);
	if (ret)
		return ret;

	ret = platform_driver_register(&pmtest_acpi_smart_driver);
	if (ret)
		platform_driver_unregister(&pmtest_acpi_driver);

	return ret;
}

/**
 * pmtest_acpi_exit - Unregister the ACPI platform drivers.
 */
void pmtest_acpi_exit(void)
{
	platform_driver_unregister(&pmtest_acpi_smart_driver);
	platform_driver_unregister(&pmtest_acpi_driver);
}
