"""A libvirtd of a test's own, for the faults that stop or restart the
daemon: never the machine's, which other runs (a CI run, a bisection, a
second ./pmlab test) are using.

The daemon, its virtlogd and the QEMU processes they start live in a mount
namespace of their own (a `sleep` started by `unshare -m` holds it; every
daemon is started in it with nsenter), where /run, /etc/libvirt,
/var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt are directories
under the test's own: its pid files, state, domains, storage pool, logs and
virtlogd socket are there and nowhere else. The one thing outside it is
libvirtd's socket directory (unix_sock_dir in its --config file), under the
test's directory too, so that the lab reaches it as
qemu:///system?socket=DIR/libvirt-sock (lab.virt starts no daemon for a URI
that names its socket). Its /etc/libvirt is a copy of the machine's *.conf
and nwfilter/ only: no network, domain or pool of the machine's is defined
in it.
"""

import os
import shutil
import signal
import subprocess
import time

import libvirt

PRIVATE = ("/run", "/etc/libvirt", "/var/lib/libvirt", "/var/cache/libvirt", "/var/log/libvirt")


class OwnLibvirtd:
    def __init__(self, directory):
        self.directory = str(directory)
        self.sockets = os.path.join(self.directory, "sockets")
        self.uri = f"qemu:///system?socket={self.sockets}/libvirt-sock"
        self.config = os.path.join(self.directory, "libvirtd.conf")
        self.holder = self.libvirtd = self.virtlogd = None

    def _private(self, path):
        """The test's directory standing in for `path` inside the namespace."""
        return os.path.join(self.directory, "root", path.strip("/").replace("/", "-"))

    def _prepare(self):
        os.makedirs(self.sockets, mode=0o755)
        for path in PRIVATE:
            os.makedirs(self._private(path), mode=0o755)
            os.chmod(self._private(path), 0o755)  # QEMU runs as libvirt-qemu
        for path in PRIVATE[2:]:
            self._skeleton(path)
        lock = os.path.join(self._private("/run"), "lock")  # /var/lock: libvirt locks a console's pty there
        os.makedirs(lock)
        os.chmod(lock, 0o1777)
        etc = self._private("/etc/libvirt")
        for name in os.listdir("/etc/libvirt"):
            if name.endswith(".conf"):
                shutil.copy2(os.path.join("/etc/libvirt", name), etc)
        if os.path.isdir("/etc/libvirt/nwfilter"):
            shutil.copytree("/etc/libvirt/nwfilter", os.path.join(etc, "nwfilter"))
        os.makedirs(os.path.join(etc, "qemu", "networks", "autostart"))
        with open(self.config, "w") as out:
            out.write(f'unix_sock_dir = "{self.sockets}"\nlisten_tls = 0\nlisten_tcp = 0\n')

    def _skeleton(self, path):
        """The machine's subdirectories of `path` (two levels: qemu/,
        qemu/channel/, ...), empty, with their modes and owners, as the
        package installed them: libvirtd expects them and makes not all."""
        for directory, subdirectories, _ in os.walk(path):
            depth = os.path.relpath(directory, path).count(os.sep) + (directory != path)
            subdirectories[:] = [] if depth >= 2 else [d for d in subdirectories if not d.startswith("domain-")]
            for name in subdirectories:
                source = os.path.join(directory, name)
                target = os.path.join(self._private(path), os.path.relpath(source, path))
                status = os.stat(source)
                os.makedirs(target, exist_ok=True)
                os.chmod(target, status.st_mode & 0o7777)
                os.chown(target, status.st_uid, status.st_gid)

    def in_namespace(self, *argv, check=True):
        return subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", *argv], check=check,
                              capture_output=True, text=True, timeout=60)

    def start(self):
        """The namespace, then virtlogd and libvirtd in it; returns once the
        daemon answers on its socket."""
        self._prepare()
        self.holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "infinity"],
                                       start_new_session=True)
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{self.holder.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            if time.monotonic() > deadline:
                raise RuntimeError("unshare -m made no mount namespace")
            time.sleep(0.05)
        mounts = "; ".join(f"mount --bind {self._private(path)} {path}" for path in PRIVATE)
        self.in_namespace("sh", "-ec", mounts)
        self.virtlogd = self._child("virtlogd")
        self.start_libvirtd()
        return self

    def _child(self, *argv):
        """A daemon in the namespace, in the foreground: a child of this
        process (nsenter execs it), so it is waited for, never left a zombie."""
        log = open(os.path.join(self.directory, f"{argv[0]}.log"), "a")
        return subprocess.Popen(["nsenter", "-t", str(self.holder.pid), "-m", *argv], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def start_libvirtd(self, wait_seconds=60):
        self.libvirtd = self._child("libvirtd", "--config", self.config)
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                libvirt.open(self.uri).close()
                return
            except libvirt.libvirtError:
                if self.libvirtd.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(self.directory, "libvirtd.log")) as log:
                        raise RuntimeError(f"the test's libvirtd did not answer on {self.uri}:\n"
                                           + log.read()[-3000:]) from None
                time.sleep(0.2)

    def pid(self):
        """libvirtd's pid, from its pid file in the namespace's own /run
        (never /run/libvirtd.pid, the machine's)."""
        try:
            with open(os.path.join(self._private("/run"), "libvirtd.pid")) as pidfile:
                return int(pidfile.read())
        except (OSError, ValueError):
            return None

    def stop_libvirtd(self, timeout=30):
        """SIGTERM to this libvirtd (what a package upgrade does); waits until
        it is gone. Its guests go on running, as under the machine's."""
        if self.libvirtd is None:
            return
        self.libvirtd.send_signal(signal.SIGTERM)
        try:
            self.libvirtd.wait(timeout)
        except subprocess.TimeoutExpired:
            self.libvirtd.kill()
            self.libvirtd.wait()
        self.libvirtd = None

    def close(self):
        """Every guest of this daemon destroyed, the daemons and the namespace gone."""
        if self.holder is None:
            return
        try:
            if self.libvirtd is None:
                self.start_libvirtd()
            conn = libvirt.open(self.uri)
            for domain in conn.listAllDomains():
                try:
                    domain.destroy()
                except libvirt.libvirtError:
                    pass
            conn.close()
        except libvirt.libvirtError:
            pass
        self.stop_libvirtd()
        self.virtlogd.terminate()
        self.virtlogd.wait(30)
        self.holder.kill()
        self.holder.wait()
        self.holder = None
