"""lab.run at a run's edges: a reused --run-id is refused unless --resume,
which numbers its cycles after the last one recorded and never touches a
finished cycle; each cycle's line as its record is written; Ctrl-C records
the cycle in flight as interrupted (out of the pass rate, no failure) and
exits 130; the run ends with one count line and the cycles that did not
pass (text, --quiet or --json).

The engine here is a stand-in that writes records and reports as
lab.cycle does, without a guest: what is tested is lab.run's handling of
the run directory, not a cycle (the guest tests drive real ones)."""

import io
import json
import os
import time

import pytest

from cli import main as cli
from dashboards import buckets, compute, inputs
from lab import modes, records as records_module
from lab import run as lab_run
from lab.records import (INTERRUPTED, PASS, RunDir, RunExists, close_interrupted, mark_done, new_record,
                         not_as_expected, pass_rate, read_cycles, read_report, report_path, state_of,
                         summarize, verdict_counts)
from lab.request import Cycle, RunRequest

MEM = modes.parse_mode("mem")


class StandInEngine:
    """Writes each planned cycle as lab.cycle would: its "started" line,
    its report (reports/cycleN.txt.gz, naming `tag`) and its "done" line;
    a KeyboardInterrupt at `interrupt_at`, after its "started" line."""

    def __init__(self, request, tag, interrupt_at=None, verdicts=None):
        self.request, self.tag, self.interrupt_at, self.verdicts = request, tag, interrupt_at, verdicts or {}

    def where(self):
        return "a stand-in engine"

    def cycles(self, rundir):
        for cycle in self.request.cycles:
            started = new_record(rundir.run_id, cycle.number, cycle.mode, guest="g",
                                 host_start=records_module.iso(time.time()))
            rundir.append(started)
            if cycle.number == self.interrupt_at:
                raise KeyboardInterrupt
            report = rundir.write_file(report_path(cycle.number), f"{self.tag} cycle {cycle.number}\n",
                                       compress=True)
            verdict = self.verdicts.get(cycle.number, PASS)
            yield rundir.append(mark_done(dict(started), verdict=verdict, host_seconds=0.01, report=report,
                                          phase=None if verdict == PASS else "suspend",
                                          reason=None if verdict == PASS else "pmtest_legacy.6 returned -5"))

    def close(self):
        pass

    def summary(self):
        return {}


def request_of(tmp_path, count, run_id="r", resume=False):
    return RunRequest(cycles=tuple(Cycle(n, MEM) for n in range(1, count + 1)), artifacts="/nonexistent",
                      results=str(tmp_path), run_id=run_id, manifest=False, resume=resume)


def run_with(monkeypatch, request, tag, style="text", **engine_options):
    """lab.run.run(request) on a StandInEngine; returns (result, engines made)."""
    made = []

    def engine_for(checked, progress=None):
        made.append(StandInEngine(checked, tag, **engine_options))
        return made[-1]

    monkeypatch.setattr(lab_run, "engine_for", engine_for)
    return lab_run.run(request, style=style), made


# ---------------------------------------------------------------- a reused run id

def test_run_dir_refuses_an_existing_run_only_when_asked_for_a_new_one(tmp_path):
    RunDir(str(tmp_path), "r", new=True).append({"cycle": 1, "status": "done", "verdict": "pass"})
    with pytest.raises(RunExists, match="run r exists"):
        RunDir(str(tmp_path), "r", new=True)
    assert RunDir(str(tmp_path), "r").last_cycle() == 1  # continuing it on purpose (a nightly) still works
    RunDir(str(tmp_path), "other", new=True)  # a directory without records is no run yet (commit's marker)


def test_continued_after_numbers_a_plan_after_the_last_recorded_cycle():
    request = RunRequest(cycles=(Cycle(1, MEM), Cycle(2, MEM, (("fault", "* suspend 5 1"),))),
                         artifacts="/a", results="/r", run_id="x")
    assert [(c.number, c.knobs) for c in request.continued_after(5).cycles] == [
        (6, ()), (7, (("fault", "* suspend 5 1"),))]
    assert request.continued_after(0) is request
    chunk = request.replace(cycles=(Cycle(7, MEM), Cycle(9, MEM)))  # a nightly chunk: after it already
    assert chunk.continued_after(5) is chunk


