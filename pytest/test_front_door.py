"""The front door (./pmlab, cli/main.py): every option checked before the
install and build step, run --build, --version, every verb's --help."""

import os
import subprocess
import sys
import time

import pytest

from cli import main as cli
from conftest import REPO


def pmlab_as_user(tmp_path, *args, timeout=60):
    """./pmlab as uid 1000 (an id(1) that says so): the root check refuses
    the install and build step, so no test here can ever start a build."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    started = time.monotonic()
    done = subprocess.run([os.path.join(REPO, "pmlab"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    done.seconds = time.monotonic() - started
    return done


# ------------------------------------------------------------------ options before builds

@pytest.mark.parametrize("args, named", [
    (["--mode", "bogus"], "unknown mode 'bogus'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--inject", "x"], "bad --inject"),
    (["--build", "sometimes"], "argument --build: invalid choice: 'sometimes'"),
    (["--kernel", "/nonexistent"], "/nonexistent does not exist"),
])
def test_run_names_a_bad_option_before_the_root_check_and_any_build(tmp_path, args, named):
    done = pmlab_as_user(tmp_path, "run", *args, "--results", str(tmp_path / "results"))
    assert done.returncode == 2, done.stderr
    assert named in done.stderr
    assert "run as root" not in done.stderr and "== pmlab:" not in done.stderr
    assert done.seconds < 5
    assert not (tmp_path / "results").exists()


def test_run_with_good_options_goes_on_to_the_install_step(tmp_path):
    """Artifacts not built yet are no bad option (only the build makes
    them): the check passes, and the install step's root check follows."""
    done = pmlab_as_user(tmp_path, "run", "--mode", "mem*2", "--artifacts", str(tmp_path / "not-built"),
                         "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "run as root" in done.stderr, done.stderr


def test_run_build_never_installs_and_builds_nothing(tmp_path):
    """--build never: straight to the run, on what is built (here nothing:
    the run names the missing artifacts)."""
    done = pmlab_as_user(tmp_path, "run", "--build", "never", "--mode", "mem", "--artifacts",
                         str(tmp_path / "not-built"), "--results", str(tmp_path / "results"))
    assert done.returncode == 2, done.stderr
    assert "missing kernel artifacts" in done.stderr
    assert "run as root" not in done.stderr and "== pmlab:" not in done.stderr


def test_check_only_checks_without_running(tmp_path, capsys):
    ok = cli.main(["run", "--check-only", "--mode", "mem*3", "--artifacts", str(tmp_path / "none"),
                   "--results", str(tmp_path / "results")])
    assert ok == 0 and not (tmp_path / "results").exists()
    assert cli.main(["run", "--check-only", "--mode", "mem*3", "--inject", "2:delay=* suspend 100"]) == 0
    said = capsys.readouterr().out
    assert "options checked, nothing run: mem/pmwakeup x3" in said and "cycle 2: delay=* suspend 100" in said
    assert cli.main(["run", "--check-only", "--mode", "mem=3"]) == 2


@pytest.mark.parametrize("verb", ["test", "build"])
def test_a_bad_kernel_is_named_before_the_root_check_and_any_build(tmp_path, verb):
    done = pmlab_as_user(tmp_path, verb, "--kernel", "/nonexistent")
    assert done.returncode == 2, done.stderr
    assert "/nonexistent does not exist" in done.stderr
    assert "run as root" not in done.stderr and "== pmlab:" not in done.stderr


# ------------------------------------------------------------------ --version and --help

def test_version_is_the_checkouts_commit(tmp_path):
    done = pmlab_as_user(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    assert done.stdout.startswith("pmlab ") and commit[:7] in done.stdout


@pytest.mark.parametrize("verb", list(cli.VERBS) + list(cli.SHELL_VERBS))
def test_every_verb_prints_its_usage_and_exits_0(tmp_path, verb):
    done = pmlab_as_user(tmp_path, verb, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: pmlab {verb}")
    assert "== pmlab:" not in done.stderr and "run as root" not in done.stderr


@pytest.mark.parametrize("verb, script", [("check-series", "kernel/check-series"),
                                          ("baseline-compare", "pipelines/baseline-compare")])
def test_a_scripts_help_is_its_whole_header_comment(tmp_path, verb, script):
    with open(os.path.join(REPO, script)) as source:
        lines = source.read().splitlines()[1:]
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line[2:] if line.startswith("# ") else line[1:])
    done = pmlab_as_user(tmp_path, verb, "--help")
    assert done.stdout.splitlines()[1:] == header


# ------------------------------------------------------------------ hints name ./pmlab verbs

def test_missing_artifacts_name_the_command_a_user_types(tmp_path, monkeypatch):
    from lab import artifacts
    from lab.errors import LabError
    monkeypatch.setattr(artifacts, "DEFAULT_DIR", str(tmp_path / "out"))
    monkeypatch.setattr(artifacts, "BASELINE_DIR", str(tmp_path / "baseline"))
    for directory, command in (("out", "(build it with ./pmlab build)"),
                               ("baseline", "(build it with ./pmlab build --baseline)")):
        with pytest.raises(LabError) as refused:
            artifacts.find(str(tmp_path / directory))
        assert command in str(refused.value) and "kernel/build" not in str(refused.value)


INTERNAL = ("pipelines/lava/lab-up", "pipelines/lava/install", "lab/install-deps", "run kernel/build",
            "(kernel/build)", "rebuild it (lab/build-initramfs")
# not hints: what a verb runs (lava up's help), a step of the script that failed
SAYS_WHAT_RUNS = ('help="bring the lab up (pipelines/lava/lab-up)"', 'die "pipelines/lava/install --server failed"')


def test_hints_and_errors_name_pmlab_verbs_not_internal_scripts():
    """Every error, hint and option help of the host code names the ./pmlab
    verb (build, lava up), not the script behind it."""
    tracked = subprocess.run(["git", "ls-files", "lab", "pipelines", "dashboards", "cli", "kernel", "guest"],
                             cwd=REPO, capture_output=True, text=True).stdout.split()
    found = []
    for path in tracked:
        if path.endswith((".md", ".c", ".h", ".asl", ".jinja2", ".config")) or "/patches/" in path:
            continue
        with open(os.path.join(REPO, path), errors="replace") as source:
            for number, line in enumerate(source, 1):
                said = any(word in line for word in ("Error(", "die ", "echo ", "help=", "print(", "f\"", "\"("))
                if said and not line.lstrip().startswith("#") and any(name in line for name in INTERNAL) \
                        and not any(text in line for text in SAYS_WHAT_RUNS):
                    found.append(f"{path}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ old module entry points

def verb_modules():
    """(module, verb) of every module with a main() behind a verb."""
    found = []
    for layer in ("lab", "pipelines", "dashboards"):
        for name in sorted(os.listdir(os.path.join(REPO, layer))):
            path = os.path.join(REPO, layer, name)
            if name.endswith(".py") and "\ndef main(" in open(path).read():
                found.append(f"{layer}.{name[:-3]}")
    return found


@pytest.mark.parametrize("module", verb_modules())
def test_an_old_module_entry_point_works_or_says_where_to_go(module):
    """python3 -m lab.run once imported the module and exited 0, running
    nothing. Each module with a main() either is a command (lab.kernels)
    or names the ./pmlab verb and exits 2."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    if done.returncode == 0:
        assert done.stdout.startswith("usage: "), done.stdout  # a command of its own, documented
    else:
        assert done.returncode == 2 and "is no command of its own: use ./pmlab " in done.stderr, done.stderr


def test_lab_run_and_nightly_say_which_verb(tmp_path):
    for module, verb in (("lab.run", "run"), ("pipelines.nightly", "nightly")):
        done = subprocess.run([sys.executable, "-m", module, "--mode", "mem"], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2 and f"use ./pmlab {verb}" in done.stderr, done.stderr


def test_run_check_only_stops_before_the_install_step(tmp_path):
    done = pmlab_as_user(tmp_path, "run", "--check-only", "--mode", "mem*2", "--results", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert "run as root" not in done.stderr and "== pmlab:" not in done.stderr
