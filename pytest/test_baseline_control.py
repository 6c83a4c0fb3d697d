"""The oracle's negative control, asserted: the fault campaign on the
unpatched 6.1 baseline (build/baseline/out) fails exactly the cases the
series changes and passes the ones it does not touch
(pipelines.baseline_compare.BASELINE_FAILS / BASELINE_PASSES, the
"unpatched 6.1" column of docs/baseline-comparison.md).

The live test needs the baseline kernel: kernel/build --baseline and
lab/build-initramfs --baseline (with pytest's --kernel SPEC: that kernel built
with --series none, judged by that series' table). Without it the test fails
and says so.
"""

import os
import subprocess
import sys

import pytest

from lab import artifacts as artifacts_mod
from lab import kernels
from lab.errors import LabError
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


@pytest.mark.parametrize("series, changed", [("6.1", 8), ("6.12", 7)])
def test_expected_table_names_every_campaign_case_once(series, changed):
    fails = set(baseline_compare.BASELINE_FAILS[series])
    passes = set(baseline_compare.BASELINE_PASSES[series])
    assert not fails & passes
    assert fails | passes == _campaign_case_names()
    assert (len(fails), len(passes)) == (changed, 12 - changed)


def test_every_bundled_series_has_an_expected_table():
    bundled = {name for name in os.listdir(os.path.join(REPO, "kernel", "patches"))
               if os.path.isfile(os.path.join(REPO, "kernel", "patches", name, "series"))}
    assert set(baseline_compare.BASELINE_FAILS) == set(baseline_compare.BASELINE_PASSES) == bundled


def test_a_case_6_12_names_itself_passes_on_its_baseline():
    """6.12's suspend_stats names the late step (the 6.1 series' 0001 is
    dropped from the 6.12 port): the 6.1 table would call that a failure."""
    case = "test_suspend_side_failure_unwinds[suspend_late-expected1]"
    found = {name: (outcome, "") for name, outcome in baseline_compare.expected("baseline", "6.12").items()}
    assert found[case] == ("pass", "")
    assert baseline_compare.unexpected(found, "baseline", "6.12") == []
    assert baseline_compare.unexpected(found, "baseline", "6.1") == [
        f"{case}: pass on the baseline kernel, expected fail (0001 (suspend_stats step names) changes it)"]


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
    assert "error on the baseline kernel, expected fail (0004 (->recover" in problems[1]


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


def _baseline_options(config):
    """The unpatched kernel of this session's kernel: build/baseline for the
    default 6.1, else --kernel SPEC --series none; and its series name."""
    spec = config.getoption("--kernel")
    if not spec:
        return ["--baseline"], artifacts_mod.BASELINE_DIR, "6.1"
    try:
        patched, unpatched = kernels.resolve(spec), kernels.resolve(spec, "none")
    except kernels.KernelSpecError as error:
        pytest.fail(str(error), pytrace=False)
    return ["--kernel", spec, "--series", "none"], unpatched.artifacts, os.path.basename(patched.series)


def _baseline_artifacts(directory):
    found, problem = None, None
    try:
        found = artifacts_mod.find(directory)
    except LabError as error:
        problem = str(error)
    if problem:  # outside the except block: one message, no exception chain
        pytest.fail(f"the negative control needs the unpatched kernel: {problem}", pytrace=False)
    variant = found.manifest.get("variant")
    if variant != "baseline":
        pytest.fail(f"{found.directory}/manifest.json says variant {variant!r}, not 'baseline': "
                    "rebuild it with kernel/build --baseline (or --kernel SPEC --series none)", pytrace=False)
    return found


@pytest.mark.guest
@pytest.mark.pipeline
@pytest.mark.timeout(5400)
def test_unpatched_baseline_fails_exactly_the_cases_the_series_changes(request, tmp_path):
    config = request.config
    options, directory, series = _baseline_options(config)
    _baseline_artifacts(directory)
    junit = tmp_path / "baseline.xml"
    argv = [sys.executable, "-m", "pytest", CAMPAIGN, "-p", "no:cacheprovider", "-q", *options,
            f"--junitxml={junit}", "--uri", config.getoption("--uri"),
            "--profile", config.getoption("--profile"), "--lab-results", config.getoption("--lab-results")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    print(done.stdout[-6000:], done.stderr[-2000:], sep="\n")
    # 1: some cases failed, as they must; 0 or 2 and above: the control did not run as one
    assert done.returncode == 1, f"campaign on the baseline exited {done.returncode}:\n{done.stdout[-3000:]}"
    found = baseline_compare.outcomes(str(junit))
    assert baseline_compare.unexpected(found, "baseline", series) == []


@pytest.mark.guest
@pytest.mark.pipeline
@pytest.mark.timeout(1800)
def test_unpatched_layers_freeze_and_thaw_where_the_series_quiesces_and_recovers(request):
    """pytest/test_quiesce_layers.py on the unpatched kernel: the same
    devices' layers run their freeze callbacks in the boot kernel of a
    restore and thaw or restore ones after a failed image creation (the
    module asserts the names for the kernel it boots, from its manifest)."""
    config = request.config
    options, directory, _ = _baseline_options(config)
    _baseline_artifacts(directory)
    argv = [sys.executable, "-m", "pytest", "pytest/test_quiesce_layers.py", "-p", "no:cacheprovider", "-q",
            *options, "--uri", config.getoption("--uri"), "--profile", config.getoption("--profile"),
            "--lab-results", config.getoption("--lab-results")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, f"the layers on the baseline:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    assert "5 passed" in done.stdout, done.stdout[-2000:]
