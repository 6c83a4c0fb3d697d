"""Unit tests of pipelines/: regression comparison, JUnit writer, shard
planning, shard merge (merged == single run), nightly resume bookkeeping
(with a stand-in for lab.run, no guest), the LAVA job-log parser and job
renderer. Seconds, no guest, no kernel build."""

import copy
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab.records import RunDir, close_interrupted, read_cycles, summarize  # noqa: E402
from lab import modes  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.request import RunRequest  # noqa: E402
from pipelines import commit as commit_mod  # noqa: E402
from pipelines import compare, junit, merge as merge_mod, nightly, plan  # noqa: E402

PYTHON = "/usr/bin/python3"
RECORDINGS = os.path.join(REPO, "pytest", "recordings", "cycles.jsonl")


def rec(cycle, mode="mem", verdict="pass", phase=None, reason=None, status="done", **extra):
    record = {"run_id": "r1", "cycle": cycle, "status": status, "mode": mode, "wake": "pmwakeup",
              "host_start": f"2026-12-03T10:00:{cycle % 60:02d}.000+00:00", "host_seconds": 1.5 + cycle / 10}
    if status == "done":
        record.update(verdict=verdict, phase=phase, reason=reason)
    record.update(extra)
    return record


# ---------------------------------------------------------------- regression comparison

LOCAL = compare.local_buckets


def test_no_regression_when_nothing_changed():
    runs = [rec(1), rec(2, "freeze"), rec(3, "disk")]
    assert compare.regressions(runs, copy.deepcopy(runs), LOCAL) == []


def test_pass_rate_drop_is_a_regression():
    previous = [rec(1), rec(2), rec(3)]
    current = [rec(1), rec(2, verdict="fail", phase="suspend"), rec(3)]
    found = compare.regressions(previous, current, LOCAL)
    kinds = sorted((f["kind"], f.get("mode") or f.get("bucket")) for f in found)
    assert kinds == [("new-bucket", "fail-in-suspend"), ("pass-rate", "mem")]
    drop = next(f for f in found if f["kind"] == "pass-rate")
    assert drop["previous"] == 1.0 and drop["current"] == pytest.approx(2 / 3, abs=1e-4)


def test_known_failure_is_not_a_regression_but_a_new_bucket_is():
    previous = [rec(1, verdict="fail", phase="suspend"), rec(2)]
    same = [rec(1, verdict="fail", phase="suspend"), rec(2)]
    assert compare.regressions(previous, same, LOCAL) == []
    other = [rec(1, verdict="hang", phase="resume"), rec(2)]  # same rate, different failure
    found = compare.regressions(previous, other, LOCAL)
    assert [(f["kind"], f["bucket"]) for f in found] == [("new-bucket", "hang-in-resume")]


def test_improvement_and_dropped_mode_are_not_regressions():
    previous = [rec(1, verdict="fail", phase="suspend"), rec(2, "disk")]
    assert compare.regressions(previous, [rec(1)], LOCAL) == []


def test_new_mode_is_held_to_all_passing():
    previous = [rec(1)]
    assert compare.regressions(previous, [rec(1), rec(2, "freeze")], LOCAL) == []
    found = compare.regressions(previous, [rec(1), rec(2, "freeze", "fail", "boot")], LOCAL)
    assert {f["kind"] for f in found} == {"pass-rate", "new-bucket"}
    # a lab error is neither in the pass rate (lab.records.pass_rate) nor a
    # new bucket: the lab failed, not the commit; report() names it apart
    current = [rec(1), rec(2, "freeze", "error", "boot")]
    assert compare.regressions(previous, current, LOCAL) == []
    _, lines = compare.report(previous, current, LOCAL)
    assert "lab error, not the kernel's (no regression): error-in-boot (cycles 2)" in lines


def test_no_previous_run_means_every_failure_is_new():
    assert compare.regressions(None, [rec(1), rec(2)], LOCAL) == []
    found = compare.regressions(None, [rec(1), rec(2, status="started")], LOCAL)
    assert ("new-bucket", "unfinished") in [(f["kind"], f.get("bucket")) for f in found]


def test_unfinished_cycle_counts_as_not_passed():
    assert compare.mode_rates([rec(1), rec(2, status="started")]) == {"mem": (1, 2)}


