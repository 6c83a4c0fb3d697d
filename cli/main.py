"""./pmlab VERB [options]: every pmlab job behind one command, in the manner
of kunit.py. `./pmlab VERB --help` documents each verb.

The options shared by several verbs (--mode in its one grammar, --baseline,
--artifacts, --inject, --results, --run-id, --hours, the guest options) are
defined once, in lab/options.py; each verb's module builds its parser from
them. This is the one door: a user, a CI file and the project's own
processes (a nightly's chunks, a soak's shards, a bisection's steps) come
in here; build and check-series are the pmlab script's own verbs.

Exit status: the verb's (0 success, 1 a failed cycle or regression, 2 bad
input or setup, 130 interrupted); 2 with the usage for an unknown verb.
./pmlab --version prints the checkout's git describe.
"""

import argparse
import os
import sys

from lab import options
from lab.errors import LabError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"


# ------------------------------------------------------------------ verbs

def run(argv):
    """boot guests, run sleep cycles, write results/<run-id>/, draw the dashboard"""
    from lab import run as lab_run
    parser = argparse.ArgumentParser(
        prog="pmlab run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=lab_run.__doc__ + "\nThen the dashboard over the results root: RESULTS/dashboard.{json,html}.\n"
        "./pmlab run first checks every option, then installs and builds (the pmlab script's prepare step; "
        "--build never skips it).")
    lab_run.add_options(parser)
    parser.add_argument("--no-dashboard", action="store_true", help="do not draw the dashboard afterwards")
    add_run_front_door(parser)
    args = parser.parse_args(argv)
    try:
        request = lab_run.request_from(args)
    except LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return 2
    if args.check_only:  # the pmlab script's check before its install and build step
        print(check_only_summary(request, lab_run))
        return 0
    style = lab_run.style_of(args)
    result = lab_run.run(request, style=style, report=False)
    code, drawn, pages = result.code, 0, None
    if code == 2:  # bad input or setup: nothing ran (lab.run said why)
        return code
    if code == 130:
        print("pmlab: interrupted: dashboard not drawn (./pmlab dashboard draws it)", file=sys.stderr)
    elif not args.no_dashboard:
        drawn = dashboard(["--results", args.results])
        print(f"pmlab: dashboard {os.path.join(args.results, 'dashboard.html')} (lab.run exit {code}, "
              f"dashboard exit {drawn})", file=sys.stderr)
        pages = timeline_pages(result)
    lab_run.print_report(result, style, pages)  # last: the failing cycles with their pages
    return code or (1 if drawn else 0)


def timeline_pages(result):
    """{cycle: path} of the run's timeline pages the dashboard drew
    (dashboards/timeline.py: RUN_DIR/timelines/cycle-NNNN.html)."""
    from dashboards import timeline as pages
    found = {}
    for record in result.records:
        path = os.path.join(result.run_dir, pages.DIRECTORY, pages.page_name(record["cycle"]))
        if os.path.isfile(path):
            found[record["cycle"]] = path
    return found


def add_run_front_door(parser):
    """run's options for the pmlab script's step before it: --build (what
    that step does) and --check-only (the script's check of every option
    before it installs or builds anything)."""
    parser.add_argument("--build", choices=("auto", "always", "never"), default="auto",
                        help="the pmlab script's install and build step before the run: auto (default) and always "
                             "install the packages and build incrementally (kernel/build's make compiles and "
                             "installs only what changed, then the guest image); never: none, run on what is "
                             "built (kunit.py's exec). python3 -m cli.main run builds nothing, whatever this says")
    parser.add_argument("--check-only", action="store_true",
                        help="parse and check the options (the run request), then exit 0 without running; "
                             "the artifacts need not be built yet")


def check_only_summary(request, lab_run):
    """What run --check-only found the request to be: its plan, injections
    and artifacts (nothing is run, nor checked to be built)."""
    plan = lab_run.describe_plan(lab_run.merge_runs([(cycle.mode, 1) for cycle in request.cycles]))
    injected = "; ".join(f"cycle {cycle.number}: " + ", ".join(f"{knob}={value}" for knob, value in cycle.knobs)
                         for cycle in request.cycles if cycle.knobs)
    return (f"pmlab run: options checked, nothing run: {plan}" + (f"; injected: {injected}" if injected else "")
            + f"; artifacts {request.artifacts}")


