"""Real guests: one test item per sleep cycle, plus hang recovery.

Every cycle boots nothing new unless the previous one left its guest
unusable; the verdict comes from lab.judge.judge, which demands proof of
sleep (libvirt events, s2idle console marker + power button, boot id and
tmpfs token across hibernation), not just a returning `echo mem`.
"""

import os

import pytest
from hang_evidence import assert_hang_evidence, sections

from lab import modes
from lab.cycle import Watchdogs

pytestmark = pytest.mark.guest


def _explain(record):
    evidence = "\n".join(record.get("evidence", [])[-40:])
    return (f"cycle {record['cycle']} ({record['mode']}/{record['wake']}) on {record.get('guest')}: "
            f"{record['verdict']} in phase {record.get('phase')}: {record.get('reason')}\n"
            f"console:\n{evidence}")


# Reruns of a cycle the lab failed, as lab.run gives them (--lab-reruns).
LAB_RERUNS = 2


@pytest.fixture(scope="module")
def sample_run(request, lab_run, lab_session):
    """The selected cycles of the sample, run as the main job runs them:
    through Session.cycles (each judged while the next one runs, a lab
    error rerun after the plan). {planned number: [its records, rerun last]}."""
    wanted = {item.callspec.params["cycle_spec"][1] for item in request.session.items
              if getattr(item, "originalname", None) == "test_cycle"}
    plan = [(mode, number, (), "pass") for number, mode in modes.numbered(lab_run["plan"])
            if number in wanted]
    found = {}
    for record in lab_session.cycles(plan, reruns=LAB_RERUNS):
        found.setdefault(record.get("rerun_of", record["cycle"]), []).append(record)
    return found


def test_cycle(sample_run, cycle_spec):
    """Each planned cycle passed; a lab error (a race of the lab's own) is
    reported beside it and must have been followed by a rerun that passed."""
    mode, number = cycle_spec
    tries = sample_run[number]
    record = tries[-1]
    assert all(r["verdict"] == "error" for r in tries[:-1]), _explain(tries[0])
    assert record["verdict"] == "pass", _explain(record)
    assert record["status"] == "done" and record["mode"] == mode.name
    for error in tries[:-1]:
        print(f"lab error, rerun: {_explain(error)}")


# Cycle numbers of the hang test, far above any sample so they stay unique in the run.
HANG_CYCLE = 9001
HANG_DELAY_MS = 40000  # pmtest's longest allowed delay is 60 s
HANG_WATCHDOG = 15
HANG_DEVICE = "pmtest_async.7"  # an async leaf: its parents wait, it is the one stuck


def test_hang_is_recorded_and_next_cycle_passes_in_fresh_guest(lab_run):
    """A pmtest delay past the suspend watchdog makes the cycle hang: it must
    be recorded `hang` with console evidence and the dump the README promises
    (QEMU state and registers, the guest's sysrq w/t task dumps, its trace
    buffer (sysrq z), the console), name the callback that never returned
    (lab/hang.py), and the next cycle must pass in a fresh guest."""
    from lab.session import Session
    if not lab_run["artifacts"].modules:
        pytest.fail(f"the hang test needs the pmtest modules: {lab_run['artifacts'].directory}/modules "
                    "has no .ko (build them with kernel/build, then lab/build-initramfs)", pytrace=False)
    defaults = lab_run["watchdogs"]
    watchdogs = Watchdogs(boot=defaults.boot, suspend=HANG_WATCHDOG, resume=defaults.resume,
                          hibernate=defaults.hibernate, restore=defaults.restore)
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      watchdogs, lab_run["worker"] + "-hang", connection=lab_run["connection"])
    mem = modes.parse_mode("mem")
    try:
        hung = session.cycle(mem, HANG_CYCLE, [("delay", f"{HANG_DEVICE} suspend {HANG_DELAY_MS}")],
                             expect="hang")
        assert hung["verdict"] == "hang", _explain(hung)
        assert hung["phase"] == "suspend", _explain(hung)
        with open(os.path.join(lab_run["rundir"].path, hung["hang_dump"])) as text:
            dump = text.read()
        # the delay knob sleeps in pmtest_knobs_apply(), which every
        # pmtest callback, a device's or a PM layer's, goes through
        assert_hang_evidence(hung, dump, blocked_in="pmtest_knobs_apply")
        assert "Dumping ftrace buffer:" in sections(dump)["## guest sysrq z"], "no sysrq z trace in the dump"
        stuck = hung["stuck"]
        assert (stuck["device"], stuck["driver"], stuck["callback"], stuck["function"]) == \
            (HANG_DEVICE, "pmtest_async", "bus[suspend]", "pmtest_knobs_apply"), _explain(hung)
        assert HANG_WATCHDOG <= stuck["since_s"] < HANG_DELAY_MS / 1000, stuck
        assert hung["reason"].startswith(f"suspend hung: {HANG_DEVICE} (pmtest_async) bus[suspend] started "), \
            _explain(hung)
        assert session.guest is None  # the hung guest is gone

        after = session.cycle(mem, HANG_CYCLE + 1)
        assert after["verdict"] == "pass", _explain(after)
        assert after["guest"] != hung["guest"]
    finally:
        session.close()


