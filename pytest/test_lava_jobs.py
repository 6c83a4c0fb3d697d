"""pipelines/lava/jobs.py on recorded output, no LAVA and no guest: the job
it renders for a plan with an S4 cycle (one boot + monitor segment per S4),
the modes and knobs it refuses, and the records it makes from a real job
log (recordings/lava-s3-s4-job.log.yaml.gz: S3, S4 through LAVA's QEMU
relaunch, S3, run on pipelines/lava/lab-up's lab), also when that log is
cut so that the relaunched guest booted afresh instead of resuming."""

import gzip
import os
import re
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab.cycle import FRESH_BOOT  # noqa: E402
from lab.records import RunDir  # noqa: E402
from lab.virt import LabError  # noqa: E402
from pipelines.lava import jobs  # noqa: E402

RECORDING = os.path.join(REPO, "pytest", "recordings", "lava-s3-s4-job.log.yaml.gz")
PLAN = jobs.plan_from(["mem/rtc", "disk", "mem/rtc"], [])
JOB = {"state": "Finished", "health": "Complete", "device": "pmlab-w2-q35-ovmf", "worker": "pmlab-w2"}


def _entries():
    with gzip.open(RECORDING, "rt") as source:
        return yaml.safe_load(source)


def test_a_job_gets_one_boot_and_monitor_segment_per_s4_cycle(tmp_path):
    job = yaml.safe_load(jobs.render_job(PLAN, str(tmp_path), "t"))
    kinds = [next(iter(action)) for action in job["actions"]]
    assert kinds == ["deploy", "boot", "test", "boot", "test"]
    first, relaunch = job["actions"][1]["boot"], job["actions"][3]["boot"]
    assert first["prompts"] == ["pmlab-lava: ready"] and relaunch["prompts"] == ["pmlab-init: boot_id"]
    end = job["actions"][2]["test"]["monitors"][0]["end"]
    # pexpect compiles the pattern with DOTALL: the S4 line after the image
    # is marked ends a segment, the first S4 line (before the snapshot) not.
    dotall = re.compile(end, re.DOTALL)
    assert dotall.search("PM: S|\n[ 8.7] PM: end hibernate\n[ 8.8] ACPI: PM: Preparing to enter system sleep state S4")
    assert not dotall.search("[ 3.0] ACPI: PM: Preparing to enter system sleep state S4\n[ 3.1] PM: Image saving")
    assert dotall.search("pmlab-lava: done")
    only_s3 = yaml.safe_load(jobs.render_job(jobs.plan_from(["mem/rtc*2"], []), str(tmp_path), "t"))
    assert [next(iter(action)) for action in only_s3["actions"]] == ["deploy", "boot", "test"]


@pytest.mark.parametrize("mode", ["disk/reboot", "freeze", "mem/pmwakeup"])
def test_modes_a_lava_job_cannot_run_are_refused(mode):
    with pytest.raises(LabError, match="cannot run as a LAVA job"):
        jobs.plan_from([mode], [])


def test_boot_knobs_are_refused():
    with pytest.raises(LabError, match="same kernel command line"):
        jobs.plan_from(["disk"], ["1:boot=pmtest.fault=x"])


def test_records_of_a_recorded_s3_s4_job(tmp_path):
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, lost = jobs.cycle_records(PLAN, _entries(), "r", 1, JOB, rundir)
    assert lost == []
    assert [(r["cycle"], r["verdict"]) for r in records] == [(1, "pass"), (2, "pass"), (3, "pass")]
    assert records[1]["proof"] == {"boot_id_kept": True, "token_kept": True, "stopped": 1,
                                   "pmsuspend_disk": 1, "reboot": 0}
    assert records[0]["proof"]["pmsuspend"] == records[0]["proof"]["pmwakeup"] == 1
    assert all(r["ordering_checked"]["pmtest_log"] > 0 for r in records)


def test_an_s4_cycle_without_the_relaunch_is_not_proven(tmp_path):
    entries = _entries()
    launches = [i for i, e in enumerate(entries) if str(e.get("msg", "")).startswith(jobs.QEMU_LAUNCH)]
    del entries[launches[1]]  # as if QEMU had never been launched again
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, _ = jobs.cycle_records(PLAN, entries, "r", 1, JOB, rundir)
    assert records[1]["verdict"] == "fail" and records[1]["phase"] == "sleep"
    assert "stopped 0 times" in records[1]["reason"]


def test_a_relaunch_that_boots_afresh_fails_the_restore_and_loses_the_rest(tmp_path):
    entries = _entries()
    looking = [i for i, e in enumerate(entries)
               if e.get("lvl") == "target" and "looking for a hibernation image" in str(e.get("msg"))]
    cut = entries[:looking[1] + 1]  # the relaunched boot kernel, up to its look for an image
    for text in (FRESH_BOOT + ", fresh boot", "pmlab-lava: ready boot_id x",
                 "pmlab-lava: relaunched and not resumed (swap signature S1SUSPEND): the plan is not run again",
                 "pmlab-lava: start 0 cycles", "pmlab-lava: done"):
        cut.append({"dt": "2026-12-05T04:49:39.0", "lvl": "target", "msg": text})
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, lost = jobs.cycle_records(PLAN, cut, "r", 1, JOB, rundir)
    assert [(r["cycle"], r["verdict"], r["phase"]) for r in records] == [(1, "pass", None), (2, "fail", "restore")]
    assert [number for number, _, _ in lost] == [3]


def test_a_lost_console_line_does_not_fail_an_intact_s3_cycle(tmp_path):
    """A server restart lost console lines from a job log, among them an S3
    cycle's "Low-level resume complete": the proof is counted in the cycle's
    md5-checked report instead, so the cycle still passes with one
    PMSuspended/PMWakeup pair (and not two where the console has it too)."""
    entries = [e for e in _entries() if not (e.get("lvl") == "target" and jobs.S3_RESUME in str(e.get("msg")))]
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, lost = jobs.cycle_records(PLAN, entries, "r", 1, JOB, rundir)
    assert lost == [] and [r["verdict"] for r in records] == ["pass", "pass", "pass"]
    assert records[0]["proof"]["pmsuspend"] == records[0]["proof"]["pmwakeup"] == 1


def test_the_reports_kernel_log_decides_an_s3_resume():
    """A report whose kernel log has no firmware resume proves none, even if
    the console shows one; the recorded S3 report has exactly one."""
    from lab import guest_report
    frame = jobs.frames(jobs.console_lines(_entries()))[1]
    mode = PLAN[0][1]
    assert guest_report.sections(frame["report"])["dmesg"].count(jobs.S3_RESUME) == 1
    assert [e[1] for e in jobs.console_events(mode, [], 0, 0, frame["report"])] == ["pmsuspend", "pmwakeup"]
    without = frame["report"].replace(jobs.S3_RESUME, "ACPI: PM: (line removed)")
    assert jobs.console_events(mode, [jobs.S3_RESUME], 0, 0, without) == []
