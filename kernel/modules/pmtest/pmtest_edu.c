// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_edu.c - PCI driver for QEMU's edu device (1234:11e8).
 *
 * The driver keeps device state across system sleep the way a real driver
 * must.  The PCI core saves and restores config space; the driver's job is
 * the device registers (QEMU docs/specs/edu.rst):
 *
 *   0x00 identification, RO, 0xRRrr00ed
 *   0x04 card liveness: stores x when x is written, reads back ~x
 *   0x08 factorial: writing n starts n! (u32 arithmetic), the result
 *        replaces n once status bit 0 clears
 *   0x20 status: bit 0 set while computing
 *
 * At probe the driver writes a random value to the liveness register and a
 * small n to the factorial register.  ->suspend, ->freeze, ->poweroff (and
 * ->quiesce) save both registers; ->resume, ->thaw, ->restore (and
 * ->recover) check the identification register, run a liveness check with a
 * fresh pattern, write the saved value back, recompute n! and compare
 * everything with what the driver expects.  Each check counts as verified
 * or as a mismatch (the callback then returns -EIO); debugfs "edu_state"
 * reads "verified N mismatches M".  The late/early and noirq callbacks of
 * every event have no device work: they are there so that the PCI core's
 * late and noirq paths call into a driver, and so that faults can be
 * injected at every level.
 *
 * Two drivers match the device.  pmtest_edu_pm (dev_pm_ops) is registered
 * first and binds it at load; pmtest_edu_legacy has the legacy
 * pci_driver.suspend/.resume (the PCI core's pci_legacy_suspend() path) and
 * binds it once it is unbound from pmtest_edu_pm and bound to it through
 * sysfs:
 *
 *   echo 0000:00:10.0 > /sys/bus/pci/drivers/pmtest_edu_pm/unbind
 *   echo 0000:00:10.0 > /sys/bus/pci/drivers/pmtest_edu_legacy/bind
 *
 * Its ->suspend logs the pm_message_t event it is given, its ->resume the
 * event of the phase.  (Before pmtest_edu_pm had late/early and noirq
 * callbacks it was called pmtest_edu: the driver name the trace records is
 * how the lab's oracle tells which callbacks a recorded run's driver had.)
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/atomic.h>
#include <linux/debugfs.h>
#include <linux/io.h>
#include <linux/iopoll.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pm.h>
#include <linux/random.h>
#include <linux/seq_file.h>

#include "pmtest.h"

#define EDU_REG_ID		0x00
#define EDU_REG_LIVE		0x04
#define EDU_REG_FACT		0x08
#define EDU_REG_STATUS		0x20

#define EDU_ID_MAGIC		0xed	/* low byte of EDU_REG_ID */
#define EDU_STATUS_COMPUTING	BIT(0)
#define EDU_FACT_MAX_N		12	/* 12! is the largest that fits a u32 */
#define EDU_FACT_POLL_US	100
#define EDU_FACT_TIMEOUT_US	200000
#define EDU_LIVE_PATTERN	0xa5a5a5a5

/**
 * struct pmtest_edu - State of one edu device.
 * @regs: BAR 0.
 * @live: Value the driver keeps in the liveness register.
 * @fact_n: Value the driver last wrote to the factorial register.
 * @saved_live: Liveness register contents saved by the last suspend.
 * @saved_fact: Factorial register contents saved by the last suspend.
 * @saved: @saved_live and @saved_fact hold a saved state.
 */
struct pmtest_edu {
	void __iomem *regs;
	u32 live;
	u32 fact_n;
	u32 saved_live;
	u32 saved_fact;
	bool saved;
};

static atomic_t pmtest_edu_verified = ATOMIC_INIT(0);
static atomic_t pmtest_edu_mismatches = ATOMIC_INIT(0);

static u32 pmtest_edu_factorial(u32 n)
{
	u32 ret = 1;

	while (n)
		ret *= n--;

	return ret;
}

/* Wait for a factorial computation to end.  Sleeps. */
static int pmtest_edu_fact_wait(struct pmtest_edu *edu)
{
	u32 status;

	return readx_poll_timeout(ioread32, edu->regs + EDU_REG_STATUS, status,
				  !(status & EDU_STATUS_COMPUTING),
				  EDU_FACT_POLL_US, EDU_FACT_TIMEOUT_US);
}

/* Compute n! on the device; return the result in @fact. */
static int pmtest_edu_fact_run(struct pmtest_edu *edu, u32 n, u32 *fact)
{
	int ret;

	ret = pmtest_edu_fact_wait(edu);
	if (ret)
		return ret;

	iowrite32(n, edu->regs + EDU_REG_FACT);
	ret = pmtest_edu_fact_wait(edu);
	if (ret)
		return ret;

	*fact = ioread32(edu->regs + EDU_REG_FACT);

	return 0;
}

/* ->suspend, ->freeze, ->poweroff, ->quiesce: save the device registers. */
static int pmtest_edu_save(struct device *dev, enum pmtest_cb cb)
{
	struct pmtest_edu *edu = dev_get_drvdata(dev);
	int ret;

	ret = pmtest_edu_fact_wait(edu);
	edu->saved_live = ~ioread32(edu->regs + EDU_REG_LIVE);
	edu->saved_fact = ioread32(edu->regs + EDU_REG_FACT);
	edu->saved = true;

	if (ret || edu->saved_live != edu->live ||
	    edu->saved_fact != pmtest_edu_factorial(edu->fact_n))
		dev_warn(dev, "%s: saved live %#x fact %u, driver has live %#x fact(%u) %u (%d)\n",
			 pmtest_cb_name(cb), edu->saved_live, edu->saved_fact,
			 edu->live, edu->fact_n,
			 pmtest_edu_factorial(edu->fact_n), ret);

	return 0;
}

/*
 * ->resume, ->thaw, ->restore, ->recover: restore the device registers and
 * verify that the device answers as it should.
 */
static int pmtest_edu_restore(struct device *dev, enum pmtest_cb cb)
{
	struct pmtest_edu *edu = dev_get_drvdata(dev);
	u32 want_fact = pmtest_edu_factorial(edu->fact_n);
	u32 id, held, pattern, echo, live, fact = 0;
	bool ok;
	int ret;

	if (!edu->saved) {
		edu->saved_live = edu->live;
		edu->saved_fact = want_fact;
	}

	id = ioread32(edu->regs + EDU_REG_ID);
	held = ~ioread32(edu->regs + EDU_REG_LIVE);

	pattern = edu->saved_live ^ EDU_LIVE_PATTERN;
	iowrite32(pattern, edu->regs + EDU_REG_LIVE);
	echo = ioread32(edu->regs + EDU_REG_LIVE);

	iowrite32(edu->saved_live, edu->regs + EDU_REG_LIVE);
	ret = pmtest_edu_fact_run(edu, edu->fact_n, &fact);
	live = ~ioread32(edu->regs + EDU_REG_LIVE);

	ok = (id & 0xff) == EDU_ID_MAGIC && echo == ~pattern &&
	     edu->saved_live == edu->live && live == edu->live &&
	     edu->saved_fact == want_fact && !ret && fact == want_fact;
	edu->saved = false;

	if (ok)
		atomic_inc(&pmtest_edu_verified);
	else
		atomic_inc(&pmtest_edu_mismatches);

	dev_info(dev, "%s: %s: id %#x live %#x (device kept %#x) echo %s fact(%u) %u (want %u, %d); verified %d mismatches %d\n",
		 pmtest_cb_name(cb), ok ? "verified" : "MISMATCH", id, live,
		 held, echo == ~pattern ? "ok" : "bad", edu->fact_n, fact,
		 want_fact, ret, atomic_read(&pmtest_edu_verified),
		 atomic_read(&pmtest_edu_mismatches));

	return ok ? 0 : -EIO;
}

/* Common path of the edu callbacks: knobs, device work, log. */
static int pmtest_edu_cb(struct device *dev, enum pmtest_cb cb,
			 int (*work)(struct device *dev, enum pmtest_cb cb))
{
	int event = pmtest_event_current(cb);
	int ret;

	ret = pmtest_cb_begin(dev, cb, event);
	if (!ret && work)
		ret = work(dev, cb);
	pmtest_cb_end(dev, cb, event, ret);

	return ret;
}

static int pmtest_edu_prepare(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_PREPARE, NULL);
}