NOIRQ_HANG_CYCLE = 9003


def test_a_noirq_hang_is_named_after_an_nmi(lab_run):
    """A callback stuck with device interrupts off (a pmtest noirq delay)
    takes no sysrq: the host's NMI panics the guest (guest/init), whose
    stack and trace buffer still name the callback (lab/hang.py)."""
    from lab.session import Session
    defaults = lab_run["watchdogs"]
    watchdogs = Watchdogs(boot=defaults.boot, suspend=HANG_WATCHDOG, resume=defaults.resume,
                          hibernate=defaults.hibernate, restore=defaults.restore)
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      watchdogs, lab_run["worker"] + "-noirq", connection=lab_run["connection"])
    try:
        hung = session.cycle(modes.parse_mode("mem"), NOIRQ_HANG_CYCLE,
                             [("delay", f"{HANG_DEVICE} suspend_noirq {HANG_DELAY_MS}")], expect="hang")
        assert hung["verdict"] == "hang", _explain(hung)
        with open(os.path.join(lab_run["rundir"].path, hung["hang_dump"])) as text:
            parts = sections(text.read())
        assert "Kernel panic - not syncing: NMI" in parts.get("## guest NMI (no sysrq answer)", ""), sorted(parts)
        stuck = hung["stuck"]
        assert (stuck["device"], stuck["callback"], stuck["function"]) == \
            (HANG_DEVICE, "noirq driver[suspend]", "pmtest_knobs_apply"), _explain(hung)
    finally:
        session.close()


TREE_CYCLE = 9011


def test_a_small_pmtest_tree_boots_and_is_judged_whole(lab_run):
    """--pmtest-tree 1x1 (a fast soak's guest): the guest boots pmtest with
    two devices a tree and three async, every cycle's record says so, and the
    oracle still judges every device's callbacks."""
    from lab.session import Session
    from lab.records import callbacks
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], "pc-seabios",
                      lab_run["watchdogs"], lab_run["worker"] + "-tree", connection=lab_run["connection"],
                      pmtest_tree=(1, 1))
    try:
        record = session.cycle(modes.parse_mode("mem"), TREE_CYCLE)
    finally:
        session.close()
    assert record["verdict"] == "pass", _explain(record)
    assert record["pmtest_tree"] == [1, 1] and "pmtest.depth=1 pmtest.fanout=1" in session.cmdline_extra
    devices = callbacks(record)
    for driver, count in (("pmtest_full", 2), ("pmtest_compat", 2), ("pmtest_legacy", 2), ("pmtest_async", 3)):
        named = sorted(d for d in devices if d.endswith(f"({driver})"))
        assert len(named) == count, f"{driver}: {named}"
    assert record["ordering_violations"] == [] and record["ordering_checked"]["pmtest_log"] > 0


BETWEEN_CYCLES = 9021


def test_a_command_between_cycles_discards_the_prepared_start(lab_run):
    """After a cycle's reply the agent prepares the next cycle's start
    (guest/pmlab-cycle prepare: snapshot, trace and pmtest log emptied)
    while the host judges. Any other command in between discards that: the
    next cycle takes its start itself, so a trace marker written in between
    is not in its trace. The same calls check pmlab-evidence's kernel log
    against busybox `dmesg`, and that it clears the log as `dmesg -c` did."""
    import gzip

    from lab import guest_report
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], "pc-seabios",
                      lab_run["watchdogs"], lab_run["worker"] + "-prepare", connection=lab_run["connection"])
    mem = modes.parse_mode("mem")

    def report(record):
        assert record["verdict"] == "pass", _explain(record)
        with gzip.open(os.path.join(lab_run["rundir"].path, record["report"]), "rt") as text:
            return guest_report.sections(text.read())
    try:
        first = report(session.cycle(mem, BETWEEN_CYCLES))
        agent = session.guest.agent
        assert agent.call("echo pmlab-between-cycles >/sys/kernel/tracing/trace_marker").status == 0
        assert agent.call("echo 'pmlab: a line between cycles' >/dev/kmsg").status == 0
        dmesg = agent.call("dmesg")
        evidence = agent.call("pmlab-evidence log=kmsg")
        after = agent.call("dmesg")
        taken = report(session.cycle(mem, BETWEEN_CYCLES + 1))
        prepared = report(session.cycle(mem, BETWEEN_CYCLES + 2))
    finally:
        session.close()
    assert "pmlab: a line between cycles" in dmesg.output
    assert evidence.status == 0 and evidence.output == "=== log\n" + dmesg.output
    assert after.status == 0 and after.output == ""
    starts = [guest_report.key_values(r["before"]).get("start") for r in (first, taken, prepared)]
    assert starts == ["taken", "taken", "prepared"]  # a fresh guest has nothing prepared
    for sections in (taken, prepared):
        assert "/sys/power/suspend_stats/success:" in sections["sysfs_before"]
        assert "pmlab-between-cycles" not in sections["trace"]
        assert "pmtest_log" in sections and "dmesg" in sections


