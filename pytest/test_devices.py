"""The device guest's host side (lab/devices.py): its domain, the probe
lines' parser and what the judge makes of them. The live device guest is
in test_cycles.py (test_device_guest_*)."""

import copy
import xml.etree.ElementTree as ElementTree

import pytest

from lab import devices, modes, virt
from lab import records as record_format
from lab.cycle import cycle_arguments
from lab.judge import judge
from recordings_util import records, report

RECORDS = records()
ASKED = devices.probe_arguments("zoo")
# A real zoo guest's S3 with probes before the suspend and after the resume.
ZOO_MEM = "zoo-mem-before"


def _with_probes(text, section):
    """The recorded report with a probes section where guest/pmlab-cycle puts it."""
    head, sep, tail = text.partition("\n=== trace")
    assert sep, "the recorded report has no trace section"
    return f"{head}\n=== probes\n{section}{sep}{tail}"


def _judge(name, section):
    record = RECORDS[name]
    return judge(modes.parse_mode(record["mode"], record["wake"]), _with_probes(report(name), section), 0,
                 record["libvirt_events"], record["evidence"], record["timeline"], record["token"],
                 record["guest_boot_id"])


def _all_ok(skip=()):
    lines = [f"asked={','.join(ASKED)}"]
    lines += [f"{word.split(':')[0]} {word.split(':')[1]} ok 12 -" for word in ASKED if word not in skip]
    return "\n".join(lines) + "\n"


def test_every_subsystem_of_the_issue_is_in_the_zoo():
    assert {d.subsystem for d in devices.ZOO} == {"usb", "sata", "scsi", "nvme", "net", "sound", "mmc",
                                                 "watchdog", "rng", "balloon"}
    assert {d.name for d in devices.ZOO} >= {"usb-disk", "usb-kbd", "usb-tablet", "e1000e", "virtio-net"}
    # every scratch disk is probed as a disk, and every disk has a scratch volume
    assert {d.name for d in devices.ZOO if d.probe == "disk"} == set(devices.SCRATCH_DISKS)


def test_the_lean_guest_has_no_devices_and_no_probes():
    assert devices.devices("lean") == () and devices.probe_arguments("lean") == []
    assert devices.modules_cmdline("lean") == "" and devices.scratch_volumes("lean") == {}
    with pytest.raises(ValueError, match="unknown device set 'tiny'"):
        devices.check("tiny")


def test_the_hda_codec_parser_is_loaded_before_the_controller():
    """lab-findings.md: snd_hda_intel probes its codecs once; without the
    generic parser loaded first it finds none."""
    order = devices.ZOO_MODULES
    assert order.index("snd_hda_codec_generic") < order.index("snd_hda_intel")
    assert devices.modules_cmdline("zoo") == "pmlab.modules=" + ",".join(order)


@pytest.mark.parametrize("profile", sorted(virt.PROFILES))
def test_zoo_domain_has_every_device_on_its_own_slot(profile):
    scratch = {name: (f"g{suffix}", f"/pool/g{suffix}") for name, suffix in devices.SCRATCH_DISKS.items()}
    xml = virt.domain_xml("g", profile, "/k", "/i", "c", "g-swap", "/log", device_set="zoo", scratch=scratch)
    root = ElementTree.fromstring(xml)
    found = root.find("devices")
    assert found.find("controller[@type='usb']").get("model") == "qemu-xhci"
    assert found.find("memballoon").get("model") == "virtio"
    assert {d.find("target").get("bus") for d in found.findall("disk")} == {"virtio", "usb", "sata", "scsi"}
    assert [i.get("type") for i in found.findall("input[@bus='usb']")] == ["keyboard", "tablet"]
    assert found.find("sound").get("model") == "ich6" and found.find("audio").get("type") == "none"
    assert found.find("watchdog").get("model") == "i6300esb" and found.find("rng").get("model") == "virtio"
    args = [a.get("value") for a in root.iter("{http://libvirt.org/schemas/domain/qemu/1.0}arg")]
    joined = " ".join(args)
    for model in ("nvme,", "sdhci-pci,", "sd-card,", "e1000e,", "virtio-net-pci,"):
        assert model in joined
    assert joined.count("hubid=0") == 2  # the NICs share one hub and nothing else
    slots = [int(a.get("slot"), 16) for a in found.iter("address") if a.get("slot")]
    slots += [int(arg.rsplit("addr=", 1)[1], 16) for arg in args if "addr=" in arg]
    assert len(slots) == len(set(slots)), f"two devices on one PCI slot: {sorted(slots)}"
    # pc has no AHCI of its own; q35's is built in
    assert (found.find("controller[@type='sata']") is not None) == (profile == "pc-seabios")


