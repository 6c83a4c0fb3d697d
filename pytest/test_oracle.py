"""The ordering oracle on recorded guest output: real sequences pass, and
every deliberately broken copy of them is flagged with the right rule."""

import gzip
import os
import re

import pytest

from lab import oracle

RECORDINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recordings")


def sections(name):
    with gzip.open(os.path.join(RECORDINGS, name), "rt") as report:
        text = report.read()
    return dict(re.findall(r"^=== (\w+)\n(.*?)(?=^=== )", text, re.S | re.M))


def pmtest_lines(name):
    return [line for line in sections(name)["pmtest_log"].splitlines() if "pmtest: seq=" in line]


def tree(name="report-mem.txt.gz"):
    """The pmtest tree as the recorded kernel's trace reports it."""
    return oracle.tree_from_trace(oracle.from_trace(sections(name)["trace"])[1])


# The recordings' edu driver, as their traces name it (pmtest_edu: level 1
# callbacks only).
RECORDED_BOUND = {"0000:00:10.0": "pmtest_edu"}


def verdict(lines, name="report-mem.txt.gz"):
    calls = oracle.from_pmtest("\n".join(lines), RECORDED_BOUND)
    return oracle.judge(calls, oracle.pmtest_parents(calls, tree(name)))


def rules_of(violations):
    return {v.rule for v in violations}


RECORDED = ["report-mem.txt.gz", "report-mem-rtc.txt.gz", "report-freeze.txt.gz",
            "report-disk.txt.gz", "report-disk-reboot.txt.gz", "report-pm_test-devices.txt.gz",
            "report-pm_test-core.txt.gz", "report-mem-fault-suspend.txt.gz",
            "report-mem-fault-resume.txt.gz"]


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_pmtest_log_obeys_the_rules(name):
    lines = pmtest_lines(name)
    assert lines, f"{name} has no pmtest records"
    assert verdict(lines, name) == []


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_trace_obeys_the_rules(name):
    calls, parents = oracle.from_trace(sections(name)["trace"])
    assert len(calls) > 100
    assert len({c.device for c in calls}) > 40, "the trace covers every device, not only pmtest's"
    assert oracle.judge(calls, parents) == []


def index_of(lines, dev, cb):
    for number, line in enumerate(lines):
        if f" dev={dev} cb={cb} " in line:
            return number
    raise AssertionError(f"no {dev} {cb} in the recording")


def test_swapped_parent_and_child_suspend_is_flagged():
    lines = pmtest_lines("report-mem.txt.gz")
    child, parent = index_of(lines, "pmtest_full.1", "suspend"), index_of(lines, "pmtest_full.0", "suspend")
    assert child < parent
    lines[child], lines[parent] = lines[parent], lines[child]
    found = verdict(lines)
    assert rules_of(found) == {"order"}
    assert any(v.device == "pmtest_full.1" and "parent pmtest_full.0" in v.message for v in found)


def test_swapped_prepare_order_is_flagged():
    lines = pmtest_lines("report-mem.txt.gz")
    parent, child = index_of(lines, "pmtest_compat.0", "prepare"), index_of(lines, "pmtest_compat.2", "prepare")
    lines[parent], lines[child] = lines[child], lines[parent]
    assert rules_of(verdict(lines)) == {"order"}


def test_missing_complete_is_flagged():
    lines = pmtest_lines("report-mem.txt.gz")
    del lines[index_of(lines, "pmtest_full.4", "complete")]
    found = verdict(lines)
    assert [(v.rule, v.device) for v in found] == [("complete", "pmtest_full.4")]


def test_extra_resume_is_flagged():
    lines = pmtest_lines("report-mem.txt.gz")
    at = index_of(lines, "pmtest_full.2", "resume")
    lines.insert(at + 1, lines[at])
    assert "level" in rules_of(verdict(lines))


def test_repeated_legacy_suspend_is_flagged_as_a_level_violation():
    """A legacy driver's ->suspend is its one level: a second one in the
    same transition goes no deeper and breaks the level rule itself, not
    only the resume mirror that follows from it."""
    lines = pmtest_lines("report-mem.txt.gz")
    at = index_of(lines, "pmtest_legacy.0", "suspend")
    lines.insert(at + 1, lines[at])
    found = [(v.rule, v.device, v.call.callback, v.message) for v in verdict(lines) if v.rule == "level"]
    assert found == [("level", "pmtest_legacy.0", "suspend", "suspend after level 1")]


