"""The oracle's provider rules (lab/oracle/rules.py PROVIDERS): a driver
reached through a PM domain must get the callback the rules give it, and a
failing syscore_suspend fails the transition.  Synthetic pmtest logs shaped
like the guests' (kernel/modules/pmtest/README.md)."""

from lab import oracle
from lab.oracle import rules


def verdict(records):
    lines = [f"pmtest: seq={n} t={n} dev={dev} cb={cb} event={event} ret={ret}"
             for n, (dev, cb, event, ret) in enumerate(records, 1)]
    calls = oracle.from_pmtest("\n".join(lines))
    # one device or a child knob's register records: no tree needed
    return oracle.judge(calls, oracle.pmtest_parents(calls, {}))


def acpi_boot_kernel(main_callback):
    """The boot kernel of a restore for the ACPI device, cut short by the jump
    to the image: its domain's main callback gives `main_callback`, the late
    and noirq callbacks reach the driver directly."""
    return [("PMTS0001:00", "prepare", "quiesce", 0),
            ("PMTS0001:00", main_callback, "quiesce", 0),
            ("PMTS0001:00", "quiesce_late", "quiesce", 0),
            ("PMTS0001:00", "quiesce_noirq", "quiesce", 0)]


def test_names_of_pmtest_devices_outside_the_platform_trees():
    assert oracle.observe.pmtest_driver("PMTS0001:00") == "pmtest_acpi"
    assert oracle.observe.pmtest_driver("PMTS0001:1f") == "pmtest_acpi"
    assert oracle.observe.pmtest_driver("pmtest_syscore") == "pmtest_syscore"
    assert oracle.observe.pmtest_driver("PMTS0002:00") == "pmtest_acpi_smart"
    assert oracle.observe.pmtest_driver("PMTS0003:00") == "pmtest_acpi_smart_skip"
    assert oracle.observe.pmtest_driver("PMTS0004:00") == "pmtest_acpi_smart"
    assert oracle.observe.pmtest_driver("PMTS0005:00") is None


def test_every_driver_has_a_known_provider_and_every_provider_passes_events_on():
    for name, driver in rules.DRIVERS.items():
        if "callbacks" in driver:
            assert driver["provider"] in rules.PROVIDERS, name
    for name, table in rules.PROVIDERS.items():
        assert set(table) == rules.LEVELED, name
    assert rules.driver_callback("pmtest_acpi", "quiesce") == "quiesce"
    assert rules.driver_callback("pmtest_compat", "recover_early") == "thaw_early"


def test_acpi_domain_giving_quiesce_passes():
    assert verdict(acpi_boot_kernel("quiesce")) == []


def test_acpi_domain_giving_freeze_for_quiesce_is_flagged():
    # issue 10 defect 3: acpi_general_pm_domain has ->freeze, no ->quiesce
    found = verdict(acpi_boot_kernel("freeze"))
    assert [(v.rule, v.device) for v in found] == [("callback", "PMTS0001:00")]
    assert "the rules give it quiesce" in found[0].message


def syscore_failure(undo):
    """Image creation failing in syscore_suspend after the device froze."""
    return [("pmtest_full.0", "prepare", "freeze", 0),
            ("pmtest_full.0", "freeze", "freeze", 0),
            ("pmtest_full.0", "freeze_late", "freeze", 0),
            ("pmtest_full.0", "freeze_noirq", "freeze", 0),
            ("pmtest_syscore", "syscore_suspend", "freeze", -5),
            ("pmtest_full.0", f"{undo}_noirq", undo, 0),
            ("pmtest_full.0", f"{undo}_early", undo, 0),
            ("pmtest_full.0", undo, undo, 0),
            ("pmtest_full.0", "complete", undo, 0)]


def test_failed_syscore_suspend_must_be_recovered_from():
    assert verdict(syscore_failure("recover")) == []
    # issue 10 defect 1: create_image() loses syscore_suspend()'s error
    found = verdict(syscore_failure("restore"))
    assert {v.rule for v in found} == {"undo"}
    assert all(v.device == "pmtest_full.0" for v in found)


