/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmtest.h - Internal interfaces of the pmtest system-sleep test module.
 *
 * The module is split into files with one job each:
 *
 *   pmtest_main.c     module init/exit, module parameters, debugfs root
 *   pmtest_cb.c       callback names, the common callback path, PM events
 *   pmtest_log.c      bounded callback log, debugfs "log", trace event
 *   pmtest_knobs.c    fault/delay/child/panic knobs and the device registry
 *   pmtest_platform.c the pmtest_full, pmtest_compat and pmtest_legacy
 *                     platform drivers and their device trees
 *   pmtest_edu.c      PCI drivers for QEMU's edu device (dev_pm_ops and
 *                     legacy pci_driver.suspend/.resume)
 *   pmtest_acpi.c     ACPI-enumerated platform drivers (acpi_general_pm_domain),
 *                     one with DPM_FLAG_SMART_PREPARE/SMART_SUSPEND
 *   pmtest_syscore.c  syscore_ops, so image creation can fail after the
 *                     devices are frozen
 *   pmtest_domain.c   devices under a struct dev_pm_domain of pmtest's own
 *   pmtest_genpd.c    devices in a generic PM domain (pm_genpd_init())
 *   pmtest_flags.c    devices with DPM flags and runtime PM state
 *   pmtest_typeclass.c devices reached through type->pm and class->pm
 *   pmtest_layer.c    the PM ops of pmtest's own domain and device type
 *   pmtest_aux.c      a device on the auxiliary bus (aux=1)
 */
#ifndef _PMTEST_H
#define _PMTEST_H

#include <linux/bits.h>
#include <linux/device.h>
#include <linux/types.h>

struct platform_device;

struct dentry;

/* Longest device name kept in a log record or a knob, NUL included. */
#define PMTEST_NAME_LEN		32

/*
 * The return type of struct platform_driver's ->remove(): int in 6.1, void
 * once every driver had been converted (Kbuild defines
 * PMTEST_PLATFORM_REMOVE_VOID from <linux/platform_device.h>).  A remove
 * callback is declared "pmtest_remove_t" and ends with
 * "return PMTEST_REMOVED;".
 */
#ifdef PMTEST_PLATFORM_REMOVE_VOID
#define pmtest_remove_t		void
#define PMTEST_REMOVED
#else
#define pmtest_remove_t		int
#define PMTEST_REMOVED		0
#endif

/* "No PM event known": outside any dpm_* phase, or for prepare/complete. */
#define PMTEST_EVENT_NONE	(-1)

/**
 * enum pmtest_cb - Callbacks the log and the knobs know about.
 *
 * All dev_pm_ops system-sleep callbacks, including the ones the project's
 * patch series adds (quiesce*, recover*).  Legacy platform drivers log their
 * ->suspend() and ->resume() as PMTEST_CB_SUSPEND and PMTEST_CB_RESUME.
 * PMTEST_CB_SYSCORE_SUSPEND and PMTEST_CB_SYSCORE_RESUME are the syscore_ops
 * callbacks of pmtest_syscore.c.  PMTEST_CB_REGISTER is not a PM callback: it
 * marks the registration of a child device by the "child" knob and cannot be
 * named in a knob.  Neither can PMTEST_CB_RPM_SUSPENDED, the record a
 * DPM_FLAG_SMART_SUSPEND device (pmtest_acpi.c) leaves when it is still
 * runtime-suspended at the end of its suspend-side level 1 callback, which
 * is what the PM core's dev_pm_skip_suspend() looks at.
 */
enum pmtest_cb {
	PMTEST_CB_PREPARE,
	PMTEST_CB_COMPLETE,
	PMTEST_CB_SUSPEND,
	PMTEST_CB_SUSPEND_LATE,
	PMTEST_CB_SUSPEND_NOIRQ,
	PMTEST_CB_RESUME_NOIRQ,
	PMTEST_CB_RESUME_EARLY,
	PMTEST_CB_RESUME,
	PMTEST_CB_FREEZE,
	PMTEST_CB_FREEZE_LATE,
	PMTEST_CB_FREEZE_NOIRQ,
	PMTEST_CB_THAW_NOIRQ,
	PMTEST_CB_THAW_EARLY,
	PMTEST_CB_THAW,
	PMTEST_CB_POWEROFF,
	PMTEST_CB_POWEROFF_LATE,
	PMTEST_CB_POWEROFF_NOIRQ,
	PMTEST_CB_RESTORE_NOIRQ,
	PMTEST_CB_RESTORE_EARLY,
	PMTEST_CB_RESTORE,
	PMTEST_CB_QUIESCE,
	PMTEST_CB_QUIESCE_LATE,
	PMTEST_CB_QUIESCE_NOIRQ,
	PMTEST_CB_RECOVER,
	PMTEST_CB_RECOVER_EARLY,
	PMTEST_CB_RECOVER_NOIRQ,
	PMTEST_CB_SYSCORE_SUSPEND,
	PMTEST_CB_SYSCORE_RESUME,
	PMTEST_CB_REGISTER,
	PMTEST_CB_RPM_SUSPENDED,
	PMTEST_NR_CB,
};

