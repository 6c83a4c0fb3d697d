"""The latency gate (lab/latency.py, pipelines/compare.py's kind "latency",
the commit pipeline's baseline) and the absolute suspend/resume limits, on
two recorded runs of the same kernel (lean guest, the commit smoke's
mem*3,freeze*2,disk on pc-seabios: pytest/recordings/latency-fa-*). No
guest, no kernel."""

import copy
import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab import latency, modes, records  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.judge import Expected, judge_with_order  # noqa: E402
from lab.request import Limits, RunRequest, limits_from  # noqa: E402
from pipelines import commit as commit_mod  # noqa: E402
from pipelines import compare  # noqa: E402

RECORDINGS = os.path.join(REPO, "pytest", "recordings")
PYTHON = "/usr/bin/python3"
# A callback of the lean guest that runs in every mem and freeze cycle.
DEVICE, LABEL = "0000:00:03.0 (virtio-pci)", "bus[suspend]"


def recorded_run(tmp_path, name):
    """The recorded run `name` (fa-1, fa-2) as a run directory; its records."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    for part in ("cycles", "shared"):
        with gzip.open(os.path.join(RECORDINGS, f"latency-{name}-{part}.jsonl.gz"), "rb") as source:
            (run_dir / f"{part}.jsonl").write_bytes(source.read())
    return records.read_cycles(str(run_dir / "cycles.jsonl"))


def slowed(recs, device, label, ms, modes_slowed=("mem", "freeze")):
    """The records with `ms` more on one callback in the cycles of those modes
    (as a driver sleeping longer would), re-encoded the way the judge stores them."""
    out = []
    for record in recs:
        sequences = records.callbacks(record)
        if record["mode"] in modes_slowed and device in sequences:
            for call in sequences[device]:
                if call["cb"] == label:
                    call["us"] += ms * 1000
        copied = {key: value for key, value in record.items() if key not in ("callback_table", "pmtest_ref")}
        copied.update(records.compact_fields(sequences, records.pmtest(record)))
        out.append(records.RunRecord(copied, records.RunReader(None)))
    return out


@pytest.fixture
def runs(tmp_path):
    return recorded_run(tmp_path, "fa-1"), recorded_run(tmp_path, "fa-2")


def test_the_recorded_runs_time_the_callback_in_mem_and_freeze(runs):
    samples = latency.samples(runs[0])
    assert len(samples[latency.callback_key(DEVICE, LABEL)]) == 5  # mem*3 + freeze*2
    assert ("phase", "suspend", "dpm_suspend") in samples and ("phase", "disk", "dpm_suspend") in samples
    assert not any(key[2] == "machine_suspend" for key in samples if key[0] == "phase")


def test_a_run_against_itself_and_against_another_of_the_same_kernel_has_no_finding(runs):
    first, second = runs
    assert latency.findings(first, first) == []
    assert latency.findings(first, second) == [] and latency.findings(second, first) == []
    assert compare.regressions(first, second) == []


def test_400_ms_more_in_one_callback_is_one_finding_naming_it(runs):
    first, _ = runs
    found = latency.findings(first, slowed(first, DEVICE, LABEL, 400))
    assert len(found) == 1, found
    finding = found[0]
    assert (finding["kind"], finding["device"], finding["driver"], finding["callback"]) == \
        ("latency", "0000:00:03.0", "virtio-pci", LABEL)
    assert finding["after_ms"] - finding["before_ms"] == pytest.approx(400, abs=1)
    assert finding["p"] < latency.ALPHA and finding["n"] == [5, 5]
    assert finding["detail"].startswith(f"virtio-pci 0000:00:03.0 {LABEL}: median ")
    assert finding["detail"].endswith(", p = 0.004 (n 5 vs 5)")


def test_the_commit_gate_names_the_slower_callback_beside_its_other_findings(runs):
    first, second = runs
    found = compare.regressions(first, slowed(second, DEVICE, LABEL, 400))
    assert [(f["kind"], f["callback"]) for f in found] == [("latency", LABEL)]
    _, lines = compare.report(first, slowed(second, DEVICE, LABEL, 400))
    assert any(line.startswith(f"REGRESSION virtio-pci 0000:00:03.0 {LABEL}: median") for line in lines)


def test_a_slowdown_below_the_floor_is_no_finding(runs):
    first, _ = runs
    assert latency.findings(first, slowed(first, DEVICE, LABEL, latency.FLOOR_MS - 5)) == []
    # above the absolute floor but short of 20 % of a longer callback's median
    tall = slowed(first, DEVICE, LABEL, 400)
    assert latency.findings(tall, slowed(tall, DEVICE, LABEL, 60)) == []


def test_injected_and_failed_cycles_are_out_of_the_samples(runs):
    first, _ = runs
    slow = slowed(first, DEVICE, LABEL, 400)
    for record in slow:
        if record["mode"] in ("mem", "freeze"):
            record["injected"] = ["delay=* suspend 400"]
    assert latency.findings(first, slow) == []
    slow = slowed(first, DEVICE, LABEL, 400)
    for record in slow:
        record["verdict"], record["phase"] = "fail", "resume"
    assert latency.samples(slow) == {}


def test_a_slowdown_the_previous_run_had_already_is_not_new(runs):
    """The baseline pools earlier runs; a finding must also be slower than
    the previous run alone, as a known bucket is not a new one."""
    first, second = runs
    slow_previous = slowed(second, DEVICE, LABEL, 400)
    now = slowed(first, DEVICE, LABEL, 400)
    earlier = first + second  # pooled: the baseline's median is the fast one
    assert compare.regressions(slow_previous, now, earlier=earlier) == []
    assert [f["callback"] for f in compare.regressions(second, now, earlier=earlier)] == [LABEL]


def test_only_the_modes_both_runs_sampled_are_compared(runs):
    first, _ = runs
    mem_only = [record for record in first if record["mode"] == "mem"]
    slow_freeze = slowed(first, DEVICE, LABEL, 400, modes_slowed=("freeze",))
    assert latency.findings(mem_only, slow_freeze) == []


def test_the_table_shows_flagged_changes_first(runs):
    first, second = runs
    changes = latency.compare(first, slowed(second, DEVICE, LABEL, 400))
    rows = latency.table(changes)
    assert rows[0]["flagged"] and rows[0]["callback"] == LABEL
    assert all(not row["flagged"] for row in rows[1:])
    lines = latency.table_lines(rows)
    assert "YES" in lines[1] and LABEL in lines[1]


def test_commit_baseline_pools_earlier_runs_and_against_names_runs(tmp_path, runs):
    def make(name, started, pipeline="commit"):
        run_dir = tmp_path / "results" / name
        shutil.copytree(tmp_path / "fa-1", run_dir)
        (run_dir / "pipeline.json").write_text(json.dumps({"pipeline": pipeline, "started_epoch": started}))
        return str(run_dir)
    results = str(tmp_path / "results")
    paths = [make(f"c{n}", n) for n in range(1, 13)]
    make("c1-devices", 1.5, commit_mod.DEVICES_PIPELINE)
    (tmp_path / "results" / "current").mkdir()
    (tmp_path / "results" / "current" / "pipeline.json").write_text(json.dumps({"pipeline": "commit",
                                                                               "started_epoch": 20}))
    found = commit_mod.earlier_runs(results, "current")
    assert found == paths[::-1][:commit_mod.BASELINE_RUNS]
    assert commit_mod.previous_run(results, "current") == paths[-1]
    assert commit_mod.earlier_runs(results, "current", commit_mod.DEVICES_PIPELINE) == [
        os.path.join(results, "c1-devices")]
    assert commit_mod.against_runs(results, ["c3"]) == [paths[2]]
    assert commit_mod.gate_baseline(results, "x", [paths[0]], suffix="-devices") == [paths[0] + "-devices"]
    with pytest.raises(LabError, match="--against nothing: .* holds no recorded cycles"):
        commit_mod.against_runs(results, ["nothing"])


def test_the_device_stage_gate_writes_its_table_and_finds_the_slower_callback(tmp_path, runs):
    results = tmp_path / "results"
    for n in range(1, 9):  # 8 earlier device-guest runs: 16 samples of a mem+freeze callback
        run_dir = results / f"c{n}-devices"
        run_dir.mkdir(parents=True)
        kept = [r for r in runs[n % 2] if r["cycle"] in (n % 3 + 1, n % 2 + 4, 6)]  # mem, freeze, disk
        records.append_records(str(run_dir / "cycles.jsonl"), kept, records.reader_of(kept[0]).shared_values(kept))
        (run_dir / "pipeline.json").write_text(json.dumps({"pipeline": commit_mod.DEVICES_PIPELINE,
                                                           "started_epoch": n}))
    one_each = [r for r in runs[1] if r["cycle"] in (1, 4, 6)]  # the stage's mem,freeze,disk
    current = results / "c9-devices"
    current.mkdir()
    found = commit_mod.latency_gate(str(results), "c9-devices", slowed(one_each, DEVICE, LABEL, 400), None,
                                    commit_mod.DEVICES_PIPELINE, "-devices", str(current))
    assert [(f["callback"], f["n"]) for f in found] == [(LABEL, [16, 2])]
    table = latency.read_table(str(current))
    assert table["baseline"][0] == "c8-devices" and table["rows"][0]["flagged"]


def test_commit_refuses_an_against_run_without_cycles(tmp_path, capsys):
    assert commit_mod.main(["--results", str(tmp_path), "--against", "nope", "--build", "never"]) == 2
    error = capsys.readouterr().err
    assert "--against nope" in error and "holds no recorded cycles" in error
    assert os.listdir(tmp_path) == []  # refused before the run's directory was made


# ---------------------------------------------------------------- absolute limits

def _judged(name, limits):
    with gzip.open(os.path.join(RECORDINGS, name), "rt") as source:
        report = source.read()
    from lab.guest_report import key_values, sections
    parts = sections(report)
    before, after = key_values(parts.get("before")), key_values(parts.get("after"))
    events = [[0, "pmsuspend", None], [0, "pmsuspended", 0], [0, "pmwakeup", None], [0, "started", 4]]
    timeline = [["sent", 0], ["pmsuspend", 0], ["pmwakeup-sent", 0], ["report", 0]]
    return judge_with_order(modes.parse_mode("mem"), report, 0, events, [], timeline,
                            after.get("token"), before.get("boot_id"), Expected(limits=limits))


def test_a_cycle_over_its_resume_limit_fails_in_phase_latency():
    passed = _judged("report-mem.txt.gz", {"suspend": 15, "resume": 15})
    assert passed["verdict"] == "pass", passed.get("reason")
    resume_s = passed["resume_ms"] / 1000
    over = _judged("report-mem.txt.gz", {"suspend": 15, "resume": resume_s / 2})
    assert (over["verdict"], over["phase"]) == ("fail", "latency")
    assert over["reason"] == f"resume took {resume_s:.3f} s, over the {resume_s / 2:g} s limit"
    assert _judged("report-mem.txt.gz", None)["verdict"] == "pass"  # records without limits: not judged


def test_limits_are_seconds_against_the_guests_milliseconds():
    """A limit a little above the measured time passes, a little below it
    fails: the record's times are ms, the limits seconds."""
    passed = _judged("report-mem.txt.gz", None)
    suspend_s, resume_s = passed["suspend_ms"] / 1000, passed["resume_ms"] / 1000
    assert _judged("report-mem.txt.gz", {"suspend": suspend_s * 1.5, "resume": resume_s * 1.5})["verdict"] == "pass"
    under = _judged("report-mem.txt.gz", {"suspend": suspend_s * 0.9, "resume": resume_s * 1.5})
    assert (under["verdict"], under["phase"]) == ("fail", "latency") and under["reason"].startswith("suspend took")


