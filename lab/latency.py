"""The latency gate: did a run make a device callback or a PM phase slower?

Pure (no libvirt, no guest): the commit pipeline (pipelines/compare.py), the
nightly's report and the dashboard import it; records are read through
lab.records (callback_columns, phase_ms, suspend_ms / resume_ms).

Samples. Only cycles that passed and had nothing injected count (a fault or
a delay injected on purpose times nothing of the kernel's; a failed cycle's
callbacks stopped half-way). A sample is one cycle's time of one key:
  callback  (device identity, callback label): its calls in that cycle
            summed (a label that runs twice in a cycle is one sample);
            pooled across modes: "bus[suspend]" runs in mem and freeze
            cycles alike, and disk's callbacks have labels of their own
            (bus[freeze], bus[poweroff], ...);
  phase     (family, PM phase) from the record's phase_ms, plus "suspend
            total" / "resume total" (suspend_ms, resume_ms: the guest's own
            times); family "suspend" pools mem, freeze and standby, disk and
            each pm_test level stand alone (their phases do other work);
            machine_suspend is left out (the time asleep: the wake's, not
            the kernel's work).
Only the modes both sides have are sampled, so that a baseline of mem*10
and a smoke of mem*3,freeze*2 compare mem with mem.

Test. One-sided Mann-Whitney U (scipy.stats.mannwhitneyu, alternative
"greater": the current run's times tend to be larger) at ALPHA, and an
effect floor on the medians: slower by at least FLOOR_MS and by at least
FLOOR_RATIO, so that noise on a busy 2-core TCG host, or a significant but
tiny shift, does not fire it. With the commit smoke's default counts
(mem*3,freeze*2,disk) a callback of mem and freeze has 5 samples a run; the
baseline pools the previous run with earlier ones of the same pipeline
(pipelines/commit.py: BASELINE_RUNS), so 5 samples are compared with up to
50, and a finding must also be slower than the previous run alone (by the
same floor: a slowdown the previous run already had is not new). The
device guest's stage (one cycle a mode: 2 samples of a mem+freeze callback)
needs 7 earlier runs for its exact p to fall below 0.01 (2 vs 14: p = 1/120).
Before the test the run's times are divided by its host factor
(host_factor): how much slower the shared host ran the whole run.

Absolute limits (over_limit): a cycle whose guest-side suspend or resume
took longer than the request's limits (lab.request.Limits, fwts's 15 s)
fails, phase "latency"; lab.judge applies them.

The measured false-alarm rate and detection threshold: pipelines/README.md
"Latency gate" (./pmlab latency-check).
"""

import dataclasses
import math
import os
import statistics
from typing import Any, Iterable, Mapping, Optional, Sequence, TypeGuard

from lab import records
from lab.records import Record

# A sample key: ("callback", device, label) or ("phase", family, phase); a
# damaged record's phase key may have None for its family (no mode).
Key = tuple[str, Any, str]
Samples = dict[Key, list[float]]
Change = dict[str, Any]  # compare()'s change of one key

ALPHA = 0.01
FLOOR_MS = 20.0
FLOOR_RATIO = 0.20
SUSPEND_FAMILY = ("mem", "freeze", "standby")
TOTALS = (("suspend total", "suspend_ms"), ("resume total", "resume_ms"))
# The time asleep, not the kernel's work: S3's firmware round trip, or how
# long s2idle idled until the lab's press woke it.
UNTIMED_PHASES = ("machine_suspend",)


@dataclasses.dataclass(frozen=True)
class Floor:
    """How much slower a median must be to count (both must hold)."""
    ms: float = FLOOR_MS
    ratio: float = FLOOR_RATIO

    def exceeded(self, before_ms: float, after_ms: float) -> bool:
        return after_ms - before_ms >= self.ms and after_ms >= before_ms * (1 + self.ratio)


def sampled(record: Record) -> bool:
    """Does the cycle time the kernel: passed, nothing injected?"""
    return records.state_of(record) == records.PASS and not records.injected(record)


