"""The guest's kernel artifacts: checked before any guest starts, held
while guests boot from them, replaced only when no run holds them.

  python3 -m lab.artifacts install STAGE DIR
  python3 -m lab.artifacts hold DIR COMMAND [ARG...]

install (kernel/build and lab/build-initramfs) moves what a build wrote into
STAGE to the artifact directory DIR: what is unchanged stays as it is; what
changed is switched in while no run holds DIR (hold()), so that a build
never rewrites the files a guest under way boots from (a fresh guest after
a hang, the next chunk of a nightly). hold runs COMMAND holding DIR as a run
does (lab/build-initramfs reads the modules so).
"""

import argparse
import fcntl
import filecmp
import json
import os
import shutil
import sys
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
                           f"({build_command(self.directory)} writes it from the kernel's driver modules)")
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


def build_command(directory):
    """The command a user types to build the artifacts of `directory`."""
    real = os.path.realpath(directory)
    if real == os.path.realpath(BASELINE_DIR):
        return "./pmlab build --baseline"
    if real == os.path.realpath(DEFAULT_DIR):
        return "./pmlab build"
    kernels = os.path.realpath(os.path.join(REPO, "build", "kernels"))
    if real.startswith(kernels + os.sep):
        return "./pmlab build with the --kernel/--series/--config given here"
    return f"kernel/build, then lab/build-initramfs {directory}"


def find(directory=DEFAULT_DIR):
    """Artifacts in `directory` (build/out or build/baseline/out); LabError
    naming what is missing and the command that makes it."""
    directory = os.path.abspath(directory)
    build_kernel = build_initrd = build_command(directory)
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
    lock = hold(source)  # no install halfway through the copy
    try:
        return _copy(source, target)
    finally:
        if lock:
            lock.close()


def _copy(source, target):
    found = find(source)
    os.makedirs(target)
    for name in FILES:
        if os.path.isfile(os.path.join(found.directory, name)):
            shutil.copy2(os.path.join(found.directory, name), target)
    if os.path.isdir(os.path.join(found.directory, "modules")):
        shutil.copytree(os.path.join(found.directory, "modules"), os.path.join(target, "modules"))
    return find(target)


# ------------------------------------------------------------------ holding and installing

LOCK = ".pmlab-artifacts.lock"
# Replaced by a rename on every install, whether or not a run holds the
# directory: a reader sees the old file or the new one, no guest boots
# from them.
METADATA = ("manifest.json", "compile.env")


def hold(directory, exclusive=False, waiting=None):
    """A lock on the artifact directory `directory`, held until the returned
    file is closed (or this process ends): shared for a run or test that
    boots guests from it, exclusive for install(). Waits while the other
    kind is held, saying so (`waiting`) first. None if the directory (or its
    lock file) cannot be opened: nobody can install into it then either."""
    path = os.path.join(directory, LOCK)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        try:
            descriptor = os.open(path, os.O_RDONLY)  # a read-only user on root's build: flock works read-only
        except OSError:
            return None
    lock = os.fdopen(descriptor, "rb", buffering=0)
    kind = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        fcntl.flock(lock, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        print(waiting or f"pmlab: waiting for the artifacts in {directory} to be installed", file=sys.stderr,
              flush=True)
        fcntl.flock(lock, kind)
    return lock


def same(path, other):
    """Whether `other` holds what `path` holds: a file of the same bytes, a
    symlink to the same target, a directory of the same entries, each the
    same."""
    if os.path.islink(path) or os.path.islink(other):
        return os.path.islink(path) and os.path.islink(other) and os.readlink(path) == os.readlink(other)
    if os.path.isdir(path):
        if not os.path.isdir(other) or sorted(os.listdir(path)) != sorted(os.listdir(other)):
            return False
        return all(same(os.path.join(path, name), os.path.join(other, name)) for name in os.listdir(path))
    return os.path.isfile(other) and filecmp.cmp(path, other, shallow=False)


def install(stage, directory):
    """Move each entry of `stage` (a build's new bzImage, modules/, ...) into
    `directory`, and remove `stage`. Entries that are the same as the
    installed ones stay as installed (times too: lab/artifacts.find judges
    the initramfs by them); the others are switched in by renames under
    hold(exclusive=True), so no run holding the directory sees them change.
    Returns the names installed."""
    os.makedirs(directory, exist_ok=True)
    # The metadata always: its time says when the build last ran (pipelines/commit.py's kernel_current).
    changed = sorted(name for name in os.listdir(stage)
                     if name in METADATA or not same(os.path.join(stage, name), os.path.join(directory, name)))
    boot = [name for name in changed if name not in METADATA]
    lock = hold(directory, exclusive=True,
                waiting=f"pmlab: waiting for the runs booting from {directory} to end before installing "
                        f"{', '.join(boot)} there") if boot else None
    try:
        for name in boot + [name for name in changed if name in METADATA]:
            switch_in(os.path.join(stage, name), os.path.join(directory, name))
    finally:
        if lock:
            lock.close()
    shutil.rmtree(stage)
    return changed


def switch_in(new, installed):
    """Put `new` where `installed` is, by renames (same file system): an
    old directory moves aside first and is removed after."""
    aside = None
    if os.path.isdir(installed) and not os.path.islink(installed):
        aside = f"{os.path.join(os.path.dirname(installed), '.' + os.path.basename(installed))}.old.{os.getpid()}"
        os.rename(installed, aside)
    os.replace(new, installed)
    if aside:
        shutil.rmtree(aside)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m lab.artifacts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="what", required=True)
    installing = actions.add_parser("install", help="install a build's stage into an artifact directory")
    installing.add_argument("stage", help="the directory the build wrote")
    installing.add_argument("directory", help="the artifact directory (build/out, ...)")
    holding = actions.add_parser("hold", help="run a command holding an artifact directory as a run does")
    holding.add_argument("directory", help="the artifact directory (build/out, ...)")
    holding.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments")
    args = parser.parse_args(argv)
    if args.what == "hold":
        import subprocess
        if not args.command:
            parser.error("hold needs a command")
        lock = hold(args.directory)
        try:
            return subprocess.call(args.command)
        finally:
            if lock:
                lock.close()
    try:
        changed = install(args.stage, args.directory)
    except OSError as error:
        print(f"pmlab: installing {args.stage} into {args.directory}: {error}", file=sys.stderr)
        return 2
    print(f"pmlab: {args.directory}: " + (f"installed {', '.join(changed)}" if changed else "unchanged"),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