def test_cycles_failed_on_purpose_are_not_regressions():
    previous = [rec(1), rec(2)]
    provoked = [rec(1), rec(2, verdict="hang", phase="suspend", expected_verdict="hang")]
    assert compare.regressions(previous, provoked, LOCAL) == []
    missed = [rec(1), rec(2, expected_verdict="hang")]  # the injected hang did not happen
    found = compare.regressions(previous, missed, LOCAL)
    assert {(f["kind"], f.get("bucket") or f.get("mode")) for f in found} == {
        ("new-bucket", "expected-hang-but-passed")}  # injected cycles are not in the pass rate
    other = [rec(1), rec(2, verdict="fail", phase="resume", expected_verdict="hang")]
    assert ("new-bucket", "fail-in-resume") in [(f["kind"], f.get("bucket")) for f in
                                                compare.regressions(previous, other, LOCAL)]


def test_default_buckets_match_the_dashboard_when_present():
    classify = compare.default_buckets()
    failed = rec(4, verdict="fail", phase="suspend", reason="writing 'mem' failed",
                 callbacks={"pmtest_legacy.6": [{"cb": "bus[suspend]", "driver": "pmtest_legacy",
                                                 "t": 1.0, "us": 3.0, "err": -5}]})
    buckets = classify(failed)
    assert buckets and all(isinstance(b, str) for b in buckets)
    assert classify(rec(5)) == [] or all("warning" in b or "ordering" in b for b in classify(rec(5)))
    assert "fail-in-suspend:pmtest_legacy.6:EIO (-5)" in buckets  # dashboards/buckets.py names device and errno


def test_report_lines_name_regressions_and_known_failures():
    previous = [rec(1, verdict="fail", phase="suspend")]
    current = [rec(1, verdict="fail", phase="suspend"), rec(2, verdict="hang", phase="resume")]
    findings, lines = compare.report(previous, current, LOCAL)
    assert any(line.startswith("REGRESSION") and "hang-in-resume" in line for line in lines)
    assert any("known" in line and "fail-in-suspend" in line for line in lines)


def test_previous_run_is_newest_earlier_run_of_this_pipeline(tmp_path):
    def make(name, started, pipeline="commit", cycles=True):
        path = tmp_path / name
        path.mkdir()
        (path / "pipeline.json").write_text(json.dumps({"pipeline": pipeline, "started_epoch": started}))
        if cycles:
            (path / "cycles.jsonl").write_text(json.dumps(rec(1)) + "\n")
    make("old", 100)
    make("newer", 200)
    make("not-mine", 250, pipeline="nightly")
    make("no-cycles", 260, cycles=False)
    make("current", 300)
    make("later", 400)
    (tmp_path / "plain-lab-run").mkdir()
    assert os.path.basename(commit_mod.previous_run(str(tmp_path), "current")) == "newer"
    assert commit_mod.previous_run(str(tmp_path), "old") is None


def test_smoke_spec_and_series_hash_match_kernel_tree_sh(tmp_path):
    assert modes.expand([commit_mod.smoke_as_modes("mem=2,freeze,disk=1")]) == ["mem", "mem", "freeze", "disk"]
    with pytest.raises(LabError, match="bad count"):
        modes.expand([commit_mod.smoke_as_modes("mem=0")])
    series = os.path.join(REPO, "kernel", "patches", "6.1")
    shell = subprocess.run(["sh", "-c", ". kernel/tree.sh; series_hash"], cwd=REPO, capture_output=True,
                           text=True, env=dict(os.environ, repo=REPO))
    assert shell.returncode == 0, shell.stderr
    assert commit_mod.series_hash(series) == shell.stdout.strip()


# ---------------------------------------------------------------- JUnit