def test_limits_parse_and_cross_the_request_json():
    assert limits_from(["suspend=3,resume=1.5"]) == Limits(3.0, 1.5)
    assert limits_from(["resume=2", "suspend=4"]) == Limits(4.0, 2.0)
    for bad, words in (("wake=3", "NAME one of suspend, resume"), ("resume=x", "not a number"),
                       ("resume=0", "positive"), ("resume", "NAME=SECONDS")):
        with pytest.raises(LabError, match=words):
            limits_from([bad])
    request = RunRequest(cycles=(), artifacts="a", results="r", run_id="x")
    request = request.replace(guest=request.guest.__class__(limits=Limits(2, 3)))
    value = json.loads(request.to_json())
    assert RunRequest.from_dict(value, template=True).guest.limits == Limits(2, 3)


def test_run_refuses_a_bad_limit_before_any_guest(tmp_path):
    result = subprocess.run([PYTHON, "-m", "cli.main", "run", "--mode", "mem", "--limit", "resume=soon",
                             "--results", str(tmp_path), "--artifacts", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "bad --limit 'resume=soon'" in result.stderr


def test_rejudging_a_record_applies_its_own_limits(tmp_path):
    """./pmlab judge (lab/rejudge.py) judges with the limits the record carries."""
    from lab.rejudge import rejudge_record
    shutil.copy(os.path.join(RECORDINGS, "report-mem.txt.gz"), tmp_path / "cycle1.txt.gz")
    judged = _judged("report-mem.txt.gz", None)
    from lab.guest_report import key_values, sections
    with gzip.open(os.path.join(RECORDINGS, "report-mem.txt.gz"), "rt") as source:
        parts = sections(source.read())
    record = {"cycle": 1, "status": "done", "mode": "mem", "wake": "pmwakeup", "verdict": "pass",
              "phase": None, "report": "cycle1.txt.gz", "report_status": 0,
              "host_events": [[0, "pmsuspend", None], [0, "pmsuspended", 0], [0, "pmwakeup", None]],
              "timeline": [["sent", 0], ["pmsuspend", 0], ["pmwakeup-sent", 0], ["report", 0]],
              "token": key_values(parts.get("after")).get("token"),
              "guest_boot_id": key_values(parts.get("before")).get("boot_id"),
              "limits": {"suspend": 15, "resume": judged["resume_ms"] / 2000}}
    again = rejudge_record(str(tmp_path), record)
    assert again.new == ("fail", "latency") and "over the" in again.reason
    record["limits"] = {"suspend": 15, "resume": 15}
    assert rejudge_record(str(tmp_path), record).new == ("pass", None)


# ---------------------------------------------------------------- the measurement

def test_latency_check_prints_the_false_alarm_rate_and_thresholds(tmp_path, runs, capsys):
    from pipelines import latency_false_alarm
    paths = [str(tmp_path / "fa-1"), str(tmp_path / "fa-2")]
    assert latency_false_alarm.main(paths + ["--busy", "fa-2", "--key", f"{DEVICE}:{LABEL}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fa-2 (busy) (host ") and out[0].endswith("x the baseline's): no finding")
    assert "false alarms (all): 0/1 pairs (0%)" in out and "false alarms (busy): 0/1 pairs (0%)" in out
    threshold = [line for line in out if line.startswith(f"  {DEVICE} {LABEL}: smallest delay detected per pair: ")]
    delay = int(threshold[0].rpartition(": ")[2].split()[0])
    assert latency.FLOOR_MS <= delay <= 100  # a 4 ms callback: the floor, and the host factor taken out
    assert latency_false_alarm.main([paths[0], str(tmp_path / "none")]) == 2
    assert "no recorded cycles" in capsys.readouterr().err


def test_a_host_slower_as_a_whole_is_taken_out_but_one_slower_callback_is_not(runs):
    first, second = runs
    def times(recs, factor):  # every callback and phase of the run `factor` times as long
        out = []
        for record in recs:
            sequences = records.callbacks(record)
            for calls in sequences.values():
                for call in calls:
                    call["us"] = call["us"] * factor if call["us"] is not None else None
            copied = {k: v for k, v in record.items() if k not in ("callback_table", "pmtest_ref")}
            copied["phase_ms"] = {k: v * factor for k, v in record["phase_ms"].items()}
            copied.update({f: record[f] * factor for f in ("suspend_ms", "resume_ms")},
                          **records.compact_fields(sequences, records.pmtest(record)))
            out.append(records.RunRecord(copied, records.RunReader(None)))
        return out
    slow_host = times(first, 3.0)
    assert compare.regressions(first, slow_host) == []
    assert latency.findings(second, times(second, 4.0)) == []
    changes = latency.compare(first, slowed(slow_host, DEVICE, LABEL, 400 * 3))
    assert [c["callback"] for c in changes if c["flagged"]] == [LABEL]
    assert changes[0]["host_factor"] == pytest.approx(3.0, abs=0.01)
    assert latency.detail(changes[0]).endswith("(n 5 vs 5, host 3.0x slower taken out)")


# ---------------------------------------------------------------- the nightly's report and the dashboard

def _write_run(path, recs):
    """recs (RunRecords) as a run directory of their own."""
    os.makedirs(path, exist_ok=True)
    shared = {}
    for record in recs:
        shared.update(records.reader_of(record).shared_values([record]))
    records.append_records(os.path.join(path, "cycles.jsonl"), [copy.deepcopy(dict(r)) for r in recs], shared)
    return path


def test_the_dashboard_shows_the_newest_runs_slower_callback(tmp_path, runs):
    from dashboards import compute, schemas
    first, second = runs
    results = tmp_path / "results"
    _write_run(str(results / "fa-1"), first)
    _write_run(str(results / "fa-2"), slowed(second, DEVICE, LABEL, 400))
    for cache in (False, True, True):  # the second cached compute reads the records behind the cache
        board = compute.compute([str(results)], cache=cache)
        change = board["latency_change"]
        assert (change["run"], change["baseline"]) == ("fa-2", ["fa-1"])
        assert [(row["callback"], row["flagged"]) for row in change["rows"] if row["flagged"]] == [(LABEL, True)]
    schemas.validator(schemas.DASHBOARD).validate(json.loads(compute.dumps(board)))


def test_the_nightly_reports_the_change_against_its_previous_run(tmp_path, runs):
    from pipelines import nightly
    first, second = runs
    results = tmp_path / "results"
    for name, recs, created in (("night-1", first, "20261206-010000"), ("night-2", slowed(second, DEVICE, LABEL, 400),
                                                                        "20261207-010000")):
        _write_run(str(results / name), recs)
        (results / name / nightly.STATE).write_text(json.dumps({"shard": [1, 1], "created": created}))
    (results / "other-shard").mkdir()
    (results / "other-shard" / nightly.STATE).write_text(json.dumps({"shard": [2, 2], "created": "20261206"}))
    rundir = records.RunDir(str(results), "night-2", link_latest=False)
    lines = nightly.latency_report(rundir, {"shard": [1, 1], "created": "20261207-010000"},
                                   records.read_cycles(rundir.cycles_path))
    assert lines[0] == "latency against night-1:"
    assert LABEL in lines[2] and lines[2].rstrip().endswith("YES")
    assert latency.read_table(rundir.path)["baseline"] == ["night-1"]
    first_night = records.RunDir(str(results), "night-1", link_latest=False)
    assert nightly.latency_report(first_night, {"shard": [1, 1], "created": "20261206-010000"}, first) == [
        "latency: no previous nightly run of this shard to compare with"]


# ---------------------------------------------------------------- the case on the device guest

E1000E = "0000:00:0e.0 (e1000e)"


def zoo_runs(tmp_path):
    """Eight recorded device-stage runs (zoo guest, mem,freeze,disk, one kernel),
    oldest first, each as its own run directory: [(name, records)]."""
    with gzip.open(os.path.join(RECORDINGS, "latency-zoo-shared.jsonl.gz"), "rb") as source:
        shared = source.read()
    lines = {}
    with gzip.open(os.path.join(RECORDINGS, "latency-zoo-cycles.jsonl.gz"), "rt") as source:
        for line in source:
            lines.setdefault(json.loads(line)["run_id"], []).append(line)
    runs = []
    for name in sorted(lines, key=lambda n: int(n.rpartition("-")[2])):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "cycles.jsonl").write_text("".join(lines[name]))
        (run_dir / "shared.jsonl").write_bytes(shared)
        runs.append((name, records.read_cycles(str(run_dir / "cycles.jsonl"))))
    return runs


def test_e1000e_400_ms_slower_is_flagged_by_the_device_stage_with_7_earlier_runs(tmp_path):
    runs = zoo_runs(tmp_path)
    assert [name for name, _ in runs] == [f"zoo-{n}" for n in range(1, 9)]
    *earlier, (_, current) = runs
    previous, pooled = earlier[-1][1], [r for _, recs in earlier[:-1] for r in recs]
    assert compare.regressions(previous, current, earlier=pooled) == []
    found = compare.regressions(previous, slowed(current, E1000E, "bus[suspend]", 400), earlier=pooled)
    assert [(f["driver"], f["device"], f["callback"], f["n"]) for f in found] == [
        ("e1000e", "0000:00:0e.0", "bus[suspend]", [14, 2])]
    assert found[0]["detail"].startswith("e1000e 0000:00:0e.0 bus[suspend]: median ")
    # with 6 earlier runs (2 vs 12) no exact p can fall below 0.01: in the table, not flagged
    fewer = latency.compare(previous + [r for _, recs in earlier[1:-1] for r in recs],
                            slowed(current, E1000E, "bus[suspend]", 400))
    assert fewer[0]["callback"] == "bus[suspend]" and not fewer[0]["flagged"] and fewer[0]["p"] > latency.ALPHA


def test_a_damaged_record_gives_the_samples_it_can(runs):
    """The dashboard hands raw lines of a cached run to the gate: bad values are skipped, never raised."""
    first, _ = runs
    damaged = dict(first[0])
    damaged.update(phase_ms={"dpm_suspend": "slow", "dpm_resume": 12.5}, suspend_ms=None, resume_ms=True,
                   callbacks={"dev (drv)": [["bus[suspend]", "12", 0], ["bus[resume]", 3000.0, 0]]})
    damaged.pop("callback_table")
    assert latency.cycle_samples(damaged) == {("phase", "suspend", "dpm_resume"): 12.5,
                                             latency.callback_key("dev (drv)", "bus[resume]"): 3.0}
    broken = dict(first[0], callback_table={"layout": "nowhere", "us": "", "err": []})
    assert all(key[0] == "phase" for key in latency.cycle_samples(records.RunRecord(broken, records.RunReader(None))))
