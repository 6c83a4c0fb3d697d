"""A cycle in the files Intel's sleepgraph reads, and sleepgraph run on them.

sleepgraph (tools/power/pm-graph/sleepgraph.py in the kernel tree) redraws a
recorded suspend from two files:

    sleepgraph.py -ftrace cycleN_ftrace.txt.gz -dmesg cycleN_dmesg.txt.gz -o cycleN.html

ftrace_text() and dmesg_text() write them from the guest's report
(guest/pmlab-cycle) and the cycle's record. The lines of sleepgraph's parser
they satisfy (TestProps, parseTraceLog, Data.extractErrorInfo):

  "# suspend-MMDDYY-HHMMSS HOST MODE KERNEL"   TestProps.stampfmt: without it
        sleepgraph stops ("data does not include the expected stamp"). From the
        record: host_start (UTC), the guest's name, the state written to
        /sys/power/state (mem, freeze, disk: sleepgraph's mode names), the
        kernel release. First line of both files.
  "# sysinfo | man:QEMU | plat:PROFILE"         TestProps.sysinfofmt (optional;
        shown in the page's header).
  "# command | pmlab-cycle ..."                 TestProps.cmdlinefmt (optional).
  "# tracer: nop" and the trace lines           the report's trace section as
        the guest printed it (ftrace_line_fmt_nop): suspend_resume,
        device_pm_callback_start/end, and the tracing_mark_write lines
        "SUSPEND START" / "RESUME COMPLETE" that guest/pmlab-cycle writes
        around the sleep, as sleepgraph does when it runs a test itself. With
        both markers sleepgraph takes them as the test's start and end
        (usetracemarkers); without them it would start at suspend_enter begin,
        which a hibernation has not.
  "[    7.569190] message"                     the dmesg file: the report's
        dmesg section (the guest's kernel log, cleared at every report) from
        this cycle's "pmlab: cycle N begin" to its end marker (console.
        cycle_lines()); sleepgraph lists its errors in the timeline.

Cost: the files repeat the report's trace, so lab.cycle writes them only for
cycles that did not pass, or for every cycle when asked (lab.run
--sleepgraph); `./pmlab sleepgraph RUN_DIR` writes them from any report later.
"""

import datetime
import os
import re
import subprocess

from lab import console, guest_report
from lab.records import sleepgraph_paths

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
# Where kernel/build extracts the tree (kernel/build: $PMLAB_BUILD or <repo>/build).
SCRIPT_IN_TREE = os.path.join("src", "linux", "tools", "power", "pm-graph", "sleepgraph.py")


MARKED_BEGIN = re.compile(r"\] pmlab: cycle (?P<n>\d{1,20}) begin\b")  # console.BEGIN with its timestamp


class SleepgraphError(Exception):
    pass


def script_path():
    """sleepgraph.py in the kernel tree kernel/build extracted; a clear error
    naming the path when the tree is not there."""
    build = os.environ.get("PMLAB_BUILD") or os.path.join(REPO, "build")
    path = os.path.join(build, SCRIPT_IN_TREE)
    if not os.path.isfile(path):
        raise SleepgraphError(f"{path} missing: sleepgraph comes from the kernel tree ./pmlab build extracts "
                              f"into <build directory>/src/linux (build directory: $PMLAB_BUILD, else "
                              f"<repo>/build; here {build}); run ./pmlab build once, or set PMLAB_BUILD to a "
                              "build directory that has the tree")
    return path


# ------------------------------------------------------------------ the two files

def stamp(record):
    """sleepgraph's stamp line for a cycle record (host_start, guest, mode, kernel)."""
    started = datetime.datetime.fromisoformat(record["host_start"])
    state = "mem" if str(record.get("mode", "")).startswith("pm_test") else str(record.get("mode"))
    kernel = record.get("kernel")
    release = (kernel.get("kernelrelease") if isinstance(kernel, dict) else kernel) or "unknown"
    host, release = (re.sub(r"\s", "_", str(word)) for word in (record.get("guest") or "guest", release))
    return f"# suspend-{started:%m%d%y-%H%M%S} {host} {state} {release}"


def _header(record):
    profile = record.get("profile") or "qemu"
    return [stamp(record), f"# sysinfo | man:QEMU | plat:{profile}",
            f"# command | pmlab-cycle cycle={record.get('cycle')} mode={record.get('mode')}"]


def ftrace_text(report, record, parts=None):
    """The ftrace file: the stamp lines, then the report's trace section
    (`parts`: the report's sections, when already split)."""
    trace = (parts or guest_report.sections(report)).get("trace")
    if trace is None:
        raise SleepgraphError(f"cycle {record.get('cycle')}: the report has no trace section")
    return "\n".join(_header(record) + [trace]) + "\n"


def dmesg_text(report, record, parts=None):
    """The dmesg file: the stamp line, then the cycle's kernel log lines."""
    log = (parts or guest_report.sections(report)).get("dmesg")
    if log is None:
        raise SleepgraphError(f"cycle {record.get('cycle')}: the report has no dmesg section "
                              "(recorded before guest/pmlab-cycle printed one)")
    lines = log.splitlines()
    # The number the guest marked: a cycle renumbered on import (pipelines/nightly)
    # keeps its report, whose log holds its one cycle's markers (the log is
    # cleared at every report).
    marked = [match["n"] for match in map(MARKED_BEGIN.search, lines) if match]
    lines = console.cycle_lines(lines, int(marked[-1]) if marked else record["cycle"])
    return "\n".join([stamp(record)] + lines) + "\n"


def write_files(rundir, record, report):
    """Both files next to the cycle's report (RunDir.write_file, gzip like
    the report): the record fields {"sleepgraph_ftrace": path, "sleepgraph_dmesg": path}."""
    ftrace_path, dmesg_path = sleepgraph_paths(record["cycle"])
    parts = guest_report.sections(report)
    ftrace, dmesg = ftrace_text(report, record, parts), dmesg_text(report, record, parts)  # both, or neither file
    return {"sleepgraph_ftrace": rundir.write_file(ftrace_path, ftrace, compress=True),
            "sleepgraph_dmesg": rundir.write_file(dmesg_path, dmesg, compress=True)}


# ------------------------------------------------------------------ running it

def run(ftrace, dmesg, html, result=None, devdump=False, timeout=300):
    """sleepgraph.py on the two files: the HTML timeline at `html`; with
    `result`, its result file (read_result()); with devdump, its per-device
    dump on stdout (pytest/test_sleepgraph_crosscheck.py reads it). Returns the CompletedProcess; raises
    SleepgraphError when sleepgraph fails or writes no page."""
    command = [PYTHON, script_path(), "-ftrace", ftrace, "-dmesg", dmesg, "-o", html]
    if result:
        command += ["-result", result]
    if devdump:
        command += ["-devdump", "-verbose"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not os.path.isfile(html):
        raise SleepgraphError(f"{' '.join(command)} exited {done.returncode} without writing {html}: "
                              f"{(done.stdout + done.stderr).strip()[-500:]}")
    return done


def read_result(path):
    """sleepgraph's -result file (SystemValues.outputResult): {"result": "pass",
    "mode": "mem", "suspend": ms, "resume": ms, ...}."""
    values = {}
    with open(path) as text:
        for line in text:
            key, sep, value = line.partition(":")
            if not sep:
                continue
            value = value.strip()
            try:
                values[key.strip()] = float(value)
            except ValueError:
                values[key.strip()] = value
    return values
