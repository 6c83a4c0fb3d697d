"""What a cycle does: the sleep mode, how the guest is woken, and checking
user input for both before any guest starts."""

from dataclasses import dataclass

from lab.virt import LabError

PM_TEST_LEVELS = ("freezer", "devices", "platform", "processors", "core")

# mode -> wake sources, the first is the default. Why these:
#   mem:    libvirt PM wakeup (QMP system_wakeup) after the PMSuspended event,
#           or the guest's RTC alarm (rtcwake), which costs whole seconds.
#   freeze: the ACPI power button (QMP system_powerdown). An RTC alarm from
#           s2idle hangs under QEMU, so it is not offered.
#   disk:   "platform": ACPI S4 powers the domain off and the lab starts it
#           again; "reboot": the guest reboots itself. Both resume from swap.
#   pm_test-LEVEL: the kernel stops at LEVEL and returns; nothing to wake.
WAKES = {
    "mem": ("pmwakeup", "rtc"),
    "freeze": ("powerbutton",),
    "disk": ("platform", "reboot"),
    "pm_test": ("none",),
}

# The default guest test sample: small but real.
DEFAULT_PLAN = (("mem", 10), ("freeze", 5), ("disk", 3))


@dataclass(frozen=True)
class Mode:
    name: str  # as given: mem, freeze, disk, pm_test-core, ...
    state: str  # written to /sys/power/state
    pm_test: str  # /sys/power/pm_test level, "none" for a real sleep
    wake: str

    @property
    def kind(self):
        return "pm_test" if self.pm_test != "none" else self.state


def parse_mode(name, wake=None):
    """Mode from its name and an optional wake source; LabError if unknown."""
    if name.startswith("pm_test-"):
        level = name[len("pm_test-"):]
        if level not in PM_TEST_LEVELS:
            raise LabError(f"unknown pm_test level '{level}' in mode '{name}' "
                           f"(levels: {', '.join(PM_TEST_LEVELS)})")
        kind, state, pm_test = "pm_test", "mem", level
    elif name in ("mem", "freeze", "disk"):
        kind, state, pm_test = name, name, "none"
    else:
        raise LabError(f"unknown mode '{name}' (modes: mem, freeze, disk, "
                       f"pm_test-{{{','.join(PM_TEST_LEVELS)}}})")
    wakes = WAKES[kind]
    if wake in (None, "", "default"):
        wake = wakes[0]
    if wake not in wakes:
        hint = " (an RTC alarm from s2idle hangs under QEMU)" if kind == "freeze" and wake == "rtc" else ""
        raise LabError(f"wake source '{wake}' does not apply to mode '{name}'{hint}; "
                       f"choose one of: {', '.join(wakes)}")
    return Mode(name, state, pm_test, wake)


def parse_cycles(value):
    try:
        cycles = int(value)
    except (TypeError, ValueError):
        raise LabError(f"cycle count must be a whole number, not '{value}'") from None
    if cycles <= 0:
        raise LabError(f"cycle count must be at least 1, not {cycles}")
    return cycles


def plan(modes=None, cycles=None, wake=None):
    """[(Mode, count)]: the given modes with `cycles` each, or the default sample
    (cycles, if given, replaces each default count)."""
    count = parse_cycles(cycles) if cycles is not None else None
    if not modes:
        return [(parse_mode(name), count or default) for name, default in DEFAULT_PLAN]
    return [(parse_mode(name, wake), count or 1) for name in modes]
