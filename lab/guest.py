"""One guest: its volumes, its domain, and the console and agent streams.

A guest is booted fresh (new swap disk, nvram reset) and lives until a cycle
hangs or the run ends. Hibernation in platform mode powers the domain off;
start_again() brings the same guest (same disk) back so the kernel resumes
from the image.
"""

import os
import time

import libvirt
from xml.sax.saxutils import escape

from lab import console as console_text
from lab import devices as device_sets
from lab import hang
from lab import virt
from lab.guest_agent import Agent, AgentTimeout

# No resume= here: guest/init loads the test modules first and then asks for
# the image through /sys/power/resume, so the boot kernel has pmtest devices.
BASE_CMDLINE = ("console=ttyS0,115200 no_console_suspend loglevel=8 printk.devkmsg=on "
                "pmlab.swap=/dev/vda")
SWAP_BYTES = 1 << 30
# Guest.wait_idle: how long every vCPU must stay asleep before the s2idle
# press, how often it is looked at, what a halted vCPU may still run (QEMU
# timers touch it now and then), and how long to wait at most.
IDLE_QUIET_SECONDS = 0.03
IDLE_POLL_SECONDS = 0.005
IDLE_RUN_NS = 200_000
IDLE_TIMEOUT_SECONDS = 5.0
CREATE_RETRY_SECONDS = 10
# How long a fresh device guest may take to have every device working (USB
# enumeration, the SCSI scan and the HDA codec probe are asynchronous).
DEVICES_READY_SECONDS = 60