def test_a_reused_run_id_is_refused_before_any_engine_and_resume_continues_it(tmp_path, monkeypatch, capsys):
    first, _ = run_with(monkeypatch, request_of(tmp_path, 2), "first")
    assert first.code == 0
    capsys.readouterr()

    refused, made = run_with(monkeypatch, request_of(tmp_path, 2), "second")
    error = capsys.readouterr().err
    assert refused.code == 2 and not made  # nothing started
    assert "run r exists already" in error and "--resume" in error and "2 cycles recorded" in error

    resumed, _ = run_with(monkeypatch, request_of(tmp_path, 3, resume=True), "second")
    assert resumed.code == 0 and resumed.continued_after == 2
    assert [r["cycle"] for r in resumed.records] == [3, 4, 5]
    run_dir = str(tmp_path / "r")
    recorded = read_cycles(os.path.join(run_dir, "cycles.jsonl"))
    assert [(r["cycle"], r["verdict"]) for r in recorded] == [(n, "pass") for n in range(1, 6)]
    # the first run's cycles and reports are as they were written
    assert read_report(run_dir, report_path(1)) == "first cycle 1\n"
    assert read_report(run_dir, report_path(3)) == "second cycle 3\n"
    with open(os.path.join(run_dir, "cycles.jsonl")) as source:
        assert sum(json.loads(line)["cycle"] == 1 for line in source) == 2  # started + done, nothing after


def test_the_command_refuses_a_reused_run_id_and_a_resume_without_one(tmp_path, capsys):
    RunDir(str(tmp_path), "taken").append({"cycle": 1, "status": "done", "verdict": "pass"})
    assert cli.main(["run", "--results", str(tmp_path), "--run-id", "taken", "--mode", "mem"]) == 2
    error = capsys.readouterr().err
    assert "run taken exists already" in error and "--resume" in error
    assert cli.main(["run", "--results", str(tmp_path), "--resume", "--mode", "mem"]) == 2
    assert "--resume needs --run-id" in capsys.readouterr().err


def test_the_commit_pipeline_refuses_a_reused_run_id_before_writing_into_it(tmp_path, capsys):
    from pipelines import commit
    RunDir(str(tmp_path), "taken").append({"cycle": 1, "status": "done", "verdict": "pass"})
    assert commit.main(["--results", str(tmp_path), "--run-id", "taken"]) == 2
    assert "run taken exists already" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "taken")) == ["console", "cycles.jsonl"]  # no marker, no manifest


# ---------------------------------------------------------------- Ctrl-C

def test_ctrl_c_records_the_cycle_in_flight_as_interrupted_and_exits_130(tmp_path, monkeypatch, capsys):
    result, _ = run_with(monkeypatch, request_of(tmp_path, 3), "run", interrupt_at=2)
    out, error = capsys.readouterr()
    assert result.code == 130
    assert "interrupted during cycle 2/3: cycle 2 recorded as interrupted, 1 cycle finished" in error
    recorded = read_cycles(str(tmp_path / "r" / "cycles.jsonl"))
    assert [(r["cycle"], r["status"], state_of(r)) for r in recorded] == [(1, "done", "pass"),
                                                                          (2, "done", "interrupted")]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["pass_rate"] == 1.0 and summary["counts"]["interrupted"] == 1 and not summary["failed_cycles"]
    assert "2 cycles: 1 passed, 0 failed, 0 hung, 0 lab errors, 1 interrupted" in out


def interrupted_record(number=2):
    return close_interrupted(new_record("r", number, MEM, guest="g"), time.time())


def test_an_interrupted_cycle_is_out_of_the_rate_and_of_every_failure():
    passed = mark_done(new_record("r", 1, MEM), verdict=PASS)
    cycles = [passed, interrupted_record()]
    assert pass_rate(cycles)["judged"] == 1 and pass_rate(cycles)["rate"] == 1.0
    assert verdict_counts(cycles)[INTERRUPTED] == 1
    assert not not_as_expected(cycles) and not summarize(cycles)["failed_cycles"]
    normalised = [inputs.normalise(record, "r", None) for record in cycles]
    assert [buckets.classify(cycle) for cycle in normalised] == [[], []]
    assert compute.failures(normalised)["total"] == 0
    assert compute.success(normalised)["all"]["counts"][INTERRUPTED] == 1


# ---------------------------------------------------------------- progress

def test_each_cycle_is_told_once_with_its_place_and_time_left_on_long_runs():
    out, now = io.StringIO(), [0.0]
    progress = lab_run.Progress([Cycle(n, MEM) for n in range(1, 13)], out, clock=lambda: now[0])
    for number in range(1, 7):
        now[0] += 2.0
        record = mark_done(new_record("r", number, MEM), verdict=PASS, host_seconds=1.94)
        progress.recorded(record)
        progress.recorded(record)  # told again as lab.run is handed it: said once
    lines = out.getvalue().splitlines()
    assert lines[0] == "cycle 1/12 mem: PASS 1.9 s"
    assert len(lines) == 6 and "left" not in lines[3]
    assert lines[4] == "cycle 5/12 mem: PASS 1.9 s; about 14 s left"  # 7 more at 2 s each


