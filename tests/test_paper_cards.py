"""Paper-derived performance models reproduce the statements they are built from, and survive a card."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfpredict.card import PerformanceCard
from perfpredict.sched.cluster import Allocation, Share
from perfpredict.sched.paper_cards import (
    CPU_VALUES,
    MEM_VALUES_GB,
    MOLDABLE_MODELS,
    MOLDABLE_PARALLEL_FRACTION,
    SYNERGY_MODELS,
    SYNERGY_TASK_MODELS,
    moldable_model,
    moldable_models,
    moldable_speedup,
    paper_card,
    paper_model,
    synergy_models,
    synergy_spec,
)
from perfpredict.sched.perf import PerfModel

MODELS = synergy_models()
LANGUAGE = SYNERGY_TASK_MODELS["language"]
SENSITIVE = SYNERGY_TASK_MODELS["image"] + SYNERGY_TASK_MODELS["speech"]


# -- Synergy: the statements of §2.1 -----------------------------------------------------------------------
def test_table4_models_by_task():
    assert SYNERGY_TASK_MODELS == {
        "image": ["resnet18", "alexnet", "shufflenetv2", "mobilenetv2", "resnet50"],
        "language": ["gnmt", "lstm", "transformer-xl"],
        "speech": ["m5", "deepspeech"],
    }
    assert set(MODELS) == set(SYNERGY_MODELS)
    assert all(m.source == "paper" for m in MODELS.values())


def test_resnet18_reaches_its_cpu_gain_at_the_proportional_memory_share():
    # §2.1's "almost 2x from 62 to 500 GB" was measured on OpenImages; Table 4's ResNet18 trains on ImageNet and
    # the authors' released res18_1 table has its full CPU curve at 62.5 GB per GPU (2.4x at 9 CPUs there).
    r = MODELS["resnet18"]
    assert r.relative_w(9, 62.5) == pytest.approx(2.3)
    assert r.relative_w(9, 500) == pytest.approx(r.relative_w(9, 62.5))
    assert r.demand() == (8.0, 62.5)


@pytest.mark.parametrize("ratio", [4, 5, 6])
def test_more_cpus_per_gpu_speed_the_proportional_baseline_up(ratio):
    # §5.5: servers with 4, 5, 6 CPUs per GPU and the same 500 GB (62.5 GB per GPU): "the baseline
    # GPU-proportional scheduler gets more CPU cores per GPU, thereby reducing data stalls in the baseline".
    before = [MODELS[name].relative_w(ratio - 1, 62.5) for name in SENSITIVE]
    after = [MODELS[name].relative_w(ratio, 62.5) for name in SENSITIVE]
    assert all(a >= b and a > 1.0 for a, b in zip(after, before, strict=True))
    assert sum(after) > sum(before) + 0.1 * len(SENSITIVE)  # not capped at one speed (ResNet50 and M5 saturate)


@pytest.mark.parametrize(("name", "caps"), [
    ("alexnet", {62.5: 2.0, 125.0: 3.1}),        # released alexnet_1: 2.0 at 62.5 GB, full speed from 125 GB
    ("shufflenetv2", {62.5: 2.0, 125.0: 3.0}),   # shufflenet_1: the same shape
    ("m5", {62.5: 1.5, 125.0: 2.0}),             # m5_1: 1.5 at 62.5 GB, 2.0 at 125 GB
])
def test_memory_caps_from_the_released_tables(name, caps):
    m = MODELS[name]
    for mem, top in caps.items():
        assert m.relative_w(24, mem) == pytest.approx(top)
        assert m.relative_w(24, 500) >= top


def test_resnet18_cpus_3_to_9_is_2_3x_and_saturates():
    r = MODELS["resnet18"]
    assert r.relative_w(9, 500) / r.relative_w(3, 500) == pytest.approx(2.3)
    assert r.relative_w(24, 500) == pytest.approx(r.relative_w(9, 500))


def test_alexnet_cpus_3_to_12_is_3_1x():
    a = MODELS["alexnet"]
    assert a.relative_w(12, 500) / a.relative_w(3, 500) == pytest.approx(3.1)


@pytest.mark.parametrize("name", LANGUAGE)
def test_language_models_are_insensitive(name):
    m = MODELS[name]
    w = np.array(m.matrix)
    assert np.allclose(w / w[0, 0], 1.0)
    assert m.relative_w(1, 20) == pytest.approx(1.0)  # GNMT: unaffected down to its 20 GB process memory
    assert m.demand() == (1.0, MEM_VALUES_GB[0])


@pytest.mark.parametrize("name", SENSITIVE)
def test_image_and_speech_models_gain_from_cpu_and_starve_below_the_memory_share(name):
    m = MODELS[name]
    c_sat = synergy_spec(name).cpu_anchors[-1][0]
    assert m.relative_w(c_sat, 500) > 1.1
    # below the share the released tables starve every sensitive model (0.1 at 20.83 GB), interpolated here
    for c in (3, c_sat):
        assert m.relative_w(c, 31.25) == pytest.approx(0.075 + 0.25 * m.relative_w(c, 62.5))
        assert m.relative_w(c, 31.25) < m.relative_w(c, 62.5)


@pytest.mark.parametrize("name", SYNERGY_MODELS)
def test_grid_is_monotone_concave_in_cpus_and_one_at_reference(name):
    m = MODELS[name]
    w = np.array(m.matrix)
    assert w.shape == (len(CPU_VALUES), len(MEM_VALUES_GB))
    assert np.all(np.diff(w, axis=0) >= -1e-12)  # more CPUs never hurt
    assert np.all(np.diff(w, axis=1) >= -1e-12)  # more memory never hurts
    assert np.all(np.diff(w[:, -1], n=2) <= 1e-12)  # the full-memory CPU curve is concave
    assert m.relative_w(3, 62.5) == pytest.approx(1.0)
    assert m.rate_at(1, 1) == pytest.approx(1.0)
    assert m.rate_at(4, 4) == pytest.approx(1.0)


# -- seed 002: speedup curves ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mcnn", "opennmt"])
def test_moldable_curves_are_sublinear_and_share_well(kind):
    s = moldable_speedup(kind)
    assert s(1.0) == pytest.approx(1.0)
    for n in (2, 3, 4):
        assert s(1 / n) > 1 / n  # §II-B: n co-located tasks each run faster than 1/n
    ps = np.array([0.25, 1 / 3, 0.5, 1, 1.5, 2, 3, 4, 6, 8])
    vals = np.array([s(p) for p in ps])
    assert np.all(np.diff(vals) > 0)  # non-decreasing
    assert np.all(np.diff(vals / ps) <= 1e-12)  # sublinear: efficiency never rises
    f = MOLDABLE_PARALLEL_FRACTION[kind]
    for p in (0.25, 1 / 3, 0.5, 2, 3, 4, 8):  # Amdahl at the knots and in the tail
        assert s(p) == pytest.approx(1 / ((1 - f) + f / p))


def test_language_scales_worse_than_mcnn_and_linear_is_linear():
    assert moldable_speedup("opennmt")(4) < moldable_speedup("mcnn")(4) < 4
    lin = moldable_speedup("linear")
    for p in (0.25, 0.5, 1, 2, 4, 240):
        assert lin(p) == pytest.approx(p)


def test_moldable_device_memory_from_the_paper():
    assert moldable_model("mcnn").device_mem_gb == pytest.approx(0.2 * 12)
    assert moldable_model("opennmt").device_mem_gb > 12 / 2  # cannot share a 12 GB M40
    assert moldable_model("opennmt", gpu_mem_gb=32).device_mem_gb == pytest.approx(0.9 * 32)
    assert sorted(moldable_models()) == sorted(MOLDABLE_MODELS) == ["linear", "mcnn", "opennmt"]


def test_share_fraction_changes_only_the_shared_part_of_the_curve():
    """The sensitivity knob: n tasks sharing a GPU follow Amdahl with the given fraction, whole GPUs keep the
    application's own curve, and the result is still a sublinear, non-decreasing speedup."""
    base = moldable_model("mcnn").speedup
    shared = moldable_models(share_fraction={"mcnn": 0.2})["mcnn"].speedup
    for n in (2, 3, 4):
        assert shared(1 / n) == pytest.approx(1 / (0.8 + 0.2 * n))
        assert shared(1 / n) > base(1 / n)
    for p in (1, 2, 3, 4, 8):
        assert shared(p) == pytest.approx(base(p))
    ps = np.array([0.25, 1 / 3, 0.5, 1, 2, 4])
    vals = np.array([shared(p) for p in ps])
    assert np.all(np.diff(vals) > 0) and np.all(np.diff(vals / ps) <= 1e-12)
    with pytest.raises(KeyError, match="resnet"):
        moldable_models(share_fraction={"resnet": 0.5})
    with pytest.raises(ValueError, match="share fraction"):
        moldable_model("mcnn", share_fraction=1.5)


