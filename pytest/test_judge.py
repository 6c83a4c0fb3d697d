"""lab.judge.judge on recorded real cycles: judging the recording again gives
the verdict the live run gave, and taking a piece of the proof away turns a
pass into a fail (the judge can fail)."""

import copy
import gzip
import os

import pytest

from lab import modes
from lab import records as record_format
from lab.judge import Expected, judge
from hang_evidence import assert_hang_evidence
from recordings_util import read, records, report

RECORDS = records()
JUDGED = [name for name, record in RECORDS.items() if record.get("report")]


def rejudge(name, record=None, report_text=None):
    record = record or RECORDS[name]
    mode = modes.parse_mode(record["mode"], record["wake"])
    return judge(mode, report_text if report_text is not None else report(name), 0,
                 record_format.host_events(record), record["evidence"], record["timeline"],
                 record["token"], record["guest_boot_id"])


@pytest.mark.parametrize("name", JUDGED)
def test_rejudging_gives_the_recorded_verdict(name):
    result = rejudge(name)
    assert (result["verdict"], result["phase"]) == (RECORDS[name]["verdict"], RECORDS[name]["phase"])


def test_every_mode_recorded():
    assert {"mem", "mem-rtc", "freeze", "disk", "disk-reboot", "pm_test-core",
            "mem-fault-suspend", "mem-fault-resume", "hang"} <= set(RECORDS)


def test_mem_without_suspend_event_fails():
    record = copy.deepcopy(RECORDS["mem"])
    record["libvirt_events"] = [e for e in record["libvirt_events"] if e[1] != "pmsuspend"]
    result = rejudge("mem", record)
    assert result["verdict"] == "fail" and result["phase"] == "sleep"


def test_mem_with_two_wakeups_fails():
    record = copy.deepcopy(RECORDS["mem"])
    record["libvirt_events"] += [e for e in record["libvirt_events"] if e[1] == "pmwakeup"]
    assert rejudge("mem", record)["verdict"] == "fail"


def test_freeze_without_button_press_fails():
    record = copy.deepcopy(RECORDS["freeze"])
    record["timeline"] = [step for step in record["timeline"] if step[0] != "powerbutton-sent"]
    assert rejudge("freeze", record)["verdict"] == "fail"


def test_freeze_order_of_host_notes_decides_nothing():
    """The host notes its press after the QMP call returns, so the guest's
    report can be noted first (cycle 14 of 2026-12-06): the guest's own
    evidence of its idle and its wake decides."""
    record = copy.deepcopy(RECORDS["freeze"])
    steps = dict(record["timeline"])
    record["timeline"] = [[s, (steps["powerbutton-sent"] - 1 if s == "report" else t)]
                          for s, t in record["timeline"]]
    assert rejudge("freeze", record)["verdict"] == "pass"


def _freeze_report(dmesg, idled=True):
    """The recorded freeze report with a kernel log section, and without its
    s2idle_enter() (machine_suspend[1]) when the guest did not idle."""
    text = report("freeze")
    if not idled:
        text = "\n".join(line for line in text.splitlines() if "machine_suspend[1]" not in line) + "\n"
    return text.replace("=== end", "=== dmesg\n" + dmesg + "=== end")


LOOP = "[    9.041001] PM: suspend-to-idle\n"
BUTTON_WAKE = ("[    {t}] PM: Triggering wakeup from IRQ 9\n[    {t}] ACPI: PM: ACPI fixed event wakeup\n"
               "[    9.999000] PM: resume from suspend-to-idle\n")


def test_freeze_press_before_the_first_idle_is_a_lab_error():
    """The 2026-12-06 race: the press ended the loop 3 ms after it began,
    before s2idle_enter(). The kernel did what it must."""
    result = rejudge("freeze", report_text=_freeze_report(LOOP + BUTTON_WAKE.format(t="9.044100"), idled=False))
    assert (result["verdict"], result["phase"]) == ("error", "lab"), result["reason"]
    assert result["reason"].startswith("power button pressed before the guest's first suspend-to-idle idle")
    assert result["s2idle"]["idle_entries"] == 0


