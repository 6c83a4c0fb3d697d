"""The regression corpus (pipelines/corpus.py, pipelines/corpus/):

  - the table and its patches (fast): every case names a patch that is
    there, a single focused change of one file in kernel style;
  - judging a case from its commit-pipeline results (fast, pure functions);
  - every patch applies to the patched 6.1 tree as a branch of a bare tree
    (marked kernel: needs build/src/linux, kernel/build's extracted tree);
  - one cheap case end to end in real guests (guest: its build starts from
    build/'s objects, one driver compiled), and the whole corpus against a
    baseline with the detection rate (pipeline: seven cases, ~1 h).
"""

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from pipelines import corpus  # noqa: E402

PYTHON = "/usr/bin/python3"


def _diff_files(patch):
    with open(patch) as source:
        return re.findall(r"^diff --git a/(\S+) b/", source.read(), re.M)


def test_every_case_has_its_patch_and_what_the_lab_must_report():
    cases = corpus.load_cases()
    assert len(cases) >= 7
    kinds = {case["kind"] for case in cases}
    assert {"dead", "slower", "hang", "ordering", "leak"} <= kinds
    dead_modes = sorted(mode for case in cases if case["kind"] == "dead" for mode in case["modes"])
    assert dead_modes == ["disk", "freeze", "mem"]  # dead after S3 only, S4 only, s2idle only
    for case in cases:
        patch = os.path.join(corpus.CORPUS, case["patch"])
        assert os.path.isfile(patch), case["name"]
        assert len(_diff_files(patch)) == 1, f"{case['name']}: one focused change"
        assert case["breaks"] and case["must_report"]
        message = corpus.patch_message(patch)
        assert re.match(r"^[\w.-]+(: [\w -]+)?: [A-Z]", message), message.splitlines()[0]


