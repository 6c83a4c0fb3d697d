"""The regression corpus: realistic kernel regressions run through the
commit pipeline, and what the lab caught.

  ./pmlab corpus [--case NAME]... [--tree DIR] [--build-dir DIR]
                 [--mode mem,freeze,disk] [--results DIR] [--run-id ID]

The cases are patches on the patched 6.1 tree (pristine linux-source-6.1 +
kernel/patches/6.1/series), each a single focused driver or PM-core change
in kernel style, listed with what they break and what the lab must report
in pipelines/corpus/cases.json (the table is pipelines/README.md's
"Regression corpus").

1. the tree (--tree, default build/corpus/tree.git): a bare git tree whose
   objects are kernel/build's extracted tree's (build/src/linux); its branch
   "patched" is pristine + the series as one commit (made once, fixed
   dates: the same sha every time), and each case is a commit on its own
   branch corpus/<name> (the patch applied with git apply, its message kept);
2. the baseline: the commit pipeline (pipelines/commit.py main(), in
   process) on "patched", --kernel TREE@patched --series none --no-campaign,
   the smoke --mode (default mem,freeze,disk) and the device-guest stage;
3. each case: the same on its branch, against the baseline (a copy of the
   baseline's run directories is the case's previous run). Every build uses
   one build directory (--build-dir, PMLAB_BUILD; default build/corpus):
   between cases only the changed driver is compiled, and its first build
   starts from build/'s objects when build/ holds the patched tree
   (seed_build): a driver, not a whole kernel.

Per case: caught (the commit pipeline said regression, exit 1), its
findings (how the gate named it), the cycles that did not pass with their
verdict, phase and reason, whether the case's device and modes are named,
and the wall time. Written as <results>/<run id>/corpus.json with the
detection rate (caught / cases run); a case's hang dump is copied beside
it. Exit 0 when every case was caught, 1 when one was missed, 2 on bad input
or setup (the tree cannot be made, a patch does not apply).
"""

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

from lab import kernels
from lab import options
from pipelines.common import REPO, log, read_json, read_records, stamp, write_json

