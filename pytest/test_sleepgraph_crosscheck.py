"""pmlab's timing against Intel's sleepgraph on the same cycles.

sleepgraph (the kernel tree's tools/power/pm-graph/sleepgraph.py, run as a
subprocess on the two files lab/sleepgraph.py writes) is read through its
own outputs only: its -result file (suspend, resume ms) and its -devdump
listing (every device callback's start and end per phase). pmlab's numbers
come from the functions the record is made with: lab.trace.timing()
(suspend_ms, resume_ms) and lab.trace.callbacks() (each callback's µs, the
record's "callbacks" and the dashboard's latency table).

Agreement: within 1 ms or 2 %, whichever is larger. Per device callback the
two agree directly. Suspend and resume time are defined differently, and the
test checks the relation lab/README.md ("sleepgraph") explains:

  sleepgraph suspend = pmlab suspend_ms + machine_suspend begin -> end
      (sleepgraph ends the suspend where machine_suspend ENDS for mem and
      disk; pmlab where it begins, before the platform sleeps)
  sleepgraph resume  = pmlab resume_ms + thaw_processes end -> "RESUME COMPLETE"
      (sleepgraph ends the resume at its user-space marker, pmlab at the
      kernel's last phase marker)

Recordings: pytest/recordings/sleepgraph-{mem,disk}.txt.gz are the reports
of cycles 2 (S3) and 3 (S4) of `./pmlab run --mode 'mem*2,disk'
--sleepgraph` on a guest image with guest/pmlab-cycle's markers and dmesg
section; sleepgraph-cycles.jsonl holds their records (without the bulky
fields). Plus one live S3 cycle (marked guest).
"""

import gzip
import json
import os
import re

import pytest

from lab import guest_report, modes, sleepgraph, trace
from lab.records import RunDir

RECORDINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recordings")
LIVE_CYCLE = 9101  # far above any sample's numbers: unique in a shared run


def close(ours, theirs):
    """Within 1 ms or 2 % (of pmlab's figure), whichever is larger."""
    return abs(ours - theirs) <= max(1.0, 0.02 * abs(ours))


def recorded(name):
    with gzip.open(os.path.join(RECORDINGS, f"sleepgraph-{name}.txt.gz"), "rt") as text:
        report = text.read()
    with open(os.path.join(RECORDINGS, "sleepgraph-cycles.jsonl")) as lines:
        records = [json.loads(line) for line in lines]
    mode = {"mem": "mem", "disk": "disk"}[name]
    return report, next(record for record in records if record["mode"] == mode)


PHASE_LINE = re.compile(r"^\s*(?P<phase>[a-z_]+\d*): (?P<start>[\d.]+) - (?P<end>[\d.]+) \((?P<n>\d+) devices\)$")
DEVICE_LINE = re.compile(r"^\s*\d+\) (?P<name>.*?) - (?P<start>-?[\d.]+) - (?P<end>-?[\d.]+)$")
DETAIL_LINE = re.compile(r"^\s*(?P<what>[a-z ]+): (?P<t>[\d.]+)$")


def read_devdump(stdout):
    """sleepgraph -devdump -verbose output (Data.printDetails): {"phases":
    {phase: [(device, start, end), ...]}, "times": {"kernel suspend start": t,
    "machine suspended": t, "machine resumed": t, "kernel resume end": t, ...}},
    times in seconds of the trace clock. A device's name is the kernel's,
    with "[2]", "[3]"... when it has several callbacks in one phase."""
    phases, times, phase = {}, {}, None
    for line in stdout.splitlines():
        match = PHASE_LINE.match(line)
        if match:
            phase = match["phase"]
            phases[phase] = []
            continue
        match = DEVICE_LINE.match(line)
        if match and phase is not None:
            phases[phase].append((match["name"].strip(), float(match["start"]), float(match["end"])))
            continue
        match = DETAIL_LINE.match(line)
        if match:
            times[match["what"].strip()] = float(match["t"])
    return {"phases": phases, "times": times}


def sleepgraph_view(ftrace, dmesg, out):
    """sleepgraph's own figures for one cycle: (result file values, devdump)."""
    html, result = os.path.join(out, "cycle.html"), os.path.join(out, "cycle.result")
    done = sleepgraph.run(ftrace, dmesg, html, result, devdump=True)
    return sleepgraph.read_result(result), read_devdump(done.stdout)


