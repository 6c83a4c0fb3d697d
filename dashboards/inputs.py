"""Reading results for the dashboard: run directories, their cycles.jsonl,
summary.json and manifest.json, checked against dashboards/schema/.

Nothing here trusts its input. A line that is not JSON, not an object, or
whose core fields (cycle, status, mode, run_id, verdict) are missing or of the
wrong type is reported (file, line, why) and skipped; a field of the wrong
type elsewhere is reported and dropped (a malformed device in callbacks drops
that device only, a malformed step of host_phases that step only), the rest
of the record is kept. Reports never stop the other lines or the other runs.

The cycles of all inputs are merged by (run id, cycle number), the run id
being the record's own run_id (the lab writes it on every line), so a run
split over several directories (shards) reads exactly like the same records
in one directory. Which line of a cycle counts and what a cycle with only
its "started" line is ("unfinished") is lab.records' rule: this module
reads every file through a lab.records.RunReader (the records it returns
know their run, for their callbacks).
"""

import datetime
import hashlib
import json
import math
import os

from dashboards import schemas
from lab import records as records_module
from lab.records import cycles_path

CORE = ("cycle", "status", "mode", "run_id", "verdict")
PER_DEVICE = ("callbacks", "pmtest")
PER_ENTRY = PER_DEVICE + ("host_phases", "phase_ms")  # a bad entry drops that entry, not the whole field


class Inputs:
    def __init__(self):
        self.cycles = []          # normalised cycles, merged
        self.records = []         # their raw records, in the same order
        self.parts = []           # a Part per cycles file read
        self.lost = {}
        self.errors = []          # {"file", "line", "message"}
        self.excluded = 0         # cycles dropped because their last line was invalid
        self.manifests = {}       # run id -> [manifest, ...]
        # the runs' shared values (record version 3), held and decoded once for all runs
        self.shared_values = records_module.SharedValues()

    def error(self, path, line, message):
        self.errors.append({"file": path, "line": line, "message": message})

    def sorted_errors(self):
        return sorted(self.errors, key=lambda e: (e["file"], e["line"] or 0, e["message"]))


def find_run_dirs(paths, inputs):
    """Run directories (holding cycles.jsonl) named by or under `paths`.
    Symlinks under a results directory (results/latest) are skipped; a run
    named twice is read once."""
    found, seen = [], set()

    def add(path):
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            found.append(path)

    for path in paths:
        if os.path.isfile(path) and path.endswith(".jsonl"):
            add(path)
        elif os.path.isfile(cycles_path(path)):
            add(cycles_path(path))
        elif os.path.isdir(path):
            runs = [os.path.join(path, name) for name in sorted(os.listdir(path))]
            runs = [run for run in runs if not os.path.islink(run)
                    and os.path.isfile(cycles_path(run))]
            if not runs:
                inputs.error(path, None, "no run directories (no */cycles.jsonl) here")
            for run in runs:
                add(cycles_path(run))
        else:
            inputs.error(path, None, "not found")
    return found


def _read_json_file(path, schema, inputs):
    """A whole-file JSON document checked against a schema, or None."""
    try:
        with open(path, "rb") as source:
            text = source.read()
        data = json.loads(text.decode("utf-8"))
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as error:
        inputs.error(path, text.count(b"\n", 0, error.start) + 1, f"unreadable JSON: {error}")
        return None
    except json.JSONDecodeError as error:
        inputs.error(path, error.lineno, f"unreadable JSON: {error.msg} (column {error.colno})")
        return None
    except (OSError, ValueError, RecursionError) as error:  # no position: nested too deep, a huge number
        inputs.error(path, None, f"unreadable JSON: {error}")
        return None
    problems = schemas.errors(schema, data)
    for where, message in problems:
        inputs.error(path, None, f"{schemas.path_text(where)}: {message}")
    return None if problems else data


def _str(value):
    return value if isinstance(value, str) else None


def _number(value):
    """An int or a finite float: json.loads reads NaN and Infinity, which would
    make dashboard.json something the page's JSON.parse refuses."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _phases(value):
    """{step: seconds} of the record's host_phases (or {phase: ms} of its
    phase_ms), in the record's (timeline) order."""
    if not isinstance(value, dict):
        return {}
    return {step: seconds for step, seconds in value.items()
            if _number(seconds) is not None and seconds >= 0}


