"""The dashboard's kernels section: kernels side by side (issue 14).

Runs are written through lab.records (dashboards/testing.py write_run) from
the recorded cycles (pytest/recordings): one run as the 6.1 recordings are
(no kernel_spec: records from before it was recorded), and a run whose
records name linux-source-6.12 with its own series hash, some cycles
failing and the callbacks slower, so that every number differs between the
two kernels. The per-kernel numbers are checked against lab.records'
pass_rate (the one rate) over each kernel's own records, and against a
dashboard of that kernel's runs alone.
"""

import copy
import json
import os
import shutil
import statistics

import pytest

import independent
from dashboards import compute, render, schemas, testing, timeline
from lab import records
from lab.kernels import DEFAULT_SPEC
from test_dashboard_page import CANVASES, Dom, chromium, console_messages

SPEC_612 = "linux-source-6.12"
SERIES_612 = "612612612612abcd"


@pytest.fixture(scope="module")
def recorded():
    return testing.with_phase_ms(testing.with_host_phases(testing.with_callbacks(testing.recorded_records())))


def manifest_612(commit):
    manifest = testing.manifest(commit, series_hash=SERIES_612, variant="patched")
    manifest["kernel"].update(tree="linux-source-6.12.tar.xz", tree_version="6.12.48", kernelrelease="6.12.48+",
                              config_hash="0123456789abcdef", kernel_spec=SPEC_612,
                              source_commit="")  # as lab.kernels writes it for a Debian tree
    return manifest


def as_612(record, run_id, hour):
    """A recorded cycle as a 6.12 run would write it: its kernel named, its
    callbacks three times slower, the mem cycles 1 and 2 failed."""
    record = copy.deepcopy(record)
    record.update(run_id=run_id, host_start=record["host_start"].replace("T13:", f"T{hour:02d}:"))
    record["kernel"] = dict(record.get("kernel") or {}, kernel_spec=SPEC_612, kernelrelease="6.12.48+",
                            series_hash=SERIES_612)
    record["phase_ms"] = {phase: round(ms * 2, 3) for phase, ms in (record.get("phase_ms") or {}).items()}
    for calls in (record.get("callbacks") or {}).values():
        for call in calls:
            if call.get("us") is not None:
                call["us"] = call["us"] * 3
    if record["cycle"] in (1, 2):
        record.update(verdict="fail", phase="suspend", reason="no report within 60s")
    if record.get("suspend_ms") is not None:
        record["suspend_ms"] = round(record["suspend_ms"] * 1.5, 3)
    return record


def two_kernels(root, recorded, version=lambda records: records):
    """results/: a 6.1 run (the recordings, with a 6.1 manifest) and a 6.12 run."""
    old = [dict(r, run_id="run-61") for r in recorded]
    testing.write_run(str(root), "run-61", version(old), manifest=testing.manifest("a" * 40, series_hash="a290a2537b597450",
                                                                                   variant="patched"))
    new = [as_612(r, "run-612", 15) for r in recorded]
    testing.write_run(str(root), "run-612", version(new), manifest=manifest_612("b" * 40))
    return old, new


def raw_records(run_dir):
    return records.read_cycles(records.cycles_path(str(run_dir)))


