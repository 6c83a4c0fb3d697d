// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_syscore.c - syscore_ops with a fault knob.
 *
 * syscore_suspend() runs on one CPU with interrupts off, after the noirq
 * phase of every device.  In hibernation it is the last step of
 * create_image() before the snapshot, so a failure here makes image creation
 * fail after all devices are frozen: the path of a failing
 * platform_pre_snapshot() or a pending wakeup, which the devices must see as
 * a failed freeze.  The knobs name it "pmtest_syscore":
 *
 *   echo 'pmtest_syscore syscore_suspend -5 1' > /sys/kernel/debug/pmtest/fault
 *
 * Its callbacks are logged as syscore_suspend and syscore_resume with the
 * event of the device phase before them.  Only the fault knob may name it,
 * and only for syscore_suspend (syscore_resume returns void).
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/syscore_ops.h>

#include "pmtest.h"

#define PMTEST_SYSCORE_NAME	"pmtest_syscore"

/*
 * Where syscore_ops are registered through a struct syscore, their callbacks
 * take its data (Kbuild defines PMTEST_SYSCORE_HAS_DATA from
 * <linux/syscore_ops.h>); pmtest has none to pass.
 */
#ifdef PMTEST_SYSCORE_HAS_DATA
#define PMTEST_SYSCORE_ARGS	void *data
#else
#define PMTEST_SYSCORE_ARGS	void
#endif

static int pmtest_syscore_suspend(PMTEST_SYSCORE_ARGS)
{
	enum pmtest_cb cb = PMTEST_CB_SYSCORE_SUSPEND;
	int event = pmtest_event_current(cb);
	int ret;

	ret = pmtest_knob_fault(PMTEST_SYSCORE_NAME, cb);
	pmtest_log(PMTEST_SYSCORE_NAME, cb, event, ret);

	return ret;
}

static void pmtest_syscore_resume(PMTEST_SYSCORE_ARGS)
{
	enum pmtest_cb cb = PMTEST_CB_SYSCORE_RESUME;

	pmtest_log(PMTEST_SYSCORE_NAME, cb, pmtest_event_current(cb), 0);
}

static struct syscore_ops pmtest_syscore_ops = {
	.suspend = pmtest_syscore_suspend,
	.resume = pmtest_syscore_resume,
};

#ifdef PMTEST_SYSCORE_HAS_DATA
static struct syscore pmtest_syscore = {
	.ops = &pmtest_syscore_ops,
};

static void pmtest_syscore_register(void)
{
	register_syscore(&pmtest_syscore);
}

static void pmtest_syscore_unregister(void)
{
	unregister_syscore(&pmtest_syscore);
}
#else
static void pmtest_syscore_register(void)
{
	register_syscore_ops(&pmtest_syscore_ops);
}

static void pmtest_syscore_unregister(void)
{
	unregister_syscore_ops(&pmtest_syscore_ops);
}
#endif

/**
 * pmtest_syscore_init - Register the syscore_ops and let the fault knob
 * name them.
 */
int pmtest_syscore_init(void)
{
	int ret;

	ret = pmtest_target_add(PMTEST_SYSCORE_NAME, NULL, PMTEST_KNOBS_FAULT,
				PMTEST_CB_BIT(PMTEST_CB_SYSCORE_SUSPEND) |
				PMTEST_CB_BIT(PMTEST_CB_SYSCORE_RESUME));
	if (ret)
		return ret;

	pmtest_syscore_register();

	return 0;
}

/**
 * pmtest_syscore_exit - Unregister the syscore_ops.
 */
void pmtest_syscore_exit(void)
{
	pmtest_syscore_unregister();
	pmtest_target_del(PMTEST_SYSCORE_NAME);
}
