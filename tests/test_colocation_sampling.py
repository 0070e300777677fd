"""Co-location pairs drawn from a dataset's measured points, and the interference model scored on jobs it has
not seen (leave one job out)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfpredict.dataset.collect import read_dataset
from perfpredict.estimators.interference import colocation_rows, leave_one_job_out
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]
H100 = REPO / "datasets" / "cuda_h100.csv"
PAIRS = REPO / "datasets" / "cuda_h100_colocation.csv"


def _collector():
    return load_script(REPO / "profilers" / "collect_colocation.py")


@pytest.fixture(scope="module")
def h100_rows():
    return read_dataset(H100)


def test_sampled_jobs_span_the_measured_utilisation_range_and_are_reproducible(h100_rows):
    cc = _collector()
    jobs = cc.sample_jobs(h100_rows, 24, seed=1, max_job_mem_gb=30.0)
    assert len(jobs) == 24 and len({j[0] for j in jobs}) == 24
    assert len({j[0].rsplit("-b", 1)[0] for j in jobs}) == 24     # 24 architectures, one batch size each
    util = {f"{r['config']}-b{r['batch_size']}": float(r["gpu_utilization"]) for r in h100_rows if r["status"] == "ok"}
    us = sorted(util[j[0]] for j in jobs)
    # One job per utilisation stratum: the draw reaches both ends of the measured range.
    assert us[0] < 0.2 and us[-1] > 0.9
    assert len({j[1] for j in jobs}) >= 6                       # families drawn, not only the biggest one
    mem = {f"{r['config']}-b{r['batch_size']}": float(r["nvml_process_bytes"]) for r in h100_rows if r["status"] == "ok"}
    assert max(mem[j[0]] for j in jobs) <= 30e9
    assert cc.sample_jobs(h100_rows, 24, seed=1, max_job_mem_gb=30.0) == jobs
    assert cc.sample_jobs(h100_rows, 24, seed=2, max_job_mem_gb=30.0) != jobs
    # Each sampled job's parameters rebuild the measured architecture.
    from perfpredict.workload.zoo import get_family
    for label, fam, cfg, batch in jobs:
        assert label == f"{get_family(fam).config_name(cfg)}-b{batch}"


def test_random_pairs_give_every_job_its_partners_once():
    cc = _collector()
    labels = [f"j{i}" for i in range(10)]
    pairs = cc.random_pairs(labels, partners=3, seed=0)
    assert len(pairs) == len(set(pairs)) and all(a != b for a, b in pairs)
    assert not any((b, a) in pairs for a, b in pairs)
    for x in labels:
        assert len({b if a == x else a for a, b in pairs if x in (a, b)}) >= 3
    with_self = cc.random_pairs(labels, partners=3, seed=0, self_pairs=True)
    assert set(with_self) - set(pairs) == {(x, x) for x in labels}
    assert cc.random_pairs(labels[:2], partners=5, seed=0) == [("j0", "j1")]


@pytest.mark.parallel_safe  # compares no times: the module's timing tests stay serial
def test_dry_run_lists_the_draw_without_measuring(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "profilers" / "collect_colocation.py"), "--out",
                           str(tmp_path / "p.csv"), "--from-dataset", str(H100), "--sample-jobs", "6",
                           "--partners", "2", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\njob ") + proc.stdout.startswith("job ") == 6
    assert proc.stdout.strip().endswith("pairs") and not (tmp_path / "p.csv").exists()
    bad = subprocess.run([sys.executable, str(REPO / "profilers" / "collect_colocation.py"), "--out",
                          str(tmp_path / "p.csv"), "--from-dataset", str(tmp_path / "none.csv"), "--dry-run"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no dataset" in bad.stderr and "Traceback" not in bad.stderr


def _write_pairs(path: Path, rows: list[tuple[str, str, float, float, float, float]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "partner", "status", "job_slowdown", "partner_slowdown", "job_solo_gpu_utilization",
                    "partner_solo_gpu_utilization", "cumulative_gpu_utilization"])
        for a, b, ua, ub, sa, sb in rows:
            w.writerow([a, b, "ok", sa, sb, ua, ub, ua + ub])


def test_leave_one_job_out_recovers_a_true_cumulative_model(tmp_path):
    rng = np.random.default_rng(0)
    util = {f"j{i}": float(u) for i, u in enumerate(np.linspace(0.1, 0.95, 9))}
    def slow(u):
        return 0.3 * u if u <= 1 else 0.3 + 0.5 * (u - 1) + 1.2 * (u - 1) ** 2
    rows = []
    names = list(util)
    for i, a in enumerate(names):
        for b in names[i:]:
            u = util[a] + util[b]
            rows.append((a, b, util[a], util[b], slow(u) + rng.normal(0, 0.01), slow(u) + rng.normal(0, 0.01)))
    _write_pairs(tmp_path / "p.csv", rows)
    r = leave_one_job_out(colocation_rows(tmp_path / "p.csv"))
    assert r["jobs"] == 9 and r["points"] == 2 * len(rows)
    assert r["rmse"] < 0.05 < r["rmse_mean_slowdown"]


def test_leave_one_job_out_on_the_h100_pairs_beats_the_mean():
    r = leave_one_job_out(colocation_rows(PAIRS))
    assert r["jobs"] == 8 and r["points"] == 72
    # Horus's model carries some information about a job it has not seen (docs/estimators.md: how little).
    assert r["rmse"] < r["rmse_mean_slowdown"] and r["mae"] < r["mae_mean_slowdown"]


def test_an_architecture_at_two_batch_sizes_is_held_out_whole(tmp_path):
    # x at batch 8 and 16 is one architecture: one fold holds out both (4 jobs, not 5), so neither label can
    # stay in training to vouch for the other.
    rows = [("a-b8", "b-b8", 0.3, 0.4, 0.21, 0.21), ("a-b8", "c-b8", 0.3, 0.5, 0.24, 0.24),
            ("b-b8", "c-b8", 0.4, 0.5, 0.27, 0.27), ("x-b8", "a-b8", 0.2, 0.3, 1.0, 0.15),
            ("x-b16", "b-b8", 0.35, 0.4, 1.0, 0.225), ("x-b8", "x-b16", 0.2, 0.35, 1.0, 1.0)]
    _write_pairs(tmp_path / "p.csv", rows)
    r = leave_one_job_out(colocation_rows(tmp_path / "p.csv"))
    assert r["jobs"] == 4


def test_leave_one_job_out_needs_three_jobs(tmp_path):
    _write_pairs(tmp_path / "p.csv", [("a", "b", 0.3, 0.4, 0.1, 0.2), ("a", "a", 0.3, 0.3, 0.1, 0.1)])
    assert leave_one_job_out(colocation_rows(tmp_path / "p.csv")) is None


def test_a_run_is_in_the_provenance_before_its_first_pair_is_measured(tmp_path, monkeypatch):
    """A collection killed outright (the lent machine taken back) must still leave its command and device beside
    the rows it wrote: the run is recorded before measuring and completed at the end, as the dataset collector
    does. One real CPU pair (the tiny MLP with a copy of itself)."""
    import json

    import perfpredict.profile.colocation as colocation

    cc = _collector()
    out = tmp_path / "pairs.csv"
    meta_file = tmp_path / "pairs.meta.json"
    seen_at_first_pair: list[dict] = []
    real_measure_pair = colocation.measure_pair

    def measure_pair_noting_the_provenance(*args, **kwargs):
        seen_at_first_pair.append(json.loads(meta_file.read_text()))
        return real_measure_pair(*args, **kwargs)

    monkeypatch.setattr(colocation, "measure_pair", measure_pair_noting_the_provenance)
    assert cc.main(["--out", str(out), "--device", "cpu", "--jobs", "1", "--window", "0.3"]) == 0
    (during,) = seen_at_first_pair
    (run,) = during["runs"]
    assert run["finished_at"] is None and run["device"] == "cpu" and "--jobs 1" in run["command"]
    after = json.loads(meta_file.read_text())
    (done,) = after["runs"]                      # the same entry, completed, not a second one
    assert done["run_id"] == run["run_id"] and done["finished_at"] and done["rows_written"] == 1
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 1 and rows[0]["status"] == "ok" and float(rows[0]["job_slowdown"]) > -1
