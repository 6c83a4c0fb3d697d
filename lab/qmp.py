"""A minimal QMP client (QEMU Machine Protocol over a UNIX socket), for the
benchmark floor: plain QEMU with no libvirt in between."""

import json
import socket
import time


def connect(path, timeout):
    """A socket connected to QEMU's QMP socket at `path`, retried until
    QEMU has made it or `timeout` seconds passed (then OSError)."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class QMP:
    def __init__(self, path, timeout=60):
        self.sock = connect(path, timeout)
        self.file = self.sock.makefile("rwb", buffering=0)
        self.events = []
        self._read()  # greeting
        self.execute("qmp_capabilities")

    def _read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("QMP socket closed")
        return json.loads(line)

    def execute(self, command, **arguments):
        message = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        self.file.write((json.dumps(message) + "\n").encode())
        while True:
            reply = self._read()
            if "event" in reply:
                self.events.append((time.time(), reply["event"]))
            elif "return" in reply or "error" in reply:
                return reply

    def wait_event(self, name, timeout):
        """Host time of the next event `name` (earlier queued ones count)."""
        for index, (stamp, event) in enumerate(self.events):
            if event == name:
                del self.events[:index + 1]
                return stamp
        self.sock.settimeout(timeout)
        try:
            while True:
                reply = self._read()
                if "event" in reply:
                    stamp = time.time()
                    if reply["event"] == name:
                        return stamp
                    self.events.append((stamp, reply["event"]))
        finally:
            self.sock.settimeout(None)

    def close(self):
        self.sock.close()
