"""`perfpredict max-batch`: the largest batch size that fits, found by running steps (CPU here) or predicted."""

from __future__ import annotations

import json
import re

import pytest

from perfpredict import Predictor
from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.profile.batch_search import find_largest_batch
from perfpredict.workload import resolve_workload
from tests.conftest import TINY_MODEL

MIB = 2**20

#: Each sample holds one more MiB alive through the backward pass (a real allocation, not a mock), so the
#: batch that fits a limit is known to within the step's fixed overhead.
MIB_PER_SAMPLE = """
import torch
import torch.nn as nn

class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 8)

    def forward(self, x):
        big = x[:, :1].expand(-1, 2**18) * torch.ones(2**18)   # batch x 1 MiB
        return self.fc(x) + big.sum(dim=1, keepdim=True)

def build_model():
    return Wide()

def example_inputs(batch_size):
    return torch.randn(batch_size, 32)
"""


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


def test_the_search_finds_the_batch_at_the_memory_limit(write_model):
    limit = 200 * MIB
    wl = resolve_workload(str(write_model(MIB_PER_SAMPLE)))
    seen = []
    r = find_largest_batch(wl, device="cpu", memory_limit_bytes=limit, multiple_of=8, threads=1,
                           on_probe=seen.append)
    assert r.source == "measured" and r.device == "cpu" and r.device_name and not r.interrupted
    assert seen == r.probes
    ok, failed = r.probe(r.largest_ok), r.probe(r.smallest_failed)
    assert ok.status == "ok" and ok.peak_bytes <= limit
    assert failed.status == "oom" and r.smallest_failed - r.largest_ok == 8
    # 1 MiB per sample under 200 MiB, less the step's fixed memory (torch's code pages, the optimizer: ~30 MiB on
    # the Xeon VM; up to 80 MiB allowed for other CPUs' oneDNN code)
    assert 112 <= r.largest_ok <= 192, r.probes
    # doubling from 8, then bisection: every probe below the answer ran
    assert [p.batch_size for p in r.probes][:4] == [8, 16, 32, 64]
    assert all(p.status == "ok" for p in r.probes if p.batch_size <= r.largest_ok)
    assert "ran out of memory" in r.stopped_because or "above the limit" in r.stopped_because
    if failed.error and failed.error.startswith("ran, but"):  # says by how much, not "(200 MiB) above (200 MiB)"
        assert re.search(r"\(\d+\.\d MiB\) is [\d.e+-]+ MiB above the limit \(200\.0 MiB\)", failed.error), failed.error


def test_a_model_that_fits_everywhere_stops_at_max_batch(write_model):
    wl = resolve_workload(str(write_model(TINY_MODEL)))
    r = find_largest_batch(wl, device="cpu", max_batch=48, multiple_of=16, threads=1)
    assert [p.batch_size for p in r.probes] == [16, 32, 48]
    assert r.largest_ok == 48 and r.smallest_failed is None and "max_batch 48" in r.stopped_because


def test_a_broken_model_is_its_own_error_not_a_batch_limit(write_model):
    wl = resolve_workload(str(write_model(TINY_MODEL.replace("torch.randn(batch_size, 32)",
                                                               "torch.randn(batch_size, 31)"))))
    with pytest.raises(PerfPredictError, match="other than memory.*fix the model first"):
        find_largest_batch(wl, device="cpu", max_batch=64, threads=1)


def test_a_model_that_cannot_run_one_sample_is_searched_from_two(write_model):
    """BatchNorm in training needs two values per channel: batch 1 fails for a reason that is not memory, and the
    search used to stop there ('fix the model first') for a model that runs at every other size."""
    wl = resolve_workload(str(write_model(TINY_MODEL.replace("nn.Linear(32, 64), nn.ReLU()",
                                                               "nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU()"))))
    r = find_largest_batch(wl, device="cpu", max_batch=8, threads=1)
    assert [(p.batch_size, p.status) for p in r.probes] == [(1, "error"), (2, "ok"), (4, "ok"), (8, "ok")]
    assert r.largest_ok == 8 and r.model_error is None
    assert any("batch size 1 failed" in n and "went on from batch size 2" in n for n in r.notes), r.notes


def test_a_memory_limit_too_small_for_the_measuring_process_is_out_of_memory_not_a_model_error(write_model):
    """Under a 5 KB cap the measuring process died before reporting (glibc: 'cannot allocate memory for
    thread-local data', exit 127), and max-batch called that a failure other than memory: 'fix the model first'."""
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess
    from perfpredict.workload.spec import WorkloadRef
    from tests.conftest import FAST_TIMING

    bn = write_model(TINY_MODEL.replace("nn.Linear(32, 64), nn.ReLU()", "nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU()"))
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(bn)), 2, timing=FAST_TIMING, memory_limit_bytes=5000,
                                         measure_energy=False, check_denormals=False), 120)
    assert res["status"] == "oom", res


