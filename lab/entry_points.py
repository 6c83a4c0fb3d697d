"""The one door: ./pmlab VERB. A module whose main() a verb calls was once
run as `python3 -m MODULE` (lab/README's older commands); run so now, it
says which verb to type instead of importing itself and exiting 0."""

import sys


def redirect(module, verb):
    """Tell the user of `python3 -m module` to type ./pmlab VERB; exit 2."""
    without_build = f" (or /usr/bin/python3 -m cli.main {verb}: the same without its install and build step)" \
        if verb == "run" else ""
    print(f"python3 -m {module} is no command of its own: use ./pmlab {verb}{without_build}", file=sys.stderr)
    return 2
