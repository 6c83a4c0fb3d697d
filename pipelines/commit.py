"""The commit pipeline: build -> boot -> smoke cycles -> dashboard -> gate.

  ./pmlab commit [--build auto|always|never] [--mode mem*3,freeze*2,disk]
                 [--results DIR] [--run-id ID] [--junit PATH] [--against RUN]
                 [lab.run options]
  (the older --smoke mem=3,freeze=2,disk=1 still works)

Stages (wall time of each printed as it ends, and a table at the end):
  build      kernel/build (buildah container, ccache), under flock
             /tmp/pmlab-kernel-build.lock. "auto" (default) skips it when
             build/out/manifest.json is newer than every file under kernel/
             and containers/ and its series_hash is the series' hash now.
  initramfs  lab/build-initramfs; "auto" skips it when initramfs.cpio.gz is
             newer than guest/* and the artifacts' modules.
  smoke      lab.run.run(request): a few cycles of each mode, one guest
             (booted once), or LAVA jobs with --engine lava.
  devices    the smoke's request with devices zoo (lab/devices.py): mem*3,freeze*2,disk on
             the guest of real devices, every device probed before each
             suspend and after each resume, as run <run id>-devices (--no-devices skips it; none
             when the smoke itself ran on the zoo or through LAVA); a cycle
             that did not pass is a regression.
  campaign   pytest/test_fault_campaign.py in real guests (--no-campaign
             skips it); a failing case is a regression.
  junit      <run dir>/junit.xml (and --junit PATH): one testcase per cycle.
  dashboard  dashboards.compute over this and the earlier runs of this
             pipeline -> <run dir>/dashboard.json, then dashboards.render (and
             the timeline pages it links, <run>/timelines/) ->
             dashboard.html.
  compare    against the previous run of this pipeline: the newest earlier
             results/*/ whose pipeline.json says "commit" and that has cycles
             (--against RUN: that run instead). A mode whose pass rate
             dropped, a failure bucket that was not there before, or a
             device callback or PM phase slower (lab/latency.py, against
             the previous run with up to BASELINE_RUNS-1 earlier pooled; the
             device stage's run likewise against earlier commit-devices
             runs) is a regression (pipelines/compare.py). Each run gets its
             latency.json (the table of changes).

Exit: 0 no regression, 1 regression (or the build / smoke could not give a
result: a commit that does not build or boot regressed), 2 bad input or setup.
"""

import argparse
import dataclasses
import os
import sys
import time


from lab import kernels  # noqa: E402
from lab import latency  # noqa: E402
from lab import modes as modes_mod  # noqa: E402
from lab import options  # noqa: E402
from lab import request as request_mod  # noqa: E402
from pipelines import compare as compare_mod  # noqa: E402
from pipelines import junit as junit_mod  # noqa: E402
from dashboards import compute, render  # noqa: E402
from lab import run as lab_run  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.records import cycles_path, holds_run  # noqa: E402
from pipelines.common import (PYTHON, REPO, Stages, log,  # noqa: E402
                              read_json, read_records, run, stamp, write_json, write_run_manifest)

PROG = "commit"
MARKER = "pipeline.json"
DEVICES_PIPELINE = "commit-devices"
DEFAULT_SMOKE = "mem*3,freeze*2,disk"
# The device guest's sample, every device probed: the smoke's counts, so
# that a device callback run in mem and freeze has 5 samples a run, enough
# for the latency gate to flag it against the previous run alone (exact
# one-sided p = 1/252; a cycle of each mode, 2 samples, needed 7 earlier runs).
DEVICE_SAMPLE = "mem*3,freeze*2,disk"
# The latency gate's baseline: the previous run and the earlier ones pooled
# (lab/latency.py): 5 smoke samples of a mem+freeze callback against up to
# 50; the device stage's 2 against up to 20 (p < 0.01 needs 14: 7 runs).
BASELINE_RUNS = 10


def series_hash(series_dir):
    """kernel/tree.sh's series_hash (lab.kernels owns it)."""
    return kernels.series_hash(series_dir)


def newest_mtime(*roots):
    newest, which = 0.0, None
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git")]
            for name in files:
                path = os.path.join(folder, name)
                try:
                    mtime = os.stat(path).st_mtime
                except OSError:
                    continue
                if mtime > newest:
                    newest, which = mtime, path
    return newest, which


