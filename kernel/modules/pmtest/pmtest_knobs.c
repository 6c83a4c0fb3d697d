// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_knobs.c - Fault, delay, child and panic knobs; registry of pmtest
 * devices.
 *
 * Knobs are set by writing to /sys/kernel/debug/pmtest/{fault,delay,child,panic}
 * (fields separated by blanks) or, but for panic, with the module parameters
 * of the same names (records separated by ';' or ',', fields by ':'):
 *
 *   fault  <dev|*> <callback> <errno> <count>   return -errno for count calls
 *   delay  <dev|*> <callback> <ms>              wait ms in every call (0: off)
 *   child  <dev> <prepare|suspend> [count]      register a child device in
 *                                               each of the next count (1)
 *                                               such calls
 *   panic  <dev|*> <callback>                   panic() in the next such call
 *
 * Writing "clear" to a file removes all of its knobs; reading it lists them
 * in the syntax they are written in.  Malformed input gives -EINVAL, a device
 * name that is neither "*" nor a bound pmtest device gives -ENODEV, a full
 * table gives -ENOSPC.
 *
 * Callbacks look the knobs up under a spinlock in preallocated tables: they
 * may run in noirq phases.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "pmtest.h"

/* Knobs per table. */
#define PMTEST_KNOB_MAX		32
/* Longest delay accepted, in milliseconds. */
#define PMTEST_DELAY_MAX_MS	60000
/* Longest knob accepted in one debugfs write, NUL included. */
#define PMTEST_KNOB_BUF		128
/* Most fields in a knob. */
#define PMTEST_KNOB_FIELDS	4
/* Most children one child knob registers (past the re-prepare bound). */
#define PMTEST_CHILD_MAX	16

enum pmtest_knob_type {
	PMTEST_KNOB_FAULT,
	PMTEST_KNOB_DELAY,
	PMTEST_KNOB_CHILD,
	PMTEST_KNOB_PANIC,
	PMTEST_NR_KNOB,
};

/**
 * struct pmtest_knob - One knob.
 * @dev: Device name, or "*" for every pmtest device.
 * @cb: Callback (enum pmtest_cb).
 * @val: Fault: negative errno.  Delay: milliseconds.
 * @count: Fault: calls left to fail.  Child: calls left to register a
 *	   child in.
 */
struct pmtest_knob {
	char dev[PMTEST_NAME_LEN];
	int cb;
	int val;
	int count;
};

/**
 * struct pmtest_knob_table - The knobs of one kind.
 * @name: debugfs file and module parameter name.
 * @nfields: Fields of a knob of this kind.
 * @optional: How many of the last fields may be left out.
 * @n: Knobs in use.
 * @e: Knobs, in the order they were first set.
 */
struct pmtest_knob_table {
	const char *name;
	unsigned int nfields;
	unsigned int optional;
	unsigned int n;
	struct pmtest_knob e[PMTEST_KNOB_MAX];
};

static DEFINE_SPINLOCK(pmtest_knob_lock);
static struct pmtest_knob_table pmtest_knobs[PMTEST_NR_KNOB] = {
	[PMTEST_KNOB_FAULT] = { .name = "fault", .nfields = 4 },
	[PMTEST_KNOB_DELAY] = { .name = "delay", .nfields = 3 },
	[PMTEST_KNOB_CHILD] = { .name = "child", .nfields = 3, .optional = 1 },
	[PMTEST_KNOB_PANIC] = { .name = "panic", .nfields = 2 },
};

/**
 * struct pmtest_target - Something knobs may name: a bound pmtest device, or
 * pmtest's syscore_ops.
 * @node: Entry in pmtest_targets.
 * @name: Name knobs use (the device name for a device).
 * @dev: The device, or NULL.
 * @knobs: PMTEST_KNOBS_* bits: the kinds of knob that may name it.
 * @cbs: PMTEST_CB_BIT()s: the callbacks it has.
 */
struct pmtest_target {
	struct list_head node;
	const char *name;
	struct device *dev;
	unsigned int knobs;
	u64 cbs;
};

static LIST_HEAD(pmtest_targets);
static DEFINE_MUTEX(pmtest_targets_lock);

