"""pytest entry for pmlab's lab.

  /usr/bin/python3 -m pytest pytest/                       everything but the pipeline tests
  /usr/bin/python3 -m pytest pytest/ -m 'not guest'        no guest; the kernel tests need build/ (~4 min)
  ./pmlab test --fast                                      = -m 'not guest and not kernel and not browser'
                                                             -n auto --fuzz-share=25: ~40 s on 2 cores, no root
  /usr/bin/python3 -m pytest pytest/ -m guest -n 2 --mode mem --cycles 10
  ... --baseline | --artifacts DIR, --wake, --uri, --profile, --watchdog PHASE=S

Markers: guest (boots QEMU guests), kernel (needs the kernel tarball, tree
or build), browser (Chromium), pipeline (deselected unless --pipeline-tests).

One test item per cycle (test_cycle[003-mem-pmwakeup]), so JUnit XML names
the failing cycle. With pytest-xdist (-n N) each worker boots its own guest;
all workers append to the same results/<run-id>/cycles.jsonl and the
controller writes summary.json at the end.
"""

import dataclasses
import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab import artifacts as artifacts_mod  # noqa: E402
from lab import options  # noqa: E402
from lab import modes as modes_mod  # noqa: E402
from lab import virt  # noqa: E402
from lab import request as request_mod  # noqa: E402
from lab.request import watchdogs_from  # noqa: E402
from lab.records import RunDir, new_run_id  # noqa: E402

RECORDINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recordings")
FUZZ_SHARE = 100  # --fuzz-share: the percentage of each property test's examples that runs


def pytest_addoption(parser):
    group = parser.getgroup("pmlab", "pmlab guest cycles")
    group.addoption("--cycles", help="cycles per mode (default sample: mem 10, freeze 5, disk 3)")
    group.addoption("--mode", action="append",
                    help="mem, freeze, disk, pm_test-LEVEL; repeat for several")
    group.addoption("--wake", help="wake source (mem: pmwakeup|rtc, freeze: powerbutton, disk: platform|reboot)")
    group.addoption("--artifacts", help="kernel artifact directory (default build/out)")
    group.addoption("--baseline", action="store_true", help="use build/baseline/out")
    group.addoption("--kernel", metavar="SPEC",
                    help="the artifacts of kernel/build --kernel SPEC (lab/kernels.py: linux-source-6.12, "
                         "a tarball, a git tree DIR[@REF]); ./pmlab test --kernel builds it first")
    group.addoption("--series", metavar="DIR|none", help="with --kernel: the series it was built with")
    group.addoption("--config", metavar="FILE", help="with --kernel: the .config it was built on")
    group.addoption("--uri", default=virt.DEFAULT_URI, help="libvirt URI")
    group.addoption("--profile", default="q35-ovmf", help="q35-ovmf or pc-seabios")
    group.addoption("--watchdog", action="append", metavar="PHASE=SECONDS")
    group.addoption("--request", metavar="FILE",
                    help="a run request (lab/request.py) whose guest the guest tests boot, every setting of "
                         "it (profile, memory, vcpus, devices, pmtest tree, watchdogs, limits, ...): "
                         "./pmlab commit writes its smoke's for the fault campaign; no --uri, --profile "
                         "or --watchdog with it")
    group.addoption("--lab-results", default=os.path.join(REPO, "results"), help="results root")
    group.addoption("--fuzz-share", type=int, default=100, metavar="PERCENT",
                    help="run this share of each property test's examples (pytest/test_parser_fuzz.py; "
                         "at least 10 each); ./pmlab test --fast runs 25")
    group.addoption("--pipeline-tests", action="store_true",
                    help="also run the tests marked pipeline (they need a second kernel build: "
                         "the kernel-deep job of pipelines/ci runs them)")


def pytest_configure(config):
    config.addinivalue_line("markers", "guest: boots real QEMU guests through libvirt (slow)")
    config.addinivalue_line("markers", "browser: drives headless Chromium (dashboard page)")
    config.addinivalue_line("markers", "kernel: needs a kernel source: Debian's linux-source tarball, the tree "
                            "kernel/build extracts (checkpatch, sleepgraph), or its build (build/out, the "
                            "initramfs); ./pmlab test --fast leaves these out")
    config.addinivalue_line("markers", "pipeline: longer than CI's test budget (the unpatched "
                            "baseline kernel, a second full build; the LAVA lab, installed and brought up): run by pipelines/ci's kernel-deep job with --pipeline-tests, "
                            "deselected (never skipped) in ./pmlab test")
    global FUZZ_SHARE
    FUZZ_SHARE = config.getoption("--fuzz-share")
    if not 1 <= FUZZ_SHARE <= 100:
        raise pytest.UsageError(f"--fuzz-share {FUZZ_SHARE}: a percentage from 1 to 100")
    if hasattr(config, "workerinput"):
        config.pmlab_run_id = config.workerinput["pmlab_run_id"]
    else:
        config.pmlab_run_id = new_run_id()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist: every worker writes into the controller's run directory."""
    node.workerinput["pmlab_run_id"] = node.config.pmlab_run_id


