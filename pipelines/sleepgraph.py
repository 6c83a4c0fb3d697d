"""Intel's sleepgraph on a sample of a run's cycles, its pages next to pmlab's reports.

  ./pmlab sleepgraph RUN_DIR [--sample N] [--cycle N]...
  ./pmlab sleepgraph RUN_DIR ...

For each cycle of the sample: the two files sleepgraph reads
(reports/cycleN_ftrace.txt.gz and _dmesg.txt.gz; the lab writes them for
cycles that did not pass, and they are written here from the cycle's report
for the others: lab/sleepgraph.py), then the kernel tree's
tools/power/pm-graph/sleepgraph.py on them:

  RUN_DIR/sleepgraph/cycleN.html     sleepgraph's timeline of the cycle
  RUN_DIR/sleepgraph/cycleN.result   its result file (suspend and resume ms)
  RUN_DIR/sleepgraph/sleepgraph.json per cycle: the page, sleepgraph's suspend
                                     and resume ms beside pmlab's (they differ by
                                     design: lab/README.md, "sleepgraph")

The sample: every cycle with a report that did not pass, then passing ones
spread evenly over the run, N in all (default 5); --cycle names cycles instead.
sleepgraph comes from the tree kernel/build extracts ($PMLAB_BUILD/src/linux).

Exit: 0 every page drawn, 1 some cycle could not be drawn, 2 bad input
(not a run directory, no such cycle, sleepgraph missing).
"""

import argparse
import json
import os
import sys


from lab import sleepgraph  # noqa: E402
from lab.records import PASS, RunDir, cycles_path, read_cycles, read_report, sleepgraph_paths  # noqa: E402

PROG = "sleepgraph"
DEFAULT_SAMPLE = 5


def sample(records, count):
    """Cycles with a report: those that did not pass first, then passing
    ones evenly spread, `count` in all."""
    reported = [r for r in records if isinstance(r.get("report"), str)]
    failed = [r for r in reported if r.get("verdict") != PASS]
    passed = [r for r in reported if r.get("verdict") == PASS]
    chosen = failed[:count]
    room = count - len(chosen)
    if room > 0 and passed:
        step = len(passed) / room
        chosen += [passed[int(i * step)] for i in range(min(room, len(passed)))]
    return sorted(chosen, key=lambda r: r["cycle"])


def sleepgraph_files(run_dir, record):
    """(ftrace, dmesg) paths of a cycle, written from its report if the lab did not."""
    relative = sleepgraph_paths(record["cycle"])
    ftrace, dmesg = record.get("sleepgraph_ftrace", relative[0]), record.get("sleepgraph_dmesg", relative[1])
    if not (os.path.isfile(os.path.join(run_dir, ftrace)) and os.path.isfile(os.path.join(run_dir, dmesg))):
        report = read_report(run_dir, record["report"])
        rundir = RunDir(os.path.dirname(run_dir), os.path.basename(run_dir), link_latest=False)
        written = sleepgraph.write_files(rundir, record, report)
        ftrace, dmesg = written["sleepgraph_ftrace"], written["sleepgraph_dmesg"]
    return os.path.join(run_dir, ftrace), os.path.join(run_dir, dmesg)


def draw(run_dir, record):
    """sleepgraph on one cycle: its entry for sleepgraph.json."""
    out = os.path.join(run_dir, "sleepgraph")
    os.makedirs(out, exist_ok=True)
    number = record["cycle"]
    html, result = os.path.join(out, f"cycle{number}.html"), os.path.join(out, f"cycle{number}.result")
    if os.path.exists(result):  # sleepgraph appends to it
        os.unlink(result)
    entry = {"cycle": number, "mode": record.get("mode"), "verdict": record.get("verdict"),
             "pmlab": {"suspend_ms": record.get("suspend_ms"), "resume_ms": record.get("resume_ms")}}
    try:
        ftrace, dmesg = sleepgraph_files(run_dir, record)
        sleepgraph.run(ftrace, dmesg, html, result)
        values = sleepgraph.read_result(result)
    except (OSError, EOFError, sleepgraph.SleepgraphError) as error:
        entry["error"] = str(error)
        return entry
    entry.update(html=os.path.relpath(html, run_dir), sleepgraph={
        "result": values.get("result"), "suspend_ms": values.get("suspend"),
        "resume_ms": values.get("resume"), "error": values.get("error")})
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(prog=f"pmlab {PROG}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", metavar="RUN_DIR", help="a run directory (results/<run-id>)")
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, metavar="N",
                        help=f"cycles to draw (default {DEFAULT_SAMPLE}): those that did not pass first")
    parser.add_argument("--cycle", type=int, action="append", metavar="N", help="draw this cycle (repeat)")
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run)
    if not os.path.isfile(cycles_path(run_dir)):
        print(f"{PROG}: {run_dir} is not a run directory (no {os.path.basename(cycles_path(run_dir))})",
              file=sys.stderr)
        return 2
    try:
        sleepgraph.script_path()
    except sleepgraph.SleepgraphError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    records = read_cycles(cycles_path(run_dir))
    if args.cycle:
        by_number = {r["cycle"]: r for r in records}
        missing = [n for n in args.cycle if not isinstance(by_number.get(n, {}).get("report"), str)]
        if missing:
            print(f"{PROG}: no report for cycle(s) {missing} in {run_dir}", file=sys.stderr)
            return 2
        chosen = [by_number[n] for n in args.cycle]
    else:
        chosen = sample(records, max(args.sample, 0))
    entries = []
    for record in chosen:
        entry = draw(run_dir, record)
        entries.append(entry)
        if "error" in entry:
            print(f"{PROG}: cycle {entry['cycle']}: {entry['error']}", file=sys.stderr)
        else:
            drawn = entry["sleepgraph"]
            print(f"{PROG}: cycle {entry['cycle']} ({entry['mode']}, {entry['verdict']}): {entry['html']} "
                  f"(sleepgraph suspend {drawn['suspend_ms']} ms, resume {drawn['resume_ms']} ms; pmlab "
                  f"{entry['pmlab']['suspend_ms']} / {entry['pmlab']['resume_ms']} ms)", flush=True)
    os.makedirs(os.path.join(run_dir, "sleepgraph"), exist_ok=True)
    with open(os.path.join(run_dir, "sleepgraph", "sleepgraph.json"), "w") as out:
        json.dump({"cycles": entries}, out, indent=2)
        out.write("\n")
    return 1 if any("error" in entry for entry in entries) else 0


if __name__ == "__main__":  # ./pmlab sleepgraph is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.sleepgraph", "sleepgraph"))
