"""lab.records: the append-only cycles.jsonl, supersession and the summary."""

import json
import multiprocessing
import os

import pytest

import independent
from lab.records import (DONE, ERROR, RECORD_VERSION, STARTED, RunDir, append_records, close_interrupted,
                         failed_callbacks, mark_done, nearest_rank, new_record, not_as_expected, pass_rate,
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


def test_a_later_started_line_supersedes_an_earlier_one(tmp_path):
    """A cycle started again (a resumed run) stands for its newest start
    until a done line comes."""
    run = RunDir(str(tmp_path), "r1")
    run.append(dict(record(1, "started"), host_start="first"))
    run.append(dict(record(1, "started"), host_start="second"))
    assert [r["host_start"] for r in read_cycles(run.cycles_path)] == ["second"]


def test_a_done_record_without_a_valid_verdict_counts_as_the_labs_error():
    damaged = {"cycle": 1, "status": "done", "verdict": "bogus"}
    assert state_of(damaged) == ERROR and state_of({"cycle": 2, "status": "done"}) == ERROR
    assert verdict_counts([damaged])[ERROR] == 1


def test_a_lab_error_settled_by_its_rerun_is_not_held_against_the_run():
    error = dict(record(3, verdict="error"), phase="lab")
    rerun = dict(record(4), rerun_of=3)
    unsettled = dict(record(5, verdict="error"), phase="lab")
    assert [r["cycle"] for r in not_as_expected([error, rerun, unsettled])] == [5]


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
    assert counts == {"pass": 1, "fail": 0, "hang": 0, "error": 0, "interrupted": 0, "unfinished": 1}
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


def test_a_damaged_status_is_reported_and_cannot_stand_for_its_cycle(tmp_path):
    # a line of cycle 1 whose status was damaged would otherwise replace its "started" line
    path = _lines(tmp_path, record(1, "started"), dict(record(1), status="dXne"), record(2))
    problems = []
    assert [(r["cycle"], r["status"]) for r in read_cycles(path, problem=lambda n, m: problems.append((n, m)))] \
        == [(1, "started"), (2, "done")]
    assert problems == [(2, "status 'dXne' is neither 'started' nor 'done'")]


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


def test_interrupted_closes_as_interrupted_and_pass_rate_leaves_it_out():
    closed = close_interrupted(record(4, "started"), 1796300000.0)
    assert (state_of(closed), closed["phase"]) == ("interrupted", "interrupted") and closed["host_end"]
    rate = pass_rate([record(1), closed])
    assert (rate["judged"], rate["rate"]) == (1, 1.0)
    # as it stood before it was closed, the same cycle was counted against the rate
    assert pass_rate([record(1), record(4, "started")])["judged"] == 2


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
    assert rate["ci95"] == [0.0945, 0.9055]  # 1 of 2: worked by hand in test_wilson_interval_known_values


# Wilson score intervals (z = 1.96) from scipy 1.10.1's
# binomtest(k, n).proportion_ci(0.95, method="wilson"), rounded to 4 places.
# 1 of 2 by hand: p = 0.5, z^2 = 3.8415, denominator 1 + z^2/2 = 2.9207,
# centre (0.5 + z^2/4) / 2.9207 = 0.5, half-width
# z * sqrt(0.25/2 + z^2/16) / 2.9207 = 1.96 * 0.60423 / 2.9207 = 0.40547.
KNOWN_WILSON = {(1, 2): [0.0945, 0.9055], (19, 20): [0.7639, 0.9911], (8, 10): [0.4902, 0.9433],
                (0, 10): [0.0, 0.2775], (10, 10): [0.7225, 1.0], (1, 3): [0.0615, 0.7923]}


@pytest.mark.parametrize("counts", sorted(KNOWN_WILSON))
def test_wilson_interval_known_values(counts):
    assert wilson(*counts) == KNOWN_WILSON[counts]


def test_wilson_interval_agrees_with_scipy():
    for trials in range(1, 41):
        for successes in range(trials + 1):
            assert wilson(successes, trials) == independent.wilson(successes, trials), (successes, trials)
    assert wilson(0, 0) is None


def test_nearest_rank_percentile():
    values = list(range(1, 21))
    assert nearest_rank(values, 0.95) == 19 and nearest_rank(values, 0.5) == 10 and nearest_rank([7], 0.99) == 7


@pytest.mark.parametrize("size, fraction, rank", [
    # sizes where fraction * size ends in .5 or below: rounding would pick a lower rank than the definition
    (12, 0.95, 12),  # 11.4: 11 of 12 is 91.7 %, below 95 %
    (5, 0.5, 3),     # 2.5: 2 of 5 is 40 %
    (30, 0.95, 29),  # 28.5: 28 of 30 is 93.3 %
    (14, 0.9, 13),   # 12.6 rounds up either way
    (110, 0.99, 109)])  # 108.9
def test_nearest_rank_is_the_smallest_value_covering_the_fraction(size, fraction, rank):
    values = [10 * n for n in range(1, size + 1)]
    assert nearest_rank(values, fraction) == 10 * rank == independent.nearest_rank(values, fraction)


def test_failed_callbacks_read_from_fields_and_from_old_reasons():
    new = {"failed_callbacks": [{"device": "a (acpi)", "cb": "[suspend]", "err": -5}]}
    assert failed_callbacks(new) == new["failed_callbacks"]
    old = {"reason": "callbacks returned errors: [('pmtest_legacy.6', 'bus[suspend]', -5)]"}
    assert failed_callbacks(old) == [{"device": "pmtest_legacy.6", "cb": "bus[suspend]", "err": -5}]


# ------------------------------------------------------------------ version 3: compact callbacks, --keep

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


def _compact_record(cycle=1):
    """A version 3 record of the recorded ->resume fault as judging makes it
    (carrying its shared values), and its callbacks and pmtest log as traced."""
    from lab import guest_report, pmtest_log, records as record_format, trace
    from recordings_util import report

    parts = guest_report.sections(report("mem-fault-resume"))
    sequences = trace.callbacks(trace.parse(parts["trace"]))
    log = pmtest_log.by_device(pmtest_log.parse(parts["pmtest_log"]))
    compact = dict(record(cycle), record_version=3, **record_format.compact_fields(sequences, log))
    expected = {device: [{"cb": c["cb"], "driver": trace.split_device_id(device)[1], "t": None, "us": c["us"],
                          "err": c["err"]} for c in calls] for device, calls in sequences.items()}
    return compact, expected, log


def test_version3_callbacks_read_back_as_traced_and_travel_between_runs(tmp_path):
    """The compact fields give back every callback of the recorded trace; a
    record read from one run and appended to another takes the shared values
    its reader gives (merge), and only those its new run lacks."""
    from lab import records as record_format

    compact, expected, log = _compact_record()
    assert record_format.callbacks(compact) == expected  # judged, not yet written: it carries its values
    first = RunDir(str(tmp_path), "first")
    written = first.append(compact)
    assert record_format.CARRIED_FIELD not in compact  # the writer took them out: the record is as written
    assert written == compact and record_format.callbacks(written) == expected  # read through its run
    read, = read_cycles(first.cycles_path)
    assert read == compact and read.reader.cycles_path == first.cycles_path
    assert record_format.callbacks(read) == expected and record_format.pmtest(read) == log
    second = RunDir(str(tmp_path), "second")
    with pytest.raises(record_format.RecordError, match="neither"):
        second.append(dict(read, cycle=7))  # a plain copy knows no run, and "second" holds nothing yet
    second.append(dict(read, cycle=7), shared=read.reader.shared_values([read]))
    moved, = read_cycles(second.cycles_path)
    assert record_format.callbacks(moved) == expected and record_format.pmtest(moved) == log
    second.append(dict(moved, cycle=8))  # the run holds them already: not written again
    with open(os.path.join(second.path, record_format.SHARED_FILE)) as source:
        assert len(source.readlines()) == 2  # the layout and the pmtest log, once
    with open(second.cycles_path) as source:
        assert record_format.CARRIED_FIELD not in source.read()


def test_a_record_is_read_from_its_own_run_only(tmp_path):
    """Two runs with the same callback layout and pmtest log, one of which
    lost its shared.jsonl: having read the other run, in the same reader
    pool even, does not make the damaged run's records readable."""
    from lab import records as record_format

    for name in ("whole", "damaged"):
        compact, expected, log = _compact_record()
        RunDir(str(tmp_path), name).append(compact)
    os.unlink(os.path.join(str(tmp_path), "damaged", record_format.SHARED_FILE))
    pool = record_format.SharedValues()
    whole, = record_format.RunReader(os.path.join(str(tmp_path), "whole", "cycles.jsonl"), pool).read()
    damaged, = record_format.RunReader(os.path.join(str(tmp_path), "damaged", "cycles.jsonl"), pool).read()
    assert record_format.callbacks(whole) == expected and record_format.pmtest(whole) == log
    assert damaged == whole
    for read_back in (record_format.callbacks, record_format.callback_columns, record_format.callback_errors,
                      record_format.pmtest):
        with pytest.raises(record_format.RecordError, match="shared.jsonl"):
            read_back(damaged)
    with pytest.raises(record_format.RecordError, match="read it through its run"):
        record_format.callbacks(dict(whole))  # a plain copy of a written record knows no run


def test_a_fresh_process_reads_each_run_through_its_own_reader(tmp_path):
    """In a new process, records of two runs read one after the other each
    answer from their own run: no state carried over between reads."""
    import subprocess
    import sys

    from lab import records as record_format

    for name in ("a", "b"):
        compact, expected, _ = _compact_record()
        RunDir(str(tmp_path), name).append(compact)
    os.unlink(os.path.join(str(tmp_path), "b", record_format.SHARED_FILE))
    script = """if True:
        import sys
        from lab import records
        a, = records.read_cycles(sys.argv[1] + "/a/cycles.jsonl")
        b, = records.read_cycles(sys.argv[1] + "/b/cycles.jsonl")
        calls = records.callbacks(a)
        try:
            records.callbacks(b)
        except records.RecordError:
            print(len(calls), "b refused")
        else:
            print(len(calls), "b answered from a's values")
    """
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.stdout.split() == [str(len(expected)), "b", "refused"], done.stdout + done.stderr


def test_the_records_module_keeps_no_state_between_runs():
    """No mutable value at module level: every cache lives in a RunReader
    (or a SharedValues its caller shares)."""
    from lab import records as record_format

    mutable = {name: type(value).__name__ for name, value in vars(record_format).items()
               if not name.startswith("__") and (isinstance(value, (dict, list, set, bytearray))
                                                 or type(value).__module__ == record_format.__name__)}
    assert mutable == {}


def test_a_shared_file_read_while_it_grows_gives_every_whole_line(tmp_path):
    """A reader takes in what shared.jsonl gained since it last looked,
    whole lines only."""
    from lab import records as record_format

    run = RunDir(str(tmp_path), "live")
    compact, expected, _ = _compact_record()
    run.append(compact)
    reader = record_format.RunReader(run.cycles_path)
    first, = reader.read()
    assert reader.callbacks(first) == expected
    with open(reader.shared_path, "a") as out:
        out.write(json.dumps({"key": "x" * 20, "value": [1]})[:10])  # a line cut short
    later = dict(record(2), record_version=3, pmtest_ref=record_format._content_key({"new": ["a"]}))
    with pytest.raises(record_format.RecordError):
        reader.pmtest(later)
    with open(reader.shared_path, "a") as out:  # the cut line's rest, then a value a writer added
        out.write(json.dumps({"key": "x" * 20, "value": [1]})[10:] + "\n")
    append_records(run.cycles_path, [later], shared={later["pmtest_ref"]: {"new": ["a"]}})
    assert reader.pmtest(later) == {"new": ["a"]}
    assert len(reader.shared_keys()) == 3 and "x" * 20 not in reader.shared_keys()  # its key is not its hash


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
