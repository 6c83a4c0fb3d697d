"""Whole-file writes that a reader or a crash never sees half done."""

import json
import os


def write_atomically(path, text):
    """Write `text` to `path` through a temporary file beside it and a
    rename: readers see the old file or the new one, never part of one. On
    failure the temporary file is removed and the old file stays whole."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def read_json(path, default=None):
    """The JSON value in `path`, or `default` when it is missing or
    unreadable (the reader of a side file: a bench result, a latency table)."""
    try:
        with open(path) as source:
            return json.load(source)
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deep
        return default


def write_json(path, data, sort_keys=True, compact=False):
    """`data` as JSON (indented, one trailing newline; compact: no spaces,
    for caches), written atomically."""
    if compact:
        text = json.dumps(data, separators=(",", ":"), sort_keys=sort_keys)
    else:
        text = json.dumps(data, indent=2, sort_keys=sort_keys) + "\n"
    write_atomically(path, text)