/**
 * pmtest_target_add - Let knobs name a device or pmtest's syscore_ops.
 * @name: Name knobs use; must stay valid until pmtest_target_del().
 * @dev: The device, or NULL.
 * @knobs: PMTEST_KNOBS_* bits: the kinds of knob that may name it.
 * @cbs: PMTEST_CB_BIT()s: the callbacks it has.  A knob naming another
 *	 callback for it is refused with -EINVAL.
 */
int pmtest_target_add(const char *name, struct device *dev,
		      unsigned int knobs, u64 cbs)
{
	struct pmtest_target *tg;

	tg = kzalloc(sizeof(*tg), GFP_KERNEL);
	if (!tg)
		return -ENOMEM;

	tg->name = name;
	tg->dev = dev;
	tg->knobs = knobs;
	tg->cbs = cbs;

	mutex_lock(&pmtest_targets_lock);
	list_add_tail(&tg->node, &pmtest_targets);
	mutex_unlock(&pmtest_targets_lock);

	return 0;
}

/**
 * pmtest_dev_add - Let knobs name a device of the platform trees or edu.
 * @dev: Device, bound to a pmtest driver.
 * @can_parent: The "child" knob may register children under @dev.
 *
 * Every dev_pm_ops callback may be named, including the ones the driver
 * lacks (quiesce* on pmtest_compat, say): those knobs never fire.
 */
int pmtest_dev_add(struct device *dev, bool can_parent)
{
	return pmtest_target_add(dev_name(dev), dev, PMTEST_KNOBS_DEVICE |
				 (can_parent ? PMTEST_KNOBS_CHILD : 0),
				 PMTEST_CBS_DEV_PM);
}

/**
 * pmtest_target_del - Forget a target added with pmtest_target_add().
 * @name: Its name.
 */
void pmtest_target_del(const char *name)
{
	struct pmtest_target *tg, *tmp;

	mutex_lock(&pmtest_targets_lock);
	list_for_each_entry_safe(tg, tmp, &pmtest_targets, node) {
		if (!strcmp(tg->name, name)) {
			list_del(&tg->node);
			kfree(tg);
			break;
		}
	}
	mutex_unlock(&pmtest_targets_lock);
}

/**
 * pmtest_dev_del - Forget a device added with pmtest_dev_add() or
 * pmtest_target_add().
 * @dev: Device.
 */
void pmtest_dev_del(struct device *dev)
{
	pmtest_target_del(dev_name(dev));
}

/*
 * 0 if a knob of kind @type may name @name for @cb; -ENODEV if there is no
 * such target; -EINVAL if there is one, but this kind of knob may not name
 * it (a child knob on a device that cannot be a parent, any knob but fault
 * on the syscore_ops) or it has no callback @cb.
 */
static int pmtest_target_check(const char *name, unsigned int type,
			       enum pmtest_cb cb)
{
	struct pmtest_target *tg;
	int ret = -ENODEV;

	mutex_lock(&pmtest_targets_lock);
	list_for_each_entry(tg, &pmtest_targets, node) {
		if (!strcmp(tg->name, name)) {
			ret = (tg->knobs & BIT(type)) &&
			      (tg->cbs & PMTEST_CB_BIT(cb)) ? 0 : -EINVAL;
			break;
		}
	}
	mutex_unlock(&pmtest_targets_lock);

	return ret;
}

/* Index of the first knob in @t for @dev and @cb, or -1.  Lock held. */
static int pmtest_knob_find(struct pmtest_knob_table *t, const char *name,
			    enum pmtest_cb cb)
{
	unsigned int i;

	for (i = 0; i < t->n; i++) {
		if (t->e[i].cb == cb &&
		    (!strcmp(t->e[i].dev, "*") || !strcmp(t->e[i].dev, name)))
			return i;
	}

	return -1;
}

/* Remove knob @i of @t, keeping the order of the others.  Lock held. */
static void pmtest_knob_remove(struct pmtest_knob_table *t, unsigned int i)
{
	memmove(&t->e[i], &t->e[i + 1], (t->n - i - 1) * sizeof(t->e[0]));
	t->n--;
}

