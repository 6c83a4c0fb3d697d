"""dashboards.compute on recorded cycles and variations of them.

Inputs are the 13 real records of pytest/recordings/cycles.jsonl, their
callbacks rebuilt from the recorded guest reports and their host_phases from
their timelines (dashboards/testing.py), copies of those records with one
thing changed per test, and small synthetic records for host time and the
harness's memory.
"""

import collections
import copy
import json
import math
import os
import random
import statistics
import subprocess
import sys

import pytest

import independent
from dashboards import buckets, compute, inputs, manifest, render, schemas, testing
from lab import records as record_format, trace

REPO = testing.REPO


@pytest.fixture(scope="module")
def recorded():
    return testing.with_host_phases(testing.with_callbacks(testing.recorded_records()))


def by_cycle(records, number):
    return copy.deepcopy(next(r for r in records if r["cycle"] == number))


def dashboard_of(*paths):
    return compute.compute([str(p) for p in paths])


def single_run(tmp_path, records, run_id="recording", **kwargs):
    """A run directory holding records, stamped with its run id as the lab does."""
    records = [dict(record, run_id=run_id) for record in records]
    return testing.write_run(str(tmp_path / "results"), run_id, records, **kwargs)


def write_lines(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        for line in lines:
            out.write(line if isinstance(line, str) else json.dumps(line) + "\n")


# ------------------------------------------------------------------ schemas

def test_schemas_are_valid_and_accept_real_records(recorded, tmp_path):
    for name in (schemas.CYCLE_RECORD, schemas.RUN_SUMMARY, schemas.RUN_MANIFEST, schemas.DASHBOARD):
        schemas.validator(name)  # check_schema raises on a broken schema
    for record in testing.recorded_records() + recorded + testing.compact(recorded) + testing.version3(recorded):
        assert schemas.errors(schemas.CYCLE_RECORD, record) == [], record["cycle"]
        assert schemas.errors(schemas.CYCLE_RECORD, testing.started_line(record)) == []
    run = single_run(tmp_path, recorded)
    with open(os.path.join(run, "summary.json")) as source:
        assert schemas.errors(schemas.RUN_SUMMARY, json.load(source)) == []


def test_schema_rejects_wrong_records(recorded):
    record = by_cycle(recorded, 1)
    for change, path in [({"verdict": "maybe"}, ["verdict"]), ({"cycle": "1"}, ["cycle"]),
                         ({"suspend_ms": "fast"}, ["suspend_ms"]), ({"status": "done", "verdict": None}, ["verdict"])]:
        bad = dict(record, **change)
        assert [p for p, _ in schemas.errors(schemas.CYCLE_RECORD, bad)] == [path], change
    done_without_verdict = {k: v for k, v in record.items() if k != "verdict"}
    assert schemas.errors(schemas.CYCLE_RECORD, done_without_verdict)
    bad_callback = copy.deepcopy(record)
    bad_callback["callbacks"]["platform"][0]["us"] = "slow"
    assert schemas.errors(schemas.CYCLE_RECORD, bad_callback)[0][0][:2] == ["callbacks", "platform"]


def test_manifest_of_this_host_is_valid(tmp_path):
    artifacts = tmp_path / "out"
    artifacts.mkdir()
    (artifacts / "manifest.json").write_text(json.dumps(
        {"variant": "patched", "tree": "linux-source-6.1.tar.xz", "tree_version": "6.1.192",
         "kernelrelease": "6.1.192+", "series_hash": "a290a2537b597450", "config_hash": "f72122b6d06e6eb3",
         "compiler": "gcc", "project_commit": "7a5ed5e"}))
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    written = manifest.write_manifest(str(run_dir), str(artifacts), shard=(1, 2))
    with open(run_dir / "manifest.json") as source:
        on_disk = json.load(source)
    assert on_disk == written
    assert schemas.errors(schemas.RUN_MANIFEST, on_disk) == []
    assert on_disk["run_id"] == "run-1" and on_disk["shard"] == {"index": 1, "count": 2}
    assert on_disk["kernel"]["series_hash"] == "a290a2537b597450"
    assert on_disk["kernel"]["tree_version"] == "6.1.192"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert on_disk["project"]["commit"] == head
    qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout
    assert on_disk["tools"]["qemu"] and on_disk["tools"]["qemu"] in qemu
    assert on_disk["tools"]["ovmf"] and on_disk["tools"]["libvirtd"]


def test_manifest_without_kernel_artifacts_says_why(tmp_path):
    collected = manifest.collect(str(tmp_path / "missing"))
    assert collected["kernel"]["series_hash"] is None
    assert any("manifest.json" in error for error in collected["errors"])
    assert schemas.errors(schemas.RUN_MANIFEST, collected) == []


# ------------------------------------------------------------------ success rates

def test_wilson_interval():
    assert compute.wilson(0, 0) is None
    low, high = compute.wilson(8, 10)  # the textbook example: 0.490 .. 0.943
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)
    assert compute.wilson(10, 10)[1] == 1.0 and compute.wilson(0, 10)[0] == 0.0
    for k, n in [(1, 3), (50, 100), (999, 1000)]:
        low, high = compute.wilson(k, n)
        assert low < k / n < high
    assert compute.wilson(50, 100)[1] - compute.wilson(50, 100)[0] > \
        compute.wilson(500, 1000)[1] - compute.wilson(500, 1000)[0]


def test_success_per_mode_matches_records(recorded, tmp_path):
    board = dashboard_of(single_run(tmp_path, recorded))
    assert board["input_errors"] == []
    assert board["inputs"]["cycles"] == len(recorded)
    for mode in {r["mode"] for r in recorded}:
        mine = [r for r in recorded if r["mode"] == mode]
        block = board["success"]["modes"][mode]
        for verdict in ("pass", "fail", "hang", "error"):
            assert block["counts"][verdict] == sum(r["verdict"] == verdict for r in mine), (mode, verdict)
        judged = sum(r["verdict"] in ("pass", "fail", "hang") for r in mine)
        passed = sum(r["verdict"] == "pass" for r in mine)
        assert block["rate"] == round(passed / judged, 4)
        assert block["ci95"] == independent.wilson(passed, judged)
    assert schemas.errors(schemas.DASHBOARD, board) == []


def test_unfinished_cycle_counts_once_and_errors_are_not_judged(recorded, tmp_path):
    started_only = dict(by_cycle(recorded, 1), status="started")
    lab_error = dict(by_cycle(recorded, 2), verdict="error", phase="lab",
                     reason="pmlab-cycle exited with 137: Killed")
    board = dashboard_of(single_run(tmp_path, [started_only, lab_error, by_cycle(recorded, 100)]))
    mem = board["success"]["modes"]["mem"]
    assert mem["counts"] == {"pass": 1, "fail": 0, "hang": 0, "error": 1, "interrupted": 0, "unfinished": 1}
    assert mem["judged"] == 2 and mem["rate"] == 0.5
    names = {b["bucket"] for b in board["buckets"]}
    assert names == {"unfinished", "error:pmlab-cycle exited with N"}


