"""The verdict of one finished cycle from what was observed: pure, no
libvirt and no guest, so `./pmlab judge` (lab/rejudge.py) can judge a
recorded run again offline with the function that judged it live
(lab/cycle.py, the drive, calls judge_reply).

What proves each mode slept is described in lab/cycle.py's docstring and
checked here (_proof); callback order is lab/oracle's.
"""

import re
from dataclasses import dataclass
from typing import Any, Optional, Protocol, cast

from lab import calls, console, devices, guest_report, latency, pmtest_log, records, s2idle, trace
from lab.oracle import cpu_hotplug
from lab.oracle.cycle_check import as_record as ordering_record
from lab.oracle.cycle_check import judge_cycle
from lab.modes import Mode
from lab.records import ERROR, FAIL, PASS, Record, RunDir, report_path

Event = tuple[float, str, str]  # a libvirt event: (time, kind, detail)
Timeline = list[tuple[str, float]]  # the host's steps: [(step, time), ...]

# guest/init prints this when the swap disk held no image: the boot was fresh,
# not a restore (its earlier lines also appear in the boot kernel of a restore).
FRESH_BOOT = "pmlab-init: no hibernation image"

# Deepest phase marker each pm_test level reaches, and the first it must not.
PM_TEST_REACH = {
    "freezer": ("freeze_processes", "dpm_prepare"),
    "devices": ("dpm_suspend", "dpm_suspend_late"),
    "platform": ("dpm_suspend_noirq", "machine_suspend"),
    "processors": ("dpm_suspend_noirq", "machine_suspend"),
    "core": ("dpm_suspend_noirq", "machine_suspend"),
}


# guest/pmlab-cycle's words when a knob file refused the value written (the
# shell's "write error: <strerror>" on the line before) or a calls knob names
# a function the kernel cannot probe: the request's error, not the lab's.
_REJECTED = re.compile(r"^pmlab-cycle: (?:pmtest rejected knob (?P<knob>\w+)='(?P<value>.*)'|(?P<calls>calls: .*))$",
                       re.MULTILINE)
_WRITE_ERROR = re.compile(r"write error: (?P<why>.+)$")
# What a refused kfault's error means (kernel/modules/pmtest/pmtest_kfault.c).
_KFAULT_ERRORS = {"No such device": "no device of that name in the guest",
                  "Invalid argument": "a name two devices share, an unknown callback or one the PM core "
                                      "would not run for that device",
                  "No space left on device": "16 faults set at once"}


def rejected_knob(report: Optional[str]) -> Optional[str]:
    """The guest's refusal of a cycle's knob, in one line ("the guest
    rejected knob kfault='...': No such device (...)"), or None: the
    cycle never started, through no fault of the kernel or the lab."""
    found = _REJECTED.search(report or "")
    if found is None:
        return None
    if found["calls"]:
        return f"the guest rejected knob {found['calls']}"
    before = found.string[:found.start()].rstrip("\n").rpartition("\n")[2]
    why = _WRITE_ERROR.search(before)
    reason = why["why"].strip() if why else "refused"
    meaning = _KFAULT_ERRORS.get(reason) if found["knob"] == "kfault" else None
    return (f"the guest rejected knob {found['knob']}='{found['value']}': {reason}"
            + (f" ({meaning})" if meaning else ""))


@dataclass
class ParsedReport:
    """A guest report parsed once, for the judge and the oracle: its
    sections, its trace's events and their paired device callbacks."""
    sections: dict[str, str]
    events: list[trace.Event]
    callbacks: list[trace.Callback]


def parse_report(text: Optional[str]) -> ParsedReport:
    """ParsedReport of a report's text (None or "": no sections, no events)."""
    sections = guest_report.sections(text) if text else {}
    events = trace.parse(sections.get("trace", ""))
    return ParsedReport(sections, events, trace.paired_callbacks(events))


