"""pmlab cycles as LAVA jobs on a LAVA server (pipelines/lava/lab-up's, or
the user's own): split a plan into jobs, submit them with lavacli, follow
them, fetch each job's log and turn every framed report into a normal pmlab
record, judged by lab.cycle.judge_with_order and written by lab/records.py.

  /usr/bin/python3 -m pipelines.lava.jobs --mode 'mem/rtc*2' [--jobs 2]
        [--inject CYCLE:KNOB=VALUE] [--artifacts DIR] [--results DIR] [--run-id ID]
        [--identity pmlab] [--tags q35-ovmf]

A server that stops answering (restarted, down) is asked again for up to
SERVER_PATIENCE seconds; the jobs go on on the workers meanwhile.
A job that ends early (its worker killed, canceled, a broken frame): the
cycle it was in (its kernel begin marker is on the console, its report is
not) is recorded as verdict "error", phase "lava", with the job id; the
cycles it never began are submitted again in a new job (--retries times,
then recorded as errors). Every planned cycle gets exactly one record.
Exit 0: every cycle passed; 1: some did not; 2: bad input or setup.

Engine differences a reader of the records must know: there is no libvirt,
so the host's proof of a cycle (libvirt's domain events) is taken from the
job log instead (record field events_source): one firmware S3 resume
("ACPI: PM: Low-level resume complete") between the cycle's begin and end
kernel markers counts as one PMSuspended and one PMWakeup; for S4, the
kernel entering ACPI S4 after it marked the image in swap ("PM: S|", then
"Preparing to enter system sleep state S4") counts as PMSuspended-disk, and
LAVA launching QEMU again (its "Boot command:" log line) inside the cycle
as the domain stopping (QEMU exits at the S4 power-off; LAVA's next boot
action ends it if it has not yet) before it is started again.
Modes: mem/rtc, disk/platform (each S4 cycle ends a segment of the job: the
next boot action relaunches QEMU on the same swap disk and the image is
resumed) and pm_test-*. Refused: freeze (no power button), mem/pmwakeup (no
QMP), disk/reboot, and "boot" knobs (the kernel command line of a LAVA job
is the same for every boot).

A job runs on one machine profile, named by its device tags (each device of
lab-up's is tagged with its profile: q35-ovmf, pc-seabios): its kernel
command line carries that profile's words from lab/virt.py PROFILES, the
same as a libvirt guest's (lab/guest.py): the firmware errata
(lab.virt.errata_cmdline; q35-ovmf: memmap=4K$0x808000, --no-firmware-errata
leaves it off) and pmtest_ramguard's window (lab.virt.ramguard_cmdline). A
pmtest_ramguard line in a cycle's console is the platform's fail
(lab.cycle.judge), even when the damage killed the cycle's report.
"""

import argparse
import base64
import datetime
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from lab import console, guest_report, modes  # noqa: E402
from lab.cycle import FRESH_BOOT, cycle_arguments, judge_with_order  # noqa: E402
from lab.guest import BASE_CMDLINE  # noqa: E402
from lab.records import EVENTS_FIELD, RECORD_VERSION, RunDir, new_run_id, report_path  # noqa: E402
from lab import virt  # noqa: E402
from lab.virt import LabError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SWAP_BYTES = 256 << 20  # S3 needs none; hibernation of a 512 MiB guest fits
LAVA_MODES = ("mem/rtc", "pm_test")
BEGIN = re.compile(r"pmlab-lava: report-begin cycle=(?P<cycle>\d{1,9}) status=(?P<status>\d{1,3}) "
                   r"token=(?P<token>[0-9a-f-]{1,64}) boot_id=(?P<boot_id>[0-9a-f-]{1,64}) "
                   r"bytes=(?P<bytes>\d{1,9}) md5=(?P<md5>[0-9a-f]{32})$")
END = re.compile(r"pmlab-lava: report-end cycle=(?P<cycle>\d{1,9})$")
S3_RESUME = "ACPI: PM: Low-level resume complete"
# swap_writer_finish() prints "PM: S" + "|" around marking the image in swap;
# hibernation_platform_enter() then prints this before writing S4 to ACPI.
IMAGE_MARKED = "PM: S|"
S4_ENTER = "ACPI: PM: Preparing to enter system sleep state S4"
QEMU_LAUNCH = "Boot command:"  # lava_dispatcher's CallQemuAction, one per boot action
EVENTS_SOURCE = ("LAVA job log (no libvirt): a firmware S3 resume = pmsuspend + pmwakeup; "
                 "'PM: S|' then entering S4 = pmsuspend-disk; a QEMU relaunch = stopped + started")
