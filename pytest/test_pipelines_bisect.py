"""./pmlab bisect on a throwaway patch series with a deliberately broken patch.

Two tests:
  - test_bisect_names_first_bad_patch_with_check_cmd: the git-bisect machinery
    (series resolution, one commit per prefix, `git bisect run`, naming the
    patch) with a check command standing in for the build: seconds.
  - test_bisect_kernel_build_names_patch_that_does_not_compile: the real
    thing at compile level: 4 small patches on top of the project's 6.1
    series, the 3rd does not compile; `./pmlab bisect N N+4 --check build`
    runs kernel/build (container, ccache, under flock
    /tmp/pmlab-kernel-build.lock) per step in build/bisect-test and must name
    the 3rd patch. On top of the series, not of the pristine tree, so the
    steps compile what the project's own build compiled: ccache has it (on
    the pristine tree a fresh machine compiled the whole kernel once more,
    ~9 min). Marked `guest` (the slow class: deselect with -m 'not guest').
"""

import difflib
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab.kernels import series_patches  # noqa: E402
from pipelines import bisect as bisect_mod  # noqa: E402

PYTHON = "/usr/bin/python3"
SOURCE = os.path.join(REPO, "build", "src", "linux")
PATCHES = os.path.join(REPO, "kernel", "patches", "6.1")


def _series(directory, patches):
    os.makedirs(directory, exist_ok=True)
    for name, text in patches:  # a name may be in a subdirectory (reprepare/)
        os.makedirs(os.path.dirname(os.path.join(directory, name)), exist_ok=True)
        with open(os.path.join(directory, name), "w") as out:
            out.write(text)
    with open(os.path.join(directory, "series"), "w") as out:
        out.write("# throwaway series\n" + "".join(f"{name}\n" for name, _ in patches))


def _bisect(*argv):
    return subprocess.run([PYTHON, "-m", "cli.main", "bisect", *argv], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO))


def test_resolve_points():
    patches = ["0001-a.patch", "0002-b.patch", "0003-c-thing.patch"]
    assert bisect_mod.resolve("0", patches) == 0
    assert bisect_mod.resolve("pristine", patches) == 0
    assert bisect_mod.resolve("2", patches) == 2
    assert bisect_mod.resolve("0003", patches) == 3
    assert bisect_mod.resolve("0002-b.patch", patches) == 2
    assert bisect_mod.resolve("c-thing", patches) == 3
    for bad in ("4", "nothing-like-it", ".patch"):
        with pytest.raises(bisect_mod.BisectError):
            bisect_mod.resolve(bad, patches)


def test_series_repo_has_one_commit_per_prefix(tmp_path):
    series = tmp_path / "patches"
    _series(str(series), [(f"000{i}-p{i}.patch", f"patch {i}\n") for i in range(1, 5)])
    commits = bisect_mod.make_series_repo(str(series), 1, 4, str(tmp_path / "repo"))
    assert sorted(commits) == [1, 2, 3, 4]
    for k, sha in commits.items():
        listed = subprocess.run(["git", "-C", str(tmp_path / "repo"), "show", f"{sha}:series"],
                                capture_output=True, text=True, check=True).stdout
        assert [line for line in listed.splitlines() if not line.startswith("#")] == \
            [f"000{i}-p{i}.patch" for i in range(1, k + 1)]


@pytest.mark.parametrize("broken", [2, 5, 7])
def test_bisect_names_first_bad_patch_with_check_cmd(tmp_path, broken):
    """A stand-in check: a prefix is bad once it contains the broken patch."""
    names = [f"{i:04d}-{'broken' if i == broken else 'fine'}-{i}.patch" for i in range(1, 9)]
    _series(str(tmp_path / "patches"), [(name, f"{name}\n") for name in names])
    result = _bisect("1", "8", "--series-dir", str(tmp_path / "patches"),
                     "--check-cmd", "! grep -q broken series")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad patch: {names[broken - 1]}" in result.stdout


