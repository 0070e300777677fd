"""Findings of the property scan of result aggregation and reporting (compare, per-job records, plots, the
experiments' checks)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from perfpredict.sim.compare import Comparison, Scheduler
from perfpredict.sim.job_records import job_records
from perfpredict.sim.run import run_simulation

ROOT = Path(__file__).resolve().parents[1]


def test_jct_cdf_plot_draws_the_steady_window_the_metrics_measure(tmp_path, monkeypatch):
    """jct_cdf.png drew every finished job while metrics.json's JCT statistics cover the --steady window: on a
    loaded trace the plot's median was 281 h against a p50 of 426 h. It now draws the window's jobs."""
    import matplotlib.axes

    drawn = []
    step = matplotlib.axes.Axes.step

    def record(self, x, y, *args, **kwargs):
        drawn.append((np.asarray(x, dtype=float), np.asarray(y, dtype=float)))
        return step(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "step", record)
    run = run_simulation("synergy:n=300,load=12", "2x8", "fifo", "proportional", steady=(150, 250),
                         out_dir=tmp_path / "sim")
    m = run.metrics
    assert m.n_measured == 100 and len(run.result.finished) > m.n_measured
    x, y = drawn[0]  # the CDF: x = [first JCT, sorted JCTs...] in hours, y = 0, 1/n, ..., 1
    jct_h = x[1:]
    assert len(jct_h) == m.n_measured
    assert np.median(jct_h) * 3600 == pytest.approx(m.p50_jct_s, rel=1e-12)
    assert jct_h.max() * 3600 == pytest.approx(m.max_jct_s, rel=1e-12)
    assert y[-1] == 1.0


def test_a_finish_within_round_off_of_the_due_date_is_not_late_in_the_metrics(tmp_path):
    """0.1 + 0.2 finishes at 0.30000000000000004: jobs.csv called the job on time (met_deadline, tardiness 0)
    while metrics.json counted it in n_late with a 5.6e-17 EUR penalty."""
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model,deadline_s,weight\n"
                     "a,0.1,1,0.2,linear,0.3,3600\n"
                     "b,5,1,10,linear,10,3600\n")  # b: 5 s late, truly
    run = run_simulation(trace, "1x1", "edf", "rigid")
    rows = {r["id"]: r for r in job_records(run.result)}
    assert rows["a"]["met_deadline"] is True and rows["a"]["tardiness_s"] == 0.0
    assert rows["b"]["met_deadline"] is False and rows["b"]["tardiness_s"] == pytest.approx(5.0)
    m = run.metrics
    assert m.n_late == sum(1 for r in rows.values() if r["met_deadline"] is False) == 1
    assert m.tardiness_cost == pytest.approx(5.0)  # weight 3600 EUR/h x 5 s, b only
    assert m.max_tardiness_s == pytest.approx(5.0)


def _synergy_module():
    spec = importlib.util.spec_from_file_location("synergy_jct_under_test", ROOT / "experiments" / "synergy_jct.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
    return mod


def test_synergy_greedy_target_is_not_a_fail_when_greedy_did_not_run(capsys):
    """`--mechanisms proportional,tune` (greedy is optional) printed "FAIL: split 50/0/50: greedy ÷ tune avg JCT
    (target ...)" with no ratio at all: a verdict on a target that was not measured."""
    mod = _synergy_module()

    def row(table, load, mech, jct, ratio=3.0):
        return {"table": table, "policy": "fifo", "load": load, "mechanism": mech, "avg_jct_h": jct,
                "offered_load": load / 7.0, "cpus_per_gpu": ratio, "p99_jct_h": jct}

    rows = [row("fifo-single", 9.0, "proportional", 40.0), row("fifo-single", 9.0, "tune", 20.0),
            row("split-50-0-50", 4.0, "proportional", 30.0), row("split-50-0-50", 4.0, "tune", 20.0),
            row("ratio", 9.0, "proportional", 40.0), row("ratio", 9.0, "tune", 20.0),
            row("ratio", 9.0, "proportional", 25.0, 6.0), row("ratio", 9.0, "tune", 20.0, 6.0)]
    checks = mod.check_targets(rows)
    assert checks["greedy"]["ok"] is None
    assert "N/A: split 50/0/50" in capsys.readouterr().out
    # with greedy run, the verdict is computed as before
    rows += [row("split-50-0-50", 4.0, "greedy", 20.9)]
    assert mod.check_targets(rows)["greedy"]["ok"] is False  # 1.045x: not worse beyond 5 %
    rows[-1] = row("split-50-0-50", 4.0, "greedy", 21.2)
    assert mod.check_targets(rows)["greedy"]["ok"] is True  # 1.06x


def test_compare_a_tie_with_the_baseline_is_not_marked_worse():
    """A scheduler whose metric equals the baseline's on every seed (a makespan set by the same last job) got
    ``better: False`` in summary.json and a red "+0.0%" in the table."""
    base, other = Scheduler("fifo", "proportional"), Scheduler("fifo", "tune")
    runs = [{"scheduler": s.label, "seed": k, "status": "ok", "makespan_s": mk, "gpu_util": u}
            for k in (0, 1) for s, mk, u in ((base, 1000.0 + k, 0.5), (other, 1000.0 + k, 0.5 + 0.1 * k))]
    cmp = Comparison(schedulers=[base, other], seeds=[0, 1], metrics=["makespan_s", "gpu_util"], runs=runs)
    rows = {r["metric"]: r for r in cmp.summary() if r["scheduler"] == other.label}
    assert rows["makespan_s"]["vs_baseline"] == 0.0 and rows["makespan_s"]["better"] is None
    assert rows["gpu_util"]["vs_baseline"] > 0 and rows["gpu_util"]["better"] is True


def test_compare_runs_csv_has_each_column_once_when_a_metric_is_a_fixed_column(tmp_path):
    """`--metric n_finished` wrote runs.csv with two `n_finished` columns (pandas reads the second as
    `n_finished.1`, csv.DictReader keeps only the last)."""
    import csv

    from perfpredict.sim.compare import compare, parse_schedulers

    cmp = compare("synergy:n=20,load=3", "2x8", parse_schedulers(["fifo"], ["proportional", "tune"]), [0],
                  metrics=["n_finished", "makespan_s"], out_dir=tmp_path / "cmp")
    with open(tmp_path / "cmp" / "runs.csv", newline="") as f:
        header = next(csv.reader(f))
    assert len(header) == len(set(header)), header
    assert {"n_finished", "makespan_s"} <= set(header)
    rows = list(csv.DictReader(open(tmp_path / "cmp" / "runs.csv", newline="")))
    assert [float(r["n_finished"]) for r in rows] == [r["n_finished"] for r in cmp.runs] == [20.0, 20.0]
