"""lab.records: the append-only cycles.jsonl, supersession and the summary."""

import json
import multiprocessing
import os

from lab.records import RunDir, read_cycles, summarize


def record(cycle, status="done", verdict="pass", mode="mem", seconds=1.0):
    r = {"cycle": cycle, "status": status, "mode": mode, "host_seconds": seconds}
    if status == "done":
        r["verdict"] = verdict
    return r


def test_started_line_superseded_by_done(tmp_path):
    run = RunDir(str(tmp_path), "r1")
    run.append(record(1, "started"))
    assert read_cycles(run.cycles_path)[0]["status"] == "started"
    run.append(record(1, verdict="fail"))
    assert [r["verdict"] for r in read_cycles(run.cycles_path)] == ["fail"]
    with open(run.cycles_path) as lines:
        assert len(lines.readlines()) == 2  # nothing rewritten


def test_unfinished_cycle_still_recorded_and_counted(tmp_path):
    run = RunDir(str(tmp_path), "r1")
    run.append(record(1))
    run.append(record(2, "started"))
    summary = run.write_summary()
    assert summary["cycles"] == 2 and summary["counts"]["unfinished"] == 1
    assert summary["failed_cycles"][0]["cycle"] == 2


def test_truncated_last_line_is_skipped(tmp_path):
    run = RunDir(str(tmp_path), "r1")
    run.append(record(1))
    with open(run.cycles_path, "a") as out:
        out.write('{"cycle": 2, "status": "do')
    assert [r["cycle"] for r in read_cycles(run.cycles_path)] == [1]


def test_latest_symlink_follows_newest_run(tmp_path):
    RunDir(str(tmp_path), "r1")
    RunDir(str(tmp_path), "r2")
    assert os.readlink(tmp_path / "latest") == "r2"


def test_summary_counts_and_rates():
    records = [record(1), record(2, verdict="hang"), record(3, mode="freeze", seconds=3.0),
               record(4, verdict="fail", mode="freeze")]
    summary = summarize(records)
    assert summary["counts"]["pass"] == 2 and summary["pass_rate"] == 0.5
    assert summary["modes"]["freeze"]["host_seconds"]["mean"] == 2.0
    assert {c["cycle"] for c in summary["failed_cycles"]} == {2, 4}
    json.dumps(summary)


def _append_many(path, worker):
    run = RunDir(os.path.dirname(path), os.path.basename(path))
    for n in range(50):
        run.append({"cycle": worker * 1000 + n, "status": "done", "mode": "mem", "verdict": "pass",
                    "evidence": ["x" * 5000]})


def test_parallel_writers_never_interleave(tmp_path):
    path = str(tmp_path / "r1")
    os.makedirs(path)
    workers = [multiprocessing.Process(target=_append_many, args=(path, w)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with open(os.path.join(path, "cycles.jsonl")) as lines:
        parsed = [json.loads(line) for line in lines]
    assert len(parsed) == 200


def test_expected_hang_is_not_a_failed_cycle():
    hang = record(7, verdict="hang")
    hang["expected_verdict"] = "hang"
    summary = summarize([record(1), hang])
    assert summary["failed_cycles"] == []
    assert summary["expected_non_pass"] == [{"cycle": 7, "verdict": "hang", "phase": None}]
    assert summary["counts"]["hang"] == 1
