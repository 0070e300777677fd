"""Findings of a property scan of the PerformanceCard and its MLflow logging (perfpredict.tracking).

- A card's linear rate model is fitted with alpha, beta >= 0; one with a negative coefficient (or a quadratic
  selection without the linear candidate that extrapolates it) loaded, and answered negative, zero or
  infinite iteration times outside the measured batch sizes.
- A rate model whose ``coefficients`` (what ``perfpredict show`` prints) differ from its selected candidate's
  (what every answer uses) loaded and answered with the candidate's, silently.
- A co-location point measured ``ok`` without a relative speed (the solo run failed) made ``log_profile``
  raise MlflowException half-way: the run ended FAILED without the card artifact.
- ``log_profile(card)`` of a predicted card went into ``perfpredict-profiles``, not ``perfpredict-predictions``
  as docs/profiling.md says.
"""

from __future__ import annotations

import json

import pytest

from perfpredict import tracking
from perfpredict.card import ColocationInfo, ColocationPoint, PerformanceCard, PredictedPoint, PredictionInfo
from perfpredict.errors import PerfPredictError
from tests.test_card import build_card


def _with_rate_model(edit) -> PerformanceCard:
    card, _ = build_card()
    d = json.loads(card.to_json())
    edit(d["rate_model"])
    return PerformanceCard.from_json(json.dumps(d))


def _linear(alpha: float, beta: float):
    def edit(rm):
        rm["kind"] = "linear_time"
        rm["coefficients"] = {"alpha": alpha, "beta": beta}
        for c in rm["candidates"]:
            if c["kind"] == "linear_time":
                c["coefficients"] = {"alpha": alpha, "beta": beta}
    return edit


@pytest.mark.parametrize("alpha,beta", [(0.01, -0.0001), (-0.002, 0.0006)])
def test_a_linear_rate_model_with_a_negative_coefficient_answers_no_time(alpha, beta):
    # positive over the measured batch sizes 4-64, zero or negative beyond them
    card = _with_rate_model(_linear(alpha, beta))
    for b in (1, 2, 1000):
        with pytest.raises(PerfPredictError, match="negative coefficient"):
            card.iter_time(b)
        with pytest.raises(PerfPredictError, match="negative coefficient"):
            card.latency_s(10, b)


def test_a_valid_linear_rate_model_answers_positive_times_everywhere():
    card = _with_rate_model(_linear(0.0, 0.0002))
    for b in (1, 4, 64, 10**6):
        assert card.iter_time(b) > 0 and card.throughput_at(b) > 0


def test_a_quadratic_selection_without_its_linear_extrapolation_is_refused():
    def edit(rm):
        q = next(c for c in rm["candidates"] if c["kind"] == "quadratic_rate")
        q["coefficients"] = {"k0": 300.0, "k1": 200.0, "k2": -2.5}  # positive rate on 4-64, negative from 81
        rm["kind"], rm["coefficients"], rm["candidates"] = "quadratic_rate", dict(q["coefficients"]), [q]
    card = _with_rate_model(edit)
    with pytest.raises(PerfPredictError, match="no linear_time candidate"):
        card.iter_time(200)  # was inf


def test_rate_model_coefficients_that_differ_from_the_selected_candidate_are_refused():
    def edit(rm):
        rm["coefficients"] = {k: v * 2 for k, v in rm["coefficients"].items()}
    card = _with_rate_model(edit)
    with pytest.raises(PerfPredictError, match="not those of the selected"):
        card.iter_time(8)


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def test_a_colocation_point_without_a_relative_speed_is_logged(store):
    # what measure_colocation writes when the solo run failed and the 2-copy run did not
    card, _ = build_card()
    card.colocation = ColocationInfo(batch_size=8, window_s=1.0, device="cuda:0", points=[
        ColocationPoint(copies=1, batch_size=8, status="error", error="copy 0: crashed", device="cuda:0"),
        ColocationPoint(copies=2, batch_size=8, status="ok", per_copy_samples_per_s=[300.0, 310.0],
                        aggregate_samples_per_s=610.0, device="cuda:0")])
    run_id = tracking.log_profile(card)
    run = store.get_run(run_id)
    assert run.info.status == "FINISHED" and "perfpredict.logging_error" not in run.data.tags
    assert "card.json" in [a.path for a in store.list_artifacts(run_id)]
    assert store.get_metric_history(run_id, "colocated_per_copy_relative") == []


def test_a_predicted_card_goes_to_the_predictions_experiment_by_default(store):
    card, _ = build_card()
    card.prediction = PredictionInfo(method="estimator", model_set="cuda_h100", dataset_sha256="0" * 64,
                                     device_type="cuda_h100", out_of_distribution=False, points=[
                                         PredictedPoint(batch_size=8, iter_time_s=0.01, iter_time_interval_s=(0.009, 0.011),
                                                        samples_per_s=800.0, peak_memory_bytes=1e8,
                                                        peak_memory_interval_bytes=(9e7, 1.1e8),
                                                        peak_memory_safe_bytes=1.1e8)])
    run = store.get_run(tracking.log_profile(card))
    assert store.get_experiment(run.info.experiment_id).name == "perfpredict-predictions"
    assert run.data.tags["perfpredict.kind"] == "prediction"
    measured, _ = build_card()
    run = store.get_run(tracking.log_profile(measured))
    assert store.get_experiment(run.info.experiment_id).name == "perfpredict-profiles"


def test_a_newer_minor_card_keeps_the_comm_models_lambda():
    """Dropping the fields a newer minor version added also dropped ``comm_model.lambda`` (the JSON alias of
    ``lambda_``): GENIE's λ silently became None."""
    from perfpredict.card import SCHEMA_VERSION, CommModelCard

    card, _ = build_card()
    card.comm_model = CommModelCard(gamma=1.8, lambda_=0.78, residuals=[0.01, -0.02], device="cuda:0")
    d = json.loads(card.to_json())
    assert d["comm_model"]["lambda"] == 0.78
    major, minor = SCHEMA_VERSION.split(".")
    d["schema_version"] = f"{major}.{int(minor) + 1}"
    d["comm_model"]["added_later"] = True  # what a newer minor version may add, dropped here
    back = PerformanceCard.from_json(json.dumps(d))
    assert back.comm_model.lambda_ == 0.78 and back.comm_model.gamma == 1.8
    assert back.model_copy(update={"schema_version": SCHEMA_VERSION}) == card


@pytest.mark.parametrize("where", [("energy",), ("colocation", "points"), ("colocation", "pairs")])
def test_a_gpu_utilisation_beyond_one_is_refused_on_load(where):
    """NVML utilisation is the fraction of samples with a kernel running (0..1, as a predicted point's is
    checked); a measured card with 7.5 loaded and gave a GPU-sharing scheduler a gpu_util of 7.5."""
    from perfpredict.card import EnergyInfo, EnergyPoint, PairColocation
    from perfpredict.sched.perf import PerfModel

    card, _ = build_card()
    card.energy = EnergyInfo(available=True, points=[EnergyPoint(batch_size=64, gpu_utilization=0.9, device="cuda:0")])
    card.colocation = ColocationInfo(batch_size=8, window_s=1.0, device="cuda:0", points=[
        ColocationPoint(copies=1, batch_size=8, status="ok", per_copy_samples_per_s=[300.0], per_copy_relative=1.0,
                        aggregate_samples_per_s=300.0, aggregate_relative=1.0, gpu_utilization=0.5, device="cuda:0")],
        pairs=[PairColocation(partner="zoo:mlp", job_solo_gpu_utilization=0.5, partner_solo_gpu_utilization=0.4,
                              cumulative_gpu_utilization=0.9, device="cuda:0")])
    d = json.loads(card.to_json())
    assert PerfModel.from_card(PerformanceCard.from_json(json.dumps(d))).gpu_util == 0.9
    if where == ("energy",):
        d["energy"]["points"][0]["gpu_utilization"] = 7.5
    elif where[1] == "points":
        d["colocation"]["points"][0]["gpu_utilization"] = 1.5
    else:
        d["colocation"]["pairs"][0]["job_solo_gpu_utilization"] = 50.0  # a percentage
    with pytest.raises(PerfPredictError, match="gpu_utilization: Input should be less than or equal to 1"):
        PerformanceCard.from_json(json.dumps(d))
