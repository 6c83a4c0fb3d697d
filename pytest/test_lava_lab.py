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
pmlab.mode=lava (lab/build-initramfs). Both run through the one door,
./pmlab run --engine lava (lab/lava.py), which serves the run's
artifacts over HTTP.

Then LAVA beyond one machine: a 2-job plan on two workers that cannot see
this machine's files (pipelines/lava/isolated-workers: own network
namespace, root and PID namespace) gets the same verdicts as on the lab's
own workers, every artifact fetched over HTTP from the link.
"""
import ipaddress
import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from conftest import artifacts_dir
from lab.records import read_cycles

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# install + lab-up + this test from scratch take longer than CI's 5 minutes
# (numbers in pipelines/README.md): a pipeline test.
pytestmark = [pytest.mark.guest, pytest.mark.pipeline]

DEV = "pmtest_full.3"
EIO = -5
INJECT = [f"3:fault={DEV} suspend {EIO} 1", f"4:fault={DEV} suspend_late {EIO} 1",
          f"5:fault={DEV} suspend_noirq {EIO} 1"]
MODES = ["mem/rtc", "disk/platform", "mem/rtc*3"]
# Both engines on the lab's default machine, q35 + OVMF. Debian 12's OVMF
# clobbers the guest page at 0x808000 on every S3 resume (pipelines/README.md
# "OVMF clobbers 0x808000"): both engines boot with the profile's erratum
# (memmap=4K$0x808000, lab/virt.py PROFILES) and pmtest_ramguard's window, so
# the damage neither kills a cycle (it did, as a busybox segfault) nor hides:
# a pmtest_ramguard line would fail the cycle in phase platform on both.
PROFILE = "q35-ovmf"
COMPARED = ("verdict", "phase", "enter_status", "failed_callbacks", "ordering_violations")
STATE = os.environ.get("PMLAB_LAVA_STATE", "/var/lib/pmlab/lava")


def _artifacts(config):
    return artifacts_dir(config)


@pytest.fixture(scope="module")
def lava_lab():
    done = subprocess.run([os.path.join(REPO, "pipelines", "lava", "lab-up")], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"lab-up failed:\n{done.stderr[-3000:]}"
    return done.stderr


def _pmtest_callbacks(record):
    """DEV's callbacks as the judge saw them: [(callback, error)], read
    through the reader of the record's own run (lab.records.RunRecord)."""
    for device, calls in record.reader.callbacks(record).items():
        if device.startswith(DEV + " "):
            return [(call["cb"], call["err"]) for call in calls]
    return None


def lava_run(results, run_id, plan_args, *engine_args, artifacts=None):
    """`./pmlab run --engine lava` (the LAVA engine, lab/lava.py) with
    no reruns: (its final records, its summary, its output)."""
    command = [sys.executable, "-m", "cli.main", "run", "--no-dashboard", "--engine", "lava", "--results", results,
               "--run-id", run_id,
               "--lab-reruns", "0", "--profile", PROFILE, *plan_args, *engine_args]
    command += ["--artifacts", artifacts] if artifacts else []
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode in (0, 1), f"lab.run --engine lava failed ({done.returncode}):\n{output}"
    records = [r for r in read_cycles(os.path.join(results, run_id, "cycles.jsonl")) if r.get("status") == "done"]
    with open(os.path.join(results, run_id, "summary.json")) as source:
        return records, json.load(source), output


