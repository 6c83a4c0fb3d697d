"""Per-cycle results of a pmlab LAVA job, from the job log lava-run prints.

Without a LAVA server the per-test results exist only in the job log, as
lines whose "lvl" is "results" (YAML flow mappings, not strict JSON: lava-run
writes e.g. `"size": ! "3187712"`). Each named command of the interactive
test gives one: definition "0_pmlab-s3", case "cycle-N", result pass|fail.
The guest's own line "pmlab-lava: cycle N verdict=... status=S
success_delta=D lowlevel_resumes=L" (a "target" line) says why.

  /usr/bin/python3 -m pipelines.lava.results JOB_LOG [--run-dir DIR]

prints one line per cycle and, with --run-dir, writes DIR/cycles.jsonl in
the lab's record format (mode mem, wake rtc, profile lava-qemu) so the
dashboard reads LAVA cycles like lab cycles. Exit 0 if every cycle passed
and the job finished, 1 otherwise.
"""

import argparse
import datetime
import json
import os
import re
import sys

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from lab.records import cycles_path, write_cycles  # noqa: E402

# Numbers have at most 18 digits: a longer run is a corrupted line (and
# int() refuses more than 4300 digits).
GUEST_LINE = re.compile(r"pmlab-lava: cycle (?P<cycle>\d{1,18}) verdict=(?P<verdict>PASS|FAIL) status=(?P<status>\S*) "
                        r"success_delta=(?P<delta>-?\d{1,18}) lowlevel_resumes=(?P<lowlevel>-?\d{1,18})(?!\d)")
CASE = re.compile(r"^cycle-(\d{1,18})$")
STATUS = re.compile(r"-?\d{1,18}")


def parse_line(raw):
    raw = raw.strip()
    if not raw.startswith("{"):
        return None
    try:
        entry = json.loads(raw)
    except RecursionError:
        return None
    except ValueError:
        try:
            entry = yaml.safe_load(raw)
        except Exception:  # YAMLError, and what PyYAML's constructors raise on a bad !!tag
            return None
    return entry if isinstance(entry, dict) else None


def moment(stamp):
    """A log "dt" as a UTC datetime, or None if it is not one."""
    try:
        return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return None


def seconds(duration):
    """A result's "duration" as seconds, or None if it is not one."""
    try:
        value = float(duration)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if 0 <= value < 1e6 else None


def parse_log(lines):
    """{"cycles": {n: {...}}, "job": result dict or None, "setup": result or None}"""
    cycles, job, setup, guest = {}, None, None, {}
    for raw in lines:
        entry = parse_line(raw)
        if not entry:
            continue
        message = entry.get("msg")
        if entry.get("lvl") == "target" and isinstance(message, str):
            match = GUEST_LINE.search(message)
            if match:
                guest[int(match["cycle"])] = match.groupdict()
            continue
        if entry.get("lvl") != "results" or not isinstance(message, dict):
            continue
        definition, case = str(message.get("definition", "")), str(message.get("case", ""))
        if definition == "lava" and case == "job":
            job = message
        elif definition.endswith("_pmlab-s3"):
            match = CASE.match(case)
            if match:
                cycles[int(match[1])] = {"result": message.get("result"), "duration": message.get("duration"),
                                         "dt": entry.get("dt")}
            elif case == "setup":
                setup = message
    for number, details in guest.items():
        cycles.setdefault(number, {"result": "fail", "duration": None, "dt": None})["guest"] = details
    return {"cycles": cycles, "job": job, "setup": setup}


def records(parsed, run_id, expected=None):
    """Lab-format final records; cycles the job never reached are errors."""
    out = []
    numbers = sorted(set(parsed["cycles"]) | set(range(1, (expected or 0) + 1)))
    for number in numbers:
        found = parsed["cycles"].get(number)
        record = {"run_id": run_id, "cycle": number, "status": "done", "mode": "mem", "wake": "rtc",
                  "pm_test": "none", "profile": "lava-qemu", "worker": "lava"}
        if found is None:
            record.update(verdict="error", phase="lava",
                          reason="the LAVA job ended before this cycle ran"
                                 + (f": {parsed['job']['error_msg']}" if (parsed["job"] or {}).get("error_msg") else ""))
            out.append(record)
            continue
        guest = found.get("guest") or {}
        end, duration = moment(found.get("dt")), seconds(found.get("duration"))
        if end:
            record["host_end"] = end.isoformat(timespec="milliseconds")
            try:
                start = end - datetime.timedelta(seconds=duration) if duration is not None else None
            except OverflowError:  # a "dt" in the year 1
                start = None
            if start:
                record["host_start"] = start.isoformat(timespec="milliseconds")
                record["host_seconds"] = round(duration, 3)
        if guest:
            record["enter_status"] = int(guest["status"]) if STATUS.fullmatch(guest["status"]) else None
            record["proof"] = {"suspend_stats_success": int(guest["delta"]),
                               "lowlevel_resumes": int(guest["lowlevel"])}
        if found.get("result") == "pass":
            record.update(verdict="pass", phase=None, reason=None)
        elif guest:
            record.update(verdict="fail", phase="sleep" if guest["status"] == "0" else "enter",
                          reason=f"guest: status={guest['status']} success_delta={guest['delta']} "
                                 f"lowlevel_resumes={guest['lowlevel']}")
        else:
            record.update(verdict="hang", phase="lava",
                          reason="no verdict line from the guest (LAVA timed out or matched a prompt)")
        out.append(record)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m pipelines.lava.results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job_log")
    parser.add_argument("--run-dir", help="write RUN_DIR/cycles.jsonl")
    parser.add_argument("--cycles", type=int, help="cycles the job was meant to run")
    args = parser.parse_args(argv)
    with open(args.job_log, errors="replace") as source:
        parsed = parse_log(source)
    run_id = os.path.basename(os.path.normpath(args.run_dir)) if args.run_dir else "lava"
    result = records(parsed, run_id, args.cycles)
    for record in result:
        text = f"lava cycle {record['cycle']:>3} mem/rtc: {record['verdict'].upper()}"
        if record.get("host_seconds") is not None:
            text += f" {record['host_seconds']:.2f}s"
        if record.get("proof"):
            text += f" (suspend_stats +{record['proof']['suspend_stats_success']}, " \
                    f"ACPI low-level resumes +{record['proof']['lowlevel_resumes']})"
        if record["verdict"] != "pass":
            text += f": {record['reason']}"
        print(text)
    job = parsed["job"] or {}
    print(f"lava job: {job.get('result', 'no result line')}"
          + (f" ({job.get('error_type')}: {job.get('error_msg')})" if job.get("error_msg") else ""))
    if args.run_dir:  # the job log is the source: a second import replaces the first
        os.makedirs(args.run_dir, exist_ok=True)
        write_cycles(cycles_path(args.run_dir), result)
    ok = result and all(r["verdict"] == "pass" for r in result) and job.get("result") == "pass"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
