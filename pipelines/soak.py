"""A soak on several guests at once, and its numbers.

  ./pmlab soak --guests 2 --max-cycles 2100 --mode 'mem*20,disk' [--run-id ID]
               [--profile pc-seabios|q35-ovmf] [--memory MIB] [--watchdog PHASE=S]
  ./pmlab soak --report ID      the numbers of a soak again (also of one still running:
                                the cycles its lab.run processes have recorded so far);
                                ID may also be one nightly run (e.g. --engine lava's)

Each guest is one nightly shard (i/N of one run id), all started at once,
each a process of its own (`./pmlab nightly --request FILE`:
a NightlyRequest, pipelines/nightly.py, written by its one encoder). The kernel artifacts are first copied into
results/<run-id>/artifacts/, so every guest of the soak boots the same
kernel even if build/out is rebuilt meanwhile. Rerunning the same command
resumes every shard (nightly's resume). When the shards end, they are
merged (pipelines/merge.py) into results/<run-id>/merged/, lab.bench measures
the harness against raw QEMU on this machine, and the report gives:
cycles per mode and verdict, success rate with its 95 % interval, wall time,
cycles per hour (all guests) and S3 cycles per hour per guest, cycles per
hour per worker by the wall clock (a LAVA worker, or a guest's shard: its
cycles over its first start to last end, boots and scheduling included),
where an S3 cycle's time goes (the records' host_phases), and the harness's resident
memory at the first and last cycle of every lab.run process. The numbers
also go to results/<run-id>/soak.json.

Exit: 0 every cycle passed, 1 some did not, 2 bad input or setup,
130 interrupted (rerun the same command to continue).
"""

import argparse
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time


from lab import artifacts as artifacts_mod  # noqa: E402
from lab import options  # noqa: E402
from lab.errors import LabError  # noqa: E402
from pipelines import nightly  # noqa: E402
from pipelines import plan as plan_mod  # noqa: E402
from pipelines.common import PYTHON, REPO, hms, log, read_json, stamp, write_json  # noqa: E402
from lab import bench  # noqa: E402
from lab.records import INTERRUPTED, PASS, cycles_path, is_done, nearest_rank, pass_rate, read_cycles, state_of  # noqa: E402

PROG = "soak"


class SoakError(Exception):
    pass


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="pmlab soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--guests", type=int, default=2, help="guests (nightly shards) in parallel")
    options.add_modes(parser, "mem*20, disk; as nightly, N weighs a mode in the rotation",
                      cycles=False, wake=False)
    options.add_budget(parser, "cycles in the whole soak, all guests")
    options.add_results(parser, "default soak-<UTC stamp>; an existing one resumes")
    options.add_kernel(parser, artifacts_default=os.path.join(REPO, "build", "out"))
    parser.add_argument("--chunk", type=int,
                        help="cycles per lab.run process (default: the whole shard, one process per guest)")
    parser.add_argument("--bench-cycles", type=int, default=20, help="lab.bench cycles at the end (0: none)")
    parser.add_argument("--report", metavar="RUN_ID", help="only print the numbers of this soak (or nightly run)")
    options.add_guest(parser.add_argument_group("every guest's settings (as lab.run's)"))
    options.add_inject(parser, "that cycle of the soak's plan (passed to the nightly shard that runs it)")
    options.add_keep(parser, "failures")
    args = parser.parse_args(argv)
    try:
        args.artifacts = options.artifacts_dir(args, default=parser.get_default("artifacts"))
    except LabError as error:
        parser.error(str(error))
    args.baseline = False  # now named by args.artifacts
    return args


# ---------------------------------------------------------------- running

def pin_artifacts(source, run_path):
    """Copy the artifacts once per soak; a resumed soak keeps its copy."""
    target = os.path.join(run_path, "artifacts")
    if os.path.isfile(os.path.join(target, "bzImage")):
        return target
    temporary = target + ".partial"
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        artifacts_mod.copy(source, temporary)
    except LabError as error:
        raise SoakError(f"{error} (./pmlab build first)") from None
    os.replace(temporary, target)
    return target


def shard_dirs(results, run_id, guests):
    return [os.path.join(results, plan_mod.run_dir_name(run_id, (index, guests)))
            for index in range(1, guests + 1)]


def shard_request(args, artifacts, index):
    """The NightlyRequest of guest `index` (1-based) of the soak."""
    per_shard = math.ceil(args.max_cycles / args.guests) if args.max_cycles else 1000
    shard_args = argparse.Namespace(**{**vars(args), "shard": f"{index}/{args.guests}",
                                       "chunk": args.chunk or per_shard, "artifacts": artifacts,
                                       "baseline": False, "kernel": None, "series": None, "config": None,
                                       "dry_run": False, "engine": None})
    return nightly.request_from(shard_args, args.run_id)


