"""lab/lava.py, the LAVA engine, on recorded output, no LAVA and no guest:
the job it renders for a plan with an S4 cycle (one boot + monitor segment
per S4, every file fetched over HTTP), the modes, knobs and guest settings
lab.run --engine lava refuses, the HTTP server of a run's artifacts, and the
records it makes from a real job log (recordings/lava-s3-s4-job.log.yaml.gz:
S3, S4 through LAVA's QEMU relaunch, S3, run on pipelines/lava/lab-up's
lab), also when that log is cut so that the relaunched guest booted afresh
instead of resuming."""

import copy
import functools
import gzip
import os
import re
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab import lava as jobs  # noqa: E402
from lab import modes  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.judge import FRESH_BOOT  # noqa: E402
from lab.records import RunDir  # noqa: E402
from lab.request import numbered_cycles, parse_injections  # noqa: E402

RECORDING = os.path.join(REPO, "pytest", "recordings", "lava-s3-s4-job.log.yaml.gz")
URL = "http://192.0.2.1:8080"  # where a run's ArtifactServer would serve


def plan_of(specs, injections=()):
    """[(number, Mode, knobs)] as LavaEngine hands run_plan a request's cycles."""
    return [(cycle.number, cycle.mode, cycle.knobs)
            for cycle in numbered_cycles(modes.plan(specs, None, None), parse_injections(injections))]


PLAN = plan_of(["mem/rtc", "disk", "mem/rtc"])
JOB = {"state": "Finished", "health": "Complete", "device": "pmlab-w2-q35-ovmf", "worker": "pmlab-w2"}


