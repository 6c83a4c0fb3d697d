"""libvirt plumbing: the daemons, the connection, its event loop, domain XML
and the storage pool the guest's files live in.

Everything goes through libvirt's API (never a local path the lab opens
itself), so a remote URI such as qemu+ssh://host/system works unchanged:
kernel, initramfs and swap disk are volumes uploaded into a pool on the
libvirt host; console and agent are libvirt streams.
"""

import os
import re
import shutil
import subprocess
import threading
import time
from xml.sax.saxutils import escape

import libvirt

from lab.errors import LabError  # noqa: F401 (lab.virt.LabError: older importers)
from lab import devices as device_sets
# the machine profiles are data of their own (lab/profiles.py), read by the LAVA jobs too
from lab.profiles import PROFILES, errata_cmdline, ramguard_cmdline  # noqa: F401

DEFAULT_URI = "qemu:///system"
POOL_NAME = "pmlab"
POOL_PATH = "/var/lib/libvirt/pmlab"
AGENT_CHANNEL = "org.pmlab.agent.0"


# ---------------------------------------------------------------- daemons

def _is_local(uri):
    return uri.split(":", 1)[0] == "qemu" and "//" in uri and uri.split("//", 1)[1].startswith("/")


def _machine_daemon(uri):
    """Is `uri` this machine's own libvirtd (the one start_daemons starts)?
    Not a remote one, nor one named by its socket (?socket=: a daemon of
    its own, e.g. a test's, which its owner starts)."""
    return _is_local(uri) and "socket=" not in uri.partition("?")[2]


