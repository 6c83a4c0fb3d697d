"""Run sleep cycles from the command line.

  ./pmlab run --mode mem*10
  ./pmlab run --mode freeze*3,disk/reboot*3 --baseline
  ./pmlab run                                      # the default sample: mem*10, freeze*5, disk*3
  ./pmlab run --mode mem*3 --inject '2:delay=* suspend 60000' \\
        --watchdog suspend=20                        # cycle 2 hangs, cycle 3 runs in a fresh guest

The older --mode mem --cycles 10 still means mem*10.

A --run-id that names an existing run is refused unless --resume: its new
cycles are then numbered after the last one recorded (--inject counts
within this invocation's plan). Each cycle's line comes as its record is
written; the run ends with one count line and the cycles that did not pass
(--quiet: only those; --json: the same as JSON on stdout). Ctrl-C records
the cycle in flight as interrupted (never in the pass rate, no failure).

Exit status: 0 all cycles passed, 1 some did not, 2 bad input or setup,
130 interrupted (Ctrl-C). A knob the guest rejects is bad input too: the
run stops there, exit 2. A cycle with a fault or delay injected is shown
as such and left out of the pass rate.
"""

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import dataclass

from lab import artifacts as artifacts_mod
from lab import manifest as manifest_mod
from lab import options
from lab import request as request_mod
from lab.errors import LabError
from lab.records import (ERROR, FAIL, HANG, INJECTED_FIELD, INTERRUPTED, PASS, UNFINISHED, ResultsWriteError,
                         RunDir, RunExists,
                         close_interrupted, cycles_path, holds_run, injected, is_done, last_cycle, not_passed,
                         new_run_id, not_as_expected, pass_rate, read_cycles, state_of, verdict_counts)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_options(parser):
    """lab.run's options, from the pieces every pmlab command shares (lab/options.py)."""
    options.add_modes(parser, "mem*10, freeze*5, disk*3")
    options.add_kernel(parser)
    options.add_guest(parser, {"uri": request_mod.DEFAULT_URI, "profile": "q35-ovmf",
                               "memory": 512, "vcpus": request_mod.Guest.vcpus, "devices": "lean"})
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
                             "no other option then (but --resume and the output options)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run --run-id names: its new cycles are numbered after the last one "
                             "recorded, none is run again or overwritten (without it an existing run is refused)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true",
                        help="print the end-of-run summary as JSON on stdout (progress goes to stderr)")
    output.add_argument("--quiet", action="store_true",
                        help="print only the final count line and the cycles that did not pass")


def request_from(args):
    """The RunRequest lab.run's parsed options name (LabError for bad input,
    a --run-id of an existing run without --resume too)."""
    if args.request:
        request = request_mod.RunRequest.read(args.request)
        request = request.replace(resume=True) if args.resume else request
    elif args.resume and not args.run_id:
        raise LabError("--resume needs --run-id: the run to continue")
    else:
        request = request_mod.from_args(args, options.artifacts_dir(args), args.run_id or new_run_id())
    recorded_last_cycle(request)  # refused now, before anything is built or booted
    return request


# ------------------------------------------------------------------ engines

