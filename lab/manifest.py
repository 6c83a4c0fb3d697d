"""Run manifest: what a run ran on (schema run-manifest.v1.json, checked
by the dashboard layer, which also has its command line).

  from lab.manifest import write_manifest
  write_manifest(rundir.path, artifacts.directory)      # -> <run dir>/manifest.json

Collected on this host: the project commit (git rev-parse), the kernel fields
of <artifacts>/manifest.json (written by kernel/build), QEMU / OVMF / libvirt
versions (qemu-system-x86_64 --version, dpkg-query -W, libvirtd --version)
and the host. A probe that fails leaves its value null and says why in
"errors": a manifest is always written, never blocks a run.
"""

import json
import os
import platform
import re
import subprocess

from lab import files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "pmlab-run-manifest/1"
KERNEL_FIELDS = ("variant", "tree", "tree_version", "kernelrelease", "series_hash", "config_hash", "compiler",
                 "kernel_spec", "source_commit", "base_config")


def _run(argv, errors, cwd=None):
    """stdout of argv, or None (and a line in errors)."""
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        errors.append(f"{argv[0]}: {error}")
        return None
    if done.returncode != 0:
        errors.append(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-200:]}")
        return None
    return done.stdout


def qemu_version(errors):
    out = _run(["qemu-system-x86_64", "--version"], errors)
    if out is None:
        return None
    match = re.search(r"version (.+)", out.splitlines()[0] if out else "")
    if not match:
        errors.append(f"qemu-system-x86_64 --version: unexpected output {out[:80]!r}")
        return None
    return match.group(1).strip()


def package_versions(packages, errors):
    """{package: version or None} from dpkg-query (one call)."""
    versions = dict.fromkeys(packages)
    try:
        done = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n", *packages],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        errors.append(f"dpkg-query: {error}")
        return versions
    for line in done.stdout.splitlines():
        name, _, version = line.partition("\t")
        if name in versions and version:
            versions[name] = version
    for name, version in versions.items():
        if version is None:
            errors.append(f"dpkg-query: {name} is not installed")
    return versions


def libvirtd_version(errors):
    out = _run(["libvirtd", "--version"], errors)
    if out is None:
        return None
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", out)
    if not match:
        errors.append(f"libvirtd --version: unexpected output {out[:80]!r}")
        return None
    return match.group(1)


def project(repo, errors):
    commit = _run(["git", "rev-parse", "HEAD"], errors, cwd=repo)
    commit = commit.strip() if commit else None
    dirty = None
    if commit:
        status = _run(["git", "status", "--porcelain", "--untracked-files=no"], errors, cwd=repo)
        dirty = bool(status.strip()) if status is not None else None
    return {"commit": commit, "dirty": dirty}


def kernel(artifacts_dir, errors):
    fields = dict.fromkeys(KERNEL_FIELDS)
    fields["build_commit"] = None
    fields["artifacts_dir"] = os.path.abspath(artifacts_dir) if artifacts_dir else None
    if not artifacts_dir:
        errors.append("no kernel artifacts directory given")
        return fields
    path = os.path.join(artifacts_dir, "manifest.json")
    try:
        with open(path) as source:
            built = json.load(source)
    except (OSError, ValueError) as error:
        errors.append(f"{path}: {error}")
        return fields
    if not isinstance(built, dict):
        errors.append(f"{path}: not a JSON object")
        return fields
    for name in KERNEL_FIELDS:
        value = built.get(name)
        fields[name] = value if isinstance(value, str) else None
    value = built.get("project_commit")
    fields["build_commit"] = value if isinstance(value, str) else None
    return fields


def host():
    os_name = None
    try:
        with open("/etc/os-release") as source:
            for line in source:
                if line.startswith("PRETTY_NAME="):
                    os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {"hostname": platform.node() or None, "kernel": platform.release() or None,
            "machine": platform.machine() or None, "os": os_name, "cpus": os.cpu_count(),
            "kvm_device": os.path.exists("/dev/kvm")}


def collect(artifacts_dir=None, run_id=None, shard=None, repo=REPO):
    """The manifest dict for a run on this host. shard: (index, count) or None."""
    errors = []
    packages = package_versions(["ovmf", "libvirt-daemon-system"], errors)
    manifest = {
        "schema": SCHEMA,
        "run_id": run_id,
        "shard": {"index": shard[0], "count": shard[1]} if shard else None,
        "project": project(repo, errors),
        "kernel": kernel(artifacts_dir, errors),
        "tools": {"qemu": qemu_version(errors), "ovmf": packages["ovmf"],
                  "libvirt_daemon_system": packages["libvirt-daemon-system"],
                  "libvirtd": libvirtd_version(errors)},
        "host": host(),
        "errors": errors,
    }
    return manifest


def write_manifest(run_dir, artifacts_dir=None, shard=None, run_id=None):
    """Write <run_dir>/manifest.json atomically; return the manifest."""
    manifest = collect(artifacts_dir, run_id or os.path.basename(os.path.normpath(run_dir)), shard)
    files.write_json(os.path.join(run_dir, "manifest.json"), manifest)
    return manifest
