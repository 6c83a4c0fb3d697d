"""The device matrix of issue 10 in real guests: the provider paths real
devices take (an ACPI-enumerated platform device under
acpi_general_pm_domain, a PM domain of pmtest's own, a genpd domain, DPM
flags, syscore_ops),
each through one S3, one s2idle and one S4 cycle judged by the oracle, and
the tests of the issue's defects 1-3, which fail on a series that still has
them.  kernel/modules/pmtest/README.md describes the devices."""


import pytest

from lab import oracle, pmtest_log
from observed_cycle import cycle_runner

pytestmark = pytest.mark.guest

EIO = -5
S3 = ["prepare", "suspend", "suspend_late", "suspend_noirq", "resume_noirq", "resume_early",
      "resume", "complete"]
QUIESCE = ["prepare", "quiesce", "quiesce_late", "quiesce_noirq"]
SMART_SKIPPED = ["prepare", "suspend", "rpm_suspended", "resume_noirq", "resume_early", "resume",
                 "complete"]
EDU = "0000:00:10.0"  # QEMU's edu device (lab/virt.py addr=0x10)
FREEZE_THEN_RECOVER = ["prepare", "freeze", "freeze_late", "freeze_noirq", "recover_noirq",
                       "recover_early", "recover", "complete"]

# Row -> its devices and what each gets: in S3/s2idle (pmtest log of the
# reporting kernel) and in the boot kernel of a hibernation restore (console).
ROWS = {
    "acpi": {"PMTS0001:00": (S3, QUIESCE), "PMTS0001:01": (S3, QUIESCE)},
    "pm_domain": {f"{dev}{layer}": (S3, QUIESCE)
                  for dev in ("pmtest_domain.0", "pmtest_domain.1", "pmtest_domain.2")
                  for layer in ("", "/pd")},
    # genpd: the driver's callbacks, through genpd at prepare, noirq and complete
    "genpd": {dev: (S3, QUIESCE) for dev in ("pmtest_genpd.0", "pmtest_genpd.1", "pmtest_genpd.2")},
    "type": {f"{dev}{layer}": (S3, QUIESCE)
             for dev in ("pmtest_typed.0", "pmtest_typed.1", "pmtest_typed.2")
             for layer in ("", "/type")},
    "class": {"pmtest_class.0": (S3, QUIESCE), "pmtest_class.1": (S3, QUIESCE)},
    # async suspend/resume, one level deeper than the other trees (15 devices)
    "async": {f"pmtest_async.{i}": (S3, QUIESCE) for i in range(15)},
    "dpm_flags": {
        # MAY_SKIP_RESUME, needed by nobody: left suspended after a suspend
        "pmtest_skip_resume.0": (["prepare", "suspend", "suspend_late", "suspend_noirq",
                                  "resume", "complete"], QUIESCE),
        # runtime-suspended, ->prepare returns 1: direct_complete in a suspend only
        "pmtest_direct.0": (["prepare", "complete"], QUIESCE),
        "pmtest_no_direct.0": (S3, QUIESCE),
    },
    # ACPI devices with SMART_PREPARE | SMART_SUSPEND (PMTS0002, runtime-
    # suspended; PMTS0004, active) and MAY_SKIP_RESUME too (PMTS0003,
    # runtime-suspended), per mode: in S3 acpi_subsys_suspend() runtime-
    # resumes them (no _S3D: acpi_dev_needs_resume()), in s2idle it leaves
    # them suspended and the late and noirq levels are skipped; resumed at
    # those levels unless MAY_SKIP_RESUME.  Freeze and quiesce resume them.
    "acpi_smart": {
        "PMTS0002:00": ({"mem": S3, "freeze": SMART_SKIPPED}, QUIESCE),
        "PMTS0003:00": ({"mem": ["prepare", "suspend", "suspend_late", "suspend_noirq", "resume",
                                 "complete"],
                         "freeze": ["prepare", "suspend", "rpm_suspended", "resume", "complete"]},
                        QUIESCE),
        "PMTS0004:00": (S3, QUIESCE),
    },
    # the edu PCI device bound to pmtest_edu_pm: every level through the PCI core
    "edu": {EDU: (S3, QUIESCE)},
}
ALL_ROWS = {device: row for row, devices in ROWS.items() for device in devices}


