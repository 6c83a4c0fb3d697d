"""One cycle's timeline page: its suspend/resume phases and every device's
PM callbacks on a time axis (in the manner of sleepgraph's timeline).

  ./pmlab timeline RUN_DIR [CYCLE ...]

writes RUN_DIR/timelines/cycle-NNNN.html for the cycles given, or for every
cycle that did not pass, and prints the paths written. The page is one file
(inline CSS and script, no network), drawn from the cycle's guest report
(RUN_DIR/reports/cycleN.txt.gz) with the lab's own parsers: lab/trace.py for
the phases and callbacks, lab/pmtest_log.py for the pmtest records,
lab/oracle/observe.py for each device's parent. The record adds the failing
callbacks (lab.records.failed_callbacks), the oracle's ordering violations
and the cycle's console lines.

A hang's page draws the trace its hang dump holds (the guest's sysrq 'z',
lab/hang.py), the callback that never returned open to the end and named
among the findings. Any other cycle without a guest report (a lab error
the host's watch decided, a cycle that never finished, a hang dump without
a trace) gets a page drawn from its record alone: the reason, what the host saw (its steps, the hang dump) and the
console lines, with no trace to draw. A cycle whose report is unreadable is
named on stderr and skipped; the run directory's records are only read.
Errnos are named as lab.trace.errno_text names them ("EIO (-5)"). A page
drawn for a dashboard links back to it.
"""

import argparse
import base64
import datetime
import hashlib
import os
import urllib.parse
import re
import sys

from dashboards import page_json
from lab import files, guest_report, hang, pmtest_log, records, trace
from lab.oracle import observe

SCHEMA = "pmlab-timeline/1"
PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page")
TEMPLATE = "timeline.html"
SCRIPT = "timeline-page.js"
STYLE = "timeline-page.css"
DIRECTORY = "timelines"
# A trace context line of the oracle: "<ts> <driver> <device> <callback> [<verb>]"
TRACE_CONTEXT = re.compile(r"^(?P<ts>\d+\.\d{6}) ")
PMTEST_SEQ = re.compile(r"\bseq=(?P<seq>\d{1,20})\b")


class TimelineError(Exception):
    """A cycle that cannot be drawn (no report, unreadable report, no trace)."""


def page_name(cycle):
    return f"cycle-{int(cycle):04d}.html"


def _ms(ts, t0):
    return round((ts - t0) * 1000, 3)


def _phases(marks, t0):
    """suspend_resume begin/end pairs as spans; a begin without its end runs
    to the end of the trace (end_ms None)."""
    spans, open_spans = [], {}
    for ts, action, val, is_begin in marks:
        if is_begin:
            span = {"name": action, "val": val, "start_ms": _ms(ts, t0), "end_ms": None,
                    # the PM core's device phases become bands behind the device rows;
                    # the other actions (freeze_processes, ...) stay on the phase track
                    "device_phase": action in trace.DPM_PHASES}
            spans.append(span)
            open_spans.setdefault(action, []).append(span)
        elif open_spans.get(action):
            open_spans[action].pop()["end_ms"] = _ms(ts, t0)
    return spans


def _same_device(identity, named):
    """Does a record's device (a trace identity "name (driver)", or a bare
    name in records before version 2) name this trace identity?"""
    name, driver = trace.split_device_id(identity)
    other_name, other_driver = trace.split_device_id(named)
    return name == other_name and (other_driver is None or driver is None or driver == other_driver)


# A device name as console lines print it; names are matched as whole tokens
# (pmtest_full.1 is not named by pmtest_full.10, nor platform by
# /devices/platform/i8042), a trailing "." or ":" being punctuation.
TOKEN = re.compile(r"[\w.:/-]+")


def console_index(lines):
    """{token: [line, ...]} of console lines, for lines_naming()."""
    index = {}
    for line in lines:
        for token in set(match.rstrip(".:") for match in TOKEN.findall(line)):
            index.setdefault(token, []).append(line)
    return index


def lines_naming(name, lines, index):
    """The console lines that name a device, in their order."""
    if TOKEN.fullmatch(name):
        return index.get(name, [])
    # a name with other characters (no kernel name has them): search for it whole
    pattern = re.compile(r"(?<![\w.:/-])" + re.escape(name) + r"(?![\w/-]|[.:]\w)")
    return [line for line in lines if pattern.search(line)]


