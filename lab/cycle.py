"""One sleep cycle on one guest: drive it, watch it, judge it, record it.

How each mode is driven and what proves the guest really slept:

  mem (S3), wake pmwakeup: the PMSuspended event arrives, the lab calls
      virDomainPMWakeup (QMP system_wakeup). Proof: one PMSuspended and one
      PMWakeup event, machine_suspend[3] begin/end in the trace, suspend_stats
      success +1. pmtest_ramguard.ko reporting a page the firmware changed
      across the resume is the platform's fail (phase "platform").
  mem, wake rtc: the guest set an RTC alarm; the lab only waits. Same proof.
  freeze (s2idle): QEMU does not know the guest idles, so there is no event.
      The lab waits for the kernel's "PM: suspend-to-idle" console line and
      for the guest's vCPUs to sleep, then presses the ACPI power button.
      Proof, from the guest's trace and log: machine_suspend[1] begin/end
      (it idled), the power button's wake ended the loop, success +1. A
      press that still came before the first idle is the lab's error
      (lab/s2idle.py), not the kernel's fail.
  disk, platform: ACPI S4 powers the domain off (PMSuspended-disk and Stopped
      events), the lab starts it again, the kernel resumes from swap. Proof: the
      domain stopped, and the boot id and a tmpfs token survived.
  disk, reboot: the guest reboots itself (Reboot event) and resumes. Same proof.
  pm_test-LEVEL: the kernel stops at LEVEL and returns. Proof: the phases in
      the trace reach LEVEL and no further, no PMSuspended event, success +1.

A phase that outlives its watchdog makes the cycle a `hang`: QEMU's state and
the console are captured and the domain is destroyed; the caller boots a
fresh guest for the next cycle. `echo mem` returning is never proof.
"""

import ctypes
import os
import time
import uuid
from dataclasses import dataclass, replace

import libvirt

from lab import calls, console, devices, guest_report, records, sleepgraph
from lab import hang as hang_dump  # "hang" is the cycle's Hang below
from lab.guest_agent import AgentTimeout, quote
from lab.judge import FRESH_BOOT, Expected, host_phases, judge_reply, keep_evidence, rejected_knob
from lab.records import ERROR, FAIL, HANG, PASS, hang_dump_path, iso, mark_done, new_record
from lab.request import Watchdogs

RTC_WAKE_SECONDS = 2
# The guest's report comes over the agent's stream, libvirt's PMWakeup event
# over its event connection: the report can overtake the event (1 cycle in
# 10,000 once the guest resumed fast, libvirtd slow to answer). The proof
# needs the event, so the cycle waits this long for it after the report.
WAKE_EVENT_GRACE = 5


@dataclass(frozen=True)
class PowerButtonPress:
    """When a freeze cycle presses the power button: on the console line
    `marker`, then (wait_idle) once the guest's vCPUs are asleep. A test
    presses early on purpose with another marker and no wait."""
    marker: str = console.S2IDLE_ENTERED
    wait_idle: bool = True


class Hang(Exception):
    def __init__(self, phase, detail):
        super().__init__(f"{phase}: {detail}")
        self.phase = phase
        self.detail = detail


