"""The guest machines the lab boots, as data: the machine type, its
firmware, and the kernel command line words that keep the firmware's known
bugs off the kernel under test. Read by the libvirt guests (lab/virt.py),
the LAVA jobs and the option parsers; imports no libvirt."""

from lab.errors import LabError

# Machine profiles. q35 + OVMF is the default: UEFI firmware with a real S3
# resume path. pc + SeaBIOS boots ~3x faster, but after an S3 resume
# `poweroff -f` hangs there; it is an option, named for what it is.
# Every PCI device gets a fixed slot on the root bus: libvirt would otherwise
# put virtio devices behind pcie-root-ports on q35 (more devices to suspend)
# and the edu device, added by QEMU arguments, could take a slot libvirt wants.
PROFILES = {
    "q35-ovmf": {
        "machine": "q35",
        "root_bus": "pcie.0",
        "loader": "/usr/share/OVMF/OVMF_CODE_4M.fd",
        "nvram_template": "/usr/share/OVMF/OVMF_VARS_4M.fd",
        # Debian 12's OVMF (2022.11) clears its work area page 0x808000 on
        # every S3 resume while its memory map gives that page to the OS:
        # reserve it, as a kernel quirk would (pmtest_ramguard.ko finds it
        # without this; lab.run --no-firmware-errata).
        "errata": ("memmap=4K$0x808000",),
        # pmtest_ramguard.ko compares the RAM pages of OVMF's SEC/PEI window
        # across every S3 resume (the kernel's own suspend path leaves them
        # alone; elsewhere it does not, so the guard is not spread wider).
        "ramguard": ("pmtest_ramguard.start=0x800000", "pmtest_ramguard.size=0x100000"),
    },
    "pc-seabios": {"machine": "pc", "root_bus": "pci.0", "loader": None, "nvram_template": None,
                   "errata": (), "ramguard": ()},
}


def errata_cmdline(name):
    """Kernel command line words that keep the profile's known firmware bugs
    off the kernel under test (PROFILES' "errata"; the guests of lab.guest
    and the LAVA jobs alike)."""
    return " ".join(profile(name)["errata"])


def ramguard_cmdline(name):
    """The words that point pmtest_ramguard.ko at the profile's firmware
    window (PROFILES' "ramguard"); none: the guard stays off."""
    return " ".join(profile(name)["ramguard"])


def profile(name):
    if name not in PROFILES:
        raise LabError(f"unknown machine profile '{name}' (known: {', '.join(PROFILES)})")
    return PROFILES[name]
