"""The nightly soak: many sleep cycles across modes, time-bounded,
resumable, shardable.

  ./pmlab nightly --max-cycles 300 [--hours 8] [--mode mem*20,freeze,disk]
                  [--shard i/N] [--run-id ID] [--chunk 20] [--inject 7:fault=...] [lab.run options]
  ./pmlab nightly --run-id ID ...      the same command again: continues that run
  (or pipelines/nightly ...)

Plan: cycle n runs modes[(n-1) % len(modes)] (pipelines/plan.py); --shard
i/N runs only cycles i, i+N, ... into results/<run-id>-shard<i>of<N>/ (the
records all carry run_id <run-id>; pipelines/merge joins the shards).
--hours bounds this invocation: no chunk is started that would not fit.

lab.run numbers its cycles from 1 and has no resume, so the soak calls it in
chunks: each chunk runs the next K planned cycles (--mode m1 --mode m2 ...
--cycles 1) into <run dir>/chunks/<run-id>.c<first>/; when it ends, its
records are renumbered to their plan numbers and appended to the run's
cycles.jsonl (reports and console logs move along), and the chunk directory
is removed. Resuming first imports any chunk left by a killed invocation: a
cycle with only its "started" line is recorded as error "interrupted". The
run's cycles.jsonl is the state: the soak continues after the highest cycle
number recorded there.

Exit: 0 every cycle passed, 1 some did not, 2 bad input or setup,
130 interrupted (rerun with the same --run-id to continue).
"""

import argparse
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import options  # noqa: E402
from lab.request import parse_injections  # noqa: E402
from pipelines import plan as plan_mod  # noqa: E402
from pipelines.common import (PYTHON, REPO, hms, log, read_json, stamp, write_json,  # noqa: E402
                              write_run_manifest)
from lab.records import (ResultsWriteError, RunDir, close_interrupted, cycles_path, is_done,  # noqa: E402
                         read_cycles, renumbered_side_files, state_of, summarize)

PROG = "nightly"
STATE = "nightly.json"


class NightlyError(Exception):
    pass


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="pmlab nightly", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_modes(parser, "mem, freeze, disk; N weighs a mode in the rotation: --mode mem*20 --mode disk",
                      cycles=False, wake=False)
    options.add_budget(parser, "cycles in the whole plan (all shards)")
    parser.add_argument("--shard", help="i/N: run only cycles i, i+N, ... of the plan")
    options.add_results(parser, "default nightly-<UTC stamp>; an existing one resumes")
    parser.add_argument("--chunk", type=int, default=20, help="cycles per lab.run call (one guest boot each)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run, start nothing")
    parser.add_argument("--engine", choices=("libvirt", "lava"), default="libvirt",
                        help="lava: each chunk runs as LAVA jobs (pipelines/lava/jobs.py; modes mem/rtc, disk/platform, "
                             "pm_test-*)")
    parser.add_argument("--lava-identity", default="pmlab", help="lavacli identity of the LAVA server")
    parser.add_argument("--lava-jobs", type=int, default=2, help="LAVA jobs per chunk, run at once (one per worker)")
    parser.add_argument("--lava-tags", default="q35-ovmf", help="device tags the LAVA jobs ask for")
    lab = parser.add_argument_group("passed to lab.run")
    options.add_kernel(lab)
    options.add_guest(lab)
    options.add_keep(lab, "failures")
    options.add_inject(lab, "that cycle of the plan (its number in the whole run, any shard)")
    args = parser.parse_args(argv)
    if options.names_kernel(args):  # one directory for lab.run, the LAVA jobs and the manifest
        try:
            args.artifacts = options.artifacts_dir(args)
        except Exception as error:  # lab.virt.LabError
            parser.error(str(error))
        args.kernel = args.series = args.config = None
    return parser, args


def inject_options(items, numbers):
    """--inject PLAN_CYCLE:KNOB=VALUE as lab.run options of the chunk that
    runs `numbers` (lab.run numbers the chunk's cycles from 1)."""
    out = []
    for item in items or ():
        number, _, knob = item.partition(":")
        if number.isdigit() and int(number) in numbers:
            out += ["--inject", f"{numbers.index(int(number)) + 1}:{knob}"]
    return out


def lab_run_command():
    """lab.run, or $PMLAB_NIGHTLY_LAB_RUN (a command line taking lab.run's
    options: the tests use a stand-in that needs no guest)."""
    override = os.environ.get("PMLAB_NIGHTLY_LAB_RUN")
    return shlex.split(override) if override else [PYTHON, "-m", "lab.run"]


def lab_options(args):
    return options.guest_argv(args) + (["--artifacts", args.artifacts] if args.artifacts else []) + \
        (["--baseline"] if args.baseline else []) + ["--keep", args.keep]


def settle_state(path, args, shard):
    """The run's fixed parameters: from the state file when resuming (a
    conflicting option is an error), else from the options."""
    wanted = {"modes": args.mode, "max_cycles": args.max_cycles, "shard": list(shard)}
    state = read_json(path)
    if state is None:
        if not args.max_cycles and not args.hours:
            raise NightlyError("give --max-cycles N and/or --hours H (an unbounded soak never ends)")
        if args.max_cycles is not None and args.max_cycles < 1:
            raise NightlyError("--max-cycles must be at least 1")
        state = {"run_id": args.run_id, "modes": list(args.mode or plan_mod.DEFAULT_MODES),
                 "max_cycles": args.max_cycles, "shard": list(shard), "created": stamp(), "invocations": []}
        return state, False
    for key, value in wanted.items():
        if key == "shard" and args.shard is None:
            continue
        if value is not None and value != state.get(key):
            raise NightlyError(f"run {state['run_id']} was started with {key}={state.get(key)}, "
                               f"not {value}: use a new --run-id")
    return state, True


def chunk_records(chunk_dir):
    """A chunk's records as [(lab.run's cycle number, plan number, record)],
    or None when lab.run never started in it (no chunk.json)."""
    meta = read_json(os.path.join(chunk_dir, "chunk.json"))
    if meta is None:
        return None
    numbers = meta["numbers"]
    return [(record["cycle"], numbers[record["cycle"] - 1], record)
            for record in read_cycles(cycles_path(chunk_dir))
            if 1 <= record["cycle"] <= len(numbers)]


def import_chunk(chunk_dir, rundir, run_id, now=None):
    """Move one chunk's cycles into the run under their plan numbers.
    Returns the imported records."""
    found = chunk_records(chunk_dir)
    if found is None:
        shutil.rmtree(chunk_dir, ignore_errors=True)  # died before lab.run started
        return []
    imported = []
    # An import cut short (results disk full) is repeated on the rerun: the
    # cycles it already moved are not appended twice.
    already = {r["cycle"] for r in read_cycles(rundir.cycles_path) if is_done(r)}
    for _, number, record in found:
        if number in already:
            continue
        renamed = renumbered_side_files(record, number)
        record = dict(record, run_id=run_id, cycle=number)
        if not is_done(record):  # its lab.run has ended: the harness is gone
            record = close_interrupted(record, now or time.time())
        for field, target in renamed.items():
            path = record[field]
            source = os.path.join(chunk_dir, path)
            if os.path.exists(source):
                os.makedirs(os.path.dirname(os.path.join(rundir.path, target)), exist_ok=True)
                shutil.move(source, os.path.join(rundir.path, target))
            record[field] = target
        rundir.append(record)
        imported.append(record)
    console = os.path.join(chunk_dir, "console")
    for name in sorted(os.listdir(console)) if os.path.isdir(console) else ():
        target = os.path.join(rundir.path, "console", name)
        if not os.path.exists(target):
            shutil.move(os.path.join(console, name), target)
    for name in sorted(os.listdir(chunk_dir)):  # e.g. a hang dump lab.run wrote at the top
        if name.startswith("hang-") and not os.path.exists(os.path.join(rundir.path, name)):
            shutil.move(os.path.join(chunk_dir, name), os.path.join(rundir.path, name))
    shutil.rmtree(chunk_dir, ignore_errors=True)
    return imported


