"""Find the first bad patch of the kernel patch series, or the first bad
commit of a kernel git tree, with `git bisect run`.

  ./pmlab bisect GOOD BAD [--check build|smoke] [--series-dir kernel/patches/6.1]
                 [--build-dir build/bisect] [--mode mem*2,freeze] [--keep]
  ./pmlab bisect GOOD BAD --check-cmd 'SHELL COMMAND'
  ./pmlab bisect --kernel-tree DIR GOOD_REF BAD_REF [--series DIR|none] [--check ...]
                 [--devices zoo] [--check gate [--device X] [--callback Y]]
  (the older --smoke mem=2,freeze=1 still works)

With --kernel-tree, GOOD_REF and BAD_REF are commits (tags, branches) of a
kernel git tree. A scratch clone of it (--shared: no copy of its objects; the
user's tree and its HEAD are never touched) is bisected; each step builds the
clone's commit with kernel/build --kernel CLONE@COMMIT [--series] in one
build directory (the clone moves between commits by checkout, so steps build
incrementally) and runs the same check. Printed: "first bad commit: SHA
subject".

GOOD and BAD are points of the series: 0 (no patch: the pristine tree), a
patch number (3 or 0003: the series up to and including the 3rd patch) or a
patch name (a unique part of its file name). GOOD must come before BAD.

A throwaway git repository is made with one commit per series prefix from
GOOD to BAD (each commit holds `series` listing that prefix and the patch
files; its subject is the patch it adds), and `git bisect run` tests commits
with this script's --step:
  build   kernel/build of that prefix (PMLAB_SERIES_DIR = the commit,
          PMLAB_BUILD = --build-dir, incremental between steps, under flock
          /tmp/pmlab-kernel-build.lock). Fails -> bad.
  smoke   build, then the commit pipeline's smoke step on it: the initramfs
          and lab.run.run of the smoke's request (--mode cycles and the
          guest options, written once as a file the steps read). Any
          failed cycle -> bad.
  gate    the smoke at GOOD once (before the bisection: the reference),
          then each step's smoke compared with it by the commit gate
          (pipelines.compare.regressions: pass rates, new failure buckets,
          and whatever else the gate reports, e.g. a slower callback);
          --device X / --callback Y keep only the findings naming them.
          Any finding -> bad. With --devices zoo the smoke runs on the
          guest of real devices: a device dead after a resume is a failed
          cycle (smoke) or a new bucket (gate) -> bad.
  --check-cmd: run this shell command in the commit's checkout instead
          (exit 0 good, 125 skip, 1..127 bad).
A setup error (lab.run exit 2) or Ctrl-C (130) aborts the bisection (exit 128).
The first bad commit's subject names the patch; printed as
"first bad patch: NNNN-name.patch" (exit 0), exit 1 if bisect found none,
2 on bad input.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


from lab import kernels  # noqa: E402
from lab import modes as modes_mod  # noqa: E402
from lab import options  # noqa: E402
from lab import request as request_mod  # noqa: E402
from lab import run as lab_run  # noqa: E402
from pipelines.commit import smoke_as_modes  # noqa: E402
from pipelines.common import PYTHON, REPO, log, read_records, run  # noqa: E402

PROG = "bisect"
DEFAULT_SMOKE = "mem*2,freeze"
ABORT = 128


class BisectError(ValueError):
    pass


def resolve(point, patches):
    """A point of the series -> how many patches it applies (0..len)."""
    text = str(point).strip()
    if text.lower() in ("0", "none", "pristine", "baseline"):
        return 0
    if text.isdigit():
        number = int(text)
        if not 1 <= number <= len(patches):
            raise BisectError(f"patch number {number} is outside the series (1..{len(patches)})")
        return number
    exact = [i for i, name in enumerate(patches, 1) if name == text]
    if exact:
        return exact[0]
    found = [i for i, name in enumerate(patches, 1) if text in name]
    if len(found) == 1:
        return found[0]
    if not found:
        raise BisectError(f"no patch in the series matches '{text}'")
    raise BisectError(f"'{text}' matches {len(found)} patches: "
                      + ", ".join(patches[i - 1] for i in found))


def git(repo, *argv, capture=False):
    command = ["git", "-C", repo, "-c", "user.name=pmlab-bisect", "-c", "user.email=pmlab@localhost",
               "-c", "commit.gpgsign=false", *argv]
    if capture:
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def make_series_repo(series_dir, good, bad, repo):
    """One commit per prefix good..bad; returns {prefix length: sha}."""
    patches = kernels.series_patches(series_dir)
    os.makedirs(repo)
    git(repo, "init", "-q")
    commits = {}

    def copy(name):  # a name may be in a subdirectory (6.1's reprepare/)
        os.makedirs(os.path.dirname(os.path.join(repo, name)), exist_ok=True)
        shutil.copy2(os.path.join(series_dir, name), os.path.join(repo, name))

    for name in patches[:max(good - 1, 0)]:  # GOOD's own prefix: every commit applies it
        copy(name)
    for k in range(good, bad + 1):
        if k > 0:
            copy(patches[k - 1])
        with open(os.path.join(repo, "series"), "w") as out:
            out.write(f"# pmlab bisect: the first {k} patch(es) of {os.path.abspath(series_dir)}/series\n")
            out.writelines(f"{name}\n" for name in patches[:k])
        git(repo, "add", "-A")
        subject = patches[k - 1] if k else "pristine (no patch)"
        git(repo, "commit", "-q", "--allow-empty", "-m", subject, "-m", f"series prefix {k}/{len(patches)}")
        commits[k] = git(repo, "rev-parse", "HEAD", capture=True).strip()
    return commits


def step(args):
    """One `git bisect run` step in the current directory: a series prefix,
    or (--kernel-tree) a commit of the scratch clone."""
    started = time.monotonic()
    checked = build_and_smoke(args, started)
    if isinstance(checked, int):
        return checked
    code, run_dir = checked
    if code in (2, 130):  # bad setup, or Ctrl-C: says nothing of this commit
        return ABORT
    if args.check == "gate":
        findings = gate_findings(read_records(args.reference), read_records(run_dir), args.device, args.callback)
        for finding in findings:
            log(PROG, f"step: gate: {finding.get('detail', finding)}")
        log(PROG, f"step: gate: {len(findings)} finding(s) against {os.path.basename(args.reference)}")
        return 1 if findings else 0
    return 0 if code == 0 else 1


def build_and_smoke(args, started):
    """Build the current directory's commit (or series prefix) and run the
    smoke on it: (lab.run exit, run dir), or a step's exit when it ends
    before the smoke (--check-cmd, --check build, a failed build)."""
    build_dir = os.path.abspath(args.build_dir)
    if args.kernel_tree:
        commit = git(os.getcwd(), "rev-parse", "HEAD", capture=True).strip()
        log(PROG, f"step: commit {commit[:12]} {git(os.getcwd(), 'log', '-1', '--format=%s', capture=True).strip()}")
        env = {"PMLAB_SERIES_DIR": "", "PMLAB_BUILD": build_dir}
        build = [os.path.join(REPO, "kernel", "build"), "--kernel", f"{os.getcwd()}@{commit}",
                 "--series", args.series or "none"]
        label = commit[:12]
        if args.check_cmd:
            code = subprocess.run(["sh", "-c", args.check_cmd]).returncode
            log(PROG, f"step: --check-cmd exit {code} ({time.monotonic() - started:.1f} s)")
            return code
    else:
        series_dir = os.getcwd()
        patches = kernels.series_patches(series_dir)
        last = patches[-1] if patches else "(none)"
        log(PROG, f"step: prefix of {len(patches)} patch(es), last {last}")
        if args.check_cmd:
            code = subprocess.run(["sh", "-c", args.check_cmd],
                                  env=dict(os.environ, PMLAB_SERIES_DIR=series_dir)).returncode
            log(PROG, f"step: --check-cmd exit {code} ({time.monotonic() - started:.1f} s)")
            return code
        seed_tree(build_dir)
        env = {"PMLAB_SERIES_DIR": series_dir, "PMLAB_BUILD": build_dir}
        build = [os.path.join(REPO, "kernel", "build")]
        label = str(len(patches))
    code = run(build, prefix="build", env=env)  # kernel/build takes the build lock
    log(PROG, f"step: kernel/build exit {code} ({time.monotonic() - started:.1f} s)")
    if code:
        return 1
    if args.check == "build":
        return 0
    out = os.path.join(build_dir, "out")
    code = run([os.path.join(REPO, "lab", "build-initramfs"), out], prefix="initramfs", env=env)
    if code:
        log(PROG, f"step: lab/build-initramfs exit {code}: cannot test, skipping this commit")
        return 125
    # The smoke: the bisection's request (smoke_request), this step's run id.
    request = request_mod.RunRequest.read(args.request).replace(run_id=f"bisect-{label}-{int(time.time())}")
    code = lab_run.run(request).code
    log(PROG, f"step: smoke exit {code} ({time.monotonic() - started:.1f} s)")
    return code, os.path.join(request.results, request.run_dir or request.run_id)


def cited(finding, records):
    """The step's records a finding is about: the cycles it lists, or the
    cycles of its mode that did not pass (a pass-rate finding)."""
    cycles = set(finding.get("cycles") or ())
    if cycles:
        return [record for record in records if record.get("cycle") in cycles]
    return [record for record in records if finding.get("mode") and record.get("mode") == finding["mode"]
            and record.get("verdict") != "pass"]


def matches(finding, records, device=None, callback=None):
    """A gate finding about `device` (and `callback`): named in it (a
    latency finding's fields, a bucket, its detail) or in the records it
    cites (a device-check failure's reason names the device)."""
    text = json.dumps([finding, cited(finding, records)], sort_keys=True, default=str)
    return (not device or device in text) and (not callback or callback in text)


def gate_findings(reference, current, device=None, callback=None):
    """The commit gate's findings (pipelines.compare.regressions) of a step's
    records against GOOD's, those naming --device/--callback if given."""
    from pipelines import compare
    return [finding for finding in compare.regressions(reference, current)
            if matches(finding, current, device, callback)]


def seed_tree(build_dir):
    """Give a new bisect build directory the extracted kernel tree by cloning
    the main one (seconds) instead of extracting the tarball again."""
    source = os.path.join(REPO, "build", "src", "linux")
    target = os.path.join(build_dir, "src", "linux")
    stamp = os.path.join(REPO, "build", "src", ".tarball")
    if os.path.isdir(target) or not os.path.isdir(os.path.join(source, ".git")) or not os.path.isfile(stamp):
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    log(PROG, f"seeding {target} from {source} (git clone)")
    subprocess.run(["git", "clone", "-q", "--no-checkout", source, target], check=True)
    shutil.copy2(stamp, os.path.join(build_dir, "src", ".tarball"))


def smoke_request(args):
    """Every step's smoke as a RunRequest (its run id set by the step): the
    kernel each step builds into --build-dir, the --mode cycles, the guest."""
    build_dir = os.path.abspath(args.build_dir)
    return request_mod.from_args(args, os.path.join(build_dir, "out"), "bisect-step",
                                 plan=modes_mod.plan(args.mode), results=os.path.join(build_dir, "results"))


def _step_argv(args, work):
    """`git bisect run`'s command: this script's --step with the bisection's
    own options, the smoke as a request file (written once, in `work`)."""
    argv = [PYTHON, "-m", "cli.main", "bisect", "--step", "--check", args.check,
            "--build-dir", os.path.abspath(args.build_dir)]
    if args.check in ("smoke", "gate") and not args.check_cmd:
        argv += ["--request", smoke_request(args).write(os.path.join(work, "smoke-request.json"))]
    if args.check == "gate" and not args.check_cmd:
        argv += ["--reference", args.reference]
        argv += [arg for name in ("device", "callback") if getattr(args, name)
                 for arg in (f"--{name}", getattr(args, name))]
    if args.check_cmd:
        argv += ["--check-cmd", args.check_cmd]
    if args.kernel_tree:
        argv += ["--kernel-tree", args.kernel_tree, "--series", args.series or "none"]
    return argv


def _bisect_run(repo, step_argv):
    """`git bisect run` in repo; (exit, first bad commit sha or None)."""
    env = dict(os.environ, PYTHONPATH=REPO + (os.pathsep + os.environ["PYTHONPATH"]
                                              if os.environ.get("PYTHONPATH") else ""))
    process = subprocess.run(["git", "-C", repo, "bisect", "run", *step_argv], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(process.stdout if process.stdout.endswith("\n") else process.stdout + "\n")
    match = re.search(r"^([0-9a-f]{40}) is the first bad commit", process.stdout, re.MULTILINE)
    return process.returncode, (match[1] if match else None)


@contextlib.contextmanager
def _scratch(args, name):
    """A throwaway repository path (its directory made, the repository not):
    afterwards the bisection is reset and the directory removed, unless --keep."""
    work = tempfile.mkdtemp(prefix="pmlab-bisect-")
    repo = os.path.join(work, name)
    try:
        yield repo
    finally:
        subprocess.run(["git", "-C", repo, "bisect", "reset"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if args.keep_repo:
            log(PROG, f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _cwd(path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def reference_run(args, repo, good, work):
    """--check gate: GOOD built and smoked once (in repo, checked out at
    GOOD): the run directory every step is compared with."""
    git(repo, "checkout", "-q", good)
    reference = argparse.Namespace(**{**vars(args), "check": "smoke", "check_cmd": None,
                                      "request": smoke_request(args).write(os.path.join(work, "smoke-request.json"))})
    log(PROG, f"gate: the reference smoke at GOOD {good[:12]}")
    with _cwd(repo):
        checked = build_and_smoke(reference, time.monotonic())
    if isinstance(checked, int) or checked[0] in (2, 130):
        code = checked if isinstance(checked, int) else checked[0]
        raise BisectError(f"the reference smoke at GOOD {good[:12]} could not run (exit {code}): "
                          "nothing to compare the steps with")
    log(PROG, f"gate: reference {checked[1]} (lab.run exit {checked[0]})")
    return checked[1]


def _first_bad(args, repo, bad, good):
    """`git bisect start BAD GOOD` and run the steps in repo: (first bad
    commit, its subject, seconds of steps), or None when bisect named none."""
    if args.check == "gate" and not args.check_cmd:
        args.reference = reference_run(args, repo, good, os.path.dirname(repo))
    git(repo, "bisect", "start", bad, good)
    started = time.monotonic()
    code, first = _bisect_run(repo, _step_argv(args, os.path.dirname(repo)))
    if not first:
        log(PROG, f"git bisect run found no first bad commit (exit {code})")
        return None
    subject = git(repo, "log", "-1", "--format=%s", first, capture=True).strip()
    return first, subject, time.monotonic() - started


def bisect_commits(args):
    """Bisect GOOD_REF..BAD_REF of a kernel git tree in a scratch clone."""
    from lab import kernels
    tree = os.path.abspath(args.kernel_tree)
    try:
        good = kernels.resolve(f"{tree}@{args.good}", args.series or "none")
        bad = kernels.resolve(f"{tree}@{args.bad}", args.series or "none")
    except kernels.KernelSpecError as error:
        raise BisectError(str(error)) from None
    if subprocess.run(["git", "-C", tree, "merge-base", "--is-ancestor", good.commit, bad.commit]).returncode:
        raise BisectError(f"GOOD {args.good} ({good.commit[:12]}) is not an ancestor of BAD {args.bad} "
                          f"({bad.commit[:12]}) in {tree}")
    if good.commit == bad.commit:
        raise BisectError(f"GOOD and BAD are the same commit {good.commit[:12]}")
    with _scratch(args, "tree") as repo:
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", tree, repo], check=True)
        count = git(repo, "rev-list", "--count", f"{good.commit}..{bad.commit}", capture=True).strip()
        log(PROG, f"{count} candidate commit(s) of {tree}: {args.good}..{args.bad} (scratch clone {repo})")
        found = _first_bad(args, repo, bad.commit, good.commit)
        if not found:
            return 1, None
        first, subject, seconds = found
        log(PROG, f"first bad commit: {first} {subject} ({seconds:.0f} s of steps)")
        return 0, first


def bisect(args):
    series_dir = os.path.abspath(args.series_dir)
    patches = kernels.series_patches(series_dir)
    good, bad = resolve(args.good, patches), resolve(args.bad, patches)
    if good >= bad:
        raise BisectError(f"GOOD ({good} patches) must come before BAD ({bad} patches)")
    with _scratch(args, "series") as repo:
        commits = make_series_repo(series_dir, good, bad, repo)
        log(PROG, f"{bad - good} candidate patch(es): {patches[good]} .. {patches[bad - 1]} "
                  f"(throwaway repository {repo})")
        found = _first_bad(args, repo, commits[bad], commits[good])
        if not found:
            return 1, None
        _, subject, seconds = found
        log(PROG, f"first bad patch: {subject} ({seconds:.0f} s of steps)")
        return 0, subject


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="pmlab bisect", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("good", nargs="?")
    parser.add_argument("bad", nargs="?")
    parser.add_argument("--check", choices=("build", "smoke", "gate"), default="smoke",
                        help="build: compiles; smoke: no cycle fails; gate: the commit gate "
                             "(pipelines.compare.regressions) finds nothing against GOOD's smoke")
    parser.add_argument("--device", help="--check gate: only findings naming this device (e.g. e1000e)")
    parser.add_argument("--callback", help="--check gate: only findings naming this callback (e.g. suspend)")
    parser.add_argument("--reference", help=argparse.SUPPRESS)  # a gate step: GOOD's run directory
    parser.add_argument("--check-cmd", help="shell command instead of build/smoke (0 good, 125 skip, else bad)")
    parser.add_argument("--series-dir", default=os.path.join(REPO, "kernel", "patches", "6.1"))
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build", "bisect"),
                        help="PMLAB_BUILD of the steps (kept: later bisections build incrementally)")
    options.add_modes(parser, f"{DEFAULT_SMOKE}: the smoke cycles of each step", cycles=False, wake=False)
    parser.add_argument("--smoke", help="older spelling of --mode: MODE=COUNT,... (mem=2 is mem*2)")
    parser.add_argument("--keep", dest="keep_repo", action="store_true", help="keep the throwaway repository")
    parser.add_argument("--kernel-tree", metavar="DIR",
                        help="bisect commits GOOD..BAD of this kernel git tree instead of the series")
    parser.add_argument("--series", metavar="DIR|none",
                        help="with --kernel-tree: the series applied to every commit (default none)")
    parser.add_argument("--step", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--request", help=argparse.SUPPRESS)  # a step's smoke (smoke_request)
    # the smoke's guest (e.g. --devices zoo: bisect a real driver's regression)
    options.add_guest(parser.add_argument_group("the smoke's guest (as lab.run's)"))
    args = parser.parse_args(argv)
    if not args.step and (args.good is None or args.bad is None):
        parser.error("GOOD and BAD are required")
    if (args.device or args.callback) and args.check != "gate":
        parser.error("--device and --callback filter the gate's findings: give --check gate")
    if args.step and args.check == "gate" and not args.check_cmd and not args.reference:
        parser.error("a gate step needs --reference RUN_DIR")
    if args.series and not args.kernel_tree:
        parser.error("--series goes with --kernel-tree (the series bisection takes --series-dir)")
    if args.smoke is not None:
        if args.mode:
            parser.error("give the smoke cycles once: --mode (or the older --smoke)")
        args.mode = [smoke_as_modes(args.smoke)]
    args.mode = args.mode or [DEFAULT_SMOKE]
    try:
        modes_mod.expand(args.mode)
    except Exception as error:  # lab.virt.LabError, naming the item and the fix
        parser.error(str(error))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.step:
        return step(args)
    try:
        code, _ = bisect_commits(args) if args.kernel_tree else bisect(args)
    except (BisectError, OSError) as error:
        print(f"bisect: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # ./pmlab bisect is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.bisect", "bisect"))
