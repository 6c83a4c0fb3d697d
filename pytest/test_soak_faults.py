"""Faults a soak must survive, each injected into a real run (lab.run or
./pmlab nightly as a child process, real guests), then the results read
back: the harness killed, QEMU killed, a guest panic, a full results disk,
libvirtd restarted. The guest hang is test_cycles.py's hang test.

The libvirtd that is restarted is the test's own (pytest/own_libvirtd.py:
its own mount namespace, sockets, pid files and state), never the
machine's, which other runs beside the suite are using.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import artifacts_dir
from lab import artifacts as artifacts_mod

pytestmark = pytest.mark.guest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"


def _artifacts(config):
    return artifacts_dir(config)


@pytest.fixture
def artifacts(request):
    return os.path.abspath(_artifacts(request.config))


def _as_on_a_terminal():
    """SIGINT as a terminal's foreground job has it: a shell's background
    job (`.ci/run &`, nohup) inherits it ignored, and Python then installs
    no KeyboardInterrupt handler: the Ctrl-C test would send it in vain."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(argv, log_path):
    """A child in its own session (so it can be killed as a group)."""
    env = dict(os.environ, PYTHONPATH=REPO)
    log = open(log_path, "w")
    return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, preexec_fn=_as_on_a_terminal)


def _lines(path):
    """Every line of a cycles.jsonl, each parsed (a line that is not whole
    JSON fails the test: nothing may leave one behind)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as source:
        for number, line in enumerate(source, 1):
            assert line.endswith("\n"), f"{path}:{number}: line cut short: {line[-80:]!r}"
            out.append(json.loads(line))
    return out


def _final(lines):
    latest = {}
    for record in lines:
        latest[record["cycle"]] = record
    return [latest[n] for n in sorted(latest)]


def _wait_for(predicate, timeout, what, process=None, log_path=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if process is not None and process.poll() is not None:
            break
        time.sleep(0.1)
    tail = open(log_path).read()[-3000:] if log_path and os.path.exists(log_path) else ""
    pytest.fail(f"{what} did not happen within {timeout}s\n{tail}", pytrace=False)


def _started_not_done(path, number):
    """Cycle `number` has its "started" line and no "done" line yet."""
    lines = _lines(path)
    started = any(r["cycle"] == number and r["status"] == "started" for r in lines)
    done = any(r["cycle"] == number and r["status"] == "done" for r in lines)
    return started and not done


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as source:
            return [int(p) for p in source.read().split()]
    except OSError:
        return []


def _domains(prefix, uri="qemu:///system"):
    done = subprocess.run(["virsh", "-c", uri, "list", "--name"], capture_output=True, text=True)
    return [name for name in done.stdout.split() if name.startswith(prefix)]


def _explain(records):
    return "\n".join(f"cycle {r['cycle']} {r['mode']} {r.get('status')} {r.get('verdict')} "
                     f"{r.get('phase')}: {str(r.get('reason'))[:200]}" for r in records)


def _lab_run(results, run_id, *options):
    return [PYTHON, "-m", "cli.main", "run", "--no-dashboard", "--results", results, "--run-id", run_id] + list(options)


# ----------------------------------------------------------- the harness

def test_harness_sigkill_mid_cycle_then_rerun_resumes(tmp_path, artifacts):
    """nightly and its lab.run are SIGKILLed while cycle 3 runs; the same
    command again resumes: cycles 1..5 each recorded once, cycle 3
    `interrupted` (with the reason), the others pass, the killed run's guest
    gone (libvirt's autodestroy)."""
    results, run_id = str(tmp_path / "results"), f"sigkill-{os.getpid()}"
    command = [os.path.join(REPO, "pmlab"), "nightly", "--run-id", run_id, "--results", results,
               "--mode", "mem", "--max-cycles", "5", "--chunk", "5", "--artifacts", artifacts]
    log = str(tmp_path / "first.log")
    nightly = _start(command, log)
    chunk = os.path.join(results, run_id, "cycles.jsonl")  # each chunk writes into the run
    try:
        _wait_for(lambda: _started_not_done(chunk, 3), 300, "cycle 3 starting", nightly, log)
        time.sleep(0.5)  # inside the cycle: suspending or resuming
        lab_run = _children(nightly.pid)
        os.kill(nightly.pid, signal.SIGKILL)
        for pid in lab_run:
            os.kill(pid, signal.SIGKILL)
    finally:
        nightly.wait(30)
    guest_prefix = f"pmlab-{run_id}"
    _wait_for(lambda: not _domains(guest_prefix), 30, "libvirt destroying the killed run's guest")

    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900,
                           env=dict(os.environ, PYTHONPATH=REPO))
    lines = _lines(os.path.join(results, run_id, "cycles.jsonl"))
    records = _final(lines)
    assert [r["cycle"] for r in records] == [1, 2, 3, 4, 5], _explain(records) + again.stdout[-2000:]
    done = [r["cycle"] for r in lines if r["status"] == "done"]
    assert sorted(done) == [1, 2, 3, 4, 5], f"each cycle recorded once, got done lines for {sorted(done)}"
    interrupted = records[2]
    assert (interrupted["verdict"], interrupted["phase"]) == ("interrupted", "interrupted"), _explain(records)
    assert "interrupted" in interrupted["reason"]
    assert [r["verdict"] for r in records[:2] + records[3:]] == ["pass"] * 4, _explain(records)
    assert again.returncode == 0, again.stdout[-2000:]  # the interrupted cycle is no failure
    assert "resuming run" in again.stdout
    # libvirt destroyed the killed guest but not its volumes: the sweep does
    # (each new session sweeps those older than 10 minutes).
    from lab import virt
    connection = virt.Connection()
    try:
        # min_age=0 only under this run's prefix: a parallel worker's guests
        # (-n 2) are not this sweep's to judge.
        swept = virt.sweep_orphan_volumes(connection.conn, virt.storage_pool(connection.conn), min_age=0,
                                          prefix=guest_prefix)
    finally:
        connection.close()
    killed = f"{guest_prefix}-w0-1"
    assert {f"{killed}-bzImage", f"{killed}-initramfs", f"{killed}-swap"} <= set(swept), swept


