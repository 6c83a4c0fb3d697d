"""The results core: the cycle record, results/<run-id>/cycles.jsonl and
summary.json. The layers above lab (the dashboard, the pipelines) read,
write and count cycle records through this module only.

Record version 3 keeps the per-device callbacks and the pmtest log compact,
with what repeats stored once in the run's shared.jsonl (see "compact
fields"); callbacks(), callback_columns(), callback_errors() and pmtest() are
the only readers of those fields, for every record version.

The file. Each cycle is appended twice: once as it starts (status
"started") and once when it ends (status "done", same cycle number). Every
line is flushed and fsynced as written, so a guest or host that dies
mid-cycle still leaves that cycle's "started" line. Several processes
(pytest-xdist workers) append to one file: each batch of lines is one
write() under an exclusive lock. Nothing is ever rewritten in place.
append_records() is the one writer, read_cycles() the one reader.

Which line of a cycle counts (read_cycles): a "done" line supersedes
anything before it, a later "done" line an earlier one (a re-judged cycle);
a "started" line never supersedes a "done" one (a cycle number reused by a
restarted writer cannot erase a result) and replaces only another
"started" line.

An unfinished cycle is one whose last word is its "started" line: the
harness is still running it, or was killed before it could write the end.
It is counted as "unfinished" (never as hang, fail or error), is not passed,
and counts against the pass rate. A pipeline that knows the harness is gone
(pipelines/nightly, when importing a killed chunk) closes it with
close_interrupted(): verdict error, phase "interrupted".

The pass rate (pass_rate) is pass / (pass + fail + hang + unfinished) over
the cycles not made to fail on purpose (expected_verdict other than pass:
"injected"); "error" (the lab failed, not the kernel) is counted but not
judged. Its interval is Wilson's score interval at 95 %. Percentiles are
nearest-rank (nearest_rank()).
"""

import base64
import datetime
import errno
import fcntl
import gzip
import hashlib
import json
import math
import os
import re
import statistics
import time
import zlib

from lab import files
from lab.trace import split_device_id

# A done cycle's verdict. ERROR is the lab's failure, not the kernel's.
PASS, FAIL, HANG, ERROR = "pass", "fail", "hang", "error"
VERDICTS = (PASS, FAIL, HANG, ERROR)
UNFINISHED = "unfinished"
STATES = VERDICTS + (UNFINISHED,)  # what a cycle can end up as; each cycle counts as exactly one
JUDGED = (PASS, FAIL, HANG, UNFINISHED)  # the pass rate's denominator
# A record's status: the line written as the cycle starts, the one written as it ends.
STARTED, DONE = "started", "done"
Z95 = 1.959963984540054
# Record shape version: 2 keys callbacks by device identity (trace.device_id:
# "name (driver)"), and a failed cycle carries failed_callbacks as fields.
# 3 stores them compactly (callback_table, pmtest_ref: see "compact fields"
# below); read them with callback_columns() / callbacks() / pmtest().
RECORD_VERSION = 3


class ResultsWriteError(Exception):
    """The results directory cannot take more (disk full, read-only, gone).
    The run must stop: a cycle that cannot be recorded must not be run."""


def results_write_error(path, error):
    return ResultsWriteError(f"cannot write {path}: {error.strerror or error}"
                             + (" (results disk full)" if error.errno == errno.ENOSPC else ""))


def new_run_id():
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{os.getpid()}"


def iso(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).isoformat(timespec="milliseconds")


CYCLES_FILE = "cycles.jsonl"


def cycles_path(run_dir):
    """A run directory's cycles.jsonl: the file only this module reads and writes."""
    return os.path.join(run_dir, CYCLES_FILE)


KEEP = ("full", "failures")  # --keep: every cycle's full evidence, or only a cycle's that did not pass


