"""The report guest/pmlab-cycle prints: sections "=== <name>" of text.

  before / after / enter        key=value lines (before: start=prepared when the agent
                                prepared the snapshot and emptied trace while the host
                                judged the previous cycle, start=taken when the cycle did)
  sysfs_before / sysfs_after    "path:value" lines, as `grep -r .` printed them:
                                /sys/power/suspend_stats/<name>:<value> and
                                /sys/class/wakeup/<src>/{name,event_count}:<value>
  (reports from before that split them into suspend_stats_* and
   wakeup_sources_* sections parse the same way)
  trace                         the trace buffer (lab/trace.py)
  trace_raw                     the trace buffer as binary pages (guest/pmlab-evidence.c):
                                from_bytes() renders it into a trace section on arrival
  trace_raw_error               written by from_bytes() when the pages cannot be decoded
  dmesg                         the guest's kernel log since the previous report (lab/sleepgraph.py)
  probes_before                 a device guest's probes before the suspend: guest/pmlab-probe's
                                lines (lab/devices.py parses them)
  probes                        a device guest's probes after the resume: an "asked=" line,
                                then guest/pmlab-probe's lines
  pmtest_log                    /sys/kernel/debug/pmtest/log (lab/pmtest_log.py)
  end                           present only if the script ran to its end
"""

import re

from lab import trace_raw

SECTION = re.compile(r"^=== (\w+)$")
# A counter as sysfs prints it; a longer run of digits is a corrupted line
# (and int() refuses more than 4300 digits).
NUMBER = re.compile(r"-?\d{1,20}")


def sections(text):
    """{section name: text} in the order printed."""
    out = {}
    name = None
    body = []
    for line in text.splitlines():
        match = SECTION.match(line)
        if match:
            if name is not None:
                out[name] = "\n".join(body)
            name, body = match.group(1), []
        elif name is not None:
            body.append(line)
    if name is not None:
        out[name] = "\n".join(body)
    return out


RAW_SECTION = b"=== trace_raw\n"


def head_sections(data):
    """{section name: text} of the report's sections before its trace pages
    (the probes among them): what the host reads the moment a cycle's
    report arrives, before the pages are rendered."""
    at = data.find(b"\n" + RAW_SECTION)
    return sections((data if at < 0 else data[:at]).decode("utf-8", "replace"))


def from_bytes(data):
    """The report as text, from the guest's bytes: a trace_raw section's binary
    pages become a trace section, as `cat trace` printed it. Pages that cannot
    be decoded become a trace_raw_error section naming why (the cycle is then
    a lab error) and the sections after them are still read."""
    if data.startswith(RAW_SECTION):
        at = 0
    else:
        at = data.find(b"\n" + RAW_SECTION) + 1
        if at == 0:
            return data.decode("utf-8", "replace")
    head, start = data[:at].decode("utf-8", "replace"), at + len(RAW_SECTION)
    try:
        rendered, end = trace_raw.render(data, start)
    except trace_raw.TraceRawError as error:
        rest = data[start:]
        cut = rest.find(b"\n=== ")
        tail = rest[cut + 1:].decode("utf-8", "replace") if cut >= 0 else ""
        return f"{head}=== trace_raw_error\n{error}\n{tail}"
    return f"{head}=== trace\n{rendered}\n{data[end:].decode('utf-8', 'replace')}"


def key_values(text):
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def _path_values(text):
    """'<path>:<value>' lines (grep output) to {path: value}."""
    values = {}
    for line in (text or "").splitlines():
        path, sep, value = line.partition(":")
        if sep:
            values[path] = value.strip()
    return values


def snapshot(parts, side):
    """The sysfs snapshot text of one side ("before"/"after") of a report."""
    if f"sysfs_{side}" in parts:
        return parts[f"sysfs_{side}"]
    return "\n".join(parts.get(f"{name}_{side}", "") for name in ("suspend_stats", "wakeup_sources"))


def suspend_stats(text):
    """{stat name: int or str} from /sys/power/suspend_stats/* grep lines."""
    stats = {}
    for path, value in _path_values(text).items():
        if "/suspend_stats/" not in path:
            continue
        name = path.rsplit("/", 1)[-1]
        stats[name] = int(value) if NUMBER.fullmatch(value) else value
    return stats


def stats_delta(before, after):
    """Counters' change over the cycle, plus the last_failed_* values after it
    when the failure counters moved (otherwise they describe an older cycle)."""
    delta = {name: after[name] - before.get(name, 0)
             for name, value in after.items() if isinstance(value, int) and isinstance(before.get(name, 0), int)
             and not name.startswith("last_failed")}
    if any(delta.get(name, 0) for name in delta if name.startswith("fail")):
        delta.update({name: value for name, value in after.items() if name.startswith("last_failed")})
    return delta


def wakeup_sources(text):
    """{source name: event_count} from /sys/class/wakeup/wakeupN/{name,event_count}."""
    by_dir = {}
    for path, value in _path_values(text).items():
        if not path.startswith("/sys/class/wakeup/"):
            continue
        directory, _, attribute = path.rpartition("/")
        by_dir.setdefault(directory, {})[attribute] = value
    sources = {}
    for attributes in by_dir.values():
        if "name" in attributes and re.fullmatch(r"\d{1,20}", attributes.get("event_count", "")):
            sources[attributes["name"]] = int(attributes["event_count"])
    return sources


def wakeup_delta(before, after):
    """Sources whose event count went up during the cycle: {name: increase}."""
    return {name: count - before.get(name, 0) for name, count in after.items()
            if count > before.get(name, 0)}