def test_a_ctrl_c_keeps_the_probes_measured_so_far(write_model):
    wl = resolve_workload(str(write_model(TINY_MODEL)))
    calls = []

    def start(b):
        calls.append(b)
        if len(calls) == 3:
            raise KeyboardInterrupt

    r = find_largest_batch(wl, device="cpu", max_batch=4096, threads=1, on_start=start, return_on_interrupt=True)
    assert r.interrupted and r.stopped_because == "interrupted by the user"
    assert [p.batch_size for p in r.probes] == [1, 2] and r.largest_ok == 2
    calls.clear()  # the Python API's default: the interrupt reaches the caller (a loop of searches stops)
    with pytest.raises(KeyboardInterrupt):
        find_largest_batch(wl, device="cpu", max_batch=4096, threads=1, on_start=start)


@pytest.mark.parametrize("kw, needle", [({"multiple_of": 0}, "multiple_of"), ({"max_batch": 4, "multiple_of": 8}, "max_batch"),
                                         ({"mode": "eval"}, "mode"), ({"memory_limit_bytes": -5}, "memory_limit"),
                                         ({"memory_limit_bytes": float("nan")}, "memory_limit"),
                                         ({"memory_limit_bytes": float("inf")}, "memory_limit"),
                                         ({"timeout_s": float("nan")}, "timeout"), ({"timeout_s": 0}, "timeout"),
                                         ({"threads": 0}, "threads"), ({"threads": 4096}, "OpenMP"),
                                         ({"max_batch": 2**40}, "at most")])
def test_bad_search_arguments_are_usage_errors(write_model, kw, needle):
    wl = resolve_workload(str(write_model(TINY_MODEL)))
    with pytest.raises(UsageError, match=needle):
        find_largest_batch(wl, device="cpu", **kw)


def test_predicted_answer_is_where_the_q90_crosses_the_limit(predictor):
    from perfpredict.estimators.arch import from_workload

    feats = from_workload("zoo:resnet", {"depth": 18, "width": 64, "image_size": 64})
    r = predictor.largest_batch(features=feats, memory_limit_bytes=16e9, device_type="cuda_h100", multiple_of=8)
    assert r.source == "predicted" and r.device == "cuda" and r.largest_ok and r.largest_ok % 8 == 0
    v = predictor.predict_values(feats, [r.largest_ok, r.smallest_failed], device_type="cuda_h100")
    mem = v["device_memory"]  # a CUDA set holds NVML's process memory (context included) to the card
    assert max(mem["q90"][0], mem["median"][0]) <= 16e9 < max(mem["q90"][1], mem["median"][1])
    assert r.smallest_failed - r.largest_ok == 8
    assert r.probe(r.largest_ok).device_bytes == int(max(mem["q90"][0], mem["median"][0]))
    # a larger budget never gives a smaller batch; the median is held to it less strictly than the q90
    bigger = predictor.largest_batch(features=feats, memory_limit_bytes=40e9, device_type="cuda_h100", multiple_of=8)
    median = predictor.largest_batch(features=feats, memory_limit_bytes=16e9, device_type="cuda_h100",
                                     multiple_of=8, quantile="median")
    assert bigger.largest_ok > r.largest_ok and median.largest_ok >= r.largest_ok
    assert any("outside the batch sizes the estimators were trained on" in n for n in bigger.notes)


def test_predicted_for_a_model_file_on_cpu_and_nothing_fits_a_tiny_budget(predictor, write_model):
    path = str(write_model(MIB_PER_SAMPLE))
    r = predictor.largest_batch(path, memory_limit_bytes=2e9, device_type="cpu", max_batch=4096)
    assert r.device == "cpu" and r.largest_ok is not None and r.probe(r.largest_ok).device_bytes is None
    none = predictor.largest_batch(path, memory_limit_bytes=1e3, device_type="cpu")
    assert none.largest_ok is None and none.smallest_failed == 1 and "smallest" in none.stopped_because


@pytest.mark.parametrize("kw, needle", [({"quantile": "q50"}, "quantile"), ({"memory_limit_bytes": 0}, "memory_limit"),
                                         ({"max_batch": 2_000_000}, "at most"), ({"device_type": "tpu"}, "tpu")])
def test_predicted_bad_arguments_are_found_before_the_model_file_runs(predictor, tmp_path, kw, needle):
    never = tmp_path / "never.py"
    never.write_text("raise SystemExit('the model file was run')\n")
    args = {"memory_limit_bytes": 1e9, **kw}
    with pytest.raises(UsageError, match=needle):
        predictor.largest_batch(str(never), **args)


