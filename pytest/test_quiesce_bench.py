"""lab/quiesce_bench.py's and lab/console.py's readers of pm_print_times
lines, on lines a v2 kernel's boot kernel of a restore printed (device
guest, pc-seabios, initcall_debug), and the summary's ratio."""

from lab import console, quiesce_bench

RECORDED = """\
[    8.078962] mmcblk mmc0:4567: PM: calling mmc_bus_suspend+0x0/0x39 [mmc_core] @ 24, parent: mmc0
[    8.081094] snd_hda_codec_generic hdaudioC0D0: PM: calling hda_codec_pm_freeze+0x0/0x23 [snd_hda_codec] @ 8, parent: 0000:00:08.0
[    8.082779] sd 6:0:0:0: PM: calling scsi_bus_freeze+0x0/0x9 [scsi_mod] @ 69, parent: target6:0:0
[    8.095138] mmcblk mmc0:4567: PM: mmc_bus_suspend+0x0/0x39 [mmc_core] returned 0 after 14305 usecs
[    8.107232] sd 6:0:0:0: PM: scsi_bus_freeze+0x0/0x9 [scsi_mod] returned 0 after 23346 usecs
[    8.174364]  ata6: PM: calling ata_port_pm_freeze+0x0/0x29 [libata] @ 3, parent: 0000:00:06.0
[    8.189055] rtc_cmos 00:04: PM: calling pnp_bus_freeze+0x0/0xa @ 1, parent: pnp0
[    8.190029] rtc_cmos 00:04: PM: pnp_bus_freeze+0x0/0xa returned 0 after 295 usecs
[    8.200001] nvme 0000:00:0c.0: PM: calling pci_pm_prepare+0x0/0x2e @ 1, parent: pci0000:00
[    8.200101] nvme 0000:00:0c.0: PM: pci_pm_prepare+0x0/0x2e returned 0 after 90 usecs
[    8.228351] nvme 0000:00:0c.0: PM: calling pci_pm_quiesce+0x0/0x2e @ 110, parent: pci0000:00
[    8.273051] nvme 0000:00:0c.0: PM: pci_pm_quiesce+0x0/0x2e returned 0 after 43190 usecs
[    8.288944] nvme 0000:00:0c.0: PM: pci_pm_quiesce_noirq+0x0/0x2e returned 0 after 810 usecs
[    8.688944] snd_hda_codec_generic hdaudioC0D0: PM: hda_codec_pm_freeze+0x0/0x23 [snd_hda_codec] returned 0 after 606472 usecs
[    8.700000] PM: quiesce of devices complete after 640.512 msecs
[    8.710000] PM: noirq quiesce of devices complete after 3.001 msecs
""".splitlines()

# 6.12 prints the function without its offset
RECORDED_6_12 = """\
[    6.538250] sound pcmC0D0c: PM: calling do_pcm_suspend [snd_pcm] @ 1, parent: card0
[    6.540001] snd_hda_codec_generic hdaudioC0D0: PM: calling hda_codec_pm_quiesce [snd_hda_codec] @ 8, parent: 0000:00:08.0
[    6.540101] snd_hda_codec_generic hdaudioC0D0: PM: hda_codec_pm_quiesce [snd_hda_codec] returned 0 after 31 usecs
[    6.541000] rtc_cmos 00:04: PM: calling pnp_bus_quiesce @ 1, parent: pnp0
""".splitlines()


def test_6_12_lines_without_the_offset_read_the_same():
    assert console.pm_calls(RECORDED_6_12) == [("pcmC0D0c", "do_pcm_suspend"),
                                               ("hdaudioC0D0", "hda_codec_pm_quiesce"), ("00:04", "pnp_bus_quiesce")]
    assert quiesce_bench.quiesce_times(RECORDED_6_12) == ({"hdaudioC0D0": 31}, {})


def test_pm_calls_name_each_device_and_the_layers_function():
    assert console.pm_calls(RECORDED) == [
        ("mmc0:4567", "mmc_bus_suspend"), ("hdaudioC0D0", "hda_codec_pm_freeze"), ("6:0:0:0", "scsi_bus_freeze"),
        ("ata6", "ata_port_pm_freeze"), ("00:04", "pnp_bus_freeze"), ("0000:00:0c.0", "pci_pm_prepare"),
        ("0000:00:0c.0", "pci_pm_quiesce")]


def test_quiesce_times_sum_each_devices_callbacks_but_prepare():
    per_device, phases = quiesce_bench.quiesce_times(RECORDED)
    assert per_device == {"mmc0:4567": 14305, "6:0:0:0": 23346, "00:04": 295, "0000:00:0c.0": 44000,
                          "hdaudioC0D0": 606472}
    assert phases == {"quiesce": 640.512, "noirq quiesce": 3.001}


def test_summary_gives_after_over_before_per_watched_device():
    before = quiesce_bench.quiesce_times(RECORDED)
    after = ({"hdaudioC0D0": 1000, "0000:00:0c.0": 22000}, {"quiesce": 40.0})
    rows = quiesce_bench.summarize({"before": [before, before], "after": [after]}, "pc-seabios")
    assert rows["hda codec (hdaudioC0D0)"]["ratio"] == round(1000 / 606472, 4)
    assert rows["nvme (0000:00:0c.0)"]["ratio"] == 0.5
    assert rows["quiesce phase total"]["after"]["median_usecs"] == 40000.0