def test_two_kernels_side_by_side_with_the_one_rate(recorded, tmp_path):
    root = tmp_path / "results"
    two_kernels(root, recorded)
    board = compute.compute([str(root)])
    assert schemas.errors(schemas.DASHBOARD, board) == []
    section = board["kernels"]
    assert section["definition"] == records.PASS_RATE_DEFINITION
    old, new = section["kernels"]  # by first cycle: the 6.1 run ran first
    assert old["key"] == f"{DEFAULT_SPEC}/a290a2537b597450/f72122b6d06e6eb3/patched"
    assert (old["kernel_spec"], old["spec_recorded"], old["runs"]) == (DEFAULT_SPEC, False, ["run-61"])
    assert new["key"] == f"{SPEC_612}/{SERIES_612}/0123456789abcdef/patched"
    assert (new["kernel_spec"], new["spec_recorded"], new["runs"]) == (SPEC_612, True, ["run-612"])
    assert new["releases"] == ["6.12.48", "6.12.48+"] and new["config_hash"] == "0123456789abcdef"
    assert old["source_commit"] is new["source_commit"] is None
    for entry, run in ((old, "run-61"), (new, "run-612")):
        mine = raw_records(root / run)
        rate = records.pass_rate(mine)
        assert (entry["all"]["rate"], entry["all"]["ci95"], entry["all"]["judged"]) == \
            (rate["rate"], rate["ci95"], rate["judged"])
        assert entry["all"]["counts"] == records.verdict_counts(mine)
        for mode in {r["mode"] for r in mine}:
            group = [r for r in mine if r["mode"] == mode]
            rate = records.pass_rate(group)
            block = entry["modes"][mode]
            assert (block["rate"], block["ci95"]) == (rate["rate"], rate["ci95"])
            assert block["ci95"] == independent.wilson(rate["passed"], rate["judged"])
            for field in ("suspend_ms", "resume_ms"):
                values = sorted(r[field] for r in group if r["verdict"] == "pass" and r.get(field) is not None)
                if not values:
                    assert block[field] is None
                    continue
                assert block[field]["p50"] == round(statistics.median(values), 3)
                assert block[field]["p95"] == round(independent.nearest_rank(values, 0.95), 3)
            passing = [r for r in group if r["verdict"] == "pass" and r.get("phase_ms")]
            assert [p["phase"] for p in block["phases"]] == \
                sorted({p for r in passing for p in r["phase_ms"]},
                       key=lambda p: (statistics.mean(list(r["phase_ms"]).index(p) for r in passing
                                                      if p in r["phase_ms"]), p))
            for item in block["phases"]:
                values = sorted(r["phase_ms"][item["phase"]] for r in passing if item["phase"] in r["phase_ms"])
                assert (item["n"], item["p50"], item["p95"]) == \
                    (len(values), round(statistics.median(values), 3), round(independent.nearest_rank(values, 0.95), 3))
        # the slowest callbacks of a kernel are those of a dashboard over its runs alone
        alone = compute.compute([str(root / run)])
        assert entry["slowest"] == alone["latency"]["top_p95"][:compute.KERNEL_TOP_N] != []
        assert alone["kernels"]["kernels"][0]["modes"] == entry["modes"]
    assert board["runs"]["run-612"]["kernels"] == [new["key"]] and board["runs"]["run-61"]["kernels"] == [old["key"]]
    assert [b["kernels"] for b in board["trends"]["builds"]] == [[old["key"]], [new["key"]]]
    assert board["runs"]["run-612"]["manifests"][0]["kernel_spec"] == SPEC_612
    # the kernels differ where they were made to
    assert old["modes"]["mem"]["rate"] > new["modes"]["mem"]["rate"]
    assert new["modes"]["disk"]["suspend_ms"]["p50"] > old["modes"]["disk"]["suspend_ms"]["p50"]
    assert new["slowest"][0]["p95"] == pytest.approx(3 * old["slowest"][0]["p95"], rel=0.01)
    dpm = [{p["phase"]: p for p in k["modes"]["disk"]["phases"]}["dpm_suspend"] for k in (old, new)]
    assert dpm[1]["p50"] == pytest.approx(2 * dpm[0]["p50"], abs=0.002) and dpm[0]["n"] == dpm[1]["n"] == 2
    assert [p["phase"] for p in new["modes"]["mem"]["phases"]] == []  # its mem cycles with a trace failed
    # the whole-dashboard latency is both kernels' together
    assert board["latency"]["top_p95"][0]["p95"] == new["slowest"][0]["p95"]


