"""A build never rewrites the artifacts a guest boots from (lab/artifacts.py):
kernel/build and lab/build-initramfs build into a stage and install it with
`python3 -m lab.artifacts install`, which switches in what changed only
while no run holds the directory (runs and test sessions hold it shared)."""

import argparse
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO
from lab import artifacts


def built(directory, kernel=b"kernel 1", modules=(b"pmtest 1",), manifest=b'{"build_seconds": 1}'):
    """An artifact directory (or a build's stage) of these contents."""
    os.makedirs(os.path.join(directory, "modules"), exist_ok=True)
    for name, content in (("bzImage", kernel), ("manifest.json", manifest)):
        with open(os.path.join(directory, name), "wb") as target:
            target.write(content)
    for index, content in enumerate(modules):
        with open(os.path.join(directory, "modules", f"m{index}.ko"), "wb") as target:
            target.write(content)
    return str(directory)


def install_process(stage, directory):
    return subprocess.Popen([sys.executable, "-m", "lab.artifacts", "install", stage, directory], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read(path):
    with open(path, "rb") as source:
        return source.read()


def test_install_switches_in_what_changed_and_keeps_what_did_not(tmp_path):
    out = built(tmp_path / "out")
    before = os.stat(os.path.join(out, "modules", "m0.ko"))
    stage = built(tmp_path / "stage", kernel=b"kernel 2", manifest=b'{"build_seconds": 2}')
    assert artifacts.install(stage, out) == ["bzImage", "manifest.json"]
    assert read(os.path.join(out, "bzImage")) == b"kernel 2"
    after = os.stat(os.path.join(out, "modules", "m0.ko"))
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # the initramfs judges by it
    assert not os.path.exists(stage)


def test_a_file_a_guest_has_open_keeps_its_content_through_an_install(tmp_path):
    out = built(tmp_path / "out")
    with open(os.path.join(out, "bzImage"), "rb") as booting:
        artifacts.install(built(tmp_path / "stage", kernel=b"kernel 2", modules=(b"pmtest 2",)), out)
        assert booting.read() == b"kernel 1"
    assert read(os.path.join(out, "modules", "m0.ko")) == b"pmtest 2"
    assert sorted(os.listdir(out)) == [artifacts.LOCK, "bzImage", "manifest.json", "modules"]  # no old dir left


def test_an_install_waits_for_the_run_holding_the_directory(tmp_path):
    out = built(tmp_path / "out")
    stage = built(tmp_path / "stage", kernel=b"kernel 2", modules=(b"pmtest 2",))
    run = artifacts.hold(out)
    try:
        installing = install_process(stage, out)
        time.sleep(2)
        assert installing.poll() is None, installing.communicate()
        assert read(os.path.join(out, "bzImage")) == b"kernel 1"
        assert read(os.path.join(out, "modules", "m0.ko")) == b"pmtest 1"
    finally:
        run.close()
    _, stderr = installing.communicate(timeout=30)
    assert installing.returncode == 0, stderr
    assert f"waiting for the runs booting from {out} to end before installing bzImage, modules" in stderr
    assert read(os.path.join(out, "bzImage")) == b"kernel 2"


def test_an_unchanged_build_installs_at_once_beside_a_run(tmp_path):
    """Only the manifest differs (its build seconds): it is replaced by a
    rename, the run's boot files stay, nothing waits."""
    out = built(tmp_path / "out")
    run = artifacts.hold(out)
    try:
        installing = install_process(built(tmp_path / "stage", manifest=b'{"build_seconds": 9}'), out)
        _, stderr = installing.communicate(timeout=30)
    finally:
        run.close()
    assert installing.returncode == 0 and "installed manifest.json" in stderr, stderr
    assert read(os.path.join(out, "manifest.json")) == b'{"build_seconds": 9}'


def test_hold_runs_the_command_holding_the_directory(tmp_path):
    out = built(tmp_path / "out")
    holding = subprocess.Popen([sys.executable, "-m", "lab.artifacts", "hold", out, "sh", "-c", "sleep 3; exit 7"],
                               cwd=REPO)
    time.sleep(1)
    try:
        with pytest.raises(BlockingIOError):
            import fcntl
            with open(os.path.join(out, artifacts.LOCK), "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        assert holding.wait(timeout=30) == 7


def test_a_run_holds_its_artifacts_from_its_check_to_its_end(tmp_path, monkeypatch):
    """lab.run's engine takes the hold before it checks the artifacts and
    keeps it until close() (the connection is left out: no libvirt here)."""
    from lab import run as lab_run
    from lab import virt
    monkeypatch.setattr(virt, "Connection", lambda uri: None)
    out = built(tmp_path / "out")
    with open(os.path.join(out, "initramfs.cpio.gz"), "wb") as image:
        image.write(b"image")
    parser = argparse.ArgumentParser()
    lab_run.add_options(parser)
    request = lab_run.request_from(parser.parse_args(["--artifacts", out, "--mode", "mem"]))
    engine = lab_run.engine_for(request)
    installing = install_process(built(tmp_path / "stage", kernel=b"kernel 2"), out)
    time.sleep(2)
    assert installing.poll() is None and read(os.path.join(out, "bzImage")) == b"kernel 1"
    engine.close()
    installing.communicate(timeout=30)
    assert read(os.path.join(out, "bzImage")) == b"kernel 2"


def test_the_manifest_is_installed_by_every_build_to_date_it(tmp_path):
    """pipelines/commit.py judges a build current by its manifest's time:
    an identical manifest is switched in all the same."""
    out = built(tmp_path / "out")
    os.utime(os.path.join(out, "manifest.json"), (0, 0))
    assert artifacts.install(built(tmp_path / "stage"), out) == ["manifest.json"]
    assert os.path.getmtime(os.path.join(out, "manifest.json")) > 0