def test_junit_one_testcase_per_cycle(tmp_path):
    records = [rec(1), rec(2, verdict="fail", phase="suspend", reason="EIO", evidence=["PM: failed"]),
               rec(3, "freeze", "hang", "resume", "no report"), rec(4, "disk", "error", "boot", "libvirt"),
               rec(5, "disk", status="started")]
    path = str(tmp_path / "junit.xml")
    junit.write(records, "r1", path)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("5", "2", "2")
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["cycle 001 mem/pmwakeup", "cycle 002 mem/pmwakeup",
                                             "cycle 003 freeze/pmwakeup", "cycle 004 disk/pmwakeup",
                                             "cycle 005 disk/pmwakeup"]
    outcome = {c.get("name")[6:9]: [child.tag for child in c] for c in cases}
    assert outcome == {"001": [], "002": ["failure", "system-out"], "003": ["failure"], "004": ["error"],
                       "005": ["error"]}
    assert cases[1].find("failure").get("type") == "fail"
    assert cases[2].find("failure").get("type") == "hang"
    assert cases[4].find("error").get("type") == "unfinished"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert sorted(suites) == ["pmlab.disk", "pmlab.freeze", "pmlab.mem"]
    assert suites["pmlab.disk"].get("errors") == "2" and suites["pmlab.mem"].get("failures") == "1"
    assert float(cases[0].get("time")) == pytest.approx(1.6)


def test_junit_cycles_failed_on_purpose():
    tree = junit.build([rec(1, verdict="hang", phase="suspend", expected_verdict="hang"),
                        rec(2, expected_verdict="fail")], "r1")
    cases = tree.getroot().findall("./testsuite/testcase")
    assert [len(c) for c in cases] == [0, 1]
    assert cases[1].find("failure").get("type") == "expected-fail"


def test_junit_passes_exactly_the_cycles_that_did_as_expected():
    from lab.records import did_as_expected
    records = [rec(1), rec(2, verdict="fail"), rec(3, verdict="hang", expected_verdict="hang"),
               rec(4, expected_verdict="fail"), rec(5, status="started"), rec(6, verdict="bogus"),
               rec(7, verdict="bogus", expected_verdict="error"), rec(8, expected_verdict=None)]
    cases = junit.build(records, "r1").getroot().findall("./testsuite/testcase")
    assert [len(case) == 0 for case in cases] == [did_as_expected(r) for r in records]
    assert [len(case) == 0 for case in cases] == [True, False, True, False, False, False, True, True]


def test_junit_from_recorded_cycles(tmp_path):
    records = read_cycles(RECORDINGS)
    assert records, "pytest/recordings/cycles.jsonl is empty"
    tree = junit.build(records, "recorded")
    cases = tree.getroot().findall("./testsuite/testcase")
    assert len(cases) == len(records)
    failing = sum(1 for r in records if r.get("verdict") != "pass" or r.get("status") != "done")
    assert sum(1 for c in cases if len(c.findall("failure")) + len(c.findall("error"))) == failing


# ---------------------------------------------------------------- shard planning

def test_parse_shard():
    assert plan.parse_shard(None) == (1, 1)
    assert plan.parse_shard("2/4") == (2, 4)
    for bad in ("0/3", "4/3", "a/b", "1", "-1/2"):
        with pytest.raises(plan.PlanError):
            plan.parse_shard(bad)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_shards_cover_the_plan_exactly_once(count):
    modes = ["mem", "freeze", "disk"]
    whole = plan.shard_plan((1, 1), modes, 50)
    assert [n for n, _ in whole] == list(range(1, 51))
    parts = [plan.shard_plan((i, count), modes, 50) for i in range(1, count + 1)]
    merged = sorted(item for part in parts for item in part)
    assert merged == whole
    for i, part in enumerate(parts, 1):
        assert all(n % count == i % count for n, _ in part)


def test_rotation_mixes_modes_in_shards():
    modes = ["mem", "freeze", "disk"]
    for count in (2, 3, 6):
        for i in range(1, count + 1):
            assert {m for _, m in plan.shard_plan((i, count), modes, 120)} == set(modes)
    # and every mode gets its share of the whole plan
    whole = [m for _, m in plan.shard_plan((1, 1), modes, 99)]
    assert [whole.count(m) for m in modes] == [33, 33, 33]


def test_shard_numbers_resume_after_and_unbounded():
    assert list(plan.shard_numbers((2, 3), 20, after=0)) == [2, 5, 8, 11, 14, 17, 20]
    assert list(plan.shard_numbers((2, 3), 20, after=8)) == [11, 14, 17, 20]
    assert list(plan.shard_numbers((2, 3), 20, after=9)) == [11, 14, 17, 20]
    assert list(plan.shard_numbers((2, 3), 20, after=2)) == [5, 8, 11, 14, 17, 20]
    assert list(plan.shard_numbers((2, 3), 20, after=1)) == [2, 5, 8, 11, 14, 17, 20]
    assert list(plan.shard_numbers((1, 1), 5, after=5)) == []
    endless = plan.shard_numbers((1, 2), None, after=3)
    assert [next(endless) for _ in range(3)] == [5, 7, 9]


