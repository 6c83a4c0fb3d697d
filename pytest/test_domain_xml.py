"""lab.virt.domain_xml: the domain the lab asks libvirt for."""

import xml.etree.ElementTree as ET

import pytest

from lab import virt

QEMU_NS = "{http://libvirt.org/schemas/domain/qemu/1.0}"


def build(profile="q35-ovmf"):
    return ET.fromstring(virt.domain_xml("g1", profile, "/k", "/i", "console=ttyS0", "g1-swap",
                                         "/var/log/libvirt/qemu/g1-serial0.log"))


def test_q35_ovmf_domain():
    dom = build()
    assert dom.get("type") == "qemu"  # TCG: no KVM on these machines
    assert dom.find("os/type").get("machine") == "q35"
    loader = dom.find("os/loader")
    assert loader.get("readonly") == "yes" and loader.text.endswith("OVMF_CODE_4M.fd")
    assert dom.find("os/nvram").get("template").endswith("OVMF_VARS_4M.fd")
    assert dom.find("os/kernel").text == "/k" and dom.find("os/initrd").text == "/i"
    assert dom.find("pm/suspend-to-mem").get("enabled") == "yes"
    assert dom.find("pm/suspend-to-disk").get("enabled") == "yes"
    channel = dom.find("devices/channel")
    assert channel.get("type") == "unix" and channel.find("target").get("name") == virt.AGENT_CHANNEL
    disk = dom.find("devices/disk")
    assert disk.find("source").get("volume") == "g1-swap" and disk.find("target").get("bus") == "virtio"
    assert dom.find("devices/serial/log").get("file").endswith("g1-serial0.log")
    assert dom.find("devices/graphics") is None
    args = [a.get("value") for a in dom.find(f"{QEMU_NS}commandline")]
    assert args == ["-device", "edu,bus=pcie.0,addr=0x10"]


def test_pc_seabios_profile_has_no_firmware_files():
    dom = build("pc-seabios")
    assert dom.find("os/type").get("machine") == "pc"
    assert dom.find("os/loader") is None
    args = [a.get("value") for a in dom.find(f"{QEMU_NS}commandline")]
    assert args[1].startswith("edu,bus=pci.0")


def test_unknown_profile():
    with pytest.raises(virt.LabError, match="unknown machine profile"):
        build("arm-uboot")


def test_names_are_escaped():
    text = virt.domain_xml("g<1>", "q35-ovmf", "/k&", "/i", "a='b'", "v", "/l")
    assert ET.fromstring(text).find("name").text == "g<1>"


def test_acpi_tables_reach_qemu_after_the_devices():
    dom = ET.fromstring(virt.domain_xml("g1", "q35-ovmf", "/k", "/i", "console=ttyS0", "g1-swap",
                                        "/l", acpi_tables=["/var/lib/libvirt/pmlab/g1-ssdt"]))
    args = [a.get("value") for a in dom.find(f"{QEMU_NS}commandline")]
    assert args == ["-device", "edu,bus=pcie.0,addr=0x10",
                    "-acpitable", "file=/var/lib/libvirt/pmlab/g1-ssdt"]


@pytest.mark.parametrize("uri, machines", [("qemu:///system", True), ("qemu:///session", True),
                                           ("qemu:///system?socket=/tmp/t/libvirt-sock", False),
                                           ("qemu+ssh://root@host/system", False)])
def test_only_the_machines_own_libvirtd_is_started_by_the_lab(uri, machines):
    """A URI naming its socket is a daemon of its own (a fault test's, which
    restarts it): the lab must not start the machine's for it."""
    assert virt._machine_daemon(uri) is machines
