"""Failure buckets: the one place a cycle is classified.

classify(cycle) -> sorted list of bucket names for one normalised cycle
(dashboards/inputs.py). A passing cycle usually has none; a cycle can have
one verdict bucket plus flag buckets:

  verdict buckets (one at most, from verdict / phase / reason; none for
  a pass or an interrupted cycle):
    fail-in-<phase>:<device>:<errno>   a callback returned an error (device and
                                       errno, named as lab.trace.errno_text names
                                       it: "EIO (-5)", from the callbacks (lab.records), else
                                       suspend_stats, else the record's
                                       failed_callbacks, lab.records)
    fail-in-device-check:<device>:<mode>
                                       a device guest's device did not work after
                                       the resume (lab/devices.py): <mode> is the
                                       mode of the cycle that broke it, this one's,
                                       or for a device broken before the cycle the
                                       breaking cycle's ("broken_since"), else
                                       "before-cycle" (broke between cycles)
    fail-in-<phase>                    failed, no failing device known
    fake-sleep                         "echo mem" returned but there is no proof
                                       the guest slept (lab phase "sleep")
    hang-in-<phase>[:<device>:<callback>]  verdict hang; the callback that
                                       started and never returned (lab/hang.py),
                                       or [:<function>] when only the stuck
                                       task's stack named it
    unfinished                         the cycle has only its "started" line
                                       (lab.records: neither hang nor fail)
    error:<reason class>               the lab failed, not the kernel (digits
                                       and hex in the reason are masked)
  flag buckets (any verdict, pass included):
    kernel-warning                     WARNING / BUG / Oops / panic / Call Trace
                                       among the cycle's problem lines
    ordering-violation[:<rule>]        the record's ordering_violations list, or
                                       a console line from the PM core about
                                       order ("... should not be sleeping")
    device-not-working:<device>        a device guest's probe of that device
                                       failed after the cycle (lab/devices.py)
"""

import functools
import re
from typing import Any, Optional

from lab.console import ORDERING
from lab.records import ERROR, FAIL, HANG, INTERRUPTED, PASS, UNFINISHED
from lab.trace import device_id  # the one naming of devices: "name (driver)"
from lab.trace import errno_text  # the one naming of errnos: "EIO (-5)"

VERDICT_KINDS = (FAIL, "fake-sleep", HANG, UNFINISHED, ERROR)
FLAG_KINDS = ("kernel-warning", "ordering-violation", "device-not-working")

KERNEL_WARNING = re.compile(r"Kernel panic|BUG: |WARNING: |Oops|general protection fault|Call Trace:")
ORDERING_LINE = ORDERING  # lab.console's: a passing cycle's record keeps such lines under --keep failures
PHASE = re.compile(r"[A-Za-z0-9_.-]+")
Cycle = dict[str, Any]  # the dashboard's cycle (dashboards/compute.py's, from a record)


def phase_token(phase: object) -> str:
    """A phase as one token: "thaw_processes[0] end" -> "thaw_processes"."""
    if not isinstance(phase, str):
        return "unknown"
    match = PHASE.match(phase.strip())
    return match.group(0) if match else "unknown"


@functools.lru_cache(maxsize=4096)
def callback_phase(label: object) -> str:
    """The PM phase of a callback label as lab/trace.py writes it
    ("noirq bus[suspend]" -> "suspend_noirq"): the lab's own reading
    (lab.trace.phase_of), so the dashboard and the verdicts never disagree."""
    from lab.trace import phase_of

    return phase_of(label) if isinstance(label, str) and label else "unknown"


def failing_device(cycle: Cycle) -> Optional[tuple[str, int]]:
    """(device, errno int) of the callback that failed first, or None."""
    failed = [(call["t"] if call["t"] is not None else float("inf"), order, call["device"], call["err"])
              for order, call in enumerate(cycle["callback_errors"])]
    if failed:
        _, _, device, err = min(failed)
        return device, err
    stats = cycle.get("suspend_stats_delta") or {}
    counted = any(isinstance(v, int) and v > 0 for k, v in stats.items() if k.startswith("failed_"))
    if counted and isinstance(stats.get("last_failed_dev"), str) and isinstance(stats.get("last_failed_errno"), int):
        return stats["last_failed_dev"], stats["last_failed_errno"]
    recorded = cycle.get("failed_callbacks") or []
    if recorded:
        return recorded[0]["device"], recorded[0]["err"]
    return None


