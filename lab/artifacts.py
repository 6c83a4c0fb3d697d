"""The guest's kernel artifacts: checked before any guest starts."""

import json
import os
import shutil
import threading
from dataclasses import dataclass, field

from lab.errors import LabError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(REPO, "build", "out")
BASELINE_DIR = os.path.join(REPO, "build", "baseline", "out")
# What kernel/build and lab/build-initramfs write: a copy with these (and
# modules/) boots the same guest as the original.
DEVICES_INITRD = "initramfs-devices.cpio.gz"
FILES = ("bzImage", "initramfs.cpio.gz", "initramfs-devices.cpio.gz", "pmtest-ssdt.aml", "manifest.json", "config",
         "compile.env")


@dataclass
class Artifacts:
    directory: str
    kernel: str
    initrd: str
    manifest: dict = field(default_factory=dict)
    modules: list = field(default_factory=list)
    ssdt: str = None   # pmtest's ACPI table (pmtest-ssdt.aml), None for a kernel without pmtest
    # what a device guest appends to initrd: the kernel's driver modules and
    # the probes' tools (guest/make-initramfs), None when not built
    devices_initrd: str = None

    def initrd_for(self, device_set):
        """The initramfs a guest of `device_set` (lab/devices.py) boots:
        a local file; the zoo's is written next to the artifacts once."""
        if device_set == "lean":
            return self.initrd
        if not self.devices_initrd:
            raise LabError(f"--devices {device_set} needs {os.path.join(self.directory, DEVICES_INITRD)} "
                           "(lab/build-initramfs writes it from the kernel's driver modules)")
        combined = os.path.join(self.directory, "initramfs+devices.cpio.gz")
        newest = max(os.path.getmtime(self.initrd), os.path.getmtime(self.devices_initrd))
        if not os.path.isfile(combined) or os.path.getmtime(combined) < newest:
            # a temporary file of this process: a soak's guests boot at once
            partial = f"{combined}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(partial, "wb") as target:  # the kernel unpacks both archives in turn
                for part in (self.initrd, self.devices_initrd):
                    with open(part, "rb") as source:
                        shutil.copyfileobj(source, target)
            os.replace(partial, combined)
        return combined


def find(directory=DEFAULT_DIR):
    """Artifacts in `directory` (build/out or build/baseline/out); LabError
    naming what is missing and the command that makes it."""
    directory = os.path.abspath(directory)
    baseline = os.path.realpath(directory) == os.path.realpath(BASELINE_DIR)
    build_kernel = "kernel/build --baseline" if baseline else "kernel/build"
    build_initrd = ("lab/build-initramfs --baseline" if baseline
                    else "lab/build-initramfs" if os.path.realpath(directory) == os.path.realpath(DEFAULT_DIR)
                    else f"lab/build-initramfs {directory}")
    kernel = os.path.join(directory, "bzImage")
    initrd = os.path.join(directory, "initramfs.cpio.gz")
    missing = []
    if not os.path.isfile(kernel):
        missing.append(f"{kernel} (build it with {build_kernel})")
    if not os.path.isfile(initrd):
        missing.append(f"{initrd} (build it with {build_initrd})")
    if missing:
        raise LabError("missing kernel artifacts: " + "; ".join(missing))
    manifest = {}
    manifest_path = os.path.join(directory, "manifest.json")
    if os.path.isfile(manifest_path):
        try:
            with open(manifest_path) as source:
                manifest = json.load(source)
        except ValueError as error:
            raise LabError(f"{manifest_path} is not valid JSON: {error}") from None
    modules_dir = os.path.join(directory, "modules")
    modules = sorted(name for name in os.listdir(modules_dir) if name.endswith(".ko")) \
        if os.path.isdir(modules_dir) else []
    if os.path.getmtime(initrd) < max([os.path.getmtime(os.path.join(modules_dir, m)) for m in modules] or [0]):
        raise LabError(f"{initrd} is older than the modules in {modules_dir}: rebuild it with {build_initrd}")
    # The SSDT of pmtest's ACPI devices (kernel/build compiles it): without
    # it the ACPI row of the device matrix is silently missing from a guest.
    ssdt = os.path.join(directory, "pmtest-ssdt.aml")
    if "pmtest.ko" in modules and not os.path.isfile(ssdt):
        raise LabError(f"missing {ssdt}: the pmtest ACPI devices need it (build it with {build_kernel})")
    devices_initrd = os.path.join(directory, DEVICES_INITRD)
    return Artifacts(directory, kernel, initrd, manifest, modules,
                     ssdt if os.path.isfile(ssdt) else None,
                     devices_initrd if os.path.isfile(devices_initrd) else None)


def copy(source, target):
    """Copy the artifacts of `source` into the new directory `target` (times
    kept, so find() judges the initramfs against the modules as before), and
    check the copy with find(): a copy that could not boot the same guest
    raises LabError here, not when a guest starts."""
    found = find(source)
    os.makedirs(target)
    for name in FILES:
        if os.path.isfile(os.path.join(found.directory, name)):
            shutil.copy2(os.path.join(found.directory, name), target)
    if os.path.isdir(os.path.join(found.directory, "modules")):
        shutil.copytree(os.path.join(found.directory, "modules"), os.path.join(target, "modules"))
    return find(target)