def test_lean_domain_is_unchanged_by_the_zoo():
    xml = virt.domain_xml("g", "q35-ovmf", "/k", "/i", "c", "g-swap", "/log")
    assert "<controller type='usb' model='none'/>" in xml and "<memballoon model='none'/>" in xml
    assert "hubport" not in xml and "<sound" not in xml


def test_parse_probes_reads_every_line_and_names_missing_devices():
    text = "asked=nvme-disk:disk,hda:sound,i6300esb:watchdog\n" \
           "nvme-disk disk ok 31 -\nhda sound fail 240 playback failed: aplay: pcm_write:2127: write error\n"
    probes = devices.parse_probes(text)
    assert probes == [
        {"device": "nvme-disk", "probe": "disk", "ok": True, "ms": 31, "error": None},
        {"device": "hda", "probe": "sound", "ok": False, "ms": 240,
         "error": "playback failed: aplay: pcm_write:2127: write error"},
        {"device": "i6300esb", "probe": "watchdog", "ok": False, "ms": None, "error": "no probe result"}]
    assert devices.broken(probes) == [("hda", "sound", "playback failed: aplay: pcm_write:2127: write error"),
                                      ("i6300esb", "watchdog", "no probe result")]


@pytest.mark.parametrize("line", ["garbage", "nvme-disk disk maybe 3 -", "nvme-disk disk ok soon -", "x y"])
def test_an_unreadable_probe_line_is_a_failed_probe(line):
    probes = devices.parse_probes(f"asked=\n{line}\n")
    assert [p["ok"] for p in probes] == [False] and probes[0]["device"] == "?"
    assert "unreadable probe line" in probes[0]["error"]


def test_cycle_arguments_ask_for_the_probes():
    line = cycle_arguments(modes.parse_mode("mem"), 4, probes=["nvme-disk:disk", "hda:sound"])
    assert line.endswith("'probes=nvme-disk:disk,hda:sound'")
    assert "probes=" not in cycle_arguments(modes.parse_mode("mem"), 4)


def test_a_cycle_whose_devices_all_work_passes_and_records_them():
    result = _judge("mem", _all_ok())
    assert result["verdict"] == "pass", result["reason"]
    assert [p["device"] for p in result["probes"]] == [w.split(":")[0] for w in ASKED]
    assert all(p["ok"] for p in result["probes"])


def test_a_device_that_broke_fails_the_cycle_naming_it():
    section = _all_ok(skip=("nvme-disk:disk",)) + "nvme-disk disk fail 5012 no block device\n"
    result = _judge("mem", section)
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert result["broken_devices"] == ["nvme-disk"]
    assert "nvme-disk (disk): no block device" in result["reason"]


def test_a_device_without_a_probe_line_fails_the_cycle():
    result = _judge("disk", _all_ok(skip=("usb-kbd:usb",)))
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert "usb-kbd (usb): no probe result" in result["reason"]


def test_a_kernel_failure_stays_the_verdict_and_broken_devices_are_added():
    """A callback that failed is the cycle's verdict; a device that did not
    work after the unwind is named beside it."""
    name = "mem-fault-suspend"
    section = _all_ok(skip=("sata-disk:disk",)) + "sata-disk disk fail 10 read from /dev/sdb failed: I/O error\n"
    result = _judge(name, section)
    assert (result["verdict"], result["phase"]) == (RECORDS[name]["verdict"], RECORDS[name]["phase"])
    assert result["broken_devices"] == ["sata-disk"] and "sata-disk (disk)" in result["reason"]


def test_works_rate_counts_every_probe_once():
    probes = [{"ok": True}] * 9 + [{"ok": False}]
    rate = record_format.works_rate(probes)
    assert (rate["probes"], rate["ok"], rate["rate"]) == (10, 9, 0.9)
    assert rate["ci95"][0] < 0.9 < rate["ci95"][1]
    assert record_format.works_rate([])["rate"] is None


