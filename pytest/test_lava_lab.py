"""pmlab on a real LAVA lab (pipelines/lava/lab-up: lava-server, scheduler,
publisher, two lava-worker processes with QEMU devices): a 2-job plan runs
on the two workers at once and its cycles, judged from the LAVA job logs,
get the same verdicts and oracle results as the same plan through libvirt.

The plan: a plain S3 cycle, an S4 cycle (ACPI S4 powers QEMU off, the job's
next boot action launches it again on the same swap disk and the image is
resumed) and the fault campaign's three suspend-side failures (pmtest_full.3
returning -EIO from suspend, suspend_late, suspend_noirq), S3 woken by the
RTC. Split in two jobs: cycles 1-3 (S3, S4, then a fault on the resumed
guest) and 4-5. The artifacts' initramfs must carry guest/init with
pmlab.mode=lava (lab/build-initramfs).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import artifacts_dir
from lab.records import RunDir, read_cycles

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from pipelines.lava import jobs  # noqa: E402

# install + lab-up + this test from scratch take longer than CI's 5 minutes
# (numbers in pipelines/README.md): a pipeline test.
pytestmark = [pytest.mark.guest, pytest.mark.pipeline]

DEV = "pmtest_full.3"
EIO = -5
INJECT = [f"3:fault={DEV} suspend {EIO} 1", f"4:fault={DEV} suspend_late {EIO} 1",
          f"5:fault={DEV} suspend_noirq {EIO} 1"]
MODES = ["mem/rtc", "disk/platform", "mem/rtc*3"]
# Both engines on the lab's default machine, q35 + OVMF. (Its first S3 resume
# in a LAVA job once left a corrupt busybox page: the iPXE option ROM of the
# virtio NIC Debian's qemu template adds; the device dictionary drops it.)
PROFILE = "q35-ovmf"
COMPARED = ("verdict", "phase", "enter_status", "failed_callbacks", "ordering_violations")


def _artifacts(config):
    return artifacts_dir(config)


@pytest.fixture(scope="module")
def lava_lab():
    done = subprocess.run([os.path.join(REPO, "pipelines", "lava", "lab-up")], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"lab-up failed:\n{done.stderr[-3000:]}"
    return done.stderr


def _pmtest_callbacks(record):
    """DEV's callbacks as the judge saw them: [(callback, error)]."""
    for device, calls in (record.get("callbacks") or {}).items():
        if device.startswith(DEV + " "):
            return [(call[0], call[2]) for call in calls]
    return None


def test_two_jobs_on_two_workers_judged_like_libvirt(lava_lab, request, tmp_path):
    config = request.config
    results = config.getoption("--lab-results")
    artifacts = _artifacts(config)

    rundir = RunDir(results, f"{config.pmlab_run_id}-lava")
    staged = jobs.prepare_artifacts(artifacts, rundir.file("artifacts"))
    plan = jobs.plan_from(MODES, INJECT)
    submitted = []
    lava = jobs.run_plan(plan, rundir, staged, jobs=2, retries=0, tags=(PROFILE,),
                         on_submitted=lambda job_id, part: submitted.append(job_id))
    assert len(submitted) == 2
    workers = {record["worker"] for record in lava}
    assert workers == {"pmlab-w1", "pmlab-w2"}, f"the two jobs did not run on both workers: {workers}"
    assert [r["cycle"] for r in read_cycles(rundir.cycles_path)] == [1, 2, 3, 4, 5]  # one record each

    libvirt_run = f"{config.pmlab_run_id}-libvirt"
    command = [sys.executable, "-m", "lab.run", "--artifacts", artifacts, "--results", results,
               "--run-id", libvirt_run, "--profile", PROFILE] + [f"--mode={m}" for m in MODES] + [f"--inject={i}" for i in INJECT]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode in (0, 1), f"lab.run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    libvirt = [r for r in read_cycles(os.path.join(results, libvirt_run, "cycles.jsonl"))
               if r.get("status") == "done"]
    assert [r["cycle"] for r in libvirt] == [1, 2, 3, 4, 5]

    for by_lava, by_libvirt in zip(lava, libvirt):
        seen = {key: by_lava.get(key) for key in COMPARED}
        expected = {key: by_libvirt.get(key) for key in COMPARED}
        assert seen == expected, f"cycle {by_lava['cycle']}: LAVA {json.dumps(seen)} != libvirt {json.dumps(expected)}"
        assert _pmtest_callbacks(by_lava) == _pmtest_callbacks(by_libvirt), f"cycle {by_lava['cycle']}"
        assert by_lava["ordering_checked"]["pmtest_log"] > 0
        assert by_lava["proof"] == by_libvirt["proof"] or by_lava["verdict"] != "pass"
    assert [r["verdict"] for r in lava] == ["pass", "pass", "fail", "fail", "fail"]
    # The S4 cycle really went through LAVA's relaunch: QEMU stopped once,
    # the image kept the boot id and the tmpfs token.
    assert lava[1]["proof"] == {"boot_id_kept": True, "token_kept": True, "stopped": 1, "pmsuspend_disk": 1,
                                "reboot": 0}