def test_successful_syscore_suspend_allows_restore():
    records = syscore_failure("restore")
    records[4] = ("pmtest_syscore", "syscore_suspend", "freeze", 0)
    assert verdict(records) == []


def test_driver_behind_pmtest_pm_domain_is_judged_with_the_domain():
    dev, pd = "pmtest_domain.1", "pmtest_domain.1/pd"
    assert oracle.observe.pmtest_driver(pd) == "pmtest_pm_domain"
    assert oracle.observe.pmtest_driver(dev) == "pmtest_domain"
    good = [(dev, "prepare", "quiesce", 0), (pd, "prepare", "quiesce", 0),
            (dev, "quiesce", "quiesce", 0), (pd, "quiesce", "quiesce", 0)]
    assert verdict(good) == []
    bad = list(good)
    bad[2] = (dev, "freeze", "quiesce", 0)
    assert [(v.rule, v.device) for v in verdict(bad)] == [("callback", dev)]


S3_FULL = ["suspend", "suspend_late", "suspend_noirq", "resume_noirq", "resume_early", "resume"]


def s3(device, callbacks, prepare_ret=0):
    event = {c: ("suspend" if c.startswith("suspend") else "resume") for c in S3_FULL}
    return ([(device, "prepare", "suspend", prepare_ret)]
            + [(device, c, event[c], 0) for c in callbacks]
            + [(device, "complete", "resume", 0)])


def test_may_skip_resume_device_may_stay_suspended_after_s3_only():
    skipped = ["suspend", "suspend_late", "suspend_noirq", "resume"]
    assert verdict(s3("pmtest_skip_resume.0", S3_FULL)) == []
    assert verdict(s3("pmtest_skip_resume.0", skipped)) == []
    # the same on a device without the flag
    assert {v.rule for v in verdict(s3("pmtest_full.0", skipped))} == {"mirror"}
    # issue 10 defect 2: a failed freeze recovered without recover_noirq/_early
    dev = "pmtest_skip_resume.0"
    failed = [(dev, "prepare", "freeze", 0), (dev, "freeze", "freeze", 0),
              (dev, "freeze_late", "freeze", 0), (dev, "freeze_noirq", "freeze", 0),
              ("pmtest_full.3", "prepare", "freeze", 0), ("pmtest_full.3", "freeze", "freeze", 0),
              ("pmtest_full.3", "freeze_late", "freeze", 0),
              ("pmtest_full.3", "freeze_noirq", "freeze", -5),
              ("pmtest_full.3", "recover_early", "recover", 0),
              ("pmtest_full.3", "recover", "recover", 0),
              ("pmtest_full.3", "complete", "recover", 0),
              (dev, "recover", "recover", 0), (dev, "complete", "recover", 0)]
    assert [(v.rule, v.device) for v in verdict(failed)] == [("mirror", dev)]
    failed[11:11] = [(dev, "recover_noirq", "recover", 0), (dev, "recover_early", "recover", 0)]
    assert verdict(failed) == []


def test_direct_complete_only_where_the_row_takes_it():
    assert verdict(s3("pmtest_direct.0", [], prepare_ret=1)) == []
    found = verdict(s3("pmtest_direct.0", S3_FULL, prepare_ret=1))
    assert {v.rule for v in found} == {"direct-complete"}
    # DPM_FLAG_NO_DIRECT_COMPLETE: every level, also after a positive ->prepare
    assert verdict(s3("pmtest_no_direct.0", S3_FULL, prepare_ret=1)) == []
    found = verdict(s3("pmtest_no_direct.0", [], prepare_ret=1) + s3("pmtest_full.0", S3_FULL))
    assert [(v.rule, v.device) for v in found] == [("missing", "pmtest_no_direct.0")]


