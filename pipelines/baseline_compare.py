"""Table of the fault campaign on the patched kernel against the unpatched
baseline, from the two JUnit files pytest wrote.

    /usr/bin/python3 -m pipelines.baseline_compare PATCHED.xml BASELINE.xml > docs/baseline-comparison.md

A case that passes on the patched kernel and fails on the baseline is where
the series changes behaviour; the oracle's first finding says how. The
expected column is BASELINE_FAILS (the patch that changes each case) and
BASELINE_PASSES; any other outcome is printed to stderr and exits 1, so the
negative control can fail (pytest/test_baseline_control.py runs it live).
"""

import re
import sys
import xml.etree.ElementTree as ET


# The campaign cases the series changes: each must fail on the unpatched 6.1.
BASELINE_FAILS = {
    "test_child_registered_during_prepare_re_prepares_parent": "patch 6 (re-prepare the parent)",
    "test_edu_device_state_survives_s3_and_s4": "patches 1 and 3 (->quiesce*, PMSG_QUIESCE)",
    "test_failed_image_creation_recovers[freeze]": "patch 5 (->recover)",
    "test_failed_image_creation_recovers[freeze_late]": "patch 5 (->recover)",
    "test_failed_image_creation_recovers[freeze_noirq]": "patch 5 (->recover)",
    "test_poweroff_failure_still_powers_off_and_restores": "patches 1 and 3 (->quiesce*, PMSG_QUIESCE)",
    "test_restore_failure_in_boot_kernel_recovers_and_boot_continues": "patches 1 and 3 (->quiesce*)",
    "test_suspend_side_failure_unwinds[suspend_late-expected1]": "patch 8 (suspend_stats step name)",
}
# The cases the series does not touch: each must pass on both kernels.
BASELINE_PASSES = (
    "test_child_registered_during_suspend_is_skipped_with_a_warning",
    "test_prepare_eagain_is_retried",
    "test_suspend_side_failure_unwinds[suspend-expected0]",
    "test_suspend_side_failure_unwinds[suspend_noirq-expected2]",
)


def expected(kernel):
    """{case: outcome} the campaign must give on "patched" or "baseline"."""
    cases = sorted(set(BASELINE_FAILS) | set(BASELINE_PASSES))
    if kernel == "patched":
        return {name: "pass" for name in cases}
    return {name: "fail" if name in BASELINE_FAILS else "pass" for name in cases}


def unexpected(found, kernel):
    """What in `found` (outcomes()) contradicts expected(kernel), one line
    each: a case with another outcome (an "error" is the lab's, never the
    expected failure), one that did not run, one the table does not know."""
    want = expected(kernel)
    problems = []
    for name in sorted(set(want) | set(found)):
        if name not in want:
            problems.append(f"{name}: not in the expected table (BASELINE_FAILS or BASELINE_PASSES)")
        elif name not in found:
            problems.append(f"{name}: not run on the {kernel} kernel")
        elif found[name][0] != want[name]:
            outcome, finding = found[name]
            problems.append(f"{name}: {outcome} on the {kernel} kernel, expected {want[name]}"
                            + (f" ({BASELINE_FAILS[name]} changes it)" if want[name] == "fail" else "")
                            + (f": {finding}" if finding else ""))
    return problems


def outcomes(path):
    """{test name: (outcome, first line of the failure)} for
    test_fault_campaign; outcome is "pass", "fail" (an assertion) or "error"
    (the test could not run: a lab setup problem, never the kernel's)."""
    found = {}
    for case in ET.parse(path).iter("testcase"):
        if not case.get("classname", "").endswith("test_fault_campaign"):
            continue
        failure, error = case.find("failure"), case.find("error")
        if case.find("skipped") is not None:
            outcome, element = "skipped", case.find("skipped")
        elif error is not None:
            outcome, element = "error", error
        elif failure is not None:
            outcome, element = "fail", failure
        else:
            outcome, element = "pass", None
        message = "" if element is None else (element.get("message") or "")
        found[case.get("name")] = (outcome, _first_finding(message))
    return found


def _first_finding(message):
    """The rule the oracle or the test named, on one line."""
    rule = re.search(r"fail in ordering: ([\w-]+): (.*?)(?:\n|$)", message)
    if rule:
        return f"oracle `{rule[1]}`: {rule[2].strip()}"
    undo = re.search(r"'rule': '(\w[\w-]*)', 'device': '([^']+)', 'message': \"?'?([^\"']+)", message)
    if undo:
        return f"oracle `{undo[1]}` ({undo[2]}): {undo[3].strip()}"
    return " ".join(message.split())[:160]


def table(patched, baseline):
    lines = ["| campaign case | patched 6.1 | unpatched 6.1 | what the baseline shows |",
             "|---|---|---|---|"]
    for name in sorted(set(patched) | set(baseline)):
        p_ok, p_msg = patched.get(name, ("not run", ""))
        b_ok, b_msg = baseline.get(name, ("not run", ""))
        cell = lambda outcome: "pass" if outcome == "pass" else f"**{outcome}**"
        note = "" if b_ok == "pass" else b_msg.replace("|", "\\|")
        if p_ok != "pass":
            note = f"patched {p_ok}: {p_msg}".replace("|", "\\|")
        lines.append(f"| `{name}` | {cell(p_ok)} | {cell(b_ok)} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    patched, baseline = outcomes(argv[1]), outcomes(argv[2])
    if not patched or not baseline:
        print("baseline_compare: no test_fault_campaign cases in "
              f"{argv[1] if not patched else argv[2]}", file=sys.stderr)
        return 1
    sys.stdout.write("# Fault campaign: patched against unpatched 6.1\n\n"
                     "Generated by `pipelines/baseline-compare` from the JUnit results of "
                     "`pytest pytest/test_fault_campaign.py` on both kernels.\n\n")
    sys.stdout.write(table(patched, baseline))
    problems = unexpected(patched, "patched") + unexpected(baseline, "baseline")
    for problem in problems:
        print(f"baseline_compare: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
