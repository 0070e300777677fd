"""Parameters a training step never uses. torch.onnx.export drops a layer whose output nothing uses (a replaced head
kept as an attribute, an auxiliary classifier behind a flag), so its weights were missing from the graph's
param_bytes while the module holds them: a small MLP beside an unused Linear(4096, 4096) (64 MiB) was predicted
34.8 MiB of training RSS with or without the head (96.8 and 32.9 MiB measured), and its card said 17.2 M
parameters beside 1.6 MB of parameter bytes. One training step (the one the recompute count runs) now says which
parameters no op takes; they are charged their weight alone (no gradient, no optimizer state), frozen or not, and
the card's model.param_bytes is the module's."""

import json
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from perfpredict.errors import UsageError
from perfpredict.estimators.arch import from_workload

REPO = Path(__file__).resolve().parents[1]

BODY = ("import torch\nimport torch.nn as nn\n\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.body = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),\n"
        "                                  nn.Linear(512, 10))\n"
        "{extra}\n"
        "    def forward(self, x):\n"
        "        return self.body(x)\n\n"
        "def build_model():\n    return Net()\n\n"
        "def example_inputs(batch_size):\n    return torch.randn(batch_size, 256)\n")
HEAD = "        self.old_head = nn.Linear(4096, 4096)\n"
FROZEN_HEAD = HEAD + "        self.old_head.requires_grad_(False)\n"
ADAMW = "\ndef make_optimizer(params):\n    return torch.optim.AdamW(params, lr=1e-3)\n"
#: the unused head's weight and bias, fp32
HEAD_BYTES = (4096 * 4096 + 4096) * 4
BODY_BYTES = (256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10) * 4


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unused")
    out = {}
    for name, extra in (("plain", ""), ("unused", HEAD), ("frozen_unused", FROZEN_HEAD)):
        out[name] = root / f"{name}.py"
        out[name].write_text(BODY.format(extra=extra))
    for name in ("plain", "unused"):
        out[f"{name}_adamw"] = root / f"{name}_adamw.py"
        out[f"{name}_adamw"].write_text(out[name].read_text() + ADAMW)
    return out


@pytest.fixture(scope="module")
def archs(files) -> dict:
    return {name: from_workload(str(path)) for name, path in files.items()}


def _k(target) -> float:
    return float(target.coef_point[1 + target.terms.index(("log_param_bytes",))])


def test_the_step_finds_the_unused_head_and_the_graph_is_unchanged(archs) -> None:
    plain, unused, frozen = archs["plain"], archs["unused"], archs["frozen_unused"]
    assert plain.unused_param_bytes == 0
    assert unused.unused_param_bytes == frozen.unused_param_bytes == HEAD_BYTES
    assert unused.unused_frozen_param_bytes == 0 and frozen.unused_frozen_param_bytes == HEAD_BYTES
    for a in (unused, frozen):  # the graph's counts are the body's: the head never runs
        assert a.param_bytes == plain.param_bytes == BODY_BYTES
        assert a.forward_macs_per_sample == plain.forward_macs_per_sample
        assert a.forward_macs_fixed == plain.forward_macs_fixed


@pytest.mark.parametrize("device_type", ["cpu", "cuda_h100"])
def test_an_unused_head_is_charged_its_weight_alone(predictor, archs, device_type) -> None:
    """Training memory with the unused head exceeds that without by at least its weight bytes and less than
    k_P x them (weight, gradient, optimizer state), at every batch size."""
    a = predictor.predict_values(archs["plain"], [8, 64], device_type=device_type)
    b = predictor.predict_values(archs["unused"], [8, 64], device_type=device_type)
    ms = predictor.sets[a["model_set"]]
    names = [n for n in ("peak_memory", "device_memory") if n in ms.targets]
    assert names
    for name in names:
        k = _k(ms.targets[name])
        for without, with_head in zip(a[name]["median"], b[name]["median"], strict=True):
            assert HEAD_BYTES * (1 - 1e-9) <= with_head - without < k * HEAD_BYTES


def test_an_unused_head_in_inference_is_charged_its_weight(predictor, archs) -> None:
    a = predictor.predict_values(archs["plain"], [8], device_type="cpu", mode="infer")
    b = predictor.predict_values(archs["unused"], [8], device_type="cpu", mode="infer")
    assert b["peak_memory"]["median"][0] - a["peak_memory"]["median"][0] >= HEAD_BYTES * (1 - 1e-9)


def test_adamws_step_holds_no_temporaries_for_an_unused_head(predictor, archs, files) -> None:
    """AdamW skips a parameter without a gradient: its step's temporaries (2-3 x the largest trained tensor one
    tensor at a time, 1 x every trained byte foreach) are the body's, and no state copy is charged for the head
    (measured: 101.8 MiB of RSS with the head, 38.4 without; predicted 164.3 MiB with it before)."""
    plain, unused = (from_workload(str(files[n])) for n in ("plain_adamw", "unused_adamw"))
    assert unused.optimizer_state_copies == plain.optimizer_state_copies == 2
    assert unused.optimizer_step_bytes == plain.optimizer_step_bytes
    a = predictor.predict_values(plain, [32], device_type="cpu")
    assert predictor.sets[a["model_set"]].targets["peak_memory"].point is None  # no learned correction
    b = predictor.predict_values(unused, [32], device_type="cpu")["peak_memory"]["median"][0]
    assert b - a["peak_memory"]["median"][0] == pytest.approx(HEAD_BYTES, rel=1e-6)  # the shipped CPU set's baseline: the weight alone


