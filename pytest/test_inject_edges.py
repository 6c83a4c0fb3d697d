"""A fault injected on purpose is neither the kernel's fail nor the lab's
error (issue 35): the record says so (lab.records.injections), the pass
rate, the slowest callbacks and the gate leave it out, the dashboard and
the timeline page show it; every --inject names a planned cycle; a kfault's
device is checked on the host against the guest's devices
(lab.devices.kfault_problem); a knob the guest rejects stops the run as the
request's error; ./pmlab devices lists the names."""

import copy
import os
import subprocess
import xml.etree.ElementTree as ElementTree

import pytest

from dashboards import compute, schemas, testing, timeline
from lab import devices, judge, modes, records, virt
from lab import request as request_mod
from lab import run as lab_run
from lab.errors import LabError
from pipelines import compare

REPO = testing.REPO
MEM = modes.parse_mode("mem")
KFAULT = ("kfault", "0000:00:0c.0 suspend -5 1")


def done(cycle, verdict="pass", knobs=(), **fields):
    """A done record as lab.cycle writes it: new_record, then the verdict."""
    record = records.new_record("r", cycle, MEM, records.DONE, knobs=[list(k) for k in knobs],
                                host_start=f"2026-12-07T10:00:{cycle:02d}.000+00:00")
    record.update({"verdict": verdict, "phase": None if verdict == "pass" else "suspend",
                   "reason": None if verdict == "pass" else "writing 'mem' to /sys/power/state failed", **fields})
    return record


# ------------------------------------------------------------ the record

def test_injecting_knobs_mark_the_record_and_observing_ones_do_not():
    assert done(1, knobs=[KFAULT])["injected"] == ["kfault=0000:00:0c.0 suspend -5 1"]
    for knob in (("fault", "* suspend 5 1"), ("delay", "* suspend 15000"), ("child", "pmtest_full.1 prepare"),
                 ("panic", "pmtest_full.0 suspend"), ("boot", "pmtest.fault=pmtest_full.3:quiesce_late:-5:1")):
        assert done(1, knobs=[knob])["injected"] == [f"{knob[0]}={knob[1]}"]
    for knob in (("print_times", "1"), ("calls", "virtio_pci_freeze"), ("boot", "initcall_debug")):
        assert "injected" not in done(1, knobs=[knob])
    assert "injected" not in done(1)
    mixed = done(1, knobs=[("print_times", "1"), ("delay", "* suspend 10")])
    assert mixed["injected"] == ["delay=* suspend 10"] and records.injected(mixed)


def test_an_injected_cycle_is_out_of_the_pass_rate():
    natural = [done(1), done(3)]
    rate = records.pass_rate(natural + [done(2, "fail", [KFAULT])])
    assert (rate["passed"], rate["judged"], rate["injected"], rate["rate"]) == (2, 2, 1, 1.0)
    # without the field (the record before this change) it was the kernel's fail
    unmarked = done(2, "fail", [KFAULT])
    del unmarked["injected"]
    assert records.pass_rate(natural + [unmarked])["rate"] == 0.6667


def test_the_lava_engine_writes_the_same_field(tmp_path):
    from lab import lava
    from test_lava_jobs import JOB, PLAN, _entries
    plan = [(n, mode, (KFAULT,) if n == 1 else knobs) for n, mode, knobs in PLAN]
    rundir = records.RunDir(str(tmp_path), "r", link_latest=False)
    written, _ = lava.cycle_records(plan, _entries(), "r", 1, JOB, rundir)
    assert written[0]["injected"] == ["kfault=0000:00:0c.0 suspend -5 1"]
    assert "injected" not in written[1]


def test_the_run_line_says_the_fault_was_injected():
    line = lab_run.cycle_line(dict(done(1, "fail", [KFAULT]), host_seconds=1.5), "cycle 1/2")
    assert line.endswith("[fault injected: kfault=0000:00:0c.0 suspend -5 1]")
    assert "injected" not in lab_run.cycle_line(dict(done(2), host_seconds=1.5), "cycle 2/2")


def test_the_end_of_the_run_names_the_injected_knobs_of_a_cycle_that_did_not_pass():
    record = dict(done(1, "fail", [KFAULT]), phase="suspend", reason="callbacks returned errors")
    (line,) = lab_run.failure_lines(record, [record], "r", {})
    assert line.endswith("(fault injected: kfault=0000:00:0c.0 suspend -5 1)"), line


# ------------------------------------------------------------ the dashboard

@pytest.fixture(scope="module")
def recorded():
    return testing.with_callbacks(testing.recorded_records())