def test_lab_errors_are_counted_per_cause_against_the_budget_and_kept_out_of_the_rate(tmp_path):
    press = ("power button pressed before the guest's first suspend-to-idle idle: the press ended s2idle_loop "
             "3.1 ms after it began, before s2idle_enter(); the kernel did what it must")
    records = [synthetic(n, "freeze") for n in range(1, 96)]
    records += [synthetic(96, "freeze", "error", phase="lab", reason=press),
                synthetic(97, "freeze", "error", phase="lab", reason=press.replace("3.1", "0.4")),
                synthetic(98, "mem", "error", phase="lab", reason="QEMU exited during phase resume (libvirt: ...)"),
                synthetic(99, "freeze", rerun_of=96, rerun_attempt=1),
                synthetic(100, "freeze", rerun_of=97, rerun_attempt=1),
                # provoked on purpose (pytest/test_cycles.py's early press): no lab problem
                synthetic(101, "freeze", "error", phase="lab", reason=press, expected_verdict="error")]
    board = dashboard_of(single_run(tmp_path, records))
    section = board["lab_errors"]
    assert (section["cycles"], section["errors"], section["share"], section["reruns"]) == (101, 3, 0.0297, 2)
    assert section["over_budget"] and section["budget"] == compute.LAB_ERROR_BUDGET
    assert [(c["cause"], c["count"], c["modes"]) for c in section["causes"]] == [
        ("power button pressed before the guest's first suspend-to-idle idle", 2, {"freeze": 2}),
        ("QEMU exited during phase resume (libvirt", 1, {"mem": 1})]
    assert section["causes"][0]["first"]["cycle"] == 96 and section["causes"][0]["last"]["cycle"] == 97
    freeze = board["success"]["modes"]["freeze"]
    assert (freeze["judged"], freeze["rate"]) == (97, 1.0)  # errors counted, never judged
    assert schemas.errors(schemas.DASHBOARD, board) == []


def test_no_lab_errors_is_within_budget(recorded, tmp_path):
    section = dashboard_of(single_run(tmp_path, [by_cycle(recorded, 100)]))["lab_errors"]
    assert (section["errors"], section["over_budget"], section["causes"]) == (0, False, [])


def _probes(broken=()):
    return [{"device": name, "probe": "disk", "ok": name not in broken, "ms": 40,
             "error": "no block device" if name in broken else None} for name in ("nvme-disk", "sata-disk")]


def test_works_after_resume_per_device_with_its_interval(tmp_path):
    records = [synthetic(n, devices="zoo", probes=_probes()) for n in range(1, 19)]
    records += [synthetic(19, "disk", "fail", devices="zoo", probes=_probes(broken=("nvme-disk",)),
                          phase="device-check", reason="devices not working after the resume: nvme-disk"),
                synthetic(20, "disk", devices="zoo", probes=_probes()),
                synthetic(21)]  # a lean guest's cycle: no probes
    section = dashboard_of(single_run(tmp_path, records))["works_after_resume"]
    assert section["cycles"] == 20
    nvme, sata = section["devices"]
    assert (nvme["device"], nvme["probes"], nvme["ok"], nvme["rate"]) == ("nvme-disk", 20, 19, 0.95)
    assert nvme["ci95"] == [0.7639, 0.9911]  # scipy's Wilson interval of 19/20 (pytest/test_records.py)
    assert nvme["modes"] == {"disk": {"probes": 2, "ok": 1, "rate": 0.5, "ci95": [0.0945, 0.9055]},
                             "mem": {"probes": 18, "ok": 18, "rate": 1.0, "ci95": [0.8241, 1.0]}}  # scipy's Wilson
    assert nvme["first_failure"]["cycle"] == nvme["last_failure"]["cycle"] == 19
    assert nvme["last_failure"]["error"] == "no block device"
    assert (sata["rate"], sata["last_failure"]) == (1.0, None)
    assert schemas.errors(schemas.DASHBOARD, dashboard_of(single_run(tmp_path, records))) == []


def test_no_device_guest_gives_an_empty_works_section(recorded, tmp_path):
    section = dashboard_of(single_run(tmp_path, [by_cycle(recorded, 100)]))["works_after_resume"]
    assert (section["cycles"], section["devices"]) == (0, [])


# ------------------------------------------------------------------ buckets

def test_buckets_of_the_recorded_failures(recorded, tmp_path):
    board = dashboard_of(single_run(tmp_path, recorded))
    found = {b["bucket"]: b for b in board["buckets"]}
    assert set(found) == {"fail-in-suspend:pmtest_legacy.6 (pmtest_legacy):EIO (-5)", "fail-in-resume:0000:00:10.0 (pmtest_edu):EIO (-5)",
                          "hang-in-suspend"}
    for bucket in found.values():
        source = next(r for r in recorded if r["verdict"] != "pass" and buckets.classify(
            inputs.normalise(copy.deepcopy(r), "x", None)) == [bucket["bucket"]])
        assert bucket["first"] == {"run_id": "recording", "cycle": source["cycle"],
                                   "host_start": source["host_start"], "mode": source["mode"]}
        assert bucket["reason"] == source["reason"]
    # the evidence shown is the kernel's own line about the failing device
    assert "pmtest_legacy.6" in found["fail-in-suspend:pmtest_legacy.6 (pmtest_legacy):EIO (-5)"]["evidence"]
    assert "returns -5" in found["fail-in-resume:0000:00:10.0 (pmtest_edu):EIO (-5)"]["evidence"]


@pytest.mark.parametrize("number", [9, 10])
def test_failing_device_is_the_same_from_every_source(recorded, number):
    """callbacks field, failed_callbacks, suspend_stats delta and (version 1)
    reason text name the same device; the trace sources also name its driver."""
    full = by_cycle(recorded, number)
    assert full["callbacks"]  # rebuilt from the report
    from_callbacks = dict(full, reason=None, suspend_stats_delta={})
    from_fields = {k: v for k, v in full.items() if k not in ("callbacks", "suspend_stats_delta")}
    from_fields.update(reason=None, failed_callbacks=[
        {"device": device, "cb": cb, "err": err} for device, cb, err in trace.failed_callbacks(
            {device: [{"cb": c["cb"], "err": c["err"]} for c in calls] for device, calls in full["callbacks"].items()})])
    from_stats = {k: v for k, v in full.items() if k != "callbacks"}
    from_stats["reason"] = None
    from_reason = {k: v for k, v in full.items() if k not in ("callbacks", "suspend_stats_delta")}
    compact = testing.version3([from_callbacks])[0]
    found = [buckets.classify(inputs.normalise(copy.deepcopy(r), "x", None))
             for r in (full, from_callbacks, from_fields, from_stats, from_reason, compact)]
    assert found[0][0].startswith("fail-in-") and found[0][0].endswith(":EIO (-5)")
    assert found[:3] == [found[0]] * 3 and found[5] == found[0] and " (pmtest_" in found[0][0]  # name and driver
    # suspend_stats and a version 1 reason know the name only
    assert found[3] == found[4] == [found[0][0].split(" (")[0] + ":EIO (-5)"]
    bare = {k: v for k, v in from_reason.items() if k != "reason"}
    assert buckets.classify(inputs.normalise(bare, "x", None)) == [f"fail-in-{full['phase']}"]


def test_flag_and_verdict_buckets(recorded):
    def classify(record):
        return buckets.classify(inputs.normalise(record, "x", None))

    passing = by_cycle(recorded, 1)
    assert classify(copy.deepcopy(passing)) == []
    fake = dict(passing, verdict="fail", phase="sleep",
                reason="no proof of sleep: expected 1 PMSuspended and 1 PMWakeup event, got 0 and 0")
    assert classify(fake) == ["fake-sleep"]
    warned = dict(passing, problems=["[    6.1] WARNING: CPU: 0 PID: 1 at drivers/base/power/main.c:1234"])
    assert classify(warned) == ["kernel-warning"]
    returns = dict(passing, problems=["[    6.1] pmtest_edu 0000:00:10.0: PM: dpm_run_callback(): x returns -5"])
    assert classify(returns) == []
    ordered = dict(passing, evidence=passing["evidence"] + ["[ 7.0] pmtest_full pmtest_full.7: parent pmtest_full.1 "
                                                            "should not be sleeping"])
    assert classify(ordered) == ["ordering-violation"]
    oracle = dict(passing, ordering_violations=[{"rule": "parent-after-children", "device": "pmtest_full.1",
                                                 "message": "resumed before its parent"}])
    assert classify(oracle) == ["ordering-violation:parent-after-children"]
    hung = dict(passing, verdict="hang", phase="resume", reason="no report within 60s")
    assert classify(dict(hung, problems=warned["problems"])) == ["hang-in-resume", "kernel-warning"]
    errors = [dict(passing, verdict="error", phase="lab", reason=f"LabError: guest pmlab-{n} did not boot in {n}s")
              for n in (3, 41)]
    assert classify(errors[0]) == classify(errors[1]) == ["error:LabError"]
    assert classify(dict(passing, verdict="fail", phase="thaw_processes[0] end", reason="kernel reported problems")) \
        == ["fail-in-thaw_processes"]


