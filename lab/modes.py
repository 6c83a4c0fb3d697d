"""What a cycle does: the sleep mode, how the guest is woken, and checking
user input for both before any guest starts. Also the one grammar every
command uses to name modes (--mode MODE[/WAKE][*N]; see GRAMMAR)."""

from dataclasses import dataclass

from lab.errors import LabError

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


# The one mode grammar of every command (./pmlab run, commit, nightly, soak,
# bisect, bench, lava; pytest --mode):
#
#   --mode MODE[/WAKE][*N]     repeat the option, or join items with commas
#
# e.g. --mode mem*10 --mode freeze*5 --mode disk/reboot*3, or
# --mode mem*3,freeze*2,disk. MODE*N is MODE given N times: a run runs the
# list once in order, a nightly or soak repeats it (N weighs the mode).
GRAMMAR = "MODE[/WAKE][*N], e.g. mem*10, disk/reboot*3 or mem*3,freeze*2,disk"
MAX_COUNT = 100000


def parse_items(items):
    """--mode values -> [(name, wake or None, count or None)], one per item.
    Each name and wake is checked (LabError naming the item and the fix)."""
    out = []
    for value in items or ():
        for item in str(value).split(","):
            out.append(_parse_item(item.strip(), value))
    return out


def _parse_item(item, value):
    if not item:
        raise LabError(f"empty mode in --mode '{value}': use {GRAMMAR}")
    if "=" in item:  # the old --smoke grammar
        name, _, count = item.partition("=")
        raise LabError(f"'{item}' is the old MODE=COUNT form: write {name}*{count or 1} "
                       f"(--mode {GRAMMAR})")
    body, star, count_text = item.partition("*")
    count = None
    if star:
        if not count_text.isdigit() or not 1 <= int(count_text) <= MAX_COUNT:
            raise LabError(f"bad count in mode '{item}': write MODE*N with N a whole number "
                           f"from 1 to {MAX_COUNT} (--mode {GRAMMAR})")
        count = int(count_text)
    name, slash, wake = body.partition("/")
    if slash and not wake:
        raise LabError(f"mode '{item}' names no wake source after '/' (--mode {GRAMMAR})")
    parse_mode(name.strip(), wake.strip() or None)  # LabError for an unknown mode or wake
    return name.strip(), wake.strip() or None, count


def expand(items, default=None):
    """--mode values -> the mode list, one "MODE[/WAKE]" string per cycle of
    one round (mem*3 -> mem, mem, mem); `default` when no item is given."""
    if not items:
        items = default or ()
    out = []
    for name, wake, count in parse_items(items):
        out += [f"{name}/{wake}" if wake else name] * (count or 1)
    return out


def describe(names):
    """The inverse of expand for a log line: mem, mem, disk -> "mem*2,disk"."""
    runs = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return ",".join(name if count == 1 else f"{name}*{count}" for name, count in runs)


def mode_of(text, wake=None):
    """One expanded item ("mem", "disk/reboot") -> Mode; `wake` applies when
    the item names none."""
    name, _, item_wake = str(text).partition("/")
    return parse_mode(name, item_wake or wake)


def plan(modes=None, cycles=None, wake=None):
    """[(Mode, count)] from --mode values in the grammar above, or the default
    sample (mem*10, freeze*5, disk*3). `cycles` is the older spelling of a
    count (--mode mem --cycles 10 is mem*10; alone it replaces each default
    count); an item with its own *N and --cycles together is refused. `wake`
    (--wake) applies to every item that names no wake source."""
    count = parse_cycles(cycles) if cycles is not None else None
    if not modes:
        return [(parse_mode(name), count or default) for name, default in DEFAULT_PLAN]
    out = []
    for name, item_wake, item_count in parse_items(modes):
        if item_count is not None and count is not None:
            raise LabError(f"mode '{name}*{item_count}' has its count already: drop --cycles "
                           f"(--mode {GRAMMAR})")
        out.append((parse_mode(name, item_wake or wake), item_count or count or 1))
    return out


def numbered(plan):
    """plan() [(Mode, count)] -> (cycle number from 1, Mode), one a cycle."""
    number = 0
    for mode, count in plan:
        for _ in range(count):
            number += 1
            yield number, mode
