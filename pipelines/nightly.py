"""The nightly soak: many sleep cycles across modes, time-bounded,
resumable, shardable.

  ./pmlab nightly --max-cycles 300 [--hours 8] [--mode mem*20,freeze,disk]
                  [--shard i/N] [--run-id ID] [--chunk 20] [--inject 7:fault=...] [lab.run options]
  ./pmlab nightly --run-id ID ...      the same command again: continues that run

Plan: cycle n runs modes[(n-1) % len(modes)] (pipelines/plan.py); --shard
i/N runs only cycles i, i+N, ... into results/<run-id>-shard<i>of<N>/ (the
records all carry run_id <run-id>; ./pmlab merge joins the shards).
--hours bounds this invocation: no chunk is started that would not fit.

Each chunk (the next K planned cycles, one guest boot) is a RunRequest
(lab/request.py) carrying the cycles' plan numbers and knobs, run by lab.run
in a process of its own (`lab.run --request <run dir>/chunk-request.json`:
a crash of the harness costs one chunk, and the next starts with fresh
memory), writing straight into the run's directory. The run's cycles.jsonl
is the state: a cycle with only its "started" line after its lab.run ended
is closed as "interrupted", cycles lab.run never reached are queued
again, and a rerun continues after the highest cycle number recorded there.
A soak (pipelines/soak.py) starts each shard as `nightly --request FILE`,
a NightlyRequest written by the same encoder this module reads.

Exit: 0 every cycle passed, 1 some did not, 2 bad input or setup,
130 interrupted (rerun with the same --run-id to continue).
"""

import argparse
import dataclasses
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time


from lab import modes as modes_mod  # noqa: E402
from lab import options  # noqa: E402
from lab import request as request_mod  # noqa: E402
from lab.errors import LabError  # noqa: E402
from pipelines import plan as plan_mod  # noqa: E402
from pipelines.common import (PYTHON, REPO, hms, log, read_json, stamp, write_json,  # noqa: E402
                              write_run_manifest)
from lab.records import (DONE, PASS, ResultsWriteError, RunDir, close_interrupted, cycles_path,  # noqa: E402
                         holds_run, is_done, not_as_expected, read_cycles, state_of, summarize)

PROG = "nightly"
STATE = "nightly.json"
CHUNK_REQUEST = "chunk-request.json"


