"""The results core: the cycle record, results/<run-id>/cycles.jsonl and
summary.json. The layers above lab (the dashboard, the pipelines) read,
write and count cycle records through this module only.

Record version 3 keeps the per-device callbacks and the pmtest log compact,
with what repeats stored once in the run's shared.jsonl (see "compact
fields"). A RunReader reads one run: its records (read) and, from the run's
own shared.jsonl, their callbacks (callbacks, callback_columns,
callback_errors) and pmtest log (pmtest), the only readers of those fields,
for every record version. A record it read knows it (RunRecord), so the
module's functions of the same names need no run in hand. Nothing is kept
between runs but what a caller shares on purpose (SharedValues).

The file. Each cycle is appended twice: once as it starts (status
"started") and once when it ends (status "done", same cycle number). Every
line is flushed and fsynced as written, so a guest or host that dies
mid-cycle still leaves that cycle's "started" line. Several processes
(pytest-xdist workers) append to one file: each batch of lines is one
write() under an exclusive lock. Nothing is ever rewritten in place.
append_records() is the one writer, RunReader.read() (read_cycles()) the
one reader.

Which line of a cycle counts (read_cycles): a "done" line supersedes
anything before it, a later "done" line an earlier one (a re-judged cycle);
a "started" line never supersedes a "done" one (a cycle number reused by a
restarted writer cannot erase a result) and replaces only another
"started" line.

An unfinished cycle is one whose last word is its "started" line: the
harness is still running it, or was killed before it could write the end.
It is counted as "unfinished" (never as hang, fail or error), is not passed,
and counts against the pass rate. A harness that knows it stops (lab.run on
Ctrl-C) or a pipeline that knows the harness is gone (pipelines/nightly,
when a chunk's lab.run process has ended) closes it with
close_interrupted(): verdict "interrupted", which says nothing of the
kernel: counted, never judged, never a failure.

The pass rate (pass_rate) is pass / (pass + fail + hang + unfinished) over
the cycles not made to fail on purpose ("injected": a record whose
expected_verdict is not pass, or whose "injected" field lists the knobs that
injected a fault or delay, INJECTING_KNOBS; new_record writes that field
from the cycle's knobs); "error" (the lab failed, not the kernel) and
"interrupted" (the run stopped during the cycle) are counted but not judged.
A cycle the request made impossible (phase REQUEST: the guest rejected one
of its knobs) is the user's error, neither the kernel's nor the lab's. Its
interval is Wilson's score interval at 95 %. Percentiles are nearest-rank
(nearest_rank()).
"""

import base64
import copy
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
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar

from lab import files
from lab.modes import Mode
from lab.trace import Sequences, split_device_id

# A cycle record: one JSON object of cycles.jsonl (see the module's docstring).
Record = dict[str, Any]
# The callbacks of a record as callback_columns() reads them:
# ((device, label, driver), ...), [us, ...], {index: errno}.
Columns = tuple[tuple[tuple[str, str, Optional[str]], ...], list[Optional[float]], dict[int, int]]
Ordered = TypeVar("Ordered")

# A done cycle's verdict. ERROR is the lab's failure, not the kernel's;
# INTERRUPTED: the run stopped during the cycle (Ctrl-C, a killed harness),
# no verdict on anything.
PASS, FAIL, HANG, ERROR, INTERRUPTED = "pass", "fail", "hang", "error", "interrupted"
VERDICTS = (PASS, FAIL, HANG, ERROR, INTERRUPTED)
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


def results_write_error(path: str, error: OSError) -> ResultsWriteError:
    return ResultsWriteError(f"cannot write {path}: {error.strerror or error}"
                             + (" (results disk full)" if error.errno == errno.ENOSPC else ""))


def new_run_id() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{os.getpid()}"


def iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).isoformat(timespec="milliseconds")


CYCLES_FILE = "cycles.jsonl"


def cycles_path(run_dir: str) -> str:
    """A run directory's cycles.jsonl: the file only this module reads and writes."""
    return os.path.join(run_dir, CYCLES_FILE)