FINISHED = ("Finished", "Canceled")
# How long run_plan keeps asking a server that does not answer (restarted,
# down) before it gives up: the jobs run on the workers meanwhile.
SERVER_PATIENCE = 600


class LavaError(Exception):
    pass


def check_mode(mode):
    if mode.kind == "pm_test" or (mode.kind, mode.wake) in (("mem", "rtc"), ("disk", "platform")):
        return mode
    raise LabError(f"mode {mode.name}/{mode.wake} cannot run as a LAVA job here: only mem/rtc, "
                   f"disk/platform and pm_test-* (no QMP to wake the guest or press its power button)")


def check_knobs(number, knobs):
    for name, value in knobs:
        if name == "boot":
            raise LabError(f"cycle {number}: boot:{value} cannot run as a LAVA job: every boot of a job "
                           f"has the same kernel command line")
    return tuple(knobs)


# ------------------------------------------------------------------ jobs

def job_profile(tags):
    """The machine profile (lab.virt.PROFILES) a job with device `tags` runs
    on: exactly one of the tags must name one. Its kernel command line
    depends on the profile (firmware errata, pmtest_ramguard's window), so a
    job that could land on either profile's devices is refused: ask for one
    profile per job (run it twice for both)."""
    named = [tag for tag in tags if tag in virt.PROFILES]
    if len(named) != 1:
        raise LabError(f"the LAVA job's tags {list(tags)} must name exactly one machine profile "
                       f"({', '.join(virt.PROFILES)}): the kernel command line carries the profile's "
                       f"firmware errata and pmtest_ramguard words (lab/virt.py PROFILES)")
    return named[0]


def kernel_args(plan, profile="q35-ovmf", firmware_errata=True):
    """The guest's command line for `plan` [(number, mode, knobs)] on a
    device of `profile`: the words of a libvirt guest's (lab/guest.py), from
    the same place (lab/virt.py PROFILES), then the plan."""
    lines = "".join(cycle_arguments(mode, number, knobs) + "\n" for number, mode, knobs in plan)
    encoded = base64.b64encode(gzip.compress(lines.encode(), mtime=0)).decode()
    errata = virt.errata_cmdline(profile) if firmware_errata else ""
    args = " ".join(word for word in (BASE_CMDLINE, errata, virt.ramguard_cmdline(profile),
                                      f"pmlab.mode=lava pmlab.plan={encoded}") if word)
    if len(args) > 2000:  # x86 COMMAND_LINE_SIZE is 2048
        raise LabError(f"a LAVA job of {len(plan)} cycles does not fit on the kernel command line; "
                       f"split the plan into more jobs")
    return args


def render_job(plan, artifacts_dir, job_name, tags=("q35-ovmf",), firmware_errata=True):
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    # Under TCG: boot ~20 s (OVMF), an S3 cycle with a 2 s RTC alarm and
    # its report ~15 s, an S4 cycle (image written, QEMU relaunched, image
    # read back) about a minute; generous, LAVA's timeout is only the last
    # resort. Each S4 cycle adds a boot and a test action (a segment).
    disk = sum(1 for _, mode, _ in plan if mode.kind == "disk")
    segments = 1 + disk
    test_minutes = 3 + len(plan) + 3 * disk
    boot_minutes = 4
    text = env.get_template("job-cycles.yaml").render(
        job_name=job_name, tags=list(tags), artifacts_url="file://" + os.path.abspath(artifacts_dir),
        kernel_args=kernel_args(plan, job_profile(tags), firmware_errata), boot_minutes=boot_minutes, test_minutes=test_minutes,
        segments=segments, job_minutes=test_minutes + segments * boot_minutes + 10)
    yaml.safe_load(text)
    return text


def initramfs_init(path):
    """The text of /init in a gzip'd newc cpio archive (None if absent)."""
    data = gzip.decompress(open(path, "rb").read())
    offset = 0
    while data[offset:offset + 6] in (b"070701", b"070702"):
        fields = [int(data[offset + 6 + 8 * i:offset + 14 + 8 * i], 16) for i in range(13)]
        size, name_size = fields[6], fields[11]
        name_start = offset + 110
        name = data[name_start:name_start + name_size - 1].decode(errors="replace")
        body = (name_start + name_size + 3) & ~3
        if name in ("init", "./init"):
            return data[body:body + size].decode(errors="replace")
        if name == "TRAILER!!!":
            break
        offset = (body + size + 3) & ~3
    return None


