"""The experiments' ``--fast`` modes run end to end (as CI-sized versions of the tables in docs/simulator.md) and what they
write says what their tables say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run_fast(script: str, out: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    r = subprocess.run([sys.executable, str(REPO / "experiments" / script), "--fast", "--out", str(out), *extra],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout, json.loads((out / "results.json").read_text())


def test_synergy_jct_fast(tmp_path):
    stdout, res = _run_fast("synergy_jct.py", tmp_path, "--workers", "2")  # (map_runs gives the serial rows)
    assert "15 simulations, in 2 worker processes" in stdout
    rows = res["rows"]
    assert {r["table"] for r in rows} == {"fifo-single", "split-50-0-50", "srtf-multi", "las-multi", "ratio"}
    lo, hi = res["plan"]["window"]
    # every run measured exactly its window of arrivals and stopped once all of them had finished
    assert all(r["measured"] == hi - lo and r["window_unfinished"] == 0 for r in rows)

    fifo = {(r["load"], r["mechanism"]): r for r in rows if r["table"] == "fifo-single"}
    assert {m for _, m in fifo} == {"proportional", "greedy", "tune"}
    saturated = max(load for load, _ in fifo)
    prop, tune = fifo[(saturated, "proportional")], fifo[(saturated, "tune")]
    assert prop["offered_load"] >= 1.0
    assert tune["avg_jct_h"] <= prop["avg_jct_h"]
    # LP1 is an upper bound on any allocation's total rate: Tune's sampled rounds sit below it, and close
    assert tune["bound_samples"] > 0
    assert 0.8 <= tune["bound_ratio_min"] <= tune["bound_ratio_mean"] <= 1 + 1e-9

    split = {r["mechanism"]: r for r in rows if r["table"] == "split-50-0-50"}
    assert split["greedy"]["avg_jct_h"] > split["tune"]["avg_jct_h"]  # greedy strands GPUs when all are sensitive

    ratio = {r["cpus_per_gpu"]: r for r in rows if r["table"] == "ratio" and r["mechanism"] == "proportional"}
    assert sorted(ratio) == [3.0, 6.0]
    assert ratio[6.0]["avg_jct_h"] <= ratio[3.0]["avg_jct_h"]  # more CPUs per GPU only help the baseline

    assert set(res["checks"]) == {"gain", "bound", "never_worse", "greedy", "ratio"}
    for check in res["checks"].values():
        assert f"{'PASS' if check['ok'] else 'FAIL'}: {check['text']}" in stdout
    assert "| load (jobs/h) | offered load ρ | proportional | greedy | tune |" in stdout
    # --fast's 450 jobs do not fill 128 GPUs: the loads change nothing in table 1, and the run says so
    calm = all(r["avg_queue_h"] < 600 / 3600 for r in fifo.values())
    assert ("does not fill the cluster" in stdout) == calm == bool(res["notes"])
    for png in ("fifo-single_jct_vs_load", "split-50-0-50_jct_vs_load", "srtf_las_multi_jct_vs_load", "cpu_gpu_ratio"):
        assert (tmp_path / f"{png}.png").stat().st_size > 0


def test_moldable_flow_time_fast(tmp_path):
    stdout, res = _run_fast("moldable_flow_time.py", tmp_path, "--tasks", "400",  # 600 by default: ~1 min here
                            "--workers", "2")
    assert "10 simulations, in 2 worker processes" in stdout
    rows = res["rows"]
    sizes = sorted({r["gpus"] for r in rows})
    assert len(sizes) == 2 and len(rows) == 5 * len(sizes)
    assert all(r["unfinished"] == 0 for r in rows)
    # rigid FCFS and moldable never preempt; malleable does
    assert all(r["preemptions"] == 0 for r in rows if r["schedule"] in ("rigid-fcfs", "moldable-equipartition"))
    assert any(r["preemptions"] > 0 for r in rows if r["schedule"].startswith("malleable"))
    for s in res["summary"]:
        # malleable without overhead beats both rigid FCFS and moldable (it can grow tasks again later)...
        assert s["malleable_reduction"] > max(0.0, s["moldable_reduction"])
        # ...and a preemption overhead eats into that gain
        assert s["malleable_reduction"] > s["malleable_150_reduction"] > s["malleable_300_reduction"]
    assert "Moldable EQ flow-time reduction vs Rigid FCFS" in stdout
    assert (tmp_path / "flow_time_vs_gpus.png").stat().st_size > 0


def test_andreas_cost_fast(tmp_path):
    stdout, res = _run_fast("andreas_cost.py", tmp_path, "--nodes", "10")  # N = 10, 16 by default: ~30 s here
    rows = res["rows"]
    assert {(r["case"], r["method"]) for r in rows} == {(c, m) for c in (1, 2) for m in ("FIFO", "EDF", "PS", "RG")}
    assert all(r["unfinished"] == 0 and r["jobs"] == 100 for r in rows)
    # the first-principle methods never preempt or move a job; RG does, and pays for it in redone epochs
    assert all(r["preemptions"] == 0 and r["restarts"] == 0 and r["lost_work_h"] == 0 for r in rows if r["method"] != "RG")
    rg = [r for r in rows if r["method"] == "RG"]
    assert all(r["restarts"] + r["preemptions"] > 0 and r["lost_work_h"] > 0 for r in rg)
    for r in rows:
        assert r["total_cost"] == pytest.approx(r["energy_cost"] + r["tardiness_cost"])
    # the MILP optimum never exceeds RG's f_OBJ, and RG is never worse than its own greedy
    assert res["gap"] and all(x["optimal"] and x["gap"] >= 0 and x["f_rg"] <= x["f_greedy"] + 1e-9 for x in res["gap"])
    assert len(res["timing"]["snapshots"]) == 16 and all(s["jobs"] > 0 for s in res["timing"]["snapshots"])
    assert next(v for v in res["validation"] if v["method"] == "RG")["n_late"] == 0
    assert set(res["checks"]) == {"cost_case1", "cost_case2", "time", "gap"}
    for check in res["checks"].values():
        assert f"{'PASS' if check['ok'] else 'FAIL'}: {check['text']}" in stdout
    assert "| case | N | J | FIFO | EDF | PS | RG |" in stdout
    assert (tmp_path / "cost_vs_nodes.png").stat().st_size > 0


@pytest.mark.parametrize("script, args, says", [
    ("horus_makespan.py", ["--caps", "3"], "--caps must include 2"),
    ("synergy_jct.py", ["--mechanisms", "greedy"], "--mechanisms must include proportional and tune"),
    ("genie_qos.py", ["--hours", "0.2"], "--hours must be at least 1"),
    ("moldable_flow_time.py", ["--tasks", "1"], "--tasks must be at least 2"),
    ("genie_qos.py", ["--out", "/proc/perfpredict-x"], "does not take new files"),
    ("horus_makespan.py", ["--stress-mem", "0.5"], "holds none of the jobs"),
])
def test_arguments_that_crashed_after_the_runs_are_refused_before_them(tmp_path, script, args, says):
    """Each of these ran every simulation and then ended in a raw traceback (KeyError, TypeError, ZeroDivision,
    a log-scaled empty plot, a SimulationError) with nothing written."""
    out = [] if "--out" in args else ["--out", str(tmp_path / "o")]
    r = subprocess.run([sys.executable, str(REPO / "experiments" / script), "--fast", *out, *args],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "o" / "results.json").exists()


def test_a_mechanism_for_another_seeds_traces_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sim_speed.py"), "--jobs", "50", "--mechanism",
                        "swaf"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and "GENIE task model" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_andreas_without_gap_instances_runs_and_says_so(tmp_path):
    stdout, res = _run_fast("andreas_cost.py", tmp_path / "a", "--nodes", "2", "--gap-instances", "0")
    assert "not measured (--gap-instances 0)" in stdout
    assert res["gap"] == [] and "gap" not in res["checks"]


@pytest.mark.parametrize("fraction, says", [
    ("opennmt=0.5", "opennmt: it never shares a GPU: it needs 10.8 of the 12 GB"),
    ("linear=0.5", "linear: the trace has no tasks of it"),
])
def test_a_share_fraction_that_changes_nothing_is_refused(tmp_path, fraction, says):
    """`moldable_flow_time.py --share-fraction opennmt=0.5` ran the sweep and wrote rows identical to the default's
    (OpenNMT holds 90% of a 12 GB GPU, so it never shares one), printing a speed-up for sharing as if it mattered."""
    r = subprocess.run([sys.executable, str(REPO / "experiments" / "moldable_flow_time.py"), "--fast", "--out",
                        str(tmp_path / "o"), "--share-fraction", fraction], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and "would change nothing" in r.stderr and says in r.stderr, r.stderr[-2000:]
    assert "give one for mcnn" in r.stderr and not (tmp_path / "o" / "results.json").exists()
