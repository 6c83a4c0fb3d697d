"""Which kernel tree a run builds and boots: a kernel SPEC, resolved and
checked before anything is built, and the build directory it owns.

  linux-source-6.1     Debian's package (the default): /usr/src/linux-source-6.1.tar.xz
  linux-source-6.12    likewise; any installed linux-source-X.Y
  PATH.tar.xz          a tarball (.tar.xz, .tar.gz, .tgz, .tar) with one top directory
  DIR[@REF]            a git tree at REF (a tag, branch or commit; default HEAD)

--config FILE is a .config of the user's that the project fragment is merged
onto instead of the tree's tinyconfig (its content hash is part of the key).

--series DIR|none picks the patch series applied on top; the default is the
bundled series for a Debian source when the project has one
(kernel/patches/<X.Y>: 6.1, 6.12) and none for a tree or tarball of the
user's.

Each resolved kernel has its own build directory, keyed by tree, ref and
series: the default kernel keeps build/ (build/out, as always); any other one
gets build/kernels/<key>/ so switching back and forth stays incremental.
$PMLAB_BUILD overrides it for any kernel (a bisection builds every commit of
a git tree in one directory: its clone moves between commits by checkout).

  python3 -m lab.kernels shell [--kernel SPEC] [--series DIR|none] [--config FILE]
      prints shell assignments for kernel/build and lab/build-initramfs (like
      `ssh-agent -s`), or names the bad input on stderr and exits 2.
"""

import argparse
import hashlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SPEC = "linux-source-6.1"
DEBIAN = re.compile(r"linux-source-(\d+\.\d+)")
TARBALL = re.compile(r".*\.(tar\.xz|tar\.gz|tgz|tar)")
SERIES_ROOT = os.path.join(REPO, "kernel", "patches")


class KernelSpecError(Exception):
    """Bad --kernel or --series input, named."""


@dataclass
class Kernel:
    spec: str          # as given
    kind: str          # "debian", "tarball" or "git"
    source: str        # the tarball, or the git tree
    commit: str        # the git commit REF names ("" for a tarball)
    series: str        # the series directory, "" for none
    build: str         # this kernel's build directory
    key: str           # its name under build/kernels/ ("" for the default kernel)
    config: str = ""   # the user's base .config (--config), "" for the tree's tinyconfig

    @property
    def artifacts(self):
        return os.path.join(self.build, "out")


def _git(tree, *args):
    return subprocess.run(["git", "-C", tree, *args], capture_output=True, text=True)


def _bundled_series(version):
    """The project's series for a Debian kernel X.Y (kernel/patches/X.Y), or None."""
    candidate = os.path.join(SERIES_ROOT, version)
    return candidate if os.path.isfile(os.path.join(candidate, "series")) else None


def series_patches(series_dir):
    """The patch names a series directory's `series` file lists, in order
    (blank lines and # comments skipped, as kernel/tree.sh reads it)."""
    with open(os.path.join(series_dir, "series")) as source:
        return [line.strip() for line in source if line.strip() and not line.lstrip().startswith("#")]


def series_hash(directory):
    """kernel/tree.sh's series_hash of a series directory (the manifest's
    series_hash): sha256 of the series file and the patches it names, 16
    hex digits."""
    digest = hashlib.sha256()
    with open(os.path.join(directory, "series"), "rb") as series:
        text = series.read()
    digest.update(text)
    for name in text.decode(errors="replace").splitlines():
        name = name.strip()
        if name and not name.startswith("#"):
            try:
                with open(os.path.join(directory, name), "rb") as patch:
                    digest.update(patch.read())
            except OSError:
                raise KernelSpecError(f"series {directory}/series names {name}, which is not there") from None
    return digest.hexdigest()[:16]


def _series(series, default):
    """(series directory or "", key part) from --series and the default."""
    if series is None:
        return (default or ""), ""
    if series == "none":
        return "", ("-noseries" if default else "")
    directory = os.path.abspath(series)
    if not os.path.isfile(os.path.join(directory, "series")):
        raise KernelSpecError(f"--series {series}: no 'series' file in {directory}")
    if default and os.path.realpath(directory) == os.path.realpath(default):
        return default, ""
    return directory, f"-series-{series_hash(directory)[:10]}"


def _base_config(config):
    """(absolute path, key part) of a --config FILE, checked."""
    if not config:
        return "", ""
    path = os.path.abspath(config)
    try:
        with open(path, "rb") as source:
            text = source.read()
    except OSError as error:
        raise KernelSpecError(f"--config {config}: {error.strerror}") from None
    if not re.search(rb"^(CONFIG_\w+=|# CONFIG_\w+ is not set)", text, re.M):
        raise KernelSpecError(f"--config {config}: not a kernel .config (no CONFIG_ line)")
    return path, f"-config-{hashlib.sha256(text).hexdigest()[:10]}"