def _slow(record, factor):
    """The record with every callback `factor` times slower (an injected delay)."""
    slow = copy.deepcopy(record)
    for calls in slow["callbacks"].values():
        for call in calls:
            call["us"] = call["us"] * factor if call["us"] is not None else None
    return slow


def slowest(board):
    """The slowest callbacks of a dashboard, less the run ids they name."""
    return [{key: value for key, value in row.items() if key != "max_at"} for row in board["latency"]["top_p95"]]


def test_an_injected_delay_is_out_of_the_slowest_callbacks_and_counted_as_injected(recorded, tmp_path):
    natural = [r for r in recorded if r["verdict"] == "pass" and r["mode"] == "mem" and r.get("callbacks")]
    slowed = dict(_slow(natural[0], 1000), cycle=300, injected=["delay=* suspend 15000"], verdict="fail",
                  phase="suspend", reason="callbacks returned errors")
    runs = {}
    for name, extra in (("plain", []), ("injected", [slowed])):
        rows = [dict(r, run_id=name) for r in natural + extra]
        runs[name] = compute.compute([testing.write_run(str(tmp_path / name), name, rows)])
    plain, board = runs["plain"], runs["injected"]
    assert slowest(board) == slowest(plain)
    assert board["success"]["all"]["injected"] == 1
    assert board["success"]["all"]["rate"] == plain["success"]["all"]["rate"] == 1.0
    shown = [c for c in board["failures"]["cycles"] if c["cycle"] == 300]
    assert shown and shown[0]["injected"] == ["delay=* suspend 15000"]
    assert schemas.errors(schemas.DASHBOARD, board) == []
    # the same record unmarked is the kernel's: its delay tops the latencies
    unmarked = {key: value for key, value in slowed.items() if key != "injected"}
    rows = [dict(r, run_id="u") for r in natural + [unmarked]]
    counted = compute.compute([testing.write_run(str(tmp_path / "u"), "u", rows)])
    assert slowest(counted) != slowest(plain)
    assert counted["latency"]["top_p95"][0]["max_at"]["cycle"] == 300


def test_a_rejected_knob_is_no_lab_error_on_the_dashboard(tmp_path):
    rejected = done(2, "error", [("calls", "no_such_function")], phase=records.REQUEST,
                    reason="the guest rejected knob calls: the kernel cannot probe 'no_such_function'")
    lab_failed = done(3, "error", phase="lab", reason="QEMU exited during phase resume")
    board = compute.compute([testing.write_run(str(tmp_path), "r", [done(1), rejected, lab_failed])])
    assert board["lab_errors"]["errors"] == 1
    assert board["lab_errors"]["causes"][0]["reason"].startswith("QEMU exited")


def test_the_timeline_page_says_the_fault_was_injected(recorded):
    from recordings_util import report
    record = dict(copy.deepcopy(next(r for r in recorded if r["cycle"] == 9)),
                  injected=["fault=* suspend 5 1"])
    data = timeline.model(record, report("mem-fault-suspend"))
    assert data["injected"] == ["fault=* suspend 5 1"]
    page = timeline.page(data)
    assert "fault injected: " in page  # the script that writes it into the summary and the findings
    del record["injected"]
    assert timeline.model(record, report("mem-fault-suspend"))["injected"] == []


# ------------------------------------------------------------ the gate

def test_the_gate_never_calls_an_injected_fault_a_regression():
    previous = [done(1), done(2)]
    injected = [done(1), done(2, "fail", [KFAULT], failed_callbacks=[
        {"device": "0000:00:0c.0 (nvme)", "cb": "bus[suspend]", "err": -5}])]
    findings, lines = compare.report(previous, injected)
    assert findings == []
    assert "fault injected on purpose (no regression): cycle 2 fail (kfault=0000:00:0c.0 suspend -5 1)" in lines
    assert compare.regressions(None, injected) == []  # no previous run: still not the kernel's
    unmarked = copy.deepcopy(injected)
    del unmarked[1]["injected"]
    assert {f["kind"] for f in compare.regressions(previous, unmarked)} == {"pass-rate", "new-bucket"}
    # a verdict asked for on purpose (the campaign's) that did not come is still found
    missed = [done(1), done(2, "pass", [KFAULT], expected_verdict="fail")]
    assert [f["bucket"] for f in compare.regressions(previous, missed)] == ["expected-fail-but-passed"]


# ------------------------------------------------------------ --inject outside the plan

@pytest.mark.parametrize("number", [0, 3, 99])
def test_inject_outside_the_plan_is_refused(number):
    with pytest.raises(LabError, match=f"cycle {number}, which the plan does not have: its cycles are 1-2"):
        request_mod.numbered_cycles(modes.plan(["mem*2"]), {number: (("fault", "* suspend 5 1"),)})
    assert len(request_mod.numbered_cycles(modes.plan(["mem*2"]), {2: (("fault", "* suspend 5 1"),)})) == 2


