"""The LAVA engine: a run's cycles as LAVA jobs on a LAVA server
(pipelines/lava/lab-up's, or the user's own), behind the runner interface of
lab.run (LavaEngine beside lab.run.LibvirtEngine): split the plan into
jobs, submit them with lavacli, follow them, fetch each job's log and turn
every framed report into a normal pmlab record, judged by
lab.cycle.judge_with_order and written by lab/records.py.

  ./pmlab run --engine lava --mode 'mem/rtc*2' [--lava-jobs 2] [--lava-tags q35-ovmf]
        [--lava-identity pmlab] [--artifacts-url URL] [--inject CYCLE:KNOB=VALUE] ...

Artifacts travel over HTTP, so a worker on another machine (or one that
cannot see this machine's files: pipelines/lava/isolated-workers) runs the
jobs: the run's kernel, initramfs, SSDT and swap image are copied into
<run dir>/artifacts and served read-only by an HTTP server the engine starts
(ArtifactServer, Python's http.server in a thread) on the address this
machine reaches the LAVA server by (serve_address: the workers reach that
address already), stopped in close(). --artifacts-url URL names an existing
server that already serves <run dir>/artifacts (checked before the first
job). The job's deploy action downloads from those http:// URLs.

A server that stops answering (restarted, down) is asked again for up to
SERVER_PATIENCE seconds; the jobs go on on the workers meanwhile.
A job that ends early (its worker killed, canceled, a broken frame): the
cycle it was in (its kernel begin marker is on the console, its report is
not) is recorded as verdict "error", phase "lava", with the job id; the
cycles it never began are submitted again in a new job (--lab-reruns times,
then recorded as errors). Every planned cycle gets exactly one record.

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
QMP), disk/reboot, "boot" knobs (the kernel command line of a LAVA job is
the same for every boot), and guest settings the device's dictionary fixes
(memory, device set, libvirt URI, watchdogs: LAVA's job timeouts); --vcpus is the job's -smp.

A job runs on one machine profile, named by its device tags (each device of
lab-up's is tagged with its profile: q35-ovmf, pc-seabios): its kernel
command line carries that profile's words from lab/profiles.py PROFILES, the
same as a libvirt guest's (lab/guest.py): the firmware errata
(errata_cmdline; q35-ovmf: memmap=4K$0x808000, --no-firmware-errata leaves
it off) and pmtest_ramguard's window (ramguard_cmdline). A pmtest_ramguard
line in a cycle's console is the platform's fail (lab.cycle.judge), even
when the damage killed the cycle's report.
"""

import base64
import dataclasses
import datetime
import functools
import gzip
import hashlib
import http.server
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

from lab import artifacts as artifacts_mod
from lab import console, guest_report
from lab.cycle import cycle_arguments
from lab.judge import FRESH_BOOT, Expected, judge_with_order, keep_evidence
from lab.errors import LabError
from lab.guest import BASE_CMDLINE
from lab.profiles import PROFILES, errata_cmdline, ramguard_cmdline
from lab.records import DONE, ERROR, EVENTS_FIELD, new_record
from lab.request import Guest, Lava, check_vcpus, pmtest_tree_cmdline

SWAP_BYTES = 256 << 20  # S3 needs none; hibernation of a 512 MiB guest fits
ARTIFACTS = ("bzImage", "initramfs.cpio.gz", "pmtest-ssdt.aml")  # what a job deploys, with swap.img
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
# What the devices of pipelines/lava/lab-up give a guest (their dictionaries
# set QEMU's -m): a request asking for another size is refused, not silently
# run on this one. The CPUs are the job's own (-smp, render_job).
DEVICE_GUEST = Guest()


class LavaError(LabError):
    """lavacli failed, or the server did not answer (for SERVER_PATIENCE
    seconds when asked patiently): lab.run reports it as a setup error."""


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


