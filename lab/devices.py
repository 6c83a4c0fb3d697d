"""The guest's device sets: which emulated devices a guest has, the in-tree
driver each binds, and the probe that proves it still works after a resume.

  lean   the lab's own plumbing only: the virtio-blk swap disk, the agent's
         virtio-serial port, the serial console, pmtest's and edu (default)
  zoo    lean + real device classes through their real drivers: USB (xHCI
         with a disk, keyboard and tablet), SATA (AHCI), SCSI (virtio-scsi),
         NVMe, two NICs on one QEMU hub (e1000e, virtio-net), HD audio on a
         null backend, an SD card on SDHCI, the i6300ESB watchdog,
         virtio-rng and virtio-balloon

lab.virt.domain_xml puts a set's devices into the domain (zoo_xml), the
guest loads their modules (modules_cmdline: guest/init modprobes them) and
guest/pmlab-probe probes them after every resume (probe_arguments); the
judge reads its lines back (parse_probes) into the record's "probes". The
drivers are modules of the one lab kernel (kernel/config/pmlab.config), so
the lean guest loads none of them.
"""

import re
from dataclasses import dataclass

SETS = ("lean", "zoo")
DEFAULT = "lean"

# PCI slots on the root bus: lab.virt fixes 3 (swap disk) and 4 (agent
# port), and puts QEMU-argument devices (edu) from 0x10.
FIRST_SLOT = 0x05
# Each scratch disk's size: a power of two (QEMU's sd-card wants one).
SCRATCH_BYTES = 16 << 20
# Both NICs sit on this QEMU hub and nothing else does.
NET_HUB = 0
# The phase of a cycle whose devices did not work after the resume.
PHASE = "device-check"


@dataclass(frozen=True)
class Device:
    name: str       # the probe's and the record's name
    subsystem: str  # the kernel subsystem it sits on
    driver: str     # the in-tree driver that binds it
    probe: str      # guest/pmlab-probe's probe


ZOO = (
    Device("usb-disk", "usb", "usb-storage", "disk"),
    Device("usb-kbd", "usb", "usbhid", "usb"),
    Device("usb-tablet", "usb", "usbhid", "usb"),
    Device("sata-disk", "sata", "ahci", "disk"),
    Device("scsi-disk", "scsi", "virtio_scsi", "disk"),
    Device("nvme-disk", "nvme", "nvme", "disk"),
    Device("e1000e", "net", "e1000e", "net"),
    Device("virtio-net", "net", "virtio_net", "net"),
    Device("hda", "sound", "snd_hda_intel", "sound"),
    Device("sd-card", "mmc", "sdhci-pci", "disk"),
    Device("i6300esb", "watchdog", "i6300esb", "watchdog"),
    Device("virtio-rng", "rng", "virtio_rng", "rng"),
    Device("virtio-balloon", "balloon", "virtio_balloon", "bound"),
)

# The real drivers' names as the trace's device_pm_callback_* events give
# them: the dashboard's slowest real-driver callbacks (works_after_resume).
TRACE_DRIVERS = frozenset({
    "xhci_hcd", "usb", "hub", "usb-storage", "usbhid", "hid-generic", "ahci", "sd", "virtio_scsi", "nvme", "e1000e",
    "virtio_net", "snd_hda_intel", "snd_hda_codec_generic", "sdhci-pci", "mmcblk", "i6300ESB timer", "virtio_rng",
    "virtio_balloon"})

# What guest/init modprobes, in this order: the HDA codec parser before the
# controller, which probes its codecs once and finds none without it
# ("Cannot probe codecs"); sd_mod for the SCSI, SATA and USB disks.
ZOO_MODULES = ("xhci_pci", "usb_storage", "usbhid", "hid_generic", "sd_mod", "ahci", "virtio_scsi", "nvme",
               "e1000e", "virtio_net", "snd_hda_codec_generic", "snd_hda_intel", "sdhci_pci", "mmc_block",
               "i6300esb", "virtio_rng", "virtio_balloon")

# The scratch disks: device name -> volume suffix (lab.virt.VOLUME_SUFFIXES).
SCRATCH_DISKS = {"usb-disk": "-scratch-usb", "sata-disk": "-scratch-sata", "scsi-disk": "-scratch-scsi",
                 "nvme-disk": "-scratch-nvme", "sd-card": "-scratch-sd"}


def check(name):
    """The set's name, or ValueError naming the known ones."""
    if name not in SETS:
        raise ValueError(f"unknown device set '{name}' (known: {', '.join(SETS)})")
    return name


