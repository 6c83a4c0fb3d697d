"""Where a hang is stuck (lab/hang.py), from real hang dumps: the callback
that started and never returned (the guest's trace, printed by sysrq 'z'),
the driver function its task sleeps in (sysrq 'w'), and how the record, its
reason, the failure bucket, the timeline page and ./pmlab judge name it.

Recordings (pytest/recordings/, from pc-seabios guests of this kernel):
  hang-dump-sysrq-z.txt.gz    lean guest, --inject '1:delay=* suspend 40000'
                              --watchdog suspend=15: the first pmtest callback
                              of dpm_suspend (pmtest_class.1's class callback) hangs
  hang-dump-zoo-async.txt.gz  device guest, --inject '1:delay=pmtest_async.7
                              suspend 40000': an async leaf hangs, its parents wait
  hang-zoo-cycle.json         that cycle's record as lab.cycle wrote it
  hang-dump-async-stale-frame.txt.gz  lean guest, pmtest_async.7 delayed (the
                              guest test's hang): a stale frame among the scheduler's
  hang-dump-disk-freeze.txt.gz  lean guest, disk, pmtest_async.7's freeze delayed
  hang-dump-noirq-nmi.txt.gz  lean guest, pmtest_async.7's suspend_noirq delayed:
                              no sysrq answer, the host's NMI panicked it
  hang-dump-nvme-freeze.txt.gz  device guest, disk, a kernel whose nvme freeze
                              callback never returns (the corpus's regression)
  hang-dump-nvme-no-trace.txt.gz  the corpus helper's dump of that regression
                              (/tmp/corpus-hang-dump-nvme.txt), written without sysrq 'z'
  hang-dump-mmc-probe.txt.gz  device guest, mem, the corpus's mmc-rpm-leak kernel
                              (mmc_blk_suspend keeps the card claimed): every
                              callback returned, the sd-card probe after the resume blocks
  hang-dump.txt               an older dump without the sysrq 'z' section
"""

import copy
import json
import os
import re

import pytest

from dashboards import buckets, inputs, schemas, timeline
from lab import hang, records, rejudge, trace
from pipelines import compare
from hang_evidence import sections
from recordings_util import RECORDINGS, read

LEAN = "hang-dump-sysrq-z.txt.gz"
ZOO = "hang-dump-zoo-async.txt.gz"
STALE = "hang-dump-async-stale-frame.txt.gz"
NMI = "hang-dump-noirq-nmi.txt.gz"
# A callback's hang names no probe: the keys a probe's hang fills are null.
NO_PROBE = {"probe": None, "probe_section": None, "blocked_task": None, "order": None}


def zoo_record():
    with open(os.path.join(RECORDINGS, "hang-zoo-cycle.json")) as source:
        return json.load(source)


def test_the_trace_names_the_callback_that_never_returned():
    assert hang.where(read(LEAN)) == {
        "device": "pmtest_class.1", "driver": "pmtest", "callback": "class[suspend]",
        "function": "pmtest_knobs_apply", "since_s": 21.7, "source": "trace, stack", **NO_PROBE}


def test_an_async_callback_that_never_returned_is_named():
    assert hang.where(read(ZOO)) == {
        "device": "pmtest_async.7", "driver": "pmtest_async", "callback": "bus[suspend]",
        "function": "pmtest_knobs_apply", "since_s": 21.9, "source": "trace, stack", **NO_PROBE}


def test_a_real_driver_whose_freeze_never_returns_is_named():
    """nvme-pci with a corpus regression (its freeze callback loops forever,
    the corpus helper's kernel), device guest, disk --watchdog hibernate=40:
    the issue's example, named from the trace and the worker's stack (a
    stale nvme_shutdown+0xe/0xe among the scheduler's frames skipped)."""
    stuck = hang.where(read("hang-dump-nvme-freeze.txt.gz"))
    assert stuck == {"device": "0000:00:0c.0", "driver": "nvme", "callback": "bus[freeze]",
                     "function": "nvme_simple_suspend", "since_s": 46.7, "source": "trace, stack", **NO_PROBE}
    assert hang.reason("hibernate", stuck, "domain still running 40s after the request") == (
        "hibernate hung: 0000:00:0c.0 (nvme) bus[freeze] started 46.7 s before the trace was dumped, never "
        "returned (nvme_simple_suspend); domain still running 40s after the request")
    hung = {"cycle": 1, "status": "done", "mode": "disk", "verdict": "hang", "phase": "hibernate", "stuck": stuck}
    assert compare.default_buckets()(hung) == ["hang-in-hibernate:0000:00:0c.0 (nvme):bus[freeze]"]


