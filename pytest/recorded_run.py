"""A run directory made of real recordings (pytest/recordings: the cycle
records and the guest reports they name), laid out as lab.run writes it:
RUN/cycles.jsonl ("started" and "done" lines) and RUN/reports/cycleN.txt.gz."""

import json
import os
import shutil

from recordings_util import RECORDINGS


def make_run_dir(run):
    """Fill the directory `run` (a pathlib.Path); returns it."""
    (run / "reports").mkdir(parents=True)
    lines = []
    with open(os.path.join(RECORDINGS, "cycles.jsonl")) as source:
        for line in source:
            record = json.loads(line)
            name = record.get("recording")
            if not name:
                continue  # the agent-stream cycles: their reports were not kept
            if record.get("report"):
                shutil.copyfile(os.path.join(RECORDINGS, f"report-{name}.txt.gz"), run / record["report"])
            started = {key: record[key] for key in ("run_id", "cycle", "mode", "wake", "pm_test", "guest")}
            lines += [json.dumps(dict(started, status="started")), json.dumps(record)]
    (run / "cycles.jsonl").write_text("\n".join(lines) + "\n")
    return run
