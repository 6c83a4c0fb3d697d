"""Benchmark: the harness's S3 cycle against the floor, in one invocation.

  /usr/bin/python3 -m lab.bench --cycles 20 [--baseline | --artifacts DIR]
  (or lab/bench ...)

The floor: plain qemu-system-x86_64 (no libvirt) with the same machine,
firmware, kernel, initramfs and devices as the lab's domain, and a QMP socket.
The guest's init, given pmlab.mode=raw-s3, writes "mem" to /sys/power/state
in a loop and does nothing else; the host waits for each SUSPEND event and
sends system_wakeup.

The harness: lab.session.Session running mem cycles, each one a full lab
cycle (agent request, libvirt events, PM wakeup, the guest's report with its
trace buffer, parsing, two records written and fsynced).

Both are timed the same way, as the interval between consecutive suspend
events (QMP SUSPEND / libvirt PMSuspended) over `cycles` intervals: one full
cycle each, boot excluded. Ratio = harness / floor; target <= 1.10.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from lab import artifacts as artifacts_mod
from lab import modes, virt
from lab.guest import BASE_CMDLINE
from lab.qmp import QMP
from lab.records import RunDir, new_run_id
from lab.session import Session

TARGET = 1.10
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raw_command(found, workdir, cycles, memory_mib=512):
    """QEMU arguments matching the domain lab.virt.domain_xml() gives libvirt
    (q35, OVMF pflash, TCG, the same devices at the same PCI slots)."""
    profile = virt.PROFILES["q35-ovmf"]
    vars_copy = os.path.join(workdir, "OVMF_VARS.fd")
    shutil.copyfile(profile["nvram_template"], vars_copy)
    swap = os.path.join(workdir, "swap.img")
    with open(swap, "wb") as disk:
        disk.truncate(1 << 30)
    cmdline = f"{BASE_CMDLINE} pmlab.mode=raw-s3 pmlab.count={cycles}"
    return [
        "qemu-system-x86_64", "-name", "pmlab-bench-raw",
        "-machine", "q35,usb=off", "-accel", "tcg", "-cpu", "qemu64",
        "-m", str(memory_mib), "-smp", "1",
        "-drive", f"if=pflash,format=raw,readonly=on,file={profile['loader']}",
        "-drive", f"if=pflash,format=raw,file={vars_copy}",
        "-display", "none", "-no-user-config", "-nodefaults", "-rtc", "base=utc", "-no-shutdown",
        "-global", "ICH9-LPC.disable_s3=0", "-global", "ICH9-LPC.disable_s4=0",
        "-kernel", found.kernel, "-initrd", found.initrd, "-append", cmdline,
        "-device", "virtio-serial-pci,bus=pcie.0,addr=0x4",
        "-drive", f"if=none,id=swap,format=raw,cache=unsafe,file={swap}",
        "-device", "virtio-blk-pci,bus=pcie.0,addr=0x3,drive=swap",
        "-chardev", f"file,id=serial0,path={os.path.join(workdir, 'console.log')}",
        "-serial", "chardev:serial0",
        "-device", "edu,bus=pcie.0,addr=0x10",
        "-qmp", f"unix:{os.path.join(workdir, 'qmp.sock')},server=on,wait=off",
    ]


def run_raw(found, cycles, timeout=120):
    """Seconds per cycle of the raw QEMU + QMP S3 loop."""
    workdir = tempfile.mkdtemp(prefix="pmlab-bench-")
    process = subprocess.Popen(raw_command(found, workdir, cycles + 1), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    succeeded = False
    try:
        qmp = QMP(os.path.join(workdir, "qmp.sock"))
        suspends = []
        for index in range(cycles + 1):
            suspends.append(qmp.wait_event("SUSPEND", timeout if index else 300))
            reply = qmp.execute("system_wakeup")
            if "error" in reply:
                raise RuntimeError(f"system_wakeup failed: {reply['error']}")
            qmp.wait_event("WAKEUP", timeout)
        qmp.close()
        succeeded = True
        return (suspends[-1] - suspends[0]) / cycles
    except Exception as error:
        raise RuntimeError(f"raw QEMU loop failed ({error}); console kept in {workdir}/console.log") from None
    finally:
        process.kill()
        process.wait()
        if succeeded:
            shutil.rmtree(workdir, ignore_errors=True)


def run_harness(found, cycles, uri, results):
    """Seconds per cycle of lab cycles (and the run directory they went to)."""
    rundir = RunDir(results, "bench-" + new_run_id())
    session = Session(found, rundir, uri, "q35-ovmf", worker="bench")
    mem = modes.parse_mode("mem")
    suspends, verdicts = [], []
    try:
        for number in range(1, cycles + 2):
            record = session.cycle(mem, number)
            verdicts.append(record["verdict"])
            steps = dict(record.get("timeline", []))
            if "pmsuspend" in steps:
                suspends.append(steps["pmsuspend"])
    finally:
        session.close()
    rundir.write_summary({"benchmark": True})
    if verdicts.count("pass") != len(verdicts) or len(suspends) != cycles + 1:
        raise RuntimeError(f"harness cycles did not all pass: {verdicts}; see {rundir.path}")
    return (suspends[-1] - suspends[0]) / cycles, rundir


def main(argv=None):
    parser = argparse.ArgumentParser(prog="lab/bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", default="20", help="timed cycles per side (default 20)")
    parser.add_argument("--artifacts")
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--uri", default=virt.DEFAULT_URI)
    parser.add_argument("--results", default=os.path.join(REPO, "results"))
    args = parser.parse_args(argv)
    try:
        cycles = modes.parse_cycles(args.cycles)
        found = artifacts_mod.find(artifacts_mod.BASELINE_DIR if args.baseline
                                   else args.artifacts or artifacts_mod.DEFAULT_DIR)
        if not shutil.which("qemu-system-x86_64"):
            raise virt.LabError("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
        virt.Connection(args.uri).close()
    except virt.LabError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    print(f"bench: {cycles} S3 cycles each side, q35+OVMF under TCG, {found.directory}", flush=True)
    started = time.time()
    raw = run_raw(found, cycles)
    print(f"raw QEMU+QMP S3 loop : {raw:.3f} s/cycle", flush=True)
    harness, rundir = run_harness(found, cycles, args.uri, args.results)
    print(f"pmlab harness S3     : {harness:.3f} s/cycle  (records: {rundir.path})", flush=True)
    ratio = harness / raw
    verdict = "OK" if ratio <= TARGET else "OVER TARGET"
    print(f"ratio harness/raw    : {ratio:.3f} (target <= {TARGET:.2f}) {verdict}; "
          f"benchmark took {time.time() - started:.0f}s")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
