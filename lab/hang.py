"""Where a hung cycle is stuck: the device callback that started and never
returned, read from the hang dump (lab/cycle.py) of a guest that no longer
answers.

Sources:
  the trace buffer, printed by sysrq 'z' (ftrace_dump()): the guest traces
      device_pm_callback_start/_end (guest/init); a start with no end is a
      callback still running. With async suspend a parent waits for its
      children before its own callback starts, so an open start is one
      that runs; of several, the one with no open child, started first.
  sysrq 'w' (or 't'): the blocked task whose stack runs through
      dpm_run_callback names the driver function it is stuck in (the only
      source when the trace is missing; it names no device).
  guest/pmlab-probe's trace markers ("pmlab-probe sd-card begin"/"end"):
      when every callback returned, a device guest's probe that began and
      never ended is where it hangs (a driver that broke the device so its
      I/O blocks); the first blocked task with a driver's frame says in
      what (sysrq w: "kworker/0:1 in __mmc_claim_host [mmc_core]").
A guest in a phase with device interrupts off (noirq) takes no sysrq: the
host then sends an NMI, which guest/init makes a panic that prints the
stuck CPU's stack and the trace buffer; both are read the same way.
"""

import re

from lab import console, devices, records, trace
from lab.oracle import from_callbacks, judge as judge_order

FTRACE_BEGIN = "Dumping ftrace buffer:"
FTRACE_RULE = "-" * 33
FTRACE_EMPTY = "(ftrace buffer empty)"


def took_sysrq(lines):
    """Did the guest answer a sysrq (its "sysrq: " line among `lines`)?"""
    return any("sysrq: " in line for line in lines)


def ftrace_dump_ended(lines):
    """True once a sysrq 'z' dump in `lines` is complete (its closing rule)."""
    return any(FTRACE_EMPTY in line for line in lines) or \
        sum(line.rstrip().endswith(FTRACE_RULE) for line in lines) >= 2


# ftrace_dump() prints the latency format, time in µs since the buffer was
# last emptied (guest/pmlab-cycle empties it as a cycle starts):
#   "pmlab-ag-63        0..... 54676us : device_pm_callback_start: pmtest pmtest_class.1, parent: ..."
DUMP_LINE = re.compile(
    r"^\s*(?P<task>\S.*?)-(?P<pid>\d+)\s+(?P<cpu>\d{1,6})\S*\s+(?P<us>\d{1,20})us\S?\s*:\s+"
    r"(?P<name>[\w:]+):\s?(?P<body>.*)$")
PRINTK_TIME = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\] ")
# The one event both clocks see: guest/pmlab-cycle writes its kmsg line, then at once the marker.
CYCLE_BEGIN = re.compile(r"pmlab: cycle \d+ begin")
START_MARKER = "SUSPEND START"

# A stack frame of a sysrq task dump: " ? msleep+0x13/0x19", " nvme_simple_suspend+0x1c/0x40 [nvme]".
FRAME = re.compile(r"^\s*(?:\? )?(?P<function>[\w.]+)\+0x(?P<offset>[0-9a-f]+)/0x(?P<size>[0-9a-f]+)"
                   r"(?: \[(?P<module>\w+)\])?")
# A stack's header: sysrq w/t's task line, or the "CPU: 0 PID: 63 Comm: ..." of a panic's
# (an NMI's) backtrace; bounded, no quadratic scan of a long line.
TASK = re.compile(r"\btask:\S{1,64}\s+state:|\bCPU: \d{1,6} PID: \d{1,9} Comm: ")
# What a callback's task waits or sleeps in: the kernel's, not the driver's.
GENERIC = re.compile(
    r"^_*(?:schedule|msleep|usleep|ssleep|udelay|ndelay|mdelay|const_udelay|delay|wait|down|up|mutex|rwsem|"
    r"rt_mutex|spin|raw_spin|queue|flush|complete|next_timer|hrtimer|timer|process_timeout|cond_resched|"
    r"preempt|io_schedule|read_poll|do_nanosleep|lock|unlock|kthread|worker_thread|process_one_work)")


def printk_seconds(line):
    match = PRINTK_TIME.match(line)
    return float(match["s"]) if match else None