def _strings(value):
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def epoch(stamp):
    """ISO timestamp -> seconds since the epoch (None if not one)."""
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _callback_errors(record):
    """The failed callbacks of the record's callbacks (lab.records reads
    every record version), start times made safe for sorting."""
    return [dict(call, t=_number(call["t"])) for call in records_module.callback_errors(record)]


def normalise(record, default_run_id, manifest):
    """The fields the dashboard uses, from a schema-checked record."""
    done = records_module.is_done(record)
    kernel = record.get("kernel") if isinstance(record.get("kernel"), dict) else {}
    manifest = manifest or {}
    manifest_kernel = manifest.get("kernel") or {}
    violations = record.get("ordering_violations")
    return {
        "run_id": record.get("run_id") or default_run_id,
        "cycle": record["cycle"],
        "mode": record["mode"],
        "wake": _str(record.get("wake")),
        "status": record["status"],
        "unfinished": not done,
        "verdict": records_module.state_of(record),
        "expected_verdict": record.get("expected_verdict") or "pass",
        # the knobs that injected a fault or delay (lab.records.injections)
        records_module.INJECTED_FIELD: _strings(record.get(records_module.INJECTED_FIELD)),
        "phase": _str(record.get("phase")) if done else None,
        "reason": _str(record.get("reason")) if done else "only the \"started\" line: the cycle never finished",
        "failed_callbacks": records_module.failed_callbacks(record) if done else [],
        "host_start": _str(record.get("host_start")),
        "start": epoch(record.get("host_start")),
        "suspend_ms": _number(record.get("suspend_ms")),
        "resume_ms": _number(record.get("resume_ms")),
        "problems": _strings(record.get("problems")),
        "evidence": _strings(record.get("evidence")),
        "ordering_violations": violations if isinstance(violations, list) else [],
        "suspend_stats_delta": record.get("suspend_stats_delta") or {},
        "callback_errors": _callback_errors(record),
        "commit": _str(record.get("project_commit")) or _str((manifest.get("project") or {}).get("commit")),
        "series_hash": _str(kernel.get("series_hash")) or _str(manifest_kernel.get("series_hash")),
        "variant": _str(kernel.get("variant")) or _str(manifest_kernel.get("variant")),
        # which kernel (dashboards.compute.kernel_key): the record's own
        # fields first, the run's manifest for what records do not carry
        # ("" is none: a manifest's source_commit of a Debian tree)
        "kernel_spec": _str(kernel.get("kernel_spec")) or _str(manifest_kernel.get("kernel_spec")) or None,
        "source_commit": _str(kernel.get("source_commit")) or _str(manifest_kernel.get("source_commit")) or None,
        "kernelrelease": _str(kernel.get("kernelrelease")) or _str(manifest_kernel.get("kernelrelease")) or None,
        "tree_version": _str(manifest_kernel.get("tree_version")) or None,
        "config_hash": _str(manifest_kernel.get("config_hash")) or None,
        # a user's .config (kernel/build --config) under the fragment
        "base_config": _str(kernel.get("base_config")) or _str(manifest_kernel.get("base_config")) or None,
        "host_phases": _phases(record.get("host_phases")),
        "phase_ms": _phases(record.get("phase_ms")),
        "harness_rss_kib": _int(record.get("harness_rss_kib")),
        "harness_pid": _int(record.get("harness_pid")),
        "rerun_of": _int(record.get("rerun_of")),  # a rerun of a cycle the lab failed (lab.session)
        "devices": _str(record.get("devices")) or "lean",  # the guest's device set (lab/devices.py)
        "probes": _probes(record.get("probes")) if done else [],
        "probes_before": _probes(record.get("probes_before")) if done else [],
        # a device broken before the cycle: the cycle that broke it (lab.judge)
        "broken_since": _broken_since(record.get("broken_since")) if done else {},
        # a hang's callback that never returned (lab/hang.py)
        "stuck": records_module.stuck(record) if done else None,
    }


