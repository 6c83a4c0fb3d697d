"""lab.guest_report on pmlab-cycle reports recorded from real guests."""

from lab import guest_report
from recordings_util import report


def parts(name):
    return guest_report.sections(report(name))


def test_sections_in_order():
    names = list(parts("mem"))
    assert names == ["before", "suspend_stats_before", "wakeup_sources_before", "enter", "after",
                     "suspend_stats_after", "wakeup_sources_after", "trace", "pmtest_log", "end"]
    assert "rtcwake" in parts("mem-rtc")


def test_key_values():
    p = parts("mem")
    before, after = guest_report.key_values(p["before"]), guest_report.key_values(p["after"])
    assert len(before["boot_id"]) == 36 and before["boot_id"] == after["boot_id"]
    assert guest_report.key_values(p["enter"]) == {"status": "0", "error": ""}


def test_suspend_stats_delta_success():
    p = parts("mem")
    delta = guest_report.stats_delta(guest_report.suspend_stats(p["suspend_stats_before"]),
                                     guest_report.suspend_stats(p["suspend_stats_after"]))
    assert delta["success"] == 1 and delta["fail"] == 0
    assert "last_failed_dev" not in delta


def test_suspend_stats_delta_failure_names_device_and_step():
    p = parts("mem-fault-suspend")
    after = guest_report.suspend_stats(p["suspend_stats_after"])
    delta = guest_report.stats_delta(guest_report.suspend_stats(p["suspend_stats_before"]), after)
    assert delta["fail"] == 1 and delta["failed_suspend"] == 1 and delta["success"] == 0
    assert delta["last_failed_step"] == "suspend"
    assert delta["last_failed_errno"] == -5
    assert delta["last_failed_dev"].startswith("pmtest")
    enter = guest_report.key_values(p["enter"])
    assert enter["status"] == "1" and "Input/output error" in enter["error"]


def test_wakeup_sources():
    p = parts("freeze")
    before = guest_report.wakeup_sources(p["wakeup_sources_before"])
    after = guest_report.wakeup_sources(p["wakeup_sources_after"])
    assert "LNXPWRBN:00" in before
    assert guest_report.wakeup_delta(before, after).get("LNXPWRBN:00", 0) >= 1


def test_hibernation_token_survives():
    p = parts("disk")
    after = guest_report.key_values(p["after"])
    assert len(after["token"]) == 32


def test_text_without_sections():
    assert guest_report.sections("pmlab-cycle: unknown argument 'x'\n") == {}