def test_type_and_class_rows_are_named_and_judged():
    assert oracle.observe.pmtest_driver("pmtest_typed.2/type") == "pmtest_type_ops"
    assert oracle.observe.pmtest_driver("pmtest_typed.2") == "pmtest_typed"
    assert oracle.observe.pmtest_driver("pmtest_class.1") == "pmtest_class"
    dev, layer = "pmtest_typed.0", "pmtest_typed.0/type"
    bad = [(dev, "prepare", "quiesce", 0), (layer, "prepare", "quiesce", 0),
           (dev, "freeze", "quiesce", 0), (layer, "quiesce", "quiesce", 0),
           ("pmtest_class.0", "prepare", "quiesce", 0), ("pmtest_class.0", "freeze", "quiesce", 0)]
    assert [(v.rule, v.device) for v in verdict(bad)] == [("callback", dev),
                                                          ("callback", "pmtest_class.0")]


def test_async_tree_devices_are_pmtest_devices_whose_parents_the_trace_names():
    calls = oracle.from_pmtest("pmtest: seq=1 t=1 dev=pmtest_async.13 cb=prepare event=suspend ret=0")
    assert calls[0].driver == "pmtest_async"
    tree = {"pmtest_async.13": "pmtest_async.6"}  # as tree_from_trace() reads it
    assert oracle.pmtest_parents(calls, tree)["pmtest_async.13"] == "pmtest_async.6"


def child_prepares(children):
    """pmtest_full.1 gains a child in each of its first `children` ->prepare."""
    records = []
    for n in range(children):
        records += [(f"pmtest_full.{7 + n}", "register", "suspend", 0),
                    ("pmtest_full.1", "prepare", "suspend", 0)]
        if n < rules.PREPARE_CHILD_RETRIES:
            records.append(("pmtest_full.1", "complete", "suspend", 0))
    if children <= rules.PREPARE_CHILD_RETRIES:
        records.append(("pmtest_full.1", "prepare", "suspend", 0))
    return records + [("pmtest_full.1", "suspend", "suspend", 0),
                      ("pmtest_full.1", "resume", "resume", 0),
                      ("pmtest_full.1", "complete", "resume", 0)]


def test_re_prepare_is_bounded():
    for children in (1, rules.PREPARE_CHILD_RETRIES, rules.PREPARE_CHILD_RETRIES + 1):
        found = [v for v in verdict(child_prepares(children)) if v.rule != "missing"]
        assert found == [], (children, [str(v) for v in found])
    # a fourth re-prepare is past the bound
    records = child_prepares(rules.PREPARE_CHILD_RETRIES + 1)
    position = records.index(("pmtest_full.1", "suspend", "suspend", 0))
    records[position:position] = [("pmtest_full.1", "complete", "suspend", 0),
                                   ("pmtest_full.1", "prepare", "suspend", 0)]
    assert "prepare" in {v.rule for v in verdict(records)}


def test_trace_of_a_failed_syscore_suspend_is_judged_with_the_failure():
    """Recorded on the v2 series (pmtest fault 'pmtest_syscore syscore_suspend
    -5 1', a real hibernation attempt): the trace shows the devices frozen and
    then recovered, but not the syscore_ops, which are no devices.  Judged
    alone, every device's ->recover_noirq looks like the undo of a freeze that
    went through; with the pmtest log's failure put in place it is clean."""
    import gzip
    import os
    from lab import guest_report
    from lab.judge import parse_report
    from lab.oracle import cycle_check
    path = os.path.join(os.path.dirname(__file__), "recordings", "report-disk-syscore-fail.txt.gz")
    with gzip.open(path, "rt") as source:
        text = source.read()
    parsed = parse_report(text)
    violations, counts = cycle_check.judge_cycle(parsed.sections, parsed.callbacks, [])
    assert violations == [] and counts["trace"] > 1000 and counts["pmtest_log"] > 100
    sections = guest_report.sections(text)
    trace_calls, parents = oracle.from_trace(sections["trace"])
    alone = oracle.judge(trace_calls, parents)
    assert alone and {v.rule for v in alone} == {"undo"}
    assert all("recover" in v.message for v in alone)


