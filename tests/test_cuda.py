"""The CUDA paths, on a real GPU: skipped where torch sees none (CI), run on a lent GPU machine.

    PYTHONPATH=src python -m pytest -q -m cuda tests/test_cuda.py
"""

from __future__ import annotations

import pytest
import torch

from perfpredict.profile.colocation import measure_colocation, measure_pair
from perfpredict.profile.group_request import GroupTiming
from perfpredict.profile.profiler import ProfileSettings, profile_workload
from perfpredict.workload import resolve_workload
from perfpredict.workload.spec import WorkloadRef
from tests.conftest import FAST_TIMING, TINY_MODEL

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

QUICK = GroupTiming(warmup_iters=3, warmup_s=0.2, window_s=1.0, barrier_timeout_s=120)

#: Asks for far more memory than any GPU has when the batch is larger than 8: a real CUDA OOM.
OOM_MODEL = TINY_MODEL + """
class Hungry(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 8)

    def forward(self, x):
        if x.shape[0] > 8:
            torch.empty(int(4e12), dtype=torch.uint8, device=x.device)  # 4 TB
        return self.fc(x)

def build_model():
    return Hungry()
"""


def _settings(**kw) -> ProfileSettings:
    return ProfileSettings(device="cuda", timing=FAST_TIMING, fvcore=False, **kw)


def test_profile_on_cuda_records_gpu_device_memory_and_utilisation(write_model, tmp_path):
    wl = resolve_workload("zoo:resnet", {"depth": 18, "width": 32})
    outcome = profile_workload(wl, _settings(batch_sizes=(16, 64)), out_dir=tmp_path / "out")
    card = outcome.card
    assert outcome.error is None
    assert card.device.kind == "cuda" and card.device.compute_capability
    pts = card.measured_points()
    assert [p.batch_size for p in pts] == [16, 64]
    assert all(p.device.startswith("cuda") for p in pts)
    # A small CNN is launch-bound on a large GPU (on an H100 both batches took ~9.5 ms per iteration), so a
    # 4x larger batch gives clearly more samples/s.
    assert pts[1].samples_per_s > 1.5 * pts[0].samples_per_s
    mem = {m.batch_size: m for m in card.memory}
    params = card.features.param_bytes
    for m in mem.values():
        assert m.kind == "cuda_peak_allocated"
        # weights + gradients + momentum at least; the reserved pool covers the peak allocation
        assert m.peak_bytes >= 3 * params
        assert m.cuda_reserved_bytes >= m.peak_bytes
    assert mem[64].peak_bytes > mem[16].peak_bytes  # activations grow with the batch
    assert card.energy.available, card.energy.reason
    for e in card.energy.points:
        assert 0.0 < e.gpu_utilization <= 1.0
        assert e.utilization_samples > 0 and e.mean_power_w > 0


def test_cuda_oom_is_recorded_and_the_sweep_continues(write_model, tmp_path):
    wl = resolve_workload(str(write_model(OOM_MODEL)))
    outcome = profile_workload(wl, _settings(batch_sizes=(8, 16)), out_dir=tmp_path / "out")
    status = {p.batch_size: p.status for p in outcome.card.throughput}
    assert status == {8: "ok", 16: "oom"}
    assert outcome.error is None  # one infeasible batch size is a finding, not a failure


def test_colocated_copies_share_the_gpu(write_model):
    ref = WorkloadRef("zoo", "mlp", ())
    info = measure_colocation(ref, 64, copies=(2,), device="cuda", timing=QUICK, timeout_s=300)
    solo, two = info.points
    assert solo.status == two.status == "ok", (solo.error, two.error)
    assert len(two.per_copy_samples_per_s) == 2
    assert 0.0 < two.per_copy_relative <= 1.2  # a copy never gets much more than the whole GPU
    assert two.gpu_utilization is not None and 0.0 < two.gpu_utilization <= 1.0


def test_pair_slowdown_carries_cumulative_utilisation():
    job = WorkloadRef("zoo", "resnet", (("depth", 18), ("width", 64)))
    partner = WorkloadRef("zoo", "mlp", ())
    pc = measure_pair(job, 64, partner, 64, device="cuda", timing=QUICK, timeout_s=300)
    assert pc.status == "ok", pc.error
    assert pc.job_slowdown >= 0 and pc.partner_slowdown >= 0
    assert pc.cumulative_gpu_utilization == pytest.approx(pc.job_solo_gpu_utilization
                                                          + pc.partner_solo_gpu_utilization)


