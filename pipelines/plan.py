"""The nightly soak's plan, shards and resume bookkeeping (no guests here).

Plan: cycles 1, 2, 3, ... up to max_cycles (None: until the time budget runs
out) go through the modes in rounds of len(modes), each round starting one
mode later (mem freeze disk, freeze disk mem, disk mem freeze, ...). Plain
round robin would give shard i/N a single mode whenever N shares a factor
with len(modes) (3 modes, 3 shards: one shard all disk); the rotation keeps
shards mixed for most N and does not depend on N, so a cycle number means the
same mode sharded or not. Shard i/N runs only the cycles i, i+N, i+2N, ... of
that plan, so N shards together run exactly the plan, each cycle once, under
its own number.

Resume: a run directory's cycles.jsonl is the state. The cycles recorded
there are done (a cycle with only its "started" line is closed as an error
"interrupted", lab.records.close_interrupted); a rerun continues with the plan's cycles after the highest
recorded number.
"""

import itertools
import re

from lab import modes
from lab.records import is_done
from lab.errors import LabError

DEFAULT_MODES = ("mem", "freeze", "disk")
# Seconds per cycle before this run has measured any (TCG, q35+OVMF), and per
# guest boot (define, OVMF, kernel, agent: each lab.run chunk boots one).
DEFAULT_SECONDS = {"mem": 5.0, "freeze": 3.0, "disk": 25.0, "pm_test": 1.0}
BOOT_SECONDS = 25.0


class PlanError(ValueError):
    pass


def parse_shard(text):
    """"i/N" -> (i, N) with 1 <= i <= N; None -> (1, 1)."""
    if text is None:
        return (1, 1)
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise PlanError(f"bad shard '{text}': use i/N with 1 <= i <= N, e.g. 2/4")
    return (int(match[1]), int(match[2]))


def expand_modes(items):
    """--mode values to the plan's mode list in the one mode grammar
    (lab.modes): "mem*20" stands for mem given 20 times (a soak of mostly S3
    with some hibernation: mem*20, disk); every item is checked."""
    try:
        return modes.expand(items)
    except LabError as error:
        raise PlanError(str(error)) from None


def describe_modes(names):
    """The inverse of expand_modes for a log line: mem x20 then disk -> "mem*20,disk"."""
    return modes.describe(names)


def mode_of(number, modes):
    """The plan's mode for cycle `number` (1-based): rotating rounds."""
    count = len(modes)
    return modes[((number - 1) + (number - 1) // count) % count]


def shard_numbers(shard, max_cycles=None, after=0):
    """The shard's cycle numbers greater than `after`, in order (a generator;
    endless when max_cycles is None)."""
    index, count = shard
    first = index
    if after >= index:
        first = index + ((after - index) // count + 1) * count
    numbers = itertools.count(first, count)
    if max_cycles is None:
        return numbers
    return itertools.takewhile(lambda n: n <= max_cycles, numbers)


def shard_plan(shard, modes, max_cycles):
    """[(number, mode)] of a bounded plan's shard."""
    return [(n, mode_of(n, modes)) for n in shard_numbers(shard, max_cycles)]


def run_dir_name(run_id, shard):
    """Shards of one run write to their own directories; their records all
    carry the same run_id, so the dashboard reads them as one run."""
    index, count = shard
    return run_id if count == 1 else f"{run_id}-shard{index}of{count}"


def resume_point(records):
    """(last recorded cycle number or 0, [records to close as interrupted])"""
    last = max((r["cycle"] for r in records), default=0)
    return last, [r for r in records if not is_done(r)]


def seconds_per_cycle(records):
    """{mode kind: mean host seconds} measured so far, defaults elsewhere."""
    sums = {}
    for record in records:
        seconds = record.get("host_seconds")
        if is_done(record) and isinstance(seconds, (int, float)):
            kind = "pm_test" if str(record["mode"]).startswith("pm_test") else record["mode"]
            total, count = sums.get(kind, (0.0, 0))
            sums[kind] = (total + seconds, count + 1)
    estimate = dict(DEFAULT_SECONDS)
    estimate.update({kind: total / count for kind, (total, count) in sums.items()})
    return estimate


def estimate(mode, per_mode):
    mode = mode.partition("/")[0]  # "disk/reboot": the mode, not its wake source
    kind = "pm_test" if mode.startswith("pm_test") else mode
    return per_mode.get(kind, max(DEFAULT_SECONDS.values()))


def fit_chunk(numbers, modes, per_mode, limit, seconds_left=None, boot=BOOT_SECONDS):
    """How many of `numbers` (the next cycles, in order) to run in one lab.run
    call: at most `limit`, and, with a time budget, only as many as fit in it
    (one boot plus their estimated seconds). 0 when not even one fits."""
    count, spent = 0, boot
    for number in numbers[:limit]:
        spent += estimate(mode_of(number, modes), per_mode)
        if seconds_left is not None and spent > seconds_left:
            break
        count += 1
    return count