@pytest.fixture(scope="module")
def matrix(lab_run):
    session, run = cycle_runner(lab_run, "-matrix", 10001, count=999)  # ~170 cycles; above 9xxx
    plain = {}

    def cycle(mode):
        """One cycle of `mode` without knobs, shared by the rows."""
        if mode not in plain:
            plain[mode] = run(mode)
        return plain[mode]

    run.cycle = cycle
    yield run
    session.close()


def assert_went_through(seen, devices):
    """The cycle passed, but for oracle violations on other rows' devices
    (a row's defect must not hide the others' results)."""
    assert seen.violations(devices) == [], seen.explain()
    if seen.record["verdict"] != "pass":
        assert seen.record["phase"] == "ordering" and seen.violations(), seen.explain()


@pytest.mark.parametrize("mode", ["mem", "freeze"])
@pytest.mark.parametrize("row", sorted(ROWS))
def test_row_suspends_and_resumes(matrix, row, mode):
    seen = matrix.cycle(mode)
    assert_went_through(seen, ROWS[row])
    for device, (expected, _) in ROWS[row].items():
        expected = expected[mode] if isinstance(expected, dict) else expected
        assert seen.callbacks(device) == expected, (device, seen.explain())
    # the trace saw the PM core call every device of the row
    trace, _ = oracle.from_trace(seen.sections["trace"])
    traced = {oracle.observe.device_name(c.device) for c in trace}
    assert {d for d in ROWS[row] if "/" not in d} <= traced


@pytest.mark.parametrize("mode", ["mem", "freeze"])
def test_genpd_powers_its_domain_off_after_the_last_device_and_on_before_the_first(matrix, mode):
    """genpd_sync_power_off() runs once every device of the domain has had
    its suspend_noirq, genpd_sync_power_on() before the first resume_noirq."""
    seen = matrix.cycle(mode)
    lines = seen.record["evidence"]
    off = [i for i, line in enumerate(lines) if "domain pmtest_genpd power off" in line]
    on = [i for i, line in enumerate(lines) if "domain pmtest_genpd power on" in line]
    assert len(off) == 1 and len(on) == 1 and off[0] < on[0], "\n".join(lines)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_row_hibernates(matrix, row):
    """The boot kernel quiesces every device of the row (issue 10 defect 3
    for the ACPI row: acpi_general_pm_domain gave ->freeze), the image
    kernel thaws and restores it."""
    seen = matrix.cycle("disk")
    assert_went_through(seen, ROWS[row])
    assert len(seen.console_kernels) == 1, seen.explain()
    boot = seen.console_kernels[0]
    for device, (_, expected) in ROWS[row].items():
        assert seen.callbacks(device, boot) == expected, (device, seen.explain())
        image = seen.callbacks(device)
        assert image[-4:] == ["restore_noirq", "restore_early", "restore", "complete"], (device, image)


def test_async_tree_runs_siblings_together_and_keeps_parents_and_children_in_order(matrix):
    """Two sibling leaves suspend 300 ms each, asynchronously: they overlap,
    and their parent still suspends only after both; the root resumes 300 ms
    and its children only after it."""
    knobs = [("delay", "pmtest_async.13 suspend 300"), ("delay", "pmtest_async.14 suspend 300"),
             ("delay", "pmtest_async.0 resume 300")]
    seen = matrix("mem", knobs)
    assert seen.record["verdict"] == "pass", seen.explain()
    ends = {(c.device, c.callback): c.index for c in seen.calls}
    t = {(e["dev"], e["cb"]): e["t"] for e in pmtest_log.parse(seen.sections["pmtest_log"])}
    leaves = [t[("pmtest_async.13", "suspend")], t[("pmtest_async.14", "suspend")]]
    assert abs(leaves[0] - leaves[1]) < 150e6, "the siblings' 300 ms suspends did not overlap"
    assert ends[("pmtest_async.6", "suspend")] > max(ends[("pmtest_async.13", "suspend")],
                                                   ends[("pmtest_async.14", "suspend")])
    assert t[("pmtest_async.6", "suspend")] >= max(leaves)
    for child in ("pmtest_async.1", "pmtest_async.2"):
        assert t[(child, "resume")] > t[("pmtest_async.0", "resume")]