def test_dataset_collector_on_cuda_one_process_per_architecture(tmp_path):
    from perfpredict.dataset.collect import CUDA_DATASET_TIMING, CollectSettings, collect, plan_sweep, read_dataset

    plans = plan_sweep(["mlp"], batch_sizes=[32, 128], max_gmacs=0.0005)[:1]
    out = tmp_path / "cuda.csv"
    summary = collect(plans, out, CollectSettings(device="cuda:0", timing=CUDA_DATASET_TIMING))
    assert summary["counts"] == {"ok": 2}
    rows = read_dataset(out)
    assert [int(r["batch_size"]) for r in rows] == [32, 128]
    for r in rows:
        assert r["device_kind"] == "cuda" and r["memory_kind"] == "cuda_peak_allocated"
        assert 0 < float(r["gpu_utilization"]) <= 1
        assert int(r["nvml_process_bytes"]) >= int(r["cuda_reserved_bytes"])
    # The second point's peak is its own (reset between points), not the first one's.
    assert int(rows[1]["peak_memory_bytes"]) >= int(rows[0]["peak_memory_bytes"])


def test_dataset_collector_on_ray_gives_each_architecture_a_gpu(tmp_path):
    """`collect_dataset.py measure --device cuda --ray local`: each architecture a Ray task holding one GPU, its
    rows CUDA measurements named after the GPU NVML reports."""
    ray = pytest.importorskip("ray")
    from perfpredict.dataset.collect import CUDA_DATASET_TIMING, CollectSettings, collect, plan_sweep, read_dataset
    from perfpredict.hostinfo import gpu_names

    plans = plan_sweep(["mlp"], batch_sizes=[32, 128], max_gmacs=0.0005)[:2]
    out = tmp_path / "cuda.csv"
    summary = collect(plans, out, CollectSettings(device="cuda", timing=CUDA_DATASET_TIMING), ray_address="local")
    assert not ray.is_initialized()
    assert summary["counts"] == {"ok": 4} and not summary["ray"]["refused"] and not summary["ray"]["lost"]
    assert summary["ray"]["task_resources"]["num_gpus"] == 1
    rows = read_dataset(out)
    assert {r["device_name"] for r in rows} <= set(gpu_names())
    assert all(r["device_kind"] == "cuda" and 0 < float(r["gpu_utilization"]) <= 1 for r in rows)


def test_kernel_benchmarks_time_on_the_gpu():
    """The kernel microbenchmarks run on CUDA (synchronised), and their provenance names the GPU."""
    from perfpredict.profile.kernel_bench import catalogue, machine_description, measure

    benches = [b for b in catalogue(0, 3) if b.kind in ("gemm", "conv", "pointwise")][:4]
    recs = measure(benches, ("infer", "train"), device="cuda")
    for r in recs:
        assert "error" not in r, r
        assert r["nodes"] and all(r["seconds"][m] > 0 for m in ("infer", "train"))
    d = machine_description("cuda")
    assert d["device"] == "cuda" and d["gpu_name"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_on_cuda_runs_under_autocast_and_keeps_the_device(write_model, tmp_path, precision):
    """The forward checks its own dtype (tests/test_precision.py's pattern); fp16 steps go through the scaler."""
    expect = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}[precision]
    path = write_model(TINY_MODEL + f"""
class Checked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.dtype != {expect}:
            raise ValueError(f"forward ran in {{y.dtype}}")
        return y

def build_model():
    return Checked()
""")
    wl = resolve_workload(str(path), None, precision)
    outcome = profile_workload(wl, _settings(batch_sizes=(16, 64), features=False), out_dir=tmp_path / "out")
    assert outcome.error is None
    card = outcome.card
    assert card.run.precision == precision and card.device.kind == "cuda"
    assert [p.status for p in card.throughput] == ["ok", "ok"]
    assert all(p.device.startswith("cuda") for p in card.measured_points())


def test_largest_batch_on_cuda_under_an_allocator_cap():
    """`perfpredict max-batch --device cuda --memory-limit 1GiB`: the cap is the caching allocator's, so the batch
    that ran peaked within it and the next one ran out of CUDA memory."""
    from perfpredict.profile.batch_search import find_largest_batch

    r = find_largest_batch(resolve_workload("zoo:mlp"), device="cuda", memory_limit_bytes=2**30, multiple_of=256,
                           max_batch=2**22)
    ok, failed = r.probe(r.largest_ok), r.probe(r.smallest_failed)
    assert r.device.startswith("cuda") and r.device_name
    assert ok.status == "ok" and ok.peak_bytes <= 2**30 and ok.device_bytes
    assert failed.status == "oom" and r.smallest_failed - r.largest_ok == 256


def test_ab_on_cuda_finds_the_larger_job_slower():
    """`perfpredict ab --device cuda`: paired rounds on the GPU, each measurement in a fresh process."""
    from perfpredict.profile.ab import compare_jobs

    r = compare_jobs(resolve_workload("zoo:mlp", {"width": 256}), resolve_workload("zoo:mlp", {"width": 4096}), 4096,
                     rounds=3, device="cuda", timing=FAST_TIMING)
    assert r.device.startswith("cuda") and r.device_name and len(r.rounds) == 3
    assert r.verdict == "slower" and r.ci_high < 1 and r.peak_ratio > 2
