"""The versioned JSON Schemas in dashboards/schema/ and their validators."""

import functools
import json
import os

import jsonschema

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema")

CYCLE_RECORD = "cycle-record.v3.json"
RUN_SUMMARY = "run-summary.v1.json"
RUN_MANIFEST = "run-manifest.v1.json"
DASHBOARD = "dashboard.v1.json"


@functools.lru_cache(maxsize=None)
def load(name):
    with open(os.path.join(DIR, name)) as source:
        return json.load(source)


@functools.lru_cache(maxsize=None)
def validator(name):
    schema = load(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def errors(name, instance):
    """[(path list, message)] sorted by path then message: deterministic."""
    found = [(list(error.absolute_path), error.message) for error in validator(name).iter_errors(instance)]
    return sorted(found, key=lambda item: ([str(p) for p in item[0]], item[1]))


def path_text(path):
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(path)) or "(record)"
