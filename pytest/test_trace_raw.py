"""lab.trace_raw: the guest's binary trace pages, rendered as the kernel's own
trace file. The recording is one real S3 sleep's buffer read twice in the
guest, first as `cat trace` text, then as guest/pmlab-evidence's pages
(pytest/recordings/record.py --trace-raw-only)."""

import random
import re
import struct

import pytest

from lab import guest_report, modes, trace, trace_raw
from lab.judge import judge
from recordings_util import read, read_bytes, records, report

PAGES = read_bytes("trace-raw-mem.bin.gz")
KERNEL_TEXT = read("trace-raw-mem.txt.gz")


def lines(text):
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_pages_render_exactly_as_the_kernel_printed_them():
    rendered, end = trace_raw.render(PAGES)
    assert end == len(PAGES)
    expected = lines(KERNEL_TEXT)
    assert len(expected) > 1000
    assert lines(rendered) == expected


def test_the_rendered_sleep_parses_as_a_full_s3_cycle():
    events = trace.parse(trace_raw.render(PAGES)[0])
    names = {event.name for event in events}
    assert names == {"suspend_resume", "device_pm_callback_start", "device_pm_callback_end",
                     "tracing_mark_write"}
    assert "machine_suspend" in trace.phases_reached(events)
    calls = trace.callbacks(events)
    assert len(calls) > 100 and not trace.failed_callbacks(calls)


def _items(data):
    files, pages, _ = trace_raw.items(data)
    return files, pages


def _pack(files, pages):
    out = bytearray(trace_raw.MAGIC)
    for name, text in files.items():
        body = text.encode()
        out += f"file {name} {len(body)}\n".encode() + body
    for cpu, page in pages:
        out += f"page {cpu} {len(page)}\n".encode() + page
    return bytes(out + b"end\n")


def test_pack_round_trip_is_the_recording():
    assert _pack(*_items(PAGES)) == PAGES


@pytest.mark.parametrize("cut", [0, 5, 40, 2000, len(PAGES) // 2, len(PAGES) - 3])
def test_cut_short_names_what_is_missing(cut):
    with pytest.raises(trace_raw.TraceRawError, match="cut short|expected an item header|no 'pmlab-traceraw"):
        trace_raw.render(PAGES[:cut])


def test_an_event_type_without_a_format_is_named():
    files, pages = _items(PAGES)
    files = {name: text for name, text in files.items() if "device_pm_callback_end" not in name}
    with pytest.raises(trace_raw.TraceRawError, match=r"an event of type \d+ with no format shipped"):
        trace_raw.render(_pack(files, pages))


def test_without_header_page_it_says_so():
    files, pages = _items(PAGES)
    del files["events/header_page"]
    with pytest.raises(trace_raw.TraceRawError, match="no events/header_page"):
        trace_raw.render(_pack(files, pages))


def test_a_page_with_lost_events_says_so():
    files, pages = _items(PAGES)
    cpu, page = pages[0]
    commit = struct.unpack_from("<Q", page, 8)[0] | (1 << 31)
    pages[0] = (cpu, page[:8] + struct.pack("<Q", commit) + page[16:])
    text = trace_raw.render(_pack(files, pages))[0]
    assert f"CPU:{cpu} [LOST EVENTS]" in text
    assert len(lines(text)) == len(lines(KERNEL_TEXT)) + 1


def test_action_strings_come_from_printk_formats():
    """suspend_resume's action is a pointer: without the table its address shows."""
    files, pages = _items(PAGES)
    files["printk_formats"] = ""
    text = trace_raw.render(_pack(files, pages))[0]
    assert re.search(r"suspend_resume: 0x[0-9a-f]+\[3\] begin", text)


def test_task_names_come_from_saved_cmdlines():
    files, pages = _items(PAGES)
    files["saved_cmdlines"] = ""
    first = lines(trace_raw.render(_pack(files, pages))[0])[0]
    assert first.split()[0].startswith("<...>-")


def test_flipped_bytes_give_text_or_a_named_error():
    """Corruption anywhere: the render either succeeds or raises TraceRawError."""
    rng = random.Random(7)
    for _ in range(300):
        data = bytearray(PAGES)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            trace_raw.render(bytes(data))
        except trace_raw.TraceRawError:
            pass


def raw_report(pages=PAGES):
    """The recorded S3 report as the guest now sends it: trace pages in place of text."""
    text = report("mem")
    head, _, rest = text.partition("=== trace\n")
    tail = rest[rest.index("=== pmtest_log"):]
    return head.encode() + b"=== trace_raw\n" + pages + tail.encode()


def test_a_report_with_pages_reads_as_a_report_with_text():
    parts = guest_report.sections(guest_report.from_bytes(raw_report()))
    assert lines(parts["trace"]) == lines(KERNEL_TEXT)
    assert list(parts) == ["before", "sysfs_before", "enter", "after", "sysfs_after", "trace",
                           "pmtest_log", "end"]
    assert parts["pmtest_log"] == guest_report.sections(report("mem"))["pmtest_log"]


def test_a_report_without_pages_is_its_text():
    assert guest_report.from_bytes(report("mem").encode()) == report("mem")


def test_undecodable_pages_make_the_cycle_a_lab_error_naming_why():
    broken = raw_report(PAGES[:3000] + b"\n")  # the helper's last line, cut in the middle
    parts = guest_report.sections(guest_report.from_bytes(broken))
    assert "trace" not in parts and "end" in parts and "pmtest_log" in parts
    assert re.match(r"expected an item header or 'end' at byte \d+|.* cut short", parts["trace_raw_error"])
    record = records()["mem"]
    result = judge(modes.parse_mode(record["mode"], record["wake"]), guest_report.from_bytes(broken), 0,
                   record["libvirt_events"], record["evidence"], record["timeline"],
                   record["token"], record["guest_boot_id"])
    assert (result["verdict"], result["phase"]) == ("error", "lab")
    assert result["reason"].startswith("the guest's trace pages could not be decoded: ")


def test_the_helpers_error_text_reaches_the_reason():
    """pmlab-evidence failing mid-way prints why on stderr, which the agent
    sends in the same stream: the decode error quotes it."""
    files, pages = _items(PAGES)
    partial = _pack(files, [])[:-len(b"end\n")] + b"pmlab-evidence: cannot open per_cpu: No such file\n"
    with pytest.raises(trace_raw.TraceRawError, match="cannot open per_cpu"):
        trace_raw.render(partial)
