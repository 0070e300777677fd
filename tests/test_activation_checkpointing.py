"""Activation checkpointing (``torch.utils.checkpoint``) in a model file: a checkpointed segment's forward runs
again in the backward, so a step costs about one forward of those segments more. The exported graph (one
forward) never showed it, and ``perfpredict predict`` gave a checkpointed model the plain model's step time (an
encoder measured 1.33x slower checkpointed, predicted 1.00x). The step's recomputed work is now counted on one
real step and multiplies the predicted training-step time."""

from dataclasses import replace
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from perfpredict.estimators.arch import from_workload

REPO = Path(__file__).resolve().parents[1]

MLP = (
    "import torch\nimport torch.nn as nn\nfrom torch.utils.checkpoint import checkpoint, checkpoint_sequential\n\n"
    "class Net(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)LAST)\n"
    "                                      for _ in range(4)])\n"
    "        self.head = nn.Linear(64, 10)\n\n"
    "    def forward(self, x):\n"
    "        if self.training:\n"
    "            x = BLOCKS\n"
    "        else:\n"
    "            x = self.blocks(x)\n"
    "        return self.head(x)\n\n"
    "def build_model():\n    return Net()\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")
#: the MACs per sample of the blocks (four 64 x 256 x 2 products), the head, and the first layer's input
#: gradient, which autograd skips (the input needs none): a step is forward + backward = 3 F less that
BLOCKS_F, HEAD_F, FIRST = 4 * 2 * 64 * 256, 64 * 10, 64 * 256
STEP = 3 * (BLOCKS_F + HEAD_F) - FIRST
VARIANTS = {
    "plain": "self.blocks(x)",
    # every block checkpointed, the non-reentrant way PyTorch recommends
    "each": "x\n            for b in self.blocks:\n                x = checkpoint(b, x, use_reentrant=False)",
    # two segments: checkpoint_sequential leaves the last one as it is, so half the blocks are recomputed
    "sequential": "checkpoint_sequential(self.blocks, 2, x, use_reentrant=False)",
    "reentrant": "x.requires_grad_()\n            for b in self.blocks:\n"
                 "                x = checkpoint(b, x, use_reentrant=True)",
}


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def archs(tmp_path_factory):
    d = tmp_path_factory.mktemp("checkpointing")
    for name, blocks in VARIANTS.items():  # a block ending in a ReLU: its output is saved, so all is recomputed
        (d / f"{name}.py").write_text(MLP.replace("BLOCKS", blocks).replace("LAST", ", nn.ReLU()"))
    # ending in a Linear: non-reentrant checkpointing stops recomputing once the saved tensors are back (the ReLU's
    # output, the second Linear's input), so the second Linear does not run again
    (d / "early_stop.py").write_text(MLP.replace("BLOCKS", VARIANTS["each"]).replace("LAST", ""))
    return {name: from_workload(str(d / f"{name}.py")) for name in (*VARIANTS, "early_stop")}


def _times(predictor, arch, mode="train"):
    return predictor.predict_values(arch, [8, 64], device_type="cpu", mode=mode)["iter_time"]


def test_a_checkpointed_model_is_predicted_slower_by_its_recomputed_work(predictor, archs) -> None:
    plain = _times(predictor, archs["plain"])
    # every block's forward once more over the step's forward and backward
    each = archs["each"].recompute_step_work_ratio
    assert each == pytest.approx(1 + BLOCKS_F / STEP)
    # checkpoint_sequential's two segments: the first recomputed, the last kept
    assert archs["sequential"].recompute_step_work_ratio == pytest.approx(1 + BLOCKS_F / 2 / STEP)
    # the reentrant way needs an input that requires a gradient, so the first layer's input gradient is computed
    assert archs["reentrant"].recompute_step_work_ratio == pytest.approx(1 + BLOCKS_F / (STEP + FIRST))
    # only each block's first Linear runs again
    assert archs["early_stop"].recompute_step_work_ratio == pytest.approx(1 + BLOCKS_F / 2 / STEP)
    for name in ("each", "sequential", "reentrant"):  # the plain model's graph (the export runs in eval mode)
        times = _times(predictor, archs[name])
        for key in ("median", "q10", "q90"):
            for c, p in zip(times[key], plain[key]):
                assert c / p == pytest.approx(archs[name].recompute_step_work_ratio, rel=0.05)
    card = predictor.predict(features=archs["each"], batch_size=8, device_type="cpu")
    note = next(n for n in card.prediction.notes if "activation checkpointing" in n)
    assert f"x {each:.3f}" in note


def test_a_model_without_checkpointing_is_predicted_as_before(predictor, archs) -> None:
    plain = archs["plain"]
    assert plain.recompute_step_work_ratio is None
    assert not [n for n in plain.notes if "checkpoint" in n]
    assert _times(predictor, plain) == _times(predictor, replace(plain, recompute_step_work_ratio=None))
    card = predictor.predict(features=plain, batch_size=8, device_type="cpu")
    assert card.features.recompute_step_work_ratio is None
    assert not [n for n in card.prediction.notes if "checkpointing" in n]


def test_inference_is_not_adjusted(predictor, archs) -> None:
    each = archs["each"]
    assert _times(predictor, each, "infer") == _times(predictor, replace(each, recompute_step_work_ratio=None),
                                                      "infer")


def test_a_predicted_card_keeps_the_factor(predictor, archs, tmp_path) -> None:
    card = predictor.predict(features=archs["each"], batch_size=8, device_type="cpu")
    assert card.features.recompute_step_work_ratio == pytest.approx(archs["each"].recompute_step_work_ratio)
    card.save(tmp_path / "card.json")
    again = predictor.predict(features=PerformanceCard.load(tmp_path / "card.json"), batch_size=8,
                              device_type="cpu")
    assert again.throughput[0].iter_time_s == pytest.approx(card.throughput[0].iter_time_s)
    # a feature mapping does not carry it: only a step of the model says what is recomputed
    sent = {**archs["plain"].as_dict(), "recompute_step_work_ratio": 1.5}
    assert predictor.predict(features=sent, batch_size=8, device_type="cpu").throughput[0].iter_time_s == \
        pytest.approx(predictor.predict(features=archs["plain"], batch_size=8,
                                        device_type="cpu").throughput[0].iter_time_s)
