"""./pmlab's command line (pmlab, cli/main.py) and the one mode grammar
(lab/modes.py) with the option pieces every command shares (lab/options.py)."""

import argparse
import json
import os
import re
import subprocess
import sys

import pytest

from cli import main as cli
from lab import modes, options
from lab import request as request_mod
from lab.errors import LabError
from conftest import REPO
from pipelines import bisect as bisect_mod
from pipelines import commit as commit_mod
from pipelines import nightly as nightly_mod
from recorded_run import make_run_dir


def pmlab(*args, timeout=60):
    """./pmlab itself (the sh wrapper): --help must never install or build."""
    return subprocess.run([os.path.join(REPO, "pmlab"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


# ------------------------------------------------------------------ verbs

@pytest.mark.parametrize("verb", list(cli.VERBS))
def test_every_verb_documents_itself(verb):
    done = pmlab(verb, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: pmlab {verb}")
    assert "== pmlab:" not in done.stderr, "--help ran the install/build step"


@pytest.mark.parametrize("verb", ["run", "commit", "nightly", "soak", "bisect", "bench"])
def test_verbs_that_take_modes_share_the_grammar(verb):
    done = pmlab(verb, "--help")
    assert "--mode MODE[/WAKE][*N]" in done.stdout
    if verb != "bisect":  # its steps keep their runs under --build-dir
        assert "--results DIR" in done.stdout


def test_the_verb_list():
    done = pmlab("--help")
    assert done.returncode == 0
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(cli.VERBS) + list(cli.SHELL_VERBS)
    assert list(cli.VERBS) == ["run", "test", "judge", "dashboard", "timeline", "devices", "bench", "commit",
                               "nightly", "soak", "bisect", "corpus", "merge", "junit", "baseline-compare", "lava",
                               "sleepgraph", "latency-check", "mutants"]


def test_the_project_has_one_door():
    """No wrapper script or module main beside ./pmlab, but for the kernel
    and guest build tools and the modules the project's own shell scripts
    call (lab.kernels from kernel/build, lab.artifacts from kernel/build and
    lab/build-initramfs, pipelines.baseline_compare from
    pipelines/baseline-compare)."""
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True).stdout
    executables = sorted(line.split()[3] for line in tracked.splitlines() if line.startswith("100755"))
    assert not [path for path in executables
                if path.startswith(("pipelines/", "lab/", "dashboards/")) and "/lava/" not in path
                and path not in ("pipelines/baseline-compare", "lab/build-initramfs", "lab/install-deps")]
    mains = subprocess.run(["git", "grep", "-lE", "__name__ == ['\"]__main__['\"]", "--", "lab", "pipelines",
                            "dashboards"], cwd=REPO, capture_output=True, text=True).stdout.split()
    # those that only say which verb to type instead (lab/entry_points.py) are no door
    mains = [m for m in mains if "entry_points import redirect" not in open(os.path.join(REPO, m)).read()]
    assert sorted(m for m in mains if "/lava/" not in m) == [
        "dashboards/bench_compute.py", "dashboards/manifest.py", "lab/artifacts.py", "lab/kernels.py",
        "pipelines/baseline_compare.py"]


def test_every_module_the_project_runs_has_a_main():
    """`python3 -m lab.run` would import the module and exit 0, running
    nothing: every `-m MODULE` in the code, the scripts and the CI files
    names a module with a main."""
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True).stdout
    paths = [line.split()[3] for line in tracked.splitlines()
             if line.split()[3].endswith((".py", ".yml")) or line.startswith("100755")]
    runnable = {"pytest", "cli.main"}
    missing = []
    # these two name such modules on purpose: this test, and the layer test's planted imports
    for path in (p for p in paths if p not in ("pytest/test_cli.py", "pytest/test_layers.py")):
        with open(os.path.join(REPO, path), errors="replace") as source:
            text = source.read()
        for module in re.findall(r"""(?:-m\s+|["']-m["'],\s*["'])([a-z_]+(?:\.[a-z_]+)+|pytest)\b""", text):
            if module in runnable:
                continue
            file = os.path.join(REPO, *module.split(".")) + ".py"
            if not os.path.isfile(file) or "__main__" not in open(file).read():
                missing.append(f"{path}: -m {module}")
    assert not missing, missing


@pytest.mark.parametrize("args, problem", [(["frobnicate"], "unknown verb 'frobnicate'"),
                                           ([], "no verb given")])
def test_a_bad_verb_exits_2_with_the_usage(args, problem):
    done = pmlab(*args)
    assert done.returncode == 2
    assert problem in done.stderr
    assert "usage: ./pmlab VERB" in done.stderr and "  judge " in done.stderr


def test_test_verb_passes_its_arguments_to_pytest_and_results_to_lab_results(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli.main", "test", "--results", str(tmp_path),
                           "--collect-only", "-q", "pytest/test_modes.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pytest/test_modes.py::test_default_plan_is_the_sample" in done.stdout.splitlines()
    assert "test_judge.py::" not in done.stdout  # the tests named, not the whole of pytest/
    assert (tmp_path / "junit.xml").is_file()


def test_fast_leaves_out_the_guest_kernel_and_browser_tests(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli.main", "test", "--fast", "--results", str(tmp_path),
                           "--collect-only", "-q", "-p", "no:xdist"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    items = [line for line in done.stdout.splitlines() if line.startswith("pytest/")]
    assert "pytest/test_modes.py::test_default_plan_is_the_sample" in items
    assert "pytest/test_kernel.py::test_a_dropped_option_is_reported_with_its_line" in items  # no kernel needed
    for left_out in ("test_kernel.py::test_series_is_checkpatch_clean_and_applies",  # kernel
                     "test_cycles.py::", "test_device_matrix.py::",  # guest
                     "test_dashboard_page.py::"):  # browser
        assert not [item for item in items if left_out in item], left_out
    assert len(items) > 500


def test_fast_narrows_a_marker_expression_of_yours(tmp_path):
    """-m kernel selects test_kernel.py's kernel tests; after --fast, none
    (pytest exits 5): the two expressions are joined, neither replaces the
    other."""
    def collect(*args):
        return subprocess.run([sys.executable, "-m", "cli.main", "test", *args, "--results", str(tmp_path),
                               "--collect-only", "-q", "-p", "no:xdist", "pytest/test_kernel.py"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert "pytest/test_kernel.py::test_series_is_checkpatch_clean_and_applies" in collect("-m", "kernel").stdout
    done = collect("--fast", "-m", "kernel")
    assert done.returncode == 5 and "no tests collected" in done.stdout, done.stdout + done.stderr


def test_pmlab_test_fast_prepares_nothing(tmp_path):
    """./pmlab test --fast neither installs nor builds, so it needs no root:
    with an id(1) that says uid 1000, ./pmlab test stops at the root check
    and ./pmlab test --fast runs pytest."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    results = str(tmp_path / "results")

    def pmlab_as_user(*args):
        return subprocess.run([os.path.join(REPO, "pmlab"), "test", *args, "--results", results, "--collect-only",
                               "-q", "-p", "no:xdist", "pytest/test_modes.py::test_default_plan_is_the_sample"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    refused = pmlab_as_user()
    assert refused.returncode == 2 and "run as root" in refused.stderr, refused.stderr
    done = pmlab_as_user("--fast")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== pmlab:" not in done.stderr and "test_default_plan_is_the_sample" in done.stdout


@pytest.mark.parametrize("args, problem", [([], "the following arguments are required"),
                                           (["cycle"], "invalid choice: 'cycle'"),
                                           (["up", "--workers", "0"], "--workers must be at least 1"),
                                           (["down", "--workers", "2"], "unrecognized arguments")])
def test_lava_refuses_what_it_does_not_manage(args, problem):
    """./pmlab lava manages the lab; cycles on it are ./pmlab run --engine lava."""
    done = subprocess.run([sys.executable, "-m", "cli.main", "lava", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert problem in done.stderr


def test_dashboard_verb_draws_the_page_over_the_results(tmp_path):
    run = make_run_dir(tmp_path / "run-recorded")
    cycles = {json.loads(line)["cycle"] for line in (run / "cycles.jsonl").read_text().splitlines()}
    done = subprocess.run([sys.executable, "-m", "cli.main", "dashboard", "--results", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    dashboard = json.loads((tmp_path / "dashboard.json").read_text())
    assert dashboard["inputs"]["cycles"] == len(cycles) == 11 and dashboard["inputs"]["runs"] == 1
    assert (tmp_path / "dashboard.html").is_file()


def pmlab_dashboard(*args):
    return subprocess.run([sys.executable, "-m", "cli.main", "dashboard", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("named", [["{root}/nonexistent"], ["--results", "{root}/nonexistent"],
                                   ["{root}/run-recorded/nonexistent-run"]])
def test_dashboard_of_a_nonexistent_input_is_exit_2_and_creates_nothing(tmp_path, named):
    make_run_dir(tmp_path / "run-recorded")
    before = sorted(str(path) for path in tmp_path.rglob("*"))
    done = pmlab_dashboard(*[arg.format(root=tmp_path) for arg in named])
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dashboard: ") and "nonexistent" in done.stderr and "not found" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert sorted(str(path) for path in tmp_path.rglob("*")) == before


def test_dashboard_of_an_empty_results_root_says_so_and_draws_nothing(tmp_path):
    done = pmlab_dashboard("--results", tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"dashboard: no run under {tmp_path} (no cycles.jsonl): nothing recorded to draw\n"
    assert list(tmp_path.iterdir()) == []  # no page saying "every cycle passed" of 0


def test_dashboard_of_damaged_lines_is_exit_2_unless_lenient(tmp_path):
    run = make_run_dir(tmp_path / "run-recorded")
    with open(run / "cycles.jsonl", "a") as out:
        out.write("garbage\n")
    number = len((run / "cycles.jsonl").read_text().splitlines())
    for flags, code in (([], 2), (["--strict"], 2), (["--lenient"], 0)):
        done = pmlab_dashboard("--results", tmp_path, *flags)
        assert done.returncode == code, (flags, done.stderr)
        assert f"{run}/cycles.jsonl:{number}: not JSON" in done.stderr  # named either way
        assert (tmp_path / "dashboard.html").is_file()  # the page is drawn and lists the damage
    assert "--lenient" in pmlab_dashboard("--results", tmp_path).stderr.splitlines()[-1]


def test_dashboard_of_a_run_dir_goes_beside_the_run_not_into_the_checkout(tmp_path):
    run = make_run_dir(tmp_path / "run-recorded")
    checkout = os.path.join(REPO, "results", "dashboard.json")
    before = os.stat(checkout).st_mtime_ns if os.path.exists(checkout) else None
    done = pmlab_dashboard(run)
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "dashboard.json").read_text())["inputs"]["runs"] == 1
    assert (run / "dashboard.html").is_file()
    assert (os.stat(checkout).st_mtime_ns if os.path.exists(checkout) else None) == before
    by_id = pmlab_dashboard("run-recorded", "--results", tmp_path)  # a run id under --results, as for judge
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads((tmp_path / "dashboard.json").read_text())["inputs"]["runs"] == 1


def in_own_mounts(script):
    """Run a shell script in a mount namespace of its own (unprivileged: a
    user namespace too), so it can mount without touching the machine's."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"unshare -rm (util-linux, lab/install-deps) cannot make a mount namespace here: "
                    f"{probe.stderr.decode().strip()}", pytrace=False)
    return subprocess.run(["unshare", "-rm", "sh", "-ec", script], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_dashboard_on_a_read_only_results_root_is_one_line_exit_2(tmp_path):
    make_run_dir(tmp_path / "run-recorded")
    done = in_own_mounts(f"mount --bind {tmp_path} {tmp_path}; mount -o remount,bind,ro {tmp_path}; "
                         f"exec {sys.executable} -m cli.main dashboard --results {tmp_path}")
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"dashboard: cannot write the dashboard into {tmp_path}: Read-only file system (")
    assert "Traceback" not in done.stderr


def test_dashboard_on_a_full_disk_is_one_line_exit_2(tmp_path):
    root = tmp_path / "full"
    root.mkdir()
    make_run_dir(tmp_path / "run-recorded")
    done = in_own_mounts(f"mount -t tmpfs -o size=4m tmpfs {root}; cp -a {tmp_path}/run-recorded {root}/; "
                         f"dd if=/dev/zero of={root}/filler bs=64k 2>/dev/null || true; "
                         f"exec {sys.executable} -m cli.main dashboard --no-cache --results {root}")
    assert done.returncode == 2, done.stderr
    assert "No space left on device" in done.stderr.splitlines()[-1] and "Traceback" not in done.stderr


def test_lava_actions_become_the_lab_scripts():
    lava = os.path.join(REPO, "pipelines", "lava")
    assert cli.lava_command(["up"]) == [os.path.join(lava, "lab-up"), "--workers", "2"]
    assert cli.lava_command(["up", "--workers", "3", "--listen", "10.0.0.1", "--isolated-workers", "2"]) == [
        os.path.join(lava, "lab-up"), "--workers", "3", "--listen", "10.0.0.1", "--isolated-workers", "2"]
    assert cli.lava_command(["down", "--server"]) == [os.path.join(lava, "lab-down"), "--server"]
    assert cli.lava_command(["status"]) == [os.path.join(lava, "lab-status")]
    for script in ("lab-up", "lab-down", "lab-status", "isolated-workers"):
        assert os.access(os.path.join(lava, script), os.X_OK), script


def test_run_refuses_bad_input_before_any_guest(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", "--mode", "mem=3", "--results", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "'mem=3' is the old MODE=COUNT form: write mem*3" in done.stderr
    assert not (tmp_path / "dashboard.json").exists()


# ------------------------------------------------------------------ the mode grammar

def plan_of(items, cycles=None, wake=None):
    return [(mode.name, mode.wake, count) for mode, count in modes.plan(items, cycles, wake)]


@pytest.mark.parametrize("items, want", [
    (["mem*10"], [("mem", "pmwakeup", 10)]),
    (["mem*10", "disk*3"], [("mem", "pmwakeup", 10), ("disk", "platform", 3)]),
    (["mem*3,freeze*2,disk"], [("mem", "pmwakeup", 3), ("freeze", "powerbutton", 2), ("disk", "platform", 1)]),
    (["disk/reboot*2", "mem/rtc"], [("disk", "reboot", 2), ("mem", "rtc", 1)]),
    (["pm_test-core*4"], [("pm_test-core", "none", 4)]),
])
def test_mode_grammar_forms(items, want):
    assert plan_of(items) == want


def test_older_count_spelling_still_works():
    assert plan_of(["mem", "freeze"], "3") == [("mem", "pmwakeup", 3), ("freeze", "powerbutton", 3)]
    assert plan_of(None, "2") == [("mem", "pmwakeup", 2), ("freeze", "powerbutton", 2), ("disk", "platform", 2)]
    assert plan_of(["mem", "disk/reboot"], wake="rtc") == [("mem", "rtc", 1), ("disk", "reboot", 1)]


@pytest.mark.parametrize("items, cycles, message", [
    (["mem=3"], None, "'mem=3' is the old MODE=COUNT form: write mem*3"),
    (["mem*3,freeze=2"], None, "write freeze*2"),
    (["mem*0"], None, "bad count in mode 'mem*0'"),
    (["mem*x"], None, "write MODE*N"),
    (["mem*"], None, "bad count"),
    (["mem/"], None, "names no wake source"),
    (["mem,,disk"], None, "empty mode"),
    (["sleepy*2"], None, "unknown mode 'sleepy'"),
    (["freeze/rtc"], None, "hangs under QEMU"),
    (["mem*3"], "2", "has its count already: drop --cycles"),
])
def test_mode_grammar_errors_name_the_item_and_the_fix(items, cycles, message):
    with pytest.raises(LabError, match=re.escape(message)):
        modes.plan(items, cycles)


def test_expand_and_describe_are_inverse():
    names = modes.expand(["mem*3,freeze", "disk/reboot*2"])
    assert names == ["mem", "mem", "mem", "freeze", "disk/reboot", "disk/reboot"]
    assert modes.describe(names) == "mem*3,freeze,disk/reboot*2"
    assert [m.name for m in map(modes.mode_of, names)] == ["mem"] * 3 + ["freeze"] + ["disk"] * 2
    assert modes.mode_of("disk/reboot").wake == "reboot"


# ------------------------------------------------------------------ older spellings

def test_commit_and_bisect_translate_the_older_smoke_form():
    assert commit_mod.parse_args(["--smoke", "mem=3,freeze=2,disk=1"]).mode == ["mem*3,freeze*2,disk*1"]
    assert commit_mod.smoke_as_modes("mem=2,freeze,disk=1") == "mem*2,freeze,disk*1"
    assert bisect_mod.parse_args(["1", "2", "--smoke", "mem=2"]).mode == ["mem*2"]
    assert bisect_mod.parse_args(["1", "2"]).mode == [bisect_mod.DEFAULT_SMOKE]


def test_smoke_and_mode_together_is_an_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        commit_mod.parse_args(["--smoke", "mem=2", "--mode", "mem"])
    assert exit_info.value.code == 2
    assert "give the smoke cycles once" in capsys.readouterr().err


def test_shared_results_option_has_one_meaning():
    parser = argparse.ArgumentParser()
    options.add_results(parser)
    options.add_budget(parser)
    args = parser.parse_args(["--hours", "1.5"])
    assert args.results == os.path.join(REPO, "results") and args.hours == 1.5
    for module in (nightly_mod, commit_mod):
        assert module.parse_args([] if module is commit_mod else ["--max-cycles", "1"]) is not None


@pytest.mark.parametrize("verb, extra", [("nightly", ["--dry-run"]), ("soak", [])])
def test_long_runs_refuse_a_bad_injection_before_anything_runs(verb, extra, tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli.main", verb, "--max-cycles", "3", "--inject", "2:nope=1",
                           "--results", str(tmp_path), *extra], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "bad --inject '2:nope=1'" in done.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("text, want", [("1x1", (1, 1)), ("2x2", (2, 2)), ("0x5", (0, 5)), ("7x0", (7, 0)),
                                        ("7x2", (7, 2)), (None, None)])
def test_pmtest_tree_sizes(text, want):
    assert request_mod.pmtest_tree(text) == want


@pytest.mark.parametrize("text, problem", [("2", "give DEPTHxFANOUT"), ("ax2", "give DEPTHxFANOUT"),
                                           ("2x-1", "give DEPTHxFANOUT"),
                                           ("8x2", "511 devices a tree, pmtest allows 256"),
                                           ("3x7", "400 devices a tree, pmtest allows 256")])
def test_a_pmtest_tree_pmtest_would_refuse_is_refused_on_the_host(text, problem):
    with pytest.raises(LabError, match=problem):
        request_mod.pmtest_tree(text)


def test_the_pmtest_tree_reaches_the_guest_command_line():
    assert request_mod.pmtest_tree_cmdline((1, 1)) == "pmtest.depth=1 pmtest.fanout=1"
    assert request_mod.pmtest_tree_cmdline(None) == ""
    parser = argparse.ArgumentParser()
    options.add_guest(parser)
    args = parser.parse_args(["--pmtest-tree", "1x1", "--profile", "pc-seabios", "--no-firmware-errata"])
    guest = request_mod.guest_from_args(args)
    assert (guest.pmtest_tree, guest.profile, guest.firmware_errata) == ((1, 1), "pc-seabios", False)


def test_the_q35_guest_reserves_the_page_ovmf_clears_unless_told_not_to():
    from lab import guest, virt
    assert virt.errata_cmdline("q35-ovmf") == "memmap=4K$0x808000"
    assert virt.errata_cmdline("pc-seabios") == ""
    kept = guest.Guest.__new__(guest.Guest)
    plain = guest.Guest.__new__(guest.Guest)
    for g, errata in ((kept, True), (plain, False)):
        g.connection = type("C", (), {"conn": None, "events": lambda self, name: None})()
        guest.Guest.__init__(g, g.connection, "g", None, os.devnull, "q35-ovmf", "pmtest.depth=1",
                             firmware_errata=errata)
    guard = " pmtest_ramguard.start=0x800000 pmtest_ramguard.size=0x100000"
    assert kept.cmdline == guest.BASE_CMDLINE + " memmap=4K$0x808000" + guard + " pmtest.depth=1"
    assert plain.cmdline == guest.BASE_CMDLINE + guard + " pmtest.depth=1"


def test_run_refuses_a_bad_pmtest_tree_before_any_guest(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", "--mode", "mem", "--pmtest-tree", "9x9",
                           "--results", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "bad --pmtest-tree '9x9'" in done.stderr
