"""The kernel deliverables: the patch series, the configuration, the pmtest
module, and what a real guest booted with them does in one S3 cycle and one
hibernation cycle (issue: the pm_ops patch series on Debian's 6.1)."""

import gzip
import os
import shutil
import subprocess

import pytest

from lab import artifacts as artifacts_mod
from lab import guest_report, modes, oracle
from lab.kernels import series_patches
from lab.session import Session

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCHES = os.path.join(REPO, "kernel", "patches", "6.1")


def run(*command, env=None):
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


def series(patches=PATCHES):
    return series_patches(patches)


@pytest.mark.kernel
def test_series_is_checkpatch_clean_and_applies():
    result = run("kernel/check-series")
    assert result.returncode == 0, result.stdout + result.stderr
    for patch in series():
        assert f"{patch}: checkpatch clean" in result.stdout
    assert f"all {len(series())} patches apply" in result.stdout


@pytest.mark.pipeline
@pytest.mark.kernel
def test_6_12_series_is_checkpatch_clean_and_applies():
    """The port to linux-source-6.12 (kernel/patches/6.12), checked with 6.12's
    own checkpatch in its own build directory.  Extracting a second tree takes
    minutes, so this runs in pipelines."""
    series_dir = os.path.join(REPO, "kernel", "patches", "6.12")
    # --kernel: that kernel's bundled series and build directory (its tree is extracted once)
    result = run("kernel/check-series", "--kernel", "linux-source-6.12")
    assert result.returncode == 0, result.stdout + result.stderr
    names = series(series_dir)
    for patch in names:
        assert f"{patch}: checkpatch clean" in result.stdout
    assert f"all {len(names)} patches apply to linux-source-6.12.tar.xz" in result.stdout


@pytest.mark.kernel
def test_patch_that_does_not_apply_is_named_with_its_file(tmp_path):
    broken = tmp_path / "patches"
    shutil.copytree(PATCHES, broken)
    context = " \tint (*restore_noirq)(struct device *dev);"
    # The patch that adds the callbacks to struct dev_pm_ops: corrupt one of
    # its context lines in include/linux/pm.h.
    name = next(patch for patch in series() if context in (broken / patch).read_text())
    text = (broken / name).read_text()
    (broken / name).write_text(text.replace(context, context.replace("noirq", "noirqX"), 1))
    result = run("kernel/check-series", env={"PMLAB_SERIES_DIR": str(broken)})
    assert result.returncode != 0
    assert f"patch {name} does not apply" in result.stderr
    assert "include/linux/pm.h" in result.stderr


@pytest.mark.kernel
def test_every_prefix_of_the_series_compiles_the_c_files_it_touches():
    """Not a full build of each prefix (kernel/check-series --touched-prefixes
    compiles only the .c files a prefix changes)."""
    result = run("kernel/check-series", "--touched-prefixes")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    for k in range(1, len(series()) + 1):
        assert (f"prefix {k}/{len(series())}: compiling the files it touches" in result.stderr
                or f"prefix {k}/{len(series())}: no .c file touched" in result.stderr)
    # genpd is built (COMPILE_TEST, for pmtest_genpd), the amba bus is not:
    # a touched file the configuration does not build is named, not passed over.
    assert "not built by this configuration, not compiled: drivers/amba/bus.o" in result.stderr
    assert not [line for line in result.stderr.splitlines()
                if "not compiled" in line and "drivers/base/power/domain.o" in line]
    assert "every prefix compiles the .c files it touches" in result.stdout


@pytest.fixture(scope="module")
def out(pytestconfig):
    """The artifacts this session tests: build/out, or what --artifacts,
    --baseline or --kernel/--series/--config name (as the guest tests)."""
    from conftest import artifacts_dir
    return artifacts_dir(pytestconfig)


@pytest.mark.kernel
def test_every_fragment_option_survived_kconfig(out):
    config = os.path.join(out, "config")
    assert os.path.exists(config), f"{config} missing: run kernel/build"
    result = run("/usr/bin/python3", "kernel/check_config.py", "kernel/config/pmlab.config", config)
    assert result.returncode == 0, result.stderr


def test_a_dropped_option_is_reported_with_its_line(tmp_path):
    fragment = tmp_path / "fragment.config"
    fragment.write_text("CONFIG_PM=y\n# comment\nCONFIG_ACPI_BUTTON=y\n# CONFIG_SLOB is not set\n")
    config = tmp_path / ".config"
    config.write_text("CONFIG_PM=y\n# CONFIG_ACPI_BUTTON is not set\nCONFIG_SLOB=y\n")
    result = run("/usr/bin/python3", "kernel/check_config.py", str(fragment), str(config))
    assert result.returncode == 1
    assert f"{fragment}:3: CONFIG_ACPI_BUTTON=y was dropped" in result.stderr
    assert f"{fragment}:4: CONFIG_SLOB=n was dropped" in result.stderr
    assert "CONFIG_PM=" not in result.stderr


