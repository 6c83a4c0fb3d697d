// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_flags.c - Devices with DPM driver flags and runtime PM state.
 *
 * One platform driver, pmtest_flags, with pmtest_full's callbacks, bound to
 * one root device per row of the device matrix; the device name says what
 * the row exercises:
 *
 *   pmtest_skip_resume.0  DPM_FLAG_MAY_SKIP_RESUME: the PM core may leave it
 *                         suspended after a suspend to RAM or idle (no
 *                         resume_noirq/resume_early), never after a freeze
 *                         or a failed hibernation (thaw, restore, recover)
 *   pmtest_direct.0       runtime-suspended, ->prepare returns 1: the core
 *                         takes the direct_complete path in a suspend (only
 *                         ->prepare and ->complete run)
 *   pmtest_no_direct.0    the same with DPM_FLAG_NO_DIRECT_COMPLETE: every
 *                         callback runs
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/err.h>
#include <linux/mod_devicetable.h>
#include <linux/platform_device.h>
#include <linux/pm.h>
#include <linux/pm_runtime.h>

#include "pmtest.h"

/* platform_device_id.driver_data: DPM_FLAG_* plus these. */
#define PMTEST_FLAGS_RPM_SUSPENDED	BIT(16)	/* runtime PM on, suspended */
#define PMTEST_FLAGS_PREPARE_1		BIT(17)	/* ->prepare returns 1 */
#define PMTEST_FLAGS_DPM		(BIT(16) - 1)

static const struct platform_device_id pmtest_flags_ids[] = {
	{ "pmtest_skip_resume", DPM_FLAG_MAY_SKIP_RESUME },
	{ "pmtest_direct", PMTEST_FLAGS_RPM_SUSPENDED | PMTEST_FLAGS_PREPARE_1 },
	{ "pmtest_no_direct", PMTEST_FLAGS_RPM_SUSPENDED |
			      PMTEST_FLAGS_PREPARE_1 |
			      DPM_FLAG_NO_DIRECT_COMPLETE },
	{ }
};

#define PMTEST_FLAGS_DEVICES	(ARRAY_SIZE(pmtest_flags_ids) - 1)

static struct platform_device *pmtest_flags_pdevs[PMTEST_FLAGS_DEVICES];

static unsigned long pmtest_flags_of(struct device *dev)
{
	return platform_get_device_id(to_platform_device(dev))->driver_data;
}

/**
 * pmtest_flags_prepare - ->prepare of pmtest_flags_pm_ops.
 * @dev: Device.
 *
 * Return: 1 (leave the device suspended if it is) for the devices whose row
 * wants it, the injected error, or 0.
 */
int pmtest_flags_prepare(struct device *dev)
{
	int event = pmtest_event_current(PMTEST_CB_PREPARE);
	int ret;

	ret = pmtest_cb_begin(dev, PMTEST_CB_PREPARE, event);
	if (!ret && (pmtest_flags_of(dev) & PMTEST_FLAGS_PREPARE_1))
		ret = 1;
	pmtest_cb_end(dev, PMTEST_CB_PREPARE, event, ret);

	return ret;
}

static int pmtest_flags_probe(struct platform_device *pdev)
{
	unsigned long flags = platform_get_device_id(pdev)->driver_data;

	dev_pm_set_driver_flags(&pdev->dev, flags & PMTEST_FLAGS_DPM);
	/* A device's runtime PM status starts as suspended. */
	if (flags & PMTEST_FLAGS_RPM_SUSPENDED)
		pm_runtime_enable(&pdev->dev);

	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_flags_pm_ops));
}

static pmtest_remove_t pmtest_flags_remove(struct platform_device *pdev)
{
	pmtest_dev_del(&pdev->dev);
	if (pmtest_flags_of(&pdev->dev) & PMTEST_FLAGS_RPM_SUSPENDED)
		pm_runtime_disable(&pdev->dev);

	return PMTEST_REMOVED;
}

static struct platform_driver pmtest_flags_driver = {
	.probe = pmtest_flags_probe,
	.remove = pmtest_flags_remove,
	.id_table = pmtest_flags_ids,
	.driver = {
		.name = "pmtest_flags",
		.pm = &pmtest_flags_pm_ops,
	},
};

static void pmtest_flags_remove_devices(void)
{
	int i;

	for (i = PMTEST_FLAGS_DEVICES - 1; i >= 0; i--) {
		if (pmtest_flags_pdevs[i])
			platform_device_unregister(pmtest_flags_pdevs[i]);
		pmtest_flags_pdevs[i] = NULL;
	}
}

/**
 * pmtest_flags_init - Register the driver and one device per id.
 */
int pmtest_flags_init(void)
{
	struct platform_device *pdev;
	int i, ret;

	ret = platform_driver_register(&pmtest_flags_driver);
	if (ret)
		return ret;

	for (i = 0; i < PMTEST_FLAGS_DEVICES; i++) {
		pdev = platform_device_register_simple(pmtest_flags_ids[i].name,
						       0, NULL, 0);
		if (IS_ERR(pdev)) {
			pmtest_flags_remove_devices();
			platform_driver_unregister(&pmtest_flags_driver);
			return PTR_ERR(pdev);
		}
		pmtest_flags_pdevs[i] = pdev;
	}

	return 0;
}

/**
 * pmtest_flags_exit - Unregister the devices, then the driver.
 */
void pmtest_flags_exit(void)
{
	pmtest_flags_remove_devices();
	platform_driver_unregister(&pmtest_flags_driver);
}