def family(mode: Optional[str]) -> Optional[str]:
    """The phase samples' pool of a mode name: mem, freeze and standby do the
    same PM phases; disk and each pm_test level do their own."""
    return "suspend" if mode in SUSPEND_FAMILY else mode


def callback_key(device: str, label: str) -> Key:
    return ("callback", device, label)


def phase_key(mode: Optional[str], phase: str) -> Key:
    return ("phase", family(mode), phase)


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def cycle_samples(record: Record) -> dict[Key, float]:
    """{key: ms} of one cycle: each callback key's calls summed, each phase.
    A damaged record (the dashboard reads raw lines) gives what it can."""
    out: dict[Key, float] = {}
    calls: Sequence[tuple[str, str, Optional[str]]]
    durations: Sequence[Optional[float]]
    try:
        calls, durations, _ = records.callback_columns(record)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):  # RecordError is a ValueError
        calls, durations = (), ()
    for (device, label, _), us in zip(calls, durations):
        if _number(us) and isinstance(device, str) and isinstance(label, str):
            key = callback_key(device, label)
            out[key] = out.get(key, 0.0) + us / 1000.0
    phases = record.get("phase_ms")
    for phase, ms in (phases.items() if isinstance(phases, dict) else ()):
        if _number(ms) and phase not in UNTIMED_PHASES:
            out[phase_key(record.get("mode"), phase)] = float(ms)
    for name, field in TOTALS:
        if _number(record.get(field)):
            out[phase_key(record.get("mode"), name)] = float(record[field])
    return out


def samples(recs: Iterable[Record], modes: Optional[set[Optional[str]]] = None) -> Samples:
    """{key: [ms per cycle]} over the sampled cycles (of `modes` only, if given)."""
    out: Samples = {}
    for record in recs:
        if not sampled(record) or (modes is not None and record.get("mode") not in modes):
            continue
        for key, ms in cycle_samples(record).items():
            out.setdefault(key, []).append(ms)
    return out


def sampled_modes(recs: Iterable[Record]) -> set[Optional[str]]:
    return {record.get("mode") for record in recs if sampled(record)}


# Up to this many sample pairs the p-value is U's exact distribution (<= 0.1 s):
# scipy's "auto" takes the normal approximation as soon as two times tie,
# which at 5 vs 5 is far too small (1 vs 8 tied: p 0.007 instead of 1/9).
EXACT_PAIRS = 500


def one_sided_p(before: Sequence[float], after: Sequence[float]) -> float:
    """P(after's times are no larger than before's) by one-sided Mann-Whitney U."""
    from scipy.stats import mannwhitneyu  # type: ignore[import]  # no stubs; ~0.5 s to import: only when a key is tested
    if len(set(before) | set(after)) == 1:
        return 1.0
    method = "exact" if len(before) * len(after) <= EXACT_PAIRS else "asymptotic"
    return float(mannwhitneyu(after, before, alternative="greater", method=method).pvalue)


def describe_key(key: Sequence[str]) -> tuple[Optional[str], Optional[str], str]:
    """(device name, driver, callback or phase words) of a key."""
    if key[0] == "callback":
        name, driver = records.split_device_id(key[1])
        return name, driver, key[2]
    return None, None, f"{key[2]} ({key[1]})"


def compare(before: Sequence[Record], after: Sequence[Record], previous: Optional[Sequence[Record]] = None,
            alpha: float = ALPHA, floor: Floor = Floor(), keys: Optional[Iterable[Key]] = None) -> list[Change]:
    """Changes of every key both sides sampled whose median got slower by
    the floor: [{"key", "device", "driver", "callback", "before_ms",
    "after_ms", "n_before", "n_after", "p", "flagged"}], flagged first, then
    by how much slower. before: the baseline's records (the previous run,
    with earlier runs pooled in, or named runs); after: the run judged;
    previous: the previous run's records alone, when the baseline pools
    more: a finding must be slower than it too. keys: only these keys."""
    modes = sampled_modes(before) & sampled_modes(after)
    was, now = samples(before, modes), samples(after, modes)
    last = samples(previous, modes) if previous is not None else None
    return compare_samples(was, now, last, alpha, floor, keys)


