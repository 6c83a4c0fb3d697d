"""Host side of the guest agent protocol (guest/pmlab-agent).

Request  (host -> guest): b"<id> <shell command line>\\n"
Reply    (guest -> host): b"@pmlab-reply <id> <status> <n>\\n" + n bytes of output

The transport is a libvirt stream on the virtio-serial channel, so it works
over any libvirt URI. The stream ends when the domain stops (hibernation
powers it off); attach() a new stream after restart and a reply the guest
could not send meanwhile arrives on it (the guest's write blocks until a host
is connected).
"""

import re
import threading
import time
from dataclasses import dataclass

from lab.virt import send_all, watch_stream

# Numbers have at most 18 digits: a longer run is no header (and int()
# refuses more than 4300 digits).
HEADER = re.compile(rb"@pmlab-reply (\d{1,18}) (-?\d{1,18}) (\d{1,18})\n")


@dataclass
class Reply:
    id: int
    status: int
    output: str  # data as text; a cycle's report: lab.cycle renders its trace pages (lab.guest_report.from_bytes)
    data: bytes = b""


class ReplyParser:
    """Incremental parser of the agent's byte stream. Bytes outside a reply
    (nothing should be there) are kept in `noise` rather than dropped silently."""

    def __init__(self):
        self._buffer = b""
        self.noise = b""

    def feed(self, data):
        """Add bytes; return the replies completed by them."""
        self._buffer += data
        replies = []
        while True:
            match = HEADER.search(self._buffer)
            if not match:
                # Keep a possible partial header at the end of the buffer.
                cut = self._buffer.rfind(b"@")
                if cut < 0:
                    self.noise += self._buffer
                    self._buffer = b""
                else:
                    self.noise += self._buffer[:cut]
                    self._buffer = self._buffer[cut:]
                return replies
            self.noise += self._buffer[:match.start()]
            size = int(match.group(3))
            end = match.end() + size
            if len(self._buffer) < end:
                self._buffer = self._buffer[match.start():]
                return replies
            data = self._buffer[match.end():end]
            replies.append(Reply(int(match.group(1)), int(match.group(2)), data.decode("utf-8", "replace"), data))
            self._buffer = self._buffer[end:]


def quote(word):
    """Single-quote one word for the guest's sh."""
    return "'" + str(word).replace("'", "'\\''") + "'"


class AgentTimeout(Exception):
    pass


class Agent:
    """Send commands to the guest agent and wait for their replies."""

    def __init__(self):
        self._parser = ReplyParser()
        self._replies = {}
        self._discard = set()  # ids of no-op pokes
        self._cond = threading.Condition()
        self._stream = None
        self._next_id = int(time.time()) % 100000 * 1000  # distinct across guest restarts
        self.connected = False
        self.tap = None  # called with every received chunk (recording raw protocol bytes)
        self.reader_exit = None  # why the last reader thread stopped
        self.last_data = time.monotonic()  # when bytes last arrived
        self.pokes = 0  # stalled transfers restarted (see wait())
        self.first_data = None  # time.time() of the first bytes after the last send()

    def attach(self, stream):
        """Use a (new) non-blocking libvirt stream (lab.virt.open_stream): its
        bytes feed the parser from libvirt's event loop."""
        with self._cond:
            self._stream = stream
            self.connected = True
        watch_stream(stream, self.feed, lambda reason: self._ended(stream, reason))

    def feed(self, data):
        """Bytes from the guest, in order."""
        if self.tap:
            self.tap(data)
        with self._cond:
            self.last_data = time.monotonic()
            if self.first_data is None:
                self.first_data = time.time()
            for reply in self._parser.feed(data):
                if reply.id in self._discard:
                    self._discard.discard(reply.id)
                else:
                    self._replies[reply.id] = reply
            self._cond.notify_all()

    def _ended(self, stream, reason):
        with self._cond:
            self.reader_exit = reason
            if self._stream is stream:
                self.connected = False
            self._cond.notify_all()

    def send(self, command):
        """Send a command line; return its id for wait()."""
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
            stream = self._stream
            self.first_data = None
        if stream is None:
            raise ConnectionError("agent channel is not open")
        send_all(stream, f"{request_id} {command}\n".encode())
        return request_id

    # A reply that stops arriving half-way (no byte for STALL_SECONDS) gets a
    # "poke": a no-op command, whose reply is a new write by the guest. It
    # was needed in ~1.7 % of S3 cycles while a thread read the stream with
    # a blocking recv; with the event-loop reader none was needed in 305
    # cycles (lab/README.md). It stays as a guard; `pokes` counts it and the
    # cycle record shows it.
    STALL_SECONDS = 0.5

    def wait(self, request_id, timeout, abort=None):
        """The reply to `request_id`, or AgentTimeout. `abort()` returning true
        ends the wait early (also an AgentTimeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while request_id not in self._replies:
                now = time.monotonic()
                left = deadline - now
                if left <= 0 or (abort and abort()):
                    raise AgentTimeout(f"no reply to agent request {request_id} within {timeout:.0f}s")
                if self._parser._buffer and now - self.last_data > self.STALL_SECONDS and self._stream:
                    self._poke()
                self._cond.wait(min(left, 0.2))
            return self._replies.pop(request_id)

    def _poke(self):
        """Send a no-op command (lock held); its reply is discarded."""
        self.pokes += 1
        self.last_data = time.monotonic()
        self._next_id += 1
        self._discard.add(self._next_id)
        try:
            self._stream.send(f"{self._next_id} true\n".encode())
        except Exception:
            pass

    def has_reply(self, request_id):
        with self._cond:
            return request_id in self._replies

    def call(self, command, timeout=30):
        return self.wait(self.send(command), timeout)

    def pending(self):
        """What the parser holds that is not a whole reply yet, and what it
        could not place (for a hang report: did part of a reply arrive?)."""
        with self._cond:
            return {"partial_bytes": len(self._parser._buffer), "partial_head": self._parser._buffer[:120].decode("utf-8", "replace"),
                    "noise_bytes": len(self._parser.noise), "connected": self.connected, "pokes": self.pokes,
                    "reader_exit": self.reader_exit}

    def detach(self):
        with self._cond:
            stream, self._stream = self._stream, None
            self.connected = False
        if stream is not None:
            try:
                stream.abort()
            except Exception:
                pass
