"""Shared fixtures: tiny real model files, a fast timing configuration, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings

from perfpredict.profile import TimingConfig
from perfpredict.sched import Mechanism

# Property tests draw the same examples on every run by default, so `make test` (and CI) is reproducible: a
# failure is the code's, not the draw's. `HYPOTHESIS_PROFILE=explore make test` draws fresh examples to hunt
# for new counterexamples (one found that way is pinned with @example, e.g. tests/test_andreas.py).
settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

#: Test modules whose assertions never compare measured wall-clock times: error paths, file formats, argument
#: checks, fits on the committed datasets, simulations, memory-only measurements. `make test` runs these in
#: parallel (pytest-xdist, one module per worker) and then every other module alone, so that no test whose
#: answer is a timing shares the CPUs with another test. A new module is serial until it is listed here; a test
#: of a serial module that compares no times can carry ``@pytest.mark.parallel_safe`` itself.
PARALLEL_SAFE_MODULES = frozenset({
    "test_andreas", "test_bad_input_cli", "test_batch_extrapolation", "test_benchmark_args", "test_benchmarks_findings", "test_card", "test_card_findings", "test_cli",
    "test_collect_bad_input", "test_collect_findings", "test_collect_ray", "test_compare", "test_compare_findings", "test_concurrent_use", "test_compare_ray", "test_compile", "test_estimators", "test_estimators_eval_findings",
    "test_device_calibration_findings", "test_fallback", "test_frozen_parameters", "test_calibration_fixes", "test_zoo_depth_fixes", "test_review43_findings", "test_graph_fixes", "test_left_alone44_fixes", "test_onnx_frozen",
    "test_same_figure_findings",
    "test_unseen_architectures",
    "test_left_alone45_fixes",
    "test_onnx_variety_findings",
    "test_onnx_file_findings",
    "test_onnx_dynamo_exports",
    "test_dynamo_review_findings",
    "test_review46c_findings",
    "test_user_models_findings",
    "test_control_flow_memory_fixes",
    "test_docs_truth_findings",
    "test_review44_findings",
    "test_units_findings",
    "test_frozen_time_fixes",
    "test_activation_checkpointing",
    "test_checkpointing_memory",
    "test_checkpointing_review",
    "test_rmsle_scale",
    "test_review45_findings",
    "test_left_alone46_fixes",
    "test_left_alone47_fixes",
    "test_batch_input_fixes",
    "test_frozen_memory_fixes",
    "test_export_fastpath_fixes",
    "test_optimizer_state_fixes",
    "test_design_row_work",
    "test_review46_findings",
    "test_review46b_findings",
    "test_optimizer_step_memory",
    "test_onnx_input_findings",
    "test_weightless_features",
    "test_optimizer_step_fused",
    "test_onnx_optimizer",
    "test_max_batch_optimizer",
    "test_review47b_findings",
    "test_unused_parameters",
    "test_peft_features",
    "test_review47d_findings",
    "test_onnx_trained",
    "test_measured_saved_counts",
    "test_card_precision_notes",
    "test_review47e_findings",
    "test_scale_findings",
    "test_max_batch_onnx",
    "test_onnx_batchnorm_buffers",
    "test_review48_findings",
    "test_review48b_findings",
    "test_predict_batch",
    "test_review49_findings",
    "test_baseline_components_once",
    "test_review49c_findings",
    "test_experiments", "test_failure_report", "test_features", "test_kept_runs", "test_training_input_guards", "test_parallel_runs",
    "test_features_findings", "test_fit_comm", "test_fit_findings", "test_formulas_findings", "test_fit_interference", "test_fit_rate", "test_fit_speedup", "test_forest",
    "test_fuzz_findings", "test_genie", "test_genie_andreas_mech_findings", "test_gpu_session", "test_gpu_set_choice", "test_graph_saved", "test_horus",
    "test_input_guards",
    "test_job_records",
    "test_keyword_inputs", "test_lookup_bytes", "test_max_batch", "test_mechanism_conformance_findings", "test_memory_estimate_findings", "test_memory_past_trained_batches",
    "test_metrics", "test_moldable_mechanisms", "test_notebooks", "test_output_paths", "test_own_scheduler", "test_pair_prediction",
    "test_paper_cards", "test_perf_findings", "test_precision", "test_profile_findings", "test_predicted_cards", "test_predictor_findings", "test_python_api_input", "test_review_findings", "test_review4_findings", "test_review2_findings", "test_review3_findings", "test_saved_bytes",
    "test_service_findings", "test_service_validation", "test_sim_semantics_findings", "test_sim_unrunnable", "test_simulate_cli", "test_simulate_input_findings", "test_simulator", "test_speed_sentinel",
    "test_synergy_mechanisms", "test_synmech_findings", "test_tie_order", "test_tracking", "test_traces", "test_traces_findings", "test_train_bad_input", "test_train_step_hook",
    "test_zoo", "test_zoo_findings", "test_simulator_fixes", "test_profiling_fixes", "test_zoo_card_fixes",
    "test_weight_derived_activations",
    "test_public_traces",
    "test_card_step_bytes_bounds",
    "test_trace_summary",
    "test_public_traces_review2",
    "test_public_traces_review3",
    "test_hetero_sim_findings",
    # graph counts, committed data and memory/page measurements (no timing compared: a microbenchmark's seconds
    # are only checked to be positive)
    "test_code_pages", "test_cpu_memory_model", "test_gpu_launch_term", "test_kernel_time", "test_noise_floor",
    "test_peak_live", "test_recurrent_steps", "test_sensitivity",
})


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if item.path.stem in PARALLEL_SAFE_MODULES:
            item.add_marker(pytest.mark.parallel_safe)


def load_script(path: Path):
    """A script under ``profilers/`` or ``benchmarks/`` (not a package) imported as a module, by its file name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def python_in_subprocess(code: str, timeout: float) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter on this checkout's ``src`` (one OpenMP thread), for a check that could
    hang or exhaust memory: the timeout catches a hang, the child's exit code says how the check went."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def assert_zoo_refuses_in_subprocess(cases: list[tuple[str, dict]], *, match: str = "", timeout: float = 120,
                                     address_space_gib: int | None = None) -> None:
    """Each ``(family, parameters)`` of ``cases`` resolved in a fresh interpreter (:func:`python_in_subprocess`,
    for configurations that used to hang or exhaust memory) is refused with the zoo's UsageError, whose text holds
    ``match``; ``address_space_gib`` caps the child's address space."""
    code = ((f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({address_space_gib} << 30, "
             f"{address_space_gib} << 30))\n" if address_space_gib else "")
            + "from perfpredict.errors import UsageError\n"
            "from perfpredict.workload.zoo import get_family\n"
            f"for family, params in {cases!r}:\n"
            "    try:\n"
            "        get_family(family).resolve(params)\n"
            "    except UsageError as e:\n"
            f"        assert {match!r} in str(e), e\n"
            "    else:\n"
            "        raise AssertionError((family, params))\n")
    proc = python_in_subprocess(code, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-1500:]


def interrupt_after_first_row(argv: list[str], csv: Path, timeout: float = 60) -> tuple[int, str]:
    """Start ``argv``, send it a Ctrl-C (SIGINT) once ``csv`` holds a measured row, and return its exit code and
    stderr. A test run in the background may inherit SIGINT ignored; the command must see it as a user would."""
    import signal
    import time

    from perfpredict.dataset.collect import read_dataset

    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(read_dataset(csv) if csv.exists() else []) < 1:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


#: Short but real timing windows: enough iterations for a median and spread, quick on a 2-core CI box.
FAST_TIMING = TimingConfig(warmup_iters=1, warmup_s=0.05, min_iters=5, min_time_s=0.2, max_time_s=2.0)

TINY_MODEL = """
import torch
import torch.nn as nn

def build_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

def example_inputs(batch_size):
    return torch.randn(batch_size, 32)
"""


@pytest.fixture
def write_model(tmp_path):
    """Write a model file from source text; returns its path."""

    def _write(body: str, name: str = "model.py") -> Path:
        p = tmp_path / name
        p.write_text(textwrap.dedent(body))
        return p

    return _write


@pytest.fixture
def colocation_pairs(monkeypatch) -> list:
    """The (card A, card B) pairs ``Predictor.colocation`` is given during the test, appended as it runs (the real
    prediction answers): what a CLI command passed it, to be read."""
    from perfpredict import Predictor

    pairs: list = []
    real = Predictor.colocation

    def kept(self, a, b, **kw):
        pairs.append((a, b))
        return real(self, a, b, **kw)

    monkeypatch.setattr(Predictor, "colocation", kept)
    return pairs


@pytest.fixture
def run_cli(tmp_path):
    """Run the real ``perfpredict`` command in a subprocess, with MLflow pointed into tmp_path."""

    def _run(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300):
        e = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlruns.db", **(env or {})}
        return subprocess.run([sys.executable, "-m", "perfpredict", *map(str, args)], capture_output=True,
                              text=True, cwd=cwd or tmp_path, env=e, timeout=timeout)

    return _run


class RecordingMechanism(Mechanism):
    """Wraps a mechanism and records every decision for independent checks: ``log`` holds (time,
    allocations), ``waiting`` the jobs not running when it decided, ``queues`` the inner mechanism's
    ``last_queue`` (empty when it has none)."""

    def __init__(self, inner: Mechanism) -> None:
        super().__init__()
        self.inner = inner
        self.name, self.preemptive, self.round_based = inner.name, inner.preemptive, inner.round_based
        self.period_s = inner.period_s
        self.rigid, self.whole_gpus, self.resizes = inner.rigid, inner.whole_gpus, inner.resizes
        self.log: list[tuple[float, dict]] = []
        self.waiting: list[list] = []
        self.queues: list[list] = []

    def min_devices(self, job):
        return self.inner.min_devices(job)

    def allocate(self, ordered, cluster, running, now):
        self.inner._current = self._current
        out = self.inner.allocate(ordered, cluster, running, now)
        self.log.append((now, dict(out)))
        self.waiting.append([js for js in ordered if js.id not in running])
        self.queues.append(list(getattr(self.inner, "last_queue", [])))
        return out


def allocator_peak_of_step(opt) -> int:
    """The most bytes torch's allocator holds at once beyond its start during one real ``opt.step()``, from
    torch.profiler's memory events (what an optimizer step's temporaries take, measured)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        opt.step()
    live = peak = 0
    for e in sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def fused_adamw_on_cpu() -> bool:
    """Whether this torch builds ``AdamW(fused=True)`` over CPU tensors (torch 2.4 and later)."""
    import torch

    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], fused=True)
    except RuntimeError:
        return False
    return True
