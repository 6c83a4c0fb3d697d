"""lab.trace on trace buffers recorded from real guests (pmlab-cycle reports)."""

import pytest

from lab import guest_report, trace
from recordings_util import report


def events_of(name):
    return trace.parse(guest_report.sections(report(name))["trace"])


S3_PHASES = ["suspend_enter", "sync_filesystems", "freeze_processes", "dpm_prepare", "dpm_suspend",
             "dpm_suspend_late", "dpm_suspend_noirq", "syscore_suspend", "machine_suspend",
             "acpi_suspend", "syscore_resume", "dpm_resume_noirq", "dpm_resume_early", "dpm_resume",
             "dpm_complete", "resume_console", "thaw_processes"]


def test_parse_line_fields():
    events = events_of("mem")
    assert len(events) > 1000
    first = events[0]
    assert first.name == "suspend_resume" and first.body == "suspend_enter[3] begin"
    assert first.ts > 0 and first.task
    assert all(a.ts <= b.ts for a, b in zip(events, events[1:]))


def test_mem_phases_in_order():
    assert trace.phases_reached(events_of("mem")) == S3_PHASES


def test_mem_timing():
    timing = trace.timing(events_of("mem"))
    assert 0 < timing["suspend_ms"] < timing["total_ms"]
    assert 0 < timing["resume_ms"] < timing["total_ms"]
    assert timing["s2idle_loops"] == 0
    assert timing["last_phase"] == "thaw_processes[0] end"


def test_freeze_idles_in_s2idle():
    events = events_of("freeze")
    markers = [(a, v, b) for _, a, v, b in trace.markers(events)]
    assert ("machine_suspend", 1, True) in markers and ("machine_suspend", 1, False) in markers
    timing = trace.timing(events)
    assert timing["s2idle_loops"] >= 1
    assert timing["suspend_ms"] > 0 and timing["resume_ms"] > 0


def test_hibernation_trace_spans_the_image():
    """Events before the snapshot come back inside the image; the restore
    kernel's machine_suspend[4] end follows them."""
    markers = trace.markers(events_of("disk"))
    assert ("machine_suspend", 4, True) in [(a, v, b) for _, a, v, b in markers]
    assert ("machine_suspend", 4, False) in [(a, v, b) for _, a, v, b in markers]
    assert trace.timing(events_of("disk"))["resume_ms"] > 0


@pytest.mark.parametrize("name, reach, absent", [
    ("pm_test-freezer", "freeze_processes", "dpm_prepare"),
    ("pm_test-devices", "dpm_suspend", "dpm_suspend_late"),
    ("pm_test-core", "dpm_suspend_noirq", "machine_suspend"),
])
def test_pm_test_levels_stop_where_they_should(name, reach, absent):
    phases = trace.phases_reached(events_of(name))
    assert reach in phases and absent not in phases


def test_callbacks_pair_and_order():
    sequences = trace.callbacks(events_of("mem"))
    assert all(call["us"] is not None for calls in sequences.values() for call in calls)
    assert not trace.failed_callbacks(sequences)
    full = [trace.phase_of(call["cb"]) for call in sequences["pmtest_full.0 (pmtest_full)"]]
    assert full == ["prepare", "suspend", "suspend_late", "suspend_noirq",
                    "resume_noirq", "resume_early", "resume", "complete"]
    assert all(call["us"] >= 0 for calls in sequences.values() for call in calls)


def test_failed_suspend_callback_found():
    failed = trace.failed_callbacks(trace.callbacks(events_of("mem-fault-suspend")))
    assert failed and all(err == -5 for _, _, err in failed)
    assert trace.phase_of(failed[0][1]) == "suspend"


def test_failed_resume_callback_found():
    failed = trace.failed_callbacks(trace.callbacks(events_of("mem-fault-resume")))
    assert failed and trace.phase_of(failed[0][1]) == "resume"


@pytest.mark.parametrize("label, phase", [
    ("[suspend]", "prepare"), ("[resume]", "complete"), ("[freeze]", "prepare"), ("[thaw]", "complete"),
    ("preparing bus[suspend]", "prepare"), ("completing driver[resume]", "complete"),
    ("noirq bus[suspend]", "suspend_noirq"), ("late driver[suspend]", "suspend_late"),
    ("early power domain[resume]", "resume_early"), ("bus[freeze]", "freeze"),
    ("legacy bus[suspend]", "suspend"), ("noirq driver[restore]", "restore_noirq"),
])
def test_phase_of(label, phase):
    assert trace.phase_of(label) == phase


def test_comment_and_garbage_lines_skipped():
    assert trace.parse("# tracer: nop\n#\nnot a trace line\n\n") == []


def test_same_named_devices_on_two_drivers_stay_apart():
    """report-mem holds PNP0A06:01 twice: the ACPI companion (driver string
    "acpi", parent PNP0A08:00) and the container device ("container", no
    parent). Keyed by name alone their callbacks would merge into one list."""
    sequences = trace.callbacks(events_of("mem"))
    acpi, container = sequences["PNP0A06:01 (acpi)"], sequences["PNP0A06:01 (container)"]
    assert "PNP0A06:01" not in sequences
    assert [call["driver"] for call in acpi] == ["acpi"] * len(acpi)
    assert [call["driver"] for call in container] == ["container"] * len(container)
    # each its own ->prepare .. ->complete, every start paired with its own end
    for calls in (acpi, container):
        assert trace.phase_of(calls[0]["cb"]) == "prepare" and trace.phase_of(calls[-1]["cb"]) == "complete"
        assert all(call["us"] is not None and call["err"] == 0 for call in calls)
    assert trace.split_device_id("PNP0A06:01 (container)") == ("PNP0A06:01", "container")
    assert trace.split_device_id("PNP0A06:01") == ("PNP0A06:01", None)


def test_same_named_devices_stay_apart_in_the_dashboard_latency(tmp_path):
    """The record's callbacks and the dashboard's latency table keep both."""
    from dashboards import compute, testing
    record = next(r for r in testing.with_callbacks(testing.recorded_records())
                  if "PNP0A06:01 (acpi)" in (r.get("callbacks") or {}))
    testing.write_run(str(tmp_path), "r1", [record])
    devices = compute.compute([str(tmp_path)])["latency"]["devices"]
    assert devices["PNP0A06:01 (acpi)"]["driver"] == "acpi"
    assert devices["PNP0A06:01 (container)"]["driver"] == "container"


def test_positive_prepare_is_no_failure():
    # ->prepare returning 1 asks for direct_complete (pmtest_direct.0)
    sequences = {"pmtest_direct.0": [{"cb": "[suspend]", "err": 1}],
                 "pmtest_full.3": [{"cb": "[suspend]", "err": -5}, {"cb": "driver [suspend]", "err": 1}]}
    assert trace.failed_callbacks(sequences) == [("pmtest_full.3", "[suspend]", -5),
                                                 ("pmtest_full.3", "driver [suspend]", 1)]
