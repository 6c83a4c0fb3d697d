"""The series' subsystem layers, seen in a real guest (the device guest of
lab/devices.py, plus pmtest's device on the auxiliary bus): in the boot
kernel of a restore every converted layer runs its quiesce callbacks, and
after a failed image creation its recover callbacks; on the unpatched
kernel (the baseline, build/baseline/out) the same devices get the layers'
freeze callbacks, and thaw or restore ones.

The evidence is the console: pm_print_times makes the PM core name the
function of every callback it runs (lab.console.pm_calls), so the function
says which layer ran and which of its callbacks. The boot kernel of a
restore gets it from initcall_debug (a "boot" knob), the cycle that fails
to create an image from the print_times knob. test_baseline_control.py
runs this module on the baseline kernel too (--pipeline-tests).
"""

import re

import pytest

from lab import console, modes, pmtest_log

pytestmark = pytest.mark.guest

QUIESCE_CYCLE = 9601
RECOVER_CYCLE = 9602
EIO = -5

# layer: (its devices in the zoo guest, the series' quiesce and recover
# callbacks, and what the unpatched kernel runs instead: its freeze callback,
# and its thaw or restore ones (6.1 resumes with PMSG_RESTORE after a late or
# noirq freeze failure, the series' 0004 fixes that)).
LAYERS = {
    "USB (usb_device_type)": ({"usb_dev_quiesce"}, {"usb_dev_recover"},
                              {"usb_dev_freeze"}, {"usb_dev_thaw", "usb_dev_restore"}),
    "SCSI (scsi_bus_pm_ops)": ({"scsi_bus_quiesce"}, {"scsi_bus_recover"},
                               {"scsi_bus_freeze"}, {"scsi_bus_thaw", "scsi_bus_restore"}),
    "MMC (mmc_bus_pm_ops)": ({"mmc_bus_quiesce"}, {"mmc_bus_recover"},
                             {"mmc_bus_suspend"}, {"mmc_bus_resume"}),
    "PNP (pnp_bus_dev_pm_ops)": ({"pnp_bus_quiesce"}, {"pnp_bus_recover"},
                                 {"pnp_bus_freeze"}, {"pnp_bus_resume"}),
    "PCI (pci_dev_pm_ops)": ({"pci_pm_quiesce", "pci_pm_quiesce_noirq"}, {"pci_pm_recover", "pci_pm_recover_noirq"},
                             {"pci_pm_freeze", "pci_pm_freeze_noirq"},
                             {"pci_pm_thaw", "pci_pm_thaw_noirq", "pci_pm_restore", "pci_pm_restore_noirq"}),
    # the first user: the HDA codec driver (hda_codec_driver_pm, no bus PM ops)
    "HDA codec driver": ({"hda_codec_pm_quiesce"}, {"hda_codec_pm_recover"},
                         {"hda_codec_pm_freeze"}, {"hda_codec_pm_thaw", "hda_codec_pm_restore"}),
}


# The virtio transport (drivers/virtio/virtio_pci_common.c): PCI's callback
# runs the virtio_pci driver's, which pm_print_times does not name, so the
# calls knob probes them (lab/calls.py): what the running kernel and the boot
# kernel of a restore ran, per virtio device. The unpatched kernel has no
# virtio_pci_quiesce or virtio_pci_recover to probe.
VIRTIO_QUIESCE, VIRTIO_RECOVER = "virtio_pci_quiesce", "virtio_pci_recover"
VIRTIO_FREEZE, VIRTIO_RESTORE = "virtio_pci_freeze", "virtio_pci_restore"
VIRTIO_PCI_DEVICES = 6  # the zoo's: block (swap), console (agent), SCSI, net, rng, balloon


def _virtio_calls(session):
    functions = [VIRTIO_FREEZE, VIRTIO_RESTORE] + ([VIRTIO_QUIESCE, VIRTIO_RECOVER] if session.patched else [])
    return ("calls", ",".join(functions))


def _ran(record, kernel):
    """{function: {devices}} the calls knob saw `kernel` ("running", "boot") run."""
    found = {}
    for call in record.get("calls", []):
        if call["kernel"] == kernel:
            found.setdefault(call["function"], set()).add(call["device"])
    return found


def _session(lab_run, worker, **guest):
    """A session of this module's own guest; `patched`: the kernel has the
    series (its manifest is not the baseline's)."""
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      lab_run["watchdogs"], lab_run["worker"] + worker, connection=lab_run["connection"], **guest)
    session.patched = lab_run["artifacts"].manifest.get("variant") != "baseline"
    return session