/**
 * pmtest_knob_delay - Delay set for a callback.
 * @name: Target whose callback runs (device name, or a pmtest_target_add()
 *	  name).
 * @cb: Callback.
 *
 * Return: milliseconds to wait, 0 for none.
 */
unsigned int pmtest_knob_delay(const char *name, enum pmtest_cb cb)
{
	struct pmtest_knob_table *t = &pmtest_knobs[PMTEST_KNOB_DELAY];
	unsigned int ms = 0;
	unsigned long flags;
	int i;

	spin_lock_irqsave(&pmtest_knob_lock, flags);
	i = pmtest_knob_find(t, name, cb);
	if (i >= 0)
		ms = t->e[i].val;
	spin_unlock_irqrestore(&pmtest_knob_lock, flags);

	return ms;
}

/*
 * Consume one call of a knob of kind @type for @name and @cb, if there is
 * one (panic knobs have one, child knobs their count).
 */
static bool pmtest_knob_take(enum pmtest_knob_type type, const char *name,
			     enum pmtest_cb cb)
{
	struct pmtest_knob_table *t = &pmtest_knobs[type];
	unsigned long flags;
	int i;

	spin_lock_irqsave(&pmtest_knob_lock, flags);
	i = pmtest_knob_find(t, name, cb);
	if (i >= 0 && --t->e[i].count <= 0)
		pmtest_knob_remove(t, i);
	spin_unlock_irqrestore(&pmtest_knob_lock, flags);

	return i >= 0;
}

/**
 * pmtest_knob_child - Consume a "child" knob for a callback.
 * @name: Target whose callback runs.
 * @cb: Callback.
 *
 * Return: true if the callback must register a child device under @dev.
 */
bool pmtest_knob_child(const char *name, enum pmtest_cb cb)
{
	return pmtest_knob_take(PMTEST_KNOB_CHILD, name, cb);
}

/**
 * pmtest_knob_panic - Consume a "panic" knob for a callback.
 * @name: Target whose callback runs.
 * @cb: Callback.
 *
 * Return: true if the callback must panic the kernel.
 */
bool pmtest_knob_panic(const char *name, enum pmtest_cb cb)
{
	return pmtest_knob_take(PMTEST_KNOB_PANIC, name, cb);
}

/**
 * pmtest_knob_fault - Consume one call of a "fault" knob for a callback.
 * @name: Target whose callback runs.
 * @cb: Callback.
 *
 * Return: the negative errno the callback must return, or 0.
 */
int pmtest_knob_fault(const char *name, enum pmtest_cb cb)
{
	struct pmtest_knob_table *t = &pmtest_knobs[PMTEST_KNOB_FAULT];
	unsigned long flags;
	int i, ret = 0;

	spin_lock_irqsave(&pmtest_knob_lock, flags);
	i = pmtest_knob_find(t, name, cb);
	if (i >= 0) {
		ret = t->e[i].val;
		if (--t->e[i].count <= 0)
			pmtest_knob_remove(t, i);
	}
	spin_unlock_irqrestore(&pmtest_knob_lock, flags);

	return ret;
}

/* Set, replace or (delay of 0 ms) remove the knob keyed by k->dev, k->cb. */
static int pmtest_knob_store(struct pmtest_knob_table *t,
			     const struct pmtest_knob *k, bool remove)
{
	unsigned long flags;
	unsigned int i;
	int ret = 0;

	spin_lock_irqsave(&pmtest_knob_lock, flags);
	for (i = 0; i < t->n; i++) {
		if (t->e[i].cb == k->cb && !strcmp(t->e[i].dev, k->dev))
			break;
	}

	if (remove) {
		if (i < t->n)
			pmtest_knob_remove(t, i);
	} else if (i < t->n) {
		t->e[i] = *k;
	} else if (t->n < PMTEST_KNOB_MAX) {
		t->e[t->n++] = *k;
	} else {
		ret = -ENOSPC;
	}
	spin_unlock_irqrestore(&pmtest_knob_lock, flags);

	return ret;
}

static void pmtest_knob_clear(struct pmtest_knob_table *t)
{
	unsigned long flags;

	spin_lock_irqsave(&pmtest_knob_lock, flags);
	t->n = 0;
	spin_unlock_irqrestore(&pmtest_knob_lock, flags);
}

