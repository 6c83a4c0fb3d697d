"""--vcpus N: one setting of the run request (lab/request.py check_vcpus),
checked before anything runs, and the same number in every rendering of
the machine: libvirt's domain XML, the benchmark's raw QEMU line, a LAVA
job, on both profiles, lean and zoo. No guest, no libvirt."""

import os
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab import artifacts, bench, modes, request, virt  # noqa: E402
from lab import lava as jobs  # noqa: E402
from lab import run as lab_run  # noqa: E402
from lab.errors import LabError  # noqa: E402


@pytest.mark.parametrize("vcpus", [1, 2, 3, 4])
def test_one_to_four_cpus_pass_the_requests_check(vcpus):
    assert request.check_vcpus(vcpus) == vcpus


@pytest.mark.parametrize("vcpus", [0, 5, -1, "2", True, 2.0])
def test_other_cpu_counts_are_refused_naming_the_value(vcpus):
    with pytest.raises(LabError, match=r"bad --vcpus .*give 1 to 4"):
        request.check_vcpus(vcpus)


def test_the_default_is_one_cpu():
    assert request.Guest().vcpus == 1


@pytest.mark.parametrize("value", ["0", "5"])
def test_lab_run_refuses_a_bad_vcpus_with_exit_2(value, tmp_path, capsys):
    code = lab_run.main(["--mode", "mem", "--vcpus", value, "--results", str(tmp_path),
                         "--artifacts", str(tmp_path / "none")])
    assert code == 2
    assert f"bad --vcpus {value}" in capsys.readouterr().err


def test_a_run_requests_cpus_cross_a_process(tmp_path):
    parsed = lab_run.add_options  # the options lab.run and ./pmlab run share
    import argparse
    parser = argparse.ArgumentParser()
    parsed(parser)
    args = parser.parse_args(["--mode", "mem", "--vcpus", "3", "--results", str(tmp_path)])
    made = request.from_args(args, str(tmp_path), "r1")
    assert made.guest.vcpus == 3
    assert request.RunRequest.from_json(made.to_json()).guest.vcpus == 3


def _domain(profile, device_set, vcpus):
    scratch = {device: (f"g1{suffix}", f"/pool/g1{suffix}")
               for device, suffix in virt.device_sets.scratch_volumes(device_set).items()}
    return ET.fromstring(virt.domain_xml("g1", profile, "/k", "/i", "console=ttyS0", "g1-swap", "/log",
                                         vcpus=vcpus, device_set=device_set, scratch=scratch))


@pytest.mark.parametrize("profile", sorted(virt.PROFILES))
@pytest.mark.parametrize("device_set", ["lean", "zoo"])
def test_the_domain_has_the_requested_cpus(profile, device_set):
    assert _domain(profile, device_set, 2).find("vcpu").text == "2"
    assert _domain(profile, device_set, 4).find("vcpu").text == "4"


def _raw_argv(tmp_path, profile, device_set, vcpus):
    kernel, initrd, extra = (tmp_path / "bzImage"), (tmp_path / "initramfs.cpio.gz"), \
        (tmp_path / artifacts.DEVICES_INITRD)
    for path in (kernel, initrd, extra):
        path.write_bytes(b"x")
    found = artifacts.Artifacts(str(tmp_path), str(kernel), str(initrd), devices_initrd=str(extra))
    return bench.raw_command(found, str(tmp_path), 3, profile_name=profile, device_set=device_set, vcpus=vcpus)


@pytest.mark.parametrize("profile", sorted(virt.PROFILES))
@pytest.mark.parametrize("device_set", ["lean", "zoo"])
def test_the_benchmarks_raw_guest_has_the_requested_cpus(profile, device_set, tmp_path):
    argv = _raw_argv(tmp_path, profile, device_set, 2)
    assert argv[argv.index("-smp") + 1] == "2"
    with pytest.raises(LabError, match="bad --vcpus 5"):
        _raw_argv(tmp_path, profile, device_set, 5)


def test_bench_refuses_a_bad_vcpus_with_exit_2(tmp_path, capsys):
    assert bench.main(["--vcpus", "9", "--results", str(tmp_path), "--artifacts", str(tmp_path)]) == 2
    assert "bad --vcpus 9" in capsys.readouterr().err


@pytest.mark.parametrize("profile", sorted(virt.PROFILES))
def test_a_lava_job_boots_every_segment_with_the_requested_cpus(profile):
    plan = [(1, modes.parse_mode("mem", "rtc"), ()), (2, modes.parse_mode("disk"), ())]
    job = yaml.safe_load(jobs.render_job(plan, "http://192.0.2.1:8080", "t", (profile,), vcpus=2))
    kernel = job["actions"][0]["deploy"]["images"]["kernel"]["image_arg"]
    assert kernel.endswith(" -smp 2")  # the deploy's args: every boot, the S4 relaunch too
    with pytest.raises(LabError, match="bad --vcpus 0"):
        jobs.render_job(plan, "http://192.0.2.1:8080", "t", (profile,), vcpus=0)


def test_a_lava_run_takes_vcpus_and_records_them(tmp_path):
    """The LAVA engine no longer refuses --vcpus; its records carry it, as
    lab.session's do, for the judge (recorded job: test_lava_jobs.py's)."""
    from test_lava_jobs import JOB, PLAN, _entries
    from lab.records import RunDir
    jobs.check_guest(request.Guest(vcpus=2))
    records, _ = jobs.cycle_records(PLAN, _entries(), "r", 1, JOB, RunDir(str(tmp_path), "r", link_latest=False))
    assert [r["vcpus"] for r in records] == [1, 1, 1]
