"""The per-cycle timeline page (dashboards/timeline.py), from real recordings.

  /usr/bin/python3 -m pytest pytest/test_timeline.py -p no:cacheprovider

The model is checked against the lab's own parsers on the recorded guest
reports (phases, one row per device under its parent, bars whose durations
are the trace's end - start, the failing callback flagged); the page is
opened in headless Chromium (the helpers of test_dashboard_page.py): bars
drawn as the model says, the failing callback highlighted, guest strings
(a <script> device name, an <img onerror> console line) shown as text. A
copy of the page that uses innerHTML shows the checks fail when they should.
A dashboard over a recorded run links the failing cycles' pages.

Set PMLAB_TIMELINE_SCREENSHOT=/path.png to keep the fault-suspend screenshot.
"""

import copy
import gzip
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from dashboards import compute, render, testing, timeline
from lab import guest_report, records, trace
from lab.oracle import observe
from recorded_run import make_run_dir
from recordings_util import RECORDINGS, report
from test_dashboard_page import Dom, chromium, console_messages, read_png

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT_DEVICE = "<script>document.title=\"pwned\"</script>"
IMG_LINE = "[   12.998770] <img src=x onerror=\"document.title='pwned'\"> " + SCRIPT_DEVICE + ": PM: failed"
FAILING = {"mem-fault-suspend": ("pmtest_legacy.6 (pmtest_legacy)", "bus[suspend]", -5),
           "mem-fault-resume": ("0000:00:10.0 (pmtest_edu)", "bus[resume]", -5)}


def recorded(name):
    """The recorded record of a recording (with its report's name)."""
    with open(os.path.join(RECORDINGS, "cycles.jsonl")) as source:
        return next(r for r in map(json.loads, source) if r.get("recording") == name)


def all_calls(data):
    return [(row, call) for row in data["rows"] for call in row["calls"]]


# ------------------------------------------------------------------ the model

@pytest.mark.parametrize("name", ["mem-fault-suspend", "mem-fault-resume", "disk"])
def test_model_follows_the_trace(name):
    text = report(name)
    data = timeline.model(recorded(name), text)
    events = trace.parse(guest_report.sections(text)["trace"])
    marks = trace.markers(events)
    t0 = min([m[0] for m in marks] + [c["t"] for calls in trace.callbacks(events).values() for c in calls])
    # phases: every suspend_resume begin, in order, ending at its end marker
    assert [p["name"] for p in data["phases"]] == [m[1] for m in marks if m[3]]
    assert "dpm_suspend" in [p["name"] for p in data["phases"] if p["device_phase"]]
    for phase in data["phases"]:
        begin = next(m for m in marks if m[1] == phase["name"] and m[3] and round((m[0] - t0) * 1000, 3)
                     == phase["start_ms"])
        end = next(m for m in marks if m[1] == phase["name"] and not m[3] and m[0] >= begin[0])
        assert phase["end_ms"] == round((end[0] - t0) * 1000, 3)
    # rows: one per device of the trace, every callback, durations end - start
    sequences = trace.callbacks(events)
    assert sorted(row["device"] for row in data["rows"]) == sorted(sequences)
    assert len(data["rows"]) > 100
    for row in data["rows"]:
        calls = sequences[row["device"]]
        assert [c["cb"] for c in row["calls"]] == [c["cb"] for c in calls]
        for drawn, call in zip(row["calls"], calls):
            assert drawn["us"] == call["us"] and drawn["err"] == call["err"]
            assert drawn["start_ms"] == round((call["t"] - t0) * 1000, 3)
            if call["us"] is not None:
                assert abs((drawn["end_ms"] - drawn["start_ms"]) * 1000 - call["us"]) < 2.0  # ms rounded to 1 us
    # grouped by parent: the parent the trace names comes first, one level up
    _, parents = observe.from_trace(guest_report.sections(text)["trace"])
    position = {row["device"]: index for index, row in enumerate(data["rows"])}
    nested = 0
    for index, row in enumerate(data["rows"]):
        assert row["parent"] == parents.get(row["device"])
        holders = [r for r in data["rows"] if r["name"] == row["parent"] and r["device"] != row["device"]]
        if holders:
            nested += 1
            holder = holders[0]
            assert position[holder["device"]] < index and row["depth"] == holder["depth"] + 1
            assert row["parent_row"] == position[holder["device"]]
        else:
            assert row["depth"] == 0 and row["parent_row"] is None
    assert nested > 50
    # the failing callback, and only it, flagged
    failed = [(row["device"], call["cb"], call["err"]) for row, call in all_calls(data) if call["failed"]]
    assert failed == ([FAILING[name]] if name in FAILING else [])
    assert [row["device"] for row in data["rows"] if row["failed"]] == [f[0] for f in failed]


