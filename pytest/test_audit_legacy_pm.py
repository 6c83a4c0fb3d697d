"""kernel/audit-legacy-pm on a small fake kernel tree written for each test."""
import os
import subprocess
import textwrap

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
    assert result.returncode == 0, result.stderr
    rows = table(result.stdout)
    assert set(rows) == {
        "drivers/misc/only_suspend.c", "drivers/misc/freeze_only.c",
        "drivers/misc/stored.c", "drivers/video/fbdev/i810/i810_main.c",
        "drivers/net/helper_user.c"}

    assert rows["drivers/misc/only_suspend.c"]["verdict"] == "unaffected"
    assert rows["drivers/misc/only_suspend.c"]["events"] == "SUSPEND"
    assert rows["drivers/misc/only_suspend.c"]["bus"] == "pci"

    freeze_only = rows["drivers/misc/freeze_only.c"]
    assert (freeze_only["driver"], freeze_only["bus"]) == ("freeze_only", "platform")
    assert freeze_only["verdict"] == "changed"
    assert "drivers/misc/freeze_only.c:5 tests FREEZE without QUIESCE" in freeze_only["why"]

    assert rows["drivers/misc/stored.c"]["verdict"] == "needs reading"
    assert "drivers/misc/stored.c:4" in rows["drivers/misc/stored.c"]["why"]

    i810 = rows["drivers/video/fbdev/i810/i810_main.c"]
    assert i810["verdict"] == "changed"
    assert i810["events"] == "FREEZE, QUIESCE"
    assert "cur_state == FREEZE" in i810["why"]

    helper = rows["drivers/net/helper_user.c"]
    assert helper["verdict"] == "unaffected"
    assert helper["events"] == "FREEZE, QUIESCE"

    assert ("6 legacy pci/platform drivers scanned; 5 test the event: "
            "2 changed, 2 unaffected, 1 needs reading") in result.stdout


def test_evidence_names_every_line_that_tests_the_event(tmp_path):
    result = run("--evidence", str(fake_tree(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "drivers/video/fbdev/i810/i810_main.c:4: store: par->cur_state = mesg.event;" \
        in result.stdout
    assert "drivers/video/fbdev/i810/i810_main.c:7: test: case PM_EVENT_PRETHAW:" \
        in result.stdout
    assert "drivers/video/fbdev/i810/i810_main.c:17: test: if (cur_state == PM_EVENT_FREEZE)" \
        in result.stdout
    assert "lib/shared_helper.c:6: test: case PM_EVENT_QUIESCE:" in result.stdout


def test_a_directory_that_is_not_a_kernel_tree_is_named(tmp_path):
    result = run(str(tmp_path))
    assert result.returncode != 0
    assert f"{tmp_path}: not a kernel source tree" in result.stderr
    assert result.stdout == ""