def devices(name):
    """The probed devices of a set, in probe order."""
    return ZOO if check(name) == "zoo" else ()


def modules_cmdline(name):
    """Kernel command line words that make guest/init load the set's drivers."""
    return f"pmlab.modules={','.join(ZOO_MODULES)}" if check(name) == "zoo" else ""


def probe_arguments(name):
    """guest/pmlab-probe's arguments for a set: DEVICE:PROBE words."""
    return [f"{device.name}:{device.probe}" for device in devices(name)]


def scratch_volumes(name):
    """{device name: volume suffix} of the set's scratch disks."""
    return dict(SCRATCH_DISKS) if check(name) == "zoo" else {}


def parse_probes(text, asked=None):
    """guest/pmlab-probe's lines as the record's "probes": [{"device",
    "probe", "ok", "ms", "error"}] in the order probed. `asked`: the
    DEVICE:PROBE words that should have a line (default: the section's own
    "asked=" line, guest/pmlab-cycle); one without a line is a failed probe
    ("no probe result"), and so is a line that does not parse (device "?"),
    so a garbled or cut report cannot pass."""
    probes = []
    lines = (text or "").splitlines()
    if asked is None:
        asked = next(([word for word in line[len("asked="):].split(",") if word]
                      for line in lines if line.startswith("asked=")), [])
    for line in lines:
        if not line.strip() or line.startswith("asked="):
            continue
        fields = line.split(" ", 4)
        if len(fields) < 4 or fields[2] not in ("ok", "fail") or not fields[3].isdigit():
            probes.append({"device": "?", "probe": "?", "ok": False, "ms": None,
                           "error": f"unreadable probe line: {line[:200]}"})
            continue
        error = fields[4].strip() if len(fields) > 4 else ""
        probes.append({"device": fields[0], "probe": fields[1], "ok": fields[2] == "ok", "ms": int(fields[3]),
                       "error": None if fields[2] == "ok" else (error if error not in ("", "-") else "failed")})
    seen = {(probe["device"], probe["probe"]) for probe in probes}
    for word in asked:
        device, _, probe = word.partition(":")
        if (device, probe) not in seen:
            probes.append({"device": device, "probe": probe, "ok": False, "ms": None, "error": "no probe result"})
    return probes


def broken(probes):
    """[(device, probe, error)] of the probes that failed."""
    return [(probe["device"], probe["probe"], probe["error"]) for probe in probes if not probe["ok"]]


# ------------------------------------------------------------- domain XML

def _address(slot):
    return f"<address type='pci' domain='0' bus='0' slot='{slot:#04x}' function='0'/>"


def pci_slots(machine):
    """{device name: PCI slot on the root bus} of the zoo's PCI functions
    ("usb" is the xHCI controller, "scsi" the virtio-scsi one, "sd-card"
    its SDHCI, "sata" pc's AHCI; q35's own AHCI is at 00:1f.2)."""
    names = ["usb"] + (["sata"] if machine == "pc" else []) + [
        "scsi", "hda", "i6300esb", "virtio-rng", "virtio-balloon", "nvme-disk", "sd-card", "e1000e", "virtio-net"]
    return {name: FIRST_SLOT + index for index, name in enumerate(names)}


def pci_name(machine, device):
    """The kernel's name (dev_name) of a zoo PCI function: 0000:00:SS.0."""
    slot = 0x1F if (device, machine) == ("sata", "q35") else pci_slots(machine)[device]
    return f"0000:00:{slot:02x}.{2 if slot == 0x1F else 0}"


def zoo_xml(profile, pool, volumes, root_bus, machine):
    """(devices XML, QEMU arguments) of the zoo for a domain. `volumes`:
    {device name: (volume name, path on the libvirt host)} of the scratch
    disks; the NVMe disk and the SD card have no libvirt element in
    libvirt 9.0, so QEMU arguments add them (their volumes are made
    writable for QEMU: lab.guest). q35 has its AHCI built in (00:1f.2); pc
    gets one."""
    slot = pci_slots(machine)

    def disk(device, dev, bus):
        volume = volumes[device][0]
        return (f"<disk type='volume' device='disk'><driver name='qemu' type='raw' cache='unsafe'/>"
                f"<source pool='{pool}' volume='{volume}'/><target dev='{dev}' bus='{bus}'/></disk>")

    xml = [f"<controller type='usb' index='0' model='qemu-xhci'>{_address(slot['usb'])}</controller>",
           disk("usb-disk", "sda", "usb"),
           "<input type='keyboard' bus='usb'/>",
           "<input type='tablet' bus='usb'/>"]
    if machine == "pc":
        xml.append(f"<controller type='sata' index='0'>{_address(slot['sata'])}</controller>")
    xml += [disk("sata-disk", "sdb", "sata"),
            f"<controller type='scsi' index='0' model='virtio-scsi'>{_address(slot['scsi'])}</controller>",
            disk("scsi-disk", "sdc", "scsi"),
            f"<sound model='ich6'><codec type='duplex'/><audio id='1'/>{_address(slot['hda'])}</sound>",
            "<audio id='1' type='none'/>",
            f"<watchdog model='i6300esb' action='none'>{_address(slot['i6300esb'])}</watchdog>",
            f"<rng model='virtio'><backend model='random'>/dev/urandom</backend>{_address(slot['virtio-rng'])}</rng>",
            f"<memballoon model='virtio'>{_address(slot['virtio-balloon'])}</memballoon>"]
    return "\n    ".join(xml), _arguments_only(slot, root_bus, {name: path for name, (_, path) in volumes.items()})