static void pmtest_edu_complete(struct device *dev)
{
	pmtest_edu_cb(dev, PMTEST_CB_COMPLETE, NULL);
}

static int pmtest_edu_suspend(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_SUSPEND, pmtest_edu_save);
}

static int pmtest_edu_resume(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RESUME, pmtest_edu_restore);
}

static int pmtest_edu_freeze(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_FREEZE, pmtest_edu_save);
}

static int pmtest_edu_thaw(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_THAW, pmtest_edu_restore);
}

static int pmtest_edu_poweroff(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_POWEROFF, pmtest_edu_save);
}

static int pmtest_edu_restore_cb(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RESTORE, pmtest_edu_restore);
}

/*
 * The late/early and noirq callbacks: knobs and log only.  They run with
 * interrupts off on the CPU (noirq) or after the device's interrupts are
 * quiesced (late): the factorial poll of ->resume would sleep.
 */
static int pmtest_edu_suspend_late(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_SUSPEND_LATE, NULL);
}

static int pmtest_edu_suspend_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_SUSPEND_NOIRQ, NULL);
}

static int pmtest_edu_resume_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RESUME_NOIRQ, NULL);
}

static int pmtest_edu_resume_early(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RESUME_EARLY, NULL);
}

static int pmtest_edu_freeze_late(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_FREEZE_LATE, NULL);
}