def test_legacy_records_group_as_the_default_kernel(recorded, tmp_path):
    """Records without kernel_spec: the default kernel, linux-source-6.1,
    whether or not their run has a manifest; a manifest's spec names the
    kernel of records that lack it; a legacy 6.12 kernelrelease is not
    taken for 6.1."""
    root = tmp_path / "results"
    base = [dict(r, run_id="bare") for r in recorded[:3]]
    testing.write_run(str(root), "bare", base)  # no manifest, no kernel_spec
    again = [dict(r, run_id="bare-2", host_start=r["host_start"].replace("T13:", "T14:")) for r in recorded[:2]]
    testing.write_run(str(root), "bare-2", again)
    named = [dict(r, run_id="named", host_start=r["host_start"].replace("T13:", "T15:")) for r in recorded[:2]]
    testing.write_run(str(root), "named", named, manifest=manifest_612("c" * 40))  # spec only in the manifest
    odd = []
    for r in recorded[:1]:
        r = dict(copy.deepcopy(r), run_id="odd", host_start=r["host_start"].replace("T13:", "T16:"))
        r["kernel"]["kernelrelease"] = "6.12.1"
        odd.append(r)
    testing.write_run(str(root), "odd", odd)
    board = compute.compute([str(root)])
    assert schemas.errors(schemas.DASHBOARD, board) == []
    kernels = {k["key"]: k for k in board["kernels"]["kernels"]}
    series = recorded[0]["kernel"]["series_hash"]
    assert list(kernels) == [f"{DEFAULT_SPEC}/{series}/patched", f"{SPEC_612}/{series}/0123456789abcdef/patched",
                             f"kernelrelease 6.12.1/{series}/patched"]
    legacy = kernels[f"{DEFAULT_SPEC}/{series}/patched"]
    assert legacy["runs"] == ["bare", "bare-2"] and legacy["all"]["cycles"] == 5 and not legacy["spec_recorded"]
    # a run of that kernel with a manifest: the runs without one join it, under its config hash
    later = [dict(r, run_id="with-manifest", host_start=r["host_start"].replace("T13:", "T17:")) for r in recorded[:2]]
    testing.write_run(str(root), "with-manifest", later, manifest=testing.manifest("d" * 40, series_hash=series,
                                                                                   variant="patched"))
    board = compute.compute([str(root)])
    first = board["kernels"]["kernels"][0]
    assert first["key"] == f"{DEFAULT_SPEC}/{series}/f72122b6d06e6eb3/patched" and first["config_hash"] == "f72122b6d06e6eb3"
    assert first["runs"] == ["bare", "bare-2", "with-manifest"] and len(board["kernels"]["kernels"]) == 3
    # two configs of it: the config splits them, the runs without a manifest stand apart
    other = testing.manifest("e" * 40, series_hash=series, variant="patched")
    other["kernel"]["config_hash"] = "00000000000000aa"
    testing.write_run(str(root), "other-config", [dict(later[0], run_id="other-config")], manifest=other)
    split = {k["key"]: k["runs"] for k in compute.compute([str(root)])["kernels"]["kernels"]}
    assert split[f"{DEFAULT_SPEC}/{series}/patched"] == ["bare", "bare-2"]
    assert split[f"{DEFAULT_SPEC}/{series}/f72122b6d06e6eb3/patched"] == ["with-manifest"]
    assert split[f"{DEFAULT_SPEC}/{series}/00000000000000aa/patched"] == ["other-config"]
    assert kernels[f"{SPEC_612}/{series}/0123456789abcdef/patched"]["spec_recorded"]
    assert not kernels[f"kernelrelease 6.12.1/{series}/patched"]["spec_recorded"]


def test_phase_ms_is_the_traces_phase_spans(recorded):
    """lab.trace.phase_ms of a recorded cycle: each PM phase's spans as the
    timeline page draws them (its own parse of the same trace), summed."""
    checked = 0
    for record in recorded:
        text = testing.report_text(record)
        if text is None or record["verdict"] != "pass":
            continue
        spans = {}
        for span in timeline.model(record, text)["phases"]:
            if span["end_ms"] is not None:
                spans[span["name"]] = spans.get(span["name"], 0.0) + span["end_ms"] - span["start_ms"]
        assert list(record["phase_ms"]) == list(spans)
        for phase, ms in record["phase_ms"].items():
            assert ms == pytest.approx(spans[phase], abs=0.01), phase
        checked += 1
        if record["mode"] == "mem":
            assert {"dpm_suspend", "dpm_resume", "machine_suspend"} <= set(record["phase_ms"])
    assert checked >= 8