def test_freeze_that_never_idled_while_the_lab_waited_fails():
    """The same wake 6.5 s after the loop began (the host presses a guest
    that never goes quiet after its 5 s idle wait): the guest did not idle
    on its own, a kernel fail, not a race."""
    result = rejudge("freeze", report_text=_freeze_report(LOOP + BUTTON_WAKE.format(t="15.544100"), idled=False))
    assert (result["verdict"], result["phase"]) == ("fail", "sleep"), result["reason"]
    assert "machine_suspend" in result["reason"]


def test_freeze_woken_by_something_else_fails():
    dmesg = LOOP + "[    9.044100] ACPI: PM: Wakeup unrelated to ACPI SCI\n"
    result = rejudge("freeze", report_text=_freeze_report(dmesg))
    assert (result["verdict"], result["phase"]) == ("fail", "sleep"), result["reason"]
    assert "left s2idle before the power button woke it (ACPI: PM: Wakeup unrelated to ACPI SCI)" in result["reason"]


def test_freeze_that_idled_and_woke_by_the_button_passes():
    result = rejudge("freeze", report_text=_freeze_report(LOOP + BUTTON_WAKE.format(t="9.045100")))
    assert result["verdict"] == "pass", result["reason"]
    assert result["proof"]["idled"] and result["proof"]["woke_by_button"]


def test_hibernation_with_other_token_fails():
    record = copy.deepcopy(RECORDS["disk"])
    record["token"] = "0" * 32
    result = rejudge("disk", record)
    assert result["verdict"] == "fail" and "token" in result["reason"]


def test_hibernation_with_new_boot_id_fails():
    record = copy.deepcopy(RECORDS["disk"])
    record["guest_boot_id"] = "00000000-0000-0000-0000-000000000000"
    assert rejudge("disk", record)["verdict"] == "fail"


def test_hibernation_that_booted_afresh_fails_in_restore():
    record = RECORDS["disk"]
    result = judge(modes.parse_mode("disk"), None, 0, record["libvirt_events"], record["evidence"],
                   record["timeline"], record["token"], record["guest_boot_id"])
    assert (result["verdict"], result["phase"]) == ("fail", "restore")


def test_pm_test_with_a_real_suspend_event_fails():
    record = copy.deepcopy(RECORDS["pm_test-core"])
    record["libvirt_events"].append([0, "pmsuspend", None])
    assert rejudge("pm_test-core", record)["verdict"] == "fail"


def test_suspend_stats_must_go_up_by_exactly_one():
    """Two suspends counted for one cycle: the guest did not do one clean
    suspend and resume."""
    text = report("mem")
    assert text.count("/sys/power/suspend_stats/success:3") == 1  # the "after" snapshot (before: 2)
    result = rejudge("mem", report_text=text.replace("/sys/power/suspend_stats/success:3",
                                                     "/sys/power/suspend_stats/success:4"))
    assert (result["verdict"], result["phase"]) == ("fail", "sleep")
    assert "suspend_stats success went up by 2, not 1" in result["reason"]


def test_a_cycle_that_runs_no_device_callbacks_need_not_show_the_pmtest_tree():
    """pm_test=freezer stops before dpm_suspend: no device callback runs,
    so the requested tree cannot show, and that is no failure."""
    record = RECORDS["pm_test-freezer"]
    mode = modes.parse_mode(record["mode"], record["wake"])
    result = judge(mode, report("pm_test-freezer"), 0, record_format.host_events(record), record["evidence"],
                   record["timeline"], record["token"], record["guest_boot_id"], expected=Expected(pmtest_tree=(1, 1)))
    assert result["verdict"] == "pass", result["reason"]


