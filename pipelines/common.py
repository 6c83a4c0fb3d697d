"""Small helpers the pipelines share: the repository root, stage timing,
running a command with its output streamed, reading a run directory."""

import contextlib
import datetime
import os
import subprocess
import sys
import time

from lab import files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # the Debian interpreter (libvirt, pytest, jinja2)
# One kernel build at a time on this machine: kernel/build takes that lock
# itself (kernel/tree.sh build_lock), so the pipelines just call it.


def log(prog, message):
    print(f"{prog}: {message}", flush=True)


def stamp(epoch=None):
    when = datetime.datetime.fromtimestamp(time.time() if epoch is None else epoch, datetime.timezone.utc)
    return when.strftime("%Y%m%d-%H%M%S")


def hms(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Stages:
    """Wall time per stage, printed as each ends and as a table at the end."""

    def __init__(self, prog):
        self.prog = prog
        self.done = []  # [{"stage", "seconds", "status", "note"}]

    @contextlib.contextmanager
    def stage(self, name):
        log(self.prog, f"== stage {name}")
        started = time.monotonic()
        entry = {"stage": name, "seconds": None, "status": "ok", "note": ""}
        self.done.append(entry)
        try:
            yield entry
        except BaseException:
            entry["status"] = "error"
            raise
        finally:
            entry["seconds"] = round(time.monotonic() - started, 2)
            text = f"== stage {name}: {entry['status']} in {entry['seconds']:.1f} s"
            log(self.prog, text + (f" ({entry['note']})" if entry["note"] else ""))

    def table(self):
        lines = [f"{'stage':<12} {'status':<8} {'seconds':>8}  note"]
        for entry in self.done:
            seconds = "-" if entry["seconds"] is None else f"{entry['seconds']:.1f}"
            lines.append(f"{entry['stage']:<12} {entry['status']:<8} {seconds:>8}  {entry['note']}")
        total = sum(e["seconds"] or 0 for e in self.done)
        lines.append(f"{'total':<12} {'':<8} {total:>8.1f}")
        return "\n".join(lines)


def run(argv, prefix=None, env=None, cwd=None):
    """Run argv, stream its output (each line prefixed), return its exit status."""
    merged = dict(os.environ)
    merged.update(env or {})
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=merged, cwd=cwd, bufsize=1, text=True, errors="replace")
    try:
        for line in process.stdout:
            sys.stdout.write((f"  {prefix}| " if prefix else "") + line)
            sys.stdout.flush()
    except KeyboardInterrupt:
        # Ctrl-C reached the child too (same process group): let it finish.
        pass
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:
            continue


def read_json(path, default=None):
    return files.read_json(path, default)


def write_json(path, data):
    files.write_json(path, data)


def read_records(run_dir):
    """The final record of every cycle of a run directory (lab.records)."""
    sys.path.insert(0, REPO) if REPO not in sys.path else None
    from lab.records import cycles_path, read_cycles
    return read_cycles(cycles_path(run_dir))


def write_run_manifest(run_dir, artifacts, run_id, shard=None):
    """<run_dir>/manifest.json (lab.manifest: what the run ran on: commit,
    kernel, QEMU/OVMF/libvirt, host). Returns a note for the log; never raises."""
    try:
        from lab.manifest import write_manifest
        manifest = write_manifest(run_dir, artifacts, shard if shard and shard[1] > 1 else None, run_id)
        return f"manifest.json ({len(manifest.get('errors') or [])} probe errors)"
    except Exception as error:  # the manifest must not stop a run
        return f"manifest.json not written: {type(error).__name__}: {error}"