def test_child_knob_reaches_the_re_prepare_bound(matrix):
    """A child registered in each of four ->prepare calls: the device is
    completed and prepared again three times (DPM_PREPARE_CHILD_RETRIES),
    then taken as prepared with the warning."""
    seen = matrix("mem", [("child", "pmtest_full.1 prepare 4")])
    assert seen.record["verdict"] == "pass", seen.explain()
    assert seen.violations() == [], seen.explain()
    registered = [c.device for c in seen.calls if c.callback == "register"]
    assert len(registered) == 4, registered
    assert seen.callbacks("pmtest_full.1")[:8] == ["prepare", "complete"] * 3 + ["prepare", "suspend"]
    assert any("children still registered during prepare after 3 retries" in line
               for line in seen.record["evidence"]), "no warning at the bound"


def test_syscore_ops_run_in_s3_and_hibernation_not_in_s2idle(matrix):
    assert matrix.cycle("mem").callbacks("pmtest_syscore") == ["syscore_suspend", "syscore_resume"]
    assert matrix.cycle("freeze").callbacks("pmtest_syscore") == []
    boot = matrix.cycle("disk").console_kernels[0]
    assert matrix.cycle("disk").callbacks("pmtest_syscore", boot) == ["syscore_suspend"]


def resume_events(calls, devices):
    return {c.event for c in calls if c.device in devices
            and oracle.rules.side_of(c.callback, c.event)[0] in ("resume", "complete")}


def test_failed_syscore_suspend_recovers_devices(matrix):
    """Issue 10 defect 1: image creation failing in syscore_suspend(), after
    every device was frozen, must resume them with RECOVER (6.1 and the first
    series: RESTORE, and "Hibernation image restored successfully")."""
    seen = matrix("disk", [("fault", f"pmtest_syscore syscore_suspend {EIO} 1")], expect="fail")
    assert [(c.callback, c.ret) for c in seen.calls if c.device == "pmtest_syscore"] == \
        [("syscore_suspend", EIO)], seen.explain()
    full = {c.device for c in seen.calls if c.driver == "pmtest_full"}
    assert resume_events(seen.calls, full) == {"recover"}, seen.explain()
    assert seen.callbacks("pmtest_full.0") == FREEZE_THEN_RECOVER
    assert seen.violations() == [], seen.explain()
    assert seen.record["verdict"] == "fail" and seen.record["phase"] != "ordering", seen.explain()


def test_may_skip_resume_device_is_recovered_after_a_failed_freeze(matrix):
    """Issue 10 defect 2: a DPM_FLAG_MAY_SKIP_RESUME device frozen before
    another device's freeze_noirq failed gets recover_noirq and recover_early
    (the first series skipped them and marked it runtime-suspended)."""
    seen = matrix("disk", [("fault", f"pmtest_full.3 freeze_noirq {EIO} 1")], expect="fail")
    assert ("freeze_noirq", EIO) in [(c.callback, c.ret) for c in seen.calls
                                     if c.device == "pmtest_full.3"], seen.explain()
    assert seen.callbacks("pmtest_skip_resume.0") == FREEZE_THEN_RECOVER, seen.explain()
    assert seen.violations() == [], seen.explain()


def knob(matrix, name, text):
    guest = matrix.session.guest
    before = guest.agent.wait(guest.agent.send(f"cat /sys/kernel/debug/pmtest/{name}"), 30).output
    reply = guest.agent.wait(guest.agent.send(f"echo '{text}' > /sys/kernel/debug/pmtest/{name}"), 30)
    after = guest.agent.wait(guest.agent.send(f"cat /sys/kernel/debug/pmtest/{name}"), 30).output
    return reply, before, after


