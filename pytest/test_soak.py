"""pipelines/soak's bookkeeping (no guests): mode weights, the numbers a
soak reports from its records. The soak itself runs in pipelines, not CI."""

import os

import pytest

from lab import artifacts
from lab.records import RunDir

from pipelines import plan as plan_mod
from pipelines import soak


def test_mode_weights_expand_and_keep_the_mix_per_shard():
    modes = plan_mod.expand_modes(["mem*20", "disk"])
    assert modes == ["mem"] * 20 + ["disk"]
    plan = [plan_mod.mode_of(n, modes) for n in range(1, 2101)]
    assert plan.count("mem") == 2000 and plan.count("disk") == 100
    for shard in ((1, 2), (2, 2)):
        mine = [mode for number, mode in plan_mod.shard_plan(shard, modes, 2100)]
        assert 40 <= mine.count("disk") <= 60, "both guests hibernate (58 and 42 of the 100)"


@pytest.mark.parametrize("bad", ["mem*0", "mem*x", "mem*", "mem*100001"])
def test_bad_mode_weights_are_refused(bad):
    with pytest.raises(plan_mod.PlanError, match="MODE\\*N"):
        plan_mod.expand_modes([bad])


def _record(cycle, mode="mem", verdict="pass", start=0.0, seconds=2.0, pid=100, rss=40000, phases=None):
    from lab.records import iso
    return {"cycle": cycle, "mode": mode, "status": "done", "verdict": verdict, "phase": None, "reason": None,
            "host_start": iso(1_800_000_000 + start), "host_end": iso(1_800_000_000 + start + seconds),
            "host_seconds": seconds, "harness_pid": pid, "harness_rss_kib": rss,
            "host_phases": phases if phases is not None else {"sent-pmsuspend": 0.2, "pmsuspend-report": seconds - 0.3,
                                                              "ended-judged": 0.1}}


def test_a_cycle_interrupted_by_stopping_the_soak_is_no_failure():
    records = [_record(1), _record(2, verdict="interrupted"), _record(3)]
    result = soak.numbers(records, [records])
    assert result["all_passed"] and result["failed"] == [] and result["success_rate"] == 1.0
    assert result["modes"]["mem"]["verdicts"] == {"pass": 2, "interrupted": 1}


def test_numbers_rates_walls_and_rss_per_process():
    shard1 = [_record(1, start=0, pid=1, rss=40000), _record(3, start=3, pid=1, rss=41000),
              _record(5, mode="disk", start=6, seconds=14, pid=1, rss=41500)]
    shard2 = [_record(2, start=0, pid=2, rss=39000), _record(4, verdict="fail", start=3, pid=2, rss=39500)]
    result = soak.numbers(sorted(shard1 + shard2, key=lambda r: r["cycle"]), [shard1, shard2])
    assert result["cycles"] == 5
    assert result["success_rate"] == 0.8
    low, high = result["success_rate_95"]
    assert low < 0.8 < high
    assert result["wall_seconds"] == 20 and result["cycles_per_hour"] == 900
    mem = result["modes"]["mem"]
    assert mem["verdicts"] == {"pass": 3, "fail": 1}
    assert mem["mean_cycle_seconds"] == 2.0 and mem["cycles_per_hour_per_guest"] == 1800
    assert mem["host_phases_mean"]["ended-judged"] == 0.1
    assert [(r["guest"], r["first_kib"], r["last_kib"], r["max_kib"]) for r in result["harness_rss"]] == \
        [(1, 40000, 41500, 41500), (2, 39000, 39500, 39500)]
    assert result["failed"] == [{"cycle": 4, "mode": "mem", "verdict": "fail", "phase": None, "reason": None}]
    text = "\n".join(soak.report_lines("soak-x", result))
    assert "900 cycles/hour" in text and "1800 cycles/hour per guest" in text and "not passed: cycle 4" in text
    assert result["per_worker"] == {"guest 1": {"cycles": 3, "wall_seconds": 20, "cycles_per_hour": 540},
                                    "guest 2": {"cycles": 2, "wall_seconds": 5, "cycles_per_hour": 1440}}


def test_a_cycle_judged_beside_the_next_counts_the_time_it_held_its_guest():
    """lab.run judges a cycle while the guest runs the next (Session.cycles):
    each record's host_phases (start to judged) then overlaps the next
    cycle's, and summing them would undercount the guest's cycles per hour."""
    guest = [dict(_record(n, start=1.5 * (n - 1)), guest="pmlab-soak-w0-1") for n in (1, 2, 3)]
    other = [dict(_record(4, start=100), guest="pmlab-soak-w0-2")]  # a new boot: its own guest
    mem = soak.numbers(guest + other, [guest + other])["modes"]["mem"]
    # 1.5 s from each start to the next on the same guest; the last of each guest: its host_phases (2.0)
    assert mem["mean_cycle_seconds"] == round((1.5 + 1.5 + 2.0 + 2.0) / 4, 3)
    assert mem["cycles_per_hour_per_guest"] == round(3600 / ((1.5 + 1.5 + 2.0 + 2.0) / 4))