/* A set of callbacks, one bit per enum pmtest_cb. */
#define PMTEST_CB_BIT(cb)	BIT_ULL(cb)
/* Every dev_pm_ops system-sleep callback (prepare ... recover_noirq). */
#define PMTEST_CBS_DEV_PM	(PMTEST_CB_BIT(PMTEST_CB_SYSCORE_SUSPEND) - 1)

/* Knobs a device may be named in, one bit per enum pmtest_knob_type. */
#define PMTEST_KNOBS_FAULT	BIT(0)
#define PMTEST_KNOBS_DELAY	BIT(1)
#define PMTEST_KNOBS_CHILD	BIT(2)
#define PMTEST_KNOBS_PANIC	BIT(3)
#define PMTEST_KNOBS_DEVICE	(PMTEST_KNOBS_FAULT | PMTEST_KNOBS_DELAY | \
				 PMTEST_KNOBS_PANIC)

/* pmtest_cb.c */
const char *pmtest_cb_name(enum pmtest_cb cb);
int pmtest_cb_parse(const char *name);
bool pmtest_cb_atomic(enum pmtest_cb cb);
const char *pmtest_event_name(int event);
int pmtest_event_current(enum pmtest_cb cb);
int pmtest_event_init(void);
void pmtest_event_exit(void);
int pmtest_knobs_apply(const char *name, struct device *dev,
		       enum pmtest_cb cb, int event);
int pmtest_cb_begin(struct device *dev, enum pmtest_cb cb, int event);
void pmtest_cb_end(struct device *dev, enum pmtest_cb cb, int event, int ret);
int pmtest_cb_run(struct device *dev, enum pmtest_cb cb);
void pmtest_cb_note_rpm(struct device *dev, enum pmtest_cb cb);
u64 pmtest_pm_ops_cbs(const struct dev_pm_ops *ops);

/* pmtest_log.c */
extern bool pmtest_log_console;
int pmtest_log_init(struct dentry *root);
void pmtest_log_exit(void);
void pmtest_log(const char *dev, enum pmtest_cb cb, int event, int ret);

/* pmtest_knobs.c */
int pmtest_knobs_init(struct dentry *root, const char *fault,
		      const char *delay, const char *child);
unsigned int pmtest_knob_delay(const char *name, enum pmtest_cb cb);
bool pmtest_knob_child(const char *name, enum pmtest_cb cb);
bool pmtest_knob_panic(const char *name, enum pmtest_cb cb);
int pmtest_knob_fault(const char *name, enum pmtest_cb cb);
int pmtest_target_add(const char *name, struct device *dev,
		      unsigned int knobs, u64 cbs);
int pmtest_dev_add(struct device *dev, bool can_parent);
void pmtest_target_del(const char *name);
void pmtest_dev_del(struct device *dev);

/* pmtest_platform.c */
extern const struct dev_pm_ops pmtest_full_pm_ops;
extern const struct dev_pm_ops pmtest_flags_pm_ops;
int pmtest_leaf_probe(struct platform_device *pdev);
pmtest_remove_t pmtest_platform_remove(struct platform_device *pdev);
int pmtest_platform_init(unsigned int depth, unsigned int fanout);
void pmtest_platform_exit(void);
void pmtest_platform_add_child(struct device *parent, enum pmtest_cb cb,
			       int event);

/* pmtest_edu.c */
int pmtest_edu_init(struct dentry *root, bool quiesce);
void pmtest_edu_exit(void);

/* pmtest_acpi.c */
#ifdef CONFIG_ACPI
int pmtest_acpi_init(void);
void pmtest_acpi_exit(void);
#else
static inline int pmtest_acpi_init(void) { return 0; }
static inline void pmtest_acpi_exit(void) { }
#endif

/* pmtest_domain.c */
int pmtest_domain_init(void);
void pmtest_domain_exit(void);

/* pmtest_flags.c */
int pmtest_flags_prepare(struct device *dev);
int pmtest_flags_init(void);
void pmtest_flags_exit(void);

/* pmtest_genpd.c */
int pmtest_genpd_init(void);
void pmtest_genpd_exit(void);

/* pmtest_layer.c */
extern const struct dev_pm_ops pmtest_layer_pm_ops;
extern const struct dev_pm_ops pmtest_unconverted_layer_pm_ops;
int pmtest_layer_add(struct device *dev, const char *suffix);
void pmtest_layer_del(struct device *dev);

/* pmtest_typeclass.c */
int pmtest_typeclass_init(bool unconverted);
void pmtest_typeclass_exit(void);

/* pmtest_aux.c */
int pmtest_aux_init(bool add);
void pmtest_aux_exit(void);

/* pmtest_syscore.c */
int pmtest_syscore_init(void);
void pmtest_syscore_exit(void);

#endif /* _PMTEST_H */
