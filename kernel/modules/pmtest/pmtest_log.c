// SPDX-License-Identifier: GPL-2.0
/*
 * pmtest_log.c - Bounded log of PM callback invocations.
 *
 * Each record is kept in a preallocated ring (no allocation in callbacks,
 * which may run in noirq phases), emitted as the trace event
 * pmtest:pmtest_callback and, with log_console=1, printed with pr_info().
 * /sys/kernel/debug/pmtest/log prints the ring, one line per record:
 *
 *   pmtest: seq=<n> t=<ns> dev=<dev_name> cb=<callback> event=<event> ret=<int>
 *
 * preceded by "pmtest: dropped=<n>" when older records were overwritten.
 * Writing anything to the file clears the ring; seq keeps counting.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/overflow.h>
#include <linux/seq_file.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/trace_clock.h>
#include <linux/vmalloc.h>

#include "pmtest.h"

#define CREATE_TRACE_POINTS
#include "pmtest_trace.h"

/* Number of records kept; a power of two. */
#define PMTEST_LOG_SIZE		4096

struct pmtest_rec {
	u64 seq;
	u64 t;
	int event;
	int ret;
	u8 cb;
	char dev[PMTEST_NAME_LEN];
};

/* A copy of the ring taken when the log file is opened for reading. */
struct pmtest_log_snap {
	u64 dropped;
	unsigned int n;
	struct pmtest_rec recs[];
};

static DEFINE_SPINLOCK(pmtest_log_lock);
static struct pmtest_rec *pmtest_ring;
/* Records [pmtest_first_seq, pmtest_next_seq) are in the ring. */
static u64 pmtest_next_seq = 1;
static u64 pmtest_first_seq = 1;
static u64 pmtest_dropped;

bool pmtest_log_console;

/**
 * pmtest_log - Append a record to the callback log.
 * @dev: Name of the device.
 * @cb: Callback that ran.
 * @event: PM event of the callback (PM_EVENT_* or PMTEST_EVENT_NONE).
 * @ret: Value the callback returned.
 *
 * Safe in any context: takes a spinlock with interrupts off and allocates
 * nothing.  When the ring is full the oldest record is dropped.
 */
void pmtest_log(const char *dev, enum pmtest_cb cb, int event, int ret)
{
	const char *cb_name = pmtest_cb_name(cb);
	const char *ev_name = pmtest_event_name(event);
	struct pmtest_rec *rec;
	unsigned long flags;
	u64 seq, t;

	spin_lock_irqsave(&pmtest_log_lock, flags);
	seq = pmtest_next_seq++;
	/* The trace buffer's default clock: records line up with its events. */
	t = trace_clock_local();
	if (pmtest_ring) {
		if (seq - pmtest_first_seq >= PMTEST_LOG_SIZE) {
			pmtest_first_seq++;
			pmtest_dropped++;
		}
		rec = &pmtest_ring[seq & (PMTEST_LOG_SIZE - 1)];
		rec->seq = seq;
		rec->t = t;
		rec->event = event;
		rec->ret = ret;
		rec->cb = cb;
		strscpy(rec->dev, dev, sizeof(rec->dev));
	}
	spin_unlock_irqrestore(&pmtest_log_lock, flags);

	trace_pmtest_callback(seq, t, dev, cb_name, ev_name, ret);

	if (READ_ONCE(pmtest_log_console))
		pr_info("seq=%llu t=%llu dev=%s cb=%s event=%s ret=%d\n",
			seq, t, dev, cb_name, ev_name, ret);
}

static void *pmtest_log_start(struct seq_file *m, loff_t *pos)
{
	struct pmtest_log_snap *snap = m->private;

	if (!snap)
		return NULL;
	if (*pos == 0)
		return SEQ_START_TOKEN;
	if (*pos > snap->n)
		return NULL;

	return &snap->recs[*pos - 1];
}

static void *pmtest_log_next(struct seq_file *m, void *v, loff_t *pos)
{
	++*pos;

	return pmtest_log_start(m, pos);
}

