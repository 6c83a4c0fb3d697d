"""The latency gate's false-alarm rate and detection threshold, from recorded runs.

  ./pmlab latency-check RUN_DIR... [--baseline-runs N] [--busy RUN] [--key DEVICE:CALLBACK]

RUN_DIRs are runs of the same kernel, oldest first (e.g. the commit smoke,
mem*3,freeze*2,disk, run again and again). Each run from the second on is
judged as the commit pipeline judges it (lab/latency.py through
pipelines/compare.py's baseline): against the run before it with up to N-1
earlier ones pooled (default the commit pipeline's BASELINE_RUNS; 1: the
previous run alone). Every finding is a false alarm: the kernel is the same.

The detection threshold: for each pair, every callback key both sides
sampled that the baseline times at 1 ms or more (or the --key ones) gets a
delay added to each of the run's samples,
in 5 ms steps; the smallest delay the gate flags is that key's threshold in
that pair. Printed: the false-alarm rate (pairs with any finding / pairs;
idle and --busy runs apart), each false finding, and the thresholds (median
and worst over keys and pairs, and per --key).

Each pair's line also shows the host factor (lab.latency.host_factor): how
much slower the host ran the run, as a whole, than its baseline.

Exit 0; 2 for a run directory without records.
"""

import argparse
import os
import statistics
import sys

from lab import latency
from lab import records

STEP_MS = 5
MAX_DELAY_MS = 2000
BASELINE_RUNS = 10  # pipelines/commit.py's (not imported: commit pulls in the dashboard)


def read_runs(paths):
    """[(name, records)] of run dirs; ValueError naming one without records."""
    runs = []
    for path in paths:
        recs = records.read_cycles(records.cycles_path(path))
        if not recs:
            raise ValueError(f"{path}: no recorded cycles")
        runs.append((os.path.basename(os.path.normpath(path)), recs))
    return runs


def pair_samples(runs, index, depth):
    """(baseline samples, run samples, previous run's samples or None) of
    runs[index] against the `depth` runs before it, as the commit gate takes them."""
    window = [recs for _, recs in runs[max(0, index - depth):index]][::-1]  # newest first
    baseline = [record for recs in window for record in recs]
    current = runs[index][1]
    modes = latency.sampled_modes(baseline) & latency.sampled_modes(current)
    last = latency.samples(window[0], modes) if len(window) > 1 else None
    return latency.samples(baseline, modes), latency.samples(current, modes), last


def threshold(was, now, last, key, factors):
    """The smallest delay (ms, STEP_MS steps) on every one of the run's
    samples of `key` that the gate flags, or None up to MAX_DELAY_MS.
    factors: the pair's host factors against the baseline and the previous
    run (one key's delay barely moves their median over all keys)."""
    previous = last.get(key) if last is not None else None
    for delay in range(STEP_MS, MAX_DELAY_MS + 1, STEP_MS):
        change = latency.changed(key, was[key], [ms + delay for ms in now[key]], previous, latency.ALPHA,
                                 latency.Floor(), *factors)
        if change and change["flagged"]:
            return delay
    return None


def measure(runs, depth, keys=None):
    """Per pair: {"run", "findings": [detail], "thresholds": {key: ms or None}}."""
    pairs = []
    for index in range(1, len(runs)):
        was, now, last = pair_samples(runs, index, depth)
        found = [latency.detail(change) for change in latency.compare_samples(was, now, last) if change["flagged"]]
        factor = latency.host_factor(was, now)
        factors = (factor, latency.host_factor(last, now) if last is not None else 1.0)
        wanted = keys if keys is not None else [key for key in sorted(set(was) & set(now)) if key[0] == "callback"
                                                and statistics.median(was[key]) >= latency.FACTOR_MIN_MS]
        wanted = [key for key in wanted if key in was and key in now]
        once = [key for key in wanted if len(now[key]) < 2]  # disk's callbacks: 1 vs 10 never reaches p < 0.01
        thresholds = {key: threshold(was, now, last, key, factors) for key in wanted if key not in once}
        pairs.append({"run": runs[index][0], "findings": found, "thresholds": thresholds, "host_factor": factor,
                      "sampled_once": len(once)})
    return pairs