MMC_PROBE = "hang-dump-mmc-probe.txt.gz"


def test_a_probe_that_never_finished_after_every_callback_returned_is_named():
    """The corpus's mmc-rpm-leak: the resume completed, then the guest's
    sd-card probe blocked (its card still claimed by the suspend). Where is
    the probe's begin marker with no end (guest/pmlab-probe), and the
    first blocked task with a driver's frame; the hang is the device
    check's, not the resume's."""
    stuck = hang.where(read(MMC_PROBE))
    assert stuck == {"device": None, "driver": "mmc_core", "callback": None, "function": "mmc_get_card",
                     "since_s": None, "source": "trace marker, stack", "probe": "sd-card",
                     "probe_section": "probes", "blocked_task": "kworker/0:1H", "order": None}
    phase = hang.phase("resume", stuck)
    assert phase == "device-check"
    assert hang.reason(phase, stuck, "no report from the guest within 60s") == (
        "device-check hung: every device callback returned; the guest's probe of sd-card after the resume "
        "never finished; blocked: kworker/0:1H in mmc_get_card [mmc_core]; no report from the guest within 60s")
    hung = {"cycle": 1, "status": "done", "mode": "mem", "verdict": "hang", "phase": phase, "stuck": stuck}
    assert compare.default_buckets()(hung) == ["hang-in-device-check:sd-card:mmc_get_card"]
    assert records.stuck(hung) == stuck
    assert schemas.errors(schemas.CYCLE_RECORD, dict(zoo_record(), **hung)) == []


def test_a_probe_that_ended_or_a_callback_still_open_is_not_the_probes_hang():
    text = read(MMC_PROBE)
    # the same dump with the sd-card probe's end in the trace: nothing open, nothing named
    ended = re.sub(r"(.*tracing_mark_write: pmlab-probe sd-card begin\n)",
                   lambda m: m[1] + m[1].replace(" begin", " end"), text)
    assert ended != text and hang.where(ended) is None
    assert hang.phase("resume", None) == "resume"
    # a probe before the suspend is said to be one
    events = [trace.Event(0.1, "tracing_mark_write", "pmlab-probe sata-disk begin", "pmlab-probe", 0)]
    assert hang.open_probe(events) == ("sata-disk", True)
    events.append(trace.Event(0.2, "tracing_mark_write", "SUSPEND START", "pmlab-ag", 0))
    events.append(trace.Event(0.3, "tracing_mark_write", "pmlab-probe sata-disk end", "pmlab-probe", 0))
    assert hang.open_probe(events) is None


def test_a_hibernation_freeze_that_never_returned_is_named():
    """disk, --inject '1:delay=pmtest_async.7 freeze 40000' --watchdog
    hibernate=20: the hang the watchdog sees as "domain still running"."""
    stuck = hang.where(read("hang-dump-disk-freeze.txt.gz"))
    assert stuck == {"device": "pmtest_async.7", "driver": "pmtest_async", "callback": "bus[freeze]",
                     "function": "pmtest_knobs_apply", "since_s": 26.6, "source": "trace, stack", **NO_PROBE}
    assert hang.reason("hibernate", stuck, "domain still running 20s after the request") == (
        "hibernate hung: pmtest_async.7 (pmtest_async) bus[freeze] started 26.6 s before the trace was dumped, "
        "never returned (pmtest_knobs_apply); domain still running 20s after the request")


