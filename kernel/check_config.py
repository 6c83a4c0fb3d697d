#!/usr/bin/python3
"""Check that every line of a config fragment survived into a final .config.

kconfig silently drops options whose dependencies are not met; a guest built
from such a config boots without the feature the fragment asked for.
"""
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


def main(argv):
    if len(argv) != 3:
        print('usage: check_config.py FRAGMENT DOTCONFIG', file=sys.stderr)
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
