"""Test inputs for the dashboard tests, made from real recordings only.

pytest/recordings/cycles.jsonl holds 13 real cycle records without their
bulky callbacks / pmtest fields; the guest reports next to it
(report-<recording>.txt.gz) hold the full trace and pmtest log those fields
are made from. with_callbacks() puts them back with the lab's own parsers
(lab/trace.py, lab/pmtest_log.py), so the callback latencies the tests see
are the real guests' ones.
"""

import copy
import gzip
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDINGS = os.path.join(REPO, "pytest", "recordings")

# Fields of the "started" line (lab/cycle.py drive_cycle), the rest comes with "done".
STARTED_FIELDS = ("run_id", "cycle", "mode", "wake", "pm_test", "guest", "host_start", "knobs",
                  "guest_boot_id", "kernel", "profile", "worker", "project_commit")


def recorded_records():
    """The recorded final records, in file order (deep copies)."""
    from lab.records import cycles_path, read_cycles

    return read_cycles(cycles_path(RECORDINGS))


def with_callbacks(records):
    """Copies of records with callbacks and pmtest rebuilt from their reports
    as lab/cycle.py's judge() does; records without a report are unchanged."""
    from lab import guest_report, pmtest_log, trace

    out = []
    for record in records:
        record = copy.deepcopy(record)
        path = os.path.join(RECORDINGS, f"report-{record.get('recording')}.txt.gz")
        if record.get("recording") and os.path.isfile(path):
            with gzip.open(path, "rt", errors="replace") as source:
                parts = guest_report.sections(source.read())
            events = trace.parse(parts.get("trace", ""))
            record["callbacks"] = trace.callbacks(events)
            record["pmtest"] = pmtest_log.by_device(pmtest_log.parse(parts.get("pmtest_log")))
        out.append(record)
    return out


def report_text(record):
    """The recorded guest report of a record, or None."""
    path = os.path.join(RECORDINGS, f"report-{record.get('recording')}.txt.gz")
    if not (record.get("recording") and os.path.isfile(path)):
        return None
    with gzip.open(path, "rt", errors="replace") as source:
        return source.read()


def with_phase_ms(records):
    """Copies of records with phase_ms from their reports' traces, as
    lab/cycle.py's judge() writes it (the recordings predate the field)."""
    from lab import guest_report, trace

    out = []
    for record in records:
        record = copy.deepcopy(record)
        text = report_text(record)
        if text is not None:
            record["phase_ms"] = trace.phase_ms(trace.parse(guest_report.sections(text).get("trace", "")))
        out.append(record)
    return out


def with_host_phases(records):
    """Copies of records with host_phases made from their recorded host_start
    and timeline as lab/cycle.py does (the recordings predate the field; their
    timelines lack its last steps, "ended" and "judged")."""
    from dashboards.inputs import epoch
    from lab.judge import host_phases
    from lab.records import is_done

    out = []
    for record in records:
        record = copy.deepcopy(record)
        if is_done(record) and record.get("timeline") and epoch(record.get("host_start")):
            record["host_phases"] = host_phases(epoch(record["host_start"]), record["timeline"])
        out.append(record)
    return out


def compact(records):
    """The same records with callbacks as [cb, us, err] triples (the other
    shape lab/cycle.py has written)."""
    out = copy.deepcopy(records)
    for record in out:
        if isinstance(record.get("callbacks"), dict):
            record["callbacks"] = {device: [[c["cb"], c["us"], c["err"]] for c in calls]
                                   for device, calls in record["callbacks"].items()}
    return out


def version3(records):
    """The same records as lab/cycle.py writes them now (record version 3:
    callbacks and pmtest log compact, lab.records.compact_fields), each
    carrying its shared values until a writer takes them out."""
    from lab import records as record_format

    out = []
    for record in copy.deepcopy(records):
        if isinstance(record.get("callbacks"), dict):
            sequences = {device: [c if isinstance(c, dict) else {"cb": c[0], "us": c[1], "err": c[2]} for c in calls]
                         for device, calls in record.pop("callbacks").items()}
            record.update(record_format.compact_fields(sequences, record.pop("pmtest", None) or {}))
            record["record_version"] = 3
        out.append(record)
    return out


def started_line(record):
    from lab.records import STARTED

    line = {key: record[key] for key in STARTED_FIELDS if key in record}
    line["status"] = STARTED
    return line


def write_run(results_root, run_id, records, manifest=None, summary=True):
    """A run directory written the way the lab writes one (lab.records.RunDir:
    a started line then a done line per cycle, summary.json, `latest` link).
    Records with status "started" get only their started line."""
    from lab.records import RunDir, is_done

    run = RunDir(results_root, run_id)
    for record in records:
        run.append(started_line(record))
        if is_done(record):
            run.append(record)
    if summary:
        run.write_summary()
    if manifest is not None:
        with open(run.file("manifest.json"), "w") as out:
            json.dump(manifest, out, indent=2, sort_keys=True)
    return run.path


def manifest(commit, series_hash="none", variant="baseline", host="lab-host"):
    """A run manifest as lab.manifest.collect() writes it for the default
    artifacts (build/out of this checkout, as an absolute path)."""
    return {
        "schema": "pmlab-run-manifest/1", "run_id": None, "shard": None,
        "project": {"commit": commit, "dirty": False},
        "kernel": {"artifacts_dir": os.path.join(REPO, "build", "out"), "variant": variant,
                   "tree": "linux-source-6.1.tar.xz", "tree_version": "6.1.192", "kernelrelease": "6.1.192+",
                   "series_hash": series_hash, "config_hash": "f72122b6d06e6eb3", "compiler": "gcc",
                   "build_commit": commit[:7]},
        "tools": {"qemu": "7.2.22", "ovmf": "2022.11-6+deb12u2", "libvirt_daemon_system": "9.0.0-4+deb12u2",
                  "libvirtd": "9.0.0"},
        "host": {"hostname": host, "kernel": "6.1.0", "machine": "x86_64", "os": "Debian GNU/Linux 12 (bookworm)",
                 "cpus": 2, "kvm_device": False},
        "errors": [],
    }