def _tree_order(devices, parents, first_start):
    """Device identities depth first: each under the first row of its
    parent's name, siblings and roots by their first callback. Returns
    [(identity, depth)]."""
    by_name = {}
    for device in devices:
        by_name.setdefault(trace.split_device_id(device)[0], []).append(device)
    children, roots = {}, []
    for device in devices:
        parent = parents.get(device)
        holders = by_name.get(parent, []) if parent else []
        holder = next((h for h in holders if h != device), None)
        if holder is None:
            roots.append(device)
        else:
            children.setdefault(holder, []).append(device)
    order, seen = [], set()

    def visit(device, depth):
        if device in seen:
            return
        seen.add(device)
        order.append((device, depth))
        for child in sorted(children.get(device, []), key=lambda d: (first_start[d], d)):
            visit(child, depth + 1)

    for root in sorted(roots, key=lambda d: (first_start[d], d)):
        visit(root, 0)
    for device in sorted(devices, key=lambda d: (first_start[d], d)):  # a parent cycle: still drawn
        visit(device, 0)
    return order


def model(record, report_text):
    """The timeline of one cycle as a JSON-able dict (the page draws it).
    TimelineError if the report holds no trace to draw."""
    parts = guest_report.sections(report_text)
    if "trace" not in parts:
        raise TimelineError("the report has no '=== trace' section")
    return events_model(record, trace.parse(parts["trace"]), parts.get("pmtest_log"))


def events_model(record, events, pmtest_text=None):
    """model() of trace events: a report's, or those a hang dump's sysrq
    'z' printed (hang_model()). TimelineError if they hold nothing to draw."""
    marks = trace.markers(events)
    paired = trace.paired_callbacks(events)
    sequences = trace.per_device(paired)
    if not marks and not sequences:
        raise TimelineError("the report's trace has no suspend_resume or device callback events")
    times = [m[0] for m in marks] + [call["t"] for calls in sequences.values() for call in calls]
    t0 = min(times)
    last = max(times + [call["t"] + call["us"] / 1e6 for calls in sequences.values() for call in calls
                        if call["us"] is not None])
    end_ms = _ms(last, t0)
    _, parents = observe.from_callbacks(paired)  # the tree the oracle judged

    # where each pmtest record ran, on the trace clock: its trace copy (event
    # pmtest_callback, same seq) where the guest enabled that event, as
    # reports before 2026-12 did (their t was CLOCK_BOOTTIME); otherwise its
    # own t, which pmtest now takes from the trace clock
    pmtest_entries = pmtest_log.parse(pmtest_text)
    pmtest_ts = {}
    for event in events:
        if event.name == "pmtest_callback":
            for entry in pmtest_log.parse(f"pmtest: {event.body}"):
                pmtest_ts[entry["seq"]] = event.ts
    if not pmtest_ts:
        pmtest_ts = {entry["seq"]: entry["t"] / 1e9 for entry in pmtest_entries}

    failing_trace = {(device, cb) for device, cb, _ in trace.failed_callbacks(sequences)}
    failing_record = records.failed_callbacks(record)
    evidence = [line for line in (record.get("evidence") or []) if isinstance(line, str)]
    console_lines = console_index(evidence)
    violations = [v for v in (record.get("ordering_violations") or []) if isinstance(v, dict)]

    first_start = {device: calls[0]["t"] for device, calls in sequences.items()}
    rows, call_at = [], []
    for device, depth in _tree_order(list(sequences), parents, first_start):
        name, driver = trace.split_device_id(device)
        calls = []
        for call in sequences[device]:
            item = {"cb": call["cb"], "phase": trace.phase_of(call["cb"]), "start_ms": _ms(call["t"], t0),
                    "us": call["us"], "err": call["err"], "err_text": _err_text(call["err"]),
                    "pmtest": [], "violations": [],
                    "end_ms": _ms(call["t"] + call["us"] / 1e6, t0) if call["us"] is not None else None}
            item["failed"] = (device, call["cb"]) in failing_trace or any(
                _same_device(device, f["device"]) and f.get("cb") in (None, call["cb"]) and f["err"] == call["err"]
                for f in failing_record)
            calls.append(item)
            call_at.append((device, name, call["t"], call["us"], item))
        rows.append({"device": device, "name": name, "driver": driver, "parent": parents.get(device),
                     "depth": depth, "calls": calls, "pmtest": [], "violations": [],
                     "console": lines_naming(name, evidence, console_lines),
                     "failed": any(c["failed"] for c in calls)})
    by_name = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    position = {row["device"]: index for index, row in enumerate(rows)}
    for row in rows:  # the row it is drawn under (_tree_order's holder), for the page's filter
        holder = next((r for r in by_name.get(row["parent"], []) if r is not row), None) if row["parent"] else None
        row["parent_row"] = position[holder["device"]] if holder and row["depth"] else None

    def enclosing(name, ts):
        """The call of a device named `name` running at trace time ts."""
        for _, call_name, start, us, item in call_at:
            if call_name == name and start <= ts <= start + (us if us is not None else 1e12) / 1e6:
                return item
        return None

    unplaced = []
    for entry in pmtest_entries:
        text = (f"seq={entry['seq']} {entry['dev']} cb={entry['cb']} event={entry['event']} ret={entry['ret']}")
        item = enclosing(entry["dev"], pmtest_ts[entry["seq"]]) if entry["seq"] in pmtest_ts else None
        if item is not None:
            item["pmtest"].append(text)
        elif entry["dev"] in by_name:
            by_name[entry["dev"]][0]["pmtest"].append(text)
        else:
            unplaced.append(text)

    for number, violation in enumerate(violations):
        device = violation.get("device")
        for row in rows:
            if isinstance(device, str) and _same_device(row["device"], device):
                row["violations"].append(number)
        for line in violation.get("context") or []:
            if not isinstance(line, str):
                continue
            found = TRACE_CONTEXT.match(line)
            seq = PMTEST_SEQ.search(line) if not found else None
            item = None
            if found:  # a trace call: its start time, printed with 6 decimals
                item = next((i for d, n, start, _, i in call_at
                             if f"{start:.6f}" == found["ts"] and f" {n} " in line), None)
            elif seq and int(seq["seq"]) in pmtest_ts:
                dev = re.search(r"\bdev=(\S+)", line)
                item = dev and enclosing(dev.group(1), pmtest_ts[int(seq["seq"])])
            if item is not None and number not in item["violations"]:
                item["violations"].append(number)

    return dict(record_model(record), report=record.get("report"), no_trace=None, end_ms=end_ms,
                phases=_phases(marks, t0), rows=rows, violations=violations, pmtest_unplaced=unplaced)