def test_a_lean_report_has_no_probes():
    result = judge(modes.parse_mode("mem"), report("mem"), 0, *[copy.deepcopy(RECORDS["mem"][k]) for k in
                   ("libvirt_events", "evidence", "timeline", "token", "guest_boot_id")])
    assert "probes" not in result and result["verdict"] == "pass"


# ------------------------------------------------------------ recorded device guest

def test_recorded_device_guest_cycle_passes_with_every_device_probed():
    """A real zoo guest's S3 (pytest/recordings/record.py --zoo-only): judged
    again it passes, every device probed ok, the oracle finds nothing."""
    from lab.judge import Expected, judge_with_order
    record = RECORDS[ZOO_MEM]
    result = judge_with_order(modes.parse_mode("mem"), report(ZOO_MEM), 0, record_format.host_events(record),
                              record["evidence"], record["timeline"], record["token"], record["guest_boot_id"],
                              Expected(record["devices"]))
    assert (result["verdict"], result["ordering_violations"]) == ("pass", [])
    assert [(p["device"], p["ok"]) for p in result["probes"]] == [(d.name, True) for d in devices.ZOO]
    assert [(p["device"], p["ok"]) for p in result["probes_before"]] == [(d.name, True) for d in devices.ZOO]


def _judge_zoo_mem(text, device_set="zoo", **history):
    from lab.judge import Expected, judge_with_order
    record = RECORDS[ZOO_MEM]
    return judge_with_order(modes.parse_mode("mem"), text, 0, record_format.host_events(record),
                            record["evidence"], record["timeline"], record["token"], record["guest_boot_id"],
                            Expected(device_set=device_set, **history))


def _without_section(text, name):
    """The report with its `=== name` section cut out."""
    head, _, rest = text.partition(f"=== {name}\n")
    assert rest, f"the recording has no {name} section"
    return head + (rest[rest.index("=== "):] if "=== " in rest else "")


def test_a_device_guest_report_without_its_probes_section_fails():
    """What a cycle must show comes from the request's device set, not the
    guest: a zoo cycle whose report lost its probes section fails in
    device-check, naming every device (it passed while the judge read the
    guest's own asked= echo)."""
    result = _judge_zoo_mem(_without_section(report(ZOO_MEM), "probes"))
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert {p["device"] for p in result["probes"]} == {d.name for d in devices.ZOO}
    assert "no probes section" in result["reason"] and "nvme-disk (disk)" in result["reason"]


def test_a_probes_section_that_echoes_less_than_was_asked_fails_naming_the_device():
    """The guest's asked= line and its probe lines both without nvme-disk:
    the request asked for it, so the cycle fails naming it; an asked= line
    alone (no probe lines) fails every device."""
    text = report(ZOO_MEM)
    head, _, rest = text.partition("=== probes\n")  # the section after the resume
    lines = rest.split("\n")
    cut = [line.replace(",nvme-disk:disk", "") if line.startswith("asked=") else line
           for line in lines if not line.startswith("nvme-disk ")]
    assert len(cut) == len(lines) - 1
    cut = (head + "=== probes\n").split("\n") + cut
    result = _judge_zoo_mem("\n".join(cut))
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert result["broken_devices"] == ["nvme-disk"]
    head, _, rest = text.partition("=== probes\n")
    asked_only = head + "=== probes\n" + rest.split("\n", 1)[0] + "\n" + rest[rest.index("=== "):]
    assert _judge_zoo_mem(asked_only)["broken_devices"] == [d.name for d in devices.ZOO]


def test_rejudging_a_device_guest_cycle_takes_its_set_from_the_record(tmp_path):
    """./pmlab judge reads the device set from the record the host wrote
    ("devices"), so a recorded zoo cycle whose report lost its probes
    changes verdict when judged again."""
    import gzip
    import json
    from lab import rejudge
    record = copy.deepcopy(RECORDS["zoo-mem"])
    (tmp_path / "reports").mkdir()
    with gzip.open(tmp_path / "reports" / "cycle1.txt.gz", "wt") as out:
        out.write(_without_section(report("zoo-mem"), "probes"))
    record.update(cycle=1, report="reports/cycle1.txt.gz", status="done")
    (tmp_path / "cycles.jsonl").write_text(json.dumps(record) + "\n")
    (item,) = rejudge.rejudge_run(str(tmp_path))
    assert item.old[0] == "pass" and item.new == ("fail", devices.PHASE)