def _running(pidfile):
    try:
        pid = int(open(pidfile).read().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def start_daemons(wait_seconds=30):
    """Start virtlogd and libvirtd when they are not running: PID 1 here is not
    systemd, so no socket activation starts them for us."""
    for daemon, pidfile in (("virtlogd", "/run/virtlogd.pid"), ("libvirtd", "/run/libvirtd.pid")):
        if _running(pidfile):
            continue
        binary = shutil.which(daemon) or f"/usr/sbin/{daemon}"
        if not os.access(binary, os.X_OK):
            raise LabError(f"libvirt is not startable: {binary} not found "
                           "(apt-get install libvirt-daemon-system; ./pmlab build installs every package pmlab needs)")
        done = subprocess.run([binary, "-d"], capture_output=True, text=True)
        if done.returncode != 0:
            raise LabError(f"libvirt is not startable: '{binary} -d' exited with "
                           f"{done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    deadline = time.monotonic() + wait_seconds
    last = None
    while time.monotonic() < deadline:
        try:
            libvirt.open(DEFAULT_URI).close()
            return
        except libvirt.libvirtError as error:
            last = error
            time.sleep(0.5)
    raise LabError(f"libvirt is not startable: {DEFAULT_URI} did not answer within "
                   f"{wait_seconds}s after starting libvirtd ({last}); "
                   "see /var/log/libvirt/libvirtd.log")


# ------------------------------------------------------------- connection

_event_loop_lock = threading.Lock()
_event_loop_started = False


def _start_event_loop():
    """libvirt delivers domain events and keepalives only while someone runs its
    event loop; one daemon thread per process does that."""
    global _event_loop_started
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()
        # libvirt's default handler prints every error to stderr, including the
        # ones the lab expects and handles (a pool that does not exist yet).
        libvirt.registerErrorHandler(lambda _ctx, _error: None, None)

        def run():
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _event_loop_started = True


def open_stream(conn):
    """A non-blocking libvirt stream: read by watch_stream from the event loop."""
    return conn.newStream(libvirt.VIR_STREAM_NONBLOCK)


def watch_stream(stream, on_data, on_end):
    """Deliver a non-blocking stream's bytes from libvirt's event loop thread:
    on_data(bytes) for each chunk as it arrives, on_end(reason) once at end
    of stream or error. (A thread blocked in virStreamRecv, the lab's first
    reader, sometimes got data only at the next RPC on the connection: a
    ~1.5 % of S3 cycles whose report "stalled" for 0.6 to 5.6 s.)"""
    ended = []

    def finish(reason):
        if ended:
            return
        ended.append(reason)
        try:
            stream.eventRemoveCallback()
        except libvirt.libvirtError:
            pass
        on_end(reason)

    def readable(_stream, events, _opaque):
        while not ended:
            try:
                data = stream.recv(65536)
            except libvirt.libvirtError as error:  # the domain went away
                finish(f"libvirtError: {error}")
                return
            if data == -2:  # nothing more for now
                if events & (libvirt.VIR_STREAM_EVENT_ERROR | libvirt.VIR_STREAM_EVENT_HANGUP):
                    finish(f"stream event {events}")
                return
            if not data:
                finish("end of stream")
                return
            on_data(data)

    stream.eventAddCallback(libvirt.VIR_STREAM_EVENT_READABLE | libvirt.VIR_STREAM_EVENT_ERROR
                            | libvirt.VIR_STREAM_EVENT_HANGUP, readable, None)


def send_all(stream, data, timeout=10):
    """Write all of `data` to a non-blocking stream (it answers -2 when full)."""
    deadline = time.monotonic() + timeout
    while data:
        sent = stream.send(data)
        if sent == -2:
            if time.monotonic() > deadline:
                raise TimeoutError(f"libvirt stream took no data for {timeout}s")
            time.sleep(0.005)
            continue
        data = data[sent:]


class MarkedLog:
    """Timestamped entries appended by a reader thread, read by position.
    Marks are absolute: forget_before() drops what no cycle needs any more,
    so a guest that lives for thousands of cycles costs flat memory."""

    def __init__(self):
        self._entries = []
        self._dropped = 0  # entries forgotten from the front
        self._cond = threading.Condition()

    def _append(self, entries):
        """Add entries (tuples whose first item is the host time); lock held."""
        self._entries.extend(entries)
        self._cond.notify_all()

    def mark(self):
        """Position to count or wait from: entries before it are ignored."""
        with self._cond:
            return self._dropped + len(self._entries)

    def forget_before(self, mark):
        with self._cond:
            count = min(max(0, mark - self._dropped), len(self._entries))
            del self._entries[:count]
            self._dropped += count
            self._forgot(mark)

    def _forgot(self, mark):
        """Subclass hook, lock held."""

    def since(self, mark):
        with self._cond:
            return list(self._entries[max(0, mark - self._dropped):])

    def wait_first(self, mark, match, timeout, abort=None):
        """The first entry after `mark` for which match(entry) is true, or None
        on timeout; `abort()` returning true ends the wait early."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for entry in self._entries[max(0, mark - self._dropped):]:
                    if match(entry):
                        return entry
                left = deadline - time.monotonic()
                if left <= 0 or (abort and abort()):
                    return None
                self._cond.wait(min(left, 0.2))


class DomainEvents(MarkedLog):
    """Timestamped libvirt events (time, kind, detail) of one domain. The
    cycle engine counts these as the proof that the guest really slept."""

    def add(self, kind, detail=None):
        with self._cond:
            self._append([(time.time(), kind, detail)])

    def wait_for(self, mark, kinds, timeout, abort=None):
        """The first event of one of `kinds` after `mark`, or None."""
        return self.wait_first(mark, lambda event: event[1] in kinds, timeout, abort)


_LIFECYCLE = {
    libvirt.VIR_DOMAIN_EVENT_DEFINED: "defined",
    libvirt.VIR_DOMAIN_EVENT_UNDEFINED: "undefined",
    libvirt.VIR_DOMAIN_EVENT_STARTED: "started",
    libvirt.VIR_DOMAIN_EVENT_SUSPENDED: "paused",
    libvirt.VIR_DOMAIN_EVENT_RESUMED: "resumed",
    libvirt.VIR_DOMAIN_EVENT_STOPPED: "stopped",
    libvirt.VIR_DOMAIN_EVENT_SHUTDOWN: "shutdown",
    libvirt.VIR_DOMAIN_EVENT_PMSUSPENDED: "pmsuspended",
    libvirt.VIR_DOMAIN_EVENT_CRASHED: "crashed",
}


class Connection:
    """A libvirt connection plus the event callbacks that feed DomainEvents."""

    def __init__(self, uri=DEFAULT_URI):
        self.uri = uri
        if _machine_daemon(uri):
            start_daemons()
        _start_event_loop()
        try:
            self.conn = libvirt.open(uri)
        except libvirt.libvirtError as error:
            raise LabError(f"cannot connect to libvirt at {uri}: {error}") from None
        self.conn.setKeepAlive(5, 6)
        # Set when libvirtd goes away (restart, crash): every later call on
        # this connection fails, so the session opens a new one.
        self.lost = None
        self.conn.registerCloseCallback(self._on_close, None)
        self._events = {}
        self._lock = threading.Lock()
        register = self.conn.domainEventRegisterAny
        self._callbacks = [
            register(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None),
            register(None, libvirt.VIR_DOMAIN_EVENT_ID_PMSUSPEND, self._on_simple, "pmsuspend"),
            register(None, libvirt.VIR_DOMAIN_EVENT_ID_PMWAKEUP, self._on_simple, "pmwakeup"),
            register(None, libvirt.VIR_DOMAIN_EVENT_ID_PMSUSPEND_DISK, self._on_simple, "pmsuspend-disk"),
            register(None, libvirt.VIR_DOMAIN_EVENT_ID_REBOOT, self._on_reboot, None),
        ]

    def events(self, name):
        with self._lock:
            return self._events.setdefault(name, DomainEvents())

    def forget(self, name):
        with self._lock:
            self._events.pop(name, None)

    def _on_close(self, conn, reason, opaque):
        self.lost = {libvirt.VIR_CONNECT_CLOSE_REASON_ERROR: "I/O error",
                     libvirt.VIR_CONNECT_CLOSE_REASON_EOF: "libvirtd closed the connection",
                     libvirt.VIR_CONNECT_CLOSE_REASON_KEEPALIVE: "keepalive timeout",
                     libvirt.VIR_CONNECT_CLOSE_REASON_CLIENT: "closed by the lab"}.get(reason, f"reason {reason}")

    def alive(self):
        if self.lost:
            return False
        try:
            return bool(self.conn.isAlive())
        except libvirt.libvirtError:
            return False

    def _on_lifecycle(self, conn, dom, event, detail, opaque):
        self.events(dom.name()).add(_LIFECYCLE.get(event, f"lifecycle-{event}"), detail)

    def _on_simple(self, conn, dom, reason, kind):
        self.events(dom.name()).add(kind)

    def _on_reboot(self, conn, dom, opaque):
        self.events(dom.name()).add("reboot")

    def close(self):
        for callback in self._callbacks:
            try:
                self.conn.domainEventDeregisterAny(callback)
            except libvirt.libvirtError:
                pass
        try:
            self.conn.unregisterCloseCallback()
        except libvirt.libvirtError:
            pass
        try:
            self.conn.close()
        except libvirt.libvirtError:
            pass  # already closed by the other side


# ------------------------------------------------------------ storage pool

def storage_pool(conn):
    """The lab's directory pool on the libvirt host, created on first use.
    Parallel workers may race to create it: whoever loses looks it up."""
    try:
        pool = conn.storagePoolLookupByName(POOL_NAME)
    except libvirt.libvirtError:
        xml = (f"<pool type='dir'><name>{POOL_NAME}</name>"
               f"<target><path>{POOL_PATH}</path></target></pool>")
        try:
            pool = conn.storagePoolDefineXML(xml, 0)
            pool.build(0)
        except libvirt.libvirtError:
            pool = conn.storagePoolLookupByName(POOL_NAME)
    if not pool.isActive():
        try:
            pool.create(0)
        except libvirt.libvirtError:
            if not pool.isActive():
                raise
    pool.setAutostart(1)
    return pool


def _delete_volume(pool, name):
    try:
        pool.storageVolLookupByName(name).delete(0)
    except libvirt.libvirtError:
        pass


def upload_volume(conn, pool, name, local_path, mode=None):
    """Copy a local file into the pool (over the libvirt connection).
    `mode` (e.g. 0o644) for a file QEMU opens itself: libvirt relabels the
    files the domain XML names as kernel, initrd or disk, not the ones in
    qemu:commandline arguments."""
    _delete_volume(pool, name)
    size = os.path.getsize(local_path)
    permissions = f"<permissions><mode>{mode:04o}</mode></permissions>" if mode is not None else ""
    vol = pool.createXML(
        f"<volume><name>{escape(name)}</name><capacity>{size}</capacity>"
        f"<allocation>{size}</allocation><target><format type='raw'/>{permissions}</target></volume>", 0)
    stream = conn.newStream(0)
    vol.upload(stream, 0, size, 0)
    with open(local_path, "rb") as source:
        stream.sendAll(lambda _stream, nbytes, f: f.read(nbytes), source)
    stream.finish()
    return vol


def blank_volume(pool, name, size_bytes, mode=None):
    """A new sparse, all-zero raw volume: a swap disk with no stale image on
    it, a device guest's scratch disk. `mode` as upload_volume's."""
    _delete_volume(pool, name)
    permissions = f"<permissions><mode>{mode:04o}</mode></permissions>" if mode is not None else ""
    return pool.createXML(
        f"<volume><name>{escape(name)}</name><capacity>{size_bytes}</capacity>"
        f"<allocation>0</allocation><target><format type='raw'/>{permissions}</target></volume>", 0)


def delete_volumes(pool, names):
    for name in names:
        _delete_volume(pool, name)


VOLUME_SUFFIXES = ("-bzImage", "-initramfs", "-swap", "-ssdt") + tuple(device_sets.SCRATCH_DISKS.values())
_MTIME = re.compile(r"<mtime>(\d+(?:\.\d+)?)</mtime>")


def _volumes_by_guest(pool, prefix):
    """{guest name: [(volume, mtime or None)]} for the pool's guest volumes."""
    guests = {}
    for volume in pool.listAllVolumes(0):
        name = volume.name()
        suffix = next((s for s in VOLUME_SUFFIXES if name.endswith(s)), None)
        if not name.startswith(prefix) or suffix is None:
            continue
        try:
            mtime = _MTIME.search(volume.XMLDesc(0))
        except libvirt.libvirtError:
            continue  # deleted meanwhile by its owner
        guests.setdefault(name[:-len(suffix)], []).append((volume, float(mtime[1]) if mtime else None))
    return guests


def sweep_orphan_volumes(conn, pool, min_age=600, prefix="pmlab-"):
    """Delete the volumes of guests (named `prefix`...) whose domain no
    longer exists: a harness killed with SIGKILL leaves its guest's volumes
    behind (libvirt destroys the domain, not the files). Returns the names
    deleted. A guest's volumes stay while any of them is
    - younger than the oldest guest that exists (a domain, running or not;
      its age is its oldest volume's, written when it was made): a parallel
      worker's hibernated guest has no domain until it is started again, but
      its swap volume was written after that worker's other guests were made;
      with a guest of unknown age (no volume with an mtime) nothing goes;
    - younger than `min_age` seconds: a worker uploading a guest it has not
      created yet."""
    now = time.time()
    guests = _volumes_by_guest(pool, prefix)
    existing = {dom.name() for dom in conn.listAllDomains(0) if dom.name().startswith(prefix)}
    births = []
    for name in existing:
        written = [mtime for _, mtime in guests.get(name, []) if mtime is not None]
        if not written:
            return []
        births.append(min(written))
    oldest_guest = min(births, default=None)
    gone = []
    for guest, volumes in guests.items():
        if guest in existing or any(
                mtime is None or now - mtime < min_age or (oldest_guest is not None and mtime >= oldest_guest)
                for _, mtime in volumes):
            continue
        try:
            conn.lookupByName(guest)
            continue  # made since the listing
        except libvirt.libvirtError:
            pass
        for volume, _ in volumes:
            try:
                name = volume.name()
                volume.delete(0)
                gone.append(name)
            except libvirt.libvirtError:
                pass
    return gone


# -------------------------------------------------------------- domain XML

def domain_xml(name, profile, kernel, initrd, cmdline, swap_volume, console_log,
               memory_mib=512, vcpus=1, extra_devices=("edu",), acpi_tables=(), device_set="lean",
               scratch=None):
    """Domain XML for one guest. type='qemu': no KVM here, QEMU runs under TCG.
    `acpi_tables`: paths on the libvirt host of ACPI tables (pmtest's SSDT)
    QEMU adds to the firmware's (-acpitable; libvirt 9.0 has an element only
    for SLIC tables). `device_set`: lab.devices' lean or zoo; a zoo's
    `scratch` is {device name: (volume name, path)} of its scratch disks."""
    if profile not in PROFILES:
        raise LabError(f"unknown machine profile '{profile}' (known: {', '.join(PROFILES)})")
    p = PROFILES[profile]
    firmware = ""
    if p["loader"]:
        firmware = (f"<loader readonly='yes' type='pflash'>{p['loader']}</loader>"
                    f"<nvram template='{p['nvram_template']}'/>")
    qemu_args = "".join(
        f"<qemu:arg value='-device'/><qemu:arg value='{escape(device)},bus={p['root_bus']},addr={slot:#x}'/>"
        for slot, device in enumerate(extra_devices, start=0x10))
    qemu_args += "".join(
        f"<qemu:arg value='-acpitable'/><qemu:arg value='file={escape(path)}'/>"
        for path in acpi_tables)
    zoo = ""
    usb = "<controller type='usb' model='none'/>"
    balloon = "<memballoon model='none'/>"
    if device_sets.check(device_set) == "zoo":
        zoo, args = device_sets.zoo_xml(profile, POOL_NAME, scratch, p["root_bus"], p["machine"])
        qemu_args += "".join(f"<qemu:arg value='{escape(arg)}'/>" for arg in args)
        usb = balloon = ""  # the zoo's own
    return f"""<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{escape(name)}</name>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os>
    <type arch='x86_64' machine='{p["machine"]}'>hvm</type>
    {firmware}
    <kernel>{escape(kernel)}</kernel>
    <initrd>{escape(initrd)}</initrd>
    <cmdline>{escape(cmdline)}</cmdline>
  </os>
  <features><acpi/></features>
  <clock offset='utc'/>
  <pm>
    <suspend-to-mem enabled='yes'/>
    <suspend-to-disk enabled='yes'/>
  </pm>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='raw' cache='unsafe'/>
      <source pool='{POOL_NAME}' volume='{escape(swap_volume)}'/>
      <target dev='vda' bus='virtio'/>
      <address type='pci' domain='0' bus='0' slot='3' function='0'/>
    </disk>
    {usb}
    <controller type='virtio-serial' index='0'>
      <address type='pci' domain='0' bus='0' slot='4' function='0'/>
    </controller>
    <serial type='pty'>
      <log file='{escape(console_log)}' append='off'/>
      <target port='0'/>
    </serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'>
      <source mode='bind'/>
      <target type='virtio' name='{AGENT_CHANNEL}'/>
    </channel>
    <video><model type='none'/></video>
    {balloon or zoo}
  </devices>
  <qemu:commandline>{qemu_args}</qemu:commandline>
</domain>
"""
