"""Dashboard JSON from one or many runs.

  ./pmlab dashboard RESULTS_DIR_OR_RUN_DIRS... [-o dashboard.json] [--strict]

Sections (dashboards/schema/dashboard.v1.json):
  success      per mode: verdict counts, success rate and its Wilson 95 %
               interval: lab.records.pass_rate, the one definition (pass /
               (pass + fail + hang + unfinished); "error", the lab's failure,
               and cycles made to fail on purpose, "injected", are counted but
               not judged). A cycle with only its "started" line is
               "unfinished", counted once, as that.
  buckets      failure buckets (dashboards/buckets.py) with counts per mode and
               first / last occurrence (run id, cycle, host_start).
  lab_errors   the lab's failures (verdict error) apart from the kernel's:
               their share of the cycles against LAB_ERROR_BUDGET, reruns,
               and per cause (the error bucket) count, modes, first / last.
  works_after_resume
               a device guest's devices (lab/devices.py): per device its
               probes after a resume, the works-after-resume rate and its
               Wilson interval (lab.records.works_rate), per mode, probe
               time, first / last failure; the real drivers' slowest
               callbacks (latency rows of lab.devices.TRACE_DRIVERS).
  failures     every cycle that did not pass, oldest first (the newest 500).
  latency      per device and PM phase: callback time median / p95 / max (us)
               from the records' callbacks field, and the cycle of the max
               (max_at: run id, cycle); top_p95 lists the slowest.
  timing       guest suspend_ms / resume_ms of passing cycles per mode:
               fixed histogram bins and percentiles.
  host_time    where a cycle's host wall time goes: per mode, over passing
               cycles with host_phases, the steps of the host timeline in
               their usual order (mean position in the records, then name)
               with n, mean and median seconds, and the mean / median total.
  harness_memory
               per run id and lab.run process (harness_pid): its resident
               set at its first and last record (by cycle number) and the max.
  trends       builds (project commit + kernel series hash + variant, + the
               kernel spec when not the default) in order
               of their first cycle; per mode: pass counts per build, first
               fail, last pass, failing since.
  kernels      one entry per kernel (kernel spec [@ source commit] + series
               hash + config hash + variant, kernel_key), in order of its
               first cycle, to compare kernels side by side: per mode the
               verdict counts and pass rate (lab.records.pass_rate),
               suspend_ms / resume_ms and per PM phase time (records'
               phase_ms) of passing cycles, and the kernel's
               slowest device callbacks (its own latency counts).
  latency_change
               the newest run (by first cycle) against up to
               LATENCY_BASELINE_RUNS runs before it of the same device set
               (lab/latency.py, as the commit gate compares; the newest
               LATENCY_CYCLES cycles of each): per device callback and phase
               slower by the floor, median before / after, p, flagged.
  runs         per run id: cycles, time span, builds, manifests.
  input_errors malformed input, with file and line (also printed on stderr).

Output is a function of the set of records only: sorted keys, no clock
reads, no file names outside input_errors, order-independent statistics.
The same records read from one run directory or from shards of it give the
same dashboard.
"""

import argparse
import collections
import functools
import hashlib
import json
import math
import os
import re
import statistics
import sys
from typing import Any, Iterable, Optional, Sequence

from dashboards import buckets, inputs as inputs_module
from dashboards.buckets import Cycle
from lab import devices, files, latency as latency_gate, records
from lab.kernels import DEFAULT_SPEC
from lab.records import nearest_rank, wilson  # noqa: F401 (the dashboard's statistics are the lab's)

SCHEMA = "pmlab-dashboard/1"
HISTOGRAM_EDGES_MS = [0, 25, 50, 75, 100, 125, 150, 200, 250, 300, 400, 500, 750, 1000, 2000, 5000]
TOP_N = 25
MAX_FAILURES = 500
KERNEL_TOP_N = 10
Section = dict[str, Any]  # a part of the dashboard's JSON
Counts = dict[str, Any]   # latency_counts(): {"us", "errors", "drivers", "max_at"}
Occurrence = dict[str, Any]