def prepare_artifacts(source, target):
    """Copy the kernel, initramfs and SSDT of `source` into `target` with a
    sparse swap image: LAVA downloads from there (file://) for every job."""
    os.makedirs(target, exist_ok=True)
    for name in ("bzImage", "initramfs.cpio.gz", "pmtest-ssdt.aml"):
        path = os.path.join(source, name)
        if not os.path.isfile(path):
            raise LabError(f"{path} missing: build the kernel and initramfs first")
        shutil.copy2(path, os.path.join(target, name))
    init = initramfs_init(os.path.join(source, "initramfs.cpio.gz")) or ""
    if "pmlab-lava: ready" not in init:
        raise LabError(f"{source}/initramfs.cpio.gz has a guest/init without pmlab.mode=lava: "
                       f"rebuild it (lab/build-initramfs {source})")
    with open(os.path.join(target, "swap.img"), "wb") as out:
        out.truncate(SWAP_BYTES)
    return target


def lavacli(identity, *args, timeout=120):
    command = ["lavacli", "-i", identity, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LavaError("lavacli missing: run pipelines/lava/install --server") from None
    except subprocess.TimeoutExpired:
        raise LavaError(f"{' '.join(command)} did not answer in {timeout} s") from None
    if done.returncode != 0:
        why = (done.stderr.strip() or done.stdout.strip())[-500:]  # lavacli prints "Unable to connect" on stdout
        raise LavaError(f"{' '.join(command)} failed ({done.returncode}): {why}")
    return done.stdout


def patiently(call, *args, patience=SERVER_PATIENCE, log=print):
    """call(*args), asked again while the server does not answer (lavacli
    fails), with growing pauses, for up to `patience` seconds."""
    deadline, pause = time.monotonic() + patience, 2
    while True:
        try:
            return call(*args)
        except LavaError as error:
            if time.monotonic() + pause > deadline:
                raise LavaError(f"{error} (still failing after {patience} s of retries)") from None
            log(f"lava: {error}; asking again in {pause} s")
            time.sleep(pause)
            pause = min(pause * 2, 30)


def submit(identity, job_text):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as out:
        out.write(job_text)
    try:
        output = lavacli(identity, "jobs", "submit", out.name).strip()
    finally:
        os.unlink(out.name)
    if not output.split()[-1:] or not output.split()[-1].isdigit():
        raise LavaError(f"lavacli jobs submit printed no job id: {output!r}")
    return int(output.split()[-1])


def job_state(identity, job_id):
    """{"state", "health", "device", ...} of a job (lavacli jobs show --yaml)."""
    return yaml.safe_load(lavacli(identity, "jobs", "show", "--yaml", str(job_id))) or {}


def device_worker(identity, device):
    for line in lavacli(identity, "devices", "show", device).splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "worker":
            return value.strip()
    return None


def job_log(identity, job_id):
    """The job log as a list of {"dt", "lvl", "msg"} entries."""
    return yaml.safe_load(lavacli(identity, "jobs", "logs", "--raw", str(job_id), timeout=300)) or []


# ------------------------------------------------------------------ the log

def console_lines(entries):
    """The guest's console, one line per "target" entry, with its time."""
    out = []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("lvl") == "target" and isinstance(entry.get("msg"), str):
            out.append((entry.get("dt"), entry["msg"].rstrip("\r")))
    return out


def qemu_launches(entries):
    """Where LAVA launched QEMU: for each launch, how many console lines
    came before it (positions in console_lines' list)."""
    out, seen = [], 0
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("msg"), str):
            continue
        if entry.get("lvl") == "target":
            seen += 1
        elif entry.get("lvl") == "info" and entry["msg"].startswith(QEMU_LAUNCH):
            out.append(seen)
    return out


