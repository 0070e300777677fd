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