def hang_model(record, dump_text):
    """A hung cycle's page from its hang dump: the trace the guest printed
    on sysrq 'z' (lab/hang.py), the callback that never returned drawn open
    to the end; the record alone when the dump has no trace."""
    events, _ = hang.ftrace_events(dump_text.splitlines())
    try:
        return dict(events_model(record, events), report=None)
    except TimelineError:
        return record_model(record, NO_TRACE_IN_DUMP)


def _err_text(err):
    return trace.errno_text(err) if isinstance(err, int) and err else None


def _epoch(stamp):
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return None


def host_steps(record):
    """The record's host timeline ([[step, epoch seconds]], lab.cycle) as
    [[step, seconds since host_start]]: what the host did and saw, the one
    account of a cycle the guest never reported (a hang)."""
    start = _epoch(record.get("host_start"))
    steps = []
    for step in record.get("timeline") or []:
        if isinstance(step, list) and len(step) == 2 and isinstance(step[0], str) \
                and isinstance(step[1], (int, float)) and not isinstance(step[1], bool):
            steps.append([step[0], round(step[1] - start, 3) if start is not None else None])
    return steps


def record_model(record, no_trace=None):
    """The page's model from the record alone: a cycle with no trace to draw
    (no guest report: no_trace says why), and the part of model() that
    comes from the record."""
    return {
        "schema": SCHEMA,
        "cycle": {key: record.get(key) for key in ("run_id", "cycle", "mode", "wake", "pm_test", "verdict",
                                                   "expected_verdict", "phase", "reason", "host_start",
                                                   "suspend_ms", "resume_ms", "total_ms", "last_phase")},
        "state": records.state_of(record),
        # the knobs that injected a fault or delay: the page says so (lab.records.injections)
        "injected": [item for item in record.get(records.INJECTED_FIELD) or [] if isinstance(item, str)],
        "report": None,
        "no_trace": no_trace,
        "end_ms": 0,
        "phases": [],
        "rows": [],
        "failed_callbacks": [dict(call, err_text=_err_text(call["err"])) for call in records.failed_callbacks(record)],
        "violations": [v for v in (record.get("ordering_violations") or []) if isinstance(v, dict)],
        "console": [line for line in (record.get("evidence") or []) if isinstance(line, str)],
        "problems": [line for line in (record.get("problems") or []) if isinstance(line, str)],
        "pmtest_unplaced": [],
        "host_steps": host_steps(record),
        "host_events": [[str(item) for item in event] for event in records.host_events(record)
                        if isinstance(event, list)],
        "hang_dump": None,   # links, relative to the page (write_cycle)
        "stuck": records.stuck(record),  # a hang's callback that never returned (lab/hang.py)
        "dashboard": None,
    }