def test_run_dir_names():
    assert plan.run_dir_name("n1", (1, 1)) == "n1"
    assert plan.run_dir_name("n1", (2, 3)) == "n1-shard2of3"


def test_fit_chunk_respects_limit_and_budget():
    modes = ["mem", "disk"]
    per = {"mem": 5.0, "disk": 20.0}
    numbers = [1, 2, 3, 4, 5, 6]
    assert plan.fit_chunk(numbers, modes, per, 4) == 4
    # boot 25 + mem 5 + disk 20 = 50 fits in 60, + next (disk, 20) does not
    assert [plan.mode_of(n, modes) for n in numbers[:3]] == ["mem", "disk", "disk"]
    assert plan.fit_chunk(numbers, modes, per, 10, seconds_left=60) == 2
    assert plan.fit_chunk(numbers, modes, per, 10, seconds_left=29) == 0


def test_seconds_per_cycle_learns_from_records():
    per = plan.seconds_per_cycle([rec(1, host_seconds=2.0), rec(2, host_seconds=4.0),
                                  rec(3, "pm_test-core", host_seconds=0.5), rec(4, status="started")])
    assert per["mem"] == 3.0 and per["pm_test"] == 0.5 and per["disk"] == plan.DEFAULT_SECONDS["disk"]


# ---------------------------------------------------------------- resume bookkeeping

def test_resume_point_and_interrupted_record():
    records = [rec(1), rec(2), rec(4, status="started")]
    last, unfinished = plan.resume_point(records)
    assert last == 4 and [r["cycle"] for r in unfinished] == [4]
    closed = close_interrupted(unfinished[0], 1796300000.0)
    assert closed["status"] == "done" and closed["verdict"] == "interrupted"
    assert closed["phase"] == "interrupted" and closed["reason"].startswith("interrupted")
    assert closed["cycle"] == 4 and unfinished[0]["status"] == "started"  # input untouched
    assert compare.local_buckets(closed) == []  # no failure: the run stopped


def test_a_chunk_request_carries_plan_numbers_modes_and_knobs(tmp_path):
    """A nightly shard's chunk is a RunRequest of its plan numbers: lab.run
    writes them under those numbers (no renumbering), and it crosses the
    process by the one encoder and parser."""
    args = nightly.parse_args(["--run-id", "soak", "--shard", "2/3", "--max-cycles", "12", "--results",
                               str(tmp_path), "--artifacts", "/a", "--inject", "5:fault=* suspend 5 1",
                               "--profile", "pc-seabios", "--pmtest-tree", "1x1"])
    request = nightly.request_from(args)
    chunk = request.chunk_request([2, 5, 8])
    assert [(c.number, c.mode.name, c.knobs) for c in chunk.cycles] == [
        (2, plan.mode_of(2, list(plan.DEFAULT_MODES)), ()),
        (5, plan.mode_of(5, list(plan.DEFAULT_MODES)), (("fault", "* suspend 5 1"),)),
        (8, plan.mode_of(8, list(plan.DEFAULT_MODES)), ())]
    assert (chunk.run_id, chunk.directory, chunk.lab_reruns, chunk.keep) == ("soak", "soak-shard2of3", 0, "failures")
    assert (chunk.guest.profile, chunk.guest.pmtest_tree) == ("pc-seabios", (1, 1))
    assert chunk.resume  # each chunk continues the run directory: lab.run does not refuse it
    assert RunRequest.from_json(chunk.to_json()) == chunk
    assert nightly.NightlyRequest.from_json(request.to_json()) == request


def test_settle_chunk_closes_the_cycles_its_dead_lab_run_left(tmp_path):
    run = RunDir(str(tmp_path / "results"), "soak-shard2of3", run_id="soak")
    run.append(dict(rec(2, "freeze"), run_id="soak"))
    run.append(dict(rec(5, "disk", status="started"), run_id="soak"))
    settled = nightly.settle_chunk(run, [2, 5, 8])
    assert [(r["cycle"], r["verdict"], r.get("phase")) for r in settled] == [(2, "pass", None),
                                                                            (5, "interrupted", "interrupted")]
    records = read_cycles(run.cycles_path)
    assert [(r["cycle"], r["status"]) for r in records] == [(2, "done"), (5, "done")]
    assert plan.resume_point(records)[0] == 5  # continue with cycle 8