EARLY_PRESS_CYCLE = 9031


def test_a_press_before_the_guest_idles_is_the_labs_error_not_the_kernels_fail(lab_run):
    """The lab presses the power button on purpose during the noirq phase
    (on the 'late suspend of devices complete' line, while a pmtest device
    waits 1.5 s in suspend_noirq): the kernel must abort the sleep, and the
    cycle is the lab's error naming the early press, never a fail. The next
    freeze cycle, pressed as usual, passes (in a fresh guest: an error
    replaces the guest)."""
    from lab.cycle import PowerButtonPress
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      lab_run["watchdogs"], lab_run["worker"] + "-press", connection=lab_run["connection"])
    freeze = modes.parse_mode("freeze")
    early = PowerButtonPress(marker="PM: late suspend of devices complete", wait_idle=False)
    try:
        record = session.cycle(freeze, EARLY_PRESS_CYCLE, [("delay", "pmtest_full.3 suspend_noirq 1500")],
                               expect="error", press=early)
        assert (record["verdict"], record["phase"]) == ("error", "lab"), _explain(record)
        assert record["reason"].startswith(
            "power button pressed before the guest's first suspend-to-idle idle"), _explain(record)
        assert record["s2idle"]["idle_entries"] == 0 and record["s2idle"]["button_events"] >= 1
        after = session.cycle(freeze, EARLY_PRESS_CYCLE + 1)
        assert after["verdict"] == "pass", _explain(after)
    finally:
        session.close()


FIRMWARE_CYCLE = 9041


def test_q35_firmware_damage_across_s3_is_the_platforms_fail_and_the_erratum_keeps_it_off(lab_run):
    """Debian 12's OVMF clears its work area, page 0x808000, on every S3
    resume, a page its memory map gives the OS (the LAVA q35 segfault's
    cause). Booted without the q35 profile's erratum, pmtest_ramguard sees
    it in a libvirt guest too and the cycle is the platform's fail naming
    the page; with the erratum (the default) the page is reserved and S3
    passes (test_cycle)."""
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], "q35-ovmf",
                      lab_run["watchdogs"], lab_run["worker"] + "-firmware", connection=lab_run["connection"],
                      firmware_errata=False)
    try:
        record = session.cycle(modes.parse_mode("mem"), FIRMWARE_CYCLE, expect="fail")
    finally:
        session.close()
    assert (record["verdict"], record["phase"]) == ("fail", "platform"), _explain(record)
    assert record["firmware_errata"] == ""
    assert any(change.startswith("firmware changed RAM across S3: page 0x808000, ")
               for change in record["firmware_ram_changes"]), record["firmware_ram_changes"]


# The device guest (lab/devices.py, --devices zoo): real drivers, probed.
DEVICE_CYCLE = 9051


@pytest.fixture(scope="module")
def device_guest(lab_run):
    """One device guest for the tests below, in their order (the last one
    takes a device away)."""
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      lab_run["watchdogs"], lab_run["worker"] + "-devices", connection=lab_run["connection"],
                      device_set="zoo")
    yield session
    session.close()


def _probes_ok(record):
    """Every device probed and working, before the suspend and after the resume."""
    from lab import devices
    for section in ("probes_before", "probes"):
        probed = {(p["device"], p["probe"]): p for p in record.get(section, [])}
        assert set(probed) == {(d.name, d.probe) for d in devices.ZOO}, f"{section}\n{_explain(record)}"
        broken = [f"{p['device']} ({p['probe']}): {p['error']}" for p in probed.values() if not p["ok"]]
        assert not broken, f"{section}: {broken}\n{_explain(record)}"