def frames(lines):
    """{cycle: {"status", "token", "boot_id", "report" (text or None), "problem", "dt"}}
    from the console lines: each report checked against its length and md5."""
    found, current = {}, None
    for index, (stamp, text) in enumerate(lines):
        text = text.strip()
        begin = BEGIN.search(text)
        if begin:
            current = {**begin.groupdict(), "chunks": [], "begin_dt": stamp}
            continue
        if current is None:
            continue
        end = END.search(text)
        if end:
            number = int(current["cycle"])
            payload, problem, report = None, None, None
            try:
                payload = base64.b64decode("".join(current["chunks"]), validate=True)
            except ValueError as error:
                problem = f"the framed report is not base64 ({error})"
            if payload is not None:
                if len(payload) != int(current["bytes"]):
                    problem = f"the framed report has {len(payload)} bytes, its frame says {current['bytes']}"
                elif hashlib.md5(payload).hexdigest() != current["md5"]:
                    problem = "the framed report's md5 does not match its frame"
                else:
                    report = guest_report.from_bytes(gzip.decompress(payload))  # trace pages rendered
            if end["cycle"] != current["cycle"]:
                problem = f"report-begin of cycle {current['cycle']} ended by report-end of cycle {end['cycle']}"
                report = None
            found[number] = {"status": int(current["status"]), "token": current["token"],
                             "boot_id": current["boot_id"], "report": report, "problem": problem,
                             "dt": stamp, "begin_dt": current["begin_dt"], "end_index": index}
            current = None
        else:
            current["chunks"].append(text)
    return found


def moment(stamp):
    try:
        return datetime.datetime.fromisoformat(str(stamp)).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def console_events(mode, evidence, stamp, relaunches=0, report=None):
    """What libvirt's events would have said, from the job log: one firmware
    S3 resume in the cycle's lines is one PMSuspended and one PMWakeup; the
    kernel entering S4 after marking its image is one PMSuspended-disk; each
    QEMU launch of LAVA's inside the cycle is the domain stopping (and being
    started again).

    The S3 resumes are counted in the kernel log inside the cycle's report
    when there is one: the frame's md5 protects it, while a console line can
    be lost from the job log (a server restart lost some, and an intact cycle
    became a false fail). S4's lines stay console-only: they are printed after
    the snapshot, so the restored kernel's log does not have them."""
    resume_lines = evidence
    if report is not None:
        resume_lines = guest_report.sections(report).get("dmesg", "").splitlines()
    resumes = sum(1 for line in resume_lines if S3_RESUME in line)
    events = []
    for _ in range(resumes):
        events += [[stamp, "pmsuspend", "lava-console"], [stamp, "pmwakeup", "lava-console"]]
    marked = False
    for line in evidence:
        text = console.strip_timestamp(line.strip())
        if text == IMAGE_MARKED:
            marked = True
        elif marked and text.startswith(S4_ENTER):
            events.append([stamp, "pmsuspend-disk", "lava-console"])
            marked = False
    for _ in range(relaunches):
        events += [[stamp, "stopped", "lava-relaunch"], [stamp, "started", "lava-relaunch"]]
    return events


