"""Bad input is refused with a message naming the cause (lab.modes, lab.run)."""

import subprocess
import sys

import pytest

from lab import modes
from lab.errors import LabError
from conftest import REPO


@pytest.mark.parametrize("name, wake, message", [
    ("hibernate", None, "unknown mode 'hibernate'"),
    ("pm_test-sideways", None, "unknown pm_test level 'sideways'"),
    ("freeze", "rtc", "hangs under QEMU"),
    ("mem", "powerbutton", "does not apply to mode 'mem'"),
])
def test_bad_modes(name, wake, message):
    with pytest.raises(LabError, match=message):
        modes.parse_mode(name, wake)


@pytest.mark.parametrize("cycles, message", [("0", "at least 1"), ("-3", "at least 1"), ("ten", "whole number")])
def test_bad_cycle_counts(cycles, message):
    with pytest.raises(LabError, match=message):
        modes.plan(["mem"], cycles)


def test_default_plan_is_the_sample():
    assert [(m.name, m.wake, n) for m, n in modes.plan()] == [
        ("mem", "pmwakeup", 10), ("freeze", "powerbutton", 5), ("disk", "platform", 3)]


def test_pm_test_mode():
    mode = modes.parse_mode("pm_test-core")
    assert (mode.state, mode.pm_test, mode.kind, mode.wake) == ("mem", "core", "pm_test", "none")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cli.main", "run", "--no-dashboard", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (["--mode", "sleepy"], "unknown mode 'sleepy'"),
    (["--mode", "mem", "--cycles", "0"], "cycle count must be at least 1"),
    (["--mode", "mem", "--cycles", "-1"], "cycle count must be at least 1"),
    (["--mode", "mem", "--artifacts", "/nonexistent"], "missing kernel artifacts: /nonexistent/bzImage"),
    (["--mode", "mem", "--watchdog", "nap=3"], "bad watchdog 'nap=3'"),
    (["--mode", "mem", "--inject", "oops"], "bad --inject 'oops'"),
])
def test_cli_refuses_bad_input_before_any_guest(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "cycle " not in done.stdout  # no cycle ran


def test_cli_unreachable_libvirt_is_a_clear_error(tmp_path):
    """A libvirt that cannot be reached fails before any guest starts.
    (Needs some artifacts to get past the artifact check.)"""
    (tmp_path / "bzImage").write_bytes(b"k")
    (tmp_path / "initramfs.cpio.gz").write_bytes(b"i")
    done = run_cli("--mode", "mem", "--artifacts", str(tmp_path),
                   "--uri", f"qemu+unix:///system?socket={tmp_path}/no-such-socket")
    assert done.returncode == 2
    assert "cannot connect to libvirt at qemu+unix:///system" in done.stderr
