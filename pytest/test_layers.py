"""The layers import downward only: lab <- dashboards <- pipelines.

Every .py under lab/, dashboards/ and pipelines/ is parsed (ast, imports
inside functions included): nothing in lab/ imports dashboards or pipelines,
nothing in dashboards/ imports pipelines. Imports by name count as well:
importlib.import_module("pipelines.merge"), __import__(...),
runpy.run_module(...) and a subprocess's ["python3", "-m", "pipelines.merge"];
one whose module name is computed (a variable, "pipelines." + name is read
as pipelines) cannot be checked and is refused in every layer. And only
lab/records.py names cycles.jsonl in code: one module reads and writes it.

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


# An import by name whose module the test cannot read (a computed name).
DYNAMIC = "<a computed module name>"
# Calls that import the module their first argument names: importlib's
# import_module and __import__, the builtin __import__, runpy.run_module.
IMPORT_CALLS = {"import_module", "__import__", "run_module"}


def sources(layer, repo=REPO):
    for root, _, names in os.walk(os.path.join(repo, layer)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(root, name)


def _named_package(node):
    """The top-level package of a module named by an expression: a string,
    or one built from a constant start that holds the package ("pipelines." +
    name, f"pipelines.{name}"); DYNAMIC for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(".")[0]
    start = None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        start = node.left
    elif isinstance(node, ast.JoinedStr) and node.values:
        start = node.values[0]
    if isinstance(start, ast.Constant) and isinstance(start.value, str) and "." in start.value:
        return start.value.split(".")[0]
    if isinstance(start, (ast.BinOp, ast.JoinedStr)):
        return _named_package(start)
    return DYNAMIC


def imported_packages(text):
    """The top-level packages a module's source imports, anywhere in it,
    by statement or by name (IMPORT_CALLS, python3 -m)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) in IMPORT_CALLS
                                             or getattr(node.func, "attr", None) in IMPORT_CALLS):
            name = node.args[0] if node.args else \
                next((keyword.value for keyword in node.keywords if keyword.arg in ("name", "mod_name")), None)
            found.add(DYNAMIC if name is None else _named_package(name))
        elif isinstance(node, (ast.List, ast.Tuple)):  # an argv: [python, "-m", "pipelines.merge", ...]
            for flag, name in zip(node.elts, node.elts[1:]):
                if isinstance(flag, ast.Constant) and flag.value == "-m" \
                        and isinstance(name, ast.Constant) and isinstance(name.value, str):
                    found.add(name.value.split(".")[0])
    return found


def upward_imports(layer, repo=REPO):
    bad = []
    for path in sources(layer, repo):
        with open(path) as source:
            for package in sorted(imported_packages(source.read()) & (FORBIDDEN[layer] | {DYNAMIC})):
                bad.append(f"{os.path.relpath(path, repo)} imports {package}")
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


@pytest.mark.parametrize("code, package", [
    ("import importlib\nimportlib.import_module('pipelines.merge')", "pipelines"),
    ("from importlib import import_module\nimport_module('dashboards.compute')", "dashboards"),
    ("import importlib\nimportlib.import_module(name='pipelines')", "pipelines"),
    ("import importlib\nimportlib.__import__('pipelines.merge')", "pipelines"),
    ("import builtins\nbuiltins.__import__('dashboards')", "dashboards"),
    ("import runpy\nrunpy.run_module('pipelines.merge', run_name='__main__')", "pipelines"),
    ("import importlib\nimportlib.import_module('pipelines.' + kind)", "pipelines"),
    ("import importlib\nimportlib.import_module(f'pipelines.{kind}')", "pipelines"),
    ("import importlib\nimportlib.import_module(kind)", DYNAMIC),
    ("import importlib\nimportlib.import_module(f'{kind}.merge')", DYNAMIC),
    ("import importlib\nimportlib.import_module('pipe' + 'lines.merge')", DYNAMIC),
    ("import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pipelines.merge', out])", "pipelines"),
])
def test_the_import_check_sees_imports_by_name(code, package):
    assert package in imported_packages(code)


def test_an_upward_import_by_name_is_caught(tmp_path):
    """A module of lab/ that imports a pipeline through importlib, or a
    module whose name it computes, fails the layer check; lab's own imports
    by name do not."""
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "sneaky.py").write_text(
        "import importlib\n\ndef merge(runs):\n    return importlib.import_module('pipelines.merge').merge(runs)\n")
    (tmp_path / "lab" / "plugin.py").write_text("def load(name):\n    return __import__(name)\n")
    (tmp_path / "lab" / "fine.py").write_text("import importlib\nrecords = importlib.import_module('lab.records')\n")
    assert upward_imports("lab", str(tmp_path)) == [f"lab{os.sep}plugin.py imports {DYNAMIC}",
                                                    f"lab{os.sep}sneaky.py imports pipelines"]


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