FAKE_LAB_RUN = r'''
import argparse, os, sys
sys.path.insert(0, os.environ["PMLAB_REPO"])
from lab.records import RunDir
from lab.request import RunRequest
p = argparse.ArgumentParser()
p.add_argument("--request")
request = RunRequest.read(p.parse_args().request)
d = RunDir(request.results, request.directory, run_id=request.run_id)
die_at = int(os.environ.get("FAKE_DIE_AT_PLAN_CYCLE", "0"))
fail_at = int(os.environ.get("FAKE_FAIL_PLAN_CYCLE", "0"))
for cycle in request.cycles:
    base = {"run_id": request.run_id, "cycle": cycle.number, "status": "started", "mode": cycle.mode.name,
            "wake": cycle.mode.wake, "host_start": "2026-12-03T10:00:00.000+00:00"}
    d.append(base)
    if cycle.number == die_at:
        if os.environ.get("FAKE_KILL_NIGHTLY"):  # the host dies: nightly too
            os.kill(os.getppid(), 9)
        os._exit(9)  # killed mid-cycle: only the "started" line
    verdict = "fail" if cycle.number == fail_at else "pass"
    d.append(dict(base, status="done", verdict=verdict, phase="suspend" if verdict == "fail" else None,
                  reason=None, host_seconds=0.01))
    print(f"cycle {cycle.number} {cycle.mode.name}: {verdict}", flush=True)
'''


def _nightly(tmp_path, *argv, **env):
    fake = tmp_path / "fake_lab_run.py"
    fake.write_text(FAKE_LAB_RUN)
    environment = dict(os.environ, PYTHONPATH=REPO, PMLAB_REPO=REPO,
                       PMLAB_NIGHTLY_LAB_RUN=f"{PYTHON} {fake}", **env)
    return subprocess.run([PYTHON, "-m", "cli.main", "nightly", "--results", str(tmp_path / "results"), *argv],
                          cwd=REPO, env=environment, capture_output=True, text=True)


def test_nightly_resumes_after_a_kill(tmp_path):
    first = _nightly(tmp_path, "--run-id", "soak", "--max-cycles", "10", "--chunk", "4",
                     FAKE_DIE_AT_PLAN_CYCLE="6", FAKE_KILL_NIGHTLY="1")
    assert first.returncode == -9
    run_dir = tmp_path / "results" / "soak"
    records = read_cycles(str(run_dir / "cycles.jsonl"))
    # Killed: every chunk wrote into the run under its plan numbers; the
    # cycle in flight has only its "started" line.
    assert [(r["cycle"], r["status"]) for r in records] == \
        [(n, "done") for n in range(1, 6)] + [(6, "started")], first.stdout + first.stderr
    # Options that would change the plan are refused on resume.
    refused = _nightly(tmp_path, "--run-id", "soak", "--max-cycles", "12")
    assert refused.returncode == 2 and "max_cycles" in refused.stderr
    second = _nightly(tmp_path, "--run-id", "soak", "--chunk", "4")
    assert "resuming run soak after cycle 6" in second.stdout, second.stdout + second.stderr
    assert "1 closed as interrupted" in second.stdout
    records = read_cycles(str(run_dir / "cycles.jsonl"))
    assert [r["cycle"] for r in records] == list(range(1, 11))
    assert [r["cycle"] for r in records if r["verdict"] != "pass"] == [6]
    assert records[5]["phase"] == "interrupted" and records[5]["status"] == "done"
    assert [r["mode"] for r in records] == [plan.mode_of(n, list(plan.DEFAULT_MODES)) for n in range(1, 11)]
    assert second.returncode == 0  # the interrupted cycle is no failure; the others passed
    with open(run_dir / "cycles.jsonl") as source:  # each cycle's final line once (+ no duplicates)
        finals = [json.loads(line) for line in source]
    assert len([r for r in finals if r["status"] == "done"]) == 10
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cycles"] == 10 and summary["run_id"] == "soak"
    assert ET.parse(run_dir / "junit.xml").getroot().get("tests") == "10"
    third = _nightly(tmp_path, "--run-id", "soak")
    assert "plan complete" in third.stdout and len(read_cycles(str(run_dir / "cycles.jsonl"))) == 10