def test_every_real_device_has_an_identity_of_its_own():
    """USB endpoints share their names (ep_81 under every interface): each
    is named with its parent, and no device's calls are paired with
    another's (trace.callbacks and the oracle's from_trace agree)."""
    from lab import trace
    from lab.oracle import from_trace
    text = report("zoo-mem").split("=== trace\n", 1)[1]
    sequences = trace.callbacks(trace.parse(text))
    endpoints = [device for device in sequences if device.startswith("ep_81@")]
    assert len(endpoints) >= 3 and len(set(endpoints)) == len(endpoints)
    for device, calls in sequences.items():
        prepares = [c for c in calls if c["cb"].startswith("[")]
        assert len(prepares) <= 2, f"{device}: {prepares}"  # ->prepare and ->complete, once each
    calls, parents = from_trace(text)
    assert {c.device for c in calls} == set(sequences)
    assert parents[endpoints[0]] == endpoints[0].split("@", 1)[1]


def test_a_real_drivers_failed_freeze_is_recovered_and_the_oracle_knows_why():
    """pmtest_kfault failed the AHCI controller's freeze (a real driver): the
    hibernation aborts and the core runs ->recover on pmtest's devices. Only
    the trace shows the failure; the pmtest log's judge is told of it, so
    recover is what it expects there, not thaw."""
    from lab.oracle import cycle_check
    from lab.judge import judge_with_order
    name = "zoo-disk-kfault-freeze"
    record = RECORDS[name]
    args = (record_format.host_events(record), record["evidence"], record["timeline"], record["token"],
            record["guest_boot_id"])
    result = judge_with_order(modes.parse_mode("disk"), report(name), 0, *args)
    assert (result["verdict"], result["phase"]) == ("fail", "freeze")
    assert result["failed_callbacks"] == [{"device": "0000:00:1f.2 (ahci)", "cb": "bus[freeze]", "err": -5}]
    assert result["ordering_violations"] == []
    assert all(p["ok"] for p in result["probes"])  # the unwind left every device working
    assert [c.device for c in cycle_check.outside_failures(*_trace_and_pmtest(name))] == ["0000:00:1f.2 (ahci)"]


def _trace_and_pmtest(name):
    from lab import guest_report
    from lab.oracle import from_pmtest, from_trace
    parts = guest_report.sections(report(name))
    return from_trace(parts["trace"])[0], from_pmtest(parts["pmtest_log"])


def test_without_the_outside_failure_the_recover_is_flagged(monkeypatch):
    """The negative control of the test above: the pmtest log alone shows a
    freeze that went well, then ->recover."""
    from lab.judge import parse_report
    from lab.oracle import cycle_check
    name = "zoo-disk-kfault-freeze"
    monkeypatch.setattr(cycle_check, "outside_failures", lambda trace_calls, pmtest_calls: [])
    parsed = parse_report(report(name))
    violations, _ = cycle_check.judge_cycle(parsed.sections, parsed.callbacks, RECORDS[name]["evidence"])
    assert violations and {v.rule for v in violations} == {"undo"}


@pytest.mark.parametrize("profile", sorted(virt.PROFILES))
def test_the_benchmarks_raw_guest_has_the_same_devices_on_the_same_slots(profile, tmp_path):
    """lab.bench runs QEMU without libvirt: its zoo is zoo_qemu_args(), which
    must give the models and PCI slots libvirt makes of zoo_xml()."""
    from lab import artifacts, bench
    kernel, initrd, extra = (tmp_path / "bzImage"), (tmp_path / "initramfs.cpio.gz"), \
        (tmp_path / artifacts.DEVICES_INITRD)
    for path in (kernel, initrd, extra):
        path.write_bytes(b"x")
    found = artifacts.Artifacts(str(tmp_path), str(kernel), str(initrd), devices_initrd=str(extra))
    argv = bench.raw_command(found, str(tmp_path), 3, profile_name=profile, device_set="zoo")
    devices_given = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-device"]
    models = {d.split(",")[0] for d in devices_given}
    assert {"qemu-xhci", "usb-storage", "usb-kbd", "usb-tablet", "ide-hd", "virtio-scsi-pci", "scsi-hd",
            "intel-hda", "hda-duplex", "i6300esb", "virtio-rng-pci", "virtio-balloon-pci", "nvme",
            "sdhci-pci", "sd-card", "e1000e", "virtio-net-pci"} <= models
    machine = virt.PROFILES[profile]["machine"]
    slots = {int(d.split("addr=", 1)[1].split(",")[0], 16) for d in devices_given if "addr=" in d} - {0x3, 0x4, 0x10}
    assert slots == set(devices.pci_slots(machine).values())
    assert argv[argv.index("-initrd") + 1].endswith("initramfs+devices.cpio.gz")
    assert devices.modules_cmdline("zoo") in argv[argv.index("-append") + 1]