def _define_guest(conn, name):
    """A domain that exists and never runs (no QEMU started): to the sweep,
    a guest like any other."""
    return conn.defineXML(f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>"
                          "<os><type arch='x86_64'>hvm</type></os></domain>")


def test_sweep_spares_volumes_younger_than_the_oldest_guest():
    """Real libvirt volumes and a real (defined, never started) domain: a
    domainless guest's volumes go only when all are older than `min_age`
    and than the oldest guest that exists; a hibernated worker's swap
    written after that guest was made stays, even with min_age=0."""
    from lab import virt
    connection = virt.Connection()
    conn = connection.conn
    pool = virt.storage_pool(conn)
    prefix = f"pmlab-sweeptest-{os.getpid()}-"
    volumes = {guest: [f"{prefix}{guest}{suffix}" for suffix in virt.VOLUME_SUFFIXES]
               for guest in ("killed", "running", "hibernated")}

    def make(guest):
        for name in volumes[guest]:
            virt.blank_volume(pool, name, 1 << 20)
        time.sleep(1.5)  # the next guest's volumes are clearly younger

    domain = None
    try:
        make("killed")      # a killed run's guest, made before anything below
        domain = _define_guest(conn, f"{prefix}running")
        make("running")     # the oldest guest that exists
        make("hibernated")  # no domain while hibernated; its swap just written
        assert virt.sweep_orphan_volumes(conn, pool, min_age=600, prefix=prefix) == []
        swept = virt.sweep_orphan_volumes(conn, pool, min_age=0, prefix=prefix)
        assert sorted(swept) == sorted(volumes["killed"]), swept
        # with no guest left, nothing is younger than one: min_age alone decides
        domain.undefine()
        domain = None
        virt.delete_volumes(pool, volumes["running"])
        swept = virt.sweep_orphan_volumes(conn, pool, min_age=0, prefix=prefix)
        assert sorted(swept) == sorted(volumes["hibernated"]), swept
    finally:
        if domain is not None:
            domain.undefine()
        virt.delete_volumes(pool, [name for names in volumes.values() for name in names])
        connection.close()


def _during_cycle_2(tmp_path, artifacts, run_id, cycles, act, timeout):
    """Start `./pmlab run --mode mem*CYCLES`, call act(process, cycles.jsonl)
    once cycle 2 is under way, wait for the run's end: (exit code, the
    cycles.jsonl path, the run's log)."""
    results, log = str(tmp_path / "results"), str(tmp_path / "lab.log")
    run = _start(_lab_run(results, run_id, "--mode", "mem", "--cycles", str(cycles), "--artifacts", artifacts), log)
    path = os.path.join(results, run_id, "cycles.jsonl")
    try:
        _wait_for(lambda: _started_not_done(path, 2), 300, "cycle 2 starting", run, log)
        time.sleep(0.3)  # inside the cycle
        act(run, path)
        return run.wait(timeout), path, log
    finally:
        if run.poll() is None:
            run.kill()


