// SPDX-License-Identifier: GPL-2.0
/*
 * pmlab-traceraw: empty the guest's trace buffer in the ring buffer's own
 * binary pages, for the host to decode (lab/trace_raw.py).
 *
 * `cat trace` makes the kernel format every event as text: ~40 us an event
 * under TCG, the largest single cost of a harness cycle. trace_pipe_raw hands
 * over the pages as they are. What the host needs to decode them is copied
 * alongside: the enabled events' format files, ftrace's print event (trace
 * markers), printk_formats (suspend_resume's action is a pointer to a
 * tracepoint string) and saved_cmdlines (the task names `trace` would show).
 *
 * Output, each item a header line and exactly <n> bytes:
 *   "pmlab-traceraw 1\n"
 *   "file <name> <n>\n" <contents>      format files and tables
 *   "page <cpu> <n>\n" <page>           ring buffer pages, oldest first per CPU
 *   "end\n"
 * The reads consume the buffer, as `: >trace` cleared it before.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRACING "/sys/kernel/tracing"
#define PAGE_BYTES 4096
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static char buffer[1 << 20];

static int write_all(const char *data, size_t size)
{
	while (size) {
		ssize_t done = write(STDOUT_FILENO, data, size);

		if (done < 0 && errno == EINTR)
			continue;
		if (done <= 0)
			return -1;
		data += done;
		size -= done;
	}
	return 0;
}

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
		fprintf(stderr, "pmlab-traceraw: cannot read %s: %s\n", path,
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
		fprintf(stderr, "pmlab-traceraw: cannot read %s/set_event\n", TRACING);
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
		fprintf(stderr, "pmlab-traceraw: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (;;) {
		ssize_t got = read(fd, buffer, PAGE_BYTES);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			break;
		if (got < 0) {
			fprintf(stderr, "pmlab-traceraw: reading %s: %s\n", path, strerror(errno));
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

int main(void)
{
	static const char *const tables[] = {
		"events/header_page", "events/header_event", "printk_formats", "saved_cmdlines",
	};
	char path[256];
	unsigned int i;
	DIR *cpus;
	struct dirent *entry;

	if (write_all("pmlab-traceraw 1\n", 17))
		return 1;
	for (i = 0; i < ARRAY_SIZE(tables); i++) {
		snprintf(path, sizeof(path), TRACING "/%s", tables[i]);
		if (emit_file(tables[i], path))
			return 1;
	}
	if (emit_formats())
		return 1;
	cpus = opendir(TRACING "/per_cpu");
	if (!cpus) {
		fprintf(stderr, "pmlab-traceraw: cannot open %s/per_cpu: %s\n", TRACING,
			strerror(errno));
		return 1;
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
			return 1;
		}
	}
	closedir(cpus);
	return write_all("end\n", 4) ? 1 : 0;
}