def _probes(value):
    """A device guest's probes (lab.devices.parse_probes), as the schema typed them."""
    if not isinstance(value, list):
        return []
    return [{"device": p["device"], "probe": p["probe"], "ok": p["ok"], "ms": _int(p.get("ms")),
             "error": _str(p.get("error"))} for p in value if isinstance(p, dict)]


def _broken_since(value):
    """{device: {"cycle", "mode"}} of the record's broken_since, the well-formed entries."""
    if not isinstance(value, dict):
        return {}
    return {device: {"cycle": _int(since.get("cycle")), "mode": _str(since.get("mode"))}
            for device, since in value.items() if isinstance(since, dict)}


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _callback_problem(call):
    """Why one callbacks entry breaks $defs/callback of the record schema, or None."""
    if isinstance(call, dict):
        if not all(key in call for key in ("cb", "us", "err")):
            return "a callback object needs cb, us and err"
        cb, us, err, driver, t = call["cb"], call["us"], call["err"], call.get("driver"), call.get("t")
    elif isinstance(call, list):
        if len(call) != 3:
            return "a callback triple has 3 items [cb, us, err]"
        (cb, us, err), driver, t = call, None, None
    else:
        return "a callback is an object {cb, us, err} or a triple [cb, us, err]"
    if not isinstance(cb, str):
        return "cb is not a string"
    if us is not None and not (_is_number(us) and us >= 0):
        return f"us {us!r} is not a number >= 0 or null"
    if err is not None and not _is_int(err):
        return f"err {err!r} is not an integer or null"
    if driver is not None and not isinstance(driver, str):
        return "driver is not a string or null"
    if t is not None and not _is_number(t):
        return "t is not a number or null"
    return None


def per_device_errors(name, value):
    """Schema errors of the callbacks / pmtest fields, checked by hand: the
    same rules as the schema (pytest/test_dashboard.py checks they agree),
    ~100 times faster on the ~1600 callbacks of a cycle."""
    if not isinstance(value, dict):
        return [([name], f"{type(value).__name__} is not of type 'object'")]
    errors = []
    for device, calls in value.items():
        if not isinstance(calls, list):
            errors.append(([name, device], "is not of type 'array'"))
            continue
        for index, call in enumerate(calls):
            problem = _callback_problem(call) if name == "callbacks" else (
                None if isinstance(call, str) else f"{call!r} is not of type 'string'")
            if problem:
                errors.append(([name, device, index], problem))
    return errors


def non_finite_errors(name, value):
    """NaN and Infinity (which Python's json reads) pass the schema's
    "number" and "minimum" (-Infinity does not); a dashboard built on them
    would not be JSON."""
    if not isinstance(value, dict):
        return []
    return [([name, key], f"{item!r} is not a finite number") for key, item in value.items()
            if isinstance(item, float) and (math.isnan(item) or item == math.inf)]


def record_errors(record):
    """[(path, message)] of a record against the cycle-record schema."""
    rest = {key: value for key, value in record.items() if key not in PER_DEVICE}
    found = [] if schemas.is_valid(schemas.CYCLE_RECORD, rest) else schemas.errors(schemas.CYCLE_RECORD, rest)
    found.extend(non_finite_errors("host_phases", record.get("host_phases")))
    found.extend(non_finite_errors("phase_ms", record.get("phase_ms")))
    for name in PER_DEVICE:
        if name in record:
            found.extend(per_device_errors(name, record[name]))
    return found


def _check(record, path, number, inputs):
    """Report schema errors; drop what is bad. True if the record is usable."""
    usable = True
    dropped = set()
    for where, message in record_errors(record):
        inputs.error(path, number, f"{schemas.path_text(where)}: {message}")
        if not where or where[0] in CORE:
            usable = False
        elif where[0] in PER_ENTRY and len(where) >= 2:
            dropped.add((where[0], where[1]))
        else:
            dropped.add((where[0],))
    if usable:
        for key in sorted(dropped, key=len, reverse=True):
            if len(key) == 2:
                if isinstance(record.get(key[0]), dict):
                    record[key[0]].pop(key[1], None)
            else:
                record.pop(key[0], None)
    return usable