def test_an_unused_heads_param_group_does_not_weigh_in_the_state_copies(tmp_path) -> None:
    """The head in its own param group (amsgrad: 3 copies) gets no gradient, so no state: the copies are the body's
    group's, Adam's 2 (2.98 before, weighed by the head's bytes, charged to every trained byte of the body)."""
    path = tmp_path / "groups.py"
    path.write_text(BODY.format(extra=HEAD) + "\ndef make_optimizer(params):\n    params = list(params)\n"
                    "    return torch.optim.Adam([{'params': params[:-2]}, {'params': params[-2:], 'amsgrad': True}])\n")
    arch = from_workload(str(path))
    assert arch.unused_param_bytes == HEAD_BYTES
    assert arch.optimizer_state_copies == 2


def test_the_cards_parameter_bytes_are_the_modules(predictor, files) -> None:
    card = predictor.predict(model=str(files["unused"]), batch_sizes=[32], device_type="cpu")
    assert card.model.parameters * 4 == card.model.param_bytes == BODY_BYTES + HEAD_BYTES
    assert card.features.param_bytes == BODY_BYTES  # the graph's, as its MACs
    assert card.features.unused_param_bytes == HEAD_BYTES and card.features.unused_frozen_param_bytes == 0
    assert any(f"{HEAD_BYTES:,} bytes" in n and "never used" in n for n in card.prediction.notes)
    again = predictor.predict(features=card, batch_sizes=[32], device_type="cpu")  # the card gives it back
    assert again.memory[0].peak_bytes == card.memory[0].peak_bytes
    assert again.model.param_bytes == card.model.param_bytes


@pytest.mark.parametrize(("field", "value"), [("unused_param_bytes", 10**400), ("unused_param_bytes", 10**20),
                                              ("unused_param_bytes", BODY_BYTES + HEAD_BYTES + 1),
                                              ("unused_frozen_param_bytes", HEAD_BYTES + 1)])
def test_a_hand_edited_cards_unused_bytes_are_bounded(predictor, files, tmp_path, field, value) -> None:
    """The schema bounds them below only: 10**400 raised OverflowError, 1e20 predicted 1e20 bytes of memory, and
    frozen unused bytes past the unused ones (or unused bytes past the module's) were taken as they were."""
    path = tmp_path / "card.json"
    predictor.predict(model=str(files["unused"]), batch_sizes=[32], device_type="cpu").save(path)
    edited = json.loads(path.read_text())
    edited["features"][field] = value
    with pytest.raises(UsageError, match=f"features.{field}"):
        predictor.predict(features=PerformanceCard.model_validate(edited), batch_sizes=[32], device_type="cpu")
    card = PerformanceCard.load(path)  # the card as written predicts its own numbers back
    again = predictor.predict(features=card, batch_sizes=[32], device_type="cpu")
    assert again.memory[0].peak_bytes == card.memory[0].peak_bytes


def test_an_unused_frozen_head_is_counted_once(predictor, archs, files) -> None:
    """Frozen and unused: charged its weight once, as the trainable unused head is, and the body it does not
    belong to keeps its gradient and optimizer state (the graph's frozen bytes used to be taken as min(the
    module's frozen bytes, the graph's), so the whole trained body was charged as frozen)."""
    frozen = archs["frozen_unused"]
    assert frozen.frozen_param_bytes == HEAD_BYTES and frozen.frozen_param_bytes_in_graph == 0
    for device_type in ("cpu", "cuda_h100"):
        a = predictor.predict_values(archs["unused"], [8, 64], device_type=device_type)
        b = predictor.predict_values(frozen, [8, 64], device_type=device_type)
        assert b["peak_memory"]["median"] == pytest.approx(a["peak_memory"]["median"], rel=1e-12)
    card = predictor.predict(model=str(files["frozen_unused"]), batch_sizes=[8], device_type="cpu")
    assert card.model.param_bytes == BODY_BYTES + HEAD_BYTES and card.model.frozen_param_bytes == HEAD_BYTES
    assert card.features.unused_frozen_param_bytes == HEAD_BYTES
    again = predictor.predict(features=card, batch_sizes=[8], device_type="cpu")
    assert again.memory[0].peak_bytes == card.memory[0].peak_bytes
    assert again.model.frozen_param_bytes == HEAD_BYTES


def test_a_parameter_only_the_eval_forward_reads_is_not_counted_twice(tmp_path) -> None:
    """A parameter the training step skips but the (eval-mode) export reads is in the graph's bytes already."""
    path = tmp_path / "eval_only.py"
    path.write_text(BODY.format(extra="        self.scale = nn.Parameter(torch.ones(10))\n").replace(
        "        return self.body(x)", "        y = self.body(x)\n        return y if self.training else y * self.scale"))
    arch = from_workload(str(path))
    assert arch.unused_param_bytes == 0 and arch.param_bytes == BODY_BYTES + 40


@pytest.mark.parametrize("family", ["mlp", "lstm", "dlrm"])
def test_a_zoo_model_has_no_unused_parameter(family) -> None:
    """Every weight of a zoo model is used (an LSTM's flat weights, embedding tables too): nothing moves."""
    assert from_workload(f"zoo:{family}").unused_param_bytes == 0