def test_a_prepare_retried_after_eagain_is_no_failure():
    """->prepare returning -EAGAIN is retried at once by the PM core: the
    hibernation still went through, so the image kernel's restore undoes
    it (a failed freeze would need recover)."""
    lines = pmtest_lines("report-disk.txt.gz")
    at = index_of(lines, "pmtest_full.0", "prepare")
    lines.insert(at, lines[at].replace("ret=0", "ret=-11"))
    assert verdict(lines, "report-disk.txt.gz") == []
    lines[at] = lines[at].replace("ret=-11", "ret=-5")  # a real failure: the same calls now break the rules
    assert "undo" in rules_of(verdict(lines, "report-disk.txt.gz"))


def test_resume_of_the_failed_device_is_flagged():
    # pmtest_legacy.6 failed its ->suspend: a ->resume for it breaks the rule
    lines = pmtest_lines("report-mem-fault-suspend.txt.gz")
    failed = index_of(lines, "pmtest_legacy.6", "suspend")
    assert lines[failed].endswith("ret=-5")
    lines.insert(failed + 1, lines[failed].replace("cb=suspend", "cb=resume").replace(
        "event=suspend", "event=resume").replace("ret=-5", "ret=0"))
    assert "resume" in rules_of(verdict(lines))


def test_skipped_level_is_flagged():
    lines = pmtest_lines("report-mem.txt.gz")
    del lines[index_of(lines, "pmtest_full.3", "suspend_late")]
    assert "level" in rules_of(verdict(lines))


def boot_kernel(cb_of_full):
    """A boot kernel's quiesce transition for one full and one compat device,
    cut short by the jump to the image."""
    records = [("pmtest_full.0", "prepare"), ("pmtest_compat.0", "prepare"),
               ("pmtest_compat.0", "freeze"), ("pmtest_full.0", cb_of_full),
               ("pmtest_compat.0", "freeze_late"), ("pmtest_full.0", cb_of_full + "_late"),
               ("pmtest_compat.0", "freeze_noirq"), ("pmtest_full.0", cb_of_full + "_noirq")]
    return [f"pmtest: seq={n} t={n} dev={dev} cb={cb} event=quiesce ret=0"
            for n, (dev, cb) in enumerate(records, 1)]


def test_boot_kernel_quiesce_with_fallback_passes():
    assert verdict(boot_kernel("quiesce")) == []


def test_full_driver_frozen_in_the_boot_kernel_is_flagged():
    # what an unpatched 6.1 does: ->freeze* for PM_EVENT_QUIESCE
    found = verdict(boot_kernel("freeze"))
    assert rules_of(found) == {"callback"}
    assert all(v.device == "pmtest_full.0" for v in found)


def legacy_in_boot_kernel(message):
    lines = boot_kernel("quiesce") + [
        f"pmtest: seq=9 t=9 dev=pmtest_legacy.0 cb=suspend event={message} ret=0"]
    lines.insert(2, lines.pop())
    return lines


def test_legacy_driver_gets_freeze_or_quiesce_in_a_quiesce_transition():
    # The seed (and the v2 series) gave legacy drivers PMSG_QUIESCE in the
    # boot kernel of a restore; v3 keeps 6.1's PMSG_FREEZE. Anything else
    # breaks the rule.
    assert verdict(legacy_in_boot_kernel("freeze")) == []
    assert verdict(legacy_in_boot_kernel("quiesce")) == []
    assert [(v.rule, v.device) for v in verdict(legacy_in_boot_kernel("suspend"))] == \
        [("event", "pmtest_legacy.0")]


def test_legacy_driver_must_get_the_transition_message():
    lines = boot_kernel("freeze") + [
        "pmtest: seq=9 t=9 dev=pmtest_legacy.0 cb=suspend event=suspend ret=0"]
    lines.insert(2, lines.pop())
    assert ("event", "pmtest_legacy.0") in [(v.rule, v.device) for v in verdict(lines)]


def test_failed_image_creation_must_recover():
    records = [("prepare", "freeze", 0), ("freeze", "freeze", 0), ("freeze_late", "freeze", -5),
               ("thaw", "{undo}", 0), ("complete", "{undo}", 0)]
    for undo, expected in (("recover", set()), ("restore", {"undo", "callback"})):
        lines = [f"pmtest: seq={n} t={n} dev=pmtest_compat.0 cb={cb} event={ev.format(undo=undo)} ret={ret}"
                 for n, (cb, ev, ret) in enumerate(records, 1)]
        assert rules_of(verdict(lines)) == expected, undo