# ./pmlab test --fast: what someone changing the host code runs after each
# change (no guest, no kernel tarball/tree/checkpatch/build, no Chromium)
FAST_MARKERS = "not guest and not kernel and not browser"

TEST_HELP = f"""usage: pmlab test [--fast] [--results DIR] [pytest options and arguments]

Run the test suite: /usr/bin/python3 -m pytest pytest/ -p no:cacheprovider
--junitxml=RESULTS/junit.xml, followed by every argument given here
(e.g. ./pmlab test -m 'not guest', ./pmlab test pytest/test_judge.py -k mem).
./pmlab test first installs and builds (the pmlab script's prepare step, as
root); pytest/test_kernel.py checks the patch series (checkpatch, apply).

  --fast          the tests that need no guest, no kernel (tarball, tree,
                  checkpatch or build) and no browser:
                  -m '{FAST_MARKERS}'
                  (with a -m EXPR of yours: -m '({FAST_MARKERS}) and (EXPR)'),
                  on pytest-xdist workers (-n auto) unless you give -n or
                  -p no:xdist, with a quarter of each property test's
                  examples (--fuzz-share 25; the full run: all of them) and
                  its temporary files in /dev/shm (unless TMPDIR is set).
                  ./pmlab test --fast installs, builds and checks nothing
                  first and needs no root: 1,140 tests on 2026-12-07, 85 s
                  on 2 idle cores (1,030 took 72 s).
  --results DIR   results root of the guest tests' run and of junit.xml
                  (pytest's own name for it is --lab-results)
  --kernel SPEC [--series DIR|none]
                  the guest tests boot that kernel (lab/kernels.py: e.g.
                  linux-source-6.12, a tarball, a git tree DIR[@REF]), built
                  first by kernel/build --kernel like ./pmlab run --kernel

The suite's own options (--mode in the one mode grammar, --baseline,
--uri, --watchdog, ...): /usr/bin/python3 -m pytest pytest/ --help.
"""


def test(argv):
    """the test suite: pytest over pytest/ (arguments go to pytest)"""
    if "-h" in argv or "--help" in argv:
        print(TEST_HELP, end="")
        return 0

    def fast_arguments(rest):
        """pytest arguments for --fast: rest with its -m EXPR (the last, as
        pytest reads it) joined to FAST_MARKERS, -n auto on a machine of
        several CPUs unless rest chooses the workers itself, and
        --fuzz-share=25 unless rest gives a share."""
        kept, marks, index = [], [], 0
        while index < len(rest):
            arg = rest[index]
            if arg == "-m" and index + 1 < len(rest):
                marks.append(rest[index + 1])
                index += 2
                continue
            if arg.startswith("-m") and len(arg) > 2:
                marks.append(arg[2:])
            else:
                kept.append(arg)
            index += 1
        expression = f"({FAST_MARKERS}) and ({marks[-1]})" if marks else FAST_MARKERS
        own_workers = any(arg in ("-n", "--numprocesses", "--dist", "no:xdist", "-pno:xdist")
                          or arg.startswith(("-n", "--numprocesses=", "--dist=")) for arg in kept)
        workers = [] if own_workers or (os.cpu_count() or 1) < 2 else ["-n", "auto"]
        share = [] if any(arg.startswith("--fuzz-share") for arg in kept) else ["--fuzz-share=25"]
        return ["-m", expression] + workers + share + kept

    results, rest, fast, index = options.RESULTS, [], False, 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--results" and index + 1 < len(argv):
            results, index = argv[index + 1], index + 2
            continue
        if arg.startswith("--results="):
            results = arg.partition("=")[2]
        elif arg == "--fast":
            fast = True
        else:
            rest.append(arg)
        index += 1
    if fast:
        rest = fast_arguments(rest)
        # Temporary files in memory: the tests write thousands of records,
        # each line fsync'ed by lab.records (free on tmpfs, not on a disk).
        if "TMPDIR" not in os.environ and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
            os.environ["TMPDIR"] = "/dev/shm"
    # Tests named (pytest/test_judge.py, pytest/test_x.py::test_y) are what
    # runs; without any, the whole of pytest/.
    suite = os.path.join(REPO, "pytest")
    named = [arg for arg in rest if not arg.startswith("-")
             and os.path.exists(os.path.join(REPO, arg.split("::")[0]))
             and os.path.commonpath([os.path.realpath(os.path.join(REPO, arg.split("::")[0])), suite]) == suite]
    results = os.path.abspath(results)
    os.makedirs(results, exist_ok=True)
    command = [PYTHON, "-m", "pytest"] + ([] if named else ["pytest/"]) + [
        "-p", "no:cacheprovider", f"--junitxml={os.path.join(results, 'junit.xml')}", f"--lab-results={results}"] + rest
    os.chdir(REPO)
    sys.stdout.flush()
    os.execv(PYTHON, command)