def kernel_current(artifacts, repo=REPO, kernel=None):
    """(True, why) if `artifacts` (build/out, or --kernel's) hold the kernel
    of the current inputs: its series, its commit, nothing newer under
    kernel/ or containers/."""
    manifest_path = os.path.join(artifacts, "manifest.json")
    manifest = read_json(manifest_path)
    if not manifest or not os.path.isfile(os.path.join(artifacts, "bzImage")):
        return False, "no built kernel"
    series = kernel.series if kernel else os.path.join(repo, "kernel", "patches", "6.1")
    want = series_hash(series) if series else "none"
    if manifest.get("variant") != ("patched" if series else "baseline") or manifest.get("series_hash") != want:
        return False, f"series hash {manifest.get('series_hash')} != {want}"
    if kernel and kernel.commit and manifest.get("source_commit") != kernel.commit:
        return False, f"built from {str(manifest.get('source_commit'))[:12]}, not {kernel.commit[:12]}"
    newest, which = newest_mtime(os.path.join(repo, "kernel"), os.path.join(repo, "containers"))
    if newest > os.stat(manifest_path).st_mtime:
        return False, f"{os.path.relpath(which, repo)} is newer than the build"
    return True, f"series {want}, inputs older than the build"


def initramfs_current(artifacts, repo=REPO):
    image = os.path.join(artifacts, "initramfs.cpio.gz")
    if not os.path.isfile(image):
        return False, "no initramfs"
    # drivers/: the device guest's modules (a driver-only commit changes only them)
    newest, which = newest_mtime(os.path.join(repo, "guest"), os.path.join(artifacts, "modules"),
                                 os.path.join(artifacts, "drivers"))
    if newest > os.stat(image).st_mtime:
        return False, f"{os.path.relpath(which, repo)} is newer than the initramfs"
    return True, "inputs older than the image"


def pipeline_runs(results, pipelines=("commit",)):
    """Run dirs of this pipeline that have cycles, oldest first
    (`pipelines`: the markers' names; "commit-devices" is the device-guest
    stage's run)."""
    found = []
    for name in os.listdir(results) if os.path.isdir(results) else ():
        path = os.path.join(results, name)
        marker = read_json(os.path.join(path, MARKER)) if not os.path.islink(path) else None
        if marker and marker.get("pipeline") in pipelines and os.path.isfile(cycles_path(path)):
            found.append((marker.get("started_epoch", 0), path))
    return [path for _, path in sorted(found)]


def previous_run(results, current_id, pipeline="commit"):
    """The newest earlier run dir of this pipeline that has cycles, or None."""
    found = earlier_runs(results, current_id, pipeline, 1)
    return found[0] if found else None


def earlier_runs(results, current_id, pipeline="commit", count=BASELINE_RUNS):
    """Up to `count` run dirs of `pipeline` started before current_id's, that
    have cycles, newest first: the previous run, then those before it."""
    mine = read_json(os.path.join(results, current_id, MARKER)) or {}
    before = mine.get("started_epoch", time.time())
    candidates = []
    for name in os.listdir(results) if os.path.isdir(results) else ():
        path = os.path.join(results, name)
        if name == current_id or os.path.islink(path) or not os.path.isdir(path):
            continue
        marker = read_json(os.path.join(path, MARKER))
        if not marker or marker.get("pipeline") != pipeline:
            continue
        if marker.get("started_epoch", 0) >= before:
            continue
        if not os.path.isfile(cycles_path(path)):
            continue
        candidates.append((marker.get("started_epoch", 0), name, path))
    found = []
    for _, _, path in sorted(candidates, reverse=True):
        if len(found) < count and read_records(path):
            found.append(path)
    return found


def against_runs(results, names):
    """The run dirs --against names (a run id under results, or a path);
    LabError naming one that holds no cycles."""
    found = []
    for name in names:
        path = name if os.sep in name else os.path.join(results, name)
        if not holds_run(path) or not read_records(path):
            raise LabError(f"--against {name}: {path} holds no recorded cycles")
        found.append(os.path.abspath(path))
    return found


def baseline_records(run_dirs, against):
    """(previous run's records, earlier ones pooled) of gate_baseline's run
    dirs, newest first; --against's runs, pooled, stand for the previous run."""
    if not run_dirs:
        return None, None
    if against:
        return [r for path in run_dirs for r in read_records(path)], None
    return read_records(run_dirs[0]), [r for path in run_dirs[1:] for r in read_records(path)]