class Cycle:
    """State of one cycle while it runs."""

    def __init__(self, guest, mode, number, watchdogs, knobs=(), started=None, press=PowerButtonPress(),
                 while_asleep=None):
        self.started = started or time.time()  # the record's host_start: host_phases' "start"
        self.press = press
        self.while_asleep = while_asleep  # called with the guest while an S3 guest sleeps
        self.guest = guest
        self.mode = mode
        self.number = number
        self.watchdogs = watchdogs
        # "boot" knobs are kernel command line words for the boot kernel of a
        # hibernation restore (e.g. pmtest.fault=...); the rest go to the guest.
        # The calls knob probes that kernel too (lab/calls.py).
        self.knobs = [k for k in knobs if k[0] != "boot"]
        self.boot_params = " ".join([value for name, value in knobs if name == "boot"] +
                                    [calls.boot_params(calls.functions(value))
                                     for name, value in knobs if name == "calls" and mode.state == "disk"])
        self.token = uuid.uuid4().hex
        self.timeline = []
        self.pokes_before = guest.agent.pokes
        self.event_mark = guest.events.mark()
        self.console_mark = guest.console.mark()
        # Earlier cycles' lines and events are in their records already.
        guest.events.forget_before(self.event_mark)
        guest.console.forget_before(self.console_mark)
        self.request = None

    def note(self, step, when=None):
        self.timeline.append([step, round(when or time.time(), 3)])

    def sent(self, step, send):
        """Call send() (the request, a wake) and note `step` at the time it
        was called: the guest can answer before the call returns, and what
        the reader threads note on arrival (s2idle-entered, report-started)
        must not come before its cause. Returns what send() returned."""
        when = time.time()
        result = send()
        self.note(step, when)
        return result

    def command(self):
        return "pmlab-cycle " + cycle_arguments(self.mode, self.number, self.knobs, self.token,
                                                devices.probe_arguments(getattr(self.guest, "device_set", "lean")))

    # --------------------------------------------------------------- waiting

    def replied(self):
        return self.guest.agent.has_reply(self.request)

    def wait_event(self, kinds, timeout, abort=None):
        event = self.guest.events.wait_for(self.event_mark, kinds, timeout, abort)
        if event:
            self.note(event[1])
        return event

    def wait_reply(self, phase, timeout, abort=None):
        try:
            reply = self.guest.agent.wait(self.request, timeout, abort)
        except AgentTimeout:
            if not self.guest.running():
                raise Hang(phase, f"domain {self.guest.state()} while waiting for the guest's report") from None
            raise Hang(phase, f"no report from the guest within {timeout:.0f}s") from None
        if self.guest.agent.first_data:  # splits the guest's work from the transfer
            self.timeline.append(["report-started", round(self.guest.agent.first_data, 3)])
        self.note("report")
        return reply  # its trace pages are rendered when it is judged (DrivenCycle.finish)

    def not_running(self):
        """The guest cannot answer any more: its domain is gone or its kernel
        panicked (ends every wait early; drive_cycle says which)."""
        return self.panic() is not None or not self.guest.running()

    def panic(self):
        return self.guest.console.panic_since(self.console_mark)

    # ------------------------------------------------------------ the modes

    def drive(self):
        """Run the cycle; the guest's reply (or raise Hang)."""
        command = self.command()
        self.request = self.sent("sent", lambda: self.guest.agent.send(command))
        return getattr(self, "_drive_" + self.mode.kind)()

    def _drive_mem(self):
        w = self.watchdogs
        asleep = self.wait_event({"pmsuspend"}, w.suspend, lambda: self.replied() or self.not_running())
        if asleep is None and not self.replied():
            raise Hang("suspend", f"guest not asleep (no PMSuspended event) within {w.suspend:.0f}s")
        if asleep is not None:
            if self.while_asleep is not None:
                self.while_asleep(self.guest)
                self.note("while-asleep-done")
            if self.mode.wake == "pmwakeup":
                self.sent("pmwakeup-sent", self.guest.pm_wakeup)
            elif self.wait_event({"pmwakeup"}, RTC_WAKE_SECONDS + w.resume, self.not_running) is None:
                raise Hang("resume", f"RTC alarm did not wake the guest within {RTC_WAKE_SECONDS + w.resume:.0f}s")
        reply = self.wait_reply("resume", w.resume, self.not_running)
        if asleep is not None:  # not noted: the timeline's steps stay the same
            self.guest.events.wait_for(self.event_mark, {"pmwakeup"}, WAKE_EVENT_GRACE, self.not_running)
        return reply

    def _drive_freeze(self):
        w, press = self.watchdogs, self.press
        idle = self.guest.console.wait_for(press.marker, self.console_mark, w.suspend,
                                           lambda: self.replied() or self.not_running())
        if idle is None and not self.replied():
            raise Hang("suspend", f"no '{press.marker}' on the console within {w.suspend:.0f}s")
        if idle is not None:
            self.timeline.append(["s2idle-entered", round(idle[0], 3)])
            if press.wait_idle:
                # The marker is printed before the loop's first idle: pressing
                # at once raced s2idle_enter() (lab/s2idle.py judges a press
                # that still comes first).
                self.note("vcpus-" + self.guest.wait_idle())
            self.sent("powerbutton-sent", self.guest.press_power_button)
        return self.wait_reply("resume", w.resume, self.not_running)

    def _drive_disk(self):
        w = self.watchdogs
        if self.mode.wake == "platform":
            off = self.wait_event({"stopped"}, w.hibernate, self.replied)
            if off is None and not self.replied():
                raise Hang("hibernate", f"domain still running {w.hibernate:.0f}s after the request")
            if off is not None:
                self.guest.start_again(self.boot_params)
                self.note("started-again")
        else:
            rebooted = self.wait_event({"reboot"}, w.hibernate, lambda: self.replied() or self.not_running())
            if rebooted is None and not self.replied():
                raise Hang("hibernate", f"guest did not reboot within {w.hibernate:.0f}s")
        restart_mark = self.guest.console.mark()
        fresh_boot = lambda: self.not_running() or bool(
            [line for line in self.guest.console.lines(restart_mark) if FRESH_BOOT in line])
        reply = None
        try:
            reply = self.wait_reply("restore", w.restore, fresh_boot)
        except Hang:
            if not fresh_boot() or not self.guest.running():
                raise
        return reply  # None: the guest booted afresh instead of resuming

    def _drive_pm_test(self):
        w = self.watchdogs
        return self.wait_reply("suspend", w.suspend + w.resume, self.not_running)