def test_nightly_requeues_cycles_after_a_lab_run_crash(tmp_path):
    done = _nightly(tmp_path, "--run-id", "crash", "--max-cycles", "9", "--chunk", "4", FAKE_DIE_AT_PLAN_CYCLE="2")
    records = read_cycles(str(tmp_path / "results" / "crash" / "cycles.jsonl"))
    assert [r["cycle"] for r in records] == list(range(1, 10)), done.stdout + done.stderr
    assert [(r["cycle"], r["phase"]) for r in records if r["verdict"] != "pass"] == [(2, "interrupted")]
    assert "before cycles [3, 4]: queued again" in done.stdout and done.returncode == 0  # interrupted: no failure


def test_nightly_stops_when_lab_run_records_nothing(tmp_path):
    fake = tmp_path / "broken.py"
    fake.write_text("import sys; print('lab.run: libvirt unreachable', file=sys.stderr); sys.exit(2)\n")
    done = subprocess.run([PYTHON, "-m", "cli.main", "nightly", "--results", str(tmp_path / "r"), "--run-id", "x",
                           "--max-cycles", "5"], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO, PMLAB_NIGHTLY_LAB_RUN=f"{PYTHON} {fake}"))
    assert done.returncode == 2 and "recorded no cycle" in done.stdout


def test_nightly_shards_merge_to_the_single_run(tmp_path):
    for i in (1, 2, 3):
        done = _nightly(tmp_path, "--run-id", "night", "--max-cycles", "11", "--shard", f"{i}/3", "--chunk", "2",
                        FAKE_FAIL_PLAN_CYCLE="7")
        assert done.returncode in (0, 1), done.stdout + done.stderr
    shards = [str(tmp_path / "results" / f"night-shard{i}of3") for i in (1, 2, 3)]
    merged = str(tmp_path / "merged")
    assert merge_mod.main([merged, *shards]) == 0
    records = read_cycles(os.path.join(merged, "cycles.jsonl"))
    assert [r["cycle"] for r in records] == list(range(1, 12))
    assert {r["run_id"] for r in records} == {"night"}
    assert [r["cycle"] for r in records if r["verdict"] != "pass"] == [7]


# ---------------------------------------------------------------- merge

def _single_run(root, run_id):
    """A run directory as lab.run writes it (started + done lines), from the
    recorded cycles plus a few synthetic ones (fail, hang, unfinished)."""
    records = [dict(r, run_id=run_id) for r in read_cycles(RECORDINGS)]
    extra = [rec(0, "freeze", "hang", "resume", "no report"), rec(0, "mem", "fail", "suspend", "EIO"),
             rec(0, "disk", status="started")]
    for offset, record in enumerate(extra, 1):
        records.append(dict(record, run_id=run_id, cycle=max(r["cycle"] for r in records) + offset))
    rundir = RunDir(root, run_id)
    for record in records:
        rundir.append({k: record[k] for k in ("run_id", "cycle", "mode", "wake") if k in record} |
                      {"status": "started"})
        if record.get("status") == "done":
            rundir.append(record)
    return rundir.path, records


def _split(single, records, count, root):
    """Shard directories holding the shard's cycles of `single`, as written."""
    dirs = []
    with open(os.path.join(single, "cycles.jsonl")) as source:
        lines = [json.loads(line) for line in source]
    shared = read_cycles(os.path.join(single, "cycles.jsonl"))[0].reader.shared_values(lines)
    for i in range(1, count + 1):
        rundir = RunDir(root, f"split-shard{i}of{count}")
        for line in lines:
            if line["cycle"] % count == i % count:
                rundir.append(line, shared)
        dirs.append(rundir.path)
    return dirs


def _comparable(summary):
    return {k: v for k, v in summary.items() if k not in ("written", "merged_from", "run_id")}


