"""kernel/audit-legacy-pm on a small fake kernel tree written for each test,
and (marked kernel) on the trees kernel/build extracts: 6.1 always, 6.12 when
its build directory has one."""
import os
import re
import subprocess
import textwrap

import pytest

from lab import kernels

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "kernel", "audit-legacy-pm")

DRIVERS = {
    # Tests only SUSPEND: FREEZE and QUIESCE take the same branch.
    "drivers/misc/only_suspend.c": """
        static int only_suspend_suspend(struct pci_dev *pdev, pm_message_t state)
        {
        	if (state.event == PM_EVENT_SUSPEND)
        		power_off(pdev);
        	return 0;
        }

        static struct pci_driver only_suspend_driver = {
        	.name		= "only_suspend",
        	.suspend	= only_suspend_suspend,
        	.resume		= only_suspend_resume,
        };
    """,
    # FREEZE keeps the device up; QUIESCE now powers it off.
    "drivers/misc/freeze_only.c": """
        static int
        freeze_only_suspend(struct platform_device *pdev, pm_message_t mesg)
        {
        	if (mesg.event == PM_EVENT_FREEZE)
        		return 0;
        	power_off(pdev);
        	return 0;
        }

        static struct platform_driver freeze_only_driver = {
        	.suspend = freeze_only_suspend,
        	.driver = {
        		.name = "freeze_only",
        	},
        };
    """,
    # Compares with an event it stored itself: the script cannot decide.
    "drivers/misc/stored.c": """
        static int stored_suspend(struct pci_dev *pdev, pm_message_t state)
        {
        	if (state.event == pdev->dev.power.power_state.event)
        		return 0;
        	pdev->dev.power.power_state = state;
        	return 0;
        }

        static struct pci_driver stored_driver = {
        	.name = "stored",
        	.suspend = stored_suspend,
        };
    """,
    # FREEZE and PRETHAW share a case on suspend, but resume tests the stored
    # event against FREEZE only; the reviewed table knows this driver.
    "drivers/video/fbdev/i810/i810_main.c": """
        static int i810fb_suspend(struct pci_dev *dev, pm_message_t mesg)
        {
        	par->cur_state = mesg.event;
        	switch (mesg.event) {
        	case PM_EVENT_FREEZE:
        	case PM_EVENT_PRETHAW:
        		return 0;
        	}
        	return power_down(dev);
        }

        static int i810fb_resume(struct pci_dev *dev)
        {
        	int cur_state = par->cur_state;

        	if (cur_state == PM_EVENT_FREEZE)
        		return 0;
        	return full_resume(dev);
        }

        static struct pci_driver i810fb_driver = {
        	.name		= "i810fb",
        	.suspend	= i810fb_suspend,
        	.resume		= i810fb_resume,
        };
    """,
    # The message goes to a helper in another directory, which groups
    # FREEZE and PRETHAW in one case.
    "drivers/net/helper_user.c": """
        static int helper_user_suspend(struct pci_dev *pdev, pm_message_t state)
        {
        	return shared_helper(pdev, state);
        }

        static struct pci_driver helper_user_driver = {
        	.name = "helper_user",
        	.suspend = helper_user_suspend,
        };
    """,
    "lib/shared_helper.c": """
        int shared_helper(struct pci_dev *pdev, pm_message_t msg)
        {
        	switch (msg.event) {
        	case PM_EVENT_FREEZE:
        	case PM_EVENT_QUIESCE:
        		return 0;
        	default:
        		return power_off(pdev);
        	}
        }
    """,
    # A legacy driver that never looks at the message is not listed.
    "drivers/misc/ignores.c": """
        static int ignores_suspend(struct pci_dev *pdev, pm_message_t state)
        {
        	return power_off(pdev);
        }

        static struct pci_driver ignores_driver = {
        	.name = "ignores",
        	.suspend = ignores_suspend,
        };
    """,
    # dev_pm_ops drivers are not legacy, whatever their ->suspend() does.
    "drivers/misc/modern.c": """
        static int modern_suspend(struct device *dev)
        {
        	return 0;
        }

        static const struct dev_pm_ops modern_pm = {
        	.suspend = modern_suspend,
        };

        static int modern_helper(struct device *dev, pm_message_t state)
        {
        	return state.event == PM_EVENT_FREEZE;
        }

        static struct pci_driver modern_driver = {
        	.name = "modern",
        	.driver.pm = &modern_pm,
        };
    """,
    # A legacy PNP driver: the PNP bus keeps passing PMSG_FREEZE.
    "drivers/pnp/fake_pnp.c": """
        static int fake_pnp_suspend(struct pnp_dev *dev, pm_message_t state)
        {
        	if (state.event == PM_EVENT_FREEZE)
        		return 0;
        	return power_off(dev);
        }

        static struct pnp_driver fake_pnp_driver = {
        	.name		= "fake_pnp",
        	.suspend	= fake_pnp_suspend,
        };
    """,
    # USB interface drivers get PMSG_QUIESCE now: PMSG_IS_AUTO() and a
    # PM_EVENT_SLEEP mask answer alike for FREEZE and QUIESCE ...
    "drivers/usb/misc/auto_only.c": """
        static int auto_only_suspend(struct usb_interface *intf, pm_message_t message)
        {
        	if (PMSG_IS_AUTO(message) && busy(intf))
        		return -EBUSY;
        	if (message.event & PM_EVENT_SLEEP)
        		power_off(intf);
        	return 0;
        }

        static struct usb_driver auto_only_driver = {
        	.name =		"auto_only",
        	.suspend =	auto_only_suspend,
        	.resume =	auto_only_resume,
        };
    """,
    # ... a test of FREEZE alone does not.
    "drivers/usb/misc/freeze_branch.c": """
        static int freeze_branch_suspend(struct usb_interface *intf, pm_message_t message)
        {
        	if (message.event == PM_EVENT_FREEZE)
        		return 0;
        	return power_off(intf);
        }

        static struct usb_driver freeze_branch_driver = {
        	.name =		"freeze_branch",
        	.suspend =	freeze_branch_suspend,
        };
    """,
    # FREEZE and QUIESCE together, over two lines, as drivers/usb/core does.
    "drivers/usb/misc/both.c": """
        static int both_suspend(struct usb_interface *intf, pm_message_t msg)
        {
        	if (msg.event == PM_EVENT_FREEZE ||
        	    msg.event == PM_EVENT_QUIESCE)
        		return 0;
        	return power_off(intf);
        }

        static struct usb_driver both_driver = {
        	.name =		"both",
        	.suspend =	both_suspend,
        };
    """,
    # Stores the suspend event and tests it in the no-message ->resume().
    "drivers/usb/misc/stored_usb.c": """
        static int stored_usb_suspend(struct usb_interface *intf, pm_message_t message)
        {
        	priv->last_event = message.event;
        	return 0;
        }

        static int stored_usb_resume(struct usb_interface *intf)
        {
        	if (priv->last_event == PM_EVENT_FREEZE)
        		return 0;
        	return reinit(intf);
        }

        static struct usb_driver stored_usb_driver = {
        	.name =		"stored_usb",
        	.suspend =	stored_usb_suspend,
        	.resume =	stored_usb_resume,
        };
    """,
    # Compares the event with something the script cannot evaluate.
    "drivers/usb/misc/unknown_usb.c": """
        static int unknown_usb_suspend(struct usb_interface *intf, pm_message_t message)
        {
        	if (message.event == priv->skip_event)
        		return 0;
        	return power_off(intf);
        }

        static struct usb_driver unknown_usb_driver = {
        	.name =		"unknown_usb",
        	.suspend =	unknown_usb_suspend,
        };
    """,
    # A USB device driver's ->resume() gets PMSG_RECOVER where it got THAW.
    "drivers/usb/misc/thaw_resume.c": """
        static int thaw_resume_suspend(struct usb_device *udev, pm_message_t msg)
        {
        	return PMSG_IS_AUTO(msg) ? 0 : power_off(udev);
        }

        static int thaw_resume_resume(struct usb_device *udev, pm_message_t msg)
        {
        	if (msg.event == PM_EVENT_THAW)
        		return 0;
        	return reinit(udev);
        }

        static struct usb_device_driver thaw_resume_driver = {
        	.name =		"thaw_resume",
        	.suspend =	thaw_resume_suspend,
        	.resume =	thaw_resume_resume,
        };
    """,
    # HID drivers get usbhid's message through hid_driver_suspend().
    "drivers/hid/hid-fake.c": """
        static int fake_hid_suspend(struct hid_device *hdev, pm_message_t message)
        {
        	switch (message.event) {
        	case PM_EVENT_FREEZE:
        		return stop_io(hdev);
        	case PM_EVENT_SUSPEND:
        	case PM_EVENT_HIBERNATE:
        		return power_off(hdev);
        	}
        	return 0;
        }

        static struct hid_driver fake_hid_driver = {
        	.name = "hid-fake",
        	.suspend = fake_hid_suspend,
        };
    """,
    # The USB core's own entry points are audited as "usbcore".
    "drivers/usb/core/driver.c": """
        static void choose_wakeup(struct usb_device *udev, pm_message_t msg)
        {
        	if (msg.event == PM_EVENT_FREEZE || msg.event == PM_EVENT_QUIESCE)
        		udev->do_remote_wakeup = 0;
        }

        int usb_suspend(struct device *dev, pm_message_t msg)
        {
        	choose_wakeup(to_usb_device(dev), msg);
        	return usb_suspend_both(to_usb_device(dev), msg);
        }

        int usb_resume(struct device *dev, pm_message_t msg)
        {
        	return usb_resume_both(to_usb_device(dev), msg);
        }
    """,
    "drivers/base/platform.c": "",
}