def test_two_jobs_on_two_workers_judged_like_libvirt(lava_lab, request, tmp_path):
    config = request.config
    results = config.getoption("--lab-results")
    artifacts = _artifacts(config)

    plan_args = [f"--mode={m}" for m in MODES] + [f"--inject={i}" for i in INJECT]
    lava, summary, output = lava_run(results, f"{config.pmlab_run_id}-lava", plan_args, "--lava-jobs", "2",
                                     artifacts=artifacts)
    assert len(summary["lava_jobs"]) == 2, output
    workers = {record.get("worker") for record in lava}  # None: a cycle that never started
    outcomes = [(r["cycle"], r["verdict"], (r.get("reason") or "")[:200]) for r in lava]
    assert workers == {"pmlab-w1", "pmlab-w2"}, f"not both workers, or cycles never started: {outcomes}\n{output}"
    assert [r["cycle"] for r in lava] == [1, 2, 3, 4, 5]  # one record each

    libvirt_run = f"{config.pmlab_run_id}-libvirt"
    command = [sys.executable, "-m", "cli.main", "run", "--no-dashboard", "--artifacts", artifacts, "--results", results,
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
        assert _pmtest_callbacks(by_lava) == _pmtest_callbacks(by_libvirt), \
            f"cycle {by_lava['cycle']}"
        assert by_lava["ordering_checked"]["pmtest_log"] > 0
        assert by_lava["proof"] == by_libvirt["proof"] or by_lava["verdict"] != "pass"
    assert [r["verdict"] for r in lava] == ["pass", "pass", "fail", "fail", "fail"]
    # The S4 cycle really went through LAVA's relaunch: QEMU stopped once,
    # the image kept the boot id and the tmpfs token.
    assert lava[1]["proof"] == {"boot_id_kept": True, "token_kept": True, "stopped": 1, "pmsuspend_disk": 1,
                                "reboot": 0}



def _stat(pid):
    """(parent pid, session id) of a process (/proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return int(fields[1]), int(fields[3])
    except (OSError, ValueError, IndexError):
        return None


def _lab_sessions():
    """Sessions of what lab-up started: each daemon runs in its own session
    (setsid), its pid recorded in STATE/run; gunicorn's workers, lava-run
    and QEMU stay in their daemon's session."""
    out = set()
    run = os.path.join(STATE, "run")
    for name in os.listdir(run):
        if name.endswith(".pid"):
            with open(os.path.join(run, name)) as pidfile:
                out.add(int(pidfile.read().split()[0]))
    return out


def _postgres_pid():
    """The postmaster of the cluster lab-up uses (the first pg_lsclusters lists)."""
    fields = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True).stdout.split()
    with open(os.path.join(fields[5], "postmaster.pid")) as pidfile:  # field 6: the data directory
        return int(pidfile.readline())


def _listeners():
    """[(local address, port, [(command, pid)])] of the listening TCP sockets."""
    out = []
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    for line in lines:
        fields = line.split()
        host, _, port = fields[3].rpartition(":")
        users = [(name, int(pid)) for name, pid in re.findall(r'\("([^"]*)",pid=(\d+)', line)]
        out.append((host.strip("[]").split("%")[0], int(port), users))
    return out


def _loopback(host):
    if host == "*":  # ss's wildcard
        return False
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def test_lab_listens_on_loopback_only(lava_lab):
    """Every TCP socket the lab's processes listen on (gunicorn, the
    publisher and its event socket, the scheduler, the workers with lava-run
    and QEMU, postgresql) is bound to a loopback address: lab-up's default
    exposes nothing to the network."""
    sessions, postgres = _lab_sessions(), _postgres_pid()

    def ours(pid):
        stat = _stat(pid)
        return pid == postgres or (stat is not None and (stat[1] in sessions or stat[0] == postgres))

    seen = [(host, port, users) for host, port, users in _listeners()
            if any(ours(pid) for _, pid in users)]
    ports = {port for _, port, _ in seen}
    assert {8000, 8001} <= ports, f"gunicorn (8000) and the publisher (8001) are not among the lab's listeners: {seen}"
    exposed = [f"{host}:{port} {users}" for host, port, users in seen if not _loopback(host)]
    assert not exposed, "the lab listens beyond loopback:\n" + "\n".join(exposed)


ISOLATED = os.path.join(REPO, "pipelines", "lava", "isolated-workers")
LINK = os.environ.get("PMLAB_LAVA_ISOLATED_NET", "10.231.0")  # .1 here, .2 in the workers' namespace
NAMESPACE = os.environ.get("PMLAB_LAVA_ISOLATED_NS", "pmlab-iso")
TWO_JOBS = ["--mode=mem/rtc*2", f"--inject=2:fault={DEV} suspend {EIO} 1"]


def _worker_process(name):
    """The lava-worker of an isolated worker: the one child of the unshare
    (--fork) whose pid isolated-workers recorded."""
    with open(os.path.join(STATE, "run", f"{name}.pid")) as pidfile:
        pid = int(pidfile.read().split()[0])
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        (child,) = children.read().split()
    return int(child)