class ConsoleCapture(virt.MarkedLog):
    """Reads the serial console stream into a local file and a list of
    (host time, line): the time a line arrived, for waiting on a marker.
    Forgotten lines stay in the file."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self._file = open(path, "ab")
        self._partial = b""
        self._panics = []  # (mark, line) of "Kernel panic - not syncing"
        self.file_error = None  # the console file stopped taking data (disk full)

    def attach(self, stream):
        """Read a (new) non-blocking libvirt stream (lab.virt.open_stream)."""
        virt.watch_stream(stream, self.feed, lambda reason: None)

    def feed(self, data):
        """Console bytes, in order."""
        if self.file_error is None:
            try:
                self._file.write(data)
                self._file.flush()
            except OSError as error:  # keep reading: the cycles still need the lines
                self.file_error = f"{self.path}: {error.strerror or error}"
        with self._cond:
            chunks = (self._partial + data).split(b"\n")
            self._partial = chunks.pop()
            now = time.time()
            lines = [(now, chunk.decode("utf-8", "replace").rstrip("\r")) for chunk in chunks]
            first = self._dropped + len(self._entries)
            self._panics += [(first + index, line) for index, (_, line) in enumerate(lines)
                             if console_text.PANIC.search(line)]
            self._append(lines)

    def _forgot(self, mark):
        self._panics = [(index, line) for index, line in self._panics if index >= mark]

    def panic_since(self, mark):
        """The first "Kernel panic - not syncing" line after `mark`, or None."""
        with self._cond:
            return next((line for index, line in self._panics if index >= mark), None)

    def lines(self, since=0):
        with self._cond:
            lines = [line for _, line in self._entries[max(0, since - self._dropped):]]
            if self._partial:
                lines.append(self._partial.decode("utf-8", "replace").rstrip("\r"))
            return lines

    def wait_for(self, fragment, since, timeout, abort=None):
        """First line after `since` containing `fragment`: (host time, line) or None."""
        return self.wait_first(since, lambda entry: fragment in entry[1], timeout, abort)

    def close(self):
        try:
            self._file.close()
        except OSError:  # the last flush hit a full disk; file_error says so
            pass


class GuestError(Exception):
    """The guest could not be booted or reached; carries the console tail."""


class Guest:
    def __init__(self, connection, name, artifacts, console_path, profile="q35-ovmf",
                 cmdline_extra="", memory_mib=512, vcpus=1, firmware_errata=True, device_set="lean"):
        self.connection = connection
        self.conn = connection.conn
        self.name = name
        self.artifacts = artifacts
        self.profile = profile
        errata = virt.errata_cmdline(profile) if firmware_errata else ""
        self.device_set = device_sets.check(device_set)
        self.cmdline = " ".join(w for w in (BASE_CMDLINE, errata, virt.ramguard_cmdline(profile),
                                            device_sets.modules_cmdline(device_set), cmdline_extra) if w)
        self.memory_mib = memory_mib
        self.vcpus = vcpus
        self.events = connection.events(name)
        self.console = ConsoleCapture(console_path)
        self.agent = Agent()
        self.dom = None
        self._console_stream = None
        self.xml = None
        self.boot_id = None
        self.boots = 0
        # a device guest's devices as its cycles' probes left them (lab.cycle.note_probes)
        self.probe_history = {"broken": {}, "last_ok": None}
        self.volumes = [name + suffix for suffix in virt.VOLUME_SUFFIXES[:4]]  # kernel, initramfs, swap, ssdt
        self.scratch = {device: name + suffix for device, suffix in device_sets.scratch_volumes(device_set).items()}
        self.volumes += list(self.scratch.values())
        self.pool = None

    # ------------------------------------------------------------ lifecycle

    def boot(self, timeout=300):
        """Upload the artifacts, create the domain and wait for the agent."""
        self.pool = virt.storage_pool(self.conn)
        kernel = virt.upload_volume(self.conn, self.pool, self.volumes[0], self.artifacts.kernel)
        initrd = virt.upload_volume(self.conn, self.pool, self.volumes[1],
                                    self.artifacts.initrd_for(self.device_set))
        virt.blank_volume(self.pool, self.volumes[2], SWAP_BYTES)
        tables = []
        if self.artifacts.ssdt:
            tables.append(virt.upload_volume(self.conn, self.pool, self.volumes[3],
                                             self.artifacts.ssdt, mode=0o644).path())
        # QEMU itself opens the scratch disks that QEMU arguments add (NVMe,
        # SD): libvirt relabels only what the XML names, hence the mode.
        scratch = {device: (volume, virt.blank_volume(self.pool, volume, device_sets.SCRATCH_BYTES,
                                                      mode=0o666).path())
                   for device, volume in self.scratch.items()}
        self.xml = virt.domain_xml(
            self.name, self.profile, kernel.path(), initrd.path(), self.cmdline, self.volumes[2],
            f"/var/log/libvirt/qemu/{self.name}-serial0.log", self.memory_mib, self.vcpus,
            acpi_tables=tables, device_set=self.device_set, scratch=scratch)
        flags = libvirt.VIR_DOMAIN_START_RESET_NVRAM if virt.PROFILES[self.profile]["loader"] else 0
        self._create(flags)
        self.boot_id = self.wait_agent(timeout)
        self.wait_devices()
        return self.boot_id

    def wait_devices(self, timeout=DEVICES_READY_SECONDS):
        """On a device guest, wait until every device's probe passes once
        (guest/pmlab-probe --wait); GuestError naming the devices that never
        worked."""
        words = device_sets.probe_arguments(self.device_set)
        if not words:
            return
        reply = self.agent.call(f"pmlab-probe --wait {timeout} {' '.join(words)}", timeout=timeout + 60)
        broken = device_sets.broken(device_sets.parse_probes(reply.output, asked=words))
        if broken:
            raise GuestError(f"guest {self.name}: devices not working after boot: " +
                             "; ".join(f"{device} {probe}: {error}" for device, probe, error in broken) +
                             "\nconsole tail:\n" + "\n".join(self.console.lines()[-30:]))

    def start_again(self, cmdline_extra=""):
        """Start the powered-off domain again (after hibernation, platform mode).
        Same disk, so the kernel finds the image and resumes from it.
        `cmdline_extra` is added for this boot only: knobs for the boot kernel."""
        xml = self.xml
        if cmdline_extra:
            self.xml = self.xml.replace(f"<cmdline>{escape(self.cmdline)}</cmdline>",
                                        f"<cmdline>{escape(self.cmdline + ' ' + cmdline_extra)}</cmdline>")
            assert self.xml != xml, "domain XML has no <cmdline> to extend"
        try:
            self._create(0)
        finally:
            self.xml = xml

    def _create(self, flags):
        """Create the domain paused, attach console and agent streams, then run
        it: no console line is printed before the lab listens."""
        # AUTODESTROY: if the lab process dies, libvirt destroys its guests when
        # the connection closes, instead of leaving them running unattended.
        flags |= libvirt.VIR_DOMAIN_START_PAUSED | libvirt.VIR_DOMAIN_START_AUTODESTROY
        deadline = time.monotonic() + CREATE_RETRY_SECONDS
        while True:
            try:
                self.dom = self.conn.createXML(self.xml, flags)
                break
            except libvirt.libvirtError as error:
                # libvirt sends a hibernated domain's STOPPED event before it has
                # removed the transient domain (1 in the soak's 100 S4 cycles).
                if "already exists" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.boots += 1
        console_stream = virt.open_stream(self.conn)
        self.dom.openConsole(None, console_stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
        self.console.attach(console_stream)
        self._console_stream = console_stream
        agent_stream = virt.open_stream(self.conn)
        self.dom.openChannel(virt.AGENT_CHANNEL, agent_stream, libvirt.VIR_DOMAIN_CHANNEL_FORCE)
        self.agent.attach(agent_stream)
        self.dom.resume()

    def wait_agent(self, timeout):
        """Boot id once the agent answers; GuestError with the console tail if not."""
        deadline = time.monotonic() + timeout
        request = self.agent.send("cat /proc/sys/kernel/random/boot_id")
        try:
            reply = self.agent.wait(request, max(1, deadline - time.monotonic()),
                                    abort=lambda: not self.running())
        except AgentTimeout:
            state = "running" if self.running() else "not running"
            raise GuestError(f"guest {self.name} did not answer within {timeout}s of boot "
                             f"(domain {state}); console tail:\n" +
                             "\n".join(self.console.lines()[-30:])) from None
        return reply.output.strip()

    def state(self):
        """libvirt domain state name: running, pmsuspended, shutoff, ..."""
        try:
            state = self.dom.state()[0]
        except (libvirt.libvirtError, AttributeError):
            return "shutoff"
        return {libvirt.VIR_DOMAIN_RUNNING: "running", libvirt.VIR_DOMAIN_PAUSED: "paused",
                libvirt.VIR_DOMAIN_PMSUSPENDED: "pmsuspended", libvirt.VIR_DOMAIN_SHUTOFF: "shutoff",
                libvirt.VIR_DOMAIN_SHUTDOWN: "shutdown", libvirt.VIR_DOMAIN_CRASHED: "crashed",
                libvirt.VIR_DOMAIN_BLOCKED: "blocked"}.get(state, str(state))

    def running(self):
        return self.state() in ("running", "pmsuspended", "paused", "blocked")

    # -------------------------------------------------------------- wakes

    def pm_wakeup(self):
        self.dom.pMWakeup(0)

    def press_power_button(self):
        """ACPI power button (QMP system_powerdown): wakes the guest from s2idle."""
        self.dom.shutdownFlags(libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN)

    def vcpu_threads(self):
        """QEMU's vCPU thread ids (QMP query-cpus-fast), or [] when their
        /proc entries are not on this host (a remote libvirt)."""
        import json
        import libvirt_qemu
        reply = json.loads(libvirt_qemu.qemuMonitorCommand(self.dom, '{"execute":"query-cpus-fast"}', 0))
        threads = [cpu["thread-id"] for cpu in reply.get("return", [])]
        return threads if all(os.path.exists(f"/proc/{tid}/schedstat") for tid in threads) else []

    def wait_idle(self, quiet=IDLE_QUIET_SECONDS, timeout=IDLE_TIMEOUT_SECONDS):
        """Wait until every vCPU thread sleeps and ran less than
        IDLE_RUN_NS over `quiet` seconds: a halted vCPU, as in s2idle, takes
        no host CPU, while a runnable one (a busy host's preempted vCPU) is
        'R'. Returns how it ended: "idle", "timeout" or "unknown" (no local
        threads to watch: `quiet` seconds were waited instead)."""
        threads = self.vcpu_threads()
        if not threads:
            time.sleep(quiet)
            return "unknown"
        deadline = time.monotonic() + timeout
        previous = _thread_runtimes(threads)
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(IDLE_POLL_SECONDS)
            now = _thread_runtimes(threads)
            if now is None:
                return "unknown"
            if any(ran > IDLE_RUN_NS or state != "S" for (ran, state) in
                   ((now[t][0] - previous[t][0], now[t][1]) for t in threads)):
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet:
                return "idle"
            previous = now
        return "timeout"

    # -------------------------------------------------------------- hangs

    def qemu_state(self):
        """What QEMU can say about a stuck guest: run state and CPU registers."""
        import libvirt_qemu
        out = []
        for command, flags in (('{"execute":"query-status"}', 0),
                               ("info registers -a", libvirt_qemu.VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP)):
            try:
                out.append(f"## {command}\n{libvirt_qemu.qemuMonitorCommand(self.dom, command, flags)}")
            except libvirt.libvirtError as error:
                out.append(f"## {command}\nfailed: {error}")
        return "\n".join(out)

    def sysrq(self, keys, settle=3.0):
        """Magic SysRq over the serial console (a BREAK, then the key): the
        guest kernel itself prints, e.g., its blocked tasks ('w') or every
        task ('t'). Returns the console lines it printed."""
        import libvirt_qemu
        printed = []
        for key in keys:
            mark = self.console.mark()
            try:
                libvirt_qemu.qemuMonitorCommand(
                    self.dom, '{"execute":"chardev-send-break","arguments":{"id":"charserial0"}}', 0)
                time.sleep(0.3)  # let the guest's UART take the BREAK before the key
                virt.send_all(self._console_stream, key.encode())
            except Exception as error:  # best effort: this runs on a guest already in trouble
                printed.append(f"sysrq {key}: {error}")
                continue
            time.sleep(settle)
            printed += self.console.lines(mark)
        return printed

    def ftrace_dump(self, timeout=30.0, start_timeout=5.0):
        """sysrq 'z': the guest kernel prints its trace buffer (ftrace_dump())
        to the console, between two rules of dashes, or "(ftrace buffer
        empty)". On a hung guest this is the only way out for the
        device_pm_callback_start events of the callback that never returned
        (lab/hang.py). Returns the console lines printed, waiting up to
        `timeout` s for the closing rule (the dump of a whole cycle is
        hundreds of lines over the serial line), or start_timeout s for a
        dump that never begins (a guest that takes no sysrq)."""
        mark = self.console.mark()
        failed = [line for line in self.sysrq("z", settle=0.0) if line.startswith("sysrq z: ")]
        started = time.monotonic()
        while not failed:
            printed = self.console.lines(mark)
            waited = time.monotonic() - started
            if hang.ftrace_dump_ended(printed) or waited > timeout or \
                    (waited > start_timeout and not any(hang.FTRACE_BEGIN in line for line in printed)):
                break
            time.sleep(0.2)
        return failed + self.console.lines(mark)

    def nmi_dump(self, timeout=30.0):
        """For a guest that takes no sysrq (device interrupts off): an NMI,
        which guest/init's unknown_nmi_panic makes a panic that prints the
        interrupted CPU's stack and (panic_print) the trace buffer. Returns
        the console lines printed, waiting up to `timeout` s for the end of
        the trace dump."""
        mark = self.console.mark()
        try:
            self.dom.injectNMI(0)
        except libvirt.libvirtError as error:  # best effort: this runs on a guest already in trouble
            return [f"NMI: {error}"]
        started = time.monotonic()
        while time.monotonic() - started < timeout and not hang.ftrace_dump_ended(self.console.lines(mark)):
            time.sleep(0.2)
        return self.console.lines(mark)

    def destroy(self):
        self.agent.detach()
        if self.dom is not None:
            try:
                self.dom.destroy()
            except libvirt.libvirtError:
                pass  # already gone

    def close(self):
        """Destroy the domain and delete its volumes (the console file stays)."""
        self.destroy()
        if self.pool is not None:
            virt.delete_volumes(self.pool, self.volumes)
        self.connection.forget(self.name)
        self.console.close()


def _thread_runtimes(threads):
    """{tid: (ns run on a CPU, scheduler state letter)}, or None when a
    thread is gone (the domain stopped)."""
    out = {}
    try:
        for tid in threads:
            with open(f"/proc/{tid}/schedstat") as schedstat:
                ran = int(schedstat.read().split()[0])
            with open(f"/proc/{tid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
            out[tid] = (ran, state)
    except (OSError, ValueError, IndexError):
        return None
    return out