def test_callback_phase_agrees_with_the_lab(recorded):
    from lab import trace
    labels = {call["cb"] for r in recorded for calls in (r.get("callbacks") or {}).values() for call in calls}
    labels |= {"preparing driver[suspend]", "completing bus[resume]", "early type[restore]"}
    assert len(labels) > 10
    for label in labels:
        assert buckets.callback_phase(label) == trace.phase_of(label), label


def test_first_occurrence_is_by_time_not_by_file_order(recorded, tmp_path):
    first, second = by_cycle(recorded, 9), by_cycle(recorded, 9)
    first.update(run_id="run-b", cycle=501, host_start="2026-12-03T10:00:00.000+00:00")
    second.update(run_id="run-a", cycle=500, host_start="2026-12-03T11:00:00.000+00:00")
    later_run = testing.write_run(str(tmp_path / "results"), "run-a", [second])
    earlier_run = testing.write_run(str(tmp_path / "results"), "run-b", [first])
    for order in ([later_run, earlier_run], [earlier_run, later_run]):
        (bucket,) = dashboard_of(*order)["buckets"]
        assert bucket["count"] == 2
        assert (bucket["first"]["run_id"], bucket["first"]["cycle"]) == ("run-b", 501)
        assert (bucket["last"]["run_id"], bucket["last"]["cycle"]) == ("run-a", 500)


# ------------------------------------------------------------------ latency and timing

def test_callback_latency_per_device_and_phase(recorded, tmp_path):
    board = dashboard_of(single_run(tmp_path, recorded))
    samples = {}
    for record in recorded:
        for device, calls in (record.get("callbacks") or {}).items():
            for call in calls:
                samples.setdefault((device, buckets.callback_phase(call["cb"])), []).append(call["us"])
    assert len(samples) > 1000
    devices = board["latency"]["devices"]
    for (device, phase), values in samples.items():
        got = devices[device]["phases"][phase]
        values.sort()
        assert got["n"] == len(values)
        assert got["median"] == round(statistics.median(values), 1)
        assert got["max"] == round(max(values), 1)
        assert got["p95"] == round(values[math.ceil(0.95 * len(values)) - 1], 1)
        assert got["median"] <= got["p95"] <= got["max"]
    top = board["latency"]["top_p95"]
    assert len(top) == compute.TOP_N
    assert [row["p95"] for row in top] == sorted((row["p95"] for row in top), reverse=True)
    slowest = max(samples.items(), key=lambda item: sorted(item[1])[math.ceil(0.95 * len(item[1])) - 1])
    assert (top[0]["device"], top[0]["phase"]) == slowest[0]
    failed = {(device, buckets.callback_phase(call["cb"])) for record in recorded
              for device, calls in (record.get("callbacks") or {}).items() for call in calls if call["err"]}
    assert failed == {("pmtest_legacy.6 (pmtest_legacy)", "suspend"),
                      ("0000:00:10.0 (pmtest_edu)", "resume")}  # the two injected faults
    assert {(d, p) for d, block in devices.items() for p, s in block["phases"].items() if s["errors"]} == failed


def test_every_callback_shape_gives_the_same_latency(recorded, tmp_path):
    full = dashboard_of(single_run(tmp_path / "a", recorded))["latency"]
    triples = dashboard_of(single_run(tmp_path / "b", testing.compact(recorded)))["latency"]
    assert full["devices"]["0000:00:10.0 (pmtest_edu)"]["driver"] == "pmtest_edu"
    assert full == triples  # a triple's driver is in its device's identity
    assert dashboard_of(single_run(tmp_path / "c", testing.version3(recorded)))["latency"] == full


def test_every_record_version_gives_the_same_dashboard(recorded, tmp_path):
    """Version 1 objects, version 2 triples and version 3 compact records of
    the same cycles: one dashboard."""
    dashboards = [dashboard_of(single_run(tmp_path / name, records)) for name, records in
                  (("v1", recorded), ("v2", testing.compact(recorded)), ("v3", testing.version3(recorded)))]
    assert dashboards[0]["latency"]["devices"] and not dashboards[0]["input_errors"]
    assert dashboards[1] == dashboards[0] and dashboards[2] == dashboards[0]


def test_version3_run_without_its_shared_file_is_reported(recorded, tmp_path):
    from lab import records as record_format

    run = single_run(tmp_path / "r", testing.version3(recorded))
    os.unlink(os.path.join(run, record_format.SHARED_FILE))
    dashboard_of(single_run(tmp_path / "whole", testing.version3(recorded)))  # the same values, another run
    dashboard = dashboard_of(run)
    assert dashboard["inputs"]["cycles"] == len(recorded)
    assert any("shared.jsonl" in error["message"] for error in dashboard["input_errors"])
    assert dashboard["latency"]["devices"] == {}


def test_latency_counts_in_batches_equal_a_count_of_every_call(recorded, monkeypatch):
    """latency_counts counts a layout's records in batches of columns; that
    must equal counting every call one by one, in any record order: a tie for
    the slowest goes to the earliest (run, cycle), None and NaN are unfinished."""
    template = by_cycle(recorded, 1)
    device = "pmtest_full.3 (pmtest_full)"
    variants = []
    for run_id in ("night-a", "night-b"):
        for number in range(1, 8):
            record = copy.deepcopy(template)
            record.update(run_id=run_id, cycle=number)
            calls = record["callbacks"][device]
            calls[0]["us"] = 999.0                     # the same slowest in every record
            calls[1]["us"] = float(number % 3)         # ties below the top
            # cycle 5 is the slowest, in a batch (of 3) that a NaN starts:
            # max() of it would be the NaN
            calls[2]["us"] = {2: None, 4: float("nan"), 5: 50.0}.get(number, float(number))
            if number == 2:
                calls[2]["err"] = None                 # never returned
            variants.append(record)
    expected_us, expected_max = collections.Counter(), {}
    for record in variants:
        for name, calls in record["callbacks"].items():
            for call in calls:
                key = (name, buckets.callback_phase(call["cb"]))
                value = call["us"]
                expected_us[(key, "nan" if value != value else value)] += 1
                if value is not None and math.isfinite(value):
                    held = expected_max.get(key)
                    candidate = [value, record["run_id"], record["cycle"]]
                    if held is None or (-value, candidate[1:]) < (-held[0], held[1:]):
                        expected_max[key] = candidate
    compact = testing.version3(variants)
    monkeypatch.setattr(compute, "LATENCY_BATCH", 3)
    for seed in (1, 2):
        random.Random(seed).shuffle(compact)
        counted = compute.latency_counts(compact)
        got_us = collections.Counter()
        for (key, value), n in counted["us"].items():
            got_us[(key, "nan" if value != value else value)] += n
        assert got_us == expected_us
        assert counted["max_at"] == expected_max
    phase = [buckets.callback_phase(call["cb"]) for call in template["callbacks"][device]]
    assert expected_max[(device, phase[0])] == [999.0, "night-a", 1]
    assert expected_max[(device, phase[2])] == [50.0, "night-a", 5]