def test_qemu_killed_mid_cycle_is_recorded_and_the_run_continues(tmp_path, artifacts):
    """QEMU SIGKILLed during cycle 2: cycle 2 is the lab's `error` naming
    QEMU's exit (not a hang after the watchdog), cycles 3 and 4 pass in a
    fresh guest, and lab.run runs cycle 2 again after the plan (cycle 5,
    rerun_of 2): the kernel's sample is whole, so it exits 0."""
    run_id, killed = f"qemukill-{os.getpid()}", []

    def kill_qemu(run, path):
        killed.append(next(r["guest"] for r in _lines(path) if r["cycle"] == 2))
        with open(f"/run/libvirt/qemu/{killed[0]}.pid") as pidfile:
            os.kill(int(pidfile.read()), signal.SIGKILL)

    code, path, _ = _during_cycle_2(tmp_path, artifacts, run_id, 4, kill_qemu, 600)
    guest = killed[0]
    records = _final(_lines(path))
    assert [r["verdict"] for r in records] == ["pass", "error", "pass", "pass", "pass"], _explain(records)
    assert records[1]["phase"] == "lab" and "QEMU exited" in records[1]["reason"], _explain(records)
    assert records[1]["host_seconds"] < 30, "the QEMU exit was noticed at once, not by a watchdog"
    assert records[2]["guest"] != guest
    assert (records[4]["rerun_of"], records[4]["rerun_attempt"]) == (2, 1)
    assert code == 0


def test_ctrl_c_mid_cycle_records_it_as_interrupted_and_exits_130(tmp_path, artifacts):
    """SIGINT (Ctrl-C) while cycle 2 of 3 runs: lab.run records cycle 2 as
    interrupted (cycle 1 keeps its pass), says so, removes its guest and
    exits 130, not 1 (the code of a failed cycle)."""
    run_id = f"sigint-{os.getpid()}"
    code, path, log = _during_cycle_2(tmp_path, artifacts, run_id, 3,
                                      lambda run, path: run.send_signal(signal.SIGINT), 300)
    with open(log) as source:
        said = source.read()
    records = _final(_lines(path))
    assert [(r["cycle"], r["verdict"]) for r in records] == [(1, "pass"), (2, "interrupted")], _explain(records)
    assert code == 130, said[-2000:]
    assert "interrupted during cycle 2/3: cycle 2 recorded as interrupted, 1 cycle finished" in said, said[-2000:]
    assert not _domains(f"pmlab-{run_id}")


# ------------------------------------------------------------ the guest

def test_guest_panic_is_recorded_with_console_evidence(tmp_path, artifacts):
    """pmtest's panic knob panics the guest kernel inside ->suspend of one
    device: the cycle fails at once (not after a watchdog) with the panic
    line as reason and in its console evidence; the next cycle passes in a
    fresh guest."""
    results, run_id = str(tmp_path / "results"), f"panic-{os.getpid()}"
    done = subprocess.run(_lab_run(results, run_id, "--mode", "mem", "--cycles", "3", "--artifacts", artifacts,
                                   "--inject", "2:panic=pmtest_full.0 suspend"),
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
    records = _final(_lines(os.path.join(results, run_id, "cycles.jsonl")))
    assert [r["verdict"] for r in records] == ["pass", "fail", "pass"], _explain(records) + done.stdout[-2000:]
    panicked = records[1]
    assert panicked["reason"].startswith("kernel panic: Kernel panic - not syncing"), _explain(records)
    assert "pmtest" in panicked["reason"], "the panic line names the knob that fired"
    assert any("Kernel panic - not syncing" in line for line in panicked["evidence"])
    assert panicked["host_seconds"] < 30, "the panic was noticed at once, not by a watchdog"
    assert records[2]["guest"] != panicked["guest"]
    assert done.returncode == 1


# ------------------------------------------------------------- the host

def test_results_disk_full_stops_with_a_clear_error_and_whole_lines(tmp_path, artifacts):
    """The results directory on a 512 KiB tmpfs fills up after a few cycles:
    lab.run stops with exit 2 and a message naming the file and the full
    disk; every line in cycles.jsonl is whole JSON; the cycle that could not
    be recorded keeps its "started" line; no guest is left running."""
    mount = tempfile.mkdtemp(prefix="pmlab-full-", dir=str(tmp_path))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mount], check=True)
    try:
        run_id = f"diskfull-{os.getpid()}"
        done = subprocess.run(_lab_run(mount, run_id, "--mode", "mem", "--cycles", "40", "--artifacts", artifacts),
                              cwd=REPO, capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, PYTHONPATH=REPO))
        lines = _lines(os.path.join(mount, run_id, "cycles.jsonl"))  # asserts every line is whole
        records = _final(lines)
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        assert "results disk full" in done.stderr and "cannot write" in done.stderr, done.stderr
        assert mount in done.stderr, "the error names the file"
        assert records and records[0]["verdict"] == "pass", _explain(records)
        assert len(records) < 40
        assert not _domains(f"pmlab-{run_id}")
    finally:
        subprocess.run(["umount", "-l", mount])