def check_guest(guest):
    """LabError for a guest setting a LAVA job cannot honour: the device's
    dictionary fixes the machine (memory, devices), LAVA's job
    timeouts stand in for the watchdogs, and there is no libvirt."""
    fixed = {"uri": "--uri (there is no libvirt: the LAVA server runs the guest)",
             "memory": "--memory (the LAVA device's dictionary sets QEMU's memory: 512 MiB on lab-up's)",
             "devices": "--devices (a LAVA device has only the lab's own plumbing, the lean set)",
             "watchdogs": "--watchdog (LAVA's job and action timeouts end a hung job)"}
    for name, what in fixed.items():
        if getattr(guest, name) != getattr(DEVICE_GUEST, name):
            values = "" if name == "watchdogs" else f" ({getattr(DEVICE_GUEST, name)!r}, not {getattr(guest, name)!r})"
            raise LabError(f"{what} cannot be set for a LAVA job: leave it at its default{values}")
    return guest


# ------------------------------------------------------------------ jobs

def job_profile(tags):
    """The machine profile (lab/profiles.py PROFILES) a job with device `tags` runs
    on: exactly one of the tags must name one. Its kernel command line
    depends on the profile (firmware errata, pmtest_ramguard's window), so a
    job that could land on either profile's devices is refused: ask for one
    profile per job (run it twice for both)."""
    named = [tag for tag in tags if tag in PROFILES]
    if len(named) != 1:
        raise LabError(f"the LAVA job's tags {list(tags)} must name exactly one machine profile "
                       f"({', '.join(PROFILES)}): the kernel command line carries the profile's "
                       f"firmware errata and pmtest_ramguard words (lab/profiles.py PROFILES)")
    return named[0]


def kernel_args(plan, profile="q35-ovmf", firmware_errata=True, pmtest_tree=None):
    """The guest's command line for `plan` [(number, mode, knobs)] on a
    device of `profile`: the words of a libvirt guest's (lab/guest.py), from
    the same place (lab/profiles.py PROFILES), pmtest's tree size, then the plan."""
    lines = "".join(cycle_arguments(mode, number, knobs) + "\n" for number, mode, knobs in plan)
    encoded = base64.b64encode(gzip.compress(lines.encode(), mtime=0)).decode()
    errata = errata_cmdline(profile) if firmware_errata else ""
    args = " ".join(word for word in (BASE_CMDLINE, errata, ramguard_cmdline(profile),
                                      pmtest_tree_cmdline(pmtest_tree),
                                      f"pmlab.mode=lava pmlab.plan={encoded}") if word)
    if len(args) > 2000:  # x86 COMMAND_LINE_SIZE is 2048
        raise LabError(f"a LAVA job of {len(plan)} cycles does not fit on the kernel command line; "
                       f"split the plan into more jobs")
    return args


