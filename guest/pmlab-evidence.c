// SPDX-License-Identifier: GPL-2.0
/*
 * pmlab-evidence: what a cycle's report carries, gathered by one process.
 *
 *   pmlab-evidence SECTION=SOURCE...
 *
 * writes "=== SECTION\n" and then SOURCE for each argument, in order:
 *   snapshot     "path:value" lines of the files in /sys/power/suspend_stats and of
 *                every wakeup source's name and event_count (the first line
 *                of each file; empty and unreadable files left out)
 *   trace-pages  the trace buffer, emptied, in the ring buffer's own pages
 *   kmsg         the kernel log, cleared, as `dmesg -c` prints it
 *   file:PATH    PATH's contents; the section is left out when PATH cannot
 *                be opened (e.g. no pmtest module)
 *
 * Under TCG every process a cycle starts costs ~7 ms of guest time: a shell
 * loop over sysfs, `dmesg -c`, `cat` and the trace reader were four of them
 * after every sleep (lab/README.md, Numbers).
 *
 * trace-pages: `cat trace` makes the kernel format every event as text, ~40
 * us an event under TCG. trace_pipe_raw hands over the pages as they are.
 * What the host needs to decode them (lab/trace_raw.py) is copied
 * alongside: the enabled events' format files, ftrace's print event (trace
 * markers), printk_formats (suspend_resume's action is a pointer to a
 * tracepoint string) and saved_cmdlines (the task names `trace` would show).
 * Each item is a header line and exactly <n> bytes:
 *   "pmlab-traceraw 1\n"
 *   "file <name> <n>\n" <contents>      format files and tables
 *   "page <cpu> <n>\n" <page>           ring buffer pages, oldest first per CPU
 *   "end\n"
 * The reads consume the buffer, as `: >trace` cleared it before.
 *
 * A source that fails says why on stderr and the program exits 1 after the
 * remaining sections: the report is still written, and lab/guest_report.py
 * names the broken section.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/klog.h>
#include <unistd.h>

#include "pmlab-write.h"

#define TRACING "/sys/kernel/tracing"
#define PAGE_BYTES 4096
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static char buffer[1 << 20];

/* The whole of a small tracefs file, or -1. */
static ssize_t read_file(const char *path, char *data, size_t room)
{
	size_t size = 0;
	ssize_t got;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -1;
	while (size < room && (got = read(fd, data + size, room - size)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			close(fd);
			return -1;
		}
		size += got;
	}
	close(fd);
	return size < room ? (ssize_t)size : -1;
}

static int emit_file(const char *name, const char *path)
{
	char header[256];
	ssize_t size;

	errno = 0; /* stays 0 when the file is only too large */
	size = read_file(path, buffer, sizeof(buffer));

	if (size < 0) {
		fprintf(stderr, "pmlab-evidence: cannot read %s: %s\n", path,
			errno ? strerror(errno) : "larger than the buffer");
		return -1;
	}
	snprintf(header, sizeof(header), "file %s %zd\n", name, size);
	return write_all(header, strlen(header)) || write_all(buffer, size);
}

/* "events/<system>/<event>/format" for every enabled event ("system:event"). */
static int emit_formats(void)
{
	char events[1 << 16], path[512], name[300];
	ssize_t size = read_file(TRACING "/set_event", events, sizeof(events) - 1);
	char *line, *save;

	if (size < 0) {
		fprintf(stderr, "pmlab-evidence: cannot read %s/set_event\n", TRACING);
		return -1;
	}
	events[size] = '\0';
	if (emit_file("events/ftrace/print/format", TRACING "/events/ftrace/print/format"))
		return -1;
	for (line = strtok_r(events, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':');

		if (!colon || strlen(line) > 250)
			continue;
		*colon = '/';
		snprintf(name, sizeof(name), "events/%s/format", line);
		snprintf(path, sizeof(path), TRACING "/%s", name);
		if (emit_file(name, path))
			return -1;
	}
	return 0;
}

