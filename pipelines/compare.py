"""Regression check between two runs: the commit pipeline's gate.

  regressions(previous_records, current_records) -> [finding, ...]

A regression is
  - a mode whose pass rate dropped (lab.records.pass_rate, the one
    definition; a mode the previous run did not have is compared with 1.0), or
  - a failure bucket present now that the previous run did not have, or
  - a device callback or PM phase slower than in the previous run (kind
    "latency", lab/latency.py: one-sided Mann-Whitney U and an effect floor
    on the medians); `earlier`: records of earlier runs of the pipeline,
    pooled with the previous run into the baseline (a finding must still be
    slower than the previous run alone). No previous run: no latency finding.
A cycle made to fail on purpose (expected_verdict, as lab/session.py records
for injected faults) is not in the rate and gives no bucket when it got that
verdict; if it passed instead, that is bucket "expected-<verdict>-but-passed".
A fault or delay injected with no verdict asked for (`--inject`: the record's
"injected" field, lab.records.injections) is not in the rate and never a
bucket, whatever it did: what it shows is the user's experiment, not the commit's.
No previous run (first run, or none with cycles) means nothing may fail:
every bucket is new. Records are the final record of each cycle
(lab.records.read_cycles); a cycle left with only its "started" line is
"unfinished": not passed, bucket "unfinished".

Buckets come from dashboards/buckets.py (the dashboard and the gate name
failures alike); a record the dashboard code cannot read falls back to a
local rule, "<verdict>-in-<phase>".
"""

import re

from dashboards import buckets, inputs
from lab import latency
from lab import records as records_module

_PHASE = re.compile(r"[A-Za-z0-9_.-]+")


def _phase_token(phase):
    match = _PHASE.match(phase.strip()) if isinstance(phase, str) else None
    return match.group(0) if match else "unknown"


def local_buckets(record):
    """Fallback classification: [] for a pass, else one bucket."""
    if record.get("status") != "done":
        return ["unfinished"]
    verdict = record.get("verdict")
    if verdict in (records_module.PASS, records_module.INTERRUPTED):
        return []
    return [f"{verdict}-in-{_phase_token(record.get('phase'))}"]


def default_buckets():
    """dashboards.buckets.classify on the dashboard's normalised cycle."""
    def classify(record):
        try:
            return buckets.classify(inputs.normalise(record, record.get("run_id"), None))
        except Exception:  # a record the dashboard code cannot read: do not hide it
            return local_buckets(record)
    return classify


passed = records_module.did_as_expected


def provoked(record):
    """A cycle that failed on purpose, as expected: no failure bucket."""
    return passed(record) and record.get("expected_verdict", records_module.PASS) != records_module.PASS


def injected_unasked(record):
    """A fault or delay injected with no verdict asked for (./pmlab run and
    commit --inject): never a regression, whatever the cycle did."""
    return records_module.injected(record) and \
        (record.get("expected_verdict") or records_module.PASS) == records_module.PASS


def mode_rates(records):
    """{mode: (passed, judged)} of the modes with judged cycles (lab.records.pass_rate)."""
    rates = {}
    for mode in sorted({record["mode"] for record in records}):
        rate = records_module.pass_rate([record for record in records if record["mode"] == mode])
        if rate["judged"]:
            rates[mode] = (rate["passed"], rate["judged"])
    return rates


def lab_error(record):
    """The lab failed the cycle, not the kernel: never a regression of the
    commit (the dashboard's lab_errors counts it)."""
    return records_module.state_of(record) == records_module.ERROR and not records_module.injected(record)


def bucket_cycles(records, classify):
    """{bucket: [cycle numbers]} of the kernel's failures (lab errors apart)."""
    found = {}
    for record in records:
        if provoked(record) or lab_error(record) or injected_unasked(record):
            continue
        if record.get("expected_verdict", records_module.PASS) != records_module.PASS \
                and record.get("verdict") == records_module.PASS:
            found.setdefault(f"expected-{record['expected_verdict']}-but-passed", []).append(record["cycle"])
            continue
        for bucket in classify(record):
            found.setdefault(bucket, []).append(record["cycle"])
    return found


def latency_changes(previous, current, earlier=None):
    """lab.latency.compare of the current run with the previous one (and
    `earlier` records pooled in): [] without a previous run."""
    if not previous:
        return []
    baseline = list(previous) + list(earlier or ())
    return latency.compare(baseline, current, previous if earlier else None)


def latency_findings(previous, current, earlier=None):
    """The kind "latency" findings (lab.latency.findings' dicts) of latency_changes."""
    return latency.as_findings(latency_changes(previous, current, earlier))


def regressions(previous, current, classify=None, earlier=None):
    """Findings (dicts, sorted): kind "pass-rate", "new-bucket" or "latency".
    previous: records of the previous run, or None if there is none;
    earlier: records of earlier runs pooled into the latency baseline."""
    classify = classify or default_buckets()
    findings = []
    before = mode_rates(previous or [])
    for mode, (ok, total) in sorted(mode_rates(current).items()):
        was_ok, was_total = before.get(mode, (0, 0))
        rate = ok / total
        was = was_ok / was_total if was_total else 1.0
        if rate < was - 1e-9:
            findings.append({"kind": "pass-rate", "mode": mode, "previous": round(was, 4),
                             "current": round(rate, 4),
                             "detail": f"{mode}: {ok}/{total} passed, previously "
                                       + (f"{was_ok}/{was_total}" if was_total else "no cycles (expected all)")})
    old = bucket_cycles(previous or [], classify)
    for bucket, cycles in sorted(bucket_cycles(current, classify).items()):
        if bucket not in old:
            findings.append({"kind": "new-bucket", "bucket": bucket, "cycles": cycles,
                             "detail": f"new failure bucket {bucket} (cycles {', '.join(map(str, cycles))})"})
    findings += latency_findings(previous, current, earlier)
    return findings


def report(previous, current, classify=None, earlier=None):
    """(findings, text lines) for printing."""
    findings = regressions(previous, current, classify, earlier)
    lines = []
    if previous is None:
        lines.append("no previous run of this pipeline: any failure counts as new")
    lines += [f"REGRESSION {f['detail']}" for f in findings]
    classify = classify or default_buckets()
    known = sorted(set(bucket_cycles(current, classify)) & set(bucket_cycles(previous or [], classify)))
    lines += [f"known (also in the previous run): {bucket}" for bucket in known]
    errors = {}
    for record in current:
        if lab_error(record):
            for bucket in classify(record):
                errors.setdefault(bucket, []).append(record["cycle"])
    lines += [f"lab error, not the kernel's (no regression): {bucket} (cycles {', '.join(map(str, cycles))})"
              for bucket, cycles in sorted(errors.items())]
    lines += [f"fault injected on purpose (no regression): cycle {record['cycle']} "
              f"{records_module.state_of(record)} ({', '.join(record.get(records_module.INJECTED_FIELD) or [])})"
              for record in current if injected_unasked(record)]
    if not findings:
        lines.append("no regression")
    return findings, lines
