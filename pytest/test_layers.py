"""The layers import downward only: lab <- dashboards <- pipelines.

Every .py under lab/, dashboards/ and pipelines/ is parsed (ast, imports
inside functions included): nothing in lab/ imports dashboards or pipelines,
nothing in dashboards/ imports pipelines. And only lab/records.py names
cycles.jsonl in code: one module reads and writes it.

Checking input, planning a run and judging a recorded one need no libvirt:
those modules are imported, and `./pmlab judge` is run, in a Python where
`import libvirt` fails.
"""

import ast
import os
import subprocess
import sys

import pytest

from recorded_run import make_run_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("lab", "dashboards", "pipelines")  # each may import only those before it
FORBIDDEN = {"lab": {"dashboards", "pipelines"}, "dashboards": {"pipelines"}, "pipelines": set()}


def sources(layer):
    for root, _, names in os.walk(os.path.join(REPO, layer)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(root, name)


def imported_packages(text):
    """The top-level packages a module's source imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" \
                and node.args and isinstance(node.args[0], ast.Constant):
            found.add(str(node.args[0].value).split(".")[0])
    return found


def upward_imports(layer):
    bad = []
    for path in sources(layer):
        with open(path) as source:
            for package in sorted(imported_packages(source.read()) & FORBIDDEN[layer]):
                bad.append(f"{os.path.relpath(path, REPO)} imports {package}")
    return bad


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_goes_up_a_layer(layer):
    assert list(sources(layer)), f"no sources under {layer}/"
    assert upward_imports(layer) == []


def test_the_import_check_sees_every_kind_of_import():
    text = ("import os\nfrom dashboards import buckets\n"
            "def f():\n    import pipelines.merge\n    return __import__('dashboards.compute')\n")
    assert imported_packages(text) == {"os", "dashboards", "pipelines"}
    assert imported_packages("from . import x\nfrom lab.records import read_cycles\n") == {"lab"}


def code_strings(text):
    """String constants of a module that are not docstrings."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_only_lab_records_names_the_cycles_file():
    naming = sorted(os.path.relpath(path, REPO) for layer in LAYERS for path in sources(layer)
                    if any(s.endswith("cycles.jsonl") and " " not in s  # a path, not prose (help texts)
                           for s in code_strings(open(path).read())))
    assert naming == ["lab/records.py"]


# Run before anything else in the child: `import libvirt` then raises ModuleNotFoundError.
NO_LIBVIRT = "import sys; sys.modules['libvirt'] = None\n"
ORACLE = sorted("lab.oracle." + name[:-3] for name in os.listdir(os.path.join(REPO, "lab", "oracle"))
                if name.endswith(".py") and name != "__init__.py")
LIBVIRT_FREE = ["lab.errors", "lab.judge", "lab.rejudge", "lab.oracle", *ORACLE, "lab.modes", "lab.options",
                "lab.records", "pipelines.plan"]


def without_libvirt(code, *argv):
    return subprocess.run([sys.executable, "-c", NO_LIBVIRT + code, *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_the_child_python_cannot_import_libvirt():
    done = without_libvirt("import lab.virt")
    assert done.returncode != 0 and "import of libvirt halted" in done.stderr


@pytest.mark.parametrize("module", LIBVIRT_FREE)
def test_imports_without_libvirt(module):
    done = without_libvirt(f"import {module}")
    assert done.returncode == 0, done.stderr


def test_pmlab_judge_runs_without_libvirt(tmp_path):
    run = make_run_dir(tmp_path / "run-recorded")
    judge = "import runpy; sys.argv[0] = 'pmlab'; runpy.run_module('cli.main', run_name='__main__')"
    offline = without_libvirt(judge, "judge", run)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    live = subprocess.run([sys.executable, "-m", "cli.main", "judge", str(run)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert offline.stdout == live.stdout
    assert ": PASS -> PASS" in offline.stdout and "0 changed" in offline.stdout