def rate_line(label, pairs):
    alarms = sum(1 for pair in pairs if pair["findings"])
    return f"false alarms ({label}): {alarms}/{len(pairs)} pairs" + (
        f" ({alarms / len(pairs):.0%})" if pairs else "")


def threshold_lines(pairs, keys):
    lines = []
    every = [ms for pair in pairs for ms in pair["thresholds"].values()]
    found = sorted(ms for ms in every if ms is not None)
    if found:
        lines.append(f"detection threshold over {len(every)} (callback, pair)s: median {statistics.median(found)} ms, "
                     f"90th {found[int(0.9 * (len(found) - 1))]} ms, worst {found[-1]} ms; "
                     f"{len(every) - len(found)} not detected up to {MAX_DELAY_MS} ms")
    once = sum(pair["sampled_once"] for pair in pairs)
    if once:
        lines.append(f"{once} (callback, pair)s the run sampled once (a mode with one cycle: disk's callbacks) "
                     "are never flagged")
    for key in keys or ():
        values = [pair["thresholds"].get(key) for pair in pairs]
        shown = ", ".join("-" if ms is None else str(ms) for ms in values)
        lines.append(f"  {key[1]} {key[2]}: smallest delay detected per pair: {shown} ms")
    return lines


def parse_key(text):
    device, sep, label = text.rpartition(":")
    if not sep or not device or not label:
        raise argparse.ArgumentTypeError(f"--key '{text}': give DEVICE IDENTITY:CALLBACK, "
                                         "e.g. '0000:00:03.0 (virtio-pci):bus[suspend]'")
    return latency.callback_key(device, label)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pmlab latency-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="runs of one kernel, oldest first")
    parser.add_argument("--baseline-runs", type=int, default=BASELINE_RUNS, metavar="N",
                        help=f"runs pooled into the baseline (default {BASELINE_RUNS}; 1: the previous run only)")
    parser.add_argument("--busy", action="append", default=[], metavar="RUN",
                        help="a run (its directory name) made with the machine busy: its pairs counted apart")
    parser.add_argument("--key", action="append", type=parse_key, metavar="DEVICE:CALLBACK",
                        help="thresholds of this callback only (default: every callback both sides sampled)")
    args = parser.parse_args(argv)
    if args.baseline_runs < 1 or len(args.runs) < 2:
        print("latency-check: give at least two runs and --baseline-runs of 1 or more", file=sys.stderr)
        return 2
    try:
        runs = read_runs(args.runs)
    except ValueError as error:
        print(f"latency-check: {error}", file=sys.stderr)
        return 2
    pairs = measure(runs, args.baseline_runs, args.key)
    for pair in pairs:
        busy = " (busy)" if pair["run"] in args.busy else ""
        print(f"{pair['run']}{busy} (host {pair['host_factor']:.2f}x the baseline's): "
              + ("; ".join(pair["findings"]) if pair["findings"] else "no finding"))
    print(f"baseline: the previous run + up to {args.baseline_runs - 1} earlier; alpha {latency.ALPHA}, "
          f"floor {latency.FLOOR_MS:g} ms and {latency.FLOOR_RATIO:.0%}")
    print(rate_line("all", pairs))
    if args.busy:
        print(rate_line("idle", [p for p in pairs if p["run"] not in args.busy]))
        print(rate_line("busy", [p for p in pairs if p["run"] in args.busy]))
    for line in threshold_lines(pairs, args.key):
        print(line)
    return 0


if __name__ == "__main__":  # ./pmlab latency-check is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.latency_false_alarm", "latency-check"))
