"""pipelines/lava/byhand.py, the LAVA QEMU command line run by hand: the
command line taken from a recorded job log and pointed at our files, the
options dropped for bisecting, and what --watch says about a page."""
import os
import shlex
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from pipelines.lava import byhand  # noqa: E402

RECORDING = os.path.join(REPO, "pytest", "recordings", "lava-s3-s4-job.log.yaml.gz")
FILES = {name: f"/work/{base}" for name, base in byhand.FILES.items()}


def test_boot_command_of_a_job_log_points_at_our_files():
    argv = byhand.with_files(byhand.boot_command(RECORDING), FILES, "console=ttyS0 pmlab.mode=lava")
    assert argv[argv.index("-kernel") + 1] == "/work/bzImage"
    assert argv[argv.index("-initrd") + 1] == "/work/initramfs.cpio.gz"
    assert argv[argv.index("-append") + 1] == "console=ttyS0 pmlab.mode=lava"
    assert "file=/work/pmtest-ssdt.aml" in argv
    assert "format=raw,if=virtio,cache=unsafe,file=/work/swap.img" in argv
    assert not [arg for arg in argv if "/var/lib/lava" in arg]


def test_the_q35_ovmf_line_is_the_one_lava_ran():
    """The recorded job predates romfile= (the device dictionary's last
    option); otherwise LAVA's line, word for word."""
    ours = shlex.split(byhand.LAVA_Q35_OVMF.format(append="A", **FILES))
    ours = byhand.drop(ours, ["-global virtio-net-pci.romfile="])
    recorded = byhand.with_files(byhand.boot_command(RECORDING), FILES, "A")
    assert [os.path.basename(ours[0])] + ours[1:] == [os.path.basename(recorded[0])] + recorded[1:]


def test_drop_takes_an_option_with_its_value():
    argv = shlex.split(byhand.LAVA_Q35_OVMF.format(append="A", **FILES))
    dropped = byhand.drop(argv, ["-net", "-global virtio-net"])
    assert "-net" not in dropped and "user" not in dropped
    assert "virtio-net-pci.romfile=" not in dropped
    assert dropped.count("-global") == 2  # ICH9-LPC.disable_s3/s4 stay
    assert byhand.drop(["qemu", "-no-reboot", "-m", "512"], ["-no-reboot"]) == ["qemu", "-m", "512"]


def test_watched_page_named_by_the_memory_map(tmp_path):
    console = tmp_path / "console.log"
    console.write_text("[    0.000000] BIOS-e820: [mem 0x0000000000806000-0x0000000000807fff] ACPI NVS\n"
                       "[    0.000000] BIOS-e820: [mem 0x0000000000808000-0x000000000080ffff] usable\n")
    assert byhand.e820_type(str(console), 0x808000) == "usable"
    assert byhand.e820_type(str(console), 0x807000) == "ACPI NVS"
    assert byhand.e820_type(str(console), 0x100000).startswith("not in")
    before = b"\xff" * byhand.PAGE
    after = b"\0" + before[1:4] + bytes(25) + before[29:]  # what OVMF's reset vector writes there
    assert "26 bytes changed across the S3 resume, offsets 0x0..0x1c" in byhand.compare(0x808000, before, after)
    assert "unchanged" in byhand.compare(0x808000, before, before)
    assert "not saved" in byhand.compare(0x808000, None, before)