@pytest.mark.parametrize("name,text,error", [
    ("fault", "pmtest_syscore suspend -5 1", "Invalid argument"),          # not a dev_pm_ops provider
    ("fault", "pmtest_syscore syscore_resume -5 1", "Invalid argument"),   # returns void
    ("fault", "pmtest_full.3 syscore_suspend -5 1", "Invalid argument"),   # a device, not syscore
    ("delay", "pmtest_syscore syscore_suspend 10", "Invalid argument"),    # fault only
    ("child", "PMTS0001:00 prepare", "Invalid argument"),                  # the firmware's children
    ("child", "pmtest_domain.0/pd prepare", "Invalid argument"),           # a domain, not a device
    ("child", "pmtest_class.0 prepare", "Invalid argument"),               # not a platform tree
    ("fault", "pmtest_class.0/type suspend -5 1", "No such device"),       # a class, no type
    ("fault", "pmtest_direct.0/pd suspend -5 1", "No such device"),        # in no pmtest domain
    ("fault", "PMTS0001:07 suspend -5 1", "No such device"),
    ("child", "pmtest_full.1 prepare 17", "Invalid argument"),             # past PMTEST_CHILD_MAX
    ("child", "PMTS0002:00 prepare", "Invalid argument"),                  # the firmware's children
    ("fault", "PMTS0004:00/pd suspend_late -5 1", "No such device"),       # in ACPI's domain, not ours
    ("fault", "PMTS0002:00 rpm_suspended -5 1", "Invalid argument"),       # a log record, no callback
    ("fault", "PMTS0009:00 suspend -5 1", "No such device"),
    ("child", f"{EDU} prepare", "Invalid argument"),                       # the PCI core's children
    ("fault", f"{EDU}/type suspend_noirq -5 1", "No such device"),         # no pmtest type
])
def test_knob_for_the_wrong_provider_is_refused_and_changes_nothing(matrix, name, text, error):
    if matrix.session.guest is None:
        assert matrix.cycle("pm_test-freezer").record["verdict"] == "pass"
    reply, before, after = knob(matrix, name, text)
    assert reply.status != 0 and error in reply.output, reply
    assert after == before


def test_knobs_reach_every_new_provider(matrix):
    """A fault at the domain level fails the device's transition there, with
    the driver's callback not run; the syscore fault knob is listed."""
    seen = matrix("mem", [("fault", f"pmtest_domain.2/pd suspend_late {EIO} 1")], expect="fail")
    assert seen.callbacks("pmtest_domain.2/pd")[:3] == ["prepare", "suspend", "suspend_late"]
    assert "suspend_late" not in seen.callbacks("pmtest_domain.2"), seen.explain()
    assert seen.violations() == [], seen.explain()
    reply, _, after = knob(matrix, "fault", "pmtest_syscore syscore_suspend -5 3")
    assert reply.status == 0 and "pmtest_syscore syscore_suspend -5 3" in after
    knob(matrix, "fault", "clear")


# One device per row whose driver has every level: an injected failure per
# level and side, and the whole unwind of that device.
FAULT_DEVICES = {"acpi": "PMTS0001:01", "pm_domain": "pmtest_domain.1", "genpd": "pmtest_genpd.1",
                 "type": "pmtest_typed.1",
                 "class": "pmtest_class.1", "async": "pmtest_async.7",
                 "dpm_flags": "pmtest_no_direct.0", "acpi_smart": "PMTS0004:00", "edu": EDU}
UNWIND = {
    "suspend": ["prepare", "suspend", "complete"],
    "suspend_late": ["prepare", "suspend", "suspend_late", "resume", "complete"],
    "suspend_noirq": ["prepare", "suspend", "suspend_late", "suspend_noirq", "resume_early",
                      "resume", "complete"],
    # a failing resume-side callback does not stop the resume
    "resume_noirq": S3, "resume_early": S3, "resume": S3,
}


