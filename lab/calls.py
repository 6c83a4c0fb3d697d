"""Which kernel functions ran for which device: kprobe events on named
functions, for the callbacks the PM core does not name itself. pm_print_times
names the callback the core resolved (pci_pm_quiesce); what that layer then
runs of its driver's (virtio_pci_quiesce or virtio_pci_freeze) takes a probe.

A cycle's "calls" knob (lab.request.KNOBS), FUNCTION[,FUNCTION...], each a
function whose first argument is a struct device * (a dev_pm_ops member):
  - the running kernel: guest/pmlab-cycle adds a kprobe event per function
    for the cycle, in the trace buffer with the device's name; a function
    the kernel does not have is the cycle's error, naming it;
  - the boot kernel of a hibernation restore, which is gone before it could
    report: boot_params() are words for its command line (kprobe_event=
    defines and enables the same events, tp_printk prints each hit on the
    console; guest/init turns tp_printk off once that kernel boots on).
    Not in a LAVA job: every boot of a job has the same command line
    (lab/lava.py), so there the running kernel's probes only.
observed() reads both back for the record's "calls".

A hit, in the trace text and (tp_printk) on the console alike:
  call_virtio_pci_quiesce: (virtio_pci_quiesce+0x0/0x20) dev="0000:00:0b.0"
(the trace prints the address instead of the symbol: "(ffffffff8158f0a0)").
"""

import re

GROUP = "pmlab_calls"
EVENT_PREFIX = "call_"
# A C identifier short enough for its event name (MAX_EVENT_NAME_LEN 64).
FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,57}")
# struct device's kobj.name, the first member of its first member.
DEVICE_ARG = "dev=+0(+0($arg1)):string"
HIT = re.compile(r"\b" + EVENT_PREFIX + r"(?P<function>\w+): \((?:(?P=function)\+0x[0-9a-f]+/0x[0-9a-f]+"
                 r"(?: \[\w+\])?|[0-9a-f]+)\) dev=\"(?P<device>[^\"]*)\"")


def functions(value):
    """The knob's value as a list of function names; ValueError naming a bad one."""
    names = [name.strip() for name in value.split(",")]
    bad = [name for name in names if not FUNCTION.fullmatch(name)]
    if bad or not names:
        raise ValueError(f"calls: {bad[0] if bad else value!r} is not a function name "
                         "(FUNCTION[,FUNCTION...], C identifiers of at most 58 characters)")
    return names


def boot_params(names):
    """Kernel command line words that probe `names` in a boot kernel and
    print each hit on its console."""
    definitions = ";".join(f"p:{GROUP}/{EVENT_PREFIX}{name},{name},{DEVICE_ARG}" for name in names)
    return f"kprobe_event={definitions} tp_printk"


def hits(lines):
    """[(function, device)] of the hit lines among `lines`, in order."""
    return [(m.group("function"), m.group("device")) for m in map(HIT.search, lines) if m]


def observed(trace_events, console_lines):
    """The record's "calls": [{"function", "device", "kernel"}], the running
    kernel's (its trace) first, then the boot kernel's of a restore (its
    console); [] when the cycle probed nothing."""
    running = hits(f"{event.name}: {event.body}" for event in trace_events
                   if event.name.startswith(EVENT_PREFIX))
    boot = hits(console_lines)
    return ([{"function": f, "device": d, "kernel": "running"} for f, d in running] +
            [{"function": f, "device": d, "kernel": "boot"} for f, d in boot])
