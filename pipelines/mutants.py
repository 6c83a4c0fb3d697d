"""A small mutation check of the judge, the oracle, the records and the
latency gate (./pmlab mutants): each mutant of MUTANTS changes one thing
the code must get right (a comparison, a term of a formula, a rule); it is
applied alone to a copy of the tree, the fast tests named for its module
run there, and the mutant is killed when they fail, survived when they
pass. A survivor is a rule no test pins. Exit 0 when every mutant was
killed, 1 when one survived, 2 for bad input or a copy whose unmutated
tests fail (then no mutant says anything).

The tree itself is never changed: the copy is the checkout's tracked
files (git ls-files), in a temporary directory removed afterwards.
"""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"

# The fast tests of each module (no guest, kernel or browser).
JUDGE_TESTS = ("pytest/test_judge.py", "pytest/test_rejudge.py")
ORACLE_TESTS = ("pytest/test_oracle.py", "pytest/test_oracle_providers.py", "pytest/test_judge.py")
RECORDS_TESTS = ("pytest/test_records.py",)
LATENCY_TESTS = ("pytest/test_latency.py",)


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    path: str                 # relative to the tree
    old: str                  # text that occurs exactly once in the file
    new: str
    tests: tuple[str, ...]    # pytest arguments: the fast tests that should kill it

    def apply(self, text: str) -> str:
        """The file's text with this mutation; ValueError when `old` is not
        there exactly once (the code moved on: the table needs updating)."""
        count = text.count(self.old)
        if count != 1:
            raise ValueError(f"mutant {self.name}: {self.path} holds {count} copies of {self.old!r}, not 1")
        return text.replace(self.old, self.new)


MUTANTS = (
    # lab/oracle: the device state machine and the rules
    Mutant("oracle-repeated-level", "lab/oracle/judge.py",
           "elif reached and level <= reached[-1]:", "elif reached and level < reached[-1]:", ORACLE_TESTS),
    Mutant("oracle-prepare-eagain", "lab/oracle/rules.py",
           "return ret < 0 and ret != EAGAIN", "return ret < 0", ORACLE_TESTS),
    Mutant("oracle-undo-event", "lab/oracle/judge.py",
           'elif side == "resume" and call.event not in undo:', 'elif side == "resume" and call.event in undo:',
           ORACLE_TESTS),
    Mutant("oracle-missing-complete", "lab/oracle/judge.py",
           "if prepared and not (self.last_in_kernel and self.event in rules.MAY_END_SUSPENDED):",
           "if prepared and (self.last_in_kernel and self.event in rules.MAY_END_SUSPENDED):", ORACLE_TESTS),
    Mutant("oracle-parent-order", "lab/oracle/rules.py",
           'PARENT_FIRST = {"prepare": True, "suspend": False,', 'PARENT_FIRST = {"prepare": True, "suspend": True,',
           ORACLE_TESTS),
    # lab/judge.py: the verdict
    Mutant("judge-ordering-fails-a-pass", "lab/judge.py",
           'if violations and result["verdict"] == PASS:', 'if violations and result["verdict"] == ERROR:',
           JUDGE_TESTS),
    Mutant("judge-one-suspend-event", "lab/judge.py",
           'if proof["pmsuspend"] != 1 or proof["pmwakeup"] != 1:',
           'if proof["pmsuspend"] != 1 and proof["pmwakeup"] != 1:', JUDGE_TESTS),
    Mutant("judge-one-success", "lab/judge.py",
           'if mode.kind in ("mem", "freeze", "pm_test") and success != 1:',
           'if mode.kind in ("mem", "freeze", "pm_test") and success < 1:', JUDGE_TESTS),
    Mutant("judge-tree-needs-callbacks", "lab/judge.py",
           'if not tree or "dpm_suspend" not in phases:', "if not tree:", JUDGE_TESTS),
    # lab/records.py: the one pass rate and its statistics
    Mutant("records-wilson-half-width", "lab/records.py",
           "p * (1 - p) / trials + z * z / (4 * trials * trials)", "p * (1 - p) / trials", RECORDS_TESTS),
    Mutant("records-nearest-rank-round", "lab/records.py",
           "rank = max(1, math.ceil(fraction * len(ordered)))", "rank = max(1, round(fraction * len(ordered)))",
           RECORDS_TESTS),
    Mutant("records-unfinished-judged", "lab/records.py",
           "JUDGED = (PASS, FAIL, HANG, UNFINISHED)", "JUDGED = (PASS, FAIL, HANG)", RECORDS_TESTS),
    Mutant("records-done-line-wins", "lab/records.py",
           "return old is None or is_done(new) or not is_done(old)", "return old is None or is_done(new)",
           RECORDS_TESTS),
    Mutant("records-damaged-verdict", "lab/records.py",
           'return str(record["verdict"]) if record.get("verdict") in VERDICTS else ERROR',
           'return str(record["verdict"]) if record.get("verdict") in VERDICTS else FAIL', RECORDS_TESTS),
    Mutant("records-settled-error", "lab/records.py",
           "and not (state_of(r) == ERROR and rerun_origin(r) in settled)", "", RECORDS_TESTS),
    # lab/latency.py: the latency gate and the absolute limits
    Mutant("latency-floor-both", "lab/latency.py",
           "return after_ms - before_ms >= self.ms and after_ms >= before_ms * (1 + self.ratio)",
           "return after_ms - before_ms >= self.ms or after_ms >= before_ms * (1 + self.ratio)", LATENCY_TESTS),
    Mutant("latency-host-factor-floor", "lab/latency.py",
           "return max(1.0, statistics.median(ratios))", "return statistics.median(ratios)", LATENCY_TESTS),
    Mutant("latency-injected-not-sampled", "lab/latency.py",
           "return records.state_of(record) == records.PASS and not records.injected(record)",
           "return records.state_of(record) == records.PASS", LATENCY_TESTS),
    Mutant("latency-limit-seconds", "lab/latency.py",
           "ms > seconds * 1000", "ms > seconds * 100", LATENCY_TESTS),
)