# The job, a Jinja2 template. pmlab's own guest (kernel, initramfs with
# guest/init, pmtest's SSDT, a swap disk) boots with pmlab.mode=lava;
# guest/init runs guest/pmlab-cycle once per line of pmlab.plan and prints
# each report framed (pmlab-lava: report-begin ... report-end). LAVA only
# watches the console: the first boot action waits for "pmlab-lava: ready", a
# monitor test from "pmlab-lava: start" to "pmlab-lava: done", one LAVA
# result per report. Each S4 (disk) cycle ends a segment: its monitor also
# ends when the kernel, after marking the image in swap ("PM: S|"), enters
# ACPI S4 ("Preparing to enter system sleep state S4", printed a second time
# then); QEMU powers off and the next boot action launches QEMU again on the
# same deployed files (the swap disk holds the image), the boot kernel's init
# resumes it and the resumed guest prints the report. The deploy downloads
# every file from artifacts_url (http://: the run's ArtifactServer).
JOB_TEMPLATE = r"""# pmlab LAVA job (lab/lava.py JOB_TEMPLATE)
device_type: {{ device_type }}
job_name: "{{ job_name }}"
visibility: public
priority: medium
{% if tags %}
tags:
{% for tag in tags %}
- {{ tag }}
{% endfor %}
{% endif %}

timeouts:
  job:
    minutes: {{ job_minutes }}
  action:
    minutes: {{ test_minutes }}
  connection:
    minutes: 2

context:
  arch: amd64

actions:
- deploy:
    timeout:
      minutes: 3
    to: tmpfs
    images:
      kernel:
        image_arg: -kernel {kernel} -append "{{ kernel_args }}" -smp {{ vcpus }}
        url: "{{ artifacts_url }}/bzImage"
      ramdisk:
        image_arg: -initrd {ramdisk}
        url: "{{ artifacts_url }}/initramfs.cpio.gz"
      ssdt:
        image_arg: -acpitable file={ssdt}
        url: "{{ artifacts_url }}/pmtest-ssdt.aml"
      swap:
        image_arg: -drive format=raw,if=virtio,cache=unsafe,file={swap}
        url: "{{ artifacts_url }}/swap.img"

{% for segment in range(segments) %}
- boot:
    timeout:
      minutes: {{ boot_minutes }}
    method: qemu
    media: tmpfs
    prompts:
{% if loop.first %}
    - 'pmlab-lava: ready'
{% else %}
    - 'pmlab-init: boot_id'
{% endif %}

- test:
    timeout:
      minutes: {{ test_minutes }}
    monitors:
    - name: pmlab-cycles-{{ segment + 1 }}
{% if loop.first %}
      start: 'pmlab-lava: start'
{% else %}
      start: 'pmlab-init: looking for a hibernation image'
{% endif %}
      end: 'pmlab-lava: done|PM: S\|.*?Preparing to enter system sleep state S4'
      pattern: 'pmlab-lava: report-begin cycle=(?P<test_case_id>\d+) status=(?P<result>\d+)'
      fixupdict:
        '0': pass
        '1': fail
        '2': fail
{% endfor %}
"""


def check_url(url):
    """`url` if it is an http(s):// URL (a worker on another machine can
    fetch it); LabError otherwise."""
    parsed = urllib.parse.urlsplit(str(url or ""))
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise LabError(f"artifacts URL '{url}' is not http:// or https://: a LAVA worker fetches the "
                       f"run's artifacts over HTTP (a file:// URL works only on the submitting machine)")
    return str(url).rstrip("/")


# The isolated workers' devices (pipelines/lava/isolated-workers) are a
# device type of their own: LAVA's tags only require, never exclude, so a
# job of a plain run asking for q35-ovmf would otherwise land on a worker
# that cannot reach this machine's artifact server.
ISOLATED_TAG, ISOLATED_TYPE = "isolated", "qemu-isolated"


def device_type(tags):
    return ISOLATED_TYPE if ISOLATED_TAG in tags else "qemu"


def render_job(plan, artifacts_url, job_name, tags=("q35-ovmf",), firmware_errata=True, pmtest_tree=None, vcpus=1):
    """The job's YAML for `plan` on a device of `tags`. `vcpus` goes on the
    kernel's image_arg as -smp: the device dictionaries fix extra_options,
    and every boot of the job (an S4 relaunch too) uses the deploy's args."""
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    # Under TCG: boot ~20 s (OVMF), an S3 cycle with a 2 s RTC alarm and
    # its report ~15 s, an S4 cycle (image written, QEMU relaunched, image
    # read back) about a minute; generous, LAVA's timeout is only the last
    # resort. Each S4 cycle adds a boot and a test action (a segment).
    disk = sum(1 for _, mode, _ in plan if mode.kind == "disk")
    segments = 1 + disk
    test_minutes = 3 + len(plan) + 3 * disk
    boot_minutes = 4
    text = env.from_string(JOB_TEMPLATE).render(
        job_name=job_name, tags=list(tags), device_type=device_type(tags), artifacts_url=check_url(artifacts_url),
        kernel_args=kernel_args(plan, job_profile(tags), firmware_errata, pmtest_tree), boot_minutes=boot_minutes,
        test_minutes=test_minutes, segments=segments, job_minutes=test_minutes + segments * boot_minutes + 10,
        vcpus=check_vcpus(vcpus))
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


