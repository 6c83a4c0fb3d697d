"""results/<run-id>/cycles.jsonl and summary.json.

Each cycle is appended twice: once as it starts (status "started") and once
when it ends (status "done", same cycle number: it supersedes the first).
Every line is flushed and fsynced as written, so a guest or host that dies
mid-cycle still leaves that cycle's "started" line. Several processes
(pytest-xdist workers) append to one file: each line is one write() under an
exclusive lock. Nothing is ever rewritten in place.
"""

import datetime
import errno
import fcntl
import gzip
import json
import os
import statistics
import time

VERDICTS = ("pass", "fail", "hang", "error")


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


class RunDir:
    """One run's result directory; `latest` points at the newest run."""

    def __init__(self, results_root, run_id):
        self.run_id = run_id
        self.path = os.path.join(results_root, run_id)
        os.makedirs(os.path.join(self.path, "console"), exist_ok=True)
        self.cycles_path = os.path.join(self.path, "cycles.jsonl")
        self.summary_path = os.path.join(self.path, "summary.json")
        link = os.path.join(results_root, "latest")
        temporary = f"{link}.{os.getpid()}"
        try:
            os.symlink(run_id, temporary)
            os.replace(temporary, link)
        except OSError:
            pass

    def file(self, *parts):
        return os.path.join(self.path, *parts)

    def append(self, record):
        """Append one record as one line. A line the disk cannot take whole
        is cut off again (ResultsWriteError), so no half line is left."""
        line = (json.dumps(record, sort_keys=False) + "\n").encode()
        try:
            fd = os.open(self.cycles_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise results_write_error(self.cycles_path, error) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(fd)
            except OSError as error:
                os.ftruncate(fd, size)
                raise results_write_error(self.cycles_path, error) from None
        finally:
            os.close(fd)

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
        temporary = self.summary_path + f".{os.getpid()}"
        try:
            with open(temporary, "w") as out:
                json.dump(summary, out, indent=2)
                out.write("\n")
            os.replace(temporary, self.summary_path)
        except OSError as error:  # the old summary.json, if any, stays whole
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise results_write_error(self.summary_path, error) from None
        return summary


def read_cycles(path):
    """The latest record of every cycle, in cycle order. A line cut short by a
    crash, or one that is not a record (no integer "cycle"), is skipped; a
    cycle with only its "started" line stays "started". The dashboard's reader
    (dashboards/inputs.py) reports such lines with file and line number."""
    latest = {}
    try:
        with open(path, "rb") as source:
            for raw in source:
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if not isinstance(record, dict) or type(record.get("cycle")) is not int:
                    continue
                latest[record["cycle"]] = record
    except FileNotFoundError:
        return []
    return [latest[number] for number in sorted(latest)]


def _stats(values):
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return None
    return {"n": len(values), "mean": round(statistics.mean(values), 3),
            "median": round(statistics.median(values), 3),
            "min": round(min(values), 3), "max": round(max(values), 3)}


def summarize(records):
    """Counts and rates over all cycles and per mode."""
    def block(group):
        counts = {verdict: 0 for verdict in VERDICTS}
        counts["unfinished"] = 0
        for record in group:
            if record.get("status") != "done":
                counts["unfinished"] += 1
            else:  # a done record without a verdict is damaged: the lab's error
                verdict = record.get("verdict") if record.get("verdict") in VERDICTS else "error"
                counts[verdict] += 1
        total = len(group)
        return {
            "cycles": total,
            "counts": counts,
            "pass_rate": round(counts["pass"] / total, 4) if total else None,
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
        {"cycle": r["cycle"], "mode": r.get("mode"), "verdict": r.get("verdict", "unfinished"),
         "phase": r.get("phase"), "reason": r.get("reason")}
        for r in records if r.get("verdict", "unfinished") != r.get("expected_verdict", "pass")]
    summary["expected_non_pass"] = [
        {"cycle": r["cycle"], "verdict": r["verdict"], "phase": r.get("phase")}
        for r in records if r.get("expected_verdict", "pass") != "pass" and r.get("verdict") == r["expected_verdict"]]
    summary["written"] = iso(time.time())
    return summary
