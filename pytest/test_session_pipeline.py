"""lab.session.Session.cycles: each cycle judged in a thread while the guest
runs the next one (unit level: the order of drives, judgings and records;
the live guests of test_cycles.py and test_soak.py run it through lab.run).

The stand-ins are lab.cycle.drive_cycle and DrivenCycle.finish, which only
log what happens when; the Session, its thread and its guest bookkeeping
are the real ones.
"""

import threading
import time

import pytest

from lab import modes, records as records_module, session as session_module
from lab.errors import LabError
from lab.records import ResultsWriteError
from lab.session import Session

MEM = modes.parse_mode("mem")


class Guest:
    def __init__(self, name):
        self.name = name
        self.closed = False

    def close(self):
        self.closed = True


class Connection:
    uri = "test:///default"

    def alive(self):
        return True


class RunDir:
    run_id = name = "pipeline"


class Driven:
    """A driven cycle whose judging takes `judge_seconds` and may fail."""

    def __init__(self, log, number, guest, judge_seconds, verdict="pass", write_error=False, meta=None):
        self.log, self.number, self.guest, self.meta = log, number, guest, meta or {}
        self.judge_seconds, self.verdict, self.write_error = judge_seconds, verdict, write_error
        self.guest_usable = True
        self.record = {"cycle": number, "status": "started"}  # what the drive knew (lab.cycle.DrivenCycle)

    def finish(self, sleepgraph_files=False):
        self.log.append(("judge-start", self.number, threading.current_thread().name))
        time.sleep(self.judge_seconds)
        if self.write_error:
            raise ResultsWriteError(f"cannot write cycles.jsonl: cycle {self.number}")
        self.log.append(("recorded", self.number))
        return {**self.meta, "cycle": self.number, "status": "done", "verdict": self.verdict, "guest": self.guest.name,
                "guest_usable": self.verdict != "error"}


def pipeline(monkeypatch, judge_seconds=0.05, drive_seconds=0.05, verdicts=None, write_error_at=None,
             interrupt_at=None):
    log, guests = [], []

    def new_guest(self):
        guests.append(Guest(f"guest-{len(guests) + 1}"))
        return guests[-1]

    def drive_cycle(guest, mode, number, rundir, watchdogs, knobs, meta):
        log.append(("drive-start", number, guest.name))
        if number == interrupt_at:
            raise KeyboardInterrupt
        time.sleep(drive_seconds)
        log.append(("drive-end", number))
        return Driven(log, number, guest, judge_seconds, (verdicts or {}).get(number, "pass"),
                      number == write_error_at, meta)

    monkeypatch.setattr(session_module, "drive_cycle", drive_cycle)
    monkeypatch.setattr(Session, "_new_guest", new_guest)
    session = Session(artifacts=None, rundir=RunDir(), connection=Connection())
    session.artifacts = type("Artifacts", (), {"manifest": {}, "directory": "", "modules": []})()
    return session, log, guests


def test_each_cycle_is_judged_while_the_next_one_runs(monkeypatch):
    session, log, _ = pipeline(monkeypatch)
    started = time.monotonic()
    records = list(session.cycles((MEM, n, (), "pass") for n in range(1, 6)))
    elapsed = time.monotonic() - started
    assert [r["cycle"] for r in records] == [1, 2, 3, 4, 5]
    # judging N begins before the drive of N+1 ends, in another thread
    for number in range(1, 5):
        assert log.index(("judge-start", number, "judge_0")) < log.index(("drive-end", number + 1))
    # 5 drives of 0.05 s and the last judging, not 5 + 5 steps of 0.05 s
    assert elapsed < 0.45


def test_a_judging_that_finds_an_error_replaces_the_guest_after_the_next_cycle(monkeypatch):
    session, log, guests = pipeline(monkeypatch, verdicts={2: "error"})
    records = list(session.cycles((MEM, n, (), "pass") for n in range(1, 6)))
    assert [r["verdict"] for r in records] == ["pass", "error", "pass", "pass", "pass"]
    drives = {number: guest for kind, number, *rest in log if kind == "drive-start" for guest in rest}
    assert drives == {1: "guest-1", 2: "guest-1", 3: "guest-1", 4: "guest-2", 5: "guest-2"}
    assert guests[0].closed and not guests[1].closed


def test_a_record_that_cannot_be_written_stops_the_run(monkeypatch):
    session, log, _ = pipeline(monkeypatch, write_error_at=2)
    seen = []
    with pytest.raises(ResultsWriteError, match="cycle 2"):
        for record in session.cycles((MEM, n, (), "pass") for n in range(1, 8)):
            seen.append(record["cycle"])
    assert seen == [1]
    assert max(number for kind, number, *_ in log if kind == "drive-start") == 3  # in flight at the error


def test_an_interrupt_still_records_the_cycle_being_judged(monkeypatch):
    session, log, _ = pipeline(monkeypatch, judge_seconds=0.2, interrupt_at=3)
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for record in session.cycles((MEM, n, (), "pass") for n in range(1, 8)):
            seen.append(record["cycle"])
    assert seen == [1]
    assert ("recorded", 2) in log  # driven before the interrupt: judged and written all the same