def cycle_records(plan, entries, run_id, job_id, job, rundir, profile=None, firmware_errata=True):
    """Final records of `plan`'s cycles from one job's log. Returns
    (records, lost): lost are the plan entries the job never started (no
    kernel begin marker on the console); they get no record here. A cycle
    that began and left no intact report is an error naming the job."""
    lines = console_lines(entries)
    texts = [text for _, text in lines]
    found = frames(lines)
    launches = qemu_launches(entries)
    records, lost = [], []
    device = job.get("device")
    for number, mode, knobs in plan:
        record = {"record_version": RECORD_VERSION, "run_id": run_id, "cycle": number, "status": "done",
                  "mode": mode.name, "wake": mode.wake, "pm_test": mode.pm_test, "engine": "lava",
                  "lava_job": job_id, "guest": device, "worker": job.get("worker"),
                  "knobs": [list(k) for k in knobs]}
        if profile:  # as lab.session's records
            record.update(profile=profile,
                          firmware_errata=virt.errata_cmdline(profile) if firmware_errata else "")
        frame = found.get(number)
        marker = console.BEGIN.format(cycle=number)
        begin_index = next((index for index, text in enumerate(texts)
                            if console.strip_timestamp(text.strip()).startswith(marker)), None)
        if frame is None and begin_index is None:
            lost.append((number, mode, knobs))  # never started: it runs again in another job
            continue
        end_index = frame["end_index"] if frame else len(texts)
        relaunches = sum(1 for at in launches if begin_index is not None and begin_index < at <= end_index)
        lost_report = frame is None or frame["report"] is None
        fresh_boot = frame is None and mode.kind == "disk" and relaunches and any(
            FRESH_BOOT in text for text in texts[begin_index:])
        damaged = lost_report and console.firmware_ram_changes(console.cycle_lines(texts, number))
        if fresh_boot or damaged:
            # QEMU was launched again and the guest booted afresh instead of
            # resuming the image: the kernel's failure; or pmtest_ramguard saw
            # the firmware change the OS's RAM across the S3 resume and the
            # report died of it: the platform's. Judged as libvirt judges them.
            evidence = console.cycle_lines(texts, number)
            events = console_events(mode, evidence, time.time(), relaunches)
            record.update(**{EVENTS_FIELD: events}, events_source=EVENTS_SOURCE, timeline=[])
            record.update(judge_with_order(mode, None, 0, events, evidence, [], None, None))
            record["evidence"] = evidence
            records.append(record)
            continue
        if frame is None or frame["report"] is None:
            # It started and its report is gone (worker or QEMU killed, job
            # canceled, a frame the console broke): an error of the lab, kept.
            why = frame["problem"] if frame else "the cycle began but the job ended before its report"
            record.update(verdict="error", phase="lava",
                          reason=f"LAVA job {job_id} ({job.get('state')}, {job.get('health')}): {why}",
                          guest_usable=False)
            records.append(record)
            continue
        evidence = console.cycle_lines(texts, number) or texts[-80:]
        # The cycle runs from pmlab-cycle's kernel begin marker to the end of its frame.
        began = lines[begin_index][0] if begin_index is not None else frame["begin_dt"]
        start, end = moment(began), moment(frame["dt"])
        stamp = end.timestamp() if end else time.time()
        events = console_events(mode, evidence, stamp, relaunches, frame["report"])
        record.update(token=frame["token"], guest_boot_id=frame["boot_id"], **{EVENTS_FIELD: events},
                      events_source=EVENTS_SOURCE,
                      report=rundir.write_file(report_path(number), frame["report"], compress=True),
                      report_status=frame["status"], timeline=[])
        if start:
            record["host_start"] = start.isoformat(timespec="milliseconds")
        if end:
            record["host_end"] = end.isoformat(timespec="milliseconds")
        if start and end:
            record["host_seconds"] = round((end - start).total_seconds(), 3)
        record.update(judge_with_order(mode, frame["report"], frame["status"], events, evidence, [],
                                       frame["token"], frame["boot_id"]))
        record["evidence"] = evidence
        records.append(record)
    return records, lost


# ------------------------------------------------------------------ running

def split(plan, jobs):
    """`plan` into at most `jobs` consecutive slices of nearly equal size."""
    jobs = max(1, min(jobs, len(plan)))
    size, extra = divmod(len(plan), jobs)
    out, start = [], 0
    for index in range(jobs):
        end = start + size + (1 if index < extra else 0)
        out.append(plan[start:end])
        start = end
    return [part for part in out if part]