def test_per_worker_numbers_of_one_lava_run_group_by_the_records_worker():
    run = [dict(_record(n, start=10 * (n // 2), seconds=8), worker=f"pmlab-w{1 + n % 2}", engine="lava") for n in range(1, 7)]
    per_worker = soak.numbers(run, [run])["per_worker"]
    assert per_worker == {"pmlab-w1": {"cycles": 3, "wall_seconds": 28, "cycles_per_hour": 386},
                          "pmlab-w2": {"cycles": 3, "wall_seconds": 28, "cycles_per_hour": 386}}
    libvirt = [dict(r, worker="w0", engine=None) for r in run]
    assert list(soak.numbers(libvirt, [libvirt[:3], libvirt[3:]])["per_worker"]) == ["guest 1", "guest 2"]
    assert "worker pmlab-w1: 3 cycles" in "\n".join(soak.report_lines("n", soak.numbers(run, [run])))


def test_soak_refuses_a_soak_without_bound(tmp_path, capsys):
    assert soak.main(["--results", str(tmp_path), "--guests", "2"]) == 2
    assert "--max-cycles" in capsys.readouterr().err


def test_soak_names_missing_artifacts(tmp_path, capsys):
    assert soak.main(["--results", str(tmp_path), "--max-cycles", "4", "--artifacts", str(tmp_path / "none")]) == 2
    assert "bzImage" in capsys.readouterr().err


def test_every_shard_gets_the_machine_profile_and_guest_options():
    args = soak.parse_args(["--guests", "2", "--max-cycles", "10000", "--mode", "mem", "--profile", "pc-seabios",
                            "--memory", "384", "--watchdog", "resume=30", "--pmtest-tree", "1x1",
                            "--devices", "zoo", "--inject", "3:fault=* suspend 5 1", "--keep", "full"])
    args.run_id, args.results = "soak-x", "/r"
    for index in (1, 2):
        request = soak.shard_request(args, "/a", index)
        guest = request.template.guest
        assert request.shard == (index, 2) and request.chunk == 5000 and request.max_cycles == 10000
        assert (guest.profile, guest.memory, guest.watchdogs.resume, guest.pmtest_tree, guest.devices) == \
            ("pc-seabios", 384, 30.0, (1, 1), "zoo")
        assert request.template.directory == f"soak-x-shard{index}of2" and request.template.run_id == "soak-x"
        assert (request.template.artifacts, request.template.keep) == ("/a", "full")
        assert request.injections == ((3, (("fault", "* suspend 5 1"),)),)
        assert soak.nightly.NightlyRequest.from_json(request.to_json()) == request


def test_a_bad_profile_is_refused(capsys):
    with pytest.raises(SystemExit):
        soak.parse_args(["--max-cycles", "4", "--profile", "pc-q35"])
    assert "invalid choice: 'pc-q35'" in capsys.readouterr().err


def test_the_report_counts_planned_cycles_without_a_record(tmp_path, capsys):
    args = soak.parse_args(["--results", str(tmp_path), "--guests", "2"])
    args.results, args.run_id = str(tmp_path), "soak-x"
    run = tmp_path / "soak-x"
    run.mkdir()
    (run / "soak.json").write_text('{"run_id": "soak-x", "planned": 4}')
    shard = RunDir(str(tmp_path), "soak-x-shard1of2")
    for number in (1, 3):
        shard.append(_record(number, start=number))
    result = soak.report(args)
    assert result["planned"] == 4 and result["not_recorded"] == 2
    assert "4 planned, 2 without a record" in capsys.readouterr().out


def _artifact_dir(path, ssdt=True):
    (path / "modules").mkdir(parents=True)
    (path / "modules" / "pmtest.ko").write_bytes(b"ko")
    for name in ("bzImage", "manifest.json", "config") + (("pmtest-ssdt.aml",) if ssdt else ()):
        (path / name).write_text("{}" if name.endswith(".json") else name)
    (path / "initramfs.cpio.gz").write_bytes(b"cpio")  # written after the modules, as lab/build-initramfs does
    return path


def test_the_pinned_copy_boots_the_same_guest_acpi_table_included(tmp_path):
    source = _artifact_dir(tmp_path / "out")
    pinned = soak.pin_artifacts(str(source), str(tmp_path / "soak-x"))
    found = artifacts.find(pinned)
    assert os.path.basename(found.ssdt) == "pmtest-ssdt.aml" and found.modules == ["pmtest.ko"]
    assert sorted(os.listdir(pinned)) == sorted(set(os.listdir(source)) - {artifacts.LOCK})  # the copy's hold


def test_a_source_without_the_acpi_table_is_refused_before_any_guest(tmp_path):
    source = _artifact_dir(tmp_path / "out", ssdt=False)
    with pytest.raises(soak.SoakError, match="pmtest-ssdt.aml"):
        soak.pin_artifacts(str(source), str(tmp_path / "soak-x"))
    assert not os.path.exists(tmp_path / "soak-x" / "artifacts")
