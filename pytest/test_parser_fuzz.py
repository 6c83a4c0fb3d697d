"""Bad input fuzzing (issue 6, item 4): the parsers of guest output and of
result files, fed real recordings cut short and corrupted at random.

Damage (any 1 to 4 of, anywhere): truncation at any byte, bytes replaced,
inserted or deleted (random bytes, NULs, invalid UTF-8, CR/LF, JSON and
section punctuation), lines deleted, duplicated or swapped, and a huge line
(HUGE bytes of one repeated unit or a repeated piece of the recording).

Properties:
  text parsers (lab/console.py, lab/trace.py, lab/pmtest_log.py,
  lab/guest_report.py, lab/oracle/observe.py and cycle_check.judge_cycle,
  lab/guest_agent.py ReplyParser) take strings or bytes, never a file: they
  never raise, return the documented types, the line-oriented ones read a
  text as the concatenation of its lines, ReplyParser gives the same replies
  and noise however the stream is chunked; and on the untouched recordings
  every parser still gives exactly what it gave when this file was written
  (DIGESTS, see parsed() and `python3 pytest/test_parser_fuzz.py`).
  file readers (dashboards/inputs.py: cycles.jsonl, summary.json,
  manifest.json; lab/records.read_cycles; pipelines/merge.py;
  lab/lava.py's records from a LAVA job log) never raise anything but their documented
  error (merge: MergeError) and every problem they report names the file and
  the 1-based line, which is a line the damage touched.

Each crash or hang this found has a focused test at the end.

Deterministic and bounded: hypothesis derandomized, no example database,
30 to 300 examples a test (fuzz()); the whole file runs in under a minute.
Recordings: pytest/recordings/ (recordings_util.py); run-*.json* and
lava-s3-s4-job.log.yaml.gz are copies of a real pipelines/commit run
directory and a real LAVA job log (the LAVA engine's, lab/lava.py).
"""

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st  # python3-hypothesis, lab/install-deps

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import conftest  # noqa: E402  (--fuzz-share)
from lab import console, guest_report, hang, modes, pmtest_log, records, trace  # noqa: E402
from lab import lava  # noqa: E402
from lab.records import RunDir  # noqa: E402
from lab.request import numbered_cycles  # noqa: E402
from lab.guest_agent import Reply, ReplyParser  # noqa: E402
from lab.oracle import observe  # noqa: E402
from lab.judge import parse_report  # noqa: E402
from lab.oracle.cycle_check import as_record, judge_cycle  # noqa: E402
from lab.records import read_cycles, summarize  # noqa: E402
from dashboards import compute, inputs  # noqa: E402
from pipelines import merge as merge_mod  # noqa: E402
from recordings_util import RECORDINGS, read_bytes  # noqa: E402

REPORTS = sorted(name for name in os.listdir(RECORDINGS) if name.startswith("report-"))
CONSOLES = ["console-cycles.log.gz", "console-hang.log.gz"]
# A real run directory (pipelines/commit, 6 cycles with their "started"
# lines and callbacks), its summary.json and manifest.json; a real LAVA job log.
RUN_FILES = {"cycles.jsonl": "run-cycles.jsonl.gz", "summary.json": "run-summary.json",
             "manifest.json": "run-manifest.json"}
LAVA_LOG = "lava-s3-s4-job.log.yaml.gz"

HUGE = 100_000


