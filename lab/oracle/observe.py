"""Observed device callbacks, from the two records a guest keeps:

- the pmtest log (kernel/modules/pmtest): the driver callback that ran, with
  the PM event of the phase and its return value, for our test devices;
- the trace buffer: power:device_pm_callback_start/end for every device,
  placed in a phase by the power:suspend_resume dpm_* markers.
Both become lists of Call, in the order the kernel ran them.
"""

import re
from dataclasses import dataclass, field
from typing import Optional

from lab import pmtest_log
from lab import trace as trace_mod

from . import rules

# The driver pmtest binds QEMU's edu device to at load.
EDU_DEFAULT = "pmtest_edu_pm"
PCI_NAME = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PMTEST_NAME = re.compile(r"^(?P<driver>pmtest_(?:full|compat|legacy|async))\.(?P<id>\d{1,20})$")
# pmtest devices named by others: the ACPI core names the devices of the
# lab's SSDT after their _HID; the syscore_ops have a fixed name.
PMTEST_OTHER_NAMES = ((re.compile(r"^PMTS0001:[0-9a-f]{2}$"), "pmtest_acpi"),
                      (re.compile(r"^pmtest_syscore$"), "pmtest_syscore"),
                      (re.compile(r"^pmtest_domain\.\d{1,20}/pd$"), "pmtest_pm_domain"),
                      (re.compile(r"^pmtest_domain\.\d{1,20}$"), "pmtest_domain"),
                      (re.compile(r"^pmtest_genpd\.\d{1,20}$"), "pmtest_genpd"),
                      (re.compile(r"^pmtest_typed\.\d{1,20}/type$"), "pmtest_type_ops"),
                      (re.compile(r"^pmtest_typed\.\d{1,20}$"), "pmtest_typed"),
                      (re.compile(r"^pmtest_unconverted\.\d{1,20}/type$"), "pmtest_unconverted_type_ops"),
                      (re.compile(r"^pmtest_unconverted\.\d{1,20}$"), "pmtest_unconverted"),
                      (re.compile(r"^pmtest_class\.\d{1,20}$"), "pmtest_class"),
                      (re.compile(r"^pmtest\.aux\.\d{1,20}$"), "pmtest_aux"),
                      (re.compile(r"^pmtest_skip_resume\.\d{1,20}$"), "pmtest_skip_resume"),
                      (re.compile(r"^pmtest_direct\.\d{1,20}$"), "pmtest_direct"),
                      (re.compile(r"^pmtest_no_direct\.\d{1,20}$"), "pmtest_no_direct"),
                      (re.compile(r"^PMTS000[24]:[0-9a-f]{2}$"), "pmtest_acpi_smart"),
                      (re.compile(r"^PMTS0003:[0-9a-f]{2}$"), "pmtest_acpi_smart_skip"))

# dpm_* phase marker (lab.trace.DPM_PHASES) -> (side, level) of the callbacks run inside it
PHASES = {
    "dpm_prepare": ("prepare", 0), "dpm_suspend": ("suspend", 1),
    "dpm_suspend_late": ("suspend", 2), "dpm_suspend_noirq": ("suspend", 3),
    "dpm_resume_noirq": ("resume", 3), "dpm_resume_early": ("resume", 2),
    "dpm_resume": ("resume", 1), "dpm_complete": ("complete", 0),
}


@dataclass
class Call:
    index: int                 # position in the source, for evidence
    device: str
    callback: str              # dev_pm_ops member (or "register" / legacy suspend|resume)
    event: str                 # PM event of the phase (legacy: the message received)
    ret: int
    source: str                # "pmtest" or "trace"
    driver: Optional[str] = None   # a key of rules.DRIVERS when known
    text: str = ""
    tags: set[str] = field(default_factory=set)
    # a trace call's start time and CPU: two CPUs' calls stamped with the
    # same time are in no order the trace can tell (judge._order)
    ts: Optional[float] = None
    cpu: Optional[int] = None
    # the trace's end time (None with a ts: never returned)
    end: Optional[float] = None

    def __str__(self) -> str:
        return self.text or (f"{self.device} {self.callback} event={self.event} ret={self.ret}")


def pmtest_driver(device: str, bound: Optional[dict[str, str]] = None) -> Optional[str]:
    """The rules.DRIVERS identity of a pmtest device.  A PCI device is the
    edu device, whose identity is the driver bound to it (`bound`, from
    bound_drivers(): pmtest_edu_pm, pmtest_edu_legacy, or an older
    module's pmtest_edu), EDU_DEFAULT when nothing says."""
    match = PMTEST_NAME.match(device)
    if match:
        return match["driver"]
    if PCI_NAME.match(device):
        driver = (bound or {}).get(device)
        return driver if driver in rules.DRIVERS else EDU_DEFAULT
    for pattern, driver in PMTEST_OTHER_NAMES:
        if pattern.match(device):
            return driver
    return None


def bound_drivers(trace_calls: list[Call]) -> dict[str, str]:
    """{PCI device name: driver name} from from_trace()'s calls, whose
    device identities carry the driver the PM core saw bound."""
    bound: dict[str, str] = {}
    for call in trace_calls:
        name, _, driver = call.device.partition(" (")
        if PCI_NAME.match(name) and driver:
            bound[name] = driver.rstrip(")")
    return bound