def test_model_places_pmtest_records_and_console_lines():
    data = timeline.model(recorded("mem-fault-suspend"), report("mem-fault-suspend"))
    (row,) = [r for r in data["rows"] if r["failed"]]
    (call,) = [c for c in row["calls"] if c["failed"]]
    assert call["pmtest"] == ["seq=1130 pmtest_legacy.6 cb=suspend event=suspend ret=-5"]
    placed = sum(len(c["pmtest"]) for _, c in all_calls(data))
    assert placed == 31 and data["pmtest_unplaced"] == []  # every record of the log, in the call it ran in
    assert any("dpm_run_callback(): platform_pm_suspend+0x0/0x2a returns -5" in line for line in row["console"])
    # pmtest_legacy.6 is not pmtest_legacy.60's, nor another device's line
    other = next(r for r in data["rows"] if r["name"] == "pmtest_legacy.5")
    assert other["console"] == []
    lines = ["a pmtest_full.10: x", "b pmtest_full.1: y.", "c /devices/platform/pmtest_full.1/z", "d (pmtest_full.1)",
             "e pmtest_full.1.", "f pmtest_full.1.2"]
    index = timeline.console_index(lines)
    assert timeline.lines_naming("pmtest_full.1", lines, index) == [lines[1], lines[3], lines[4]]
    assert timeline.lines_naming("<b>x</b>", ["1 <b>x</b>: y", "2 <b>x</b>z"], {}) == ["1 <b>x</b>: y"]

def test_records_on_the_trace_clock_are_placed_without_their_trace_copy():
    """Guests now leave pmtest:pmtest_callback off and pmtest stamps t with
    the trace clock: the same recording rewritten that way (t = the trace
    copy's time, the copies removed) places every record in the same call."""
    text = report("mem-fault-suspend")
    at = {}
    for event in trace.parse(guest_report.sections(text)["trace"]):
        if event.name == "pmtest_callback":
            at[event.body.split()[0]] = round(event.ts * 1e9)
    assert len(at) == 31
    lines = []
    for line in text.splitlines():
        if "pmtest_callback:" in line:
            continue
        seq = line.split()[1] if line.startswith("pmtest: seq=") else None
        if seq in at:
            line = re.sub(r" t=\d+ ", f" t={at[seq]} ", line)
        lines.append(line)
    rewritten = "\n".join(lines) + "\n"
    assert "pmtest_callback" not in rewritten
    before = timeline.model(recorded("mem-fault-suspend"), text)
    after = timeline.model(recorded("mem-fault-suspend"), rewritten)
    placed = [(row["device"], call["cb"], call["pmtest"]) for row, call in all_calls(before) if call["pmtest"]]
    assert len([p for _, _, records in placed for p in records]) == 31
    assert [(row["device"], call["cb"], call["pmtest"]) for row, call in all_calls(after) if call["pmtest"]] == placed
    assert after["pmtest_unplaced"] == []



