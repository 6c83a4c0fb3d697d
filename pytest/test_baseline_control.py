"""The oracle's negative control, asserted: the fault campaign on the
unpatched 6.1 baseline (build/baseline/out) fails exactly the cases the
series changes and passes the ones it does not touch
(pipelines.baseline_compare.BASELINE_FAILS / BASELINE_PASSES, the
"unpatched 6.1" column of docs/baseline-comparison.md).

The live test needs the baseline kernel: kernel/build --baseline and
lab/build-initramfs --baseline. Without it the test fails and says so.
"""

import os
import subprocess
import sys

import pytest

from lab import artifacts as artifacts_mod
from lab.virt import LabError
from pipelines import baseline_compare

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMPAIGN = "pytest/test_fault_campaign.py"


def _campaign_case_names():
    """The campaign's test names as JUnit writes them, from pytest's own
    collection (no guest starts)."""
    done = subprocess.run([sys.executable, "-m", "pytest", CAMPAIGN, "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::", 1)[1] for line in done.stdout.splitlines() if line.startswith(CAMPAIGN + "::")}


def test_expected_table_names_every_campaign_case_once():
    fails, passes = set(baseline_compare.BASELINE_FAILS), set(baseline_compare.BASELINE_PASSES)
    assert not fails & passes
    assert fails | passes == _campaign_case_names()
    assert (len(fails), len(passes)) == (8, 4)


def test_a_baseline_error_or_pass_is_not_the_expected_failure():
    baseline = {name: (outcome, "") for name, outcome in baseline_compare.expected("baseline").items()}
    assert baseline_compare.unexpected(baseline, "baseline") == []
    changed = "test_failed_image_creation_recovers[freeze]"
    untouched = "test_prepare_eagain_is_retried"
    baseline[changed] = ("error", "lab setup: libvirt")
    baseline[untouched] = ("fail", "AssertionError")
    del baseline["test_edu_device_state_survives_s3_and_s4"]
    problems = baseline_compare.unexpected(baseline, "baseline")
    assert [p.split(":")[0] for p in problems] == [
        "test_edu_device_state_survives_s3_and_s4", changed, untouched]
    assert "error on the baseline kernel, expected fail (patch 5" in problems[1]


def test_junit_outcomes_tell_a_failure_from_an_error(tmp_path):
    """A JUnit file pytest really wrote: an assertion is "fail", a fixture
    that could not set up (the lab's problem) is "error"."""
    (tmp_path / "test_fault_campaign.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def lab():\n"
        "    raise RuntimeError('libvirt is down')\n"
        "def test_passes():\n"
        "    pass\n"
        "def test_fails():\n"
        "    assert 1 == 2\n"
        "def test_errors(lab):\n"
        "    pass\n")
    junit = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}",
                    "test_fault_campaign.py"], cwd=tmp_path, capture_output=True, check=False)
    found = baseline_compare.outcomes(str(junit))
    assert {name: outcome for name, (outcome, _) in found.items()} == {
        "test_passes": "pass", "test_fails": "fail", "test_errors": "error"}
    # baseline-compare exits 1 (after the table) when the patched kernel fails a case
    assert baseline_compare.main(["baseline_compare", str(junit), str(junit)]) == 1


def _baseline_artifacts():
    found, problem = None, None
    try:
        found = artifacts_mod.find(artifacts_mod.BASELINE_DIR)
    except LabError as error:
        problem = str(error)
    if problem:  # outside the except block: one message, no exception chain
        pytest.fail(f"the negative control needs the unpatched kernel: {problem}", pytrace=False)
    variant = found.manifest.get("variant")
    if variant != "baseline":
        pytest.fail(f"{found.directory}/manifest.json says variant {variant!r}, not 'baseline': "
                    "rebuild it with kernel/build --baseline", pytrace=False)
    return found


@pytest.mark.guest
@pytest.mark.pipeline
@pytest.mark.timeout(5400)
def test_unpatched_baseline_fails_exactly_the_cases_the_series_changes(request, tmp_path):
    _baseline_artifacts()
    junit = tmp_path / "baseline.xml"
    config = request.config
    argv = [sys.executable, "-m", "pytest", CAMPAIGN, "-p", "no:cacheprovider", "-q", "--baseline",
            f"--junitxml={junit}", "--uri", config.getoption("--uri"),
            "--profile", config.getoption("--profile"), "--lab-results", config.getoption("--lab-results")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    print(done.stdout[-6000:], done.stderr[-2000:], sep="\n")
    # 1: some cases failed, as they must; 0 or 2 and above: the control did not run as one
    assert done.returncode == 1, f"campaign on the baseline exited {done.returncode}:\n{done.stdout[-3000:]}"
    found = baseline_compare.outcomes(str(junit))
    assert baseline_compare.unexpected(found, "baseline") == []