def test_bad_phase_ms_entry_is_reported_and_dropped(recorded, tmp_path):
    record = dict(copy.deepcopy(recorded[0]), run_id="r")
    record["phase_ms"]["dpm_suspend"] = "slow"
    run = testing.write_run(str(tmp_path / "results"), "r", [record])
    board = compute.compute([run])
    assert [e["message"] for e in board["input_errors"]] == ["phase_ms.dpm_suspend: 'slow' is not of type 'number'"]
    phases = [p["phase"] for p in board["kernels"]["kernels"][0]["modes"]["mem"]["phases"]]
    assert "dpm_suspend" not in phases and "dpm_resume" in phases


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_cached_kernels_equal_the_recompute(recorded, tmp_path, version):
    """Per-kernel latency from the per-run caches (one kernel per run) and
    from a run holding two kernels (counted from its records) equals the
    full recompute, cold and warm."""
    root = tmp_path / "results"
    convert = testing.version3 if version == "v3" else testing.compact
    two_kernels(root, recorded, convert)
    mixed = [dict(r, run_id="mixed", cycle=r["cycle"] + 1000, host_start=r["host_start"].replace("T13:", "T18:"))
             for r in recorded[:4]]
    mixed += [as_612(dict(r, cycle=r["cycle"] + 2000), "mixed", 19) for r in recorded[:4]]
    testing.write_run(str(root), "mixed", convert(mixed))
    expected = compute.dumps(compute.compute([str(root)]))
    board = json.loads(expected)
    kernels = board["kernels"]["kernels"]  # the manifest-less run joins each kernel's run with a manifest
    assert [k["runs"] for k in kernels] == [["mixed", "run-61"], ["mixed", "run-612"]]
    assert all(k["slowest"] for k in kernels)
    assert compute.dumps(compute.compute([str(root)], cache=True)) == expected  # cold
    assert compute.dumps(compute.compute([str(root)], cache=True)) == expected  # warm, from the caches
    assert len([c for c in root.glob(f"*/{compute.CACHE_FILE}") if not c.parent.is_symlink()]) == 3


# ------------------------------------------------------------------ the page

@pytest.mark.browser
def test_kernels_panel_in_chromium(recorded, tmp_path):
    """Two kernels: the panel is shown with one column per kernel holding the
    dashboard's numbers, and its two charts are drawn; one kernel: the table
    alone, no kernel charts."""
    root = tmp_path / "results"
    two_kernels(root, recorded)
    site = tmp_path / "site"
    site.mkdir()
    board = compute.compute([str(root)])
    (site / "dashboard.json").write_text(compute.dumps(board))
    html_path = render.render(str(site / "dashboard.json"))
    stdout, stderr = chromium("file://" + html_path, "--dump-dom")
    dom = Dom(stdout)
    assert console_messages(stderr) == []
    (body,) = dom.attrs_of("body")
    assert body.get("data-charts") == "ready" and body.get("data-chart-count") == str(CANVASES + 3)
    (section,) = [a for _, a, _ in dom.elements if a.get("id") == "kernels-section"]
    assert "hidden" not in section
    cells = dom.texts_in("table-kernels")
    old, new = board["kernels"]["kernels"]
    assert cells[:2] == ["K1: linux-source-6.1 patched", "K2: linux-source-6.12 patched"]
    row = cells.index("mem: success rate (95 %)")
    for offset, kernel in ((1, old), (2, new)):
        block = kernel["modes"]["mem"]
        assert cells[row + offset] == (f"{block['rate'] * 100:.1f} % ({block['ci95'][0] * 100:.1f} % \u2013 "
                                       f"{block['ci95'][1] * 100:.1f} %), {block['counts']['pass']}/{block['judged']}")
    row = cells.index("disk: dpm_resume ms p50 / p95")
    for offset, kernel in ((1, old), (2, new)):
        item = {p["phase"]: p for p in kernel["modes"]["disk"]["phases"]}["dpm_resume"]
        assert cells[row + offset] == f"{item['p50']:.1f} / {item['p95']:.1f} (n {item['n']})"
    row = cells.index("#1")
    assert cells[row + 2].startswith(f"{new['slowest'][0]['device']} \u00b7 {new['slowest'][0]['phase']}: ")
    for canvas in [a for t, a, _ in dom.elements if t == "canvas" and a.get("id", "").startswith("chart-kernels")]:
        assert int(canvas.get("width", 0)) > 100, canvas
    keep = os.environ.get("PMLAB_KERNELS_SCREENSHOT")
    if keep:
        chromium("file://" + html_path, f"--screenshot={keep}", "--window-size=1280,1400")
    # one kernel: the table names it, nothing to compare
    shutil.rmtree(root / "run-612")
    (site / "dashboard.json").write_text(compute.dumps(compute.compute([str(root)])))
    stdout, stderr = chromium("file://" + render.render(str(site / "dashboard.json")), "--dump-dom")
    dom = Dom(stdout)
    (body,) = dom.attrs_of("body")
    assert console_messages(stderr) == [] and body.get("data-chart-count") == str(CANVASES)
    (charts,) = [a for _, a, _ in dom.elements if a.get("id") == "kernels-charts"]
    assert "hidden" in charts and dom.texts_in("table-kernels")[0] == "K1: linux-source-6.1 patched"