def test_a_worker_that_cannot_see_this_machines_files_runs_the_jobs_over_http(lava_lab, request):
    """The same 2-job plan (an S3 cycle, then one whose suspend pmtest_full.3
    fails with -EIO) on the lab's own workers and on two workers in their own
    network namespace, root and PID namespace (pipelines/lava/isolated-workers):
    there the results, the build and this repository do not exist, 127.0.0.1
    is not the server's; the jobs fetch every artifact over HTTP from the
    run's server on the link, and get the same verdicts."""
    config = request.config
    results, artifacts = config.getoption("--lab-results"), _artifacts(config)
    run_id = config.pmlab_run_id
    # First on the lab's own workers: with the isolated ones up, a q35-ovmf job may land there too.
    local, _, output = lava_run(results, f"{run_id}-lava-local", TWO_JOBS, "--lava-jobs", "2", artifacts=artifacts)
    assert {r.get("worker") for r in local} <= {"pmlab-w1", "pmlab-w2"}, output
    up = subprocess.run([ISOLATED, "up", "--workers", "2"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, f"isolated-workers up failed:\n{up.stderr[-3000:]}"
    try:
        isolated_run = f"{run_id}-lava-isolated"
        started = time.monotonic()
        isolated, summary, output = lava_run(results, isolated_run, TWO_JOBS, "--lava-jobs", "2",
                                             "--lava-tags", "q35-ovmf,isolated", "--lava-identity", "pmlab-isolated",
                                             artifacts=artifacts)
        wall = time.monotonic() - started
        staged = os.path.join(results, isolated_run, "artifacts")
        for name in ("pmlab-iso1", "pmlab-iso2"):
            pid = _worker_process(name)
            root = f"/proc/{pid}/root"
            assert os.path.exists(root + "/usr/bin/qemu-system-x86_64") and os.path.exists(root + "/proc/1")
            for path in (staged, artifacts, REPO, results, STATE):
                assert not os.path.exists(root + os.path.realpath(path)), f"{name} sees {path}"
            assert not os.path.exists(root + f"/proc/{os.getpid()}"), f"{name} sees this machine's processes"
            for kind in ("net", "pid", "mnt"):
                assert os.readlink(f"/proc/{pid}/ns/{kind}") != os.readlink(f"/proc/self/ns/{kind}"), kind
        loopback = subprocess.run(["ip", "netns", "exec", NAMESPACE, sys.executable, "-c",
                                   "import socket; socket.create_connection(('127.0.0.1', 8000), 5)"],
                                  capture_output=True, text=True, timeout=60)
        assert loopback.returncode != 0 and "ConnectionRefusedError" in loopback.stderr
    finally:
        down = subprocess.run([ISOLATED, "down"], capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stderr[-3000:]

    print(f"isolated workers: {len(summary['lava_jobs'])} jobs {summary['lava_jobs']}, "
          f"verdicts {[r['verdict'] for r in isolated]}, {wall:.0f} s wall")
    assert len(summary["lava_jobs"]) == 2 and summary["artifacts_url"].startswith(f"http://{LINK}.1:"), summary
    assert {r.get("worker") for r in isolated} <= {"pmlab-iso1", "pmlab-iso2"}, output
    jobs = [name for name in os.listdir(os.path.join(results, isolated_run, "lava")) if name.endswith(".yaml")
            and not name.endswith(".log.yaml")]
    for name in jobs:
        with open(os.path.join(results, isolated_run, "lava", name)) as source:
            images = yaml.safe_load(source)["actions"][0]["deploy"]["images"]
        assert all(image["url"].startswith(summary["artifacts_url"] + "/") for image in images.values()), images
    with open(os.path.join(results, isolated_run, "lava", "http.log")) as log:
        fetched = [line.split()[1:4] + line.split()[5:6] for line in log if '"GET ' in line]
    assert sorted(fetched) == sorted([f"{LINK}.2", '"GET', f"/{name}", "200"] for name in
                                     ("bzImage", "initramfs.cpio.gz", "pmtest-ssdt.aml", "swap.img") for _ in jobs)
    assert [r["cycle"] for r in isolated] == [r["cycle"] for r in local] == [1, 2]
    for by_isolated, by_local in zip(isolated, local):
        seen = {key: by_isolated.get(key) for key in COMPARED}
        expected = {key: by_local.get(key) for key in COMPARED}
        assert seen == expected, f"cycle {by_isolated['cycle']}: isolated {seen} != local {expected}"
        assert by_isolated["proof"] == by_local["proof"]
        assert _pmtest_callbacks(by_isolated) == _pmtest_callbacks(by_local), f"cycle {by_isolated['cycle']}"
    assert [r["verdict"] for r in isolated] == ["pass", "fail"]
