"""The seed's device PM rules as data (struct pm_ops, 2008 RFC, as carried
into 6.1's struct dev_pm_ops by kernel/patches/).  lab/oracle/judge.py walks
observed callbacks through these tables; nothing here knows about a test.

Levels: 0 is ->prepare/->complete, 1 the main callback, 2 late/early,
3 noirq.  Suspend-side callbacks of one transition go up the levels,
resume-side ones come back down.
"""

from typing import Any, Optional

# The dev_pm_ops member the PM core runs, per PM event and level 1..3.
CALLBACKS = {
    "suspend": ("suspend", "suspend_late", "suspend_noirq"),
    "freeze": ("freeze", "freeze_late", "freeze_noirq"),
    "quiesce": ("quiesce", "quiesce_late", "quiesce_noirq"),
    "hibernate": ("poweroff", "poweroff_late", "poweroff_noirq"),
    "resume": ("resume", "resume_early", "resume_noirq"),
    "thaw": ("thaw", "thaw_early", "thaw_noirq"),
    "restore": ("restore", "restore_early", "restore_noirq"),
    "recover": ("recover", "recover_early", "recover_noirq"),
}
SUSPEND_EVENTS = ("suspend", "freeze", "quiesce", "hibernate")
RESUME_EVENTS = ("resume", "thaw", "restore", "recover")

# callback name -> (event, level) for every leveled callback
CALLBACK_LEVEL = {cb: (event, level + 1)
                  for event, cbs in CALLBACKS.items() for level, cb in enumerate(cbs)}

# The event that undoes a suspend-side event (seed pm.h, PM_EVENT_* comment):
# after a transition that went through, and after one that failed.  A freeze
# that went through is undone by thaw once the image is written, or by restore
# in the image kernel after the image came back.
UNDO_AFTER_SUCCESS: dict[str, set[str]] = {"suspend": {"resume"}, "freeze": {"thaw", "restore"},
                      "quiesce": set(), "hibernate": {"restore"}}
UNDO_AFTER_FAILURE: dict[str, set[str]] = {"suspend": {"resume"}, "freeze": {"recover"},
                      "quiesce": {"recover"}, "hibernate": {"restore"}}

# Transitions after which the kernel legitimately stops (jumps to the image, or
# powers off) with devices still suspended.
MAY_END_SUSPENDED = {"quiesce", "hibernate"}

# A driver without the callback gets this one instead (patch 1's fallback).
FALLBACK = {
    "quiesce": "freeze", "quiesce_late": "freeze_late", "quiesce_noirq": "freeze_noirq",
    "recover": "thaw", "recover_early": "thaw_early", "recover_noirq": "thaw_noirq",
}

# A device that gains a child during ->prepare is completed and prepared
# again, at most this many times (patch 0006, DPM_PREPARE_CHILD_RETRIES);
# past it the core takes it as prepared, with a warning.
PREPARE_CHILD_RETRIES = 3

# ->prepare returning -EAGAIN is retried at once (main.c); it is no failure.
EAGAIN = -11

SYSTEM_SLEEP_61 = frozenset(
    ("prepare", "complete")
    + CALLBACKS["suspend"] + CALLBACKS["resume"] + CALLBACKS["freeze"]
    + CALLBACKS["thaw"] + CALLBACKS["hibernate"] + CALLBACKS["restore"])
SEED_ADDITIONS = frozenset(CALLBACKS["quiesce"] + CALLBACKS["recover"])

