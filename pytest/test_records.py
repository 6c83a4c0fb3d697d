"""lab.records: the append-only cycles.jsonl, supersession and the summary."""

import json
import multiprocessing
import os

from lab.records import (DONE, ERROR, RECORD_VERSION, STARTED, RunDir, append_records, close_interrupted,
                         failed_callbacks, mark_done, nearest_rank, new_record, pass_rate,
                         read_cycles, state_of, summarize, verdict_counts,
                         wilson, write_cycles)


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


def test_every_record_built_carries_its_version_and_identity_first():
    from lab.modes import parse_mode
    started = new_record("r1", 7, parse_mode("disk", "reboot"), guest="w0", knobs=[])
    assert list(started) == ["record_version", "run_id", "cycle", "status", "mode", "wake", "pm_test", "guest",
                             "knobs"]
    assert (started["record_version"], started["status"], started["wake"]) == (RECORD_VERSION, STARTED, "reboot")
    done = new_record("r1", 8, parse_mode("mem"), DONE, verdict=ERROR, phase="boot")
    assert (done["record_version"], state_of(done)) == (RECORD_VERSION, ERROR)
    closed = close_interrupted(started)
    assert (closed["record_version"], closed["status"], started["status"]) == (RECORD_VERSION, DONE, STARTED)
    assert mark_done(started, host_end="t") is started and list(started)[-1] == "host_end"


def test_injected_cycles_are_counted_but_not_judged():
    hang = dict(record(2, verdict="hang"), expected_verdict="hang")
    rate = pass_rate([record(1), hang, record(3, verdict="fail")])
    assert (rate["passed"], rate["judged"], rate["injected"], rate["rate"]) == (1, 2, 1, 0.5)
    assert rate["ci95"] == wilson(1, 2) and rate["ci95"][0] < 0.5 < rate["ci95"][1]


def test_nearest_rank_percentile():
    values = list(range(1, 21))
    assert nearest_rank(values, 0.95) == 19 and nearest_rank(values, 0.5) == 10 and nearest_rank([7], 0.99) == 7


def test_failed_callbacks_read_from_fields_and_from_old_reasons():
    new = {"failed_callbacks": [{"device": "a (acpi)", "cb": "[suspend]", "err": -5}]}
    assert failed_callbacks(new) == new["failed_callbacks"]
    old = {"reason": "callbacks returned errors: [('pmtest_legacy.6', 'bus[suspend]', -5)]"}
    assert failed_callbacks(old) == [{"device": "pmtest_legacy.6", "cb": "bus[suspend]", "err": -5}]


# ------------------------------------------------------------------ version 3: compact callbacks, --keep

def fresh_process():
    """Forget every shared value read or made so far, as a new process would."""
    from lab import records as record_format

    record_format._shared.clear()
    record_format._shared_files.clear()
    record_format._layout_columns.clear()


def recorded_cycle(name, keep, tmp_path):
    """A recorded cycle judged and recorded again as lab/cycle.py DrivenCycle.finish
    does it (judge_with_order, keep_evidence, RunDir.append)."""
    from lab import modes
    from lab.judge import judge_with_order, keep_evidence
    from recordings_util import records, report

    recorded = records()[name]
    text = report(name)
    record = {key: recorded[key] for key in ("cycle", "mode", "wake", "guest_boot_id", "timeline", "token")}
    record.update(record_version=3, run_id="again", status="done")
    record.update(judge_with_order(modes.parse_mode(recorded["mode"], recorded["wake"]), text, 0,
                                   recorded["libvirt_events"], recorded["evidence"], recorded["timeline"],
                                   recorded["token"], recorded["guest_boot_id"]))
    run = RunDir(str(tmp_path), "again", keep=keep)
    keep_evidence(run, record, text, recorded["evidence"])
    run.append(record)
    return run, recorded, text


def test_failing_cycle_keeps_all_its_evidence_under_keep_failures(tmp_path):
    """The recorded ->suspend fault: its record and report still carry the
    console lines, the trace (callbacks) and the pmtest log that explain it."""
    import gzip

    from lab import guest_report, records as record_format, trace

    run, recorded, text = recorded_cycle("mem-fault-suspend", "failures", tmp_path)
    fresh_process()
    again, = read_cycles(run.cycles_path)
    assert again["verdict"] == "fail" and again["evidence"] == recorded["evidence"]
    assert any("returns -5" in line for line in again["evidence"])  # the kernel's own word, on the console
    with gzip.open(run.file(again["report"]), "rt") as source:
        kept = source.read()
    assert kept == text
    parts = guest_report.sections(kept)
    assert "pmtest_legacy.6" in parts["pmtest_log"]
    assert trace.failed_callbacks(trace.callbacks(trace.parse(parts["trace"])))[0][0] == \
        "pmtest_legacy.6 (pmtest_legacy)"
    # the record alone names the failed callback and carries every callback and the pmtest log
    calls = record_format.callbacks(again)
    assert [c["err"] for c in calls["pmtest_legacy.6 (pmtest_legacy)"] if c["err"]] == [-5]
    assert record_format.callback_errors(again)[0]["device"] == "pmtest_legacy.6 (pmtest_legacy)"
    assert record_format.pmtest(again)["pmtest_legacy.6"]
    assert len(calls) == len(trace.callbacks(trace.parse(parts["trace"])))