# The auxiliary bus (pmtest_aux.c, pmtest.aux=1): no QEMU device sits on it,
# so pmtest's own does; the bus's level 1 callbacks are generic helpers that
# pm_print_times names, the driver's records say what it got.
AUX = "pmtest.aux.0"
AUX_BUS = {"quiesce": "pm_generic_quiesce_or_suspend", "recover": "pm_generic_recover_or_resume",
           "suspend": "pm_generic_suspend", "resume": "pm_generic_resume"}


def _aux_functions(called):
    return {function for function, devices in called.items() if AUX in devices}


def _pmtest_callbacks(record, device):
    """The driver callbacks `device`'s pmtest records on the console name
    (the boot kernel's only reach the host there)."""
    entries = pmtest_log.parse("\n".join(record.get("evidence", [])))
    return {entry["cb"] for entry in entries if entry["dev"] == device}


@pytest.fixture(scope="module")
def zoo(lab_run):
    session = _session(lab_run, "-layers", device_set="zoo", cmdline_extra="pmtest.aux=1")
    yield session
    session.close()


def _explain(record):
    return f"cycle {record['cycle']} {record['mode']}: {record['verdict']} in {record.get('phase')}: " \
           f"{record.get('reason')}"


def _called(record):
    """{callback function: {devices}} of the cycle's pm_print_times lines."""
    found = {}
    for device, function in console.pm_calls(record.get("evidence", [])):
        found.setdefault(function, set()).add(device)
    return found


def _check(called, wanted, instead, patched, what):
    """Each layer's callbacks `wanted` (patched) or `instead` (baseline) ran,
    and none of the other set did."""
    problems = []
    for layer, sets in LAYERS.items():
        ran, not_ran = (sets[wanted], sets[instead]) if patched else (sets[instead], sets[wanted])
        if not ran & set(called):
            problems.append(f"{layer}: none of {sorted(ran)} ran for {what}")
        wrong = {f: sorted(called[f]) for f in not_ran & set(called)}
        if wrong:
            problems.append(f"{layer}: {wrong} ran for {what}")
    return problems


def test_the_boot_kernel_of_a_restore_quiesces_through_every_layer(zoo):
    # the unpatched kernel's oracle verdict is fail (pmtest's drivers get
    # ->freeze* where the seed's rules give ->quiesce*): the names are the point
    record = zoo.cycle(modes.parse_mode("disk"), QUIESCE_CYCLE, [("boot", "initcall_debug"), _virtio_calls(zoo)],
                       expect="pass" if zoo.patched else "fail")
    assert record["verdict"] == ("pass" if zoo.patched else "fail"), _explain(record)
    called = _called(record)
    assert called, "no pm_print_times line on the console: initcall_debug did not reach the boot kernel"
    problems = _check(called, 0, 2, zoo.patched, "the boot kernel's quiesce")
    assert not problems, "\n".join(problems)
    # virtio: every virtio PCI device PCI quiesced got the transport's quiesce
    # (the boot kernel's console), none its freeze; the baseline's got freeze
    virtio = {device for device in called.get("pci_pm_quiesce" if zoo.patched else "pci_pm_freeze", ())
              if device in _ran(record, "running").get(VIRTIO_FREEZE, ())}
    boot = _ran(record, "boot")
    assert len(virtio) == VIRTIO_PCI_DEVICES, (virtio, record.get("calls"))
    wanted, instead = (VIRTIO_QUIESCE, VIRTIO_FREEZE) if zoo.patched else (VIRTIO_FREEZE, VIRTIO_QUIESCE)
    assert boot.get(wanted, set()) == virtio and not boot.get(instead), (virtio, boot)
    # legacy platform drivers keep 6.1's PMSG_FREEZE there (v3; the seed and
    # v2 gave PMSG_QUIESCE): the boot kernel's pmtest lines on the console
    legacy = [re.search(r"event=(\w+)", line)[1] for line in record["evidence"]
              if re.search(r"pmtest: seq=\d+ .*dev=pmtest_legacy\.\d+ cb=suspend ", line)]
    assert legacy and set(legacy) == {"freeze"}, legacy
    # the auxiliary bus: the series' helper and the driver's ->quiesce; the
    # unpatched bus runs the driver's ->suspend for every suspend-side event
    aux, driver = _aux_functions(called), _pmtest_callbacks(record, AUX)
    if zoo.patched:
        assert AUX_BUS["quiesce"] in aux and AUX_BUS["suspend"] not in aux, sorted(aux)
        assert {"quiesce", "quiesce_late", "quiesce_noirq"} <= driver and "suspend" not in driver, driver
    else:
        assert AUX_BUS["suspend"] in aux and "suspend" in driver and "quiesce" not in driver, (aux, driver)
    assert record["probes"] and all(p["ok"] for p in record["probes"]), record["probes"]