# Providers: what stands between the PM core and a driver's dev_pm_ops (a
# bus, a PM domain, a device type or class).  The core runs the provider's
# callback for the phase, or the driver's directly where the provider has
# none; per core callback, the rule says which driver callback the device
# must end up in.  The seed's rule for every provider: the event is passed on
# unchanged (PASS_ON), the driver's fallback (FALLBACK) applying as for the
# bus.  An entry naming another callback is a provider that deliberately
# maps events (none in the seed; 6.1's auxiliary bus); the lab's evidence
# that acpi_general_pm_domain gives ->freeze for quiesce is a violation of
# this table, not an entry in it.
LEVELED = frozenset(CALLBACK_LEVEL)
PASS_ON = {callback: callback for callback in LEVELED}
PROVIDERS = {
    "pm_core": PASS_ON,                    # the core calling a provider's own ops
    "bus": PASS_ON,                        # platform_bus_type, pci_bus_type
    "acpi_general_pm_domain": PASS_ON,     # drivers/acpi/device_pm.c
    "pmtest_pm_domain": PASS_ON,           # kernel/modules/pmtest/pmtest_domain.c
    "pmtest_type": PASS_ON,                # pmtest_typeclass.c, a device_type's ->pm
    # pmtest_typeclass.c's stand-in for a subsystem the series has not
    # converted (ISHTP, vmbus, xenbus): a device_type whose ->pm has no
    # quiesce or recover callbacks, so the core runs its freeze and thaw
    # ones, which run the driver's (pmtest.unconverted=1 adds one device)
    "pmtest_unconverted_type": {**PASS_ON, **{new: old for new, old in FALLBACK.items() if new in SEED_ADDITIONS}},
    # drivers/base/power/domain.c: ->prepare, the *_noirq callbacks and
    # ->complete through pm_generic_*, the rest left to the driver
    "genpd": PASS_ON,
    # drivers/base/auxiliary.c: a bus that maps events by design (6.1's
    # SET_SYSTEM_SLEEP_PM_OPS of pm_generic_suspend/resume: the driver's
    # ->suspend() for freeze and poweroff, ->resume() for thaw and restore),
    # ->quiesce() and ->recover() passed on by the series; no late or noirq
    # callbacks, so the core runs the driver's own there
    "auxiliary_bus": {**PASS_ON, "freeze": "suspend", "poweroff": "suspend",
                      "thaw": "resume", "restore": "resume"},
}

# The pmtest drivers (kernel/modules/pmtest/README.md): what each implements
# and which provider the core reaches it through.  "legacy" drivers have
# platform_driver.suspend/.resume and log the event of the pm_message_t they
# receive.
DRIVERS: dict[Optional[str], dict[str, Any]] = {  # a lookup by an unknown (None) driver finds nothing
    "pmtest_full": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "bus"},
    "pmtest_compat": {"callbacks": SYSTEM_SLEEP_61, "provider": "bus"},
    # QEMU's edu PCI device (pmtest_edu.c): bound to pmtest_edu_pm
    # (dev_pm_ops, every level) or to pmtest_edu_legacy (pci_driver.suspend/
    # .resume, which the PCI core calls at level 1 only); the trace names the
    # driver bound (observe.bound_drivers()).  pmtest_edu is the level 1
    # driver of earlier pmtest versions, for runs recorded with it.
    "pmtest_edu_pm": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "bus"},
    "pmtest_edu_legacy": {"legacy": True},
    "pmtest_edu": {"callbacks": frozenset((
        "prepare", "complete", "suspend", "resume", "freeze", "thaw",
        "poweroff", "restore", "quiesce", "recover")), "provider": "bus"},
    "pmtest_legacy": {"legacy": True},
    # pmtest_full's callbacks, every device async (device_enable_async_suspend)
    "pmtest_async": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "bus"},
    "pmtest_acpi": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS,
                    "provider": "acpi_general_pm_domain"},
    "pmtest_syscore": {"syscore": True},
    # a PM domain of pmtest's own, logging its callbacks as "<device>/pd", and
    # the driver of the devices in it
    "pmtest_pm_domain": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "pm_core"},
    "pmtest_domain": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS,
                      "provider": "pmtest_pm_domain"},
    # devices in a genpd domain (pmtest_genpd.c)
    "pmtest_genpd": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "genpd"},
    # type->pm, logging as "<device>/type", and the driver behind it; a
    # class->pm of devices without a driver (pmtest_typeclass.c)
    "pmtest_type_ops": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "pm_core"},
    "pmtest_typed": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "pmtest_type"},
    "pmtest_class": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "pm_core"},
    # pmtest.aux.0 (pmtest_aux.c, aux=1): pmtest_full's callbacks behind the
    # auxiliary bus
    "pmtest_aux": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "auxiliary_bus"},
    # the unconverted type's ops (no quiesce/recover: the core falls back)
    # and the driver behind them (pmtest_full's callbacks, skipped)
    "pmtest_unconverted_type_ops": {"callbacks": SYSTEM_SLEEP_61, "provider": "pm_core"},
    "pmtest_unconverted": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "pmtest_unconverted_type"},
    # DPM flags (pmtest_flags.c).  "may_skip": per resume-side event, the
    # levels the core may leave out for a DPM_FLAG_MAY_SKIP_RESUME device
    # that nobody needs resumed (main.c dev_pm_skip_resume(): only after a
    # suspend; a thaw, restore or recover must resume what was frozen).
    # "direct_complete": the events in which a runtime-suspended device whose
    # ->prepare returned a positive number gets nothing but ->complete.
    "pmtest_skip_resume": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "bus",
                           "may_skip": {"resume": (2, 3)}},
    "pmtest_direct": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "bus",
                      "direct_complete": ("suspend",)},
    "pmtest_no_direct": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS, "provider": "bus"},
    # ACPI-enumerated devices with DPM_FLAG_SMART_PREPARE | SMART_SUSPEND
    # (pmtest_acpi.c, PMTS0002 and PMTS0004), and with MAY_SKIP_RESUME too
    # (PMTS0003): see SMART_SUSPEND_SKIPS below.
    "pmtest_acpi_smart": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS,
                          "provider": "acpi_general_pm_domain", "smart_suspend": True},
    "pmtest_acpi_smart_skip": {"callbacks": SYSTEM_SLEEP_61 | SEED_ADDITIONS,
                               "provider": "acpi_general_pm_domain", "smart_suspend": True,
                               "may_skip_resume": True},
}