def ftrace_events(lines):
    """The events of the first sysrq 'z' dump in `lines` as lab.trace
    Events (ts: seconds since the buffer was emptied), and the printk time
    of its "Dumping ftrace buffer:" line (None: no dump)."""
    events, dumped_at, rules = [], None, 0
    for line in lines:
        text = console.strip_timestamp(line)
        if dumped_at is None:
            if text.startswith(FTRACE_BEGIN):
                dumped_at = printk_seconds(line)
            continue
        if text.rstrip().endswith(FTRACE_RULE):
            rules += 1
            if rules == 2:
                break
            continue
        match = DUMP_LINE.match(text)
        if match:
            events.append(trace.Event(int(match["us"]) / 1e6, match["name"], match["body"],
                                      match["task"].strip(), int(match["cpu"])))
    return events, dumped_at


def buffer_start(lines, events):
    """The printk time at which the dump's trace clock read 0: the cycle's
    kmsg begin line against its SUSPEND START marker; None without both."""
    marker = next((e.ts for e in events if e.name == "tracing_mark_write" and e.body.strip() == START_MARKER), None)
    begun = next((printk_seconds(line) for line in lines if CYCLE_BEGIN.search(line)), None)
    return None if marker is None or begun is None else begun - marker


def stuck_call(events):
    """The callback that started and never ended: of the open ones, those
    that no other open one names as parent (a parent cannot be the one
    stuck while its child runs), the first started. None: all ended."""
    running = [call for call in trace.paired_callbacks(events) if call.end_ts is None]
    parents = {call.parent for call in running}
    leaves = [call for call in running if call.name not in parents] or running
    return min(leaves, key=lambda call: call.ts) if leaves else None


def _tasks(lines):
    """(header line, [(function, module or None), ...] innermost first) of
    each task in sysrq w/t output; frames whose offset is the function's
    size are left out (a stale word on the stack, the guess unwinder's, no
    return address)."""
    tasks = []
    for line in lines:
        text = console.strip_timestamp(line)
        if TASK.search(text):
            tasks.append((text, []))
            continue
        match = FRAME.match(text)
        if match and tasks and match["offset"] != match["size"]:
            tasks[-1][1].append((match["function"], match["module"]))
    return tasks


def task_stacks(lines, modules=None):
    """[[frame function, ...] innermost first] of each task in sysrq w/t
    output (_tasks()). modules: a dict to fill with {function: its module}
    ("[nvme]")."""
    stacks = []
    for _, frames in _tasks(lines):
        stacks.append([function for function, _ in frames])
        if modules is not None:
            modules.update((function, module) for function, module in frames if module)
    return stacks


PROBE_MARK = re.compile(r"^pmlab-probe (?P<device>\S+) (?P<edge>begin|end)$")


def open_probe(events):
    """The device whose guest probe began and never ended in the trace,
    and whether that was before the suspend (probes_before); None: none."""
    probe, suspended = None, False
    for event in events:
        if event.name != "tracing_mark_write":
            continue
        body = event.body.strip()
        if body == START_MARKER:
            suspended = True
        match = PROBE_MARK.match(body)
        if match:
            probe = (match["device"], not suspended) if match["edge"] == "begin" else None
    return probe


# A sysrq w/t task line: "task:kworker/0:1     state:D stack:0     pid:14 ..."
BLOCKED_TASK = re.compile(r"\btask:(?P<task>\S{1,64})\s+state:D\b.*?\bpid:\s*(?P<pid>\d{1,9})")


def blocked_in(lines):
    """(task, function, module) of the first blocked task (state D) whose
    stack, outside the kernel's own waiting, has a module's frame: the
    driver a hang outside any callback is stuck in. None: no such task."""
    seen = set()  # sysrq w lists a blocked task, then sysrq t again
    for header, frames in _tasks(lines):
        task = BLOCKED_TASK.search(header)
        if not task or task["pid"] in seen:
            continue
        seen.add(task["pid"])
        for function, module in frames:
            if module and not GENERIC.match(function):
                return task["task"], function, module
    return None


