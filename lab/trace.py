"""The guest's ftrace buffer: suspend/resume timing and device callbacks.

Events used (include/trace/events/power.h):
  suspend_resume: <action>[<val>] begin|end           phase markers
  device_pm_callback_start: <driver> <device>, parent: <parent>, <info>[<verb>]
  device_pm_callback_end: <driver> <device>, err=<n>
  suspend_resume: CPU_OFF[<cpu>] / CPU_ON[<cpu>] begin|end  a non-boot CPU's way
                                      down and up (kernel/cpu.c)
  cpuhp_exit: cpu: <cpu> state: <s> step: <n> ret: <r>  each hotplug step inside
Timing comes from here, not from console text: trace timestamps are taken
where the kernel does the work.
"""

import errno
import re
from dataclasses import dataclass, field
from typing import Any, Optional

# "  sh-123     [000] d..1.   123.456789: suspend_resume: suspend_enter[3] begin"
# The flags column is absent with some trace options; tolerate both. The task
# starts at a non-blank: ".+?" after "\s*" took quadratic time on a long blank line.
LINE = re.compile(
    r"^\s*(?P<task>\S.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d{1,20})\]\s+(?:\S+\s+)?"
    r"(?P<ts>\d+\.\d+):\s+(?P<name>[\w:]+):\s?(?P<body>.*)$"
)
# Numbers taken as int have at most 20 digits: a longer run is a corrupted
# line (and int() refuses more than 4300 digits).
SUSPEND_RESUME = re.compile(r"^(?P<action>\w+)\[(?P<val>\d{1,20})\] (?P<edge>begin|end)$")
CALLBACK_START = re.compile(
    r"^(?P<driver>.*?) (?P<device>\S+), parent: (?P<parent>\S+), (?P<info>.*?)\[(?P<verb>[^\]]+)\]$")
CALLBACK_END = re.compile(r"^(?P<driver>.*?) (?P<device>\S+), err=(?P<err>-?\d{1,20})$")
CPUHP_EXIT = re.compile(r"^\s*cpu: (?P<cpu>\d{1,20})\s+state:\s*(?P<state>-?\d{1,20})\s+step:\s*(?P<step>-?\d{1,20})"
                        r"\s+ret: (?P<ret>-?\d{1,20})$")


@dataclass
class Event:
    ts: float  # seconds, trace clock
    name: str
    body: str
    task: str = ""
    cpu: int = 0


def parse(text: str) -> list[Event]:
    """Trace text (as in /sys/kernel/tracing/trace) to events; comment and
    unparseable lines are skipped."""
    events = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = LINE.match(line)
        if match:
            events.append(Event(float(match["ts"]), match["name"], match["body"],
                                match["task"].strip(), int(match["cpu"])))
    return events


Marker = tuple[float, str, int, bool]  # (ts, action, val, is_begin)


def markers(events: list[Event]) -> list[Marker]:
    """suspend_resume events as (ts, action, val, is_begin)."""
    out = []
    for event in events:
        if event.name == "suspend_resume":
            match = SUSPEND_RESUME.match(event.body)
            if match:
                out.append((event.ts, match["action"], int(match["val"]), match["edge"] == "begin"))
    return out


def timing(events: list[Event]) -> dict[str, Any]:
    """Guest-measured phase times in milliseconds.

    suspend_ms: first phase marker of the cycle -> machine_suspend begin (the
                moment the platform is told to sleep, or s2idle starts idling)
    resume_ms:  last machine_suspend end -> last phase marker (thaw done)
    total_ms:   first -> last marker; for pm_test cycles, which never reach
                machine_suspend, this is the only figure.
    s2idle_loops: machine_suspend begin count (above 1 = spurious s2idle wakes)
    """
    marks = markers(events)
    result: dict[str, Any] = {"suspend_ms": None, "resume_ms": None, "total_ms": None, "s2idle_loops": 0,
              "last_phase": None}
    if not marks:
        return result
    first, last = marks[0][0], marks[-1][0]
    result["total_ms"] = round((last - first) * 1000, 3)
    begins = [m for m in marks if m[1] == "machine_suspend" and m[3]]
    ends = [m for m in marks if m[1] == "machine_suspend" and not m[3]]
    if begins:
        result["suspend_ms"] = round((begins[0][0] - first) * 1000, 3)
        result["s2idle_loops"] = len(begins) if begins[0][2] == 1 else 0
    if ends:
        result["resume_ms"] = round((last - ends[-1][0]) * 1000, 3)
    ts, action, val, is_begin = marks[-1]
    result["last_phase"] = f"{action}[{val}] {'begin' if is_begin else 'end'}"
    return result