def test_a_failed_image_creation_recovers_through_every_layer(zoo):
    """pmtest's syscore_ops fail syscore_suspend(), after every device's
    noirq freeze: every device is recovered at every level it has (6.1
    resumed them with ->restore*() there), the kernel goes on and every
    device still works."""
    record = zoo.cycle(modes.parse_mode("disk"), RECOVER_CYCLE,
                       [("fault", f"pmtest_syscore syscore_suspend {EIO} 1"), ("print_times", "1"),
                        _virtio_calls(zoo)],
                       expect="fail")
    assert record["verdict"] == "fail", _explain(record)
    called = _called(record)
    problems = _check(called, 1, 3, zoo.patched, "the recovery")
    assert not problems, "\n".join(problems)
    # virtio: the devices the transport froze it recovered (6.1: restored)
    ran = _ran(record, "running")
    frozen = ran.get(VIRTIO_FREEZE, set())
    wanted, instead = (VIRTIO_RECOVER, VIRTIO_RESTORE) if zoo.patched else (VIRTIO_RESTORE, VIRTIO_RECOVER)
    assert len(frozen) == VIRTIO_PCI_DEVICES and ran.get(wanted) == frozen and not ran.get(instead), ran
    # the auxiliary bus froze its driver with ->suspend (6.1's mapping) and
    # recovers it with the series' helper (->recover); the unpatched bus
    # resumes it; the oracle holds the driver's records to those rules
    aux = _aux_functions(called)
    undo = AUX_BUS["recover"] if zoo.patched else AUX_BUS["resume"]
    assert {AUX_BUS["suspend"], undo} <= aux and AUX_BUS["quiesce"] not in aux, sorted(aux)
    if zoo.patched:
        assert not [v for v in record["ordering_violations"] if AUX in str(v)], record["ordering_violations"]
    assert record["probes"] and all(p["ok"] for p in record["probes"]), record["probes"]
    # and through the next hibernation (a recover that left a frozen codec
    # runtime-disabled broke its capture only there: the device campaign)
    after = zoo.cycle(modes.parse_mode("disk"), RECOVER_CYCLE + 10)
    assert after["verdict"] == ("pass" if zoo.patched else "fail"), _explain(after)
    assert after["probes"] and all(p["ok"] for p in after["probes"]), after["probes"]


FAILED_RESTORE_CYCLE = 9603


def test_a_failed_restore_recovers_the_first_users_and_they_work(zoo):
    """The other side: a pmtest device fails its ->quiesce_noirq in the boot
    kernel, after every device's main quiesce, so the restore is abandoned
    and the boot kernel recovers the devices and boots on. The HDA codec
    (kept powered by its ->quiesce while the controller's freeze reset the
    link) gets ->recover, the NVMe controller (disabled without a shutdown)
    ->thaw through PCI's recover, and both work, as every other device does."""
    # the unpatched boot kernel runs ->freeze_noirq there: fail that instead
    noirq = "quiesce_noirq" if zoo.patched else "freeze_noirq"
    record = zoo.cycle(modes.parse_mode("disk"), FAILED_RESTORE_CYCLE,
                       [("boot", f"pmtest.fault=pmtest_full.0:{noirq}:{EIO}:1 initcall_debug")],
                       expect="fail")
    assert record["verdict"] == "fail", _explain(record)
    assert any("pmlab-init: no hibernation image" in line for line in record["evidence"]), \
        "the boot kernel did not boot on"
    called = _called(record)
    codec = "hda_codec_pm_recover" if zoo.patched else "hda_codec_pm_thaw"
    assert "hdaudioC0D0" in called.get(codec, set()), sorted(called)
    assert {"hda_codec_pm_quiesce" if zoo.patched else "hda_codec_pm_freeze", codec} <= set(called)
    # the auxiliary bus recovers its quiesced driver there too (the unpatched
    # bus resumes the one it suspended)
    aux = _aux_functions(called)
    wanted = {AUX_BUS["quiesce"], AUX_BUS["recover"]} if zoo.patched else {AUX_BUS["suspend"], AUX_BUS["resume"]}
    assert wanted <= aux, sorted(aux)
    if zoo.patched:
        assert "recover" in _pmtest_callbacks(record, AUX), _pmtest_callbacks(record, AUX)
    # the guest now runs that boot kernel: its devices are the recovered ones,
    # through a whole hibernation
    after = zoo.cycle(modes.parse_mode("disk"), FAILED_RESTORE_CYCLE + 1,
                      expect="pass" if zoo.patched else "fail")
    assert after["verdict"] == ("pass" if zoo.patched else "fail"), _explain(after)
    assert after["probes"] and all(p["ok"] for p in after["probes"]), after["probes"]

