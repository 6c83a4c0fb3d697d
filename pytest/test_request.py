"""A run request (lab/request.py) is built once from each verb's options:
every option given on a verb's command line arrives in the request that
verb runs, and a request crosses a process by its one encoder and parser."""

import argparse
import os

import pytest

from lab import request as request_mod
from lab import run as lab_run
from lab.errors import LabError
from pipelines import bisect, commit, nightly, soak

GUEST = ["--uri", "qemu+ssh://lab/system", "--profile", "pc-seabios", "--memory", "384", "--vcpus", "2",
         "--watchdog", "resume=30", "--watchdog", "boot=100", "--pmtest-tree", "1x1", "--devices", "zoo",
         "--no-firmware-errata"]


def assert_guest(guest):
    assert (guest.uri, guest.profile, guest.memory, guest.vcpus) == ("qemu+ssh://lab/system", "pc-seabios", 384, 2)
    assert (guest.watchdogs.resume, guest.watchdogs.boot, guest.watchdogs.suspend) == (30.0, 100.0, 60.0)
    assert (guest.pmtest_tree, guest.devices, guest.firmware_errata) == ((1, 1), "zoo", False)


def test_run_request_carries_every_option(tmp_path):
    parser = argparse.ArgumentParser()
    lab_run.add_options(parser)
    args = parser.parse_args(["--mode", "mem*2,disk/reboot", "--artifacts", str(tmp_path), *GUEST,
                              "--inject", "2:fault=* suspend 5 1", "--results", str(tmp_path / "r"),
                              "--run-id", "r1", "--keep", "failures", "--lab-reruns", "0", "--sleepgraph"])
    request = lab_run.request_from(args)
    assert_guest(request.guest)
    assert [(c.number, c.mode.name, c.mode.wake, c.knobs) for c in request.cycles] == [
        (1, "mem", "pmwakeup", ()), (2, "mem", "pmwakeup", (("fault", "* suspend 5 1"),)), (3, "disk", "reboot", ())]
    assert (request.artifacts, request.results, request.run_id, request.directory) == \
        (str(tmp_path), str(tmp_path / "r"), "r1", "r1")
    assert (request.keep, request.lab_reruns, request.sleepgraph, request.engine) == ("failures", 0, True, "libvirt")
    path = request.write(str(tmp_path / "request.json"))
    assert lab_run.request_from(parser.parse_args(["--request", path])) == request


def test_commit_smoke_request_carries_every_option():
    """./pmlab commit --pmtest-tree 1x1 used to be accepted and dropped
    (the smoke's argv forwarded uri, profile, memory and vcpus by hand)."""
    args = commit.parse_args(["--mode", "mem*2,freeze", *GUEST, "--inject", "3:delay=* suspend 10",
                              "--engine", "lava", "--lava-identity", "lab2", "--lava-jobs", "3",
                              "--lava-tags", "pc-seabios,big", "--artifacts-url", "http://h:8080/a/",
                              "--results", "/r"])
    request = commit.smoke_request_of(args, "/k", "c1", ["mem", "mem", "freeze"])
    assert_guest(request.guest)
    assert [(c.number, c.mode.name, c.knobs) for c in request.cycles] == [
        (1, "mem", ()), (2, "mem", ()), (3, "freeze", (("delay", "* suspend 10"),))]
    assert (request.artifacts, request.results, request.run_id, request.engine) == ("/k", "/r", "c1", "lava")
    assert request.lava == request_mod.Lava("lab2", 3, ("pc-seabios", "big"), "http://h:8080/a/")


def test_nightly_and_soak_requests_carry_every_option(tmp_path):
    args = nightly.parse_args(["--run-id", "n", "--shard", "2/3", "--max-cycles", "30", "--hours", "2",
                               "--chunk", "4", "--mode", "mem*2,disk", "--artifacts", "/k", *GUEST,
                               "--inject", "5:fault=* suspend 5 1", "--keep", "full", "--results", "/r"])
    request = nightly.request_from(args)
    assert_guest(request.template.guest)
    assert (request.max_cycles, request.hours, request.shard, request.chunk) == (30, 2.0, (2, 3), 4)
    assert request.modes == ("mem", "mem", "disk") and request.injections == ((5, (("fault", "* suspend 5 1"),)),)
    chunk = request.chunk_request([2, 5])
    assert [(c.number, c.knobs) for c in chunk.cycles] == [(2, ()), (5, (("fault", "* suspend 5 1"),))]
    assert (chunk.run_id, chunk.directory, chunk.keep, chunk.lab_reruns, chunk.manifest) == \
        ("n", "n-shard2of3", "full", 0, False)
    assert nightly.NightlyRequest.from_json(request.to_json()) == request

    args = soak.parse_args(["--guests", "3", "--max-cycles", "30", "--mode", "mem", *GUEST, "--chunk", "4",
                            "--inject", "5:fault=* suspend 5 1", "--keep", "full", "--results", "/r"])
    args.run_id = "s"
    shard = soak.shard_request(args, "/pinned", 2)
    assert_guest(shard.template.guest)
    assert (shard.shard, shard.chunk, shard.max_cycles, shard.template.artifacts) == ((2, 3), 4, 30, "/pinned")
    assert shard.injections == request.injections and shard.template.keep == "full"


def test_bisect_smoke_request_carries_every_option(tmp_path):
    args = bisect.parse_args(["1", "3", "--mode", "mem*2", *GUEST, "--build-dir", str(tmp_path)])
    request = bisect.smoke_request(args)
    assert_guest(request.guest)
    assert [c.mode.name for c in request.cycles] == ["mem", "mem"]
    assert request.artifacts == os.path.join(str(tmp_path), "out")


@pytest.mark.parametrize("text, problem", [
    ("{", "not a run request"), ('{"cycles": []}', "not a run request"),
    ('{"cycles": [[1, "sleep", null, []]], "guest": {}, "lava": {}, "artifacts": "a", "results": "r", '
     '"run_id": "x"}', "unknown mode 'sleep'"),
    # a knob is a (name, value) pair: three words were a ValueError traceback, not a refusal
    ('{"cycles": [[1, "mem", null, [["delay", "x", "extra"]]]], "guest": {}, "lava": {}, "artifacts": "a", '
     '"results": "r", "run_id": "x"}', "not a run request: ValueError")])
def test_a_malformed_request_is_refused_naming_the_cause(text, problem):
    with pytest.raises(LabError, match=problem):
        request_mod.RunRequest.from_json(text)


def test_a_request_is_checked_before_anything_runs():
    cycle = request_mod.Cycle(1, request_mod.modes.parse_mode("mem"))
    base = request_mod.RunRequest(cycles=(cycle,), artifacts="/k", results="/r", run_id="x")
    assert base.check() is base
    for changes, problem in (({"cycles": ()}, "plans no cycle"), ({"cycles": (cycle, cycle)}, "distinct"),
                             ({"keep": "some"}, "keep must be"), ({"lab_reruns": -1}, "--lab-reruns"),
                             ({"engine": "ssh"}, "unknown engine")):
        with pytest.raises(LabError, match=problem):
            base.replace(**changes).check()