def fuzz(examples):
    """Deterministic (derandomized, no example database), `examples` a test
    (--fuzz-share P: P % of them, at least 10; ./pmlab test --fast: 25 %)."""
    examples = max(10, examples * conftest.FUZZ_SHARE // 100)
    return settings(derandomize=True, database=None, deadline=None, max_examples=examples, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


raw = read_bytes  # bytes of a recording, .gz decompressed


def text_of(data):
    """Bytes to text as the lab reads guest output (lab/guest.py)."""
    return data.decode("utf-8", "replace")


# ------------------------------------------------------------------ damage

SPECIAL = [b"\x00", b"\x00" * 7, b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\r",
           b"\n", b"\r\n", b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b"=", b"-", b" ", b"\t",
           b"@", b"#", b"=== ", b"\x1b[0m", "\u2028".encode(), b"9" * 20, b"-1"]
HUGE_UNITS = [b" ", b"\t", b"\x00", b"\xff", b"9", b"[", b"{", b"-", b"@", b"a-1 ", b"=== x", b"\xc3\xa9"]


def _at(draw, data, end=True):
    return draw(st.integers(0, len(data) if end else max(0, len(data) - 1)), label="at")


def _piece(draw):
    return draw(st.sampled_from(SPECIAL) | st.binary(min_size=1, max_size=16), label="piece")


def truncate(draw, data):
    return data[:_at(draw, data)]


def replace(draw, data):
    at, piece = _at(draw, data, end=False), _piece(draw)
    return data[:at] + piece + data[at + len(piece):]


def insert(draw, data):
    at = _at(draw, data)
    return data[:at] + _piece(draw) + data[at:]


def delete(draw, data):
    at = _at(draw, data, end=False)
    return data[:at] + data[at + draw(st.integers(1, 300), label="size"):]


def _lines(data):
    return data.splitlines(keepends=True) or [b""]


def delete_line(draw, data):
    lines = _lines(data)
    del lines[draw(st.integers(0, len(lines) - 1), label="line")]
    return b"".join(lines)


def duplicate_line(draw, data):
    lines = _lines(data)
    index = draw(st.integers(0, len(lines) - 1), label="line")
    lines.insert(draw(st.integers(0, len(lines)), label="to"), lines[index])
    return b"".join(lines)


def swap_lines(draw, data):
    lines = _lines(data)
    first, second = (draw(st.integers(0, len(lines) - 1), label="line") for _ in range(2))
    lines[first], lines[second] = lines[second], lines[first]
    return b"".join(lines)


def huge_line(draw, data):
    """HUGE bytes, inside a line or as a line of their own."""
    at = _at(draw, data)
    if draw(st.booleans(), label="own line"):
        at = data.rfind(b"\n", 0, at) + 1
    unit = draw(st.sampled_from(HUGE_UNITS) | st.just(None), label="unit")
    if unit is None:  # a piece of the recording itself, without line ends
        start = _at(draw, data, end=False)
        unit = data[start:start + draw(st.integers(1, 200), label="size")].replace(b"\n", b"").replace(b"\r", b"")
    unit = unit or b"x"
    return data[:at] + (unit * (HUGE // len(unit) + 1))[:HUGE] + data[at:]


def huge_number(draw, data):
    """A number that runs on for 5000 digits (int() takes at most 4300)."""
    at = _at(draw, data)
    digit = next((i for i in range(at, min(len(data), at + 2000)) if data[i:i + 1].isdigit()), at)
    return data[:digit] + b"7" * 5000 + data[digit:]


ALL = (truncate, replace, insert, delete, delete_line, duplicate_line, swap_lines, huge_line, huge_number)
# What lab/records.read_cycles is documented to survive (see
# test_read_cycles_* below for what it does not).
CUT_AND_SHUFFLE = (truncate, delete_line, duplicate_line, swap_lines)


@st.composite
def damaged(draw, data, kinds=ALL):
    for _ in range(draw(st.integers(1, 4), label="damages")):
        data = draw(st.sampled_from(kinds), label="kind")(draw, data)
    return data


# ------------------------------------------------------------------ text parsers

def check_events(events):
    for event in events:
        assert isinstance(event, trace.Event)
        assert isinstance(event.ts, float) and isinstance(event.cpu, int)
        assert all(isinstance(v, str) for v in (event.name, event.body, event.task))


def check_trace(text):
    """Every lab/trace.py function on a text; returns what a digest needs."""
    events = trace.parse(text)
    check_events(events)
    marks = trace.markers(events)
    for ts, action, val, is_begin in marks:
        assert isinstance(ts, float) and isinstance(action, str) and isinstance(val, int)
        assert isinstance(is_begin, bool)
    timing = trace.timing(events)
    assert set(timing) == {"suspend_ms", "resume_ms", "total_ms", "s2idle_loops", "last_phase"}
    assert all(timing[k] is None or isinstance(timing[k], float) for k in ("suspend_ms", "resume_ms", "total_ms"))
    assert isinstance(timing["s2idle_loops"], int)
    assert timing["last_phase"] is None or isinstance(timing["last_phase"], str)
    phases = trace.phases_reached(events)
    assert all(isinstance(p, str) for p in phases)
    sequences = trace.callbacks(events)
    for device, calls in sequences.items():
        assert isinstance(device, str)
        for call in calls:
            assert set(call) == {"cb", "driver", "t", "us", "err"}
            assert isinstance(call["cb"], str) and isinstance(call["driver"], str) and isinstance(call["t"], float)
            assert call["us"] is None or isinstance(call["us"], float)
            assert call["err"] is None or isinstance(call["err"], int)
            assert isinstance(trace.phase_of(call["cb"]), str)
    failed = trace.failed_callbacks(sequences)
    unfinished = [(device, call["cb"]) for device, calls in sequences.items() for call in calls if call["us"] is None]
    assert all(isinstance(err, int) for _, _, err in failed)
    return {"events": events, "timing": timing, "phases": phases,
            "callbacks": sequences, "failed": failed, "unfinished": unfinished,
            "phase_of": sorted({(c["cb"], trace.phase_of(c["cb"])) for calls in sequences.values() for c in calls})}


def check_pmtest(text):
    entries = pmtest_log.parse(text)
    for entry in entries:
        assert set(entry) == {"seq", "t", "dev", "cb", "event", "ret"}
        assert all(isinstance(entry[k], int) for k in ("seq", "t", "ret"))
        assert all(isinstance(entry[k], str) for k in ("dev", "cb", "event"))
    by_device = pmtest_log.by_device(entries)
    assert all(isinstance(s, str) for calls in by_device.values() for s in calls)
    assert pmtest_log.after(entries, -1) == [e for e in entries if e["seq"] > -1]
    return {"entries": entries, "by_device": by_device}


def check_calls(calls):
    for position, call in enumerate(calls):
        assert isinstance(call, observe.Call) and call.index == position
        assert isinstance(call.device, str) and isinstance(call.callback, str) and isinstance(call.ret, int)
        assert isinstance(str(call), str)
    return calls


def digestible(out):
    """check_report's output with its events and calls as tuples, as DIGESTS
    were taken (converted only there: dataclasses.astuple costs more than
    the parsers themselves, and the fuzz tests need no digest)."""
    out = dict(out, trace=dict(out["trace"], events=[dataclasses.astuple(e) for e in out["trace"]["events"]]))
    for key in ("oracle_pmtest", "oracle_trace"):  # without a trace call's ts, cpu and end (later fields; its text has ts)
        out[key] = [dataclasses.astuple(dataclasses.replace(c, tags=sorted(c.tags)))[:-3] for c in out[key]]
    return out


def check_report(text):
    """Every report parser on a report text."""
    parts = guest_report.sections(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items())
    out = {"sections": sorted(parts)}
    for name in ("before", "after", "enter"):
        values = guest_report.key_values(parts.get(name))
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
        out[name] = values
    stats, sources = {}, {}
    for side in ("before", "after"):
        snapshot = guest_report.snapshot(parts, side)
        assert isinstance(snapshot, str)
        stats[side] = guest_report.suspend_stats(snapshot)
        assert all(isinstance(v, (int, str)) for v in stats[side].values())
        sources[side] = guest_report.wakeup_sources(snapshot)
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in sources[side].items())
    out["stats_delta"] = guest_report.stats_delta(stats["before"], stats["after"])
    out["wakeup_delta"] = guest_report.wakeup_delta(sources["before"], sources["after"])
    assert all(isinstance(v, int) and v > 0 for v in out["wakeup_delta"].values())
    out["trace"] = check_trace(parts.get("trace", ""))
    out["pmtest"] = check_pmtest(parts.get("pmtest_log"))
    trace_calls, parents = observe.from_trace(parts.get("trace", ""))
    bound = observe.bound_drivers(trace_calls)
    out["oracle_pmtest"] = check_calls(observe.from_pmtest(parts.get("pmtest_log", ""), bound))
    out["oracle_trace"] = check_calls(trace_calls)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in parents.items())
    out["oracle_parents"] = parents
    out["judge"] = check_judge(text, [])
    return out


def check_console(text):
    lines = console.lines(text)
    assert all(isinstance(line, str) and "\n" not in line for line in lines)
    out = {"lines": len(lines), "problems": console.problems(lines), "panicked": any(console.PANIC.search(line) for line in lines)}
    assert isinstance(out["panicked"], bool) and set(out["problems"]) <= set(lines)
    cycles = {}
    for number in (1, 2, 3, 9, 100, 200, 9001):
        cut = console.cycle_lines(lines, number)
        assert isinstance(cut, list)
        if cut:  # a contiguous run of the console
            assert any(lines[i:i + len(cut)] == cut for i in range(len(lines) - len(cut) + 1))
        cycles[number] = len(cut)
    out["cycles"] = cycles
    calls = observe.from_pmtest("\n".join(lines))
    kernels = observe.split_kernels(calls)
    assert [c for kernel in kernels for c in kernel] == calls
    out["kernels"] = [len(k) for k in kernels]
    out["judge"] = check_judge("", lines)
    return out


def check_judge(report_text, console_lines):
    parsed = parse_report(report_text)
    violations, counts = judge_cycle(parsed.sections, parsed.callbacks, console_lines)
    assert set(counts) == {"pmtest_log", "trace", "console"} and all(isinstance(v, int) for v in counts.values())
    record = as_record(violations, counts)
    json.dumps(record)
    return record


def replies_of(data, sizes=()):
    parser, replies, offset = ReplyParser(), [], 0
    for size in sizes:
        replies += parser.feed(data[offset:offset + size])
        offset += size
    replies += parser.feed(data[offset:])
    for reply in replies:
        assert isinstance(reply, Reply) and isinstance(reply.id, int) and isinstance(reply.status, int)
        assert isinstance(reply.output, str)
    return replies, parser


def check_agent(data):
    replies, parser = replies_of(data)
    assert all(r.output == r.data.decode("utf-8", "replace") for r in replies)
    return {"replies": [(r.id, r.status, r.output) for r in replies], "noise": parser.noise.decode("latin-1"),
            "buffer": parser._buffer.decode("latin-1")}


@fuzz(80)
@given(st.sampled_from(REPORTS).flatmap(lambda name: damaged(raw(name))))
def test_report_parsers_survive_damage(data):
    text = text_of(data)
    check_report(text)
    # Line by line: trace and pmtest lines are read alone, whatever is around them.
    assert trace.parse(text) == [e for line in text.splitlines() for e in trace.parse(line)]
    assert pmtest_log.parse(text) == [e for line in text.splitlines() for e in pmtest_log.parse(line)]


def _report_with_pages():
    """The recorded S3 report with one real S3 buffer's pages as its trace
    section, as guest/pmlab-cycle sends it now."""
    text = raw("report-mem.txt.gz")
    head, _, rest = text.partition(b"=== trace\n")
    return head + b"=== trace_raw\n" + raw("trace-raw-mem.bin.gz") + rest[rest.index(b"=== pmtest_log"):]


@fuzz(60)
@given(damaged(_report_with_pages()))
def test_reports_with_damaged_trace_pages_still_read(data):
    """lab.trace_raw renders damaged pages or names why it cannot
    (trace_raw_error); the report's other sections are read either way."""
    text = guest_report.from_bytes(data)
    assert isinstance(text, str)
    check_report(text)


@fuzz(200)
@given(st.sampled_from(CONSOLES).flatmap(lambda name: damaged(raw(name))))
def test_console_parsers_survive_damage(data):
    check_console(text_of(data))


@fuzz(60)
@given(st.sampled_from(["hang-dump-sysrq-z.txt.gz", "hang-dump.txt"]).flatmap(lambda name: damaged(raw(name))))
def test_hang_dump_reader_survives_damage(data):
    """lab/hang.py on a damaged hang dump: where it is stuck, or None."""
    stuck = hang.where(text_of(data))
    assert stuck is None or (set(stuck) == set(records.STUCK_KEYS) and records.stuck({records.STUCK_FIELD: stuck}) == stuck)
    if stuck is not None:
        assert isinstance(hang.reason("suspend", stuck, "watchdog"), str)


@fuzz(300)
@given(damaged(raw("agent-stream.bin.gz")), st.lists(st.integers(1, 5000), max_size=50))
def test_agent_stream_survives_damage_in_any_chunks(data, sizes):
    whole, parser = replies_of(data)
    chunked, chunked_parser = replies_of(data, sizes)
    assert chunked == whole
    assert (chunked_parser.noise, chunked_parser._buffer) == (parser.noise, parser._buffer)
    # Whatever was not a reply is noise, or the start of one still coming.
    assert parser._buffer[:1] in (b"", b"@")


# What the parsers gave on the untouched recordings when this file was
# written (sha256 of parsed(name)); a parser change that alters them shows
# here. After a deliberate change or a new recording, print the new ones
# with `/usr/bin/python3 pytest/test_parser_fuzz.py`.
DIGESTS = {
    'report-disk-reboot.txt.gz': '4cdb1e257d55933dbbd139f18dac91241860465da7cdddfb3ad813902d7c6231',
    'report-disk.txt.gz': '8a08fe73f7cf7046c0f2e0222206d9412fc9dd75e557ee4445ec69c564d334f1',
    'report-freeze-dmesg.txt.gz': '190370ea92d55435e73c61c09ebfd960ea0ac4f41318dae3f2ac00f81fffd9c8',
    'report-zoo-disk-kfault-freeze.txt.gz': '3391ebf23918e7ad4af0522e6a419884ea92e272a907d9a5d9f77aad2dea581c',
    'report-zoo-mem.txt.gz': 'f2c013fb4dc20d4bf81d34462cfea665c83b084a4211f983432206538391db6d',
    'report-zoo-mem-before.txt.gz': 'eea1a4d1a99e74f170800b748dc7753df6868c08e4f71f9fe3fbba36ec3a5c68',
    'report-freeze-early-press.txt.gz': 'e074cd80f98fcd0a97eaca9177d4b02fcce8dcfe8c2f5ec1465938e7a9d5eddc',
    'report-freeze.txt.gz': '8457720d63325aa6f011d3f12e3970b2327a9b18beb76f6de5fb405c349dd99f',
    'report-mem-fault-resume.txt.gz': 'e1401659e15447f3d01a72b0f007a982322385456b4b80793fa27afdeb12122a',
    'report-mem-fault-suspend.txt.gz': '092da2a08cad61b6aaf8ed425fa9de20cc524d9c8ad3d0f471eaaea4fb19c01b',
    'report-mem-rtc.txt.gz': 'beea5fa4a79999cf2ab5e910a58c1991fb6b54a675acbe389773a0ae57ace6f3',
    'report-mem-v1.txt.gz': '03d44263857103e6c8fe8138c65a45604b202e30ac73bf4e35e91657142ee334',
    'report-mem.txt.gz': '33b46e3ca15f526aab913b517f7c149a482fb3fea8cc1c38a91d53f2941eaa53',
    'report-pm_test-core.txt.gz': 'aacf4e01c697af009189369c41f2cf836aab596226aef5b92a5c3248261a8589',
    'report-pm_test-devices.txt.gz': 'b09c5413529d80e09d38848d3bbd0d5e19d0649dc68c020bc351a48ea8b1a98d',
    'report-pm_test-freezer.txt.gz': 'aecabc2fb446e2b99f757212cf7c61b73a1aabd8af9fc6b65d796504680a06dc',
    'report-disk-syscore-fail.txt.gz': 'e920eb67b276e3afb3b50b0b887fe74f172a5dd5854963dc752e4d71635bd293',
    'report-smp2-disk.txt.gz': 'ef3c044165e294c417fb76044d8634419ac1427f5ef7640cf9f7a9728cf81df0',
    'report-smp2-freeze.txt.gz': 'a44596d91578261982f80133c5221c5480650ab98e5cd5553dadebb11ba394b7',
    'report-smp2-mem.txt.gz': '016d9b1012c5bf920d293c1d9e1e522b2b7e59c48623164692b0c3a7b048fdd6',
    'report-smp2-mem-skew.txt.gz': '5439cdfdd28aabe01f0242b16ae155e5d4b1590d5943617b0f174babfcf0555a',
    'report-smp2-mem-tie.txt.gz': '5de6dbf24abb3bee0fa1c3f2a8293d8e81002f5166e5b3c68f1f9bd736c1f98f',
    'console-cycles.log.gz': '6a744be60673ca34d8c7b94da6787c0d528de9dce9ce3a0c1cb5362614032170',
    'console-hang.log.gz': 'fa16f9a7811f8b8196704de6db75fc74ba47db7ef99393f30c4c160d949064a7',
    'agent-stream.bin.gz': 'b985db0e5e04ea839a6b84f9d54a376e4968e17643f1ea3b3a96a6b98bc337f7',
}


def parsed(name):
    data = raw(name)
    if name.startswith("report-"):
        out = digestible(check_report(text_of(data)))
    elif name.startswith("console-"):
        out = check_console(text_of(data))
    else:
        out = check_agent(data)
    return hashlib.sha256(json.dumps(out, sort_keys=True, default=repr).encode()).hexdigest()


DIGESTED = REPORTS + CONSOLES + ["agent-stream.bin.gz"]  # the LAVA log's records: test_lava_jobs.py


@pytest.mark.parametrize("name", DIGESTED)
def test_untouched_recordings_parse_as_before(name):
    assert parsed(name) == DIGESTS.get(name), f"{name}: parser output changed (see DIGESTS)"


# ------------------------------------------------------------------ result files

@contextlib.contextmanager
def run_dir(**damage):
    """A run directory of the recorded run, with some files replaced."""
    directory = tempfile.mkdtemp(prefix="pmlab-fuzz-")
    try:
        run = os.path.join(directory, "commit-20261203-134133-23237")
        os.makedirs(run)
        for target, name in RUN_FILES.items():
            with open(os.path.join(run, target), "wb") as out:
                out.write(damage.get(target.split(".")[0], raw(name)))
        yield run
    finally:
        shutil.rmtree(directory)


def check_error_lines(errors, path, data, original):
    """Every error about `path` names a line of it that the damage touched.
    Lines end at LF only, as Python reads a file opened in binary mode."""
    kept = set(original.split(b"\n"))
    lines = data.split(b"\n")
    for error in errors:
        if error["file"] != path:
            continue
        assert isinstance(error["line"], int) and 1 <= error["line"] <= len(lines), error
        assert lines[error["line"] - 1] not in kept, error


@fuzz(50)
@given(damaged(raw(RUN_FILES["cycles.jsonl"])))
def test_dashboard_reads_damaged_cycles_with_file_and_line(data):
    with run_dir(cycles=data) as run:
        path = os.path.join(run, "cycles.jsonl")
        loaded = inputs.load([run])
        errors = loaded.sorted_errors()
        assert {e["file"] for e in errors} <= {path}
        check_error_lines(errors, path, data, raw(RUN_FILES["cycles.jsonl"]))
        dashboard = compute.build(loaded)
        compute.dumps(dashboard)
        assert dashboard["inputs"]["cycles"] <= 6


# Errors of json.loads that carry no position: it gave up on nesting too deep
# for its recursion or on a number too long for int().
NO_POSITION = ("maximum recursion depth", "integer string conversion")


def check_document_errors(errors, path, data):
    """summary.json / manifest.json: unreadable JSON names its line; a
    schema error names the file and where in the document."""
    lines = data.split(b"\n")
    for error in errors:
        assert error["file"] == path, error
        if any(text in error["message"] for text in NO_POSITION):
            assert error["line"] is None, error
        elif error["message"].startswith("unreadable JSON"):
            assert isinstance(error["line"], int) and 1 <= error["line"] <= len(lines), error
        else:
            assert error["line"] is None and ": " in error["message"], error


@fuzz(40)
@given(st.sampled_from(["summary", "manifest"]).flatmap(
    lambda which: st.tuples(st.just(which), damaged(raw(RUN_FILES[f"{which}.json"])))))
def test_dashboard_reads_damaged_summary_and_manifest(damage):
    which, data = damage
    with run_dir(**{which: data}) as run:
        loaded = inputs.load([run])
        check_document_errors(loaded.errors, os.path.join(run, f"{which}.json"), data)
        compute.dumps(compute.build(loaded))
        assert len(loaded.cycles) == 6


@fuzz(50)
@given(damaged(raw(RUN_FILES["cycles.jsonl"]), kinds=CUT_AND_SHUFFLE))
def test_read_cycles_survives_cuts_and_shuffles(data):
    original = [json.loads(line) for line in raw(RUN_FILES["cycles.jsonl"]).splitlines()]
    with run_dir(cycles=data) as run:
        records = read_cycles(os.path.join(run, "cycles.jsonl"))
    assert all(record in original for record in records)
    numbers = [record["cycle"] for record in records]
    assert numbers == sorted(set(numbers))


@fuzz(30)
@given(damaged(raw(RUN_FILES["cycles.jsonl"]), kinds=CUT_AND_SHUFFLE))
def test_merge_survives_a_damaged_shard(data):
    with run_dir(cycles=data) as shard, run_dir() as whole:
        out = os.path.join(os.path.dirname(shard), "merged")
        try:
            summary = merge_mod.merge(out, [shard, whole])
        except merge_mod.MergeError as error:
            assert shard in str(error) and whole in str(error), error
            return
        assert summary["cycles"] == 6
        assert read_cycles(os.path.join(out, "cycles.jsonl")) == \
            [dict(r, run_id="commit-20261203-134133-23237") for r in read_cycles(os.path.join(whole, "cycles.jsonl"))]


def _lava_entries():
    import yaml
    return yaml.safe_load(text_of(raw(LAVA_LOG)))


LAVA_PLAN = [(c.number, c.mode, c.knobs) for c in numbered_cycles(modes.plan(["mem/rtc", "disk", "mem/rtc"], None, None))]
LAVA_ENTRIES = _lava_entries()
LAVA_CONSOLE = "\n".join(e["msg"] for e in LAVA_ENTRIES if e.get("lvl") == "target").encode()


@fuzz(100)
@given(damaged(LAVA_CONSOLE))
def test_lava_records_survive_a_damaged_job_console(data):
    """lab/lava.py cycle_records on the recorded S3/S4/S3 job whose console
    (the framed reports, the kernel markers) the damage touched: every
    planned cycle gets one judged record or is lost (never begun), nothing raises."""
    others = [e for e in LAVA_ENTRIES if e.get("lvl") != "target"]
    entries = others + [{"dt": "2026-12-05T04:49:39.0", "lvl": "target", "msg": line}
                        for line in text_of(data).split("\n")]
    with tempfile.TemporaryDirectory() as directory:
        rundir = RunDir(directory, "r", link_latest=False)
        records, lost = lava.cycle_records(LAVA_PLAN, entries, "r", 1, {"state": "Finished"}, rundir, "q35-ovmf")
    numbers = [r["cycle"] for r in records] + [number for number, _, _ in lost]
    assert sorted(numbers) == [1, 2, 3]
    for record in records:
        assert record["verdict"] in ("pass", "fail", "hang", "error")
        json.dumps(record)



# ------------------------------------------------------------------ what the damage found
# Focused cases of each crash or hang the properties above found, fixed in
# the parser named.

LONG = 1_000_000


def test_trace_reads_long_blank_and_bracket_lines_in_linear_time():
    r"""lab/trace.py: LINE ("^\s*(.+?)-") and phase_of() (".*?\s*\[") were
    quadratic: 20 kB of blanks took seconds, a megabyte hours."""
    started = time.monotonic()
    assert trace.parse(" " * LONG + "\n" + "\t" * LONG) == []
    assert trace.phase_of(" " * LONG + "]") == " " * LONG + "]"
    assert trace.phase_of("[" * LONG + "]") == "complete"  # no info, verb "[[[...": as before
    assert trace.phase_of("x" + " " * LONG + "[suspend]") == "suspend"
    assert time.monotonic() - started < 10


def test_trace_and_pmtest_skip_numbers_int_refuses():
    """int() refuses more than 4300 digits: such a line is a corrupted one."""
    digits = "7" * 5000
    assert pmtest_log.parse(f"pmtest: seq={digits} t=1 dev=pmtest_full.0 cb=suspend event=suspend ret=0\n"
                            f"pmtest: seq=2 t=1 dev=pmtest_full.0 cb=resume event=resume ret=-{digits}") == []
    events = trace.parse(f"  sh-1 [{digits}] 1.000000: suspend_resume: dpm_suspend[{digits}] begin\n"
                         f"  sh-1 [000] 1.000000: suspend_resume: dpm_suspend[{digits}] begin\n"
                         f"  sh-1 [000] 1.000000: device_pm_callback_end: pmtest pmtest_full.0, err={digits}")
    assert len(events) == 2 and trace.markers(events) == [] and trace.callbacks(events) == {}
    calls = observe.from_pmtest(f"pmtest: seq=1 t=1 dev=pmtest_full.{digits} cb=suspend event=suspend ret=0")
    assert observe.pmtest_parents(calls, {}) == {}


def test_guest_report_survives_corrupted_counters():
    """lab/guest_report.py: a 5000-digit counter, a counter that is no number
    on one side only, an event count of superscript digits ("²".isdigit())."""
    digits = "7" * 5000
    assert guest_report.suspend_stats(f"/sys/power/suspend_stats/success:{digits}") == {"success": digits}
    assert guest_report.stats_delta({"success": "x", "fail": 0}, {"success": 3, "fail": 1}) == {"fail": 1}
    sources = guest_report.wakeup_sources("/sys/class/wakeup/wakeup0/name:PNP0C0C:00\n"
                                          "/sys/class/wakeup/wakeup0/event_count:\u00b2\n"
                                          "/sys/class/wakeup/wakeup1/name:LNXPWRBN:00\n"
                                          "/sys/class/wakeup/wakeup1/event_count:4\n")
    assert sources == {"LNXPWRBN:00": 4}


def test_agent_header_with_a_huge_number_is_noise():
    """lab/guest_agent.py: int() of a 5000-digit size killed the reader thread."""
    parser = ReplyParser()
    junk = b"@pmlab-reply 1 0 " + b"9" * 5000 + b"\n"
    assert parser.feed(junk + b"@pmlab-reply 2 0 2\nok") == [Reply(2, 0, "ok", b"ok")]
    assert parser.noise == junk


def test_dashboard_names_the_line_of_unreadable_summary_and_deep_cycles(tmp_path):
    """dashboards/inputs.py: unreadable summary.json had no line; a cycles.jsonl
    line nested deeper than json's recursion limit stopped the dashboard."""
    with run_dir(summary=b'{\n  "cycles": 2,\n  oops\n}\n',
                 manifest=b'{"schema": "pmlab-run-manifest/1",\n"host": "\xff"}',
                 cycles=b"[" * 100_000 + b"\n" + raw(RUN_FILES["cycles.jsonl"])) as run:
        errors = inputs.load([run]).sorted_errors()
        where = {(os.path.basename(e["file"]), e["line"]) for e in errors}
        assert where == {("cycles.jsonl", 1), ("manifest.json", 2), ("summary.json", 3)}, errors
        output = os.path.join(os.path.dirname(run), "dashboard.json")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            assert compute.main([run, "-o", output, "--strict"]) == 1
        assert f"{run}/summary.json:3: unreadable JSON: Expecting property name" in stderr.getvalue()
        assert f"{run}/cycles.jsonl:1: not JSON" in stderr.getvalue()


def test_merge_ignores_a_run_id_that_is_no_string():
    """pipelines/merge.py: sorted() of a str and an int run id raised TypeError."""
    assert merge_mod.common_run_id([{"run_id": "run-1"}, {"run_id": 7}]) == "run-1"
    with pytest.raises(merge_mod.MergeError, match="0 run ids"):
        merge_mod.common_run_id([{"run_id": ["a"]}])


@pytest.mark.parametrize("manifest", [b"[" * 100_000, b"[1]"], ids=["nested too deep", "not an object"])
def test_merge_skips_an_unreadable_manifest(manifest):
    """pipelines/common.py read_json let RecursionError out; merge took any
    JSON for a manifest (dict([1]) raised TypeError)."""
    with run_dir(manifest=manifest) as shard:
        out = os.path.join(os.path.dirname(shard), "merged")
        assert merge_mod.merge(out, [shard])["cycles"] == 6
        assert not os.path.exists(os.path.join(out, "manifest.json"))


# lab/records.py read_cycles skips a line that is not a record: JSON of
# another shape, one without an integer cycle, one nested too deep (each
# crashed it before). pipelines/merge.py reads shards through it.
READ_CYCLES_CRASHES = {
    "not an object": b"[1, 2]\n",
    "no cycle": b'{"run_id": "r", "status": "done", "mode": "mem", "verdict": "pass"}\n',
    "cycle not hashable": b'{"cycle": [1], "status": "done", "mode": "mem", "verdict": "pass"}\n',
    "nested too deep": b"[" * 100_000 + b"\n",
}


@pytest.mark.parametrize("line", READ_CYCLES_CRASHES.values(), ids=READ_CYCLES_CRASHES.keys())
def test_read_cycles_skips_a_line_of_another_shape(line):
    with run_dir(cycles=raw(RUN_FILES["cycles.jsonl"]) + line) as run:
        records = read_cycles(os.path.join(run, "cycles.jsonl"))
        assert len(records) == 6
        summarize(records + [{"cycle": 99, "status": "done"}])  # no mode, no verdict: counted, no crash

if __name__ == "__main__":
    for recording in DIGESTED:
        print(f"    {recording!r}: {parsed(recording)!r},")
