"""The console capture and the event list of a guest that lives for
thousands of cycles: marks stay absolute while old entries are dropped, so
memory stays flat (the soak's harness RSS)."""

from lab.guest import ConsoleCapture
from lab.virt import DomainEvents


def _capture(tmp_path, chunks):
    capture = ConsoleCapture(str(tmp_path / "console.log"))
    for chunk in chunks:  # as lab.virt.watch_stream delivers them
        capture.feed(chunk)
    return capture


def test_forgotten_console_lines_keep_marks_absolute(tmp_path):
    capture = _capture(tmp_path, [b"one\ntwo\n", b"Kernel panic - not syncing: old\nthree\n", b"four\n"])
    assert capture.mark() == 5
    capture.forget_before(3)
    assert capture.mark() == 5
    assert capture.lines(3) == ["three", "four"]
    assert capture.lines(0) == ["three", "four"], "forgotten lines are not invented"
    assert capture.lines(4) == ["four"]
    assert capture.panic_since(0) is None, "a panic before the mark is forgotten with it"
    assert capture.wait_for("four", 3, 0.1) is not None
    capture.forget_before(99)
    assert capture.lines(5) == [] and capture.mark() == 5
    capture.close()
    assert open(tmp_path / "console.log", "rb").read().count(b"\n") == 5, "the file keeps everything"


def test_console_memory_stays_flat_over_many_cycles(tmp_path):
    chunks = [b"".join(b"[ %d.0] cycle line %d\n" % (n, i) for i in range(100)) for n in range(2000)]
    capture = _capture(tmp_path, chunks)
    for cycle in range(0, 200000, 100):
        capture.forget_before(cycle)
    assert capture.mark() == 200000 and len(capture.since(0)) <= 100
    capture.close()


def test_domain_events_forget_keeps_marks():
    events = DomainEvents()
    for kind in ("started", "pmsuspend", "pmwakeup"):
        events.add(kind)
    mark = events.mark()
    events.forget_before(mark)
    events.add("stopped")
    assert [e[1] for e in events.since(mark)] == ["stopped"]
    assert events.wait_for(mark, {"stopped"}, 0.1)[1] == "stopped"
    assert events.wait_for(0, {"pmsuspend"}, 0.05) is None