static void pmtest_log_stop(struct seq_file *m, void *v)
{
}

static int pmtest_log_show(struct seq_file *m, void *v)
{
	struct pmtest_log_snap *snap = m->private;
	struct pmtest_rec *rec = v;

	if (v == SEQ_START_TOKEN) {
		if (snap->dropped)
			seq_printf(m, "pmtest: dropped=%llu\n", snap->dropped);
		return 0;
	}

	seq_printf(m, "pmtest: seq=%llu t=%llu dev=%s cb=%s event=%s ret=%d\n",
		   rec->seq, rec->t, rec->dev, pmtest_cb_name(rec->cb),
		   pmtest_event_name(rec->event), rec->ret);

	return 0;
}

static const struct seq_operations pmtest_log_seq_ops = {
	.start = pmtest_log_start,
	.next = pmtest_log_next,
	.stop = pmtest_log_stop,
	.show = pmtest_log_show,
};

static int pmtest_log_open(struct inode *inode, struct file *file)
{
	struct pmtest_log_snap *snap = NULL;
	unsigned long flags;
	u64 seq;
	int ret;

	if (file->f_mode & FMODE_READ) {
		snap = kvmalloc(struct_size(snap, recs, PMTEST_LOG_SIZE),
				GFP_KERNEL);
		if (!snap)
			return -ENOMEM;

		spin_lock_irqsave(&pmtest_log_lock, flags);
		snap->dropped = pmtest_dropped;
		snap->n = 0;
		for (seq = pmtest_first_seq;
		     pmtest_ring && seq < pmtest_next_seq; seq++)
			snap->recs[snap->n++] =
				pmtest_ring[seq & (PMTEST_LOG_SIZE - 1)];
		spin_unlock_irqrestore(&pmtest_log_lock, flags);
	}

	ret = seq_open(file, &pmtest_log_seq_ops);
	if (ret) {
		kvfree(snap);
		return ret;
	}
	((struct seq_file *)file->private_data)->private = snap;

	return 0;
}

static int pmtest_log_release(struct inode *inode, struct file *file)
{
	kvfree(((struct seq_file *)file->private_data)->private);

	return seq_release(inode, file);
}

static ssize_t pmtest_log_write(struct file *file, const char __user *buf,
				size_t count, loff_t *ppos)
{
	unsigned long flags;

	spin_lock_irqsave(&pmtest_log_lock, flags);
	pmtest_first_seq = pmtest_next_seq;
	pmtest_dropped = 0;
	spin_unlock_irqrestore(&pmtest_log_lock, flags);

	return count;
}

static const struct file_operations pmtest_log_fops = {
	.owner = THIS_MODULE,
	.open = pmtest_log_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.write = pmtest_log_write,
	.release = pmtest_log_release,
};

/**
 * pmtest_log_init - Allocate the ring and create debugfs "log".
 * @root: pmtest's debugfs directory.
 */
int pmtest_log_init(struct dentry *root)
{
	struct pmtest_rec *ring;
	unsigned long flags;

	ring = vcalloc(PMTEST_LOG_SIZE, sizeof(*ring));
	if (!ring)
		return -ENOMEM;

	spin_lock_irqsave(&pmtest_log_lock, flags);
	pmtest_ring = ring;
	spin_unlock_irqrestore(&pmtest_log_lock, flags);

	debugfs_create_file("log", 0644, root, NULL, &pmtest_log_fops);

	return 0;
}

/**
 * pmtest_log_exit - Free the ring.
 *
 * Call after debugfs "log" is gone and no pmtest device is left.
 */
void pmtest_log_exit(void)
{
	struct pmtest_rec *ring;
	unsigned long flags;

	spin_lock_irqsave(&pmtest_log_lock, flags);
	ring = pmtest_ring;
	pmtest_ring = NULL;
	spin_unlock_irqrestore(&pmtest_log_lock, flags);

	vfree(ring);
}