def _arguments_only(slot, root_bus, paths):
    """The devices libvirt 9.0 has no element for, as QEMU arguments: the
    NVMe disk, the SD card and the two NICs on one hub. `paths`: {device
    name: scratch disk path}."""
    args = ["-drive", f"file={paths['nvme-disk']},if=none,id=pmlab-nvme,format=raw,cache=unsafe",
            "-device", f"nvme,drive=pmlab-nvme,serial=pmlab-nvme,bus={root_bus},addr={slot['nvme-disk']:#x}",
            "-drive", f"file={paths['sd-card']},if=none,id=pmlab-sd,format=raw,cache=unsafe",
            "-device", f"sdhci-pci,bus={root_bus},addr={slot['sd-card']:#x}",
            "-device", "sd-card,drive=pmlab-sd"]
    for index, (name, model) in enumerate((("e1000e", "e1000e"), ("virtio-net", "virtio-net-pci"))):
        args += ["-netdev", f"hubport,id=pmlab-net{index},hubid={NET_HUB}",
                 "-device", f"{model},netdev=pmlab-net{index},mac=52:54:00:77:00:{index + 1:02x},"
                            f"bus={root_bus},addr={slot[name]:#x}"]
    return args


def zoo_qemu_args(machine, root_bus, paths):
    """The whole zoo as plain QEMU arguments, as libvirt turns zoo_xml()
    into them (lab.bench's raw loop, which runs QEMU without libvirt):
    the same models on the same slots. `paths`: {device name: scratch
    disk path}."""
    slot = pci_slots(machine)

    def disk(device, ident):
        return ["-drive", f"file={paths[device]},if=none,id={ident},format=raw,cache=unsafe"]

    sata_bus = "ide.0" if machine == "q35" else "pmlab-sata.0"  # q35's ICH9 AHCI names its ports ide.N
    args = ["-device", f"qemu-xhci,id=pmlab-usb,bus={root_bus},addr={slot['usb']:#x}",
            *disk("usb-disk", "pmlab-usbdisk"), "-device", "usb-storage,bus=pmlab-usb.0,drive=pmlab-usbdisk",
            "-device", "usb-kbd,bus=pmlab-usb.0", "-device", "usb-tablet,bus=pmlab-usb.0"]
    if machine == "pc":
        args += ["-device", f"ahci,id=pmlab-sata,bus={root_bus},addr={slot['sata']:#x}"]
    args += [*disk("sata-disk", "pmlab-satadisk"), "-device", f"ide-hd,bus={sata_bus},drive=pmlab-satadisk",
             "-device", f"virtio-scsi-pci,id=pmlab-scsi,bus={root_bus},addr={slot['scsi']:#x}",
             *disk("scsi-disk", "pmlab-scsidisk"), "-device", "scsi-hd,bus=pmlab-scsi.0,drive=pmlab-scsidisk",
             "-audiodev", "none,id=pmlab-audio",
             "-device", f"intel-hda,id=pmlab-hda,bus={root_bus},addr={slot['hda']:#x}",
             "-device", "hda-duplex,bus=pmlab-hda.0,audiodev=pmlab-audio",
             "-action", "watchdog=none", "-device", f"i6300esb,bus={root_bus},addr={slot['i6300esb']:#x}",
             "-object", "rng-random,id=pmlab-rng,filename=/dev/urandom",
             "-device", f"virtio-rng-pci,rng=pmlab-rng,bus={root_bus},addr={slot['virtio-rng']:#x}",
             "-device", f"virtio-balloon-pci,bus={root_bus},addr={slot['virtio-balloon']:#x}"]
    return args + _arguments_only(slot, root_bus, paths)