def _plan(config):
    return modes_mod.plan(config.getoption("--mode"), config.getoption("--cycles"),
                          config.getoption("--wake"))


def pytest_collection_modifyitems(config, items):
    """Tests marked pipeline are deselected, by name in the summary, unless
    --pipeline-tests asks for them."""
    if config.getoption("--pipeline-tests"):
        return
    kept = [item for item in items if "pipeline" not in item.keywords]
    left = [item for item in items if "pipeline" in item.keywords]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
        config.pmlab_pipeline_deselected = [item.nodeid for item in left]


def pytest_terminal_summary(terminalreporter, config):
    for nodeid in getattr(config, "pmlab_pipeline_deselected", ()):
        terminalreporter.write_line(f"pmlab: deselected {nodeid} (marked pipeline: "
                                    "pipelines/ci kernel-deep runs it with --pipeline-tests)")


def pytest_generate_tests(metafunc):
    if "cycle_spec" not in metafunc.fixturenames:
        return
    try:
        plan = _plan(metafunc.config)
    except virt.LabError as error:
        raise pytest.UsageError(str(error))
    numbered = list(modes_mod.numbered(plan))
    metafunc.parametrize("cycle_spec", [(mode, number) for number, mode in numbered],
                         ids=[f"{number:03d}-{mode.name}-{mode.wake}" for number, mode in numbered])


def artifacts_dir(config):
    """The kernel artifacts the guest tests boot: --artifacts, --baseline or
    --kernel/--series, read as every verb reads them (lab.options)."""
    import argparse
    return options.artifacts_dir(argparse.Namespace(**{name: config.getoption("--" + name)
                                                       for name in ("artifacts", "baseline", "kernel", "series", "config")}))


def guest_spec(config):
    """The guest the guest tests boot (lab.request.Guest): --request's
    whole, or --uri, --profile and --watchdog over the request's defaults.
    LabError for an unreadable request or one given with those options
    (they would be dropped)."""
    path = config.getoption("--request")
    if path is None:
        return request_mod.Guest(uri=config.getoption("--uri"), profile=config.getoption("--profile"),
                                 watchdogs=watchdogs_from(config.getoption("--watchdog")))
    given = [name for name, default in (("--uri", virt.DEFAULT_URI), ("--profile", "q35-ovmf"), ("--watchdog", None))
             if config.getoption(name) != default]
    if given:
        raise virt.LabError(f"--request {path} names the guest: give no {', '.join(given)} with it")
    return request_mod.RunRequest.read(path).guest


def session_of(lab_run, worker):
    """A Session whose guests are the run's guest spec, every setting of it."""
    from lab.session import Session
    guest = lab_run["guest"]
    return Session(lab_run["artifacts"], lab_run["rundir"], guest.uri, guest.profile, guest.watchdogs, worker,
                   guest.memory, guest.vcpus, connection=lab_run["connection"], pmtest_tree=guest.pmtest_tree,
                   firmware_errata=guest.firmware_errata, device_set=guest.devices, limits=guest.limits)


def pytest_report_header(config):
    """The guest settings, in the header: what a run's guests were is then in its log."""
    try:
        spec = guest_spec(config)
    except virt.LabError as error:
        return f"pmlab guest: {error}"
    return "pmlab guest: " + json.dumps(dataclasses.asdict(spec), sort_keys=True)


@pytest.fixture(scope="session")
def lab_run(request):
    """The run directory and the checked inputs shared by guest tests: a
    missing artifact or an unstartable libvirt fails here, clearly."""
    config = request.config
    problem = None
    try:
        # Held for the session: no build installs into them while guests boot.
        hold = artifacts_mod.hold(artifacts_dir(config))
        found = artifacts_mod.find(artifacts_dir(config))
        guest = guest_spec(config)
        connection = virt.Connection(guest.uri)
    except virt.LabError as error:
        problem = str(error)
    if problem:  # outside the except block: one message, no exception chain
        pytest.fail(f"lab setup: {problem}", pytrace=False)
    rundir = RunDir(config.getoption("--lab-results"), config.pmlab_run_id)
    worker = getattr(config, "workerinput", {}).get("workerid", "w0")
    yield {"artifacts": found, "guest": guest, "watchdogs": guest.watchdogs, "connection": connection,
           "plan": _plan(config), "rundir": rundir, "worker": worker, "uri": guest.uri, "profile": guest.profile}
    if hold:
        hold.close()


@pytest.fixture(scope="session")
def lab_session(lab_run):
    session = session_of(lab_run, lab_run["worker"])
    yield session
    session.close()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    path = os.path.join(config.getoption("--lab-results"), config.pmlab_run_id)
    if os.path.exists(os.path.join(path, "cycles.jsonl")):
        summary = RunDir(config.getoption("--lab-results"), config.pmlab_run_id).write_summary()
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter:
            reporter.write_line(f"pmlab: {summary['counts']} -> {path}/summary.json")


@pytest.fixture
def recording():
    """Read a file recorded from a real guest, under pytest/recordings/."""
    def read(name, mode="r"):
        with open(os.path.join(RECORDINGS, name), mode) as source:
            return source.read()
    return read