class NightlyError(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class NightlyRequest:
    """A long run as a value: the settings every chunk shares (a RunRequest
    without cycles), the mode rotation, the budget, the shard and the
    injections by plan number."""
    template: request_mod.RunRequest
    modes: tuple = None           # expanded mode names; None: the default rotation
    max_cycles: int = None
    hours: float = None
    shard: tuple = (1, 1)
    chunk: int = 20
    injections: tuple = ()        # ((plan number, ((knob, value), ...)), ...)
    dry_run: bool = False

    @property
    def run_id(self):
        return self.template.run_id

    def chunk_request(self, numbers):
        """The RunRequest of one chunk: these plan numbers, their modes and knobs."""
        knobs = dict(self.injections)
        rotation = list(self.modes or plan_mod.DEFAULT_MODES)
        cycles = tuple(request_mod.Cycle(n, modes_mod.mode_of(plan_mod.mode_of(n, rotation)), tuple(knobs.get(n, ())))
                       for n in numbers)
        # resume: each chunk adds its cycles to the run directory the earlier ones wrote
        return self.template.replace(cycles=cycles, resume=True).check()

    def to_json(self):
        value = dataclasses.asdict(self)
        value["template"] = self.template.to_dict()
        return json.dumps(value, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        try:
            value = json.loads(text)
            template = request_mod.RunRequest.from_dict(value.pop("template"), template=True)
            rotation = value.pop("modes")
            return cls(template=template, modes=tuple(rotation) if rotation else None,
                       shard=tuple(value.pop("shard")),
                       injections=tuple((n, tuple(tuple(k) for k in knobs)) for n, knobs in value.pop("injections")),
                       **value)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise LabError(f"not a nightly request: {type(error).__name__}: {error}") from None

    def write(self, path):
        return request_mod.write_file(path, self)

    @classmethod
    def read(cls, path):
        return request_mod.read_file(path, cls)


def add_options(parser):
    options.add_modes(parser, "mem, freeze, disk; N weighs a mode in the rotation: --mode mem*20 --mode disk",
                      cycles=False, wake=False)
    options.add_budget(parser, "cycles in the whole plan (all shards)")
    parser.add_argument("--shard", help="i/N: run only cycles i, i+N, ... of the plan")
    options.add_results(parser, "default nightly-<UTC stamp>; an existing one resumes")
    parser.add_argument("--chunk", type=int, default=20, help="cycles per lab.run process (one guest boot each)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run, start nothing")
    options.add_engine(parser)
    lab = parser.add_argument_group("the cycles' settings (as lab.run's)")
    options.add_kernel(lab)
    options.add_guest(lab)
    options.add_keep(lab, "failures")
    options.add_inject(lab, "that cycle of the plan (its number in the whole run, any shard)")
    parser.add_argument("--request", metavar="FILE",
                        help="run the NightlyRequest in FILE (a soak's shard); no other option then")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="pmlab nightly", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser)
    return parser.parse_args(argv)


def request_from(args, run_id=None):
    """The NightlyRequest the parsed options name (LabError, PlanError or
    NightlyError for bad input)."""
    if args.chunk < 1:
        raise NightlyError("--chunk must be at least 1")
    shard = plan_mod.parse_shard(args.shard)
    rotation = tuple(plan_mod.expand_modes(args.mode)) if args.mode else None
    injections = request_mod.parse_injections(args.inject)  # bad --inject: refused before any chunk runs
    run_id = run_id or args.run_id or f"nightly-{stamp()}"
    # No reruns: a chunk's cycles are their plan numbers, so a lab error
    # stays an error, counted apart from the kernel's.
    template = request_mod.template_from(args, os.path.abspath(options.artifacts_dir(args)), run_id,
                                         run_dir=plan_mod.run_dir_name(run_id, shard), lab_reruns=0,
                                         manifest=False)
    return NightlyRequest(template, rotation, args.max_cycles, args.hours, shard, args.chunk,
                          tuple(sorted(injections.items())), args.dry_run)


def lab_run_command():
    """./pmlab run without its dashboard, or $PMLAB_NIGHTLY_LAB_RUN (a
    command taking --request FILE: the tests use a stand-in that needs no
    guest)."""
    override = os.environ.get("PMLAB_NIGHTLY_LAB_RUN")
    return shlex.split(override) if override else [PYTHON, "-m", "cli.main", "run", "--no-dashboard"]


def settle_state(path, request):
    """The run's fixed parameters: from the state file when resuming (a
    conflicting option is an error), else from the request."""
    wanted = {"modes": list(request.modes) if request.modes else None, "max_cycles": request.max_cycles,
              "shard": list(request.shard)}
    state = read_json(path)
    if state is None:
        if not request.max_cycles and not request.hours:
            raise NightlyError("give --max-cycles N and/or --hours H (an unbounded soak never ends)")
        if request.max_cycles is not None and request.max_cycles < 1:
            raise NightlyError("--max-cycles must be at least 1")
        state = {"run_id": request.run_id, "modes": list(request.modes or plan_mod.DEFAULT_MODES),
                 "max_cycles": request.max_cycles, "shard": list(request.shard), "created": stamp(),
                 "invocations": []}
        return state, False
    for key, value in wanted.items():
        if key == "shard" and request.shard == (1, 1):
            continue
        if value is not None and value != state.get(key):
            raise NightlyError(f"run {state['run_id']} was started with {key}={state.get(key)}, "
                               f"not {value}: use a new --run-id")
    return state, True


def settle_chunk(rundir, numbers, now=None):
    """After a chunk's lab.run ended: close its cycles left with only their
    "started" line (the harness is gone) as interrupted. Returns the
    chunk's final records (of the cycles it reached)."""
    reached = [r for r in read_cycles(rundir.cycles_path) if r["cycle"] in numbers]
    out = []
    for record in reached:
        if not is_done(record):
            record = close_interrupted(record, now or time.time())
            rundir.append(record)
        out.append(record)
    return out


class Child:
    """lab.run as a child; SIGINT/SIGTERM to us stop it cleanly (it records
    the cycle in flight as interrupted) and stop the soak."""

    def __init__(self):
        self.process = None
        self.stop = False
        signal.signal(signal.SIGINT, self._signal)
        signal.signal(signal.SIGTERM, self._signal)

    def _signal(self, signum, frame):
        self.stop = True
        log(PROG, f"signal {signum}: stopping after the current cycle is recorded")
        if self.process and self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGINT)
            except OSError:
                pass

    def run(self, argv):
        # Own process group: a terminal's Ctrl-C reaches only us; we pass it on.
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""))
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        errors="replace", bufsize=1, start_new_session=True, env=env)
        for line in self.process.stdout:
            sys.stdout.write("  lab.run| " + line)
            sys.stdout.flush()
        return self.process.wait()


