"""The Predictor's answer for a job far from every training architecture (GENIE §6's most similar known model):
the neighbour's measurements carried to the job through its own physical baseline, never copied as they are."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SET = "cuda_h100"


@pytest.fixture(scope="module")
def predictor():
    from perfpredict import Predictor

    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def big_mlp():
    """The largest profiled MLP with 20x its parameters and MACs: out of distribution, about 17 GB of weights."""
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(REPO / "datasets" / f"{SET}.csv")
    i = max((i for i, f in enumerate(data.families) if f == "mlp"), key=lambda i: data.archs[i].param_bytes)
    a = data.archs[i]
    return replace(a, param_count=20 * a.param_count, param_bytes=20 * a.param_bytes,
                   forward_macs_per_sample=20 * a.forward_macs_per_sample, name="big-mlp")


BATCHES = [1, 8, 64, 512]


def test_a_far_larger_model_gets_memory_for_its_own_weights_not_its_neighbours(predictor, big_mlp):
    """The fallback used to copy the neighbour's 2.5 GB for a model with 17 GB of weights."""
    card = predictor.predict(features=big_mlp.as_dict(), batch_sizes=BATCHES, device_type=SET)
    info = card.prediction
    assert info.method == "nearest_profiled" and info.out_of_distribution
    assert any("physical baseline" in n for n in info.notes)
    peak = np.array([p.peak_memory_bytes for p in info.points])
    # weights and gradients at least (SGD with momentum keeps a third copy)
    assert peak.min() >= 2 * big_mlp.param_bytes
    assert np.all(np.diff(peak) >= 0)  # memory does not fall as the batch grows
    for p in info.points:
        lo, hi = p.peak_memory_interval_bytes
        assert lo <= p.peak_memory_bytes <= hi
        assert p.device_memory_safe_bytes >= p.peak_memory_bytes  # NVML's view includes the context
    times = [p.iter_time_s for p in info.points]
    assert np.all(np.diff(times) > 0)


def test_the_fast_path_and_the_batch_limit_answer_as_the_card_does(predictor, big_mlp):
    """predict_values and largest_batch apply the same fallback: max-batch used to say 442 fits where predict's
    own numbers at 443 were a third of the limit."""
    card = predictor.predict(features=big_mlp.as_dict(), batch_sizes=BATCHES, device_type=SET)
    values = predictor.predict_values(big_mlp, BATCHES, device_type=SET)
    assert values["method"] == "nearest_profiled"
    assert values["peak_memory"]["median"] == pytest.approx([p.peak_memory_bytes for p in card.prediction.points])
    assert values["iter_time"]["median"] == pytest.approx([p.iter_time_s for p in card.prediction.points])
    limit = 80 * 2**30
    r = predictor.largest_batch(features=big_mlp.as_dict(), memory_limit_bytes=limit, device_type=SET)
    assert r.largest_ok is not None and r.smallest_failed is not None
    at = predictor.predict(features=big_mlp.as_dict(), batch_sizes=[r.largest_ok, r.smallest_failed],
                           device_type=SET).prediction.points
    assert at[0].device_memory_safe_bytes <= limit < at[1].device_memory_safe_bytes
    assert predictor.predict_values(big_mlp, [8], device_type=SET, allow_fallback=False)["method"] == "estimator"


def test_a_small_launch_bound_model_is_not_scaled_linearly_below_the_measured_batches(predictor, tmp_path):
    """A small CNN on a GPU: its step at batch 1 costs about what it costs at 8 (kernel launches), where the
    old fallback scaled the neighbour's time by b/nb and made batch 1 eight times faster."""
    model = tmp_path / "small_cnn.py"
    model.write_text(
        "import torch, torch.nn as nn\n"
        "def build_model():\n"
        "    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),\n"
        "                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))\n"
        "def example_inputs(batch_size):\n"
        "    return torch.randn(batch_size, 3, 32, 32)\n")
    info = predictor.predict(str(model), batch_sizes=[1, 8, 64], device_type=SET).prediction
    assert info.method == "nearest_profiled"
    t1, t8, t64 = (p.iter_time_s for p in info.points)
    assert t8 / 2 < t1 <= t8 <= t64


@pytest.mark.parametrize(("target", "device_type"), [("zoo:transformer", "cpu"), ("zoo:dlrm", "cuda_h200"),
                                                     ("zoo:lstm", SET)])