def test_cli_measured_writes_the_result_and_logs_it(run_cli, write_model, tmp_path):
    path = write_model(MIB_PER_SAMPLE)
    proc = run_cli("max-batch", path, "--device", "cpu", "--memory-limit", "150MiB", "--multiple-of", "16",
                   "--threads", "1", "--out", "o")
    assert proc.returncode == 0, proc.stderr
    assert "largest batch size:" in proc.stdout and "mlflow: run" in proc.stdout
    doc = json.loads((tmp_path / "o" / "max_batch.json").read_text())
    assert doc["source"] == "measured" and doc["memory_limit_bytes"] == 150 * MIB and doc["largest_ok"] >= 16
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["perfpredict-profiles"])
    assert runs["metrics.largest_ok_batch"].tolist() == [doc["largest_ok"]]
    assert runs["tags.perfpredict.kind"].tolist() == ["max_batch"]
    assert runs["status"].tolist() == ["FINISHED"] and runs["tags.perfpredict.interrupted"].tolist() == ["false"]
    assert runs["tags.device.kind"].tolist() == ["cpu"] and runs["params.device"].tolist() == ["cpu"]  # as a profile's


def test_cli_predicted_and_its_argument_errors(run_cli, tmp_path):
    proc = run_cli("max-batch", "zoo:mlp", "--predicted", "--memory-limit", "1GB", "--device-type", "cpu",
                   "--no-mlflow", "--out", "p")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "p" / "max_batch_predicted.json").read_text())
    assert doc["source"] == "predicted" and doc["largest_ok"] > 1 and doc["model_set"].startswith("cpu_")
    # nothing fits: the answer is written, and the exit is not a success (`max-batch ... && train` stops there)
    none = run_cli("max-batch", "zoo:mlp", "--predicted", "--memory-limit", "1MB", "--device-type", "cpu",
                   "--no-mlflow", "--out", "none")
    assert none.returncode == 1 and "no batch size fits" in none.stderr and "Traceback" not in none.stderr, none.stderr
    assert json.loads((tmp_path / "none" / "max_batch_predicted.json").read_text())["largest_ok"] is None
    for args, needle in [(["--predicted"], "needs --memory-limit"),
                         (["--memory-limit", "1GB", "--device-type", "cpu"], "--predicted only"),
                         (["--memory-limit", "1GB", "--predicted", "--compile"], "for measuring"),
                         (["--memory-limit", "1GB", "--timeout", "0"], "--timeout")]:
        bad = run_cli("max-batch", "zoo:mlp", *args, "--no-mlflow", "--out", "bad")
        assert bad.returncode == 2 and needle in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "bad").exists()


def test_the_top_level_api_measures_the_same_way(write_model):
    import perfpredict

    r = perfpredict.largest_batch(str(write_model(TINY_MODEL)), device="cpu", max_batch=32, multiple_of=16, threads=1)
    assert r.largest_ok == 32 and [p.status for p in r.probes] == ["ok", "ok"]
    with pytest.raises(UsageError, match="target"):
        perfpredict.largest_batch(3)


def test_service_answers_the_largest_batch_for_a_feature_vector(predictor):
    from fastapi.testclient import TestClient

    from perfpredict.estimators.arch import from_workload
    from perfpredict.service import create_app

    client = TestClient(create_app(predictor))
    arch = from_workload("zoo:mlp", None)
    body = {"features": {k: v for k, v in arch.as_dict().items() if k not in ("family", "notes")},
            "memory_limit_bytes": 4e9, "device_type": "cuda_h100", "multiple_of": 64}
    r = client.post("/max-batch", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    direct = predictor.largest_batch(features=arch, memory_limit_bytes=4e9, device_type="cuda_h100", multiple_of=64)
    assert doc["source"] == "predicted" and doc["largest_ok"] == direct.largest_ok and doc["largest_ok"] % 64 == 0
    for bad in ({"memory_limit_bytes": 0}, {"memory_limit_bytes": 0.5}, {"memory_limit_bytes": True},
                {"memory_limit_bytes": "lots"}, {"quantile": "q50"}, {"multiple_of": 0},
                {"device_type": "tpu"}):
        assert client.post("/max-batch", json=body | bad).status_code == 422, bad
    assert client.get("/health").status_code == 200


NAN_AT_64 = TINY_MODEL + """
def loss_fn(out):
    return out.sum() * (float("nan") if out.shape[0] >= 64 else 1.0)
"""


def test_cli_a_nan_loss_at_a_larger_batch_is_no_memory_answer(run_cli, write_model, tmp_path):
    proc = run_cli("max-batch", write_model(NAN_AT_64), "--device", "cpu", "--multiple-of", "16", "--threads", "1",
                   "--no-mlflow", "--out", "o")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "other than memory (nonfinite)" in proc.stderr and "no memory limit was found" in proc.stdout
    doc = json.loads((tmp_path / "o" / "max_batch.json").read_text())  # the probes are kept
    assert doc["largest_ok"] == 32 and doc["smallest_failed"] == 64 and "nonfinite" in doc["model_error"]


def test_cli_output_problems_are_found_before_anything_runs(run_cli, tmp_path):
    (tmp_path / "o" / "max_batch.json").mkdir(parents=True)
    proc = run_cli("max-batch", "zoo:mlp", "--device", "cpu", "--no-mlflow", "--out", "o")
    assert proc.returncode == 2 and "is a directory" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "perfpredict-out").write_text("a file where the default folder goes")
    proc = run_cli("max-batch", "zoo:mlp", "--predicted", "--memory-limit", "1GB", "--no-mlflow")
    assert proc.returncode == 2 and "default output folder" in proc.stderr and "--out" in proc.stderr
    proc = run_cli("max-batch", "zoo:mlp", "--device", "cpu", "--timeout", "nan", "--no-mlflow", "--out", "p")
    assert proc.returncode == 2 and "--timeout" in proc.stderr