def fake_tree(root):
    for path, text in DRIVERS.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    return root


def run(*args):
    return subprocess.run(["/usr/bin/python3", SCRIPT, *args], capture_output=True,
                          text=True, timeout=60)


def table(stdout):
    """Rows of the Markdown table, keyed by file."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[1].endswith(".c"):
            driver, path, bus, events, verdict, why = cells
            rows[path] = dict(driver=driver, bus=bus, events=events, verdict=verdict, why=why)
    return rows


def test_each_class_of_legacy_driver_gets_its_verdict(tmp_path):
    result = run(str(fake_tree(tmp_path)))
    assert result.returncode == 1, result.stderr
    rows = table(result.stdout)
    assert set(rows) == {
        "drivers/misc/only_suspend.c", "drivers/misc/freeze_only.c",
        "drivers/misc/stored.c", "drivers/video/fbdev/i810/i810_main.c",
        "drivers/net/helper_user.c", "drivers/pnp/fake_pnp.c",
        "drivers/usb/misc/auto_only.c", "drivers/usb/misc/freeze_branch.c",
        "drivers/usb/misc/both.c", "drivers/usb/misc/stored_usb.c",
        "drivers/usb/misc/unknown_usb.c", "drivers/usb/misc/thaw_resume.c",
        "drivers/hid/hid-fake.c", "drivers/usb/core/driver.c"}

    assert rows["drivers/misc/only_suspend.c"]["verdict"] == "unaffected"
    assert rows["drivers/misc/only_suspend.c"]["events"] == "SUSPEND"
    assert rows["drivers/misc/only_suspend.c"]["bus"] == "pci"

    # v3 keeps PMSG_FREEZE for legacy platform, PCI and PNP drivers: whatever
    # they test, the message they see is the one they saw before.
    freeze_only = rows["drivers/misc/freeze_only.c"]
    assert (freeze_only["driver"], freeze_only["bus"]) == ("freeze_only", "platform")
    assert freeze_only["verdict"] == "unaffected"
    assert freeze_only["events"] == "FREEZE"
    assert "message unchanged" in freeze_only["why"]

    stored = rows["drivers/misc/stored.c"]
    assert stored["verdict"] == "unaffected"
    assert "message unchanged" in stored["why"]

    i810 = rows["drivers/video/fbdev/i810/i810_main.c"]
    assert i810["verdict"] == "unaffected"
    assert i810["events"] == "FREEZE, QUIESCE"
    assert i810["why"].startswith("v3 keeps PMSG_FREEZE for legacy drivers; ")
    assert "cur_state == FREEZE" in i810["why"]

    helper = rows["drivers/net/helper_user.c"]
    assert helper["verdict"] == "unaffected"
    assert helper["events"] == "FREEZE, QUIESCE"

    pnp = rows["drivers/pnp/fake_pnp.c"]
    assert (pnp["driver"], pnp["bus"], pnp["events"]) == ("fake_pnp", "pnp", "FREEZE")
    assert pnp["verdict"] == "unaffected"
    assert "message unchanged" in pnp["why"]

    # USB interface drivers get PMSG_QUIESCE: each test is evaluated.
    auto_only = rows["drivers/usb/misc/auto_only.c"]
    assert (auto_only["bus"], auto_only["verdict"]) == ("usb", "unaffected")
    assert auto_only["events"] == "IS_AUTO, SLEEP"

    freeze_branch = rows["drivers/usb/misc/freeze_branch.c"]
    assert (freeze_branch["bus"], freeze_branch["verdict"]) == ("usb", "changed")
    assert ("drivers/usb/misc/freeze_branch.c:4 takes another branch for QUIESCE than for FREEZE"
            in freeze_branch["why"])

    assert rows["drivers/usb/misc/both.c"]["verdict"] == "unaffected"

    stored_usb = rows["drivers/usb/misc/stored_usb.c"]
    assert stored_usb["verdict"] == "changed"
    assert ("drivers/usb/misc/stored_usb.c:10 takes another branch for QUIESCE than for FREEZE"
            in stored_usb["why"])

    unknown = rows["drivers/usb/misc/unknown_usb.c"]
    assert unknown["verdict"] == "needs reading"
    assert "drivers/usb/misc/unknown_usb.c:4 compares the event with priv->skip_event" \
        in unknown["why"]

    thaw = rows["drivers/usb/misc/thaw_resume.c"]
    assert (thaw["bus"], thaw["verdict"]) == ("usb-device", "changed")
    assert "drivers/usb/misc/thaw_resume.c:9 takes another branch for RECOVER than for THAW" \
        in thaw["why"]

    core = rows["drivers/usb/core/driver.c"]
    assert (core["driver"], core["bus"], core["verdict"]) == ("usbcore", "usb", "unaffected")
    assert core["events"] == "FREEZE, QUIESCE"

    hid = rows["drivers/hid/hid-fake.c"]
    assert (hid["driver"], hid["bus"], hid["verdict"]) == ("hid-fake", "hid", "changed")
    assert "drivers/hid/hid-fake.c:5 takes another branch for QUIESCE than for FREEZE" \
        in hid["why"]

    assert ("15 drivers with a message-taking ->suspend() scanned (platform 1, pci 5, pnp 1, "
            "usb 6, usb-device 1, usb-serial 0, hid 1); 14 test the event: "
            "4 changed, 9 unaffected, 1 needs reading") in result.stdout
    assert ("audit-legacy-pm: 4 of 14 message-testing legacy drivers change behaviour "
            "(platform 0/1, pci 0/4, pnp 0/1, usb 2/6, usb-device 1/1, usb-serial 0/0, hid 1/1); "
            "1 need reading") in result.stdout


def test_nothing_changed_exits_zero(tmp_path):
    for path in list(DRIVERS):
        if path.startswith(("drivers/usb/", "drivers/hid/")):
            continue
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(DRIVERS[path]))
    result = run(str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "audit-legacy-pm: 0 of 6 message-testing legacy drivers change behaviour" \
        in result.stdout


def test_evidence_names_every_line_that_tests_the_event(tmp_path):
    result = run("--evidence", str(fake_tree(tmp_path)))
    assert result.returncode == 1, result.stderr
    assert "drivers/video/fbdev/i810/i810_main.c:4: store: par->cur_state = mesg.event;" \
        in result.stdout
    assert "drivers/video/fbdev/i810/i810_main.c:7: test: case PM_EVENT_PRETHAW:" \
        in result.stdout
    assert "drivers/video/fbdev/i810/i810_main.c:17: test: if (cur_state == PM_EVENT_FREEZE)" \
        in result.stdout
    assert "lib/shared_helper.c:6: test: case PM_EVENT_QUIESCE:" in result.stdout
    assert ("drivers/usb/misc/thaw_resume.c:9: test: if (msg.event == PM_EVENT_THAW)   "
            "[resume: differs: takes another branch for RECOVER than for THAW]") in result.stdout
    assert ("drivers/usb/core/driver.c:4: test: if (msg.event == PM_EVENT_FREEZE || "
            "msg.event == PM_EVENT_QUIESCE)   [suspend: alike: QUIESCE takes the branch FREEZE "
            "took]") in result.stdout
    assert "drivers/usb/misc/auto_only.c:6: test: if (message.event & PM_EVENT_SLEEP)   " \
        "[suspend: alike" in result.stdout


def test_a_directory_that_is_not_a_kernel_tree_is_named(tmp_path):
    result = run(str(tmp_path))
    assert result.returncode != 0
    assert f"{tmp_path}: not a kernel source tree" in result.stderr
    assert result.stdout == ""


def audited_trees():
    """The 6.1 tree (build/src/linux, which must be there) and the 6.12 one
    when kernel/build has extracted it, at the paths lab.kernels gives them."""
    trees = {"6.1": os.path.join(kernels.resolve("linux-source-6.1", repo=REPO, build_env="").build,
                                 "src", "linux")}
    try:
        build = kernels.resolve("linux-source-6.12", repo=REPO, build_env="").build
    except kernels.KernelSpecError:
        return trees
    if os.path.isdir(os.path.join(build, "src", "linux")):
        trees["6.12"] = os.path.join(build, "src", "linux")
    return trees


@pytest.mark.kernel
def test_no_driver_of_the_real_trees_changes_behaviour():
    for version, tree in audited_trees().items():
        result = run(tree)
        assert result.returncode == 0, f"{version}: {result.stdout[-3000:]}{result.stderr}"
        summary = re.search(r"^audit-legacy-pm: (\d+) of (\d+) message-testing legacy drivers "
                            r"change behaviour \((.*)\)$", result.stdout, re.M)
        assert summary, f"{version}: no summary line"
        assert summary[1] == "0", version
        listed = {bus: (int(changed), int(total)) for bus, changed, total
                  in re.findall(r"([\w-]+) (\d+)/(\d+)", summary[3])}
        assert all(changed == 0 for changed, _ in listed.values()), (version, listed)
        assert listed["usb"][1] > 0 and listed["hid"][1] > 0, (version, listed)
        scanned = re.search(r"^\d+ drivers with a message-taking ->suspend\(\) scanned \((.*)\); "
                            r"\d+ test the event: 0 changed, \d+ unaffected, 0 needs reading$",
                            result.stdout, re.M)
        assert scanned, f"{version}: no scanned line"
        counts = {bus: int(n) for bus, n in re.findall(r"([\w-]+) (\d+)", scanned[1])}
        # No legacy PNP driver of 6.1 or 6.12 tests the event, but they are
        # audited: the legacy pnp_driver and pnp_card_driver ->suspend()s.
        assert counts["pnp"] > 0 and counts["usb"] > 0, (version, counts)
        rows = table(result.stdout)
        core = rows["drivers/usb/core/driver.c"]
        assert (core["driver"], core["verdict"]) == ("usbcore", "unaffected"), version
        assert rows["drivers/usb/core/generic.c"]["verdict"] == "unaffected", version
