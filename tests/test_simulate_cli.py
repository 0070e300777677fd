"""`perfpredict simulate`: a real run end to end (records, metrics, plots, MLflow) and clear errors for bad input."""

from __future__ import annotations

import csv
import json

import pytest


def test_simulate_writes_records_metrics_plots_and_an_mlflow_run(run_cli, tmp_path):
    proc = run_cli("simulate", "--trace", "synergy:n=120,load=4,seed=3", "--cluster", "2x8", "--policy", "srtf",
                   "--mechanism", "proportional", "--out", "sim")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(open(tmp_path / "sim" / "jobs.csv")))
    assert len(rows) == 120 and all(r["finished"] == "True" for r in rows)
    for r in rows:
        assert float(r["finish_s"]) >= float(r["first_start_s"]) >= float(r["arrival_s"])
        assert float(r["jct_s"]) == pytest.approx(float(r["finish_s"]) - float(r["arrival_s"]))
    doc = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert doc["params"]["policy"] == "srtf" and doc["params"]["gpus"] == 16
    m = doc["metrics"]
    assert m["n_finished"] == 120 and 0 < m["gpu_util"] <= 1
    assert m["avg_jct_s"] == pytest.approx(sum(float(r["jct_s"]) for r in rows) / 120)
    assert (tmp_path / "sim" / "jct_cdf.png").stat().st_size > 0
    assert "mlflow: run" in proc.stdout and "avg_jct_s" in proc.stdout

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["perfpredict-simulations"])
    assert len(runs) == 1 and runs["params.mechanism"][0] == "proportional"
    assert runs["metrics.avg_jct_s"][0] == pytest.approx(m["avg_jct_s"])


def test_a_csv_trace_runs_and_a_malformed_one_is_one_clear_error(run_cli, tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("id,arrival_s,gpus,work_s,model\na,0,1,3600,resnet18\nb,10,2,7200,gnmt\n")
    proc = run_cli("simulate", "--trace", good, "--cluster", "1x4", "--no-mlflow", "--out", "o1",
                   "--mode", "event")
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in csv.DictReader(open(tmp_path / "o1" / "jobs.csv"))}
    assert float(rows["a"]["first_start_s"]) == 0.0 and float(rows["b"]["first_start_s"]) == 10.0

    bad = tmp_path / "bad.csv"
    bad.write_text("id,arrival_s,gpus,work_s\na,0,1,3600\nb,ten,1,60\n")
    proc = run_cli("simulate", "--trace", bad, "--cluster", "1x4", "--no-mlflow", "--out", "o2")
    assert proc.returncode != 0
    assert "line 3" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--mechanism", "magic"), "unknown mechanism"),
    (("--policy", "random"), "unknown policy"),
    (("--cluster", "lots"), "SERVERSxGPUS"),
    (("--cluster", "2x8:cores=4"), "unknown option"),
    (("--trace", "synergy:n=10,speed=3"), "unknown option"),
    (("--trace", "nowhere.csv"), "does not exist"),
    (("--steady", "10-20"), "FIRST:LAST"),
])
def test_bad_arguments_are_one_readable_error(run_cli, args, message):
    proc = run_cli("simulate", "--trace", "synergy:n=10", "--cluster", "1x8", "--no-mlflow", *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr
