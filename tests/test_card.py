"""The PerformanceCard: JSON round trip, required keys, provenance on every section, helpful load errors,
schema-version compatibility, the scheduler-facing questions, and Horus eq. 2 (horus_memory_estimate).

The card is built by hand with every section filled; its rate model is a real fit of its own throughput
points and its memory section carries real analytic estimates.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from perfpredict.card import (
    SCHEMA_VERSION,
    CardError,
    DeviceInfo,
    EnergyInfo,
    GraphFeatures,
    HorusMemoryEstimate,
    LatencyModel,
    MemoryPoint,
    ModelInfo,
    PerformanceCard,
    ProfileRun,
    StartupTimes,
    ThroughputPoint,
    TimingStats,
)
from perfpredict.errors import PerfPredictError
from perfpredict.fit.memory import horus_memory_estimate
from perfpredict.fit.rate import RateModel, fit_rate_model

DEV = "cuda:0"
PARAMS = 932_362  # zoo:mlp defaults: 784-512-512-512-10
PARAM_BYTES = 4 * PARAMS
MEASURED = {4: 0.0105, 8: 0.0112, 16: 0.0131, 32: 0.0166, 64: 0.0243}  # batch -> median iteration time (s)
OVERHEAD = 512 * 2**20


def _features() -> GraphFeatures:
    return GraphFeatures(
        available=True, exporter="torchscript", opset=17, onnx_file="model.onnx", export_batch_size=1,
        forward_macs_per_sample=930_816, forward_macs_fixed=0, macs_by_op={"Gemm": 930_816},
        fvcore_macs_per_sample=930_816, fvcore_flops_per_sample=932_352, fvcore_by_operator={"addmm": 930_816},
        fvcore_unsupported={}, macs_rel_diff=0.0, param_bytes=PARAM_BYTES, activation_bytes_per_sample=15_464,
        activation_bytes_fixed=0, op_counts={"Gemm": 4, "Relu": 3}, num_nodes=7, device=None,
    )


def _timing(t: float) -> TimingStats:
    return TimingStats(median_s=t, p10_s=t * 0.97, p90_s=t * 1.04, mean_s=t * 1.01, std_s=t * 0.02, cv=0.02,
                       iterations=40, timed_s=40 * t, warmup_iterations=5, warmup_s=5 * t * 1.3,
                       stop_reason="stable")


def build_card() -> tuple[PerformanceCard, RateModel]:
    feats = _features()
    points = [
        ThroughputPoint(batch_size=b, status="ok", samples_per_s=b / t, iter_time_s=t, p10_s=t * 0.97,
                        p90_s=t * 1.04, cv=0.02, iterations=40, timing=_timing(t),
                        startup=StartupTimes(load_s=0.12, build_s=0.35, setup_s=0.05, first_iter_extra_s=0.4),
                        device=DEV)
        for b, t in MEASURED.items()
    ]
    points.append(ThroughputPoint(batch_size=128, status="oom", error="CUDA out of memory. Tried to allocate 2.00 GiB",
                                  device=DEV))
    bs = sorted(MEASURED)
    model = fit_rate_model(bs, [b / MEASURED[b] for b in bs])
    memory = [
        MemoryPoint(batch_size=b, peak_bytes=PARAM_BYTES * 3 + b * 30_000, kind="cuda_peak_allocated",
                    cuda_reserved_bytes=PARAM_BYTES * 4 + b * 32_768, nvml_process_bytes=OVERHEAD + PARAM_BYTES * 4,
                    baseline_bytes=OVERHEAD,
                    analytic=horus_memory_estimate(feats, b, mode="train", param_bytes=PARAM_BYTES,
                                                   optimizer_state_bytes=PARAM_BYTES, overhead_bytes=OVERHEAD),
                    device=DEV)
        for b in bs
    ]
    card = PerformanceCard(
        status="partial",
        model=ModelInfo(name="mlp-input_dim784-depth3-width512-num_classes10", source="zoo:mlp", parameters=PARAMS,
                        trainable_parameters=PARAMS, param_bytes=PARAM_BYTES, buffer_bytes=0, family="mlp",
                        config={"input_dim": 784, "depth": 3, "width": 512, "num_classes": 10},
                        file_sha256=None),
        device=DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", index=0,
                          uuid="GPU-12345678-1234-1234-1234-123456789abc", threads=8, cpu_count=16,
                          memory_bytes=80 * 2**30, compute_capability="9.0", driver_version="550.54.15",
                          cuda_version="12.4", hostname="node17", torch_version="2.13.0",
                          python_version="3.11.9", platform="Linux-6.5-x86_64"),
        run=ProfileRun(mode="train", batch_sizes=bs + [128], started_at="2025-01-01T10:00:00+00:00",
                       finished_at="2025-01-01T10:02:13+00:00", wall_s=133.2, timed_s=4.1,
                       perfpredict_version="0.1.0", library_versions={"torch": "2.13.0", "onnx": "1.23.2"},
                       command="perfpredict profile zoo:mlp", settings={"max_iters": 200, "target_cv": 0.02}),
        throughput=points,
        rate_model=model.to_card(device=DEV),
        latency=LatencyModel(nu_s=0.92, device=DEV),
        memory=memory,
        features=feats,
        energy=EnergyInfo(available=False, reason="NVML total-energy counter not supported on this GPU"),
        errors=[CardError(step="measure", message="out of memory", batch_size=128)],
    )
    return card, model


@pytest.fixture()
def card_and_model():
    return build_card()


@pytest.fixture()
def card(card_and_model):
    return card_and_model[0]


# --- round trip ----------------------------------------------------------------------------------------
def test_json_round_trip_equality(card):
    text = card.to_json()
    back = PerformanceCard.from_json(text)
    assert back == card
    assert back.to_json() == text
    # compact form too
    assert PerformanceCard.from_json(card.to_json(indent=None)) == card


def test_save_load_round_trip(card, tmp_path):
    p = card.save(tmp_path / "nested" / "dir" / "card.json")
    assert p == tmp_path / "nested" / "dir" / "card.json" and p.is_file()
    assert [f.name for f in p.parent.iterdir()] == ["card.json"]  # no temp file left behind
    loaded = PerformanceCard.load(p)
    assert loaded == card
    assert PerformanceCard.load(str(p)) == card
    # saving again overwrites in place
    card.save(p)
    assert PerformanceCard.load(p) == card


def test_json_has_required_keys(card):
    d = json.loads(card.to_json())
    assert d["schema_version"] == SCHEMA_VERSION
    assert d["model"]["name"] and d["model"]["parameters"] == PARAMS
    assert d["device"]["kind"] == "cuda"
    assert len(d["throughput"]) == 6
    for tp in d["throughput"]:
        assert {"batch_size", "samples_per_s", "iter_time_s", "status"} <= set(tp)
    ok = [tp for tp in d["throughput"] if tp["status"] == "ok"]
    oom = [tp for tp in d["throughput"] if tp["status"] == "oom"]
    assert len(ok) == 5 and len(oom) == 1
    for tp in ok:
        assert tp["samples_per_s"] == pytest.approx(tp["batch_size"] / tp["iter_time_s"])
    assert oom[0]["samples_per_s"] is None and oom[0]["iter_time_s"] is None and "out of memory" in oom[0]["error"]
    rm = d["rate_model"]
    assert {"kind", "coefficients", "r2", "candidates"} <= set(rm)
    assert rm["kind"] in ("linear_time", "quadratic_rate")
    assert {c["kind"] for c in rm["candidates"]} == {"linear_time", "quadratic_rate"}
    for c in rm["candidates"]:
        assert {"kind", "coefficients", "r2", "target", "loo_rel_error"} <= set(c)
    assert rm["batch_range"] == [4, 64]
    for mp in d["memory"]:
        assert {"batch_size", "peak_bytes"} <= set(mp)
        assert mp["analytic"]["total"] > 0
    f = d["features"]
    for k in ("forward_macs_per_sample", "fvcore_macs_per_sample", "param_bytes", "activation_bytes_per_sample",
              "op_counts"):
        assert k in f and f[k] is not None
    assert d["energy"]["available"] is False and d["energy"]["reason"]
    assert d["errors"][0]["batch_size"] == 128


def test_every_section_carries_source_and_device(card):
    d = json.loads(card.to_json())
    sections = d["throughput"] + d["memory"] + [d["rate_model"], d["latency"], d["features"]]
    for s in sections:
        assert "source" in s and "device" in s, s
    assert {tp["source"] for tp in d["throughput"]} == {"measured"}
    assert {tp["device"] for tp in d["throughput"]} == {DEV}
    assert d["rate_model"]["source"] == "fitted" and d["rate_model"]["device"] == DEV
    assert d["latency"]["source"] == "measured" and d["latency"]["device"] == DEV
    assert {m["source"] for m in d["memory"]} == {"measured"} and {m["device"] for m in d["memory"]} == {DEV}
    assert d["features"]["source"] == "analytic" and d["features"]["device"] is None  # device-independent


# --- load errors ---------------------------------------------------------------------------------------
def _assert_one_line_naming(err: PerfPredictError, path: Path) -> str:
    s = str(err)
    assert str(path) in s
    assert "\n" not in s and "\r" not in s
    assert err.step == "read card"
    return s


def _card_dict(card) -> dict:
    return json.loads(card.to_json())


def _load_edited(card, p: Path, where: tuple, value) -> str:
    """Write ``card`` to ``p`` with the field at path ``where`` set to ``value``; return the one-line
    error loading it raised."""
    d = _card_dict(card)
    node = d
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    p.write_text(json.dumps(d, indent=2))
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    return _assert_one_line_naming(ei.value, p)


@pytest.mark.parametrize("version", ["2.0", "0.9", "10.0"])
def test_different_major_version_rejected(card, tmp_path, version):
    d = _card_dict(card)
    d["schema_version"] = version
    p = tmp_path / "future.json"
    p.write_text(json.dumps(d))
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    s = _assert_one_line_naming(ei.value, p)
    assert version in s and SCHEMA_VERSION in s


def test_minor_version_bump_still_loads(card, tmp_path):
    d = _card_dict(card)
    d["schema_version"] = "1.7"
    p = tmp_path / "minor.json"
    p.write_text(json.dumps(d))
    loaded = PerformanceCard.load(p)
    assert loaded.schema_version == "1.7"
    assert loaded.model_copy(update={"schema_version": SCHEMA_VERSION}) == card


def test_invalid_json_rejected(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text('{"schema_version": "1.0", "model": {\n  "name": ')
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    s = _assert_one_line_naming(ei.value, p)
    assert "JSON" in s


@pytest.mark.parametrize("text", ['[1, 2, 3]', '{"name": "not a card"}', '"just a string"', "42"])
def test_non_card_json_rejected(tmp_path, text):
    p = tmp_path / "other.json"
    p.write_text(text)
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    s = _assert_one_line_naming(ei.value, p)
    assert "not a perfpredict card" in s


@pytest.mark.parametrize("where, value, loc", [
    (("model", "parameters"), "lots", "model.parameters"),
    (("device", "kind"), "tpu", "device.kind"),
    (("throughput", 0, "batch_size"), [4], "throughput.0.batch_size"),
    (("rate_model", "coefficients"), "alpha=1", "rate_model.coefficients"),
])
def test_wrong_field_type_rejected(card, tmp_path, where, value, loc):
    s = _load_edited(card, tmp_path / "bad.json", where, value)
    assert loc in s


def test_missing_required_section_rejected(card, tmp_path):
    d = _card_dict(card)
    del d["device"]
    p = tmp_path / "nodevice.json"
    p.write_text(json.dumps(d))
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    assert "device" in _assert_one_line_naming(ei.value, p)


def test_missing_file_rejected(tmp_path):
    p = tmp_path / "does" / "not" / "exist.json"
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    s = _assert_one_line_naming(ei.value, p)
    assert "cannot read" in s


def test_directory_instead_of_file_rejected(tmp_path):
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(tmp_path)
    assert "cannot read" in _assert_one_line_naming(ei.value, tmp_path)


def test_binary_file_rejected_with_perfpredict_error(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(b"\x08\x07\x12\x07pytorch\x1a\x052.13\x80\x81\xff\xfe")
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    _assert_one_line_naming(ei.value, p)


@pytest.mark.parametrize("where", [(), ("model",), ("features",), ("throughput", 0), ("rate_model", "candidates", 0)])
def test_unknown_fields_rejected(card, tmp_path, where):
    d = _card_dict(card)
    node = d
    for k in where:
        node = node[k]
    node["surprise"] = 1
    p = tmp_path / "extra.json"
    p.write_text(json.dumps(d))
    with pytest.raises(PerfPredictError) as ei:
        PerformanceCard.load(p)
    assert "surprise" in _assert_one_line_naming(ei.value, p)


def test_newer_minor_version_drops_fields_this_reader_does_not_know(card, tmp_path):
    d = json.loads(card.to_json())
    d["schema_version"] = "1.99"
    d["new_top_level_section"] = {"x": 1}
    d["model"]["new_field"] = "y"
    d["throughput"][0]["new_metric"] = 3.0
    d["rate_model"]["candidates"][0]["new_stat"] = 0.1
    p = tmp_path / "newer.json"
    p.write_text(json.dumps(d))
    loaded = PerformanceCard.load(p)
    assert loaded.model == card.model and loaded.throughput == card.throughput
    assert loaded.rate_model == card.rate_model and loaded.schema_version == "1.99"


def test_unknown_fields_rejected_on_construction():
    with pytest.raises(ValidationError):
        DeviceInfo(kind="cpu", name="x", gpu_count=2)
    with pytest.raises(ValidationError):
        GraphFeatures(available=True, flops=3)


# --- scheduler questions -------------------------------------------------------------------------------
def test_questions_agree_with_rate_model(card_and_model):
    card, model = card_and_model
    for c in (card, PerformanceCard.from_json(card.to_json())):
        for b in (1, 4, 6, 16, 40, 64, 100, 512):
            assert c.iter_time(b) == pytest.approx(model.iter_time(b), rel=1e-12)
            assert c.throughput_at(b) == pytest.approx(model.throughput(b), rel=1e-12)
            for n in (0, 1, 250, 10_000):
                assert c.latency_s(n, b) == pytest.approx(model.latency(n, b, nu_s=0.92), rel=1e-12)
                assert c.latency_s(n, b) == pytest.approx(n * model.iter_time(b) + 0.92, rel=1e-12)
        assert isinstance(c.rate(), RateModel)
    # the fitted model matches the measured times it came from
    for b, t in MEASURED.items():
        assert card.iter_time(b) == pytest.approx(t, rel=0.05)
    assert card.max_feasible_batch() == 64
    assert [p.batch_size for p in card.measured_points()] == [4, 8, 16, 32, 64]


def test_latency_without_latency_section_has_no_nu(card_and_model):
    card, model = card_and_model
    c = card.model_copy(update={"latency": None})
    assert c.latency_s(100, 16) == pytest.approx(100 * model.iter_time(16), rel=1e-12)


def test_rate_without_rate_model_raises(card):
    c = card.model_copy(update={"rate_model": None})
    for call in (c.rate, lambda: c.iter_time(8), lambda: c.throughput_at(8), lambda: c.latency_s(10, 8)):
        with pytest.raises(PerfPredictError) as ei:
            call()
        assert "rate model" in str(ei.value) and "\n" not in str(ei.value)


# --- Horus eq. 2 ---------------------------------------------------------------------------------------
A = 15_464  # activation bytes per sample
P = 3_729_448
OPT = P  # SGD momentum: one copy
DELTA = 500 * 2**20


def _feats(**kw) -> GraphFeatures:
    base = dict(available=True, activation_bytes_per_sample=A, activation_bytes_fixed=0, param_bytes=P)
    base.update(kw)
    return GraphFeatures(**base)


@pytest.mark.parametrize("b", [1, 7, 64])
def test_horus_train_mode(b):
    est = horus_memory_estimate(_feats(), b, mode="train", param_bytes=P, optimizer_state_bytes=OPT,
                                overhead_bytes=DELTA)
    assert isinstance(est, HorusMemoryEstimate)
    assert est.batch_size == b
    assert est.activations == b * A
    assert est.parameters == 2 * P + OPT
    assert est.gradients == b * A
    assert est.overhead == DELTA
    assert est.total == b * A + 2 * P + OPT + b * A + DELTA


@pytest.mark.parametrize("b", [1, 7, 64])
def test_horus_infer_mode_has_no_gradient_term(b):
    est = horus_memory_estimate(_feats(), b, mode="infer", param_bytes=P, optimizer_state_bytes=OPT,
                                overhead_bytes=DELTA)
    assert est.gradients == 0
    assert est.parameters == P  # no parameter gradients, no optimizer state at inference
    assert est.total == b * A + P + DELTA


def test_horus_fixed_activation_part():
    est = horus_memory_estimate(_feats(activation_bytes_fixed=1000), 8, mode="train", param_bytes=P)
    assert est.activations == 8 * A + 1000
    assert est.total == 2 * (8 * A + 1000) + 2 * P


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_horus_linear_in_batch(mode):
    bs = np.array([1, 2, 4, 8, 16, 32, 128])
    totals = np.array([horus_memory_estimate(_feats(), int(b), mode=mode, param_bytes=P, optimizer_state_bytes=OPT,
                                             overhead_bytes=DELTA).total for b in bs])
    slope = np.diff(totals) / np.diff(bs)
    per_sample = 2 * A if mode == "train" else A
    assert np.all(slope == per_sample)
    intercept = totals[0] - per_sample
    assert intercept == (2 * P + OPT + DELTA if mode == "train" else P + DELTA)


def test_horus_none_when_features_unavailable():
    assert horus_memory_estimate(GraphFeatures(available=False, error="export failed"), 8, mode="train",
                                 param_bytes=P) is None
    assert horus_memory_estimate(_feats(activation_bytes_per_sample=None), 8, mode="infer", param_bytes=P) is None


def test_card_memory_analytic_matches_formula(card):
    for mp in card.memory:
        b = mp.batch_size
        assert mp.analytic.total == b * A + 2 * PARAM_BYTES + PARAM_BYTES + b * A + OVERHEAD


@pytest.mark.parametrize("where, value, loc", [
    (("throughput", 0, "iter_time_s"), -0.01, "throughput.0.iter_time_s"),
    (("memory", 1, "peak_bytes"), -4096, "memory.1.peak_bytes"),
    (("model", "parameters"), -1, "model.parameters"),
    (("latency", "nu_s"), -2.0, "latency.nu_s"),
])
def test_a_negative_time_size_or_count_is_refused_when_read(card, tmp_path, where, value, loc):
    """`perfpredict show` and the simulator's card loader used to accept these and use them as measurements."""
    s = _load_edited(card, tmp_path / "edited.json", where, value)
    assert loc in s and "negative" in s