def distribution(values: Iterable[float]) -> Optional[dict[str, float]]:
    """n, min, mean, p50, p90, p95, p99, max of values (order-independent)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return {"n": len(ordered), "min": round(ordered[0], 3),
            "mean": round(math.fsum(ordered) / len(ordered), 3),
            "p50": round(statistics.median(ordered), 3), "p90": round(nearest_rank(ordered, 0.90), 3),
            "p95": round(nearest_rank(ordered, 0.95), 3), "p99": round(nearest_rank(ordered, 0.99), 3),
            "max": round(ordered[-1], 3)}


def histogram(values: Iterable[float], edges: list[int] = HISTOGRAM_EDGES_MS) -> list[dict[str, Any]]:
    """[{"lo", "hi", "count"}]: [lo, hi) bins, the last one open (hi null)."""
    ends: list[Optional[int]] = [*edges[1:], None]
    bins: list[dict[str, Any]] = [{"lo": lo, "hi": hi, "count": 0} for lo, hi in zip(edges, ends)]
    for value in values:
        for item in reversed(bins):
            if value >= item["lo"]:
                item["count"] += 1
                break
    return bins


def occurrence(cycle: Cycle) -> Occurrence:
    return {"run_id": cycle["run_id"], "cycle": cycle["cycle"], "host_start": cycle["host_start"],
            "mode": cycle["mode"]}


def order_key(cycle: Cycle) -> tuple[bool, float, str, int]:
    """Chronological order of cycles, deterministic for equal or missing times."""
    start = cycle["start"]
    return (start is None, start if start is not None else 0.0, cycle["run_id"], cycle["cycle"])


def build_key(cycle: Cycle) -> str:
    """commit/series[/variant] of the project, then the kernel it ran on
    when that is not the default tree and config: the unpatched 6.1 and 6.12
    of one commit both have series "none", and a user's --config builds the
    same commit and series, yet none of them may share a trend build."""
    commit = (cycle["commit"] or "unknown")[:12]
    key = f"{commit}/{cycle['series_hash'] or 'none'}"
    key += f"/{cycle['variant']}" if cycle["variant"] else ""
    kernel = _kernel_base(cycle)[0]
    if cycle.get("base_config"):
        kernel += f" config {cycle['config_hash'] or 'unknown'}"
    return key if kernel == DEFAULT_SPEC else f"{key} on {kernel}"


LEGACY_RELEASE = re.compile(r"6\.1(?!\d)")  # 6.1.192+: the only kernel before records named their spec


def kernel_spec_of(cycle: Cycle) -> tuple[str, bool]:
    """(spec, recorded): the record's (or its manifest's) kernel spec; a cycle
    from before specs were recorded ran the default kernel, linux-source-6.1,
    unless its kernelrelease says otherwise."""
    if cycle["kernel_spec"]:
        return cycle["kernel_spec"], True
    release = cycle["kernelrelease"] or cycle["tree_version"]
    if release is None or LEGACY_RELEASE.match(release):
        return DEFAULT_SPEC, False
    return f"kernelrelease {release}", False


def _kernel_base(cycle: Cycle) -> tuple[str, str, Optional[str]]:
    spec, _ = kernel_spec_of(cycle)
    return (spec + (f"@{cycle['source_commit'][:12]}" if cycle["source_commit"] else ""),
            cycle["series_hash"] or "none", cycle["variant"])


def assign_kernels(cycles: Iterable[Cycle]) -> None:
    """Name each cycle's kernel (kernel_key): spec[@source commit]/series
    hash[/config hash][/variant]. The config hash comes from run manifests
    only, so a run without one joins the kernel of the same spec, series and
    variant when the runs that have a manifest agree on its config (one
    config hash known); only where they differ does the config split them
    (and a run without a manifest stands apart). Depends on all the cycles:
    never cached per run."""
    known: dict[tuple[str, str, Optional[str]], set[str]] = {}
    for cycle in cycles:
        configs = known.setdefault(_kernel_base(cycle), set())
        if cycle["config_hash"]:
            configs.add(cycle["config_hash"])
    for cycle in cycles:
        base = _kernel_base(cycle)
        configs = known[base]
        config = cycle["config_hash"] if len(configs) > 1 else next(iter(configs), None)
        cycle["kernel_config"] = config
        cycle["kernel_key"] = "/".join(part for part in (*base[:2], config, base[2]) if part)


def kernel_key(cycle: Cycle) -> str:
    """The cycle's kernel, as assign_kernels() named it."""
    return cycle["kernel_key"]


# ------------------------------------------------------------------ sections

injected = records.injected


def verdict_counts(group: Sequence[Cycle]) -> Section:
    """Counts and the pass rate of normalised cycles (they keep the record's
    status, verdict and expected_verdict, which is all lab.records reads)."""
    rate = records.pass_rate(group)
    return {"cycles": len(group), "counts": records.verdict_counts(group), "injected": rate["injected"],
            "judged": rate["judged"], "rate": rate["rate"], "ci95": rate["ci95"]}


def success(cycles: Sequence[Cycle]) -> Section:
    modes = sorted({c["mode"] for c in cycles})
    return {"definition": records.PASS_RATE_DEFINITION,
            "all": verdict_counts(cycles),
            "modes": {mode: verdict_counts([c for c in cycles if c["mode"] == mode]) for mode in modes}}


def bucket_section(cycles: Iterable[Cycle]) -> list[Section]:
    found: dict[str, Section] = {}
    for cycle in sorted(cycles, key=order_key):
        for name in cycle["buckets"]:
            entry = found.get(name)
            if entry is None:
                entry = found[name] = {"bucket": name, "kind": buckets.kind_of(name), "count": 0, "expected": 0,
                                       "modes": {},
                                       "first": occurrence(cycle), "reason": cycle["reason"],
                                       "evidence": buckets.example_line(cycle, name)}
            entry["count"] += 1
            entry["expected"] += injected(cycle) and cycle["expected_verdict"] in (records.PASS, cycle["verdict"])
            entry["modes"][cycle["mode"]] = entry["modes"].get(cycle["mode"], 0) + 1
            entry["last"] = occurrence(cycle)
    return sorted(found.values(), key=lambda e: (-e["count"], e["bucket"]))


# Lab errors above this share of the cycles make the lab, not the kernel,
# the first thing to fix: the budget line of the lab_errors section.
LAB_ERROR_BUDGET = 0.01


def lab_errors(cycles: Sequence[Cycle]) -> Section:
    """The lab's own failures, apart from the kernel's: how many cycles the
    lab failed (verdict error) against the budget, and per cause (the error
    bucket, dashboards/buckets.py) their count, modes and an example. They
    are never in the pass rate; a cycle rerun after one (rerun_of) is. An
    error provoked on purpose (a test's early press) is no lab problem:
    counted with the injected cycles, not here; nor is a knob the guest
    rejected (lab.records.request_error: the request's)."""
    errors = [c for c in sorted(cycles, key=order_key)
              if c["verdict"] == records.ERROR and not injected(c) and not records.request_error(c)]
    causes: dict[str, Section] = {}
    for cycle in errors:
        cause = buckets.error_class(cycle["reason"])
        entry = causes.get(cause)
        if entry is None:
            entry = causes[cause] = {"cause": cause, "count": 0, "modes": {}, "reason": cycle["reason"],
                                     "first": occurrence(cycle)}
        entry["count"] += 1
        entry["modes"][cycle["mode"]] = entry["modes"].get(cycle["mode"], 0) + 1
        entry["last"] = occurrence(cycle)
    share = len(errors) / len(cycles) if cycles else 0.0
    return {"definition": "verdict error: the lab failed (a race of its own, QEMU, libvirt, the judge), "
                          "not the kernel; counted here, never in the pass rate",
            "budget": LAB_ERROR_BUDGET, "cycles": len(cycles), "errors": len(errors),
            "share": round(share, 4), "over_budget": share > LAB_ERROR_BUDGET,
            "reruns": sum(c["rerun_of"] is not None for c in cycles),
            "causes": sorted(causes.values(), key=lambda e: (-e["count"], e["cause"]))}