def test_unfinished_callback_is_counted(recorded, tmp_path):
    record = by_cycle(recorded, 1)
    record["callbacks"]["pmtest_full.3 (pmtest_full)"][-1].update(us=None, err=None)
    board = dashboard_of(single_run(tmp_path, [record]))
    phase = buckets.callback_phase(record["callbacks"]["pmtest_full.3 (pmtest_full)"][-1]["cb"])
    got = board["latency"]["devices"]["pmtest_full.3 (pmtest_full)"]["phases"][phase]
    assert got["unfinished"] == 1 and got["n"] == 0 and got["p95"] is None


def test_suspend_resume_distribution(recorded, tmp_path):
    board = dashboard_of(single_run(tmp_path, recorded))
    timing = board["timing"]["modes"]
    for mode in {r["mode"] for r in recorded}:
        for field in ("suspend_ms", "resume_ms"):
            values = sorted(r[field] for r in recorded if r["mode"] == mode and r["verdict"] == "pass"
                            and isinstance(r.get(field), (int, float)))
            if not values:
                assert field not in timing.get(mode, {})
                continue
            block = timing[mode][field]
            assert sum(b["count"] for b in block["histogram"]) == len(values)
            for b in block["histogram"]:
                inside = [v for v in values if v >= b["lo"] and (b["hi"] is None or v < b["hi"])]
                assert b["count"] == len(inside)
            stats = block["stats"]
            assert stats["n"] == len(values) and stats["p50"] == round(statistics.median(values), 3)
            assert stats["min"] == round(values[0], 3) and stats["max"] == round(values[-1], 3)
            assert stats["min"] <= stats["p50"] <= stats["p90"] <= stats["p95"] <= stats["p99"] <= stats["max"]
    # the failed resume (cycle 10) has timings but is not a passing cycle
    assert timing["mem"]["resume_ms"]["stats"]["n"] == sum(
        1 for r in recorded if r["mode"] == "mem" and r["verdict"] == "pass" and r.get("resume_ms") is not None)


# ------------------------------------------------------------------ host time and harness memory

MEM_STEPS = ["start-sent", "sent-pmsuspend", "pmsuspend-pmwakeup-sent", "pmwakeup-sent-report-started",
             "report-started-report", "report-ended", "ended-judged"]  # a real mem cycle's, in timeline order
DISK_STEPS = ["start-sent", "sent-stopped", "stopped-started-again", "started-again-report-started",
              "report-started-report", "report-ended", "ended-judged"]


def synthetic(cycle, mode="mem", verdict="pass", **fields):
    """A done record with just what the dashboard needs, as lab/cycle.py writes it."""
    record = {"run_id": "synthetic", "cycle": cycle, "status": "done", "mode": mode, "verdict": verdict,
              "host_start": f"2026-12-03T15:{cycle // 60:02d}:{cycle % 60:02d}.000+00:00",
              "phase": None if verdict == "pass" else "resume",
              "reason": None if verdict == "pass" else "no report within 60s"}
    record.update(fields)
    return record


def phases(steps, values):
    return dict(zip(steps, values))


def test_host_time_per_mode_in_timeline_order(tmp_path):
    mem = [[0.001, 0.2, 0.01, 1.5, 0.01, 0.0, 0.05],
           [0.003, 0.3, 0.02, 2.5, 0.03, 0.0, 0.07],
           [0.002, 0.4, 0.03, 3.1, 0.02, 0.0, 0.09]]
    records = [synthetic(n, host_phases=phases(MEM_STEPS, values)) for n, values in enumerate(mem, start=1)]
    # no report-started step (the lab saw no early data): one step less, not a step out of place
    short = ["start-sent", "sent-pmsuspend", "pmsuspend-pmwakeup-sent", "pmwakeup-sent-report", "report-ended",
             "ended-judged"]
    records.append(synthetic(4, host_phases=phases(short, [0.001, 0.3, 0.02, 2.0, 0.0, 0.06])))
    records.append(synthetic(5, mode="disk", wake="platform",
                             host_phases=phases(DISK_STEPS, [0.002, 5.2, 0.9, 21.7, 0.05, 0.0, 0.1])))
    records.append(synthetic(6))                                   # an older record: no host_phases
    records.append(synthetic(7, host_phases={}))                   # nothing timed
    records.append(synthetic(8, verdict="fail", host_phases=phases(MEM_STEPS, [9.0] * 7)))  # not passing
    records.append(synthetic(9, status="started", host_phases=phases(MEM_STEPS, [9.0] * 7)))  # unfinished
    board = dashboard_of(single_run(tmp_path, records, run_id="synthetic"))
    assert board["input_errors"] == [] and schemas.errors(schemas.DASHBOARD, board) == []
    section = board["host_time"]
    assert (section["unit"], section["cycles"], sorted(section["modes"])) == ("s", "pass", ["disk", "mem"])
    block = section["modes"]["mem"]
    assert block["cycles"] == 4
    steps = [s["step"] for s in block["steps"]]
    # the lab's order, not by name; the two alternatives for the 4th step (same place) by name
    assert steps == MEM_STEPS[:3] + ["pmwakeup-sent-report"] + MEM_STEPS[3:]
    got = {s["step"]: s for s in block["steps"]}
    with_short = mem + [[0.001, 0.3, 0.02, None, None, 0.0, 0.06]]
    for index, step in enumerate(MEM_STEPS):
        values = [row[index] for row in with_short if row[index] is not None]
        assert got[step]["n"] == len(values), step
        assert got[step]["mean"] == round(math.fsum(values) / len(values), 3), step
        assert got[step]["median"] == round(statistics.median(values), 3), step
    assert got["sent-pmsuspend"] == {"step": "sent-pmsuspend", "n": 4, "mean": 0.3, "median": 0.3}
    assert got["pmwakeup-sent-report"] == {"step": "pmwakeup-sent-report", "n": 1, "mean": 2.0, "median": 2.0}
    totals = [math.fsum(row) for row in mem] + [0.001 + 0.3 + 0.02 + 2.0 + 0.0 + 0.06]
    assert block["mean_total"] == round(math.fsum(totals) / 4, 3)
    assert block["median_total"] == round(statistics.median(totals), 3)
    disk = section["modes"]["disk"]
    assert [s["step"] for s in disk["steps"]] == DISK_STEPS and disk["cycles"] == 1
    assert disk["mean_total"] == round(0.002 + 5.2 + 0.9 + 21.7 + 0.05 + 0.0 + 0.1, 3)
    # the same records in another order give the same section
    again = dashboard_of(single_run(tmp_path / "again", list(reversed(records)), run_id="synthetic"))
    assert again["host_time"] == section


def test_host_time_of_recorded_cycles(recorded, tmp_path):
    """The recordings' timelines (no report-started / ended / judged steps yet)
    and two wake sources of mem in one mode."""
    board = dashboard_of(single_run(tmp_path, recorded))
    modes = board["host_time"]["modes"]
    passing = [r for r in recorded if r["verdict"] == "pass"]
    assert set(modes) == {r["mode"] for r in passing}
    for mode, block in modes.items():
        mine = [r for r in passing if r["mode"] == mode]
        assert block["cycles"] == len(mine)
        assert sum(s["n"] for s in block["steps"]) == sum(len(r["host_phases"]) for r in mine)
        for record in mine:  # every cycle's own steps come in its own order
            order = [s["step"] for s in block["steps"] if s["step"] in record["host_phases"]]
            assert order == list(record["host_phases"]), (mode, record["cycle"])
    assert [s["step"] for s in modes["disk"]["steps"]][0] == "start-sent"
    assert modes["mem"]["cycles"] == 4  # cycles 100, 101, 1 (pmwakeup) and 2 (rtc); 9, 10 failed, 200 hung