@pytest.mark.parametrize("count", [1, 2, 3])
def test_merged_shards_equal_the_single_run(tmp_path, count):
    single, records = _single_run(str(tmp_path / "single"), "night-1")
    shards = _split(single, records, count, str(tmp_path / "shards"))
    merged = str(tmp_path / "merged" / "night-1")
    summary = merge_mod.merge(merged, shards)
    assert read_cycles(os.path.join(merged, "cycles.jsonl")) == read_cycles(os.path.join(single, "cycles.jsonl"))
    assert _comparable(summary) == _comparable(summarize(read_cycles(os.path.join(single, "cycles.jsonl"))))
    # merging the same shards again (a shard named twice) changes nothing
    again = str(tmp_path / "again")
    merge_mod.merge(again, shards + shards[:1])
    assert read_cycles(os.path.join(again, "cycles.jsonl")) == read_cycles(os.path.join(merged, "cycles.jsonl"))
    from dashboards import compute
    one, many = compute.compute([single]), compute.compute([merged])
    assert one["inputs"]["cycles"] == len(records)
    assert json.dumps(one, sort_keys=True) == json.dumps(many, sort_keys=True)


def test_merge_refuses_conflicting_cycles_and_mixed_run_ids(tmp_path):
    a, b = RunDir(str(tmp_path), "a"), RunDir(str(tmp_path), "b")
    a.append(rec(1))
    b.append(rec(1, verdict="fail", phase="suspend"))
    with pytest.raises(merge_mod.MergeError, match="cycle 1"):
        merge_mod.merge(str(tmp_path / "out1"), [a.path, b.path])
    c = RunDir(str(tmp_path), "c")
    c.append(dict(rec(2), run_id="other"))
    with pytest.raises(merge_mod.MergeError, match="run ids"):
        merge_mod.merge(str(tmp_path / "out2"), [a.path, c.path])
    merge_mod.merge(str(tmp_path / "out3"), [a.path, c.path], run_id="joined")
    assert {r["run_id"] for r in read_cycles(str(tmp_path / "out3" / "cycles.jsonl"))} == {"joined"}
    # a finished record wins over the same cycle's "started" line elsewhere
    d = RunDir(str(tmp_path), "d")
    d.append(rec(1, status="started"))
    merge_mod.merge(str(tmp_path / "out4"), [d.path, a.path])
    assert read_cycles(str(tmp_path / "out4" / "cycles.jsonl"))[0]["verdict"] == "pass"
    with pytest.raises(merge_mod.MergeError, match="already holds"):
        merge_mod.merge(str(tmp_path / "out4"), [a.path])


def _ci_push_commands():
    """{CI definition: the commands its jobs run on a push}."""
    import yaml
    ci = os.path.join(REPO, "pipelines", "ci")
    with open(os.path.join(ci, "github-actions.yml")) as source:
        github = yaml.safe_load(source)
    assert "push" in github.get("on", github.get(True))  # YAML 1.1 reads the key `on` as True
    with open(os.path.join(ci, "gitlab-ci.yml")) as source:
        gitlab = yaml.safe_load(source)
    gitlab_jobs = {name: job for name, job in gitlab.items() if isinstance(job, dict) and "script" in job}
    for job in gitlab_jobs.values():
        assert job["stage"] in gitlab["stages"], job
    return {
        "github": [step["run"] for job in github["jobs"].values() if "'push'" in job.get("if", "")
                   for step in job["steps"] if "run" in step],
        "gitlab": [command for job in gitlab_jobs.values()
                   if any('"push"' in rule.get("if", "") for rule in job.get("rules", []))
                   for command in job["script"]],
    }


def test_ci_runs_the_test_suite_and_the_commit_pipeline_on_every_push():
    for definition, commands in _ci_push_commands().items():
        assert any(command.startswith("./pmlab commit ") for command in commands), (definition, commands)
        assert "./pmlab test" in commands, (definition, commands)