KEEP = ("full", "failures")  # --keep: every cycle's full evidence, or only a cycle's that did not pass


class RunExists(Exception):
    """RunDir(new=True) of a directory that holds a run's records already."""


def holds_run(run_dir: str) -> bool:
    """Does run_dir hold a run's records (a cycles.jsonl)?"""
    return os.path.exists(cycles_path(run_dir))


class RunDir:
    """One run's result directory; `latest` points at the newest run."""

    def __init__(self, results_root: str, name: str, keep: str = "full", link_latest: bool = True,
                 run_id: Optional[str] = None, new: bool = False) -> None:
        """name: the directory under results_root; run_id: the records' run
        id, if not the name (a nightly shard's directory is <run-id>-shardIofN);
        keep: which cycles keep their full report (lab.judge.keep_evidence);
        link_latest=False: an existing run gets side files added later
        (./pmlab sleepgraph); `latest` keeps pointing at the newest run;
        new=True: a new run, RunExists if the directory holds records
        (a reused run id must not write into another run)."""
        if keep not in KEEP:
            raise ValueError(f"keep must be one of {', '.join(KEEP)}, not {keep!r}")
        self.name = name
        self.run_id = run_id or name
        self.keep = keep  # which cycles keep their full report and console lines (lab.judge.keep_evidence)
        self.path = os.path.join(results_root, name)
        if new and holds_run(self.path):
            raise RunExists(f"run {self.run_id} exists already: {self.path} holds its records")
        os.makedirs(os.path.join(self.path, "console"), exist_ok=True)
        self.cycles_path = cycles_path(self.path)
        self.reader = RunReader(self.cycles_path)  # also tells the writer what shared.jsonl holds
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

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def last_cycle(self) -> int:
        """The highest cycle number recorded in the run (0: none)."""
        return last_cycle(self.reader.read())

    def append(self, record: Record, shared: Optional[dict[str, Any]] = None) -> "RunRecord":
        """Append one record (append_records); shared: values it refers to
        that neither it carries nor this run holds (a record of another run).
        Returns the record as written, a RunRecord of this run."""
        _write_records(self.reader, [record], shared)
        return RunRecord(record, self.reader)

    def write_file(self, relative: str, text: str, compress: bool = False) -> str:
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

    def write_summary(self, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        summary = summarize(self.reader.read())
        summary["run_id"] = self.run_id
        summary.update(extra or {})
        try:
            files.write_json(self.summary_path, summary, sort_keys=False)
        except OSError as error:  # the old summary.json, if any, stays whole
            raise results_write_error(self.summary_path, error) from None
        return summary


def append_records(path: str, records: Sequence[Record], shared: Optional[dict[str, Any]] = None) -> None:
    """The one writer of a cycles.jsonl: append records, one JSON line each,
    in one write() under an exclusive lock, fsynced. What the disk cannot
    take whole is cut off again (ResultsWriteError): no half line is left.
    The shared values the records refer to (version 3) are appended to the
    run's shared.jsonl first, so no reader sees a reference it cannot follow:
    those a just judged record carries (compact_fields; they are taken out
    of the record, which is then as written) or `shared` gives ({key: value},
    e.g. RunReader.shared_values() of the run the records were read from).
    RecordError if one is in neither and not in the run's shared.jsonl."""
    _write_records(RunReader(path), records, shared)


def _write_records(reader: "RunReader", records: Sequence[Record], shared: Optional[dict[str, Any]]) -> None:
    assert reader.cycles_path is not None, "a writer's reader has its run's path (RunReader(None) only reads)"
    _store_shared(reader, records, shared)
    data = "".join(json.dumps(record, sort_keys=False) + "\n" for record in records).encode()
    _append_bytes(reader.cycles_path, data)


def _append_bytes(path: str, data: bytes) -> None:
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


def write_cycles(path: str, records: Sequence[Record], shared: Optional[dict[str, Any]] = None) -> None:
    """A whole new cycles.jsonl holding `records` (merge, the LAVA import):
    written beside it through append_records (`shared` as there), then
    renamed into place, so a reader sees the old file or the new one, never
    half of it."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    append_records(temporary, records, shared)
    os.replace(temporary, path)


def new_record(run_id: str, cycle: int, mode: Mode, status: str = STARTED, **fields: Any) -> Record:
    """The one constructor of a cycle record (lab.cycle, lab.session, the
    LAVA engine): record_version, the cycle's identity and its mode (a
    lab.modes.Mode) first, then `fields` in the order given; a "knobs"
    field [[name, value], ...] that injects a fault or delay adds
    "injected" (injections())."""
    record = {"record_version": RECORD_VERSION, "run_id": run_id, "cycle": cycle, "status": status,
              "mode": mode.name, "wake": mode.wake, "pm_test": mode.pm_test}
    record.update(fields)
    injected_knobs = injections(fields.get("knobs") or ())
    if injected_knobs:
        record[INJECTED_FIELD] = injected_knobs
    return record


# Knobs (lab.request.KNOBS) that change what the kernel does: a fault, a
# delay, a child registered mid-callback, a panic. print_times and calls
# only watch; boot words inject only when they set one of pmtest's.
INJECTING_KNOBS = ("fault", "delay", "child", "panic", "kfault")
INJECTING_BOOT_WORDS = tuple(f"pmtest.{name}=" for name in ("fault", "delay", "child"))
INJECTED_FIELD = "injected"
# The phase of a cycle whose knob the guest rejected: the request's error.
REQUEST = "request"


def injections(knobs: Iterable[Sequence[str]]) -> list[str]:
    """The knobs of [(name, value), ...] that inject a fault or delay, as
    the record's "injected" field: ["name=value", ...]."""
    return [f"{name}={value}" for name, value in knobs
            if name in INJECTING_KNOBS or (name == "boot" and any(
                word.startswith(INJECTING_BOOT_WORDS) for word in str(value).split()))]


