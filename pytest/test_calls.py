"""lab/calls.py: the calls knob's names, boot words and readers, on lines
recorded from the 6.1 zoo guest (pytest/test_quiesce_layers.py runs it)."""

import pytest

from lab import calls, request, trace
from lab.errors import LabError

# The boot kernel of a restore (tp_printk) and the running kernel's trace as
# lab/trace_raw.py rendered it, recorded from test_quiesce_layers' cycles.
BOOT_CONSOLE = [
    '[    9.158265] call_virtio_pci_quiesce: (virtio_pci_quiesce+0x0/0x29) dev="0000:00:0e.0"',
    "[    9.180023] virtio-pci 0000:00:0a.0: PM: calling pci_pm_quiesce+0x0/0x29 @ 72, parent: pci0000:00",
    '[    9.180903] call_virtio_pci_quiesce: (virtio_pci_quiesce+0x0/0x29) dev="0000:00:0a.0"',
]
TRACE = """\
# tracer: nop
   kworker/u2:11-75      [000] .N...    17.556255: call_virtio_pci_freeze: (ffffffffa861a46b) dev="0000:00:0e.0"
    kworker/u2:6-70      [000] .....    18.597015: device_pm_callback_start: virtio-pci 0000:00:03.0, parent: pci0000:00, bus [recover]
    kworker/u2:6-70      [000] .....    18.597345: call_virtio_pci_recover: (ffffffffa861a2a4) dev="0000:00:03.0"
"""


def test_functions_takes_a_list_and_names_a_bad_entry():
    assert calls.functions("virtio_pci_quiesce, virtio_pci_freeze") == ["virtio_pci_quiesce", "virtio_pci_freeze"]
    for bad in ("", "a,,b", "rm -rf", "x;y", "9lives", "f" * 59):
        with pytest.raises(ValueError, match="calls:"):
            calls.functions(bad)


def test_boot_params_define_the_same_events_as_the_guest_and_print_them():
    words = calls.boot_params(["virtio_pci_quiesce", "virtio_pci_recover"]).split()
    assert words == ["kprobe_event=p:pmlab_calls/call_virtio_pci_quiesce,virtio_pci_quiesce,"
                     "dev=+0(+0($arg1)):string;p:pmlab_calls/call_virtio_pci_recover,virtio_pci_recover,"
                     "dev=+0(+0($arg1)):string", "tp_printk"]


def test_observed_reads_the_trace_as_the_running_kernel_and_the_console_as_the_boot_kernel():
    found = calls.observed(trace.parse(TRACE), BOOT_CONSOLE)
    assert found == [
        {"function": "virtio_pci_freeze", "device": "0000:00:0e.0", "kernel": "running"},
        {"function": "virtio_pci_recover", "device": "0000:00:03.0", "kernel": "running"},
        {"function": "virtio_pci_quiesce", "device": "0000:00:0e.0", "kernel": "boot"},
        {"function": "virtio_pci_quiesce", "device": "0000:00:0a.0", "kernel": "boot"},
    ]
    assert calls.observed(trace.parse(TRACE.replace("call_", "")), []) == []


def test_a_request_refuses_a_calls_knob_that_is_no_function_list():
    assert request.parse_injections(["3:calls=virtio_pci_freeze"]) == {3: (("calls", "virtio_pci_freeze"),)}
    with pytest.raises(LabError, match=r"bad --inject '3:calls=a b'.*not a function name"):
        request.parse_injections(["3:calls=a b"])