def run_shards(args, artifacts):
    """Start one nightly per guest, stream their output, wait for all.
    SIGINT/SIGTERM go to every nightly (each records its cycle in flight)."""
    processes = []
    for index in range(1, args.guests + 1):
        request = shard_request(args, artifacts, index)
        path = request.write(os.path.join(args.results, args.run_id, f"shard{index}-request.json"))
        argv = [PYTHON, "-m", "cli.main", "nightly", "--request", path]
        processes.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          errors="replace", bufsize=1, start_new_session=True, cwd=REPO))

    def forward(signum, frame):
        log(PROG, f"signal {signum}: stopping every guest after its current cycle")
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)

    def pump(index, process):
        for line in process.stdout:
            sys.stdout.write(f"[g{index}] {line}")
            sys.stdout.flush()

    readers = [threading.Thread(target=pump, args=(i, p), daemon=True) for i, p in enumerate(processes, 1)]
    for reader in readers:
        reader.start()
    codes = [process.wait() for process in processes]
    for reader in readers:
        reader.join(5)
    return codes


def merge_shards(args):
    from pipelines.merge import merge
    out = os.path.join(args.results, args.run_id, "merged")
    shutil.rmtree(out, ignore_errors=True)
    present = [d for d in shard_dirs(args.results, args.run_id, args.guests)
               if os.path.isfile(cycles_path(d))]
    if not present:
        raise SoakError(f"no shard of {args.run_id} recorded any cycle")
    merge(out, present, args.run_id)
    return out


def run_bench(artifacts, cycles, results, profile=None):
    """lab.bench on the soak's kernel and machine profile: (ratio or None, its
    output lines). The ratio is what lab.bench wrote (lab.bench.read_result),
    not its text."""
    os.makedirs(results, exist_ok=True)
    try:
        os.unlink(os.path.join(results, bench.RESULT_FILE))  # an older bench's numbers are not this one's
    except FileNotFoundError:
        pass
    argv = [PYTHON, "-m", "cli.main", "bench", "--cycles", str(cycles), "--artifacts", artifacts, "--results", results]
    if profile:
        argv += ["--profile", profile]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    result = bench.read_result(results)
    return (result["ratio"] if result else None), lines


# ---------------------------------------------------------------- numbers

def _epoch(iso_text):
    import datetime
    return datetime.datetime.fromisoformat(iso_text).timestamp()


def cycle_wall(record):
    """Seconds from the cycle's start to its record (judging included)."""
    phases = record.get("host_phases")
    if isinstance(phases, dict) and phases:
        return sum(v for v in phases.values() if isinstance(v, (int, float)))
    return record.get("host_seconds")


def guest_seconds(records):
    """{id(record): seconds} the cycle held its guest: from its start to the
    start of the next cycle on the same guest, so judging that ran beside the
    next cycle (lab.session.Session.cycles) is not counted twice and the
    guest's own work between cycles is; the last cycle of a guest, whose
    successor is not known, and a record naming no guest count cycle_wall()."""
    by_guest, out = {}, {}
    for record in records:
        if record.get("guest") and record.get("host_start"):
            by_guest.setdefault(record["guest"], []).append((_epoch(record["host_start"]), record))
        else:
            out[id(record)] = cycle_wall(record)
    for group in by_guest.values():
        group.sort(key=lambda item: item[0])
        for (start, record), (next_start, _) in zip(group, group[1:]):
            out[id(record)] = next_start - start
        out[id(group[-1][1])] = cycle_wall(group[-1][1])
    return out


def numbers(records, shards_records):
    """The soak's numbers from its merged records and each shard's records."""
    out = {"cycles": len(records), "modes": {}, "failed": []}
    held = guest_seconds(records)
    for mode in sorted({r["mode"] for r in records}):
        group = [r for r in records if r["mode"] == mode]
        verdicts = {}
        for record in group:
            verdicts[state_of(record)] = verdicts.get(state_of(record), 0) + 1
        walls = [w for w in (held[id(r)] for r in group if r.get("verdict") == PASS) if w]
        phases = {}
        for record in group:
            if record.get("verdict") == PASS:
                for key, value in (record.get("host_phases") or {}).items():
                    phases.setdefault(key, []).append(value)
        rate = pass_rate(group)
        out["modes"][mode] = {
            "cycles": len(group), "verdicts": verdicts, "success_rate": rate["rate"],
            "success_rate_95": rate["ci95"],
            "mean_cycle_seconds": round(statistics.mean(walls), 3) if walls else None,
            "median_cycle_seconds": round(statistics.median(walls), 3) if walls else None,
            "p95_cycle_seconds": round(nearest_rank(sorted(walls), 0.95), 3) if walls else None,
            "cycles_per_hour_per_guest": round(3600 / statistics.mean(walls)) if walls else None,
            "host_phases_mean": {k: round(statistics.mean(v), 3) for k, v in phases.items()},
        }
    rate = pass_rate(records)
    out["success_rate"], out["success_rate_95"] = rate["rate"], rate["ci95"]
    # an interrupted cycle (the soak was stopped during it) is no failure
    settled = [r for r in records if state_of(r) != INTERRUPTED]
    out["all_passed"] = bool(settled) and all(state_of(r) == PASS for r in settled)
    out["failed"] = [{"cycle": r["cycle"], "mode": r.get("mode"), "verdict": state_of(r),
                      "phase": r.get("phase"),
                      "reason": r.get("reason") if is_done(r) else "no record yet: running or interrupted"}
                     for r in settled if state_of(r) != PASS]
    starts = [_epoch(r["host_start"]) for r in records if r.get("host_start")]
    ends = [_epoch(r["host_end"]) for r in records if r.get("host_end")]
    if starts and ends:
        wall = max(ends) - min(starts)
        out["wall_seconds"] = round(wall)
        out["cycles_per_hour"] = round(len(records) * 3600 / wall) if wall > 0 else None
    rss = []
    for index, shard in enumerate(shards_records, 1):
        by_pid = {}
        for record in shard:
            if record.get("harness_pid") and record.get("harness_rss_kib"):
                by_pid.setdefault(record["harness_pid"], []).append(record)
        for pid, group in by_pid.items():
            values = [r["harness_rss_kib"] for r in group]
            rss.append({"guest": index, "pid": pid, "cycles": len(group), "first_kib": values[0],
                        "last_kib": values[-1], "max_kib": max(values),
                        "first_cycle": group[0]["cycle"], "last_cycle": group[-1]["cycle"]})
    out["harness_rss"] = rss
    out["per_worker"] = per_worker(shards_records)
    return out


def per_worker(shards_records):
    """{worker: {"cycles", "wall_seconds", "cycles_per_hour"}} by the wall
    clock: a LAVA record names its worker; a libvirt shard is one guest.
    Boots, scheduling and judging are inside the span, so engines compare."""
    groups = {}
    for index, shard in enumerate(shards_records, 1):
        for record in shard:
            if is_done(record):
                # lab.run's "worker" is its session's name (w0 in every shard): a LAVA record's is the machine's.
                name = record.get("worker") if record.get("engine") == "lava" else None
                groups.setdefault(name or f"guest {index}", []).append(record)
    out = {}
    for name, group in sorted(groups.items()):
        starts = [_epoch(r["host_start"]) for r in group if r.get("host_start")]
        ends = [_epoch(r["host_end"]) for r in group if r.get("host_end")]
        wall = max(ends) - min(starts) if starts and ends else 0
        out[name] = {"cycles": len(group), "wall_seconds": round(wall),
                     "cycles_per_hour": round(len(group) * 3600 / wall) if wall > 0 else None}
    return out


def report_lines(run_id, result, command=None):
    lines = [f"soak {run_id}" + (f": {command}" if command else "")]
    lines.append(f"  {result['cycles']} cycles in {hms(result.get('wall_seconds') or 0)}"
                 f" = {result.get('cycles_per_hour')} cycles/hour on all guests; success rate "
                 f"{result['success_rate']} (95 % {result['success_rate_95']})"
                 + (f"; {result['planned']} planned, {result['not_recorded']} without a record"
                    if result.get("planned") else ""))
    for mode, block in result["modes"].items():
        lines.append(f"  {mode}: {block['cycles']} cycles {block['verdicts']}, success {block['success_rate']}"
                     f" (95 % {block['success_rate_95']}), {block['mean_cycle_seconds']} s/cycle mean"
                     f" = {block['cycles_per_hour_per_guest']} cycles/hour per guest (median "
                     f"{block['median_cycle_seconds']} s, p95 {block['p95_cycle_seconds']} s)")
        if block["host_phases_mean"]:
            lines.append("      where the time goes (mean s): " +
                         ", ".join(f"{k} {v}" for k, v in block["host_phases_mean"].items()))
    for name, block in (result.get("per_worker") or {}).items():
        lines.append(f"  worker {name}: {block['cycles']} cycles in {hms(block['wall_seconds'])} = "
                     f"{block['cycles_per_hour']} cycles/hour (wall clock: first start to last end)")
    for item in result["harness_rss"]:
        lines.append(f"  harness RSS guest {item['guest']} (lab.run pid {item['pid']}, cycles "
                     f"{item['first_cycle']}..{item['last_cycle']}, {item['cycles']} records): "
                     f"{item['first_kib']} KiB at the first, {item['last_kib']} KiB at the last, max {item['max_kib']}")
    for failure in result["failed"][:20]:
        lines.append(f"  not passed: cycle {failure['cycle']} {failure['mode']} {failure['verdict']} "
                     f"in {failure['phase']}: {str(failure['reason'])[:160]}")
    if result.get("bench_ratio") is not None:
        lines.append(f"  harness/floor ratio (lab.bench, {result['bench_cycles']} cycles each side): "
                     f"{result['bench_ratio']:.3f}")
    return lines