def test_device_guest_every_device_works_after_every_mode(device_guest):
    """A cycle of each mode on the device guest: it passes, the oracle
    judged the real drivers' callbacks too, and every device's probe
    (disk I/O, ARP between the NICs, ALSA playback and capture, USB
    enumeration, watchdog ping, RNG bytes) passed after the resume (after
    S4, in the restored image)."""
    from lab.records import callbacks
    records = [device_guest.cycle(modes.parse_mode(name), DEVICE_CYCLE + index)
               for index, name in enumerate(("mem", "freeze", "disk"))]
    for record in records:
        assert record["verdict"] == "pass", _explain(record)
        assert record["devices"] == "zoo"
        _probes_ok(record)
        drivers = {device.rsplit("(", 1)[-1].rstrip(")") for device in callbacks(record)}
        assert {"nvme", "e1000e", "xhci_hcd", "ahci", "snd_hda_intel", "sdhci-pci"} <= drivers, sorted(drivers)
        assert record["ordering_violations"] == [], _explain(record)


KFAULT_CYCLE = 9061


def test_device_guest_a_real_drivers_failed_suspend_unwinds_and_the_device_works(lab_run, device_guest):
    """pmtest_kfault makes the NVMe controller's suspend callback (the one
    the PM core resolved: the PCI bus's) fail with -EIO, without its driver
    knowing: the sleep aborts, the trace names the device and the error,
    the oracle finds the unwind in order, and every device, the NVMe disk
    first, still works; the next cycle passes. In S4 the same for the SATA
    controller's freeze."""
    from lab import devices
    from lab.records import failed_callbacks
    machine = "q35" if lab_run["profile"] == "q35-ovmf" else "pc"
    nvme, sata = devices.pci_name(machine, "nvme-disk"), devices.pci_name(machine, "sata")
    failed = device_guest.cycle(modes.parse_mode("mem"), KFAULT_CYCLE, [("kfault", f"{nvme} suspend -5 1")],
                                expect="fail")
    frozen = device_guest.cycle(modes.parse_mode("disk"), KFAULT_CYCLE + 1, [("kfault", f"{sata} freeze 5 1")],
                                expect="fail")
    after = device_guest.cycle(modes.parse_mode("mem"), KFAULT_CYCLE + 2)
    for record, device, callback in ((failed, nvme, "suspend"), (frozen, sata, "freeze")):
        assert (record["verdict"], record["phase"]) == ("fail", callback), _explain(record)
        assert any(f["device"].startswith(device + " ") and f["err"] == -5 for f in failed_callbacks(record)), \
            _explain(record)
        assert record["ordering_violations"] == [], _explain(record)
        _probes_ok(record)
    assert after["verdict"] == "pass", _explain(after)
    _probes_ok(after)


BREAK_CYCLE = 9071


def test_device_guest_a_device_taken_away_while_asleep_fails_the_cycle_naming_it(device_guest):
    """The probes can fail: QEMU unplugs the USB keyboard while the guest
    is in S3 (QMP device_del), and the cycle fails in phase device-check
    naming usb-kbd, every other device still working; the guest is
    replaced, so the next cycle (freeze) passes on a fresh one."""
    import json
    import xml.etree.ElementTree as ElementTree
    import libvirt_qemu
    from lab import devices

    def unplug_keyboard(guest):
        live = ElementTree.fromstring(guest.dom.XMLDesc(0))
        alias = live.find("devices/input[@type='keyboard'][@bus='usb']/alias").get("name")
        reply = json.loads(libvirt_qemu.qemuMonitorCommand(
            guest.dom, json.dumps({"execute": "device_del", "arguments": {"id": alias}}), 0))
        assert "error" not in reply, reply

    record = device_guest.cycle(modes.parse_mode("mem"), BREAK_CYCLE, expect="fail", while_asleep=unplug_keyboard)
    assert (record["verdict"], record["phase"]) == ("fail", devices.PHASE), _explain(record)
    assert record["broken_devices"] == ["usb-kbd"], _explain(record)
    assert "usb-kbd (usb): no USB device 'QEMU USB Keyboard'" in record["reason"]
    assert all(p["ok"] for p in record["probes_before"]), _explain(record)  # working before: mem broke it
    # The next cycle tests its own mode on a fresh guest, not the dead keyboard.
    assert record["guest_usable"] is False
    after = device_guest.cycle(modes.parse_mode("freeze"), BREAK_CYCLE + 1)
    assert after["guest"] != record["guest"] and after["verdict"] == "pass", _explain(after)
    _probes_ok(after)