def test_bad_host_phases_and_harness_fields_are_reported_and_dropped(tmp_path):
    good = phases(MEM_STEPS, [0.001, 0.2, 0.01, 1.5, 0.01, 0.0, 0.05])
    bad_steps = dict(good, **{"sent-pmsuspend": -0.2, "pmsuspend-pmwakeup-sent": "slow",
                              "pmwakeup-sent-report-started": float("nan"), "report-ended": True,
                              "ended-judged": float("inf")})
    records = [synthetic(1, host_phases=good, harness_pid=7, harness_rss_kib=1000),
               synthetic(2, host_phases=bad_steps, harness_pid=7, harness_rss_kib="44 MB"),
               synthetic(3, host_phases=[["start-sent", 0.1]], harness_pid=True, harness_rss_kib=1200),
               synthetic(4, host_phases=good, harness_pid=7, harness_rss_kib=None)]  # the lab's "could not read"
    path = str(tmp_path / "results" / "synthetic" / "cycles.jsonl")
    write_lines(path, records)  # json.dumps writes NaN and Infinity, json.loads reads them
    board = dashboard_of(os.path.dirname(path))
    messages = {(e["line"], e["message"].split(":")[0]) for e in board["input_errors"]}
    assert messages == {(2, "host_phases.sent-pmsuspend"), (2, "host_phases.pmsuspend-pmwakeup-sent"),
                        (2, "host_phases.pmwakeup-sent-report-started"), (2, "host_phases.report-ended"),
                        (2, "host_phases.ended-judged"), (2, "harness_rss_kib"),
                        (3, "host_phases"), (3, "harness_pid")}
    assert board["inputs"]["cycles"] == 4 and board["success"]["modes"]["mem"]["counts"]["pass"] == 4
    got = {s["step"]: s for s in board["host_time"]["modes"]["mem"]["steps"]}
    # cycle 2 keeps its good steps only; cycle 3 has none left
    assert board["host_time"]["modes"]["mem"]["cycles"] == 3
    assert got["start-sent"]["n"] == 3 and got["report-started-report"]["n"] == 3
    assert got["sent-pmsuspend"] == {"step": "sent-pmsuspend", "n": 2, "mean": 0.2, "median": 0.2}
    assert got["ended-judged"]["n"] == 2 and got["report-ended"]["n"] == 2
    # memory: only cycle 1 has both a pid and a resident set
    assert board["harness_memory"]["runs"] == {"synthetic": [
        {"pid": 7, "cycles": 1, "first_cycle": 1, "last_cycle": 1, "first_kib": 1000, "last_kib": 1000,
         "max_kib": 1000}]}
    assert schemas.errors(schemas.DASHBOARD, board) == []
    json.loads(compute.dumps(board), parse_constant=lambda name: pytest.fail(f"{name} in the dashboard"))
    # what normalise keeps of fields it is given unchecked
    cycle = inputs.normalise(synthetic(5, host_phases=bad_steps, harness_pid="7"), "x", None)
    assert list(cycle["host_phases"]) == ["start-sent", "report-started-report"] and cycle["harness_pid"] is None
    assert inputs.normalise(synthetic(6), "x", None)["host_phases"] == {}


def test_non_finite_timings_do_not_reach_the_dashboard(tmp_path):
    """json.loads reads NaN/Infinity in a record; the page's JSON.parse would
    refuse a dashboard.json holding them."""
    records = [synthetic(1, suspend_ms=float("nan"), resume_ms=float("inf")), synthetic(2)]
    path = str(tmp_path / "results" / "synthetic" / "cycles.jsonl")
    write_lines(path, records)
    board = dashboard_of(os.path.dirname(path))
    json.loads(compute.dumps(board), parse_constant=lambda name: pytest.fail(f"{name} in the dashboard"))


def test_harness_memory_per_run_and_process(tmp_path):
    """First and last by cycle number whatever the line order; a restarted
    lab.run (a new pid) and another run are entries of their own."""
    rss = {1: (100, 40000), 2: (100, 46000), 3: (100, 44000), 4: (200, 39000), 5: (200, 39500)}
    records = [synthetic(n, harness_pid=pid, harness_rss_kib=kib) for n, (pid, kib) in rss.items()]
    records = [records[1], records[0], records[3], records[2], records[4]]   # lines not in cycle order
    records.append(synthetic(6))                                              # an older record
    records.append(synthetic(7, verdict="fail", harness_pid=200, harness_rss_kib=41000))  # any verdict counts
    run = single_run(tmp_path, records, run_id="run-a")
    other = single_run(tmp_path, [synthetic(1, harness_pid=100, harness_rss_kib=30000)], run_id="run-b")
    board = dashboard_of(run, other)
    assert board["harness_memory"] == {"unit": "KiB", "runs": {
        "run-a": [{"pid": 100, "cycles": 3, "first_cycle": 1, "last_cycle": 3, "first_kib": 40000, "last_kib": 44000,
                   "max_kib": 46000},
                  {"pid": 200, "cycles": 3, "first_cycle": 4, "last_cycle": 7, "first_kib": 39000, "last_kib": 41000,
                   "max_kib": 41000}],
        "run-b": [{"pid": 100, "cycles": 1, "first_cycle": 1, "last_cycle": 1, "first_kib": 30000,
                   "last_kib": 30000, "max_kib": 30000}]}}
    assert schemas.errors(schemas.DASHBOARD, board) == []
    assert dashboard_of(other, run)["harness_memory"] == board["harness_memory"]


def test_records_without_the_new_fields_give_empty_sections(tmp_path):
    board = dashboard_of(single_run(tmp_path, [synthetic(1), synthetic(2, mode="disk")]))
    assert board["host_time"] == {"unit": "s", "cycles": "pass", "modes": {}}
    assert board["harness_memory"] == {"unit": "KiB", "runs": {}}
    assert board["input_errors"] == [] and schemas.errors(schemas.DASHBOARD, board) == []


# ------------------------------------------------------------------ trends

def _build_runs(tmp_path, recorded, plan):
    """plan: [(commit, hour, {mode: verdict})] -> results root."""
    root = str(tmp_path / "results")
    templates = {"mem": by_cycle(recorded, 1), "freeze": by_cycle(recorded, 3), "disk": by_cycle(recorded, 4)}
    for index, (commit, hour, verdicts) in enumerate(plan):
        records = []
        for number, (mode, verdict) in enumerate(sorted(verdicts.items()), start=1):
            record = copy.deepcopy(templates[mode])
            record.update(run_id=f"run-{index}", cycle=number, host_start=f"2026-12-0{index + 1}T{hour:02d}:00:00+00:00",
                          verdict=verdict, phase=None if verdict == "pass" else "resume",
                          reason=None if verdict == "pass" else "no report within 60s")
            records.append(record)
        testing.write_run(root, f"run-{index}", records, manifest=testing.manifest(commit * 40))
    return root


def test_trends_failing_since_first_fail_last_pass(recorded, tmp_path):
    root = _build_runs(tmp_path, recorded, [
        ("a", 9, {"mem": "pass", "freeze": "fail", "disk": "pass"}),
        ("b", 9, {"mem": "hang", "freeze": "pass", "disk": "pass"}),
        ("c", 9, {"mem": "fail", "freeze": "pass", "disk": "pass"}),
        ("d", 9, {"mem": "fail", "freeze": "pass", "disk": "error"}),
    ])
    board = dashboard_of(root)
    builds = board["trends"]["builds"]
    assert [b["commit"][0] for b in builds] == ["a", "b", "c", "d"]
    kernel = recorded[0].get("kernel") or {}  # the recordings' own kernel
    assert builds[0]["key"] == ("a" * 12 + f"/{kernel.get('series_hash') or 'none'}"
                                f"/{kernel.get('variant') or 'unknown'}")
    modes = board["trends"]["modes"]
    mem = modes["mem"]
    assert mem["current"] == "fail"
    assert mem["last_pass"]["build"] == builds[0]["key"] and mem["last_pass"]["run_id"] == "run-0"
    assert mem["first_fail"]["build"] == builds[1]["key"]
    assert mem["failing_since"]["build"] == builds[1]["key"] and mem["failing_since"]["run_id"] == "run-1"
    freeze = modes["freeze"]
    assert freeze["current"] == "pass" and freeze["failing_since"] is None
    assert freeze["first_fail"]["build"] == builds[0]["key"] and freeze["last_pass"]["build"] == builds[3]["key"]
    disk = modes["disk"]  # a lab error in the last build says nothing about the kernel
    assert disk["current"] == "pass" and disk["builds"] == 3 and disk["first_fail"] is None
    assert builds[3]["modes"]["disk"]["status"] == "unknown"
    assert board["runs"]["run-2"]["manifests"][0]["commit"] == "c" * 40


