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