def test_a_noirq_hang_is_named_from_the_nmi_panic():
    """noirq: device interrupts are off, the guest took no sysrq (its w/t
    section is empty); the host's NMI panicked it (guest/init:
    unknown_nmi_panic, panic_print=16), printing the interrupted CPU's stack
    (delay_tsc under pmtest_knobs_apply) and the trace buffer."""
    text = read(NMI)
    parts = sections(text)
    assert not hang.took_sysrq(parts["## guest sysrq w, t"].splitlines())
    assert "Kernel panic - not syncing: NMI: Not continuing" in parts["## guest NMI (no sysrq answer)"]
    assert hang.where(text) == {
        "device": "pmtest_async.7", "driver": "pmtest_async", "callback": "noirq driver[suspend]",
        "function": "pmtest_knobs_apply", "since_s": 21.6, "source": "trace, stack", **NO_PROBE}
    assert hang.took_sysrq(read(LEAN).splitlines())


def test_a_stale_frame_among_the_schedulers_is_not_the_function():
    """The async worker's stack (lean guest, pmtest_async.7 delayed) has
    to_kthread+0x8/0x10 between __schedule and schedule: the function is
    the one outside msleep, not the first frame of another name."""
    stacks = hang.task_stacks(read(STALE).splitlines())
    worker = next(stack for stack in stacks if "dpm_run_callback" in stack)
    assert worker[:3] == ["__schedule", "to_kthread", "schedule"]
    assert hang.where(read(STALE)) == {
        "device": "pmtest_async.7", "driver": "pmtest_async", "callback": "bus[suspend]",
        "function": "pmtest_knobs_apply", "since_s": 21.4, "source": "trace, stack", **NO_PROBE}


def test_the_dump_is_read_as_the_trace_with_its_own_clock():
    """Every line of the sysrq 'z' dump is an event; the clock is the
    buffer's (µs since the cycle emptied it)."""
    lines = read(LEAN).splitlines()
    events, dumped_at = hang.ftrace_events(lines)
    assert dumped_at == 26.955709
    assert len(events) == 371 and events[0].name == "tracing_mark_write" and events[0].ts == 0.011563
    assert hang.buffer_start(lines, events) == 5.196163 - 0.011563


def test_without_the_cycle_begin_line_there_is_no_since():
    text = "\n".join(line for line in read(LEAN).splitlines() if "pmlab: cycle 1 begin" not in line)
    stuck = hang.where(text)
    assert stuck["device"] == "pmtest_class.1" and stuck["since_s"] is None
    assert "pmtest_class.1 (pmtest) class[suspend] started, never returned" in hang.named(stuck)


def test_without_a_trace_the_stack_names_the_function_only():
    """The older dump has no sysrq 'z': the blocked task running a PM
    callback names the driver function, no device."""
    assert hang.where(read("hang-dump.txt")) == {
        "device": None, "driver": "pmtest", "callback": None, "function": "pmtest_cb_begin", "since_s": None,
        "source": "stack", **NO_PROBE}
    assert hang.reason("suspend", hang.where(read("hang-dump.txt")), "guest not asleep") == \
        "suspend hung: a device callback of pmtest stuck in pmtest_cb_begin (no trace of which device); " \
        "guest not asleep"


def test_the_corpus_nvme_hang_without_a_trace_names_the_driver_function():
    """The corpus helper's own dump of its nvme freeze regression, written by
    the lab before this change (no sysrq 'z'): the stack names nvme's
    function and its module, no device."""
    stuck = hang.where(read("hang-dump-nvme-no-trace.txt.gz"))
    assert stuck == {"device": None, "driver": "nvme", "callback": None, "function": "nvme_simple_suspend",
                     "since_s": None, "source": "stack", **NO_PROBE}
    hung = {"cycle": 3, "status": "done", "mode": "disk", "verdict": "hang", "phase": "hibernate", "stuck": stuck}
    assert compare.default_buckets()(hung) == ["hang-in-hibernate:nvme_simple_suspend"]


def test_stale_frames_are_not_the_stack():
    """The guess unwinder prints stale words as frames at a function's very
    end (offset == size): pmtest_pm_quiesce+0xa/0xa is none of the calls."""
    stacks = hang.task_stacks(read("hang-dump.txt").splitlines())
    stuck = next(stack for stack in stacks if "dpm_run_callback" in stack)
    assert stuck[:4] == ["__schedule", "schedule", "schedule_timeout", "msleep"]
    assert "pmtest_pm_quiesce" not in stuck and "platform_find_device_by_driver" not in stuck
    assert stuck[stuck.index("dpm_run_callback") - 1] == "pmtest_legacy_suspend"


