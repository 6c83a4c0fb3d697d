"""lab.pmtest_log on the pmtest callback log recorded from real guests."""

from lab import guest_report, pmtest_log
from recordings_util import report


def entries(name):
    return pmtest_log.parse(guest_report.sections(report(name)).get("pmtest_log"))


def test_entries_parse_with_increasing_seq():
    log = entries("mem")
    assert log
    seqs = [e["seq"] for e in log]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(isinstance(e["t"], int) and isinstance(e["ret"], int) for e in log)


def test_full_driver_sequence_for_s3():
    sequence = pmtest_log.by_device(entries("mem"))["pmtest_full.0"]
    assert [item.split(":")[0] for item in sequence] == [
        "prepare", "suspend", "suspend_late", "suspend_noirq",
        "resume_noirq", "resume_early", "resume", "complete"]
    assert all(item.endswith("=0") for item in sequence)


def test_injected_fault_logged():
    log = entries("mem-fault-suspend")
    assert any(e["ret"] == -5 and e["cb"] == "suspend" for e in log)


def test_after_filters_by_seq():
    log = entries("mem")
    middle = log[len(log) // 2]["seq"]
    assert all(e["seq"] > middle for e in pmtest_log.after(log, middle))


def test_other_lines_ignored():
    assert pmtest_log.parse("pmtest: dropped=3\nrandom\n") == []