def loaded_drivers(bound: dict[str, str]) -> dict[str, str]:
    """What a kernel that loaded the same pmtest module binds: its default
    edu driver, where `bound` (another kernel's) has the edu device moved to
    pmtest_edu_legacy (the boot kernel of a restore loads the module
    afresh)."""
    return {device: EDU_DEFAULT if driver == "pmtest_edu_legacy" else driver
            for device, driver in bound.items()}


def from_pmtest(text: Optional[str], bound: Optional[dict[str, str]] = None) -> list[Call]:
    """Calls from pmtest log lines (debugfs, console or trace copies);
    `bound` as for pmtest_driver()."""
    calls: list[Call] = []
    for entry in pmtest_log.parse(text):
        calls.append(Call(len(calls), entry["dev"], entry["cb"], entry["event"], entry["ret"],
                          "pmtest", pmtest_driver(entry["dev"], bound),
                          f"pmtest: seq={entry['seq']} dev={entry['dev']} cb={entry['cb']} "
                          f"event={entry['event']} ret={entry['ret']}"))
    return calls


def pmtest_parents(calls: list[Call], tree: dict[str, str]) -> dict[str, str]:
    """Parent of every pmtest device in `calls`: as the kernel reported it
    (`tree`, {device name: parent name}: tree_from_trace() of the same boot's
    trace, whose callback events name each device's parent, so the module's
    depth and fanout are read, never assumed), and, for children added by the
    `child` knob, the device whose callback registered it (its "register"
    record comes right before that callback's own record). A device the
    tree does not name has no parent here: its order is not checked."""
    parents: dict[str, str] = {}
    for position, call in enumerate(calls):
        if call.callback == "register":
            later = [c for c in calls[position + 1:] if c.callback != "register"]
            if later:
                parents[call.device] = later[0].device
    for call in calls:
        if call.device not in parents and tree.get(call.device) is not None:
            parents[call.device] = tree[call.device]
    return parents


def tree_from_trace(trace_parents: dict[str, str]) -> dict[str, str]:
    """{device name: parent name} from from_trace()'s parents (keyed by
    trace identity), for pmtest_parents()."""
    return {device_name(device): parent for device, parent in trace_parents.items()}


def device_name(device: str) -> str:
    """The kernel's device name of a Call.device (trace identities carry the
    driver in parentheses: lab.trace.device_id)."""
    return trace_mod.split_device_id(device)[0]


def from_trace(text: str) -> tuple[list[Call], dict[str, str]]:
    """from_callbacks() of a trace's text."""
    return from_callbacks(trace_mod.paired_callbacks(trace_mod.parse(text)))


def from_callbacks(paired: list[trace_mod.Callback]) -> tuple[list[Call], dict[str, str]]:
    """(calls, parents) from the trace's paired callbacks
    (lab.trace.paired_callbacks): every device's callbacks inside the PM
    core's phases, named as the PM core dispatched them, with the parent the
    trace event reports."""
    calls: list[Call] = []
    parents: dict[str, str] = {}
    for traced in paired:
        if traced.phase is None:
            continue
        side, level = PHASES[traced.phase]
        verb = traced.verb
        if side == "prepare" and verb in rules.RESUME_EVENTS:
            # dpm_prepare undoing a ->prepare (a child appeared during it)
            callback = "complete"
        elif side in ("prepare", "complete"):
            callback = side
        elif verb in rules.CALLBACKS:
            callback = rules.CALLBACKS[verb][level - 1]
        else:
            continue
        # Names are not unique (an ACPI companion shares its device's
        # name), so a device is its name and its driver/bus string.
        device = traced.device
        if traced.parent != "none":
            parents[device] = traced.parent
        driver = traced.driver.strip()
        call = Call(len(calls), device, callback, verb, 0, "trace",
                    driver if driver in rules.EVERY_LEVEL_IN_TRACE else None,
                    f"{traced.ts:.6f} {traced.driver} {traced.name} {callback} [{verb}]",
                    ts=traced.ts, cpu=traced.cpu, end=traced.end_ts)
        if side == "prepare" and callback == "complete":
            call.tags.add("retry")
        if traced.err is not None:
            call.ret = traced.err
            call.text += f" err={call.ret}"
        calls.append(call)
    return calls, parents


def split_kernels(calls: list[Call]) -> list[list[Call]]:
    """Split pmtest records read from a console into one list per kernel
    instance.  Within a kernel the sequence number goes up by one per record;
    a fresh boot restarts it at 1 and a restored image continues from its
    snapshot, so any jump marks another kernel."""
    segments: list[list[Call]] = []
    current: list[Call] = []
    last: Optional[int] = None
    for call in calls:
        found = re.search(r"seq=(\d+)", call.text)
        seq = int(found.group(1)) if found else None
        if seq is not None and last is not None and seq != last + 1 and current:
            segments.append(current)
            current = []
        current.append(call)
        if seq is not None:
            last = seq
    if current:
        segments.append(current)
    return segments