def test_numbers_that_may_be_negative_still_load(card, tmp_path):
    d = _card_dict(card)
    d["throughput"][0]["startup"]["first_iter_extra_s"] = -0.002  # a first step faster than the steady median
    d["rate_model"]["r2"] = -0.5  # a fit worse than the mean
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(d))
    loaded = PerformanceCard.load(p)
    assert loaded.throughput[0].startup.first_iter_extra_s == -0.002 and loaded.rate_model.r2 == -0.5


def test_a_card_whose_speedup_curve_was_edited_impossible_is_refused_when_read(card, tmp_path):
    """`perfpredict show` printed S(1) = -1.00 for such a card; the simulator stopped on it with a ValueError."""
    from perfpredict.card import SpeedupCurveCard, SpeedupPointCard
    from perfpredict.fit import fit_speedup_curve

    p = np.array([0.5, 1.0, 2.0])
    curve = fit_speedup_curve(p, np.array([0.6, 1.0, 1.7]))
    with_curve = card.model_copy(update={"speedup_curve": SpeedupCurveCard(
        points=[SpeedupPointCard(p=float(x), speedup=float(s), kind=k) for x, s, k in
                zip(p, (0.6, 1.0, 1.7), ("colocated", "solo", "data_parallel"))], fit=curve.to_dict())})
    good = tmp_path / "good.json"
    with_curve.save(good)
    assert PerformanceCard.load(good).speedup_curve is not None
    d = json.loads(good.read_text())
    d["speedup_curve"]["fit"]["knots"]["speedup"][2] = -1.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(PerfPredictError, match=r"speedup_curve\.fit: knot speedups must not fall"):
        PerformanceCard.load(bad)
