"""pipelines/bisect on a throwaway patch series with a deliberately broken patch.

Two tests:
  - test_bisect_names_first_bad_patch_with_check_cmd: the git-bisect machinery
    (series resolution, one commit per prefix, `git bisect run`, naming the
    patch) with a check command standing in for the build: seconds.
  - test_bisect_kernel_build_names_patch_that_does_not_compile: the real
    thing at compile level: 4 small patches against Debian's linux-source-6.1,
    the 3rd does not compile; `pipelines/bisect 0 4 --check build` runs
    kernel/build (container, ccache, under flock /tmp/pmlab-kernel-build.lock)
    per step in build/bisect-test and must name the 3rd patch. Minutes: the
    first run seeds build/bisect-test (git clone of build/src/linux) and
    builds once from ccache; later steps and later runs are incremental.
    Marked `guest` (the slow class: deselect with -m 'not guest').
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

from pipelines import bisect as bisect_mod  # noqa: E402

PYTHON = "/usr/bin/python3"
SOURCE = os.path.join(REPO, "build", "src", "linux")


def _series(directory, patches):
    os.makedirs(directory, exist_ok=True)
    for name, text in patches:
        with open(os.path.join(directory, name), "w") as out:
            out.write(text)
    with open(os.path.join(directory, "series"), "w") as out:
        out.write("# throwaway series\n" + "".join(f"{name}\n" for name, _ in patches))


def _bisect(*argv):
    return subprocess.run([PYTHON, "-m", "pipelines.bisect", *argv], cwd=REPO, capture_output=True, text=True,
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


def test_bisect_rejects_bad_input(tmp_path):
    _series(str(tmp_path / "patches"), [("0001-a.patch", "a\n"), ("0002-b.patch", "b\n")])
    assert _bisect("2", "1", "--series-dir", str(tmp_path / "patches"), "--check-cmd", "true").returncode == 2
    assert _bisect("0", "9", "--series-dir", str(tmp_path / "patches"), "--check-cmd", "true").returncode == 2


def _pristine(path):
    return subprocess.run(["git", "-C", SOURCE, "show", f"pristine:{path}"], capture_output=True, text=True,
                          check=True).stdout


def _diff(path, before, after):
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def _insert_after_includes(text, line):
    """Insert `line` after the file's last top-level #include."""
    rows = text.splitlines(keepends=True)
    last = max(i for i, row in enumerate(rows) if row.startswith("#include"))
    return "".join(rows[:last + 1] + [line] + rows[last + 1:])


def throwaway_kernel_series(directory):
    """4 patches on the pristine tree; the 3rd does not compile."""
    main, suspend, process = "kernel/power/main.c", "kernel/power/suspend.c", "kernel/power/process.c"
    state = {path: _pristine(path) for path in (main, suspend, process)}
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
    _series(directory, patches)
    return [name for name, _ in patches]


@pytest.mark.guest
@pytest.mark.timeout(3600)
def test_bisect_kernel_build_names_patch_that_does_not_compile(tmp_path):
    if not os.path.isdir(os.path.join(SOURCE, ".git")):
        pytest.fail("build/src/linux missing: run kernel/build once first", pytrace=False)
    names = throwaway_kernel_series(str(tmp_path / "patches"))
    # Each patch applies on its predecessors (what kernel/build will do).
    index = tmp_path / "index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "-C", SOURCE, "read-tree", "pristine"], env=env, check=True)
    for name in names:
        subprocess.run(["git", "-C", SOURCE, "apply", "--cached", str(tmp_path / "patches" / name)],
                       env=env, check=True)
    started = time.monotonic()
    result = _bisect("0", "4", "--check", "build", "--series-dir", str(tmp_path / "patches"),
                     "--build-dir", os.path.join(REPO, "build", "bisect-test"))
    seconds = time.monotonic() - started
    print(result.stdout[-4000:], result.stderr[-2000:], f"bisect took {seconds:.0f} s", sep="\n")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "first bad patch: 0003-PM-process-does-not-compile.patch" in result.stdout
    assert "pmlab_no_such_symbol" in result.stdout  # the compiler said why