def test_bisect_from_a_later_good_point_checks_out_every_patch_of_each_prefix(tmp_path):
    """GOOD past the first patch: each step's checkout must still hold the
    patches before GOOD, which its series lists (kernel/build applies them
    all). The check aborts the bisection (128) when one is missing."""
    names = [f"{i:04d}-{'broken' if i == 6 else 'fine'}-{i}.patch" for i in range(1, 9)]
    _series(str(tmp_path / "patches"), [(name, f"{name}\n") for name in names])
    every_file = "for p in $(grep -v '^#' series); do [ -f \"$p\" ] || exit 128; done"
    result = _bisect("3", "8", "--series-dir", str(tmp_path / "patches"),
                     "--check-cmd", f"{every_file}; ! grep -q broken series")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad patch: {names[5]}" in result.stdout


def test_bisect_rejects_bad_input(tmp_path):
    _series(str(tmp_path / "patches"), [("0001-a.patch", "a\n"), ("0002-b.patch", "b\n")])
    assert _bisect("2", "1", "--series-dir", str(tmp_path / "patches"), "--check-cmd", "true").returncode == 2
    assert _bisect("0", "9", "--series-dir", str(tmp_path / "patches"), "--check-cmd", "true").returncode == 2


def _diff(path, before, after):
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def _insert_after_includes(text, line):
    """Insert `line` after the file's last top-level #include."""
    rows = text.splitlines(keepends=True)
    last = max(i for i, row in enumerate(rows) if row.startswith("#include"))
    return "".join(rows[:last + 1] + [line] + rows[last + 1:])


def _patched(paths, index):
    """The files as the project's series leaves them (applied in a scratch index)."""
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "-C", SOURCE, "read-tree", "pristine"], env=env, check=True)
    for name in series_patches(PATCHES):
        subprocess.run(["git", "-C", SOURCE, "apply", "--cached", os.path.join(PATCHES, name)], env=env, check=True)
    return {path: subprocess.run(["git", "-C", SOURCE, "show", f":{path}"], env=env, capture_output=True,
                                 text=True, check=True).stdout for path in paths}


def throwaway_kernel_series(directory, index):
    """The project's series, then 4 patches; the 3rd of those does not compile.
    Returns the names of the 4."""
    main, suspend, process = "kernel/power/main.c", "kernel/power/suspend.c", "kernel/power/process.c"
    state = _patched((main, suspend, process), index)
    patches = []

    def change(name, path, line):
        after = _insert_after_includes(state[path], line)
        patches.append((name, f"From: pmlab test <pmlab@localhost>\nSubject: [PATCH] {name}\n\n---\n"
                              + _diff(path, state[path], after)))
        state[path] = after

    change("0001-PM-main-harmless-comment.patch", main, "/* pmlab bisect test: harmless 1 */\n")
    change("0002-PM-suspend-harmless-comment.patch", suspend, "/* pmlab bisect test: harmless 2 */\n")
    change("0003-PM-process-does-not-compile.patch", process,
           "static int pmlab_bisect_broken __maybe_unused = pmlab_no_such_symbol;\n")
    change("0004-PM-main-harmless-comment-again.patch", main, "/* pmlab bisect test: harmless 4 */\n")
    project = [(name, open(os.path.join(PATCHES, name)).read()) for name in series_patches(PATCHES)]
    _series(directory, project + patches)
    return [name for name, _ in patches]


@pytest.mark.guest
@pytest.mark.timeout(3600)
def test_bisect_kernel_build_names_patch_that_does_not_compile(tmp_path):
    if not os.path.isdir(os.path.join(SOURCE, ".git")):
        pytest.fail("build/src/linux missing: run kernel/build once first", pytrace=False)
    index = tmp_path / "index"
    names = throwaway_kernel_series(str(tmp_path / "patches"), index)
    # Each of the 4 applies on the series (the index holds it), as kernel/build will apply it.
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    for name in names:
        subprocess.run(["git", "-C", SOURCE, "apply", "--cached", str(tmp_path / "patches" / name)],
                       env=env, check=True)
    good = len(series_patches(PATCHES))
    started = time.monotonic()
    result = _bisect(str(good), str(good + len(names)), "--check", "build", "--series-dir", str(tmp_path / "patches"),
                     "--build-dir", os.path.join(REPO, "build", "bisect-test"))
    seconds = time.monotonic() - started
    print(result.stdout[-4000:], result.stderr[-2000:], f"bisect took {seconds:.0f} s", sep="\n")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "first bad patch: 0003-PM-process-does-not-compile.patch" in result.stdout
    assert "pmlab_no_such_symbol" in result.stdout  # the compiler said why