def test_model_marks_oracle_violations_at_their_calls():
    text = report("mem-fault-resume")
    record = copy.deepcopy(recorded("mem-fault-resume"))
    calls, _ = observe.from_trace(guest_report.sections(text)["trace"])
    target = next(c for c in calls if c.device == "pmtest_full.3 (pmtest_full)" and c.callback == "suspend_late")
    pmtest_line = str(next(c for c in observe.from_pmtest(guest_report.sections(text)["pmtest_log"])
                           if c.device == "pmtest_full.2" and c.callback == "resume"))
    record["ordering_violations"] = [
        {"rule": "parent-before-child", "device": target.device, "message": "made up for the test",
         "context": [str(target)]},
        {"rule": "child-before-parent", "device": "pmtest_full.2", "message": "from the pmtest log",
         "context": [pmtest_line]}]
    data = timeline.model(record, text)
    marked = [(row["device"], call["cb"], call["violations"]) for row, call in all_calls(data) if call["violations"]]
    assert (target.device, "late driver[suspend]", [0]) in marked
    assert any(device == "pmtest_full.2 (pmtest_full)" and numbers == [1] for device, _, numbers in marked), marked
    assert len(marked) == 2
    assert {row["device"]: row["violations"] for row in data["rows"] if row["violations"]} == \
        {"pmtest_full.2 (pmtest_full)": [1], target.device: [0]}


# ------------------------------------------------------------------ the run directory

def test_missing_or_malformed_reports_are_named_and_skipped(tmp_path):
    run = make_run_dir(tmp_path / "run")
    cycles_before = (run / "cycles.jsonl").read_bytes()
    os.remove(run / "reports" / "cycle9.txt.gz")
    (run / "reports" / "cycle10.txt.gz").write_bytes(b"not gzip at all")
    shutil.copyfile(os.path.join(RECORDINGS, "report-mem-fault-suspend.txt.gz"), run / "reports" / "cycle3.txt.gz")
    warned = []
    written = timeline.write_run(str(run), warn=warned.append)
    # the hang has no report: its page is drawn from the record alone
    assert written == {("recording", 200): str(run / "timelines" / "cycle-0200.html")}
    assert len(warned) == 2 and "cycle 9: report reports/cycle9.txt.gz unreadable" in warned[0]
    assert "No such file" in warned[0] and "cycle 10: report reports/cycle10.txt.gz unreadable" in warned[1]
    # a report without a trace
    with gzip.open(run / "reports" / "cycle10.txt.gz", "wt") as out:
        out.write("=== before\nx=1\n=== end\n")
    warned = []
    assert timeline.write_run(str(run), [10, 3, 404], warn=warned.append) == \
        {("recording", 3): str(run / "timelines" / "cycle-0003.html")}  # a passing cycle, asked for
    assert warned == [f"timeline: {run} cycle 10: the report has no '=== trace' section",
                      f"timeline: {run} has no cycle 404"]
    assert (run / "cycles.jsonl").read_bytes() == cycles_before


