// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_cb.c - Callback names, PM events and the common callback path.
 *
 * Every PM callback of every pmtest device goes through pmtest_cb_begin()
 * (delay, child registration, fault injection) and pmtest_cb_end() (log).
 *
 * The PM event of a record is the pm_message_t event the PM core runs the
 * current phase with.  The core does not pass it to dev_pm_ops callbacks,
 * but it announces every phase with the exported power:suspend_resume
 * tracepoint ("dpm_prepare", "dpm_suspend", ..., "dpm_complete", value
 * state.event); a probe on that tracepoint records it.  This is how ->prepare
 * and ->complete learn the event, and how an unpatched kernel is seen calling
 * ->freeze for PM_EVENT_QUIESCE.  Without tracepoints, the event implied by
 * the callback's name is used and ->prepare/->complete log "unknown".
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/kernel.h>
#include <linux/pm.h>
#include <linux/pm_runtime.h>
#include <linux/string.h>
#include <trace/events/power.h>

#include "pmtest.h"

#define PMTEST_CB_ATOMIC	BIT(0)	/* late/early/noirq: no sleeping */

struct pmtest_cb_info {
	const char *name;
	int event;		/* event implied by the callback */
	unsigned int flags;
};

static const struct pmtest_cb_info pmtest_cbs[PMTEST_NR_CB] = {
	[PMTEST_CB_PREPARE] = { "prepare", PMTEST_EVENT_NONE, 0 },
	[PMTEST_CB_COMPLETE] = { "complete", PMTEST_EVENT_NONE, 0 },
	[PMTEST_CB_SUSPEND] = { "suspend", PM_EVENT_SUSPEND, 0 },
	[PMTEST_CB_SUSPEND_LATE] = { "suspend_late", PM_EVENT_SUSPEND,
				     PMTEST_CB_ATOMIC },
	[PMTEST_CB_SUSPEND_NOIRQ] = { "suspend_noirq", PM_EVENT_SUSPEND,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_RESUME_NOIRQ] = { "resume_noirq", PM_EVENT_RESUME,
				     PMTEST_CB_ATOMIC },
	[PMTEST_CB_RESUME_EARLY] = { "resume_early", PM_EVENT_RESUME,
				     PMTEST_CB_ATOMIC },
	[PMTEST_CB_RESUME] = { "resume", PM_EVENT_RESUME, 0 },
	[PMTEST_CB_FREEZE] = { "freeze", PM_EVENT_FREEZE, 0 },
	[PMTEST_CB_FREEZE_LATE] = { "freeze_late", PM_EVENT_FREEZE,
				    PMTEST_CB_ATOMIC },
	[PMTEST_CB_FREEZE_NOIRQ] = { "freeze_noirq", PM_EVENT_FREEZE,
				     PMTEST_CB_ATOMIC },
	[PMTEST_CB_THAW_NOIRQ] = { "thaw_noirq", PM_EVENT_THAW,
				   PMTEST_CB_ATOMIC },
	[PMTEST_CB_THAW_EARLY] = { "thaw_early", PM_EVENT_THAW,
				   PMTEST_CB_ATOMIC },
	[PMTEST_CB_THAW] = { "thaw", PM_EVENT_THAW, 0 },
	[PMTEST_CB_POWEROFF] = { "poweroff", PM_EVENT_HIBERNATE, 0 },
	[PMTEST_CB_POWEROFF_LATE] = { "poweroff_late", PM_EVENT_HIBERNATE,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_POWEROFF_NOIRQ] = { "poweroff_noirq", PM_EVENT_HIBERNATE,
				       PMTEST_CB_ATOMIC },
	[PMTEST_CB_RESTORE_NOIRQ] = { "restore_noirq", PM_EVENT_RESTORE,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_RESTORE_EARLY] = { "restore_early", PM_EVENT_RESTORE,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_RESTORE] = { "restore", PM_EVENT_RESTORE, 0 },
	[PMTEST_CB_QUIESCE] = { "quiesce", PM_EVENT_QUIESCE, 0 },
	[PMTEST_CB_QUIESCE_LATE] = { "quiesce_late", PM_EVENT_QUIESCE,
				     PMTEST_CB_ATOMIC },
	[PMTEST_CB_QUIESCE_NOIRQ] = { "quiesce_noirq", PM_EVENT_QUIESCE,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_RECOVER] = { "recover", PM_EVENT_RECOVER, 0 },
	[PMTEST_CB_RECOVER_EARLY] = { "recover_early", PM_EVENT_RECOVER,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_RECOVER_NOIRQ] = { "recover_noirq", PM_EVENT_RECOVER,
				      PMTEST_CB_ATOMIC },
	[PMTEST_CB_SYSCORE_SUSPEND] = { "syscore_suspend", PMTEST_EVENT_NONE,
					PMTEST_CB_ATOMIC },
	[PMTEST_CB_SYSCORE_RESUME] = { "syscore_resume", PMTEST_EVENT_NONE,
				       PMTEST_CB_ATOMIC },
	[PMTEST_CB_REGISTER] = { "register", PMTEST_EVENT_NONE, 0 },
	[PMTEST_CB_RPM_SUSPENDED] = { "rpm_suspended", PMTEST_EVENT_NONE, 0 },
};