# DPM_FLAG_SMART_SUSPEND (drivers/base/power/main.c): dev_pm_skip_suspend()
# is the flag and a runtime PM status of "suspended".  The core checks it
# before a driver's late and noirq callbacks, and the providers that have
# their own (acpi_subsys_suspend_late/_noirq, acpi_subsys_poweroff_late/
# _noirq, pci_pm_*) return at once on it, for every suspend-side event.  The
# status is the one the device has after its level 1 callback (the provider
# may runtime-resume it there; runtime PM is disabled before the late phase
# and the core holds a usage count since ->prepare): pmtest logs it as an
# RPM_SUSPENDED record after that callback.  Levels the core skipped still
# count as suspended (is_late_suspended, is_noirq_suspended).
RPM_SUSPENDED = "rpm_suspended"
SMART_SUSPEND_SKIPS = (2, 3)
# The resume side (dev_pm_skip_resume()): per undo event, which levels the
# core skips for a DPM_FLAG_SMART_SUSPEND device: RESTORE none; THAW and
# RECOVER the levels the suspend side skipped (dev_pm_skip_suspend() again:
# the status is unchanged until runtime PM is enabled in the early phase);
# RESUME levels 2 and 3 iff power.must_resume stayed false, which for a
# device nobody uses, without wakeup and children, is DPM_FLAG_MAY_SKIP_RESUME
# (otherwise a level skipped on the suspend side is resumed all the same).
SMART_RESUME_SKIPS = {"restore": "none", "thaw": "as-suspend", "recover": "as-suspend",
                      "resume": "if-may-skip-resume"}
# Providers that runtime-resume every device in their level 1 callback of
# these events, SMART_SUSPEND or not (acpi_subsys_freeze(),
# acpi_subsys_quiesce(): the image must hold active devices), so no device
# of theirs may be left runtime-suspended there.
RUNTIME_RESUMES: dict[Optional[str], frozenset[str]] = {"acpi_general_pm_domain": frozenset(("freeze", "quiesce"))}

# Drivers whose own dev_pm_ops has a callback at every level, so the trace
# (which shows only callbacks that exist) shows each of their levels: the
# oracle holds their trace records to the level rules as strictly as their
# pmtest log. The trace names the core's callback, not the driver's.
EVERY_LEVEL_IN_TRACE = frozenset(("pmtest_full", "pmtest_compat"))