def stuck_function(lines, modules=None):
    """The function a PM callback's task is stuck in (of several such
    tasks, the first: it may be another device's than stuck_call()'s when
    more than one hangs): in the first task
    whose stack runs through dpm_run_callback, the frame just outside the
    kernel's own sleeping or waiting (msleep, schedule_timeout, ...) it is
    in. Not simply the innermost frame of another name: a stale word can
    sit among the scheduler's frames (to_kthread between __schedule and
    schedule). None: no such task."""
    for stack in task_stacks(lines, modules):
        if "dpm_run_callback" in stack:
            inside = stack[:stack.index("dpm_run_callback")]
            waits = [index for index, function in enumerate(inside) if GENERIC.match(function)]
            callers = inside[waits[-1] + 1:] if waits else inside
            return callers[0] if callers else (inside[-1] if inside else None)
    return None


def order_slip(events, call):
    """The oracle's ordering finding about the stuck callback's device in
    the dump's trace (e.g. its parent's suspend started while it ran: the
    PM core did not wait for it), or None. A hang under such a slip is the
    core's, not only the driver's it is stuck in."""
    calls, parents = from_callbacks(trace.paired_callbacks(events))
    return next((violation.message for violation in judge_order(calls, parents)
                 if violation.rule == "order" and violation.device == call.device), None)


def _stuck(**found):
    """A stuck field with every key of the record format, unshown ones null."""
    return dict(dict.fromkeys(records.STUCK_KEYS), **found)


def where(dump):
    """Where the hung cycle of a hang dump (lab/cycle.py) is stuck:
    {device, driver, callback, function, since_s, source} with None for
    what the dump does not show, or None when it shows nothing."""
    lines = dump.splitlines()
    events, dumped_at = ftrace_events(lines)
    call = stuck_call(events)
    modules = {}
    function = stuck_function(lines, modules)
    if call is None and function is None:
        return stuck_probe(lines, events)
    # without the trace, the function's module is the one hint of its driver
    found = _stuck(driver=modules.get(function), function=function, source="stack")
    if call is not None:
        start = buffer_start(lines, events)
        found.update(device=call.name, driver=call.driver.strip() or None, callback=call.label,
                     source="trace" if function is None else "trace, stack", order=order_slip(events, call))
        if start is not None and dumped_at is not None:
            found["since_s"] = round(dumped_at - (start + call.ts), 1)
    return found


def stuck_probe(lines, events):
    """where() when no callback is open: the guest's probe that never ended
    ({probe: device, ...}), with what the first blocked task is stuck in."""
    probe = open_probe(events)
    if probe is None:
        return None
    device, before = probe
    task, function, module = blocked_in(lines) or (None, None, None)
    return _stuck(driver=module, function=function, source="trace marker" + (", stack" if function else ""),
                  probe=device, probe_section="probes_before" if before else "probes", blocked_task=task)


def phase(watched, stuck):
    """The hang's phase: the host watchdog's, or the device check when the
    dump shows a probe that never ended (every callback had returned)."""
    return devices.PHASE if stuck and stuck.get("probe") else watched


def named(stuck):
    """Where() in words: "pmtest_class.1 (pmtest) class[suspend] started
    21.7 s before the trace was dumped, never returned (pmtest_knobs_apply)"."""
    if stuck.get("device"):
        driver = f" ({stuck['driver']})" if stuck.get("driver") else ""
        since = f" started {stuck['since_s']:.1f} s before the trace was dumped," \
            if stuck.get("since_s") is not None else " started,"
        function = f" ({stuck['function']})" if stuck.get("function") else ""
        order = f"; out of order: {stuck['order']}" if stuck.get("order") else ""
        return f"{stuck['device']}{driver} {stuck['callback']}{since} never returned{function}{order}"
    if stuck.get("probe"):
        when = "before the suspend" if stuck.get("probe_section") == "probes_before" else "after the resume"
        blocked = f"; blocked: {stuck.get('blocked_task') or 'a task'} in {stuck['function']} " \
                  f"[{stuck['driver']}]" if stuck.get("function") and stuck.get("driver") else ""
        return f"every device callback returned; the guest's probe of {stuck['probe']} {when} never " \
               f"finished{blocked}"
    module = f" of {stuck['driver']}" if stuck.get("driver") else ""
    return f"a device callback{module} stuck in {stuck['function']} (no trace of which device)"


def reason(phase, stuck, detail):
    """A hang's reason: where it is stuck, then the watchdog's own detail,
    e.g. "suspend hung: <named()>; guest not asleep ... within 15s"."""
    return f"{phase} hung: {named(stuck)}; {detail}" if stuck else detail