/**
 * pmtest_cb_name - Name of a callback as used in the log and the knobs.
 * @cb: Callback.
 */
const char *pmtest_cb_name(enum pmtest_cb cb)
{
	if (cb >= PMTEST_NR_CB)
		return "unknown";

	return pmtest_cbs[cb].name;
}

/**
 * pmtest_cb_parse - Look up a callback by the name a knob uses.
 * @name: Callback name, e.g. "suspend_late".
 *
 * Return: the callback, or -EINVAL if @name is not a PM callback name.
 * "register" and "rpm_suspended" are not accepted: they are log markers,
 * not callbacks.
 */
int pmtest_cb_parse(const char *name)
{
	int i;

	for (i = 0; i < PMTEST_NR_CB; i++) {
		if (i != PMTEST_CB_REGISTER && i != PMTEST_CB_RPM_SUSPENDED &&
		    !strcmp(name, pmtest_cbs[i].name))
			return i;
	}

	return -EINVAL;
}

/**
 * pmtest_cb_atomic - Tell whether a callback runs in a late/early/noirq phase.
 * @cb: Callback.
 *
 * Delays in those phases busy-wait (mdelay) instead of sleeping.
 */
bool pmtest_cb_atomic(enum pmtest_cb cb)
{
	return cb < PMTEST_NR_CB && (pmtest_cbs[cb].flags & PMTEST_CB_ATOMIC);
}

/**
 * pmtest_event_name - Name of a PM event, as drivers/base/power/main.c's
 * pm_verb() spells it.
 * @event: PM_EVENT_* value, or PMTEST_EVENT_NONE.
 */
const char *pmtest_event_name(int event)
{
	switch (event) {
	case PM_EVENT_ON:
		return "on";
	case PM_EVENT_SUSPEND:
		return "suspend";
	case PM_EVENT_RESUME:
		return "resume";
	case PM_EVENT_FREEZE:
		return "freeze";
	case PM_EVENT_QUIESCE:
		return "quiesce";
	case PM_EVENT_HIBERNATE:
		return "hibernate";
	case PM_EVENT_THAW:
		return "thaw";
	case PM_EVENT_RESTORE:
		return "restore";
	case PM_EVENT_RECOVER:
		return "recover";
	default:
		return "unknown";
	}
}

/* Event of the dpm_* phase in progress, PMTEST_EVENT_NONE outside them. */
static int pmtest_phase_event = PMTEST_EVENT_NONE;
static bool pmtest_probe_registered;

static void pmtest_suspend_resume_probe(void *data, const char *action,
					int val, bool start)
{
	if (strncmp(action, "dpm_", 4))
		return;

	if (start)
		WRITE_ONCE(pmtest_phase_event, val);
	else if (!strcmp(action, "dpm_complete"))
		WRITE_ONCE(pmtest_phase_event, PMTEST_EVENT_NONE);
}