class RunDir:
    """One run's result directory; `latest` points at the newest run."""

    def __init__(self, results_root, name, keep="full", link_latest=True, run_id=None):
        """name: the directory under results_root; run_id: the records' run
        id, if not the name (a nightly shard's directory is <run-id>-shardIofN);
        keep: which cycles keep their full report (lab.judge.keep_evidence);
        link_latest=False: an existing run gets side files added later
        (./pmlab sleepgraph); `latest` keeps pointing at the newest run."""
        if keep not in KEEP:
            raise ValueError(f"keep must be one of {', '.join(KEEP)}, not {keep!r}")
        self.name = name
        self.run_id = run_id or name
        self.keep = keep  # which cycles keep their full report and console lines (lab.judge.keep_evidence)
        self.path = os.path.join(results_root, name)
        os.makedirs(os.path.join(self.path, "console"), exist_ok=True)
        self.cycles_path = cycles_path(self.path)
        self.summary_path = os.path.join(self.path, "summary.json")
        if not link_latest:
            return
        link = os.path.join(results_root, "latest")
        temporary = f"{link}.{os.getpid()}"
        try:
            os.symlink(name, temporary)
            os.replace(temporary, link)
        except OSError:
            pass

    def file(self, *parts):
        return os.path.join(self.path, *parts)

    def append(self, record):
        append_records(self.cycles_path, [record])

    def write_file(self, relative, text, compress=False):
        """Write a cycle's side file (report, hang dump) whole or not at all
        (ResultsWriteError). Returns its path relative to the run."""
        path = self.file(relative)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if compress:
                with gzip.open(path, "wt", compresslevel=1) as out:  # level 9 costs 15 ms a cycle
                    out.write(text)
            else:
                with open(path, "w") as out:
                    out.write(text)
        except OSError as error:
            try:
                os.unlink(path)
            except OSError:
                pass
            raise results_write_error(path, error) from None
        return relative

    def write_summary(self, extra=None):
        summary = summarize(read_cycles(self.cycles_path))
        summary["run_id"] = self.run_id
        summary.update(extra or {})
        try:
            files.write_json(self.summary_path, summary, sort_keys=False)
        except OSError as error:  # the old summary.json, if any, stays whole
            raise results_write_error(self.summary_path, error) from None
        return summary


def append_records(path, records):
    """The one writer of a cycles.jsonl: append records, one JSON line each,
    in one write() under an exclusive lock, fsynced. What the disk cannot
    take whole is cut off again (ResultsWriteError): no half line is left.
    The shared values the records refer to (version 3) are appended to the
    run's shared.jsonl first, so no reader sees a reference it cannot follow."""
    _store_shared(path, records)
    data = "".join(json.dumps(record, sort_keys=False) + "\n" for record in records).encode()
    _append_bytes(path, data)


def _append_bytes(path, data):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as error:
        raise results_write_error(path, error) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except OSError as error:
            os.ftruncate(fd, size)
            raise results_write_error(path, error) from None
    finally:
        os.close(fd)


