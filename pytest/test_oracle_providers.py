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
    return oracle.judge(calls, oracle.pmtest_parents(calls))


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
    assert oracle.observe.pmtest_driver("PMTS0002:00") is None


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