def phase_ms(events: list[Event]) -> dict[str, float]:
    """Guest time per suspend_resume action (dpm_prepare, dpm_suspend, ...,
    machine_suspend, thaw_processes) in ms, in the order the actions began:
    the sum of its begin -> end spans (s2idle may enter machine_suspend more
    than once); a begin without its end (a hang) is left out."""
    open_spans: dict[str, list[float]] = {}
    total: dict[str, Optional[float]] = {}
    for ts, action, val, is_begin in markers(events):
        if is_begin:
            open_spans.setdefault(action, []).append(ts)
            total.setdefault(action, None)
        elif open_spans.get(action):
            total[action] = (total[action] or 0.0) + ts - open_spans[action].pop()
    return {action: round(seconds * 1000, 3) for action, seconds in total.items() if seconds is not None}


def phases_reached(events: list[Event]) -> list[str]:
    """Names of the phases that began, in order (dpm_prepare, dpm_suspend, ...)."""
    seen: list[str] = []
    for ts, action, val, is_begin in markers(events):
        if is_begin and action not in seen:
            seen.append(action)
    return seen


def device_id(driver: str, name: str, parent: Optional[str] = None) -> str:
    """A device's identity: its name and its driver/bus string, "name (driver)".
    Names alone are not unique: an ACPI companion and its device share one
    (PNP0A06:01 on acpi and on container). A device with no driver, bus or
    class string below a parent is named with that parent, "name@parent":
    USB endpoints (ep_81) have one under every interface. The oracle's trace
    calls use it too (lab/oracle/observe.py)."""
    driver = driver.strip()
    if driver:
        return f"{name} ({driver})"
    return f"{name}@{parent}" if parent and parent != "none" else name


def split_device_id(identity: str) -> tuple[str, Optional[str]]:
    """device_id() read back: (name, driver or None). A bare name (records
    before version 2 keyed devices by name only) has no driver; a
    "name@parent" is the device name (x86 device names have no "@")."""
    if identity.endswith(")") and " (" in identity:
        name, _, driver = identity[:-1].rpartition(" (")
        return name, driver
    return identity.partition("@")[0], None


# The PM core's device phases (suspend_resume actions): every device
# callback runs inside one of them.
DPM_PHASES = ("dpm_prepare", "dpm_suspend", "dpm_suspend_late", "dpm_suspend_noirq",
              "dpm_resume_noirq", "dpm_resume_early", "dpm_resume", "dpm_complete")


@dataclass
class Callback:
    """One device PM callback: its device_pm_callback_start event, and what
    its end said (end_ts and err None: it never returned)."""
    ts: float           # start, trace clock
    driver: str         # the driver/bus string as traced (may be blank)
    name: str           # the device's name
    parent: str         # its parent's name, "none" for a root
    info: str           # "noirq bus", "" for ->prepare and ->complete
    verb: str           # the PM event: suspend, resume, freeze, ...
    phase: Optional[str]  # the DPM_PHASES action it ran in (None: outside every one)
    end_ts: Optional[float] = None
    err: Optional[int] = None
    cpu: int = 0        # the CPU it started on

    @property
    def device(self) -> str:
        return device_id(self.driver, self.name, self.parent)

    @property
    def label(self) -> str:
        """"<info>[<verb>]", the callback as callbacks() names it."""
        return f"{self.info.strip()}[{self.verb}]"

    @property
    def us(self) -> Optional[float]:
        return None if self.end_ts is None else round((self.end_ts - self.ts) * 1e6, 1)