@pytest.mark.parametrize("callback", sorted(UNWIND))
@pytest.mark.parametrize("row", sorted(FAULT_DEVICES))
def test_row_failure_unwinds(matrix, row, callback):
    device = FAULT_DEVICES[row]
    seen = matrix("mem", [("fault", f"{device} {callback} {EIO} 1")], expect="fail")
    assert seen.record["verdict"] == "fail", seen.explain()
    assert seen.violations() == [], seen.explain()
    sequence = [(c.callback, c.ret) for c in seen.calls if c.device == device]
    expected = [(cb, EIO if cb == callback else (1 if cb == "prepare" and row == "dpm_flags" else 0))
                for cb in UNWIND[callback]]
    assert sequence == expected, seen.explain()
    if row in ("pm_domain", "type"):  # the provider saw its driver fail
        layer = f"{device}/{'pd' if row == 'pm_domain' else 'type'}"
        assert [(c.callback, c.ret) for c in seen.calls if c.device == layer] == expected


def unwind(event, undo, callback):
    """A device's whole sequence when its `callback` (of `event`) fails: the
    levels below it undone with `undo`, then ->complete."""
    suspend = oracle.rules.CALLBACKS[event]
    resume = oracle.rules.CALLBACKS[undo]
    failed_level = suspend.index(callback) + 1
    return (["prepare"] + list(suspend[:failed_level])
            + [resume[level - 1] for level in range(failed_level - 1, 0, -1)] + ["complete"])


@pytest.mark.parametrize("callback", ["freeze", "freeze_late", "freeze_noirq"])
@pytest.mark.parametrize("row", sorted(FAULT_DEVICES))
def test_row_failed_image_creation_unwinds(matrix, row, callback):
    device = FAULT_DEVICES[row]
    seen = matrix("disk", [("fault", f"{device} {callback} {EIO} 1")], expect="fail")
    assert seen.record["verdict"] == "fail", seen.explain()
    assert seen.violations(ROWS[row]) == [], seen.explain()
    assert seen.callbacks(device) == unwind("freeze", "recover", callback), seen.explain()
    assert (callback, EIO) in [(c.callback, c.ret) for c in seen.calls if c.device == device]


_TREE = {}


def reported_tree(matrix):
    """The pmtest tree as the guest's kernel reports it (the trace of a
    pm_test=devices cycle names every device's parent): a boot kernel that
    booted on after a failed restore leaves no trace of its own, and the next
    kernel is booted with the same module parameters. Read once."""
    if not _TREE:
        seen = matrix("pm_test-devices")
        assert seen.record["verdict"] == "pass", seen.explain()
        _TREE.update(oracle.tree_from_trace(oracle.from_trace(seen.sections["trace"])[1]))
    return _TREE


def _restore_cases():
    """Every row at every quiesce level. Each case is a whole S4 cycle whose
    guest then boots afresh (~23 s under TCG): CI runs one level a row, the
    levels taken in turn so that each is a third of the rows; the other two
    thirds are pipeline-marked (pipelines/ci kernel-deep runs them all)."""
    levels = ["quiesce", "quiesce_late", "quiesce_noirq"]
    return [pytest.param(row, callback, marks=() if i % len(levels) == j else pytest.mark.pipeline)
            for i, row in enumerate(sorted(FAULT_DEVICES)) for j, callback in enumerate(levels)]


@pytest.mark.parametrize("row, callback", _restore_cases())
def test_row_failed_restore_unwinds_in_the_boot_kernel(matrix, row, callback):
    """The boot kernel of a restore quiesces the row's device, which fails:
    it recovers from the levels it reached and the boot continues (issue 10
    defect 3 for the ACPI row: its ->quiesce is ->freeze)."""
    device = FAULT_DEVICES[row]
    seen = matrix("disk", [("boot", f"pmtest.fault={device}:{callback}:{EIO}:1")], expect="fail")
    assert len(seen.console_kernels) == 1, seen.explain()
    boot = seen.console_kernels[0]
    found = [v for v in oracle.judge(boot, oracle.pmtest_parents(boot, reported_tree(matrix)))
             if v.device in ROWS[row]]
    assert found == [], "\n".join(str(v) for v in found)
    assert seen.callbacks(device, boot) == unwind("quiesce", "recover", callback), seen.explain()
    assert any("pmlab-init: no hibernation image" in line for line in seen.record["evidence"])


