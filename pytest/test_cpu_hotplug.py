"""An SMP guest's non-boot CPUs around the device phases (lab/oracle/
cpu_hotplug.py, lab/trace.py hotplug_spans) and how far device callbacks ran
at once (trace.overlapping_callbacks), on real 2-vCPU cycles
(recordings/smp2-cycles.jsonl.gz and report-smp2-*.txt.gz: a pc-seabios
`./pmlab run --vcpus 2 --mode mem,freeze,disk`, with guest/init's
cpuhp:cpuhp_exit), and on copies mutated so that they must fail."""

import gzip
import json
import os
import re
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab import judge, modes, records, trace  # noqa: E402
from lab.oracle import cpu_hotplug  # noqa: E402
from recordings_util import RECORDINGS, report  # noqa: E402


def _records():
    with gzip.open(os.path.join(RECORDINGS, "smp2-cycles.jsonl.gz"), "rt") as source:
        return {record["recording"]: record for record in map(json.loads, source)}


RECORDS = _records()


def _judge(name, text=None, vcpus=None):
    """The recorded cycle `name` judged again (its report, or `text`), for
    the request's vcpus (the record's, or `vcpus`)."""
    record = dict(RECORDS[name])
    if vcpus is not None:
        record["vcpus"] = vcpus
    return judge.judge_with_order(modes.parse_mode(record["mode"], record["wake"]), text or report(name), 0,
                                  records.host_events(record), record["evidence"], record["timeline"],
                                  record["token"], record["guest_boot_id"], judge.Expected.of_record(record))


def test_an_async_callback_sorted_past_its_phase_keeps_its_phase():
    """smp2-mem-skew (q35-ovmf, 2 vCPUs, S3): CPU 0's ->resume of
    0000:00:1f.0 carries the same clamped trace time as CPU 1's
    dpm_complete begin marker and sorts after it; its own words ("bus
    [resume]") keep it in dpm_resume, so the oracle sees no ->complete
    without ->prepare (it failed the cycle before lab.trace._named_phase)."""
    parsed = judge.parse_report(report("smp2-mem-skew"))
    call = next(c for c in parsed.callbacks if c.name == "0000:00:1f.0" and c.label == "bus[resume]")
    complete_begins = [ts for ts, action, _, begin in trace.markers(parsed.events) if action == "dpm_complete" and begin]
    assert call.ts == complete_begins[-1] and call.phase == "dpm_resume"
    assert _judge("smp2-mem-skew")["verdict"] == "pass"


CHILD_RESUME = ("kworker/u4:1-23      [001] .....    10.908768: device_pm_callback_start: pmtest_async "
                "pmtest_async.14, parent: pmtest_async.6, noirq driver [resume]")


def test_a_child_and_its_parent_stamped_alike_on_two_cpus_are_in_no_order():
    """smp2-mem-tie (q35-ovmf, 2 vCPUs, S3): pmtest_async.14's ->resume_noirq
    (CPU 1) and its parent pmtest_async.6's (CPU 0) carry one clamped trace
    time, 10.908768, and the child's page sorts first: no order violation
    (the oracle failed the cycle on it before judge._same_time_two_cpus)."""
    assert CHILD_RESUME in report("smp2-mem-tie")
    assert _judge("smp2-mem-tie")["verdict"] == "pass"


def test_a_child_resumed_before_its_parent_at_an_earlier_time_still_fails():
    text = report("smp2-mem-tie").replace(CHILD_RESUME, CHILD_RESUME.replace("10.908768", "10.908700"))
    result = _judge("smp2-mem-tie", text)
    assert (result["verdict"], result["phase"]) == ("fail", "ordering")
    assert result["reason"].startswith("order: pmtest_async.14 (pmtest_async): resume_noirq ran before parent "
                                       "pmtest_async.6 (pmtest_async)'s resume_noirq")


def test_the_recorded_cycles_ran_on_two_cpus():
    assert {record["vcpus"] for record in RECORDS.values()} == {2}


