"""Findings of the benchmark-script scan: a figure computed against the wrong order, and bad inputs answered with
a traceback or a misleading message instead of one clear line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, load_script


def _replay_worst_error(tmp_path, capsys, cpu_values, curve) -> str:
    mod = load_script(REPO / "benchmarks" / "sensitivity_search.py")
    path = tmp_path / "sweeps.json"
    path.write_text(json.dumps({"cpu_values": cpu_values, "models": [{"model": "m", "exhaustive": curve}]}))
    mod.replay_saved(str(path), 0.1)
    return capsys.readouterr().out


def test_replay_scores_a_file_whose_cpu_values_are_not_sorted_against_the_same_cpu_counts(tmp_path, capsys):
    # the same sweep written in two orders: the replayed search's error must not depend on the order
    ascending = _replay_worst_error(tmp_path, capsys, [1, 2, 3, 4, 5, 6, 7, 8],
                                    [10, 20, 30, 40, 40, 40, 40, 40])
    descending = _replay_worst_error(tmp_path, capsys, [8, 7, 6, 5, 4, 3, 2, 1],
                                     [40, 40, 40, 40, 40, 30, 20, 10])
    assert "worst error 0.0%" in ascending
    assert "worst error 0.0%" in descending  # was 300.0%: sorted curve scored against the file's order


@pytest.mark.parametrize("cpu_values", [[1, 1, 2], [0, 1, 2], [True, 2, 3]])
def test_a_replay_file_with_bad_cpu_counts_is_refused_in_one_line(tmp_path, cpu_values):
    mod = load_script(REPO / "benchmarks" / "sensitivity_search.py")
    path = tmp_path / "sweeps.json"
    path.write_text(json.dumps({"cpu_values": cpu_values, "models": [{"exhaustive": [1.0, 2.0, 3.0]}]}))
    with pytest.raises(ValueError, match="does not hold curves saved by --json"):
        mod.load_saved(str(path))  # was accepted, then a traceback from the search's own check


def test_compare_backends_answers_a_bad_trace_in_one_line():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "compare_backends.py"), "--trace", "nosuch"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert "trace nosuch does not exist" in proc.stderr


def test_memory_past_trained_batches_names_a_file_that_is_not_a_far_batch_file():
    mod = load_script(REPO / "benchmarks" / "memory_past_trained_batches.py")
    with pytest.raises(SystemExit, match="not a far-batch file") as e:
        mod.coverage(REPO / "datasets" / "cpu_xeon_2vcpu.csv", predictor=None)
    assert "'cpu_'" not in str(e.value)  # was: "no shipped model set 'cpu_'", the name cut by 10 characters


@pytest.mark.parametrize("sets, needle", [
    ("cpu_xeon_2vcpu,", "expected comma-separated"),  # was "unknown model set(s) " with an empty name, exit 1
    ("cpu_xeon_2vcpu,cpu_xeon_2vcpu", "given twice"),  # was run twice
    ("nosuch", "unknown model set(s) nosuch"),
])
def test_bare_feature_vectors_refuses_a_bad_set_list_in_one_usage_line(sets, needle):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bare_feature_vectors.py"), f"--sets={sets}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
