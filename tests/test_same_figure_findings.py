"""Property scan "one figure, every place it appears": a number perfpredict writes to several outputs (the printed
table, the JSON, the predicted card, MLflow) must be the same number in each."""

import pytest

from perfpredict import Predictor
from perfpredict.estimators.arch import from_workload


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


@pytest.fixture(scope="module")
def mlp():
    return from_workload("zoo:mlp", None)


@pytest.mark.parametrize("model_set, limit", [("cpu_epyc_2vcpu", 3e8), ("cpu_xeon_2vcpu_infer", 3e8),
                                              ("cuda_h100", 2e9)])
def test_predicted_max_batch_shows_the_memory_it_held_to_the_limit(predictor, mlp, model_set, limit):
    """`perfpredict max-batch --predicted` on a CPU set printed the *median* peak memory in its column "memory
    (held to the limit)" (and wrote it to the JSON and MLflow's probe_memory_bytes) while the q90 decided fits:
    batch 7551 read 207.9 MiB "no" against a 286.1 MiB limit. The figure shown must be the one held, and the same
    as the predicted card's safe memory at that batch size."""
    r = predictor.largest_batch(features=mlp, memory_limit_bytes=limit, device_type=model_set)
    assert r.largest_ok is not None and r.smallest_failed is not None
    for p in r.probes:
        held = p.device_bytes if p.device_bytes is not None else p.peak_bytes  # what print_batch_limit shows
        assert (held <= limit) == (p.status == "ok"), (p.batch_size, held, limit, p.status)
    sizes = [r.largest_ok, r.smallest_failed, *(p.batch_size for p in r.probes[:3])]
    card = predictor.card_for(mlp, sizes, device_type=model_set)
    for q in card.prediction.points:
        p = r.probe(q.batch_size)
        held = p.device_bytes if p.device_bytes is not None else p.peak_bytes
        safe = q.device_memory_safe_bytes if q.device_memory_safe_bytes is not None else q.peak_memory_safe_bytes
        assert held == int(safe), (q.batch_size, held, safe)
        assert p.iter_time_s == q.iter_time_s


def test_simulate_prints_no_nan_for_a_genie_class_without_tasks(tmp_path):
    """A GENIE trace without urgent tasks: metrics.json writes the class's QoS guarantee as null, and simulate's
    summary line printed "urgent nan%" for it."""
    import json

    from typer.testing import CliRunner

    from perfpredict.cli import app

    out = tmp_path / "sim"
    r = CliRunner().invoke(app, ["simulate", "--cluster", "genie", "--trace", "genie:rate=4,hours=2",
                                 "--mechanism", "swaf", "-o", str(out), "--no-mlflow"])
    assert r.exit_code == 0, r.output
    genie = json.loads((out / "metrics.json").read_text())["genie"]
    assert genie["qos_by_class"]["urgent"] is None  # the trace this test needs: a class with no task
    line = next(x for x in r.output.splitlines() if x.startswith("GENIE"))
    assert "nan" not in line.lower() and "urgent –" in line
    assert f"{genie['makespan_s'] / 3600:,.2f} h" in line


def test_genie_experiment_rows_hold_no_nan_for_a_class_without_tasks():
    """experiments/genie_qos.py's QoS mix 0/20/80 has no urgent task: its rows' qos_urgent_pct was NaN, written
    into results.json as the bare token NaN, which is not JSON (a strict reader refuses the file)."""
    import json
    from pathlib import Path

    from perfpredict.sim.genie_workload import genie_trace
    from tests.conftest import load_script

    mod = load_script(Path(__file__).resolve().parents[1] / "experiments" / "genie_qos.py")
    jobs = genie_trace(4.0, 2.0, mix=(0.0, 20.0, 80.0), seed=0)
    row = mod.run_one(jobs, 4, "SWAF", "swaf", {})
    assert row["qos_urgent_pct"] is None and row["qos_normal_pct"] is not None
    json.dumps(row, allow_nan=False)


def test_a_figure_beside_its_verdict_is_printed_to_the_places_that_tell_it_from_the_target():
    """An experiment printed its worst reduction to 0.1% beside a verdict computed unrounded: 14.96% against a
    15% target read "15.0% (target >= 15%): FAIL". The places now go on until the two differ."""
    from perfpredict.script_args import places_to_tell

    assert places_to_tell(14.96, 15) == 2 and f"{14.96:.2f}" == "14.96"
    assert places_to_tell(18.1, 20) == 1  # clear of the target: the usual one place
    assert places_to_tell(88.6441, 88.6449) == 3  # two QoS figures that tie to two places
    assert places_to_tell(2.0, 2.0, fewest=2) == 6  # equal: as many places as allowed, and no further


def test_the_simulated_h100_holds_the_memory_colocate_fits_a_pair_to(predictor, mlp):
    """The Horus simulator's H100 held 80 GB (a constant) while its jobs' memory was measured on, and `colocate`
    fits a pair to, the 85.0 GB the dataset's provenance records: a pair of 80-85 GB fitted in one and not in
    the other."""
    from perfpredict.sim.horus_workload import horus_cluster

    card = predictor.predict(features=mlp, batch_sizes=[32], device_type="cuda_h100")
    pair = predictor.colocation(card, card, device_type="cuda_h100")
    assert pair.device_capacity_bytes == 85_017_493_504
    assert {s.gpu_mem_gb for s in horus_cluster().servers} == {pair.device_capacity_bytes / 1e9}