def shard_records(shard_dir):
    """A shard's records, those of its cycle in flight too (a "started"
    line: running, or left by a killed run). Read only."""
    return read_cycles(cycles_path(shard_dir))


def report(args, bench=None):
    dirs = getattr(args, "run_dirs", None) or shard_dirs(args.results, args.run_id, args.guests)
    shards = [shard_records(d) for d in dirs]
    records = sorted((r for shard in shards for r in shard), key=lambda r: r["cycle"])
    result = numbers(records, shards)
    result.update(run_id=args.run_id, guests=args.guests, written=stamp())
    path = os.path.join(args.results, args.run_id, "soak.json")
    previous = read_json(path, {}) if os.path.isfile(path) else {}
    result["command"] = previous.get("command")
    planned = previous.get("planned")
    if planned:  # cycles the plan asked for that have no record at all
        result.update(planned=planned, not_recorded=max(0, planned - result["cycles"]))
    if bench:
        result.update(bench_ratio=bench[0], bench_cycles=args.bench_cycles, bench_output=bench[1])
    else:
        for key in ("bench_ratio", "bench_cycles", "bench_output"):
            if key in previous:
                result[key] = previous[key]
    write_json(path, result)
    for line in report_lines(args.run_id, result, result.get("command")):
        print(line, flush=True)
    return result


def main(argv=None):
    args = parse_args(argv)
    args.results = os.path.abspath(args.results)
    try:
        if args.report:
            args.run_id = args.report
            found = [name for name in os.listdir(args.results) if name.startswith(f"{args.run_id}-shard")]
            single = os.path.join(args.results, args.run_id)
            if not found and os.path.isfile(cycles_path(single)):  # one nightly run, e.g. on LAVA
                args.run_dirs, args.guests = [single], 1
                report(args)
                return 0
            if not found:
                raise SoakError(f"no shard directories of {args.run_id} under {args.results}")
            args.guests = int(re.search(r"of(\d+)$", found[0])[1])
            report(args)
            return 0
        if args.guests < 1:
            raise SoakError("--guests must be at least 1")
        if not args.max_cycles and not args.hours:
            raise SoakError("give --max-cycles N and/or --hours H")
        args.mode = args.mode or ["mem*20", "disk"]
        plan_mod.expand_modes(args.mode)
        nightly.request_from(argparse.Namespace(**{**vars(args), "shard": None, "chunk": 1, "dry_run": False}),
                             "check")  # bad --inject, --pmtest-tree, ...: refused before anything runs
        args.run_id = args.run_id or f"soak-{stamp()}"
        run_path = os.path.join(args.results, args.run_id)
        os.makedirs(run_path, exist_ok=True)
        artifacts = pin_artifacts(os.path.abspath(args.artifacts), run_path)
    except (SoakError, plan_mod.PlanError, nightly.NightlyError, LabError, OSError) as error:
        print(f"soak: {error}", file=sys.stderr)
        return 2
    command = "./pmlab soak " + " ".join(argv if argv is not None else sys.argv[1:])
    soak_json = os.path.join(run_path, "soak.json")
    if not os.path.isfile(soak_json):
        write_json(soak_json, {"run_id": args.run_id, "command": command, "started": stamp(),
                               # with --hours the budget may end it early: no plan to miss
                               "planned": None if args.hours else args.max_cycles})
    log(PROG, f"run {args.run_id}: {args.guests} guests, modes {', '.join(args.mode)}, "
              f"{args.max_cycles or 'no'} max cycles, kernel {artifacts}")
    started = time.monotonic()
    codes = run_shards(args, artifacts)
    log(PROG, f"shards ended with {codes} after {hms(time.monotonic() - started)}")
    try:
        merge_shards(args)
    except Exception as error:
        print(f"soak: merging the shards failed: {error}", file=sys.stderr)
        return 2
    bench = None
    if args.bench_cycles > 0 and 130 not in codes:
        log(PROG, f"lab.bench --cycles {args.bench_cycles} on the soak's kernel")
        bench = run_bench(artifacts, args.bench_cycles, os.path.join(run_path, "bench"), args.profile)
        for line in bench[1]:
            print(f"  bench| {line}", flush=True)
    result = report(args, bench)
    if 130 in codes:
        return 130
    if any(code == 2 for code in codes):
        return 2
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":  # ./pmlab soak is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.soak", "soak"))
