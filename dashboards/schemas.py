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


# ------------------------------------------------------------------ fast check

# jsonschema walks a cycle record in ~3 ms: 36 s for 12,000 records. The
# dashboard asks the compiled check below first (~50 times faster) and asks
# jsonschema only about records it refuses, for the messages. It knows the
# keywords dashboards/schema/ uses and refuses to compile any other, so it
# cannot silently accept what jsonschema would not (pytest/test_dashboard.py
# checks both agree on real and mutated records).

KNOWN_KEYWORDS = {"$defs", "$id", "$ref", "$schema", "additionalProperties", "allOf", "const", "description",
                  "enum", "if", "items", "maxItems", "minItems", "minLength", "minimum", "oneOf", "prefixItems",
                  "properties", "required", "then", "title", "type"}
_TYPES = {"null": (type(None),), "boolean": (bool,), "string": (str,), "array": (list,), "object": (dict,),
          "number": (int, float), "integer": (int,)}  # exact types: json.loads makes no subclasses; bool is no int


def _is_number(v):
    return type(v) in (int, float)


def _equal(a, b):
    """jsonschema's equality: true and 1 differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _compile(schema, root):
    """A function instance -> bool for one (sub)schema."""
    if schema is True or schema == {}:
        return lambda v: True
    if schema is False:
        return lambda v: False
    unknown = set(schema) - KNOWN_KEYWORDS
    if unknown:
        raise ValueError(f"the fast schema check does not know {sorted(unknown)}")
    checks = []
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"the fast schema check follows only #/$defs/ references, not {ref}")
        target = {}
        checks.append(lambda v: target["check"](v))
        target["check"] = _compile(root["$defs"][ref[len("#/$defs/"):]], root)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        allowed = frozenset(t for name in names for t in _TYPES[name])
        if "integer" in names and "number" not in names:  # 1.0 is an integer to jsonschema
            checks.append(lambda v: type(v) in allowed or (type(v) is float and v.is_integer()))
        else:
            checks.append(lambda v: type(v) in allowed)
    if "enum" in schema:
        allowed = schema["enum"]
        checks.append(lambda v: any(_equal(v, item) for item in allowed))
    if "const" in schema:
        constant = schema["const"]
        checks.append(lambda v: _equal(v, constant))
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda v: not _is_number(v) or not v < low)  # as jsonschema: NaN passes
    if "minLength" in schema:
        shortest = schema["minLength"]
        checks.append(lambda v: not isinstance(v, str) or len(v) >= shortest)
    if "minItems" in schema:
        fewest = schema["minItems"]
        checks.append(lambda v: not isinstance(v, list) or len(v) >= fewest)
    if "maxItems" in schema:
        most = schema["maxItems"]
        checks.append(lambda v: not isinstance(v, list) or len(v) <= most)
    if "required" in schema:
        needed = schema["required"]
        checks.append(lambda v: not isinstance(v, dict) or all(key in v for key in needed))
    properties = {key: _compile(sub, root) for key, sub in schema.get("properties", {}).items()}
    extra = _compile(schema["additionalProperties"], root) if "additionalProperties" in schema else None
    if properties or extra:
        def check_object(v):
            if type(v) is not dict:
                return True
            for key, item in v.items():
                check = properties.get(key, extra)
                if check is not None and not check(item):
                    return False
            return True
        checks.append(check_object)
    prefix = [_compile(sub, root) for sub in schema.get("prefixItems", [])]
    if prefix:
        checks.append(lambda v: not isinstance(v, list) or all(check(item) for check, item in zip(prefix, v)))
    if "items" in schema:
        each = _compile(schema["items"], root)
        skip = len(prefix)
        checks.append(lambda v: not isinstance(v, list) or all(each(item) for item in v[skip:]))
    for sub in schema.get("allOf", []):
        checks.append(_compile(sub, root))
    if "oneOf" in schema:
        options = [_compile(sub, root) for sub in schema["oneOf"]]
        checks.append(lambda v: sum(1 for option in options if option(v)) == 1)
    if "if" in schema:
        condition = _compile(schema["if"], root)
        then = _compile(schema.get("then", True), root)
        checks.append(lambda v: not condition(v) or then(v))
    if len(checks) == 1:
        return checks[0]

    def check_all(v):
        for check in checks:
            if not check(v):
                return False
        return True
    return check_all


@functools.lru_cache(maxsize=None)
def fast_check(name):
    schema = load(name)
    return _compile(schema, schema)


def is_valid(name, instance):
    """errors(name, instance) == [], quickly."""
    return fast_check(name)(instance)
