"""Non-boot CPUs around the device phases, from the trace (lab/trace.py
hotplug_spans: kernel/cpu.c's CPU_OFF[n] / CPU_ON[n] markers and the
cpuhp_exit steps inside them).

S3 (mem), S4 (disk) and pm_test's processors and core levels take every
non-boot CPU offline after the last noirq suspend callback
(suspend_enter / create_image: pm_sleep_disable_secondary_cpus) and bring it
back before the first noirq resume callback. For S4 the report's trace is
the image kernel's: its way down before the snapshot and back up after the
restore. Suspend-to-idle, and pm_test's earlier levels, take none offline.
Which CPUs must go comes from the run request (vcpus), never from the guest.
"""

from typing import Any, Optional

from lab import trace
from lab.modes import Mode
from lab.trace import Callback, Event, HotplugSpan

from .judge import Violation

RULE = "cpu-hotplug"
OFFLINE_PM_TEST = ("processors", "core")


def takes_cpus_offline(mode: Mode) -> bool:
    """Whether a cycle of `mode` (lab.modes.Mode) takes the non-boot CPUs offline."""
    if mode.kind == "pm_test":
        return mode.pm_test in OFFLINE_PM_TEST
    return mode.kind in ("mem", "disk")


def _bounds(events: list[Event], callbacks: list[Callback]) -> tuple[Optional[float], Optional[float]]:
    """(end of the last noirq suspend callback, start of the first noirq
    resume callback after it) in trace time; the phase markers where the
    phase ran no callback; None where the phase is not in the trace."""
    suspend_end: Optional[float] = None
    resume_start: Optional[float] = None
    for ts, action, _, is_begin in trace.markers(events):
        if action == "dpm_suspend_noirq" and not is_begin:
            suspend_end = ts
        elif action == "dpm_resume_noirq" and is_begin and suspend_end is not None and resume_start is None:
            resume_start = ts
    ends = [call.end_ts or call.ts for call in callbacks if call.phase == "dpm_suspend_noirq"]
    starts = [call.ts for call in callbacks if call.phase == "dpm_resume_noirq"
              and suspend_end is not None and call.ts >= suspend_end]
    if suspend_end is not None and ends:
        suspend_end = max(ends + [suspend_end])
    if resume_start is not None and starts:
        resume_start = min(starts + [resume_start])
    return suspend_end, resume_start


def _flag(violations: list[Violation], cpu: int, message: str) -> None:
    violations.append(Violation(RULE, f"cpu{cpu}", f"CPU {cpu} {message}"))


def _unfinished(span: Optional[HotplugSpan], going: str, marker: str) -> Optional[str]:
    """Why a CPU did not `going` ("go offline"), or None when its span ended
    with no hotplug step failing."""
    if span is None or span.end is None:
        return f"did not {going} (no {marker} end in the trace)"
    failed = span.failed_step
    if failed:
        return f"did not {going}: hotplug step {failed[1]} returned {trace.errno_text(failed[2])}"
    return None


def _check_cpu(violations: list[Violation], cpu: int, spans: list[HotplugSpan], suspend_end: Optional[float],
               resume_start: Optional[float]) -> None:
    down = next((s for s in spans if s.cpu == cpu and s.action == "CPU_OFF"), None)
    up = next((s for s in spans if s.cpu == cpu and s.action == "CPU_ON" and down and s.begin >= down.begin), None)
    unfinished = _unfinished(down, "go offline", "CPU_OFF")
    if unfinished:
        _flag(violations, cpu, unfinished)
        return
    assert down is not None  # _unfinished said so
    if suspend_end is not None and down.begin < suspend_end:
        _flag(violations, cpu, f"went offline at {down.begin:.6f}, before the last noirq suspend callback "
                               f"ended at {suspend_end:.6f}")
    unfinished = _unfinished(up, "come back online", "CPU_ON")
    if unfinished:
        _flag(violations, cpu, unfinished)
        return
    assert up is not None and up.end is not None
    left = max((step for _, step, _ in down.steps), default=None)  # the state it was online in
    if left is not None and up.steps and up.steps[-1][0] < left:
        _flag(violations, cpu, f"came back only to hotplug state {up.steps[-1][0]} of {left}")
    if resume_start is not None and up.end > resume_start:
        _flag(violations, cpu, f"came back online late: at {up.end:.6f}, after the first noirq resume "
                               f"callback began at {resume_start:.6f}")


def check(mode: Mode, events: list[Event], callbacks: list[Callback],
          vcpus: int) -> tuple[list[Violation], dict[str, Any]]:
    """(violations, observed) of a cycle's trace (lab.trace.parse's events,
    paired_callbacks' callbacks) for a guest of `vcpus` CPUs (the request's).
    observed: {"offline": {cpu: ms offline-going}, "online": {cpu: ms}} as
    the record keeps it. A cycle whose trace lacks the noirq phases
    (it failed before, a pm_test level stopped earlier) is judged only for
    CPUs that went offline where none may."""
    spans = trace.hotplug_spans(events)
    observed: dict[str, Any] = {"vcpus": vcpus,
                **{key: {str(s.cpu): round((s.end - s.begin) * 1000, 3) for s in spans
                         if s.action == action and s.end is not None}
                   for key, action in (("offline", "CPU_OFF"), ("online", "CPU_ON"))}}
    violations: list[Violation] = []
    if not takes_cpus_offline(mode):
        for span in spans:
            if span.action == "CPU_OFF":
                _flag(violations, span.cpu, f"went offline in a {mode.name} cycle, which takes no CPU offline")
        return violations, observed
    suspend_end, resume_start = _bounds(events, callbacks)
    if suspend_end is None or resume_start is None:
        return violations, observed
    for cpu in range(1, vcpus):
        _check_cpu(violations, cpu, spans, suspend_end, resume_start)
    return violations, observed