def test_passing_cycle_under_keep_failures_is_small_and_keeps_no_report(tmp_path):
    run, recorded, _ = recorded_cycle("mem", "failures", tmp_path)
    again, = read_cycles(run.cycles_path)
    assert again["verdict"] == "pass" and "report" not in again and not os.path.isdir(run.file("reports"))
    assert again["evidence"] == [] and again["evidence_lines"] == len(recorded["evidence"])
    with open(run.cycles_path, "rb") as source:
        assert len(source.read()) < 5000
    full_run, _, _ = recorded_cycle("mem", "full", tmp_path / "full")
    full, = read_cycles(full_run.cycles_path)
    assert os.path.isfile(full_run.file(full["report"])) and full["evidence"] == recorded["evidence"]


def test_version3_callbacks_read_back_as_traced_and_travel_between_runs(tmp_path):
    """The compact fields give back every callback of the recorded trace; a
    record read from one run and appended to another takes its shared values
    along (a nightly chunk, a merged shard)."""
    from lab import pmtest_log, records as record_format, trace
    from recordings_util import report
    from lab import guest_report

    parts = guest_report.sections(report("mem-fault-resume"))
    sequences = trace.callbacks(trace.parse(parts["trace"]))
    log = pmtest_log.by_device(pmtest_log.parse(parts["pmtest_log"]))
    compact = dict(record(1), record_version=3, **record_format.compact_fields(sequences, log))
    first = RunDir(str(tmp_path), "first")
    first.append(compact)
    fresh_process()
    read, = read_cycles(first.cycles_path)
    expected = {device: [{"cb": c["cb"], "driver": trace.split_device_id(device)[1], "t": None, "us": c["us"],
                          "err": c["err"]} for c in calls] for device, calls in sequences.items()}
    assert record_format.callbacks(read) == expected and record_format.pmtest(read) == log
    second = RunDir(str(tmp_path), "second")
    second.append(dict(read, cycle=7))
    fresh_process()
    moved, = read_cycles(second.cycles_path)
    assert record_format.callbacks(moved) == expected
    second.append(dict(moved, cycle=8))  # the run holds them already: not written again
    with open(os.path.join(second.path, record_format.SHARED_FILE)) as source:
        assert len(source.readlines()) == 2  # the layout and the pmtest log, once
    fresh_process()
    try:
        RunDir(str(tmp_path), "third").append(dict(moved, cycle=9))  # values this process never saw
    except record_format.RecordError as error:
        assert "neither read" in str(error)
    else:
        raise AssertionError("a record whose shared values are unknown was written")


def test_committed_version_2_and_1_recordings_still_read(tmp_path):
    """run-cycles.jsonl.gz (version 2 triples) and cycles.jsonl (version 1
    without callbacks) read through the same accessor."""
    import gzip

    from lab import records as record_format
    from recordings_util import RECORDINGS

    path = tmp_path / "cycles.jsonl"
    with gzip.open(os.path.join(RECORDINGS, "run-cycles.jsonl.gz"), "rb") as source:
        path.write_bytes(source.read())
    run = read_cycles(str(path))
    assert len(run) == 6
    calls = record_format.callbacks(run[0])
    assert len(calls) == 712 and calls["platform"][0] == {"cb": "[suspend]", "driver": None, "t": None,
                                                         "us": 426.0, "err": 0}
    assert record_format.pmtest(run[0])["pmtest_full.0"][0] == "prepare:suspend=0"
    assert record_format.callback_errors(run[0]) == []
    old = read_cycles(os.path.join(RECORDINGS, "cycles.jsonl"))
    assert all(record_format.callbacks(r) == {} for r in old)


def test_host_events_are_read_under_the_new_and_the_old_name():
    from lab.records import EVENTS_FIELD, host_events
    events = [[1.0, "pmsuspend", None], [2.0, "pmwakeup", None]]
    assert EVENTS_FIELD == "host_events"
    assert host_events({"host_events": events}) == events
    assert host_events({"libvirt_events": events}) == events  # records written before the rename
    assert host_events({"host_events": [], "libvirt_events": events}) == []
    assert host_events({}) == []


def test_release_free_memory_gives_the_freed_heap_back():
    """What keeps a long lab.run's resident set flat: 40 MB freed under a
    block still in use stays resident (glibc cannot shrink the heap past
    it) until release_free_memory(), which must hand it back."""
    from lab.cycle import release_free_memory, rss_kib
    release_free_memory()
    before = rss_kib()
    blocks = [b"x" * 65536 for _ in range(640)]  # 40 MB on the heap, below glibc's mmap threshold
    pin = b"y" * 65536  # allocated last: the top of the heap stays in use
    del blocks
    held = rss_kib()
    assert held - before > 30_000, (before, held)
    assert release_free_memory()
    assert held - rss_kib() > 30_000, (held, rss_kib())
    assert pin