# ------------------------------------------------------------- kernel names
#
# What the guest's kernel calls its devices (dev_name): the names a kfault
# knob (pmtest_kfault.ko, `--inject 'N:kfault=DEVICE CALLBACK ERRNO COUNT'`)
# and the records' callbacks use. ./pmlab devices lists them; check_kfault
# refuses, before a guest boots, a name the guest would refuse.

# The PCI functions of the machine itself (QEMU's chipset; q35's AHCI at
# 00:1f.2 is the zoo's SATA controller there), and of the lab's plumbing
# on every guest (lab.virt.domain_xml: slots 3, 4 and edu from 0x10).
CHIPSET_PCI = {
    "pc": (("0000:00:00.0", "i440FX host bridge"), ("0000:00:01.0", "PIIX3 ISA bridge"),
           ("0000:00:01.1", "PIIX3 IDE controller"), ("0000:00:01.3", "PIIX4 ACPI (power management)")),
    "q35": (("0000:00:00.0", "Q35 host bridge"), ("0000:00:1f.0", "ICH9 LPC bridge"),
            ("0000:00:1f.2", "ICH9 AHCI controller (the zoo's sata-disk)"), ("0000:00:1f.3", "ICH9 SMBus")),
}
PLUMBING_PCI = ((0x03, "virtio-blk swap disk (virtio_blk)"), (0x04, "virtio-serial agent port (virtio_console)"),
                (0x10, "QEMU edu (pmtest_edu_pm)"))
# The zoo's PCI functions (pci_slots' names): what each is.
ZOO_PCI = {"usb": "xHCI controller (xhci_hcd): usb-disk, usb-kbd, usb-tablet", "sata": "AHCI controller (ahci): sata-disk",
           "scsi": "virtio-scsi controller (virtio_scsi): scsi-disk", "hda": "HD audio (snd_hda_intel)",
           "i6300esb": "i6300ESB watchdog (i6300esb)", "virtio-rng": "virtio-rng (virtio_rng)",
           "virtio-balloon": "virtio-balloon (virtio_balloon)", "nvme-disk": "NVMe controller (nvme)",
           "sd-card": "SDHCI controller (sdhci-pci): sd-card", "e1000e": "e1000e NIC (e1000e)",
           "virtio-net": "virtio-net NIC (virtio_net)"}
# pmtest's device trees (pmtest_platform.c): <driver>.<id>, ids 0.. breadth first.
PMTEST_TREES = ("pmtest_full", "pmtest_compat", "pmtest_legacy", "pmtest_async")
PMTEST_DEFAULT_TREE = (2, 2)
# pmtest's other devices in every lab guest (kernel/modules/pmtest/README.md,
# "The device matrix"; the PMTS ones need the SSDT, kernel/build makes it).
PMTEST_FIXED = ("pmtest_domain.0", "pmtest_domain.1", "pmtest_domain.2", "pmtest_genpd.0", "pmtest_genpd.1",
                "pmtest_genpd.2", "pmtest_typed.0", "pmtest_typed.1", "pmtest_typed.2", "pmtest_class.0",
                "pmtest_class.1", "pmtest_skip_resume.0", "pmtest_direct.0", "pmtest_no_direct.0",
                "PMTS0001:00", "PMTS0001:01", "PMTS0002:00", "PMTS0003:00", "PMTS0004:00")
# pmtest_kfault.c's callbacks (kfault_callbacks; quiesce* and recover* with the series).
KFAULT_CALLBACKS = ("suspend", "suspend_late", "suspend_noirq", "resume_noirq", "resume_early", "resume",
                    "freeze", "freeze_late", "freeze_noirq", "thaw_noirq", "thaw_early", "thaw",
                    "poweroff", "poweroff_late", "poweroff_noirq", "restore_noirq", "restore_early", "restore",
                    "quiesce", "quiesce_late", "quiesce_noirq", "recover", "recover_early", "recover_noirq")
_PCI_NAME = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_TREE_NAME = re.compile(r"(?P<tree>pmtest_(?:full|compat|legacy|async))\.(?P<id>\d+)")


def machine_of(profile):
    """The QEMU machine (pc, q35) of a machine profile (lab/profiles.py)."""
    from lab.profiles import profile as profile_of
    return profile_of(profile)["machine"]