static int pmtest_edu_freeze_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_FREEZE_NOIRQ, NULL);
}

static int pmtest_edu_thaw_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_THAW_NOIRQ, NULL);
}

static int pmtest_edu_thaw_early(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_THAW_EARLY, NULL);
}

static int pmtest_edu_poweroff_late(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_POWEROFF_LATE, NULL);
}

static int pmtest_edu_poweroff_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_POWEROFF_NOIRQ, NULL);
}

static int pmtest_edu_restore_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RESTORE_NOIRQ, NULL);
}

static int pmtest_edu_restore_early(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RESTORE_EARLY, NULL);
}

#define PMTEST_EDU_PM_OPS_6_1				\
	.prepare = pmtest_edu_prepare,			\
	.complete = pmtest_edu_complete,		\
	.suspend = pmtest_edu_suspend,			\
	.suspend_late = pmtest_edu_suspend_late,	\
	.suspend_noirq = pmtest_edu_suspend_noirq,	\
	.resume_noirq = pmtest_edu_resume_noirq,	\
	.resume_early = pmtest_edu_resume_early,	\
	.resume = pmtest_edu_resume,			\
	.freeze = pmtest_edu_freeze,			\
	.freeze_late = pmtest_edu_freeze_late,		\
	.freeze_noirq = pmtest_edu_freeze_noirq,	\
	.thaw_noirq = pmtest_edu_thaw_noirq,		\
	.thaw_early = pmtest_edu_thaw_early,		\
	.thaw = pmtest_edu_thaw,			\
	.poweroff = pmtest_edu_poweroff,		\
	.poweroff_late = pmtest_edu_poweroff_late,	\
	.poweroff_noirq = pmtest_edu_poweroff_noirq,	\
	.restore_noirq = pmtest_edu_restore_noirq,	\
	.restore_early = pmtest_edu_restore_early,	\
	.restore = pmtest_edu_restore_cb

/* Without ->quiesce/->recover: a patched PCI core falls back to freeze/thaw. */
static const struct dev_pm_ops pmtest_edu_pm_ops = {
	PMTEST_EDU_PM_OPS_6_1,
};

#ifdef PM_OPS_HAS_QUIESCE
static int pmtest_edu_quiesce(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_QUIESCE, pmtest_edu_save);
}

static int pmtest_edu_quiesce_late(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_QUIESCE_LATE, NULL);
}

static int pmtest_edu_quiesce_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_QUIESCE_NOIRQ, NULL);
}

static int pmtest_edu_recover_noirq(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RECOVER_NOIRQ, NULL);
}

static int pmtest_edu_recover_early(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RECOVER_EARLY, NULL);
}

static int pmtest_edu_recover(struct device *dev)
{
	return pmtest_edu_cb(dev, PMTEST_CB_RECOVER, pmtest_edu_restore);
}

static const struct dev_pm_ops pmtest_edu_quiesce_pm_ops = {
	PMTEST_EDU_PM_OPS_6_1,
	.quiesce = pmtest_edu_quiesce,
	.quiesce_late = pmtest_edu_quiesce_late,
	.quiesce_noirq = pmtest_edu_quiesce_noirq,
	.recover_noirq = pmtest_edu_recover_noirq,
	.recover_early = pmtest_edu_recover_early,
	.recover = pmtest_edu_recover,
};
#endif

/*
 * The legacy driver: pci_driver.suspend gets the pm_message_t of the
 * transition (PMSG_SUSPEND, _FREEZE, _QUIESCE, _HIBERNATE), .resume nothing;
 * the PCI core runs no driver code in the late and noirq phases for it.
 */
static int pmtest_edu_legacy_suspend(struct pci_dev *pdev, pm_message_t state)
{
	int ret;

	ret = pmtest_cb_begin(&pdev->dev, PMTEST_CB_SUSPEND, state.event);
	if (!ret)
		ret = pmtest_edu_save(&pdev->dev, PMTEST_CB_SUSPEND);
	pmtest_cb_end(&pdev->dev, PMTEST_CB_SUSPEND, state.event, ret);

	return ret;
}

static int pmtest_edu_legacy_resume(struct pci_dev *pdev)
{
	return pmtest_edu_cb(&pdev->dev, PMTEST_CB_RESUME, pmtest_edu_restore);
}

