"""A qemu+ssh:// URI takes the same code path as the local one.

No sshd runs on the lab machine, so `ssh` is replaced, for this test only, by
a stand-in that runs the remote command (libvirt's virt-ssh-helper) locally:
libvirt's ssh transport, the remote driver over a pipe, streams, events and
volume uploads are all exercised; only the network hop is not."""

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.guest

FAKE_SSH = """#!/bin/sh
echo "ssh $*" >>"$(dirname "$0")/ssh.log"
while [ $# -gt 0 ]; do
	case "$1" in
	--) shift 2; break ;;
	-p|-l|-i|-o|-e) shift 2 ;;
	-*) shift ;;
	*) shift; break ;;
	esac
done
exec sh -c "$*"
"""


def test_one_cycle_over_qemu_ssh(lab_run, tmp_path):
    (tmp_path / "ssh").write_text(FAKE_SSH)
    (tmp_path / "ssh").chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", "--no-dashboard", "--uri", "qemu+ssh://root@localhost/system",
         "--artifacts", lab_run["artifacts"].directory, "--mode", "mem", "--cycles", "1",
         "--results", str(tmp_path / "results")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cycle 1/1 mem: PASS" in done.stdout
    assert "virt-ssh-helper" in (tmp_path / "ssh.log").read_text()