def test_a_base_config_value_the_fragment_replaces_is_named(tmp_path):
    # kernel/build --config: merge_config.sh lets the fragment win silently
    fragment = tmp_path / "fragment.config"
    fragment.write_text("CONFIG_PM=y\nCONFIG_HZ_1000=y\n# CONFIG_SLOB is not set\nCONFIG_NR_CPUS=4\n")
    base = tmp_path / "user.config"
    base.write_text("CONFIG_PM=y\nCONFIG_HZ_250=y\n# CONFIG_HZ_1000 is not set\nCONFIG_SLOB=y\n")
    result = run("/usr/bin/python3", "kernel/check_config.py", "--overrides", str(fragment), str(base))
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        f"{fragment}:2: CONFIG_HZ_1000=y replaces CONFIG_HZ_1000=n of {base} (the lab needs the fragment's value)",
        f"{fragment}:3: CONFIG_SLOB=n replaces CONFIG_SLOB=y of {base} (the lab needs the fragment's value)"]


@pytest.mark.kernel
def test_pmtest_module_is_built_for_this_kernel_with_the_new_callbacks(out):
    """Built for this kernel, with the quiesce/recover callbacks exactly
    when its series adds them (pmtest's Kbuild reads <linux/pm.h>)."""
    found = artifacts_mod.find(out)
    module = os.path.join(out, "modules", "pmtest.ko")
    vermagic = run("/sbin/modinfo", "-F", "vermagic", module).stdout.split()
    assert vermagic and vermagic[0] == found.manifest["kernelrelease"]
    symbols = run("nm", module).stdout
    patched = found.manifest.get("variant") == "patched"
    for callback in ("quiesce", "quiesce_late", "quiesce_noirq", "recover", "recover_early",
                     "recover_noirq"):
        assert (f" pmtest_pm_{callback}\n" in symbols) == patched, (callback, found.manifest.get("variant"))


# ------------------------------------------------------------ in a real guest

FULL_S3 = ["prepare", "suspend", "suspend_late", "suspend_noirq", "resume_noirq",
           "resume_early", "resume", "complete"]
EXPECTED_S3 = {"pmtest_full": FULL_S3, "pmtest_compat": FULL_S3,
               "pmtest_legacy": ["suspend", "resume"],
               "pmtest_edu_pm": FULL_S3,
               # the device matrix (pytest/test_device_matrix.py has its rules)
               "pmtest_async": FULL_S3, "pmtest_acpi": FULL_S3, "pmtest_domain": FULL_S3, "pmtest_pm_domain": FULL_S3,
               "pmtest_genpd": FULL_S3,
               "pmtest_typed": FULL_S3, "pmtest_type_ops": FULL_S3, "pmtest_class": FULL_S3,
               "pmtest_skip_resume": ["prepare", "suspend", "suspend_late", "suspend_noirq",
                                      "resume", "complete"],
               "pmtest_direct": ["prepare", "complete"], "pmtest_no_direct": FULL_S3,
               # SMART_SUSPEND: ACPI's acpi_subsys_suspend() resumes them for S3
               # (no _S3D/_PS0: acpi_dev_needs_resume()); MAY_SKIP_RESUME skips
               # resume_noirq/early
               "pmtest_acpi_smart": FULL_S3,
               "pmtest_acpi_smart_skip": ["prepare", "suspend", "suspend_late", "suspend_noirq",
                                          "resume", "complete"],
               "pmtest_syscore": ["syscore_suspend", "syscore_resume"]}
PLATFORM_DEVICES = 7  # depth 2, fanout 2 per driver
MATRIX_DEVICES = {"pmtest_async": 15, "pmtest_acpi": 2, "pmtest_domain": 3, "pmtest_pm_domain": 3,
                  "pmtest_genpd": 3,
                  "pmtest_typed": 3, "pmtest_type_ops": 3, "pmtest_class": 2,
                  "pmtest_skip_resume": 1, "pmtest_direct": 1, "pmtest_no_direct": 1,
                  "pmtest_acpi_smart": 2, "pmtest_acpi_smart_skip": 1,
                  "pmtest_syscore": 1}
# ->prepare returns 1 to ask for direct_complete
PREPARE_1 = {"pmtest_direct", "pmtest_no_direct"}


@pytest.fixture(scope="module")
def patched_session(lab_run, out):
    found = artifacts_mod.find(out)
    if found.manifest.get("variant") != "patched":
        pytest.fail(f"{out} holds a {found.manifest.get('variant')} kernel", pytrace=False)
    session = Session(found, lab_run["rundir"], lab_run["uri"], lab_run["profile"],
                      lab_run["watchdogs"], lab_run["worker"] + "-kernel",
                      connection=lab_run["connection"])
    yield session
    session.close()


def report_sections(lab_run, record):
    with gzip.open(os.path.join(lab_run["rundir"].path, record["report"]), "rt") as text:
        return guest_report.sections(text.read())