def cycle_arguments(mode, number, knobs=(), token=None, probes=()):
    """guest/pmlab-cycle's arguments for one cycle, shell-quoted: what the
    agent runs, and (without the token, which the guest draws) a line of a
    LAVA job's plan (pipelines/lava). `probes`: a device guest's
    DEVICE:PROBE words (lab.devices.probe_arguments), probed after the
    resume."""
    args = [f"cycle={number}", f"state={mode.state}", f"pm_test={mode.pm_test}"]
    if token is not None:
        args.append(f"token={token}")
    if mode.state == "disk":
        args.append(f"disk={mode.wake}")
    if mode.wake == "rtc":
        args.append(f"rtc={RTC_WAKE_SECONDS}")
    args += [f"knob.{name}={value}" for name, value in knobs]
    if probes:
        args.append("probes=" + ",".join(probes))
    return " ".join(quote(arg) for arg in args)


# ------------------------------------------------------------------ running

class DrivenCycle:
    """A cycle whose guest part is over: its record so far and what judging
    it needs, taken from the guest before the next cycle starts. finish()
    may then run in another thread while the guest runs the next cycle
    (lab.session.Session.cycles); it touches the run directory, not the guest."""

    def __init__(self, rundir, record, cycle, reply, events, evidence, boot_id, console_file_error):
        self.rundir = rundir
        self.record = record
        self.cycle = cycle
        self.reply = reply
        self.events = events
        self.evidence = evidence
        self.boot_id = boot_id
        self.console_file_error = console_file_error

    @property
    def guest_usable(self):
        """What the drive alone says; judging can still say no (an `error`)."""
        return self.record["guest_usable"]

    def finish(self, sleepgraph_files=False):
        """Judge (unless the drive already gave the verdict), keep the
        evidence by the run's policy, append the final record and return it
        (as RunDir.append returns it: its callbacks read through the run)."""
        record, reply, rundir = self.record, self.reply, self.rundir
        if "verdict" not in record:
            if reply is not None and reply.data:  # the trace pages as text, the form every reader takes
                reply = replace(reply, output=guest_report.from_bytes(reply.data))
                self.cycle.note("rendered")
            # What the cycle must show comes from the request (the record's
            # devices, pmtest_tree, limits: Session._meta), not the guest's echo.
            record.update(judge_reply(self.cycle.mode, reply, self.events, self.evidence, self.cycle.timeline,
                                      self.cycle.token, self.boot_id,
                                      Expected.of_record(record)))
            if record["verdict"] == ERROR:
                record["guest_usable"] = False
            if reply is not None and (sleepgraph_files or record["verdict"] != PASS):
                try:
                    record.update(sleepgraph.write_files(rundir, record, reply.output))
                except sleepgraph.SleepgraphError as error:  # e.g. a guest image without the dmesg section
                    record["sleepgraph_error"] = str(error)
        keep_evidence(rundir, record, reply.output if reply is not None else None, self.evidence)
        if self.console_file_error:
            record["console_file_error"] = self.console_file_error
        self.cycle.note("judged")
        record["host_phases"] = host_phases(self.cycle.started, self.cycle.timeline)
        record["harness_rss_kib"] = rss_kib()
        record["harness_pid"] = os.getpid()
        return rundir.append(record)