def import_leftovers(chunks_root, rundir, run_id):
    found = []
    if os.path.isdir(chunks_root):
        for name in sorted(os.listdir(chunks_root)):
            path = os.path.join(chunks_root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                found += import_chunk(path, rundir, run_id)
        latest = os.path.join(chunks_root, "latest")
        if os.path.islink(latest):
            os.unlink(latest)
    return found


class Child:
    """lab.run as a child; SIGINT/SIGTERM to us stop it cleanly (it records
    the cycle in flight as unfinished) and stop the soak."""

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
    parser, args = parse_args(argv)
    args.results = os.path.abspath(args.results)
    try:
        shard = plan_mod.parse_shard(args.shard)
        args.mode = plan_mod.expand_modes(args.mode) if args.mode else None
        parse_injections(args.inject)  # bad --inject: refused before any chunk runs
        if args.chunk < 1:
            raise NightlyError("--chunk must be at least 1")
        run_id = args.run_id or f"nightly-{stamp()}"
        args.run_id = run_id
        name = plan_mod.run_dir_name(run_id, shard)
        state_path = os.path.join(args.results, name, STATE)
        state, resuming = settle_state(state_path, args, shard)
    except (plan_mod.PlanError, NightlyError, ValueError) as error:
        print(f"nightly: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # lab.virt.LabError from parse_mode
        print(f"nightly: {error}", file=sys.stderr)
        return 2
    rundir = RunDir(args.results, name)
    lock = open(os.path.join(rundir.path, ".nightly.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"nightly: another nightly is running on {rundir.path}", file=sys.stderr)
        return 2
    chunks_root = os.path.join(rundir.path, "chunks")
    try:
        return soak(args, state, state_path, resuming, rundir, chunks_root, run_id, shard)
    except ResultsWriteError as error:
        log(PROG, f"stopping: {error}; free space and rerun with --run-id {run_id} to continue "
                  "(cycles not yet moved into the run stay in its chunks/ directory)")
        return 2


def lava_chunk(args, rundir, run_id, numbers, chunk_modes):
    """One chunk as LAVA jobs: the records carry the plan's numbers already
    (no renumbering), written by run_plan through lab.records. Returns the
    run's records."""
    from lab.modes import mode_of
    from lab import lava as lava_jobs
    knobs = parse_injections(args.inject)
    artifacts_dir = rundir.file("artifacts")
    if not os.path.isfile(os.path.join(artifacts_dir, "swap.img")):
        source = args.artifacts or os.path.join(REPO, "build", "baseline" if args.baseline else "", "out")
        lava_jobs.prepare_artifacts(source, artifacts_dir)
    plan = [(n, lava_jobs.check_mode(mode_of(m)), lava_jobs.check_knobs(n, knobs.get(n, ())))
            for n, m in zip(numbers, chunk_modes)]
    lava_jobs.run_plan(plan, rundir, artifacts_dir, args.lava_identity, args.lava_jobs,
                       [t for t in args.lava_tags.split(",") if t], run_id=run_id,
                       log=lambda text: log(PROG, text), firmware_errata=getattr(args, "firmware_errata", True))
    return read_cycles(rundir.cycles_path)


def soak(args, state, state_path, resuming, rundir, chunks_root, run_id, shard):
    modes, max_cycles = state["modes"], state["max_cycles"]
    leftovers = import_leftovers(chunks_root, rundir, run_id)
    records = read_cycles(rundir.cycles_path)
    last, unfinished = plan_mod.resume_point(records)
    for record in unfinished:  # "started" lines written straight into the run (none normally)
        rundir.append(close_interrupted(record, time.time()))
    records = read_cycles(rundir.cycles_path)
    state.setdefault("invocations", []).append({"started": stamp(), "after_cycle": last})
    write_json(state_path, state)
    if resuming or leftovers:
        closed = sum(1 for r in leftovers if r.get("phase") == "interrupted") + len(unfinished)
        log(PROG, f"resuming run {run_id} after cycle {last} ({len(records)} recorded, "
                  f"{len(leftovers)} imported from an interrupted chunk, {closed} closed as interrupted)")
    log(PROG, f"run {run_id}: modes {plan_mod.describe_modes(modes)}, "
              f"{'max ' + str(max_cycles) + ' cycles' if max_cycles else 'no cycle limit'}"
              f"{', ' + str(args.hours) + ' h' if args.hours else ''}, shard {shard[0]}/{shard[1]}, "
              f"dir {rundir.path}")

    if not args.dry_run:
        artifacts = os.path.join(REPO, "build", "baseline" if args.baseline else "", "out") \
            if not args.artifacts else os.path.abspath(args.artifacts)
        log(PROG, write_run_manifest(rundir.path, artifacts, run_id, shard))
    started = time.monotonic()
    deadline = started + args.hours * 3600 if args.hours else None
    pending = plan_mod.shard_numbers(shard, max_cycles, after=last)
    queue = []
    child = Child()
    status = 0
    while not child.stop:
        while len(queue) < args.chunk:
            number = next(pending, None)
            if number is None:
                break
            queue.append(number)
        if not queue:
            log(PROG, "plan complete")
            break
        seconds_left = deadline - time.monotonic() if deadline else None
        per_mode = plan_mod.seconds_per_cycle(records)
        size = plan_mod.fit_chunk(queue, modes, per_mode, args.chunk, seconds_left)
        if size == 0:
            log(PROG, f"time budget reached: {hms(seconds_left or 0)} left, next cycle does not fit")
            break
        numbers, queue = queue[:size], queue[size:]
        chunk_modes = [plan_mod.mode_of(n, modes) for n in numbers]
        if args.dry_run:
            log(PROG, f"would run cycles {numbers} as {chunk_modes}")
            records += [{"cycle": n, "mode": m, "status": "done", "verdict": "pass",
                         "host_seconds": plan_mod.estimate(m, per_mode)} for n, m in zip(numbers, chunk_modes)]
            if deadline:
                deadline -= plan_mod.BOOT_SECONDS + sum(plan_mod.estimate(m, per_mode) for m in chunk_modes)
            continue
        if args.engine == "lava":
            records = lava_chunk(args, rundir, run_id, numbers, chunk_modes)
            log(PROG, progress(records, state, started, deadline - time.monotonic() if deadline else None))
            continue
        chunk_id = f"{run_id}.c{numbers[0]:06d}"
        chunk_dir = os.path.join(chunks_root, chunk_id)
        os.makedirs(chunk_dir, exist_ok=True)
        write_json(os.path.join(chunk_dir, "chunk.json"), {"numbers": numbers, "modes": chunk_modes})
        log(PROG, f"chunk {chunk_id}: cycles {numbers[0]}..{numbers[-1]} ({len(numbers)})")
        # No reruns: a chunk's cycles are its plan numbers (chunk_records),
        # so a lab error stays an error, counted apart from the kernel's.
        argv = lab_run_command() + ["--results", chunks_root, "--run-id", chunk_id, "--cycles", "1",
                                    "--lab-reruns", "0"]
        for mode in chunk_modes:
            argv += ["--mode", mode]
        code = child.run(argv + lab_options(args) + inject_options(args.inject, numbers))
        imported = import_chunk(chunk_dir, rundir, run_id)
        if os.path.islink(os.path.join(chunks_root, "latest")):  # lab.run's, pointing at the chunk
            os.unlink(os.path.join(chunks_root, "latest"))
        records = read_cycles(rundir.cycles_path)
        if not imported:
            log(PROG, f"lab.run recorded no cycle (exit {code}): stopping; fix the setup and rerun to continue")
            status = 2
            break
        reached = max(r["cycle"] for r in imported)
        unrun = [n for n in numbers if n > reached]
        if unrun and not child.stop:  # lab.run died mid-chunk: its later cycles still have to run
            log(PROG, f"lab.run ended (exit {code}) before cycles {unrun}: queued again")
            queue = unrun + queue
        log(PROG, progress(records, state, started, deadline - time.monotonic() if deadline else None))
    if args.dry_run:
        return 0
    summary = summarize(records)
    summary.update(run_id=run_id, shard=list(shard), modes_planned=modes, max_cycles=max_cycles)
    write_json(os.path.join(rundir.path, "summary.json"), summary)
    try:
        from pipelines.junit import write as write_junit
        write_junit(records, run_id, os.path.join(rundir.path, "junit.xml"))
    except Exception as error:  # the report must not hide the soak's result
        log(PROG, f"junit.xml not written: {error}")
    log(PROG, f"done: {progress(records, state, started, None)}; results {rundir.path}")
    if child.stop:
        log(PROG, f"interrupted: rerun with --run-id {run_id}" + (f" --shard {args.shard}" if args.shard else "")
            + " to continue")
        return 130
    if status:
        return status
    return 0 if all(r.get("verdict") == "pass" and r.get("status") == "done" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