NO_REPORT = "no guest report: the host's watch decided this cycle (a hang, a lab error, a cycle never finished)"
NO_TRACE_IN_DUMP = "no guest report, and the hang dump holds no trace (no sysrq 'z' dump): the host's watch decided this cycle"


def _csp_hash(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def page(data):
    """The self-contained HTML page for a model(). Its Content-Security-Policy
    allows only its own inline script and style (by hash): nothing else runs."""
    with open(os.path.join(PAGE, TEMPLATE)) as source:
        template = source.read()
    with open(os.path.join(PAGE, SCRIPT)) as source:
        script = source.read()
    with open(os.path.join(PAGE, STYLE)) as source:
        style = source.read()
    cycle = data["cycle"]
    title = f"pmlab timeline: run {cycle.get('run_id')} cycle {cycle.get('cycle')}"
    values = {
        "CSP": f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style)}; "
               "img-src data:",
        "TITLE": title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"),
        "STYLE": style,
        "DATA": page_json.embed(data),  # no string in it can close the element
        "SCRIPT": script,
    }
    for key in values:
        if template.count(f"<!--PMLAB-{key}-->") != 1:
            raise RuntimeError(f"{PAGE}/{TEMPLATE} must hold <!--PMLAB-{key}--> exactly once")
    # one pass: a value is never searched for markers again
    return re.sub(r"<!--PMLAB-([A-Z]+)-->", lambda match: values[match[1]], template)


def _href(path, out_dir):
    return "/".join(urllib.parse.quote(part) for part in os.path.relpath(path, out_dir).split(os.sep))


def dashboard_marker(href):
    """How a page embeds its link back to the dashboard (page_json.embed)."""
    return page_json.embed({"dashboard": href})[1:-1]


def write_cycle(run_dir, record, out_dir=None, dashboard=None):
    """Draw one cycle's page into out_dir (default RUN_DIR/timelines);
    return its path. dashboard: the dashboard page to link back to.
    TimelineError when the cycle cannot be drawn (its report unreadable or
    without a trace); a cycle without a report is drawn from its record."""
    out_dir = out_dir or os.path.join(run_dir, DIRECTORY)
    dump = record.get("hang_dump")
    dump_path = os.path.join(run_dir, dump) if isinstance(dump, str) else None
    if not record.get("report") and dump_path and os.path.isfile(dump_path):
        try:
            with open(dump_path, errors="replace") as text:
                data = hang_model(record, text.read())
        except OSError as error:
            raise TimelineError(f"hang dump {dump} unreadable: {error}") from None
    elif not record.get("report"):
        data = record_model(record, NO_REPORT)
    else:
        try:
            text = records.read_report(run_dir, record["report"])
        except (OSError, EOFError, ValueError) as error:
            raise TimelineError(f"report {record['report']} unreadable: {error}") from None
        data = model(record, text)
    if dump_path and os.path.isfile(dump_path):
        data["hang_dump"] = _href(dump_path, out_dir)
    if dashboard:
        data["dashboard"] = _href(os.path.abspath(dashboard), os.path.abspath(out_dir))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, page_name(record["cycle"]))
    files.write_atomically(path, page(data))
    return path


def draws(record):
    """Cycles drawn without being asked for: those that did not pass (an
    interrupted one has nothing to show)."""
    return records.state_of(record) not in (records.PASS, records.INTERRUPTED)


def _stderr(message):
    print(message, file=sys.stderr)


def _up_to_date(page_path, sources, marker):
    """Is the page newer than everything it is drawn from (the record file,
    the report, this module and the page's template, script and style), and
    does it link back where it should (marker: dashboard_marker)?"""
    try:
        drawn = os.path.getmtime(page_path)
        if not all(os.path.getmtime(source) <= drawn for source in sources):
            return False
        with open(page_path) as source:
            return marker in source.read()
    except OSError:
        return False


CODE = [os.path.abspath(__file__), os.path.abspath(page_json.__file__)] + \
    [os.path.join(PAGE, name) for name in (TEMPLATE, SCRIPT, STYLE)]


