"""What a `hang` must leave behind (lab/README.md, "A phase past its
watchdog"), checked the same way on the recording (test_judge.py) and on a
live hang (test_cycles.py): the record's console evidence, and a dump with
the agent channel's state, QMP query-status, `info registers -a`, the guest
kernel's own sysrq `w` (blocked tasks) and `t` (every task) dumps, and the
console since the cycle began."""

import re


def sections(dump):
    """{"## heading": text below it} of a hang dump."""
    found, heading = {}, "headline"
    for line in dump.splitlines():
        if line.startswith("## "):
            heading = line.split(":", 1)[0] if line.startswith("## agent channel") else line
            found[heading] = []
        else:
            found.setdefault(heading, []).append(line)
    return {heading: "\n".join(lines) for heading, lines in found.items()}


def assert_hang_evidence(record, dump, blocked_in):
    """`blocked_in`: a frame the blocked task's stack must show (where the
    provoked hang waits), so the `w` dump is the guest's, at the hang."""
    cycle, phase = record["cycle"], record["phase"]
    assert record["verdict"] == "hang" and record["hang_dump"], record.get("reason")
    assert any(f"pmlab: cycle {cycle} begin" in line for line in record["evidence"])
    assert dump.startswith(f"cycle {cycle} ({record['mode']}) hung in phase {phase}: "), dump[:200]
    parts = sections(dump)
    for heading in ("## agent channel on the host", '## {"execute":"query-status"}', "## info registers -a",
                    "## guest sysrq w, t", "## console since the cycle began"):
        assert heading in parts, f"hang dump has no {heading!r} section: {sorted(parts)}"
    assert '"return":{"status":' in parts['## {"execute":"query-status"}'], parts['## {"execute":"query-status"}']
    assert re.search(r"\bRIP=[0-9a-f]{16}\b", parts["## info registers -a"])
    sysrq = parts["## guest sysrq w, t"]
    blocked_at, every_at = sysrq.find("sysrq: Show Blocked State"), sysrq.find("sysrq: Show State")
    assert 0 <= blocked_at < every_at, "the guest printed no sysrq w dump followed by a t dump"
    blocked, every = sysrq[blocked_at:every_at], sysrq[every_at:]
    assert re.search(r"task:\S+\s+state:D", blocked), "sysrq w shows no blocked task"
    assert blocked_in in blocked, f"the blocked task is not waiting in {blocked_in}"
    assert len(re.findall(r"task:\S+", every)) >= 10, "sysrq t lists fewer than 10 tasks"
    assert f"pmlab: cycle {cycle} begin" in parts["## console since the cycle began"]