def _named_phase(info: str, verb: str, marked: Optional[str]) -> Optional[str]:
    """The DPM phase a callback ran in: the markers' (`marked`), unless the
    callback's own words name another ("noirq bus" in dpm_complete). On an
    SMP guest an async callback of another CPU can sort past its phase's end
    marker (the local trace clock is per CPU, and clamped to a tick under
    TCG); on one CPU the two always agree. Outside every phase stays None."""
    first = info.split()[0] if info.split() else ""
    down = verb in DOWN_VERBS
    if marked is None or first in ("", "preparing", "completing"):
        return marked  # ->prepare/->complete: dpm_prepare also completes a retried ->prepare
    named = {"noirq": "dpm_suspend_noirq" if down else "dpm_resume_noirq", "late": "dpm_suspend_late",
             "early": "dpm_resume_early"}.get(first, "dpm_suspend" if down else "dpm_resume")
    return named


def paired_callbacks(events: list[Event]) -> list[Callback]:
    """Every device callback of the trace in the order they started, each
    start paired with its end. An end names the device and its driver
    string but not its parent, so it closes the newest open call of that
    (driver, name): async suspend interleaves devices, never one device's
    own calls. The one pairer: callbacks() (the record, the timeline) and
    the oracle (lab/oracle/observe.from_callbacks) read its result."""
    found: list[Callback] = []
    open_calls: dict[tuple[str, str], list[Callback]] = {}
    phase: Optional[str] = None
    for event in events:
        if event.name == "suspend_resume":
            match = SUSPEND_RESUME.match(event.body)
            if match and match["action"] in DPM_PHASES:
                phase = match["action"] if match["edge"] == "begin" else None
        elif event.name == "device_pm_callback_start":
            match = CALLBACK_START.match(event.body)
            if not match:
                continue
            call = Callback(event.ts, match["driver"], match["device"], match["parent"], match["info"],
                            match["verb"], _named_phase(match["info"], match["verb"], phase), cpu=event.cpu)
            found.append(call)
            open_calls.setdefault((call.driver.strip(), call.name), []).append(call)
        elif event.name == "device_pm_callback_end":
            match = CALLBACK_END.match(event.body)
            stack = open_calls.get((match["driver"].strip(), match["device"])) if match else None
            if not match or not stack:
                continue
            call = stack.pop()
            call.end_ts, call.err = event.ts, int(match["err"])
    return found


def overlapping_callbacks(paired: list[Callback]) -> dict[str, Any]:
    """How far device callbacks ran at once (async suspend and resume):
    {"overlapping": callbacks that started while another device's was still
    running, "on_two_cpus": those of them started on another CPU than that
    one, "example": the first such pair (on two CPUs if any) in words}. A
    callback that never returned overlaps nothing here."""
    active: list[Callback] = []
    overlapping, two_cpus, example, example_cpus = 0, 0, None, False
    for call in paired:
        active = [other for other in active if other.end_ts is not None and other.end_ts > call.ts]
        others = [other for other in active if other.device != call.device]
        if others:
            overlapping += 1
            elsewhere = [other for other in others if other.cpu != call.cpu]
            two_cpus += bool(elsewhere)
            if example is None or (elsewhere and not example_cpus):
                other = (elsewhere or others)[0]
                example, example_cpus = (f"{other.device} {other.label} on CPU {other.cpu} and {call.device} "
                                         f"{call.label} on CPU {call.cpu} at {call.ts:.6f}"), bool(elsewhere)
        if call.end_ts is not None:
            active.append(call)
    return {"overlapping": overlapping, "on_two_cpus": two_cpus, "example": example}


@dataclass
class HotplugSpan:
    """One non-boot CPU going offline (CPU_OFF, freeze_secondary_cpus) or
    online (CPU_ON, thaw_secondary_cpus) in the trace: begin and end (None:
    never ended) and the cpuhp_exit steps inside, (state, step, ret)."""
    cpu: int
    action: str
    begin: float
    end: Optional[float] = None
    steps: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def failed_step(self) -> Optional[tuple[int, int, int]]:
        """(state, step, ret) of the first hotplug step that returned an error, or None."""
        return next((step for step in self.steps if step[2] != 0), None)


