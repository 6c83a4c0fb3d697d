"""--kernel SPEC and --series (lab/kernels.py, kernel/build, kernel/tree.sh):
every bad input is named before anything is compiled, and each kernel gets a
build directory of its own. The trees here are small real git trees; the
bad-input runs of kernel/build go as far as the first check that must stop
them (the ref, the series, the config fragment) and never reach the compiler."""

import os
import subprocess
import tarfile

import pytest

from conftest import REPO
from lab import kernels, options
from lab.errors import LabError


@pytest.fixture(autouse=True)
def no_build_override(monkeypatch):
    monkeypatch.delenv("PMLAB_BUILD", raising=False)


def _git(tree, *args):
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path):
    """A git tree with two commits that look like a kernel's top level, and a
    third without a Makefile."""
    path = tmp_path / "linux"
    path.mkdir()
    _git(path, "init", "-q")
    (path / "Makefile").write_text("VERSION = 6\nPATCHLEVEL = 1\n")
    (path / "Kconfig").write_text("config PM\n\tbool\n")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "one")
    _git(path, "tag", "good")
    (path / "driver.c").write_text("int x;\n")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "two")
    _git(path, "tag", "bad")
    _git(path, "rm", "-q", "Makefile")
    _git(path, "commit", "-qm", "no makefile")
    _git(path, "tag", "broken")
    return path


@pytest.mark.kernel  # Debian's linux-source tarball
def test_the_default_kernel_keeps_build_and_its_series():
    kernel = kernels.resolve(build_env="")
    assert kernel.spec == "linux-source-6.1" and kernel.key == ""
    assert kernel.build == os.path.join(REPO, "build") and kernel.artifacts == os.path.join(REPO, "build", "out")
    assert kernel.series == os.path.join(REPO, "kernel", "patches", "6.1")
    assert kernels.resolve("linux-source-6.1", "none").key == "linux-source-6.1-noseries"
    assert kernels.resolve("linux-source-6.1", "none").build.endswith("build/kernels/linux-source-6.1-noseries")


def test_a_git_tree_is_keyed_by_its_commit_so_switching_back_is_incremental(tree):
    good, bad = kernels.resolve(f"{tree}@good"), kernels.resolve(f"{tree}@bad")
    assert good.kind == "git" and good.series == ""  # a user's tree: no series unless asked
    assert good.key != bad.key and good.key.startswith("git-linux-")
    assert kernels.resolve(f"{tree}@{good.commit}").build == good.build
    _git(tree, "checkout", "-q", "bad")
    assert kernels.resolve(str(tree)).commit == bad.commit  # no @REF: HEAD


def test_a_series_is_part_of_the_key(tree, tmp_path):
    series = tmp_path / "series-dir"
    series.mkdir()
    (series / "series").write_text("0001-x.patch\n")
    (series / "0001-x.patch").write_text("one\n")
    first = kernels.resolve(f"{tree}@good", str(series))
    (series / "0001-x.patch").write_text("two\n")
    second = kernels.resolve(f"{tree}@good", str(series))
    assert first.series == str(series) and first.key != second.key != kernels.resolve(f"{tree}@good").key


def test_a_tarball_spec(tmp_path, tree):
    tarball = tmp_path / "linux-9.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as out:
        out.add(tree / "Kconfig", arcname="linux-9.0/Kconfig")
    kernel = kernels.resolve(str(tarball))
    assert kernel.kind == "tarball" and kernel.key.startswith("tar-linux-9.0-") and kernel.series == ""


@pytest.mark.parametrize("spec, series, message", [
    ("linux-source-9.9", None, "/usr/src/linux-source-9.9.tar.xz missing (apt-get install linux-source-9.9)"),
    ("linux-9.9", None, "unknown kernel spec 'linux-9.9'"),
    ("/no/such/tree@v6.12", None, "/no/such/tree does not exist"),
    ("{tmp}", None, "is a directory but not a git tree"),
    ("{tree}@v9.9", None, "ref 'v9.9' does not exist in"),
    ("{tree}@broken", None, "has no top-level Makefile: not a kernel tree"),
    ("{tree}@good", "{tmp}", "--series {tmp}: no 'series' file"),
    ("/no/such.tar.xz", None, "no such tarball"),
])
def test_bad_specs_are_named(tree, tmp_path, spec, series, message):
    fill = {"tree": tree, "tmp": tmp_path}
    with pytest.raises(kernels.KernelSpecError, match=None) as caught:
        kernels.resolve(spec.format(**fill), series and series.format(**fill))
    assert message.format(**fill) in str(caught.value)