def test_pmlab_timeline_prints_the_page(tmp_path):
    run = make_run_dir(tmp_path / "run")
    done = subprocess.run([os.path.join(REPO, "pmlab"), "timeline", str(run), "9"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{run}/timelines/cycle-0009.html\n"
    page = (run / "timelines" / "cycle-0009.html").read_text()
    assert "pmlab-timeline/1" in page and "<script src" not in page and "http" not in page.replace(
        "http-equiv", "").replace("http://www.w3.org/2000/svg", "")
    os.remove(run / "reports" / "cycle10.txt.gz")
    done = subprocess.run([os.path.join(REPO, "pmlab"), "timeline", str(run)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout == f"{run}/timelines/cycle-0009.html\n{run}/timelines/cycle-0200.html\n"  # 200: the hang
    assert f"timeline: {run} cycle 10: report reports/cycle10.txt.gz unreadable" in done.stderr


def test_a_hang_gets_a_page_from_its_record(tmp_path):
    """A hang has no guest report (the host's watch decided it): with a dump
    that holds no trace (no sysrq 'z'; test_hang.py draws one that does) its
    page says why there is no trace, what the host saw and links the dump."""
    run = make_run_dir(tmp_path / "run")
    hang = recorded("hang")
    shutil.copyfile(os.path.join(RECORDINGS, "hang-dump.txt"), run / hang["hang_dump"])
    path = timeline.write_run(str(run), [200])[("recording", 200)]
    data = json.loads(re.search(r'id="timeline-data">(.*?)</script>', open(path).read(), re.S).group(1))
    assert data["no_trace"] == timeline.NO_TRACE_IN_DUMP and data["rows"] == [] and data["state"] == "hang"
    assert data["cycle"]["reason"] == "guest not asleep (no PMSuspended event) within 10s"
    assert data["host_steps"] == [["sent", 0.002]]
    assert data["hang_dump"] == "../" + hang["hang_dump"] and os.path.isfile(run / "timelines" / data["hang_dump"])
    assert data["console"] == hang["evidence"] and data["console"]


def test_every_errno_is_named_one_way():
    assert trace.errno_text(-5) == "EIO (-5)"
    assert trace.errno_text(-517) == "EPROBE_DEFER (-517)"  # the kernel's own, unknown to user space
    assert trace.errno_text(-600) == "-600"
    data = timeline.model(recorded("mem-fault-suspend"), report("mem-fault-suspend"))
    assert [f["err_text"] for f in data["failed_callbacks"]] == ["EIO (-5)"]
    assert [c["err_text"] for _, c in all_calls(data) if c["failed"]] == ["EIO (-5)"]
    from lab import judge, modes
    from dashboards import buckets, inputs
    record = recorded("mem-fault-suspend")
    again = judge.judge_with_order(modes.parse_mode("mem", record.get("wake")), report("mem-fault-suspend"),
                                   record.get("report_status", 0), records.host_events(record),
                                   record.get("evidence") or [], record.get("timeline") or [],
                                   record.get("token"), record.get("guest_boot_id"))
    assert "pmtest_legacy.6 (pmtest_legacy) bus[suspend] EIO (-5)" in again["reason"]  # the terminal's line
    bucket = buckets.verdict_bucket(dict(inputs.normalise(record, "r", None), callback_errors=[]))
    assert bucket.endswith(":EIO (-5)")  # the dashboard's


def test_a_page_drawn_for_a_dashboard_links_back_to_it(tmp_path):
    run = make_run_dir(tmp_path / "results" / "run")
    board = {"failures": {"cycles": [{"run_id": "recording", "cycle": 9}]}}
    (path,) = timeline.for_dashboard([str(run)], board, page=str(tmp_path / "results" / "dashboard.html")).values()
    assert timeline.dashboard_marker("../../dashboard.html") in open(path).read()
    drawn = os.path.getmtime(path)
    os.utime(path, (drawn, drawn + 1000))  # newer than what it is drawn from: only the link can redraw it
    timeline.for_dashboard([str(run)], board, page=str(run / "dashboard.html"))
    assert timeline.dashboard_marker("../dashboard.html") in open(path).read()


# ------------------------------------------------------------------ in Chromium

def hostile_run(base):
    """A run of one failing cycle (the fault-suspend recording) whose failing
    device is named like a script tag and whose console holds an <img>."""
    run = base / "hostile"
    (run / "reports").mkdir(parents=True)
    record = copy.deepcopy(recorded("mem-fault-suspend"))
    record["reason"] = record["reason"].replace("pmtest_legacy.6", SCRIPT_DEVICE)
    record["evidence"] = [line.replace("pmtest_legacy.6", SCRIPT_DEVICE) for line in record["evidence"]] + [IMG_LINE]
    text = report("mem-fault-suspend").replace("pmtest_legacy.6", SCRIPT_DEVICE)
    with gzip.open(run / record["report"], "wt") as out:
        out.write(text)
    records.write_cycles(records.cycles_path(str(run)), [record])
    return run, timeline.model(record, text)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    run, data = hostile_run(tmp_path_factory.mktemp("timeline"))
    (path,) = timeline.write_run(str(run)).values()
    return path, data


def problems_of(dom, stderr, data):
    """What is wrong with a loaded timeline page; empty if nothing."""
    found = [f"console: {message}" for message in console_messages(stderr)]
    (body,) = dom.attrs_of("body")
    if body.get("data-drawn") != "ready":
        found.append(f"not drawn: data-drawn={body.get('data-drawn')!r}")
    if "data-errors" in body:
        found.append(f"page caught {body['data-errors']} errors")
    calls = all_calls(data)
    bars = [attrs for attrs in dom.attrs_of("rect") if "bar" in attrs.get("class", "").split()]
    if len(bars) != len(calls) or body.get("data-bars") != str(len(calls)):
        found.append(f"{len(bars)} bars drawn (data-bars={body.get('data-bars')}), the model has {len(calls)}")
    failed = [attrs for attrs in bars if "failed" in attrs["class"].split()]
    want = [(row["device"], call["cb"]) for row, call in calls if call["failed"]]
    got = [(data["rows"][int(a["data-row"])]["device"], data["rows"][int(a["data-row"])]["calls"][int(a["data-call"])]
            ["cb"]) for a in failed]
    if not want or got != want:
        found.append(f"failed bars {got}, want {want}")
    if len([a for a in dom.attrs_of("rect") if a.get("class") == "failed-ring"]) != len(want):
        found.append("the failing callback is not ringed")
    # guest text: present as text, never as markup
    for tag, attrs, _ in dom.elements:
        if tag in ("img", "b"):
            found.append(f"guest markup became an element: <{tag} {attrs}>")
    scripts = dom.attrs_of("script")
    if len(scripts) != 2:  # a <script> from guest text has no attributes either: count them
        found.append(f"guest markup became an element: {len(scripts)} script elements, want the data and "
                     "the page's own")
    if IMG_LINE not in dom.texts_in("console"):
        found.append("the <img> console line is not shown as text in the console list")
    if not any(SCRIPT_DEVICE in text and IMG_LINE in text for text in dom.texts_in("rows")):
        found.append("the device's row does not carry its name and console line as text")
    if not any(f"failed callback: {SCRIPT_DEVICE} (pmtest_legacy) bus[suspend] err=EIO (-5)" in text
               for text in dom.texts_in("findings-list")):
        found.append("the <script> device name is not shown as text among the findings")
    if "pwned" in document_title(dom):
        found.append("an injected script ran")
    return found


def document_title(dom):
    """The <head>'s title (the SVG's <title> elements hold guest text)."""
    return "".join(text for text, _, tags in dom.texts if tags[-2:] == ["head", "title"])


def load(html_path):
    stdout, stderr = chromium("file://" + html_path, "--dump-dom", "--window-size=1400,1000")
    return Dom(stdout), stderr


@pytest.mark.browser
def test_page_draws_highlights_and_escapes(hostile):
    path, data = hostile
    dom, stderr = load(path)
    assert problems_of(dom, stderr, data) == []
    (body,) = dom.attrs_of("body")
    assert int(body["data-rows"]) == len(data["rows"]) > 100
    # phases drawn: a band per device phase, labelled on the axis
    bands = [a for a in dom.attrs_of("rect") if a.get("class") == "band"]
    assert len(bands) == len([p for p in data["phases"] if p["device_phase"]]) == 4
    assert {"prepare", "suspend", "complete"} <= set(dom.texts_in("axis"))
    assert "20 ms" in dom.texts_in("axis")


def failing_call(data):
    """'ROW.CALL' of the model's failing callback."""
    ((row, call),) = [(r, c) for r, row in enumerate(data["rows"]) for c, call in enumerate(row["calls"])
                      if call["failed"]]
    return f"{row}.{call}"


@pytest.mark.browser
def test_tooltip_shows_the_calls_pmtest_record_and_console_lines(hostile):
    path, data = hostile
    dom, stderr = load(path + "#call=" + failing_call(data))
    assert problems_of(dom, stderr, data) == []
    (tip,) = [attrs for tag, attrs, _ in dom.elements if attrs.get("id") == "tooltip"]
    assert "hidden" not in tip
    lines = dom.texts_in("tooltip")
    assert lines[0] == f"{SCRIPT_DEVICE} (pmtest_legacy)   parent: pmtest_legacy.2"
    assert lines[1].startswith("bus[suspend]  (suspend)  199.0 \u00b5s  err=EIO (-5)  FAILED")
    assert f"pmtest seq=1130 {SCRIPT_DEVICE} cb=suspend event=suspend ret=-5" in lines
    assert f"console {IMG_LINE}" in lines
    assert any("dpm_run_callback(): platform_pm_suspend+0x0/0x2a returns -5" in line for line in lines)


@pytest.mark.browser
def test_the_checks_catch_html_injection(hostile, tmp_path, monkeypatch):
    """The same checks on a page whose script uses innerHTML: they fail."""
    _, data = hostile
    page_dir = tmp_path / "page"
    shutil.copytree(timeline.PAGE, page_dir)
    script = page_dir / timeline.SCRIPT
    code = script.read_text()
    assert code.count("node.textContent = String(text);") == 2  # el() and svg()
    script.write_text(code.replace("node.textContent = String(text);", "node.innerHTML = String(text);"))
    monkeypatch.setattr(timeline, "PAGE", str(page_dir))
    run, _ = hostile_run(tmp_path)
    (path,) = timeline.write_run(str(run)).values()
    dom, stderr = load(path)
    found = problems_of(dom, stderr, data)
    assert any("became an element: <img" in problem for problem in found), found
    assert any("<script> device name is not shown" in problem for problem in found), found


@pytest.mark.browser
def test_screenshot_of_the_fault_suspend_cycle(tmp_path):
    run = make_run_dir(tmp_path / "run")
    path = timeline.write_run(str(run), [9])[("recording", 9)]
    shot = tmp_path / "timeline.png"
    call = failing_call(timeline.model(recorded("mem-fault-suspend"), report("mem-fault-suspend")))
    _, stderr = chromium("file://" + path + "#min-us=100&call=" + call, f"--screenshot={shot}",
                         "--window-size=1400,1000")
    assert console_messages(stderr) == []
    width, height, bpp, rows = read_png(str(shot))
    assert (width, height) == (1400, 1000)
    pixels = {}
    for row in rows[::2]:
        for x in range(0, width * bpp, 2 * bpp):
            colour = row[x:x + 3]
            pixels[colour] = pixels.get(colour, 0) + 1
    assert pixels.get(bytes((0xd9, 0x30, 0x25)), 0) > 3  # the failed bar's red
    assert pixels.get(bytes((0x88, 0xff, 0x88)), 0) > 50  # dpm_suspend's green on the phase track
    assert pixels.get(bytes((0x54, 0x70, 0xc6)), 0) > 20  # callback bars
    keep = os.environ.get("PMLAB_TIMELINE_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


# ------------------------------------------------------------------ the dashboard links

@pytest.fixture(scope="module")
def linked_dashboard(tmp_path_factory):
    """./pmlab dashboard over a recorded run whose records carry callbacks."""
    results = tmp_path_factory.mktemp("results")
    recorded_records = [r for r in testing.with_callbacks(testing.recorded_records()) if r.get("recording")]
    run_dir = testing.write_run(str(results), "recording", recorded_records)
    os.makedirs(os.path.join(run_dir, "reports"), exist_ok=True)
    for record in recorded_records:
        if record.get("report"):
            shutil.copyfile(os.path.join(RECORDINGS, f"report-{record['recording']}.txt.gz"),
                            os.path.join(run_dir, record["report"]))
    done = subprocess.run([os.path.join(REPO, "pmlab"), "dashboard", "--results", str(results)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(results / "dashboard.json") as source:
        return results, json.load(source), done.stderr


def test_dashboard_draws_the_pages_it_links(linked_dashboard):
    results, board, stderr = linked_dashboard
    page = (results / "dashboard.html").read_text()
    start = page.index('id="timeline-links">') + len('id="timeline-links">')
    links = json.loads(page[start:page.index("</script>", start)])
    failing = {f"{c['run_id']}/{c['cycle']}" for c in board["failures"]["cycles"]}
    slowest = {f"{r['max_at']['run_id']}/{r['max_at']['cycle']}" for r in board["latency"]["top_p95"]}
    assert failing == {"recording/9", "recording/10", "recording/200"} and slowest
    assert set(links) == failing | slowest
    for href in links.values():
        assert href.startswith("recording/timelines/cycle-") and os.path.isfile(results / href)
    assert "cycle 200" not in stderr  # the hang without a report: drawn from its record
    # drawn again only when what a page is drawn from changed
    nine = results / links["recording/9"]
    os.utime(nine, (1e9, 4e9))  # newer than anything: kept as it is
    again = timeline.for_dashboard([str(results)], board, page=str(results / "dashboard.html"))
    assert set(again) == {tuple([k.split("/")[0], int(k.split("/")[1])]) for k in links}
    assert os.path.getmtime(nine) == 4e9
    os.utime(nine, (1e9, 1e9))  # older than its report: drawn again
    timeline.for_dashboard([str(results)], board, page=str(results / "dashboard.html"))
    assert abs(os.path.getmtime(nine) - time.time()) < 600
    # max_at names the cycle of the slowest call
    with_callbacks = testing.with_callbacks(testing.recorded_records())
    for row in board["latency"]["top_p95"]:
        cycle = next(r for r in with_callbacks if r["cycle"] == row["max_at"]["cycle"])
        device_calls = [c for c in cycle["callbacks"].get(row["device"], ())
                        if compute.buckets.callback_phase(c["cb"]) == row["phase"]]
        assert any(c["us"] is not None and round(c["us"], 1) == row["max"] for c in device_calls), row


@pytest.mark.browser
def test_dashboard_page_links_the_failing_cycle(linked_dashboard):
    results, board, _ = linked_dashboard
    dom, stderr = load(str(results / "dashboard.html"))
    assert console_messages(stderr) == []
    anchors = [(attrs.get("href"), ids) for tag, attrs, ids in dom.elements if tag == "a"]
    to_nine = "recording/timelines/cycle-0009.html"
    assert any(href == to_nine and "table-failures" in ids for href, ids in anchors), anchors
    assert any(href == to_nine and "table-buckets" in ids for href, ids in anchors), anchors
    slowest = board["latency"]["top_p95"][0]["max_at"]
    assert any(href == f"recording/timelines/cycle-{slowest['cycle']:04d}.html" and "table-latency" in ids
               for href, ids in anchors), anchors
    # the linked page itself draws
    page_dom, page_stderr = load(str(results / to_nine))
    (body,) = page_dom.attrs_of("body")
    assert body.get("data-drawn") == "ready" and console_messages(page_stderr) == []


@pytest.mark.browser
def test_dashboard_leads_to_the_failure_and_its_page_leads_back(linked_dashboard):
    """What a newcomer sees first: the pass/fail headline per mode, then the
    cycles that did not pass, each linked to its page (the hang's too),
    which links back to the dashboard."""
    results, board, _ = linked_dashboard
    dom, stderr = load(str(results / "dashboard.html"))
    assert console_messages(stderr) == []
    sections = [attrs.get("id") for tag, attrs, _ in dom.elements if tag == "section"]
    assert sections[:2] == ["headline-section", "failures-section"], sections
    (headline,) = dom.texts_in("headline")
    assert headline == "FAIL: mem fails on the newest build"
    since = board["trends"]["modes"]["mem"]["failing_since"]
    anchors = [(attrs.get("href"), ids) for tag, attrs, ids in dom.elements if tag == "a"]
    assert (f"recording/timelines/cycle-{since['cycle']:04d}.html", ["headline-section", "table-headline"]) in \
        [(href, ids[-2:]) for href, ids in anchors]  # "failing since", linked to that cycle's page
    failures = {href for href, ids in anchors if "table-failures" in ids}
    assert failures == {f"recording/timelines/cycle-{n:04d}.html" for n in (9, 10, 200)}
    for number in (9, 200):  # a failing cycle, and the hang without a report
        page_dom, page_stderr = load(str(results / "recording" / "timelines" / f"cycle-{number:04d}.html"))
        (body,) = page_dom.attrs_of("body")
        assert body.get("data-drawn") == "ready" and "data-errors" not in body and console_messages(page_stderr) == []
        (back,) = [attrs for tag, attrs, _ in page_dom.elements if attrs.get("id") == "dashboard-link"]
        assert back["href"] == "../../dashboard.html" and os.path.isfile(results / "recording" / "timelines" /
                                                                          back["href"])
    assert "no guest report" in " ".join(page_dom.texts_in("no-trace"))
    assert any("guest not asleep" in text for text in page_dom.texts_in("findings-list"))


def test_render_links_are_relative_and_quoted(tmp_path):
    out = str(tmp_path / "site")
    got = render.links({("run a", 3): str(tmp_path / "run a" / "timelines" / "cycle-0003.html")}, out)
    assert got == {"run a/3": "../run%20a/timelines/cycle-0003.html"}


def test_page_code_uses_no_html_sinks():
    with open(os.path.join(timeline.PAGE, timeline.SCRIPT)) as source:
        code = source.read()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in code.replace("never innerHTML", ""), sink