class LibvirtEngine:
    """Cycles in libvirt guests on this machine (lab/session.py), one guest
    at a time, each cycle judged while the next runs."""

    def __init__(self, request, progress=None):
        from lab import virt
        if request.guest.profile not in virt.PROFILES:
            raise LabError(f"unknown machine profile '{request.guest.profile}' "
                           f"(known: {', '.join(virt.PROFILES)})")
        self.request = request
        # Held until close(): no build installs into them while guests boot.
        self.artifacts_hold = artifacts_mod.hold(request.artifacts)
        self.found = artifacts_mod.find(request.artifacts)
        directory = self.found.directory
        if any(cycle.knobs for cycle in request.cycles) and not self.found.modules:
            raise LabError(f"--inject needs the pmtest modules, but {directory}/modules has none")
        if request.guest.pmtest_tree and "pmtest.ko" not in self.found.modules:
            raise LabError(f"--pmtest-tree needs the pmtest module, but {directory}/modules has none")
        self.connection = virt.Connection(request.guest.uri)
        self.session = None
        self.progress = progress  # told of boots and records as they happen (Progress)

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
                               limits=guest.limits,
                               guest_stem=f"pmlab-{rundir.name}-w0" + (f"-c{first}" if first > 1 else ""),
                               progress=self.progress)
        self.rss_start = rss_kib()
        return self.session.cycles(((cycle.mode, cycle.number, cycle.knobs, PASS) for cycle in request.cycles),
                                   reruns=request.lab_reruns)

    def close(self):
        if self.session is not None:
            self.session.close()
        if self.artifacts_hold:
            self.artifacts_hold.close()

    def summary(self):
        from lab.cycle import rss_kib
        session = self.session
        return {"boot_seconds": session.boot_seconds, "guests_booted": session.guests_booted,
                "libvirt_reconnects": session.reconnects,
                "harness_rss_kib": {"start": self.rss_start, "end": rss_kib()}}


def engine_for(request, progress=None):
    """The engine that runs `request` (checked, connected; LabError if it
    cannot): libvirt here, or LAVA jobs on the lab's server. progress:
    told of boots and records as they happen (the libvirt engine's)."""
    if request.engine == "lava":
        from lab import lava
        return lava.LavaEngine(request)
    return LibvirtEngine(request, progress)


@dataclass
class RunResult:
    code: int           # 0 every cycle as expected, 1 some not, 2 bad input or setup, 130 interrupted
    records: list       # the final records of this invocation
    run_dir: str = None
    run_id: str = None
    summary: dict = None         # summary.json as written (the whole run's)
    interrupted: str = None      # what was said on Ctrl-C
    continued_after: int = 0     # the run's last cycle before this invocation (--resume)


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


def recorded_last_cycle(request):
    """The highest cycle recorded in the request's run directory, 0 for a
    new run; LabError when it holds records and the request does not
    continue it (resume): a reused --run-id must not write into a run."""
    path = os.path.join(request.results, request.directory)
    if not holds_run(path):
        return 0
    recorded = read_cycles(cycles_path(path))
    last = last_cycle(recorded)
    if not request.resume:
        raise LabError(f"run {request.run_id} exists already ({path}: {plural(len(recorded), 'cycle')} recorded"
                       f"{', the last ' + str(last) if recorded else ''}): give another --run-id, or --resume "
                       "to add cycles to it")
    return last


def plural(count, noun):
    return f"{count} {noun}" + ("" if count == 1 else "s")


def duration(seconds):
    """A rough length of time: "40 s", "3 min", "1 h 20 min"."""
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"


# Time left is shown on runs of at least ETA_RUN cycles, from the ETA_AFTER-th cycle on.
ETA_RUN, ETA_AFTER = 10, 5


class Progress:
    """What a run says as it goes, to `out` (nothing when quiet): a line as
    a guest boots and as each cycle's record is written ("cycle 3/18 mem:
    PASS 1.9 s"), with a rough time left on long runs. recorded() comes from
    lab.session's judging thread as soon as a record is written, and again
    when lab.run is handed it: each cycle is told once."""

    def __init__(self, cycles, out=None, quiet=False, clock=time.monotonic):
        self.position = {cycle.number: index for index, cycle in enumerate(cycles, start=1)}
        self.total = len(self.position)
        self.numbered_from_one = list(self.position) == list(range(1, self.total + 1))
        self.out, self.quiet, self.clock = out, quiet, clock
        self.started = clock()
        self.told = set()
        self.lock = threading.RLock()  # lines come from two threads: each written whole

    def say(self, text):
        if self.quiet:
            return
        with self.lock:
            out = self.out or sys.stdout
            out.write(text + "\n")
            out.flush()

    def where(self, number):
        """"cycle 3/18"; a plan not numbered from 1 (a resumed run, a nightly
        chunk) "cycle 45 (3/18)"; a rerun "cycle 19 (a rerun)"."""
        position = self.position.get(number)
        if position is None:
            return f"cycle {number} (a rerun)"
        return f"cycle {number}/{self.total}" if self.numbered_from_one else \
            f"cycle {number} ({position}/{self.total})"

    def booting(self, name):
        self.say(f"booting guest {name}")

    def booted(self, name, seconds):
        self.say(f"guest {name} up in {seconds:.1f} s")

    def recorded(self, record):
        with self.lock:
            if record["cycle"] in self.told:
                return
            self.told.add(record["cycle"])
            self.say(cycle_line(record, self.where(record["cycle"]), self.time_left()))

    def time_left(self):
        """Seconds the planned cycles not yet told may take, at the pace so
        far; None on a short run or too early to say."""
        finished = len(self.told & self.position.keys())
        if self.total < ETA_RUN or finished < ETA_AFTER or finished >= self.total:
            return None
        return (self.clock() - self.started) / finished * (self.total - finished)


