// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_typeclass.c - Devices reached through type->pm and class->pm.
 *
 * The PM core runs a device's PM domain callbacks, else its device type's,
 * else its class's, else its bus's (drivers/base/power/main.c).  Two rows:
 *
 *   pmtest_typed.0, children .1 and .2   platform devices with a struct
 *       device_type whose ->pm is pmtest_layer_pm_ops (pmtest_layer.c):
 *       every callback logged as "<device>/type" and passed on to the
 *       driver's (pmtest_typed, with pmtest_full's callbacks) through the
 *       pm_generic_* helpers; the platform bus's own callbacks are bypassed
 *   pmtest_class.0, child .1                devices of a struct class with
 *       ->pm and no driver, as class devices are: the class callbacks
 *       (pmtest_full's) are the device's PM, logged under its name
 *   pmtest_unconverted.0 (only with unconverted=1)   like pmtest_typed.0,
 *       but its type has no ->quiesce*() and ->recover*(), as a subsystem
 *       not converted to them: its driver's (pmtest_full's) are skipped
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
static struct platform_device *pmtest_unconverted_pdev;
static struct device *pmtest_class_devs[PMTEST_CLASS_DEVICES];

static const struct device_type pmtest_device_type = {
	.name = "pmtest_typed",
	.pm = &pmtest_layer_pm_ops,
};

static const struct device_type pmtest_unconverted_type = {
	.name = "pmtest_unconverted",
	.pm = &pmtest_unconverted_layer_pm_ops,
};

static struct class pmtest_class = {
	.name = "pmtest",
#ifdef PMTEST_CLASS_HAS_OWNER
	.owner = THIS_MODULE,
#endif
	.pm = &pmtest_full_pm_ops,
};

static struct platform_driver pmtest_typed_driver = {
	.probe = pmtest_leaf_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_typed",
		.pm = &pmtest_full_pm_ops,
	},
};

static struct platform_driver pmtest_unconverted_driver = {
	.probe = pmtest_leaf_probe,
	.remove = pmtest_platform_remove,
	.driver = {
		.name = "pmtest_unconverted",
		.pm = &pmtest_full_pm_ops,
	},
};

static void pmtest_typeclass_remove_devices(void)
{
	int i;

	if (pmtest_unconverted_pdev) {
		pmtest_layer_del(&pmtest_unconverted_pdev->dev);
		platform_device_unregister(pmtest_unconverted_pdev);
		pmtest_unconverted_pdev = NULL;
	}

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
		pmtest_layer_del(&pmtest_typed_pdevs[i]->dev);
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

	return pmtest_layer_add(&pdev->dev, "type");
}

static int pmtest_unconverted_add(void)
{
	struct platform_device *pdev;
	int ret;

	pdev = platform_device_alloc("pmtest_unconverted", 0);
	if (!pdev)
		return -ENOMEM;
	pdev->dev.type = &pmtest_unconverted_type;

	ret = platform_device_add(pdev);
	if (ret) {
		platform_device_put(pdev);
		return ret;
	}
	pmtest_unconverted_pdev = pdev;

	return pmtest_layer_add(&pdev->dev, "type");
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
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

/**
 * pmtest_typeclass_init - Register the type row's driver and devices, the
 * class and its devices.
 * @unconverted: Also register pmtest_unconverted.0 and its driver.
 */
int pmtest_typeclass_init(bool unconverted)
{
	int i, ret;

	ret = platform_driver_register(&pmtest_typed_driver);
	if (ret)
		return ret;

	ret = platform_driver_register(&pmtest_unconverted_driver);
	if (ret)
		goto err_typed_driver;

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

	if (unconverted) {
		ret = pmtest_unconverted_add();
		if (ret)
			goto err_devices;
	}

	return 0;

err_devices:
	pmtest_typeclass_remove_devices();
	class_unregister(&pmtest_class);
err_driver:
	platform_driver_unregister(&pmtest_unconverted_driver);
err_typed_driver:
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
	platform_driver_unregister(&pmtest_unconverted_driver);
	platform_driver_unregister(&pmtest_typed_driver);
}