/**
 * pmtest_event_current - PM event a callback is running for.
 * @cb: Callback being run.
 *
 * Return: the event of the dpm_* phase in progress, or, if none is known,
 * the event implied by @cb (PMTEST_EVENT_NONE for prepare and complete).
 */
int pmtest_event_current(enum pmtest_cb cb)
{
	int event = READ_ONCE(pmtest_phase_event);

	if (event != PMTEST_EVENT_NONE || cb >= PMTEST_NR_CB)
		return event;

	return pmtest_cbs[cb].event;
}

/**
 * pmtest_event_init - Start following the PM core's dpm_* phases.
 *
 * Failure is not fatal: records then carry the event implied by the callback.
 */
int pmtest_event_init(void)
{
	int ret;

	ret = register_trace_suspend_resume(pmtest_suspend_resume_probe, NULL);
	if (ret) {
		pr_warn("no power:suspend_resume probe (%d), events implied by callbacks\n",
			ret);
		return ret;
	}
	pmtest_probe_registered = true;

	return 0;
}

/**
 * pmtest_event_exit - Stop following the PM core's phases.
 */
void pmtest_event_exit(void)
{
	if (!pmtest_probe_registered)
		return;

	unregister_trace_suspend_resume(pmtest_suspend_resume_probe, NULL);
	tracepoint_synchronize_unregister();
	pmtest_probe_registered = false;
}

/**
 * pmtest_knobs_apply - Apply the knobs at the start of a callback.
 * @name: Target whose callback runs: a device name, or the name a PM domain
 *	  of pmtest's logs its own callbacks under.
 * @dev: Device that may get a child from a "child" knob, or NULL.
 * @cb: Callback.
 * @event: PM event of the callback.
 *
 * Panics for a "panic" knob (what a crashing driver does, for the lab's
 * panic handling), waits for a "delay" knob (mdelay in late/early/noirq
 * callbacks, msleep elsewhere), registers a child device synchronously for a
 * "child" knob and consumes one call of a "fault" knob.
 *
 * Return: the error to inject, or 0.
 */
int pmtest_knobs_apply(const char *name, struct device *dev,
		       enum pmtest_cb cb, int event)
{
	unsigned int ms;

	if (pmtest_knob_panic(name, cb))
		panic("pmtest: panic knob: %s %s\n", name, pmtest_cb_name(cb));

	ms = pmtest_knob_delay(name, cb);
	if (ms) {
		if (pmtest_cb_atomic(cb))
			mdelay(ms);
		else
			msleep(ms);
	}

	if (dev && pmtest_knob_child(name, cb))
		pmtest_platform_add_child(dev, cb, event);

	return pmtest_knob_fault(name, cb);
}

/**
 * pmtest_cb_begin - Apply the knobs at the start of a device's callback.
 * @dev: Device whose callback runs.
 * @cb: Callback.
 * @event: PM event of the callback.
 *
 * Return: the error to inject, or 0.
 */
int pmtest_cb_begin(struct device *dev, enum pmtest_cb cb, int event)
{
	return pmtest_knobs_apply(dev_name(dev), dev, cb, event);
}

/**
 * pmtest_cb_end - Log the end of a callback.
 * @dev: Device whose callback ran.
 * @cb: Callback.
 * @event: PM event of the callback.
 * @ret: Value the callback returns.
 */
void pmtest_cb_end(struct device *dev, enum pmtest_cb cb, int event, int ret)
{
	pmtest_log(dev_name(dev), cb, event, ret);
}

/**
 * pmtest_cb_run - Run a callback that has no device work to do.
 * @dev: Device whose callback runs.
 * @cb: Callback.
 *
 * For a DPM_FLAG_SMART_SUSPEND device, a suspend-side level 1 callback that
 * succeeds is followed by pmtest_cb_note_rpm().
 *
 * Return: the injected error, or 0.
 */
