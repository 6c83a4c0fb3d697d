"""lab.guest_report on pmlab-cycle reports recorded from real guests."""

from lab import guest_report
from recordings_util import report


def parts(name):
    return guest_report.sections(report(name))


def test_sections_in_order():
    names = list(parts("mem"))
    assert names == ["before", "sysfs_before", "enter", "after", "sysfs_after", "trace", "pmtest_log", "end"]
    assert "rtcwake" in parts("mem-rtc")


def stats(p, side):
    return guest_report.suspend_stats(guest_report.snapshot(p, side))


def test_one_snapshot_holds_stats_and_wakeup_sources():
    snap = guest_report.snapshot(parts("mem"), "before")
    assert "success" in guest_report.suspend_stats(snap)
    assert "LNXPWRBN:00" in guest_report.wakeup_sources(snap)
    assert not set(guest_report.suspend_stats(snap)) & {"name", "event_count"}


def test_older_reports_with_split_sections_parse_the_same():
    old = parts("mem-v1")
    assert "suspend_stats_before" in old and "sysfs_before" not in old
    delta = guest_report.stats_delta(stats(old, "before"), stats(old, "after"))
    assert delta["success"] == 1
    assert "LNXPWRBN:00" in guest_report.wakeup_sources(guest_report.snapshot(old, "before"))


def test_key_values():
    p = parts("mem")
    before, after = guest_report.key_values(p["before"]), guest_report.key_values(p["after"])
    assert len(before["boot_id"]) == 36 and before["boot_id"] == after["boot_id"]
    assert guest_report.key_values(p["enter"]) == {"status": "0", "error": ""}


def test_suspend_stats_delta_success():
    p = parts("mem")
    delta = guest_report.stats_delta(stats(p, "before"), stats(p, "after"))
    assert delta["success"] == 1 and delta["fail"] == 0
    assert "last_failed_dev" not in delta


def test_suspend_stats_delta_failure_names_device_and_step():
    p = parts("mem-fault-suspend")
    delta = guest_report.stats_delta(stats(p, "before"), stats(p, "after"))
    assert delta["fail"] == 1 and delta["failed_suspend"] == 1 and delta["success"] == 0
    assert delta["last_failed_step"] == "suspend"
    assert delta["last_failed_errno"] == -5
    assert delta["last_failed_dev"].startswith("pmtest")
    enter = guest_report.key_values(p["enter"])
    assert enter["status"] == "1" and "Input/output error" in enter["error"]


def test_wakeup_sources():
    p = parts("freeze")
    before = guest_report.wakeup_sources(guest_report.snapshot(p, "before"))
    after = guest_report.wakeup_sources(guest_report.snapshot(p, "after"))
    assert "LNXPWRBN:00" in before
    assert guest_report.wakeup_delta(before, after).get("LNXPWRBN:00", 0) >= 1


def test_hibernation_token_survives():
    p = parts("disk")
    after = guest_report.key_values(p["after"])
    assert len(after["token"]) == 32


def test_text_without_sections():
    assert guest_report.sections("pmlab-cycle: unknown argument 'x'\n") == {}