def child_during_prepare(retried):
    """pmtest_full.1 registers child pmtest_full.7 inside its ->prepare."""
    records = [("pmtest_full.0", "prepare", "suspend"), ("pmtest_full.7", "register", "suspend"),
               ("pmtest_full.1", "prepare", "suspend")]
    if retried:  # the series: ->complete (with the transition's resume message), ->prepare again
        records += [("pmtest_full.1", "complete", "resume"), ("pmtest_full.1", "prepare", "suspend")]
    records += [("pmtest_full.7", "prepare", "suspend"), ("pmtest_full.7", "suspend", "suspend"),
                ("pmtest_full.1", "suspend", "suspend"), ("pmtest_full.0", "suspend", "suspend"),
                ("pmtest_full.0", "resume", "resume"), ("pmtest_full.1", "resume", "resume"),
                ("pmtest_full.7", "resume", "resume"), ("pmtest_full.7", "complete", "resume"),
                ("pmtest_full.1", "complete", "resume"), ("pmtest_full.0", "complete", "resume")]
    return [f"pmtest: seq={n} t={n} dev={dev} cb={cb} event={event} ret=0"
            for n, (dev, cb, event) in enumerate(records, 1)]


def test_child_registered_during_prepare_needs_complete_and_prepare_again():
    # The sketch has no late/noirq phases, so it uses devices whose driver
    # the oracle does not know: only the generic rules apply.
    def generic(lines):
        return [l.replace("pmtest_full.", "testdev.") for l in lines]
    parents = {"testdev.1": "testdev.0", "testdev.7": "testdev.1"}
    retried = oracle.from_pmtest("\n".join(generic(child_during_prepare(True))))
    assert oracle.judge(retried, parents) == []
    kept = oracle.from_pmtest("\n".join(generic(child_during_prepare(False))))
    found = oracle.judge(kept, parents)
    assert rules_of(found) == {"child-prepare"}
    assert found[0].device == "testdev.1"


# ------------------------------------------------------------ the trace side
# Broken copies of a recorded trace buffer (power:device_pm_callback_start/
# end inside the dpm_* markers), judged through oracle.from_trace.

def trace_lines(name="report-mem.txt.gz"):
    return sections(name)["trace"].splitlines()


def phase_span(lines, phase):
    marks = [i for i, line in enumerate(lines) if f"suspend_resume: {phase}[" in line]
    assert len(marks) == 2, (phase, marks)
    return marks[0], marks[1]


def callback_block(lines, phase, device):
    """(first, last) line of `device`'s callback in `phase`: its start event,
    whatever the driver logged inside it, its end event."""
    begin, end = phase_span(lines, phase)
    start = next(i for i in range(begin, end)
                 if re.search(rf"device_pm_callback_start: \S+ {re.escape(device)},", lines[i]))
    stop = next(i for i in range(start, end)
                if re.search(rf"device_pm_callback_end: \S+ {re.escape(device)}, err=", lines[i]))
    return start, stop


def trace_verdict(lines):
    calls, parents = oracle.from_trace("\n".join(lines))
    return oracle.judge(calls, parents)


def test_recorded_trace_is_clean_before_it_is_broken():
    assert trace_verdict(trace_lines()) == []


def test_trace_swapped_parent_and_child_suspend_is_flagged():
    lines = trace_lines()
    child = callback_block(lines, "dpm_suspend", "pmtest_full.1")
    parent = callback_block(lines, "dpm_suspend", "pmtest_full.0")
    assert child[1] < parent[0], "children suspend first"
    swapped = (lines[:child[0]] + lines[parent[0]:parent[1] + 1] + lines[child[1] + 1:parent[0]]
               + lines[child[0]:child[1] + 1] + lines[parent[1] + 1:])
    found = trace_verdict(swapped)
    assert rules_of(found) == {"order"}
    assert [v.device for v in found] == ["pmtest_full.1 (pmtest_full)"]
    assert "parent pmtest_full.0" in found[0].message


def _ended_after(lines, end_index, later_index):
    """The trace with the end event at end_index moved to just after the
    line at later_index, its time 1 µs after that line's (a callback that
    returned only after the other had started)."""
    stamp = re.compile(r"(\d+\.\d{6}): ")
    later = float(stamp.search(lines[later_index])[1])
    moved = stamp.sub(f"{later + 1e-6:.6f}: ", lines[end_index], count=1)
    kept = lines[:end_index] + lines[end_index + 1:]
    at = later_index if later_index < end_index else later_index - 1
    return kept[:at + 1] + [moved] + kept[at + 1:]


def test_a_parent_suspend_started_before_its_child_returned_is_flagged():
    """The corpus's pm-async-order: the order of the starts is right
    (child first) but the parent did not wait for the child to return."""
    lines = trace_lines()
    child = callback_block(lines, "dpm_suspend", "pmtest_full.1")
    parent = callback_block(lines, "dpm_suspend", "pmtest_full.0")
    found = trace_verdict(_ended_after(lines, child[1], parent[0]))
    assert rules_of(found) == {"order"} and [v.device for v in found] == ["pmtest_full.1 (pmtest_full)"]
    assert found[0].message == ("parent pmtest_full.0 (pmtest_full)'s suspend started while this suspend was running (this one "
                                "returned 0.001 ms after); the PM core waits for the children to return first")