def check_artifacts(source):
    """`source` if it holds what a LAVA job deploys and its initramfs runs a
    plan by itself (guest/init's pmlab.mode=lava); LabError naming the gap."""
    for name in ARTIFACTS:
        path = os.path.join(source, name)
        if not os.path.isfile(path):
            raise LabError(f"{path} missing: build the kernel and initramfs first "
                           f"({artifacts_mod.build_command(source)})")
    init = initramfs_init(os.path.join(source, "initramfs.cpio.gz")) or ""
    if "pmlab-lava: ready" not in init:
        raise LabError(f"{source}/initramfs.cpio.gz has a guest/init without pmlab.mode=lava: "
                       f"rebuild it ({artifacts_mod.build_command(source)})")
    return source


def prepare_artifacts(source, target):
    """Copy the kernel, initramfs and SSDT of `source` into `target` with a
    sparse swap image: the run's artifacts directory, which LAVA's workers
    download from over HTTP (ArtifactServer) for every job."""
    check_artifacts(source)
    os.makedirs(target, exist_ok=True)
    for name in ARTIFACTS:
        shutil.copy2(os.path.join(source, name), os.path.join(target, name))
    with open(os.path.join(target, "swap.img"), "wb") as out:
        out.truncate(SWAP_BYTES)
    return target


# ------------------------------------------------------------------ artifacts over HTTP

class _ArtifactHandler(http.server.SimpleHTTPRequestHandler):
    """GET and HEAD of the files in one directory: no listing, no upload (no
    method but GET and HEAD exists), nothing outside it (http.server's
    translate_path), each request logged to the server's log file."""

    server_version = "pmlab-artifacts"

    def list_directory(self, path):
        self.send_error(404, "no listing")
        return None

    def log_message(self, format, *args):
        log = self.server.log
        if log is not None:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.address_string()} {format % args}\n")
            log.flush()


class ArtifactServer:
    """A run's artifacts directory served read-only over HTTP from a thread
    of this process, on `host` (an address of this machine the workers
    reach) and a free port. `url` is what the jobs download from; stop()
    ends it. Each request goes to `log_path` (client address, request, status)."""

    def __init__(self, directory, host, log_path=None):
        self.directory = os.path.abspath(directory)
        handler = functools.partial(_ArtifactHandler, directory=self.directory)
        try:
            self.httpd = http.server.ThreadingHTTPServer((host, 0), handler)
        except OSError as error:
            raise LabError(f"cannot serve the run's artifacts on {host}: {error.strerror or error} "
                           f"(give --artifacts-url for a server of your own)") from None
        self.httpd.daemon_threads = True
        self.httpd.log = open(log_path, "a") if log_path else None
        port = self.httpd.server_address[1]
        self.url = f"http://{host if ':' not in host else '[' + host + ']'}:{port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="pmlab-artifacts", daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
        if self.httpd.log is not None:
            self.httpd.log.close()


def identity_uri(identity):
    """The server URI of a lavacli identity (lavacli identities show);
    LabError when lavacli or the identity is missing."""
    try:
        done = subprocess.run(["lavacli", "identities", "show", identity], capture_output=True, text=True,
                              timeout=60)
    except FileNotFoundError:
        raise LabError("lavacli missing: ./pmlab lava up installs it") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"lavacli identities show {identity} did not answer in 60 s") from None
    try:
        uri = (yaml.safe_load(done.stdout) or {}).get("uri") if done.returncode == 0 else None
    except (yaml.YAMLError, AttributeError):
        uri = None
    if not uri:
        raise LabError(f"no lavacli identity '{identity}' (--lava-identity): ./pmlab lava up adds "
                       f"'pmlab'; for another server: lavacli identities add --uri URL/RPC2 --username U "
                       f"--token T {identity}")
    return uri


def serve_address(server_uri):
    """The address of this machine the LAVA workers reach: the server's own
    address when the server runs here (its workers reach it there), else the
    address this machine sends from towards the server."""
    host = urllib.parse.urlsplit(server_uri).hostname or ""
    try:
        address = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except (socket.gaierror, IndexError, UnicodeError):
        raise LabError(f"the LAVA server's host '{host}' ({server_uri}) does not resolve") from None
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))  # one of ours
            return address
        except OSError:
            pass
        try:
            probe.connect((address, 9))  # no packet is sent: only the route is looked up
            return probe.getsockname()[0]
        except OSError as error:
            raise LabError(f"no route to the LAVA server {address} ({server_uri}): {error.strerror}") from None