def previous_nightly(results, name, state):
    """The newest other nightly run dir under results of the same shard,
    created before this one's state, that has cycles; or None."""
    found = []
    for other in os.listdir(results) if os.path.isdir(results) else ():
        path = os.path.join(results, other)
        theirs = read_json(os.path.join(path, STATE)) if other != name and not os.path.islink(path) else None
        if theirs and theirs.get("shard") == state.get("shard") and \
                str(theirs.get("created", "")) < str(state.get("created", "")) and \
                holds_run(path):
            found.append((str(theirs.get("created")), path))
    return max(found)[1] if found else None


def latency_report(rundir, state, records):
    """The per-device latency change against the previous nightly
    (lab/latency.py): <run dir>/latency.json and its table as lines."""
    from lab import latency
    previous = previous_nightly(os.path.dirname(rundir.path), rundir.name, state)
    if previous is None:
        return ["latency: no previous nightly run of this shard to compare with"]
    changes = latency.compare(read_cycles(cycles_path(previous)), records)
    rows = latency.table(changes)
    latency.write_table(rundir.path, rows, [os.path.basename(previous)])
    return [f"latency against {os.path.basename(previous)}:"] + latency.table_lines(rows)


def progress(records, state, started, seconds_left):
    counts = {}
    for record in records:
        counts[state_of(record)] = counts.get(state_of(record), 0) + 1
    index, count = state["shard"]
    planned = len(plan_mod.shard_plan(tuple(state["shard"]), state["modes"], state["max_cycles"])) \
        if state["max_cycles"] else None
    text = f"{len(records)}" + (f"/{planned}" if planned else "") + " cycles"
    text += f" (shard {index}/{count})" if count > 1 else ""
    text += ": " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    text += f"; elapsed {hms(time.monotonic() - started)}"
    if seconds_left is not None:
        text += f", budget left {hms(max(0, seconds_left))}"
    return text


def main(argv=None):
    args = parse_args(argv)
    args.results = os.path.abspath(args.results)
    try:
        request = NightlyRequest.read(args.request) if args.request else request_from(args)
        state_path = os.path.join(request.template.results, request.template.directory, STATE)
        state, resuming = settle_state(state_path, request)
    except (plan_mod.PlanError, NightlyError, LabError) as error:
        print(f"nightly: {error}", file=sys.stderr)
        return 2
    return run(request, state, state_path, resuming)