# The edu device bound to the legacy PCI driver (pmtest_edu_legacy:
# pci_driver.suspend/.resume), through sysfs, and back to pmtest_edu_pm after.
def guest_shell(matrix, command):
    if matrix.session.guest is None:  # a session boots its guest for a cycle
        assert matrix("pm_test-freezer").record["verdict"] == "pass"
    guest = matrix.session.guest
    return guest.agent.wait(guest.agent.send(command), 30)


def bind_edu(matrix, driver):
    other = "pmtest_edu_pm" if driver == "pmtest_edu_legacy" else "pmtest_edu_legacy"
    link = f"/sys/bus/pci/devices/{EDU}/driver"
    reply = guest_shell(matrix, f"[ \"$(basename $(readlink {link}))\" = {driver} ] || "
                                f"{{ echo {EDU} > /sys/bus/pci/drivers/{other}/unbind && "
                                f"echo {EDU} > /sys/bus/pci/drivers/{driver}/bind; }}; "
                                f"basename $(readlink {link})")
    assert reply.status == 0 and reply.output.strip() == driver, reply


@pytest.fixture
def legacy_edu(matrix):
    bind_edu(matrix, "pmtest_edu_legacy")
    yield matrix
    bind_edu(matrix, "pmtest_edu_pm")


def bound_in_trace(seen):
    return oracle.bound_drivers(oracle.from_trace(seen.sections["trace"])[0]).get(EDU)


@pytest.mark.parametrize("mode", ["mem", "freeze"])
def test_legacy_pci_driver_suspends_and_resumes(legacy_edu, mode):
    """pci_legacy_suspend() hands it PMSG_SUSPEND, pci_legacy_resume() calls
    ->resume; the PCI core runs no driver code at the other levels.  The
    oracle takes the device as pmtest_edu_legacy because the trace shows
    that driver bound."""
    seen = legacy_edu(mode)
    assert_went_through(seen, [EDU])
    assert bound_in_trace(seen) == "pmtest_edu_legacy"
    assert seen.sequence(EDU) == [("suspend", "suspend", 0), ("resume", "resume", 0)], seen.explain()


def test_legacy_pci_driver_hibernates(legacy_edu):
    """The image kernel's legacy driver gets PMSG_FREEZE, then ->resume for
    the restore; the boot kernel loaded pmtest afresh, so pmtest_edu_pm
    quiesces the device there."""
    seen = legacy_edu("disk")
    assert_went_through(seen, [EDU])
    assert seen.sequence(EDU) == [("suspend", "freeze", 0), ("resume", "restore", 0)], seen.explain()
    assert len(seen.console_kernels) == 1, seen.explain()
    assert seen.callbacks(EDU, seen.console_kernels[0]) == QUIESCE


@pytest.mark.parametrize("mode,callback,expected", [
    ("mem", "suspend", [("suspend", "suspend", EIO)]),
    ("mem", "resume", [("suspend", "suspend", 0), ("resume", "resume", EIO)]),
    ("disk", "suspend", [("suspend", "freeze", EIO)]),
])
def test_legacy_pci_driver_failure_unwinds(legacy_edu, mode, callback, expected):
    seen = legacy_edu(mode, [("fault", f"{EDU} {callback} {EIO} 1")], expect="fail")
    assert seen.record["verdict"] == "fail", seen.explain()
    assert seen.violations() == [], seen.explain()
    assert seen.sequence(EDU) == expected, seen.explain()


@pytest.mark.parametrize("callback", ["suspend_late", "suspend_noirq", "resume_early",
                                      "resume_noirq", "prepare", "freeze"])
def test_legacy_pci_driver_refuses_knobs_for_levels_it_does_not_have(legacy_edu, callback):
    reply, before, after = knob(legacy_edu, "fault", f"{EDU} {callback} -5 1")
    assert reply.status != 0 and "Invalid argument" in reply.output, reply
    assert after == before