def test_moldable_rate_on_a_quarter_gpu():
    m = moldable_model("mcnn")
    quarter = Allocation.fraction(0, 0, 0.25, cpus=1, mem_gb=10)
    assert m.rate(quarter, 1.0) == pytest.approx(moldable_speedup("mcnn")(0.25))
    assert m.rate_at(4, 1) == pytest.approx(moldable_speedup("mcnn")(4))


def test_models_pickle_for_worker_processes():
    for name in ("resnet18", "mcnn"):
        m = pickle.loads(pickle.dumps(paper_model(name)))
        assert m.rate_at(2, 1) == pytest.approx(paper_model(name).rate_at(2, 1))


def test_unknown_names():
    with pytest.raises(KeyError, match="Table 4"):
        paper_model("vgg16")
    with pytest.raises(KeyError):
        moldable_speedup("bert")
    with pytest.raises(KeyError):
        paper_card("nope")


# -- cards -----------------------------------------------------------------------------------------------
CARDS = {name: PerformanceCard.from_json(paper_card(name).to_json()) for name in SYNERGY_MODELS + MOLDABLE_MODELS}
FROM_CARD = {name: PerfModel.from_card(card, ref_cpus_per_gpu=3, ref_mem_per_gpu=62.5)
             if name in SYNERGY_MODELS else PerfModel.from_card(card) for name, card in CARDS.items()}