def cycle_line(record, where, left=None):
    """"cycle 3/18 mem: PASS 1.9 s", a cycle that did not pass with its
    phase and reason, a rerun with the cycle it stands for."""
    state = state_of(record)
    text = f"{where} {record.get('mode')}: {state.upper()} {record.get('host_seconds') or 0:.1f} s"
    if state != PASS:
        text += f" in {record.get('phase') or 'unknown phase'}: {shorten(record.get('reason'))}"
    if record.get("rerun_of") is not None:
        text += f" [rerun {record.get('rerun_attempt')} of cycle {record['rerun_of']}]"
    if record.get(INJECTED_FIELD):  # on purpose: out of the pass rate, never a regression
        text += f" [fault injected: {', '.join(record[INJECTED_FIELD])}]"
    if left is not None:
        text += f"; about {duration(left)} left"
    return text


def shorten(text, limit=200):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def run(request, engine=None, style="text", report=True):
    """Run every cycle of `request` and write its run directory (records,
    manifest.json, summary.json). `engine`: a checked engine_for(request).
    style: "text" (progress on stdout), "quiet" (no progress) or "json"
    (progress on stderr); report: print the end-of-run report (print_report)
    now, else the caller does (./pmlab run, once the dashboard is drawn).
    A request that continues its run (resume) runs its cycles numbered after
    the last one recorded; any other is refused if its run directory holds
    records. Ctrl-C: the cycle in flight is recorded as interrupted, exit 130."""
    try:
        request.check()
        last = recorded_last_cycle(request)
        request = request.continued_after(last)
        progress = Progress(request.cycles, sys.stderr if style == "json" else sys.stdout, quiet=style == "quiet")
        engine = engine or engine_for(request, progress)
    except LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return RunResult(2, [])
    try:
        rundir = RunDir(request.results, request.directory, keep=request.keep, run_id=request.run_id,
                        new=not request.resume)
    except RunExists as error:  # appeared since the check: another run took the id
        print(f"lab.run: {error}: give another --run-id, or --resume to add cycles to it", file=sys.stderr)
        return RunResult(2, [])
    except OSError as error:
        print(f"lab.run: cannot create the run directory under {request.results}: {error}", file=sys.stderr)
        return RunResult(2, [])
    plan = [(cycle.mode, 1) for cycle in request.cycles]
    progress.say(f"run {rundir.run_id}: {describe_plan(merge_runs(plan))} on {engine.where()}")
    if last:
        progress.say(f"continuing run {rundir.run_id} after its cycle {last}: cycles "
                     f"{request.cycles[0].number}..{request.cycles[-1].number}")
    if request.manifest and not (last and os.path.exists(rundir.file("manifest.json"))):
        write_manifest(rundir, request.artifacts)  # a resumed run keeps the manifest it began with
    seen, last_seen, interrupted = [], 0, False
    try:
        records = engine.cycles(rundir)
        try:
            for record in records:
                last_seen = record["cycle"]
                seen.append(record)
                progress.recorded(record)
        except KeyboardInterrupt:
            interrupted = True
        except ResultsWriteError as error:
            # Stop: a cycle that cannot be recorded must not run. Every line
            # already in cycles.jsonl is whole; the cycle in flight keeps its
            # "started" line (a rerun closes it as interrupted).
            print(f"lab.run: stopping after cycle {last_seen}: {error}", file=sys.stderr)
            return RunResult(2, seen, rundir.path)
        finally:
            close = getattr(records, "close", None)
            if close:
                try:
                    close()  # an interrupt between two records: the cycle being judged is recorded first
                except KeyboardInterrupt:
                    interrupted = True
    except KeyboardInterrupt:
        interrupted = True
    except LabError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return RunResult(2, seen, rundir.path)
    finally:
        engine.close()
    stopped = None
    if interrupted:
        try:
            seen, stopped = settle_interrupted(rundir, request, progress)
        except ResultsWriteError as error:
            print(f"lab.run: interrupted, and {error}", file=sys.stderr)
            return RunResult(130, seen, rundir.path)
        print(f"lab.run: {stopped}", file=sys.stderr)
    try:
        summary = rundir.write_summary(engine.summary())
    except ResultsWriteError as error:
        print(f"lab.run: {error}", file=sys.stderr)
        return RunResult(130 if interrupted else 2, seen, rundir.path)
    if interrupted:
        code = 130
    else:  # a lab error whose rerun passed leaves the kernel's sample whole
        code = 0 if not not_as_expected(seen) and len(seen) >= len(request.cycles) else 1
    result = RunResult(code, seen, rundir.path, rundir.run_id, summary, stopped, last)
    if report:
        print_report(result, style)
    return result