def test_a_device_broken_after_a_failed_resume_callback_is_named_beside_it():
    """mem-fault-resume: a pmtest resume callback failed (the verdict's
    cause); a device that did not work after it is named there too."""
    section = _all_ok(skip=("hda:sound",)) + "hda sound fail 300 playback failed: no playback PCM\n"
    result = _judge("mem-fault-resume", section)
    assert (result["verdict"], result["phase"]) == (RECORDS["mem-fault-resume"]["verdict"],
                                                    RECORDS["mem-fault-resume"]["phase"])
    assert result["broken_devices"] == ["hda"]
    assert result["reason"].endswith("; devices not working afterwards: hda (sound): playback failed: no playback PCM")


def test_the_device_guests_image_is_the_lean_one_with_the_devices_appended(tmp_path):
    """Artifacts.initrd_for: the zoo boots initramfs.cpio.gz followed by
    initramfs-devices.cpio.gz (the kernel unpacks both), made again when
    either is newer; without the devices part it says what to build."""
    import os
    from lab import artifacts
    lean, extra = tmp_path / "initramfs.cpio.gz", tmp_path / artifacts.DEVICES_INITRD
    lean.write_bytes(b"lean")
    found = artifacts.Artifacts(str(tmp_path), str(tmp_path / "bzImage"), str(lean))
    assert found.initrd_for("lean") == str(lean)
    with pytest.raises(virt.LabError, match="initramfs-devices.cpio.gz"):
        found.initrd_for("zoo")
    extra.write_bytes(b"+zoo")
    found.devices_initrd = str(extra)
    combined = found.initrd_for("zoo")
    assert open(combined, "rb").read() == b"lean+zoo"
    os.utime(extra, (os.path.getmtime(combined) + 10,) * 2)
    extra.write_bytes(b"+zoo2")
    os.utime(extra, (os.path.getmtime(combined) + 10,) * 2)
    assert open(found.initrd_for("zoo"), "rb").read() == b"lean+zoo2"
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


# ------------------------------------------------------------ probes before and after

def _sata_broken(text, sections=("probes_before", "probes")):
    """The recorded report with sata-disk's probe failing in `sections`."""
    out, section = [], None
    for line in text.split("\n"):
        if line.startswith("=== "):
            section = line[4:]
        if section in sections and line.startswith("sata-disk disk ok "):
            line = "sata-disk disk fail 90 write to /dev/sdb failed: Input/output error"
        out.append(line)
    return "\n".join(out)


def _normalised(result, cycle, mode):
    from dashboards import inputs
    record = {"run_id": "r", "cycle": cycle, "status": "done", "mode": mode, "devices": "zoo", **result}
    return inputs.normalise(record, "r", None)


def test_a_device_broken_before_the_cycle_is_charged_to_the_cycle_that_broke_it():
    """The AHCI resume of issue 34: the disk died in cycle 1 (mem); a later
    cycle whose before-probes find it dead fails in device-check naming
    cycle 1, and its bucket names mem, not its own mode."""
    from dashboards import buckets
    result = _judge_zoo_mem(_sata_broken(report(ZOO_MEM)),
                            probe_history={"broken": {"sata-disk": [1, "mem"]}, "last_ok": None})
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert result["reason"].startswith("sata-disk (disk) broken before the cycle (since cycle 1 (mem)): write to")
    assert result["broken_before"] == ["sata-disk"] and "broken_devices" not in result
    assert result["broken_since"] == {"sata-disk": {"cycle": 1, "mode": "mem"}}
    assert "fail-in-device-check:sata-disk:mem" in buckets.classify(_normalised(result, 2, "freeze"))


