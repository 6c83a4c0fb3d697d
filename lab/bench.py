"""Benchmark: the harness's S3 cycle against the floor, in one invocation.

  ./pmlab bench [--mode mem*20] [--profile q35-ovmf|pc-seabios]
                [--baseline | --artifacts DIR] [--stock-floor | --no-stock-floor] [--vcpus N]
  (--cycles 20 is the older --mode mem*20)

The floor: plain qemu-system-x86_64 (no libvirt) with the same machine,
firmware, kernel, initramfs and devices as the lab's domain, and a QMP socket.
The guest's init, given pmlab.mode=raw-s3, writes "mem" to /sys/power/state
in a loop and does nothing else; the host waits for each SUSPEND event and
sends system_wakeup.

The stock floor: the same raw loop on Debian's cloud kernel of the same
6.1 source (linux-image-cloud-amd64, unpacked from its .deb into
/var/cache/pmlab/stock-kernel, never installed), which probes little and
loads no module: what S3 costs this machine with a kernel reduced to what the
S3 path needs.  pmlab-kernel raw / stock raw is what the guest kernel's own
devices and config add; harness / raw is what the harness adds.

The harness: lab.session.Session running mem cycles, each one a full lab
cycle (agent request, libvirt events, PM wakeup, the guest's report with its
trace buffer, parsing, two records written and fsynced).

The guests are booted first (boot is not timed), then the sides run in
turn, --block cycles each (default 5), so all see the same machine load:
while one runs, the others are asleep in S3 or idle. A raw cycle is timed
from system_wakeup to the next SUSPEND event (resume + the next suspend).
The harness runs two sides on one guest, each back to back within its
block: "serial" judges each cycle before starting the next (Session.cycle:
request, suspend, wake, resume, the guest's report, rendering, judging,
both records written and fsynced), "harness" judges it while the next one
runs (Session.cycles, as lab.run and the soak do). A harness cycle's time is
its block's wall time over its cycles, so the guest's own work between
cycles counts; reports are kept only for cycles that did not pass, as in a
soak, unless --keep full. Ratio = mean harness / mean raw; target <= 1.10;
the pipelined harness is also given as a ratio to the serial one.

The numbers also go to <results>/bench.json (summarize(), read back with
read_result(): pipelines/soak takes them from there, not from the text).
"""

import argparse
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

from lab import artifacts as artifacts_mod
from lab import files
from lab import devices, modes, options, records, request, virt
from lab.guest import BASE_CMDLINE
from lab.qmp import QMP
from lab.records import RunDir, new_run_id
from lab.session import Session

TARGET = 1.10
RESULT_FILE = "bench.json"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


STOCK_PACKAGE = "linux-image-cloud-amd64"
STOCK_CACHE = "/var/cache/pmlab/stock-kernel"
# The machine's S3 switch, as libvirt's <pm><suspend-to-mem> sets it
S3_GLOBALS = {"q35": ["-global", "ICH9-LPC.disable_s3=0", "-global", "ICH9-LPC.disable_s4=0"],
              "pc": ["-global", "PIIX4_PM.disable_s3=0", "-global", "PIIX4_PM.disable_s4=0"]}


