"""pmlab's lab: boots guests under libvirt and drives system sleep cycles.

Import with the repository root on sys.path (`python3 -m cli.main run ...` from
the root, or pytest via pytest/conftest.py)."""
