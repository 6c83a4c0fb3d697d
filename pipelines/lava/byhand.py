"""A LAVA job's QEMU run by hand, without LAVA: the same QEMU command line
(taken from a job log's "Boot command:" line, or the one LAVA renders for
the q35-ovmf device) with the same kernel, initramfs, SSDT and a fresh swap
disk, and the kernel command line of a plan (or one given). guest/init runs
the plan by itself (pmlab.mode=lava needs no LAVA); this watches the console
until the first cycle's report ends or a user process segfaults. For
bisecting the command line: drop options, add some, pad the kernel command
line.

  /usr/bin/python3 -m pipelines.lava.byhand --mode mem/rtc [--inject ...]
        [--job-log RUN/lava/job-N.log.yaml] [--drop OPTION]... [--add 'ARGS']
        [--pad N] [--append TEXT] [--cycles 1] [--runs 1] [--console-dir DIR]
        [--watch ADDRESS]... [--no-firmware-errata]

The plan's command line is a q35-ovmf job's (lab.lava.kernel_args):
with the profile's firmware erratum (memmap=4K$0x808000, lab/virt.py
PROFILES) that keeps OVMF's S3 damage off the guest; --no-firmware-errata
leaves it off, as the jobs had it before, and reproduces the damage.

Prints one line per run: "pass" (the first --cycles reports arrived, none
with a segfault before them), "segfault: LINE" or "timeout". --watch
(a guest physical page, e.g. 0x808000) adds a QMP socket, saves the page
when the guest is in S3 (QEMU's SUSPEND event) and again when the run ends
(QEMU stopped first), and says which bytes changed and what the firmware's
memory map (the kernel's BIOS-e820 lines) calls the page. A run whose
watched page is usable RAM and changed fails. In between ran the firmware's
S3 resume path and the guest's own resume and cycle: a page holding
read-only file data (busybox's text) has no writer in the guest, the bytes
written say who did. Exit 0 when every run passed, 1 otherwise, 2 on bad
input.
"""

import argparse
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from lab import lava as jobs  # noqa: E402
from lab import modes, qmp  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.request import numbered_cycles, parse_injections  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What Debian's qemu.jinja2 renders with pipelines/lava/devices/q35-ovmf.jinja2
# (options, then extra_options, then each image's image_arg in deploy order),
# as lava-run's "Boot command:" line shows it; {kernel} etc. are the files.
LAVA_Q35_OVMF = (
    "qemu-system-x86_64 -nographic -net nic,model=virtio,macaddr=52:54:00:12:34:58 -net user -m 512 "
    "-monitor none -machine q35 "
    "-drive if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd "
    "-drive if=pflash,format=raw,snapshot=on,file=/usr/share/OVMF/OVMF_VARS_4M.fd "
    "-global ICH9-LPC.disable_s3=0 -global ICH9-LPC.disable_s4=0 -device edu,bus=pcie.0,addr=0x10 "
    "-no-reboot -global virtio-net-pci.romfile= "
    "-kernel {kernel} -append \"{append}\" -initrd {ramdisk} -acpitable file={ssdt} "
    "-drive format=raw,if=virtio,cache=unsafe,file={swap}")
FILES = {"kernel": "bzImage", "ramdisk": "initramfs.cpio.gz", "ssdt": "pmtest-ssdt.aml", "swap": "swap.img"}
SEGFAULT = "segfault at"
E820 = re.compile(r"BIOS-e820: \[mem 0x([0-9a-f]+)-0x([0-9a-f]+)\] (.+)$")
PAGE = 4096


class Qmp:
    """QEMU's QMP socket, enough for --watch: commands, and commands sent
    the moment an event arrives (`on`), from the reading thread."""

    def __init__(self, path, on=None, timeout=30):
        self.sock = qmp.connect(path, timeout)
        self.reader, self.writer = self.sock.makefile("r"), self.sock.makefile("w")
        self.on, self.sent, self.answers = dict(on or {}), 0, 0
        self.lock, self.answered = threading.Lock(), threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.call("qmp_capabilities")

    def _read(self):
        try:
            for line in self.reader:
                self._handle(json.loads(line))
        except (OSError, ValueError):  # QEMU killed at the end of a run
            pass

    def _handle(self, message):
        if "event" in message:
            for command in self.on.pop(message["event"], ()):
                self.send(*command)
        elif "return" in message or "error" in message:
            with self.answered:
                self.answers += 1
                self.answered.notify_all()

    def send(self, command, arguments=None):
        with self.lock:
            self.writer.write(json.dumps({"execute": command, "arguments": arguments or {}}) + "\n")
            self.writer.flush()
            self.sent += 1
            return self.sent

    def call(self, command, **arguments):
        """Send a command; wait until QEMU answered it (and all before it)."""
        number = self.send(command, arguments)
        with self.answered:
            self.answered.wait_for(lambda: self.answers >= number, timeout=60)