def write_run(run_dir, cycles=None, warn=_stderr, pairs=None, dashboard=None):
    """Pages of a run directory: the cycles numbered in `cycles`; or, with
    `pairs` ((run id, cycle) pairs; one not in this directory is no
    problem: shards), those of them found here, each redrawn only when
    older than what it is drawn from; else every cycle that did not pass.
    Returns {(run id, cycle): path}. A cycle that cannot be drawn (its
    report unreadable or malformed, a cycle asked for that is not there)
    goes to warn(message) and is skipped. dashboard: the dashboard page the
    pages link back to (default: the results root's, if there is one).
    Records are only read."""
    path = records.cycles_path(run_dir)
    if not os.path.isfile(path):
        raise TimelineError(f"{run_dir} is not a run directory: it has no cycles.jsonl")
    wanted = None if cycles is None else {int(c) for c in cycles}
    written, found = {}, set()
    if dashboard is None:
        beside = os.path.join(os.path.dirname(os.path.abspath(run_dir)), "dashboard.html")
        dashboard = beside if os.path.isfile(beside) else None
    for record in records.read_cycles(path):
        number = record["cycle"]
        run_id = record.get("run_id") if isinstance(record.get("run_id"), str) and record.get("run_id") \
            else os.path.basename(os.path.abspath(run_dir))
        if wanted is not None:
            if number not in wanted:
                continue
            found.add(number)
        elif pairs is not None:
            if (run_id, number) not in pairs:
                continue
        elif not draws(record):
            continue
        page_path = os.path.join(run_dir, DIRECTORY, page_name(number))
        sources = [path] + [os.path.join(run_dir, record[side]) for side in ("report", "hang_dump")
                            if isinstance(record.get(side), str)] + CODE
        marker = dashboard_marker(_href(os.path.abspath(dashboard), os.path.abspath(os.path.dirname(page_path)))
                                  if dashboard else None)
        if pairs is not None and _up_to_date(page_path, sources, marker):
            written[(run_id, number)] = page_path
            continue
        try:
            written[(run_id, number)] = write_cycle(run_dir, record, dashboard=dashboard)
        except TimelineError as error:
            warn(f"timeline: {run_dir} cycle {number}: {error}")
    for number in sorted((wanted or set()) - found):
        warn(f"timeline: {run_dir} has no cycle {number}")
    return written


def linked_cycles(dashboard):
    """The (run id, cycle) pairs a dashboard can link to a timeline: the
    cycles that did not pass it lists, its buckets' first and last, and the
    slowest call of each row of its slowest-callbacks table."""
    pairs = {(c["run_id"], c["cycle"]) for c in dashboard.get("failures", {}).get("cycles", [])}
    for bucket in dashboard.get("buckets", []):
        pairs |= {(bucket[end]["run_id"], bucket[end]["cycle"]) for end in ("first", "last") if bucket.get(end)}
    pairs |= {(row["max_at"]["run_id"], row["max_at"]["cycle"])
              for row in dashboard.get("latency", {}).get("top_p95", []) if row.get("max_at")}
    return pairs


def for_dashboard(paths, dashboard, warn=_stderr, page=None):
    """The pages a dashboard links to (linked_cycles), for the runs under
    `paths` (as dashboards.compute reads them), each linking back to the
    dashboard's page (`page`). {(run id, cycle): path}."""
    from dashboards import inputs

    pairs = linked_cycles(dashboard)
    written = {}
    for cycles_file in inputs.find_run_dirs(paths, inputs.Inputs()):
        run_dir = os.path.dirname(cycles_file)
        try:
            written.update(write_run(run_dir, warn=warn, pairs=pairs, dashboard=page))
        except TimelineError as error:
            warn(f"timeline: {error}")
    return written


DESCRIPTION = ("Draw cycles' timeline pages (suspend/resume phases, one row per device grouped by parent, "
               "callback bars, the failing callback, pmtest records, console lines and oracle violations on "
               "hover) into RUN_DIR/timelines/cycle-NNNN.html, and print the paths written.")
EPILOG = "Exit: 0 every page asked for was written, 1 some cycle could not be drawn, 2 bad input."


def draw_and_print(run_dir, cycles):
    """The command: pages of run_dir's `cycles` (all that did not pass when
    empty), their paths on stdout; the exit status."""
    problems = []

    def warn(message):
        problems.append(message)
        _stderr(message)

    try:
        written = write_run(run_dir, cycles or None, warn)
    except TimelineError as error:
        _stderr(f"timeline: {error}")
        return 2
    for path in written.values():
        print(path)
    if not written and not problems:
        _stderr(f"timeline: {run_dir}: no cycle to draw (every cycle passed?); name a cycle to draw it")
    return 1 if problems else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pmlab timeline", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("run", metavar="RUN_DIR", help="a run directory (holding cycles.jsonl and reports/)")
    parser.add_argument("cycles", nargs="*", type=int, metavar="CYCLE",
                        help="cycle numbers to draw (default: every cycle that did not pass)")
    args = parser.parse_args(argv)
    return draw_and_print(args.run, args.cycles)


if __name__ == "__main__":  # ./pmlab timeline is the command
    from lab.entry_points import redirect
    sys.exit(redirect("dashboards.timeline", "timeline"))
