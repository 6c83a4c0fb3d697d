"""JUnit XML from a run's cycles: one <testcase> per cycle, one <testsuite>
per mode, so CI systems (GitLab, GitHub, Jenkins) list each failing cycle.

  ./pmlab junit RUN_DIR [-o junit.xml]

verdict pass -> passed; fail / hang -> <failure type=verdict>; error (the lab
failed, not the kernel) -> <error>; a cycle with only its "started" line ->
<error type="unfinished">. A cycle made to fail on purpose (expected_verdict)
passes when it got that verdict. The cycle's evidence lines go to <system-out>.
"""

import argparse
import os
import sys
import xml.etree.ElementTree as ET


from lab import files  # noqa: E402
from lab.records import ERROR, INTERRUPTED, PASS, did_as_expected, is_done  # noqa: E402

MAX_OUT = 20000


def _outcome(record):
    """(JUnit kind: "pass", "failure", "error" or "skipped"; its type; its message)."""
    if not is_done(record):
        return "error", "unfinished", "only the \"started\" line: the cycle never finished"
    if did_as_expected(record):  # passed, or a cycle made to fail on purpose that did
        return "pass", None, None
    verdict = record.get("verdict")
    if verdict == INTERRUPTED:  # the run stopped during it: no result either way
        return "skipped", "interrupted", record.get("reason") or "interrupted"
    if verdict == PASS:  # ... or one that should have failed and did not
        expected = record.get("expected_verdict")
        message = f"expected verdict {expected} (provoked on purpose), got pass"
        return "failure", f"expected-{expected}", message
    message = f"{verdict} in {record.get('phase') or 'unknown phase'}: {record.get('reason') or ''}".strip()
    if verdict == ERROR:
        return "error", "error", message
    return "failure", verdict or "unknown", message


def testcase_name(record):
    return f"cycle {record['cycle']:03d} {record['mode']}/{record.get('wake') or '-'}"


def build(records, run_id):
    """An ElementTree <testsuites> for the records (final record per cycle)."""
    root = ET.Element("testsuites", name=f"pmlab {run_id}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    suites = {}
    for record in sorted(records, key=lambda r: r["cycle"]):
        mode = record["mode"]
        if mode not in suites:
            suites[mode] = (ET.SubElement(root, "testsuite", name=f"pmlab.{mode}"),
                            {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0})
        suite, counts = suites[mode]
        seconds = record.get("host_seconds")
        seconds = float(seconds) if isinstance(seconds, (int, float)) else 0.0
        case = ET.SubElement(suite, "testcase", classname=f"pmlab.{run_id}.{mode}",
                             name=testcase_name(record), time=f"{seconds:.3f}")
        kind, type_, message = _outcome(record)
        if kind == "skipped":
            ET.SubElement(case, "skipped", message=message[:500])
        elif kind != "pass":
            element = ET.SubElement(case, "failure" if kind == "failure" else "error",
                                    type=type_, message=message[:500])
            element.text = message
        evidence = record.get("evidence") or record.get("problems") or []
        if evidence and kind != "pass":
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(str(line) for line in evidence)[:MAX_OUT]
        for bucket in (counts, totals):
            bucket["tests"] += 1
            bucket["time"] += seconds
            bucket["failures"] += kind == "failure"
            bucket["errors"] += kind == "error"
            bucket["skipped"] += kind == "skipped"
    for suite, counts in suites.values():
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
        suite.set("time", f"{counts['time']:.3f}")
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    root.set("time", f"{totals['time']:.3f}")
    return ET.ElementTree(root)


def write(records, run_id, path):
    tree = build(records, run_id)
    ET.indent(tree)
    files.write_atomically(path, ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n")
    return tree


def main(argv=None):
    from lab.records import cycles_path
    from pipelines.common import read_records
    parser = argparse.ArgumentParser(prog="pmlab junit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("-o", "--output", help="default RUN_DIR/junit.xml")
    args = parser.parse_args(argv)
    if not os.path.isfile(cycles_path(args.run_dir)):
        print(f"junit: {args.run_dir} has no cycles.jsonl", file=sys.stderr)
        return 2
    output = args.output or os.path.join(args.run_dir, "junit.xml")
    records = read_records(args.run_dir)
    tree = write(records, os.path.basename(os.path.normpath(args.run_dir)), output)
    root = tree.getroot()
    print(f"junit: {output}: {root.get('tests')} tests, {root.get('failures')} failures, "
          f"{root.get('errors')} errors")
    return 0


if __name__ == "__main__":  # ./pmlab junit is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.junit", "junit"))