def test_nothing_open_and_no_callback_stack_names_nothing():
    text = "\n".join(line for line in read(LEAN).splitlines()
                     if "pmtest_class.1, parent: pmtest_class.0, class [suspend]" not in line
                     and "dpm_run_callback" not in line)
    assert hang.where(text) is None
    assert hang.reason("suspend", None, "guest not asleep") == "guest not asleep"


def _events(*lines):
    return trace.parse("\n".join(f"kworker-1 [000] ..... {line}" for line in lines))


def test_of_the_open_callbacks_the_one_with_no_open_child_is_stuck():
    """A parent whose callback is open while its child's is (a resume: the
    child waits in the PM core before it starts; a driver that waits for a
    child itself) is waiting, not stuck; of several leaves, the first."""
    events = _events(
        "1.000000: device_pm_callback_start: drv A, parent: none, bus [resume]",
        "1.500000: device_pm_callback_start: drv C, parent: none, bus [resume]",
        "1.600000: device_pm_callback_end: drv C, err=0",
        "2.000000: device_pm_callback_start: drv B, parent: A, bus [resume]",
        "3.000000: device_pm_callback_start: drv D, parent: A, bus [resume]")
    assert hang.stuck_call(events).name == "B"
    assert hang.stuck_call(events[:3]).name == "A"
    assert hang.stuck_call(events[1:3]) is None


def test_the_sysrq_z_wait_ends_at_the_closing_rule():
    lines = read(LEAN).splitlines()
    start = next(i for i, line in enumerate(lines) if hang.FTRACE_BEGIN in line)
    end = next(i for i in range(start + 2, len(lines)) if lines[i].endswith(hang.FTRACE_RULE))
    assert not hang.ftrace_dump_ended(lines[start:end])
    assert hang.ftrace_dump_ended(lines[start:end + 1])
    assert hang.ftrace_dump_ended(["[ 9.1] Dumping ftrace buffer:", "[ 9.1]    (ftrace buffer empty)"])


def test_the_record_names_where_and_the_schema_types_it():
    record = zoo_record()
    # recorded when the source was called "trace, sysrq w" (now "trace, stack": an NMI's stack too)
    assert dict(record["stuck"], source="trace, stack", **NO_PROBE) == hang.where(read(ZOO))
    assert record["reason"].startswith("suspend hung: pmtest_async.7 (pmtest_async) bus[suspend] started 21.9 s "
                                       "before the trace was dumped, never returned (pmtest_knobs_apply); "
                                       "guest not asleep")
    # recorded before a probe's hang was named: the keys it adds read as null
    assert records.stuck(record) == dict(record["stuck"], **NO_PROBE)
    assert schemas.errors(schemas.CYCLE_RECORD, record) == []
    bad = dict(record, stuck={"device": 7})
    assert [path for path, _ in schemas.errors(schemas.CYCLE_RECORD, bad)] == [["stuck", "device"]]
    assert records.stuck(dict(record, stuck="pmtest_async.7")) is None
    # a value of the wrong type is no value (the page and the bucket use them as typed)
    damaged = records.stuck(dict(record, stuck=dict(record["stuck"], since_s="21.9", callback=["x"])))
    assert damaged == dict(record["stuck"], since_s=None, callback=None, **NO_PROBE)
    assert records.stuck(dict(record, stuck={"device": None, "function": 3})) is None


def test_the_bucket_names_the_device_and_callback():
    record = zoo_record()
    classify = compare.default_buckets()
    assert "hang-in-suspend:pmtest_async.7 (pmtest_async):bus[suspend]" in classify(record)
    assert buckets.kind_of("hang-in-suspend:pmtest_async.7 (pmtest_async):bus[suspend]") == "hang"
    only_stack = dict(record, stuck=hang.where(read("hang-dump.txt")))
    assert "hang-in-suspend:pmtest_cb_begin" in classify(only_stack)
    assert "hang-in-suspend" in classify({k: v for k, v in record.items() if k != "stuck"})