# ------------------------------------------------------- commits of a kernel tree

def _commit(tree, message, **files):
    for name, text in files.items():
        path = os.path.join(tree, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as out:
            out.write(text)
    subprocess.run(["git", "-C", tree, "add", "-A"], check=True)
    subprocess.run(["git", "-C", tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
                   check=True)
    return subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_bisect_over_commits_names_the_first_bad_one_and_leaves_the_tree_alone(tmp_path):
    """--kernel-tree: the git-bisect machinery over a tree's commits, with a
    check command (the driver file says 'broken' from commit 5 on)."""
    tree = str(tmp_path / "linux")
    os.makedirs(tree)
    subprocess.run(["git", "-C", tree, "init", "-q"], check=True)
    commits = [_commit(tree, "base", Makefile="VERSION = 6\n", **{"drivers/x.c": "ok 0\n"})]
    for number in range(1, 8):
        state = "broken" if number >= 5 else "ok"
        commits.append(_commit(tree, f"x: change {number}", **{"drivers/x.c": f"{state} {number}\n"}))
    head = commits[-1]
    result = _bisect("--kernel-tree", tree, commits[0], commits[-1], "--check-cmd", "! grep -q broken drivers/x.c")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {commits[5]} x: change 5" in result.stdout
    assert subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() == head
    assert subprocess.run(["git", "-C", tree, "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""
    # bad input: a ref the tree lacks, GOOD after BAD, the same commit twice
    for good, bad, message in (("v9", commits[-1], "ref 'v9' does not exist"),
                               (commits[-1], commits[0], "is not an ancestor of BAD"),
                               (commits[2], commits[2], "the same commit")):
        refused = _bisect("--kernel-tree", tree, good, bad, "--check-cmd", "true")
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr


def _with_s3_breaking_commit(tree):
    """A throwaway kernel git tree from the built, patched 6.1 tree: commit
    A (as built), B (a harmless comment), C (rtc-cmos's ->suspend fails)."""
    subprocess.run(["git", "clone", "-q", "--shared", SOURCE, tree], check=True)
    good = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    main = os.path.join(tree, "kernel", "power", "main.c")
    with open(main) as source:
        text = source.read()
    harmless = _commit(tree, "PM: a harmless comment", **{"kernel/power/main.c":
                                                         _insert_after_includes(text, "/* pmlab: harmless */\n")})
    rtc = os.path.join(tree, "drivers", "rtc", "rtc-cmos.c")
    with open(rtc) as source:
        text = source.read()
    head = "static int cmos_suspend(struct device *dev)\n{\n\tstruct cmos_rtc\t*cmos = dev_get_drvdata(dev);\n" \
           "\tunsigned char\ttmp;\n\n"
    broken = text.replace(head, head + "\treturn -EIO; /* pmlab bisect test */\n", 1)
    assert broken != text
    bad = _commit(tree, "rtc: cmos: fail every suspend", **{"drivers/rtc/rtc-cmos.c": broken})
    return good, harmless, bad


@pytest.mark.pipeline
@pytest.mark.timeout(3600)
def test_bisect_over_kernel_commits_names_the_one_that_breaks_s3(tmp_path):
    """The acceptance of `./pmlab bisect --kernel-tree`: a real kernel tree,
    each step built by kernel/build --kernel (ccache makes the first build
    minutes, the next incremental) and smoked in a real guest; the commit
    whose rtc-cmos ->suspend fails is named."""
    if not os.path.isdir(os.path.join(SOURCE, ".git")):
        pytest.fail("build/src/linux missing: run kernel/build once first", pytrace=False)
    tree = str(tmp_path / "linux")
    good, _, bad = _with_s3_breaking_commit(tree)
    result = _bisect("--kernel-tree", tree, good, bad, "--check", "smoke", "--mode", "mem",
                     "--build-dir", os.path.join(REPO, "build", "bisect-commits"))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
    assert f"first bad commit: {bad} rtc: cmos: fail every suspend" in result.stdout


def test_every_step_runs_its_smoke_on_the_guest_asked_for(tmp_path):
    """--devices zoo (and the other guest options) reach each bisection
    step as its smoke's request."""
    from lab.request import RunRequest
    from pipelines import bisect
    args = bisect.parse_args(["good", "bad", "--devices", "zoo", "--profile", "pc-seabios", "--mode", "mem*2",
                              "--build-dir", str(tmp_path / "b")])
    step = bisect._step_argv(args, str(tmp_path))
    again = bisect.parse_args(step[step.index("--step"):])
    request = RunRequest.read(again.request)
    assert (request.guest.devices, request.guest.profile) == ("zoo", "pc-seabios")
    assert [c.mode.name for c in request.cycles] == ["mem", "mem"]
    assert (request.artifacts, request.results) == (str(tmp_path / "b" / "out"), str(tmp_path / "b" / "results"))


# ------------------------------------------------ --devices zoo and --check gate


def _gate_args(tmp_path, *extra):
    return bisect_mod.parse_args(["--kernel-tree", str(tmp_path), "good", "bad",
                                  "--build-dir", str(tmp_path / "build"), *extra])


def test_bisect_smoke_request_carries_the_device_guest(tmp_path):
    """--devices zoo reaches every step's request: a device dead after a
    resume fails the step's cycle (lab.devices' device-check), so the commit is bad."""
    request = bisect_mod.smoke_request(_gate_args(tmp_path, "--devices", "zoo", "--mode", "mem"))
    assert request.guest.devices == "zoo"
    assert bisect_mod.smoke_request(_gate_args(tmp_path, "--mode", "mem")).guest.devices in (None, "lean")


def test_gate_step_argv_names_the_reference_and_the_filters(tmp_path):
    args = _gate_args(tmp_path, "--check", "gate", "--device", "e1000e", "--callback", "suspend")
    args.reference = str(tmp_path / "ref-run")
    argv = bisect_mod._step_argv(args, str(tmp_path))
    assert argv[argv.index("--check") + 1] == "gate"
    assert argv[argv.index("--reference") + 1] == str(tmp_path / "ref-run")
    assert argv[argv.index("--device") + 1] == "e1000e" and argv[argv.index("--callback") + 1] == "suspend"
    assert os.path.isfile(argv[argv.index("--request") + 1])


def test_device_and_callback_need_check_gate(tmp_path):
    result = _bisect("--kernel-tree", str(tmp_path), "a", "b", "--device", "e1000e")
    assert result.returncode == 2 and "--check gate" in result.stderr


def _record(cycle, mode, verdict="pass", phase=None, reason=None):
    return {"run_id": "r", "cycle": cycle, "mode": mode, "status": "done", "verdict": verdict,
            "phase": phase, "reason": reason}


def test_gate_findings_of_a_dead_device_filtered_by_device():
    """A device-check failure at a step and not at GOOD is a finding; with
    --device it counts only when its cycle's record names that device."""
    good = [_record(1, "mem"), _record(2, "freeze")]
    step = [_record(1, "mem", "fail", "device-check", "sata-disk (disk): write to /dev/sda failed"),
            _record(2, "freeze")]
    assert bisect_mod.gate_findings(good, step)
    assert bisect_mod.gate_findings(good, step, device="sata-disk")
    assert bisect_mod.gate_findings(good, step, device="e1000e") == []
    assert bisect_mod.gate_findings(good, good) == []


def test_gate_findings_callback_filter_reads_the_finding_itself():
    """A finding that names device and callback in its own fields (the
    latency gate's) passes the filter without any failed cycle."""
    finding = {"kind": "latency", "device": "e1000e", "callback": "suspend", "detail": "e1000e suspend slower"}
    assert bisect_mod.matches(finding, [], device="e1000e", callback="suspend")
    assert not bisect_mod.matches(finding, [], device="e1000e", callback="resume")
    assert not bisect_mod.matches(finding, [], device="nvme")
