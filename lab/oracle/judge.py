"""Judge observed device callbacks against the rules in rules.py.

    violations = judge(calls, parents)

`calls` is one kernel instance's callbacks in the order they ran (see
observe.py); `parents` maps a device to its parent.  The calls are cut into
transitions (prepare ... complete); inside each, every device is walked
through a small state machine (levels up on the suspend side, mirrored back
down on the resume side, ->complete iff ->prepare succeeded), the drivers we
know are checked for the callback the rules say they get (fallbacks, legacy
messages), and parents and children are checked for their order in every
phase: the order of their starts, and, with the trace's times, that the one
the core waits for had returned when the other started (async suspend makes
the starts alone look right when a parent did not wait).  The first
violation names the rule, the device and the calls around it.
"""

from dataclasses import dataclass, field
from typing import Any, Optional

from . import rules
from .observe import Call, device_name

Parents = dict[str, str]  # device -> its parent's name


@dataclass
class Violation:
    rule: str
    device: str
    message: str
    call: Optional[Call] = None
    context: list[Call] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.rule}: {self.device}: {self.message}"]
        lines += [f"  {'>' if c is self.call else ' '} {c}" for c in self.context]
        return "\n".join(lines)


def _context(calls: list[Call], call: Optional[Call], around: int = 3) -> list[Call]:
    if call is None:
        return []
    return calls[max(0, call.index - around):call.index + around + 1]


def _is_suspend_side(call: Call) -> bool:
    side, level, _ = rules.side_of(call.callback, call.event)
    return side == "suspend" and level >= 1


def transitions(calls: list[Call]) -> list[list[Call]]:
    """Cut calls into transitions.  A transition starts with a suspend-side
    call (usually ->prepare); once it has had a ->complete, the next
    prepare or suspend-side call after its suspend phase starts the next one.
    A ->complete during the prepare phase (a retried ->prepare) does not end
    a transition."""
    groups: list[list[Call]] = []
    current: list[Call] = []
    completed = suspended = prepare_failed = False
    for call in calls:
        starts = call.callback == "prepare" or _is_suspend_side(call) or (
            rules.is_legacy(call.driver) and call.callback == "suspend")
        if current and starts and completed:
            groups.append(current)
            current, completed, suspended, prepare_failed = [], False, False, False
        current.append(call)
        if call.callback == "prepare" and rules.prepare_failed(call.ret):
            prepare_failed = True
        # Before any device is suspended, a ->complete is a retried
        # ->prepare's, unless a ->prepare failed and the transition ends.
        if call.callback == "complete" and (suspended or prepare_failed):
            completed = True
        if _is_suspend_side(call) or call.callback == "resume" or (
                rules.is_legacy(call.driver) and call.callback in ("suspend", "resume")):
            suspended = True
    if current:
        groups.append(current)
    return groups


def _level_of(call: Call) -> tuple[Optional[str], int]:
    """(side, level) for a call, legacy suspend/resume being level 1."""
    if rules.is_legacy(call.driver) and call.callback in ("suspend", "resume"):
        return call.callback, 1
    side, level, _ = rules.side_of(call.callback, call.event)
    return side, level