def _cli(*argv):
    return subprocess.run(["/usr/bin/python3", "-m", "cli.main", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_run_with_an_inject_outside_the_plan_exits_2_naming_it(tmp_path):
    ran = _cli("run", "--results", str(tmp_path), "--mode", "mem*2", "--inject", "99:fault=* suspend 5 1")
    assert ran.returncode == 2
    assert "cycle 99, which the plan does not have: its cycles are 1-2" in ran.stderr
    assert not os.listdir(tmp_path)  # refused before anything ran


# ------------------------------------------------------------ the kfault device, on the host

@pytest.mark.parametrize("profile", sorted(virt.PROFILES))
@pytest.mark.parametrize("device_set", devices.SETS)
def test_the_host_knows_every_pci_slot_the_domain_gives(profile, device_set):
    """lab.devices.pci_functions lists what lab.virt.domain_xml puts on the
    root bus (every slot, edu's included) plus the machine's own chipset."""
    scratch = {name: (f"g{suffix}", f"/pool/g{suffix}") for name, suffix in devices.SCRATCH_DISKS.items()}
    xml = virt.domain_xml("g", profile, "/k", "/i", "c", "g-swap", "/log", device_set=device_set,
                          scratch=scratch if device_set == "zoo" else None)
    root = ElementTree.fromstring(xml)
    slots = {int(a.get("slot"), 16) for a in root.find("devices").iter("address") if a.get("slot")}
    args = [a.get("value") for a in root.iter("{http://libvirt.org/schemas/domain/qemu/1.0}arg")]
    slots |= {int(arg.rsplit("addr=", 1)[1].split(",")[0], 16) for arg in args if "addr=" in arg}
    machine = devices.machine_of(profile)
    chipset = {name for name, _ in devices.CHIPSET_PCI[machine]}
    listed = {name for name, _ in devices.pci_functions(machine, device_set)}
    assert listed - chipset == {f"0000:00:{slot:02x}.0" for slot in slots}


@pytest.mark.parametrize("profile, nvme, other", [("q35-ovmf", "0000:00:0b.0", "0000:00:0c.0"),
                                                  ("pc-seabios", "0000:00:0c.0", "0000:00:0b.0")])
def test_kfault_devices_are_checked_against_the_profiles_devices(profile, nvme, other):
    machine = devices.machine_of(profile)
    assert devices.pci_name(machine, "nvme-disk") == nvme
    assert devices.kfault_problem(f"{nvme} suspend -5 1", machine, "zoo") is None
    # on the lean guest there is no NVMe
    assert "no PCI device " + nvme in devices.kfault_problem(f"{nvme} suspend -5 1", machine, "lean")
    # the audit's name: no such slot on either profile; the message names the known ones
    problem = devices.kfault_problem("0000:00:1e.7 suspend -5 1", machine, "zoo")
    assert "no PCI device 0000:00:1e.7" in problem and nvme in problem and "0000:00:10.0" in problem
    # the guest's names are lower case: 0B is no device
    assert devices.kfault_problem(f"{nvme.upper()} suspend -5 1", machine, "zoo")
    # the other profile's NVMe slot is another device here, and as good a name
    assert devices.kfault_problem(f"{other} suspend -5 1", machine, "zoo") is None
    # q35's AHCI is the machine's own: on the lean guest too; pc has none there
    ahci = devices.kfault_problem("0000:00:1f.2 freeze -5 1", machine, "lean")
    assert (ahci is None) == (machine == "q35")


def test_kfault_pmtest_names_follow_the_tree_and_the_rest_is_the_guests():
    assert devices.kfault_problem("pmtest_full.6 suspend -5 1", "q35", "lean") is None
    assert "devices .0 to .6" in devices.kfault_problem("pmtest_full.7 suspend -5 1", "q35", "lean")
    assert devices.kfault_problem("pmtest_full.1 suspend -5 1", "q35", "lean", (1, 1)) is None
    assert "devices .0 to .1" in devices.kfault_problem("pmtest_full.2 suspend -5 1", "q35", "lean", (1, 1))
    assert devices.kfault_problem("pmtest_async.2 suspend -5 1", "q35", "lean", (1, 1)) is None  # one deeper
    # a child knob registers pmtest_full.7 and on: the guest decides then
    assert devices.kfault_problem("pmtest_full.7 suspend -5 1", "q35", "lean", children=True) is None
    for target in ("pmtest_domain.1/pd", "pmtest_syscore", "*"):  # pmtest's fault targets, not devices
        assert "not a device" in devices.kfault_problem(f"{target} suspend -5 1", "pc", "lean")
    assert "unknown callback 'prepare'" in devices.kfault_problem("1-1 prepare -5 1", "pc", "zoo")
    assert "DEVICE CALLBACK ERRNO COUNT" in devices.kfault_problem("0000:00:0c.0 suspend", "pc", "zoo")
    # USB, SCSI, ACPI, class devices: thousands of names the host cannot know
    for name in ("1-1", "2:0:0:0", "PNP0501:00", "pmtest_class.1", "serial8250"):
        assert devices.kfault_problem(f"{name} suspend -5 1", "pc", "zoo") is None
    # a LAVA job's profile comes from its tags: any profile's PCI names
    assert devices.kfault_problem("0000:00:01.3 suspend -5 1", None, "lean") is None
    assert devices.kfault_problem("0000:00:1f.3 suspend -5 1", None, "lean") is None


def test_run_refuses_an_unknown_kfault_device_before_the_guest_boots(tmp_path):
    ran = _cli("run", "--results", str(tmp_path), "--profile", "pc-seabios", "--devices", "zoo", "--mode", "mem*2",
               "--inject", "1:kfault=0000:00:1e.7 suspend -5 1")
    assert ran.returncode == 2
    assert "bad --inject for cycle 1: kfault '0000:00:1e.7 suspend -5 1': a zoo guest on pc has no PCI " \
           "device 0000:00:1e.7 (its PCI devices: 0000:00:00.0" in ran.stderr
    assert "0000:00:0c.0" in ran.stderr and not os.listdir(tmp_path)


# ------------------------------------------------------------ a knob the guest rejects

# What guest/pmlab-cycle answers (stdout and stderr in one) when
# pmtest_kfault's debugfs file refuses the write.
REJECTED = ("sh: write error: No such device\n"
            "pmlab-cycle: pmtest rejected knob kfault='sda suspend -5 1'\n")


def test_a_rejected_knob_is_the_requests_error_naming_the_guests_reason():
    assert judge.rejected_knob(REJECTED) == (
        "the guest rejected knob kfault='sda suspend -5 1': No such device (no device of that name in the guest)")
    assert judge.rejected_knob("pmlab-cycle: calls: the kernel cannot probe 'nope' (no such function?)\n") == \
        "the guest rejected knob calls: the kernel cannot probe 'nope' (no such function?)"
    assert judge.rejected_knob("pmlab-cycle: cannot set pm_test=core\n") is None
    verdict = judge.judge(MEM, REJECTED, 2, [], [], [], "t", "b")
    assert (verdict["verdict"], verdict["phase"]) == ("error", records.REQUEST)
    record = dict(done(1, knobs=[("kfault", "sda suspend -5 1")]), **verdict)
    assert records.request_error(record) and records.injected(record)
    other = judge.judge(MEM, "pmlab-cycle: cannot set pm_test=core\n", 2, [], [], [], "t", "b")
    assert (other["verdict"], other["phase"]) == ("error", "lab")


def test_devices_verb_lists_each_profiles_names():
    listed = _cli("devices")
    assert listed.returncode == 0
    text = listed.stdout
    assert "q35-ovmf (QEMU machine q35): PCI devices" in text and "pc-seabios (QEMU machine pc): PCI devices" in text
    assert "0000:00:0b.0  NVMe controller (nvme)" in text and "0000:00:0c.0  NVMe controller (nvme)" in text
    assert "pmtest_full.0 .. pmtest_full.6" in text and "pmtest_async.0 .. pmtest_async.14" in text
    pc = _cli("devices", "--profile", "pc-seabios", "--pmtest-tree", "1x1")
    assert pc.returncode == 0 and "q35" not in pc.stdout
    assert "0000:00:0c.0  NVMe controller (nvme)" in pc.stdout and "0000:00:0b.0  virtio-balloon" in pc.stdout
    assert "pmtest_full.0 .. pmtest_full.1" in pc.stdout
    assert _cli("devices", "--pmtest-tree", "99x99").returncode == 2


def test_the_readme_kfault_example_names_a_device_of_both_profiles():
    with open(os.path.join(REPO, "README.md")) as source:
        lines = [line for line in source if "--inject '1:kfault=" in line and line.startswith("    ./pmlab run")]
    assert lines
    for line in lines:
        value = line.split("kfault=", 1)[1].split("'")[0]
        for profile in virt.PROFILES:
            assert devices.kfault_problem(value, devices.machine_of(profile), "zoo") is None, (profile, line)
