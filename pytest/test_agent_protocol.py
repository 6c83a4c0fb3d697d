"""lab.guest_agent framing, on bytes recorded from a real guest's agent channel."""

import random
import subprocess

import pytest

from lab import guest_report
from lab.guest_agent import ReplyParser, quote
from recordings_util import read_bytes

STREAM = read_bytes("agent-stream.bin.gz")


def parse_in_chunks(data, sizes):
    parser = ReplyParser()
    replies, offset = [], 0
    for size in sizes:
        replies += parser.feed(data[offset:offset + size])
        offset += size
    replies += parser.feed(data[offset:])
    return replies, parser


def test_whole_stream():
    replies, parser = parse_in_chunks(STREAM, [])
    assert [r.output for r in replies[:2]] == ["hello\n", "no newline at end"]
    # The command printed a fake reply header on stderr and exited 3: the
    # length framing keeps it inside the payload.
    assert replies[2].status == 3 and replies[2].output == "@pmlab-reply 9 9 9\n"
    assert len(replies[3].output) == 3000 and replies[3].status == 0
    assert parser.noise == b""
    ids = [r.id for r in replies]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_cycle_report_arrives_whole():
    replies, _ = parse_in_chunks(STREAM, [])
    report = replies[-1].output
    assert list(guest_report.sections(report))[0] == "before"
    assert "end" in guest_report.sections(report)


@pytest.mark.parametrize("seed", range(5))
def test_any_chunking_gives_the_same_replies(seed):
    """Stream reads return arbitrary chunks: a header or payload may be split anywhere."""
    rng = random.Random(seed)
    sizes = [rng.choice((1, 2, 7, 13, 64, 1000, 4096)) for _ in range(3000)]
    whole, _ = parse_in_chunks(STREAM, [])
    chunked, parser = parse_in_chunks(STREAM, sizes)
    assert chunked == whole
    assert parser.noise == b""


def test_bytes_outside_a_reply_are_kept_as_noise():
    parser = ReplyParser()
    assert parser.feed(b"junk @ junk\n" + STREAM[:10]) == []  # a header cut short waits
    replies = parser.feed(STREAM[10:])
    assert replies == parse_in_chunks(STREAM, [])[0]
    assert parser.noise == b"junk @ junk\n"


@pytest.mark.parametrize("word", ["plain", "* suspend 5 1", "it's", "a'b'c", "$HOME `x` \"q\"", ""])
def test_quote_survives_a_posix_shell(word):
    out = subprocess.run(["/bin/sh", "-c", "printf %s " + quote(word)], capture_output=True, text=True)
    assert out.stdout == word
