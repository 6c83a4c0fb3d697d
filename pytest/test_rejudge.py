"""./pmlab judge (lab/rejudge.py): a recorded run judged again offline gives
the verdicts the live run stored, and other verdicts when a rule changes.

The run directory is made of real recordings (pytest/recorded_run.py)."""

import json
import os
import subprocess
import sys

import pytest

from cli import main as cli
from lab import rejudge
from lab.oracle import rules
from conftest import REPO
from recorded_run import make_run_dir


@pytest.fixture
def run_dir(tmp_path):
    return make_run_dir(tmp_path / "run-recorded")


def stored(run):
    out = {}
    for line in (run / "cycles.jsonl").read_text().splitlines():
        record = json.loads(line)
        out[record["cycle"]] = (record.get("verdict"), record.get("phase"))
    return out


def pmlab_judge(*args):
    return subprocess.run([sys.executable, "-m", "cli.main", "judge", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_judge_reproduces_the_stored_verdicts(run_dir):
    done = pmlab_judge(run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    items = rejudge.rejudge_run(str(run_dir))
    recorded = stored(run_dir)
    judged = [item for item in items if item.new is not None]
    assert len(judged) == 10, "every recorded cycle with a report is judged again"
    assert {item.old for item in judged} >= {("pass", None), ("fail", "suspend"), ("fail", "resume")}
    for item in judged:
        assert item.new == item.old == recorded[item.cycle]
    hang = [item for item in items if item.old[0] == "hang"]
    assert hang and hang[0].new is None, "a hang has no report: the host's watch decided it"
    assert "0 changed" in done.stdout and "HANG/SUSPEND kept" in done.stdout


def test_judge_changes_verdicts_when_a_rule_changes(run_dir, monkeypatch, capsys):
    # The seed's rule: children suspend before their parents. Reversed, every
    # recorded cycle that reached the devices phase breaks it.
    monkeypatch.setitem(rules.PARENT_FIRST, "suspend", True)
    assert cli.main(["judge", str(run_dir)]) == 1
    out = capsys.readouterr().out
    changed = [item for item in rejudge.rejudge_run(str(run_dir)) if item.changed]
    assert {item.mode for item in changed} >= {"mem/pmwakeup", "freeze/powerbutton", "disk/platform"}
    assert all(item.old == ("pass", None) and item.new == ("fail", "ordering") for item in changed)
    assert "PASS -> FAIL/ORDERING  CHANGED: order:" in out and "children run before their parents" in out


def test_judge_changes_a_verdict_when_the_proof_rule_changes(run_dir, monkeypatch):
    # lab/judge.py's proof rules are judged again too: pm_test-core must now
    # reach a phase its recording never reached.
    from lab import judge
    monkeypatch.setitem(judge.PM_TEST_REACH, "core", ("machine_suspend", "thaw_processes"))
    changed = [item for item in rejudge.rejudge_run(str(run_dir)) if item.changed]
    assert [(item.mode, item.new) for item in changed] == [("pm_test-core/none", ("fail", "sleep"))]


def test_judge_counts_an_unreadable_report_against_the_run(run_dir):
    os.unlink(run_dir / "reports" / "cycle3.txt.gz")
    done = pmlab_judge(run_dir, "--changed")
    assert done.returncode == 1
    assert "cycle    3 freeze/powerbutton: PASS NOT JUDGED (report unreadable" in done.stdout
    assert "cycle    1 " not in done.stdout  # --changed prints only what differs


def test_judge_finds_a_run_by_id_under_results(run_dir):
    done = pmlab_judge(run_dir.name, "--results", run_dir.parent)
    assert done.returncode == 0, done.stderr


def test_judge_refuses_a_directory_that_is_no_run(tmp_path):
    done = pmlab_judge(tmp_path)
    assert done.returncode == 2
    assert f"{tmp_path} is not a run directory: it has no cycles.jsonl" in done.stderr


def damage_lines(run, damage):
    """Rewrite RUN/cycles.jsonl through damage(lines) -> text."""
    lines = (run / "cycles.jsonl").read_text().splitlines(keepends=True)
    (run / "cycles.jsonl").write_text(damage(lines))


def test_judge_refuses_a_cut_last_line_naming_it(run_dir):
    # the audit: the last line cut in half turned a PASS into "UNFINISHED kept", rc 0
    damage_lines(run_dir, lambda lines: "".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    number = len((run_dir / "cycles.jsonl").read_text().splitlines())
    done = pmlab_judge(run_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"judge: damaged line {run_dir}/cycles.jsonl:{number}: not JSON (no newline: cut short)" in done.stderr
    assert "--lenient" in done.stderr and "UNFINISHED" not in done.stdout


def test_judge_names_every_damaged_line_and_goes_on_with_lenient(run_dir):
    # a garbage line, a record cut in the middle, a JSON line that is no cycle record
    def damage(lines):
        middle = len(lines) // 2
        cut = lines[middle][:40] + "\n"
        return "".join(lines[:3] + ["garbage\n"] + lines[3:middle] + [cut] + lines[middle + 1:] + ['{"cycle": "x"}\n'])
    damage_lines(run_dir, damage)
    path = f"{run_dir}/cycles.jsonl"
    total = len((run_dir / "cycles.jsonl").read_text().splitlines())
    strict = pmlab_judge(run_dir)
    assert strict.returncode == 2
    middle = (total - 2) // 2 + 2  # where the cut record went, after the garbage line
    named = [line.split(": ")[1] for line in strict.stderr.splitlines() if line.startswith("judge: damaged line ")]
    assert named == [f"damaged line {path}:{n}" for n in (4, middle, total)], strict.stderr
    assert f"{path}:4: not JSON" in strict.stderr and f"{path}:{total}: no integer \"cycle\"" in strict.stderr
    lenient = pmlab_judge(run_dir, "--lenient")
    assert lenient.stderr.count("judge: damaged line ") == 3, lenient.stderr
    assert "3 damaged lines skipped (--lenient)" in lenient.stdout
    assert lenient.returncode == 0, "the rest judged again as recorded"


def test_judge_of_an_intact_run_names_no_damage(run_dir):
    done = pmlab_judge(run_dir)
    assert done.returncode == 0 and "damaged" not in done.stderr + done.stdout


def test_an_interrupted_cycle_is_kept_as_recorded_and_said_so(tmp_path):
    from lab.modes import parse_mode
    from lab.records import close_interrupted, new_record
    closed = close_interrupted(new_record("r", 2, parse_mode("mem"), guest="g"))
    item = rejudge.rejudge_record(str(tmp_path), closed)
    assert item.new is None and not item.differs and item.reason.startswith("interrupted")