def e820_type(console_path, address):
    """What the firmware's memory map, as the guest kernel printed it, calls `address`."""
    with open(console_path, errors="replace") as console_log:
        for line in console_log:
            match = E820.search(line.strip())
            if match and int(match[1], 16) <= address <= int(match[2], 16):
                return match[3]
    return "not in the console's BIOS-e820 lines"


def compare(address, before, after):
    """One line on a watched page: unchanged, or which bytes changed."""
    if before is None or after is None:
        return f"page {address:#x}: not saved (no S3 entry seen)"
    changed = [offset for offset in range(PAGE) if before[offset] != after[offset]]
    if not changed:
        return f"page {address:#x}: unchanged across the S3 resume"
    return (f"page {address:#x}: {len(changed)} bytes changed across the S3 resume, offsets "
            f"{changed[0]:#x}..{changed[-1]:#x}; before {before[:32].hex(' ')}; after {after[:32].hex(' ')}")


def boot_command(job_log):
    """The first "Boot command:" of a LAVA job log, as argv."""
    opener = gzip.open if job_log.endswith(".gz") else open
    with opener(job_log, "rt") as source:
        entries = yaml.safe_load(source) or []
    for entry in entries:
        message = entry.get("msg") if isinstance(entry, dict) else None
        if isinstance(message, str) and message.startswith(jobs.QEMU_LAUNCH):
            return shlex.split(message[len(jobs.QEMU_LAUNCH):])
    raise SystemExit(f"lava/byhand: no '{jobs.QEMU_LAUNCH}' line in {job_log}")


def with_files(argv, files, append):
    """argv with the job's files replaced by ours (matched by base name,
    whatever directory LAVA downloaded them to) and -append's value set."""
    out = []
    for index, arg in enumerate(argv):
        if index and argv[index - 1] == "-append":
            out.append(append)
        else:
            out.append(replace_path(arg, files))
    return out


def replace_path(arg, files):
    """One argument with any path whose base name is one of FILES (e.g.
    file=/var/lib/lava/.../swap.img) pointed at our copy."""
    head, sep, tail = arg.rpartition("=")
    target = tail if sep else arg
    for name, path in files.items():
        if target.startswith("/") and os.path.basename(target) == FILES[name]:
            return f"{head}{sep}{path}" if sep else path
    return arg


def drop(argv, prefixes):
    """argv without each option (and its value) whose "OPTION VALUE" text
    starts with one of `prefixes` (e.g. "-net", "-global virtio-net-pci")."""
    out, index = [], 1
    out.append(argv[0])
    while index < len(argv):
        pair = argv[index:index + 2]
        text = " ".join(pair)
        if argv[index].startswith("-") and any(text.startswith(p) for p in prefixes):
            index += 2 if len(pair) == 2 and not pair[1].startswith("-") else 1
            continue
        out.append(argv[index])
        index += 1
    return out


def watch(argv, console_path, cycles, timeout, pages=(), work=None):
    """Run QEMU, its console (stdout) into console_path, until `cycles`
    reports ended, a segfault or the timeout. Returns (outcome, line,
    {page: (bytes while in S3, bytes at the end)})."""
    socket_path = os.path.join(work or "", "qmp.sock")
    in_s3 = {page: os.path.join(work or "", f"{page:x}-s3.bin") for page in pages}
    at_end = {page: os.path.join(work or "", f"{page:x}-end.bin") for page in pages}
    if pages:
        argv = argv + ["-qmp", f"unix:{socket_path},server=on,wait=off"]
    with open(console_path, "w") as log:
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        deadline, ended, outcome, qmp = time.monotonic() + timeout, 0, ("timeout", ""), None
        try:
            if pages:
                # Saved the moment QEMU says the guest is in S3: no guest code
                # runs until the wakeup, and the wakeup (a timer of QEMU's main
                # loop) comes after the commands already queued there.
                qmp = Qmp(socket_path, on={"SUSPEND": [("pmemsave", {"val": page, "size": PAGE, "filename": path})
                                                       for page, path in in_s3.items()]})
            for line in qemu.stdout:  # the deadline is checked per line: the guest prints steadily
                log.write(line)
                if SEGFAULT in line:
                    outcome = ("segfault", line.strip())
                    break
                if "pmlab-lava: report-end" in line:
                    ended += 1
                    if ended >= cycles:
                        outcome = ("pass", line.strip())
                        break
                if time.monotonic() > deadline:
                    break
            if qmp and qemu.poll() is None:
                qmp.call("stop")
                for page, path in at_end.items():
                    qmp.call("pmemsave", val=page, size=PAGE, filename=path)
        finally:
            qemu.kill()
            qemu.wait()
    return outcome + ({page: (read_page(in_s3[page]), read_page(at_end[page])) for page in pages},)


