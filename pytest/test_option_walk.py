"""Every option of a verb reaches what its runners hand QEMU. Here: every
guest option of ./pmlab commit (lab/options.py add_guest) reaches the
guests of its fault campaign (pytest/test_fault_campaign.py, run by commit
in a pytest of its own), as it reaches the smoke's: the campaign's pytest,
given the very command commit runs, says in its header which guest its
tests boot (pytest/conftest.py guest_spec), and that must be the smoke's.
"""

import argparse
import dataclasses
import json
import subprocess

from conftest import REPO
from lab import options
from pipelines import commit

# A value other than the default for each guest option (None: a flag).
GUEST_VALUES = {"--uri": "qemu+ssh://elsewhere/system", "--profile": "pc-seabios", "--memory": "768",
                "--vcpus": "2", "--watchdog": "suspend=20", "--limit": "resume=9", "--pmtest-tree": "1x2",
                "--devices": "zoo", "--no-firmware-errata": None}


def guest_options():
    parser = argparse.ArgumentParser(add_help=False)
    options.add_guest(parser)
    return [action.option_strings[0] for action in parser._actions]


def test_the_walk_covers_every_guest_option():
    """A guest option added to lab/options.py needs its value here, or the
    walk below would not see it dropped."""
    assert sorted(guest_options()) == sorted(GUEST_VALUES)


def campaign_guest(command):
    """The guest settings the campaign's pytest reports for `command`, run
    to collect only (no guest boots)."""
    done = subprocess.run([*command, "--collect-only", "-v"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    headers = [line for line in done.stdout.splitlines() if line.startswith("pmlab guest: ")]
    assert len(headers) == 1, done.stdout + done.stderr
    return json.loads(headers[0].removeprefix("pmlab guest: "))


def test_every_guest_option_of_commit_reaches_the_campaigns_guests(tmp_path):
    given = [word for name, value in GUEST_VALUES.items() for word in ((name,) if value is None else (name, value))]
    args = commit.parse_args([*given, "--results", str(tmp_path / "results")])
    smoke = commit.smoke_request_of(args, str(tmp_path / "artifacts"), "walk", ["mem"])
    run_dir = tmp_path / "results" / "walk"
    run_dir.mkdir(parents=True)
    campaign = campaign_guest(commit.campaign_command(args, smoke, str(run_dir)))
    smoke_guest = json.loads(json.dumps(dataclasses.asdict(smoke.guest)))
    dropped = {name: (smoke_guest[name], campaign.get(name)) for name in smoke_guest
               if campaign.get(name) != smoke_guest[name]}
    assert not dropped, f"the campaign's guests lose the smoke's settings (smoke, campaign): {dropped}"


def test_a_request_given_with_guest_options_is_refused(tmp_path):
    """--request names the guest whole: a --profile beside it would be
    dropped, so the guest tests refuse it, naming it."""
    args = commit.parse_args(["--results", str(tmp_path / "results")])
    request_file = commit.smoke_request_of(args, str(tmp_path), "walk", ["mem"]).write(str(tmp_path / "r.json"))
    done = subprocess.run(["/usr/bin/python3", "-m", "pytest", "pytest/test_fault_campaign.py", "-p", "no:cacheprovider",
                           "--collect-only", "--request", request_file, "--profile", "pc-seabios"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert f"pmlab guest: --request {request_file} names the guest: give no --profile with it" in done.stdout
