"""lab/s2idle.py: who ended a suspend-to-idle cycle, from the guest's log
and trace. The log lines are 6.1's pm_pr_dbg() output as the guest printed
them in the 2026-12-06 race (cycle 11 of a fresh machine's first run) and
in a passing cycle."""

from lab import s2idle

# The race: the press reached the guest 3 ms after the loop began, before
# its first s2idle_enter(); the loop's first wake check ended it.
RACE = """\
[    5.000102] PM: noirq suspend of devices complete after 0.871 msecs
[    5.000728] PM: suspend-to-idle
[    5.003810] PM: Triggering wakeup from IRQ 9
[    5.003822] ACPI: PM: ACPI fixed event wakeup
[    5.003901] PM: resume from suspend-to-idle
"""

# A passing cycle: the same lines, the press ~40 ms after the loop began
# (the trace has machine_suspend[1] begin/end in between).
PASSED = """\
[   12.204711] PM: suspend-to-idle
[   12.245020] PM: Triggering wakeup from IRQ 9
[   12.245033] ACPI: PM: ACPI fixed event wakeup
[   12.245100] PM: resume from suspend-to-idle
"""

# The press during the noirq phase: the pending wakeup aborts the suspend
# before the loop (the write to /sys/power/state fails with EBUSY).
NOIRQ = """\
[    7.100001] PM: late suspend of devices complete after 1.002 msecs
[    7.600210] PM: Triggering wakeup from IRQ 9
[    9.100402] PM: Wakeup pending, aborting suspend
[    9.100410] PM: noirq suspend of devices failed
"""

BUTTON = {"LNXPWRBN:00": 1}


def test_the_race_is_the_labs_press():
    found = s2idle.evidence(RACE, 0, BUTTON)
    assert found["loop_started"] == 5.000728
    assert found["wake_after_loop_s"] == 0.003094
    reason = s2idle.pressed_before_idle(found, suspend_failed=False)
    assert reason.startswith("power button pressed before the guest's first suspend-to-idle idle: ")
    assert "3.1 ms" in reason


def test_a_guest_that_idled_is_never_the_labs_press():
    found = s2idle.evidence(PASSED, 1, BUTTON)
    assert s2idle.woke_by_button(found)
    assert s2idle.pressed_before_idle(found, suspend_failed=False) is None


def test_a_press_in_the_noirq_phase_is_the_labs():
    found = s2idle.evidence(NOIRQ, 0, BUTTON)
    assert found["loop_started"] is None and found["wake"] == "PM: Wakeup pending, aborting suspend"
    assert "aborted the suspend" in s2idle.pressed_before_idle(found, suspend_failed=True)


def test_an_abort_the_guest_did_not_count_as_a_press_stays_the_kernels():
    """A wakeup pending for another reason (no power button event): the
    kernel's own abort, not the lab's."""
    found = s2idle.evidence(NOIRQ, 0, {"alarmtimer.0.auto": 1})
    assert s2idle.pressed_before_idle(found, suspend_failed=True) is None


def test_a_loop_that_ran_long_without_idling_stays_the_kernels():
    """The press woke it, but 2 s after the loop began: a loop that never
    idled while the lab waited is a kernel bug, not a race."""
    slow = RACE.replace("5.003810", "7.003810").replace("5.003822", "7.003822").replace("5.003901", "7.003901")
    found = s2idle.evidence(slow, 0, BUTTON)
    assert s2idle.pressed_before_idle(found, suspend_failed=False) is None


def test_another_wake_is_not_the_button():
    other = PASSED.replace("ACPI: PM: ACPI fixed event wakeup", "ACPI: PM: Wakeup unrelated to ACPI SCI")
    found = s2idle.evidence(other, 1, BUTTON)
    assert not s2idle.woke_by_button(found)
    assert s2idle.pressed_before_idle(s2idle.evidence(other, 0, BUTTON), suspend_failed=False) is None


def test_without_a_log_the_button_source_decides():
    assert s2idle.woke_by_button(s2idle.evidence(None, 1, BUTTON))
    assert not s2idle.woke_by_button(s2idle.evidence(None, 1, {}))
    assert not s2idle.woke_by_button(s2idle.evidence("", 1, {"00:03": 1}))
