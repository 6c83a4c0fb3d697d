"""Records and dashboard on a diet, measured: record bytes per cycle of
version 2 against version 3, and dashboards.compute over N records as a
full recompute against the per-run cache after one more night.

  /usr/bin/python3 -m dashboards.bench_compute [--records 12000] [--nights 6] [--work DIR]

The records are the committed recorded run (pytest/recordings/
run-cycles.jsonl.gz: version 2, mem x3, freeze x2, disk x1, all passing)
renumbered into N cycles over --nights runs, written as the lab writes
them (a "started" and a "done" line each, lab.records.append_records);
version 3 is the same records through lab.records.compact_fields and
lab.judge.keep_evidence (--keep failures, and full for comparison). Each
dashboard is computed by `./pmlab dashboard` (JSON and page) in a fresh process:
wall seconds (the machine is shared) and the process's CPU seconds.
"""

import argparse
import copy
import datetime
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from dashboards import testing  # noqa: E402
from lab import records  # noqa: E402
from lab.judge import keep_evidence  # noqa: E402

RECORDED_RUN = os.path.join(REPO, "pytest", "recordings", "run-cycles.jsonl.gz")


def recorded_run():
    with gzip.open(RECORDED_RUN, "rt") as source:
        lines = [json.loads(line) for line in source]
    return [line for line in lines if records.is_done(line)]


def as_version3(record, keep, run):
    """The record as lab/cycle.py writes it now (its report is not rewritten)."""
    new = testing.version3([record])[0]
    evidence = new.pop("evidence", [])
    new.pop("report", None)
    keep_evidence(run, new, None, evidence)
    return new


def write_night(root, run_id, templates, first, count, start):
    """count cycles numbered from first, one every 3 s from start."""
    run = records.RunDir(root, run_id)
    lines = []
    for index in range(count):
        record = dict(templates[index % len(templates)], cycle=first + index, run_id=run_id,
                      host_start=records.iso(start + 3 * index))
        lines.append(testing.started_line(record))
        lines.append(record)
        if len(lines) >= 2000:
            records.append_records(run.cycles_path, lines)
            lines = []
    if lines:
        records.append_records(run.cycles_path, lines)
    return run.path


def run_bytes(run_dir):
    return sum(os.path.getsize(os.path.join(run_dir, name)) for name in (records.CYCLES_FILE, records.SHARED_FILE)
               if os.path.isfile(os.path.join(run_dir, name)))


def timed_compute(paths, output, cache):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.main", "dashboard", *paths, "-o", output]
                          + ([] if cache else ["--no-cache"]), cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"dashboards.compute failed: {done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=12000, help="cycles in all nights together")
    parser.add_argument("--nights", type=int, default=6, help="runs the cycles are split into; the last is the new one")
    parser.add_argument("--work", help="scratch directory (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="bench-compute-")
    os.makedirs(work, exist_ok=True)
    try:
        templates_v2 = recorded_run()
        sizes = {}
        for label, keep in (("v2", None), ("v3 --keep full", "full"), ("v3 --keep failures", "failures")):
            root = os.path.join(work, "size", label.replace(" ", "_"))
            scratch = records.RunDir(os.path.join(work, "scratch"), label.replace(" ", "_"), keep=keep or "full")
            templates = templates_v2 if keep is None else [as_version3(copy.deepcopy(r), keep, scratch)
                                                           for r in templates_v2]
            count = 600
            sizes[label] = run_bytes(write_night(root, "size", templates, 1, count, 1.8e9)) / count
        print("record bytes per passing cycle (started + done line + shared.jsonl; the recorded run's mix: "
              f"mem 3, freeze 2, disk 1; shared.jsonl spread over {count}-cycle runs):")
        for label, size in sizes.items():
            print(f"  {label:<20} {size:9.0f} B   ratio to v2 {size / sizes['v2']:.3f}")
        per_mode = {}
        scratch = records.RunDir(os.path.join(work, "scratch"), "modes", keep="failures")
        for record in templates_v2:
            compact = as_version3(copy.deepcopy(record), "failures", scratch)
            compact.pop(records.CARRIED_FIELD)  # the shared values it carries are not in its line
            per_mode.setdefault(record["mode"], []).append(
                (len(json.dumps(record)) + 1, len(json.dumps(compact)) + 1))
        print("  done line alone, per mode (v2 -> v3 --keep failures): " + ", ".join(
            f"{mode} {sum(a for a, _ in v) / len(v):.0f} -> {sum(b for _, b in v) / len(v):.0f} B"
            for mode, v in per_mode.items()))

        templates = [as_version3(copy.deepcopy(r), "failures", scratch) for r in templates_v2]
        root = os.path.join(work, "results")
        per_night = args.records // args.nights
        start = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc).timestamp()
        nights = []
        for night in range(args.nights):
            count = per_night if night < args.nights - 1 else args.records - per_night * (args.nights - 1)
            nights.append(write_night(root, f"night-{night + 1:02d}", templates, night * per_night + 1, count,
                                      start + night * 86400))
        old = nights[:-1]  # the last night is the new one
        output = os.path.join(work, "dashboard.json")
        full = timed_compute(nights, output, cache=False)
        with open(output) as source:
            expected = source.read()
        # the nights before the new one computed (and cached) as on the evening before
        cold = timed_compute(old, output, cache=True)
        incremental = timed_compute(nights, output, cache=True)
        with open(output) as source:
            same = source.read() == expected
        print(f"dashboards.compute over {args.records} records in {args.nights} runs "
              f"(wall s / CPU s, fresh process each):")
        print(f"  full recompute (--no-cache)            {full[0]:6.2f} / {full[1]:6.2f}")
        print(f"  the {args.nights - 1} earlier nights, caches written     {cold[0]:6.2f} / {cold[1]:6.2f}")
        print(f"  incremental after one more night       {incremental[0]:6.2f} / {incremental[1]:6.2f}   "
              f"ratio to full {incremental[0] / full[0]:.3f} wall, {incremental[1] / full[1]:.3f} CPU")
        print(f"  incremental dashboard == full recompute: {same}")
        return 0 if same else 1
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