def gate_baseline(results, run_id, against, pipeline="commit", suffix=""):
    """The run dirs a run is compared with: --against's (each + suffix, the
    device stage's "-devices"), else the previous runs of the pipeline."""
    if against:
        return [path + suffix for path in against if holds_run(path + suffix)]
    return earlier_runs(results, run_id, pipeline)


def baseline_note(names, against):
    """The compare stage's words for what the run was compared with."""
    if not names:
        return "no previous run"
    if against or len(names) == 1:
        return f"vs {', '.join(names)}"
    return f"vs {names[0]} (+{len(names) - 1} earlier pooled for latency)"


def write_latency(run_dir, previous, current, earlier, baseline_dirs):
    """The run's latency table (lab.latency.table) into <run dir>/latency.json."""
    changes = compare_mod.latency_changes(previous, current, earlier)
    latency.write_table(run_dir, latency.table(changes), [os.path.basename(p) for p in baseline_dirs])
    return changes


def latency_gate(results, run_id, records, against, pipeline, suffix, run_dir):
    """The latency findings of a stage's run (the device guest's) against its
    baseline (gate_baseline); writes its latency.json."""
    dirs = gate_baseline(results, run_id, against, pipeline, suffix)
    previous, earlier = baseline_records(dirs, against)
    changes = write_latency(run_dir, previous, records, earlier, dirs)
    return latency.as_findings(changes)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="pmlab commit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", choices=("auto", "always", "never"), default="auto")
    options.add_modes(parser, f"{DEFAULT_SMOKE}: the smoke cycles, one guest", cycles=False, wake=False)
    parser.add_argument("--smoke", help="older spelling of --mode: MODE=COUNT,... (mem=3 is mem*3)")
    parser.add_argument("--no-campaign", dest="campaign", action="store_false",
                        help="skip the fault campaign stage")
    parser.add_argument("--no-devices", dest="device_sample", action="store_false",
                        help=f"skip the device-guest stage ({DEVICE_SAMPLE} with --devices zoo)")
    options.add_results(parser)
    parser.add_argument("--against", action="append", metavar="RUN",
                        help="compare with this run (a run id under --results, or a directory; repeat to pool "
                             "several) instead of the previous commit runs; the device stage with RUN-devices")
    parser.add_argument("--junit", help="also write the JUnit XML here (for the CI system)")
    options.add_engine(parser)
    parser.add_argument("--kernel", metavar="SPEC",
                        help="the kernel to build and test (lab/kernels.py; default linux-source-6.1)")
    parser.add_argument("--series", metavar="DIR|none", help="with --kernel: the series applied (default: bundled)")
    parser.add_argument("--config", metavar="FILE",
                        help="a .config the project fragment is merged onto instead of tinyconfig")
    lab = parser.add_argument_group("the smoke's settings (as lab.run's)")
    options.add_guest(lab)
    options.add_inject(lab, "one smoke cycle (recorded as injected: out of the pass rate, never a regression)")
    args = parser.parse_args(argv)
    if args.smoke is not None:
        if args.mode:
            parser.error("give the smoke cycles once: --mode (or the older --smoke)")
        args.mode = [smoke_as_modes(args.smoke)]
    return args


def smoke_request_of(args, artifacts, run_id, smoke):
    """The smoke stage's RunRequest: the smoke's cycles (one mode name a
    cycle), the kernel under test, every guest, injection and engine option."""
    return request_mod.from_args(args, artifacts, run_id, plan=[(modes_mod.mode_of(mode), 1) for mode in smoke])


def campaign_command(args, smoke_request, run_dir):
    """The fault campaign's pytest command (pytest/test_fault_campaign.py):
    its guests the smoke's, every setting (the smoke's request, written to
    the run directory as campaign-request.json, read by pytest/conftest.py's
    --request), its records under the smoke's results root, its JUnit XML in
    the run directory (campaign.xml)."""
    request_file = smoke_request.write(os.path.join(run_dir, "campaign-request.json"))
    return [PYTHON, "-m", "pytest", os.path.join(REPO, "pytest", "test_fault_campaign.py"),
            "-p", "no:cacheprovider", "-q", "--lab-results", args.results,
            "--junitxml", os.path.join(run_dir, "campaign.xml"), "--artifacts", smoke_request.artifacts,
            "--request", request_file]