PROG = "corpus"
CORPUS = os.path.join(REPO, "pipelines", "corpus")
CASES_FILE = os.path.join(CORPUS, "cases.json")
SOURCE = os.path.join(REPO, "build", "src", "linux")
SERIES = os.path.join(REPO, "kernel", "patches", "6.1")
PATCHED_BRANCH = "patched"
CASE_BRANCH = "corpus/{}"
DEFAULT_SMOKE = "mem,freeze,disk"
BASELINE = "baseline"
# Fixed identity and dates: the patched commit's sha depends on the tree only.
IDENTITY = {"GIT_AUTHOR_NAME": "pmlab corpus", "GIT_AUTHOR_EMAIL": "pmlab@localhost",
            "GIT_COMMITTER_NAME": "pmlab corpus", "GIT_COMMITTER_EMAIL": "pmlab@localhost",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


class CorpusError(ValueError):
    pass


def git(tree, *argv, env=None, text_input=None):
    """git in `tree`; its stdout, stripped. CorpusError names the failed command."""
    process = subprocess.run(["git", "-C", tree, *argv], capture_output=True, text=True, input=text_input,
                             env=dict(os.environ, **IDENTITY, **(env or {})))
    if process.returncode:
        raise CorpusError(f"git {' '.join(argv[:2])} in {tree} failed: "
                          f"{(process.stderr.strip().splitlines() or ['?'])[-1]}")
    return process.stdout.strip()


def load_cases(path=CASES_FILE, names=None):
    """The corpus table's cases (only `names`, in the table's order, if given)."""
    cases = read_json(path)
    if not cases or not isinstance(cases.get("cases"), list):
        raise CorpusError(f"{path}: not a corpus table (no \"cases\" list)")
    known = [case["name"] for case in cases["cases"]]
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise CorpusError(f"no corpus case {', '.join(unknown)} (cases: {', '.join(known)})")
    return [case for case in cases["cases"] if not names or case["name"] in names]


def _branch(tree, name):
    try:
        return git(tree, "rev-parse", "--verify", "-q", f"refs/heads/{name}")
    except CorpusError:
        return None


def _commit_applied(tree, base, patches, message):
    """A commit on `base` of the patches applied in a scratch index (no
    checkout: the tree can be bare). CorpusError names a patch that does not apply."""
    with tempfile.NamedTemporaryFile(prefix="pmlab-corpus-index-") as index:
        env = {"GIT_INDEX_FILE": index.name}
        git(tree, "read-tree", base, env=env)
        for patch in patches:
            try:
                git(tree, "apply", "--cached", patch, env=env)
            except CorpusError as error:
                raise CorpusError(f"{os.path.basename(patch)} does not apply to {base}: {error}") from None
        result = git(tree, "write-tree", env=env)
    return git(tree, "commit-tree", result, "-p", base, "-m", message)


def make_patched_tree(tree, series=SERIES, source=SOURCE):
    """The bare git tree whose branch "patched" is pristine + the series as
    one commit, objects shared with `source` (kernel/build's extracted tree,
    tag "pristine"). Made once; returns that commit."""
    if not os.path.isdir(tree):
        if subprocess.run(["git", "-C", source, "rev-parse", "-q", "--verify", "refs/tags/pristine"],
                          capture_output=True).returncode:
            raise CorpusError(f"{source} has no tag 'pristine': build the kernel once first (./pmlab build)")
        os.makedirs(os.path.dirname(os.path.abspath(tree)), exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--bare", "--shared", source, tree], check=True)
    found = _branch(tree, PATCHED_BRANCH)
    if found:
        return found
    patches = [os.path.join(series, name) for name in kernels.series_patches(series)]
    commit = _commit_applied(tree, "pristine", patches,
                             f"pmlab: the patched 6.1 tree (pristine + {len(patches)} patches of "
                             f"{os.path.relpath(series, REPO)}/series)")
    git(tree, "branch", PATCHED_BRANCH, commit)
    return commit


def patch_message(patch):
    """The commit message of a format-patch file (subject, then body)."""
    with tempfile.TemporaryDirectory() as scratch:
        with open(patch) as source:
            info = subprocess.run(["git", "mailinfo", os.path.join(scratch, "msg"), os.path.join(scratch, "diff")],
                                  stdin=source, capture_output=True, text=True, check=True).stdout
        subject = next((line[len("Subject: "):] for line in info.splitlines() if line.startswith("Subject: ")), "")
        with open(os.path.join(scratch, "msg")) as body:
            return f"{subject}\n\n{body.read().strip()}\n"


def make_case_branch(tree, case, corpus=CORPUS):
    """Branch corpus/<name>: the case's patch as a commit on "patched"
    (remade when the patch changed). Returns the commit."""
    patch = os.path.join(corpus, case["patch"])
    if not os.path.isfile(patch):
        raise CorpusError(f"case {case['name']}: {patch} missing")
    base = git(tree, "rev-parse", f"refs/heads/{PATCHED_BRANCH}")
    commit = _commit_applied(tree, base, [patch], patch_message(patch))
    git(tree, "branch", "-f", CASE_BRANCH.format(case["name"]), commit)
    return commit


# ----------------------------------------------------------------- judging a case


def not_passed(records):
    """The cycles that did not pass: (mode, verdict, phase, reason)."""
    return [{"cycle": r.get("cycle"), "mode": r.get("mode"), "verdict": r.get("verdict") or r.get("status"),
             "phase": r.get("phase"), "reason": r.get("reason")}
            for r in records if r.get("verdict") != "pass"]


def naming(case, findings, failed):
    """Whether the lab named the case's device, by its probe's name
    ("sata-disk") or as the kernel does, with its driver ("0000:00:0c.0
    (nvme)": a hang's stuck callback), or said the case's own words
    ("named_by": a PM-core slip has no one device), and the modes it blamed
    (device-guest cycles that did not pass) against the case's own."""
    text = " ".join([f.get("detail", "") for f in findings] + [str(c.get("reason") or "") for c in failed])
    device, driver = case.get("device") or "", case.get("driver") or ""
    blamed = sorted({c["mode"] for c in failed if c.get("mode")})
    said = bool(case.get("named_by")) and case["named_by"] in text
    return {"device_named": said or (bool(device) and (device in text or f"({driver})" in text)),
            "modes_blamed": blamed,
            "modes_right": blamed == sorted(case.get("modes") or [])}


# The commit pipeline's results that say nothing of the kernel's behaviour:
# a case that does not build or whose image cannot be made is the corpus's bug.
NOT_TESTED = ("build failed", "initramfs failed")


def case_result(case, code, findings, smoke, devices, seconds, result=None):
    """One case's entry of corpus.json: caught only when the commit pipeline
    found a regression in what the kernel did (not a failed build)."""
    failed = not_passed(smoke) + not_passed(devices)
    entry = {"name": case["name"], "kind": case.get("kind"), "device": case.get("device"),
             "caught": code == 1 and result not in NOT_TESTED, "exit": code, "result": result,
             "seconds": round(seconds, 1),
             "findings": [f.get("detail", f.get("kind")) for f in findings], "not_passed": failed}
    entry.update(naming(case, findings, failed))
    return entry


def detection(results):
    """{cases, caught, rate, named}: caught / cases run (a case whose run
    could not start, exit 2, counts as not caught)."""
    caught = sum(1 for r in results if r["caught"])
    named = sum(1 for r in results if r["caught"] and r.get("device_named") and r.get("modes_right"))
    return {"cases": len(results), "caught": caught, "rate": round(caught / len(results), 3) if results else None,
            "named_right": named}


# ----------------------------------------------------------------- running


@contextlib.contextmanager
def build_directory(path):
    """PMLAB_BUILD for the commit pipeline and the kernel/build it runs."""
    before = os.environ.get("PMLAB_BUILD")
    os.environ["PMLAB_BUILD"] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PMLAB_BUILD", None)
        else:
            os.environ["PMLAB_BUILD"] = before


MAIN_BUILD = os.path.join(REPO, "build")
# Older than any object file: a seeded tree's sources never look newer than
# the objects copied beside them, until a checkout rewrites one.
SEED_MTIME = 946684800  # 2000-01-01


def seed_build(build, tree, patched, main_build=MAIN_BUILD):
    """A first corpus build starts from the main build's objects instead of
    a whole kernel: when `build` has no object directory yet and the main
    build (kernel/build's build/) was compiled from exactly the patched
    commit's tree, its object directory is copied (mtimes kept) and the
    corpus tree is cloned as kernel/build would clone it, every source file
    dated before those objects. A case's checkout then rewrites only its
    patch's file and make compiles that driver alone. Returns why it did
    or did not seed (a log line)."""
    objects, source = os.path.join(build, "kernel"), os.path.join(build, "src", "linux")
    main_source, main_objects = os.path.join(main_build, "src", "linux"), os.path.join(main_build, "kernel")
    if os.path.exists(os.path.join(objects, ".config")):
        return f"{objects} is there: incremental from it"
    if not os.path.exists(os.path.join(main_objects, ".config")):
        return f"not seeded: {main_objects} has no build (a whole kernel is compiled)"
    try:
        main_tree = git(main_source, "rev-parse", "HEAD^{tree}")
        dirty = git(main_source, "status", "--porcelain", "--untracked-files=no")
    except CorpusError as error:
        return f"not seeded: {error}"
    if dirty or main_tree != git(tree, "rev-parse", f"{patched}^{{tree}}"):
        return (f"not seeded: {main_source} is not the patched commit's tree "
                f"({'changed files' if dirty else main_tree[:12]}): a whole kernel is compiled")
    shutil.rmtree(source, ignore_errors=True)
    os.makedirs(os.path.dirname(source), exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", tree, source], check=True)
    git(source, "checkout", "-q", "--detach", patched)
    subprocess.run(f"git ls-files -z | xargs -0 touch -h -d @{SEED_MTIME}", shell=True, cwd=source, check=True)
    # The index learns the new dates (content unchanged): no checkout rewrites them.
    git(source, "update-index", "-q", "--refresh")
    # kernel/tree.sh's stamp for a clone of this tree: it is not cloned again.
    with open(os.path.join(os.path.dirname(source), ".tarball"), "w") as stamp_file:
        stamp_file.write(f"git {tree}\n")
    shutil.rmtree(objects, ignore_errors=True)
    subprocess.run(["cp", "-a", main_objects, objects], check=True)
    return f"seeded from {main_build}: its objects, the patched tree dated before them"


def commit_argv(tree, ref, results, run_id, args):
    argv = ["--kernel", f"{tree}@{ref}", "--series", "none", "--no-campaign", "--results", results,
            "--run-id", run_id, "--mode", ",".join(args.mode)]
    for name in ("uri", "profile"):
        if getattr(args, name):
            argv += [f"--{name}", getattr(args, name)]
    return argv


def run_commit(argv):
    """pipelines.commit.main in process: (exit, pipeline.json, seconds)."""
    from pipelines import commit
    started = time.monotonic()
    code = commit.main(argv)
    results, run_id = argv[argv.index("--results") + 1], argv[argv.index("--run-id") + 1]
    marker = read_json(os.path.join(results, run_id, "pipeline.json")) or {}
    return code, marker, time.monotonic() - started


def seed_previous(baseline_root, case_root):
    """The baseline's run directories copied into the case's results root:
    the commit pipeline's previous run is then the baseline's."""
    os.makedirs(case_root, exist_ok=True)
    for name in os.listdir(baseline_root):
        source = os.path.join(baseline_root, name)
        if os.path.isdir(source) and not os.path.exists(os.path.join(case_root, name)):
            shutil.copytree(source, os.path.join(case_root, name), symlinks=True)


def copy_hang_dumps(run_dir, case_name, into):
    """Every hang dump of a case's run copied to <into>/<case>-<name>."""
    copied = []
    for name in sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else ():
        if name.startswith("hang-") and name.endswith(".txt"):
            target = os.path.join(into, f"{case_name}-{name}")
            shutil.copy2(os.path.join(run_dir, name), target)
            copied.append(target)
    return copied


def run_case(case, tree, ref, root, args, baseline_root=None):
    """The commit pipeline on one case; its corpus.json entry."""
    case_root = os.path.join(root, case["name"])
    if baseline_root:
        seed_previous(baseline_root, case_root)
    run_id = f"{case['name']}-commit"
    code, marker, seconds = run_commit(commit_argv(tree, ref, case_root, run_id, args))
    smoke = read_records(os.path.join(case_root, run_id))
    devices = read_records(os.path.join(case_root, f"{run_id}-devices"))
    entry = case_result(case, code, marker.get("regressions") or [], smoke, devices, seconds, marker.get("result"))
    entry["run"] = os.path.relpath(os.path.join(case_root, run_id), root)
    entry["hang_dumps"] = [os.path.relpath(path, root) for run in (run_id, f"{run_id}-devices")
                           for path in copy_hang_dumps(os.path.join(case_root, run), case["name"], root)]
    log(PROG, f"{case['name']}: {'CAUGHT' if entry['caught'] else 'missed'} in {seconds:.0f} s; "
              + ("; ".join(entry["findings"]) or "no finding"))
    return entry


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="pmlab corpus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", metavar="NAME", help="run only this case (repeatable)")
    parser.add_argument("--tree", default=os.path.join(REPO, "build", "corpus", "tree.git"),
                        help="the corpus's git tree (made once)")
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build", "corpus"),
                        help="PMLAB_BUILD of every build (one directory: incremental between cases)")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="no baseline run: a case's every failure is new")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    options.add_modes(parser, f"{DEFAULT_SMOKE}: the smoke of each case", cycles=False, wake=False)
    options.add_results(parser)
    parser.add_argument("--uri", help="libvirt URI (as lab.run's)")
    parser.add_argument("--profile", help="the guests' machine profile (as lab.run's; e.g. pc-seabios)")
    args = parser.parse_args(argv)
    args.mode = args.mode or [DEFAULT_SMOKE]
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        cases = load_cases(names=args.case)
    except CorpusError as error:
        print(f"corpus: {error}", file=sys.stderr)
        return 2
    if args.list:
        for case in cases:
            print(f"{case['name']:<26} {case.get('kind', ''):<9} {case.get('device') or '-':<11} {case['breaks']}")
        return 0
    run_id = args.run_id or f"corpus-{stamp()}-{os.getpid()}"
    root = os.path.join(os.path.abspath(args.results), run_id)
    tree, build = os.path.abspath(args.tree), os.path.abspath(args.build_dir)
    try:
        patched = make_patched_tree(tree)
        refs = {case["name"]: make_case_branch(tree, case) for case in cases}
        log(PROG, f"build directory {build}: {seed_build(build, tree, patched)}")
    except (CorpusError, OSError, subprocess.CalledProcessError) as error:
        print(f"corpus: {error}", file=sys.stderr)
        return 2
    os.makedirs(root, exist_ok=True)
    summary = {"run_id": run_id, "started": stamp(), "tree": tree, "patched": patched, "mode": args.mode,
               "baseline": None, "cases": []}
    out = os.path.join(root, "corpus.json")
    with build_directory(build):
        baseline_root = None
        if args.baseline:
            baseline_root = os.path.join(root, BASELINE)
            code, marker, seconds = run_commit(commit_argv(tree, patched, baseline_root, "baseline-commit", args))
            summary["baseline"] = {"exit": code, "seconds": round(seconds, 1),
                                   "findings": [f.get("detail") for f in marker.get("regressions") or []]}
            write_json(out, summary)
            if code == 2:
                print(f"corpus: the baseline's commit pipeline could not run (exit 2): {baseline_root}",
                      file=sys.stderr)
                return 2
            if code:
                log(PROG, f"the baseline itself did not pass (exit {code}): a case's failures it shares "
                          "are not new")
        for case in cases:
            summary["cases"].append(run_case(case, tree, refs[case["name"]], root, args, baseline_root))
            summary["detection"] = detection(summary["cases"])
            write_json(out, summary)  # after every case: nothing lost to a later one
    summary["finished"] = stamp()
    write_json(out, summary)
    rate = summary["detection"]
    log(PROG, f"detection: {rate['caught']}/{rate['cases']} caught ({rate['named_right']} named with the right "
              f"device and modes); {out}")
    return 0 if rate["caught"] == rate["cases"] else 1


if __name__ == "__main__":  # ./pmlab corpus is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.corpus", "corpus"))
