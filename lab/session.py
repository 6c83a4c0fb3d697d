"""A run of cycles on one guest at a time, replacing the guest when a cycle
leaves it unusable (hang, lab error, failed restore). Used by lab.run and by
the pytest fixtures (one Session per xdist worker)."""

import collections
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import libvirt

from lab import devices, request, virt
from lab.cycle import drive_cycle, release_free_memory
from lab.errors import LabError
from lab.request import Watchdogs
from lab.guest import Guest, GuestError
from lab.records import DONE, ERROR, PASS, injected, iso, new_record, request_error, state_of


# Cycles between two release_free_memory() calls (about 1 ms each).
TRIM_EVERY = 100


class Session:
    def __init__(self, artifacts, rundir, uri=virt.DEFAULT_URI, profile="q35-ovmf",
                 watchdogs=None, worker="w0", memory_mib=512, vcpus=1, cmdline_extra="",
                 connection=None, sleepgraph_files=False, pmtest_tree=None, firmware_errata=True,
                 device_set="lean", guest_stem=None, progress=None, limits=None):
        if profile not in virt.PROFILES:
            raise LabError(f"unknown machine profile '{profile}' (known: {', '.join(virt.PROFILES)})")
        self.artifacts = artifacts
        self.rundir = rundir
        self.profile = profile
        self.watchdogs = watchdogs or Watchdogs()
        self.worker = worker
        self.memory_mib = memory_mib
        self.vcpus = vcpus
        # pmtest's tree size (lab.request.pmtest_tree): a boot parameter, and
        # in every record, since it sets how many devices a cycle walks
        self.pmtest_tree = pmtest_tree
        self.cmdline_extra = " ".join(w for w in (cmdline_extra, request.pmtest_tree_cmdline(pmtest_tree)) if w)
        self.connection = connection or virt.Connection(uri)
        self.sleepgraph_files = sleepgraph_files  # every cycle's, not only those that did not pass
        # the profile's firmware errata on the kernel command line (lab.virt.PROFILES)
        self.firmware_errata = firmware_errata
        if device_set not in devices.SETS:
            raise LabError(f"unknown device set '{device_set}' (known: {', '.join(devices.SETS)})")
        self.device_set = device_set  # lab.devices: lean or zoo
        # suspend/resume time limits (lab.request.Limits): in every record, which the judge reads
        self.limits = dataclasses.asdict(limits or request.Limits())
        # guests are named <stem>-<boot>: unique per run directory and
        # per process of one run (a nightly chunk's stem names its first cycle)
        self.guest_stem = guest_stem or f"pmlab-{rundir.name}-{worker}"
        self.guest = None
        self.guests_booted = 0
        self.reconnects = 0
        self.boot_seconds = []
        self.cycles_run = 0
        self._planned = {}  # cycle number -> its plan item, until cycles() hands out its record
        # told as it happens (lab.run.Progress): booting(guest name), booted(guest name,
        # seconds) and recorded(final record), the latter from the judging thread
        # as soon as a cycle's record is written, before cycles() hands it out
        self.progress = progress

    def _new_guest(self):
        if self.guests_booted == 0:
            swept = virt.sweep_orphan_volumes(self.connection.conn, virt.storage_pool(self.connection.conn))
            if swept:
                print(f"lab: deleted {len(swept)} volumes of guests that no longer exist "
                      f"(a killed run's): {', '.join(swept[:3])}{' ...' if len(swept) > 3 else ''}", flush=True)
        self.guests_booted += 1
        name = f"{self.guest_stem}-{self.guests_booted}"
        guest = Guest(self.connection, name, self.artifacts,
                      self.rundir.file("console", f"{name}.log"), self.profile,
                      self.cmdline_extra, self.memory_mib, self.vcpus, self.firmware_errata, self.device_set)
        started = time.monotonic()
        if self.progress:
            self.progress.booting(name)
        try:
            guest.boot(self.watchdogs.boot)
        except BaseException:  # Ctrl-C too: the half-booted guest is no one's to close later
            guest.close()
            raise
        self.boot_seconds.append(round(time.monotonic() - started, 2))
        if self.progress:
            self.progress.booted(name, self.boot_seconds[-1])
        return guest

    def _meta(self):
        manifest = self.artifacts.manifest
        return {"kernel": {"directory": self.artifacts.directory,
                           "variant": manifest.get("variant"),
                           "kernelrelease": manifest.get("kernelrelease"),
                           "series_hash": manifest.get("series_hash"),
                           # kernel/build --kernel: which tree (absent before)
                           **{key: manifest[key] for key in ("kernel_spec", "source_commit", "base_config")
                              if manifest.get(key)},
                           "modules": self.artifacts.modules},
                "profile": self.profile, "worker": self.worker,
                "firmware_errata": virt.errata_cmdline(self.profile) if self.firmware_errata else "",
                "devices": self.device_set, "limits": self.limits, "vcpus": self.vcpus,
                **({"pmtest_tree": list(self.pmtest_tree)} if self.pmtest_tree else {})}

    def cycle(self, mode, number, knobs=(), expect=PASS, press=None, while_asleep=None):
        """Run cycle `number`; always returns its final record. `expect`: the
        verdict the caller provoked on purpose (recorded, used by the summary);
        `press`: when a freeze cycle presses the power button
        (lab.cycle.PowerButtonPress; a test presses early on purpose);
        `while_asleep(guest)`: called while an S3 guest sleeps, before the
        wake (a test breaks a device on purpose)."""
        driven = self._drive(mode, number, knobs, expect, press=press, while_asleep=while_asleep)
        if isinstance(driven, dict):
            return driven
        return self._finished(driven.finish(self.sleepgraph_files))

    def cycles(self, plan, reruns=0):
        """Run the cycles of plan, an iterable of (mode, number, knobs,
        expect), judging each in a thread of its own while the guest runs
        the next: what judging needs is taken from the guest when its drive
        ends (lab.cycle.DrivenCycle), so the host's rendering, judging and
        records leave a cycle's critical path. Yields the final records in
        plan order. What the drive alone says (a hang, no report, a failed
        script) still replaces the guest before the next cycle; a verdict
        `error` found by judging (trace pages it cannot decode, an exception
        of the judge's) replaces it one cycle later. A record that cannot be
        written (ResultsWriteError) is raised here and stops the run.

        reruns: a cycle the lab failed (verdict `error`, not made to fail on
        purpose) runs again, up to this many times, after the plan, numbered
        on from its highest number and recording "rerun_of" (the planned
        cycle's number) and "rerun_attempt": the error stays recorded and
        counted as the lab's, and the kernel still gets its sample."""
        plan = iter(plan)
        again = collections.deque()  # (mode, knobs, expect, rerun_of, attempt) once the plan is done
        highest = 0
        pending = None  # the Future of the cycle being judged
        # Leaving the block, by an exception or close() too, waits for the
        # judgings submitted: a cycle driven is recorded whatever stops the
        # run. One worker: they finish in plan order.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge") as judge:
            while True:
                item = next(plan, None)
                rerun = {}
                if item is None:  # the plan is done: settle it, then the reruns it asked for
                    if pending is not None:
                        previous, pending = pending, None
                        yield self._settled(previous.result(), again, reruns)
                    if not again:
                        break
                    mode, knobs, expect, origin, attempt = again.popleft()
                    highest += 1
                    item = (mode, highest, knobs, expect)
                    rerun = {"rerun_of": origin, "rerun_attempt": attempt}
                highest = max(highest, item[1])
                self._planned[item[1]] = item
                driven = self._drive(*item, extra_meta=rerun)
                if not isinstance(driven, dict) and request_error(driven.record):
                    # The guest rejected a knob: the request's error. Never
                    # rerun; the run stops here (lab.run: exit 2).
                    if pending is not None:
                        yield self._settled(pending.result(), again, reruns)
                    yield self._finished(driven.finish(self.sleepgraph_files))
                    raise LabError(f"cycle {item[1]}: {driven.record['reason']}; the run stops "
                                   "(a bad --inject, not the kernel's fail or the lab's error)")
                previous, pending = pending, None
                if not isinstance(driven, dict):  # submitted before the previous record is handed out
                    pending = judge.submit(driven.finish, self.sleepgraph_files)
                    if self.progress:
                        pending.add_done_callback(self._tell_recorded)
                if previous is not None:
                    yield self._settled(previous.result(), again, reruns)
                if isinstance(driven, dict):  # no guest to drive it on: final already
                    yield self._settled(driven, again, reruns)

    def _tell_recorded(self, future):
        """A judging ended: tell progress its record (written) at once."""
        if not future.cancelled() and future.exception() is None:
            self.progress.recorded(future.result())

    def _settled(self, record, again, reruns):
        """A final record of cycles(): queue its rerun if the lab failed it."""
        record = self._finished(record)
        planned = self._planned.pop(record["cycle"], None)
        attempt = record.get("rerun_attempt", 0)
        if planned and state_of(record) == ERROR and not injected(record) and attempt < reruns:
            mode, _, knobs, expect = planned
            again.append((mode, knobs, expect, record.get("rerun_of", record["cycle"]), attempt + 1))
        return record

    def _drive(self, mode, number, knobs, expect, extra_meta=None, press=None, while_asleep=None):
        """Boot a guest if there is none, then drive the cycle: its
        DrivenCycle, or the final record of a cycle that got no guest."""
        if self.guest is None:
            started = time.time()
            try:
                if not self.connection.alive():
                    self._reconnect()
                self.guest = self._new_guest()
            except (GuestError, Exception) as error:
                record = new_record(self.rundir.run_id, number, mode, DONE, guest=None, host_start=iso(started),
                                    host_end=iso(time.time()), host_seconds=round(time.time() - started, 3),
                                    verdict=ERROR, phase="boot", reason=f"{type(error).__name__}: {error}",
                                    knobs=[list(k) for k in knobs])
                record.update(self._meta())
                record.update(extra_meta or {})
                record["expected_verdict"] = expect
                self.rundir.append(record)
                return record
        meta = self._meta()
        meta.update(extra_meta or {})
        meta["expected_verdict"] = expect
        driven = drive_cycle(self.guest, mode, number, self.rundir, self.watchdogs, knobs, meta,
                             **({"press": press} if press else {}),
                             **({"while_asleep": while_asleep} if while_asleep else {}))
        if not driven.guest_usable:
            self._drop_guest()
        self.cycles_run += 1
        if self.cycles_run % TRIM_EVERY == 0:
            release_free_memory()
        return driven

    def _finished(self, record):
        """A final record: a guest its judging found unusable is replaced."""
        if not record.get("guest_usable", True) and self.guest is not None \
                and self.guest.name == record.get("guest"):
            self._drop_guest()
        return record

    def _drop_guest(self):
        guest, self.guest = self.guest, None
        guest.close()
        if not self.connection.alive():
            self._reconnect(guest)

    def _reconnect(self, stale=None):
        """libvirtd went away (restart, crash): open a new connection, then
        remove what the old one left behind. A domain libvirtd kept across
        its restart runs unattended (nobody reads its console): destroy it."""
        uri = self.connection.uri
        self.connection.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.connection = virt.Connection(uri)
                break
            except virt.LabError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        self.reconnects += 1
        if stale is None:
            return
        try:
            self.connection.conn.lookupByName(stale.name).destroy()
        except libvirt.libvirtError:
            pass  # gone with the old daemon
        try:
            virt.delete_volumes(virt.storage_pool(self.connection.conn), stale.volumes)
        except libvirt.libvirtError:
            pass

    def close(self):
        """Destroy the guest; after a libvirtd restart, through a new
        connection (the old daemon's domain would otherwise run on, unattended)."""
        if self.guest is not None:
            try:
                self._drop_guest()
            except virt.LabError:
                pass  # libvirt is gone for good: nothing left to destroy it with