def test_the_schedule_soaks_both_machine_profiles():
    """Issue 12: fidelity (q35+OVMF, the nightly's default) and throughput
    (pc-seabios, two or more guests) are both scheduled, in both CI
    definitions; their command lines parse as the pipelines parse them."""
    import shlex

    import yaml

    from pipelines import nightly, soak
    ci = os.path.join(REPO, "pipelines", "ci")
    with open(os.path.join(ci, "github-actions.yml")) as source:
        github = yaml.safe_load(source)
    with open(os.path.join(ci, "gitlab-ci.yml")) as source:
        gitlab = yaml.safe_load(source)
    scheduled = {
        "github": [step["run"] for job in github["jobs"].values() if "'schedule'" in job.get("if", "")
                   for step in job["steps"] if "run" in step],
        "gitlab": [command for job in gitlab.values() if isinstance(job, dict) and "script" in job
                   if any("schedule" in rule.get("if", "") for rule in job.get("rules", []))
                   for command in job["script"]],
    }
    variables = {"github": github["env"], "gitlab": gitlab["variables"]}

    def expanded(definition, command):  # the CI's variables; an expression or a CI-set one: "X"
        command = re.sub(r"\$\{\{[^}]*\}\}", "X", command)
        return re.sub(r"\$(\w+)", lambda m: variables[definition].get(m.group(1), "X"), command)
    for definition, commands in scheduled.items():
        profiles = set()
        for command in commands:
            words = shlex.split(expanded(definition, command))
            if words[:2] == ["./pmlab", "nightly"]:
                profiles.add(nightly.parse_args(words[2:]).profile or "q35-ovmf")
            elif words[:2] == ["./pmlab", "soak"]:
                args = soak.parse_args(words[2:])
                assert args.guests >= 2 and args.mode == ["mem"], (definition, command)
                profiles.add(args.profile or "q35-ovmf")
        assert profiles == {"q35-ovmf", "pc-seabios"}, (definition, commands)
        # the LAVA lab too: brought up, its test run, then taken down
        lava = [c for c in commands if "test_lava_lab.py" in c or c.startswith("./pmlab lava ")]
        assert any(c == "./pmlab lava up" for c in lava), (definition, commands)
        assert any("pytest/test_lava_lab.py --pipeline-tests" in c for c in lava), (definition, commands)


def test_version3_records_keep_their_callbacks_through_merge(tmp_path):
    """Merge reads records in the shards' run directories and writes them in
    another: the shared callback layouts and pmtest logs go along, those the
    merged records refer to, once each, as the single run holds them."""
    from dashboards import compute, testing
    from lab import records as record_format

    compact = testing.version3(testing.with_callbacks(testing.recorded_records()))
    single = RunDir(str(tmp_path / "single"), "night-1")
    for record in compact:
        single.append(dict(record, run_id="night-1"))
    expected = {r["cycle"]: (record_format.callbacks(r), record_format.pmtest(r))
                for r in read_cycles(single.cycles_path)}
    assert sum(bool(calls) for calls, _ in expected.values()) >= 9  # the reports recorded
    shards = _split(single.path, compact, 2, str(tmp_path / "shards"))
    merged = str(tmp_path / "merged" / "night-1")
    merge_mod.merge(merged, shards)
    assert {r["cycle"]: (record_format.callbacks(r), record_format.pmtest(r))
            for r in read_cycles(os.path.join(merged, "cycles.jsonl"))} == expected
    with open(os.path.join(merged, record_format.SHARED_FILE), "rb") as got, \
            open(os.path.join(single.path, record_format.SHARED_FILE), "rb") as want:
        assert got.read() == want.read()
    assert json.dumps(compute.compute([merged]), sort_keys=True) == \
        json.dumps(compute.compute([single.path]), sort_keys=True)


def test_initramfs_is_stale_when_a_device_driver_module_changed(tmp_path):
    """A driver-only commit (the regression corpus's e1000e, ahci cases)
    rebuilds only out/drivers/...ko: the device guest's image must be
    rebuilt, or the device guest boots the previous driver."""
    repo, artifacts = tmp_path / "repo", tmp_path / "out"
    (repo / "guest").mkdir(parents=True)
    (repo / "guest" / "init").write_text("#!/bin/sh\n")
    driver = artifacts / "drivers" / "lib" / "modules" / "6.1" / "ahci.ko"
    driver.parent.mkdir(parents=True)
    driver.write_bytes(b"old")
    (artifacts / "modules").mkdir()
    image = artifacts / "initramfs.cpio.gz"
    image.write_bytes(b"image")
    os.utime(repo / "guest" / "init", (1000, 1000))
    os.utime(driver, (1000, 1000))
    assert commit_mod.initramfs_current(str(artifacts), repo=str(repo))[0]
    os.utime(driver, (os.stat(image).st_mtime + 10,) * 2)
    current, why = commit_mod.initramfs_current(str(artifacts), repo=str(repo))
    assert not current and "ahci.ko" in why