def test_unknown_case_is_refused_naming_the_known_ones():
    with pytest.raises(corpus.CorpusError, match="no corpus case nope .*nvme-freeze-hang"):
        corpus.load_cases(names=["nope"])
    result = subprocess.run([PYTHON, "-m", "cli.main", "corpus", "--case", "nope"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "no corpus case nope" in result.stderr


def _case(**fields):
    return {"name": "ahci-s3-no-reset", "kind": "dead", "device": "sata-disk", "modes": ["mem"], **fields}


def _rec(cycle, mode, verdict="pass", phase=None, reason=None):
    return {"cycle": cycle, "mode": mode, "status": "done", "verdict": verdict, "phase": phase, "reason": reason}


def test_a_case_is_caught_by_a_regression_and_named_by_its_device_and_modes():
    devices = [_rec(1, "mem", "fail", "device-check", "sata-disk (disk): write to /dev/sda failed"),
               _rec(2, "freeze", "fail", "device-check", "sata-disk (disk): write to /dev/sda failed"),
               _rec(3, "disk")]
    findings = [{"kind": "devices", "detail": "device-guest sample failed"}]
    entry = corpus.case_result(_case(), 1, findings, [_rec(1, "mem")], devices, 300.0, "regression")
    assert entry["caught"] and entry["device_named"]
    # the lab blamed freeze too (the disk was dead before it started): not named right
    assert entry["modes_blamed"] == ["freeze", "mem"] and not entry["modes_right"]
    right = corpus.case_result(_case(), 1, findings, [], devices[:1] + devices[2:], 300.0, "regression")
    assert right["modes_right"]


def test_a_hang_naming_the_cases_driver_names_its_device():
    """A hang's reason names the stuck callback's device as the kernel does
    (its dev_name and driver), not by the probe's name."""
    case = dict(_case(), device="nvme-disk", driver="nvme", modes=["disk"])
    hung = [_rec(3, "disk", "hang", "hibernate", "hibernate hung: 0000:00:0c.0 (nvme) bus[freeze] started 243.2 s "
                 "before the trace was dumped, never returned (nvme_simple_suspend)")]
    assert corpus.naming(case, [], hung)["device_named"]
    other = [dict(hung[0], reason="hibernate hung: 0000:00:05.0 (xhci_hcd) bus[freeze] ...")]
    assert not corpus.naming(case, [], other)["device_named"]


def test_a_core_slip_is_named_by_what_the_oracle_says():
    case = dict(_case(), name="pm-async-order", device="", driver="", kind="ordering",
                named_by="the PM core waits for the children")
    hung = [_rec(1, "mem", "hang", "suspend", "suspend hung: 1:0:0:0 (sd) bus[suspend] started, never returned "
                 "(blk_execute_rq); out of order: parent target1:0:0 (scsi)'s suspend started while this suspend "
                 "was running (this one never returned); the PM core waits for the children to return first")]
    assert corpus.naming(case, [], hung)["device_named"]
    assert not corpus.naming(case, [], [dict(hung[0], reason="suspend hung: 1:0:0:0 (sd) never returned")])[
        "device_named"]


def test_a_case_that_does_not_build_is_not_caught():
    entry = corpus.case_result(_case(), 1, [], [], [], 60.0, "build failed")
    assert not entry["caught"] and entry["result"] == "build failed"
    missed = corpus.case_result(_case(kind="slower", modes=[]), 0, [], [_rec(1, "mem")], [], 200.0, "pass")
    assert not missed["caught"]


def test_detection_rate_counts_caught_cases():
    results = [{"caught": True, "device_named": True, "modes_right": True},
               {"caught": True, "device_named": False, "modes_right": True},
               {"caught": False}, {"caught": False}]
    assert corpus.detection(results) == {"cases": 4, "caught": 2, "rate": 0.5, "named_right": 1}


SOURCE = os.path.join(REPO, "build", "src", "linux")


@pytest.mark.kernel
def test_every_case_applies_to_the_patched_tree_on_its_own_branch(tmp_path):
    if subprocess.run(["git", "-C", SOURCE, "rev-parse", "-q", "--verify", "refs/tags/pristine"],
                      capture_output=True).returncode:
        pytest.skip("no extracted kernel tree (build/src/linux with tag pristine): ./pmlab build first")
    tree = str(tmp_path / "tree.git")
    patched = corpus.make_patched_tree(tree)
    assert corpus.make_patched_tree(tree) == patched  # made once
    for case in corpus.load_cases():
        commit = corpus.make_case_branch(tree, case)
        changed = corpus.git(tree, "diff", "--name-only", patched, commit).split()
        assert changed == _diff_files(os.path.join(corpus.CORPUS, case["patch"])), case["name"]
        assert corpus.git(tree, "rev-parse", f"refs/heads/corpus/{case['name']}") == commit
    # the series is in the patched commit: pm.h has its recover_noirq callback, pristine's has none
    assert "recover_noirq" in corpus.git(tree, "show", f"{patched}:include/linux/pm.h")
    assert "recover_noirq" not in corpus.git(tree, "show", "pristine:include/linux/pm.h")


@pytest.mark.kernel
def test_every_case_is_checkpatch_clean():
    """A regression a developer might send: kernel style, Signed-off-by."""
    checkpatch = os.path.join(SOURCE, "scripts", "checkpatch.pl")
    assert os.path.exists(checkpatch), f"no {checkpatch}: ./pmlab build extracts the tree"
    for case in corpus.load_cases():
        with open(os.path.join(corpus.CORPUS, case["patch"])) as patch:
            done = subprocess.run([checkpatch, "--strict", "-q", "-"], stdin=patch, cwd=SOURCE,
                                  capture_output=True, text=True)
        assert done.returncode == 0, f"{case['patch']}: {done.stdout}"


def _run_corpus(tmp_path, *argv):
    return subprocess.run([PYTHON, "-m", "cli.main", "corpus", "--results", str(tmp_path), "--run-id", "c",
                           "--tree", os.path.join(REPO, "build", "corpus", "tree.git"), *argv],
                          cwd=REPO, capture_output=True, text=True)


@pytest.mark.guest
@pytest.mark.kernel
def test_one_cheap_case_end_to_end(tmp_path):
    """e1000e dead after suspend-to-idle only, through ./pmlab corpus:
    built, smoke and device guest, no baseline; the lab must catch it and
    name e1000e and suspend-to-idle. The corpus's first build is seeded from
    build/'s objects (pipelines.corpus.seed_build): 173 s here idle, of which
    the build 18 s (a whole kernel of the corpus tree was 363 s)."""
    result = _run_corpus(tmp_path, "--case", "e1000e-s2idle-no-resume", "--no-baseline", "--mode", "freeze")
    summary = json.load(open(tmp_path / "c" / "corpus.json"))
    case = summary["cases"][0]
    assert case["caught"], result.stdout[-3000:]
    assert case["device_named"] and "freeze" in case["modes_blamed"]


@pytest.mark.pipeline
def test_the_whole_corpus_against_a_baseline(tmp_path):
    result = _run_corpus(tmp_path)
    summary = json.load(open(tmp_path / "c" / "corpus.json"))
    assert summary["baseline"]["exit"] == 0, result.stdout[-3000:]
    assert summary["detection"]["cases"] == len(corpus.load_cases())
    assert all("seconds" in case and "findings" in case for case in summary["cases"])


def _tiny_main_build(root):
    """A main build in miniature: build/src/linux a git tree at "patched"
    content, build/kernel an object directory with its .config."""
    source = root / "build" / "src" / "linux"
    source.mkdir(parents=True)
    (source / "Makefile").write_text("VERSION = 6\n")
    (source / "driver.c").write_text("int x;\n")
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "patched"]):
        corpus.git(str(source), *argv)
    objects = root / "build" / "kernel"
    objects.mkdir()
    (objects / ".config").write_text("CONFIG_PM=y\n")
    (objects / "driver.o").write_text("object")
    tree = str(root / "tree.git")
    subprocess.run(["git", "clone", "-q", "--bare", str(source), tree], check=True)
    return str(root / "build"), tree, corpus.git(tree, "rev-parse", "HEAD")