@dataclass(frozen=True)
class Expected:
    """What a cycle must show, from the run request and the host, never from
    the guest's own word: the device set whose probes the report must hold
    (lab/devices.py), the pmtest tree (depth, fanout) its trace must show,
    the absolute limits {"suspend": s, "resume": s} (lab.request.Limits),
    and what the host knew of the guest's devices before the cycle
    (lab.cycle.note_probes' probe history), for the words on a device
    broken before it; the guest's CPUs (lab.oracle.cpu_hotplug: which must
    go offline and come back)."""
    device_set: str = devices.DEFAULT
    pmtest_tree: Optional[tuple[int, int]] = None
    limits: Optional[dict[str, float]] = None
    probe_history: Optional[dict[str, Any]] = None
    vcpus: int = 1

    @classmethod
    def of_record(cls, record: Record) -> "Expected":
        """The Expected a cycle record carries (lab.session writes the
        request's settings into every record it starts): the live judge
        and `./pmlab judge` read the same fields."""
        tree = record.get("pmtest_tree")
        return cls(record.get("devices") or devices.DEFAULT, cast(tuple[int, int], tuple(tree)) if tree else None,
                   record.get("limits"), record.get("probe_history"), record.get("vcpus") or 1)


def judge(mode: Mode, report: Optional[str], status: int, events: list[Event], evidence: list[str],
          timeline: Timeline, token: str, boot_id: str, parsed: Optional[ParsedReport] = None,
          expected: Expected = Expected()) -> Record:
    """The verdict fields of a finished cycle from what was observed: the
    guest's report text and exit status (report None: the guest booted afresh
    instead of resuming), the libvirt events [(time, kind, detail)], the
    cycle's console lines, the host timeline [[step, time]], the tmpfs token
    sent and the guest's boot id before the cycle; `parsed`: the report's
    parse_report(), when the caller has it; `expected`: what the request
    says the cycle must show (Expected), never the guest's echo. Pure: recorded cycles can be judged again
    (pytest/test_judge.py)."""
    counts: dict[str, int] = {}
    for _, kind, _ in events:
        counts[kind] = counts.get(kind, 0) + 1
    result: Record = {"events": counts, "proof": {}, "problems": console.problems(evidence)}
    changed = console.firmware_ram_changes(evidence)
    if changed:  # the platform's failure, whatever followed from it (a crash, a lost report)
        result.update(verdict=FAIL, phase="platform", firmware_ram_changes=changed,
                      reason="the platform firmware changed RAM the OS owns across the S3 resume "
                             f"(pmtest_ramguard): {'; '.join(changed[:3])}")
        return result
    if report is None:  # disk: booted afresh, the image was not resumed
        result.update(verdict=FAIL, phase="restore",
                      reason="the guest booted afresh instead of resuming from the hibernation image")
        return result
    parsed = parsed or parse_report(report)
    parts = parsed.sections
    if "trace_raw_error" in parts:
        result.update(verdict=ERROR, phase="lab",
                      reason=f"the guest's trace pages could not be decoded: {parts['trace_raw_error'].splitlines()[0]}")
        return result
    rejected = rejected_knob(report) if status != 0 else None
    if rejected:
        result.update(verdict=ERROR, phase=records.REQUEST, reason=rejected)
        return result
    if status != 0 or "end" not in parts:
        result.update(verdict=ERROR, phase="lab",
                      reason=f"pmlab-cycle exited with {status}: {report.strip()[-300:]}")
        return result
    before, enter, after = (guest_report.key_values(parts.get(n)) for n in ("before", "enter", "after"))
    sysfs_before, sysfs_after = guest_report.snapshot(parts, "before"), guest_report.snapshot(parts, "after")
    stats_before = guest_report.suspend_stats(sysfs_before)
    stats_after = guest_report.suspend_stats(sysfs_after)
    events_trace = parsed.events
    sequences = trace.per_device(parsed.callbacks)
    pmtest_entries = pmtest_log.parse(parts.get("pmtest_log"))
    result.update(trace.timing(events_trace))
    result["suspend_stats_delta"] = guest_report.stats_delta(stats_before, stats_after)
    result["wakeup_sources_delta"] = guest_report.wakeup_delta(
        guest_report.wakeup_sources(sysfs_before), guest_report.wakeup_sources(sysfs_after))
    result["phases"] = trace.phases_reached(events_trace)
    result["phase_ms"] = trace.phase_ms(events_trace)  # per PM phase, for the dashboard's kernels
    # Per device ("name (driver)", trace.device_id), in order: callback,
    # microseconds, error, stored compactly (lab.records.compact_fields: the
    # result carries the shared values it made until the run's writer stores
    # them; read back with lab.records.callbacks); the report keeps the full trace.
    result.update(records.compact_fields(sequences, pmtest_log.by_device(pmtest_entries)))
    result["trace_events"] = len(events_trace)

    failed = trace.failed_callbacks(sequences)
    if failed:  # as fields, for the buckets; the reason says it in words
        result["failed_callbacks"] = [{"device": device, "cb": cb, "err": err} for device, cb, err in failed]
    probed = calls.observed(events_trace, evidence)
    if probed:  # the calls knob's functions that ran, per device and kernel
        result["calls"] = probed
    broken: list[tuple[str, str, str]] = []
    afterwards, before_cycle = "", None
    result.update(_probes(parts, expected.device_set, "probes"))
    result.update(_probes(parts, expected.device_set, "probes_before"))
    if "probes" in result:  # a device guest: does every device still work?
        broken = devices.broken(result["probes"])
    if result.get("probes_before") and "probes_before" not in parts:
        before_cycle = (f"the guest's report has no probes_before section (the request's device set "
                        f"asks for {len(result['probes_before'])} probes before the suspend)")
    elif result.get("probes_before"):  # broken before the suspend: not this cycle's doing
        before_cycle = _broken_before(devices.broken(result["probes_before"]), expected.probe_history, result)
        broken = [item for item in broken if item[0] not in result.get("broken_before", ())]
    if broken:  # named in whatever verdict the cycle gets
        result["broken_devices"] = [device for device, _, _ in broken]
        afterwards = f"; devices not working afterwards: {_broken(broken)}"
    entered = int(enter.get("status", "1"))
    result["enter_status"] = entered
    pressed = "powerbutton-sent" in dict(timeline)  # that the lab pressed; never when (host clock)
    if mode.kind == "freeze":
        result["s2idle"] = s2idle.evidence(parts.get("dmesg"), result["s2idle_loops"],
                                           result["wakeup_sources_delta"])
        early = pressed and s2idle.pressed_before_idle(result["s2idle"], entered != 0,
                                                       result["wakeup_sources_delta"])
        if early:
            result.update(verdict=ERROR, phase="lab", reason=early)
            return result
    # What the request asked the guest to have and to show, before what it did.
    missing_tree = _missing_tree(expected.pmtest_tree, result["phases"], sequences)
    if missing_tree:
        result.update(verdict=FAIL, phase="pmtest-tree", reason=missing_tree)
        return result
    if before_cycle:  # the devices it found broken are not this mode's failure
        result.update(verdict=FAIL, phase=devices.PHASE, reason=before_cycle + afterwards)
        return result
    if entered != 0:
        phase = stats_after.get("last_failed_step") if result["suspend_stats_delta"].get("fail") else None
        if not phase and failed:
            phase = trace.phase_of(failed[0][1])
        result.update(verdict=FAIL, phase=phase or result.get("last_phase") or "suspend",
                      reason=f"writing '{mode.state}' to /sys/power/state failed: "
                             f"{enter.get('error') or 'status ' + str(entered)}"
                             + (f"; failed callbacks: {_described(failed)}" if failed else "") + afterwards)
        return result

    missing = _proof(mode, dict(timeline), token, boot_id, counts, before, after, result)
    if missing:
        result.update(verdict=FAIL, phase="sleep", reason="no proof of sleep: " + "; ".join(missing) + afterwards)
    elif failed:
        result.update(verdict=FAIL, phase=trace.phase_of(failed[0][1]),
                      reason=f"callbacks returned errors: {_described(failed)}{afterwards}")
    elif broken:
        result.update(verdict=FAIL, phase=devices.PHASE,
                      reason=f"devices not working after the resume: {_broken(broken)}")
    elif result["problems"]:
        result.update(verdict=FAIL, phase=result.get("last_phase") or "resume",
                      reason=f"kernel reported problems: {result['problems'][:5]}")
    else:
        result.update(verdict=PASS, phase=None, reason=None)
    return result


