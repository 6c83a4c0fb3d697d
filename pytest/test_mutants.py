"""./pmlab mutants (pipelines/mutants.py): its pieces on a tiny tree of its
own (fast), and the whole check on the project (pipeline-marked: ~2 min)."""

import os
import subprocess

import pytest

from conftest import REPO
from pipelines import mutants

MODULE = "def is_positive(n):\n    return n > 0\n"
TEST = "from module import is_positive\n\n\ndef test_sign():\n    assert is_positive(1) and not is_positive(-1)\n"


@pytest.fixture
def tree(tmp_path):
    """A module and its test: the `> 0` is pinned, a `>= 0` would not be."""
    (tmp_path / "module.py").write_text(MODULE)
    (tmp_path / "test_module.py").write_text(TEST)
    return tmp_path


def test_a_mutant_the_tests_catch_is_killed_and_the_file_restored(tree):
    mutant = mutants.Mutant("flip", "module.py", "n > 0", "n < 0", ("test_module.py",))
    assert mutants.try_mutant(str(tree), mutant) == mutants.KILLED
    assert (tree / "module.py").read_text() == MODULE


def test_a_mutant_no_test_pins_survives(tree):
    mutant = mutants.Mutant("boundary", "module.py", "n > 0", "n >= 0", ("test_module.py",))
    assert mutants.try_mutant(str(tree), mutant) == mutants.SURVIVED
    assert (tree / "module.py").read_text() == MODULE


def test_tests_that_do_not_run_are_no_answer():
    assert (mutants.outcome(0), mutants.outcome(1)) == (mutants.SURVIVED, mutants.KILLED)
    for status in (2, 4, 5):  # interrupted, usage error, no tests collected
        with pytest.raises(RuntimeError, match=f"pytest exited with {status}"):
            mutants.outcome(status)


def test_a_mutant_must_name_its_text_exactly_once():
    mutant = mutants.Mutant("m", "x.py", "a", "b", ())
    assert mutant.apply("xay") == "xby"
    for text, count in (("xy", 0), ("aa", 2)):
        with pytest.raises(ValueError, match=f"holds {count} copies"):
            mutant.apply(text)


def test_every_mutant_of_the_table_applies_to_the_code_as_it_is():
    """A refactor that moves a mutant's text makes the table stale: found
    here, in the fast tier, not by a mutation run that cannot start."""
    mutants.check_applies(REPO, mutants.MUTANTS)
    assert len(mutants.MUTANTS) >= 10
    covered = {mutant.path for mutant in mutants.MUTANTS}
    assert {"lab/judge.py", "lab/records.py", "lab/latency.py"} <= covered
    assert any(path.startswith("lab/oracle/") for path in covered)
    for mutant in mutants.MUTANTS:
        assert all(os.path.isfile(os.path.join(REPO, test)) for test in mutant.tests), mutant.name


def test_the_score_and_the_choice_of_mutants():
    first, second = mutants.MUTANTS[:2]
    assert mutants.score_line([(first, mutants.KILLED), (second, mutants.SURVIVED)]) == \
        "mutants: 1/2 killed, 1 survived"
    assert mutants.chosen([second.name]) == [second] and mutants.chosen([]) == list(mutants.MUTANTS)
    with pytest.raises(ValueError, match="unknown mutant 'nothing'"):
        mutants.chosen(["nothing"])


def test_an_unknown_mutant_is_refused_with_exit_2():
    done = subprocess.run(["/usr/bin/python3", "-m", "cli.main", "mutants", "nothing"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown mutant 'nothing'" in done.stderr


@pytest.mark.pipeline
def test_every_mutant_is_killed():
    """The whole check on the project: every mutant of the table is killed
    by the fast tests named for it (exit 0), the tree left as it was."""
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    done = subprocess.run(["/usr/bin/python3", "-m", "cli.main", "mutants"], cwd=REPO, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"mutants: {len(mutants.MUTANTS)}/{len(mutants.MUTANTS)} killed, 0 survived" in done.stdout
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout == before
