"""The pmtest modules' callback log (/sys/kernel/debug/pmtest/log):
  pmtest: seq=<n> t=<ns> dev=<dev_name> cb=<callback> event=<event> ret=<int>
"""

import re

# Numbers are u64 / int: a longer run of digits is a corrupted line (and
# int() refuses more than 4300 digits).
LINE = re.compile(
    r"pmtest: seq=(?P<seq>\d{1,20}) t=(?P<t>\d{1,20}) dev=(?P<dev>\S+) cb=(?P<cb>\S+) "
    r"event=(?P<event>\S+) ret=(?P<ret>-?\d{1,20})(?!\d)")


def parse(text):
    """Entries as dicts with int seq, t (ns) and ret, in log order."""
    entries = []
    for line in (text or "").splitlines():
        match = LINE.search(line)
        if match:
            entry = match.groupdict()
            for key in ("seq", "t", "ret"):
                entry[key] = int(entry[key])
            entries.append(entry)
    return entries


def after(entries, seq):
    """Entries newer than sequence number `seq` (the log spans cycles)."""
    return [entry for entry in entries if entry["seq"] > seq]


def by_device(entries):
    """{dev: ["<cb>:<event>=<ret>", ...]} in log order."""
    sequences = {}
    for entry in entries:
        sequences.setdefault(entry["dev"], []).append(f"{entry['cb']}:{entry['event']}={entry['ret']}")
    return sequences