def write_cycles(path, records):
    """A whole new cycles.jsonl holding `records` (merge, the LAVA import):
    written beside it through append_records, then renamed into place, so a
    reader sees the old file or the new one, never half of it."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    append_records(temporary, records)
    os.replace(temporary, path)


def new_record(run_id, cycle, mode, status=STARTED, **fields):
    """The one constructor of a cycle record (lab.cycle, lab.session, the
    LAVA engine): record_version, the cycle's identity and its mode (a
    lab.modes.Mode) first, then `fields` in the order given."""
    record = {"record_version": RECORD_VERSION, "run_id": run_id, "cycle": cycle, "status": status,
              "mode": mode.name, "wake": mode.wake, "pm_test": mode.pm_test}
    record.update(fields)
    return record


def mark_done(record, **fields):
    """A started record made its done line, in place: status DONE, then `fields`."""
    record.update(status=DONE, **fields)
    return record


def is_done(record):
    return record.get("status") == DONE


def supersedes(new, old):
    """Does line `new` of a cycle replace the line `old` kept so far?"""
    return old is None or is_done(new) or not is_done(old)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def read_cycles(path, problem=None, check=None, excluded=None):
    """The one reader of a cycles.jsonl: the line that counts of every cycle
    (see supersedes()), in cycle order; [] if there is no file.

    A line that is not JSON (cut short by a crash), not an object or without
    an integer "cycle" is skipped and reported as problem(line number,
    message) when given. check(record, line number) -> bool, when given,
    validates further (the dashboard's schema, which reports for itself); a
    line it refuses is skipped, and a cycle whose last word was such a line
    (with no "done" line accepted) is left out altogether, its number
    appended to `excluded`: neither counted nor called unfinished."""
    problem = problem or (lambda number, message: None)
    kept, refused = {}, {}
    try:
        source = open(path, "rb")
    except FileNotFoundError:
        return []
    _load_shared(shared_path(path))
    with source:
        for number, raw in enumerate(source, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
                cut = "" if raw.endswith(b"\n") else " (no newline: cut short)"
                problem(number, f"not JSON{cut}: {error}")
                continue
            if not isinstance(record, dict):
                problem(number, f"not a JSON object but {type(record).__name__}")
                continue
            cycle = record.get("cycle")
            if check is not None and not check(record, number):
                if _is_int(cycle):
                    refused[cycle] = number
                continue
            if not _is_int(cycle):
                problem(number, "no integer \"cycle\": not a cycle record")
                continue
            if supersedes(record, kept.get(cycle)):
                kept[cycle] = record
                if is_done(record):
                    refused.pop(cycle, None)
    for cycle in sorted(refused):
        if not is_done(kept.get(cycle, {})):
            kept.pop(cycle, None)
            if excluded is not None:
                excluded.append(cycle)
    return [kept[cycle] for cycle in sorted(kept)]


def close_interrupted(record, when=None):
    """A cycle with only its "started" line whose harness is known to be gone,
    closed as the lab's error (verdict error, phase "interrupted")."""
    closed = mark_done(dict(record), verdict=ERROR, phase="interrupted",
                       reason="interrupted: the run stopped before this cycle finished")
    if when is not None:
        closed.setdefault("host_end", iso(when))
    return closed


# ------------------------------------------------------------------ side files

# The host's view of a cycle, [[time, kind, detail]]: libvirt's domain
# events, or (engine lava) the same kinds read from the job log, with the
# record's events_source saying how. Records before the rename call it
# libvirt_events; read it with host_events().
EVENTS_FIELD = "host_events"
OLD_EVENTS_FIELD = "libvirt_events"


def host_events(record):
    """A record's host events under either name ([] if it has none)."""
    events = record.get(EVENTS_FIELD)
    if events is None:
        events = record.get(OLD_EVENTS_FIELD)
    return events or []


def report_path(number):
    """A cycle's full guest report, relative to its run directory."""
    return f"reports/cycle{number}.txt.gz"


def read_report(run_dir, relative):
    """The text of a kept guest report, `relative` as a record's "report"
    names it (RunDir.write_file wrote it, gzip-compressed or plain)."""
    path = os.path.join(run_dir, relative)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as source:
        return source.read()


def hang_dump_path(number, guest):
    return f"hang-cycle{number}-{guest}.txt"


def sleepgraph_paths(number):
    """A cycle's files for Intel's sleepgraph (lab/sleepgraph.py), relative to
    its run directory: (ftrace, dmesg), named as sleepgraph names its own."""
    return f"reports/cycle{number}_ftrace.txt.gz", f"reports/cycle{number}_dmesg.txt.gz"


SIDE_FILES = ("report", "hang_dump", "sleepgraph_ftrace", "sleepgraph_dmesg")


# ------------------------------------------------------------------ compact fields (version 3)

# A cycle's ~1600 device callbacks were ~46 KB of its ~54 KB record (version
# 2: {device: [[cb, us, err], ...]}). What repeats from cycle to cycle (which
# device runs which callback in which order, the pmtest log of a passing
# cycle) is stored once per run in SHARED_FILE, keyed by a hash of its
# content; the record keeps the key and what changes (durations, errors):
#
#   "callback_table": {"layout": KEY, "us": DURATIONS, "err": [[row, errno], ...]}
#       layout (shared): {"devices": [device identity, ...], "callbacks":
#       [label, ...], "rows": [[device index, callback index], ...]} in trace
#       order grouped by device, as version 2's dict; DURATIONS: the rows'
#       microseconds as a JSON array (null for a callback that never
#       returned, whose errno is then null too), zlib-compressed, base64
#       (~1 KB for ~1600 callbacks; json.loads reads it back at C speed);
#       err lists the rows whose errno is not 0.
#   "pmtest_ref": KEY of the shared {device: ["<cb>:<event>=<ret>", ...]}.
#
# Content keys make the shared values safe to pool across runs in one
# process: a record read from one run (a nightly chunk, a shard) and
# appended to another takes its shared values along (append_records).

SHARED_FILE = "shared.jsonl"
_shared = {}        # content key -> value, of every shared value read or made here
_shared_files = {}  # shared.jsonl path -> (inode, size, keys it held)


class RecordError(ValueError):
    """A version 3 record refers to a shared value its run does not hold."""


def shared_path(cycles_file):
    return os.path.join(os.path.dirname(os.path.abspath(cycles_file)), SHARED_FILE)


def _content_key(value):
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _share(value):
    key = _content_key(value)
    _shared.setdefault(key, value)
    return key


def _load_shared(path):
    """Read a run's shared.jsonl into the pool (again only if it changed)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        _shared_files.pop(path, None)
        return set()
    known = _shared_files.get(path)
    if known and known[0] == status.st_ino and known[1] == status.st_size:
        return known[2]
    keys = set()
    with open(path, "rb") as source:
        for raw in source:
            try:
                line = json.loads(raw)
                key, value = line["key"], line["value"]
            except (ValueError, TypeError, KeyError, RecursionError):
                continue  # a line cut short by a crash: its records were never written after it
            if key == _content_key(value):
                _shared.setdefault(key, value)
                keys.add(key)
    _shared_files[path] = (status.st_ino, status.st_size, keys)
    return keys


def _references(record):
    table = record.get("callback_table")
    if isinstance(table, dict) and isinstance(table.get("layout"), str):
        yield table["layout"]
    if isinstance(record.get("pmtest_ref"), str):
        yield record["pmtest_ref"]


def _store_shared(cycles_file, records):
    wanted = {key: record for record in records for key in _references(record)}
    if not wanted:
        return
    path = shared_path(cycles_file)
    present = _load_shared(path)
    missing = [key for key in wanted if key not in present]
    for key in missing:
        if key not in _shared:
            raise RecordError(f"cycle {wanted[key].get('cycle')} refers to shared value {key}, which was "
                              f"neither read from a run nor made in this process")
    if missing:
        _append_bytes(path, "".join(json.dumps({"key": key, "value": _shared[key]}) + "\n"
                                    for key in missing).encode())
        _load_shared(path)


def compact_fields(sequences, pmtest_by_device):
    """The version 3 record fields of a cycle's callbacks (lab.trace.callbacks:
    {device: [{"cb", "us", "err", ...}]}) and pmtest log (lab.pmtest_log.by_device)."""
    devices, labels, rows, durations, errors = [], {}, [], [], []
    for device, calls in sequences.items():
        devices.append(device)
        for call in calls:
            if call["err"]:
                errors.append([len(rows), call["err"]])
            rows.append([len(devices) - 1, labels.setdefault(call["cb"], len(labels))])
            durations.append(call["us"])  # as traced (floats): read back exactly
    layout = {"devices": devices, "callbacks": list(labels), "rows": rows}
    packed = base64.b64encode(zlib.compress(json.dumps(durations, separators=(",", ":")).encode(), 9)).decode()
    return {"callback_table": {"layout": _share(layout), "us": packed, "err": errors},
            "pmtest_ref": _share(pmtest_by_device)}


def _shared_value(record, key):
    value = _shared.get(key)
    if value is None:
        raise RecordError(f"cycle {record.get('cycle')}: shared value {key} is not in its run's {SHARED_FILE}")
    return value


_DURATION_TYPES = {int, float, type(None)}
_layout_columns = {}  # layout key -> (calls, drivers): built once per layout


def callback_columns(record):
    """The one reader of a record's callbacks, any version: (calls, us, errors)
    with calls a tuple of (device, callback label, driver) per callback (the
    same tuple object for every record of one layout), us a list of
    microseconds (None: never returned), errors {index: errno} of the calls
    whose errno is not 0 (a call with us None has errno None). RecordError if
    a version 3 record's layout is missing from its run."""
    table = record.get("callback_table")
    if isinstance(table, dict):
        key = table.get("layout")
        calls = _layout_columns.get(key)
        if calls is None:
            layout = _shared_value(record, key)
            devices, labels = layout["devices"], layout["callbacks"]
            calls = _layout_columns[key] = tuple((devices[d], labels[c], split_device_id(devices[d])[1])
                                                 for d, c in layout["rows"])
        try:
            us = json.loads(zlib.decompress(base64.b64decode(table["us"])))
        except (ValueError, zlib.error, TypeError, RecursionError) as error:
            raise RecordError(f"cycle {record.get('cycle')}: callback_table.us unreadable: {error}") from None
        if not isinstance(us, list) or not set(map(type, us)) <= _DURATION_TYPES:
            raise RecordError(f"cycle {record.get('cycle')}: callback_table.us is not a list of numbers and nulls")
        if len(us) != len(calls):
            raise RecordError(f"cycle {record.get('cycle')}: {len(us)} durations for {len(calls)} callbacks")
        return calls, us, {row: err for row, err in table.get("err") or ()}
    calls, us, errors = [], [], {}
    for device, sequence in (record.get("callbacks") or {}).items():
        driver = split_device_id(device)[1]
        for call in sequence:
            if isinstance(call, dict):
                cb, duration, err, call_driver = call["cb"], call["us"], call["err"], call.get("driver")
            else:
                (cb, duration, err), call_driver = call[:3], driver
            if err:
                errors[len(calls)] = err
            calls.append((device, cb, call_driver))
            us.append(duration)
    return tuple(calls), us, errors