@pytest.fixture
def own_libvirtd(tmp_path):
    """A libvirtd of this test's own (pytest/own_libvirtd.py), closed after it."""
    from own_libvirtd import OwnLibvirtd
    daemon = OwnLibvirtd(tmp_path / "libvirtd")
    try:
        yield daemon.start()
    finally:
        daemon.close()


def _machine_libvirtd():
    """The machine's libvirtd as its pid file names it (pid, start time), or None."""
    try:
        with open("/run/libvirtd.pid") as pidfile:
            pid = int(pidfile.read())
        with open(f"/proc/{pid}/stat") as stat:
            return pid, stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def test_own_libvirtd_is_not_the_machines(own_libvirtd):
    """The fault tests' daemon stops and starts without a trace on the
    machine's: its pid file, sockets and state are the test's own."""
    import libvirt
    machine = _machine_libvirtd()
    sockets = sorted(os.listdir("/run/libvirt")) if os.path.isdir("/run/libvirt") else None
    first = own_libvirtd.pid()
    assert first and (machine is None or first != machine[0])
    assert libvirt.open(own_libvirtd.uri).listAllDomains() == []  # none of the machine's guests
    own_libvirtd.stop_libvirtd()
    assert not os.path.exists(f"/proc/{first}")
    own_libvirtd.start_libvirtd()
    assert own_libvirtd.pid() not in (None, first)
    assert _machine_libvirtd() == machine, "the machine's libvirtd was touched"
    assert (sorted(os.listdir("/run/libvirt")) if os.path.isdir("/run/libvirt") else None) == sockets


def test_libvirtd_restarted_mid_run_the_lab_reconnects(tmp_path, artifacts, own_libvirtd):
    """libvirtd stopped and started again while cycle 2 runs (what a package
    upgrade does): the cycle in flight is the lab's `error` naming the lost
    connection, the session reconnects, later cycles pass, and no guest of the
    run is left behind. An idle session of this process (as pytest's own
    guests are) still destroys its guest when it closes after the restart.
    The daemon is the test's own (own_libvirtd); the machine's is left alone."""
    from lab import modes
    from lab.records import RunDir
    from lab.session import Session
    uri, machine = own_libvirtd.uri, _machine_libvirtd()
    results, run_id = str(tmp_path / "results"), f"libvirtd-{os.getpid()}"
    idle = Session(artifacts_mod.find(artifacts), RunDir(results, run_id + "-idle"), uri=uri, worker="idle")
    assert idle.cycle(modes.parse_mode("freeze"), 1)["verdict"] == "pass"
    log = str(tmp_path / "lab.log")
    run = _start(_lab_run(results, run_id, "--mode", "mem", "--cycles", "5", "--artifacts", artifacts,
                          "--uri", uri), log)
    path = os.path.join(results, run_id, "cycles.jsonl")
    try:
        _wait_for(lambda: _started_not_done(path, 2), 300, "cycle 2 starting", run, log)
        old = own_libvirtd.pid()
        assert old, "the test's libvirtd has no pid file"
        own_libvirtd.stop_libvirtd()
        assert not os.path.exists(f"/proc/{old}"), "the test's libvirtd did not exit"
        own_libvirtd.start_libvirtd()
        code = run.wait(600)
    finally:
        if run.poll() is None:
            run.kill()
        if own_libvirtd.libvirtd is None:  # stopped, not started again
            own_libvirtd.start_libvirtd()
    records = _final(_lines(path))
    summary = json.load(open(os.path.join(results, run_id, "summary.json")))
    lost = [r for r in records if r["verdict"] == "error"]
    assert lost and all("libvirt connection" in r["reason"] for r in lost), _explain(records)
    assert len(lost) <= 2, _explain(records)
    # each lost cycle ran again after the plan: 5 passes in all, exit 0
    assert [r["verdict"] for r in records if r not in lost] == ["pass"] * 5, _explain(records)
    assert sorted(r["rerun_of"] for r in records if "rerun_of" in r) == sorted(r["cycle"] for r in lost)
    assert records[-1]["verdict"] == "pass"
    assert summary["libvirt_reconnects"] >= 1 and summary["reruns"] == len(lost)
    assert code == 0
    assert not _domains(f"pmlab-{run_id}-w0", uri), "the guest the old daemon kept was destroyed"
    assert not idle.connection.alive()
    idle.close()
    assert not _domains(f"pmlab-{run_id}-idle", uri), "the idle session destroyed its guest through a new connection"
    assert idle.reconnects == 1
    assert _machine_libvirtd() == machine, "the machine's libvirtd was touched"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
