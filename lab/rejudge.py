"""Judge a recorded run again, offline, with the current code and rules
(`./pmlab judge RUN_DIR`, in the manner of `kunit.py parse`).

A finished cycle that kept its guest report (RUN_DIR/reports/cycleN.txt.gz)
goes through lab.judge.judge_with_order again, the function that judged it
live, with what the record kept of the rest (libvirt events, console
evidence, host timeline, tmpfs token, boot id). A cycle without a report
passed in a run with --keep failures, or was decided by the host's watch
(hang, kernel panic, lab error, a hibernation that booted afresh): there is
nothing to judge again, it is listed as kept.
Nothing in the run directory is changed. A cycle whose report cannot be
read counts as a difference: the run could not be checked.

A damaged cycles.jsonl (a line cut short, a garbage line, a line that is no
cycle record) is named line by line as lab.records' reader finds it
(damage()); such a run is not judged unless the caller goes on over the
damage (./pmlab judge --lenient): a dropped line can turn a recorded PASS
into an unfinished cycle.
"""

import os
from dataclasses import dataclass

from lab import hang, modes
from lab.judge import Expected, judge_with_order
from lab.records import HANG, INTERRUPTED, UNFINISHED, cycles_path, host_events, is_done, read_cycles, read_report
from lab.errors import LabError


@dataclass
class Rejudged:
    cycle: int
    mode: str
    old: tuple  # (verdict, phase) as recorded
    new: tuple  # (verdict, phase) now; None: not judged again
    reason: str = None  # the new reason, or why the cycle was not judged again
    unreadable: bool = False  # it has a report, but the report cannot be read

    @property
    def changed(self):
        return self.new is not None and self.new != self.old

    @property
    def differs(self):
        """Counts against the run: a changed verdict, or a report that could not be judged."""
        return self.changed or self.unreadable


def rejudge_record(run_dir, record):
    """One cycle's Rejudged."""
    old = (record.get("verdict"), record.get("phase"))
    label = f"{record.get('mode')}/{record.get('wake')}"
    if not is_done(record):
        return Rejudged(record["cycle"], label, (UNFINISHED, None), None, "only its 'started' line")
    if record.get("verdict") == INTERRUPTED:
        return Rejudged(record["cycle"], label, old, None, "interrupted: the run stopped during it")
    if not record.get("report"):
        if "evidence_lines" in record:  # lab.judge.keep_evidence under --keep failures
            return Rejudged(record["cycle"], label, old, None, "passed; its report was not kept (--keep failures)")
        return Rejudged(record["cycle"], label, old, None,
                        "no guest report: the host's watch decided it" + stuck_in_dump(run_dir, record))
    try:
        text = read_report(run_dir, record["report"])
    except (OSError, EOFError) as error:
        return Rejudged(record["cycle"], label, old, None, f"report unreadable: {error}", unreadable=True)
    mode = modes.parse_mode(record["mode"], record.get("wake"))
    # report_status: pmlab-cycle's exit status; records older than the field
    # were written only for status 0 or with a reason naming the status.
    result = judge_with_order(mode, text, record.get("report_status", 0), host_events(record),
                              record.get("evidence") or [], record.get("timeline") or [],
                              record.get("token"), record.get("guest_boot_id"),
                              Expected.of_record(record))
    return Rejudged(record["cycle"], label, old, (result["verdict"], result.get("phase")), result.get("reason"))


def stuck_in_dump(run_dir, record):
    """"; <phase> hung: <where>" read again from a hang's dump with the
    current lab/hang.py ("" when the cycle has no readable dump or it names
    nothing), so a run recorded before the record named it says where too."""
    dump = record.get("hang_dump")
    if record.get("verdict") != HANG or not isinstance(dump, str):
        return ""
    try:
        with open(os.path.join(run_dir, dump), errors="replace") as text:
            stuck = hang.where(text.read())
    except OSError:
        return ""
    return f"; {record.get('phase')} hung: {hang.named(stuck)}" if stuck else ""


def rejudge_run(run_dir, damaged=None):
    """[Rejudged] for every cycle of RUN_DIR/cycles.jsonl; LabError if the
    directory has no cycles. damaged: a list to append the file's damaged
    lines to, as damage() words them (they are skipped, as the reader does)."""
    path = cycles_path(run_dir)
    if not os.path.isfile(path):
        raise LabError(f"{run_dir} is not a run directory: it has no cycles.jsonl")
    problems = []
    records = read_cycles(path, problem=lambda number, message: problems.append(damage(path, number, message)))
    if damaged is not None:
        damaged.extend(problems)
    if not records:
        raise LabError(f"{path} holds no cycle records" + (f" ({len(problems)} damaged lines)" if problems else ""))
    return [rejudge_record(run_dir, record) for record in records]


def damage(path, number, message):
    """One damaged line of a cycles.jsonl as the reader reported it: "FILE:LINE: why"."""
    return f"{path}:{number}: {message}" if number else f"{path}: {message}"


def describe(item):
    old = "/".join(str(v) for v in item.old if v)
    if item.new is None:
        return (f"cycle {item.cycle:>4} {item.mode}: {old.upper()} "
                f"{'NOT JUDGED' if item.unreadable else 'kept'} ({item.reason})")
    new = "/".join(str(v) for v in item.new if v)
    text = f"cycle {item.cycle:>4} {item.mode}: {old.upper()} -> {new.upper()}"
    if item.changed:  # the reason's first line (an ordering violation goes on with its context)
        text += f"  CHANGED: {(item.reason or '').splitlines()[0] if item.reason else None}"
    return text