def settle_interrupted(rundir, request, progress):
    """After Ctrl-C, every judging done: close this invocation's cycles left
    with only their "started" line as interrupted (lab.records), tell the
    records not told yet. Returns (this invocation's records, what to say)."""
    first = min(cycle.number for cycle in request.cycles)
    closed = []
    for record in rundir.reader.read():
        if record["cycle"] >= first and not is_done(record):
            closed.append(rundir.append(close_interrupted(record, time.time())))
    mine = [record for record in rundir.reader.read() if record["cycle"] >= first]
    for record in mine:
        if record["cycle"] not in {c["cycle"] for c in closed}:
            progress.recorded(record)
    finished = sum(state_of(record) != INTERRUPTED for record in mine)
    if closed:
        numbers = ", ".join(str(record["cycle"]) for record in closed)
        return mine, (f"interrupted during {progress.where(closed[0]['cycle'])}: cycle {numbers} recorded as "
                      f"interrupted, {plural(finished, 'cycle')} finished")
    recorded = {record["cycle"] for record in mine}
    upcoming = [cycle.number for cycle in request.cycles if cycle.number not in recorded]
    before = f"before {progress.where(upcoming[0])}" if upcoming else "after the last cycle"
    return mine, f"interrupted {before}: {plural(finished, 'cycle')} finished"


def merge_runs(plan):
    """[(Mode, 1), ...] -> [(Mode, count)] with neighbours of one mode joined."""
    out = []
    for mode, count in plan:
        if out and out[-1][0] == mode:
            out[-1] = (mode, out[-1][1] + count)
        else:
            out.append((mode, count))
    return out


def tally(records):
    """The end-of-run counts: every cycle once; those made to fail on purpose
    (injected) apart from the rest's states."""
    natural = [record for record in records if not injected(record)]
    counts = verdict_counts(natural)
    return {"cycles": len(records), "passed": counts[PASS], "failed": counts[FAIL], "hung": counts[HANG],
            "lab_errors": counts[ERROR], "unfinished": counts[UNFINISHED], "interrupted": counts[INTERRUPTED],
            "injected": len(records) - len(natural)}


def final_line(counts):
    """"18 cycles: 17 passed, 1 failed, 0 hung, 0 lab errors" (unfinished,
    injected and interrupted when there are any)."""
    text = (f"{plural(counts['cycles'], 'cycle')}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['hung']} hung, {plural(counts['lab_errors'], 'lab error')}")
    for key in ("unfinished", "injected", "interrupted"):
        if counts[key]:
            text += f", {counts[key]} {key}"
    return text


