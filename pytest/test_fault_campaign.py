"""The fault campaign: every failure path the seed's design promises,
provoked with pmtest knobs in a real guest cycle, observed, and judged.

For each case: the oracle (lab/oracle) finds no violation of the rules in
the callbacks the cycle left (pmtest log, trace, boot kernel console), the
faulted device's own sequence is the one the rules give, and suspend_stats
names the failed device, step and errno.  Run against the unpatched
baseline (--baseline) the cases where the series changes behaviour fail:
that is the oracle's negative control (pipelines/baseline-compare).
"""

import re

import pytest

from lab import oracle
from observed_cycle import cycle_runner

pytestmark = pytest.mark.guest

DEV = "pmtest_full.3"
COMPAT = "pmtest_compat.3"
EIO = -5


@pytest.fixture(scope="module")
def campaign(lab_run):
    session, run = cycle_runner(lab_run, "-campaign", 7001)
    yield run
    session.close()


def assert_rules_hold(seen):
    assert seen.record.get("ordering_violations") == [], seen.explain()
    assert seen.record["ordering_checked"]["pmtest_log"] > 0 or seen.console_kernels, seen.explain()


def assert_stats(seen, step, errno=EIO, device=DEV):
    stats = seen.stats()
    assert stats.get("last_failed_dev") == device, stats
    assert stats.get("last_failed_errno") == errno, stats
    assert stats.get("last_failed_step") == step, stats


# ------------------------------------------------------------ suspend-to-RAM

@pytest.mark.parametrize("callback,expected", [
    ("suspend", ["prepare", "suspend", "complete"]),
    ("suspend_late", ["prepare", "suspend", "suspend_late", "resume", "complete"]),
    ("suspend_noirq", ["prepare", "suspend", "suspend_late", "suspend_noirq", "resume_early",
                       "resume", "complete"]),
])
def test_suspend_side_failure_unwinds(campaign, callback, expected):
    seen = campaign("mem", [("fault", f"{DEV} {callback} {EIO} 1")], expect="fail")
    assert seen.record["verdict"] == "fail", seen.explain()
    assert_rules_hold(seen)
    assert seen.callbacks(DEV) == expected
    assert (callback, "suspend", EIO) in seen.sequence(DEV)
    assert_stats(seen, callback)
    # devices never suspended got only ->complete; the rest resumed
    assert seen.callbacks("pmtest_full.0")[-1] == "complete"


def test_prepare_eagain_is_retried(campaign):
    seen = campaign("mem", [("fault", f"{DEV} prepare -11 2")])
    assert seen.record["verdict"] == "pass", seen.explain()
    assert_rules_hold(seen)
    assert seen.sequence(DEV)[:3] == [("prepare", "suspend", -11)] * 2 + [("prepare", "suspend", 0)]
    assert seen.callbacks(DEV)[3:] == ["suspend", "suspend_late", "suspend_noirq", "resume_noirq",
                                       "resume_early", "resume", "complete"]


def test_child_registered_during_prepare_re_prepares_parent(campaign):
    seen = campaign("mem", [("child", "pmtest_full.1 prepare")])
    assert seen.record["verdict"] == "pass", seen.explain()
    assert_rules_hold(seen)
    registered = [c.device for c in seen.calls if c.callback == "register"]
    assert len(registered) == 1
    assert seen.callbacks("pmtest_full.1")[:3] == ["prepare", "complete", "prepare"]
    # Probing is blocked during the transition, so the child has no driver yet
    # (no pmtest records); the trace shows the PM core prepared it after its
    # parent's second ->prepare and completed it before the parent.
    assert seen.callbacks(registered[0]) == ["register"]
    trace, _ = oracle.from_trace(seen.sections["trace"])
    names = [(oracle.observe.device_name(c.device), c.callback) for c in trace]
    child, parent = registered[0], "pmtest_full.1"
    parent_prepares = [i for i, n in enumerate(names) if n == (parent, "prepare")]
    assert len(parent_prepares) == 2
    assert names.index((child, "prepare")) > parent_prepares[1]
    last_parent_complete = max(i for i, n in enumerate(names) if n == (parent, "complete"))
    assert names.index((child, "complete")) < last_parent_complete


def test_child_registered_during_suspend_is_skipped_with_a_warning(campaign):
    seen = campaign("mem", [("child", "pmtest_full.2 suspend")])
    # 6.1's warning is a dev_warn, no kernel problem: the cycle slept and woke.
    assert seen.record["verdict"] == "pass", seen.explain()
    assert_rules_hold(seen)
    registered = [c.device for c in seen.calls if c.callback == "register"]
    assert len(registered) == 1
    assert seen.callbacks(registered[0]) == ["register"]
    assert any("parent pmtest_full.2 should not be sleeping" in line
               for line in seen.record["evidence"]), "no 6.1 warning on the console"