def check_served(url, directory):
    """LabError unless `url` serves `directory`'s files (HEAD of each: the
    same sizes): --artifacts-url names a server of the user's own."""
    for name in sorted(os.listdir(directory)):
        try:
            with urllib.request.urlopen(urllib.request.Request(f"{url}/{name}", method="HEAD"),
                                        timeout=30) as answer:
                size = answer.headers.get("Content-Length")
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise LabError(f"--artifacts-url {url} does not serve the run's artifacts ({directory}): "
                           f"HEAD {url}/{name}: {getattr(error, 'reason', error)}") from None
        expected = os.path.getsize(os.path.join(directory, name))
        if size is not None and int(size) != expected:
            raise LabError(f"--artifacts-url {url} serves another {name} than {directory} "
                           f"({size} bytes, not {expected})")
    return url


def lavacli(identity, *args, timeout=120):
    command = ["lavacli", "-i", identity, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LavaError("lavacli missing: ./pmlab lava up installs it") from None
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


def lavacli_yaml(identity, *args, timeout=120):
    """lavacli's YAML output, parsed; LavaError (asked again by patiently)
    for output that is not YAML (cut short by a server going away)."""
    text = lavacli(identity, *args, timeout=timeout)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise LavaError(f"lavacli -i {identity} {' '.join(args)} printed no readable YAML: "
                        f"{str(error).splitlines()[0]}") from None


def job_state(identity, job_id):
    """{"state", "health", "device", ...} of a job (lavacli jobs show --yaml)."""
    return lavacli_yaml(identity, "jobs", "show", "--yaml", str(job_id)) or {}


def device_worker(identity, device):
    for line in lavacli(identity, "devices", "show", device).splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "worker":
            return value.strip()
    return None


def job_log(identity, job_id):
    """The job log as a list of {"dt", "lvl", "msg"} entries."""
    return lavacli_yaml(identity, "jobs", "logs", "--raw", str(job_id), timeout=300) or []


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


def cycle_records(plan, entries, run_id, job_id, job, rundir, profile=None, firmware_errata=True, limits=None,
                  vcpus=1):
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
        record = new_record(run_id, number, mode, DONE, engine="lava", lava_job=job_id, guest=device,
                            worker=job.get("worker"), knobs=[list(k) for k in knobs])
        if profile:  # as lab.session's records
            record.update(profile=profile,
                          firmware_errata=errata_cmdline(profile) if firmware_errata else "")
        if limits:  # as lab.session's records: the judge reads them
            record["limits"] = limits
        record["vcpus"] = vcpus
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
            keep_evidence(rundir, record, None, evidence)
            records.append(record)
            continue
        if frame is None or frame["report"] is None:
            # It started and its report is gone (worker or QEMU killed, job
            # canceled, a frame the console broke): an error of the lab, kept.
            why = frame["problem"] if frame else "the cycle began but the job ended before its report"
            record.update(verdict=ERROR, phase="lava",
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
                      events_source=EVENTS_SOURCE, report_status=frame["status"], timeline=[])
        if start:
            record["host_start"] = start.isoformat(timespec="milliseconds")
        if end:
            record["host_end"] = end.isoformat(timespec="milliseconds")
        if start and end:
            record["host_seconds"] = round((end - start).total_seconds(), 3)
        record.update(judge_with_order(mode, frame["report"], frame["status"], events, evidence, [],
                                       frame["token"], frame["boot_id"], Expected.of_record(record)))
        keep_evidence(rundir, record, frame["report"], evidence)  # by the run's --keep
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
             poll_seconds=5, on_submitted=None, log=print, run_id=None, firmware_errata=True,
             pmtest_tree=None, on_finished=None, limits=None, vcpus=1):
    """Run `plan` [(number, mode, knobs)] as LAVA jobs in parallel, record
    every cycle into `rundir` (lab.records.RunDir). `artifacts`: the http(s)
    URL the jobs download from, or a directory (prepare_artifacts') served
    over HTTP by an ArtifactServer for as long as this runs. Cycles a job
    never began are resubmitted up to `retries` times. `tags` name the
    machine profile (job_profile); firmware_errata=False leaves its errata
    off the kernel command line. on_submitted(job_id, part) and
    on_finished(job_id) follow the jobs; limits: the run's suspend/resume
    limits ({"suspend": s, "resume": s}), recorded and judged as libvirt's;
    vcpus: the guest's CPUs (-smp). Returns the final records, one per planned cycle, in plan order."""
    profile = job_profile(tags)
    for number, mode, knobs in plan:
        check_mode(mode)
        check_knobs(number, knobs)
    run_id = run_id or rundir.run_id
    os.makedirs(rundir.file("lava"), exist_ok=True)
    server = None
    if not urllib.parse.urlsplit(str(artifacts)).scheme:
        server = ArtifactServer(artifacts, serve_address(identity_uri(identity)), rundir.file("lava", "http.log"))
        artifacts = server.url
        log(f"lava: serving {server.directory} at {artifacts} (read-only; requests in lava/http.log)")
    try:
        return _run_jobs(plan, rundir, check_url(artifacts), identity, jobs, tags, retries, poll_seconds,
                         on_submitted, on_finished, log, run_id, profile, firmware_errata, pmtest_tree, limits,
                         vcpus)
    finally:
        if server is not None:
            server.stop()