# DPM_FLAG_SMART_SUSPEND (rules.SMART_SUSPEND_SKIPS, SMART_RESUME_SKIPS):
# what the guests' pmtest logs show for PMTS0002 (SMART_PREPARE |
# SMART_SUSPEND) and PMTS0003 (with MAY_SKIP_RESUME) left runtime-suspended
# by acpi_subsys_suspend() in suspend-to-idle.
def smart(device, event, middle, undo="resume"):
    return ([(device, "prepare", event, 0)] + [(device, cb, ev, 0) for cb, ev in middle]
            + [(device, "complete", undo, 0)])


SMART_S2IDLE = [("suspend", "suspend"), ("rpm_suspended", "suspend"),
                ("resume_noirq", "resume"), ("resume_early", "resume"), ("resume", "resume")]
SMART_SKIP_S2IDLE = [("suspend", "suspend"), ("rpm_suspended", "suspend"), ("resume", "resume")]
FULL = [("suspend", "suspend"), ("suspend_late", "suspend"), ("suspend_noirq", "suspend"),
        ("resume_noirq", "resume"), ("resume_early", "resume"), ("resume", "resume")]


def test_smart_suspend_device_left_runtime_suspended_skips_late_and_noirq_and_is_resumed():
    assert verdict(smart("PMTS0002:00", "suspend", SMART_S2IDLE)) == []
    # MAY_SKIP_RESUME too: power.must_resume stays false, nothing below ->resume
    assert verdict(smart("PMTS0003:00", "suspend", SMART_SKIP_S2IDLE)) == []
    # not runtime-suspended (the domain resumed it, S3): every level
    assert verdict(smart("PMTS0002:00", "suspend", FULL)) == []
    assert verdict(smart("PMTS0003:00", "suspend", FULL[:3] + [("resume", "resume")])) == []


def test_smart_suspend_wrong_skip_or_wrong_run_is_flagged():
    # runtime-suspended, yet suspend_late ran
    ran = SMART_S2IDLE[:2] + [("suspend_late", "suspend"), ("suspend_noirq", "suspend")] + SMART_S2IDLE[2:]
    assert "smart-suspend" in {v.rule for v in verdict(smart("PMTS0002:00", "suspend", ran))}
    # active, yet the late and noirq levels were skipped (while another
    # device shows the transition went that deep)
    skipped = [FULL[0]] + FULL[3:]
    active, wrong = smart("PMTS0004:00", "suspend", FULL), smart("PMTS0002:00", "suspend", skipped)
    found = verdict(active[:1] + wrong[:1] + active[1:-1] + wrong[1:-1] + active[-1:] + wrong[-1:])
    assert "missing" in {v.rule for v in found}
    # skipped, but not resumed at the skipped levels though must_resume is set
    found = verdict(smart("PMTS0002:00", "suspend", SMART_SKIP_S2IDLE))
    assert [v.rule for v in found] == ["smart-resume"], found
    # MAY_SKIP_RESUME, but resume_noirq ran
    found = verdict(smart("PMTS0003:00", "suspend", SMART_S2IDLE))
    assert [v.rule for v in found] == ["smart-resume"], found


def test_acpi_domain_must_runtime_resume_smart_devices_for_freeze():
    frozen = [("freeze", "freeze"), ("rpm_suspended", "freeze"), ("thaw", "thaw")]
    found = verdict(smart("PMTS0002:00", "freeze", frozen, "thaw"))
    assert "smart-suspend" in {v.rule for v in found}
    full = [("freeze", "freeze"), ("freeze_late", "freeze"), ("freeze_noirq", "freeze"),
            ("thaw_noirq", "thaw"), ("thaw_early", "thaw"), ("thaw", "thaw")]
    assert verdict(smart("PMTS0002:00", "freeze", full, "thaw")) == []


def test_smart_resume_levels_per_undo_event():
    assert rules.smart_resume_levels("pmtest_acpi_smart", "resume", [1], True) == [3, 2, 1]
    assert rules.smart_resume_levels("pmtest_acpi_smart_skip", "resume", [1], True) == [1]
    assert rules.smart_resume_levels("pmtest_acpi_smart", "thaw", [1], True) == [1]
    assert rules.smart_resume_levels("pmtest_acpi_smart", "recover", [1], True) == [1]
    assert rules.smart_resume_levels("pmtest_acpi_smart", "restore", [1], True) == [3, 2, 1]


