"""The lab's error types, apart from the code that raises them, so that
pure modules (modes, options, request, judge) need not import libvirt."""


class LabError(Exception):
    """A problem the user must fix (bad input, missing artifact, no libvirt):
    reported as one clear message, before any guest starts when possible."""