@pytest.mark.kernel  # Debian's linux-source tarball
def test_the_options_name_one_kernel():
    parser = __import__("argparse").ArgumentParser()
    options.add_kernel(parser)
    args = parser.parse_args(["--kernel", "linux-source-6.1", "--series", "none"])
    assert options.artifacts_dir(args).endswith("build/kernels/linux-source-6.1-noseries/out")
    with pytest.raises(LabError, match="without --artifacts or --baseline"):
        options.artifacts_dir(parser.parse_args(["--kernel", "linux-source-6.1", "--baseline"]))
    with pytest.raises(LabError, match="unknown kernel spec"):
        options.artifacts_dir(parser.parse_args(["--kernel", "v6.12"]))


@pytest.mark.kernel  # Debian's linux-source tarball
def test_a_users_config_is_part_of_the_key_and_is_checked(tree, tmp_path):
    config = tmp_path / "my.config"
    config.write_text("CONFIG_64BIT=y\n# CONFIG_SWAP is not set\n")
    mine = kernels.resolve(f"{tree}@good", config=str(config))
    plain = kernels.resolve(f"{tree}@good")
    assert mine.config == str(config) and plain.config == ""
    assert mine.key.startswith(plain.key + "-config-") and mine.build != plain.build
    default = kernels.resolve(config=str(config), build_env="")
    assert default.key.startswith("linux-source-6.1-config-")  # not build/: that one is tinyconfig's
    assert "BASE_CONFIG=" + str(config) in kernels.shell(mine)
    config.write_text("CONFIG_64BIT=y\n")
    assert kernels.resolve(f"{tree}@good", config=str(config)).key != mine.key
    with pytest.raises(kernels.KernelSpecError, match="--config /no/such.config: No such file"):
        kernels.resolve(config="/no/such.config")
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(kernels.KernelSpecError, match="not a kernel .config"):
        kernels.resolve(config=str(tmp_path / "notes.txt"))


