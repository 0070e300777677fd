"""``perfpredict profile --compile``: the measured steps call ``torch.compile(model)``.

The model below raises in eager mode and runs only when dynamo traces it (``torch.compiler.is_compiling()`` is
a constant True while tracing), so a successful measurement proves the timed steps ran the compiled graph.
"""

from __future__ import annotations

import shutil

import pytest

from perfpredict.card import PerformanceCard

NEEDS_COMPILED = """
import torch, torch.nn as nn

class OnlyCompiled(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(24, 48)
        self.b = nn.Linear(48, 6)

    def forward(self, x):
        if not torch.compiler.is_compiling():
            raise RuntimeError("ran eagerly")
        return self.b(torch.relu(self.a(x)))

def build_model():
    return OnlyCompiled()

def example_inputs(batch_size):
    return torch.randn(batch_size, 24)
"""

FAST = ("--min-time", "0.2", "--max-time", "1", "--no-features", "--no-mlflow")
has_cxx = any(shutil.which(c) for c in ("g++", "c++", "clang++"))


@pytest.mark.skipif(not has_cxx, reason="torch.compile's CPU backend needs a C++ compiler")
def test_compiled_profile_measures_the_compiled_graph(write_model, run_cli, tmp_path):
    path = write_model(NEEDS_COMPILED)
    r = run_cli("profile", path, "-b", "4", "--compile", *FAST, "--out", tmp_path / "c",
                env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert r.returncode == 0, r.stderr + r.stdout
    assert "train · compiled · cpu" in r.stdout
    card = PerformanceCard.load(tmp_path / "c" / "card.json")
    assert card.run.compiled and [p.status for p in card.throughput] == ["ok"]
    assert any(n.startswith("compiled:") for n in card.notes)
    # inductor compiled at the first step: it is start-up, far above a 24x48 MLP's step time
    first_extra = card.throughput[0].startup.first_iter_extra_s
    assert first_extra > 20 * card.throughput[0].iter_time_s
    eager = run_cli("profile", path, "-b", "4", *FAST, "--out", tmp_path / "e")
    assert eager.returncode != 0 and "forward: RuntimeError: ran eagerly" in eager.stderr


def test_a_compiler_failure_is_one_readable_error_at_step_compile(write_model, run_cli, tmp_path):
    path = write_model(NEEDS_COMPILED)
    r = run_cli("profile", path, "-b", "4,8", "--compile", *FAST, "--out", tmp_path / "c",
                env={"CXX": str(tmp_path / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")})
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert ": compile: " in r.stderr and "compiler" in r.stderr.lower()
    card = PerformanceCard.load(tmp_path / "c" / "card.json")  # the card is kept, with the failure recorded
    assert card.run.compiled and card.errors and card.errors[0].step == "compile"


def test_a_model_bug_found_while_compiling_is_the_models_error_at_its_step(write_model, run_cli, tmp_path):
    """Dynamo finds a shape mismatch while tracing and raises a TorchRuntimeError about fake tensors: the
    report names the model's RuntimeError at step forward (as without --compile), not a compiler failure, and
    torch's logged traceback stays out of the output. Tracing fails before inductor: no C++ compiler needed."""
    path = write_model("""
import torch, torch.nn as nn

def build_model():
    return nn.Sequential(nn.Linear(8, 4), nn.Linear(5, 2))  # 4 outputs into 5 inputs

def example_inputs(batch_size):
    return torch.randn(batch_size, 8)
""")
    r = run_cli("profile", path, "-b", "4", "--compile", *FAST, "--out", tmp_path / "c")
    assert r.returncode != 0 and "Traceback" not in r.stderr + r.stdout
    assert ": forward: RuntimeError: " in r.stderr and "found by torch.compile" in r.stderr
    card = PerformanceCard.load(tmp_path / "c" / "card.json")
    assert card.errors[0].step == "forward" and "must have same reduction dim" in card.errors[0].message


def test_wrapped_allocation_failures_and_worker_errors_are_read_through():
    import torch

    from perfpredict.profile.failure import failure_text, unwrapped_line
    from perfpredict.profile.memory import is_oom_error

    try:
        try:
            raise MemoryError("std::bad_alloc")
        except MemoryError as inner:
            raise RuntimeError("backend='inductor' raised:") from inner
    except RuntimeError as e:
        assert is_oom_error(e)  # the cause is the allocation failure
    assert not is_oom_error(RuntimeError("shape mismatch"))
    assert unwrapped_line(RuntimeError("backend='inductor' raised:\n  LoweringException: x")) \
        == "backend='inductor' raised: LoweringException: x"
    assert unwrapped_line(RuntimeError("\x1b[96mcoloured\x1b[0m")) == "coloured"
    # a DataLoader worker's error: the reason is at the end of the text it re-raises
    loader = torch.utils.data.DataLoader([None] * 4, batch_size=2, num_workers=1)
    try:
        next(iter(loader))
    except TypeError as e:
        text = failure_text(e)
    assert text.startswith("TypeError: default_collate") and "NoneType" in text and "TypeError: TypeError" not in text