def assert_agrees(report, ftrace, dmesg, out, mode):
    events = trace.parse(guest_report.sections(report)["trace"])
    timing = trace.timing(events)
    result, dump = sleepgraph_view(ftrace, dmesg, out)
    assert result["result"] == "pass" and result["mode"] == mode, result

    # Suspend and resume: the explained relation (module docstring).
    marks = trace.markers(events)
    machine = [ts for ts, action, val, begin in marks if action == "machine_suspend"]
    written = {event.body: event.ts for event in events if event.name == "tracing_mark_write"}
    assert set(written) == {"SUSPEND START", "RESUME COMPLETE"}, \
        f"guest/pmlab-cycle's sleepgraph markers missing from the trace: {sorted(written)}"
    in_machine_suspend = (machine[-1] - machine[0]) * 1000
    after_thaw = (written["RESUME COMPLETE"] - marks[-1][0]) * 1000
    assert marks[-1][1] == "thaw_processes"
    expected_suspend = timing["suspend_ms"] + in_machine_suspend
    expected_resume = timing["resume_ms"] + after_thaw
    assert close(expected_suspend, result["suspend"]), \
        (f"sleepgraph suspend {result['suspend']} ms, pmlab {timing['suspend_ms']} ms + machine_suspend "
         f"{in_machine_suspend:.3f} ms = {expected_suspend:.3f}")
    assert close(expected_resume, result["resume"]), \
        (f"sleepgraph resume {result['resume']} ms, pmlab {timing['resume_ms']} ms + thaw end to RESUME "
         f"COMPLETE {after_thaw:.3f} ms = {expected_resume:.3f}")

    # Every device callback pmlab timed is one of sleepgraph's rows (same
    # device name, same start to the µs; sleepgraph adds "[2]"... to a name
    # it meets twice in one phase), with the same duration.
    rows = {}
    for phase, devices in dump["phases"].items():
        for name, start, end in devices:
            base = name[:name.rindex("[")] if name.endswith("]") and "[" in name else name
            rows.setdefault((base, round(start, 6)), []).append((phase, name, end))
    matched, worst = set(), 0.0
    calls = [(device, call) for device, sequence in trace.callbacks(events).items() for call in sequence]
    # Not vacuous: since the config diet (no legacy ptys, no VTs) an S3 cycle
    # times ~680 callbacks of ~300 devices; the recordings predate it (>1000).
    assert len(calls) > 500, f"only {len(calls)} device callbacks timed in a whole cycle"
    for device, call in calls:
        name, _driver = trace.split_device_id(device)
        key = (name, round(call["t"], 6))
        assert key in rows, f"{device} {call['cb']} at {call['t']:.6f} is not in sleepgraph's device list"
        phase, shown, end = rows[key][0]
        theirs = (end - call["t"]) * 1000
        ours = call["us"] / 1000
        assert close(ours, theirs), f"{device} {call['cb']}: pmlab {ours:.3f} ms, sleepgraph {theirs:.3f} ms"
        worst = max(worst, abs(ours - theirs))
        matched.add(key)
    # sleepgraph's other rows are the kernel's global spans (suspend_resume
    # events outside device callbacks, e.g. syscore_suspend), not devices.
    others = {name for key, entries in rows.items() if key not in matched for _, name, _ in entries}
    assert others <= {action for _, action, _, _ in marks}, others
    return {"suspend": (timing["suspend_ms"], result["suspend"]), "resume": (timing["resume_ms"], result["resume"]),
            "callbacks": len(calls), "worst_ms": worst}


@pytest.mark.kernel  # sleepgraph.py is the kernel tree's
@pytest.mark.parametrize("name", ["mem", "disk"])
def test_recorded_cycle_agrees_with_sleepgraph(name, tmp_path):
    report, record = recorded(name)
    rundir = RunDir(str(tmp_path), "run", link_latest=False)
    files = sleepgraph.write_files(rundir, record, report)  # the lab's writer, as DrivenCycle.finish calls it
    ftrace, dmesg = (rundir.file(files[field]) for field in ("sleepgraph_ftrace", "sleepgraph_dmesg"))
    numbers = assert_agrees(report, ftrace, dmesg, str(tmp_path), record["mode"])
    # The record's figures are the ones compared.
    assert numbers["suspend"][0] == record["suspend_ms"] and numbers["resume"][0] == record["resume_ms"]


