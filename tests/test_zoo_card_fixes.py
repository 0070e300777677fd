"""Fixes in the zoo's size checks, the PerformanceCard schema and the Horus training-memory feature: huge
structural integers counted quickly, absurd sequence lengths and image sizes refused up front, cards that load
but could not be saved, non-positive batch sizes of memory and energy points, frozen parameters in
design.horus_train_memory."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from perfpredict.errors import UsageError
from perfpredict.workload.zoo import families, get_family
from tests.conftest import assert_zoo_refuses_in_subprocess

REPO = Path(__file__).resolve().parents[1]


def test_huge_structural_integers_are_refused_without_hanging() -> None:
    """unet depth=1e18 computed 2**depth in validate (hung; depth=1e8 printed that power: an internal ValueError),
    mlp depth=1e8 listed every layer's width to count the parameters (seconds; 1e18: MemoryError). The refusals
    take milliseconds; the subprocess' timeout only catches a hang (no timing is asserted)."""
    assert_zoo_refuses_in_subprocess([(family, {"depth": v}) for family in ("unet", "mlp")
                                      for v in (10**8, 10**18, 10**300)], timeout=60)


def test_unet_depth_check_still_takes_every_depth_the_image_size_allows() -> None:
    fam = get_family("unet")
    assert fam.resolve({"image_size": 64, "depth": 6})["depth"] == 6
    with pytest.raises(UsageError, match=r"divisible by 2\*\*depth \(128\)"):
        fam.resolve({"image_size": 64, "depth": 7})
    with pytest.raises(UsageError, match=r"divisible by 2\*\*depth \(8\)"):
        fam.resolve({"image_size": 36, "depth": 3})


def test_mlp_closed_forms_match_the_built_model() -> None:
    fam = get_family("mlp")
    for overrides in ({"depth": 0}, {"depth": 1, "width": 7}, {"depth": 4, "width": 9, "input_dim": 5}):
        cfg = fam.resolve(overrides)
        model = fam.build_model(cfg)
        assert fam.closed_form_params(cfg) == sum(p.numel() for p in model.parameters())
        assert fam.closed_form_macs(cfg) == sum(m.in_features * m.out_features for m in model.modules()
                                                if isinstance(m, torch.nn.Linear))


@pytest.mark.parametrize(("family", "overrides"), [
    ("lstm", {"seq_len": 10**12}),
    ("transformer", {"seq_len": 5 * 10**7}),
    ("resnet", {"image_size": 10**6}),
    ("convnext", {"image_size": 10**6}),
    ("mobilenetv2", {"image_size": 10**6}),
    ("unet", {"image_size": 2**20}),
    ("speech", {"frames": 10**9}),
    ("speech", {"frames": 10**300}),
])
def test_absurd_sequence_lengths_and_image_sizes_are_refused_up_front(family, overrides) -> None:
    """Their weights stay small, so the parameter count let them through to fail allocating the inputs."""
    with pytest.raises(UsageError, match="elements in one sample's .*a zoo sample's tensor may have"):
        get_family(family).resolve(overrides)


def test_every_committed_grid_configuration_passes_the_size_checks() -> None:
    from perfpredict.workload.zoo.base import MAX_SAMPLE_ELEMENTS

    with open(REPO / "datasets" / "zoo_features.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 153
    for row in rows:
        fam = get_family(row["family"])
        cfg = fam.resolve(json.loads(row["config_json"]))
        assert fam.config_name(cfg) == row["config"]
        assert max(fam.closed_form_sample_tensors(cfg).values()) <= MAX_SAMPLE_ELEMENTS / 1000


class _Sizes(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the element count of every tensor an op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.numels: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.numels.add(t.numel())
        return out


@pytest.mark.parametrize("family", sorted(families()))
def test_the_sample_tensors_counted_are_tensors_a_forward_pass_makes(family) -> None:
    fam = get_family(family)
    cfg = fam.resolve({})
    torch.manual_seed(0)
    model = fam.build_model(cfg).train()
    inputs = fam.example_inputs(cfg, 1)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    sizes = _Sizes()
    with sizes:
        model(*inputs)
    made = sizes.numels | {t.numel() for t in inputs}
    for what, elements in fam.closed_form_sample_tensors(cfg).items():
        assert elements in made, (what, elements)


# --- the card ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("edit", [
    lambda raw: raw["model"].__setitem__("name", "mlp\ud800"),
    lambda raw: raw["run"]["settings"].__setitem__("key\udc00", 1),
    lambda raw: raw["notes"].append("\udfff"),
])
def test_a_card_with_a_lone_surrogate_is_refused_where_it_is_read(edit, tmp_path) -> None:
    """JSON's \\ud800 escape loaded as a lone surrogate, and save() of that card failed encoding it."""
    from perfpredict.card import PerformanceCard
    from perfpredict.errors import PerfPredictError
    from tests.test_card import build_card

    raw = json.loads(build_card()[0].to_json())
    edit(raw)
    path = tmp_path / "card.json"
    path.write_text(json.dumps(raw))  # ASCII: the surrogate as an escape
    with pytest.raises(PerfPredictError, match="lone surrogate") as err:
        PerformanceCard.load(path)
    str(err.value).encode("utf-8")  # the message itself is printable