def _kernel_build(*args, tmp_path):
    """kernel/build with a lock of its own: these runs never compile, so they
    need not wait for a real build."""
    env = dict(os.environ, PMLAB_BUILD_LOCK=str(tmp_path / "lock"))
    env.pop("PMLAB_BUILD", None)
    return subprocess.run([os.path.join(REPO, "kernel", "build"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _git_kernel_dirs():
    """The git trees' build directories in the checkout (build/kernels/git-*):
    a user's own --kernel TREE@REF runs leave theirs there."""
    kernels_dir = os.path.join(REPO, "build", "kernels")
    return {name for name in os.listdir(kernels_dir) if name.startswith("git-")} \
        if os.path.isdir(kernels_dir) else set()


def test_kernel_build_refuses_a_missing_ref_before_extracting_anything(tree, tmp_path):
    before = _git_kernel_dirs()  # not "none at all": what the user built before stays
    done = _kernel_build("--kernel", f"{tree}@v9.9", tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"ref 'v9.9' does not exist in {tree}" in done.stderr
    assert _git_kernel_dirs() == before, "the test created a build directory"


def test_kernel_build_names_the_patch_that_does_not_apply_and_compiles_nothing(tree, tmp_path):
    kernel = kernels.resolve(f"{tree}@good", os.path.join(REPO, "kernel", "patches", "6.1"))
    try:
        done = _kernel_build("--kernel", f"{tree}@good", "--series", os.path.join(REPO, "kernel", "patches", "6.1"),
                             tmp_path=tmp_path)
        assert done.returncode == 1, done.stderr
        first = kernels.series_patches(os.path.join(REPO, "kernel", "patches", "6.1"))[0]
        assert f"patch {first} does not apply to linux@{kernel.commit[:12]}" in done.stderr
        assert not os.path.exists(os.path.join(kernel.build, "out", "bzImage"))
        assert not os.listdir(os.path.join(kernel.build, "kernel"))  # no object was built
    finally:
        subprocess.run(["rm", "-rf", kernel.build])


def test_kernel_build_names_fragment_options_the_tree_lacks_and_compiles_nothing(tree, tmp_path):
    kernel = kernels.resolve(f"{tree}@good", "none")
    try:
        done = _kernel_build("--kernel", f"{tree}@good", "--series", "none", tmp_path=tmp_path)
        assert done.returncode == 1, done.stderr
        # the tree's one Kconfig defines PM only: every other option is named with its fragment line
        assert "CONFIG_PM: no such option" not in done.stderr
        assert "pmlab.config:4: CONFIG_64BIT: no such option in" in done.stderr
        assert "nothing was compiled" in done.stderr
        assert not os.listdir(os.path.join(kernel.build, "kernel"))
    finally:
        subprocess.run(["rm", "-rf", kernel.build])


def test_the_commit_pipeline_refuses_a_bad_kernel_before_any_stage(tmp_path, tree):
    done = subprocess.run(["/usr/bin/python3", "-m", "cli.main", "commit", "--kernel", f"{tree}@v9.9",
                           "--results", str(tmp_path / "results")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and f"ref 'v9.9' does not exist in {tree}" in done.stderr
    assert not (tmp_path / "results").exists()


def test_a_build_of_another_commit_is_not_current_for_the_commit_pipeline(tmp_path, tree):
    from pipelines import commit
    kernel = kernels.resolve(f"{tree}@good", "none", build_env=str(tmp_path))
    os.makedirs(kernel.artifacts)
    open(os.path.join(kernel.artifacts, "bzImage"), "w").close()
    other = kernels.resolve(f"{tree}@bad", "none").commit
    with open(os.path.join(kernel.artifacts, "manifest.json"), "w") as out:
        out.write(f'{{"variant": "baseline", "series_hash": "none", "source_commit": "{other}"}}')
    current, why = commit.kernel_current(kernel.artifacts, kernel=kernel)
    assert not current and why == f"built from {other[:12]}, not {kernel.commit[:12]}"
    with open(os.path.join(kernel.artifacts, "manifest.json"), "w") as out:
        out.write(f'{{"variant": "baseline", "series_hash": "none", "source_commit": "{kernel.commit}"}}')
    assert commit.kernel_current(kernel.artifacts, kernel=kernel) == (True, "series none, inputs older than the build")


@pytest.mark.kernel  # Debian's linux-source tarball
def test_the_test_suite_boots_the_kernel_its_options_name(pytestconfig, monkeypatch):
    """./pmlab test --kernel SPEC: the guest tests' artifacts are that
    kernel's build directory, read as every verb reads --kernel; a bad spec
    is the lab setup's named error."""
    from conftest import artifacts_dir
    given = {"--artifacts": None, "--baseline": False, "--kernel": "linux-source-6.12", "--series": None}
    monkeypatch.setattr(pytestconfig, "getoption", given.get)
    assert artifacts_dir(pytestconfig) == os.path.join(REPO, "build", "kernels", "linux-source-6.12", "out")
    given["--kernel"] = "linux-source-9.9"
    with pytest.raises(LabError, match="linux-source-9.9"):
        artifacts_dir(pytestconfig)
    given.update({"--kernel": None, "--baseline": True})
    assert artifacts_dir(pytestconfig).endswith(os.path.join("build", "baseline", "out"))


def test_kernel_build_refuses_a_config_that_is_not_one_before_extracting_anything(tmp_path):
    (tmp_path / "x.config").write_text("not a config\n")
    done = _kernel_build("--config", str(tmp_path / "x.config"), tmp_path=tmp_path)
    assert done.returncode == 2 and "not a kernel .config" in done.stderr, done.stderr