/* Every page the CPU's buffer holds now; a partly filled page comes last. */
static int emit_pages(int cpu)
{
	char path[128], header[64];
	int fd;

	snprintf(path, sizeof(path), TRACING "/per_cpu/cpu%d/trace_pipe_raw", cpu);
	fd = open(path, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		fprintf(stderr, "pmlab-evidence: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (;;) {
		ssize_t got = read(fd, buffer, PAGE_BYTES);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			break;
		if (got < 0) {
			fprintf(stderr, "pmlab-evidence: reading %s: %s\n", path, strerror(errno));
			close(fd);
			return -1;
		}
		if (got == 0)
			break;
		snprintf(header, sizeof(header), "page %d %zd\n", cpu, got);
		if (write_all(header, strlen(header)) || write_all(buffer, got)) {
			close(fd);
			return -1;
		}
	}
	close(fd);
	return 0;
}

/* trace-pages: the buffer in binary pages, with what decodes them. */
static int emit_trace_pages(void)
{
	static const char *const tables[] = {
		"events/header_page", "events/header_event", "printk_formats", "saved_cmdlines",
	};
	char path[256];
	unsigned int i;
	DIR *cpus;
	struct dirent *entry;

	if (write_all("pmlab-traceraw 1\n", 17))
		return -1;
	for (i = 0; i < ARRAY_SIZE(tables); i++) {
		snprintf(path, sizeof(path), TRACING "/%s", tables[i]);
		if (emit_file(tables[i], path))
			return -1;
	}
	if (emit_formats())
		return -1;
	cpus = opendir(TRACING "/per_cpu");
	if (!cpus) {
		fprintf(stderr, "pmlab-evidence: cannot open %s/per_cpu: %s\n", TRACING,
			strerror(errno));
		return -1;
	}
	while ((entry = readdir(cpus))) {
		char *end;
		long cpu;

		if (strncmp(entry->d_name, "cpu", 3))
			continue;
		cpu = strtol(entry->d_name + 3, &end, 10);
		if (*end || end == entry->d_name + 3)
			continue;
		if (emit_pages((int)cpu)) {
			closedir(cpus);
			return -1;
		}
	}
	closedir(cpus);
	return write_all("end\n", 4);
}

/* The first line of a sysfs file, as the shell's `IFS= read -r` took it. */
static void emit_first_line(const char *path)
{
	char value[4096], line[4352];
	ssize_t size = read_file(path, value, sizeof(value) - 1);
	char *newline;

	if (size <= 0)
		return;
	value[size] = '\0';
	newline = strchr(value, '\n');
	if (newline)
		*newline = '\0';
	if (!value[0])
		return;
	snprintf(line, sizeof(line), "%s:%s\n", path, value);
	write_all(line, strlen(line));
}

static int not_hidden(const struct dirent *entry)
{
	return entry->d_name[0] != '.';
}

/* DIR/<each entry, sorted as the shell's glob sorts>/LEAF (LEAF "": the entry). */
static void emit_each(const char *dir, const char *leaf)
{
	struct dirent **entries;
	char path[512];
	int count = scandir(dir, &entries, not_hidden, alphasort);
	int i;

	for (i = 0; i < count; i++) {
		snprintf(path, sizeof(path), "%s/%s%s%s", dir, entries[i]->d_name,
			 leaf[0] ? "/" : "", leaf);
		emit_first_line(path);
		free(entries[i]);
	}
	if (count >= 0)
		free(entries);
}

/* snapshot: what the host compares before and after a sleep. */
static int emit_snapshot(void)
{
	emit_each("/sys/power/suspend_stats", "");
	emit_each("/sys/class/wakeup", "name");
	emit_each("/sys/class/wakeup", "event_count");
	return 0;
}

/* kmsg: read and clear the log; drop each line's "<level>" as dmesg does. */
static int emit_kmsg(void)
{
	int size = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
	char *log, *out;
	int got, i, kept = 0, line_start = 1;

	if (size <= 0)
		size = 1 << 17;
	log = malloc(size);
	out = malloc(size + 1);
	if (!log || !out) {
		fprintf(stderr, "pmlab-evidence: no memory for the kernel log\n");
		free(log);
		free(out);
		return -1;
	}
	got = klogctl(4 /* SYSLOG_ACTION_READ_CLEAR */, log, size);
	if (got < 0) {
		fprintf(stderr, "pmlab-evidence: cannot read the kernel log: %s\n",
			strerror(errno));
		free(log);
		free(out);
		return -1;
	}
	for (i = 0; i < got; i++) {
		if (line_start && log[i] == '<') {
			while (i < got && log[i] != '>')
				i++;
			continue;
		}
		out[kept++] = log[i];
		line_start = log[i] == '\n';
	}
	if (kept && out[kept - 1] != '\n')
		out[kept++] = '\n';
	got = write_all(out, kept);
	free(log);
	free(out);
	return got;
}

/* file:PATH; 1 when PATH cannot be opened (the section is left out). */
static int emit_path(const char *section, const char *path)
{
	char header[256];
	ssize_t got;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return 1;
	snprintf(header, sizeof(header), "=== %s\n", section);
	if (write_all(header, strlen(header))) {
		close(fd);
		return -1;
	}
	while ((got = read(fd, buffer, sizeof(buffer))) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 || write_all(buffer, got)) {
			fprintf(stderr, "pmlab-evidence: reading %s: %s\n", path, strerror(errno));
			close(fd);
			return -1;
		}
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	int i, failed = 0;

	for (i = 1; i < argc; i++) {
		char section[128], header[160];
		const char *source = strchr(argv[i], '=');
		int ret;

		if (!source || source == argv[i] || (size_t)(source - argv[i]) >= sizeof(section)) {
			fprintf(stderr, "pmlab-evidence: '%s' is not SECTION=SOURCE\n", argv[i]);
			return 2;
		}
		memcpy(section, argv[i], source - argv[i]);
		section[source - argv[i]] = '\0';
		source++;
		if (!strncmp(source, "file:", 5)) {
			ret = emit_path(section, source + 5);
			failed |= ret < 0;
			continue;
		}
		snprintf(header, sizeof(header), "=== %s\n", section);
		if (write_all(header, strlen(header)))
			return 1;
		if (!strcmp(source, "snapshot")) {
			ret = emit_snapshot();
		} else if (!strcmp(source, "trace-pages")) {
			ret = emit_trace_pages();
		} else if (!strcmp(source, "kmsg")) {
			ret = emit_kmsg();
		} else {
			fprintf(stderr, "pmlab-evidence: unknown source '%s'\n", source);
			return 2;
		}
		failed |= ret != 0;
	}
	return failed;
}