# ------------------------------------------------------------ hibernation

def resume_events(seen, calls=None):
    return {c.event for c in (calls or seen.calls)
            if oracle.rules.side_of(c.callback, c.event)[0] in ("resume", "complete")}


@pytest.mark.parametrize("callback", ["freeze", "freeze_late", "freeze_noirq"])
def test_failed_image_creation_recovers(campaign, callback):
    seen = campaign("disk", [("fault", f"{DEV} {callback} {EIO} 1")], expect="fail")
    assert seen.record["verdict"] == "fail", seen.explain()
    assert_rules_hold(seen)
    assert resume_events(seen) == {"recover"}, seen.explain()
    assert (callback, "freeze", EIO) in seen.sequence(DEV)
    # frozen before the failure (children first): the full driver gets
    # ->recover*, compat falls back to ->thaw*
    assert "recover" in seen.callbacks("pmtest_full.4")
    assert "thaw" in seen.callbacks("pmtest_compat.0")
    assert seen.callbacks(DEV)[-1] == "complete"


def test_poweroff_failure_still_powers_off_and_restores(campaign):
    # 6.1 power_down(): a failed platform entry falls through to power-off,
    # so the image written before is restored; the failure is on the console.
    seen = campaign("disk", [("fault", f"{DEV} poweroff {EIO} 1")], expect="fail")
    # The image was restored (same boot, same token), but the kernel reported
    # the failed ->poweroff on the console before powering off: fail.
    assert seen.record["verdict"] == "fail", seen.explain()
    assert seen.record["reason"].startswith("kernel reported problems"), seen.explain()
    assert any(re.search(rf"{DEV}: .*poweroff.* returns {EIO}", line)
               for line in seen.record["problems"]), seen.explain()
    assert_rules_hold(seen)
    assert seen.record["proof"].get("boot_id_kept") and seen.record["proof"].get("token_kept"), seen.explain()


def reported_tree(campaign):
    """The pmtest tree as the guest's kernel reports it: the trace of a
    pm_test=devices cycle names every device's parent."""
    seen = campaign("pm_test-devices")
    assert seen.record["verdict"] == "pass", seen.explain()
    return oracle.tree_from_trace(oracle.from_trace(seen.sections["trace"])[1])


def test_restore_failure_in_boot_kernel_recovers_and_boot_continues(campaign):
    seen = campaign("disk", [("boot", f"pmtest.fault={DEV}:quiesce_late:{EIO}:1")], expect="fail")
    assert len(seen.console_kernels) == 1, seen.explain()
    boot = seen.console_kernels[0]
    # The boot kernel left no report (it booted on): its tree is the one the
    # next kernel, booted with the same module parameters, reports.
    assert oracle.judge(boot, oracle.pmtest_parents(boot, reported_tree(campaign))) == []
    assert seen.callbacks(DEV, boot) == ["prepare", "quiesce", "quiesce_late", "recover", "complete"]
    # quiesced late before the failure (children first): recovered from there
    assert seen.callbacks("pmtest_full.4", boot) == ["prepare", "quiesce", "quiesce_late",
                                                     "recover_early", "recover", "complete"]
    # not reached by the late phase: recovered at level 1 only
    assert seen.callbacks("pmtest_full.0", boot) == ["prepare", "quiesce", "recover", "complete"]
    assert seen.callbacks(COMPAT, boot)[-3:] == ["thaw_early", "thaw", "complete"]
    assert resume_events(seen, boot) == {"recover"}
    assert any("pmlab-init: no hibernation image" in line for line in seen.record["evidence"]), \
        "the boot did not continue"


def test_edu_device_state_survives_s3_and_s4(campaign):
    def edu_state():
        guest = campaign.session.guest
        reply = guest.agent.wait(guest.agent.send("cat /sys/kernel/debug/pmtest/edu_state"), 30)
        found = re.search(r"verified (\d+) mismatches (\d+)", reply.output)
        assert found, reply.output
        return int(found[1]), int(found[2])

    campaign.session.close()  # a fresh guest: earlier cases left faults behind
    for mode in ("mem", "disk"):
        seen = campaign(mode)
        assert seen.record["verdict"] == "pass", seen.explain()
        verified, mismatches = edu_state()
        assert mismatches == 0
        seen = campaign(mode)
        assert seen.record["verdict"] == "pass", seen.explain()
        assert edu_state() == (verified + 1, 0), mode
