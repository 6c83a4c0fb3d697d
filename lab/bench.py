"""Benchmark: the harness's S3 cycle against the floor, in one invocation.

  ./pmlab bench [--mode mem*20] [--baseline | --artifacts DIR]
  (or lab/bench, /usr/bin/python3 -m lab.bench; --cycles 20 is the older --mode mem*20)

The floor: plain qemu-system-x86_64 (no libvirt) with the same machine,
firmware, kernel, initramfs and devices as the lab's domain, and a QMP socket.
The guest's init, given pmlab.mode=raw-s3, writes "mem" to /sys/power/state
in a loop and does nothing else; the host waits for each SUSPEND event and
sends system_wakeup.

The harness: lab.session.Session running mem cycles, each one a full lab
cycle (agent request, libvirt events, PM wakeup, the guest's report with its
trace buffer, parsing, two records written and fsynced).

Both guests are booted first (boot is not timed), then one raw cycle and one
harness cycle alternate, so both see the same machine load: while one runs,
the other is asleep in S3 or idle. A raw cycle is timed from system_wakeup to
the next SUSPEND event (resume + the next suspend); a harness cycle is the
wall time of Session.cycle() (request, suspend, wake, resume, the guest's
report, parsing, judging, both records written and fsynced).
Ratio = mean harness / mean raw; target <= 1.10.

The numbers also go to <results>/bench.json (summarize(), read back with
read_result(): pipelines/soak takes them from there, not from the text).
"""

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

from lab import artifacts as artifacts_mod
from lab import modes, options, virt
from lab.guest import BASE_CMDLINE
from lab.qmp import QMP
from lab.records import RunDir, new_run_id
from lab.session import Session

TARGET = 1.10
RESULT_FILE = "bench.json"
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
        *(["-acpitable", f"file={found.ssdt}"] if found.ssdt else []),
        "-qmp", f"unix:{os.path.join(workdir, 'qmp.sock')},server=on,wait=off",
    ]


class RawGuest:
    """Plain QEMU running the raw S3 loop, driven over QMP."""

    def __init__(self, found, cycles):
        self.workdir = tempfile.mkdtemp(prefix="pmlab-bench-")
        self.process = subprocess.Popen(raw_command(found, self.workdir, cycles + 1),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        self.qmp = QMP(os.path.join(self.workdir, "qmp.sock"))
        self.qmp.wait_event("SUSPEND", 300)  # booted, first sleep

    def cycle(self, timeout=120):
        """Wake it and wait until it is asleep again: one full S3 cycle."""
        started = time.time()
        reply = self.qmp.execute("system_wakeup")
        if "error" in reply:
            raise RuntimeError(f"system_wakeup failed: {reply['error']}")
        self.qmp.wait_event("WAKEUP", timeout)
        return self.qmp.wait_event("SUSPEND", timeout) - started

    def close(self, keep=False):
        self.qmp.close()
        self.process.kill()
        self.process.wait()
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def run_interleaved(found, cycles, uri, results):
    """Alternate one raw cycle and one harness cycle, so both see the same
    machine load (other guests, builds): a guest asleep in S3 costs nothing
    while the other one runs. Returns (raw seconds list, harness seconds list,
    the harness's run directory)."""
    rundir = RunDir(results, "bench-" + new_run_id())
    session = Session(found, rundir, uri, "q35-ovmf", worker="bench")
    raw = None
    mem = modes.parse_mode("mem")
    raw_times, harness_times, verdicts = [], [], []
    try:
        raw = RawGuest(found, cycles)
        first = session.cycle(mem, 1)  # boots the harness guest; not timed
        verdicts.append(first["verdict"])
        for number in range(2, cycles + 2):
            raw_times.append(raw.cycle())
            started = time.time()
            record = session.cycle(mem, number)
            harness_times.append(time.time() - started)
            verdicts.append(record["verdict"])
    except Exception as error:
        kept = f"; raw guest console kept in {raw.workdir}/console.log" if raw else ""
        raise RuntimeError(f"benchmark failed: {error}{kept}") from None
    finally:
        session.close()
        if raw:
            raw.close(keep=bool(sys.exc_info()[0]))
    rundir.write_summary({"benchmark": True})
    if verdicts.count("pass") != len(verdicts):
        raise RuntimeError(f"harness cycles did not all pass: {verdicts}; see {rundir.path}")
    return raw_times, harness_times, rundir


def summarize(raw_times, harness_times, run_dir, seconds):
    """The benchmark's numbers (seconds per cycle) as a dict."""
    def side(times):
        return {"cycles": len(times), "mean": round(statistics.mean(times), 4),
                "median": round(statistics.median(times), 4), "min": round(min(times), 4),
                "max": round(max(times), 4)}
    raw, harness = side(raw_times), side(harness_times)
    ratio = statistics.mean(harness_times) / statistics.mean(raw_times)
    return {"raw": raw, "harness": harness, "ratio": round(ratio, 4),
            "median_ratio": round(statistics.median(harness_times) / statistics.median(raw_times), 4),
            "target": TARGET, "within_target": ratio <= TARGET, "run_dir": run_dir, "seconds": round(seconds)}


def write_result(results, result):
    path = os.path.join(results, RESULT_FILE)
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as out:
        json.dump(result, out, indent=2, sort_keys=True)
        out.write("\n")
    os.replace(temporary, path)


def read_result(results):
    """The numbers of the last lab.bench run under `results`, or None."""
    try:
        with open(os.path.join(results, RESULT_FILE)) as source:
            result = json.load(source)
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def bench_cycles(mode_items, cycles=None):
    """Timed cycles per side from --mode mem*N (or the older --cycles N)."""
    if not mode_items:
        return modes.parse_cycles(cycles if cycles is not None else 20)
    plan = modes.plan(mode_items, cycles)
    if len(plan) != 1 or plan[0][0].name != "mem" or plan[0][0].wake != "pmwakeup":
        raise virt.LabError("the benchmark runs S3 cycles woken by pmwakeup only: give --mode mem*N")
    return plan[0][1]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pmlab bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_modes(parser, "mem*20: S3 cycles per side, woken by pmwakeup; no other mode is benchmarked",
                      wake=False)
    options.add_kernel(parser)
    parser.add_argument("--uri", default=virt.DEFAULT_URI, help="libvirt URI (default %(default)s)")
    options.add_results(parser, run_id_help=None)
    args = parser.parse_args(argv)
    try:
        cycles = bench_cycles(args.mode, args.cycles)
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
    try:
        raw_times, harness_times, rundir = run_interleaved(found, cycles, args.uri, args.results)
    except RuntimeError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    result = summarize(raw_times, harness_times, rundir.path, time.time() - started)
    write_result(args.results, result)
    raw, harness = result["raw"], result["harness"]
    print(f"raw QEMU+QMP S3 loop : {raw['mean']:.3f} s/cycle (median {raw['median']:.3f}, "
          f"min {raw['min']:.3f}, max {raw['max']:.3f})")
    print(f"pmlab harness S3     : {harness['mean']:.3f} s/cycle (median {harness['median']:.3f}, "
          f"min {harness['min']:.3f}, max {harness['max']:.3f}; records: {rundir.path})")
    verdict = "OK" if result["within_target"] else "OVER TARGET"
    print(f"ratio harness/raw    : {result['ratio']:.3f} of means (target <= {TARGET:.2f}) {verdict}; "
          f"{result['median_ratio']:.3f} of medians; benchmark took {result['seconds']}s")
    return 0 if result["within_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