def resolve(spec=None, series=None, repo=REPO, build_env=None, config=None):
    """The Kernel of SPEC (default linux-source-6.1), --series and --config;
    raises KernelSpecError naming what is wrong and where, before any build.
    build_env: $PMLAB_BUILD's value (None: read it), which moves any
    kernel's build directory, as in kernel/build."""
    base, config_part = _base_config(config)
    kernel = _resolve(spec, series, repo, build_env, config_part)
    kernel.config = base
    return kernel


def _resolve(spec, series, repo, build_env, config_part):
    spec = spec or DEFAULT_SPEC
    builds = os.path.join(repo, "build", "kernels")
    override = os.environ.get("PMLAB_BUILD") if build_env is None else build_env
    debian = DEBIAN.fullmatch(spec)
    if debian:
        tarball = f"/usr/src/{spec}.tar.xz"
        if not os.path.isfile(tarball):
            raise KernelSpecError(f"kernel {spec}: {tarball} missing (apt-get install {spec})")
        bundled = _bundled_series(debian[1])
        if bundled is None and series is None:
            raise KernelSpecError(f"kernel {spec}: the project has no series for {debian[1]} "
                                  f"(kernel/patches/{debian[1]}/series): give --series DIR or --series none")
        directory, part = _series(series, bundled)
        part += config_part
        if spec == DEFAULT_SPEC and not part:
            return Kernel(spec, "debian", tarball, "", directory, override or os.path.join(repo, "build"), "")
        key = spec + part
        return Kernel(spec, "debian", tarball, "", directory, override or os.path.join(builds, key), key)
    if TARBALL.fullmatch(spec):
        tarball = os.path.abspath(spec)
        if not os.path.isfile(tarball):
            raise KernelSpecError(f"kernel {spec}: no such tarball")
        stat = os.stat(tarball)
        stamp = hashlib.sha256(f"{tarball}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:10]
        directory, part = _series(series, None)
        part += config_part
        name = re.sub(r"[^A-Za-z0-9.+-]", "_", os.path.basename(tarball).split(".tar")[0].removesuffix(".tgz"))
        key = f"tar-{name}-{stamp}{part}"
        return Kernel(spec, "tarball", tarball, "", directory, override or os.path.join(builds, key), key)
    tree, _, ref = spec.partition("@")
    if os.path.isdir(tree):
        tree = os.path.abspath(tree)
        if _git(tree, "rev-parse", "--git-dir").returncode != 0:
            raise KernelSpecError(f"kernel {spec}: {tree} is a directory but not a git tree "
                                  "(give DIR@REF of a git tree, or a tarball)")
        found = _git(tree, "rev-parse", "--verify", "--quiet", f"{ref or 'HEAD'}^{{commit}}")
        if found.returncode != 0:
            raise KernelSpecError(f"kernel {spec}: ref '{ref or 'HEAD'}' does not exist in {tree}")
        commit = found.stdout.strip()
        if _git(tree, "cat-file", "-e", f"{commit}:Makefile").returncode != 0:
            raise KernelSpecError(f"kernel {spec}: commit {commit[:12]} of {tree} has no top-level Makefile: "
                                  "not a kernel tree")
        directory, part = _series(series, None)
        part += config_part
        name = re.sub(r"[^A-Za-z0-9.+-]", "_", os.path.basename(tree))
        key = f"git-{name}-{commit[:12]}{part}"
        return Kernel(spec, "git", tree, commit, directory, override or os.path.join(builds, key), key)
    if "/" in tree or tree.startswith("."):
        raise KernelSpecError(f"kernel {spec}: {os.path.abspath(tree)} does not exist (a git tree DIR[@REF] "
                              "or a tarball was expected)")
    raise KernelSpecError(f"unknown kernel spec '{spec}': give linux-source-6.1, linux-source-6.12, "
                          "a tarball (.tar.xz, .tar.gz, .tar) or a git tree DIR[@REF]")


def shell(kernel):
    """Shell assignments kernel/tree.sh reads (evaluated by kernel/build)."""
    values = {"KERNEL_SPEC": kernel.spec, "KERNEL_KIND": kernel.kind, "KERNEL_KEY": kernel.key,
              "TARBALL": kernel.source if kernel.kind != "git" else "",
              "SOURCE_GIT": kernel.source if kernel.kind == "git" else "",
              "SOURCE_COMMIT": kernel.commit, "SERIES_DIR": kernel.series, "BUILD": kernel.build,
              "BASE_CONFIG": kernel.config}
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m lab.kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("shell", "artifacts"),
                        help="shell: assignments for kernel/build; artifacts: the artifact directory")
    parser.add_argument("--kernel", metavar="SPEC")
    parser.add_argument("--series", metavar="DIR|none")
    parser.add_argument("--config", metavar="FILE")
    args = parser.parse_args(argv)
    try:
        kernel = resolve(args.kernel, args.series, config=args.config)
    except KernelSpecError as error:
        print(f"pmlab: {error}", file=sys.stderr)
        return 2
    print(shell(kernel) if args.what == "shell" else kernel.artifacts, end="" if args.what == "shell" else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