@pytest.mark.parametrize("name", SYNERGY_MODELS + MOLDABLE_MODELS)
def test_card_sections_are_marked_paper(name):
    card = CARDS[name]
    raw = json.loads(card.to_json())
    sections = [s for s in (raw["sensitivity"], raw["speedup_curve"], *raw["memory"]) if s is not None]
    assert sections and all(s["source"] == "paper" for s in sections)
    assert card.device.kind == "cuda" and "paper-derived" in card.device.name
    assert any(n.startswith("source:") for n in card.notes) and any(n.startswith("assumed:") for n in card.notes)


def test_synergy_card_demand_is_the_grid_demand():
    card = CARDS["resnet18"]
    assert (card.sensitivity.demand.cpus, card.sensitivity.demand.mem_gb) == MODELS["resnet18"].demand()


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(SYNERGY_MODELS + MOLDABLE_MODELS),
       gpus=st.sampled_from([0.25, 1 / 3, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0]),
       ref=st.sampled_from([1.0, 2.0, 4.0]),
       cpus_per_gpu=st.floats(0.5, 30), mem_per_gpu=st.floats(10, 600))
def test_card_round_trip_gives_the_same_rates(name, gpus, ref, cpus_per_gpu, mem_per_gpu):
    direct, back = paper_model(name), FROM_CARD[name]
    args = (gpus, ref, cpus_per_gpu * gpus, mem_per_gpu * gpus)
    assert back.rate_at(*args) == pytest.approx(direct.rate_at(*args), rel=1e-12)
    assert back.device_mem_gb == pytest.approx(direct.device_mem_gb)


def test_round_trip_on_a_two_server_gang():
    alloc = Allocation((Share(0, 2.0, 20, 900, devices=(0, 1)), Share(1, 2.0, 6, 200, devices=(0, 1))))
    for name in ("resnet18", "alexnet", "gnmt", "m5"):
        assert FROM_CARD[name].rate(alloc, 4) == pytest.approx(MODELS[name].rate(alloc, 4))