UNCONVERTED = "pmtest_unconverted.0"
UNCONVERTED_CYCLE = 9611


@pytest.fixture(scope="module")
def unconverted(lab_run):
    """A lean guest whose pmtest has pmtest_unconverted.0: a device behind a
    device type without ->quiesce*() and ->recover*() (the stand-in for a
    subsystem the series leaves falling back, lab.oracle.rules)."""
    session = _session(lab_run, "-unconverted", cmdline_extra="pmtest.unconverted=1")
    yield session
    session.close()


def _fallback_lines(record):
    """The PM core's pm_debug_messages lines about a skipped driver callback
    of pmtest_unconverted.0 (patch "Say when a driver's ->quiesce*() or
    ->recover*() is not called")."""
    return [console.strip_timestamp(line) for line in record.get("evidence", [])
            if f"{UNCONVERTED}:" in line and "is not called" in line]


def test_a_quiesce_fault_behind_an_unconverted_layer_is_accepted_and_the_fallback_is_told(unconverted):
    """Bad input: a fault on the driver's ->quiesce of a device whose layer
    cannot pass it on. pmtest takes the knob (the boot kernel's command
    line), the core runs the layer's ->freeze*() instead, so the fault never
    fires and the restore goes through; the boot kernel's console names the
    skipped callback at each level; the oracle finds no violation (its rules
    know the stand-in falls back). After a failed image creation the same
    for ->recover*(). Nothing crashes: the next cycle passes."""
    record = unconverted.cycle(modes.parse_mode("disk"), UNCONVERTED_CYCLE,
                               [("boot", f"pmtest.fault={UNCONVERTED}:quiesce:{EIO}:1")],
                               expect="pass" if unconverted.patched else "fail")
    if not unconverted.patched:
        # no ->quiesce in struct dev_pm_ops, no diagnostic (the series' 0007)
        assert record["verdict"] == "fail" and not _fallback_lines(record), _explain(record)
        return
    assert record["verdict"] == "pass", _explain(record)
    told = _fallback_lines(record)
    for level in ("quiesce", "quiesce_late", "quiesce_noirq"):
        layer = {"quiesce": "freeze"}.get(level, level.replace("quiesce", "freeze"))
        assert any(f"pmtest_layer_{layer} " in line and "runs for quiesce" in line and
                   f"pmtest_pm_{level} " in line for line in told), (level, told)
    failed = unconverted.cycle(modes.parse_mode("disk"), UNCONVERTED_CYCLE + 1,
                               [("fault", f"pmtest_syscore syscore_suspend {EIO} 1")], expect="fail")
    assert failed["verdict"] == "fail" and failed["ordering_violations"] == [], _explain(failed)
    told = _fallback_lines(failed)
    for level, layer in (("recover", "thaw"), ("recover_early", "thaw_early"), ("recover_noirq", "thaw_noirq")):
        assert any(f"pmtest_layer_{layer} " in line and "runs for recover" in line and
                   f"pmtest_pm_{level} " in line for line in told), (level, told)
    after = unconverted.cycle(modes.parse_mode("mem"), UNCONVERTED_CYCLE + 2)
    assert after["verdict"] == "pass", _explain(after)


def test_a_calls_knob_on_a_function_the_kernel_lacks_is_the_cycles_error_naming_it(unconverted):
    """Bad input: the calls knob names a function this kernel does not have
    (on the unpatched kernel, the series' virtio_pci_quiesce): pmlab-cycle
    refuses it before the cycle starts, the lab's error says which, and the
    guest's next cycle passes with a probe that exists."""
    missing = "pmlab_no_such_function" if unconverted.patched else VIRTIO_QUIESCE
    record = unconverted.cycle(modes.parse_mode("mem"), UNCONVERTED_CYCLE + 3, [("calls", missing)],
                               expect="error")
    assert record["verdict"] == "error" and f"cannot probe '{missing}'" in record["reason"], _explain(record)
    after = unconverted.cycle(modes.parse_mode("freeze"), UNCONVERTED_CYCLE + 4, [("calls", "pci_pm_suspend")])
    assert after["verdict"] == "pass", _explain(after)
    probed = {call["device"] for call in after["calls"]}
    assert len(probed) >= 3 and all(re.fullmatch(r"0000:00:[0-9a-f]{2}\.\d", d) for d in probed), probed