def test_predicted_answer_uses_the_set_it_names_whatever_the_file_asks(predictor, write_model):
    """A file with PRECISION = "bf16" predicted with precision="fp32": the fp32 set answers, at its own values."""
    path = str(write_model(TINY_MODEL + 'PRECISION = "bf16"\n'))
    from perfpredict.estimators.arch import from_workload

    fp32 = predictor.largest_batch(path, memory_limit_bytes=2e8, device_type="cpu_xeon_2vcpu", precision="fp32")
    v = predictor.predict_values(from_workload(path, None), [fp32.largest_ok, fp32.smallest_failed],
                                 device_type="cpu_xeon_2vcpu", precision="fp32")
    assert v["model_set"] == "cpu_xeon_2vcpu" and fp32.precision == "fp32"
    q90 = [max(a, b) for a, b in zip(v["peak_memory"]["q90"], v["peak_memory"]["median"])]
    assert q90[0] <= 2e8 < q90[1]
    # left to the file, the bf16 set answers
    bf16 = predictor.largest_batch(path, memory_limit_bytes=2e8, device_type="cpu")
    local_bf16 = predictor.model_set("cpu", precision="bf16").name  # this machine's bf16 set, where there is one
    assert bf16.precision == "bf16" and bf16.notes[0].startswith(f"predicted by model set {local_bf16}")


def test_predictor_refuses_a_model_that_is_not_a_path_and_params_that_are_not_a_mapping(predictor):
    with pytest.raises(UsageError, match="model must be"):
        predictor.largest_batch(42, memory_limit_bytes=1e9)
    with pytest.raises(UsageError, match="params must be a mapping"):
        predictor.predict("zoo:mlp", params="width=3")


#: example_inputs ignores its batch size, a common slip: every batch would "fit", up to max_batch.
IGNORES_BATCH = TINY_MODEL.replace("torch.randn(batch_size, 32)", "torch.randn(4, 32)")
#: ... while a model that builds its batch inside forward from a number it is given does not ignore it.
BATCH_AS_A_NUMBER = """
import torch
import torch.nn as nn

class FromCount(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 8)

    def forward(self, n):
        return self.fc(torch.randn(n, 32))

def build_model():
    return FromCount()

def example_inputs(batch_size):
    return (batch_size,)
"""


def test_cli_a_model_that_ignores_its_batch_size_stops_at_the_second_probe(run_cli, write_model, tmp_path):
    assert IGNORES_BATCH != TINY_MODEL
    proc = run_cli("max-batch", write_model(IGNORES_BATCH), "--device", "cpu", "--threads", "1", "--no-mlflow",
                   "--out", "o")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "ignores its batch_size" in proc.stderr and "batch size 1 and 2" in proc.stderr
    doc = json.loads((tmp_path / "o" / "max_batch.json").read_text())
    assert [p["batch_size"] for p in doc["probes"]] == [1, 2] and "ignores" in doc["model_error"]
    r = find_largest_batch(resolve_workload(str(write_model(BATCH_AS_A_NUMBER, name="as_number.py"))),
                           device="cpu", max_batch=8, threads=1)
    assert r.model_error is None and r.largest_ok == 8 and [p.batch_size for p in r.probes] == [1, 2, 4, 8]
