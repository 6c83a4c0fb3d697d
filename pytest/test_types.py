"""The typed core: mypy (Debian's mypy package, lab/install-deps) checks the
modules mypy.ini lists with its strict settings (every function annotated,
bodies checked); any error fails this test with mypy's own messages.

mypy's cache lives outside the checkout, one directory per checkout (two
worktrees' modules share names, and the cache is keyed by name), so a
second run takes ~1.5 s instead of ~3.5 s and the tree stays clean.
"""

import configparser
import hashlib
import os
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "mypy.ini")
PYTHON = "/usr/bin/python3"


def cache_dir(repo=REPO):
    """mypy's cache for this checkout: under the system's temporary directory,
    named by the checkout's path."""
    digest = hashlib.sha256(os.path.realpath(repo).encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"pmlab-mypy-{os.getuid()}-{digest}")


def checked_files(config=CONFIG):
    """The files and packages mypy.ini has mypy check."""
    parser = configparser.ConfigParser()
    parser.read(config)
    return [name.strip() for name in parser["mypy"]["files"].split(",") if name.strip()]


def test_the_typed_core_passes_mypy():
    done = subprocess.run([PYTHON, "-m", "mypy", "--config-file", CONFIG, "--cache-dir", cache_dir()],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in done.stderr, "mypy is not installed: run lab/install-deps (Debian's mypy)"
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"


def test_the_checked_list_names_the_libvirt_free_core():
    """The modules the issue asks to be typed stay on the list, and each
    entry exists (a renamed module must not drop out of the check silently)."""
    listed = checked_files()
    for name in ("lab/request.py", "lab/judge.py", "lab/oracle", "lab/records.py", "lab/latency.py",
                 "lab/trace.py", "dashboards/compute.py", "dashboards/buckets.py"):
        assert name in listed
    for name in listed:
        assert os.path.exists(os.path.join(REPO, name)), f"mypy.ini lists {name}, which does not exist"


def test_mypy_reports_an_unannotated_function(tmp_path):
    """The settings are strict enough to refuse what they are for: a module
    like the checked ones with one unannotated function fails."""
    module = tmp_path / "sample.py"
    module.write_text("def typed(x: int) -> int:\n    return x\n\n\ndef untyped(x):\n    return x\n")
    done = subprocess.run([PYTHON, "-m", "mypy", "--config-file", CONFIG, "--cache-dir", "/dev/null", str(module)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "sample.py:5: error: Function is missing a type annotation" in done.stdout, \
        done.stdout + done.stderr