def broken_device(cycle: Cycle) -> Optional[tuple[str, str]]:
    """(device, mode that broke it) of a device-check failure, or None: a
    device broken before the cycle (its before-probes) is charged to the
    cycle that broke it, when the record knows it, not to this cycle's mode."""
    before = [probe["device"] for probe in cycle.get("probes_before", ()) if not probe["ok"]]
    if before:
        since = (cycle.get("broken_since") or {}).get(before[0]) or {}
        return before[0], since.get("mode") or "before-cycle"
    after = [probe["device"] for probe in cycle.get("probes", ()) if not probe["ok"]]
    return (after[0], cycle["mode"]) if after else None


def stuck_suffix(stuck: Optional[dict[str, Any]]) -> str:
    """":<device>:<callback>" of a hang's callback that never returned
    (lab/hang.py), ":<function>" when only the stack named it, else ""."""
    if not stuck:
        return ""
    if stuck.get("device"):
        return f":{device_id(stuck.get('driver') or '', stuck['device'])}:{stuck.get('callback')}"
    if stuck.get("probe"):  # every callback returned; the device's probe never did
        return f":{stuck['probe']}" + (f":{stuck['function']}" if stuck.get("function") else "")
    return f":{stuck['function']}" if stuck.get("function") else ""


def error_class(reason: Optional[str]) -> str:
    """Reason text -> a short stable class: the part before the first ": ",
    with numbers masked, at most 80 characters."""
    text = (reason or "unknown").split(": ", 1)[0].strip() or "unknown"
    text = re.sub(r"0x[0-9a-fA-F]+", "0xX", text)
    text = re.sub(r"\d+", "N", text)
    return text[:80]


def verdict_bucket(cycle: Cycle) -> Optional[str]:
    verdict = cycle["verdict"]
    if verdict in (PASS, INTERRUPTED):  # interrupted: the run stopped, no failure of anything
        return None
    if verdict == UNFINISHED:
        return UNFINISHED
    if verdict == HANG:
        return f"hang-in-{phase_token(cycle['phase'])}" + stuck_suffix(cycle.get("stuck"))
    if verdict == ERROR:
        return f"error:{error_class(cycle['reason'])}"
    phase = phase_token(cycle["phase"])
    if phase == "sleep" or (cycle["reason"] or "").startswith("no proof of sleep"):
        return "fake-sleep"
    if phase == "device-check":  # lab.devices.PHASE: the device that did not work
        broken = broken_device(cycle)
        if broken:
            return f"fail-in-{phase}:{broken[0]}:{broken[1]}"
    failing = failing_device(cycle)
    if failing:
        return f"fail-in-{phase}:{failing[0]}:{errno_text(failing[1])}"
    return f"fail-in-{phase}"


def flag_buckets(cycle: Cycle) -> set[str]:
    flags = set()
    if any(KERNEL_WARNING.search(line) for line in cycle["problems"]):
        flags.add("kernel-warning")
    for violation in cycle["ordering_violations"]:
        rule = violation.get("rule") if isinstance(violation, dict) else None
        flags.add(f"ordering-violation:{rule}" if isinstance(rule, str) and rule else "ordering-violation")
    if any(ORDERING_LINE.search(line) for line in cycle["problems"] + cycle["evidence"]):
        flags.add("ordering-violation")
    # a device guest's device that did not work after this cycle, whatever its verdict
    flags.update(f"device-not-working:{probe['device']}" for probe in cycle.get("probes", ()) if not probe["ok"])
    return flags


def classify(cycle: Cycle) -> list[str]:
    found = flag_buckets(cycle)
    primary = verdict_bucket(cycle)
    if primary:
        found.add(primary)
    return sorted(found)


def kind_of(bucket: str) -> str:
    """The family of a bucket name (for the page's colours and filters)."""
    for kind in ("fake-sleep", "unfinished", "kernel-warning", "ordering-violation", "device-not-working"):
        if bucket == kind or bucket.startswith(kind + ":"):
            return kind
    if bucket.startswith("fail-in-"):
        return FAIL
    if bucket.startswith("hang-in-"):
        return HANG
    if bucket.startswith("error:"):
        return ERROR
    return "other"


def example_line(cycle: Cycle, bucket: str) -> Optional[str]:
    """Evidence for a bucket: the console/problem line or reason that shows it."""
    kind = kind_of(bucket)
    if kind == "kernel-warning":
        return next((line for line in cycle["problems"] if KERNEL_WARNING.search(line)), None)
    if kind == "ordering-violation":
        for violation in cycle["ordering_violations"]:
            if isinstance(violation, dict):
                return str(violation.get("message") or violation)[:500]
            return str(violation)[:500]
        return next((line for line in cycle["problems"] + cycle["evidence"] if ORDERING_LINE.search(line)), None)
    if cycle["problems"]:
        return cycle["problems"][0]
    return None