def compare_samples(was: Samples, now: Samples, last: Optional[Samples] = None, alpha: float = ALPHA,
                    floor: Floor = Floor(), keys: Optional[Iterable[Key]] = None) -> list[Change]:
    """compare() of samples() already taken (the false-alarm measurement
    shifts one key's samples): was the baseline's, now the run's, last the
    previous run's alone or None. The run's times are divided by how much
    slower the host ran it as a whole (host_factor) before the test."""
    factor = host_factor(was, now)
    last_factor = host_factor(last, now) if last is not None else 1.0
    changes = []
    for key in sorted(set(was) & set(now)):
        if keys is not None and key not in keys:
            continue
        previous = last.get(key) if last is not None else None
        change = changed(key, was[key], now[key], previous, alpha, floor, factor, last_factor)
        if change:
            changes.append(change)
    changes.sort(key=lambda c: (not c["flagged"], -(c["after_ms"] - c["before_ms"]), c["key"]))
    return changes


# The host factor: on this 2-core TCG host, shared with builds and other
# guests, whole runs of one kernel differ 1x-4x in every time (measured: the
# median ratio of the keys below between runs of one kernel). A kernel change
# slows a few keys, a busy host most of them, so the median ratio over the
# keys the baseline times at FACTOR_MIN_MS or more is the host's (never
# below 1: a fixed sleep does not get faster on a fast host, and a faster
# run must not make one look slower).
FACTOR_MIN_MS = 1.0
FACTOR_MIN_KEYS = 5


def host_factor(was: Samples, now: Samples) -> float:
    """How much slower the host ran `now` than `was`, as a whole (>= 1)."""
    ratios = [statistics.median(now[key]) / statistics.median(was[key]) for key in set(was) & set(now)
              if statistics.median(was[key]) >= FACTOR_MIN_MS]
    if len(ratios) < FACTOR_MIN_KEYS:
        return 1.0
    return max(1.0, statistics.median(ratios))


def changed(key: Key, before: list[float], after: list[float], previous: Optional[list[float]], alpha: float,
            floor: Floor, factor: float = 1.0, previous_factor: float = 1.0) -> Optional[Change]:
    """The change of one key, or None when its median, the host factor
    taken out, did not get slower by the floor."""
    before_ms, after_ms = statistics.median(before), statistics.median(after)
    scaled = [ms / factor for ms in after]
    if not floor.exceeded(before_ms, statistics.median(scaled)):
        return None
    p = one_sided_p(before, scaled)
    new = previous is None or floor.exceeded(statistics.median(previous), after_ms / previous_factor)
    device, driver, callback = describe_key(key)
    return {"key": list(key), "device": device, "driver": driver, "callback": callback,
            "before_ms": round(before_ms, 3), "after_ms": round(after_ms, 3), "host_factor": round(factor, 2),
            "n_before": len(before), "n_after": len(after), "p": p, "flagged": p < alpha and new}


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def detail(change: Change) -> str:
    """"e1000e 0000:00:03.0 bus[suspend]: median 52.6 ms -> 490.6 ms, p < 0.001 (n 5 vs 5)"."""
    who = " ".join(word for word in (change["driver"], change["device"]) if word)
    what = f"{who} {change['callback']}" if who else f"phase {change['callback']}"
    host = f", host {change['host_factor']:.1f}x slower taken out" if change.get("host_factor", 1) > 1.05 else ""
    return (f"{what}: median {change['before_ms']:.1f} ms -> {change['after_ms']:.1f} ms, "
            f"{p_text(change['p'])} (n {change['n_before']} vs {change['n_after']}{host})")


def findings(before: Sequence[Record], after: Sequence[Record], previous: Optional[Sequence[Record]] = None,
             alpha: float = ALPHA, floor: Floor = Floor()) -> list[dict[str, Any]]:
    """The commit gate's findings (kind "latency") of the flagged changes."""
    return as_findings(compare(before, after, previous, alpha, floor))


