"""lab.cycle's drive order against events that arrive late (unit level: the
live guests of test_cycles.py cannot make libvirt slow on purpose).

The guest's report comes over the agent's stream and libvirt's PMWakeup
event over its event connection; a 10,000-cycle soak saw the report
overtake the event once (libvirtd took 106 ms to answer virDomainPMWakeup)
and the cycle failed its proof of sleep. The stand-ins below are the
guest's two channels, nothing more: real lab.virt.DomainEvents and
ConsoleCapture, an agent whose reply is ready when the wake is sent.
"""

import threading

from lab import modes
from lab.cycle import Cycle, Watchdogs
from lab.guest import ConsoleCapture
from lab.guest_agent import Reply
from lab.virt import DomainEvents


class Agent:
    pokes = 0
    first_data = None  # no transfer to time

    def __init__(self):
        self.reply = None

    def send(self, command):
        return 1

    def has_reply(self, request_id):
        return self.reply is not None

    def wait(self, request_id, timeout, abort=None):
        assert self.reply is not None, "the stand-in's reply is ready once the wake was sent"
        return self.reply


class Guest:
    """The guest sleeps as soon as asked; the wake makes its report ready at
    once and libvirt's PMWakeup event `event_delay` seconds later."""

    def __init__(self, tmp_path, event_delay):
        self.agent = Agent()
        self.events = DomainEvents()
        self.console = ConsoleCapture(str(tmp_path / "console.log"))
        self.event_delay = event_delay
        self.timers = []
        real_send = self.agent.send

        def send(command):
            request = real_send(command)
            self.events.add("pmsuspend")
            return request
        self.agent.send = send

    def running(self):
        return True

    def pm_wakeup(self):
        self.agent.reply = Reply(1, 0, "=== end\n", b"")
        timer = threading.Timer(self.event_delay, self.events.add, ("pmwakeup",))
        self.timers.append(timer)
        timer.start()


def drive_mem(tmp_path, event_delay):
    guest = Guest(tmp_path, event_delay)
    cycle = Cycle(guest, modes.parse_mode("mem"), 1, Watchdogs())
    reply = cycle.drive()
    events = [kind for _, kind, _ in guest.events.since(cycle.event_mark)]
    for timer in guest.timers:
        timer.cancel()
    return reply, events, [step for step, _ in cycle.timeline]


def test_a_pmwakeup_event_behind_the_report_is_still_counted(tmp_path):
    reply, events, steps = drive_mem(tmp_path, 0.3)
    assert reply.status == 0
    assert events == ["pmsuspend", "pmwakeup"]
    assert steps == ["sent", "pmsuspend", "pmwakeup-sent", "report"]  # the wait is not a step


def test_a_pmwakeup_event_that_never_comes_is_not_waited_for_forever(tmp_path, monkeypatch):
    monkeypatch.setattr("lab.cycle.WAKE_EVENT_GRACE", 0.2)
    reply, events, _ = drive_mem(tmp_path, 60)
    assert events == ["pmsuspend"]  # judge() then fails the proof of sleep


def test_a_wake_call_that_returns_after_the_report_began_keeps_the_timeline_in_order(tmp_path):
    """virDomainPMWakeup / system_powerdown can return after the guest's
    report has begun to arrive (the agent's reader notes report-started),
    and the request's send after the console's s2idle marker arrived: each
    is noted when it was called, so no host phase is negative (the
    dashboard's schema refused 8 of 1,000 freeze cycles' records, and 3 of
    1,000 more with both host cores busy)."""
    import time

    from lab.judge import host_phases
    guest = Guest(tmp_path, 0.0)
    wake = guest.pm_wakeup

    def slow_wake():
        wake()
        guest.agent.first_data = time.time()  # the report began while the call was still out
        time.sleep(0.05)
    guest.pm_wakeup = slow_wake
    cycle = Cycle(guest, modes.parse_mode("mem"), 1, Watchdogs())
    cycle.drive()
    for timer in guest.timers:
        timer.cancel()
    steps = [step for step, _ in cycle.timeline]
    assert steps == ["sent", "pmsuspend", "pmwakeup-sent", "report-started", "report"]
    assert all(seconds >= 0 for seconds in host_phases(cycle.started, cycle.timeline).values())


def test_a_request_send_that_returns_after_the_s2idle_marker_keeps_the_timeline_in_order(tmp_path):
    """Under load the guest printed 'PM: suspend-to-idle' (noted by the
    console reader on arrival) before the agent's send returned."""
    import time

    from lab.judge import host_phases
    guest = Guest(tmp_path, 0.0)
    send = guest.agent.send

    def slow_send(command):
        request = send(command)
        guest.console.feed(b"[    4.003661] PM: suspend-to-idle\n")
        time.sleep(0.05)
        return request
    guest.agent.send = slow_send
    guest.wait_idle = lambda: "idle"
    guest.press_power_button = guest.pm_wakeup  # makes the report ready
    cycle = Cycle(guest, modes.parse_mode("freeze"), 1, Watchdogs())
    cycle.drive()
    steps = [step for step, _ in cycle.timeline]
    assert steps == ["sent", "s2idle-entered", "vcpus-idle", "powerbutton-sent", "report"]
    assert all(seconds >= 0 for seconds in host_phases(cycle.started, cycle.timeline).values())