def drive_cycle(guest, mode, number, rundir, watchdogs=None, knobs=(), meta=None, press=PowerButtonPress(),
                while_asleep=None):
    """Append the cycle's started record, drive it and take from the guest
    what judging needs. A hang or lab error gets its verdict here (its
    evidence is the guest's state, gone once the guest is destroyed); the
    rest is DrivenCycle.finish()'s. Returns the DrivenCycle."""
    watchdogs = watchdogs or Watchdogs()
    started = time.time()
    record = new_record(rundir.run_id, number, mode, guest=guest.name, host_start=iso(started),
                        knobs=[list(k) for k in knobs], guest_boot_id=guest.boot_id)
    record.update(meta or {})
    history = getattr(guest, "probe_history", None)  # lab.guest.Guest's; note_probes keeps it
    if history is not None and devices.probe_arguments(getattr(guest, "device_set", devices.DEFAULT)):
        record["probe_history"] = {"broken": dict(history["broken"]), "last_ok": history["last_ok"]}
    rundir.append(record)

    cycle = Cycle(guest, mode, number, watchdogs, knobs, started, press, while_asleep)
    reply, hang, lab_error = None, None, None
    try:
        reply = cycle.drive()
    except Hang as error:
        hang = error
    except Exception as error:  # libvirt or transport failure: the lab's, not the kernel's
        lab_error = error

    ended = time.time()
    cycle.note("ended")
    events = guest.events.since(cycle.event_mark)
    all_lines = guest.console.lines(cycle.console_mark)
    evidence = console.cycle_lines(all_lines, number) or all_lines[-80:]
    mark_done(record, host_end=iso(ended), host_seconds=round(ended - started, 3),
              timeline=cycle.timeline, guest_usable=True, token=cycle.token,
              channel_pokes=guest.agent.pokes - cycle.pokes_before,
              **{records.EVENTS_FIELD: [[round(t, 3), kind, detail] for t, kind, detail in events]})
    if hang is not None or lab_error is not None:
        # Why the guest stopped answering decides whose failure it is.
        panic = cycle.panic()
        lost = guest.connection.lost or (None if guest.connection.alive() else "connection not alive")
        died = next((detail for _, kind, detail in events if kind == "stopped" and detail in QEMU_DIED), None)
        if panic is not None:
            guest.destroy()
            record.update(verdict=FAIL, phase=hang.phase if hang else "lab",
                          reason=f"kernel panic: {console.strip_timestamp(panic)}", guest_usable=False,
                          problems=console.problems(evidence))
            hang = lab_error = None
        elif lost:
            record.update(verdict=ERROR, phase="lab", guest_usable=False,
                          reason=f"libvirt connection to {guest.connection.uri} lost ({lost}) "
                                 f"during phase {hang.phase if hang else 'lab'}")
            hang = lab_error = None
        elif died is not None:
            record.update(verdict=ERROR, phase="lab", guest_usable=False,
                          reason=f"QEMU exited during phase {hang.phase if hang else 'lab'} "
                                 f"(libvirt: stopped, {QEMU_DIED[died]})")
            guest.destroy()
            hang = lab_error = None
    if hang is not None:
        agent_state = guest.agent.pending()
        dump = [f"cycle {number} ({mode.name}) hung in phase {hang.phase}: {hang.detail}\n",
                f"## agent channel on the host: {agent_state}"]
        if guest.running():
            dump.append(guest.qemu_state())
            # The guest kernel's own view: blocked tasks, then all tasks.
            tasks = guest.sysrq("wt")
            dump.append("\n## guest sysrq w, t\n" + "\n".join(tasks))
            if hang_dump.took_sysrq(tasks):
                # its trace buffer: which device callback started and never ended (lab/hang.py)
                dump.append("\n## guest sysrq z\n" + "\n".join(guest.ftrace_dump()))
            else:  # device interrupts off (a noirq phase): an NMI panics it, printing stack and trace
                dump.append("\n## guest NMI (no sysrq answer)\n" + "\n".join(guest.nmi_dump()))
        dump.append("\n## console since the cycle began\n" + "\n".join(guest.console.lines(cycle.console_mark)))
        guest.destroy()
        dump_text = "\n".join(dump) + "\n"
        dump_path = rundir.write_file(hang_dump_path(number, guest.name), dump_text)
        stuck = hang_dump.where(dump_text)  # the device callback that never returned
        phase = hang_dump.phase(hang.phase, stuck)
        record.update(verdict=HANG, phase=phase, reason=hang_dump.reason(phase, stuck, hang.detail),
                      agent_channel=agent_state, hang_dump=dump_path, guest_usable=False,
                      problems=console.problems(evidence), **{records.STUCK_FIELD: stuck})
    elif lab_error is not None:
        guest.destroy()
        record.update(verdict=ERROR, phase="lab", reason=f"{type(lab_error).__name__}: {lab_error}",
                      guest_usable=False)
    elif "verdict" not in record:
        if reply is not None:
            record["report_status"] = reply.status
        # what makes the cycle an `error` (judge()) or ends the guest, known now
        if reply is None or reply.status != 0 or not guest.running():
            record["guest_usable"] = False
        rejected = rejected_knob(reply.output) if reply is not None and reply.status != 0 else None
        if rejected:  # known now, so the session stops before driving another cycle
            record.update(verdict=ERROR, phase=records.REQUEST, reason=rejected)
        elif reply is not None and "probe_history" in record and note_probes(guest, reply, number, mode):
            # A device not working: the next cycle gets a fresh guest, so it
            # tests its own mode instead of inheriting a dead device.
            record["guest_usable"] = False
    return DrivenCycle(rundir, record, cycle, reply, events, evidence, guest.boot_id, guest.console.file_error)