def read_page(path):
    try:
        with open(path, "rb") as saved:
            return saved.read()
    except FileNotFoundError:
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m pipelines.lava.byhand", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", action="append", default=[], help="the plan, as ./pmlab run --engine lava takes it")
    parser.add_argument("--inject", action="append", default=[])
    parser.add_argument("--append", help="this kernel command line instead of the plan's")
    parser.add_argument("--pad", type=int, default=0, help="add pmlab.pad= with N zeros to the command line")
    parser.add_argument("--job-log", help="take QEMU's command line from this LAVA job log")
    parser.add_argument("--drop", action="append", default=[], help="leave out options starting so")
    parser.add_argument("--add", action="append", default=[], help="more QEMU arguments (shell words)")
    parser.add_argument("--artifacts", default=os.path.join(REPO, "build", "out"))
    parser.add_argument("--cycles", type=int, default=1, help="reports to wait for")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per run")
    parser.add_argument("--console-dir", help="keep each run's console here")
    parser.add_argument("--watch", action="append", default=[], type=lambda text: int(text, 0) & ~(PAGE - 1),
                        help="a guest physical page to compare across the first S3 resume (QMP pmemsave)")
    parser.add_argument("--dry-run", action="store_true", help="print the QEMU command line only")
    parser.add_argument("--no-firmware-errata", dest="firmware_errata", action="store_false",
                        help="the plan's command line without q35-ovmf's firmware errata (lab/virt.py PROFILES)")
    args = parser.parse_args(argv)
    if args.append is None and not args.mode:
        parser.error("--mode (a plan) or --append (a command line) is needed")
    for name, base in FILES.items():
        if name != "swap" and not os.path.isfile(os.path.join(args.artifacts, base)):
            print(f"lava/byhand: {args.artifacts}/{base} missing (--artifacts DIR: the build's out directory)",
                  file=sys.stderr)
            return 2
    try:
        plan = [(cycle.number, jobs.check_mode(cycle.mode), jobs.check_knobs(cycle.number, cycle.knobs))
                for cycle in numbered_cycles(modes.plan(args.mode, None, None), parse_injections(args.inject))]
        append = args.append or jobs.kernel_args(plan, "q35-ovmf", args.firmware_errata)
    except LabError as error:
        print(f"lava/byhand: {error}", file=sys.stderr)
        return 2
    if args.pad:
        append += " pmlab.pad=" + "0" * args.pad
    work = tempfile.mkdtemp(prefix="pmlab-byhand-")
    try:
        files = {}
        for name, base in FILES.items():
            files[name] = os.path.join(work, base)
            if name != "swap":
                shutil.copy2(os.path.join(args.artifacts, base), files[name])
        template = (boot_command(args.job_log) if args.job_log
                    else shlex.split(LAVA_Q35_OVMF.format(append="APPEND", **files)))
        command = drop(with_files(template, files, append), args.drop)
        for words in args.add:
            command += shlex.split(words)
        print(f"cmdline ({len(append)} chars): {append}")
        print("qemu: " + shlex.join(command), flush=True)
        if args.dry_run:
            return 0
        failed = 0
        for run in range(1, args.runs + 1):
            with open(files["swap"], "wb") as swap:  # blank, as every LAVA job's
                swap.truncate(0)
                swap.truncate(jobs.SWAP_BYTES)
            console_path = os.path.join(args.console_dir or work, f"console-{run}.log")
            if args.console_dir:
                os.makedirs(args.console_dir, exist_ok=True)
            started = time.monotonic()
            outcome, line, pages = watch(command, console_path, args.cycles, args.timeout, args.watch, work)
            print(f"run {run}: {outcome} after {time.monotonic() - started:.0f} s"
                  + (f": {line}" if outcome != "pass" else ""), flush=True)
            clobbered = False
            for page, (before, after) in pages.items():
                kind = e820_type(console_path, page)
                print(f"  {compare(page, before, after)} (firmware memory map: {kind})", flush=True)
                clobbered |= kind == "usable" and before is not None and after is not None and before != after
            failed += outcome != "pass" or clobbered
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