def test_two_unpatched_kernels_of_one_commit_are_two_trend_builds(recorded, tmp_path):
    """The unpatched 6.1 and 6.12 of one project commit both have series
    "none": the trend keeps them apart by kernel (and keeps the default
    kernel's key as it always was)."""
    root = tmp_path / "results"
    baseline_61 = [dict(r, run_id="base-61", kernel=dict(r.get("kernel") or {}, series_hash="none",
                                                         variant="baseline")) for r in recorded]
    testing.write_run(str(root), "base-61", baseline_61,
                      manifest=testing.manifest("c" * 40, series_hash="none", variant="baseline"))
    baseline_612 = [as_612(r, "base-612", 15) for r in recorded]
    for record in baseline_612:
        record["kernel"].update(series_hash="none", variant="baseline")
    manifest = manifest_612("c" * 40)
    manifest["kernel"].update(series_hash="none", variant="baseline")
    testing.write_run(str(root), "base-612", baseline_612, manifest=manifest)
    board = compute.compute([str(root)])
    builds = {build["key"]: build for build in board["trends"]["builds"]}
    assert list(builds) == ["cccccccccccc/none/baseline", f"cccccccccccc/none/baseline on {SPEC_612}"]
    assert [build["runs"] for build in builds.values()] == [["base-61"], ["base-612"]]
    mem = builds[f"cccccccccccc/none/baseline on {SPEC_612}"]["modes"]["mem"]
    assert mem["status"] == "fail" and mem["first_fail"]["cycle"] == 1


def test_a_users_config_of_the_same_commit_is_its_own_trend_build(recorded, tmp_path):
    """kernel/build --config: same tree, commit and series as the default
    build, another .config underneath (its manifest names base_config and
    the merged config's hash)."""
    root = tmp_path / "results"
    series = "a290a2537b597450"
    testing.write_run(str(root), "default", [dict(r, run_id="default") for r in recorded],
                      manifest=testing.manifest("d" * 40, series_hash=series, variant="patched"))
    manifest = testing.manifest("d" * 40, series_hash=series, variant="patched")
    manifest["kernel"].update(base_config="/home/me/my.config", config_hash="00000000000000aa")
    testing.write_run(str(root), "mine", [dict(r, run_id="mine") for r in recorded], manifest=manifest)
    builds = {build["key"]: build["runs"] for build in compute.compute([str(root)])["trends"]["builds"]}
    assert builds == {f"dddddddddddd/{series}/patched": ["default"],
                      f"dddddddddddd/{series}/patched on {DEFAULT_SPEC} config 00000000000000aa": ["mine"]}
