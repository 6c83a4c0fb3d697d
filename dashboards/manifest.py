"""Run manifests on the command line, checked against their schema.

  /usr/bin/python3 -m dashboards.manifest [--artifacts DIR] [--run-id ID] [--shard K/N] [RUN_DIR]

lab.manifest collects and writes a run's manifest.json (lab.run and the
pipelines call it); this module prints or writes one and says where it
breaks dashboards/schema/run-manifest.v1.json.
"""

import argparse
import json
import re
import sys

from dashboards import schemas
from lab.manifest import REPO, collect, write_manifest  # noqa: F401 (the dashboard tests' entry point)


def schema_errors(manifest):
    """Where a manifest breaks the schema: a bug in lab.manifest, not in the host."""
    return [f"schema: {schemas.path_text(path)}: {message}"
            for path, message in schemas.errors(schemas.RUN_MANIFEST, manifest)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", help="write RUN_DIR/manifest.json (default: print it)")
    parser.add_argument("--artifacts", default=f"{REPO}/build/out",
                        help="kernel artifacts directory holding manifest.json (default build/out)")
    parser.add_argument("--run-id")
    parser.add_argument("--shard", help="K/N")
    args = parser.parse_args(argv)
    shard = None
    if args.shard:
        match = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not match or not 1 <= int(match[1]) <= int(match[2]):
            parser.error("--shard takes K/N with 1 <= K <= N")
        shard = (int(match[1]), int(match[2]))
    if args.run_dir:
        manifest = write_manifest(args.run_dir, args.artifacts, shard, args.run_id)
    else:
        manifest = collect(args.artifacts, args.run_id, shard)
        json.dump(manifest, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    problems = schema_errors(manifest)
    for error in manifest["errors"] + problems:
        print(f"manifest: {error}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