def callback_errors(record):
    """[{"device", "cb", "err", "t"}] of the callbacks whose errno is not 0, in
    the record's callback order (t: the start time, version 1 only, else
    None); unlike callback_columns() it leaves the durations packed."""
    table = record.get("callback_table")
    if isinstance(table, dict):
        layout = _shared_value(record, table.get("layout"))
        devices, labels, rows = layout["devices"], layout["callbacks"], layout["rows"]
        return [{"device": devices[rows[row][0]], "cb": labels[rows[row][1]], "err": err, "t": None}
                for row, err in sorted(table.get("err") or ())]
    return [{"device": device, "cb": call["cb"] if isinstance(call, dict) else call[0],
             "err": call["err"] if isinstance(call, dict) else call[2],
             "t": call.get("t") if isinstance(call, dict) else None}
            for device, sequence in (record.get("callbacks") or {}).items() for call in sequence
            if (call["err"] if isinstance(call, dict) else call[2])]


def callbacks(record):
    """{device: [{"cb", "driver", "t", "us", "err"}]} of any record version
    (version 1 objects keep their driver and start time t; otherwise driver
    is the one in the device identity and t is None)."""
    if isinstance(record.get("callbacks"), dict) and not isinstance(record.get("callback_table"), dict):
        out = {}
        for device, sequence in record["callbacks"].items():
            out[device] = [{"cb": c["cb"], "driver": c.get("driver"), "t": c.get("t"), "us": c["us"], "err": c["err"]}
                           if isinstance(c, dict) else
                           {"cb": c[0], "driver": split_device_id(device)[1], "t": None, "us": c[1], "err": c[2]}
                           for c in sequence]
        return out
    calls, us, errors = callback_columns(record)
    out = {}
    for index, (device, cb, driver) in enumerate(calls):
        out.setdefault(device, []).append({"cb": cb, "driver": driver, "t": None,
                                           "us": us[index],
                                           "err": None if us[index] is None else errors.get(index, 0)})
    return out


