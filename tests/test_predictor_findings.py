"""Defects a property scan of the Predictor's answers to feature vectors found (session 40): a 500 for a
fractional per-op total, microsecond CPU steps for a vector without op types, fallback memory that depended on
the other batch sizes asked for, a predicted card that predicted itself with narrower intervals, a median
outside its own interval, and Python API arguments that failed with a raw error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fastapi.testclient import TestClient

from perfpredict import Predictor
from perfpredict.errors import UsageError

CPU_SET = "cpu_epyc_genoa_2vcpu"
RESNET50_SIZED = {"forward_macs_per_sample": 4.1e9, "param_count": 25.6e6, "param_bytes": 102.4e6,
                  "activation_bytes_per_sample": 1e8, "num_nodes": 300}


#: a model whose cost grows faster than its batch: a batch x batch similarity matrix (a contrastive loss's logits)
CONTRASTIVE_MODEL = (
    "import torch\nimport torch.nn as nn\n\n"
    "class M(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.a, self.b = nn.Linear(64, 32), nn.Linear(64, 32)\n\n"
    "    def forward(self, x):\n"
    "        return (self.a(x) @ self.b(x).t()).softmax(-1)\n\n"
    "def build_model():\n    return M()\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load()


def _profiled(predictor, set_name, prefix):
    ms = predictor.sets[set_name]
    name = next(n for n in sorted(ms.profiled_archs) if n.startswith(prefix))
    d = dataclasses.asdict(ms.profiled_archs[name])
    return {k: v for k, v in d.items() if v is not None}


def test_fractional_per_op_totals_are_rounded_not_a_server_error(predictor):
    f = {"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5, "activation_bytes_per_sample": 1e5,
         "num_nodes": 10, "op_counts": {"Conv": 2, "Relu": 2}, "macs_by_op": {"Conv": 1000000.5},
         "activation_bytes_by_op": {"Relu": 2.5}}
    card = predictor.predict(features=f, batch_sizes=[8], device_type=CPU_SET)
    assert card.features.macs_by_op == {"Conv": 1000000} and card.features.activation_bytes_by_op == {"Relu": 2}
    from perfpredict.service import create_app

    client = TestClient(create_app(predictor))
    r = client.post("/predict", json={"features": f, "batch_sizes": [8], "device_type": CPU_SET})
    assert r.status_code == 200, r.text


def test_a_vector_of_the_required_fields_gets_cpu_times_from_its_macs(predictor):
    """Without op types no kernel was priced: a ResNet-50-sized step came out at about a microsecond."""
    card = predictor.predict(features=RESNET50_SIZED, batch_sizes=[1, 64], device_type=CPU_SET, allow_fallback=False)
    t1, t64 = (p.iter_time_s for p in card.prediction.points)
    assert t1 > 1e-2 and t64 > 10 * t1  # 4.1 GMACs a sample on 2 vCPUs: tens of milliseconds at least
    assert any("nor op types with their MACs" in n for n in card.prediction.notes)
    twice = dict(RESNET50_SIZED, forward_macs_per_sample=8.2e9)
    t64_twice = predictor.predict(features=twice, batch_sizes=[64], device_type=CPU_SET,
                                  allow_fallback=False).prediction.points[0].iter_time_s
    assert t64_twice > 1.3 * t64  # the MACs count now


def test_fallback_memory_at_a_batch_size_does_not_depend_on_the_others_asked_for(predictor):
    """A MobileNetV2 scaled 64x falls back to its nearest profiled model; batch 8 got 1.86 GB alone and 2.16 GB
    beside batch 4, and max-batch --predicted disagreed with predict."""
    f = _profiled(predictor, "cpu_epyc_2vcpu_infer", "mobilenetv2-width_mult1-depth_mult1.5-image_size32-")
    for k in ("forward_macs_per_sample", "param_count", "param_bytes", "activation_bytes_per_sample",
              "saved_bytes_per_sample", "saved_cpu_bytes_per_sample", "peak_live_bytes_per_sample",
              "graph_saved_bytes_per_sample"):  # the totals, not the per-op ones (the scan's vector)
        f[k] = f[k] * 64
    f.pop("kernel_nodes", None)
    ladder = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128]
    together = predictor.predict_values(f, ladder, device_type="cpu_epyc_2vcpu_infer")
    assert together["method"] == "nearest_profiled"
    for i, b in enumerate(ladder):
        alone = predictor.predict_values(f, [b], device_type="cpu_epyc_2vcpu_infer")
        for key in ("median", "q90"):
            assert alone["peak_memory"][key][0] == pytest.approx(together["peak_memory"][key][i], rel=1e-9), b
    med = np.array(together["peak_memory"]["median"])
    assert np.all(np.diff(med) >= -1e-6 * med[1:])


def test_a_predicted_card_predicts_itself_with_the_same_intervals_and_notes(predictor):
    f = _profiled(predictor, "cuda_h100", "resnet-")
    for k in ("saved_bytes_per_sample", "saved_cpu_bytes_per_sample", "peak_live_bytes_per_sample"):
        f.pop(k)
    f.pop("kernel_nodes", None)
    first = predictor.predict(features=f, batch_sizes=[64], device_type="cuda_h100")
    again = predictor.predict(features=first, batch_sizes=[64], device_type="cuda_h100")
    a, b = first.prediction.points[0], again.prediction.points[0]
    assert b.peak_memory_interval_bytes == pytest.approx(a.peak_memory_interval_bytes)
    assert b.device_memory_safe_bytes == pytest.approx(a.device_memory_safe_bytes)
    estimated = [n for n in first.prediction.notes if "estimated" in n]
    assert estimated and [n for n in again.prediction.notes if "estimated" in n] == estimated
    assert first.features.saved_bytes_per_sample is None  # the estimate is not written as if counted


def test_every_interval_holds_its_median(predictor):
    """vgg19 at batch 1 on the H100 set: utilisation 0.128 with an interval starting at 0.130."""
    f = _profiled(predictor, "cuda_h100", "vgg-depth19-width64-batch_norm1-image_size32-hidden512-num_classes100")
    p = predictor.predict(features=f, batch_sizes=[1], device_type="cuda_h100").prediction.points[0]
    for point, (lo, hi) in ((p.gpu_utilization, p.gpu_utilization_interval), (p.iter_time_s, p.iter_time_interval_s),
                            (p.peak_memory_bytes, p.peak_memory_interval_bytes)):
        assert lo <= point <= hi


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"device_type": 5}, r"device_type must be a model set's name"),
    ({"features": dict(RESNET50_SIZED, op_counts={"Conv": 1}, family=5)}, r"family must be text"),
    ({"features": dict(RESNET50_SIZED, op_counts={"Conv": 1}, notes=[1])}, r"notes must be text"),
])
def test_python_api_arguments_of_the_wrong_type_are_named(predictor, kwargs, message):
    kwargs = {"features": dict(RESNET50_SIZED, op_counts={"Conv": 1}), **kwargs}
    with pytest.raises(UsageError, match=message):
        predictor.predict(batch_sizes=[8], **kwargs)


def test_mode_in_capitals_and_null_notes_are_taken(predictor):
    card = predictor.predict(features=dict(RESNET50_SIZED, notes=None), batch_sizes=[8], device_type=CPU_SET,
                             mode="INFER")
    assert card.run.mode == "infer"


def test_a_memory_limit_past_any_machine_is_named(predictor):
    with pytest.raises(UsageError, match=r"memory_limit_bytes must be a number of bytes from 1 to 1e30"):
        predictor.largest_batch(features=RESNET50_SIZED, memory_limit_bytes=10**400, device_type="cuda_h100")


def test_the_note_says_what_the_time_baseline_priced(predictor):
    """A GPU vector with op types but no per-op MACs has launches from its op types (review): it is not told it
    has none. A CPU vector whose MACs are all fixed gets stand-ins carrying them."""
    with_ops = dict(RESNET50_SIZED, op_counts={"Conv": 53, "Relu": 49, "Add": 16, "MatMul": 1})
    notes = predictor.predict(features=with_ops, batch_sizes=[8], device_type="cuda_h100",
                              allow_fallback=False).prediction.notes
    assert not any("no kernel launches" in n for n in notes) and any("launch count comes from" in n for n in notes)
    fixed = dict(RESNET50_SIZED, forward_macs_per_sample=0, forward_macs_fixed=4.1e10)
    t = predictor.predict(features=fixed, batch_sizes=[8], device_type=CPU_SET,
                          allow_fallback=False).prediction.points[0].iter_time_s
    assert t > 1e-2


def test_a_model_file_growing_faster_than_its_batch_gets_a_card_that_predicts_again(predictor, tmp_path):
    """A batch x batch similarity matrix (a contrastive loss's logits) splits into negative batch-independent
    parts, which the feature schema refuses: its card from a model file could not be predicted from again (the
    ONNX upload route already held these at 0)."""
    model = tmp_path / "contrastive.py"
    model.write_text(CONTRASTIVE_MODEL)
    card = predictor.predict(str(model), batch_sizes=[8, 32], device_type=CPU_SET)
    f = card.features
    assert min(f.forward_macs_fixed, f.activation_bytes_fixed, f.graph_saved_bytes_fixed) == 0
    assert all(r[3] >= 0 and r[5] >= 0 for r in f.kernel_nodes)
    again = predictor.predict(features=card, batch_sizes=[8, 32], device_type=CPU_SET)
    assert [p.iter_time_s for p in again.prediction.points] == pytest.approx(
        [p.iter_time_s for p in card.prediction.points], rel=1e-6)