def _run_jobs(plan, rundir, artifacts_url, identity, jobs, tags, retries, poll_seconds, on_submitted, on_finished,
              log, run_id, profile, firmware_errata, pmtest_tree, limits=None, vcpus=1):
    final, pending, attempt, lost_in = {}, list(plan), 0, {}
    while pending and attempt <= retries:
        running = {}
        for part in split(pending, jobs):
            name = f"pmlab {rundir.run_id} cycles {part[0][0]}-{part[-1][0]}" + (f" retry {attempt}" if attempt else "")
            text = render_job(part, artifacts_url, name, tags, firmware_errata, pmtest_tree, vcpus)
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
                if on_finished:
                    on_finished(job_id)
                entries = patiently(job_log, identity, job_id, log=log)
                if job.get("device"):
                    job["worker"] = patiently(device_worker, identity, job["device"], log=log)
                with open(rundir.file("lava", f"job-{job_id}.log.yaml"), "w") as out:
                    yaml.safe_dump(entries, out, width=1 << 20)
                records, lost = cycle_records(part, entries, run_id, job_id, job, rundir, profile,
                                              firmware_errata, limits, vcpus)
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
        record = new_record(run_id, number, mode, DONE, engine="lava", knobs=[list(k) for k in knobs],
                            verdict=ERROR, phase="lava", lava_job=lost_in.get(number),
                            reason=f"never started: LAVA job {lost_in.get(number)} ended before it, "
                                   f"{retries} resubmission(s)")
        rundir.append(record)
        final[number] = record
    return [final[number] for number, _, _ in plan]


# ------------------------------------------------------------------ the engine

def job_tags(request):
    """The device tags a request's jobs ask for: --lava-tags, naming exactly
    one machine profile; tags naming none, or none given, get --profile's. A
    profile tag other than --profile's is refused: the kernel command line
    carries the profile's words."""
    tags = tuple(tag for tag in request.lava.tags if tag)
    if tags == Lava().tags:  # not asked for: the default profile's tag stands for --profile's
        tags = (request.guest.profile,)
    named = [tag for tag in tags if tag in PROFILES]
    if not named:
        tags += (request.guest.profile,)
    elif len(named) == 1 and named[0] != request.guest.profile:
        raise LabError(f"--lava-tags ask for {named[0]} devices but the profile is {request.guest.profile}: "
                       f"give --profile {named[0]}, or --lava-tags naming {request.guest.profile}")
    job_profile(tags)
    return tags


