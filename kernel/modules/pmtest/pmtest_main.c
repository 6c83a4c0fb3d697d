// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_main.c - System-sleep test module: parameters, init and exit.
 *
 * pmtest.ko registers three platform drivers with trees of test devices
 * (pmtest_platform.c), a PCI driver for QEMU's edu device (pmtest_edu.c),
 * a driver for the ACPI devices of the lab's SSDT (pmtest_acpi.c), devices
 * in a PM domain of its own (pmtest_domain.c) and in a genpd domain
 * (pmtest_genpd.c), devices with DPM flags
 * (pmtest_flags.c), devices with type and class PM (pmtest_typeclass.c),
 * a device on the auxiliary bus (pmtest_aux.c, aux=1) and syscore_ops
 * (pmtest_syscore.c), logs every PM callback they get (pmtest_log.c) and
 * lets tests delay callbacks, make them fail and register children from
 * them (pmtest_knobs.c).  See README.md.
 *
 * The knob parameters are applied at init, before any system transition, so
 * "pmtest.fault=..." on the command line of a kernel with pmtest built in,
 * or modprobe parameters, reach the boot kernel of a hibernation restore.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/init.h>
#include <linux/module.h>
#include <linux/moduleparam.h>

#include "pmtest.h"

static unsigned int depth = 2;
module_param(depth, uint, 0444);
MODULE_PARM_DESC(depth, "Levels of devices below each tree's root (default 2)");

static unsigned int fanout = 2;
module_param(fanout, uint, 0444);
MODULE_PARM_DESC(fanout, "Children of each non-leaf device (default 2)");

module_param_named(log_console, pmtest_log_console, bool, 0644);
MODULE_PARM_DESC(log_console, "Also print every log record with pr_info (default 0)");

static char *fault_param;
module_param_named(fault, fault_param, charp, 0444);
MODULE_PARM_DESC(fault, "Faults: dev|*:callback:errno:count[;...]");

static char *delay_param;
module_param_named(delay, delay_param, charp, 0444);
MODULE_PARM_DESC(delay, "Delays: dev|*:callback:ms[;...]");

static char *child_param;
module_param_named(child, child_param, charp, 0444);
MODULE_PARM_DESC(child, "Child registrations: dev:prepare|suspend[;...]");

static bool edu_quiesce = true;
module_param(edu_quiesce, bool, 0444);
MODULE_PARM_DESC(edu_quiesce, "edu driver has ->quiesce/->recover if the kernel has them (default 1)");

static bool unconverted;
module_param(unconverted, bool, 0444);
MODULE_PARM_DESC(unconverted, "Add pmtest_unconverted.0, behind a device type without ->quiesce/->recover (default 0)");

static bool aux;
module_param(aux, bool, 0444);
MODULE_PARM_DESC(aux, "Add pmtest.aux.0, a device on the auxiliary bus (default 0)");

static struct dentry *pmtest_debugfs;

static int __init pmtest_init(void)
{
	int ret;

	pmtest_debugfs = debugfs_create_dir("pmtest", NULL);

	ret = pmtest_log_init(pmtest_debugfs);
	if (ret)
		goto err_debugfs;

	/* Not fatal: events are then implied by the callbacks. */
	pmtest_event_init();

	ret = pmtest_platform_init(depth, fanout);
	if (ret)
		goto err_event;

	ret = pmtest_edu_init(pmtest_debugfs, edu_quiesce);
	if (ret)
		goto err_platform;

	ret = pmtest_acpi_init();
	if (ret)
		goto err_edu;

	ret = pmtest_domain_init();
	if (ret)
		goto err_acpi;

	ret = pmtest_genpd_init();
	if (ret)
		goto err_domain;

	ret = pmtest_flags_init();
	if (ret)
		goto err_genpd;

	ret = pmtest_typeclass_init(unconverted);
	if (ret)
		goto err_flags;

	ret = pmtest_aux_init(aux);
	if (ret)
		goto err_typeclass;

	ret = pmtest_syscore_init();
	if (ret)
		goto err_aux;

	ret = pmtest_knobs_init(pmtest_debugfs, fault_param, delay_param,
				child_param);
	if (ret)
		goto err_syscore;

	return 0;

err_syscore:
	pmtest_syscore_exit();
err_aux:
	pmtest_aux_exit();
err_typeclass:
	pmtest_typeclass_exit();
err_flags:
	pmtest_flags_exit();
err_genpd:
	pmtest_genpd_exit();
err_domain:
	pmtest_domain_exit();
err_acpi:
	pmtest_acpi_exit();
err_edu:
	pmtest_edu_exit();
err_platform:
	pmtest_platform_exit();
err_event:
	debugfs_remove_recursive(pmtest_debugfs);
	pmtest_event_exit();
	pmtest_log_exit();

	return ret;

err_debugfs:
	debugfs_remove_recursive(pmtest_debugfs);

	return ret;
}
module_init(pmtest_init);

static void __exit pmtest_exit(void)
{
	debugfs_remove_recursive(pmtest_debugfs);
	pmtest_syscore_exit();
	pmtest_aux_exit();
	pmtest_typeclass_exit();
	pmtest_flags_exit();
	pmtest_genpd_exit();
	pmtest_domain_exit();
	pmtest_acpi_exit();
	pmtest_edu_exit();
	pmtest_platform_exit();
	pmtest_event_exit();
	pmtest_log_exit();
}
module_exit(pmtest_exit);

MODULE_DESCRIPTION("pmlab system-sleep callback test devices and log");
MODULE_LICENSE("GPL");
