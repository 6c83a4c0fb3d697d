/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pmtest_trace.h - Trace event pmtest:pmtest_callback, one per log record.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM pmtest

#if !defined(_PMTEST_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _PMTEST_TRACE_H

#include <linux/tracepoint.h>

/*
 * __assign_str() lost its source argument once __string() started to record
 * it (Kbuild defines PMTEST_ASSIGN_STR_DST_ONLY from the kernel's definition).
 */
#ifndef pmtest_assign_str
#ifdef PMTEST_ASSIGN_STR_DST_ONLY
#define pmtest_assign_str(dst, src)	__assign_str(dst)
#else
#define pmtest_assign_str(dst, src)	__assign_str(dst, src)
#endif
#endif

TRACE_EVENT(pmtest_callback,
	    TP_PROTO(u64 seq, u64 t, const char *dev, const char *cb,
		     const char *event, int ret),
	    TP_ARGS(seq, t, dev, cb, event, ret),
	    TP_STRUCT__entry(__field(u64, seq)
			     __field(u64, t)
			     __string(dev, dev)
			     __string(cb, cb)
			     __string(event, event)
			     __field(int, ret)),
	    TP_fast_assign(__entry->seq = seq;
			   __entry->t = t;
			   pmtest_assign_str(dev, dev);
			   pmtest_assign_str(cb, cb);
			   pmtest_assign_str(event, event);
			   __entry->ret = ret;),
	    TP_printk("seq=%llu t=%llu dev=%s cb=%s event=%s ret=%d",
		      (unsigned long long)__entry->seq,
		      (unsigned long long)__entry->t,
		      __get_str(dev), __get_str(cb), __get_str(event),
		      __entry->ret)
);

#endif /* _PMTEST_TRACE_H */

/* This part must be outside protection */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE pmtest_trace
#include <trace/define_trace.h>
