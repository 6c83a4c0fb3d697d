"""Table of the fault campaign on the patched kernel against the unpatched
baseline, from the two JUnit files pytest wrote.

    /usr/bin/python3 -m pipelines.baseline_compare [--series 6.12] PATCHED.xml BASELINE.xml > docs/baseline-comparison.md

A case that passes on the patched kernel and fails on the baseline is where
the series changes behaviour; the oracle's first finding says how. The
expected column is BASELINE_FAILS[series] (the patch that changes each case)
and BASELINE_PASSES[series], for that kernel's bundled series (default 6.1);
any other outcome is printed to stderr and exits 1, so the negative control
can fail (pytest/test_baseline_control.py runs it live).
"""

import re
import sys
import xml.etree.ElementTree as ET


# The campaign cases each bundled series (kernel/patches/X.Y) changes, with
# the patch that changes it: each must fail on that kernel without the series.
BASELINE_FAILS = {
    "6.1": {
        "test_child_registered_during_prepare_re_prepares_parent": "reprepare/0001 (prepare a device again)",
        "test_edu_device_state_survives_s3_and_s4": "0005 and 0010 (->quiesce*)",
        "test_failed_image_creation_recovers[freeze]": "0004 (->recover after a failed image)",
        "test_failed_image_creation_recovers[freeze_late]": "0004 (->recover after a failed image)",
        "test_failed_image_creation_recovers[freeze_noirq]": "0004 (->recover after a failed image)",
        "test_poweroff_failure_still_powers_off_and_restores": "0005 (->quiesce*)",
        "test_restore_failure_in_boot_kernel_recovers_and_boot_continues": "0005 (->quiesce*)",
        "test_suspend_side_failure_unwinds[suspend_late-expected1]": "0001 (suspend_stats step names)",
    },
    # 6.12 names the late and early steps in suspend_stats itself (the 6.1
    # series' 0001 is dropped), so that case passes without the series.
    "6.12": {
        "test_child_registered_during_prepare_re_prepares_parent": "reprepare/0001 (prepare a device again)",
        "test_edu_device_state_survives_s3_and_s4": "0003 (genpd ->restore_noirq), 0005 and 0010 (->quiesce*)",
        "test_failed_image_creation_recovers[freeze]": "0004 (->recover after a failed image)",
        "test_failed_image_creation_recovers[freeze_late]": "0004 (->recover after a failed image)",
        "test_failed_image_creation_recovers[freeze_noirq]": "0004 (->recover after a failed image)",
        "test_poweroff_failure_still_powers_off_and_restores": "0005 (->quiesce*)",
        "test_restore_failure_in_boot_kernel_recovers_and_boot_continues": "0005 (->quiesce*)",
    },
}
# The cases a series does not touch: each must pass on both kernels.
BASELINE_PASSES = {
    "6.1": (
        "test_child_registered_during_suspend_is_skipped_with_a_warning",
        "test_prepare_eagain_is_retried",
        "test_suspend_side_failure_unwinds[suspend-expected0]",
        "test_suspend_side_failure_unwinds[suspend_noirq-expected2]",
    ),
    "6.12": (
        "test_child_registered_during_suspend_is_skipped_with_a_warning",
        "test_prepare_eagain_is_retried",
        "test_suspend_side_failure_unwinds[suspend-expected0]",
        "test_suspend_side_failure_unwinds[suspend_late-expected1]",
        "test_suspend_side_failure_unwinds[suspend_noirq-expected2]",
    ),
}


def expected(kernel, series="6.1"):
    """{case: outcome} the campaign must give on "patched" or "baseline"
    with the bundled series `series` ("6.1", "6.12")."""
    fails = BASELINE_FAILS[series]
    cases = sorted(set(fails) | set(BASELINE_PASSES[series]))
    if kernel == "patched":
        return {name: "pass" for name in cases}
    return {name: "fail" if name in fails else "pass" for name in cases}


def unexpected(found, kernel, series="6.1"):
    """What in `found` (outcomes()) contradicts expected(kernel, series), one
    line each: a case with another outcome (an "error" is the lab's, never
    the expected failure), one that did not run, one the table does not know."""
    want = expected(kernel, series)
    problems = []
    for name in sorted(set(want) | set(found)):
        if name not in want:
            problems.append(f"{name}: not in the expected table (BASELINE_FAILS or BASELINE_PASSES)")
        elif name not in found:
            problems.append(f"{name}: not run on the {kernel} kernel")
        elif found[name][0] != want[name]:
            outcome, finding = found[name]
            problems.append(f"{name}: {outcome} on the {kernel} kernel, expected {want[name]}"
                            + (f" ({BASELINE_FAILS[series][name]} changes it)" if want[name] == "fail" else "")
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


def table(patched, baseline, series="6.1"):
    lines = [f"| campaign case | patched {series} | unpatched {series} | what the baseline shows |",
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
    if argv[1:2] in (["-h"], ["--help"]):
        print("usage: python3 -m pipelines.baseline_compare [--series X.Y] PATCHED.xml BASELINE.xml\n" + __doc__)
        return 0
    series = "6.1"
    if len(argv) == 5 and argv[1] == "--series":
        series, argv = argv[2], argv[:1] + argv[3:]
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if series not in BASELINE_FAILS:
        print(f"baseline_compare: no expected table for the {series} series "
              f"(BASELINE_FAILS has {', '.join(BASELINE_FAILS)})", file=sys.stderr)
        return 2
    patched, baseline = outcomes(argv[1]), outcomes(argv[2])
    if not patched or not baseline:
        print("baseline_compare: no test_fault_campaign cases in "
              f"{argv[1] if not patched else argv[2]}", file=sys.stderr)
        return 1
    sys.stdout.write(f"# Fault campaign: patched against unpatched {series}\n\n"
                     "Generated by `pipelines/baseline-compare` from the JUnit results of "
                     "`pytest pytest/test_fault_campaign.py` on both kernels.\n\n")
    sys.stdout.write(table(patched, baseline, series))
    problems = unexpected(patched, "patched", series) + unexpected(baseline, "baseline", series)
    for problem in problems:
        print(f"baseline_compare: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