def test_a_predicted_card_predicts_again_as_it_is(predictor, target, device_type):
    """Predictor.predict(features=card): the card's graph features and its parameter count give the same
    prediction (the card used to lack the lookup bytes, recurrent steps, input bytes and fixed saved bytes, and
    a card's features section sent as a dict failed on param_count and lookup_param_bytes: null)."""
    from perfpredict.errors import UsageError

    card = predictor.predict(target, batch_sizes=[16, 64], device_type=device_type)
    again = predictor.predict(features=card, batch_sizes=[16, 64], device_type=device_type)
    for a, b in zip(card.prediction.points, again.prediction.points, strict=True):
        assert (a.iter_time_s, a.peak_memory_bytes) == (b.iter_time_s, b.peak_memory_bytes)
    section = card.features.model_dump()
    with pytest.raises(UsageError, match="a card's features section has no param_count; pass the card itself"):
        predictor.predict(features=section, batch_size=16, device_type=device_type)
    section["lookup_param_bytes"] = None  # what an older card writes: "not given"
    section["param_count"] = card.model.parameters
    assert predictor.predict(features=section, batch_size=16, device_type=device_type).prediction.points


def _rows_built(predictor, monkeypatch, arch, device_type: str) -> list:
    """The (architecture, batch size) rows the Predictor builds for ``arch``'s card at :data:`BATCHES`, once the
    set has answered a fallback from the same neighbour (the first call may build what the set keeps)."""
    import perfpredict.predictor as module

    predictor.card_for(arch, BATCHES, device_type=device_type)
    built = []
    real = module.design_matrix

    def counting(items, *args, **kwargs):
        items = list(items)
        built.extend(items)
        return real(items, *args, **kwargs)

    monkeypatch.setattr(module, "design_matrix", counting)
    card = predictor.card_for(arch, BATCHES, device_type=device_type)
    monkeypatch.undo()
    assert card.prediction.method == "nearest_profiled"
    return built


@pytest.mark.parametrize("kernel_rows", [True, False])
def test_a_fallback_card_builds_neither_the_neighbours_rows_nor_the_jobs_twice(predictor, big_mlp, monkeypatch,
                                                                               kernel_rows):
    """Each fallback card built the neighbour's design rows at its measured batch sizes again, though they
    depend on the model set alone, and a job without kernel rows got its rows at its batch sizes built twice
    (once for the estimators, once "without kernel rows"). The card is the same either way
    (tests/test_predict_batch.py holds it to the bit)."""
    arch = big_mlp if kernel_rows else replace(big_mlp, kernel_nodes=())
    assert bool(arch.kernel_nodes) == kernel_rows
    ms = predictor.sets[SET]
    name = predictor.card_for(arch, BATCHES, device_type=SET).prediction.nearest.name
    measured = ms.profiled[name]["points"]  # the batch sizes the neighbour was measured at
    built = _rows_built(predictor, monkeypatch, arch, SET)
    neighbour = ms.with_graph_counts(ms.profiled_archs[name])
    assert not [b for a, b in built if a == neighbour]
    # the job's rows for the estimators, batch 32's for the distance, and without kernel rows: at its batch sizes
    # where it has kernel rows, and at the neighbour's batch sizes for memory
    assert len(built) == len(BATCHES) + 1 + len(BATCHES) * kernel_rows + len(measured)


def test_the_neighbours_side_is_read_only_and_threads_get_the_serial_cards(big_mlp):
    """What the set keeps of a neighbour is shared by every job (and the HTTP service's threads): read-only, and
    threads falling back at once, on a fresh set, answer as one thread does."""
    from concurrent.futures import ThreadPoolExecutor

    from perfpredict import Predictor

    jobs = [(replace(big_mlp, param_bytes=k * big_mlp.param_bytes, kernel_nodes=() if k % 2 else big_mlp.kernel_nodes),
             [8 * k]) for k in range(1, 9)]
    alone = Predictor.load(REPO / "trained_models")
    serial = [alone.card_for(a, b, device_type=SET) for a, b in jobs]
    fresh = Predictor.load(REPO / "trained_models")
    with ThreadPoolExecutor(len(jobs)) as pool:
        threaded = list(pool.map(lambda job: fresh.card_for(*job, device_type=SET), jobs))
    for a, b in zip(serial, threaded, strict=True):
        assert a.prediction.method == "nearest_profiled"
        assert a.prediction.model_dump(mode="json") == b.prediction.model_dump(mode="json")
    for nb in fresh.sets[SET]._neighbours.values():
        for c in nb.carried.values():
            for arr in (c.have, c.xs, c.values):
                with pytest.raises(ValueError):
                    arr[0] = 0