def rerun_of(record, records):
    """The rerun of a cycle the lab failed, if the run has one."""
    return next((r for r in records if r.get("rerun_of") == record["cycle"]), None)


def failure_lines(record, records, run_id, pages):
    """A cycle that did not pass: its state, phase and reason, then its
    timeline page (pages: {cycle: path} drawn; None: none drawn, the
    command that draws it)."""
    state = state_of(record)
    text = (f"  cycle {record['cycle']} {record.get('mode')}/{record.get('wake')}: {state.upper()}"
            f" in {record.get('phase') or 'unknown phase'}: {shorten(record.get('reason'))}")
    if record.get(INJECTED_FIELD):
        text += f" (fault injected: {', '.join(record[INJECTED_FIELD])})"
    elif injected(record):
        text += f" (injected: expected {record.get('expected_verdict')})"
    again = rerun_of(record, records)
    if again is not None:
        text += f" (rerun as cycle {again['cycle']}: {state_of(again).upper()})"
    lines = [text]
    page = (pages or {}).get(record["cycle"])
    if page:
        lines.append(f"      {page}")
    elif pages is None and record.get("report"):
        lines.append(f"      ./pmlab timeline {run_id} {record['cycle']} draws its timeline page")
    return lines


def report_lines(result, quiet=False, pages=None):
    """The end of a run as text: unless quiet, per-mode lines and the
    harness's numbers; the final count line; each cycle that did not pass;
    unless quiet, where the results are."""
    records, summary = result.records, result.summary or {}
    lines = []
    if not quiet:
        for name, block in summary.get("modes", {}).items():
            seconds = block["host_seconds"]
            stopped = block["counts"].get(INTERRUPTED)
            lines.append(f"  {name}: {block['counts']['pass']}/{block['cycles']} passed (whole run"
                         f"{f', {stopped} interrupted' if stopped else ''}), "
                         f"{seconds['mean'] if seconds else '-'} s/cycle mean")
        rss = summary.get("harness_rss_kib")
        if rss:
            lines.append(f"  harness RSS {rss['start']} KiB at start, {rss['end']} KiB at the end; "
                         f"{summary.get('libvirt_reconnects', 0)} libvirt reconnect(s)")
        if result.continued_after:
            lines.append(f"  run {result.run_id} continued after cycle {result.continued_after}: "
                         f"{summary.get('cycles')} cycles in all (summary.json)")
    lines.append(final_line(tally(records)))
    for record in not_passed(records):
        lines += failure_lines(record, records, result.run_id, pages)
    if not quiet and result.run_dir:
        lines.append(f"results: {result.run_dir}")
    return lines


def report_json(result, pages=None):
    """The end of a run as one JSON value (--json)."""
    records = result.records
    rate = pass_rate(records)
    return {"run_id": result.run_id, "run_dir": result.run_dir, "exit": result.code, **tally(records),
            "pass_rate": rate["rate"], "pass_rate_ci95": rate["ci95"],
            "continued_after": result.continued_after or None, "interrupted_note": result.interrupted,
            "not_passed": [{"cycle": r["cycle"], "mode": r.get("mode"), "wake": r.get("wake"),
                            "verdict": state_of(r), "expected_verdict": r.get("expected_verdict") or PASS,
                            "phase": r.get("phase"), "reason": r.get("reason"),
                            "timeline": (pages or {}).get(r["cycle"])} for r in not_passed(records)]}


def print_report(result, style="text", pages=None):
    """The end of a run on stdout: report_lines, or report_json for --json."""
    if style == "json":
        print(json.dumps(report_json(result, pages), indent=1), flush=True)
        return
    print("\n".join(report_lines(result, quiet=style == "quiet", pages=pages)), flush=True)


def style_of(args):
    """--json / --quiet / neither: how lab.run reports (run()'s style)."""
    return "json" if getattr(args, "json", False) else "quiet" if getattr(args, "quiet", False) else "text"


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
    return run(request, style=style_of(args)).code


if __name__ == "__main__":  # ./pmlab run is the command
    from lab.entry_points import redirect
    sys.exit(redirect("lab.run", "run"))
