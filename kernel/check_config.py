#!/usr/bin/python3
"""Check that every line of a config fragment survived into a final .config.

kconfig silently drops options whose dependencies are not met; a guest built
from such a config boots without the feature the fragment asked for.
--overrides names where a user's base .config (kernel/build --config) set an
option the fragment sets otherwise: merge_config.sh lets the fragment win
without a word, so a user's CONFIG_HZ_250=y would vanish unexplained.
"""
import os
import re
import sys

SET = re.compile(r'^(CONFIG_[A-Za-z0-9_]+)=(.*)$')
UNSET = re.compile(r'^# (CONFIG_[A-Za-z0-9_]+) is not set$')


def parse(lines):
    """Map option -> value ('n' for '# CONFIG_X is not set') with line numbers."""
    options = {}
    for number, line in enumerate(lines, 1):
        line = line.rstrip('\n')
        match = SET.match(line)
        if match:
            options[match.group(1)] = (match.group(2), number)
            continue
        match = UNSET.match(line)
        if match:
            options[match.group(1)] = ('n', number)
    return options


def dropped(fragment_lines, config_lines):
    """Return (option, wanted, got, fragment line) for every lost option."""
    final = {k: v for k, (v, _) in parse(config_lines).items()}
    lost = []
    for option, (wanted, number) in parse(fragment_lines).items():
        got = final.get(option, 'n')
        if got != wanted:
            lost.append((option, wanted, got, number))
    return lost


def overridden(fragment_lines, base_lines):
    """(option, base value, fragment value, fragment line) for every option
    the base config sets explicitly ("=..." or "is not set") to a value
    other than the fragment's."""
    base = {k: v for k, (v, _) in parse(base_lines).items()}
    return [(option, base[option], wanted, number)
            for option, (wanted, number) in parse(fragment_lines).items()
            if option in base and base[option] != wanted]


KCONFIG_SYMBOL = re.compile(r'^\s*(?:menu)?config\s+([A-Za-z0-9_]+)\s*$', re.MULTILINE)


def tree_symbols(tree):
    """Every symbol a kernel tree's Kconfig files define."""
    symbols = set()
    for directory, dirs, names in os.walk(tree):
        dirs[:] = [d for d in dirs if not d.startswith('.')]
        for name in names:
            if name.startswith('Kconfig'):
                with open(os.path.join(directory, name), errors='replace') as source:
                    symbols.update(KCONFIG_SYMBOL.findall(source.read()))
    return symbols


def unknown(fragment_lines, symbols):
    """(option, fragment line) for every option the fragment sets that the
    tree does not define (an unset one it lacks is unset anyway)."""
    return [(option, number) for option, (value, number) in parse(fragment_lines).items()
            if value != 'n' and option[len('CONFIG_'):] not in symbols]


def main(argv):
    if len(argv) == 4 and argv[1] == '--symbols':
        with open(argv[2]) as fragment:
            missing = unknown(fragment.readlines(), tree_symbols(argv[3]))
        for option, number in missing:
            print(f'{argv[2]}:{number}: {option}: no such option in {argv[3]} '
                  f'(no "config {option[len("CONFIG_"):]}" in any Kconfig file)', file=sys.stderr)
        return 1 if missing else 0
    if len(argv) == 4 and argv[1] == '--overrides':
        with open(argv[2]) as fragment, open(argv[3]) as base:
            replaced = overridden(fragment.readlines(), base.readlines())
        for option, theirs, wanted, number in replaced:
            print(f'{argv[2]}:{number}: {option}={wanted} replaces {option}={theirs} '
                  f'of {argv[3]} (the lab needs the fragment\'s value)', file=sys.stderr)
        return 0
    if len(argv) != 3:
        print('usage: check_config.py FRAGMENT DOTCONFIG | --symbols FRAGMENT TREE'
              ' | --overrides FRAGMENT BASECONFIG', file=sys.stderr)
        return 2
    with open(argv[1]) as fragment, open(argv[2]) as config:
        lost = dropped(fragment.readlines(), config.readlines())
    for option, wanted, got, number in lost:
        print(f'{argv[1]}:{number}: {option}={wanted} was dropped by kconfig '
              f'(final .config has {option}={got}); check its dependencies',
              file=sys.stderr)
    return 1 if lost else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