@pytest.mark.parametrize("name", ["smp2-mem", "smp2-disk"])
def test_s3_and_s4_take_cpu_1_offline_and_back_and_pass(name):
    result = _judge(name)
    assert (result["verdict"], result["reason"]) == ("pass", None)
    hotplug = result["cpu_hotplug"]
    assert hotplug["vcpus"] == 2 and set(hotplug["offline"]) == set(hotplug["online"]) == {"1"}
    assert hotplug["offline"]["1"] > 0 and hotplug["online"]["1"] > 0


def test_s2idle_takes_no_cpu_offline_and_passes():
    result = _judge("smp2-freeze")
    assert result["verdict"] == "pass"
    assert result["cpu_hotplug"] == {"vcpus": 2, "offline": {}, "online": {}}


@pytest.mark.parametrize("name", ["smp2-mem", "smp2-freeze", "smp2-disk"])
def test_async_callbacks_ran_at_once_on_two_cpus(name):
    overlap = _judge(name)["callback_overlap"]
    assert overlap["on_two_cpus"] > 0 and overlap["overlapping"] >= overlap["on_two_cpus"]
    assert re.search(r" on CPU [01] and .* on CPU [01] at ", overlap["example"])


def test_a_one_cpu_guest_has_no_callbacks_on_two_cpus_and_no_hotplug_fields():
    """recordings/report-mem.txt.gz: a 1-vCPU S3 cycle (its record has no vcpus)."""
    parsed = judge.parse_report(report("mem"))
    assert trace.overlapping_callbacks(parsed.callbacks)["on_two_cpus"] == 0
    assert judge.Expected.of_record({}).vcpus == 1
    assert trace.hotplug_spans(parsed.events) == []


def test_the_parser_reads_cpu_1s_way_down_and_up_with_its_hotplug_steps():
    spans = trace.hotplug_spans(judge.parse_report(report("smp2-mem")).events)
    assert [(span.cpu, span.action) for span in spans] == [(1, "CPU_OFF"), (1, "CPU_ON")]
    down, up = spans
    assert down.end > down.begin and up.end > up.begin > down.end
    assert len(down.steps) > 20 and len(up.steps) > 20 and not down.failed_step and not up.failed_step
    assert up.steps[-1][0] == max(step for _, step, _ in down.steps)  # back in the state it left


def test_the_request_not_the_guest_says_which_cpus_must_go():
    """The guest had 2 CPUs; a request for 4 expects CPUs 2 and 3 too."""
    result = _judge("smp2-mem", vcpus=4)
    assert (result["verdict"], result["phase"]) == ("fail", "cpu-hotplug")
    assert result["reason"] == ("CPU 2 did not go offline (no CPU_OFF end in the trace); "
                                "CPU 3 did not go offline (no CPU_OFF end in the trace)")


def _without(text, pattern):
    return "\n".join(line for line in text.splitlines() if not re.search(pattern, line))


def test_a_cpu_that_did_not_go_offline_in_s3_fails_naming_it():
    result = _judge("smp2-mem", _without(report("smp2-mem"), r"CPU_OFF\[1\]|CPU_ON\[1\]"))
    assert (result["verdict"], result["phase"]) == ("fail", "cpu-hotplug")
    assert result["reason"] == "CPU 1 did not go offline (no CPU_OFF end in the trace)"


def test_a_failed_hotplug_step_fails_naming_the_cpu_and_the_error():
    text = report("smp2-mem").replace("cpu: 0001  state: 205 step: 206 ret: 0",
                                      "cpu: 0001  state: 205 step: 206 ret: -16", 1)
    result = _judge("smp2-mem", text)
    assert result["reason"] == "CPU 1 did not go offline: hotplug step 206 returned EBUSY (-16)"


def _moved(text, pattern, seconds):
    """`text` with the timestamp of the line matching `pattern` moved to `seconds`."""
    return re.sub(r"(\s)\d+\.\d{6}(: suspend_resume: " + pattern + ")", rf"\g<1>{seconds:.6f}\2", text)