def works_after_resume(cycles: Sequence[Cycle], latency_section: Section) -> Section:
    """A device guest's devices (lab/devices.py): per device, how often its
    probe passed after a resume (lab.records.works_rate, the one
    definition) overall and per mode, its probe time, its first and last
    failure with the error; and the slowest callbacks of the real drivers
    (the latency section's rows whose driver is one of theirs)."""
    per_device: dict[str, Section] = {}
    for cycle in sorted(cycles, key=order_key):
        for probe in cycle["probes"]:
            entry = per_device.setdefault(probe["device"], {"device": probe["device"], "probe": probe["probe"],
                                                            "all": [], "modes": {}, "ms": [],
                                                            "first_failure": None, "last_failure": None})
            entry["all"].append(probe)
            entry["modes"].setdefault(cycle["mode"], []).append(probe)
            if probe["ms"] is not None:
                entry["ms"].append(probe["ms"])
            if not probe["ok"]:
                failure = dict(occurrence(cycle), error=probe["error"])
                entry["first_failure"] = entry["first_failure"] or failure
                entry["last_failure"] = failure
    rows = []
    for name in sorted(per_device):
        entry = per_device[name]
        rows.append({"device": name, "probe": entry["probe"], **records.works_rate(entry["all"]),
                     "modes": {mode: records.works_rate(probes) for mode, probes in sorted(entry["modes"].items())},
                     "probe_ms": distribution(entry["ms"]) if entry["ms"] else None,
                     "first_failure": entry["first_failure"], "last_failure": entry["last_failure"]})
    real = sorted(({"device": device, "driver": block["driver"], "phase": phase, **stats}
                   for device, block in latency_section["devices"].items()
                   if set((block["driver"] or "").split(",")) & devices.TRACE_DRIVERS
                   for phase, stats in block["phases"].items() if stats["n"]),
                  key=lambda r: (-r["p95"], -r["max"], r["device"], r["phase"]))
    return {"definition": records.WORKS_RATE_DEFINITION, "devices": rows,
            "cycles": sum(1 for c in cycles if c["probes"]), "slowest_callbacks": real[:TOP_N]}


def failures(cycles: Iterable[Cycle]) -> Section:
    failed = [c for c in sorted(cycles, key=order_key) if c["verdict"] not in (records.PASS, records.INTERRUPTED)]
    rows = [dict(occurrence(c), verdict=c["verdict"], expected_verdict=c["expected_verdict"],
                 injected=c[records.INJECTED_FIELD], unfinished=c["unfinished"], phase=c["phase"],
                 reason=c["reason"], buckets=c["buckets"]) for c in failed[-MAX_FAILURES:]]
    return {"total": len(failed), "shown": len(rows), "cycles": rows}


# Records of one callback layout are counted together, LATENCY_BATCH at a
# time: their durations as columns, one a callback, counted and searched by
# C code (Counter.update, max, index) instead of a Python step per value.
LATENCY_BATCH = 256


class _LayoutBatch:
    """The records of one callback layout waiting to be counted."""

    def __init__(self, calls: tuple[tuple[str, str, Optional[str]], ...], keys: tuple[int, ...]) -> None:
        self.calls = calls  # kept alive, so the id it is found by stays unique
        self.keys = keys    # per callback row, its key index
        self.durations: list[list[Optional[float]]] = []
        self.at: list[tuple[str, Optional[int]]] = []  # per record, (run_id, cycle)

    def count(self, us: dict[int, collections.Counter[Optional[float]]], max_at: dict[int, list[Any]]) -> None:
        """Add the waiting records to us {key index: Counter of
        microseconds} and max_at {key index: [us, run_id, cycle]}."""
        for key, column in zip(self.keys, zip(*self.durations)):
            counter = us.get(key)
            if counter is None:
                counter = us[key] = collections.Counter()
            counter.update(column)
            slowest = _slowest_in(column)
            if slowest is not None:
                top, row = slowest
                held = max_at.get(key)
                if held is None or top >= held[0]:
                    max_at[key] = _slower(held, [top, *self.at[row]])
        self.durations, self.at = [], []


def _slowest_in(column: Sequence[Optional[float]]) -> Optional[tuple[float, int]]:
    """(largest finite duration, index of its first occurrence) of a column,
    or None when it has no finite one (None: a call that never returned)."""
    try:
        top: Any = max(column)  # type: ignore[type-var]  # a None raises TypeError, handled below
        finite = math.isfinite(sum(column))  # type: ignore[arg-type]
    except TypeError:  # a None
        finite = False
    if not finite:
        values = [value for value in column if value is not None and math.isfinite(value)]
        if not values:
            return None
        top = max(values)
    return top, column.index(top)


def _run_and_cycle(record: records.Record) -> tuple[str, Optional[int]]:
    return (record.get("run_id") or "", record.get("cycle"))