class Part:
    """What one cycles file contributes: its problems [(line, message)], the
    cycles excluded, and {(run id, cycle): (normalised cycle, rank, raw
    record or None)}; rank orders two copies of one cycle (rank_of)."""

    def __init__(self, path):
        self.path = path
        self.problems = []
        self.excluded = 0
        self.entries = {}
        self.latency = None  # dashboards.compute.latency_counts of its cycles, when known


def rank_of(record):
    """The same cycle in two files: the finished copy wins, else the same copy
    whatever the order the files were named in (the lesser hash)."""
    canonical = json.dumps(record, sort_keys=True).encode()
    return [record["status"] != "done", hashlib.sha256(canonical).hexdigest()]


def read_part(path, manifest, shared_values=None):
    """One cycles file read by a lab.records.RunReader, schema-checked and
    normalised; what it skips is a problem with its line. shared_values: a
    lab.records.SharedValues the readers of several runs share."""
    part = Part(path)
    problem = lambda number, message: part.problems.append((number, message))  # noqa: E731
    default_run_id = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if not os.access(path, os.R_OK):
        problem(None, "unreadable: permission denied")
        return part
    excluded = []
    sink = Inputs()
    try:
        kept = records_module.RunReader(path, shared_values).read(
            problem=problem, check=lambda record, number: _check(record, path, number, sink), excluded=excluded)
    except OSError as error:
        problem(None, f"unreadable: {error}")
        return part
    part.problems.extend((error["line"], error["message"]) for error in sink.errors)
    part.excluded = len(excluded)  # its last word was unreadable: neither counted nor called unfinished
    for record in kept:
        run_id = record.get("run_id") if isinstance(record.get("run_id"), str) and record.get("run_id") \
            else default_run_id
        try:
            cycle = normalise(record, default_run_id, manifest)
        except records_module.RecordError as error:  # its run lost the shared callback layout
            problem(None, str(error))
            for field in ("callback_table", "callbacks"):
                record.pop(field, None)
            cycle = normalise(record, default_run_id, manifest)
        part.entries[(run_id, record["cycle"])] = (cycle, rank_of(record), record)
    return part


def read_run_files(run_dir, inputs):
    """manifest.json (None if absent or bad) and summary.json of a run directory, checked."""
    manifest = _read_json_file(os.path.join(run_dir, "manifest.json"), schemas.RUN_MANIFEST, inputs)
    _read_json_file(os.path.join(run_dir, "summary.json"), schemas.RUN_SUMMARY, inputs)
    return manifest


def load(paths, read=read_part):
    """Inputs read from run directories / results directories / cycles files.
    read(cycles file, manifest, SharedValues) -> Part (dashboards.compute
    passes one that keeps a cache per run). inputs.parts lists the Parts and, per part, the
    keys of the cycles that won over a copy in another file."""
    inputs = Inputs()
    merged = {}
    for cycles_file in find_run_dirs(paths, inputs):
        manifest = read_run_files(os.path.dirname(cycles_file), inputs)
        part = read(cycles_file, manifest, inputs.shared_values)
        inputs.parts.append(part)
        for line, message in part.problems:
            inputs.error(cycles_file, line, message)
        inputs.excluded += part.excluded
        for key, (cycle, rank, record) in part.entries.items():
            if manifest:
                runs = inputs.manifests.setdefault(key[0], [])
                if manifest not in runs:
                    runs.append(manifest)
            previous = merged.get(key)
            if previous is None:
                merged[key] = (cycle, rank, record, part)
                continue
            if not rank[0] and not previous[1][0] and rank != previous[1]:
                first, second = sorted([previous[3].path, cycles_file])
                inputs.error(second, None, f"cycle {key[1]} of run {key[0]} is also in {first}, differently")
            if rank < previous[1]:
                merged[key] = (cycle, rank, record, part)
    order = sorted(merged, key=lambda k: (k[0], k[1]))
    inputs.cycles = [merged[key][0] for key in order]
    inputs.records = [merged[key][2] for key in order]  # the raw records (None: from a cache), for the latencies
    inputs.lost = {}  # part path -> keys of its cycles a copy in another file won over
    for part in inputs.parts:
        lost = [key for key in part.entries if merged[key][3] is not part]
        if lost:
            inputs.lost[part.path] = lost
    return inputs