def test_a_first_corpus_build_is_seeded_from_the_main_builds_objects(tmp_path):
    main_build, tree, patched = _tiny_main_build(tmp_path)
    build = str(tmp_path / "corpus")
    assert corpus.seed_build(build, tree, patched, main_build).startswith("seeded from")
    source = os.path.join(build, "src", "linux")
    # sources older than every copied object; git sees nothing changed, so a
    # checkout of a case rewrites only its patch's files
    assert os.stat(os.path.join(source, "driver.c")).st_mtime == corpus.SEED_MTIME
    object_file = os.path.join(build, "kernel", "driver.o")
    assert os.stat(object_file).st_mtime == os.stat(os.path.join(main_build, "kernel", "driver.o")).st_mtime
    assert corpus.git(source, "diff-files", "--name-only") == ""
    with open(os.path.join(build, "src", ".tarball")) as stamp_file:
        assert stamp_file.read() == f"git {tree}\n"  # kernel/tree.sh does not clone it again
    # a second time: the object directory is there, nothing is copied over it
    os.utime(object_file, (1, 1))
    assert "incremental" in corpus.seed_build(build, tree, patched, main_build)
    assert os.stat(object_file).st_mtime == 1


def test_a_main_build_of_another_tree_is_not_copied(tmp_path):
    main_build, tree, patched = _tiny_main_build(tmp_path)
    with open(os.path.join(main_build, "src", "linux", "driver.c"), "a") as changed:
        changed.write("int y;\n")  # the main build's tree is not the patched commit's
    build = str(tmp_path / "corpus")
    assert "not the patched commit's tree (changed files)" in corpus.seed_build(build, tree, patched, main_build)
    assert not os.path.exists(os.path.join(build, "kernel"))
    assert "has no build" in corpus.seed_build(build, tree, patched, str(tmp_path / "nothing"))
