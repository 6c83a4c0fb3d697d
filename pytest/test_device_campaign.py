"""The device guest's fault campaign: one injected failure per real device
(every PCI function of lab/devices.py's zoo: USB, SATA, SCSI, NVMe, both
NICs, sound, MMC, watchdog, RNG, balloon) per side (S3 suspend and resume,
S4 freeze and thaw), through pmtest_kfault.ko (no driver changed).

Each case: the cycle fails naming the device; on the way down the device
got ->prepare, the failed callback and ->complete and nothing else, and its
parent (the PCI host bridge) never went past ->prepare (children go first,
so the core unwound before it); the oracle finds the rest of the unwind in
order; every device works afterwards. ~45 cycles: the pipelines run it
(--pipeline-tests); CI runs two of these cases in test_cycles.py.
"""

import pytest

from lab import devices, modes
from lab.records import callbacks, failed_callbacks

pytestmark = [pytest.mark.guest, pytest.mark.pipeline]

FIRST_CYCLE = 9501
SIDES = [("mem", "suspend"), ("mem", "resume"), ("disk", "freeze"), ("disk", "thaw")]
PCI_DEVICES = ["usb", "sata", "scsi", "nvme-disk", "e1000e", "virtio-net", "hda", "sd-card", "i6300esb",
               "virtio-rng", "virtio-balloon"]
CASES = [(device, mode, callback) for device in PCI_DEVICES for mode, callback in SIDES]


@pytest.fixture(scope="module")
def zoo(lab_run):
    from lab.session import Session
    session = Session(lab_run["artifacts"], lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      lab_run["watchdogs"], lab_run["worker"] + "-device-campaign",
                      connection=lab_run["connection"], device_set="zoo")
    numbers = iter(range(FIRST_CYCLE, FIRST_CYCLE + 200))
    machine = "q35" if lab_run["profile"] == "q35-ovmf" else "pc"

    def run(mode, knobs=(), expect="pass"):
        return session.cycle(modes.parse_mode(mode), next(numbers), list(knobs), expect=expect)

    run.machine = machine
    yield run
    session.close()


def _explain(record):
    return (f"cycle {record['cycle']} {record['mode']}: {record['verdict']} in {record.get('phase')}: "
            f"{record.get('reason')}\n" + "\n".join(f"{v['rule']}: {v['device']}: {v['message']}"
                                                   for v in record.get("ordering_violations", [])))


def _sequence(record, name):
    """[(trace label, err)] of the device whose kernel name is `name`."""
    found = {device: calls for device, calls in callbacks(record).items() if device.split(" (")[0] == name}
    assert len(found) == 1, f"{name}: {sorted(found)}"
    return [(call["cb"], call["err"]) for call in next(iter(found.values()))]


@pytest.mark.parametrize("device,mode,callback", CASES, ids=[f"{d}-{c}" for d, _, c in CASES])
def test_a_real_devices_failed_callback_is_unwound_and_the_device_works(zoo, device, mode, callback):
    name = devices.pci_name(zoo.machine, device)
    record = zoo(mode, [("kfault", f"{name} {callback} -5 1")], expect="fail")
    assert record["verdict"] == "fail", _explain(record)
    assert record["ordering_violations"] == [], _explain(record)
    broken = [f"{p['device']}: {p['error']}" for p in record.get("probes", []) if not p["ok"]]
    assert not broken, f"{broken}\n{_explain(record)}"
    if callback in ("suspend", "freeze"):
        assert record["phase"] == callback, _explain(record)
        assert [(f["device"].split(" (")[0], f["err"]) for f in failed_callbacks(record)] == [(name, -5)]
        labels = _sequence(record, name)
        assert [err for _, err in labels] == [0, -5, 0], labels  # prepare, the failure, complete
        assert labels[0][0].startswith("[") and labels[2][0].startswith("["), labels
        # the parent, the PCI host bridge: ->prepare and ->complete only
        parent = _sequence(record, "pci0000:00")
        assert [label for label, _ in parent] == [f"[{callback}]", f"[{'resume' if mode == 'mem' else 'recover'}]"]
    elif callback == "resume":
        assert any(f["device"].split(" (")[0] == name and f["err"] == -5 for f in failed_callbacks(record)), \
            _explain(record)
    else:
        # thaw runs after the image was taken: the restored kernel's trace
        # cannot show it, the console does
        assert name in record["reason"] + " ".join(record.get("problems", [])), _explain(record)


def test_after_the_campaign_every_mode_passes(zoo):
    for mode in ("mem", "freeze", "disk"):
        record = zoo(mode)
        assert record["verdict"] == "pass", _explain(record)
        assert all(p["ok"] for p in record["probes"]), _explain(record)