def test_a_card_with_escaped_non_ascii_characters_loads_and_saves(tmp_path) -> None:
    from perfpredict.card import PerformanceCard
    from tests.test_card import build_card

    raw = json.loads(build_card()[0].to_json())
    raw["model"]["name"] = "modèle \U0001F600"  # json.dumps escapes it as \u00e8 and a surrogate pair
    card = PerformanceCard.from_json(json.dumps(raw))
    assert PerformanceCard.load(card.save(tmp_path / "card.json")).model.name == "modèle \U0001F600"


@pytest.mark.parametrize("section", ["memory", "energy"])
@pytest.mark.parametrize("batch_size", [0, -1, True, "8", 8.5])
def test_memory_and_energy_points_need_a_batch_size_of_at_least_one(section, batch_size) -> None:
    from pydantic import ValidationError

    from perfpredict.card import EnergyPoint, MemoryPoint

    with pytest.raises(ValidationError, match="batch_size"):
        if section == "memory":
            MemoryPoint(batch_size=batch_size, peak_bytes=1, kind="cuda_peak_allocated")
        else:
            EnergyPoint(batch_size=batch_size, gpu_utilization=0.5)


def test_a_paper_memory_point_may_leave_its_batch_size_unstated_as_zero() -> None:
    """The moldable paper cards give a device-memory footprint whose batch size the paper does not state."""
    from perfpredict.card import MemoryPoint, PerformanceCard
    from perfpredict.sched.paper_cards import MOLDABLE_MODELS, paper_card

    assert MemoryPoint(batch_size=0, peak_bytes=1, kind="cuda_peak_allocated", source="paper").batch_size == 0
    assert MemoryPoint(batch_size=8.0, peak_bytes=1, kind="cuda_peak_allocated").batch_size == 8
    cards = [paper_card(name) for name in MOLDABLE_MODELS]
    assert any(m.batch_size == 0 for c in cards for m in c.memory)
    for card in cards:
        assert PerformanceCard.from_json(card.to_json()) == card


# --- design.horus_train_memory ------------------------------------------------------------------------------
FROZEN_MODEL = (
    "import torch\nimport torch.nn as nn\n\n"
    "def build_model():\n"
    "    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))\n"
    "    model[0].requires_grad_(False)  # a frozen feature extractor, a trained head\n"
    "    return model\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")


def test_horus_train_memory_charges_no_gradient_or_optimizer_state_to_frozen_parameters(tmp_path) -> None:
    """The card's eq. 2 gave frozen parameters no gradient since 03a1e38; the estimators' feature still charged
    them a gradient and a momentum buffer."""
    from perfpredict.card import GraphFeatures
    from perfpredict.estimators.arch import from_workload
    from perfpredict.estimators.design import horus_train_memory
    from perfpredict.fit.memory import horus_memory_estimate

    path = tmp_path / "frozen.py"
    path.write_text(FROZEN_MODEL)
    arch = from_workload(str(path))
    frozen, trained = (64 * 256 + 256) * 4, (256 * 10 + 10) * 4
    assert arch.param_bytes == frozen + trained
    assert arch.frozen_param_bytes == frozen
    feats = GraphFeatures(available=True, activation_bytes_per_sample=int(arch.activation_bytes_per_sample),
                          activation_bytes_fixed=int(arch.activation_bytes_fixed))
    for b in (1, 8, 32):
        # SGD-momentum: one state copy of each trained parameter, as the datasets' optimizer holds it
        card = horus_memory_estimate(feats, b, mode="train", param_bytes=int(arch.param_bytes),
                                     optimizer_state_bytes=trained, trainable_param_bytes=trained)
        assert horus_train_memory(arch, b) == card.total
        acts = b * arch.activation_bytes_per_sample + arch.activation_bytes_fixed
        assert horus_train_memory(arch, b) == 2 * acts + (frozen + trained) + 2 * trained


def test_horus_train_memory_is_unchanged_when_every_parameter_trains() -> None:
    from perfpredict.estimators.arch import ArchFeatures
    from perfpredict.estimators.design import horus_train_memory

    arch = ArchFeatures(forward_macs_per_sample=1e6, param_count=1e5, param_bytes=4e5 + 4,
                        activation_bytes_per_sample=3e4 + 0.1, num_nodes=10, activation_bytes_fixed=7)
    for b in (1, 3, 64):
        assert horus_train_memory(arch, b) == 2.0 * (b * arch.activation_bytes_per_sample + 7) + 3.0 * arch.param_bytes
