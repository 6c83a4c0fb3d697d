"""The READMEs and --help in step: every `./pmlab ...` command line of
README.md, lab/README.md and pipelines/README.md names only options its
verb's --help lists, and each concrete `./pmlab run` line passes run's own
check (--check-only: the request is built, nothing runs or builds). The
table of the options the cycle verbs share (README.md) is checked against
each verb's --help as well. Nothing here builds or boots."""

import functools
import os
import re
import shlex
import subprocess
import sys

import pytest

from cli import main as cli
from conftest import REPO

READMES = ("README.md", "lab/README.md", "pipelines/README.md")
SUBVERBS = {"bench": ["quiesce"], "lava": ["up", "down", "status"]}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# words a synopsis puts where a value goes: such a line is checked for its options only
PLACEHOLDER = re.compile(r"[\[\]<>|]|\.\.\.|(?<![\w/.-])[A-Z][A-Z_]*(?![\w/.-])")


def readme_commands(path):
    """[(line number, command)] of `path`: code-block lines (indented or
    fenced) that start with ./pmlab (backslash continuations joined,
    comments dropped) and inline `./pmlab ...` spans."""
    with open(os.path.join(REPO, path)) as source:
        lines = source.read().splitlines()
    found, index, fenced = [], 0, False
    while index < len(lines):
        line, number = lines[index], index + 1
        fenced = fenced != line.lstrip().startswith("```")
        if re.match(r"^ {4,}\./pmlab\b", line) or (fenced and re.match(r"^\s*\./pmlab\b", line)):
            command = line.strip()
            while command.endswith("\\") and index + 1 < len(lines):
                index += 1
                command = command[:-1].rstrip() + " " + lines[index].strip()
            found.append((number, command))
        else:
            found += [(number, span) for span in re.findall(r"`(\./pmlab[^`]*)`", line)]
        index += 1
    return [(number, re.sub(r"\s+#.*$", "", command.replace("\\|", "|")).strip()) for number, command in found]


def all_commands():
    return [(path, number, command) for path in READMES for number, command in readme_commands(path)]


@functools.lru_cache(maxsize=None)
def help_options(verb):
    """The options `./pmlab VERB --help` (and its sub-verbs' --help) lists;
    for test also pytest's own (its arguments go to pytest)."""
    texts = []
    for words in [[verb]] + [[verb, sub] for sub in SUBVERBS.get(verb, [])]:
        done = subprocess.run([os.path.join(REPO, "pmlab"), *words, "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, (words, done.stderr)
        texts.append(done.stdout)
    if verb == "test":
        texts.append(subprocess.run([sys.executable, "-m", "pytest", "pytest/", "--help", "-p", "no:cacheprovider"],
                                    cwd=REPO, capture_output=True, text=True, timeout=120).stdout)
    return frozenset(OPTION.findall("\n".join(texts)))


def verbs_of(command):
    """The verbs a command line names: `./pmlab run|nightly --request FILE`
    names two; `./pmlab --version` none ([] then)."""
    words = command.split()
    if len(words) < 2 or words[1].startswith("-") or words[1] == "VERB":
        return []
    return words[1].split("|")


def test_the_readmes_give_commands_to_check():
    commands = all_commands()
    assert len(commands) > 60
    assert {verb for _, _, command in commands for verb in verbs_of(command)} >= {"run", "test", "bench", "soak"}


@pytest.mark.parametrize("path, number, command", all_commands(), ids=lambda value: str(value)[:60])
def test_a_readme_command_names_only_options_its_verb_takes(path, number, command):
    verbs = verbs_of(command)
    if not verbs:  # ./pmlab --help, --version
        done = subprocess.run([os.path.join(REPO, "pmlab"), *command.split()[1:2]], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert len(command.split()) == 1 or done.returncode == 0 or "VERB" in command, (path, number, command)
        return
    for verb in verbs:
        assert verb in cli.VERBS or verb in cli.SHELL_VERBS, f"{path}:{number}: no verb '{verb}': {command}"
        unknown = sorted(set(OPTION.findall(command.split(None, 2)[2] if len(command.split()) > 2 else ""))
                         - help_options(verb))
        assert not unknown, f"{path}:{number}: ./pmlab {verb} --help has no {', '.join(unknown)}: {command}"


def without_kernel_options(args):
    """args without --kernel/--series/--config and their values: they name
    trees and files of the README's reader (their names are checked above)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--kernel", "--series", "--config"):
            skip = True
        elif not arg.startswith(("--kernel=", "--series=", "--config=")):
            kept.append(arg)
    return kept


CONCRETE_RUNS = [(path, number, command) for path, number, command in all_commands()
                 if verbs_of(command) == ["run"] and not PLACEHOLDER.search(command.split(None, 2)[-1])]


@pytest.mark.parametrize("path, number, command", CONCRETE_RUNS, ids=lambda value: str(value)[:60])
def test_a_readme_run_line_passes_runs_check(path, number, command, tmp_path, capsys):
    args = without_kernel_options(shlex.split(command)[2:])
    code = cli.main(["run", "--check-only", "--results", str(tmp_path), *args])
    assert code == 0, f"{path}:{number}: {command}: {capsys.readouterr().err}"


def verb_table_rows(path):
    """[(line number, options cell, [verbs])] of the table rows whose last
    cell lists verbs only (README.md's table of the shared options)."""
    rows = []
    with open(os.path.join(REPO, path)) as source:
        for number, line in enumerate(source, 1):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if len(cells) < 2:
                continue
            verbs = [word.strip() for word in cells[-1].split(",")]
            if verbs and all(verb in cli.VERBS for verb in verbs):
                rows.append((number, " ".join(cells[:-1]), verbs))
    return rows


def test_the_table_of_shared_options_is_what_each_verb_takes():
    rows = verb_table_rows("README.md")
    assert len(rows) >= 8, rows
    drift = []
    for number, cell, verbs in rows:
        for verb in verbs:
            missing = sorted(set(OPTION.findall(cell)) - help_options(verb))
            if missing:
                drift.append(f"README.md:{number}: ./pmlab {verb} takes no {', '.join(missing)}")
    assert not drift, "\n".join(drift)