/* Map BAR 0, check the device and give it the state the driver keeps. */
static int pmtest_edu_setup(struct pci_dev *pdev, const char *name)
{
	struct pmtest_edu *edu;
	u32 devid, fact;
	int ret;

	edu = devm_kzalloc(&pdev->dev, sizeof(*edu), GFP_KERNEL);
	if (!edu)
		return -ENOMEM;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;

	ret = pcim_iomap_regions(pdev, BIT(0), name);
	if (ret)
		return ret;
	edu->regs = pcim_iomap_table(pdev)[0];

	devid = ioread32(edu->regs + EDU_REG_ID);
	if ((devid & 0xff) != EDU_ID_MAGIC) {
		dev_err(&pdev->dev, "not an edu device: id %#x\n", devid);
		return -ENODEV;
	}

	edu->live = get_random_u32();
	edu->fact_n = 1 + edu->live % EDU_FACT_MAX_N;
	iowrite32(edu->live, edu->regs + EDU_REG_LIVE);
	ret = pmtest_edu_fact_run(edu, edu->fact_n, &fact);
	if (ret || fact != pmtest_edu_factorial(edu->fact_n) ||
	    ~ioread32(edu->regs + EDU_REG_LIVE) != edu->live) {
		dev_err(&pdev->dev, "device does not answer: fact(%u) %u (%d)\n",
			edu->fact_n, fact, ret);
		return -EIO;
	}

	pci_set_drvdata(pdev, edu);

	dev_info(&pdev->dev, "%s: edu %#x: live %#x fact(%u) %u\n", name,
		 devid, edu->live, edu->fact_n, fact);

	return 0;
}

static struct pci_driver pmtest_edu_driver;

static int pmtest_edu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret;

	ret = pmtest_edu_setup(pdev, pmtest_edu_driver.name);
	if (ret)
		return ret;

	/* Its children are the PCI core's to add: no child knob. */
	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 pmtest_pm_ops_cbs(pmtest_edu_driver.driver.pm));
}

static int pmtest_edu_legacy_probe(struct pci_dev *pdev,
				   const struct pci_device_id *id)
{
	int ret;

	ret = pmtest_edu_setup(pdev, "pmtest_edu_legacy");
	if (ret)
		return ret;

	return pmtest_target_add(dev_name(&pdev->dev), &pdev->dev,
				 PMTEST_KNOBS_DEVICE,
				 PMTEST_CB_BIT(PMTEST_CB_SUSPEND) |
				 PMTEST_CB_BIT(PMTEST_CB_RESUME));
}

static void pmtest_edu_remove(struct pci_dev *pdev)
{
	pmtest_dev_del(&pdev->dev);
}

static const struct pci_device_id pmtest_edu_ids[] = {
	{ PCI_DEVICE(0x1234, 0x11e8) },
	{ }
};
MODULE_DEVICE_TABLE(pci, pmtest_edu_ids);

static struct pci_driver pmtest_edu_driver = {
	.name = "pmtest_edu_pm",
	.id_table = pmtest_edu_ids,
	.probe = pmtest_edu_probe,
	.remove = pmtest_edu_remove,
	.driver = {
		.pm = &pmtest_edu_pm_ops,
	},
};

static struct pci_driver pmtest_edu_legacy_driver = {
	.name = "pmtest_edu_legacy",
	.id_table = pmtest_edu_ids,
	.probe = pmtest_edu_legacy_probe,
	.remove = pmtest_edu_remove,
	.suspend = pmtest_edu_legacy_suspend,
	.resume = pmtest_edu_legacy_resume,
};

static int pmtest_edu_state_show(struct seq_file *m, void *v)
{
	seq_printf(m, "verified %d mismatches %d\n",
		   atomic_read(&pmtest_edu_verified),
		   atomic_read(&pmtest_edu_mismatches));

	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pmtest_edu_state);

/**
 * pmtest_edu_init - Register the edu drivers and create debugfs "edu_state".
 * @root: pmtest's debugfs directory.
 * @quiesce: Give the driver ->quiesce* and ->recover* (only if the kernel's
 *	     struct dev_pm_ops has them); otherwise the PCI core's fallback to
 *	     ->freeze and ->thaw is exercised.
 */
int pmtest_edu_init(struct dentry *root, bool quiesce)
{
#ifdef PM_OPS_HAS_QUIESCE
	if (quiesce)
		pmtest_edu_driver.driver.pm = &pmtest_edu_quiesce_pm_ops;
#endif

	int ret;

	debugfs_create_file("edu_state", 0444, root, NULL,
			    &pmtest_edu_state_fops);

	/* pmtest_edu_pm first: it binds the device at load. */
	ret = pci_register_driver(&pmtest_edu_driver);
	if (ret)
		return ret;

	ret = pci_register_driver(&pmtest_edu_legacy_driver);
	if (ret)
		pci_unregister_driver(&pmtest_edu_driver);

	return ret;
}

/**
 * pmtest_edu_exit - Unregister the edu drivers.
 */
void pmtest_edu_exit(void)
{
	pci_unregister_driver(&pmtest_edu_legacy_driver);
	pci_unregister_driver(&pmtest_edu_driver);
}