def test_a_resumed_plan_and_a_failing_cycle_are_told_as_such():
    progress = lab_run.Progress([Cycle(n, MEM) for n in (4, 5, 6)], io.StringIO())
    failed = mark_done(new_record("r", 5, MEM), verdict="fail", phase="suspend", reason="x returned -5",
                       host_seconds=2.5)
    assert lab_run.cycle_line(failed, progress.where(5)) == "cycle 5 (2/3) mem: FAIL 2.5 s in suspend: x returned -5"
    assert progress.where(9) == "cycle 9 (a rerun)"


# ---------------------------------------------------------------- the end of a run

def finished_run(pages=None):
    records = [mark_done(new_record("r", n, MEM), verdict=PASS, host_seconds=1.0, report=report_path(n))
               for n in range(1, 19)]
    records[6] = mark_done(new_record("r", 7, MEM), verdict="fail", phase="suspend",
                           reason="pmtest_legacy.6 bus[suspend] returned -5", report=report_path(7))
    return lab_run.RunResult(1, records, "/results/r", "r", summarize(records))


def test_the_end_of_a_run_is_one_count_line_then_the_cycles_that_did_not_pass():
    result = finished_run()
    lines = lab_run.report_lines(result, pages={7: "/results/r/timelines/cycle-0007.html"})
    final = lines.index("18 cycles: 17 passed, 1 failed, 0 hung, 0 lab errors")
    assert lines[final + 1:] == [
        "  cycle 7 mem/pmwakeup: FAIL in suspend: pmtest_legacy.6 bus[suspend] returned -5",
        "      /results/r/timelines/cycle-0007.html",
        "results: /results/r"]
    quiet = lab_run.report_lines(result, quiet=True)  # no dashboard drawn: how to draw the page
    assert quiet == ["18 cycles: 17 passed, 1 failed, 0 hung, 0 lab errors",
                     "  cycle 7 mem/pmwakeup: FAIL in suspend: pmtest_legacy.6 bus[suspend] returned -5",
                     "      ./pmlab timeline r 7 draws its timeline page"]


def test_injected_and_interrupted_cycles_are_named_in_the_count_line_only_when_there_are_some():
    injected = dict(mark_done(new_record("r", 2, MEM), verdict="hang", phase="suspend"), expected_verdict="hang")
    records = [mark_done(new_record("r", 1, MEM), verdict=PASS), injected, interrupted_record(3)]
    assert lab_run.final_line(lab_run.tally(records)) == \
        "3 cycles: 1 passed, 0 failed, 0 hung, 0 lab errors, 1 injected, 1 interrupted"
    assert records_module.not_passed(records) == []


def test_json_prints_the_summary_alone_on_stdout(capsys):
    lab_run.print_report(finished_run(), "json", {7: "/p/cycle-0007.html"})
    value = json.loads(capsys.readouterr().out)
    assert (value["cycles"], value["passed"], value["failed"], value["exit"]) == (18, 17, 1, 1)
    assert [(c["cycle"], c["verdict"], c["timeline"]) for c in value["not_passed"]] == [
        (7, "fail", "/p/cycle-0007.html")]


def test_a_json_run_keeps_stdout_for_the_summary_and_a_quiet_one_says_only_the_end(tmp_path, monkeypatch, capsys):
    run_with(monkeypatch, request_of(tmp_path, 3, run_id="j"), "j", style="json", verdicts={2: "fail"})
    out, error = capsys.readouterr()
    value = json.loads(out)  # stdout is the summary alone
    assert (value["run_id"], value["failed"], [c["cycle"] for c in value["not_passed"]]) == ("j", 1, [2])
    assert "cycle 1/3 mem: PASS" in error  # progress went to stderr
    run_with(monkeypatch, request_of(tmp_path, 3, run_id="q"), "q", style="quiet", verdicts={2: "fail"})
    out, error = capsys.readouterr()
    assert out.splitlines() == ["3 cycles: 2 passed, 1 failed, 0 hung, 0 lab errors",
                                "  cycle 2 mem/pmwakeup: FAIL in suspend: pmtest_legacy.6 returned -5",
                                "      ./pmlab timeline q 2 draws its timeline page"]
    assert not error
