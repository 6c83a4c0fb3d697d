"""lab.records: the append-only cycles.jsonl, supersession and the summary."""

import json
import multiprocessing
import os

from lab.records import (RunDir, append_records, close_interrupted, failed_callbacks, hang_dump_path,
                         nearest_rank, pass_rate, read_cycles, renumbered_side_files, report_path, state_of,
                         summarize, verdict_counts, wilson, write_cycles)


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


# ---------------------------------------------------------------- the one reader's rules

def _lines(tmp_path, *records, raw=()):
    path = tmp_path / "cycles.jsonl"
    with open(path, "w") as out:
        for item in records:
            out.write(json.dumps(item) + "\n")
        for text in raw:
            out.write(text)
    return str(path)


def test_unfinished_cycle_counts_as_unfinished_only(tmp_path):
    records = read_cycles(_lines(tmp_path, record(1), record(2, "started")))
    assert [state_of(r) for r in records] == ["pass", "unfinished"]
    counts = verdict_counts(records)
    assert counts == {"pass": 1, "fail": 0, "hang": 0, "error": 0, "unfinished": 1}
    assert sum(counts.values()) == len(records)
    rate = pass_rate(records)
    assert (rate["passed"], rate["judged"], rate["rate"]) == (1, 2, 0.5)


def test_duplicate_lines_give_one_cycle(tmp_path):
    path = _lines(tmp_path, record(1, "started"), record(1, "started"), record(1), record(1))
    assert [(r["cycle"], r["status"]) for r in read_cycles(path)] == [(1, "done")]


def test_done_after_started_wins(tmp_path):
    path = _lines(tmp_path, record(3, "started"), record(3, verdict="fail"))
    assert [r["verdict"] for r in read_cycles(path)] == ["fail"]


def test_started_after_done_never_replaces_it(tmp_path):
    path = _lines(tmp_path, record(3, verdict="fail"), record(3, "started"))
    assert [(r["status"], r["verdict"]) for r in read_cycles(path)] == [("done", "fail")]


def test_later_done_replaces_earlier_done(tmp_path):
    path = _lines(tmp_path, record(3, verdict="fail"), record(3, verdict="pass"))
    assert [r["verdict"] for r in read_cycles(path)] == ["pass"]


def test_reader_reports_bad_lines_with_their_numbers(tmp_path):
    path = _lines(tmp_path, record(1), [1, 2], {"status": "done"}, raw=['{"cycle": 2, "sta'])
    problems = []
    assert [r["cycle"] for r in read_cycles(path, problem=lambda n, m: problems.append((n, m)))] == [1]
    assert [n for n, _ in problems] == [2, 3, 4]
    assert "cut short" in problems[-1][1]


def test_cycle_whose_last_word_was_refused_is_excluded(tmp_path):
    path = _lines(tmp_path, record(1, "started"), dict(record(1, "started"), bad=True),
                  record(2), dict(record(2), bad=True))
    excluded = []
    kept = read_cycles(path, check=lambda r, n: "bad" not in r, excluded=excluded)
    assert [r["cycle"] for r in kept] == [2] and excluded == [1]


def test_the_writer_appends_whole_lines_and_write_cycles_replaces(tmp_path):
    path = str(tmp_path / "cycles.jsonl")
    append_records(path, [record(1, "started"), record(1)])
    append_records(path, [record(2)])
    assert [r["cycle"] for r in read_cycles(path)] == [1, 2]
    write_cycles(path, [record(5)])
    assert [r["cycle"] for r in read_cycles(path)] == [5]
    assert os.listdir(tmp_path) == ["cycles.jsonl"]


def test_interrupted_closes_as_error_and_pass_rate_ignores_errors():
    closed = close_interrupted(record(4, "started"), 1796300000.0)
    assert (state_of(closed), closed["phase"]) == ("error", "interrupted") and closed["host_end"]
    rate = pass_rate([record(1), closed])
    assert (rate["judged"], rate["rate"]) == (1, 1.0)


def test_injected_cycles_are_counted_but_not_judged():
    hang = dict(record(2, verdict="hang"), expected_verdict="hang")
    rate = pass_rate([record(1), hang, record(3, verdict="fail")])
    assert (rate["passed"], rate["judged"], rate["injected"], rate["rate"]) == (1, 2, 1, 0.5)
    assert rate["ci95"] == wilson(1, 2) and rate["ci95"][0] < 0.5 < rate["ci95"][1]


def test_nearest_rank_percentile():
    values = list(range(1, 21))
    assert nearest_rank(values, 0.95) == 19 and nearest_rank(values, 0.5) == 10 and nearest_rank([7], 0.99) == 7


def test_side_files_follow_a_renumbered_cycle():
    old = dict(record(3), guest="w0", report=report_path(3), hang_dump=hang_dump_path(3, "w0"))
    assert renumbered_side_files(old, 13) == {"report": report_path(13), "hang_dump": hang_dump_path(13, "w0")}


def test_failed_callbacks_read_from_fields_and_from_old_reasons():
    new = {"failed_callbacks": [{"device": "a (acpi)", "cb": "[suspend]", "err": -5}]}
    assert failed_callbacks(new) == new["failed_callbacks"]
    old = {"reason": "callbacks returned errors: [('pmtest_legacy.6', 'bus[suspend]', -5)]"}
    assert failed_callbacks(old) == [{"device": "pmtest_legacy.6", "cb": "bus[suspend]", "err": -5}]