def test_a_cpu_back_after_the_first_noirq_resume_callback_is_late():
    parsed = judge.parse_report(report("smp2-mem"))
    first_resume = min(call.ts for call in parsed.callbacks if call.phase == "dpm_resume_noirq")
    result = _judge("smp2-mem", _moved(report("smp2-mem"), r"CPU_ON\[1\] end", first_resume + 0.001))
    assert result["phase"] == "cpu-hotplug"
    assert result["reason"].startswith("CPU 1 came back online late: at ")


def test_a_cpu_offline_before_the_last_noirq_suspend_callback_is_early():
    parsed = judge.parse_report(report("smp2-mem"))
    last_noirq = max(call.end_ts for call in parsed.callbacks if call.phase == "dpm_suspend_noirq")
    result = _judge("smp2-mem", _moved(report("smp2-mem"), r"CPU_OFF\[1\] begin", last_noirq - 0.001))
    assert result["phase"] == "cpu-hotplug"
    assert "went offline at" in result["reason"] and "before the last noirq suspend callback" in result["reason"]


def test_a_cpu_that_never_came_back_after_hibernation_fails():
    result = _judge("smp2-disk", _without(report("smp2-disk"), r"CPU_ON\[1\]"))
    assert (result["phase"], result["reason"]) == ("cpu-hotplug", "CPU 1 did not come back online "
                                                                  "(no CPU_ON end in the trace)")


def test_a_cpu_offline_in_s2idle_fails():
    """The S3 cycle's CPU_OFF lines put into the s2idle cycle's trace."""
    down = [line for line in report("smp2-mem").splitlines() if "CPU_OFF[1]" in line]
    freeze = report("smp2-freeze")
    marker = next(line for line in freeze.splitlines() if "dpm_suspend_noirq" in line and line.endswith("end"))
    ts = float(re.search(r"(\d+\.\d{6}):", marker).group(1))
    moved = [re.sub(r"\d+\.\d{6}:", f"{ts + 0.0001 * (i + 1):.6f}:", line, count=1) for i, line in enumerate(down)]
    result = _judge("smp2-freeze", freeze.replace(marker, "\n".join([marker] + moved), 1))
    assert (result["verdict"], result["phase"]) == ("fail", "cpu-hotplug")
    assert result["reason"] == "CPU 1 went offline in a freeze cycle, which takes no CPU offline"


@pytest.mark.parametrize("name, offline", [("mem", True), ("disk", True), ("freeze", False),
                                           ("pm_test-core", True), ("pm_test-processors", True),
                                           ("pm_test-platform", False), ("pm_test-devices", False)])
def test_which_modes_take_cpus_offline(name, offline):
    assert cpu_hotplug.takes_cpus_offline(modes.parse_mode(name)) is offline


def test_a_failed_cycle_keeps_its_own_verdict():
    """A cycle that already failed is not judged for its CPUs: the cause stays first."""
    text = _without(report("smp2-mem"), r"CPU_OFF\[1\]|CPU_ON\[1\]").replace(
        "cpu: 0001  state: 205 step: 206 ret: 0", "x")
    record = dict(RECORDS["smp2-mem"], timeline=[])  # no wake: the S3 proof is missing
    record[records.EVENTS_FIELD] = []
    result = judge.judge_with_order(modes.parse_mode("mem"), text, 0, [], record["evidence"], [],
                                    record["token"], record["guest_boot_id"], judge.Expected(vcpus=2))
    assert (result["verdict"], result["phase"]) == ("fail", "sleep")


def test_the_guest_enables_every_trace_event_the_host_reads():
    """guest/init's loop of events: cpuhp_exit is what shows a failed
    hotplug step (the recordings above were made with it)."""
    with open(os.path.join(REPO, "guest", "init")) as source:
        init = source.read()
    loop = re.search(r"for event in (.*?); do", init, re.DOTALL).group(1)
    enabled = set(loop.replace("\\\n", " ").split())
    assert {"power/suspend_resume", "power/device_pm_callback_start", "power/device_pm_callback_end",
            "cpuhp/cpuhp_exit"} <= enabled
    # one clock for every CPU, so that two CPUs' events sort as they happened
    assert "echo global >$tracing/trace_clock" in init
