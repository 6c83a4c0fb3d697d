"""The cover letter (kernel/patches/0000-cover-letter.patch) speaks for the
series as it is: its shortlog names every patch of kernel/patches/series, in
order, and its numbering matches the series length."""

import email
import email.policy
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCHES = os.path.join(REPO, "kernel", "patches")


def series():
    with open(os.path.join(PATCHES, "series")) as listing:
        return [line.strip() for line in listing if line.strip() and not line.startswith("#")]


def subject(path):
    with open(path, "rb") as source:
        message = email.message_from_binary_file(source, policy=email.policy.default)
    return " ".join(str(message["Subject"]).split())


def strip_prefix(text):
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", text)


def shortlog(cover):
    """The subjects in the cover letter's shortlog, continuation lines joined."""
    lines = cover.split("\n")
    start = next(i for i, line in enumerate(lines) if re.match(r"^\S.* \(\d+\):$", line))
    subjects = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        if line.startswith("    "):
            subjects[-1] += " " + line.strip()
        else:
            subjects.append(line.strip())
    return subjects


def test_cover_letter_shortlog_is_the_series():
    cover_path = os.path.join(PATCHES, "0000-cover-letter.patch")
    with open(cover_path) as source:
        cover = source.read()
    names = series()
    assert f"00/{len(names)}]" in subject(cover_path)
    assert shortlog(cover) == [strip_prefix(subject(os.path.join(PATCHES, name))) for name in names]
    for number, name in enumerate(names, start=1):
        assert f"{number:02d}/{len(names)}]" in subject(os.path.join(PATCHES, name)), name


def test_cover_letter_lists_the_changed_legacy_drivers():
    with open(os.path.join(PATCHES, "0000-cover-letter.patch")) as source:
        cover = source.read()
    for driver in ("sl811-hcd", "isp1362-hcd", "u132-hcd", "i810fb"):
        assert driver in cover