def note_probes(guest, reply, number, mode):
    """Read a device guest's probes from its report as it arrives and note
    in guest.probe_history what they show: a device that worked before the
    suspend and not after the resume was broken by this cycle (["broken"]
    {device: [cycle, mode]}); all working: ["last_ok"] [cycle, mode]. True
    if a device did not work, before or after: the guest is then replaced."""
    parts = guest_report.head_sections(reply.data or reply.output.encode())

    def failed(section):
        return {probe["device"] for probe in devices.parse_probes(parts.get(section)) if not probe["ok"]}

    if "probes" not in parts:
        return False  # the judge names what is missing
    history = guest.probe_history
    broke = failed("probes") - failed("probes_before")
    for device in broke:
        history["broken"].setdefault(device, [number, mode.name])
    if not failed("probes"):
        history["last_ok"] = [number, mode.name]
    return bool(failed("probes") or failed("probes_before"))


# libvirt's STOPPED details that mean QEMU went away by itself (a hibernating
# guest's power-off is VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN).
QEMU_DIED = {libvirt.VIR_DOMAIN_EVENT_STOPPED_FAILED: "failed: the QEMU process was killed or crashed",
             libvirt.VIR_DOMAIN_EVENT_STOPPED_CRASHED: "crashed"}


_libc = None


def release_free_memory():
    """Give the C heap's free pages back to the kernel (glibc's malloc_trim).
    Every cycle parses a ~200 KB report; glibc keeps what Python frees, so
    a lab.run's resident set crept up ~0.45 KiB a cycle with no live object
    growing (tracemalloc flat over 500 cycles, the set back to its start
    after a trim) and the soak's flat-RSS check could not tell that from a
    leak. True if memory was released."""
    global _libc
    try:
        _libc = _libc or ctypes.CDLL(None)
        return bool(_libc.malloc_trim(0))
    except (OSError, AttributeError):  # not glibc
        return False


def rss_kib():
    """This process's resident set (KiB): the soak checks it stays flat."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None