# syscore_ops: not devices.  A failing syscore_suspend() fails the transition
# after every device was suspended (hibernation: image creation fails), so
# the devices must be undone as after any failure.
SYSCORE_SUSPEND = "syscore_suspend"
SYSCORE_RESUME = "syscore_resume"

# Cross-device order within one phase (the parent/child rules): True means a
# parent's callback runs before its children's.
PARENT_FIRST = {"prepare": True, "suspend": False, "resume": True, "complete": False}


def driver_callback(driver: Optional[str], callback: str) -> Optional[str]:
    """The callback a driver must get when the core runs `callback`: what its
    provider passes on (PROVIDERS), or that one's fallback, or None when the
    driver has neither."""
    implemented = DRIVERS[driver]["callbacks"]
    given = PROVIDERS[DRIVERS[driver]["provider"]].get(callback, callback)
    if given in implemented:
        return given
    fallback = FALLBACK.get(given)
    if fallback in implemented:
        return fallback
    return None


def driver_levels(driver: Optional[str], event: str) -> list[int]:
    """The levels (1..3) at which `driver` has a callback for `event`."""
    return [level for level, callback in enumerate(CALLBACKS[event], start=1)
            if driver_callback(driver, callback)]


def smart_resume_levels(driver: Optional[str], undo: str, suspended: list[int], smart_skipped: bool) -> list[int]:
    """The resume-side levels (highest first) the core runs for a
    DPM_FLAG_SMART_SUSPEND device of `driver` that reached the suspend
    levels `suspended` (callbacks that ran) and, if `smart_skipped`, had
    SMART_SUSPEND_SKIPS skipped, when `undo` resumes it."""
    entry = DRIVERS[driver]
    levels = set(suspended) | (set(SMART_SUSPEND_SKIPS) if smart_skipped else set())
    rule = SMART_RESUME_SKIPS.get(undo, "none")
    if (rule == "as-suspend" and smart_skipped) or (
            rule == "if-may-skip-resume" and entry.get("may_skip_resume")):
        levels -= set(SMART_SUSPEND_SKIPS)
    return sorted(levels, reverse=True)


# The messages a legacy driver's ->suspend() may get in a transition: the
# transition's event, and for a quiesce also PMSG_FREEZE.  The seed gave
# legacy drivers PMSG_QUIESCE (the v2 series did); v3 keeps 6.1's PMSG_FREEZE
# for platform, PCI and PNP legacy drivers, because drivers that test the
# event (i810fb, sl811-hcd, isp1362-hcd, u132-hcd) misbehave given
# PMSG_QUIESCE.  Which one a kernel sends is asserted where it is known:
# pytest/test_quiesce_layers.py (the live boot kernel) and
# kernel/audit-legacy-pm.
LEGACY_MESSAGES: dict[Optional[str], tuple[str, ...]] = {"quiesce": ("quiesce", "freeze")}


def legacy_messages(event: Optional[str]) -> tuple[Optional[str], ...]:
    """The messages a legacy ->suspend() may be given in an `event` transition."""
    return LEGACY_MESSAGES.get(event, (event,))


def is_legacy(driver: Optional[str]) -> bool:
    """A driver with legacy .suspend/.resume (the pm_message_t)."""
    return bool(DRIVERS.get(driver, {}).get("legacy"))


def prepare_failed(ret: int) -> bool:
    """->prepare failed: a negative return but -EAGAIN (retried).  A positive
    one asks for direct_complete."""
    return ret < 0 and ret != EAGAIN


def side_of(callback: str, event: str) -> tuple[Optional[str], int, str]:
    """("prepare"|"complete"|"suspend"|"resume", level, event) of a callback
    name; a legacy "suspend"/"resume" takes the event it was given; (None, 0,
    event) for a callback of no side (register, syscore, rpm_suspended)."""
    if callback == "prepare":
        return "prepare", 0, event
    if callback == "complete":
        return "complete", 0, event
    if callback in CALLBACK_LEVEL:
        cb_event, level = CALLBACK_LEVEL[callback]
        side = "suspend" if cb_event in SUSPEND_EVENTS else "resume"
        return side, level, cb_event
    return None, 0, event