def run_plan(plan, rundir, artifacts, identity="pmlab", jobs=2, tags=("q35-ovmf",), retries=1,
             poll_seconds=5, on_submitted=None, log=print, run_id=None, firmware_errata=True):
    """Run `plan` [(number, mode, knobs)] as LAVA jobs in parallel, record
    every cycle into `rundir` (lab.records.RunDir). Cycles a job never began
    are resubmitted up to `retries` times. `tags` name the machine profile
    (job_profile); firmware_errata=False leaves its errata off the kernel
    command line. Returns the final records, one per planned cycle."""
    profile = job_profile(tags)
    for number, mode, knobs in plan:
        check_mode(mode)
        check_knobs(number, knobs)
    run_id = run_id or rundir.run_id
    os.makedirs(rundir.file("lava"), exist_ok=True)
    final, pending, attempt, lost_in = {}, list(plan), 0, {}
    while pending and attempt <= retries:
        running = {}
        for part in split(pending, jobs):
            name = f"pmlab {rundir.run_id} cycles {part[0][0]}-{part[-1][0]}" + (f" retry {attempt}" if attempt else "")
            text = render_job(part, artifacts, name, tags, firmware_errata)
            job_id = patiently(submit, identity, text, log=log)
            with open(rundir.file("lava", f"job-{job_id}.yaml"), "w") as out:
                out.write(text)
            log(f"lava: job {job_id}: cycles {', '.join(str(n) for n, _, _ in part)}")
            running[job_id] = part
            if on_submitted:
                on_submitted(job_id, part)
        pending = []
        while running:
            time.sleep(poll_seconds)
            for job_id in list(running):
                job = patiently(job_state, identity, job_id, log=log)
                if job.get("state") not in FINISHED:
                    continue
                part = running.pop(job_id)
                entries = patiently(job_log, identity, job_id, log=log)
                if job.get("device"):
                    job["worker"] = patiently(device_worker, identity, job["device"], log=log)
                with open(rundir.file("lava", f"job-{job_id}.log.yaml"), "w") as out:
                    yaml.safe_dump(entries, out, width=1 << 20)
                records, lost = cycle_records(part, entries, run_id, job_id, job, rundir, profile,
                                              firmware_errata)
                for record in records:
                    rundir.append(record)
                    final[record["cycle"]] = record
                log(f"lava: job {job_id} {job.get('health')} on {job.get('device')}: "
                    + ", ".join(f"{r['cycle']} {r['verdict']}" for r in records))
                pending += lost
                lost_in.update((number, job_id) for number, _, _ in lost)
        attempt += 1
        if pending and attempt <= retries:
            log(f"lava: resubmitting {len(pending)} lost cycle(s): {', '.join(str(n) for n, _, _ in pending)}")
    for number, mode, knobs in pending:  # never started in `retries` resubmissions
        record = {"record_version": RECORD_VERSION, "run_id": run_id, "cycle": number, "status": "done",
                  "mode": mode.name, "wake": mode.wake, "pm_test": mode.pm_test, "engine": "lava",
                  "knobs": [list(k) for k in knobs], "verdict": "error", "phase": "lava",
                  "lava_job": lost_in.get(number),
                  "reason": f"never started: LAVA job {lost_in.get(number)} ended before it, {retries} resubmission(s)"}
        rundir.append(record)
        final[number] = record
    return [final[number] for number, _, _ in plan]


def plan_from(mode_specs, injections):
    """[(number, mode, knobs)] from --mode specs and --inject items."""
    from lab.run import parse_injections
    knobs = parse_injections(injections)
    names = modes.expand(mode_specs)
    return [(number, check_mode(modes.mode_of(name)), check_knobs(number, knobs.get(number, ())))
            for number, name in enumerate(names, start=1)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m pipelines.lava.jobs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", action="append", required=True, help="MODE[/WAKE][*N], as everywhere")
    parser.add_argument("--inject", action="append", default=[], help="CYCLE:KNOB=VALUE")
    parser.add_argument("--jobs", type=int, default=2, help="jobs run at once (one per worker)")
    parser.add_argument("--artifacts", default=os.path.join(REPO, "build", "out"))
    parser.add_argument("--results", default=os.path.join(REPO, "results"))
    parser.add_argument("--run-id")
    parser.add_argument("--identity", default="pmlab", help="lavacli identity (lavacli identities add)")
    parser.add_argument("--tags", default="q35-ovmf", help="device tags the jobs ask for, comma-separated")
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("--no-firmware-errata", dest="firmware_errata", action="store_false",
                        help="boot without the profile's firmware errata (lab/virt.py PROFILES), as lab.run's")
    args = parser.parse_args(argv)
    try:
        plan = plan_from(args.mode, args.inject)
        run_id = args.run_id or "lava-" + new_run_id()
        rundir = RunDir(args.results, run_id)
        artifacts = prepare_artifacts(args.artifacts, rundir.file("artifacts"))
        records = run_plan(plan, rundir, artifacts, args.identity, args.jobs,
                           [t for t in args.tags.split(",") if t], args.retries,
                           firmware_errata=args.firmware_errata)
    except (LabError, LavaError) as error:
        print(f"lava/jobs: {error}", file=sys.stderr)
        return 2
    rundir.write_summary({"engine": "lava"})
    for record in records:
        print(f"cycle {record['cycle']:>3} {record['mode']}/{record['wake']}: {record['verdict'].upper()}"
              + (f" ({record.get('phase')}: {record.get('reason')})" if record["verdict"] != "pass" else "")
              + f" [job {record['lava_job']}]")
    print(f"results: {rundir.path}")
    return 0 if all(r["verdict"] == "pass" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