def _probes(parts: dict[str, str], device_set: str, section: str) -> dict[str, list[dict[str, Any]]]:
    """{section: [...]} of a report's "probes" (after the resume) or
    "probes_before" (before the suspend) section: every probe the request's
    device set asks for must have its line, whatever the guest says it was
    asked (its "asked=" echo only stands in for a set that asks for none: a
    report recorded without the set); a report without the section fails
    every probe by name. {} when there is nothing to probe."""
    expected = devices.probe_arguments(device_set)
    if section not in parts:
        return {section: [{"device": device, "probe": probe, "ok": False, "ms": None,
                           "error": f"the guest's report has no {section} section"}
                          for device, _, probe in (word.partition(":") for word in expected)]} if expected else {}
    return {section: devices.parse_probes(parts[section], asked=expected or None)}


def _broken_before(broken: list[tuple[str, str, str]], history: Optional[dict[str, Any]],
                   result: Record) -> Optional[str]:
    """The reason's words for devices already broken before the suspend
    ("sata-disk (disk) broken before the cycle (since cycle 2 (mem)): ..."),
    or None; sets result["broken_before"] and, for a device the host saw a
    cycle break, result["broken_since"] {device: {"cycle", "mode"}} (the
    failure buckets name that cycle's mode, dashboards/buckets.py)."""
    if not broken:
        return None
    history = history or {}
    since_cycles = history.get("broken") or {}
    last_ok = history.get("last_ok")
    result["broken_before"] = [device for device, _, _ in broken]
    words = []
    for device, probe, error in broken:
        if device in since_cycles:
            number, mode = since_cycles[device]
            result.setdefault("broken_since", {})[device] = {"cycle": number, "mode": mode}
            since = f"since cycle {number} ({mode})"
        elif last_ok:  # it worked after that cycle's resume: broken between the cycles
            since = f"working after cycle {last_ok[0]} ({last_ok[1]})"
        elif history:
            since = "working when the guest booted"
        else:
            since = "no earlier probe known"
        words.append(f"{device} ({probe}) broken before the cycle ({since}): {error}")
    return "; ".join(words)