def hotplug_spans(events: list[Event]) -> list[HotplugSpan]:
    """Every CPU_OFF[n] / CPU_ON[n] span of the trace, in order."""
    spans: list[HotplugSpan] = []
    open_spans: dict[int, HotplugSpan] = {}
    for event in events:
        if event.name == "suspend_resume":
            match = SUSPEND_RESUME.match(event.body)
            if not match or match["action"] not in ("CPU_OFF", "CPU_ON"):
                continue
            cpu = int(match["val"])
            if match["edge"] == "begin":
                open_spans[cpu] = HotplugSpan(cpu, match["action"], event.ts)
                spans.append(open_spans[cpu])
            elif cpu in open_spans and open_spans[cpu].action == match["action"]:
                open_spans.pop(cpu).end = event.ts
        elif event.name == "cpuhp_exit":
            match = CPUHP_EXIT.match(event.body)
            if match and int(match["cpu"]) in open_spans:
                open_spans[int(match["cpu"])].steps.append((int(match["state"]), int(match["step"]),
                                                            int(match["ret"])))
    return spans


Sequences = dict[str, list[dict[str, Any]]]  # per_device(): {device: [{"cb", "driver", "t", "us", "err"}, ...]}


def per_device(paired: list[Callback]) -> Sequences:
    """paired_callbacks() per device (device_id()), in order:
    {device: [{"cb": "<info>[<verb>]", "driver": d, "t": ts, "us": duration, "err": n}, ...]}
    A callback that never returned has us/err None."""
    sequences: Sequences = {}
    for call in paired:
        sequences.setdefault(call.device, []).append(
            {"cb": call.label, "driver": call.driver, "t": call.ts, "us": call.us, "err": call.err})
    return sequences


def callbacks(events: list[Event]) -> Sequences:
    """Per device, its PM callbacks in order (per_device() of paired_callbacks())."""
    return per_device(paired_callbacks(events))


EAGAIN = -11


def failed_callbacks(sequences: Sequences) -> list[tuple[str, str, int]]:
    """(device id, callback, err) for each callback that returned an error.
    ->prepare returning -EAGAIN is no failure: the PM core prepares the
    device again at once; nor is a positive return (it asks for
    direct_complete).  Its trace label carries no info ("[suspend]"), which
    only ->prepare and ->complete have."""
    return [(device, call["cb"], call["err"])
            for device, calls in sequences.items() for call in calls
            if call["err"] and not (call["cb"].startswith("[")
                                    and (call["err"] == EAGAIN or call["err"] > 0))]


# The kernel's own error numbers that user space never sees (include/linux/errno.h).
KERNEL_ERRNOS = {512: "ERESTARTSYS", 513: "ERESTARTNOINTR", 514: "ERESTARTNOHAND", 515: "ENOIOCTLCMD",
                 516: "ERESTART_RESTARTBLOCK", 517: "EPROBE_DEFER", 518: "EOPENSTALE", 519: "ENOPARAM",
                 521: "EBADHANDLE", 522: "ENOTSYNC", 523: "EBADCOOKIE", 524: "ENOTSUPP", 525: "ETOOSMALL",
                 526: "ESERVERFAULT", 527: "EBADTYPE", 528: "EJUKEBOX", 529: "EIOCBQUEUED", 530: "ERECALLCONFLICT"}


def errno_text(err: int) -> str:
    """A callback's return as every output shows it: -5 -> "EIO (-5)"; a
    number without a name stays the number ("-600")."""
    name = errno.errorcode.get(abs(err)) or KERNEL_ERRNOS.get(abs(err))
    return f"{name} ({err})" if name else str(err)


# Verbs of the transitions that go down (suspend, hibernate); the others
# (resume, thaw, restore, recover) come back up.
DOWN_VERBS = ("suspend", "freeze", "hibernate", "quiesce")


def phase_of(callback: str) -> str:
    """PM phase of a callback label from callbacks(): "noirq bus[suspend]" ->
    "suspend_noirq". 6.1 traces ->prepare and ->complete with an empty info
    ("[suspend]", "[resume]"): the direction of the verb tells them apart."""
    # String operations, not a regex: ".*?\s*\[" took quadratic time on a
    # long label of blanks or brackets (a corrupted record).
    body = callback[:-1] if callback.endswith("]") else ""
    start = body.find("[", body.rfind("]") + 1)
    if start < 0 or start == len(body) - 1:
        return callback
    info, verb = body[:start].split(), body[start + 1:]
    first = info[0] if info else ""
    if first == "preparing" or (not info and verb in DOWN_VERBS):
        return "prepare"
    if first == "completing" or not info:
        return "complete"
    if first in ("noirq", "late", "early"):
        return f"{verb}_{first}"
    return verb
