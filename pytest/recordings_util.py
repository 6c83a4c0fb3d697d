"""Access to pytest/recordings/ (real guest output, see recordings/record.py)."""

import gzip
import json
import os

RECORDINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recordings")


def read(name):
    """Text of a recording; .gz files are decompressed."""
    path = os.path.join(RECORDINGS, name)
    if name.endswith(".gz"):
        with gzip.open(path, "rt", errors="replace") as source:
            return source.read()
    with open(path, errors="replace") as source:
        return source.read()


def read_bytes(name):
    path = os.path.join(RECORDINGS, name)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rb") as source:
        return source.read()


def report(name):
    return read(f"report-{name}.txt.gz")


def records():
    """{recording name: the cycle's final record}: the lean guest's
    (cycles.jsonl) and the device guest's (zoo-cycles.jsonl)"""
    out = {}
    for line in (read("cycles.jsonl") + read("zoo-cycles.jsonl")).splitlines():
        record = json.loads(line)
        if record.get("recording"):
            out[record["recording"]] = record
    return out