def latency_counts(raw_records: Iterable[records.Record]) -> Counts:
    """The callback latencies of raw records (as a lab.records.RunReader read
    them: each answers through its own run), mergeable: {"us": Counter of
    ((device, phase), microseconds or None), "errors": Counter of (device,
    phase), "drivers": {device: set}, "max_at": {(device, phase): [us,
    run_id, cycle] of its slowest call}}. Counting values instead of listing
    them keeps the exact percentiles and is small (most callbacks take a few
    microseconds). Records are taken in (run, cycle) order, so a column's
    first maximum is its earliest cycle's, as _slower() wants."""
    us: dict[int, collections.Counter[Optional[float]]] = {}
    errors: collections.Counter[int] = collections.Counter()
    drivers: dict[str, set[str]] = {}
    max_at: dict[int, list[Any]] = {}
    key_index: dict[tuple[str, str], int] = {}  # (device, phase) -> a small int: cheaper to hash ~1600 times a record
    batches: dict[int, _LayoutBatch] = {}    # id(calls) -> _LayoutBatch; version 3 records share a few layouts (inputs.Inputs.shared_values)
    for record in sorted(raw_records, key=_run_and_cycle):
        if injected(record):  # a fault or delay injected on purpose times nothing of the kernel's
            continue
        calls, durations, failed = records.callback_columns(record)
        batch = batches.get(id(calls))
        if batch is None:
            batch = _LayoutBatch(calls, tuple(key_index.setdefault((device, buckets.callback_phase(cb)),
                                                                   len(key_index))
                                              for device, cb, _ in calls))
            if len(batches) < 256:  # older records each have their own: counted at once below
                batches[id(calls)] = batch
            for device, _, driver in calls:
                if driver:
                    drivers.setdefault(device, set()).add(driver)
        errors.update(batch.keys[row] for row in failed)
        batch.durations.append(durations)
        batch.at.append(_run_and_cycle(record))
        if len(batch.durations) >= LATENCY_BATCH or batches.get(id(calls)) is not batch:
            batch.count(us, max_at)
    for batch in batches.values():
        batch.count(us, max_at)
    names = list(key_index)
    return {"us": collections.Counter({(names[index], value): n
                                       for index, counter in us.items() for value, n in counter.items()}),
            "errors": collections.Counter({names[index]: n for index, n in errors.items()}),
            "drivers": drivers, "max_at": {names[index]: held for index, held in max_at.items()}}


def _slower(held: Optional[list[Any]], candidate: list[Any]) -> list[Any]:
    """Of two [us, run_id, cycle], the slower; of equals the earlier cycle,
    so the answer does not depend on the order records are read in."""
    if held is None:
        return candidate
    if candidate[0] != held[0]:
        return candidate if candidate[0] > held[0] else held
    return candidate if (candidate[1], candidate[2]) < (held[1], held[2]) else held


def merge_latency_counts(parts: Iterable[Counts]) -> Counts:
    us: collections.Counter[tuple[tuple[str, str], Optional[float]]] = collections.Counter()
    errors: collections.Counter[tuple[str, str]] = collections.Counter()
    drivers: dict[str, set[str]] = {}
    max_at: dict[tuple[str, str], list[Any]] = {}
    for part in parts:
        us.update(part["us"])
        errors.update(part["errors"])
        for device, names in part["drivers"].items():
            drivers.setdefault(device, set()).update(names)
        for key, held in part["max_at"].items():
            max_at[key] = _slower(max_at.get(key), held)
    return {"us": us, "errors": errors, "drivers": drivers, "max_at": max_at}


def _counted_rank(counts: Iterable[tuple[float, int]], rank: int) -> float:
    """The rank-th (from 1) value of the sorted values counted in [(value, n)]."""
    for value, n in counts:
        rank -= n
        if rank <= 0:
            return value
    raise IndexError(rank)


