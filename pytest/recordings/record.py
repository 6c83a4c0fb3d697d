"""Regenerate the recordings the parser tests read, from real guests.

  cd <repo> && /usr/bin/python3 pytest/recordings/record.py [--baseline | --artifacts DIR]

Boots guests through the lab (libvirt, q35+OVMF) and keeps, for each kind of
cycle: the guest's report (report-<name>.txt.gz), the cycle records
(cycles.jsonl: libvirt events, timeline, token, boot id, verdict) and the
guest consoles; plus the raw bytes of the agent channel (agent-stream.bin)
and a hung cycle's record, console and QEMU dump. Records are kept without
their bulky callbacks/pmtest fields (the reports hold the full trace).
Nothing here is invented:
rerun it after changing the guest or the kernel and commit what it writes.
"""

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from lab import artifacts, modes  # noqa: E402
from lab.cycle import Watchdogs  # noqa: E402
from lab.records import RunDir  # noqa: E402
from lab.session import Session  # noqa: E402

# (recording name, mode, wake, knobs)
CYCLES = [
    ("mem", "mem", None, ()),
    ("mem-rtc", "mem", "rtc", ()),
    ("freeze", "freeze", None, ()),
    ("disk", "disk", None, ()),
    ("disk-reboot", "disk", "reboot", ()),
    ("pm_test-core", "pm_test-core", None, ()),
    ("pm_test-devices", "pm_test-devices", None, ()),
    ("pm_test-freezer", "pm_test-freezer", None, ()),
    ("mem-fault-suspend", "mem", None, [("fault", "* suspend 5 1")]),
    ("mem-fault-resume", "mem", None, [("fault", "* resume 5 1")]),
]
# The device guest (lab/devices.py, q35: AHCI is 00:1f.2), numbered from 300.
ZOO_CYCLES = [
    ("zoo-mem", "mem", None, ()),
    ("zoo-disk-kfault-freeze", "disk", None, [("kfault", "0000:00:1f.2 freeze -5 1")]),
    # with the probes_before section (guest/pmlab-cycle probes before the
    # suspend too); the first recording was a pc-seabios ./pmlab run's cycle 1
    ("zoo-mem-before", "mem", None, ()),
]
ZOO_FIRST = 300


def keep(record, name):
    """A record as the recordings keep it: named, without the bulky fields
    the report holds in full (v3 refers to shared.jsonl for them)."""
    record["recording"] = name
    for field in ("callbacks", "pmtest", "callback_table", "pmtest_ref"):
        record.pop(field, None)
    return record


def record_zoo(found, results):
    """The device guest's cycles: reports, and their records in
    zoo-cycles.jsonl (apart from cycles.jsonl, which tests read as one
    lean guest's run)."""
    rundir = RunDir(results, "recording-zoo")
    session = Session(found, rundir, worker="zoo", device_set="zoo")
    kept = []
    for number, (name, mode_name, wake, knobs) in enumerate(ZOO_CYCLES, start=ZOO_FIRST):
        record = session.cycle(modes.parse_mode(mode_name, wake), number, knobs,
                               expect="fail" if knobs else "pass")
        print(f"{name}: {record['verdict']} {record.get('phase')} {record.get('reason')}")
        shutil.copyfile(os.path.join(rundir.path, record["report"]), os.path.join(HERE, f"report-{name}.txt.gz"))
        kept.append(keep(record, name))
    session.close()
    with open(os.path.join(HERE, "zoo-cycles.jsonl"), "w") as out:
        out.writelines(json.dumps(record) + "\n" for record in kept)


