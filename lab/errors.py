"""The lab's error types. Apart from lab/virt.py so that checking input,
planning and judging a recorded run need no libvirt."""


class LabError(Exception):
    """A problem the user must fix (bad input, missing artifact, no libvirt):
    reported as one clear message, before any guest starts when possible."""