def raw_command(found, workdir, cycles, memory_mib=512, profile_name="q35-ovmf", kernel=None, pmtest_tree=None,
                device_set="lean", vcpus=1):
    """QEMU arguments matching the domain lab.virt.domain_xml() gives libvirt
    for `profile_name` (q35 + OVMF pflash or pc + SeaBIOS, TCG, the same
    devices at the same PCI slots; a device guest's too, lab.devices).
    `kernel`: another bzImage (the stock floor) with the same initramfs;
    `vcpus`: the guest's CPUs (lab.request.check_vcpus)."""
    profile = virt.PROFILES[profile_name]
    firmware = []
    if profile["loader"]:
        vars_copy = os.path.join(workdir, "OVMF_VARS.fd")
        shutil.copyfile(profile["nvram_template"], vars_copy)
        firmware = ["-drive", f"if=pflash,format=raw,readonly=on,file={profile['loader']}",
                    "-drive", f"if=pflash,format=raw,file={vars_copy}"]
    swap = os.path.join(workdir, "swap.img")
    with open(swap, "wb") as disk:
        disk.truncate(1 << 30)
    bus = profile["root_bus"]
    cmdline = " ".join(w for w in (BASE_CMDLINE, f"pmlab.mode=raw-s3 pmlab.count={cycles}",
                                   request.pmtest_tree_cmdline(pmtest_tree), devices.modules_cmdline(device_set))
                       if w)
    zoo = []
    if devices.scratch_volumes(device_set):
        paths = {}
        for device in devices.scratch_volumes(device_set):
            paths[device] = os.path.join(workdir, f"{device}.img")
            with open(paths[device], "wb") as disk:
                disk.truncate(devices.SCRATCH_BYTES)
        zoo = devices.zoo_qemu_args(profile["machine"], bus, paths)
    return [
        "qemu-system-x86_64", "-name", "pmlab-bench-raw",
        "-machine", f"{profile['machine']},usb=off", "-accel", "tcg", "-cpu", "qemu64",
        "-m", str(memory_mib), "-smp", str(request.check_vcpus(vcpus)), *firmware,
        "-display", "none", "-no-user-config", "-nodefaults", "-rtc", "base=utc", "-no-shutdown",
        *S3_GLOBALS[profile["machine"]],
        "-kernel", kernel or found.kernel, "-initrd", found.initrd_for(device_set), "-append", cmdline,
        "-device", f"virtio-serial-pci,bus={bus},addr=0x4",
        "-drive", f"if=none,id=swap,format=raw,cache=unsafe,file={swap}",
        "-device", f"virtio-blk-pci,bus={bus},addr=0x3,drive=swap",
        "-chardev", f"file,id=serial0,path={os.path.join(workdir, 'console.log')}",
        "-serial", "chardev:serial0",
        "-device", f"edu,bus={bus},addr=0x10",
        *(["-acpitable", f"file={found.ssdt}"] if found.ssdt else []),
        "-qmp", f"unix:{os.path.join(workdir, 'qmp.sock')},server=on,wait=off",
        *zoo,
    ]


def stock_kernel(cache=STOCK_CACHE):
    """Path of Debian's cloud kernel image (STOCK_PACKAGE's current
    dependency), downloaded and unpacked once; raises virt.LabError naming
    the package when apt cannot fetch it."""
    def run(argv, cwd=None):
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        if done.returncode:
            raise virt.LabError(f"stock floor: {' '.join(argv)} failed: "
                                f"{(done.stderr or done.stdout).strip()[-300:]}")
        return done.stdout
    depends = [line.split(":", 1)[1].strip() for line in run(["apt-cache", "depends", STOCK_PACKAGE]).splitlines()
               if line.strip().startswith("Depends:")]
    if not depends:
        raise virt.LabError(f"stock floor: apt-cache knows no image that {STOCK_PACKAGE} depends on")
    package = depends[0]
    image = os.path.join(cache, "boot", "vmlinuz-" + package.removeprefix("linux-image-"))
    if os.path.exists(image):
        return image
    os.makedirs(cache, exist_ok=True)
    work = tempfile.mkdtemp(prefix="download-", dir=cache)
    try:
        run(["apt-get", "download", package], cwd=work)
        deb = next(name for name in os.listdir(work) if name.endswith(".deb"))
        run(["sh", "-c", f"dpkg-deb --fsys-tarfile '{deb}' | tar -x ./boot"], cwd=work)
        os.makedirs(os.path.dirname(image), exist_ok=True)
        os.replace(os.path.join(work, "boot", os.path.basename(image)), image)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return image


