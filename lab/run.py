"""Run sleep cycles from the command line.

  ./pmlab run --mode mem*10                        (or /usr/bin/python3 -m lab.run ...)
  ./pmlab run --mode freeze*3,disk/reboot*3 --baseline
  ./pmlab run                                      # the default sample: mem*10, freeze*5, disk*3
  ./pmlab run --mode mem*3 --inject '2:delay=* suspend 60000' \\
        --watchdog suspend=20                        # cycle 2 hangs, cycle 3 runs in a fresh guest

The older --mode mem --cycles 10 still means mem*10.

Exit status: 0 all cycles passed, 1 some did not, 2 bad input or setup.
"""

import argparse
import json
import os
import sys

from lab import artifacts as artifacts_mod
from lab import manifest as manifest_mod
from lab import modes as modes_mod
from lab import options
from lab import virt
from lab.cycle import rss_kib, watchdogs_from
from lab.records import ResultsWriteError, RunDir, new_run_id, not_as_expected
from lab.session import Session

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_injections(items):
    """["CYCLE:NAME=VALUE", ...] -> {cycle: [(name, value), ...]}: pmtest knobs
    set for that cycle only (e.g. a delay past the watchdog to make it hang)."""
    out = {}
    for item in items or ():
        number, sep, knob = item.partition(":")
        name, sep2, value = knob.partition("=")
        if not (sep and sep2 and number.isdigit() and name):
            raise virt.LabError(f"bad --inject '{item}': use CYCLE:KNOB=VALUE, e.g. '2:delay=* suspend 60000'")
        if name not in ("fault", "delay", "child", "panic", "kfault", "boot"):
            raise virt.LabError(f"bad --inject '{item}': pmtest knobs are fault, delay, child and panic "
                                "(kfault: any device's callback, pmtest_kfault.ko; boot: words for a "
                                "hibernation restore's kernel command line)")
        out.setdefault(int(number), []).append((name, value))
    return out


def add_options(parser):
    """lab.run's options, from the pieces every pmlab command shares (lab/options.py)."""
    options.add_modes(parser, "mem*10, freeze*5, disk*3")
    options.add_kernel(parser)
    options.add_guest(parser, {"uri": virt.DEFAULT_URI, "profile": "q35-ovmf", "profiles": sorted(virt.PROFILES),
                               "memory": 512, "vcpus": 1, "devices": "lean"})
    options.add_inject(parser)
    options.add_results(parser)
    options.add_keep(parser, "full")
    options.add_lab_reruns(parser, 2)
    parser.add_argument("--sleepgraph", action="store_true",
                        help="write every cycle's files for Intel's sleepgraph (reports/cycleN_ftrace.txt.gz, "
                             "_dmesg.txt.gz; lab/sleepgraph.py), not only those of cycles that did not pass")


def setup(args):
    """Check every input, then connect (starting libvirt if needed). Nothing
    here starts a guest, so bad input fails fast."""
    plan = modes_mod.plan(args.mode, args.cycles, args.wake)
    watchdogs = watchdogs_from(args.watchdog)
    injections = parse_injections(args.inject)
    args.pmtest_tree = options.pmtest_tree(args.pmtest_tree)
    directory = options.artifacts_dir(args)
    found = artifacts_mod.find(directory)
    if injections and not found.modules:
        raise virt.LabError(f"--inject needs the pmtest modules, but {directory}/modules has none")
    if args.lab_reruns < 0:
        raise virt.LabError("--lab-reruns must be 0 or more")
    if args.memory < 128 or args.vcpus < 1:
        raise virt.LabError("--memory must be at least 128 MiB and --vcpus at least 1")
    if args.pmtest_tree and "pmtest.ko" not in found.modules:
        raise virt.LabError(f"--pmtest-tree needs the pmtest module, but {directory}/modules has none")
    connection = virt.Connection(args.uri)
    return plan, watchdogs, injections, found, connection


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
    if record["verdict"] != "pass":
        text += f" phase={record.get('phase')}: {record.get('reason')}"
    if record.get("rerun_of") is not None:
        text += f" [rerun {record.get('rerun_attempt')} of cycle {record['rerun_of']}]"
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m lab.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser)
    args = parser.parse_args(argv)
    try:
        plan, watchdogs, injections, found, connection = setup(args)
    except virt.LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return 2
    try:
        rundir = RunDir(args.results, args.run_id or new_run_id(), keep=args.keep)
    except OSError as error:
        print(f"lab.run: cannot create the run directory under {args.results}: {error}", file=sys.stderr)
        return 2
    print(f"run {rundir.run_id}: {describe_plan(plan)} on {found.directory} ({args.profile}, {args.uri}"
          f"{', devices ' + args.devices if args.devices != 'lean' else ''})", flush=True)
    write_manifest(rundir, found.directory)
    session = Session(found, rundir, args.uri, args.profile, watchdogs, "w0",
                      args.memory, args.vcpus, connection=connection, sleepgraph_files=args.sleepgraph,
                      pmtest_tree=args.pmtest_tree, firmware_errata=args.firmware_errata,
                      device_set=args.devices)
    rss_start = rss_kib()
    last = 0
    # each cycle judged while the next one runs (Session.cycles)
    records = session.cycles(((mode, number, injections.get(number, ()), "pass")
                              for number, mode in modes_mod.numbered(plan)), reruns=args.lab_reruns)
    seen, planned = [], sum(count for _, count in plan)
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
        return 2
    finally:
        records.close()  # an interrupt between two records: the cycle being judged is recorded first
        session.close()
    try:
        summary = rundir.write_summary({"boot_seconds": session.boot_seconds,
                                        "guests_booted": session.guests_booted,
                                        "libvirt_reconnects": session.reconnects,
                                        "harness_rss_kib": {"start": rss_start, "end": rss_kib()}})
    except ResultsWriteError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("cycles", "counts", "pass_rate")}))
    for name, block in summary["modes"].items():
        seconds = block["host_seconds"]
        print(f"  {name}: {block['counts']['pass']}/{block['cycles']} passed, "
              f"{seconds['mean'] if seconds else '-'} s/cycle mean")
    rss = summary["harness_rss_kib"]
    print(f"  harness RSS {rss['start']} KiB at start, {rss['end']} KiB at the end; "
          f"{session.reconnects} libvirt reconnect(s)")
    if summary["counts"]["error"]:
        print(f"  lab errors: {summary['counts']['error']} (the lab's, not the kernel's; "
              f"{summary['reruns']} rerun(s)): " + "; ".join(
                  f"cycle {r['cycle']}: {r['reason']}" for r in seen if r.get("verdict") == "error"))
    print(f"results: {rundir.path}")
    # A lab error whose rerun passed leaves the kernel's sample whole.
    return 0 if not not_as_expected(seen) and len(seen) >= planned else 1


if __name__ == "__main__":
    sys.exit(main())