/*
 * Check the @nf fields @f of a knob of kind @type (t->nfields of them, or
 * fewer by at most t->optional; none empty) and set it.
 */
static int pmtest_knob_set(enum pmtest_knob_type type, char **f,
			   unsigned int nf)
{
	struct pmtest_knob_table *t = &pmtest_knobs[type];
	struct pmtest_knob k = {};
	bool remove = false;
	unsigned int ms;
	int cb, ret;

	if (strscpy(k.dev, f[0], sizeof(k.dev)) < 0)
		return -EINVAL;

	cb = pmtest_cb_parse(f[1]);
	if (cb < 0)
		return -EINVAL;
	k.cb = cb;

	switch (type) {
	case PMTEST_KNOB_FAULT:
		/* these return void */
		if (cb == PMTEST_CB_COMPLETE || cb == PMTEST_CB_SYSCORE_RESUME)
			return -EINVAL;
		if (kstrtoint(f[2], 0, &k.val) ||
		    k.val == 0 || k.val < -MAX_ERRNO || k.val > MAX_ERRNO)
			return -EINVAL;
		k.val = -abs(k.val);
		if (kstrtoint(f[3], 0, &k.count) || k.count < 1)
			return -EINVAL;
		break;
	case PMTEST_KNOB_DELAY:
		if (kstrtouint(f[2], 0, &ms) || ms > PMTEST_DELAY_MAX_MS)
			return -EINVAL;
		k.val = ms;
		remove = !ms;
		break;
	case PMTEST_KNOB_CHILD:
		if (cb != PMTEST_CB_PREPARE && cb != PMTEST_CB_SUSPEND)
			return -EINVAL;
		if (!strcmp(k.dev, "*"))
			return -EINVAL;
		k.count = 1;
		if (nf > 2 && (kstrtoint(f[2], 0, &k.count) || k.count < 1 ||
			       k.count > PMTEST_CHILD_MAX))
			return -EINVAL;
		break;
	case PMTEST_KNOB_PANIC:
		break;
	default:
		return -EINVAL;
	}

	if (strcmp(k.dev, "*")) {
		ret = pmtest_target_check(k.dev, type, cb);
		if (ret)
			return ret;
	}

	return pmtest_knob_store(t, &k, remove);
}

/*
 * Split @s at blanks into @nf fields, or fewer by at most @optional.
 * Return: the number of fields, or -EINVAL.
 */
static int pmtest_split_blanks(char *s, char **f, unsigned int nf,
			       unsigned int optional)
{
	unsigned int n = 0;
	char *tok;

	while ((tok = strsep(&s, " \t\n")) != NULL) {
		if (!*tok)
			continue;
		if (n == nf)
			return -EINVAL;
		f[n++] = tok;
	}

	return n + optional >= nf ? n : -EINVAL;
}

/*
 * Fields of a parameter record of a kind with an optional last field: all
 * of them if the last one is a number (a count), else one fewer.
 */
static unsigned int pmtest_param_fields(const char *rec,
					const struct pmtest_knob_table *t)
{
	const char *c = strrchr(rec, ':');

	if (!t->optional || (c && c[1] && strspn(c + 1, "0123456789") ==
			     strlen(c + 1)))
		return t->nfields;

	return t->nfields - t->optional;
}

/*
 * Split @s into exactly @nf non-empty fields at its last @nf - 1 colons, so
 * that the device name (first field) may itself hold colons, as PCI device
 * names do.
 */
static int pmtest_split_colons(char *s, char **f, unsigned int nf)
{
	unsigned int i;
	char *c;

	for (i = nf - 1; i > 0; i--) {
		c = strrchr(s, ':');
		if (!c)
			return -EINVAL;
		*c = '\0';
		f[i] = c + 1;
	}
	f[0] = s;

	for (i = 0; i < nf; i++) {
		if (!*f[i])
			return -EINVAL;
	}

	return 0;
}

/*
 * Set the knobs of a module parameter: records separated by ';' or ',',
 * fields by ':'.  Stops at the first bad record.
 */