def as_findings(changes: Iterable[Change]) -> list[dict[str, Any]]:
    """The flagged ones of compare()'s changes as gate findings."""
    return [{"kind": "latency", "device": c["device"], "driver": c["driver"], "callback": c["callback"],
             "before_ms": c["before_ms"], "after_ms": c["after_ms"], "p": c["p"],
             "n": [c["n_before"], c["n_after"]], "detail": detail(c)}
            for c in changes if c["flagged"]]


def table(changes: Sequence[Change], top: int = 10) -> list[dict[str, Any]]:
    """The per-device change as rows for a report or the dashboard: every
    flagged change and the `top` largest others, with p rounded."""
    shown = [c for c in changes if c["flagged"]] + [c for c in changes if not c["flagged"]][:top]
    return [{**{k: c[k] for k in ("device", "driver", "callback", "before_ms", "after_ms", "n_before",
                                   "n_after", "flagged")}, "p": round(c["p"], 4) if math.isfinite(c["p"]) else None}
            for c in shown]


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A table() as text lines."""
    if not rows:
        return ["latency: no callback or phase slower by the floor "
                f"(>= {FLOOR_MS:.0f} ms and >= {FLOOR_RATIO:.0%} on the median)"]
    lines = [f"{'callback':58} {'before ms':>10} {'after ms':>10} {'p':>7}  flagged"]
    for row in rows:
        who = " ".join(w for w in (row["driver"], row["device"], row["callback"]) if w)
        lines.append(f"{who[:58]:58} {row['before_ms']:10.1f} {row['after_ms']:10.1f} "
                     f"{row['p'] if row['p'] is not None else '-':>7}  {'YES' if row['flagged'] else 'no'}")
    return lines


# ------------------------------------------------------------------ absolute limits

# fwts s3's SuspendTooLong / ResumeTooLong: 15 s each by default
# (--s3-suspend-time, --s3-resume-time); judged from the guest's own times.
DEFAULT_LIMITS = {"suspend": 15.0, "resume": 15.0}
LIMIT_FIELDS = {"suspend": "suspend_ms", "resume": "resume_ms"}
LIMIT_PHASE = "latency"


def over_limit(result: Record, limits: Optional[Mapping[str, Optional[float]]]) -> dict[str, Any]:
    """The verdict fields of a cycle whose guest-side suspend or resume time
    (result's suspend_ms, resume_ms) is over its limit in seconds
    ({"suspend": 15, "resume": 15}), or {}."""
    over = []
    for name, seconds in sorted((limits or {}).items()):
        ms = result.get(LIMIT_FIELDS[name])
        if seconds is not None and isinstance(ms, (int, float)) and ms > seconds * 1000:
            over.append(f"{name} took {ms / 1000:.3f} s, over the {seconds:g} s limit")
    if not over:
        return {}
    return {"verdict": records.FAIL, "phase": LIMIT_PHASE, "reason": "; ".join(over)}


# ------------------------------------------------------------------ the run's table

TABLE_FILE = "latency.json"


def write_table(run_dir: str, rows: Sequence[dict[str, Any]], baseline: Iterable[str]) -> None:
    """<run dir>/latency.json: the run's table() rows and the baseline runs
    they were compared with (the commit pipeline, the nightly; the dashboard
    reads it back with read_table)."""
    from lab import files
    files.write_json(os.path.join(run_dir, TABLE_FILE),
                     {"baseline": list(baseline), "alpha": ALPHA, "floor_ms": FLOOR_MS,
                      "floor_ratio": FLOOR_RATIO, "rows": rows}, sort_keys=False)


def read_table(run_dir: str) -> Optional[dict[str, Any]]:
    """A run's latency.json, or None (none written, or unreadable)."""
    from lab import files
    table_value = files.read_json(os.path.join(run_dir, TABLE_FILE))
    return table_value if isinstance(table_value, dict) and isinstance(table_value.get("rows"), list) else None
