"""Benchmark: what the boot kernel of a restore spends quiescing devices, on
two kernels in one invocation.

  ./pmlab bench quiesce [--cycles 3] [--profile pc-seabios|q35-ovmf]
                        [--before DIR] [--after DIR] [--results DIR]

Before a hibernation image is loaded, the boot kernel runs every device's
quiesce callbacks (->freeze*() on a kernel or driver without them). The
series' first users (the HDA codec driver, nvme-pci) skip work there that the
restored image throws away. This boots the device guest (lab/devices.py zoo)
of each kernel, --before (default: the unpatched build/baseline/out) and
--after (default: build/out), and runs S4 cycles on them in turn, the boot
kernel of each restore booted with initcall_debug, so that pm_print_times
puts every callback's duration on the console ("... returned 0 after N
usecs") and the core its phase totals ("PM: quiesce of devices complete
after N msecs"). It prints, per device of interest and for the phase total,
the median of each side and after/before, and writes
<results>/quiesce-bench.json.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

from lab import artifacts as artifacts_mod
from lab import devices, modes, options, virt
from lab.errors import LabError
from lab.records import ERROR, FAIL, HANG, PASS, RunDir
from lab.request import Watchdogs

# "<driver> <device>: PM: <function>+0x0/0x23 [module] returned 0 after 606472 usecs"
# (6.12: no +offset)
RETURNED = re.compile(r"(?:^|\] )\S* (?P<device>\S+): PM: (?P<callback>\w+)(?:\+0x\S+)?(?: \[\w+\])? "
                      r"returned (?P<ret>-?\d+) after (?P<usecs>\d+) usecs")
# kernel/power/main.c dpm_show_time(): "PM: quiesce of devices complete after 123.456 msecs"
PHASE_TOTAL = re.compile(r"PM: (?P<phase>(?:late |noirq )?quiesce) of devices complete after (?P<msecs>[\d.]+) msecs")


def quiesce_times(console_lines):
    """({device: usecs summed over its callbacks but ->prepare}, {phase: msecs})
    of one boot kernel's quiesce, from its pm_print_times lines."""
    per_device, phases = {}, {}
    for line in console_lines:
        found = RETURNED.search(line)
        if found and not found.group("callback").endswith("prepare"):
            device = found.group("device")
            per_device[device] = per_device.get(device, 0) + int(found.group("usecs"))
            continue
        found = PHASE_TOTAL.search(line)
        if found:
            phases[found.group("phase")] = float(found.group("msecs"))
    return per_device, phases


def watched(profile):
    """{label: kernel device name}: the first users' devices."""
    machine = "q35" if profile == "q35-ovmf" else "pc"
    return {"hda codec (hdaudioC0D0)": "hdaudioC0D0",
            f"nvme ({devices.pci_name(machine, 'nvme-disk')})": devices.pci_name(machine, "nvme-disk")}


def summarize(samples, profile):
    """samples: {"before"|"after": [(per_device, phases)]} -> result dict."""
    rows = {}
    labels = dict(watched(profile), **{"quiesce phase total": None})
    for label, device in labels.items():
        side = {}
        for name, runs in samples.items():
            if device is None:  # guest/init sets pm_debug_messages before the resume since v3
                values = [phases["quiesce"] * 1000 for _, phases in runs if "quiesce" in phases]
            else:
                values = [per_device.get(device, 0) for per_device, _ in runs]
            side[name] = {"median_usecs": statistics.median(values) if values else None, "samples": values}
        before, after = side["before"]["median_usecs"], side["after"]["median_usecs"]
        side["ratio"] = round(after / before, 4) if before and after is not None else None
        rows[label] = side
    return rows


def run(before, after, cycles, uri, results, profile):
    from lab.session import Session
    rundir = RunDir(results, "quiesce-bench", link_latest=False)
    sessions = {name: Session(found, rundir, uri, profile, Watchdogs(), worker=name, device_set="zoo")
                for name, found in (("before", before), ("after", after))}
    samples = {name: [] for name in sessions}
    number = 0
    try:
        for _ in range(cycles):
            for name, session in sessions.items():
                number += 1
                # the unpatched kernel's verdict is the oracle's fail (drivers get
                # ->freeze* where the seed's rules give ->quiesce*); its boot
                # kernel still quiesced: only a cycle the lab lost is no sample
                record = session.cycle(modes.parse_mode("disk"), number, [("boot", "initcall_debug")],
                                       expect=PASS if name == "after" else FAIL)
                if record["verdict"] in (HANG, ERROR):
                    raise LabError(f"{name} kernel: cycle {number} {record['verdict']}: {record.get('reason')}")
                per_device, phases = quiesce_times(record.get("evidence", []))
                if not per_device:
                    raise LabError(f"{name} kernel: cycle {number}: no pm_print_times line on the console "
                                   "(no initcall_debug in the boot kernel?)")
                samples[name].append((per_device, phases))
    finally:
        for session in sessions.values():
            session.close()
    return samples, rundir


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pmlab bench quiesce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=3, help="S4 cycles per kernel (default %(default)s)")
    parser.add_argument("--before", default=artifacts_mod.BASELINE_DIR, metavar="DIR",
                        help="the kernel artifacts before (default: the unpatched %(default)s)")
    parser.add_argument("--after", default=artifacts_mod.DEFAULT_DIR, metavar="DIR",
                        help="the kernel artifacts after (default %(default)s)")
    parser.add_argument("--uri", default=virt.DEFAULT_URI, help="libvirt URI (default %(default)s)")
    parser.add_argument("--profile", default="pc-seabios", choices=sorted(virt.PROFILES),
                        help="machine (default %(default)s)")
    options.add_results(parser, run_id_help=None)
    args = parser.parse_args(argv)
    try:
        if args.cycles < 1:
            raise LabError(f"--cycles must be at least 1, not {args.cycles}")
        before, after = artifacts_mod.find(args.before), artifacts_mod.find(args.after)
        for found in (before, after):
            found.initrd_for("zoo")  # a missing device initramfs stops here
        started = time.time()
        samples, rundir = run(before, after, args.cycles, args.uri, args.results, args.profile)
    except LabError as error:
        print(f"bench quiesce: {error}", file=sys.stderr)
        return 2
    rows = summarize(samples, args.profile)
    result = {"profile": args.profile, "cycles": args.cycles, "before": before.directory, "after": after.directory,
              "seconds": round(time.time() - started), "records": rundir.path, "rows": rows}
    with open(os.path.join(args.results, "quiesce-bench.json"), "w") as out:
        json.dump(result, out, indent=1)
    print(f"bench quiesce: {args.cycles} S4 cycles per kernel, {args.profile} under TCG, zoo guest; "
          f"before {before.directory}, after {after.directory}")
    for label, row in rows.items():
        b, a = (row[side]["median_usecs"] for side in ("before", "after"))
        shown = [f"{v / 1000:9.1f} ms" if v is not None else "        - ms" for v in (b, a)]
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "-"
        print(f"{label:34} before {shown[0]}  after {shown[1]}  after/before {ratio}")
    return 0


if __name__ == "__main__":  # ./pmlab bench quiesce is the command
    from lab.entry_points import redirect
    sys.exit(redirect("lab.quiesce_bench", "bench quiesce"))