static int pmtest_knob_param(enum pmtest_knob_type type, const char *param)
{
	char *f[PMTEST_KNOB_FIELDS];
	char *buf, *s, *rec;
	unsigned int nf;
	size_t len;
	int ret = 0;

	if (!param || !*param)
		return 0;

	buf = kstrdup(param, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;

	s = buf;
	while ((rec = strsep(&s, ";,")) != NULL) {
		rec = strim(rec);
		len = strlen(rec);
		if (!len)
			continue;
		nf = pmtest_param_fields(rec, &pmtest_knobs[type]);
		ret = pmtest_split_colons(rec, f, nf);
		if (!ret)
			ret = pmtest_knob_set(type, f, nf);
		if (ret) {
			/* Fields are split in place: quote the parameter. */
			pr_err("%s=: bad record \"%.*s\": %d\n",
			       pmtest_knobs[type].name, (int)len,
			       param + (rec - buf), ret);
			break;
		}
	}
	kfree(buf);

	return ret;
}

static int pmtest_knob_show(struct seq_file *m, void *v)
{
	struct pmtest_knob_table *t = m->private;
	enum pmtest_knob_type type = t - pmtest_knobs;
	struct pmtest_knob *k;
	unsigned long flags;
	unsigned int i;

	spin_lock_irqsave(&pmtest_knob_lock, flags);
	for (i = 0; i < t->n; i++) {
		k = &t->e[i];
		seq_printf(m, "%s %s", k->dev, pmtest_cb_name(k->cb));
		if (type == PMTEST_KNOB_FAULT)
			seq_printf(m, " %d %d", k->val, k->count);
		else if (type == PMTEST_KNOB_DELAY)
			seq_printf(m, " %d", k->val);
		else if (type == PMTEST_KNOB_CHILD)
			seq_printf(m, " %d", k->count);
		seq_putc(m, '\n');
	}
	spin_unlock_irqrestore(&pmtest_knob_lock, flags);

	return 0;
}

static int pmtest_knob_open(struct inode *inode, struct file *file)
{
	return single_open(file, pmtest_knob_show, inode->i_private);
}

static ssize_t pmtest_knob_write(struct file *file, const char __user *ubuf,
				 size_t count, loff_t *ppos)
{
	struct pmtest_knob_table *t = file_inode(file)->i_private;
	enum pmtest_knob_type type = t - pmtest_knobs;
	char *f[PMTEST_KNOB_FIELDS];
	char buf[PMTEST_KNOB_BUF];
	char *s;
	int ret;

	if (count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';

	s = strim(buf);
	if (!strcmp(s, "clear")) {
		pmtest_knob_clear(t);
		return count;
	}

	ret = pmtest_split_blanks(s, f, t->nfields, t->optional);
	if (ret >= 0)
		ret = pmtest_knob_set(type, f, ret);

	return ret ? ret : count;
}

static const struct file_operations pmtest_knob_fops = {
	.owner = THIS_MODULE,
	.open = pmtest_knob_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.write = pmtest_knob_write,
	.release = single_release,
};

/**
 * pmtest_knobs_init - Create the knob files and set the knob parameters.
 * @root: pmtest's debugfs directory.
 * @fault: Value of the "fault" module parameter, or NULL.
 * @delay: Value of the "delay" module parameter, or NULL.
 * @child: Value of the "child" module parameter, or NULL.
 *
 * Call once the devices the parameters name are bound.
 *
 * Return: 0, or the error of the first bad record (-EINVAL, -ENODEV, ...).
 */
int pmtest_knobs_init(struct dentry *root, const char *fault,
		      const char *delay, const char *child)
{
	const char *params[PMTEST_NR_KNOB] = {
		[PMTEST_KNOB_FAULT] = fault,
		[PMTEST_KNOB_DELAY] = delay,
		[PMTEST_KNOB_CHILD] = child,
	};
	int type, ret;

	for (type = 0; type < PMTEST_NR_KNOB; type++) {
		ret = pmtest_knob_param(type, params[type]);
		if (ret)
			return ret;
	}

	for (type = 0; type < PMTEST_NR_KNOB; type++)
		debugfs_create_file(pmtest_knobs[type].name, 0644, root,
				    &pmtest_knobs[type], &pmtest_knob_fops);

	return 0;
}