def test_files_carry_sleepgraphs_header_and_only_the_cycles_kernel_log():
    report, record = recorded("disk")
    ftrace = sleepgraph.ftrace_text(report, record)
    dmesg = sleepgraph.dmesg_text(report, record)
    stamp = "# suspend-120426-185605 pmlab-rec1-w0-1 disk 6.1.192+"
    assert ftrace.splitlines()[0] == stamp and dmesg.splitlines()[0] == stamp
    assert "# tracer: nop" in ftrace.splitlines()[:5]
    kernel_log = dmesg.splitlines()[1:]
    assert kernel_log[0].endswith("pmlab: cycle 3 begin disk")
    assert kernel_log[-1].endswith("pmlab: cycle 3 end disk status=0")
    assert all(line.startswith("[") for line in kernel_log)
    # A cycle renumbered on import (pipelines/nightly) keeps the guest's markers.
    assert sleepgraph.dmesg_text(report, dict(record, cycle=77)).splitlines()[1:] == kernel_log


def test_a_report_without_the_dmesg_section_is_refused_by_name(recording):
    old = gzip.decompress(recording("report-mem.txt.gz", "rb")).decode()  # recorded before the section
    record = {"cycle": 1, "mode": "mem", "guest": "g", "host_start": "2026-12-04T10:00:00+00:00"}
    with pytest.raises(sleepgraph.SleepgraphError, match="cycle 1: the report has no dmesg section"):
        sleepgraph.dmesg_text(old, record)


def test_missing_sleepgraph_names_the_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PMLAB_BUILD", str(tmp_path))
    with pytest.raises(sleepgraph.SleepgraphError) as error:
        sleepgraph.script_path()
    assert str(tmp_path / "src/linux/tools/power/pm-graph/sleepgraph.py") + " missing" in str(error.value)


@pytest.mark.guest
def test_live_s3_cycle_agrees_with_sleepgraph(lab_run, tmp_path):
    """One S3 cycle in a real guest, its sleepgraph files written by the lab
    (lab.run --sleepgraph), cross-checked like the recordings."""
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      lab_run["watchdogs"], lab_run["worker"] + "-sleepgraph", connection=lab_run["connection"],
                      sleepgraph_files=True)
    try:
        record = session.cycle(modes.parse_mode("mem"), LIVE_CYCLE)
    finally:
        session.close()
    assert record["verdict"] == "pass", f"{record['verdict']} in {record.get('phase')}: {record.get('reason')}"
    assert "sleepgraph_error" not in record, record["sleepgraph_error"]
    path = lab_run["rundir"].file
    with gzip.open(path(record["report"]), "rt") as text:
        report = text.read()
    numbers = assert_agrees(report, path(record["sleepgraph_ftrace"]), path(record["sleepgraph_dmesg"]),
                            str(tmp_path), "mem")
    assert numbers["suspend"][0] == record["suspend_ms"] and numbers["resume"][0] == record["resume_ms"]


@pytest.mark.kernel  # sleepgraph.py is the kernel tree's
def test_pipeline_draws_a_sample_of_a_run_next_to_its_reports(tmp_path):
    """./pmlab sleepgraph on a run of the two recorded cycles: the files are
    written from the reports (the records have none), then the pages."""
    import shutil
    import subprocess
    import sys
    from lab.records import append_records, cycles_path
    run = tmp_path / "run"
    (run / "reports").mkdir(parents=True)
    records = []
    for name in ("mem", "disk"):
        _, record = recorded(name)
        shutil.copy(os.path.join(RECORDINGS, f"sleepgraph-{name}.txt.gz"), run / record["report"])
        records.append(dict(record, status="done"))
    append_records(cycles_path(str(run)), records)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-m", "cli.main", "sleepgraph", str(run), "--sample", "2"],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(run / "sleepgraph" / "sleepgraph.json") as text:
        entries = json.load(text)["cycles"]
    assert [entry["cycle"] for entry in entries] == [2, 3]
    for entry in entries:
        assert (run / entry["html"]).stat().st_size > 100_000  # sleepgraph's page, devices and all
        assert entry["sleepgraph"]["result"] == "pass"
        assert (run / "reports" / f"cycle{entry['cycle']}_ftrace.txt.gz").is_file()
    assert entries[0]["sleepgraph"]["suspend_ms"] == 266.726  # recorded S3: see lab/README.md's table


def test_sample_takes_cycles_that_did_not_pass_first():
    from pipelines.sleepgraph import sample
    records = [{"cycle": n, "report": f"r{n}", "verdict": "fail" if n in (7, 9) else "pass"} for n in range(1, 11)]
    records.append({"cycle": 11, "verdict": "hang"})  # no report: nothing to draw
    assert [r["cycle"] for r in sample(records, 4)] == [1, 5, 7, 9]
    assert [r["cycle"] for r in sample(records, 1)] == [7]
