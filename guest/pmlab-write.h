/* SPDX-License-Identifier: GPL-2.0 */
/*
 * write_all() for the guest's static helpers (pmlab-evidence, pmlab-reply):
 * stdout is the agent's reply file or the virtio-serial port, where a write
 * may be short.
 */
#ifndef PMLAB_WRITE_H
#define PMLAB_WRITE_H

#include <errno.h>
#include <unistd.h>

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

#endif
