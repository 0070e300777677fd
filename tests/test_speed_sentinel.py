"""The collector's speed sentinel: one fixed step timed through a run, its spread recorded and warned about, and
carried into a trained set's metadata and report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from perfpredict.dataset.collect import CollectSettings, collect, plan_sweep, provenance_path, read_dataset
from perfpredict.dataset.sentinel import (
    DRIFT_WARN,
    SpeedSentinel,
    choose_sentinel,
    drift_warning,
    drifted,
    run_sentinel,
    speed_drift,
    speed_noise,
)
from perfpredict.profile.timing import TimingConfig
from tests.conftest import REPO

QUICK = TimingConfig(warmup_iters=2, warmup_s=0.05, min_iters=5, min_time_s=0.1, max_time_s=1.0)


def _three_tiny_mlps():
    plans = plan_sweep(["mlp"], batch_sizes=[8, 16], max_gmacs=0.0005)
    assert len(plans) >= 3
    return plans[:3]


def test_the_sentinel_is_the_plans_median_architecture_at_its_smallest_batch() -> None:
    plans = plan_sweep(["mlp", "resnet"], batch_sizes=[4, 64], max_gmacs=0.5)
    plan, batch = choose_sentinel(plans)
    costs = sorted(p.gmacs_per_sample for p in plans)
    assert plan.gmacs_per_sample == costs[(len(costs) - 1) // 2] and batch == 4
    # the same plan in another order (a resumed run) chooses the same step
    assert choose_sentinel(list(reversed(plans))) == (plan, batch)
    assert choose_sentinel([]) is None


def test_a_reading_is_the_median_of_its_processes_and_drift_must_pass_their_noise() -> None:
    answers = iter([0.010, 0.012, 0.011, None, 0.014, 0.013, 0.020])

    def measure():
        t = next(answers)
        return {"status": "ok", "timing": {"median_s": t}} if t else {"status": "error", "error": "boom"}

    sentinel = SpeedSentinel("c", 8, every_s=0, measure=measure)
    first = sentinel.read(0)
    assert first["times_s"] == [0.010, 0.012, 0.011] and first["iter_time_s"] == 0.011
    assert first["spread"] == pytest.approx(0.2)
    second = sentinel.read(5, final=True)  # one process failed: the other two make the reading
    assert second["times_s"] == [0.014, 0.013] and second["iter_time_s"] == pytest.approx(0.0135)
    assert sentinel.drift == pytest.approx(0.0135 / 0.011 - 1, abs=1e-4)  # 22.7%
    assert sentinel.noise == pytest.approx((0.2 + 0.014 / 0.013 - 1) / 2, abs=1e-4)  # median of 20% and 7.7%
    assert drifted(sentinel.drift, sentinel.noise)  # 22.7% passes both 10% and the 13.8% noise
    assert not drifted(0.25, 0.30)  # a change smaller than back-to-back processes differ is noise
    assert not drifted(0.08, 0.01) and not drifted(None, None)
    assert speed_drift([{"iter_time_s": 0.01}]) is None and speed_noise([{"spread": None}]) is None
    meta = {"runs": [{"speed_sentinel": {"drift": 0.3, "noise": 0.05}}, {"command": "older run"},
                     {"speed_sentinel": "bad"}, {"speed_sentinel": {"drift": None}}]}
    assert [run_sentinel(r) for r in meta["runs"]] == [{"drift": 0.3, "noise": 0.05}, None, None, None]
    assert run_sentinel(None) is None
    assert drift_warning(DRIFT_WARN, 0.0, "x") is None and drift_warning(0.3, 0.4, "x") is None
    assert "30%" in drift_warning(0.3, 0.05, "cpu.csv") and "5%" in drift_warning(0.3, 0.05, "cpu.csv")


def test_collect_times_the_sentinel_at_the_start_between_architectures_and_at_the_end(tmp_path) -> None:
    plans = _three_tiny_mlps()
    out = tmp_path / "cpu.csv"
    seen = []
    settings = CollectSettings(device="cpu", timing=QUICK, threads=1, command="test", git_commit="abc1234",
                               sentinel_every_s=0)
    summary = collect(plans, out, settings, on_sentinel=seen.append)
    assert summary["counts"] == {"ok": 6}
    sentinel = json.loads(provenance_path(out).read_text())["runs"][-1]["speed_sentinel"]
    plan, batch = choose_sentinel(plans)
    assert (sentinel["config"], sentinel["batch_size"]) == (plan.config, batch)
    readings = sentinel["readings"]
    assert readings == seen
    # before each of the three architectures (every_s=0), then once at the end, after every row
    assert [r["where"] for r in readings] == ["start", "between", "between", "end"]
    assert [r["after_rows"] for r in readings] == [0, 2, 4, 6]
    assert all(r["status"] == "ok" and len(r["times_s"]) == 3 and r["iter_time_s"] > 0 for r in readings)
    assert sentinel["drift"] == summary["speed_drift"] == speed_drift(readings) >= 0
    assert sentinel["noise"] == summary["speed_noise"] == speed_noise(readings) >= 0
    assert len(read_dataset(out)) == 6  # the sentinel's readings are provenance, never rows
    # a re-run with nothing left to measure times nothing either
    again = collect(plans, out, settings)
    assert again["speed_drift"] is None and again["speed_noise"] is None
    assert "speed_sentinel" not in json.loads(provenance_path(out).read_text())["runs"][-1]


def test_the_collector_command_prints_the_readings_and_no_sentinel_turns_them_off(tmp_path) -> None:
    script = REPO / "profilers" / "collect_dataset.py"
    common = ["measure", "--device", "cpu", "--families", "mlp", "--batch-sizes", "8", "--max-gmacs", "0.0005",
              "--every", "2", "--min-time", "0.1", "--threads", "1"]
    on = subprocess.run([sys.executable, str(script), *common, "--out", str(tmp_path / "on.csv"),
                         "--sentinel-every", "0"], capture_output=True, text=True, timeout=300)
    assert on.returncode == 0, on.stderr
    assert "speed sentinel: " in on.stderr and "[sentinel, start]" in on.stderr and "[sentinel, end]" in on.stderr
    runs = json.loads(provenance_path(tmp_path / "on.csv").read_text())["runs"]
    assert [r["where"] for r in runs[-1]["speed_sentinel"]["readings"]] == ["start", "between", "end"]
    off = subprocess.run([sys.executable, str(script), *common, "--every", "3", "--out", str(tmp_path / "off.csv"),
                          "--no-sentinel"],
                         capture_output=True, text=True, timeout=300)
    assert off.returncode == 0, off.stderr
    assert "sentinel" not in off.stderr
    assert "speed_sentinel" not in json.loads(provenance_path(tmp_path / "off.csv").read_text())["runs"][-1]
    bad = subprocess.run([sys.executable, str(script), *common, "--out", str(tmp_path / "x.csv"),
                          "--sentinel-every", "-1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--sentinel-every" in bad.stderr and "Traceback" not in bad.stderr


def test_a_drifting_collection_is_named_in_the_trained_sets_metadata_and_report(tmp_path) -> None:
    from perfpredict.estimators.train import train_dataset

    name = "cpu_epyc_2vcpu_infer"
    for suffix in (".csv", ".meta.json"):
        shutil.copy(REPO / "datasets" / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    shutil.copy(REPO / "datasets" / "zoo_features.csv", tmp_path / "zoo_features.csv")
    meta_path = tmp_path / f"{name}.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["runs"][0]["speed_sentinel"] = {"config": "c", "batch_size": 8, "readings": [], "drift": 0.35,
                                         "noise": 0.04}
    meta_path.write_text(json.dumps(meta))
    ts = train_dataset(tmp_path / f"{name}.csv", tmp_path / "models", evaluate=False)
    sentinels = [r["speed_sentinel"] for r in ts.metadata["provenance"]["runs"]]
    assert sentinels[0] == {"drift": 0.35, "noise": 0.04} and all(s is None for s in sentinels[1:])
    report = (ts.out_dir / "report.md").read_text()
    assert f"The collection run of {meta['runs'][0]['started_at']}" in report and "differ by 35%" in report
    # the shipped sets' collections had no sentinel: their reports say nothing of it
    assert "sentinel" not in (REPO / "trained_models" / name / "report.md").read_text()