@functools.lru_cache(maxsize=None)
def _parsed():
    with gzip.open(RECORDING, "rt") as source:
        # libyaml's safe loader when PyYAML has it (Debian's does): ~10x faster
        return yaml.load(source, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _entries():
    """The recorded job log's entries, a copy of its own for every test."""
    return copy.deepcopy(_parsed())


def test_a_job_gets_one_boot_and_monitor_segment_per_s4_cycle():
    job = yaml.safe_load(jobs.render_job(PLAN, URL, "t"))
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
    only_s3 = yaml.safe_load(jobs.render_job(plan_of(["mem/rtc*2"]), URL, "t"))
    assert [next(iter(action)) for action in only_s3["actions"]] == ["deploy", "boot", "test"]


def _engine(*argv, results):
    """LavaEngine for `./pmlab run --engine lava ARGV` (its checks
    come before it asks lavacli anything); `results`: a results root of
    the test's own (a run id the user has under results/ is refused)."""
    import argparse

    from lab import run as lab_run
    parser = argparse.ArgumentParser()
    lab_run.add_options(parser)
    request = lab_run.request_from(parser.parse_args(["--engine", "lava", "--run-id", "t", "--results", str(results),
                                                      *argv]))
    return jobs.LavaEngine(request)


@pytest.mark.parametrize("mode", ["disk/reboot", "freeze", "mem/pmwakeup"])
def test_modes_a_lava_job_cannot_run_are_refused(mode, tmp_path):
    with pytest.raises(LabError, match="cannot run as a LAVA job"):
        _engine("--mode", mode, results=tmp_path)


def test_boot_knobs_are_refused(tmp_path):
    with pytest.raises(LabError, match="same kernel command line"):
        _engine("--mode", "disk", "--inject", "1:boot=pmtest.fault=x", results=tmp_path)


@pytest.mark.parametrize("args, problem", [
    (["--memory", "1024"], "--memory"), (["--vcpus", "5"], "bad --vcpus 5"), (["--devices", "zoo"], "--devices"),
    (["--uri", "qemu+ssh://elsewhere/system"], "--uri"), (["--watchdog", "suspend=5"], "--watchdog"),
    (["--sleepgraph"], "--sleepgraph"), (["--lava-jobs", "0"], "--lava-jobs must be at least 1"),
    (["--lava-tags", "pc-seabios"], "profile is q35-ovmf"), (["--lava-tags", "x"], None),
    (["--artifacts", "/nonexistent"], "/nonexistent/bzImage missing"),
    (["--artifacts-url", "file:///srv/artifacts"], "not http:// or https://"),
])
def test_lava_refuses_what_it_cannot_run_before_asking_the_server(args, problem, tmp_path):
    """Each bad option is named; the artifacts check comes after the rest
    (the suite's machine may have no build), so those use a missing path."""
    artifacts = [] if "--artifacts" in args else ["--artifacts", str(tmp_path / "none")]
    if problem is None:  # a tag that names no profile gets --profile's: then the missing artifacts speak
        problem = "bzImage missing"
    with pytest.raises(LabError, match=re.escape(problem)):
        _engine("--mode", "mem/rtc", *artifacts, *args, results=tmp_path)


def test_engine_options_reach_the_request(tmp_path):
    """lab/options.py add_engine's names are the ones lab.request.from_args reads."""
    import argparse

    from lab import run as lab_run
    parser = argparse.ArgumentParser()
    lab_run.add_options(parser)
    request = lab_run.request_from(parser.parse_args(
        ["--engine", "lava", "--mode", "mem/rtc*2", "--lava-identity", "mylab", "--lava-jobs", "3",
         "--lava-tags", "q35-ovmf,isolated", "--artifacts-url", "http://h:1/r/artifacts", "--run-id", "t",
         "--results", str(tmp_path)]))
    assert request.engine == "lava" and [c.number for c in request.cycles] == [1, 2]
    assert request.lava.identity == "mylab" and request.lava.jobs == 3
    assert request.lava.tags == ("q35-ovmf", "isolated") and request.lava.artifacts_url == "http://h:1/r/artifacts"
    assert lab_run.request_from(parser.parse_args(["--mode", "mem"])).engine == "libvirt"


def test_a_job_fetches_every_file_over_http():
    job = yaml.safe_load(jobs.render_job(plan_of(["mem/rtc"]), URL + "/", "t"))
    urls = [image["url"] for image in job["actions"][0]["deploy"]["images"].values()]
    assert sorted(urls) == sorted(f"{URL}/{name}" for name in (*jobs.ARTIFACTS, "swap.img"))
    for bad in ("/srv/run/artifacts", "file:///srv/run/artifacts", "http://"):
        with pytest.raises(LabError, match="not http:// or https://"):
            jobs.render_job(plan_of(["mem/rtc"]), bad, "t")


def _get(url, method="GET"):
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, data=b"x" if method in (
                "PUT", "POST") else None), timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_the_artifact_server_serves_the_directory_only_and_read_only(tmp_path):
    served = tmp_path / "run" / "artifacts"
    served.mkdir(parents=True)
    (served / "bzImage").write_bytes(b"kernel")
    (tmp_path / "run" / "secret").write_text("not served")
    log = tmp_path / "http.log"
    server = jobs.ArtifactServer(str(served), "127.0.0.1", str(log))
    try:
        assert server.url.startswith("http://127.0.0.1:")
        assert _get(server.url + "/bzImage") == (200, b"kernel")
        assert _get(server.url + "/bzImage", "HEAD")[0] == 200
        assert _get(server.url + "/")[0] == 404  # no listing
        assert _get(server.url + "/../secret")[0] == 404 and _get(server.url + "/%2e%2e/secret")[0] == 404
        for method in ("PUT", "POST", "DELETE"):
            assert _get(server.url + "/bzImage", method)[0] == 501
        assert (served / "bzImage").read_bytes() == b"kernel" and sorted(os.listdir(served)) == ["bzImage"]
        assert jobs.check_served(server.url, str(served)) == server.url
        other = tmp_path / "other"
        other.mkdir()
        (other / "bzImage").write_bytes(b"another kernel")
        with pytest.raises(LabError, match="serves another bzImage"):
            jobs.check_served(server.url, str(other))
        with pytest.raises(LabError, match="does not serve the run's artifacts"):
            jobs.check_served(server.url + "/elsewhere", str(served))
    finally:
        server.stop()
    assert "GET /bzImage HTTP/1.1\" 200" in log.read_text()
    with pytest.raises(OSError):
        _get(server.url + "/bzImage")  # stopped: nothing listens any more


def test_artifacts_are_served_where_the_workers_reach_the_server():
    assert jobs.serve_address("http://127.0.0.1:8000/RPC2") == "127.0.0.1"
    assert jobs.serve_address("http://localhost:8000/RPC2") in ("127.0.0.1", "::1")
    with pytest.raises(LabError, match="does not resolve"):
        jobs.serve_address("http://no-such-host.invalid:8000/RPC2")


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


def _kernel_image_arg(job_text):
    return yaml.safe_load(job_text)["actions"][0]["deploy"]["images"]["kernel"]["image_arg"]


