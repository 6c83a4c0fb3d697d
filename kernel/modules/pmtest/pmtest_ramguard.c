// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_ramguard.c - Catch firmware that changes the OS's RAM across S3.
 *
 * On a resume from suspend-to-RAM the platform firmware runs before the
 * kernel's waking vector.  It must leave alone every page its memory map
 * gave the OS as usable RAM.  Debian 12's OVMF (2022.11) does not: it
 * clears its work area at 0x808000 on every S3 resume, a page its E820 map
 * reports usable, so whatever the kernel keeps there (a user process's
 * text, say) is silently damaged.  A crash some time later is all that
 * shows.
 *
 * This module copies the System RAM pages of one physical range when the
 * machine goes to sleep through the firmware, and compares them when it is
 * back: syscore_suspend() and syscore_resume() run on one CPU with
 * interrupts off, right before the platform sleeps and right after it woke,
 * so the kernel itself writes nothing there in between.  Every page that
 * changed is reported with pr_err(), the first bytes before and after:
 *
 *   pmtest_ramguard: firmware changed RAM across S3: page 0x808000,
 *   23 bytes, first at +0x0: 7c ec 0b 00 ... -> 00 ec 0b 00 ...
 *
 * (one line in the log).
 *
 * Pages the memory map reserves (e.g. by memmap=nn$ss) are not System RAM
 * and are not compared.  The kernel's own suspend path (the other syscore
 * callbacks, the sleeping task's stack) also writes RAM between the two
 * calls, so the range must be one it leaves alone: OVMF's SEC/PEI window
 * (0x800000, 1 MiB) is, on a 512 MiB guest, and all of the first 16 MiB is
 * not.  Parameters (busybox insmod reads no command line: guest/init passes
 * pmtest_ramguard.<param>= words):
 *
 *   start  first byte of the range (default 0x800000)
 *   size   bytes (default 0: the guard is off)
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/ioport.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/suspend.h>
#include <linux/syscore_ops.h>
#include <linux/vmalloc.h>

/* See pmtest_syscore.c: 6.12's syscore_ops take a data pointer. */
#ifdef PMTEST_SYSCORE_HAS_DATA
#define RAMGUARD_SYSCORE_ARGS	void *data
#else
#define RAMGUARD_SYSCORE_ARGS	void
#endif

/* Changed pages reported one by one; more are only counted. */
#define RAMGUARD_MAX_REPORTED	16
/* Bytes shown before and after, from the first changed one. */
#define RAMGUARD_SHOWN		16

static unsigned long start = 0x800000;
module_param(start, ulong, 0444);
MODULE_PARM_DESC(start, "Physical address of the guarded range (default 0x800000)");

static unsigned long size;
module_param(size, ulong, 0444);
MODULE_PARM_DESC(size, "Bytes of the guarded range (default 0: off)");

static unsigned long *ramguard_pfns;	/* the System RAM pages of the range */
static unsigned int ramguard_pages;
static void *ramguard_copy;		/* their contents at suspend */
static bool ramguard_armed;		/* a copy was taken for this sleep */

static int ramguard_suspend(RAMGUARD_SYSCORE_ARGS)
{
	unsigned int i;

	/* Only the firmware's S3 path: not s2idle, pm_test or hibernation. */
	ramguard_armed = pm_suspend_target_state == PM_SUSPEND_MEM &&
			 pm_suspend_via_firmware();
	if (!ramguard_armed)
		return 0;
	for (i = 0; i < ramguard_pages; i++)
		memcpy(ramguard_copy + i * PAGE_SIZE,
		       pfn_to_kaddr(ramguard_pfns[i]), PAGE_SIZE);
	return 0;
}

static void ramguard_report(unsigned long pfn, const u8 *before,
			    const u8 *after)
{
	unsigned int first = PAGE_SIZE, changed = 0, i, shown;

	for (i = 0; i < PAGE_SIZE; i++) {
		if (before[i] == after[i])
			continue;
		changed++;
		if (first == PAGE_SIZE)
			first = i;
	}
	shown = min_t(unsigned int, RAMGUARD_SHOWN, PAGE_SIZE - first);
	pr_err("firmware changed RAM across S3: page %#llx, %u bytes, first at +%#x: %*ph -> %*ph\n",
	       (unsigned long long)PFN_PHYS(pfn), changed, first,
	       shown, before + first, shown, after + first);
}

static void ramguard_resume(RAMGUARD_SYSCORE_ARGS)
{
	unsigned int i, changed = 0;

	if (!ramguard_armed)
		return;
	ramguard_armed = false;
	for (i = 0; i < ramguard_pages; i++) {
		const u8 *before = ramguard_copy + i * PAGE_SIZE;
		const u8 *after = pfn_to_kaddr(ramguard_pfns[i]);

		if (!memcmp(before, after, PAGE_SIZE))
			continue;
		if (changed++ < RAMGUARD_MAX_REPORTED)
			ramguard_report(ramguard_pfns[i], before, after);
	}
	if (changed > RAMGUARD_MAX_REPORTED)
		pr_err("firmware changed RAM across S3: %u pages in all\n",
		       changed);
}

static struct syscore_ops ramguard_syscore_ops = {
	.suspend = ramguard_suspend,
	.resume = ramguard_resume,
};

#ifdef PMTEST_SYSCORE_HAS_DATA
static struct syscore ramguard_syscore = {
	.ops = &ramguard_syscore_ops,
};

static void ramguard_register(void)
{
	register_syscore(&ramguard_syscore);
}

static void ramguard_unregister(void)
{
	unregister_syscore(&ramguard_syscore);
}
#else
static void ramguard_register(void)
{
	register_syscore_ops(&ramguard_syscore_ops);
}

static void ramguard_unregister(void)
{
	unregister_syscore_ops(&ramguard_syscore_ops);
}
#endif

static int __init ramguard_init(void)
{
	unsigned long pfn, first = PHYS_PFN(start);
	unsigned long end = PHYS_PFN(start + size);

	if (!size)
		return 0;
	ramguard_pfns = kcalloc(end - first, sizeof(*ramguard_pfns), GFP_KERNEL);
	if (!ramguard_pfns)
		return -ENOMEM;
	/* Only the pages the memory map gives the OS (all in the direct map). */
	for (pfn = first; pfn < end; pfn++)
		if (region_intersects(PFN_PHYS(pfn), PAGE_SIZE,
				      IORESOURCE_SYSTEM_RAM,
				      IORES_DESC_NONE) == REGION_INTERSECTS)
			ramguard_pfns[ramguard_pages++] = pfn;
	ramguard_copy = vmalloc(array_size(ramguard_pages, PAGE_SIZE));
	if (!ramguard_copy) {
		kfree(ramguard_pfns);
		return -ENOMEM;
	}
	ramguard_register();
	pr_info("guarding %u RAM pages in %#lx-%#lx across S3\n",
		ramguard_pages, start, start + size - 1);
	return 0;
}

static void __exit ramguard_exit(void)
{
	if (!size)
		return;
	ramguard_unregister();
	vfree(ramguard_copy);
	kfree(ramguard_pfns);
}

module_init(ramguard_init);
module_exit(ramguard_exit);
MODULE_DESCRIPTION("pmtest: firmware that changes the OS's RAM across S3");
MODULE_LICENSE("GPL");