def test_truncated_report_is_a_lab_error():
    text = report("mem")
    result = rejudge("mem", report_text=text[:len(text) // 2])
    assert result["verdict"] == "error"


def test_pass_record_carries_measurements():
    result = rejudge("mem")
    assert result["suspend_ms"] > 0 and result["resume_ms"] > 0
    assert result["suspend_stats_delta"]["success"] == 1
    first_call = record_format.callbacks(result)["pmtest_full.0 (pmtest_full)"][0]
    assert first_call["cb"] == "[suspend]" and first_call["err"] == 0  # ->prepare, traced with no info
    assert record_format.pmtest(result)["pmtest_full.0"]


def test_hang_record_has_evidence():
    """The recorded hang (a pmtest delay in ->suspend); the live hang test in
    test_cycles.py checks a fresh one the same way."""
    hang = RECORDS["hang"]
    assert hang["phase"] == "suspend"
    assert_hang_evidence(hang, read("hang-dump.txt"), blocked_in="pmtest_cb_begin")


def test_a_judge_that_fails_leaves_an_error_record_that_keeps_the_report(tmp_path, monkeypatch):
    """A bug in the judge must not lose the cycle: judge_reply turns it into
    an `error` record, and keep_evidence then keeps the guest's report even
    under --keep failures."""
    from lab import judge as judging
    from lab.guest_agent import Reply
    record = RECORDS["mem"]
    mode = modes.parse_mode(record["mode"], record["wake"])
    reply = Reply(1, 0, report("mem"))
    args = (mode, reply, record["libvirt_events"], record["evidence"], record["timeline"],
            record["token"], record["guest_boot_id"])
    assert judging.judge_reply(*args)["verdict"] == "pass"

    def broken(*_):
        raise KeyError("suspend_stats")
    monkeypatch.setattr(judging, "judge_with_order", broken)
    fields = judging.judge_reply(*args)
    assert fields == {"verdict": "error", "phase": "lab",
                      "reason": "judging the cycle failed: KeyError: 'suspend_stats'"}
    rundir = record_format.RunDir(str(tmp_path), "run", keep="failures")
    kept = dict(cycle=7, **fields)
    judging.keep_evidence(rundir, kept, reply.output, record["evidence"])
    with gzip.open(os.path.join(rundir.path, kept["report"]), "rt") as text:
        assert text.read() == reply.output


# pmtest_ramguard's line from a q35-ovmf guest booted without the erratum
# (lab.run --no-firmware-errata, 2026-12-06): Debian 12's OVMF clears its
# work area at 0x808000 on every S3 resume.
RAMGUARD_LINE = ("[    2.319888] pmtest_ramguard: firmware changed RAM across S3: page 0x808000, 23 bytes, "
                 "first at +0x0: db e9 6c ff ff ff 45 39 4c 24 18 0f 82 81 00 00 -> "
                 "00 e9 6c ff 00 00 00 00 00 00 00 00 00 00 00 00")


def test_firmware_that_changed_the_oss_ram_is_the_platforms_fail():
    record = copy.deepcopy(RECORDS["mem"])
    record["evidence"] = record["evidence"][:1] + [RAMGUARD_LINE] + record["evidence"][1:]
    result = rejudge("mem", record)
    assert (result["verdict"], result["phase"]) == ("fail", "platform"), result["reason"]
    assert result["reason"].startswith("the platform firmware changed RAM the OS owns across the S3 resume")
    assert "page 0x808000, 23 bytes" in result["reason"]


def test_the_platforms_fail_stands_when_its_damage_killed_the_report():
    """What the LAVA q35 jobs showed: busybox crashed after the resume
    (pmlab-cycle exited with 139), a lab error without the guard's line."""
    record = copy.deepcopy(RECORDS["mem"])
    crashed = rejudge("mem", record, report_text="=== before\nboot_id=x\n")
    assert crashed["verdict"] == "error"
    record["evidence"] = record["evidence"] + [RAMGUARD_LINE]
    mode = modes.parse_mode(record["mode"], record["wake"])
    result = judge(mode, "=== before\nboot_id=x\n", 139, record["libvirt_events"], record["evidence"],
                   record["timeline"], record["token"], record["guest_boot_id"])
    assert (result["verdict"], result["phase"]) == ("fail", "platform")


def test_a_judged_cycle_parses_its_report_once(monkeypatch):
    """judge_with_order hands the judge's parse to the oracle: the report is
    split into sections once, its trace parsed and its callbacks paired once."""
    from lab import guest_report, judge as judging, trace
    calls = {"sections": 0, "parse": 0, "paired_callbacks": 0}
    for module, name in ((guest_report, "sections"), (trace, "parse"), (trace, "paired_callbacks")):
        def counted(*args, _real=getattr(module, name), _name=name):
            calls[_name] += 1
            return _real(*args)
        monkeypatch.setattr(module, name, counted)
    record = RECORDS["mem"]
    result = judging.judge_with_order(modes.parse_mode(record["mode"], record["wake"]), report("mem"), 0,
                                      record_format.host_events(record), record["evidence"], record["timeline"],
                                      record["token"], record["guest_boot_id"])
    assert result["verdict"] == "pass" and result["ordering_checked"]["trace"] > 1000
    assert calls == {"sections": 1, "parse": 1, "paired_callbacks": 1}
