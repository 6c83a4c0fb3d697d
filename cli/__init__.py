"""./pmlab's command line: one verb per job (cli/main.py). The top layer:
it imports lab, dashboards and pipelines; nothing imports it."""