class RawGuest:
    """Plain QEMU running the raw S3 loop, driven over QMP."""

    def __init__(self, found, cycles, profile="q35-ovmf", kernel=None, pmtest_tree=None, device_set="lean", vcpus=1):
        self.workdir = tempfile.mkdtemp(prefix="pmlab-bench-")
        self.process = subprocess.Popen(raw_command(found, self.workdir, cycles + 1,
                                                    profile_name=profile, kernel=kernel,
                                                    pmtest_tree=pmtest_tree, device_set=device_set, vcpus=vcpus),
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


BLOCK = 5  # cycles per side before the next side runs


def run_interleaved(found, cycles, uri, results, profile="q35-ovmf", stock=None, keep="failures",
                    pmtest_tree=None, block=BLOCK, device_set="lean", vcpus=1):
    """Alternate blocks of `block` cycles: raw, stock floor (when `stock`, a
    bzImage, is given), the harness judging each cycle before the next
    (Session.cycle, serial) and the harness judging it while the next one
    runs (Session.cycles, as lab.run does), so all see the same machine load
    (other guests, builds): a guest asleep in S3 costs nothing while another
    one runs. Both harness sides drive the same guest, back to back within a
    block, so the guest's own work between cycles counts. A harness cycle's
    time is its block's wall time over its cycles (the last judging of a
    pipelined block included, nothing to overlap it). Returns {"raw",
    "serial", "pipelined", "stock" (or None): seconds per cycle}, the
    harness's run directory. `keep`: the harness's evidence policy (--keep),
    "failures" as in a soak. `vcpus`: every guest's CPUs (the stock floor's too)."""
    rundir = RunDir(results, "bench-" + new_run_id(), keep=keep)
    session = Session(found, rundir, uri, profile, worker="bench", pmtest_tree=pmtest_tree, device_set=device_set,
                      vcpus=vcpus)
    raws = []
    mem = modes.parse_mode("mem")
    times = {"raw": [], "stock": [] if stock else None, "serial": [], "pipelined": []}
    verdicts = []
    number = 1

    def harness_block(count, pipelined):
        nonlocal number
        first, number = number + 1, number + count
        started = time.time()
        if pipelined:
            done = list(session.cycles((mem, n, (), records.PASS) for n in range(first, number + 1)))
        else:
            done = [session.cycle(mem, n) for n in range(first, number + 1)]
        seconds = (time.time() - started) / count
        verdicts.extend(record["verdict"] for record in done)
        return [seconds] * count

    try:
        raws.append(RawGuest(found, cycles, profile, pmtest_tree=pmtest_tree, device_set=device_set, vcpus=vcpus))
        if stock:  # the stock kernel has no pmtest module: no tree to size
            raws.append(RawGuest(found, cycles, profile, kernel=stock, vcpus=vcpus))
        verdicts.append(session.cycle(mem, 1)["verdict"])  # boots the harness guest; not timed
        done = 0
        while done < cycles:
            count = min(block, cycles - done)
            times["raw"] += [raws[0].cycle() for _ in range(count)]
            if stock:
                times["stock"] += [raws[1].cycle() for _ in range(count)]
            times["serial"] += harness_block(count, pipelined=False)
            times["pipelined"] += harness_block(count, pipelined=True)
            done += count
    except Exception as error:
        kept = "".join(f"; raw guest console kept in {raw.workdir}/console.log" for raw in raws)
        raise RuntimeError(f"benchmark failed: {error}{kept}") from None
    finally:
        session.close()
        for raw in raws:
            raw.close(keep=bool(sys.exc_info()[0]))
    rundir.write_summary({"benchmark": True})
    if verdicts.count(records.PASS) != len(verdicts):
        raise RuntimeError(f"harness cycles did not all pass: {verdicts}; see {rundir.path}")
    return times, rundir


def _side(times):
    return {"cycles": len(times), "mean": round(statistics.mean(times), 4),
            "median": round(statistics.median(times), 4), "min": round(min(times), 4),
            "max": round(max(times), 4)}


def summarize(times, run_dir, seconds, profile="q35-ovmf", block=BLOCK):
    """The benchmark's numbers (seconds per cycle) as a dict: "harness" is
    the pipelined harness (lab.run's), "serial" the baseline it is measured
    against in the same invocation."""
    raw, harness, serial = times["raw"], times["pipelined"], times["serial"]
    ratio = statistics.mean(harness) / statistics.mean(raw)
    result = {"profile": profile, "block": block, "raw": _side(raw), "harness": _side(harness),
              "serial": _side(serial), "ratio": round(ratio, 4),
              "median_ratio": round(statistics.median(harness) / statistics.median(raw), 4),
              "serial_ratio": round(statistics.mean(serial) / statistics.mean(raw), 4),
              "pipelined_over_serial": round(statistics.mean(harness) / statistics.mean(serial), 4),
              "target": TARGET, "within_target": ratio <= TARGET, "run_dir": run_dir,
              "seconds": round(seconds)}
    if times.get("stock"):
        result["stock"] = _side(times["stock"])
        result["kernel_ratio"] = round(statistics.mean(raw) / statistics.mean(times["stock"]), 4)
    return result


def write_result(results, result):
    files.write_json(os.path.join(results, RESULT_FILE), result)


def read_result(results):
    """The numbers of the last lab.bench run under `results`, or None."""
    result = files.read_json(os.path.join(results, RESULT_FILE))
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
    parser.add_argument("--profile", default="q35-ovmf", choices=sorted(virt.PROFILES),
                        help="machine: q35-ovmf (default) or pc-seabios")
    parser.add_argument("--stock-floor", action=argparse.BooleanOptionalAction, default=True,
                        help=f"also time the raw loop on Debian's {STOCK_PACKAGE} (default: on)")
    options.add_results(parser, run_id_help=None)
    options.add_keep(parser, "failures")
    parser.add_argument("--block", type=int, default=BLOCK, metavar="N",
                        help="cycles each side runs before the next side (default %(default)s)")
    parser.add_argument("--pmtest-tree", metavar="DEPTHxFANOUT",
                        help="pmtest's tree size on both the raw and the harness guest (see lab.run)")
    parser.add_argument("--vcpus", type=int, default=request.Guest.vcpus,
                        help="CPUs of every guest, raw and harness (default %(default)s; see lab.run)")
    parser.add_argument("--devices", default="lean", choices=devices.SETS,
                        help="the device set of both the raw and the harness guest (lab/devices.py); zoo has "
                             "no stock floor (Debian's kernel lacks the lab kernel's driver modules)")
    args = parser.parse_args(argv)
    try:
        args.pmtest_tree = request.pmtest_tree(args.pmtest_tree)
        request.check_vcpus(args.vcpus)
        cycles = bench_cycles(args.mode, args.cycles)
        if args.block < 1:
            raise virt.LabError(f"--block must be at least 1, not {args.block}")
        found = artifacts_mod.find(options.artifacts_dir(args))
        if not shutil.which("qemu-system-x86_64"):
            raise virt.LabError("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
        virt.Connection(args.uri).close()
        stock = stock_kernel() if args.stock_floor and args.devices == "lean" else None
        found.initrd_for(args.devices)  # a missing device initramfs stops here
    except virt.LabError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    print(f"bench: {cycles} S3 cycles each side, {args.profile} under TCG, {found.directory}"
          + (f", devices {args.devices}" if args.devices != "lean" else "")
          + (f", {args.vcpus} vCPUs" if args.vcpus != 1 else "")
          + (f"; stock floor {stock}" if stock else ""), flush=True)
    started = time.time()
    try:
        times, rundir = run_interleaved(found, cycles, args.uri, args.results, args.profile, stock, args.keep,
                                        args.pmtest_tree, args.block, args.devices, args.vcpus)
    except RuntimeError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    result = summarize(times, rundir.path, time.time() - started, args.profile, args.block)
    if args.pmtest_tree:
        result["pmtest_tree"] = list(args.pmtest_tree)
    result["devices"] = args.devices
    result["vcpus"] = args.vcpus
    write_result(args.results, result)
    raw, harness, serial = result["raw"], result["harness"], result["serial"]
    if stock:
        floor = result["stock"]
        print(f"stock floor S3 loop  : {floor['mean']:.3f} s/cycle (median {floor['median']:.3f}, "
              f"min {floor['min']:.3f}, max {floor['max']:.3f}; {os.path.basename(stock)})")
    print(f"raw QEMU+QMP S3 loop : {raw['mean']:.3f} s/cycle (median {raw['median']:.3f}, "
          f"min {raw['min']:.3f}, max {raw['max']:.3f})"
          + (f"; {result['kernel_ratio']:.2f}x the stock floor" if stock else ""))
    print(f"harness, serial      : {serial['mean']:.3f} s/cycle (median {serial['median']:.3f} of blocks of "
          f"{args.block}; each cycle judged before the next); {result['serial_ratio']:.3f}x raw")
    print(f"pmlab harness S3     : {harness['mean']:.3f} s/cycle (median {harness['median']:.3f} of blocks of "
          f"{args.block}; judged while the next runs, as lab.run; records: {rundir.path}); "
          f"{result['pipelined_over_serial']:.3f}x serial")
    verdict = "OK" if result["within_target"] else "OVER TARGET"
    print(f"ratio harness/raw    : {result['ratio']:.3f} of means (target <= {TARGET:.2f}) {verdict}; "
          f"{result['median_ratio']:.3f} of medians; benchmark took {result['seconds']}s")
    return 0 if result["within_target"] else 1


if __name__ == "__main__":  # ./pmlab bench is the command
    from lab.entry_points import redirect
    sys.exit(redirect("lab.bench", "bench"))
