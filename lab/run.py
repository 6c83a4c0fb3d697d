"""Run sleep cycles from the command line.

  ./pmlab run --mode mem*10
  ./pmlab run --mode freeze*3,disk/reboot*3 --baseline
  ./pmlab run                                      # the default sample: mem*10, freeze*5, disk*3
  ./pmlab run --mode mem*3 --inject '2:delay=* suspend 60000' \\
        --watchdog suspend=20                        # cycle 2 hangs, cycle 3 runs in a fresh guest

The older --mode mem --cycles 10 still means mem*10.

Exit status: 0 all cycles passed, 1 some did not, 2 bad input or setup (a
knob the guest rejects too: the run stops there). A cycle with a fault or
delay injected is shown as such and left out of the pass rate.
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass

from lab import artifacts as artifacts_mod
from lab import manifest as manifest_mod
from lab import options
from lab import request as request_mod
from lab.errors import LabError
from lab.records import ERROR, INJECTED_FIELD, PASS, ResultsWriteError, RunDir, new_run_id, not_as_expected

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_options(parser):
    """lab.run's options, from the pieces every pmlab command shares (lab/options.py)."""
    options.add_modes(parser, "mem*10, freeze*5, disk*3")
    options.add_kernel(parser)
    options.add_guest(parser, {"uri": request_mod.DEFAULT_URI, "profile": "q35-ovmf",
                               "memory": 512, "vcpus": 1, "devices": "lean"})
    options.add_inject(parser)
    options.add_results(parser)
    options.add_keep(parser, "full")
    options.add_lab_reruns(parser, 2)
    options.add_engine(parser)
    parser.add_argument("--sleepgraph", action="store_true",
                        help="write every cycle's files for Intel's sleepgraph (reports/cycleN_ftrace.txt.gz, "
                             "_dmesg.txt.gz; lab/sleepgraph.py), not only those of cycles that did not pass")
    parser.add_argument("--request", metavar="FILE",
                        help="run the request in FILE (lab/request.py's JSON: a nightly chunk, a bisect step); "
                             "no other option then")


def request_from(args):
    """The RunRequest lab.run's parsed options name (LabError for bad input)."""
    if args.request:
        return request_mod.RunRequest.read(args.request)
    return request_mod.from_args(args, options.artifacts_dir(args), args.run_id or new_run_id())


# ------------------------------------------------------------------ engines

class LibvirtEngine:
    """Cycles in libvirt guests on this machine (lab/session.py), one guest
    at a time, each cycle judged while the next runs."""

    def __init__(self, request):
        from lab import virt
        if request.guest.profile not in virt.PROFILES:
            raise LabError(f"unknown machine profile '{request.guest.profile}' "
                           f"(known: {', '.join(virt.PROFILES)})")
        self.request = request
        self.found = artifacts_mod.find(request.artifacts)
        directory = self.found.directory
        if any(cycle.knobs for cycle in request.cycles) and not self.found.modules:
            raise LabError(f"--inject needs the pmtest modules, but {directory}/modules has none")
        if request.guest.pmtest_tree and "pmtest.ko" not in self.found.modules:
            raise LabError(f"--pmtest-tree needs the pmtest module, but {directory}/modules has none")
        self.connection = virt.Connection(request.guest.uri)
        self.session = None

    def where(self):
        guest = self.request.guest
        return (f"{self.found.directory} ({guest.profile}, {guest.uri}"
                f"{', devices ' + guest.devices if guest.devices != 'lean' else ''})")

    def cycles(self, rundir):
        """The final records, in plan order (then the reruns of lab errors)."""
        from lab.cycle import rss_kib
        from lab.session import Session
        guest, request = self.request.guest, self.request
        first = request.cycles[0].number
        self.session = Session(self.found, rundir, guest.uri, guest.profile, guest.watchdogs, "w0",
                               guest.memory, guest.vcpus, connection=self.connection,
                               sleepgraph_files=request.sleepgraph, pmtest_tree=guest.pmtest_tree,
                               firmware_errata=guest.firmware_errata, device_set=guest.devices,
                               guest_stem=f"pmlab-{rundir.name}-w0" + (f"-c{first}" if first > 1 else ""))
        self.rss_start = rss_kib()
        return self.session.cycles(((cycle.mode, cycle.number, cycle.knobs, PASS) for cycle in request.cycles),
                                   reruns=request.lab_reruns)

    def close(self):
        if self.session is not None:
            self.session.close()

    def summary(self):
        from lab.cycle import rss_kib
        session = self.session
        return {"boot_seconds": session.boot_seconds, "guests_booted": session.guests_booted,
                "libvirt_reconnects": session.reconnects,
                "harness_rss_kib": {"start": self.rss_start, "end": rss_kib()}}


def engine_for(request):
    """The engine that runs `request` (checked, connected; LabError if it
    cannot): libvirt here, or LAVA jobs on the lab's server."""
    if request.engine == "lava":
        from lab import lava
        return lava.LavaEngine(request)
    return LibvirtEngine(request)


@dataclass
class RunResult:
    code: int           # 0 every cycle as expected, 1 some not, 2 bad input or setup
    records: list       # the final records of this invocation
    run_dir: str = None