def pci_functions(machine, name):
    """[(dev_name, what it is)] of the PCI functions a guest of device set
    `name` has on `machine`, by address."""
    found = dict(CHIPSET_PCI[machine])
    found.update((f"0000:00:{slot:02x}.0", what) for slot, what in PLUMBING_PCI)
    if check(name) == "zoo":
        found.update((pci_name(machine, device), ZOO_PCI[device]) for device in pci_slots(machine))
    return sorted(found.items())


def tree_sizes(tree=None):
    """{tree driver: devices} of pmtest's trees for (depth, fanout) (None:
    pmtest's default): pmtest_tree_size(), async one level deeper where
    that still fits 256 devices."""
    depth, fanout = tree or PMTEST_DEFAULT_TREE

    def size(levels):
        return sum(fanout ** level for level in range(levels + 1)) if fanout else 1

    total = size(depth)
    deeper = size(depth + 1)
    return {driver: (deeper if driver == "pmtest_async" and deeper <= 256 else total) for driver in PMTEST_TREES}


def kfault_problem(value, machine, name, tree=None, children=False):
    """Why the guest would refuse kfault knob `value` ("DEVICE CALLBACK
    ERRNO COUNT") on a guest of device set `name` on `machine` (None: any
    profile), or None. As strict as the guest and no stricter: a PCI-shaped
    name must be one of the guest's PCI functions, a pmtest tree device
    within its tree (unless a child knob can add devices: `children`), and
    names no device can have are refused; any other name (a USB, SCSI or
    ACPI device, the kernel names thousands) is the guest's to check."""
    fields = value.split()
    if len(fields) < 4:
        return f"kfault '{value}': give DEVICE CALLBACK ERRNO COUNT, e.g. '{pci_name('q35', 'nvme-disk')} suspend -5 1'"
    device, callback = fields[0], fields[1]
    if callback not in KFAULT_CALLBACKS:
        return f"kfault '{value}': unknown callback '{callback}' (known: {' '.join(KFAULT_CALLBACKS)})"
    if _PCI_NAME.fullmatch(device):
        machines = (machine,) if machine else tuple(CHIPSET_PCI)
        known = sorted({pci for each in machines for pci, _ in pci_functions(each, name)})
        if device not in known:
            where = f"a {name} guest on {machine}" if machine else f"a {name} guest"
            return (f"kfault '{value}': {where} has no PCI device {device} "
                    f"(its PCI devices: {', '.join(known)}; ./pmlab devices lists them)")
        return None
    tree_device = _TREE_NAME.fullmatch(device)
    if tree_device and not children:
        size = tree_sizes(tree)[tree_device["tree"]]
        if int(tree_device["id"]) >= size:
            return (f"kfault '{value}': {tree_device['tree']} has devices .0 to .{size - 1} with this "
                    f"--pmtest-tree ({'x'.join(map(str, tree or PMTEST_DEFAULT_TREE))})")
    if "/" in device or device in ("*", "pmtest_syscore"):
        return (f"kfault '{value}': '{device}' is a target of pmtest's own fault knob, not a device "
                f"(kfault names one device by its kernel name; ./pmlab devices lists them)")
    return None


def listing(profiles, tree=None):
    """./pmlab devices: the kernel names of each profile's PCI functions
    (lean guests, then what the zoo adds) and of pmtest's devices, as
    lines of text."""
    lines = []
    for profile in profiles:
        machine = machine_of(profile)
        lean = dict(pci_functions(machine, "lean"))
        lines.append(f"{profile} (QEMU machine {machine}): PCI devices")
        lines += [f"  {pci}  {what}" for pci, what in lean.items()]
        lines.append("  with --devices zoo also:")
        lines += [f"  {pci}  {what}" for pci, what in pci_functions(machine, "zoo") if pci not in lean]
        lines.append("")
    sizes = tree_sizes(tree)
    lines.append(f"pmtest devices, every guest (--pmtest-tree {'x'.join(map(str, tree or PMTEST_DEFAULT_TREE))}):")
    lines += [f"  {driver}.0 .. {driver}.{size - 1}" for driver, size in sizes.items()]
    for start in range(0, len(PMTEST_FIXED), 6):
        lines.append("  " + " ".join(PMTEST_FIXED[start:start + 6]))
    lines.append("  (PMTS*: ACPI devices of pmtest's SSDT, in every guest the lab boots)")
    lines += ["", "Use a name as --inject 'N:kfault=DEVICE CALLBACK ERRNO COUNT' (pmtest's own devices also take",
              "'N:fault=...'). The guest has more devices than these (USB 1-1, SCSI 2:0:0:0, ACPI PNP0501:00, ...):",
              "their names are the guest's to check; a name it rejects stops the run with exit 2."]
    return lines