def test_a_child_resume_started_before_its_parent_returned_is_flagged():
    lines = trace_lines()
    parent = callback_block(lines, "dpm_resume", "pmtest_full.0")
    child = callback_block(lines, "dpm_resume", "pmtest_full.1")
    found = trace_verdict(_ended_after(lines, parent[1], child[0]))
    assert [v.device for v in found] == ["pmtest_full.1 (pmtest_full)"]
    assert found[0].message == ("resume started while parent pmtest_full.0 (pmtest_full)'s resume was running (the "
                                "parent returned 0.001 ms after); the PM core waits for the parent to return first")


def test_a_stuck_callback_whose_parent_went_on_is_the_order_slip_of_the_corpus():
    """The recorded hang of the corpus's pm-async-order kernel (device
    guest, mem): sd 1:0:0:0's suspend never returned, and its parent's
    started while it ran; other parents did not wait either."""
    text = gzip.open(os.path.join(RECORDINGS, "hang-dump-async-order.txt.gz"), "rt").read()
    from lab import hang, trace
    events, _ = hang.ftrace_events(text.splitlines())
    calls, parents = oracle.from_callbacks(trace.paired_callbacks(events))
    found = [v for v in oracle.judge(calls, parents) if v.rule == "order"]
    assert "1:0:0:0 (sd)" in [v.device for v in found] and len(found) >= 4
    stuck = hang.where(text)
    assert stuck["order"] == ("parent target1:0:0 (scsi)'s suspend started while this suspend was running "
                              "(this one never returned); the PM core waits for the children to return first")
    assert "out of order: parent target1:0:0" in hang.reason("suspend", stuck, "guest not asleep")


@pytest.mark.parametrize("phase,device,rule", [("dpm_suspend_late", "pmtest_full.3", "level"),
                                               ("dpm_resume_early", "pmtest_compat.5", "mirror")])
def test_trace_missing_level_is_flagged(phase, device, rule):
    lines = trace_lines()
    first, last = callback_block(lines, phase, device)
    found = trace_verdict(lines[:first] + lines[last + 1:])
    assert found and {v.device for v in found} == {f"{device} ({device.split('.')[0]})"}
    assert found[0].rule == rule, [str(v) for v in found]


def test_trace_resume_only_transition_is_flagged():
    lines = trace_lines()
    first, _ = phase_span(lines, "dpm_prepare")
    _, last = phase_span(lines, "dpm_suspend_noirq")
    found = trace_verdict(lines[:first] + lines[last + 1:])
    assert rules_of(found) == {"resume-only"} and len(found) == 1
    assert found[0].call.callback == "resume_noirq"


def test_pmtest_log_resume_only_transition_is_flagged():
    lines = [line for line in pmtest_lines("report-mem.txt.gz")
             if re.search(r" cb=(resume\w*|complete) ", line)]
    found = verdict(lines)
    assert rules_of(found) == {"resume-only"} and len(found) == 1


def fanout_3_trace(name="report-mem.txt.gz"):
    """The recorded trace as a kernel whose pmtest module had fanout=3 would
    report it: every pmtest device's parent field rewritten."""
    def parent(match):
        number = int(match["id"])
        above = f"{match['driver']}.{(number - 1) // 3}" if number else "platform"
        return f"{match['driver']} {match['driver']}.{number}, parent: {above},"
    return [re.sub(r"(?P<driver>pmtest_(?:full|compat|legacy)) (?P=driver)\.(?P<id>\d+), parent: [^,]+,",
                   parent, line) for line in trace_lines(name)]


def test_pmtest_tree_is_read_from_the_trace_not_assumed():
    """Swapping pmtest_full.1 and .3 in the suspend phase breaks fanout 2
    (.3 is .1's child) and no rule of fanout 3 (both are children of .0):
    the verdict follows the tree the trace reports."""
    lines = pmtest_lines("report-mem.txt.gz")
    one, three = index_of(lines, "pmtest_full.1", "suspend"), index_of(lines, "pmtest_full.3", "suspend")
    lines[one], lines[three] = lines[three], lines[one]
    calls = oracle.from_pmtest("\n".join(lines), RECORDED_BOUND)
    recorded = oracle.pmtest_parents(calls, tree())
    assert recorded["pmtest_full.3"] == "pmtest_full.1" and recorded["pmtest_full.1"] == "pmtest_full.0"
    assert [(v.rule, v.device) for v in oracle.judge(calls, recorded)] == [("order", "pmtest_full.3")]
    wider = oracle.tree_from_trace(oracle.from_trace("\n".join(fanout_3_trace()))[1])
    assert wider["pmtest_full.3"] == "pmtest_full.0" and wider["pmtest_full.6"] == "pmtest_full.1"
    assert oracle.judge(calls, oracle.pmtest_parents(calls, wider)) == []
