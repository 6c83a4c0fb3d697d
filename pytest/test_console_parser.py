"""lab.console on serial consoles recorded from real guests."""

from lab import console
from recordings_util import read

LINES = console.lines(read("console-cycles.log.gz"))
HANG = console.lines(read("console-hang.log.gz"))


def test_lines_have_no_carriage_returns():
    assert LINES and not any("\r" in line for line in LINES)


def test_cycle_slice_from_begin_to_end_marker():
    part = console.cycle_lines(LINES, 1)
    assert console.strip_timestamp(part[0]) == "pmlab: cycle 1 begin mem"
    assert console.strip_timestamp(part[-1]).startswith("pmlab: cycle 1 end mem status=0")
    assert any("PM: suspend entry (deep)" in line for line in part)


def test_cycle_1_is_not_cycle_10_or_100():
    for number in (1, 10, 100):
        part = console.cycle_lines(LINES, number)
        assert console.strip_timestamp(part[0]).startswith(f"pmlab: cycle {number} begin")


def test_unknown_cycle_is_empty():
    assert console.cycle_lines(LINES, 4242) == []


def test_s2idle_marker_in_freeze_cycle_only():
    freeze = console.cycle_lines(LINES, 3)
    assert any(console.S2IDLE_ENTERED in console.strip_timestamp(line) for line in freeze)
    assert not any(console.S2IDLE_ENTERED in console.strip_timestamp(line) for line in console.cycle_lines(LINES, 1))


def test_hibernation_cycle_includes_restore_boot():
    disk = console.cycle_lines(LINES, 4)
    text = "\n".join(disk)
    assert "PM: hibernation: Wrote" in text and "Linux version" in text
    assert "PM: hibernation: Hibernation image restored successfully." in text


def test_problems_found_in_fault_cycles_only():
    assert console.problems(console.cycle_lines(LINES, 1)) == []
    assert console.problems(console.cycle_lines(LINES, 3)) == []
    suspend_fault = console.problems(console.cycle_lines(LINES, 9))
    assert any("failed to suspend" in line for line in suspend_fault)
    resume_fault = console.problems(console.cycle_lines(LINES, 10))
    assert resume_fault


def test_hung_cycle_runs_to_end_of_console():
    part = console.cycle_lines(HANG, 200)
    assert console.strip_timestamp(part[0]).startswith("pmlab: cycle 200 begin")
    assert not any("pmlab: cycle 200 end" in line for line in part)
    assert part[-1] == HANG[-1] or part == HANG[HANG.index(part[0]):]


def test_panic_detection():
    assert not any(console.PANIC.search(line) for line in LINES)
    assert console.PANIC.search("[   1.0] Kernel panic - not syncing: VFS: Unable to mount root fs")