def smoke_as_modes(text):
    """The older --smoke "mem=3,freeze=2" in the mode grammar: "mem*3,freeze*2"."""
    return ",".join(f"{name}*{count}" if count else name
                    for name, _, count in (part.strip().partition("=") for part in text.split(",")))


def main(argv=None):
    args = parse_args(argv)
    args.results = os.path.abspath(args.results)
    try:
        smoke = modes_mod.expand(args.mode, [DEFAULT_SMOKE])
        kernel = kernels.resolve(args.kernel, args.series, config=args.config)
    except Exception as error:  # lab.virt.LabError from the grammar, kernels.KernelSpecError
        print(f"commit: {error}", file=sys.stderr)
        return 2
    kernel_args = [arg for name in ("kernel", "series", "config") if getattr(args, name)
                   for arg in (f"--{name}", getattr(args, name))]
    run_id = args.run_id or f"commit-{stamp()}-{os.getpid()}"
    run_dir = os.path.join(args.results, run_id)
    try:
        against = against_runs(args.results, args.against or ())
    except LabError as error:
        print(f"commit: {error}", file=sys.stderr)
        return 2
    if holds_run(run_dir):  # its records, marker and manifest are another run's
        print(f"commit: run {run_id} exists already ({run_dir} holds its records): give another --run-id",
              file=sys.stderr)
        return 2
    os.makedirs(run_dir, exist_ok=True)
    artifacts = kernel.artifacts
    marker = {"pipeline": "commit", "run_id": run_id, "started": stamp(), "started_epoch": time.time(),
              "stages": [], "result": "running"}
    marker_path = os.path.join(run_dir, MARKER)
    write_json(marker_path, marker)
    stages = Stages(PROG)
    result, exit_code, findings = "pass", 0, []

    def finish():
        marker.update(stages=stages.done, result=result, exit=exit_code, regressions=findings,
                      finished=stamp())
        write_json(marker_path, marker)
        print(stages.table(), flush=True)
        log(PROG, f"{result}: exit {exit_code}; results {run_dir}")
        return exit_code

    def skipped(entry, current, why):
        """Skip a build stage for --build never, or auto with current output."""
        if args.build == "never" or (args.build == "auto" and current):
            entry["status"], entry["note"] = "skipped", why if args.build == "auto" else \
                f"--build never ({'current' if current else 'STALE'}: {why})"
            return True
        return False

    with stages.stage("build") as entry:
        current, why = kernel_current(artifacts, kernel=kernel)
        if not skipped(entry, current, why):
            log(PROG, f"building the kernel ({why})")
            code = run([os.path.join(REPO, "kernel", "build"), *kernel_args], prefix="build")  # takes the build lock
            if code:
                entry["status"], entry["note"] = "failed", f"kernel/build exit {code}"
    if stages.done[-1]["status"] == "failed":
        result, exit_code = "build failed", 1
        return finish()
    marker["kernel"] = read_json(os.path.join(artifacts, "manifest.json"))
    log(PROG, write_run_manifest(run_dir, artifacts, run_id))

    with stages.stage("initramfs") as entry:
        if not skipped(entry, *initramfs_current(artifacts)):
            code = run([os.path.join(REPO, "lab", "build-initramfs"), *kernel_args], prefix="initramfs")
            if code:
                entry["status"], entry["note"] = "failed", f"lab/build-initramfs exit {code}"
    if stages.done[-1]["status"] == "failed":
        result, exit_code = "initramfs failed", 1
        return finish()

    with stages.stage("smoke") as entry:
        try:
            smoke_request = smoke_request_of(args, artifacts, run_id, smoke)
            code = lab_run.run(smoke_request).code
        except LabError as error:
            print(f"commit: {error}", file=sys.stderr)
            code = 2
        records = read_records(run_dir)
        passed = sum(1 for r in records if compare_mod.passed(r))
        entry["note"] = f"{passed}/{len(records)} cycles passed (lab.run exit {code}, engine {args.engine or 'libvirt'})"
        if code == 2 and not records:
            entry["status"] = "failed"
    if stages.done[-1]["status"] == "failed":
        result, exit_code = "smoke could not start (lab.run exit 2)", 2
        return finish()

    devices_failed, devices_latency = None, []
    if args.device_sample and args.engine in (None, "libvirt") and args.devices in (None, "lean"):
        with stages.stage("devices") as entry:
            devices_run = f"{run_id}-devices"
            # Marked apart: on the dashboard, never the smoke's "previous run".
            os.makedirs(os.path.join(args.results, devices_run), exist_ok=True)
            write_json(os.path.join(args.results, devices_run, MARKER),
                       {"pipeline": DEVICES_PIPELINE, "run_id": devices_run, "of": run_id,
                        "started": stamp(), "started_epoch": time.time()})
            # The smoke's settings on the device guest; its own plan, no injection.
            devices_request = smoke_request.replace(
                run_id=devices_run, cycles=request_mod.numbered_cycles(modes_mod.plan([DEVICE_SAMPLE])),
                guest=dataclasses.replace(smoke_request.guest, devices="zoo"))
            code = lab_run.run(devices_request).code
            sample = read_records(os.path.join(args.results, devices_run))
            passed = sum(1 for r in sample if compare_mod.passed(r))
            entry["note"] = f"{passed}/{len(sample)} cycles passed on the device guest (lab.run exit {code})"
            if code != 0:
                entry["status"] = "failed"
                devices_failed = f"device-guest sample failed ({entry['note']}, run {devices_run})"
            devices_latency = latency_gate(args.results, devices_run, sample, against, DEVICES_PIPELINE,
                                           "-devices", os.path.join(args.results, devices_run))

    campaign_failed = None
    if args.campaign:
        with stages.stage("campaign") as entry:
            # The fault campaign (pytest/test_fault_campaign.py): every
            # failure path in real guests, judged by the oracle.  Any
            # failing case is a regression of this commit.
            xml = os.path.join(run_dir, "campaign.xml")
            code = run(campaign_command(args, smoke_request, run_dir), prefix="campaign")
            entry["note"] = f"pytest exit {code}"
            if code != 0:
                entry["status"] = "failed"
                campaign_failed = f"fault campaign failed (pytest exit {code}, {xml})"

    with stages.stage("junit") as entry:
        path = os.path.join(run_dir, "junit.xml")
        tree = junit_mod.write(records, run_id, path)
        if args.junit:
            junit_mod.write(records, run_id, args.junit)
        root = tree.getroot()
        entry["note"] = f"{root.get('tests')} tests, {root.get('failures')} failures, {root.get('errors')} errors"

    with stages.stage("dashboard") as entry:
        # This run and every earlier run of this pipeline: the trends
        # section then shows "failing since" across commits.
        history = pipeline_runs(args.results, ("commit", DEVICES_PIPELINE))
        output = os.path.join(run_dir, "dashboard.json")
        code = compute.main([*history, "-o", output])
        entry["note"] = f"dashboards.compute exit {code}" if code else \
            f"{os.path.relpath(output, args.results)} ({len(history)} runs)"
        if code:
            entry["status"] = "warn"
        else:
            code = render.main([output, "--timelines", *history])
            entry["note"] += f"; dashboards.render exit {code}" if code else "; dashboard.html"
            if code:
                entry["status"] = "warn"

    with stages.stage("compare") as entry:
        baseline_dirs = gate_baseline(args.results, run_id, against)
        previous_dir = baseline_dirs[0] if baseline_dirs else None
        previous, earlier = baseline_records(baseline_dirs, against)
        marker["previous"] = os.path.basename(previous_dir) if previous_dir else None
        marker["baseline"] = [os.path.basename(path) for path in baseline_dirs]
        findings, lines = compare_mod.report(previous, records, earlier=earlier)
        write_latency(run_dir, previous, records, earlier, baseline_dirs)
        for line in lines:
            log(PROG, line)
        entry["note"] = f"{baseline_note(marker['baseline'], against)}: {len(findings)} regression(s)"
        if findings:
            entry["status"] = "failed"
    for finding in devices_latency:
        finding["detail"] = f"device guest: {finding['detail']}"
        findings.append(finding)
        log(PROG, f"REGRESSION {finding['detail']}")
    if campaign_failed:
        findings.append({"kind": "campaign", "detail": campaign_failed})
        log(PROG, f"regression: {campaign_failed}")
    if devices_failed:
        findings.append({"kind": "devices", "detail": devices_failed})
        log(PROG, f"regression: {devices_failed}")
    if findings:
        result, exit_code = "regression", 1
    return finish()


if __name__ == "__main__":  # ./pmlab commit is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.commit", "commit"))