def pmtest(record):
    """{pmtest device: ["<cb>:<event>=<ret>", ...]} of any record version."""
    if isinstance(record.get("pmtest_ref"), str):
        return _shared_value(record, record["pmtest_ref"])
    return record.get("pmtest") or {}


# ------------------------------------------------------------------ failed callbacks

# "[('pmtest_legacy.6', 'bus[suspend]', -5)]" as records before version 2 wrote
# failed callbacks into the reason text.
_OLD_FAILED_CALLBACK = re.compile(r"\('(?P<device>[^']*)', '(?P<cb>[^']*)', (?P<err>-?\d+)\)")


def failed_callbacks(record):
    """[{"device", "cb", "err"}] of the callbacks that failed, first first:
    the record's own field, or, for a record before version 2, read back
    from its reason text (this module's writer put it there)."""
    found = record.get("failed_callbacks")
    if isinstance(found, list):
        return [call for call in found if isinstance(call, dict) and isinstance(call.get("device"), str)
                and _is_int(call.get("err"))]
    reason = record.get("reason")
    if not isinstance(reason, str):
        return []
    return [{"device": m["device"], "cb": m["cb"], "err": int(m["err"])}
            for m in _OLD_FAILED_CALLBACK.finditer(reason)]


# ------------------------------------------------------------------ counting

def state_of(record):
    """What the cycle counts as: its verdict once done (a done record without
    a valid verdict is damaged: the lab's error), else "unfinished"."""
    if not is_done(record):
        return UNFINISHED
    return record.get("verdict") if record.get("verdict") in VERDICTS else ERROR


