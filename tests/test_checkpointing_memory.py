"""Activation checkpointing's memory: a checkpointed segment keeps only its inputs in the forward, which the
saved-bytes count follows, but the backward runs each segment's forward again and its recomputed saved tensors
live until that segment's gradient is done. The backward's peak holds the segments' inputs and the largest
segment's activations; the prediction charged the inputs alone, so a checkpointed encoder's predicted memory
dropped to 0.46x the plain one's at batch 128 (allocated tensors: 0.44x; the whole drop too large by the
recomputed layer). The recomputed bytes are now counted on the saved-bytes steps and charged as saved bytes."""

from dataclasses import replace
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from perfpredict.estimators.arch import from_workload
from perfpredict.features.saved import saved_bytes_split
from perfpredict.predictor import RECOMPUTE_SAVED_FIELDS
from perfpredict.workload import resolve_workload
from tests.test_activation_checkpointing import MLP as CHECKPOINTING_MLP
from tests.test_activation_checkpointing import VARIANTS as CHECKPOINTING_VARIANTS

REPO = Path(__file__).resolve().parents[1]

#: the checkpointing tests' MLP, its blocks ending in a ReLU
MLP = CHECKPOINTING_MLP.replace("LAST", ", nn.ReLU()")
#: what one block saves for its backward per sample beside its input (the first Linear's): both ReLUs' outputs
#: (fp32; the second Linear's input is the first ReLU's output)
BLOCK = 4 * (256 + 64)
VARIANTS = {
    **CHECKPOINTING_VARIANTS,
    # one of the four blocks: its recomputation holds as much at once as that of every block, one at a time
    "one": "checkpoint(self.blocks[0], x, use_reentrant=False)\n            x = self.blocks[1:](x)",
}
BATCHES = [64, 4096]


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("checkpointing_memory")
    for name, blocks in VARIANTS.items():
        (d / f"{name}.py").write_text(MLP.replace("BLOCKS", blocks))
    return {name: str(d / f"{name}.py") for name in VARIANTS}


@pytest.fixture(scope="module")
def archs(paths):
    return {name: from_workload(p) for name, p in paths.items()}


def _memory(predictor, arch, batches=BATCHES):
    return predictor.predict_values(arch, batches, device_type="cpu", mode="train")["peak_memory"]


def _recomputed(arch) -> dict[str, float]:
    return {f: getattr(arch, f) for f in RECOMPUTE_SAVED_FIELDS}


def test_the_recomputed_segment_is_counted_once_at_its_largest(archs) -> None:
    for name, blocks in (("each", 1), ("one", 1), ("sequential", 2), ("reentrant", 1)):
        a = archs[name]
        for kernels in ("", "_cpu"):
            assert getattr(a, f"recompute_saved{kernels}_bytes_per_sample") == blocks * BLOCK, (name, kernels)
            assert getattr(a, f"recompute_saved{kernels}_bytes_fixed") == 0, (name, kernels)
        # the forward's count is left as it was: the segments' inputs
        assert a.saved_bytes_per_sample < archs["plain"].saved_bytes_per_sample
    assert set(_recomputed(archs["plain"]).values()) == {0.0}


def test_a_checkpointed_model_is_charged_its_recomputed_segment(predictor, archs) -> None:
    for name in ("each", "one", "sequential"):
        a = archs[name]
        alone = _memory(predictor, replace(a, **dict.fromkeys(RECOMPUTE_SAVED_FIELDS, 0.0)))
        charged = _memory(predictor, a)
        for b, c, s in zip(BATCHES, charged["median"], alone["median"]):
            # the CPU set's median charges a saved byte more than a byte (its baseline's k_S times its correction)
            assert c >= s + a.recompute_saved_cpu_bytes_per_sample * b, (name, b)
        for key in ("q10", "q90"):  # the interval moves with it
            assert all(c > s for c, s in zip(charged[key], alone[key])), (name, key)
    # one block or all four checkpointed: the backward holds one block's activations at a time either way
    assert _memory(predictor, archs["one"])["median"][1] - _memory(predictor, replace(
        archs["one"], **dict.fromkeys(RECOMPUTE_SAVED_FIELDS, 0.0)))["median"][1] == pytest.approx(
        _memory(predictor, archs["each"])["median"][1] - _memory(predictor, replace(
            archs["each"], **dict.fromkeys(RECOMPUTE_SAVED_FIELDS, 0.0)))["median"][1], rel=0.05)
    card = predictor.predict(features=archs["each"], batch_size=64, device_type="cpu")
    assert [n for n in card.prediction.notes if "memory charges activation checkpointing" in n]


def test_a_model_without_checkpointing_is_predicted_as_before(predictor, archs, paths) -> None:
    plain = archs["plain"]
    wl = resolve_workload(paths["plain"])
    # the saved-bytes count is the forward's as before (the recompute step before it leaves the random state)
    assert (plain.saved_bytes_per_sample, plain.saved_bytes_fixed) == saved_bytes_split(wl)
    assert _memory(predictor, plain) == _memory(predictor, replace(plain, **dict.fromkeys(RECOMPUTE_SAVED_FIELDS,
                                                                                          0.0)))
    card = predictor.predict(features=plain, batch_size=64, device_type="cpu")
    assert all(getattr(card.features, f) is None for f in RECOMPUTE_SAVED_FIELDS)
    assert not [n for n in card.prediction.notes if "checkpointing" in n]


def test_a_predicted_card_keeps_the_recomputed_bytes(predictor, archs, tmp_path) -> None:
    card = predictor.predict(features=archs["each"], batch_sizes=BATCHES, device_type="cpu")
    assert {f: getattr(card.features, f) for f in RECOMPUTE_SAVED_FIELDS} == _recomputed(archs["each"])
    card.save(tmp_path / "card.json")
    again = predictor.predict(features=PerformanceCard.load(tmp_path / "card.json"), batch_sizes=BATCHES,
                              device_type="cpu")
    assert [m.peak_bytes for m in again.memory] == pytest.approx([m.peak_bytes for m in card.memory])
    # a card whose saved bytes are estimated from the graph (a measured card's) keeps every segment's
    # activations in that estimate, so nothing is added to it
    graph_only = card.model_copy(deep=True)
    graph_only.features.saved_bytes_per_sample = graph_only.features.saved_cpu_bytes_per_sample = None
    bare = graph_only.model_copy(deep=True)
    for f in RECOMPUTE_SAVED_FIELDS:
        setattr(bare.features, f, None)
    assert _memory(predictor, graph_only) == _memory(predictor, bare)
    # a feature mapping does not carry them: only a step of the model says what is recomputed
    sent = {**archs["each"].as_dict(), **_recomputed(archs["each"])}
    assert _memory(predictor, sent) == _memory(predictor, replace(archs["each"],
                                                                  **dict.fromkeys(RECOMPUTE_SAVED_FIELDS, 0.0)))