def _missing_tree(tree: Optional[tuple[int, int]], phases: list[str], sequences: trace.Sequences) -> Optional[str]:
    """Why the trace does not show the pmtest tree the request asked for
    (--pmtest-tree: every device of every tree, pmtest_full.0 ..), or None.
    Only a cycle that ran the device callbacks (dpm_suspend) can show it."""
    if not tree or "dpm_suspend" not in phases:
        return None
    seen = {device.split(" ", 1)[0] for device in sequences}
    size = "x".join(map(str, tree))
    if not any(device.startswith("pmtest_") for device in seen):
        return f"the guest has no pmtest devices, but the request asked for pmtest tree {size}"
    missing = [f"{driver}.{index}" for driver, count in devices.tree_sizes(tuple(tree)).items()
               for index in range(count) if f"{driver}.{index}" not in seen]
    if missing:
        return (f"the guest lacks {len(missing)} device(s) of the requested pmtest tree {size}: "
                f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    return None


def _broken(broken: list[tuple[str, str, str]]) -> str:
    """Devices whose probe failed, in words: "nvme-disk (disk): no block device; ..."."""
    return "; ".join(f"{device} ({probe}): {error}" for device, probe, error in broken)


def _described(failed: list[tuple[str, str, int]]) -> str:
    """Failed callbacks in words: "PNP0A06:01 (acpi) [suspend] EIO (-5), ..."."""
    return ", ".join(f"{device} {cb} {trace.errno_text(err)}" for device, cb, err in failed)


def judge_with_order(mode: Mode, report: Optional[str], status: int, events: list[Event], evidence: list[str],
                     timeline: Timeline, token: str, boot_id: str, expected: Expected = Expected()) -> Record:
    """judge(), then the callback order against the seed's rules (lab/oracle):
    a cycle that slept and woke with callbacks out of order did not pass.
    The verdict fields a driven cycle records (lab.cycle.DrivenCycle.finish,
    through judge_reply); `./pmlab judge` (lab/rejudge.py) calls this again
    on a recorded run. A cycle that passed but took longer than
    expected.limits fails (lab.latency.over_limit)."""
    parsed = parse_report(report)
    result = judge(mode, report, status, events, evidence, timeline, token, boot_id, parsed, expected)
    violations, checked = judge_cycle(parsed.sections, parsed.callbacks, evidence)
    result.update(ordering_record(violations, checked))
    if violations and result["verdict"] == PASS:
        result.update(verdict=FAIL, phase="ordering", reason=str(violations[0]))
    _check_cpus(result, mode, parsed, expected.vcpus)
    if result["verdict"] == PASS:
        result.update(latency.over_limit(result, expected.limits))
    return result


def _check_cpus(result: Record, mode: Mode, parsed: ParsedReport, vcpus: int) -> None:
    """An SMP guest's cycle: its non-boot CPUs offline and back around the
    noirq phases (lab.oracle.cpu_hotplug; a passing cycle that broke it
    fails, phase cpu-hotplug, naming the CPU), and how far device callbacks
    ran at once (callback_overlap: an observation, never a verdict)."""
    violations, observed = cpu_hotplug.check(mode, parsed.events, parsed.callbacks, vcpus)
    if vcpus >= 2 or observed["offline"]:
        result["cpu_hotplug"] = observed
    if vcpus >= 2:
        result["callback_overlap"] = trace.overlapping_callbacks(parsed.callbacks)
    if violations and result["verdict"] == PASS:
        result.update(verdict=FAIL, phase=cpu_hotplug.RULE, reason="; ".join(v.message for v in violations))


class Reply(Protocol):
    """The guest's reply to a cycle (lab.guest_agent's): its report and exit status."""
    output: str
    status: int


def judge_reply(mode: Mode, reply: Optional[Reply], events: list[Event], evidence: list[str], timeline: Timeline,
                token: str, boot_id: str, expected: Expected = Expected()) -> Record:
    """judge_with_order on the guest's reply (None: booted afresh). Should
    the judge itself fail (a bug of ours, e.g. on a report it cannot read),
    the cycle is an `error` naming the exception, so it is still recorded
    and, not having passed, keeps its report (keep_evidence)."""
    try:
        return judge_with_order(mode, reply.output if reply else None, reply.status if reply else 0,
                                events, evidence, timeline, token, boot_id, expected)
    except Exception as error:
        return {"verdict": ERROR, "phase": "lab",
                "reason": f"judging the cycle failed: {type(error).__name__}: {error}"}


def _proof(mode: Mode, steps: dict[str, float], token: str, boot_id: str, counts: dict[str, int],
           before: dict[str, str], after: dict[str, str], result: Record) -> list[str]:
    """Fill result["proof"]; return the list of what is missing."""
    proof = result["proof"]
    missing: list[str] = []
    phases = result["phases"]
    success = result["suspend_stats_delta"].get("success", 0)
    if mode.kind == "mem":
        proof.update(pmsuspend=counts.get("pmsuspend", 0), pmwakeup=counts.get("pmwakeup", 0),
                     machine_suspend=result["suspend_ms"] is not None and result["resume_ms"] is not None,
                     suspend_stats_success=success)
        if proof["pmsuspend"] != 1 or proof["pmwakeup"] != 1:
            missing.append(f"expected 1 PMSuspended and 1 PMWakeup event, got "
                           f"{proof['pmsuspend']} and {proof['pmwakeup']}")
    elif mode.kind == "freeze":
        # Whether the guest idled and what woke it, from the guest's trace and
        # log (lab/s2idle.py); the host's notes only say that it pressed.
        found = result["s2idle"]
        proof.update(s2idle_entered="s2idle-entered" in steps,
                     button_pressed="powerbutton-sent" in steps,
                     idled=found["idle_entries"] > 0,
                     woke_by_button=s2idle.woke_by_button(found),
                     machine_suspend=result["suspend_ms"] is not None and result["resume_ms"] is not None,
                     suspend_stats_success=success, pmsuspend=counts.get("pmsuspend", 0))
        if not (proof["s2idle_entered"] and proof["button_pressed"]):
            missing.append("the guest did not stay in s2idle until the power button was pressed")
        elif not proof["woke_by_button"]:
            missing.append(f"the guest left s2idle before the power button woke it ({found['wake'] or 'no wake reason logged'})")
    elif mode.kind == "disk":
        proof.update(boot_id_kept=before.get("boot_id") == after.get("boot_id") == boot_id,
                     token_kept=after.get("token") == token,
                     stopped=counts.get("stopped", 0), pmsuspend_disk=counts.get("pmsuspend-disk", 0),
                     reboot=counts.get("reboot", 0))
        if mode.wake == "platform" and proof["stopped"] != 1:
            missing.append(f"expected the domain to stop once (S4), it stopped {proof['stopped']} times")
        if mode.wake == "reboot" and proof["reboot"] < 1:
            missing.append("no Reboot event")
        if not proof["boot_id_kept"]:
            missing.append(f"boot id changed ({before.get('boot_id')} -> {after.get('boot_id')})")
        if not proof["token_kept"]:
            missing.append("the tmpfs token did not survive")
    elif mode.kind == "pm_test":
        reach, beyond = PM_TEST_REACH[mode.pm_test]
        proof.update(reached=reach in phases, went_beyond=beyond in phases,
                     pmsuspend=counts.get("pmsuspend", 0), suspend_stats_success=success)
        if not proof["reached"] or proof["went_beyond"]:
            missing.append(f"pm_test={mode.pm_test} should reach {reach} and not {beyond}; phases: {phases}")
        if proof["pmsuspend"]:
            missing.append("a pm_test cycle suspended the machine")
    if mode.kind in ("mem", "freeze"):
        if not proof["machine_suspend"]:
            missing.append("no machine_suspend begin/end in the trace")
    if mode.kind in ("mem", "freeze", "pm_test") and success != 1:
        missing.append(f"suspend_stats success went up by {success}, not 1")
    return missing


def keep_evidence(rundir: RunDir, record: Record, report: Optional[str], evidence: list[str]) -> None:
    """Put a finished cycle's evidence in its record by the run's keep policy
    (RunDir.keep, --keep): "full" keeps every cycle's guest report (the whole
    trace buffer and pmtest log, reports/cycleN.txt.gz) and console lines;
    "failures" keeps them only for a cycle that did not pass. A passing cycle
    then keeps its console's problem and ordering lines (console.notable)
    and their count; the run's console/<guest>.log still has every line."""
    keep_all = rundir.keep == "full" or record.get("verdict") != PASS
    if report is not None and keep_all:
        record["report"] = rundir.write_file(report_path(record["cycle"]), report, compress=True)
    if keep_all:
        record["evidence"] = evidence
    else:
        record["evidence"] = console.notable(evidence)
        record["evidence_lines"] = len(evidence)


def host_phases(started: float, timeline: Timeline) -> dict[str, float]:
    """Seconds between consecutive host steps, e.g. {"sent-pmsuspend": 0.29}:
    where a cycle's wall time goes ("start" is the record's host_start,
    "ended" the wait's end, "judged" the verdict, oracle included)."""
    phases: dict[str, float] = {}
    previous, last = "start", started
    for step, when in timeline:
        key = f"{previous}-{step}"
        phases[key] = round(phases.get(key, 0) + when - last, 3)
        previous, last = step, when
    return phases