def latency(counted: Counts) -> Section:
    """The latency section from latency_counts()."""
    samples: dict[tuple[str, str], dict[str, Any]] = {}  # (device, phase) -> {"us": [(value, n)], "errors": n, "unfinished": n}
    for (key, value), n in counted["us"].items():
        entry = samples.setdefault(key, {"us": [], "errors": 0, "unfinished": 0})
        if value is None or not math.isfinite(value):
            entry["unfinished"] += n
        else:
            entry["us"].append((value, n))
    for key, n in counted["errors"].items():
        samples.setdefault(key, {"us": [], "errors": 0, "unfinished": 0})["errors"] += n
    devices: dict[str, Section] = {}
    rows = []
    for (device, phase), entry in samples.items():
        ordered = sorted(entry["us"])
        total = sum(n for _, n in ordered)
        if total:
            middle = (_counted_rank(ordered, (total + 1) // 2) + _counted_rank(ordered, total // 2 + 1)) / 2 \
                if total % 2 == 0 else _counted_rank(ordered, (total + 1) // 2)
            median, p95, top = middle, _counted_rank(ordered, max(1, math.ceil(0.95 * total))), ordered[-1][0]
        stats = {"n": total, "errors": entry["errors"], "unfinished": entry["unfinished"],
                 "median": round(median, 1) if total else None,
                 "p95": round(p95, 1) if total else None,
                 "max": round(top, 1) if total else None}
        held = counted["max_at"].get((device, phase))
        stats["max_at"] = {"run_id": held[1], "cycle": held[2]} if total and held else None
        block = devices.setdefault(device, {"driver": ",".join(sorted(counted["drivers"].get(device, ()))) or None,
                                            "phases": {}})
        block["phases"][phase] = stats
        if total:
            rows.append({"device": device, "driver": block["driver"], "phase": phase, **stats})
    rows.sort(key=lambda r: (-r["p95"], -r["max"], r["device"], r["phase"]))
    return {"unit": "us", "devices": devices, "top_p95": rows[:TOP_N]}


def timing(cycles: Iterable[Cycle]) -> Section:
    passing = [c for c in cycles if c["verdict"] == records.PASS]
    modes = {}
    for mode in sorted({c["mode"] for c in passing}):
        block: Section = {}
        for field in ("suspend_ms", "resume_ms"):
            values = [c[field] for c in passing if c["mode"] == mode and c[field] is not None]
            if values:
                block[field] = {"stats": distribution(values), "histogram": histogram(values)}
        if block:
            modes[mode] = block
    return {"unit": "ms", "cycles": "pass", "bin_edges": HISTOGRAM_EDGES_MS, "modes": modes}


def step_order(group: Iterable[Cycle], field: str = "host_phases") -> list[str]:
    """The steps of host_phases (or phase_ms) in their usual order: by mean
    position in the records (the lab writes them in timeline order), then by
    name."""
    positions: dict[str, list[int]] = {}
    for cycle in group:
        for index, step in enumerate(cycle[field]):
            positions.setdefault(step, []).append(index)
    return sorted(positions, key=lambda step: (math.fsum(positions[step]) / len(positions[step]), step))


def mean_median(values: Sequence[float]) -> dict[str, float]:
    return {"n": len(values), "mean": round(math.fsum(values) / len(values), 3),
            "median": round(statistics.median(values), 3)}


def passing_times(group: Iterable[Cycle]) -> Section:
    """distribution() of suspend_ms and resume_ms over the passing cycles (as
    timing()), and per PM phase of their phase_ms (n, p50, p95; in the
    phases' order)."""
    passing = [c for c in group if c["verdict"] == records.PASS]
    out: Section = {field: distribution([c[field] for c in passing if c[field] is not None])
           for field in ("suspend_ms", "resume_ms")}
    timed = [c for c in passing if c["phase_ms"]]
    out["phases"] = []
    for phase in step_order(timed, "phase_ms"):
        stats = distribution([c["phase_ms"][phase] for c in timed if phase in c["phase_ms"]])
        assert stats is not None, "step_order names only the phases some cycle timed"
        out["phases"].append({"phase": phase, "n": stats["n"], "p50": stats["p50"], "p95": stats["p95"]})
    return out


def kernels(cycles: Iterable[Cycle], kernel_latency: dict[str, Counts]) -> Section:
    """The kernels side by side; kernel_latency: {kernel_key: latency_counts}."""
    found: dict[str, Section] = {}
    for cycle in sorted(cycles, key=order_key):
        key = kernel_key(cycle)
        entry = found.get(key)
        if entry is None:
            spec, recorded = kernel_spec_of(cycle)
            entry = found[key] = {"key": key, "kernel_spec": spec, "spec_recorded": recorded,
                                  "source_commit": cycle["source_commit"], "series_hash": cycle["series_hash"],
                                  "config_hash": cycle["kernel_config"], "variant": cycle["variant"],
                                  "first_start": cycle["host_start"], "_runs": set(), "_releases": set(),
                                  "_cycles": []}
        entry["last_start"] = cycle["host_start"]
        entry["_runs"].add(cycle["run_id"])
        entry["_releases"].update(r for r in (cycle["kernelrelease"], cycle["tree_version"]) if r)
        entry["_cycles"].append(cycle)
    out = []
    for key, entry in found.items():  # insertion order: by first cycle
        group = entry.pop("_cycles")
        entry["runs"] = sorted(entry.pop("_runs"))
        entry["releases"] = sorted(entry.pop("_releases"))
        entry["all"] = verdict_counts(group)
        entry["modes"] = {mode: dict(verdict_counts([c for c in group if c["mode"] == mode]),
                                     **passing_times([c for c in group if c["mode"] == mode]))
                          for mode in sorted({c["mode"] for c in group})}
        counted = kernel_latency.get(key)
        entry["slowest"] = latency(counted)["top_p95"][:KERNEL_TOP_N] if counted else []
        out.append(entry)
    return {"definition": records.PASS_RATE_DEFINITION, "top_n": KERNEL_TOP_N, "kernels": out}


def host_time(cycles: Iterable[Cycle]) -> Section:
    timed = [c for c in cycles if c["verdict"] == records.PASS and c["host_phases"]]
    modes = {}
    for mode in sorted({c["mode"] for c in timed}):
        group = [c for c in timed if c["mode"] == mode]
        totals = mean_median([math.fsum(c["host_phases"].values()) for c in group])
        steps = [dict(step=step, **mean_median([c["host_phases"][step] for c in group if step in c["host_phases"]]))
                 for step in step_order(group)]
        modes[mode] = {"cycles": len(group), "mean_total": totals["mean"], "median_total": totals["median"],
                       "steps": steps}
    return {"unit": "s", "cycles": "pass", "modes": modes}


def harness_memory(cycles: Iterable[Cycle]) -> Section:
    processes: dict[tuple[str, int], Section] = {}
    for cycle in sorted(cycles, key=lambda c: (c["run_id"], c["cycle"])):
        pid, rss = cycle["harness_pid"], cycle["harness_rss_kib"]
        if pid is None or rss is None:
            continue
        entry = processes.setdefault((cycle["run_id"], pid), {"pid": pid, "cycles": 0, "first_cycle": cycle["cycle"],
                                                              "first_kib": rss, "max_kib": rss})
        entry["cycles"] += 1
        entry.update(last_cycle=cycle["cycle"], last_kib=rss, max_kib=max(entry["max_kib"], rss))
    by_run: dict[str, list[Section]] = {}
    for (run_id, _), entry in sorted(processes.items(), key=lambda item: (item[0][0], item[1]["first_cycle"],
                                                                           item[0][1])):
        by_run.setdefault(run_id, []).append(entry)
    return {"unit": "KiB", "runs": by_run}


def trends(cycles: Sequence[Cycle]) -> Section:
    builds: dict[str, Section] = {}
    for cycle in sorted(cycles, key=order_key):
        key = build_key(cycle)
        build = builds.get(key)
        if build is None:
            build = builds[key] = {"key": key, "commit": cycle["commit"], "series_hash": cycle["series_hash"],
                                   "variant": cycle["variant"], "first_start": cycle["host_start"],
                                   "runs": [], "kernels": [], "modes": {}, "_cycles": {}}
        build["last_start"] = cycle["host_start"]
        if kernel_key(cycle) not in build["kernels"]:
            build["kernels"].append(kernel_key(cycle))
        if cycle["run_id"] not in build["runs"]:
            build["runs"].append(cycle["run_id"])
        build["_cycles"].setdefault(cycle["mode"], []).append(cycle)
    ordered = list(builds.values())  # dicts keep insertion order: chronological by first cycle
    for build in ordered:
        build["runs"].sort()
        for mode, group in sorted(build.pop("_cycles").items()):
            block = verdict_counts(group)
            natural = [c for c in group if not injected(c)]
            bad = [c for c in natural if c["verdict"] in (records.FAIL, records.HANG, records.UNFINISHED)]
            good = [c for c in natural if c["verdict"] == records.PASS]
            block["status"] = "fail" if bad else ("pass" if good else "unknown")
            block["first_fail"] = occurrence(bad[0]) if bad else None
            block["last_pass"] = occurrence(good[-1]) if good else None
            build["modes"][mode] = block
    modes = {}
    for mode in sorted({c["mode"] for c in cycles}):
        history = [(b["key"], b["modes"][mode]) for b in ordered if mode in b["modes"]
                   and b["modes"][mode]["status"] != "unknown"]
        first_fail = next(({"build": key, **m["first_fail"]} for key, m in history if m["status"] == "fail"), None)
        last_pass = next(({"build": key, **m["last_pass"]} for key, m in reversed(history) if m["status"] == "pass"),
                         None)
        failing_since = None
        for key, block in reversed(history):
            if block["status"] != "fail":
                break
            failing_since = {"build": key, **block["first_fail"]}
        modes[mode] = {"builds": len(history), "current": history[-1][1]["status"] if history else "unknown",
                       "first_fail": first_fail, "last_pass": last_pass, "failing_since": failing_since}
    return {"builds": ordered, "modes": modes}


def runs(cycles: Iterable[Cycle], manifests: dict[str, list[dict[str, Any]]]) -> dict[str, Section]:
    out: dict[str, Section] = {}
    for cycle in sorted(cycles, key=order_key):
        run = out.setdefault(cycle["run_id"], {"cycles": 0, "modes": {}, "builds": [], "kernels": [],
                                               "first_start": cycle["host_start"]})
        run["cycles"] += 1
        run["modes"][cycle["mode"]] = run["modes"].get(cycle["mode"], 0) + 1
        run["last_start"] = cycle["host_start"]
        if build_key(cycle) not in run["builds"]:
            run["builds"].append(build_key(cycle))
        if kernel_key(cycle) not in run["kernels"]:
            run["kernels"].append(kernel_key(cycle))
    for run_id, run in out.items():
        seen: set[str] = set()
        run["manifests"] = []
        for manifest in manifests.get(run_id, []):
            brief = manifest_brief(manifest)
            text = json.dumps(brief, sort_keys=True)
            if text not in seen:
                seen.add(text)
                run["manifests"].append(brief)
        run["manifests"].sort(key=lambda m: json.dumps(m, sort_keys=True))
    return out


def manifest_brief(manifest: dict[str, Any]) -> dict[str, Any]:
    """What identifies a run's setup (no shard number, nothing per-run)."""
    project, kernel = manifest.get("project") or {}, manifest.get("kernel") or {}
    tools, host = manifest.get("tools") or {}, manifest.get("host") or {}
    return {"commit": project.get("commit"), "dirty": project.get("dirty"),
            "tree_version": kernel.get("tree_version"), "kernelrelease": kernel.get("kernelrelease"),
            "series_hash": kernel.get("series_hash"), "config_hash": kernel.get("config_hash"),
            "variant": kernel.get("variant"), "kernel_spec": kernel.get("kernel_spec"),
            "source_commit": kernel.get("source_commit"),
            "qemu": tools.get("qemu"), "ovmf": tools.get("ovmf"), "libvirtd": tools.get("libvirtd"),
            "libvirt_daemon_system": tools.get("libvirt_daemon_system"),
            "host": host.get("hostname"), "host_kernel": host.get("kernel"), "host_os": host.get("os")}


# ------------------------------------------------------------------ entry points

def build(loaded: inputs_module.Inputs, kernel_latency: Optional[dict[str, Counts]] = None) -> Section:
    """The dashboard dict from dashboards.inputs.load() output (and, when the
    caller has them, the latency counts of its cycles per kernel_key)."""
    cycles = loaded.cycles
    for cycle in cycles:
        cycle["buckets"] = buckets.classify(cycle)
    assign_kernels(cycles)
    if kernel_latency is None:
        per_kernel: dict[str, list[records.Record]] = {}
        for cycle, record in zip(cycles, loaded.records):
            per_kernel.setdefault(kernel_key(cycle), []).append(record)
        kernel_latency = {key: latency_counts(group) for key, group in per_kernel.items()}
    latency_counted = merge_latency_counts(kernel_latency.values())
    latency_section = latency(latency_counted)
    return {
        "schema": SCHEMA,
        "inputs": {"cycles": len(cycles), "runs": len({c["run_id"] for c in cycles}),
                   "excluded_cycles": loaded.excluded, "modes": sorted({c["mode"] for c in cycles}),
                   "first_start": min((c["host_start"] for c in cycles if c["host_start"]), default=None,
                                      key=lambda s: inputs_module.epoch(s) or 0.0),
                   "last_start": max((c["host_start"] for c in cycles if c["host_start"]), default=None,
                                     key=lambda s: inputs_module.epoch(s) or 0.0)},
        "input_errors": loaded.sorted_errors(),
        "success": success(cycles),
        "buckets": bucket_section(cycles),
        "lab_errors": lab_errors(cycles),
        "failures": failures(cycles),
        "latency": latency_section,
        "works_after_resume": works_after_resume(cycles, latency_section),
        "timing": timing(cycles),
        "host_time": host_time(cycles),
        "harness_memory": harness_memory(cycles),
        "trends": trends(cycles),
        "kernels": kernels(cycles, kernel_latency),
        "runs": runs(cycles, loaded.manifests),
        "latency_change": latency_change(loaded),
    }


LATENCY_BASELINE_RUNS = 10  # as pipelines/commit.py's BASELINE_RUNS
LATENCY_CYCLES = 100        # of each run: a nightly's thousands would cost seconds a dashboard


def latency_change(loaded: inputs_module.Inputs) -> Section:
    """The latency_change section: lab.latency's table of the newest run."""
    first: dict[str, tuple[float, Any]] = {}
    for cycle in loaded.cycles:
        at = inputs_module.epoch(cycle["host_start"]) if cycle["host_start"] else None
        held = first.get(cycle["run_id"])
        first[cycle["run_id"]] = (min(held[0], at or held[0]) if held else (at or 0.0), cycle["devices"])
    order = sorted(first, key=lambda run_id: (first[run_id][0], run_id))
    if len(order) < 2:
        return {"run": order[-1] if order else None, "baseline": [], "rows": []}
    newest = order[-1]
    baseline = [run_id for run_id in reversed(order[:-1])
                if first[run_id][1] == first[newest][1]][:LATENCY_BASELINE_RUNS]
    by_run = _records_by_run(loaded, {newest, *baseline})
    if not baseline:
        return {"run": newest, "baseline": [], "rows": []}
    pooled = [record for run_id in baseline for record in by_run[run_id]]
    changes = latency_gate.compare(pooled, by_run[newest], by_run[baseline[0]] if len(baseline) > 1 else None)
    return {"run": newest, "baseline": baseline, "rows": latency_gate.table(changes)}


def _records_by_run(loaded: inputs_module.Inputs, wanted: set[str]) -> dict[str, list[records.Record]]:
    """{run id: its newest LATENCY_CYCLES raw records} of the wanted runs
    (records behind a cached part are read again, as lab.records reads
    them: JSON only, no normalising, so a cached nightly of thousands of
    cycles costs its parse alone)."""
    found: dict[str, list[records.Record]] = {run_id: [] for run_id in wanted}
    for cycle, record in zip(loaded.cycles, loaded.records):
        if cycle["run_id"] in wanted and record is not None:
            found[cycle["run_id"]].append(record)
    cached = {cycle["run_id"] for cycle, record in zip(loaded.cycles, loaded.records)
              if record is None and cycle["run_id"] in wanted}
    for part in loaded.parts:
        if not any(run_id in cached for run_id, _ in part.entries):
            continue
        for record in records.RunReader(part.path, loaded.shared_values).read():
            if record.get("run_id") in cached:
                found[record["run_id"]].append(record)
    return {run_id: sorted(recs, key=lambda r: r["cycle"])[-LATENCY_CYCLES:] for run_id, recs in found.items()}


# ------------------------------------------------------------------ the per-run cache

# A run's cycles, normalised, and their callback latencies as counts
# (latency_counts) are kept in RUN_DIR/dashboard-cache.json, valid while the
# run's cycles file (size, mtime, lines), shared.jsonl, manifest.json, the
# run directory's name and this code (CODE_FILES) are the same. A dashboard
# over many runs then reads only the runs that changed. The counts of all
# runs add up to those of a recompute; a cycle that is also in another file
# and lost to that copy (inputs.load) makes its file counted again from its
# records. The merged dashboard equals the full recompute
# (pytest/test_dashboard.py, dashboards/bench-compute).

CACHE_FILE = "dashboard-cache.json"
CODE_FILES = ("dashboards/compute.py", "dashboards/inputs.py", "dashboards/buckets.py", "dashboards/schemas.py",
              "dashboards/schema/" + inputs_module.schemas.CYCLE_RECORD, "dashboards/schema/run-manifest.v1.json",
              "lab/records.py", "lab/trace.py", "lab/console.py", "lab/devices.py", "lab/latency.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def code_version() -> str:
    digest = hashlib.sha256()
    for name in CODE_FILES:
        with open(os.path.join(REPO, name), "rb") as source:
            digest.update(name.encode() + b"\0" + source.read() + b"\0")
    return digest.hexdigest()[:20]


def _stamp(path: str) -> Optional[list[int]]:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return [status.st_size, status.st_mtime_ns]


def cache_key(cycles_file: str, manifest: Optional[dict[str, Any]]) -> dict[str, Any]:
    run_dir = os.path.dirname(os.path.abspath(cycles_file))
    with open(cycles_file, "rb") as source:
        lines = source.read().count(b"\n")
    return {"code": code_version(), "cycles": _stamp(cycles_file), "lines": lines,
            "shared": _stamp(records.shared_path(cycles_file)), "run_dir": os.path.basename(run_dir),
            "manifest": hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()}


def _counts_to_json(counted: Counts) -> dict[str, Any]:
    return {"us": [[device, phase, value, n] for ((device, phase), value), n in counted["us"].items()],
            "errors": [[device, phase, n] for (device, phase), n in counted["errors"].items()],
            "drivers": {device: sorted(names) for device, names in counted["drivers"].items()},
            "max_at": [[device, phase, *held] for (device, phase), held in counted["max_at"].items()]}


def _counts_from_json(data: dict[str, Any]) -> Counts:
    return {"us": collections.Counter({((device, phase), value): n for device, phase, value, n in data["us"]}),
            "errors": collections.Counter({(device, phase): n for device, phase, n in data["errors"]}),
            "drivers": {device: set(names) for device, names in data["drivers"].items()},
            "max_at": {(device, phase): [us, run_id, cycle] for device, phase, us, run_id, cycle in data["max_at"]}}


def _cached_cycle(cycle: Cycle) -> Cycle:
    """What the dashboard uses of a normalised cycle: its evidence serves
    only to find lines about callback order (buckets)."""
    return dict(cycle, evidence=[line for line in cycle["evidence"] if buckets.ORDERING_LINE.search(line)])


def read_part_cached(cycles_file: str, manifest: Optional[dict[str, Any]],
                     shared_values: Optional[records.SharedValues] = None) -> inputs_module.Part:
    """inputs.read_part with RUN_DIR/dashboard-cache.json (best effort: a
    cache that cannot be read or written is a recompute, never an error)."""
    try:
        key = cache_key(cycles_file, manifest)
    except OSError:
        return inputs_module.read_part(cycles_file, manifest, shared_values)
    path = os.path.join(os.path.dirname(os.path.abspath(cycles_file)), CACHE_FILE)
    try:
        with open(path) as source:
            cached = json.load(source)
        if cached.get("key") == key:
            part = inputs_module.Part(cycles_file)
            part.problems = [tuple(item) for item in cached["problems"]]
            part.excluded = cached["excluded"]
            part.entries = {(run_id, number): (cycle, rank, None) for run_id, number, cycle, rank in cached["entries"]}
            part.latency = _counts_from_json(cached["latency"])
            return part
    except (OSError, ValueError, KeyError, TypeError):
        pass
    part = inputs_module.read_part(cycles_file, manifest, shared_values)
    part.latency = latency_counts(record for _, _, record in part.entries.values())
    data = {"key": key, "problems": part.problems, "excluded": part.excluded,
            "entries": [[run_id, number, _cached_cycle(cycle), rank]
                        for (run_id, number), (cycle, rank, _) in part.entries.items()],
            "latency": _counts_to_json(part.latency)}
    try:
        files.write_json(path, data, sort_keys=False, compact=True)
    except (OSError, ValueError):
        pass  # a cache: the next compute reads the records again
    return part


def merged_latency_counts(loaded: inputs_module.Inputs) -> dict[str, Counts]:
    """The latency counts of the loaded cycles per kernel_key from the parts'
    own counts (a run is one kernel); a part that lost a cycle to a copy
    elsewhere, or that holds cycles of several kernels, is counted from its
    records."""
    assign_kernels(loaded.cycles)  # the parts' winning cycles are these very dicts
    per_kernel: dict[str, list[Counts]] = {}
    for part in loaded.parts:
        gone = set(loaded.lost.get(part.path) or ())
        keys = {key: kernel_key(cycle) for key, (cycle, _, _) in part.entries.items() if key not in gone}
        if part.latency is not None and not gone and len(set(keys.values())) == 1:
            per_kernel.setdefault(next(iter(keys.values())), []).append(part.latency)
            continue
        entries = part.entries
        if any(record is None for _, _, record in entries.values()):
            # the records behind a cached part
            entries = inputs_module.read_part(part.path, None, loaded.shared_values).entries
        grouped: dict[str, list[records.Record]] = {}
        for key, kernel in keys.items():  # the cycle as loaded (with its manifest) names the kernel
            grouped.setdefault(kernel, []).append(entries[key][2])
        for kernel, group in grouped.items():
            per_kernel.setdefault(kernel, []).append(latency_counts(group))
    return {kernel: merge_latency_counts(parts) for kernel, parts in per_kernel.items()}


def compute(paths: Sequence[str], cache: bool = False) -> Section:
    """The dashboard of the runs under paths; cache: use and keep the per-run
    caches (RUN_DIR/dashboard-cache.json)."""
    if not cache:
        return build(inputs_module.load(paths))
    loaded = inputs_module.load(paths, read=read_part_cached)
    return build(loaded, merged_latency_counts(loaded))


def dumps(dashboard: Section) -> str:
    return json.dumps(dashboard, sort_keys=True, indent=1, ensure_ascii=True) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="pmlab dashboard JSON from result runs")
    parser.add_argument("paths", nargs="+", metavar="RESULTS_DIR_OR_RUN_DIR",
                        help="a results directory (every run under it), a run directory or a cycles.jsonl")
    parser.add_argument("-o", "--output", help="write here (default: stdout)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any input was malformed")
    parser.add_argument("--no-cache", action="store_true",
                        help="recompute every run (default: reuse and keep RUN_DIR/dashboard-cache.json)")
    args = parser.parse_args(argv)
    dashboard = compute(args.paths, cache=not args.no_cache)
    for error in dashboard["input_errors"]:
        where = error["file"] + (f":{error['line']}" if error["line"] else "")
        print(f"{where}: {error['message']}", file=sys.stderr)
    text = dumps(dashboard)
    if args.output:
        files.write_atomically(args.output, text)
        print(f"dashboard: {dashboard['inputs']['cycles']} cycles from {dashboard['inputs']['runs']} runs, "
              f"{len(dashboard['input_errors'])} input errors -> {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 1 if args.strict and dashboard["input_errors"] else 0


if __name__ == "__main__":  # ./pmlab dashboard is the command
    from lab.entry_points import redirect
    sys.exit(redirect("dashboards.compute", "dashboard"))