def run(request, state, state_path, resuming):
    template = request.template
    rundir = RunDir(template.results, template.directory, run_id=template.run_id)
    lock = open(os.path.join(rundir.path, ".nightly.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"nightly: another nightly is running on {rundir.path}", file=sys.stderr)
        return 2
    try:
        return soak(request, state, state_path, resuming, rundir)
    except ResultsWriteError as error:
        log(PROG, f"stopping: {error}; free space and rerun with --run-id {template.run_id} to continue")
        return 2


def soak(request, state, state_path, resuming, rundir):
    modes, max_cycles = state["modes"], state["max_cycles"]
    run_id, shard = request.run_id, request.shard
    records = read_cycles(rundir.cycles_path)
    last, unfinished = plan_mod.resume_point(records)
    for record in unfinished:  # the cycles in flight when an earlier invocation died
        rundir.append(close_interrupted(record, time.time()))
    records = read_cycles(rundir.cycles_path)
    state.setdefault("invocations", []).append({"started": stamp(), "after_cycle": last})
    write_json(state_path, state)
    if resuming:
        log(PROG, f"resuming run {run_id} after cycle {last} ({len(records)} recorded, "
                  f"{len(unfinished)} closed as interrupted)")
    log(PROG, f"run {run_id}: modes {plan_mod.describe_modes(modes)}, "
              f"{'max ' + str(max_cycles) + ' cycles' if max_cycles else 'no cycle limit'}"
              f"{', ' + str(request.hours) + ' h' if request.hours else ''}, shard {shard[0]}/{shard[1]}, "
              f"dir {rundir.path}")
    request = dataclasses.replace(request, modes=tuple(modes))
    if not request.dry_run:
        log(PROG, write_run_manifest(rundir.path, request.template.artifacts, run_id, shard))
    started = time.monotonic()
    deadline = started + request.hours * 3600 if request.hours else None
    pending = plan_mod.shard_numbers(shard, max_cycles, after=last)
    queue = []
    child = Child()
    status = 0
    while not child.stop:
        while len(queue) < request.chunk:
            number = next(pending, None)
            if number is None:
                break
            queue.append(number)
        if not queue:
            log(PROG, "plan complete")
            break
        seconds_left = deadline - time.monotonic() if deadline else None
        per_mode = plan_mod.seconds_per_cycle(records)
        size = plan_mod.fit_chunk(queue, modes, per_mode, request.chunk, seconds_left)
        if size == 0:
            log(PROG, f"time budget reached: {hms(seconds_left or 0)} left, next cycle does not fit")
            break
        numbers, queue = queue[:size], queue[size:]
        chunk_modes = [plan_mod.mode_of(n, modes) for n in numbers]
        if request.dry_run:
            log(PROG, f"would run cycles {numbers} as {chunk_modes}")
            records += [{"cycle": n, "mode": m, "status": DONE, "verdict": PASS,
                         "host_seconds": plan_mod.estimate(m, per_mode)} for n, m in zip(numbers, chunk_modes)]
            if deadline:
                deadline -= plan_mod.BOOT_SECONDS + sum(plan_mod.estimate(m, per_mode) for m in chunk_modes)
            continue
        log(PROG, f"chunk: cycles {numbers[0]}..{numbers[-1]} ({len(numbers)})")
        path = request.chunk_request(numbers).write(rundir.file(CHUNK_REQUEST))
        code = child.run(lab_run_command() + ["--request", path])
        done = settle_chunk(rundir, numbers)
        records = read_cycles(rundir.cycles_path)
        if not done:
            log(PROG, f"lab.run recorded no cycle (exit {code}): stopping; fix the setup and rerun to continue")
            status = 2
            break
        reached = max(r["cycle"] for r in done)
        unrun = [n for n in numbers if n > reached]
        if unrun and not child.stop:  # lab.run died mid-chunk: its later cycles still have to run
            log(PROG, f"lab.run ended (exit {code}) before cycles {unrun}: queued again")
            queue = unrun + queue
        log(PROG, progress(records, state, started, deadline - time.monotonic() if deadline else None))
    if request.dry_run:
        return 0
    summary = summarize(records)
    summary.update(run_id=run_id, shard=list(shard), modes_planned=modes, max_cycles=max_cycles)
    write_json(os.path.join(rundir.path, "summary.json"), summary)
    try:
        from pipelines.junit import write as write_junit
        write_junit(records, run_id, os.path.join(rundir.path, "junit.xml"))
    except Exception as error:  # the report must not hide the soak's result
        log(PROG, f"junit.xml not written: {error}")
    try:
        for line in latency_report(rundir, state, records):
            log(PROG, line)
    except Exception as error:  # the report must not hide the soak's result
        log(PROG, f"latency.json not written: {error}")
    log(PROG, f"done: {progress(records, state, started, None)}; results {rundir.path}")
    if child.stop:
        log(PROG, f"interrupted: rerun with --run-id {run_id}"
            + (f" --shard {shard[0]}/{shard[1]}" if shard != (1, 1) else "") + " to continue")
        return 130
    if status:
        return status
    return 1 if not_as_expected(records) else 0


if __name__ == "__main__":  # ./pmlab nightly is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.nightly", "nightly"))