int pmtest_cb_run(struct device *dev, enum pmtest_cb cb)
{
	int event = pmtest_event_current(cb);
	int ret;

	ret = pmtest_cb_begin(dev, cb, event);
	pmtest_cb_end(dev, cb, event, ret);

	if (!ret && dev_pm_test_driver_flags(dev, DPM_FLAG_SMART_SUSPEND) &&
	    (cb == PMTEST_CB_SUSPEND || cb == PMTEST_CB_FREEZE ||
	     cb == PMTEST_CB_POWEROFF || cb == PMTEST_CB_QUIESCE))
		pmtest_cb_note_rpm(dev, cb);

	return ret;
}

/**
 * pmtest_cb_note_rpm - Log whether a device is still runtime-suspended.
 * @dev: Device whose suspend-side level 1 callback just ran.
 * @cb: That callback.
 *
 * Logs an "rpm_suspended" record, with the event of @cb, if the device's
 * runtime PM status is suspended: for a DPM_FLAG_SMART_SUSPEND device this
 * is what makes dev_pm_skip_suspend() skip its late and noirq callbacks
 * (runtime PM cannot change it once ->suspend has returned: the core holds
 * a usage count since ->prepare and disables runtime PM before the late
 * phase).  The oracle judges the skipped levels by this record.
 */
void pmtest_cb_note_rpm(struct device *dev, enum pmtest_cb cb)
{
	if (pm_runtime_status_suspended(dev))
		pmtest_log(dev_name(dev), PMTEST_CB_RPM_SUSPENDED,
			   pmtest_event_current(cb), 0);
}

/**
 * pmtest_pm_ops_cbs - The callbacks a set of dev_pm_ops implements.
 * @ops: Operations of a driver or a PM domain.
 *
 * Knobs may name only these for a device whose driver has @ops.
 *
 * Return: a set of PMTEST_CB_BIT()s.
 */
u64 pmtest_pm_ops_cbs(const struct dev_pm_ops *ops)
{
	const struct {
		enum pmtest_cb cb;
		bool set;
	} map[] = {
		{ PMTEST_CB_PREPARE, ops->prepare },
		{ PMTEST_CB_COMPLETE, ops->complete },
		{ PMTEST_CB_SUSPEND, ops->suspend },
		{ PMTEST_CB_SUSPEND_LATE, ops->suspend_late },
		{ PMTEST_CB_SUSPEND_NOIRQ, ops->suspend_noirq },
		{ PMTEST_CB_RESUME_NOIRQ, ops->resume_noirq },
		{ PMTEST_CB_RESUME_EARLY, ops->resume_early },
		{ PMTEST_CB_RESUME, ops->resume },
		{ PMTEST_CB_FREEZE, ops->freeze },
		{ PMTEST_CB_FREEZE_LATE, ops->freeze_late },
		{ PMTEST_CB_FREEZE_NOIRQ, ops->freeze_noirq },
		{ PMTEST_CB_THAW_NOIRQ, ops->thaw_noirq },
		{ PMTEST_CB_THAW_EARLY, ops->thaw_early },
		{ PMTEST_CB_THAW, ops->thaw },
		{ PMTEST_CB_POWEROFF, ops->poweroff },
		{ PMTEST_CB_POWEROFF_LATE, ops->poweroff_late },
		{ PMTEST_CB_POWEROFF_NOIRQ, ops->poweroff_noirq },
		{ PMTEST_CB_RESTORE_NOIRQ, ops->restore_noirq },
		{ PMTEST_CB_RESTORE_EARLY, ops->restore_early },
		{ PMTEST_CB_RESTORE, ops->restore },
#ifdef PM_OPS_HAS_QUIESCE
		{ PMTEST_CB_QUIESCE, ops->quiesce },
		{ PMTEST_CB_QUIESCE_LATE, ops->quiesce_late },
		{ PMTEST_CB_QUIESCE_NOIRQ, ops->quiesce_noirq },
		{ PMTEST_CB_RECOVER, ops->recover },
		{ PMTEST_CB_RECOVER_EARLY, ops->recover_early },
		{ PMTEST_CB_RECOVER_NOIRQ, ops->recover_noirq },
#endif
	};
	u64 cbs = 0;
	int i;

	for (i = 0; i < ARRAY_SIZE(map); i++) {
		if (map[i].set)
			cbs |= PMTEST_CB_BIT(map[i].cb);
	}

	return cbs;
}
