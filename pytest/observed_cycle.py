"""What one guest cycle left, read the same way by the fault campaign
(test_fault_campaign.py) and the device matrix (test_device_matrix.py): the
record, the reporting kernel's report sections and pmtest calls, and the
pmtest calls each boot kernel printed on the console; and the runner that
gives each suite its own guest session and cycle numbers."""

import gzip
import os

from lab import guest_report, modes, oracle
from conftest import session_of


class Observed:
    def __init__(self, run_path, record):
        self.record = record
        self.sections = {}
        if record.get("report"):
            with gzip.open(os.path.join(run_path, record["report"]), "rt") as text:
                self.sections = guest_report.sections(text.read())
        self.calls = oracle.from_pmtest(self.sections.get("pmtest_log", ""))
        self.console_kernels = oracle.split_kernels(
            oracle.from_pmtest("\n".join(record.get("evidence", []))))

    def _of(self, device, calls):
        return [c for c in (self.calls if calls is None else calls) if c.device == device]

    def sequence(self, device, calls=None):
        return [(c.callback, c.event, c.ret) for c in self._of(device, calls)]

    def callbacks(self, device, calls=None):
        return [c.callback for c in self._of(device, calls)]

    def stats(self):
        return guest_report.suspend_stats(guest_report.snapshot(self.sections, "after"))

    def violations(self, devices=None):
        found = self.record.get("ordering_violations", [])
        return [v for v in found if devices is None or v["device"].split(" (")[0] in devices]

    def explain(self):
        r = self.record
        return (f"cycle {r['cycle']} {r['mode']}: {r['verdict']} in {r.get('phase')}: {r.get('reason')}\n"
                + "\n".join(f"{v['rule']}: {v['device']}: {v['message']}"
                            for v in r.get("ordering_violations", [])))


def cycle_runner(lab_run, worker_suffix, first_number, count=99):
    """(session, run): a guest session of its own (worker name + suffix) and
    run(mode, knobs=(), expect="pass") -> Observed, numbering `count` cycles
    from `first_number` so that two suites' records never share a number. A
    suite that runs more cycles than its range fails saying so. The caller
    closes the session."""
    session = session_of(lab_run, lab_run["worker"] + worker_suffix)
    numbers = iter(range(first_number, first_number + count))

    def run(mode, knobs=(), expect="pass"):
        number = next(numbers, None)
        assert number is not None, (f"{worker_suffix}: more than {count} cycles from {first_number}: "
                                    "give its cycle_runner a larger range")
        record = session.cycle(modes.parse_mode(mode), number, list(knobs), expect=expect)
        return Observed(lab_run["rundir"].path, record)

    run.session = session
    return session, run