def sequences(calls):
    out = {}
    for call in calls:
        out.setdefault(call.device, []).append(call)
    return out


@pytest.mark.guest
def test_s3_logs_every_callback_of_every_pmtest_device_in_rule_order(lab_run, patched_session):
    record = patched_session.cycle(modes.parse_mode("mem"), 8001)
    assert record["verdict"] == "pass", record.get("reason")
    sections = report_sections(lab_run, record)
    calls = oracle.from_pmtest(sections["pmtest_log"])
    by_device = sequences(calls)
    drivers = {}
    for device, device_calls in by_device.items():
        driver = oracle.observe.pmtest_driver(device)
        drivers[driver] = drivers.get(driver, 0) + 1
        assert [c.callback for c in device_calls] == EXPECTED_S3[driver], device
        assert all(c.ret == (1 if c.callback == "prepare" and driver in PREPARE_1 else 0)
                   for c in device_calls), device
    assert drivers == {"pmtest_full": PLATFORM_DEVICES, "pmtest_compat": PLATFORM_DEVICES,
                       "pmtest_legacy": PLATFORM_DEVICES, "pmtest_edu_pm": 1, **MATRIX_DEVICES}
    trace_calls, parents = oracle.from_trace(sections["trace"])
    assert oracle.judge(calls, oracle.pmtest_parents(calls, oracle.tree_from_trace(parents))) == []
    # "<device>/pd", "<device>/type" and pmtest_syscore are no kernel devices
    devices = {d for d in by_device if "/" not in d and d != "pmtest_syscore"}
    assert {c.device.split(" (")[0] for c in trace_calls} >= devices
    assert oracle.judge(trace_calls, parents) == []


@pytest.mark.guest
def test_hibernation_boot_kernel_quiesces_full_driver_and_freezes_compat(lab_run, patched_session):
    record = patched_session.cycle(modes.parse_mode("disk"), 8002)
    assert record["verdict"] == "pass", record.get("reason")
    # The boot kernel's records exist only on the console (log_console).
    console = oracle.from_pmtest("\n".join(record["evidence"]))
    kernels = oracle.split_kernels(console)
    assert len(kernels) == 1, f"expected the boot kernel's records only, got {len(kernels)} kernels"
    boot = kernels[0]
    # The tree as the image kernel's trace reports it (same module parameters).
    sections = report_sections(lab_run, record)
    tree = oracle.tree_from_trace(oracle.from_trace(sections["trace"])[1])
    assert oracle.judge(boot, oracle.pmtest_parents(boot, tree)) == []
    by_device = sequences(boot)
    quiesce = ["prepare", "quiesce", "quiesce_late", "quiesce_noirq"]
    expected = {"pmtest_full": quiesce,
                "pmtest_compat": ["prepare", "freeze", "freeze_late", "freeze_noirq"],
                "pmtest_legacy": ["suspend"],
                "pmtest_edu_pm": quiesce,
                **{driver: quiesce for driver in MATRIX_DEVICES if driver != "pmtest_syscore"},
                "pmtest_syscore": ["syscore_suspend"]}
    seen = set()
    for device, device_calls in by_device.items():
        driver = oracle.observe.pmtest_driver(device)
        seen.add(driver)
        assert [c.callback for c in device_calls] == expected[driver], device
        # legacy platform drivers keep 6.1's PMSG_FREEZE there (v3's 0008)
        event = "freeze" if driver == "pmtest_legacy" else "quiesce"
        assert {c.event for c in device_calls} == {event}, device
    assert seen == set(expected)
    # The image kernel after the jump: restore side, judged from its own log.
    image = oracle.from_pmtest(sections["pmtest_log"])
    assert oracle.judge(image, oracle.pmtest_parents(image, tree)) == []
    assert any(c.callback == "restore_noirq" for c in image)


@pytest.mark.guest
def test_malformed_knob_input_gets_einval(patched_session):
    if patched_session.guest is None:  # alone, or on another xdist worker
        record = patched_session.cycle(modes.parse_mode("pm_test-freezer"), 8003)
        assert record["verdict"] == "pass", record.get("reason")
    guest = patched_session.guest
    for knob, text in (("fault", "pmtest_full.3 suspend_latex -5 1"), ("fault", "pmtest_full.3 x -5"),
                       ("delay", "pmtest_full.3 suspend abc"), ("child", "* prepare")):
        request = guest.agent.send(f"echo '{text}' > /sys/kernel/debug/pmtest/{knob}")
        reply = guest.agent.wait(request, 30)
        assert reply.status != 0 and "Invalid argument" in reply.output, (knob, text, reply)
    request = guest.agent.send("echo 'pmtest_nothere.1 suspend -5 1' > /sys/kernel/debug/pmtest/fault")
    reply = guest.agent.wait(request, 30)
    assert reply.status != 0 and "No such device" in reply.output, reply