def record_trace_raw(session):
    """One real S3 sleep's trace buffer twice: as the kernel formats it (`cat
    trace`, which leaves the buffer alone) and as guest/pmlab-evidence's
    binary pages, read after it; lab/trace_raw.py must render the second as
    the first (pytest/test_trace_raw.py). rtcwake wakes the guest itself."""
    tracing = "/sys/kernel/tracing"
    agent = session.guest.agent
    agent.call(f": >{tracing}/trace; echo deep >/sys/power/mem_sleep")
    agent.call(f"echo 'SUSPEND START' >{tracing}/trace_marker; rtcwake -m mem -s 3 >/dev/null 2>&1; "
               f"echo 'RESUME COMPLETE' >{tracing}/trace_marker", timeout=120)
    text = agent.call(f"cat {tracing}/trace")
    pages = agent.call("pmlab-evidence trace_raw=trace-pages")
    assert text.status == 0 and pages.status == 0, (text.output[-300:], pages.output[-300:])
    header = b"=== trace_raw\n"
    assert pages.data.startswith(header), pages.data[:100]
    for name, data in (("trace-raw-mem.txt.gz", text.data), ("trace-raw-mem.bin.gz", pages.data[len(header):])):
        with gzip.open(os.path.join(HERE, name), "wb") as out:
            out.write(data)
    print(f"trace-raw: {text.output.count(chr(10))} text lines, {len(pages.data)} bytes of pages")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifacts")
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--trace-raw-only", action="store_true",
                        help="only the text/pages pair of one S3 sleep's trace buffer")
    parser.add_argument("--zoo-only", action="store_true", help="only the device guest's recordings")
    args = parser.parse_args()
    found = artifacts.find(artifacts.BASELINE_DIR if args.baseline else args.artifacts or artifacts.DEFAULT_DIR)
    results = tempfile.mkdtemp(prefix="pmlab-record-")
    if args.zoo_only:
        record_zoo(found, results)
        return
    rundir = RunDir(results, "recording")
    session = Session(found, rundir, worker="rec")
    if args.trace_raw_only:
        session.cycle(modes.parse_mode("mem"), 100)  # boots the guest
        record_trace_raw(session)
        session.close()
        return

    # 1. Raw agent bytes: a few plain commands and one full cycle.
    mem = modes.parse_mode("mem")
    session.cycle(mem, 100)  # boots the guest
    raw = bytearray()
    session.guest.agent.tap = raw.extend
    for command in ("echo hello", "printf 'no newline at end'", "printf '@pmlab-reply 9 9 9\\n' >&2; exit 3",
                    "head -c 3000 /proc/kallsyms"):
        session.guest.agent.call(command)
    session.cycle(mem, 101)
    session.guest.agent.tap = None
    with gzip.open(os.path.join(HERE, "agent-stream.bin.gz"), "wb") as out:
        out.write(raw)
    record_trace_raw(session)

    # 2. One cycle of each kind, with the report kept.
    names = {}
    for number, (name, mode_name, wake, knobs) in enumerate(CYCLES, start=1):
        record = session.cycle(modes.parse_mode(mode_name, wake), number, knobs)
        names[number] = name
        print(f"{name}: {record['verdict']} {record.get('phase')} {record.get('reason')}")
        if record.get("report"):
            shutil.copyfile(os.path.join(rundir.path, record["report"]),
                            os.path.join(HERE, f"report-{name}.txt.gz"))
    session.close()

    # 3. A hung cycle: pmtest delay past a short suspend watchdog.
    hang_session = Session(found, rundir, worker="hang",
                           watchdogs=Watchdogs(suspend=10))
    record = hang_session.cycle(mem, 200, [("delay", "* suspend 30000")])
    print(f"hang: {record['verdict']} {record.get('phase')}")
    shutil.copyfile(os.path.join(rundir.path, record["hang_dump"]), os.path.join(HERE, "hang-dump.txt"))
    hang_session.close()

    # Records (one line per finished cycle, reports named) and consoles.
    with open(os.path.join(HERE, "cycles.jsonl"), "w") as out:
        for line in open(rundir.cycles_path):
            record = json.loads(line)
            if record["status"] == "done":
                name = names.get(record["cycle"], "hang" if record["cycle"] == 200 else None)
                out.write(json.dumps(keep(record, name)) + "\n")
    consoles = sorted(os.listdir(rundir.file("console")))
    for index, name in enumerate(consoles):
        label = "hang" if "-hang-" in name else "cycles"
        with open(rundir.file("console", name), "rb") as source, \
                gzip.open(os.path.join(HERE, f"console-{label}.log.gz"), "wb") as out:
            out.write(source.read())
    record_zoo(found, results)
    print(f"recordings written to {HERE} (run directory {rundir.path})")


if __name__ == "__main__":
    main()
