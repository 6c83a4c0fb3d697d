"""The dashboard page in a real headless Chromium (Debian's chromium).

  /usr/bin/python3 -m pytest pytest/test_dashboard_page.py -p no:cacheprovider
  /usr/bin/python3 -m pytest pytest/ -m 'not browser'      (everything else)

The page is rendered from recorded cycles (dashboards/testing.py) plus
hostile strings where a guest controls the text (a device name, a failure
reason, a console line), then opened from file:// with --dump-dom (the DOM
after scripts ran) and --screenshot. Checked: no console messages at all, the
page's own "all charts drawn" mark, guest strings present as text and never
as elements, and a screenshot with the charts' colours in it. Two checks are
run against broken copies of the page (Chart.js missing; innerHTML instead of
textContent) to show they fail when they should.

Set PMLAB_DASHBOARD_SCREENSHOT=/path.png to keep the screenshot.
"""

import copy
import html.parser
import os
import re
import shutil
import struct
import subprocess
import tempfile
import warnings
import zlib

import pytest

from dashboards import compute, render, testing

with warnings.catch_warnings():  # "browser" is registered by no conftest yet: no warning for it
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars", "--virtual-time-budget=10000"]
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\] (.*)")
SCRIPT_DEVICE = "<script>alert(1)</script>"
IMG_REASON = "callbacks returned errors: <img src=x onerror=\"document.title='pwned'\">"
BOLD_LINE = "[   22.8] <b>bold</b> & pmtest_edu 0000:00:10.0: PM: dpm_run_callback(): returns -5"
HOSTILE_STEP = "report-<i>ended</i>"
CANVASES = 6
MODE_COLOURS = [(0x33, 0x67, 0xd6), (0xe8, 0x71, 0x0a), (0x18, 0x80, 0x38)]


def chromium(url, *extra, timeout=120):
    """(stdout, stderr) of one headless Chromium run with a fresh profile."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} missing: run lab/install-deps (Debian package chromium)")
    profile = tempfile.mkdtemp(prefix="pmlab-chromium-")
    try:
        done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                              capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def console_messages(stderr):
    return [match.group(1) for match in map(CONSOLE.search, stderr.splitlines()) if match]


class Dom(html.parser.HTMLParser):
    """The dumped DOM: every element (tag, attrs, path of ids) and every text
    node with the ids of the elements around it."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.elements, self.texts, self.stack = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs, [a.get("id") for _, a in self.stack if a.get("id")]))
        if tag not in self.VOID:
            self.stack.append((tag, attrs))

    def handle_endtag(self, tag):
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                break

    def handle_data(self, data):
        if data.strip():
            self.texts.append((data, [a.get("id") for _, a in self.stack if a.get("id")],
                               [t for t, _ in self.stack]))

    def attrs_of(self, tag):
        return [attrs for t, attrs, _ in self.elements if t == tag]

    def texts_in(self, element_id):
        return [text for text, ids, _ in self.texts if element_id in ids]

    def title(self):
        return "".join(text for text, _, tags in self.texts if tags and tags[-1] == "title")