def test_a_jobs_kernel_command_line_carries_its_profiles_errata_and_ramguard_words():
    """The words come from lab/virt.py PROFILES, as a libvirt guest's: the
    profile is the job's one profile tag (every lab-up device carries its
    profile as a tag); the '$' of memmap= survives the job's YAML."""
    from lab import profiles as virt
    plan = plan_of(["mem/rtc"])
    q35 = _kernel_image_arg(jobs.render_job(plan, URL, "t", ("q35-ovmf",)))
    assert "memmap=4K$0x808000" in q35.split() and virt.errata_cmdline("q35-ovmf") == "memmap=4K$0x808000"
    assert virt.ramguard_cmdline("q35-ovmf") in q35 and "pmtest_ramguard.size=0x100000" in q35.split()
    off = _kernel_image_arg(jobs.render_job(plan, URL, "t", ("q35-ovmf",), firmware_errata=False))
    assert "memmap" not in off and virt.ramguard_cmdline("q35-ovmf") in off
    pc = _kernel_image_arg(jobs.render_job(plan, URL, "t", ("pc-seabios", "other")))
    assert "memmap" not in pc and "pmtest_ramguard" not in pc
    for tags in ((), ("other",), ("q35-ovmf", "pc-seabios")):
        with pytest.raises(LabError, match="exactly one machine profile"):
            jobs.render_job(plan, URL, "t", tags)


RAMGUARD = ("[    5.1] pmtest_ramguard: firmware changed RAM across S3: page 0x808000, 23 bytes, "
            "first at +0x0: 7c ec 0b 00 -> 00 ec 0b 00")


def _with_ramguard_line(entries):
    """The recording with pmtest_ramguard's line after cycle 1's S3 resume."""
    at = next(i for i, e in enumerate(entries) if e.get("lvl") == "target" and jobs.S3_RESUME in str(e.get("msg")))
    return entries[:at + 1] + [{"dt": entries[at]["dt"], "lvl": "target", "msg": RAMGUARD}] + entries[at + 1:]


def test_a_ramguard_line_in_a_cycles_console_is_the_platforms_fail(tmp_path):
    entries = _with_ramguard_line(_entries())
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, lost = jobs.cycle_records(PLAN, entries, "r", 1, JOB, rundir, "q35-ovmf", False)
    assert lost == [] and [(r["verdict"], r.get("phase")) for r in records] == [
        ("fail", "platform"), ("pass", None), ("pass", None)]
    assert records[0]["firmware_ram_changes"][0].startswith("firmware changed RAM across S3: page 0x808000")
    assert records[0]["profile"] == "q35-ovmf" and records[0]["firmware_errata"] == ""


def test_a_ramguard_line_still_judges_a_cycle_whose_report_the_damage_killed(tmp_path):
    """The clobbered page killed pmlab-cycle and init: no report, the job
    ended. The cycle is the platform's fail (not a lab error), the rest lost."""
    entries = _with_ramguard_line(_entries())
    at = next(i for i, e in enumerate(entries) if e.get("msg") == RAMGUARD)
    cut = entries[:at + 1] + [{"dt": entries[at]["dt"], "lvl": "target",
                               "msg": "[    5.2] init[1]: segfault at 20 ip 0000000000525014 error 6"}]
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, lost = jobs.cycle_records(PLAN, cut, "r", 1, JOB, rundir, "q35-ovmf")
    assert [(r["cycle"], r["verdict"], r["phase"]) for r in records] == [(1, "fail", "platform")]
    assert records[0]["firmware_errata"] == "memmap=4K$0x808000"
    assert [number for number, _, _ in lost] == [2, 3]


def test_a_job_log_cut_short_is_asked_for_again_not_a_crash(monkeypatch):
    """lavacli printing a log cut in the middle of a YAML entry (a server
    going away) is a LavaError, which patiently() asks again."""
    answers = iter(["- {dt: '2026-12-05T04:49:39', lvl: target, msg: 'pmlab-lava: st", "- {lvl: target, msg: x}\n"])
    monkeypatch.setattr(jobs, "lavacli", lambda identity, *args, timeout=120: next(answers))
    with pytest.raises(jobs.LavaError, match="no readable YAML"):
        jobs.job_log("pmlab", 1)
    assert jobs.job_log("pmlab", 1) == [{"lvl": "target", "msg": "x"}]
    assert issubclass(jobs.LavaError, LabError)  # lab.run reports a server that never answers as bad setup


def test_a_lava_cycle_over_its_limit_fails_in_phase_latency(tmp_path):
    """The run's --limit reaches the LAVA engine's records and judge as libvirt's."""
    rundir = RunDir(str(tmp_path), "r", link_latest=False)
    records, _ = jobs.cycle_records(PLAN, _entries(), "r", 1, JOB, rundir, limits={"suspend": 15, "resume": 0.001})
    assert [(r["verdict"], r["phase"]) for r in records] == [("fail", "latency")] * 3
    assert all(r["limits"] == {"suspend": 15, "resume": 0.001} for r in records)
    assert records[0]["reason"].startswith("resume took ") and records[0]["reason"].endswith("over the 0.001 s limit")
