"""The cover letter (kernel/patches/6.1/0000-cover-letter.patch) speaks for the
series as it is: its shortlog names every patch of the posting in
kernel/patches/6.1/series, in order, and its numbering matches the posting's
length.  The series file also applies a separate RFC (reprepare/, its own
numbering) that is not part of the posting.  The same for the port to
linux-source-6.12 (kernel/patches/6.12)."""

import email
import email.policy
import os
import re

import pytest

from lab.kernels import series_patches

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCHES_6_1 = os.path.join(REPO, "kernel", "patches", "6.1")
PATCHES_6_12 = os.path.join(REPO, "kernel", "patches", "6.12")
SERIES_DIRS = [PATCHES_6_1, PATCHES_6_12]

# The legacy drivers that test the event in a way PMSG_QUIESCE would change,
# as kernel/audit-legacy-pm finds them in each tree (u132-hcd is gone from
# 6.12): the reason v3 keeps PMSG_FREEZE for legacy drivers, which the cover
# letter must give.
CHANGED_LEGACY_DRIVERS = {
    PATCHES_6_1: ("sl811-hcd", "isp1362-hcd", "u132-hcd", "i810fb"),
    PATCHES_6_12: ("sl811-hcd", "isp1362-hcd", "i810fb"),
}


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


@pytest.mark.parametrize("patches", SERIES_DIRS, ids=["6.1", "6.12"])
def test_cover_letter_shortlog_is_the_series(patches):
    cover_path = os.path.join(patches, "0000-cover-letter.patch")
    with open(cover_path) as source:
        cover = source.read()
    names = [name for name in series_patches(patches) if "/" not in name]
    assert f"00/{len(names)}]" in subject(cover_path)
    assert shortlog(cover) == [strip_prefix(subject(os.path.join(patches, name))) for name in names]
    for number, name in enumerate(names, start=1):
        assert f"{number:02d}/{len(names)}]" in subject(os.path.join(patches, name)), name


@pytest.mark.parametrize("patches", SERIES_DIRS, ids=["6.1", "6.12"])
def test_the_reprepare_rfc_is_applied_last_and_posted_on_its_own(patches):
    names = series_patches(patches)
    separate = [name for name in names if "/" in name]
    assert separate == names[-len(separate):] and [n.split("/")[0] for n in separate] == ["reprepare"]
    assert subject(os.path.join(patches, separate[0])).startswith("[RFC PATCH]")
    with open(os.path.join(patches, "0000-cover-letter.patch")) as source:
        assert "reprepare" in source.read()


@pytest.mark.parametrize("patches", SERIES_DIRS, ids=["6.1", "6.12"])
def test_cover_letter_lists_the_changed_legacy_drivers(patches):
    with open(os.path.join(patches, "0000-cover-letter.patch")) as source:
        cover = source.read()
    for driver in CHANGED_LEGACY_DRIVERS[patches]:
        assert driver in cover