class LavaEngine:
    """Cycles as LAVA jobs on a LAVA server (lab.run's runner interface, as
    lab.run.LibvirtEngine): up to request.lava.jobs jobs at once, their
    artifacts over HTTP. Constructed from a RunRequest whose engine is
    "lava"; LabError for what LAVA cannot run or what is missing."""

    def __init__(self, request):
        lava = request.lava
        if lava.jobs < 1:
            raise LabError(f"--lava-jobs must be at least 1, not {lava.jobs}")
        self.request = request
        self.tags = job_tags(request)
        self.profile = job_profile(self.tags)
        for cycle in request.cycles:
            check_mode(cycle.mode)
            check_knobs(cycle.number, cycle.knobs)
        check_guest(request.guest)
        if request.sleepgraph:
            raise LabError("--sleepgraph cannot be asked of a LAVA run: its cycles keep their reports "
                           "(reports/cycleN.txt.gz) for ./pmlab sleepgraph afterwards")
        kernel_args([(c.number, c.mode, c.knobs) for c in request.cycles[:1]], self.profile,
                    request.guest.firmware_errata, request.guest.pmtest_tree)
        if lava.artifacts_url:
            check_url(lava.artifacts_url)
        # Held until close(): the jobs fetch them over HTTP meanwhile.
        self.artifacts_hold = artifacts_mod.hold(request.artifacts)
        check_artifacts(request.artifacts)
        self.server_uri = identity_uri(lava.identity)
        try:  # a server down from the start is bad setup, not a restart to wait out
            lavacli(lava.identity, "system", "version", timeout=60)
        except LavaError as error:
            raise LabError(f"the LAVA server of identity '{lava.identity}' ({self.server_uri}) does not answer "
                           f"(./pmlab lava up starts this machine's): {error}") from None
        self.server = None
        self.url = lava.artifacts_url and lava.artifacts_url.rstrip("/")
        self.submitted, self.unfinished = [], set()

    def where(self):
        lava = self.request.lava
        served = f"artifacts {self.url}" if self.url else "artifacts over HTTP from this run"
        return (f"{self.request.artifacts} as LAVA jobs on {self.server_uri} ({lava.identity}; "
                f"{lava.jobs} at once, tags {','.join(self.tags)}; {served})")

    def cycles(self, rundir):
        """The final records in plan order, under the request's plan numbers."""
        request, lava = self.request, self.request.lava
        staged = prepare_artifacts(request.artifacts, rundir.file("artifacts"))
        if self.url:
            check_served(self.url, staged)
        else:
            os.makedirs(rundir.file("lava"), exist_ok=True)
            self.server = ArtifactServer(staged, serve_address(self.server_uri), rundir.file("lava", "http.log"))
            self.url = self.server.url
            print(f"lava: serving {staged} at {self.url} (read-only; requests in lava/http.log)", flush=True)
        plan = [(cycle.number, cycle.mode, cycle.knobs) for cycle in request.cycles]

        def submitted(job_id, part):
            self.submitted.append(job_id)
            self.unfinished.add(job_id)
        return run_plan(plan, rundir, self.url, lava.identity, lava.jobs, self.tags, retries=request.lab_reruns,
                        on_submitted=submitted, on_finished=self.unfinished.discard,
                        log=lambda text: print(text, flush=True), run_id=request.run_id,
                        firmware_errata=request.guest.firmware_errata, pmtest_tree=request.guest.pmtest_tree,
                        limits=dataclasses.asdict(request.guest.limits), vcpus=request.guest.vcpus)

    def close(self):
        """Cancel the jobs still running (an interrupted run), stop the artifact server."""
        for job_id in sorted(self.unfinished):
            try:
                lavacli(self.request.lava.identity, "jobs", "cancel", str(job_id), timeout=60)
                print(f"lava: canceled job {job_id}", flush=True)
            except LavaError as error:
                print(f"lava: job {job_id} not canceled: {error}", flush=True)
        self.unfinished.clear()
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.artifacts_hold:
            self.artifacts_hold.close()
            self.artifacts_hold = None

    def summary(self):
        return {"engine": "lava", "lava_server": self.server_uri, "lava_jobs": self.submitted,
                "lava_tags": list(self.tags), "artifacts_url": self.url}
