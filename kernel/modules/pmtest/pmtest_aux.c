// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_aux.c - A device on the auxiliary bus (only with aux=1).
 *
 * The auxiliary bus (drivers/base/auxiliary.c) has system-sleep callbacks at
 * level 1 only: its driver's ->suspend() for freeze and poweroff as well as
 * suspend, its ->resume() for thaw and restore as well as resume
 * (SET_SYSTEM_SLEEP_PM_OPS with pm_generic_suspend/resume), and, with the
 * project's series, the driver's ->quiesce() and ->recover() (or ->suspend()
 * and ->resume() without them).  At the late and noirq levels the PM core
 * runs the driver's own callbacks.  Real auxiliary devices are split off
 * network, RDMA and sound PCI functions QEMU does not emulate; this one makes
 * the bus's layer visible in the lab: pmtest.aux.0 (KBUILD_MODNAME "pmtest",
 * name "aux"), bound to pmtest_aux, whose callbacks are pmtest_full's and log
 * under the device's name, so the log shows what the bus gave the driver.
 * Its parent is a driverless platform device, pmtest_aux_parent, as a PCI
 * function is the parent of a real one.
 *
 * The bus is built in only when a driver selects CONFIG_AUXILIARY_BUS (the
 * lab's configuration: INTEL_VSEC); without it aux=1 fails the load.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/auxiliary_bus.h>
#include <linux/err.h>
#include <linux/errno.h>
#include <linux/mod_devicetable.h>
#include <linux/platform_device.h>
#include <linux/slab.h>

#include "pmtest.h"

#if IS_ENABLED(CONFIG_AUXILIARY_BUS)

static struct platform_device *pmtest_aux_parent;
static struct auxiliary_device *pmtest_auxdev;

static int pmtest_aux_probe(struct auxiliary_device *auxdev,
			    const struct auxiliary_device_id *id)
{
	return pmtest_target_add(dev_name(&auxdev->dev), &auxdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(&pmtest_full_pm_ops));
}

static void pmtest_aux_remove(struct auxiliary_device *auxdev)
{
	pmtest_dev_del(&auxdev->dev);
}

static const struct auxiliary_device_id pmtest_aux_ids[] = {
	{ .name = KBUILD_MODNAME ".aux" },
	{ }
};

static struct auxiliary_driver pmtest_aux_driver = {
	.name = "aux",
	.probe = pmtest_aux_probe,
	.remove = pmtest_aux_remove,
	.id_table = pmtest_aux_ids,
	.driver.pm = &pmtest_full_pm_ops,
};

static void pmtest_auxdev_release(struct device *dev)
{
	kfree(to_auxiliary_dev(dev));
}

/**
 * pmtest_aux_init - Register pmtest_aux and, with @add, pmtest.aux.0.
 * @add: The aux module parameter.
 *
 * Return: 0, or the error of a registration.
 */
int pmtest_aux_init(bool add)
{
	int ret;

	if (!add)
		return 0;

	ret = auxiliary_driver_register(&pmtest_aux_driver);
	if (ret)
		return ret;

	pmtest_aux_parent = platform_device_register_simple("pmtest_aux_parent",
							    PLATFORM_DEVID_NONE,
							    NULL, 0);
	if (IS_ERR(pmtest_aux_parent)) {
		ret = PTR_ERR(pmtest_aux_parent);
		goto err_driver;
	}

	pmtest_auxdev = kzalloc(sizeof(*pmtest_auxdev), GFP_KERNEL);
	if (!pmtest_auxdev) {
		ret = -ENOMEM;
		goto err_parent;
	}
	pmtest_auxdev->name = "aux";
	pmtest_auxdev->id = 0;
	pmtest_auxdev->dev.parent = &pmtest_aux_parent->dev;
	pmtest_auxdev->dev.release = pmtest_auxdev_release;
	ret = auxiliary_device_init(pmtest_auxdev);
	if (ret) {
		kfree(pmtest_auxdev);
		goto err_parent;
	}

	ret = auxiliary_device_add(pmtest_auxdev);
	if (ret) {
		auxiliary_device_uninit(pmtest_auxdev);	/* frees it */
		goto err_parent;
	}

	return 0;

err_parent:
	pmtest_auxdev = NULL;
	platform_device_unregister(pmtest_aux_parent);
err_driver:
	auxiliary_driver_unregister(&pmtest_aux_driver);

	return ret;
}

/**
 * pmtest_aux_exit - Unregister what pmtest_aux_init() registered.
 */
void pmtest_aux_exit(void)
{
	if (!pmtest_auxdev)
		return;

	auxiliary_device_delete(pmtest_auxdev);
	auxiliary_device_uninit(pmtest_auxdev);
	pmtest_auxdev = NULL;
	platform_device_unregister(pmtest_aux_parent);
	auxiliary_driver_unregister(&pmtest_aux_driver);
}

#else /* !CONFIG_AUXILIARY_BUS */

int pmtest_aux_init(bool add)
{
	if (add)
		pr_err("aux=1: this kernel has no auxiliary bus (CONFIG_AUXILIARY_BUS)\n");

	return add ? -ENODEV : 0;
}

void pmtest_aux_exit(void)
{
}

#endif /* CONFIG_AUXILIARY_BUS */