def injected(record):
    """Made to fail on purpose (lab/session.py sets expected_verdict)."""
    return (record.get("expected_verdict") or PASS) != PASS


def did_as_expected(record):
    """Passed, or, for an injected cycle, reached the verdict it was made for."""
    return state_of(record) == (record.get("expected_verdict") or PASS)


def rerun_origin(record):
    """The planned cycle a record stands for: its own number, or for a
    rerun of a cycle the lab failed (lab.session.Session.cycles) that one's."""
    return record.get("rerun_of", record.get("cycle"))


def not_as_expected(records):
    """The records a run is judged by: those that did not do as expected,
    less a lab error whose planned cycle a rerun then got to do as expected
    (the error is still counted, as the lab's, by verdict_counts)."""
    settled = {rerun_origin(r) for r in records if did_as_expected(r)}
    return [r for r in records
            if not did_as_expected(r) and not (state_of(r) == ERROR and rerun_origin(r) in settled)]


def verdict_counts(records):
    """{state: cycles} over STATES: every cycle counted exactly once."""
    counts = dict.fromkeys(STATES, 0)
    for record in records:
        counts[state_of(record)] += 1
    return counts


def wilson(successes, trials, z=Z95):
    """Wilson score interval [low, high] for a binomial proportion, or None."""
    if trials <= 0:
        return None
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


PASS_RATE_DEFINITION = ("pass / (pass + fail + hang + unfinished); lab errors and cycles failed on "
                        "purpose (injected) are counted but not judged; ci95: Wilson score interval")


def pass_rate(records):
    """The one pass rate: {"passed", "judged", "injected", "rate", "ci95"}
    (rate and ci95 None when nothing was judged)."""
    natural = [r for r in records if not injected(r)]
    states = [state_of(r) for r in natural]
    passed = states.count(PASS)
    judged = sum(state in JUDGED for state in states)
    return {"passed": passed, "judged": judged, "injected": len(records) - len(natural),
            "rate": round(passed / judged, 4) if judged else None, "ci95": wilson(passed, judged)}


WORKS_RATE_DEFINITION = ("a device guest's probes that passed / probes run after a resume (lab/devices.py; "
                         "a device with no probe line counts as failed); ci95: Wilson score interval")


def works_rate(probes):
    """The one works-after-resume rate of a device's probes (the records'
    "probes" entries): {"probes", "ok", "rate", "ci95"}."""
    ok = sum(1 for probe in probes if probe.get("ok") is True)
    return {"probes": len(probes), "ok": ok, "rate": round(ok / len(probes), 4) if probes else None,
            "ci95": wilson(ok, len(probes))}


def nearest_rank(ordered, fraction):
    """The nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _stats(values):
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return None
    return {"n": len(values), "mean": round(statistics.mean(values), 3),
            "median": round(statistics.median(values), 3),
            "min": round(min(values), 3), "max": round(max(values), 3)}


def summarize(records):
    """Counts and the pass rate over all cycles and per mode."""
    def block(group):
        rate = pass_rate(group)
        return {
            "cycles": len(group),
            "counts": verdict_counts(group),
            "pass_rate": rate["rate"],
            "pass_rate_ci95": rate["ci95"],
            "host_seconds": _stats([r.get("host_seconds") for r in group]),
            "suspend_ms": _stats([r.get("suspend_ms") for r in group]),
            "resume_ms": _stats([r.get("resume_ms") for r in group]),
        }

    summary = block(records)
    summary["modes"] = {}
    for mode in sorted({str(r.get("mode")) for r in records}):
        summary["modes"][mode] = block([r for r in records if str(r.get("mode")) == mode])
    # A cycle made to fail on purpose (e.g. an injected hang) carries
    # expected_verdict; only cycles that did not do what was expected count here.
    summary["failed_cycles"] = [
        {"cycle": r["cycle"], "mode": r.get("mode"), "verdict": state_of(r),
         "phase": r.get("phase"), "reason": r.get("reason")}
        for r in records if not did_as_expected(r)]
    summary["expected_non_pass"] = [
        {"cycle": r["cycle"], "verdict": r["verdict"], "phase": r.get("phase")}
        for r in records if injected(r) and did_as_expected(r)]
    summary["reruns"] = sum(r.get("rerun_of") is not None for r in records)
    summary["written"] = iso(time.time())
    return summary