class _Transition:
    def __init__(self, calls: list[Call], all_calls: list[Call], last_in_kernel: bool) -> None:
        self.calls = [c for c in calls if c.callback != "register"]
        self.registers = [c for c in calls if c.callback == "register"]
        self.all_calls = all_calls
        self.last_in_kernel = last_in_kernel
        self.violations: list[Violation] = []
        self.depth = 0  # set by judge()
        first = next((c for c in self.calls if c.callback == "prepare" or _is_suspend_side(c)), None)
        self.event = first.event if first else None
        self.failed = any(
            rules.prepare_failed(c.ret) if c.callback == "prepare" else
            (_level_of(c)[0] == "suspend" or c.callback == rules.SYSCORE_SUSPEND) and c.ret != 0
            for c in self.calls)

    def flag(self, rule: str, call: Optional[Call], message: str) -> None:
        self.violations.append(Violation(rule, call.device if call else "-", message, call,
                                         _context(self.all_calls, call)))

    def judge(self, parents: Parents) -> list[Violation]:
        if self.event is None:
            self._resume_only()
            return self.violations
        if self.event not in rules.SUSPEND_EVENTS:
            return self.violations
        undo = (rules.UNDO_AFTER_FAILURE if self.failed else rules.UNDO_AFTER_SUCCESS)[self.event]
        self._events(undo)
        by_device: dict[str, list[Call]] = {}  # in order of first call; one pass (a trace has ~700 devices)
        for call in self.calls:
            by_device.setdefault(call.device, []).append(call)
        registered_during = self._registered_during()
        # how deep the transition went (pm_test stops it early): the deepest
        # suspend level any device reached
        self.depth = max((_level_of(c)[1] for c in self.calls
                          if _level_of(c)[0] == "suspend" and c.ret == 0), default=0)
        for calls in by_device.values():
            if any("outside" in call.tags for call in calls):
                continue  # another source's failure: it only says the transition failed
            self._device(calls, registered_during)
        self._order(parents)
        return self.violations

    def _resume_only(self) -> None:
        """Resume-side callbacks with no ->prepare and no suspend-side
        callback before them in this kernel: they undo nothing the record
        shows (a lost suspend side, or a resume the core should not run)."""
        undo = next((c for c in self.calls if _level_of(c)[0] in ("resume", "complete")), None)
        if undo is not None:
            self.flag("resume-only", undo, f"{undo.callback} ({undo.event}) in a transition with "
                      f"no ->prepare or suspend-side callback: it undoes nothing")

    def _registered_during(self) -> dict[int, str]:
        """{parent callback call index: child} for `register` records: the
        child was registered inside the callback recorded right after it."""
        out: dict[int, str] = {}
        for register in self.registers:
            later = [c for c in self.calls if c.index > register.index]
            if later:
                out[later[0].index] = register.device
        return out

    def _events(self, undo: set[str]) -> None:
        for call in self.calls:
            side, level = _level_of(call)
            legacy = rules.is_legacy(call.driver) and call.callback == "suspend"
            expected = rules.legacy_messages(self.event) if legacy else (self.event,)
            if side in ("prepare", "suspend") and call.event not in expected:
                what = "message" if legacy else "event"
                self.flag("event", call, f"{call.callback} with {what} {call.event} in a "
                          f"{self.event} transition")
            elif side == "resume" and call.event not in undo:
                self.flag("undo", call, f"{call.callback} ({call.event}) undoes a "
                          f"{'failed' if self.failed else 'successful'} {self.event} "
                          f"transition; the rules allow {sorted(undo) or 'nothing'}")

    def _expected_callback(self, call: Call) -> None:
        """Check a known driver got the callback the rules give it (the
        pmtest log names the driver's callback; the trace, the core's)."""
        if call.source != "pmtest" or "callbacks" not in rules.DRIVERS.get(call.driver, {}):
            return  # the trace, not ours, legacy, or syscore_ops
        side, level = _level_of(call)
        if side in ("suspend", "resume") and call.event in rules.CALLBACKS and level:
            core = rules.CALLBACKS[call.event][level - 1]
            wanted = rules.driver_callback(call.driver, core)
            if wanted != call.callback:
                self.flag("callback", call, f"{call.driver} ran {call.callback} where the core "
                          f"ran {core}: the rules give it {wanted}")

    def _child_not_reprepared(self, call: Call, child: str) -> None:
        self.flag("child-prepare", call, f"child {child} was registered during ->prepare, "
                  f"but the device was not completed and prepared again")

    def _device(self, calls: list[Call], registered_during: dict[int, str]) -> None:
        prepared = completed = may_prepare_again = False
        retry_child = None  # registered during this device's last ->prepare
        reprepares = 0      # ->complete + ->prepare for a child, bounded
        reached: list[int] = []
        resumed: list[int] = []
        failed_at: Optional[int] = None
        suspend_started = False
        legacy = rules.is_legacy(calls[0].driver)
        # Every level of the device is in the record: its pmtest log, or the
        # trace of a driver with a callback at every level.
        strict = calls[0].source == "pmtest" or calls[0].driver in rules.EVERY_LEVEL_IN_TRACE
        driver = rules.DRIVERS.get(calls[0].driver, {})
        direct_complete = False  # positive ->prepare, and the driver's row takes it
        smart_skipped = False    # DPM_FLAG_SMART_SUSPEND and still runtime-suspended
        for call in calls:
            self._expected_callback(call)
            side, level = _level_of(call)
            if call.callback == rules.RPM_SUSPENDED:
                smart_skipped = self._rpm_suspended(call, driver)
                continue
            if side == "prepare":
                if prepared:
                    self.flag("prepare", call, "prepared again without ->complete")
                elif completed and not may_prepare_again:
                    self.flag("prepare", call, "prepared again in the same transition")
                elif reached or resumed:
                    self.flag("prepare", call, "->prepare after suspend callbacks")
                may_prepare_again = False
                if call.ret >= 0:
                    prepared, completed = True, False
                    retry_child = registered_during.get(call.index)
                    direct_complete = call.ret > 0 and self.event in driver.get("direct_complete", ())
                elif call.ret != rules.EAGAIN:
                    failed_at = 0
            elif side == "complete":
                if not prepared:
                    self.flag("complete", call, "->complete without a successful ->prepare")
                    continue
                prepared, completed = False, True
                if ("retry" in call.tags or retry_child) and not suspend_started:
                    call.tags.add("retry")
                    retry_child, may_prepare_again = None, True
                    reprepares += 1
                    if reprepares > rules.PREPARE_CHILD_RETRIES:
                        self.flag("prepare", call, f"completed for a re-prepare {reprepares} "
                                  f"times; the bound is {rules.PREPARE_CHILD_RETRIES}")
                    continue
                if driver.get("smart_suspend") and strict:
                    self._smart_resume(call, reached, resumed, smart_skipped)
                elif strict and not self._mirrors(driver, reached, resumed):
                    self.flag("mirror", call, f"resume levels {resumed} do not mirror the "
                              f"suspend levels {reached} before ->complete")
                self._all_levels(call, driver, reached, direct_complete, smart_skipped)
            elif side in ("suspend", "resume") and direct_complete:
                self.flag("direct-complete", call, f"{call.callback} after a ->prepare that "
                          f"returned {1} for a runtime-suspended device: the core completes it "
                          f"directly in a {self.event} transition")
            elif side == "suspend":
                suspend_started = True
                if retry_child and reprepares < rules.PREPARE_CHILD_RETRIES:
                    self._child_not_reprepared(call, retry_child)
                retry_child = None  # past the bound: taken as prepared
                if not prepared and not legacy and strict:
                    self.flag("prepare", call, f"{call.callback} without a successful ->prepare")
                if smart_skipped and level in rules.SMART_SUSPEND_SKIPS:
                    self.flag("smart-suspend", call, f"{call.callback} ran for a DPM_FLAG_SMART_"
                              f"SUSPEND device left runtime-suspended by its level 1 callback: "
                              f"the core skips its late and noirq callbacks")
                if failed_at is not None:
                    self.flag("after-failure", call, f"{call.callback} after a failed callback")
                elif reached and level <= reached[-1]:
                    self.flag("level", call, f"{call.callback} after level {reached[-1]}")
                elif resumed:
                    self.flag("level", call, f"{call.callback} after resume callbacks")
                elif (call.driver in ("pmtest_full", "pmtest_compat")
                      and level != (reached[-1] + 1 if reached else 1)):
                    self.flag("level", call, f"{call.callback} skips a level after {reached}")
                if call.ret == 0:
                    reached.append(level)
                else:
                    failed_at = level
            elif side == "resume" and not strict:
                # The trace shows only callbacks that exist, and drivers may
                # resume in a phase they did not suspend in (i8042 has
                # ->resume_noirq alone): only a failed level is off limits.
                if failed_at is not None and level >= failed_at:
                    self.flag("resume", call, f"{call.callback} after its own level "
                              f"{failed_at} callback failed")
                elif resumed and level >= resumed[-1]:
                    self.flag("level", call, f"{call.callback} after resume level {resumed[-1]}")
                resumed.append(level)
            elif side == "resume":
                if level not in reached and not (smart_skipped
                                                 and level in rules.SMART_SUSPEND_SKIPS):
                    self.flag("resume", call, f"{call.callback} for a level the device did not "
                              f"suspend successfully (suspended: {reached})")
                elif resumed and level >= resumed[-1]:
                    self.flag("level", call, f"{call.callback} after resume level {resumed[-1]}")
                resumed.append(level)
        if retry_child and reprepares < rules.PREPARE_CHILD_RETRIES:
            self._child_not_reprepared(calls[-1], retry_child)
        if prepared and not (self.last_in_kernel and self.event in rules.MAY_END_SUSPENDED):
            self.flag("complete", calls[-1], f"no ->complete after ->prepare in a {self.event} "
                      f"transition")
        if legacy and reached and resumed != list(reversed(reached)) and not (
                self.last_in_kernel and self.event in rules.MAY_END_SUSPENDED):
            self.flag("mirror", calls[-1], f"legacy resume {resumed} does not mirror {reached}")

    def _rpm_suspended(self, call: Call, driver: dict[str, Any]) -> bool:
        """A DPM_FLAG_SMART_SUSPEND device is still runtime-suspended after
        its level 1 callback: the late and noirq levels are skipped, unless
        its provider runtime-resumes every device in this event (then the
        record itself breaks the rule).  Returns whether they are skipped."""
        if not driver.get("smart_suspend"):
            return False
        if self.event in rules.RUNTIME_RESUMES.get(driver.get("provider"), ()):
            self.flag("smart-suspend", call, f"runtime-suspended after its {self.event} "
                      f"callback, but {driver['provider']} runtime-resumes every device "
                      f"for {self.event}")
            return False
        return True

    def _smart_resume(self, call: Call, reached: list[int], resumed: list[int], smart_skipped: bool) -> None:
        """The resume levels of a DPM_FLAG_SMART_SUSPEND device, as
        dev_pm_skip_resume() has the core run them (rules.SMART_RESUME_SKIPS).
        A transition that failed may have stopped before the phases of the
        skipped levels reached the device: either is accepted then."""
        undo = next((c.event for c in self.calls if _level_of(c)[0] == "resume"), None)
        if undo is None:
            return
        wanted = [rules.smart_resume_levels(call.driver, undo, reached, smart_skipped)]
        if self.failed and smart_skipped:
            wanted.append(rules.smart_resume_levels(call.driver, undo, reached, False))
        if resumed not in wanted:
            self.flag("smart-resume", call, f"resume levels {resumed} after a {undo} of a "
                      f"DPM_FLAG_SMART_SUSPEND device that suspended at {reached}"
                      f"{' and skipped ' + str(list(rules.SMART_SUSPEND_SKIPS)) if smart_skipped else ''}"
                      f": the core runs {wanted[0]}")

    def _mirrors(self, driver: dict[str, Any], reached: list[int], resumed: list[int]) -> bool:
        """The resume levels undo the suspend levels, but for the levels a
        DPM_FLAG_MAY_SKIP_RESUME device may be left in (rules.DRIVERS)."""
        expected = list(reversed(reached))
        if resumed == expected:
            return True
        undo = {c.event for c in self.calls if _level_of(c)[0] == "resume"}
        skippable = set()
        for event in undo:
            skippable |= set(driver.get("may_skip", {}).get(event, ()))
        return bool(skippable) and resumed == [level for level in expected if level not in skippable]

    def _all_levels(self, call: Call, driver: dict[str, Any], reached: list[int], direct_complete: bool,
                    smart_skipped: bool = False) -> None:
        """In a transition that went through, a prepared device of a known
        driver reaches every level it has a callback for, as deep as the
        transition went, unless the core completed it directly or skipped
        the levels of a runtime-suspended DPM_FLAG_SMART_SUSPEND device."""
        if (self.failed or direct_complete or call.source != "pmtest" or "callbacks" not in driver
                or self.event not in rules.CALLBACKS):
            return
        wanted = [level for level in rules.driver_levels(call.driver, self.event)
                  if level <= self.depth
                  and not (smart_skipped and level in rules.SMART_SUSPEND_SKIPS)]
        if reached != wanted:
            self.flag("missing", call, f"suspend levels {reached} in a {self.event} transition "
                      f"that went through; the driver has {wanted}")

    def _order(self, parents: Parents) -> None:
        """Parents before children in prepare and resume phases, children
        first in suspend phases and ->complete."""
        phases: dict[tuple[str, int], dict[str, Call]] = {}
        for call in self.calls:
            if "retry" in call.tags or call.ret == rules.EAGAIN:
                continue
            side, level = _level_of(call)
            if side is None:
                continue
            phases.setdefault((side, level), {}).setdefault(call.device, call)
        for (side, level), first in phases.items():
            parent_first = rules.PARENT_FIRST[side]
            by_name: dict[Optional[str], list[str]] = {}
            for device in first:
                by_name.setdefault(device_name(device), []).append(device)
            for device, call in first.items():
                # parents are kernel device names; skip the ambiguous ones
                # (never the device itself: a class device is often named
                # as its parent, ata1 of class ata_port below port ata1)
                candidates = [d for d in by_name.get(parents.get(device), []) if d != device]
                if len(candidates) != 1:
                    continue
                parent = candidates[0]
                other = first[parent]
                if (other.index < call.index) != parent_first and not _same_time_two_cpus(call, other):
                    order = "before" if parent_first else "after"
                    self.flag("order", call, f"{call.callback} ran {'before' if call.index < other.index else 'after'} "
                              f"parent {parent}'s {other.callback}; children run {order} "
                              f"their parents in this phase")
                else:
                    self._overlap(call, parent, other, parent_first)

    def _overlap(self, call: Call, parent: str, other: Call, parent_first: bool) -> None:
        """Started in the right order but without waiting: the PM core starts
        a device's callback only once the one it waits for (the parent's in
        resume phases, every child's in suspend phases: dpm_wait, async or
        not) has returned. Needs the trace's times."""
        first, then = (other, call) if parent_first else (call, other)
        if first.ts is None or then.ts is None or (first.end is not None and first.end <= then.ts):
            return
        running = "never returned" if first.end is None else \
            f"returned {(first.end - then.ts) * 1e3:.3f} ms after"
        if parent_first:
            said = f"{call.callback} started while parent {parent}'s {other.callback} was running (the parent " \
                   f"{running})"
        else:
            said = f"parent {parent}'s {other.callback} started while this {call.callback} was running (this one " \
                   f"{running})"
        self.flag("order", call, f"{said}; the PM core waits for the {'parent' if parent_first else 'children'} "
                  "to return first")


def _same_time_two_cpus(call: Call, other: Call) -> bool:
    """Two trace calls of two CPUs stamped with the same time: an SMP
    guest's trace clock, clamped to a tick under TCG, gives async callbacks
    of both CPUs one time, and their order in the merged trace is then the
    order of the CPUs' pages, not the order they ran in."""
    return call.ts is not None and call.ts == other.ts and call.cpu != other.cpu


def judge(calls: list[Call], parents: Optional[Parents] = None) -> list[Violation]:
    """All violations in one kernel instance's calls, in transition order."""
    parents = parents or {}
    groups = transitions(calls)
    violations: list[Violation] = []
    for number, group in enumerate(groups):
        violations += _Transition(group, calls, number == len(groups) - 1).judge(parents)
    return violations