def hostile_records(recorded):
    """Recorded cycles plus guest-controlled text no page may interpret."""
    records = [dict(r, run_id="20261203-130000-1") for r in recorded]
    slow = next(copy.deepcopy(r) for r in records if r["cycle"] == 1)
    slow.update(cycle=11, host_start="2026-12-03T13:06:52.000+00:00")
    slow["host_phases"][HOSTILE_STEP] = 0.25
    slow["callbacks"][SCRIPT_DEVICE] = [{"cb": "bus[suspend]", "driver": "<i>drv</i>", "t": 6.3, "us": 900000.0,
                                         "err": 0}]
    failed = next(copy.deepcopy(r) for r in records if r["cycle"] == 10)
    failed.update(cycle=12, host_start="2026-12-03T13:06:53.000+00:00", reason=IMG_REASON, problems=[BOLD_LINE])
    failed["callbacks"][SCRIPT_DEVICE] = [{"cb": "bus[resume]", "driver": None, "t": 6.9, "us": 10.0, "err": -5}]
    return [dict(r, harness_pid=4242, harness_rss_kib=40000 + 16 * r["cycle"]) for r in records + [slow, failed]]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A rendered dashboard page over two builds, one malformed line included."""
    base = tmp_path_factory.mktemp("page")
    results = str(base / "results")
    recorded = testing.with_host_phases(testing.with_callbacks(testing.recorded_records()))
    testing.write_run(results, "20261203-130000-1", hostile_records(recorded), manifest=testing.manifest("a" * 40))
    later = []
    for record in recorded:
        record = dict(copy.deepcopy(record), run_id="20261204-090000-2", harness_pid=5151, harness_rss_kib=39000)
        record["host_start"] = record["host_start"].replace("2026-12-03", "2026-12-04")
        later.append(record)
    run_dir = testing.write_run(results, "20261204-090000-2", later, manifest=testing.manifest("b" * 40))
    with open(os.path.join(run_dir, "cycles.jsonl"), "a") as out:
        out.write('{"run_id": "20261204-090000-2", "cycle": 77, "status": "do')
    out_dir = base / "site"
    out_dir.mkdir()
    board = compute.compute([results])
    assert len(board["input_errors"]) == 1 and board["trends"]["builds"][1]["commit"] == "b" * 40
    (out_dir / "dashboard.json").write_text(compute.dumps(board))
    return render.render(str(out_dir / "dashboard.json")), board


def problems_of(dom, stderr):
    """What is wrong with a loaded page; empty if nothing."""
    found = [f"console: {message}" for message in console_messages(stderr)]
    (body,) = dom.attrs_of("body")
    if body.get("data-charts") != "ready":
        found.append(f"charts not drawn: data-charts={body.get('data-charts')!r}")
    if body.get("data-chart-count") != str(CANVASES):
        found.append(f"data-chart-count={body.get('data-chart-count')!r}, want {CANVASES}")
    if "data-errors" in body:
        found.append(f"page caught {body['data-errors']} errors")
    if dom.title() != f"pmlab dashboard ({CANVASES} charts)":
        found.append(f"title {dom.title()!r}")
    # guest text: present as text, never as markup
    for tag, attrs, _ in dom.elements:
        if tag == "img" or tag in ("b", "i") or (tag == "script" and "src" not in attrs and attrs.get("id") not in
                                                  ("dashboard-data", "timeline-links")):
            found.append(f"guest markup became an element: <{tag} {attrs}>")
    if SCRIPT_DEVICE not in dom.texts_in("table-latency"):
        found.append("the <script> device name is not shown as text in the latency table")
    if not any(IMG_REASON in text for text in dom.texts_in("table-failures")):
        found.append("the <img> reason is not shown as text in the failures table")
    if not any(BOLD_LINE in text for text in dom.texts_in("table-buckets")):
        found.append("the <b> console line is not shown as text in the buckets table")
    if HOSTILE_STEP not in dom.texts_in("table-host-time"):
        found.append("the <i> step name is not shown as text in the host time table")
    if "pwned" in dom.title():
        found.append("an injected handler ran")
    return found


def load(html_path):
    stdout, stderr = chromium("file://" + html_path, "--dump-dom")
    return Dom(stdout), stderr


def test_page_loads_draws_and_escapes(page):
    html_path, board = page
    dom, stderr = load(html_path)
    assert problems_of(dom, stderr) == []
    # one kernel: the kernels panel shows its table, not its charts
    (kernel_charts,) = [a for _, a, _ in dom.elements if a.get("id") == "kernels-charts"]
    assert "hidden" in kernel_charts and len(board["kernels"]["kernels"]) == 1
    canvases = [a for t, a, ids in dom.elements if t == "canvas" and "kernels-charts" not in ids]
    assert len(canvases) == CANVASES
    for canvas in canvases:  # Chart.js sized every canvas it drew on
        assert int(canvas.get("width", 0)) > 100 and int(canvas.get("height", 0)) > 100, canvas
    # the tables show the dashboard's numbers
    cells = dom.texts_in("table-success")
    width = cells.index("95 % interval") + 1
    header = cells[:width]
    rows = {row[0]: row for row in (cells[i:i + width] for i in range(width, len(cells), width))}
    assert set(rows) == set(board["success"]["modes"]) | {"all"}
    for mode, block in list(board["success"]["modes"].items()) + [("all", board["success"]["all"])]:
        assert rows[mode][header.index("cycles")] == str(block["cycles"])
        assert rows[mode][header.index("pass")] == str(block["counts"]["pass"])
        rate = rows[mode][header.index("success rate")]
        assert abs(float(rate.rstrip(" %")) - block["rate"] * 100) < 0.051, rows[mode]
    bucket_cells = dom.texts_in("table-buckets")
    for bucket in board["buckets"]:
        assert bucket["bucket"] in bucket_cells
    trend_cells = dom.texts_in("table-trend")
    assert any(cell.startswith("b" * 12) for cell in trend_cells)  # failing since the second build
    errors = dom.texts_in("input-errors")
    (error,) = board["input_errors"]
    assert errors == [f"{error['file']}:{error['line']}: {error['message']}"]
    assert error["file"].endswith("20261204-090000-2/cycles.jsonl") and error["line"] == 27  # 13 x 2 lines + 1
    (section,) = [a for t, a, _ in dom.elements if a.get("id") == "input-errors-section"]
    assert "hidden" not in section
    # host time: every mode's steps with their means, and the whole cycle
    host_cells = dom.texts_in("table-host-time")
    width = host_cells.index("of the mean total") + 1
    host_rows = [tuple(host_cells[i:i + width]) for i in range(width, len(host_cells), width)]
    modes = board["host_time"]["modes"]
    assert set(modes) == {"mem", "freeze", "disk", "pm_test-core", "pm_test-devices", "pm_test-freezer"}
    want = []
    for mode in sorted(modes):
        block = modes[mode]
        want += [(mode, s["step"], str(s["n"]), f"{s['mean']:.3f}") for s in block["steps"]]
        want.append((mode, "whole cycle", str(block["cycles"]), f"{block['mean_total']:.3f}"))
    assert [row[:4] for row in host_rows] == want
    # harness memory: one row per lab.run process
    memory_cells = dom.texts_in("table-memory")
    width = memory_cells.index("last \u2212 first (KiB)") + 1
    memory_rows = [memory_cells[i:i + width] for i in range(width, len(memory_cells), width)]
    (first, second) = board["harness_memory"]["runs"].items()
    assert first[0] == "20261203-130000-1" and first[1][0]["max_kib"] == 40000 + 16 * 200
    assert memory_rows == [[run_id, str(p["pid"]), str(p["cycles"]), f"{p['first_cycle']}\u2013{p['last_cycle']}",
                            str(p["first_kib"]), str(p["last_kib"]), str(p["max_kib"]),
                            f"{p['last_kib'] - p['first_kib']:+d}" if p["last_kib"] != p["first_kib"] else "0"]
                           for run_id, (p,) in (first, second)]


def test_the_checks_catch_html_injection(page, tmp_path):
    """The same checks on a copy of the page that uses innerHTML: they fail."""
    html_path, _ = page
    site = tmp_path / "site"
    shutil.copytree(os.path.dirname(html_path), site)
    script = site / "dashboard-page.js"
    code = script.read_text()
    assert code.count("node.textContent = String(text);") == 1
    assert code.count("else td.textContent = fmt(value);") == 1
    code = code.replace("node.textContent = String(text);", "node.innerHTML = String(text);")
    script.write_text(code.replace("else td.textContent = fmt(value);", "else td.innerHTML = fmt(value);"))
    dom, stderr = load(str(site / "dashboard.html"))
    found = problems_of(dom, stderr)
    assert any("became an element: <img" in problem for problem in found), found
    assert any("<script> device name is not shown" in problem for problem in found), found


def test_the_checks_catch_a_broken_page(page, tmp_path):
    """Without Chart.js the page says so on the console and never gets ready."""
    html_path, _ = page
    site = tmp_path / "site"
    shutil.copytree(os.path.dirname(html_path), site)
    os.remove(site / "chart.min.js")
    dom, stderr = load(str(site / "dashboard.html"))
    found = problems_of(dom, stderr)
    assert any(problem.startswith("console:") and "Chart.js did not load" in problem for problem in found), found
    assert "charts not drawn: data-charts='failed'" in found


def read_png(path):
    """(width, height, rows of RGB(A) bytes) of a non-interlaced 8-bit PNG."""
    with open(path, "rb") as source:
        data = source.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data[pos + 8:pos + 8 + length])
        elif kind == b"IDAT":
            idat.append(data[pos + 8:pos + 8 + length])
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and interlace == 0 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + previous[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a, b = (line[i - bpp] if i >= bpp else 0), previous[i]
                c = previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, bpp, rows


def test_screenshot(page, tmp_path):
    html_path, _ = page
    shot = tmp_path / "dashboard.png"
    _, stderr = chromium("file://" + html_path, f"--screenshot={shot}", "--window-size=1280,1600")
    assert console_messages(stderr) == []
    width, height, bpp, rows = read_png(str(shot))
    assert (width, height) == (1280, 1600)
    pixels = {}
    for row in rows[::4]:
        for x in range(0, width * bpp, 4 * bpp):
            colour = row[x:x + 3]
            pixels[colour] = pixels.get(colour, 0) + 1
    assert len(pixels) > 50  # text, charts and tables, not a blank page
    for rgb in MODE_COLOURS:  # bars of the first three modes were painted
        assert pixels.get(bytes(rgb), 0) > 20, rgb
    keep = os.environ.get("PMLAB_DASHBOARD_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_a_dashboard_of_no_cycles_never_says_every_cycle_passed(tmp_path):
    """dashboards.compute over a root with no run (the commit pipeline calls
    it directly; ./pmlab dashboard refuses one): the page says there is
    nothing, not that all of nothing passed."""
    (tmp_path / "empty").mkdir()
    board = compute.compute([str(tmp_path / "empty")])
    assert board["inputs"]["cycles"] == 0
    (tmp_path / "dashboard.json").write_text(compute.dumps(board))
    dom, stderr = load(render.render(str(tmp_path / "dashboard.json")))
    assert console_messages(stderr) == []
    assert dom.texts_in("headline") == ["No cycles recorded"]
    assert dom.texts_in("table-failures")[-1] == "No cycles recorded."
    assert "every cycle passed" not in " ".join(text for text, _, _ in dom.texts).lower()