def test_trends_are_ordered_by_time_not_by_name(recorded, tmp_path):
    root = _build_runs(tmp_path, recorded, [("f", 9, {"mem": "pass"}), ("0", 10, {"mem": "fail"})])
    board = dashboard_of(root)
    assert [b["commit"][0] for b in board["trends"]["builds"]] == ["f", "0"]
    assert board["trends"]["modes"]["mem"]["failing_since"]["build"].startswith("0")


# ------------------------------------------------------------------ malformed input

def test_malformed_lines_are_reported_and_the_rest_counted(recorded, tmp_path, capsys):
    good = single_run(tmp_path / "ok", recorded[:6], run_id="good-run")
    bad_dir = tmp_path / "results" / "bad-run"
    one, two, three, four, five = (dict(by_cycle(recorded, n), run_id="bad-run") for n in (1, 2, 3, 9, 10))
    two_bad_type = dict(two, suspend_ms="fast")
    three_bad_device = copy.deepcopy(three)
    three_bad_device["callbacks"]["pmtest_full.0 (pmtest_full)"][0]["us"] = "slow"
    five_no_verdict = {k: v for k, v in five.items() if k != "verdict"}
    done_line = json.dumps(four)
    lines = [
        testing.started_line(one), one,                                  # 1, 2
        "this is not json\n",                                            # 3
        testing.started_line(two), two_bad_type,                         # 4, 5
        "[1, 2, 3]\n",                                                   # 6
        testing.started_line(three), three_bad_device,                   # 7, 8
        testing.started_line(five), five_no_verdict,                     # 9, 10
        testing.started_line(four), done_line[:len(done_line) // 2],     # 11, 12 (cut short, no newline)
    ]
    write_lines(str(bad_dir / "cycles.jsonl"), lines)
    cycles_file = str(bad_dir / "cycles.jsonl")

    assert compute.main([good, str(bad_dir), "-o", str(tmp_path / "d.json")]) == 0
    stderr = capsys.readouterr().err
    with open(tmp_path / "d.json") as source:
        board = json.load(source)
    assert schemas.errors(schemas.DASHBOARD, board) == []
    lines_reported = sorted({(e["file"], e["line"]) for e in board["input_errors"]})
    assert lines_reported == [(cycles_file, n) for n in (3, 5, 6, 8, 10, 12)]
    for number in (3, 5, 6, 8, 10, 12):
        assert f"{cycles_file}:{number}:" in stderr
    messages = {e["line"]: e["message"] for e in board["input_errors"]}
    assert "suspend_ms" in messages[5] and "callbacks.pmtest_full.0 (pmtest_full)[0]" in messages[8]
    assert "verdict" in messages[10] and "cut short" in messages[12]

    # the good run is untouched
    alone = dashboard_of(good)
    assert board["runs"]["good-run"] == alone["runs"]["good-run"]
    # bad run: 1 passes; 2 counted without its timing; 3 counted without that device;
    # 9 (cut short) left with its started line = unfinished; 10 (no verdict) excluded
    assert board["runs"]["bad-run"]["cycles"] == 4
    assert board["inputs"]["excluded_cycles"] == 1
    counts = {f["cycle"]: f for f in board["failures"]["cycles"] if f["run_id"] == "bad-run"}
    assert set(counts) == {9} and counts[9]["unfinished"] and counts[9]["buckets"] == ["unfinished"]
    devices, alone_devices = board["latency"]["devices"], alone["latency"]["devices"]
    # bad-run cycles 1 and 2 (mem) and 3 (freeze) add their suspend callbacks, but
    # cycle 3's pmtest_full.0 entry was malformed and dropped, and only that device
    assert devices["pmtest_full.0 (pmtest_full)"]["phases"]["suspend"]["n"] == \
        alone_devices["pmtest_full.0 (pmtest_full)"]["phases"]["suspend"]["n"] + 2
    for device in ("pmtest_full.1 (pmtest_full)", "pmtest_full.2 (pmtest_full)", "0000:00:10.0 (pmtest_edu)"):
        assert devices[device]["phases"]["suspend"]["n"] == alone_devices[device]["phases"]["suspend"]["n"] + 3
    freeze_timing = board["timing"]["modes"]["freeze"]["suspend_ms"]["stats"]["n"]
    assert freeze_timing == alone["timing"]["modes"]["freeze"]["suspend_ms"]["stats"]["n"] + 1
    mem_timing = board["timing"]["modes"]["mem"]["suspend_ms"]["stats"]["n"]
    assert mem_timing == alone["timing"]["modes"]["mem"]["suspend_ms"]["stats"]["n"] + 1  # cycle 1 only, not 2

    assert compute.main([good, str(bad_dir), "--strict", "-o", str(tmp_path / "d2.json")]) == 1
    assert compute.main([good, "--strict", "-o", str(tmp_path / "d3.json")]) == 0


def test_bad_summary_and_manifest_are_reported(recorded, tmp_path):
    run = single_run(tmp_path, recorded[:3])
    with open(os.path.join(run, "summary.json"), "w") as out:
        out.write('{"cycles": "three"')
    with open(os.path.join(run, "manifest.json"), "w") as out:
        json.dump({"schema": "pmlab-run-manifest/1"}, out)
    board = dashboard_of(run)
    files = sorted(os.path.basename(e["file"]) for e in board["input_errors"])
    assert "summary.json" in files and "manifest.json" in files
    assert board["inputs"]["cycles"] == 3 and board["runs"]["recording"]["manifests"] == []


def test_missing_paths_and_empty_dirs(tmp_path):
    (tmp_path / "empty").mkdir()
    board = dashboard_of(tmp_path / "nowhere", tmp_path / "empty")
    assert {(os.path.basename(e["file"]), e["line"], e["message"]) for e in board["input_errors"]} == {
        ("nowhere", None, "not found"), ("empty", None, "no run directories (no */cycles.jsonl) here")}
    assert board["inputs"]["cycles"] == 0 and board["success"]["all"]["rate"] is None
    assert schemas.errors(schemas.DASHBOARD, board) == []


def test_latest_link_is_not_read_twice(recorded, tmp_path):
    run = single_run(tmp_path, recorded)
    root = os.path.dirname(run)
    assert os.path.islink(os.path.join(root, "latest"))
    assert dashboard_of(root)["inputs"]["cycles"] == len(recorded)
    assert dashboard_of(root, run, os.path.join(root, "latest"))["inputs"]["cycles"] == len(recorded)


# ------------------------------------------------------------------ determinism and shards

def test_output_is_deterministic(recorded, tmp_path):
    run = single_run(tmp_path / "a", recorded)
    first = compute.dumps(dashboard_of(run))
    assert compute.dumps(dashboard_of(run)) == first
    shuffled = list(recorded)
    random.Random(7).shuffle(shuffled)
    assert compute.dumps(dashboard_of(single_run(tmp_path / "b", shuffled))) == first
    assert "written" not in first and json.loads(first) == dashboard_of(run)


@pytest.fixture(scope="module")
def one_run(recorded, tmp_path_factory):
    """The records the shard tests split, and their dashboard as one run."""
    records = list(recorded)
    # more cycles, with distinct numbers and times, so every section has several entries
    for offset in (1000, 2000):
        for record in recorded:
            extra = copy.deepcopy(record)
            extra["cycle"] += offset
            extra["host_start"] = extra["host_start"].replace("T13:", f"T{13 + offset // 1000}:")
            records.append(extra)
    # written by two lab.run processes, each with its resident set on every record
    records = [dict(record, harness_pid=100 + index % 2, harness_rss_kib=40000 + 8 * index)
               for index, record in enumerate(records)]
    same = testing.manifest("ab" * 20)
    one = testing.write_run(str(tmp_path_factory.mktemp("one")), "20261203-130000-1", records, manifest=same)
    return records, same, compute.dumps(dashboard_of(one))


@pytest.mark.parametrize("split", ["alternate", "halves", "random"])
def test_shards_give_the_same_dashboard_as_one_run(one_run, tmp_path, split):
    records, same, single = one_run
    if split == "alternate":
        shards = [records[0::2], records[1::2]]
    elif split == "halves":
        shards = [records[:len(records) // 2], records[len(records) // 2:]]
    else:
        rng = random.Random(31)
        picks = [rng.random() < 0.5 for _ in records]
        shards = [[r for r, p in zip(records, picks) if p], [r for r, p in zip(records, picks) if not p]]
    assert all(shards)
    shard_root = str(tmp_path / "sharded")
    shard_dirs = [testing.write_run(shard_root, f"20261203-130000-1-shard{k}of2", shard,
                                    manifest=dict(same, shard={"index": k, "count": 2}))
                  for k, shard in enumerate(shards, start=1)]
    assert json.loads(single)["inputs"]["cycles"] == len(records) and json.loads(single)["buckets"]
    assert compute.dumps(dashboard_of(*shard_dirs)) == single
    assert compute.dumps(dashboard_of(*reversed(shard_dirs))) == single
    assert compute.dumps(dashboard_of(shard_root)) == single


def test_a_shard_alone_differs(recorded, tmp_path):
    """The property above is not vacuous: leaving a shard out changes the dashboard."""
    one = testing.write_run(str(tmp_path / "one"), "r", recorded)
    part = testing.write_run(str(tmp_path / "part"), "r", recorded[::2])
    assert dashboard_of(one) != dashboard_of(part)


# ------------------------------------------------------------------ page embedding

def test_render_embeds_hostile_strings_inertly(recorded, tmp_path):
    record = by_cycle(recorded, 9)
    hostile = "</script><script>alert(1)</script><!--"
    record["callbacks"][hostile] = [{"cb": "bus[suspend]", "driver": "x&y", "t": 1.0, "us": 5.0, "err": -5}]
    record["reason"] = "failed callbacks: [('" + hostile + "', 'bus[suspend]', -5)] \u2028 & <b>"
    run = single_run(tmp_path, [record])
    out = tmp_path / "page" / "dashboard.json"
    out.parent.mkdir()
    board = dashboard_of(run)
    out.write_text(compute.dumps(board))
    page = render.render(str(out))
    with open(page) as source:
        html = source.read()
    start = html.index('<script type="application/json" id="dashboard-data">') + len(
        '<script type="application/json" id="dashboard-data">')
    end = html.index("</script>", start)
    embedded = html[start:end]
    assert "<" not in embedded and ">" not in embedded and "&" not in embedded
    assert json.loads(embedded) == board
    assert html.count("</script>") == 4  # data, timeline links, chart.min.js, dashboard-page.js
    for name in ("chart.min.js", "dashboard-page.js", "dashboard-page.css"):
        assert os.path.getsize(tmp_path / "page" / name) > 0
    with open(tmp_path / "page" / "chart.min.js", "rb") as copied, open(render.CHARTJS, "rb") as original:
        assert copied.read() == original.read()


def test_page_code_uses_no_html_sinks():
    with open(os.path.join(render.PAGE, "dashboard-page.js")) as source:
        code = source.read()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in code.replace("never innerHTML", ""), sink


def test_the_dashboard_verb_runs_as_a_process(recorded, tmp_path):
    run = single_run(tmp_path, recorded)
    out = tmp_path / "cli.json"
    done = subprocess.run([sys.executable, "-m", "cli.main", "dashboard", run, "-o", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == dashboard_of(run)
    assert f"{len(recorded)} cycles from 1 runs" in done.stderr


def test_fast_callback_check_agrees_with_the_schema(recorded):
    """inputs.per_device_errors checks callbacks / pmtest by hand for speed;
    it must flag exactly what the schema flags."""
    record = by_cycle(recorded, 9)
    good_object = copy.deepcopy(record["callbacks"]["pmtest_legacy.6 (pmtest_legacy)"][0])
    entries = [good_object, ["bus[suspend]", 12.0, 0], ["bus[suspend]", None, None], dict(good_object, t=None),
               dict(good_object, driver=None), {k: v for k, v in good_object.items() if k not in ("t", "driver")}]
    broken = [dict(good_object, us="12"), dict(good_object, us=-1), dict(good_object, err=1.5),
              dict(good_object, err=True), dict(good_object, cb=None), dict(good_object, driver=3),
              dict(good_object, t="now"), {k: v for k, v in good_object.items() if k != "err"},
              ["bus[suspend]", 12.0], ["bus[suspend]", 12.0, 0, 1], [1, 12.0, 0], ["x", "12", 0], ["x", 1, 0.5],
              "bus[suspend]", None, 5]
    for entry in entries + broken:
        for name, value in (("callbacks", {"dev": [entry]}), ("pmtest", {"dev": [entry]})):
            by_schema = schemas.errors(schemas.CYCLE_RECORD, {"cycle": 1, "status": "started", "mode": "mem",
                                                               name: value})
            by_hand = inputs.per_device_errors(name, value)
            assert bool(by_schema) == bool(by_hand), (name, entry)
            assert [p[:2] for p, _ in by_schema] == [p[:2] for p, _ in by_hand], (name, entry)
        assert (entry in broken) == bool(inputs.per_device_errors("callbacks", {"dev": [entry]})), entry
    for whole in ([], "x", {"dev": "x"}, {"dev": {}}):
        for name in ("callbacks", "pmtest"):
            by_schema = schemas.errors(schemas.CYCLE_RECORD, {"cycle": 1, "status": "started", "mode": "mem",
                                                               name: whole})
            assert bool(by_schema) == bool(inputs.per_device_errors(name, whole)), (name, whole)
    assert inputs.record_errors(record) == []


def test_started_line_never_supersedes_a_done_line(recorded, tmp_path):
    """lab.records writes started before done; should a started line for a
    finished cycle ever follow it, the verdict stays (and a done line in
    another shard beats a lone started line whatever order the files come in)."""
    record = dict(by_cycle(recorded, 9), run_id="r")
    path = str(tmp_path / "a" / "r" / "cycles.jsonl")
    write_lines(path, [testing.started_line(record), record, testing.started_line(record)])
    (row,) = dashboard_of(os.path.dirname(path))["failures"]["cycles"]
    assert (row["verdict"], row["unfinished"]) == ("fail", False)
    lone = str(tmp_path / "b" / "r-shard" / "cycles.jsonl")
    write_lines(lone, [testing.started_line(record)])
    done_only = str(tmp_path / "c" / "r-other" / "cycles.jsonl")
    write_lines(done_only, [record])
    for order in ((lone, done_only), (done_only, lone)):
        (row,) = dashboard_of(*map(os.path.dirname, order))["failures"]["cycles"]
        assert (row["verdict"], row["unfinished"]) == ("fail", False)


def test_injected_failures_are_counted_not_judged(recorded, tmp_path):
    """Cycles failed on purpose (expected_verdict, lab/session.py) stay out of
    success rates and trends but keep their buckets, marked as expected."""
    records = [by_cycle(recorded, 1), dict(by_cycle(recorded, 9), expected_verdict="fail"),
               dict(by_cycle(recorded, 200), expected_verdict="hang"), by_cycle(recorded, 10)]
    board = dashboard_of(single_run(tmp_path, records))
    mem = board["success"]["modes"]["mem"]
    assert mem["counts"] == {"pass": 1, "fail": 2, "hang": 1, "error": 0, "interrupted": 0, "unfinished": 0}
    assert (mem["injected"], mem["judged"], mem["rate"]) == (2, 2, 0.5)
    assert mem["ci95"] == [0.0945, 0.9055]  # 1 of 2 (worked in pytest/test_records.py)
    found = {b["bucket"]: (b["count"], b["expected"]) for b in board["buckets"]}
    assert found == {"fail-in-suspend:pmtest_legacy.6 (pmtest_legacy):EIO (-5)": (1, 1), "hang-in-suspend": (1, 1),
                     "fail-in-resume:0000:00:10.0 (pmtest_edu):EIO (-5)": (1, 0)}
    expected = {row["cycle"]: row["expected_verdict"] for row in board["failures"]["cycles"]}
    assert expected == {9: "fail", 200: "hang", 10: "pass"}
    (build,) = board["trends"]["builds"]
    assert build["modes"]["mem"]["first_fail"]["cycle"] == 10  # the one not provoked
    assert schemas.errors(schemas.DASHBOARD, board) == []


def test_fast_schema_check_agrees_with_jsonschema(recorded):
    """schemas.is_valid (the dashboard's compiled check) accepts exactly what
    jsonschema accepts: on real records of every version and on thousands of
    copies with one field, or one item inside it, replaced by an odd value."""
    odd = [None, True, False, 0, 1, -1, 1.0, 2.5, -0.5, float("nan"), float("inf"), -float("inf"), "", "x",
           "done", "pass", [], [1], ["a", 1.5], [["sent", 1.0]], [[1, -5]], [["a", "b"]], {}, {"a": 1},
           {"a": "b"}, {"layout": "k", "us": "", "err": []}, 3, 2]
    rng = random.Random(12)
    base = [r for r in testing.recorded_records() + testing.version3(recorded) + testing.compact(recorded)]
    # without the per-device fields (checked apart): deep copies of these are cheap
    base = [{k: v for k, v in r.items() if k not in inputs.PER_DEVICE} for r in base]
    samples = list(base)
    for _ in range(3000):
        record = copy.deepcopy(rng.choice(base))
        field = rng.choice(sorted(record) + ["record_version", "callback_table", "evidence_lines", "verdict"])
        value = record.get(field)
        if isinstance(value, list) and value and rng.random() < 0.5:
            value[rng.randrange(len(value))] = rng.choice(odd)
        elif isinstance(value, dict) and value and rng.random() < 0.5:
            value[rng.choice(sorted(value))] = rng.choice(odd)
        elif rng.random() < 0.1:
            record.pop(field, None)
        else:
            record[field] = copy.deepcopy(rng.choice(odd))
        samples.append(record)
    disagree = [r for r in samples
                if schemas.is_valid(schemas.CYCLE_RECORD, r) != (not schemas.errors(schemas.CYCLE_RECORD, r))]
    assert not disagree, disagree[:1]
    assert sum(not schemas.is_valid(schemas.CYCLE_RECORD, r) for r in samples) > 1000  # the mutations bite


# ------------------------------------------------------------------ the per-run cache

def cached_dashboard(*paths):
    return compute.compute([str(p) for p in paths], cache=True)


def counting_reads(monkeypatch):
    """The cycles files read in full (not from a cache) from now on."""
    read = []
    original = inputs.read_part

    def counted(path, manifest, shared_values=None):
        read.append(os.path.basename(os.path.dirname(path)))
        return original(path, manifest, shared_values)
    monkeypatch.setattr(inputs, "read_part", counted)
    return read


def test_cached_dashboard_equals_the_recompute_and_a_new_run_reads_only_itself(recorded, tmp_path, monkeypatch):
    """Runs of every record version, one with a failing and an unfinished
    cycle: cold, warm and after one more run the cached dashboard is the
    recompute's, percentiles included; a warm run is not read again."""
    root = tmp_path / "results"
    runs = {"a-v1": recorded, "b-v2": testing.compact(recorded), "c-v3": testing.version3(recorded)}
    for offset, (run_id, records) in enumerate(runs.items()):
        moved = [dict(r, cycle=r["cycle"] + 1000 * offset,
                      host_start=r["host_start"].replace("T13:", f"T{14 + offset}:")) for r in records]
        testing.write_run(str(root), run_id, moved)
    assert not list(root.glob(f"*/{compute.CACHE_FILE}"))
    expected = compute.dumps(dashboard_of(root))
    assert json.loads(expected)["latency"]["top_p95"]
    read = counting_reads(monkeypatch)
    assert compute.dumps(cached_dashboard(root)) == expected
    assert sorted(read) == ["a-v1", "b-v2", "c-v3"] and len([c for c in root.glob(f"*/{compute.CACHE_FILE}") if not c.parent.is_symlink()]) == 3
    read.clear()
    assert compute.dumps(cached_dashboard(root)) == expected and read == []
    # a new night: only it is read
    extra = [dict(r, cycle=r["cycle"] + 5000, host_start=r["host_start"].replace("T13:", "T20:"))
             for r in testing.version3(recorded)]
    testing.write_run(str(root), "d-new", extra)
    assert compute.dumps(cached_dashboard(root)) == compute.dumps(dashboard_of(root)) != expected
    assert read == ["d-new"]
    # a run that changed is read again
    read.clear()
    testing.write_run(str(root), "a-v1", [dict(recorded[0], cycle=999)], summary=False)
    assert compute.dumps(cached_dashboard(root)) == compute.dumps(dashboard_of(root))
    assert read == ["a-v1"]


def test_cached_shards_with_overlapping_cycles_equal_the_recompute(recorded, tmp_path):
    """The same cycles in two files (a started copy and a done one, or two
    done copies): the copy that loses must not count in the latencies."""
    root = tmp_path / "results"
    done = testing.version3(recorded)
    first = [dict(r, run_id="r") for r in done]
    second = [dict(r, run_id="r", status="started") if r["cycle"] % 2 else dict(r, run_id="r", suspend_ms=1.0)
              for r in testing.compact(recorded)]
    testing.write_run(str(root), "r-shard1", first)
    testing.write_run(str(root), "r-shard2", second)
    expected = compute.dumps(dashboard_of(root))
    assert compute.dumps(cached_dashboard(root)) == expected  # cold
    assert compute.dumps(cached_dashboard(root)) == expected  # from the caches
    board = json.loads(expected)
    assert board["inputs"]["cycles"] == len(recorded) and board["input_errors"]  # the differing copies


def test_a_cache_from_other_code_or_damaged_is_not_used(recorded, tmp_path, monkeypatch):
    run = single_run(tmp_path, testing.version3(recorded))
    expected = compute.dumps(dashboard_of(run))
    cached_dashboard(run)
    cache = os.path.join(run, compute.CACHE_FILE)
    data = json.loads(open(cache).read())
    data["key"]["code"] = "older"
    data["entries"] = []
    with open(cache, "w") as out:
        json.dump(data, out)
    read = counting_reads(monkeypatch)
    assert compute.dumps(cached_dashboard(run)) == expected and read == ["recording"]
    with open(cache, "w") as out:
        out.write("{not json")
    assert compute.dumps(cached_dashboard(run)) == expected and read == ["recording"] * 2
