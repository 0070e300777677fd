"""The benchmark scripts are commands users type: a bad value ends in argparse's one-line error and exit 2
before any work starts, never a traceback (each case here returns in about a second)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


@pytest.mark.parametrize(("script", "args", "says"), [
    ("sim_speed.py", ["--policy", "fifoo"], "unknown policy 'fifoo'"),
    ("sim_speed.py", ["--mechanism", "tunee"], "unknown mechanism 'tunee'"),
    ("sim_speed.py", ["--jobs=-1"], "argument --jobs"),
    ("sim_speed.py", ["--servers", "0"], "argument --servers"),
    ("synergy_decision_time.py", ["--rounds", "0"], "argument --rounds"),
    ("synergy_decision_time.py", ["--time-limit=-1"], "argument --time-limit"),
    ("glibc_heap.py", ["--batches", "16,x"], "argument --batches"),
    ("glibc_heap.py", ["--family", "nosuch"], "unknown zoo family 'nosuch'"),
    ("unseen_recurrent_models.py", ["--models", "/nonexistent_dir"], "is not a folder"),
    ("sensitivity_search.py", ["--replay", "missing.json"], "cannot read missing.json"),
    ("rate_model_accuracy.py", ["--families", "nosuch"], "unknown zoo family 'nosuch'"),
    ("rate_model_accuracy.py", ["--json", "/nonexistent_dir/out.json"], "does not exist"),
    ("cache_model_accuracy.py", ["--fractions", "2"], "argument --fractions"),
    ("onnx_path_memory.py", ["--only", "nosuch"], "no dataset 'nosuch'; choose from"),
    ("noise_floor.py", ["--bogus"], "unrecognized arguments"),
    ("kernel_time_accuracy.py", ["--bogus"], "unrecognized arguments"),
])
def test_a_bad_value_is_one_line_and_exit_2(script, args, says):
    r = _run(script, *args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert says in r.stderr.strip().splitlines()[-1]


def test_a_malformed_replay_file_is_refused(tmp_path):
    bad = tmp_path / "sweeps.json"
    bad.write_text('{"cpu_values": [1, 2], "models": [{"model": "x", "exhaustive": [1]}]}')
    r = _run("sensitivity_search.py", "--replay", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "does not hold curves saved by --json" in r.stderr


def test_help_describes_the_script_in_whole_sentences():
    r = _run("sim_speed.py", "--help")
    assert r.returncode == 0
    assert "100 000 jobs on 512 GPUs in < 60 s)." in " ".join(r.stdout.split())