def test_the_commit_gate_reports_the_stuck_callback_as_new():
    """A kernel's own hang (not injected) is a new bucket naming where."""
    hung = {k: v for k, v in zoo_record().items() if k not in ("injected", "knobs")}
    findings = compare.regressions([], [hung])
    assert [f["bucket"] for f in findings if f["kind"] == "new-bucket"] == [
        "hang-in-suspend:pmtest_async.7 (pmtest_async):bus[suspend]"]
    normalised = inputs.normalise(copy.deepcopy(hung), "x", None)
    assert normalised["stuck"]["device"] == "pmtest_async.7"


def _run_with_the_zoo_hang(tmp_path):
    record = zoo_record()
    run = tmp_path / "run"
    run.mkdir()
    (run / "cycles.jsonl").write_text(json.dumps(record) + "\n")
    (run / record["hang_dump"]).write_text(read(ZOO))
    return run, record


def test_the_timeline_page_of_a_hang_draws_its_dump_trace(tmp_path):
    run, record = _run_with_the_zoo_hang(tmp_path)
    path = timeline.write_run(str(run), [1])[(record["run_id"], 1)]
    data = json.loads(re.search(r'id="timeline-data">(.*?)</script>', open(path).read(), re.S).group(1))
    assert data["no_trace"] is None and data["state"] == "hang" and data["stuck"] == records.stuck(record)
    open_calls = [(row["device"], call["cb"]) for row in data["rows"] for call in row["calls"] if call["us"] is None]
    assert open_calls == [("pmtest_async.7 (pmtest_async)", "bus[suspend]")]
    assert len(data["rows"]) > 100 and data["hang_dump"] == "../" + record["hang_dump"]


def test_a_hang_dump_without_a_trace_says_so_on_the_page(tmp_path):
    run, record = _run_with_the_zoo_hang(tmp_path)
    (run / record["hang_dump"]).write_text(read("hang-dump.txt"))
    path = timeline.write_cycle(str(run), record)
    data = json.loads(re.search(r'id="timeline-data">(.*?)</script>', open(path).read(), re.S).group(1))
    assert data["no_trace"] == timeline.NO_TRACE_IN_DUMP and data["rows"] == []


def test_judge_names_where_a_recorded_hang_is_stuck(tmp_path):
    run, record = _run_with_the_zoo_hang(tmp_path)
    (item,) = rejudge.rejudge_run(str(run))
    assert item.new is None and item.old == ("hang", "suspend")
    assert item.reason == ("no guest report: the host's watch decided it; suspend hung: pmtest_async.7 "
                           "(pmtest_async) bus[suspend] started 21.9 s before the trace was dumped, "
                           "never returned (pmtest_knobs_apply)")
    os.remove(run / record["hang_dump"])
    assert rejudge.rejudge_run(str(run))[0].reason == "no guest report: the host's watch decided it"


@pytest.mark.browser
def test_the_hang_page_names_the_callback_and_draws_it_open(tmp_path):
    from test_dashboard_page import Dom, chromium
    run, record = _run_with_the_zoo_hang(tmp_path)
    path = timeline.write_cycle(str(run), record)
    stdout, stderr = chromium("file://" + path, "--dump-dom", "--window-size=1400,1000")
    dom = Dom(stdout)
    found = [text for text in dom.texts_in("findings-list") if text.startswith("never returned: ")]
    assert found == ["never returned: pmtest_async.7 (pmtest_async) bus[suspend], started 21.9 s before the trace "
                     "was dumped, stuck in pmtest_knobs_apply (from trace, sysrq w) "], stderr
    (body,) = dom.attrs_of("body")
    assert body.get("data-drawn") == "ready" and "data-errors" not in body, body
    assert int(body["data-rows"]) > 100
    assert "show" in dom.texts_in("findings-list")  # the jump to its open bar
    assert [a for a in dom.attrs_of("rect") if "unfinished" in a.get("class", "").split()], "no open bar drawn"
