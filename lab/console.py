"""Serial console text: cutting out one cycle's lines and spotting trouble.

The console is evidence, not the clock (timing comes from the trace buffer).
It is the one record that survives everything: with no_console_suspend the
kernel prints up to the moment the guest sleeps or dies, and lines printed
between a hibernation snapshot and the power-off are only here.
"""

import re

TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+\] ")

# Written to /dev/kmsg by guest/pmlab-cycle around the write to /sys/power/state.
BEGIN = "pmlab: cycle {cycle} begin"
END = "pmlab: cycle {cycle} end"

# pm_pr_dbg() in s2idle_loop(): the guest is about to idle in s2idle. Pressing
# the power button earlier would abort the suspend instead of waking it.
S2IDLE_ENTERED = "PM: suspend-to-idle"

# Lines that mean the kernel itself reported a problem during the cycle.
PROBLEMS = re.compile(
    r"Kernel panic|BUG: |WARNING: |Oops|general protection fault|Call Trace:|"
    r"PM: Device .* failed to|PM: Some devices failed to|"
    r"PM: .*returns -\d+|PM: Failed to|Freezing .* failed|"
    r"PM: Image (?:not found|restoration failed)|PM: hibernation: Failed"
)
PANIC = re.compile(r"Kernel panic - not syncing")
# pmtest_ramguard.ko: the firmware's S3 resume changed a page the memory map
# gave the OS. The console keeps it even when the damage kills the report.
FIRMWARE_RAM = re.compile(r"pmtest_ramguard: (firmware changed RAM across S3: .*)")
# Lines about callback order (the dashboard's ordering-violation bucket).
ORDERING = re.compile(r"should not be sleeping|ordering violation", re.IGNORECASE)


def lines(text):
    """Console bytes decoded to lines, without the serial line's CRs."""
    return [line.rstrip("\r") for line in text.split("\n")]


def strip_timestamp(line):
    return TIMESTAMP.sub("", line)


def cycle_lines(console_lines, cycle):
    """The lines of one cycle: from its begin marker to its end marker.
    A cycle that never ended (hang, panic) runs to the end of the console.
    Markers are matched as whole messages, so cycle 1 does not match 10."""
    begin, end = BEGIN.format(cycle=cycle), END.format(cycle=cycle)
    start = None
    for index, line in enumerate(console_lines):
        text = strip_timestamp(line)
        if start is None:
            if text == begin or text.startswith(begin + " "):
                start = index
        elif text == end or text.startswith(end + " "):
            return console_lines[start:index + 1]
    return [] if start is None else console_lines[start:]


# ->prepare returning -EAGAIN is retried by the PM core, not a failure.
PREPARE_RETRY = re.compile(r"device_prepare\(\): .* returns -11$")


def problems(console_lines):
    return [line for line in console_lines
            if PROBLEMS.search(line) and not PREPARE_RETRY.search(line)]


def firmware_ram_changes(console_lines):
    """What pmtest_ramguard saw the firmware change across S3, one text a page."""
    return [match.group(1) for match in map(FIRMWARE_RAM.search, console_lines) if match]


def notable(console_lines):
    """The lines a passing cycle keeps when its full evidence is not kept
    (--keep failures): problems and lines about callback order."""
    return [line for line in console_lines
            if (PROBLEMS.search(line) and not PREPARE_RETRY.search(line)) or ORDERING.search(line)]


# pm_print_times (initcall_debug, or /sys/power/pm_print_times): the PM core's
# dev_info() before each device callback, e.g.
#   "[ 8.07] usb 2-1: PM: calling usb_dev_quiesce+0x0/0xa [usbcore] @ 24, parent: 1-0:1.0"
# (6.12 prints the function without its offset.) The callback is the one the
# core resolved (PM domain, type, class, bus or driver): the function name
# says which layer ran and which of its callbacks.
PM_CALLING = re.compile(r"(?:^|\] )(?P<driver>\S*) (?P<device>\S+): PM: calling (?P<callback>\w+)(?:\+0x| )")


def pm_calls(console_lines):
    """[(device, callback function)] of every pm_print_times 'calling' line,
    in console order."""
    return [(m.group("device"), m.group("callback"))
            for m in (PM_CALLING.search(line) for line in console_lines) if m]