def test_closing_the_run_between_two_records_records_the_cycle_being_judged(monkeypatch):
    """lab.run closes Session.cycles in its finally: an interrupt that lands
    while it prints a record still gets the cycle being judged written."""
    session, log, _ = pipeline(monkeypatch, judge_seconds=0.2)
    records = session.cycles((MEM, n, (), "pass") for n in range(1, 8))
    assert next(records)["cycle"] == 1  # cycle 2 is driven and being judged now
    records.close()
    assert ("recorded", 2) in log
    assert max(number for kind, number, *_ in log if kind == "drive-start") == 2


def test_a_cycle_the_lab_failed_is_rerun_after_the_plan_and_its_error_kept(monkeypatch):
    """Cycle 2 is the lab's error (e.g. a press before the guest idled): it
    stays recorded as such, and runs again after the plan as cycle 6, whose
    own lab error runs once more as 7; 3 stays an error (no reruns left for
    it would be wrong: each planned cycle gets its own)."""
    session, log, guests = pipeline(monkeypatch, verdicts={2: "error", 3: "error", 6: "error"})
    records = list(session.cycles(((MEM, n, (), "pass") for n in range(1, 6)), reruns=2))
    assert [(r["cycle"], r["verdict"], r.get("rerun_of"), r.get("rerun_attempt")) for r in records] == [
        (1, "pass", None, None), (2, "error", None, None), (3, "error", None, None),
        (4, "pass", None, None), (5, "pass", None, None),
        (6, "error", 2, 1), (7, "pass", 3, 1), (8, "pass", 2, 2)]
    assert not records_module.not_as_expected(records)  # every planned cycle got its sample
    assert records_module.verdict_counts(records)["error"] == 3  # and the lab's errors stay counted


def test_no_reruns_and_injected_cycles_are_never_rerun(monkeypatch):
    session, _, _ = pipeline(monkeypatch, verdicts={2: "error", 3: "error"})
    plan = [(MEM, 1, (), "pass"), (MEM, 2, (), "pass"), (MEM, 3, (("delay", "* suspend 1"),), "hang")]
    records = list(session.cycles(iter(plan), reruns=0))
    assert [r["cycle"] for r in records] == [1, 2, 3]
    assert [r["cycle"] for r in records_module.not_as_expected(records)] == [2, 3]
    session, _, _ = pipeline(monkeypatch, verdicts={3: "error"})
    records = list(session.cycles(iter(plan), reruns=2))
    assert [r["cycle"] for r in records] == [1, 2, 3]  # 3 was made to fail on purpose: not the lab's to retry


class Told:
    """A lab.run.Progress stand-in: what the session tells, in the log."""

    def __init__(self, log):
        self.log = log

    def booting(self, name):
        self.log.append(("booting", name))

    def booted(self, name, seconds):
        self.log.append(("booted", name))

    def recorded(self, record):
        self.log.append(("told", record["cycle"], threading.current_thread().name))


def test_each_record_is_told_as_soon_as_it_is_written_not_after_the_next_cycle(monkeypatch):
    """lab.run prints a cycle's line when its judging ends, while the next
    cycle runs (cycles() itself hands it out only after that drive)."""
    session, log, _ = pipeline(monkeypatch, judge_seconds=0.02, drive_seconds=0.2)
    session.progress = Told(log)
    records = list(session.cycles((MEM, n, (), "pass") for n in range(1, 4)))
    assert [r["cycle"] for r in records] == [1, 2, 3]
    for number in (1, 2):
        assert log.index(("recorded", number)) < log.index(("told", number, "judge_0")) \
            < log.index(("drive-end", number + 1))
    assert ("told", 3, "judge_0") in log


def test_a_knob_the_guest_rejects_stops_the_run_and_is_never_rerun(monkeypatch):
    """guest/pmlab-cycle refused cycle 2's knob (lab.cycle.drive_cycle gives
    it verdict error, phase request, when its drive ends): the records so
    far are handed out, then the session stops naming the guest's reason;
    no cycle after it is driven and it is not rerun (issue 35)."""
    session, log, _ = pipeline(monkeypatch)
    drive = session_module.drive_cycle

    def rejecting(guest, mode, number, *rest):
        driven = drive(guest, mode, number, *rest)
        if number == 2:
            driven.record.update(status="done", verdict="error", phase=records_module.REQUEST,
                                 reason="the guest rejected knob kfault='sda suspend -5 1': No such device")
        return driven

    monkeypatch.setattr(session_module, "drive_cycle", rejecting)
    seen = []
    with pytest.raises(LabError, match=r"cycle 2: the guest rejected knob kfault='sda suspend -5 1': No such "
                                       r"device; the run stops \(a bad --inject"):
        for record in session.cycles(((MEM, n, (), "pass") for n in range(1, 6)), reruns=2):
            seen.append(record)
    assert [r["cycle"] for r in seen] == [1, 2]
    assert [number for kind, number, *_ in log if kind == "drive-start"] == [1, 2]