def write_manifest(rundir, artifacts_dir):
    """<run dir>/manifest.json: commit, kernel, QEMU/OVMF/libvirt versions, so
    the dashboard can place the run. Best effort: it never stops a run."""
    try:
        manifest_mod.write_manifest(rundir.path, artifacts_dir, None, rundir.run_id)
    except Exception as error:
        print(f"lab.run: manifest.json not written: {type(error).__name__}: {error}", file=sys.stderr)


def describe_plan(plan):
    """"mem/pmwakeup x10, freeze/powerbutton x5"; a long chunk of single
    cycles (pipelines/nightly) as totals per mode instead of one item each."""
    items = [f"{mode.name}/{mode.wake} x{count}" for mode, count in plan]
    if len(items) <= 12:
        return ", ".join(items)
    totals = {}
    for mode, count in plan:
        key = f"{mode.name}/{mode.wake}"
        totals[key] = totals.get(key, 0) + count
    return (f"{sum(totals.values())} cycles in plan order: "
            + ", ".join(f"{key} x{count}" for key, count in totals.items()))


def describe(record):
    text = f"cycle {record['cycle']:>3} {record['mode']}/{record['wake']}: {record['verdict'].upper()}"
    text += f" {record.get('host_seconds', 0):.2f}s"
    if record.get("suspend_ms") is not None or record.get("resume_ms") is not None:
        text += f" (guest suspend {record.get('suspend_ms')} ms, resume {record.get('resume_ms')} ms)"
    elif record.get("total_ms") is not None:
        text += f" (guest {record['total_ms']} ms)"
    if record["verdict"] != PASS:
        text += f" phase={record.get('phase')}: {record.get('reason')}"
    if record.get("rerun_of") is not None:
        text += f" [rerun {record.get('rerun_attempt')} of cycle {record['rerun_of']}]"
    if record.get(INJECTED_FIELD):  # on purpose: out of the pass rate, never a regression
        text += f" [fault injected: {', '.join(record[INJECTED_FIELD])}]"
    return text


def run(request, engine=None):
    """Run every cycle of `request` and write its run directory (records,
    manifest.json, summary.json). `engine`: a checked engine_for(request)."""
    try:
        request.check()
        engine = engine or engine_for(request)
    except LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return RunResult(2, [])
    try:
        rundir = RunDir(request.results, request.directory, keep=request.keep, run_id=request.run_id)
    except OSError as error:
        print(f"lab.run: cannot create the run directory under {request.results}: {error}", file=sys.stderr)
        return RunResult(2, [])
    plan = [(cycle.mode, 1) for cycle in request.cycles]
    print(f"run {rundir.run_id}: {describe_plan(merge_runs(plan))} on {engine.where()}", flush=True)
    if request.manifest:
        write_manifest(rundir, request.artifacts)
    seen, last = [], 0
    try:
        records = engine.cycles(rundir)
        try:
            for record in records:
                last = record["cycle"]
                seen.append(record)
                print(describe(record), flush=True)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
        except ResultsWriteError as error:
            # Stop: a cycle that cannot be recorded must not run. Every line
            # already in cycles.jsonl is whole; the cycle in flight keeps its
            # "started" line (a rerun closes it as interrupted).
            print(f"lab.run: stopping after cycle {last}: {error}", file=sys.stderr)
            return RunResult(2, seen, rundir.path)
        finally:
            close = getattr(records, "close", None)
            if close:
                close()  # an interrupt between two records: the cycle being judged is recorded first
    except LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return RunResult(2, seen, rundir.path)
    finally:
        engine.close()
    try:
        summary = rundir.write_summary(engine.summary())
    except ResultsWriteError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return RunResult(2, seen, rundir.path)
    print_summary(summary, seen)
    print(f"results: {rundir.path}")
    # A lab error whose rerun passed leaves the kernel's sample whole.
    code = 0 if not not_as_expected(seen) and len(seen) >= len(request.cycles) else 1
    return RunResult(code, seen, rundir.path)


def merge_runs(plan):
    """[(Mode, 1), ...] -> [(Mode, count)] with neighbours of one mode joined."""
    out = []
    for mode, count in plan:
        if out and out[-1][0] == mode:
            out[-1] = (mode, out[-1][1] + count)
        else:
            out.append((mode, count))
    return out


def print_summary(summary, seen):
    print(json.dumps({k: summary[k] for k in ("cycles", "counts", "pass_rate")}))
    for name, block in summary["modes"].items():
        seconds = block["host_seconds"]
        print(f"  {name}: {block['counts']['pass']}/{block['cycles']} passed, "
              f"{seconds['mean'] if seconds else '-'} s/cycle mean")
    rss = summary.get("harness_rss_kib")
    if rss:
        print(f"  harness RSS {rss['start']} KiB at start, {rss['end']} KiB at the end; "
              f"{summary.get('libvirt_reconnects', 0)} libvirt reconnect(s)")
    if summary["counts"][ERROR]:
        print(f"  lab errors: {summary['counts']['error']} (the lab's, not the kernel's; "
              f"{summary['reruns']} rerun(s)): " + "; ".join(
                  f"cycle {r['cycle']}: {r['reason']}" for r in seen if r.get("verdict") == ERROR))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pmlab run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser)
    args = parser.parse_args(argv)
    try:
        request = request_from(args)
    except LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return 2
    return run(request).code
