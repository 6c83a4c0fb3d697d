// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_acpi.c - An ACPI-enumerated platform driver.
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
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/acpi.h>
#include <linux/mod_devicetable.h>
#include <linux/platform_device.h>

#include "pmtest.h"

static const struct acpi_device_id pmtest_acpi_ids[] = {
	{ "PMTS0001", 0 },
	{ }
};
MODULE_DEVICE_TABLE(acpi, pmtest_acpi_ids);

static int pmtest_acpi_probe(struct platform_device *pdev)
{
	/* Its children are the firmware's to declare: no child knob. */
	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

static pmtest_remove_t pmtest_acpi_remove(struct platform_device *pdev)
{
	pmtest_dev_del(&pdev->dev);

	return PMTEST_REMOVED;
}

static struct platform_driver pmtest_acpi_driver = {
	.probe = pmtest_acpi_probe,
	.remove = pmtest_acpi_remove,
	.driver = {
		.name = "pmtest_acpi",
		.acpi_match_table = pmtest_acpi_ids,
		.pm = &pmtest_full_pm_ops,
	},
};

/**
 * pmtest_acpi_init - Register the ACPI platform driver.
 *
 * Binds whatever PMTS0001 devices the firmware declares, none without the
 * SSDT.
 */
int pmtest_acpi_init(void)
{
	return platform_driver_register(&pmtest_acpi_driver);
}

/**
 * pmtest_acpi_exit - Unregister the ACPI platform driver.
 */
void pmtest_acpi_exit(void)
{
	platform_driver_unregister(&pmtest_acpi_driver);
}