KILLED, SURVIVED = "killed", "survived"


def copy_tree(source: str, destination: str) -> None:
    """The checkout's tracked files, as they are now (uncommitted changes
    too), copied under destination."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=source, capture_output=True, check=True).stdout
    for relative in filter(None, listed.decode().split("\0")):
        origin = os.path.join(source, relative)
        if not os.path.isfile(origin) or os.path.islink(origin):
            continue  # a deleted file, or build/ (a link to the artifacts)
        target = os.path.join(destination, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(origin, target)


def run_tests(tree: str, tests: Sequence[str]) -> int:
    """pytest's exit status for `tests` in `tree` (stops at the first failure)."""
    command = [PYTHON, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", *tests]
    return subprocess.run(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1")).returncode


def outcome(status: int) -> str:
    """killed (tests failed), survived (passed); pytest's other statuses
    (interrupted, usage error, nothing collected) are no answer."""
    if status == 0:
        return SURVIVED
    if status == 1:
        return KILLED
    raise RuntimeError(f"pytest exited with {status}: the mutant's tests did not run")


def try_mutant(tree: str, mutant: Mutant) -> str:
    """Apply the mutant to the copy, run its tests, restore the file."""
    path = os.path.join(tree, mutant.path)
    with open(path) as source:
        original = source.read()
    mutated = mutant.apply(original)
    try:
        with open(path, "w") as out:
            out.write(mutated)
        return outcome(run_tests(tree, mutant.tests))
    finally:
        with open(path, "w") as out:
            out.write(original)


def chosen(names: Optional[Sequence[str]]) -> list[Mutant]:
    """The mutants named (all without names); ValueError for an unknown name."""
    if not names:
        return list(MUTANTS)
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown mutant {unknown[0]!r} (./pmlab mutants --list names them)")
    return [known[name] for name in names]


def check_applies(tree: str, mutants: Sequence[Mutant]) -> None:
    """Every mutant's text is in its file once: a table gone stale is bad
    input, found before any test runs."""
    for mutant in mutants:
        with open(os.path.join(tree, mutant.path)) as source:
            mutant.apply(source.read())


def score_line(results: Sequence[tuple[Mutant, str]]) -> str:
    killed = sum(1 for _, result in results if result == KILLED)
    return f"mutants: {killed}/{len(results)} killed, {len(results) - killed} survived"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="pmlab mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="MUTANT", help="only these mutants (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    args = parser.parse_args(argv)
    try:
        mutants = chosen(args.names)
    except ValueError as error:
        print(f"pmlab mutants: {error}", file=sys.stderr)
        return 2
    if args.list:
        for mutant in mutants:
            print(f"{mutant.name:30} {mutant.path}: {mutant.old!r} -> {mutant.new!r}  [{' '.join(mutant.tests)}]")
        return 0
    with tempfile.TemporaryDirectory(prefix="pmlab-mutants-") as tree:
        copy_tree(REPO, tree)
        try:
            check_applies(tree, mutants)
        except ValueError as error:
            print(f"pmlab mutants: {error}", file=sys.stderr)
            return 2
        tests = sorted({test for mutant in mutants for test in mutant.tests})
        if run_tests(tree, tests) != 0:
            print(f"pmlab mutants: the unmutated tree fails {' '.join(tests)}: fix that first", file=sys.stderr)
            return 2
        results = []
        for mutant in mutants:
            started = time.monotonic()
            result = try_mutant(tree, mutant)
            results.append((mutant, result))
            print(f"{result:8} {mutant.name:30} {mutant.path} ({time.monotonic() - started:.1f} s)", flush=True)
    print(score_line(results))
    return 1 if any(result == SURVIVED for _, result in results) else 0


if __name__ == "__main__":  # ./pmlab mutants is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.mutants", "mutants"))