def judge(argv):
    """judge a recorded run again with the current oracle and rules"""
    from lab import rejudge
    parser = argparse.ArgumentParser(prog="pmlab judge", description=rejudge.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Exit: 0 every verdict as recorded, 1 some differ (or a report "
                                            "could not be read), 2 bad input: no run there, or a damaged "
                                            "cycles.jsonl (each bad line named; --lenient judges the rest).")
    parser.add_argument("run", nargs="?", default="latest", metavar="RUN_DIR_OR_ID",
                        help="a run directory, or a run id under --results (default: latest)")
    options.add_results(parser, run_id_help=None)
    parser.add_argument("--changed", action="store_true", help="print only the cycles whose verdict changed")
    parser.add_argument("--lenient", action="store_true",
                        help="judge a damaged cycles.jsonl anyway, over its bad lines (still named)")
    args = parser.parse_args(argv)
    path = args.run if os.path.isdir(args.run) else os.path.join(args.results, args.run)
    damaged = []
    try:
        items = rejudge.rejudge_run(path, damaged)
    except Exception as error:  # lab.virt.LabError: not a run directory
        items = error
    for line in damaged:
        print(f"judge: damaged line {line}", file=sys.stderr)
    if isinstance(items, Exception):
        print(f"judge: {items}", file=sys.stderr)
        return 2
    if damaged and not args.lenient:
        print(f"judge: {len(damaged)} damaged lines: a dropped line can turn a recorded verdict into "
              "'unfinished'; not judged (--lenient judges the rest)", file=sys.stderr)
        return 2
    for item in items:
        if item.differs or not args.changed:
            print(rejudge.describe(item))
    judged = [item for item in items if item.new is not None]
    changed = [item for item in items if item.changed]
    unreadable = [item for item in items if item.unreadable]
    print(f"judge: {os.path.realpath(path)}: {len(items)} cycles, {len(judged)} judged again, "
          f"{len(changed)} changed, {len(unreadable)} with an unreadable report, "
          f"{len(items) - len(judged) - len(unreadable)} kept as recorded"
          + (f", {len(damaged)} damaged lines skipped (--lenient)" if damaged else ""))
    return 1 if changed or unreadable else 0


def dashboard(argv):
    """compute and render the dashboard over result runs"""
    from dashboards import compute, inputs, render
    parser = argparse.ArgumentParser(
        prog="pmlab dashboard", description="The dashboard over result runs: dashboards.compute writes "
        "the JSON, dashboards.render the page next to it (Chart.js), and a timeline page for every cycle that "
        "did not pass and for the slowest-callback cycles (RUN_DIR/timelines/cycle-NNNN.html), linked from "
        "the failure tables and the slowest-callbacks table.",
        epilog="Exit: 0 drawn; 2 bad input (a path not found, no run under it, damaged result lines: each "
               "named, the page still drawn, unless --lenient) or the dashboard cannot be written.")
    parser.add_argument("paths", nargs="*", metavar="RESULTS_DIR_OR_RUN_DIR",
                        help="runs to show: directories, or run ids under --results (default: every run under "
                             "--results)")
    options.add_results(parser, run_id_help=None)
    parser.set_defaults(results=None)  # given or not: where the dashboard goes (dashboard_root)
    parser.add_argument("-o", "--output", help="dashboard JSON (default ROOT/dashboard.json: ROOT the --results "
                                               "given, else the first path given, else results/)")
    parser.add_argument("--lenient", action="store_true",
                        help="exit 0 over malformed input lines (still named, skipped)")
    parser.add_argument("--strict", action="store_true", help="exit non-zero if any input was malformed "
                                                              "(the default; kept for old scripts)")
    parser.add_argument("--no-cache", action="store_true",
                        help="recompute every run (default: reuse each run's dashboard-cache.json)")
    args = parser.parse_args(argv)
    root = args.results or options.RESULTS
    # a run id (latest, 20261207-...) names a run under the results root, as for judge and timeline
    paths = [path if os.path.exists(path) or not os.path.exists(os.path.join(root, path))
             else os.path.join(root, path) for path in args.paths] or [root]
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        print(f"dashboard: {missing[0]}: not found (a results directory or a run directory was expected)",
              file=sys.stderr)
        return 2
    if not inputs.find_run_dirs(paths, inputs.Inputs()):
        print(f"dashboard: no run under {' '.join(paths)} (no cycles.jsonl): nothing recorded to draw",
              file=sys.stderr)
        return 2
    output = args.output or os.path.join(dashboard_root(args.results, paths if args.paths else []),
                                         "dashboard.json")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        code = compute.main(paths + ["-o", output, "--strict"] + (["--no-cache"] if args.no_cache else []))
        render.main([output, "--timelines"] + paths)
    except OSError as error:  # a read-only or full results root: the files cannot be written
        problem = (f"cannot write the dashboard into {os.path.dirname(os.path.abspath(output))}: {error.strerror} "
                   f"({error.filename})") if error.filename else error
        print(f"dashboard: {problem}", file=sys.stderr)
        return 2
    if code and not args.lenient:
        print("dashboard: malformed input, named above (skipped; the page lists it too): exit 2; "
              "--lenient to accept it", file=sys.stderr)
        return 2
    return 0


def dashboard_root(results, paths):
    """Where the dashboard of `paths` goes: --results when given; else
    beside what was named (a run directory's own, a results root's); else results/."""
    if results is not None or not paths:
        return results or options.RESULTS
    first = paths[0]
    return (os.path.dirname(first) or ".") if os.path.isfile(first) else first


def timeline(argv):
    """one cycle's timeline page (phases, device callbacks, the failing call)"""
    from dashboards import timeline as pages
    parser = argparse.ArgumentParser(prog="pmlab timeline", description=pages.DESCRIPTION, epilog=pages.EPILOG)
    parser.add_argument("run", metavar="RUN_DIR_OR_ID",
                        help="a run directory, or a run id under --results ('latest' works)")
    parser.add_argument("cycles", nargs="*", type=int, metavar="CYCLE",
                        help="cycle numbers to draw (default: every cycle that did not pass)")
    options.add_results(parser, run_id_help=None)
    args = parser.parse_args(argv)
    path = args.run if os.path.isdir(args.run) else os.path.join(args.results, args.run)
    return pages.draw_and_print(path, args.cycles)


def devices(argv):
    """the device guest's devices by kernel name (PCI address, pmtest name) per profile: kfault's DEVICE"""
    from lab import devices as device_sets
    from lab import request as request_mod
    from lab.profiles import PROFILES
    parser = argparse.ArgumentParser(
        prog="pmlab devices", description="The kernel names (dev_name) of the guest's PCI devices per machine "
        "profile, lean and zoo (lab/devices.py), and of pmtest's devices: the DEVICE of "
        "--inject 'N:kfault=DEVICE CALLBACK ERRNO COUNT'.")
    parser.add_argument("--profile", choices=sorted(PROFILES), help="one machine profile (default: each)")
    parser.add_argument("--pmtest-tree", metavar="DEPTHxFANOUT", help="pmtest's tree size, as run takes it")
    args = parser.parse_args(argv)
    try:
        tree = request_mod.pmtest_tree(args.pmtest_tree)
    except LabError as error:
        print(f"pmlab devices: {error}", file=sys.stderr)
        return 2
    print("\n".join(device_sets.listing([args.profile] if args.profile else list(PROFILES), tree)))
    return 0


def bench(argv):
    """the harness's S3 cycle against a raw QEMU+QMP loop; `bench quiesce`: the boot kernel's quiesce, two kernels"""
    if argv[:1] == ["quiesce"]:
        from lab import quiesce_bench
        return quiesce_bench.main(argv[1:])
    from lab import bench as lab_bench
    return lab_bench.main(argv)


def commit(argv):
    """the commit pipeline: build, smoke cycles, fault campaign, dashboard, regression gate"""
    from pipelines import commit as pipeline
    return pipeline.main(argv)


def nightly(argv):
    """a long run across modes: time-bounded, resumable, shardable"""
    from pipelines import nightly as pipeline
    return pipeline.main(argv)


def soak(argv):
    """several guests at once (nightly shards), merged, with the soak's numbers"""
    from pipelines import soak as pipeline
    return pipeline.main(argv)


def bisect(argv):
    """find the first bad patch of the series"""
    from pipelines import bisect as pipeline
    return pipeline.main(argv)


def corpus(argv):
    """the regression corpus: realistic kernel regressions through the commit pipeline, the detection rate"""
    from pipelines import corpus as pipeline
    return pipeline.main(argv)


LAVA_DOC = """Manage the LAVA lab on this machine: Debian's lava-server (gunicorn, no
apache), lava-scheduler, lava-publisher and lava-worker processes, each
worker with QEMU devices of both machine profiles (pipelines/lava/lab-up,
lab-down, lab-status; no systemd). Cycles run on it with
./pmlab run --engine lava (lab/lava.py), which serves each run's artifacts
over HTTP.

  ./pmlab lava up [--workers N] [--listen ADDRESS] [--isolated-workers N]
  ./pmlab lava down [--server]
  ./pmlab lava status

up: install what is missing, start what is not running (idempotent); the
server listens on 127.0.0.1 unless --listen. --isolated-workers N also starts
N workers in their own network namespace and root (pipelines/lava/
isolated-workers): they see none of this machine's files and reach the
server and the artifacts over HTTP only; their devices are tagged
"isolated" (./pmlab run --engine lava --lava-tags q35-ovmf,isolated
--lava-identity pmlab-isolated).
down: stop it all (database, devices and logs stay); --server: only the
server, the workers and their jobs go on.
status: which of the lab's processes run, and the workers as the server sees them.
Runs as root. Exit: the script's (0 done / all running, 1 not all running,
2 bad input or setup).
"""


def lava(argv):
    """the LAVA lab on this machine: up, down, status (cycles: ./pmlab run --engine lava)"""
    try:
        command = lava_command(argv)
    except ValueError as error:
        print(f"lava: {error}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(command[0], command)


def lava_command(argv):
    """The pipelines/lava script and arguments `./pmlab lava ACTION ...`
    names; ValueError for a bad count or address."""
    parser = argparse.ArgumentParser(prog="pmlab lava", description=LAVA_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="up|down|status", required=True)
    up = actions.add_parser("up", help="bring the lab up (pipelines/lava/lab-up)")
    up.add_argument("--workers", type=int, default=2, metavar="N", help="workers on this machine (default 2)")
    up.add_argument("--listen", metavar="ADDRESS", help="IPv4 address the server binds (default 127.0.0.1)")
    up.add_argument("--isolated-workers", type=int, default=0, metavar="N",
                    help="also N workers that cannot see this machine's files (pipelines/lava/isolated-workers)")
    down = actions.add_parser("down", help="stop the lab (pipelines/lava/lab-down)")
    down.add_argument("--server", action="store_true", help="stop only the server; the workers go on")
    actions.add_parser("status", help="what of the lab runs (pipelines/lava/lab-status)")
    args = parser.parse_args(argv)
    script = {"up": "lab-up", "down": "lab-down", "status": "lab-status"}[args.action]
    command = [os.path.join(REPO, "pipelines", "lava", script)]
    if args.action == "up":
        if args.workers < 1 or args.isolated_workers < 0:
            raise ValueError("--workers must be at least 1 and --isolated-workers at least 0")
        command += ["--workers", str(args.workers)]
        command += ["--listen", args.listen] if args.listen else []
        command += ["--isolated-workers", str(args.isolated_workers)] if args.isolated_workers else []
    elif args.action == "down" and args.server:
        command.append("--server")
    return command


def merge(argv):
    """join nightly shard run directories into one run (pipelines/merge.py)"""
    from pipelines import merge as pipeline
    return pipeline.main(argv)


def junit(argv):
    """a run's cycles as JUnit XML, one testcase a cycle (pipelines/junit.py)"""
    from pipelines import junit as pipeline
    return pipeline.main(argv)


def baseline_compare(argv):
    """the fault campaign on the patched and the unpatched kernel, and where they differ"""
    command = [os.path.join(REPO, "pipelines", "baseline-compare"), *argv]
    sys.stdout.flush()
    os.execv(command[0], command)


def sleepgraph(argv):
    """Intel's sleepgraph on a sample of a run's cycles: RUN_DIR/sleepgraph/cycleN.html"""
    from pipelines import sleepgraph as pipeline
    return pipeline.main(argv)


def latency_check(argv):
    """the latency gate's false-alarm rate and detection threshold on runs of one kernel"""
    from pipelines import latency_false_alarm as pipeline
    return pipeline.main(argv)


def mutants(argv):
    """the mutation check: does a test fail for each planted bug in the judge, oracle, records, latency?"""
    from pipelines import mutants as pipeline
    return pipeline.main(argv)


VERBS = {verb.__name__.replace("_", "-"): verb
         for verb in (run, test, judge, dashboard, timeline, devices, bench, commit, nightly, soak, bisect, corpus,
                      merge, junit, baseline_compare, lava, sleepgraph, latency_check, mutants)}
# Verbs of the pmlab script itself (shell: the build before any Python runs).
SHELL_VERBS = {"build": "install the Debian packages, build the kernel, pmtest and the guest image",
               "check-series": "the patch series: applies, checkpatch --strict, builds (kernel/check-series)"}


def usage():
    width = max(len(name) for name in [*VERBS, *SHELL_VERBS])
    lines = ["usage: ./pmlab VERB [options]   (./pmlab VERB --help for each; ./pmlab --version)", "", "verbs:"]
    lines += [f"  {name:<{width}}  {verb.__doc__}" for name, verb in VERBS.items()]
    lines += [f"  {name:<{width}}  {text}" for name, text in SHELL_VERBS.items()]
    return "\n".join(lines) + "\n"


def version():
    """The checkout's `git describe` (its commit, "-dirty" with changes)."""
    import subprocess
    try:
        done = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty", "--tags"],
                              capture_output=True, text=True, timeout=30)
    except OSError:
        return "unknown (git not installed)"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown (not a git checkout)"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        print(f"pmlab {version()}")
        return 0
    if argv and argv[0] in ("-h", "--help", "help"):
        print(__doc__.split("\n\n")[0] + "\n")
        print(usage(), end="")
        return 0
    if not argv or argv[0] not in VERBS:
        problem = f"unknown verb '{argv[0]}'" if argv else "no verb given"
        print(f"pmlab: {problem}\n\n{usage()}", end="", file=sys.stderr)
        return 2
    try:
        code = VERBS[argv[0]](argv[1:])
    except KeyboardInterrupt:  # Ctrl-C outside a run's own handling (a dashboard being drawn)
        print("pmlab: interrupted", file=sys.stderr)
        return 130
    return 0 if code is None else code


if __name__ == "__main__":
    sys.exit(main())