def test_a_device_broken_by_the_cycle_is_charged_to_its_mode():
    from dashboards import buckets
    result = _judge_zoo_mem(_sata_broken(report(ZOO_MEM), sections=("probes",)))
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert result["broken_devices"] == ["sata-disk"] and "broken_before" not in result
    assert "fail-in-device-check:sata-disk:disk" in buckets.classify(_normalised(result, 3, "disk"))


def test_a_device_broken_between_cycles_names_the_last_cycle_it_worked_after():
    from dashboards import buckets
    result = _judge_zoo_mem(_sata_broken(report(ZOO_MEM)), probe_history={"broken": {}, "last_ok": [4, "disk"]})
    assert "sata-disk (disk) broken before the cycle (working after cycle 4 (disk))" in result["reason"]
    assert "fail-in-device-check:sata-disk:before-cycle" in buckets.classify(_normalised(result, 5, "mem"))


def test_a_device_guest_report_without_its_probes_before_section_fails():
    """The issue's proof: a recorded device-guest report without its
    before-probes fails, whatever its after-probes say."""
    result = _judge_zoo_mem(_without_section(report(ZOO_MEM), "probes_before"))
    assert (result["verdict"], result["phase"]) == ("fail", devices.PHASE)
    assert "no probes_before section" in result["reason"]
    assert all(p["ok"] for p in result["probes"])


def test_the_gate_charges_a_broken_device_to_the_mode_that_broke_it():
    """pipelines/compare.py's buckets: cycle 1 (mem) broke sata-disk, cycle
    2 (freeze) found it broken before it began: one new bucket, mem's."""
    from pipelines import compare
    broke = _judge_zoo_mem(_sata_broken(report(ZOO_MEM), sections=("probes",)))
    inherited = _judge_zoo_mem(_sata_broken(report(ZOO_MEM)),
                               probe_history={"broken": {"sata-disk": [1, "mem"]}, "last_ok": None})
    current = [{"run_id": "r", "cycle": n, "status": "done", "mode": mode, "devices": "zoo", **result}
               for n, mode, result in ((1, "mem", broke), (2, "freeze", inherited))]
    found = [f["bucket"] for f in compare.regressions([], current) if f["kind"] == "new-bucket"]
    assert [b for b in found if b.startswith("fail-in-")] == ["fail-in-device-check:sata-disk:mem"]


def test_the_requested_pmtest_tree_must_be_in_the_trace():
    """--pmtest-tree is the request's: the recorded guest has pmtest's
    default 2x2 trees, so asking for 2x2 passes and 3x2 fails naming the
    first missing device."""
    assert _judge_zoo_mem(report(ZOO_MEM), pmtest_tree=[2, 2])["verdict"] == "pass"
    result = _judge_zoo_mem(report(ZOO_MEM), pmtest_tree=[3, 2])
    assert (result["verdict"], result["phase"]) == ("fail", "pmtest-tree")
    assert "pmtest tree 3x2: pmtest_full.7," in result["reason"]
    no_pmtest = "\n".join(line for line in report(ZOO_MEM).split("\n") if "pmtest_" not in line)
    assert "has no pmtest devices" in _judge_zoo_mem(no_pmtest, pmtest_tree=[2, 2])["reason"]


class _Guest:
    def __init__(self):
        self.probe_history = {"broken": {}, "last_ok": None}


def test_the_drive_notes_who_broke_a_device_and_replaces_the_guest():
    """lab.cycle.note_probes, on the report as it arrives: all working is
    noted as the last good cycle; a device that worked before the suspend
    and not after is charged to the cycle, and the guest is not reused."""
    from lab.cycle import note_probes
    from lab.guest_agent import Reply
    guest, text = _Guest(), report(ZOO_MEM)
    assert not note_probes(guest, Reply(1, 0, text), 3, modes.parse_mode("freeze"))
    assert guest.probe_history == {"broken": {}, "last_ok": [3, "freeze"]}
    assert note_probes(guest, Reply(2, 0, _sata_broken(text, ("probes",))), 4, modes.parse_mode("mem"))
    assert guest.probe_history == {"broken": {"sata-disk": [4, "mem"]}, "last_ok": [3, "freeze"]}
    fresh = _Guest()  # broken before: replaced too, but charged to no cycle of its own
    assert note_probes(fresh, Reply(3, 0, _sata_broken(text)), 5, modes.parse_mode("disk"))
    assert fresh.probe_history == {"broken": {}, "last_ok": None}
