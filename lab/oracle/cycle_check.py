"""Judge one lab cycle: every kernel's callbacks that the cycle left behind.

- the reporting kernel's pmtest log and trace buffer (guest/pmlab-cycle's
  report: the kernel that ran the cycle, or the image kernel after a restore);
- pmtest records on the console, one list per kernel instance: the boot
  kernel of a hibernation restore prints them there (guest/init turns
  pmtest's log_console on until it knows there is no image).
"""

import dataclasses
from typing import Any, Iterable, Optional

from lab.trace import Callback

from . import rules
from .judge import Violation, judge
from .observe import (bound_drivers, device_name, from_callbacks, from_pmtest, loaded_drivers, pmtest_parents,
                      split_kernels, tree_from_trace, Call)


def with_syscore_failures(trace_calls: list[Call], pmtest_calls: list[Call]) -> list[Call]:
    """The trace with the pmtest log's failed syscore_suspend() calls put where
    they happened: syscore_ops are no devices, so the trace does not show them,
    yet a failing one fails the transition (image creation) after every device
    was suspended."""
    return with_failures(trace_calls, [c for c in pmtest_calls
                                       if c.callback == rules.SYSCORE_SUSPEND and c.ret != 0])


def outside_failures(trace_calls: list[Call], pmtest_calls: list[Call]) -> list[Call]:
    """The trace's failed suspend-side calls of devices the pmtest log does
    not have (a real driver's, e.g. made to fail by pmtest_kfault), tagged
    "outside": the pmtest log's judge then knows its transition failed (a
    failed hibernation's devices are recovered, not thawed) without judging
    those devices, whose own calls are the trace's to judge."""
    ours = {call.device for call in pmtest_calls}
    found = []
    for call in trace_calls:
        side, level, _ = rules.side_of(call.callback, call.event)
        failed = rules.prepare_failed(call.ret) if side == "prepare" else side == "suspend" and call.ret != 0
        if failed and device_name(call.device) not in ours:
            found.append(dataclasses.replace(call, tags=call.tags | {"outside"}))
    return found


def with_failures(calls: list[Call], failures: list[Call]) -> list[Call]:
    """`calls` with each failure of another source put where it happened:
    before the first resume-side call that follows a suspend-side call of
    its event."""
    calls = list(calls)
    for failure in failures:
        suspended = False
        for position, call in enumerate(calls):
            side, level, _ = rules.side_of(call.callback, call.event)
            if side == "suspend" and level and call.event == failure.event:
                suspended = True
            elif suspended and side == "resume" and level:
                calls.insert(position, failure)
                break
    return calls


def judge_cycle(sections: dict[str, str], trace_callbacks: list[Callback],
                console_lines: Optional[Iterable[str]]) -> tuple[list[Violation], dict[str, int]]:
    """(violations, counts) of a cycle from its guest report, parsed once by
    the caller (lab.judge): the report's sections (lab.guest_report.sections;
    {} without a report) and its trace's callbacks (lab.trace.paired_callbacks),
    and the cycle's console lines. counts says how many calls each source
    gave, so a record shows the oracle had something to judge."""
    violations: list[Violation] = []
    counts: dict[str, int] = {}
    trace_calls, parents = from_callbacks(trace_callbacks)
    # The pmtest tree as the kernel reported it; the boot kernel of a
    # restore loaded the module with the same parameters as the image kernel.
    tree = tree_from_trace(parents)
    # the edu device's driver, as bound in the reporting kernel; the boot
    # kernel of a restore binds it as the module loads it
    bound = bound_drivers(trace_calls)
    calls = from_pmtest(sections.get("pmtest_log", ""), bound)
    violations += judge(with_failures(calls, outside_failures(trace_calls, calls)), pmtest_parents(calls, tree))
    counts["pmtest_log"] = len(calls)
    violations += judge(with_syscore_failures(trace_calls, calls), parents)
    counts["trace"] = len(trace_calls)
    console_calls = from_pmtest("\n".join(console_lines or ()), loaded_drivers(bound))
    for kernel in split_kernels(console_calls):
        violations += judge(kernel, pmtest_parents(kernel, tree))
    counts["console"] = len(console_calls)
    return violations, counts


def as_record(violations: list[Violation], counts: dict[str, int], limit: int = 20) -> dict[str, Any]:
    """The record fields: the dashboard buckets ordering violations by rule."""
    return {"ordering_checked": counts,
            "ordering_violations": [{"rule": v.rule, "device": v.device, "message": v.message,
                                     "context": [str(c) for c in v.context]}
                                    for v in violations[:limit]]}
