"""Merge shard run directories into one run directory.

  ./pmlab merge OUT_DIR SHARD_DIR... [--run-id ID]

Every cycle keeps its number; the merged cycles.jsonl holds the final
record of each cycle once, in cycle order, with the merged run id (by
default the run id the shards' records share). A cycle found in two shards
with the same record is taken once; with different records the merge stops
(exit 2) naming both directories. Reports, hang dumps and console logs are
copied, and the shards' shared values the records refer to (record version 3,
lab.records.RunReader.shared_values); summary.json is recomputed
(lab.records.summarize); the shards'
manifest.json (if any) becomes the merged one with "shard": null, and
merge.json says which cycle came from which shard. The merged directory
therefore reads, for the dashboard, exactly like one run of those records.
"""

import argparse
import json
import os
import shutil
import sys


from pipelines.common import read_json, write_json  # noqa: E402
from lab.records import SIDE_FILES, cycles_path, is_done, read_cycles, summarize, write_cycles  # noqa: E402


class MergeError(ValueError):
    pass


def _canonical(record):
    return json.dumps({k: v for k, v in record.items() if k != "run_id"}, sort_keys=True)


def merge_records(shards):
    """shards: [(name, [final records])] -> ({cycle: record}, {cycle: name})"""
    merged, origin = {}, {}
    for name, records in shards:
        for record in records:
            number = record["cycle"]
            if number in merged:
                if _canonical(merged[number]) == _canonical(record):
                    continue
                done = [is_done(r) for r in (merged[number], record)]
                if done == [False, True]:  # a finished record beats a "started" one
                    merged[number], origin[number] = record, name
                    continue
                if done == [True, False]:
                    continue
                raise MergeError(f"cycle {number} is in {origin[number]} and in {name} with different records")
            merged[number], origin[number] = record, name
    return merged, origin


def common_run_id(records):
    ids = sorted({r.get("run_id") for r in records if r.get("run_id") and isinstance(r.get("run_id"), str)})
    if len(ids) != 1:
        raise MergeError(f"the shards' records carry {len(ids)} run ids ({', '.join(ids) or 'none'}): "
                         "name the merged run with --run-id")
    return ids[0]


def _copy(source, target):
    if os.path.isfile(source) and not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(source, target)


def merge(out_dir, shard_dirs, run_id=None):
    """Write the merged run directory; return its summary."""
    shards = []
    for directory in shard_dirs:
        if not os.path.isfile(cycles_path(directory)):
            raise MergeError(f"{directory} has no cycles.jsonl")
        shards.append((directory, read_cycles(cycles_path(directory))))
    if os.path.exists(cycles_path(out_dir)):
        raise MergeError(f"{out_dir} already holds a run (cycles.jsonl): merge into a new directory")
    merged, origin = merge_records(shards)
    run_id = run_id or common_run_id(list(merged.values()))
    os.makedirs(os.path.join(out_dir, "console"), exist_ok=True)
    shared = {}  # the shared values the merged records refer to, from the shards they were read from
    for _, read in shards:
        kept = [record for record in read if merged[record["cycle"]] is record]
        for key, value in (kept[0].reader.shared_values(kept) if kept else {}).items():
            shared.setdefault(key, value)
    records = []
    for number in sorted(merged):
        record = dict(merged[number])
        record["run_id"] = run_id
        records.append(record)
        for field in SIDE_FILES:
            path = record.get(field)
            if isinstance(path, str) and path and not os.path.isabs(path) and ".." not in path.split("/"):
                _copy(os.path.join(origin[number], path), os.path.join(out_dir, path))
    write_cycles(cycles_path(out_dir), records, shared)
    for directory, _ in shards:
        console = os.path.join(directory, "console")
        for name in sorted(os.listdir(console)) if os.path.isdir(console) else ():
            _copy(os.path.join(console, name), os.path.join(out_dir, "console", name))
    manifests = [m for m in (read_json(os.path.join(d, "manifest.json")) for d, _ in shards)
                 if isinstance(m, dict) and m]
    if manifests:
        manifest = dict(manifests[0])
        manifest["run_id"], manifest["shard"] = run_id, None
        write_json(os.path.join(out_dir, "manifest.json"), manifest)
    write_json(os.path.join(out_dir, "merge.json"), {
        "run_id": run_id,
        "shards": [{"dir": os.path.abspath(d), "cycles": sorted(n for n, o in origin.items() if o == d)}
                   for d, _ in shards]})
    summary = summarize(records)
    summary["run_id"] = run_id
    summary["merged_from"] = len(shards)
    write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pmlab merge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("shard_dirs", nargs="+")
    parser.add_argument("--run-id", help="run id of the merged records (default: the shards' common one)")
    args = parser.parse_args(argv)
    try:
        summary = merge(args.out_dir, args.shard_dirs, args.run_id)
    except MergeError as error:
        print(f"merge: {error}", file=sys.stderr)
        return 2
    print(f"merge: {args.out_dir}: {summary['cycles']} cycles from {len(args.shard_dirs)} shard(s), "
          f"{summary['counts']['pass']} passed")
    return 0


if __name__ == "__main__":  # ./pmlab merge is the command
    from lab.entry_points import redirect
    sys.exit(redirect("pipelines.merge", "merge"))