def mark_done(record: Record, **fields: Any) -> Record:
    """A started record made its done line, in place: status DONE, then `fields`."""
    record.update(status=DONE, **fields)
    return record


def is_done(record: Record) -> bool:
    return record.get("status") == DONE


def supersedes(new: Record, old: Optional[Record]) -> bool:
    """Does line `new` of a cycle replace the line `old` kept so far?"""
    return old is None or is_done(new) or not is_done(old)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


Problem = Callable[[int, str], None]  # (line number, message)
Check = Callable[[Record, int], bool]  # (record, line number) -> whether it is valid


def read_cycles(path: str, problem: Optional[Problem] = None, check: Optional[Check] = None,
                excluded: Optional[list[int]] = None) -> list["RunRecord"]:
    """RunReader(path).read(): the records of a cycles.jsonl, each knowing
    its run's reader."""
    return RunReader(path).read(problem, check, excluded)


class RunReader:
    """One run's cycles.jsonl and the shared values its version 3 records
    refer to (the run's shared.jsonl, read when a record first needs it and
    again when the file has grown). The one reader of records (read) and of
    their compact fields (callback_columns, callbacks, callback_errors,
    pmtest; see "compact fields"): a record is answered from what it carries
    (just judged) and from its own run's shared.jsonl, never from another
    run's. `values`: a SharedValues to hold the values and the decoded
    layouts in, shared by the readers of many runs (the dashboard); by
    default the reader's own. RunReader(None) reads no run: it answers the
    records that carry all they refer to (versions 1 and 2, a judged record
    not yet written)."""

    def __init__(self, cycles_file: Optional[str], values: Optional["SharedValues"] = None) -> None:
        self.cycles_path = cycles_file
        self.shared_path = shared_path(cycles_file) if cycles_file else None
        self.values = values if values is not None else SharedValues()
        self._keys: set[str] = set()  # the keys this run's shared.jsonl holds, as far as read
        self._read_to: Optional[tuple[int, int]] = None  # (inode, offset) of shared.jsonl read so far

    def read(self, problem: Optional[Problem] = None, check: Optional[Check] = None,
             excluded: Optional[list[int]] = None) -> list["RunRecord"]:
        """The line that counts of every cycle (see supersedes()), in cycle
        order, each a RunRecord (a dict that knows this reader); [] if there
        is no file.

        A line that is not JSON (cut short by a crash), not an object, without
        an integer "cycle" or with a status other than started/done is skipped
        and reported as problem(line number, message) when given. check(record, line number) -> bool, when given,
        validates further (the dashboard's schema, which reports for itself); a
        line it refuses is skipped, and a cycle whose last word was such a line
        (with no "done" line accepted) is left out altogether, its number
        appended to `excluded`: neither counted nor called unfinished."""
        problem = problem or (lambda number, message: None)
        kept: dict[int, Record] = {}
        refused: dict[int, int] = {}
        if self.cycles_path is None:  # RunReader(None): no run, no records
            return []
        try:
            source = open(self.cycles_path, "rb")
        except FileNotFoundError:
            return []
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
                cycle: Any = record.get("cycle")
                if check is not None and not check(record, number):
                    if _is_int(cycle):
                        refused[cycle] = number
                    continue
                if not _is_int(cycle):
                    problem(number, "no integer \"cycle\": not a cycle record")
                    continue
                if record.get("status") not in (STARTED, DONE):  # a damaged line must not stand for its cycle
                    problem(number, f"status {record.get('status')!r} is neither {STARTED!r} nor {DONE!r}")
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
        return [RunRecord(kept[cycle], self) for cycle in sorted(kept)]

    def shared_keys(self) -> set[str]:
        """The keys of the values this run's shared.jsonl holds now."""
        self._read_shared()
        return self._keys

    def _read_shared(self) -> None:
        """Take in what shared.jsonl gained since last read (all of it if it
        was replaced). Only whole lines count: a line cut short by a crash
        was never followed by a record referring to it."""
        if self.shared_path is None:
            return
        try:
            status = os.stat(self.shared_path)
        except FileNotFoundError:
            self._keys, self._read_to = set(), None
            return
        inode, offset = self._read_to or (-1, 0)
        if inode != status.st_ino or status.st_size < offset:
            self._keys, offset = set(), 0
        if status.st_size == offset:
            self._read_to = (status.st_ino, offset)
            return
        with open(self.shared_path, "rb") as source:
            source.seek(offset)
            for raw in source:
                if not raw.endswith(b"\n"):
                    break
                offset += len(raw)
                try:
                    line = json.loads(raw)
                    key, value = line["key"], line["value"]
                except (ValueError, TypeError, KeyError, RecursionError):
                    continue
                if key == _content_key(value):
                    self.values.by_key.setdefault(key, value)
                    self._keys.add(key)
        self._read_to = (status.st_ino, offset)

    def _value(self, record: Record, key: Optional[str]) -> Any:
        carried = record.get(CARRIED_FIELD)
        if isinstance(carried, dict) and key in carried:
            return carried[key]
        if key not in self._keys:
            self._read_shared()
            if key not in self._keys:
                where = f"its run's {SHARED_FILE}" if self.shared_path else "the record (read it through its run)"
                raise RecordError(f"cycle {record.get('cycle')}: shared value {key} is not in {where}")
        return self.values.by_key[key]

    def shared_values(self, records: Iterable[Record]) -> dict[str, Any]:
        """{key: value} of the shared values `records` refer to (to write
        them into another run: append_records' `shared`)."""
        return {key: self._value(record, key) for record in records for key in _references(record)}

    def callback_columns(self, record: Record) -> Columns:
        """The one reader of a record's callbacks, any version: (calls, us, errors)
        with calls a tuple of (device, callback label, driver) per callback (the
        same tuple object for every record of one layout and SharedValues), us a
        list of microseconds (None: never returned), errors {index: errno} of the
        calls whose errno is not 0 (a call with us None has errno None).
        RecordError if a version 3 record's layout is missing from its run."""
        table = record.get("callback_table")
        if isinstance(table, dict):
            key = table.get("layout")
            layout = self._value(record, key)  # also when decoded already: this run must hold it
            calls = self.values.columns.get(key)
            if calls is None:
                devices, labels = layout["devices"], layout["callbacks"]
                calls = self.values.columns[key] = tuple((devices[d], labels[c], split_device_id(devices[d])[1])
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
        found: list[tuple[str, str, Optional[str]]] = []
        us = []
        errors = {}
        for device, sequence in (record.get("callbacks") or {}).items():
            driver = split_device_id(device)[1]
            for call in sequence:
                if isinstance(call, dict):
                    cb, duration, err, call_driver = call["cb"], call["us"], call["err"], call.get("driver")
                else:
                    (cb, duration, err), call_driver = call[:3], driver
                if err:
                    errors[len(found)] = err
                found.append((device, cb, call_driver))
                us.append(duration)
        return tuple(found), us, errors

    def callback_errors(self, record: Record) -> list[dict[str, Any]]:
        """[{"device", "cb", "err", "t"}] of the callbacks whose errno is not 0, in
        the record's callback order (t: the start time, version 1 only, else
        None); unlike callback_columns() it leaves the durations packed."""
        table = record.get("callback_table")
        if isinstance(table, dict):
            layout = self._value(record, table.get("layout"))
            devices, labels, rows = layout["devices"], layout["callbacks"], layout["rows"]
            return [{"device": devices[rows[row][0]], "cb": labels[rows[row][1]], "err": err, "t": None}
                    for row, err in sorted(table.get("err") or ())]
        return [{"device": device, "cb": call["cb"] if isinstance(call, dict) else call[0],
                 "err": call["err"] if isinstance(call, dict) else call[2],
                 "t": call.get("t") if isinstance(call, dict) else None}
                for device, sequence in (record.get("callbacks") or {}).items() for call in sequence
                if (call["err"] if isinstance(call, dict) else call[2])]

    def callbacks(self, record: Record) -> Sequences:
        """{device: [{"cb", "driver", "t", "us", "err"}]} of any record version
        (version 1 objects keep their driver and start time t; otherwise driver
        is the one in the device identity and t is None)."""
        if isinstance(record.get("callbacks"), dict) and not isinstance(record.get("callback_table"), dict):
            out: Sequences = {}
            for device, sequence in record["callbacks"].items():
                out[device] = [{"cb": c["cb"], "driver": c.get("driver"), "t": c.get("t"), "us": c["us"],
                                "err": c["err"]}
                               if isinstance(c, dict) else
                               {"cb": c[0], "driver": split_device_id(device)[1], "t": None, "us": c[1], "err": c[2]}
                               for c in sequence]
            return out
        calls, us, errors = self.callback_columns(record)
        out = {}
        for index, (device, cb, driver) in enumerate(calls):
            out.setdefault(device, []).append({"cb": cb, "driver": driver, "t": None,
                                               "us": us[index],
                                               "err": None if us[index] is None else errors.get(index, 0)})
        return out

    def pmtest(self, record: Record) -> dict[str, list[str]]:
        """{pmtest device: ["<cb>:<event>=<ret>", ...]} of any record version."""
        if isinstance(record.get("pmtest_ref"), str):
            return self._value(record, record["pmtest_ref"])
        return record.get("pmtest") or {}


class RunRecord(dict[str, Any]):
    """A record of a run, as RunReader.read() and RunDir.append() return it:
    equal to its line's JSON object, and knowing the reader of its run, so
    that callbacks(record) and the like need no run in hand. A copy made
    with dict() or dict(r, **changes) is a plain record again; copy.copy
    and copy.deepcopy keep the reader."""

    __slots__ = ("reader",)

    def __init__(self, fields: Record, reader: RunReader) -> None:
        super().__init__(fields)
        self.reader = reader

    def __copy__(self) -> "RunRecord":
        return RunRecord(self, self.reader)

    def __deepcopy__(self, memo: dict[int, Any]) -> "RunRecord":
        return RunRecord(copy.deepcopy(dict(self), memo), self.reader)


def close_interrupted(record: Record, when: Optional[float] = None) -> Record:
    """A cycle with only its "started" line whose harness stopped or is known
    to be gone, closed as interrupted (verdict and phase "interrupted")."""
    closed = mark_done(dict(record), verdict=INTERRUPTED, phase="interrupted",
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


def host_events(record: Record) -> list[list[Any]]:
    """A record's host events under either name ([] if it has none)."""
    events = record.get(EVENTS_FIELD)
    if events is None:
        events = record.get(OLD_EVENTS_FIELD)
    return events or []


def report_path(number: int) -> str:
    """A cycle's full guest report, relative to its run directory."""
    return f"reports/cycle{number}.txt.gz"


def read_report(run_dir: str, relative: str) -> str:
    """The text of a kept guest report, `relative` as a record's "report"
    names it (RunDir.write_file wrote it, gzip-compressed or plain)."""
    path = os.path.join(run_dir, relative)
    if path.endswith(".gz"):
        with gzip.open(path, "rt", errors="replace") as packed:
            return packed.read()
    with open(path, errors="replace") as source:
        return source.read()


def hang_dump_path(number: int, guest: str) -> str:
    return f"hang-cycle{number}-{guest}.txt"


def sleepgraph_paths(number: int) -> tuple[str, str]:
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
# A judged record carries the values it made in CARRIED_FIELD ({key:
# value}) until it is written: the writer (append_records) puts those its
# run lacks into the run's shared.jsonl and takes the field out of the
# record. A record written elsewhere than where it was read (merge) gets the
# values from its run's reader (RunReader.shared_values), given to the
# writer. Content keys make the values safe to hold once for many runs
# (SharedValues); which keys a record may use is still only what its own
# run's shared.jsonl holds.

SHARED_FILE = "shared.jsonl"
CARRIED_FIELD = "_shared_values"  # never written: see above


class RecordError(ValueError):
    """A version 3 record refers to a shared value its run does not hold."""


class SharedValues:
    """Shared values by content key, and the callback columns decoded from
    each layout (callback_columns): a RunReader's own, or one for the
    readers of many runs, so a layout they have in common is held and
    decoded once."""

    def __init__(self) -> None:
        self.by_key: dict[str, Any] = {}
        self.columns: dict[Optional[str], tuple[tuple[str, str, Optional[str]], ...]] = {}


def shared_path(cycles_file: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(cycles_file)), SHARED_FILE)


def _content_key(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _references(record: Record) -> Iterator[str]:
    table = record.get("callback_table")
    if isinstance(table, dict) and isinstance(table.get("layout"), str):
        yield table["layout"]
    if isinstance(record.get("pmtest_ref"), str):
        yield record["pmtest_ref"]


def _store_shared(reader: "RunReader", records: Sequence[Record], shared: Optional[dict[str, Any]]) -> None:
    """Append to the run's shared.jsonl the values `records` refer to that it
    lacks, from what the records carry or `shared`; take CARRIED_FIELD out
    of every record."""
    wanted: dict[str, Record] = {}
    carried: dict[str, Any] = {}
    for record in records:
        for key, value in (record.pop(CARRIED_FIELD, None) or {}).items():
            carried.setdefault(key, value)  # equal content; the first one made is written, as it always was
        for key in _references(record):
            wanted[key] = record
    if not wanted:
        return
    present = reader.shared_keys()
    missing = [key for key in wanted if key not in present]
    for key in missing:
        if key not in carried and key not in (shared or {}):
            raise RecordError(f"cycle {wanted[key].get('cycle')} refers to shared value {key}, which neither "
                              f"{reader.shared_path} nor the record nor the values given hold")
    if missing:
        assert reader.shared_path is not None, "a writer's reader has its run's path (RunReader(None) only reads)"
        _append_bytes(reader.shared_path, "".join(
            json.dumps({"key": key, "value": carried[key] if key in carried else (shared or {})[key]}) + "\n"
            for key in missing).encode())


def compact_fields(sequences: Sequences, pmtest_by_device: dict[str, list[str]]) -> Record:
    """The version 3 record fields of a cycle's callbacks (lab.trace.callbacks:
    {device: [{"cb", "us", "err", ...}]}) and pmtest log (lab.pmtest_log.by_device),
    with the shared values they refer to in CARRIED_FIELD, for the writer."""
    devices: list[str] = []
    labels: dict[str, int] = {}
    rows: list[list[int]] = []
    durations: list[Optional[float]] = []
    errors: list[list[int]] = []
    for device, calls in sequences.items():
        devices.append(device)
        for call in calls:
            if call["err"]:
                errors.append([len(rows), call["err"]])
            rows.append([len(devices) - 1, labels.setdefault(call["cb"], len(labels))])
            durations.append(call["us"])  # as traced (floats): read back exactly
    layout = {"devices": devices, "callbacks": list(labels), "rows": rows}
    packed = base64.b64encode(zlib.compress(json.dumps(durations, separators=(",", ":")).encode(), 9)).decode()
    layout_key, pmtest_key = _content_key(layout), _content_key(pmtest_by_device)
    return {"callback_table": {"layout": layout_key, "us": packed, "err": errors},
            "pmtest_ref": pmtest_key,
            CARRIED_FIELD: {layout_key: layout, pmtest_key: pmtest_by_device}}


_DURATION_TYPES = frozenset({int, float, type(None)})


def reader_of(record: Record) -> RunReader:
    """The reader of the record's run (RunRecord), else one of no run."""
    reader = getattr(record, "reader", None)
    return reader if reader is not None else RunReader(None)


def callback_columns(record: Record) -> Columns:
    """RunReader.callback_columns through the reader of the record's run."""
    return reader_of(record).callback_columns(record)


def callback_errors(record: Record) -> list[dict[str, Any]]:
    """RunReader.callback_errors through the reader of the record's run."""
    return reader_of(record).callback_errors(record)


def callbacks(record: Record) -> Sequences:
    """RunReader.callbacks through the reader of the record's run."""
    return reader_of(record).callbacks(record)


def pmtest(record: Record) -> dict[str, list[str]]:
    """RunReader.pmtest through the reader of the record's run."""
    return reader_of(record).pmtest(record)


# ------------------------------------------------------------------ failed callbacks

# "[('pmtest_legacy.6', 'bus[suspend]', -5)]" as records before version 2 wrote
# failed callbacks into the reason text.
_OLD_FAILED_CALLBACK = re.compile(r"\('(?P<device>[^']*)', '(?P<cb>[^']*)', (?P<err>-?\d+)\)")


def failed_callbacks(record: Record) -> list[dict[str, Any]]:
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


# ------------------------------------------------------------------ where a hang is stuck

# A hung cycle's callback that started and never returned (lab/hang.py reads
# it from the hang dump): {"device", "driver", "callback", "function",
# "since_s", "source"}, any of them null when the dump did not show it;
# when every callback had returned, the device guest's probe that never
# ended: {"probe", "probe_section", "blocked_task"} (null otherwise); and
# "order", the oracle's ordering finding about the stuck device (its parent
# started while it ran), or null.
STUCK_FIELD = "stuck"
STUCK_KEYS = ("device", "driver", "callback", "function", "since_s", "source", "probe", "probe_section",
              "blocked_task", "order")


def stuck(record: Record) -> Optional[dict[str, Any]]:
    """The record's stuck callback (STUCK_FIELD) with every key, a value of
    the wrong type as null; None when it names no device, function or probe."""
    found = record.get(STUCK_FIELD)
    if not isinstance(found, dict):
        return None
    since = found.get("since_s")
    typed = {key: found.get(key) if isinstance(found.get(key), str) else None for key in STUCK_KEYS}
    typed["since_s"] = since if isinstance(since, (int, float)) and not isinstance(since, bool) \
        and math.isfinite(since) else None
    return typed if typed["device"] or typed["function"] or typed["probe"] else None


# ------------------------------------------------------------------ counting

def state_of(record: Record) -> str:
    """What the cycle counts as: its verdict once done (a done record without
    a valid verdict is damaged: the lab's error), else "unfinished"."""
    if not is_done(record):
        return UNFINISHED
    return str(record["verdict"]) if record.get("verdict") in VERDICTS else ERROR


def injected(record: Record) -> bool:
    """Made to fail on purpose: a fault or delay injected (the "injected"
    field), or a verdict provoked (lab/session.py sets expected_verdict)."""
    return (record.get("expected_verdict") or PASS) != PASS or bool(record.get(INJECTED_FIELD))


def request_error(record: Record) -> bool:
    """The guest rejected a knob of the cycle: the request's error, never
    the kernel's fail or the lab's error."""
    return state_of(record) == ERROR and record.get("phase") == REQUEST


def did_as_expected(record: Record) -> bool:
    """Passed, or, for an injected cycle, reached the verdict it was made for."""
    return state_of(record) == (record.get("expected_verdict") or PASS)


def not_passed(records: Iterable[Record]) -> list[Record]:
    """The cycles a run lists as not passed: those that did not do as
    expected, less the interrupted (the run stopped: no failure)."""
    return [r for r in records if not did_as_expected(r) and state_of(r) != INTERRUPTED]


def last_cycle(records: Iterable[Record]) -> int:
    """The highest cycle number among records (0: none): a run continues after it."""
    return max((record["cycle"] for record in records), default=0)


def rerun_origin(record: Record) -> Optional[int]:
    """The planned cycle a record stands for: its own number, or for a
    rerun of a cycle the lab failed (lab.session.Session.cycles) that one's."""
    return record.get("rerun_of", record.get("cycle"))


def not_as_expected(records: Sequence[Record]) -> list[Record]:
    """The records a run is judged by: those that did not do as expected,
    less a lab error whose planned cycle a rerun then got to do as expected
    (the error is still counted, as the lab's, by verdict_counts), and less
    the interrupted cycles (no failure: the run stopped)."""
    settled = {rerun_origin(r) for r in records if did_as_expected(r)}
    return [r for r in records
            if not did_as_expected(r) and state_of(r) != INTERRUPTED
            and not (state_of(r) == ERROR and rerun_origin(r) in settled)]


def verdict_counts(records: Iterable[Record]) -> dict[str, int]:
    """{state: cycles} over STATES: every cycle counted exactly once."""
    counts = dict.fromkeys(STATES, 0)
    for record in records:
        counts[state_of(record)] += 1
    return counts


def wilson(successes: int, trials: int, z: float = Z95) -> Optional[list[float]]:
    """Wilson score interval [low, high] for a binomial proportion, or None."""
    if trials <= 0:
        return None
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


PASS_RATE_DEFINITION = ("pass / (pass + fail + hang + unfinished); lab errors, interrupted cycles and cycles "
                        "failed on purpose (injected) are counted but not judged; ci95: Wilson score interval")


def pass_rate(records: Sequence[Record]) -> dict[str, Any]:
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


def works_rate(probes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The one works-after-resume rate of a device's probes (the records'
    "probes" entries): {"probes", "ok", "rate", "ci95"}."""
    ok = sum(1 for probe in probes if probe.get("ok") is True)
    return {"probes": len(probes), "ok": ok, "rate": round(ok / len(probes), 4) if probes else None,
            "ci95": wilson(ok, len(probes))}


def nearest_rank(ordered: Sequence[Ordered], fraction: float) -> Ordered:
    """The nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _stats(values: Iterable[Any]) -> Optional[dict[str, float]]:
    numbers = [v for v in values if isinstance(v, (int, float))]
    if not numbers:
        return None
    return {"n": len(numbers), "mean": round(statistics.mean(numbers), 3),
            "median": round(statistics.median(numbers), 3),
            "min": round(min(numbers), 3), "max": round(max(numbers), 3)}


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    """Counts and the pass rate over all cycles and per mode."""
    def block(group: Sequence[Record]) -> dict[str, Any]:
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
        for r in not_passed(records)]
    summary["expected_non_pass"] = [
        {"cycle": r["cycle"], "verdict": r["verdict"], "phase": r.get("phase")}
        for r in records if injected(r) and did_as_expected(r)]
    summary["reruns"] = sum(r.get("rerun_of") is not None for r in records)
    summary["written"] = iso(time.time())
    return summary