def edu(bound, records):
    lines = [f"pmtest: seq={n} t={n} dev=0000:00:10.0 cb={cb} event={event} ret=0"
             for n, (cb, event) in enumerate(records, 1)]
    calls = oracle.from_pmtest("\n".join(lines), bound)
    return oracle.judge(calls, {})


def test_edu_identity_is_the_driver_the_trace_shows_bound():
    trace = [oracle.Call(0, "0000:00:10.0 (pmtest_edu_legacy)", "suspend", "suspend", 0, "trace")]
    bound = oracle.bound_drivers(trace)
    assert bound == {"0000:00:10.0": "pmtest_edu_legacy"}
    legacy = [("suspend", "suspend"), ("resume", "resume")]
    assert edu(bound, legacy) == []
    # the same records from the dev_pm_ops driver miss ->prepare and levels
    assert edu({}, legacy) != []
    every_level = [("prepare", "suspend")] + FULL + [("complete", "resume")]
    assert edu({}, every_level) == []
    # an older pmtest's edu driver (recorded runs) had level 1 callbacks only
    level1 = [("prepare", "suspend"), ("suspend", "suspend"), ("resume", "resume"), ("complete", "resume")]
    assert edu({"0000:00:10.0": "pmtest_edu"}, level1) == []
    assert oracle.observe.pmtest_driver("0000:00:10.0") == "pmtest_edu_pm"
    assert oracle.loaded_drivers({"0000:00:10.0": "pmtest_edu_legacy"}) == {"0000:00:10.0": "pmtest_edu_pm"}


def aux_hibernation(main_suspend, main_resume, event="freeze", undo="thaw"):
    """pmtest.aux.0 through one image creation: the auxiliary bus's level 1
    callbacks give the driver `main_suspend` and `main_resume`, the late and
    noirq levels reach the driver directly."""
    return [("pmtest.aux.0", "prepare", event, 0),
            ("pmtest.aux.0", main_suspend, event, 0),
            ("pmtest.aux.0", f"{event}_late", event, 0),
            ("pmtest.aux.0", f"{event}_noirq", event, 0),
            ("pmtest.aux.0", f"{undo}_noirq", undo, 0),
            ("pmtest.aux.0", f"{undo}_early", undo, 0),
            ("pmtest.aux.0", main_resume, undo, 0),
            ("pmtest.aux.0", "complete", undo, 0)]


def test_the_auxiliary_bus_gives_suspend_and_resume_for_freeze_and_thaw():
    assert oracle.observe.pmtest_driver("pmtest.aux.0") == "pmtest_aux"
    assert verdict(aux_hibernation("suspend", "resume")) == []
    # a bus passing freeze on would be a different bus than 6.1's
    found = verdict(aux_hibernation("freeze", "thaw"))
    assert [(v.rule, v.device) for v in found] == [("callback", "pmtest.aux.0")] * 2
    assert "ran freeze where the core ran freeze: the rules give it suspend" in found[0].message


def test_the_auxiliary_bus_passes_quiesce_and_recover_on():
    # the boot kernel of a restore (cut short by the jump to the image)
    boot = aux_hibernation("quiesce", "unused", event="quiesce")[:4]
    assert verdict(boot) == []
    # the unpatched bus: ->suspend() for quiesce
    found = verdict(aux_hibernation("suspend", "unused", event="quiesce")[:4])
    assert [(v.rule, v.device) for v in found] == [("callback", "pmtest.aux.0")]
    failed = aux_hibernation("suspend", "recover", undo="recover")
    failed.insert(4, ("pmtest_syscore", "syscore_suspend", "freeze", -5))
    assert verdict(failed) == []
    failed[-2] = ("pmtest.aux.0", "resume", "recover", 0)
    assert [v.rule for v in verdict(failed)] == ["callback"]
