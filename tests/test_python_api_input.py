"""Bad arguments to the Python API (found by an audit): one error naming the argument, found before anything
runs, never a NaN or negative number, a job that silently vanishes, or a deep TypeError."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfpredict import Predictor, fit_rate_model
from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.fit.rate import RateModel
from perfpredict.profile.timing import TimingConfig
from perfpredict.sched import ClusterSpec, make_policy
from perfpredict.sched.job import Job
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sim import SimConfig, simulate
from perfpredict.sim.run import load_perf_models
from perfpredict.sim.traces import read_csv_trace

REPO = Path(__file__).resolve().parents[1]
F = dict(forward_macs_per_sample=930816, param_count=932362, param_bytes=3729448, activation_bytes_per_sample=15464,
         num_nodes=7)


@pytest.mark.parametrize("kw", [dict(arrival=math.inf), dict(work=math.nan), dict(gpus=math.inf), dict(id=None),
                                dict(epochs=2.5), dict(min_gpus=-1.0), dict(deadline=math.nan)])
def test_a_job_with_a_non_finite_or_wrong_field_is_refused(kw):
    with pytest.raises(ValueError):
        Job(**{**dict(id="a", arrival=0.0, gpus=1, work=100.0, model="resnet18"), **kw})


@pytest.mark.parametrize("kw", [dict(max_time_s=-1), dict(restart_overhead_s=-100), dict(start_overhead_s=math.nan),
                                dict(round_s=0), dict(round_s=math.nan), dict(mode="bogus"), dict(oversized="x"),
                                dict(stop_after="12"), dict(period_s=0)])
def test_sim_config_refuses_settings_that_would_lose_or_misplace_jobs(kw):
    with pytest.raises(ValueError, match="SimConfig"):
        SimConfig(**kw)


def test_valid_simulation_still_runs_with_a_checked_config():
    jobs = [Job(id=str(i), arrival=10.0 * i, gpus=1, work=100.0, model="resnet18") for i in range(3)]
    r = simulate(jobs, ClusterSpec.homogeneous(1, gpus=2), make_policy("fifo"), make_mechanism("tune"),
                 load_perf_models(), SimConfig(restart_overhead_s=30.0, max_time_s=1e6))
    assert len(r.finished) == 3 and all(js.finish > js.job.arrival for js in r.finished)


@pytest.fixture(scope="module")
def pred():
    return Predictor.load(REPO / "trained_models")


@pytest.mark.parametrize("kw,needle", [(dict(batch_size=0), "batch sizes"), (dict(batch_sizes=[]), "batch sizes"),
                                       (dict(batch_sizes="16"), "not the string"), (dict(batch_size=2.7), "whole"),
                                       (dict(batch_size=8, batch_sizes=[16]), "not both")])
def test_predictor_refuses_batch_sizes_it_would_have_changed(pred, kw, needle):
    with pytest.raises(UsageError, match=needle):
        pred.predict(features=F, **kw)


def test_a_predicted_card_has_one_point_per_batch_size_in_order(pred):
    card = pred.predict("zoo:mlp", batch_sizes=[16, 8, 16], device_type="cpu")
    assert [p.batch_size for p in card.throughput] == [8, 16]
    from perfpredict.profile import ProfileSettings

    assert ProfileSettings(batch_sizes=(16, 8, 8)).batch_sizes == (8, 16)  # the Python API's settings, as the CLI
    with pytest.raises(UsageError, match="batch_sizes must be positive"):
        ProfileSettings(batch_sizes=(8, 0))


def test_predictor_converts_validated_features_and_checks_colocation_arguments(pred):
    a = pred.predict(features={**F, "param_bytes": "3729448"}, batch_size=16)
    b = pred.predict(features=F, batch_size=16)
    assert a.prediction.points[0].iter_time_s == pytest.approx(b.prediction.points[0].iter_time_s)
    with pytest.raises(UsageError, match="PerformanceCards"):
        pred.colocation(a, "card.json")
    with pytest.raises(UsageError, match="one batch size"):
        pred.colocation(a, a, batch_sizes=(16,))


def test_rate_model_refuses_impossible_cards_and_arguments():
    good = fit_rate_model([8, 16], [400.0, 600.0])
    rc = good.to_card()
    rc.candidates[0].coefficients["alpha"] = -1.0
    with pytest.raises(PerfPredictError, match="non-positive"):
        RateModel.from_card(rc)
    for bad in (math.nan, None, 0, -8):
        with pytest.raises(ValueError, match="batch size"):
            good.iter_time(bad)
    with pytest.raises(ValueError, match="nu_s"):
        good.latency(10, 32, nu_s=-100)
    with pytest.raises(ValueError, match="iterations"):
        good.latency(math.nan, 32)


def test_profile_checks_batch_sizes_and_timing_before_running(tmp_path):
    import perfpredict

    ex = str(REPO / "examples" / "minimal_mlp.py")
    for kw, needle in ((dict(batch_sizes=[]), "positive"), (dict(batch_sizes=[2.5]), "whole"),
                       (dict(batch_sizes=2), "a list"), (dict(batch_sizes=[2], timing={}), "TimingConfig"),
                       (dict(batch_sizes=[2], memory_limit_bytes="1G"), "memory_limit_bytes")):
        with pytest.raises(UsageError, match=needle):
            perfpredict.profile(ex, out_dir=tmp_path / "o", **kw)
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="min_time_s"):
        TimingConfig(min_time_s=math.nan)


def test_a_damaged_model_set_is_left_out_and_named_and_the_others_still_predict(tmp_path):
    """An edited metadata.json or a missing booster in one set used to stop every command that loads the models
    with an internal error naming no set."""
    import shutil

    for name in ("cpu_xeon_2vcpu", "cuda_h200"):
        shutil.copytree(REPO / "trained_models" / name, tmp_path / name)
    (tmp_path / "cuda_h200" / "iter_time.xgb.json").unlink()
    pred = Predictor.load(tmp_path)
    assert list(pred.sets) == ["cpu_xeon_2vcpu"] and "iter_time.xgb.json" in pred.unusable_sets["cuda_h200"]
    assert pred.predict("zoo:mlp", batch_size=8, device_type="cpu_xeon_2vcpu").throughput[0].iter_time_s > 0
    with pytest.raises(UsageError, match=r"model set 'cuda_h200' could not be loaded .*train --only cuda_h200"):
        pred.predict("zoo:mlp", batch_size=8, device_type="cuda_h200")
    with pytest.raises(UsageError, match="could not be loaded: .*cuda_h200"):
        pred.predict("zoo:mlp", batch_size=8, device_type="cuda")
    (tmp_path / "cpu_xeon_2vcpu" / "metadata.json").write_text("{bad")
    with pytest.raises(PerfPredictError, match="no model set here could be loaded"):
        Predictor.load(tmp_path)


def test_card_save_into_a_directory_is_refused_without_a_stray_file(pred, tmp_path):
    card = pred.predict(features=F, batch_size=16)
    (tmp_path / "d").mkdir()
    with pytest.raises(PerfPredictError, match="is a directory"):
        card.save(tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_a_csv_trace_with_a_byte_order_mark_reads(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes("\ufeffid,arrival_s,gpus,work_s,model\n0,0,1,100,resnet18\n".encode("utf-8"))
    assert [j.id for j in read_csv_trace(p)] == ["0"]



def test_nan_scalars_sub_one_batch_sizes_and_a_string_window_are_refused():
    from perfpredict.fit import sensitivity_matrix
    from perfpredict.sim.run import run_simulation

    with pytest.raises(ValueError, match="dataset_bytes"):
        sensitivity_matrix([1, 2], [10, 20], [1e9], math.nan, 1e8, 1e5)
    with pytest.raises(ValueError, match="storage_bytes_per_s"):
        sensitivity_matrix([1, 2], [10, 20], [1e9], 1e10, math.nan, 1e5)
    with pytest.raises(PerfPredictError, match=">= 1"):
        fit_rate_model([0.5, 0.7], [1.0, 2.0])
    with pytest.raises(UsageError, match="steady"):
        run_simulation("synergy:n=3", "1x8", steady="1:2")


# -- profile() from a script without the main guard ------------------------------------------------------
def _run_script(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(body)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_profile_at_a_scripts_top_level_without_the_guard_is_refused_before_any_process_starts(tmp_path):
    """The measuring processes import the script again: unguarded, Python's bootstrapping RuntimeError came from
    each child and the parent only said the process 'died before reporting'."""
    proc = _run_script(tmp_path, "from perfpredict import profile\n\n"
                                 "out = profile('zoo:mlp', batch_sizes=[4], device='cpu', out_dir='o')\n")
    assert proc.returncode != 0
    assert 'without `if __name__ == "__main__":`' in proc.stderr and "(line 3)" in proc.stderr, proc.stderr[-2000:]
    assert "bootstrapping phase" not in proc.stderr and not (tmp_path / "o").exists()


def test_the_guard_check_follows_calls_and_accepts_any_spelling_of_the_guard(tmp_path):
    body = ("from perfpredict.profile.main_guard import check_main_guard\n"
            "from perfpredict.errors import UsageError\n\n"
            "def main():\n    check_main_guard()\n\n"
            "if '__main__' == __name__:\n    main()\n    print('guarded ok')\n\n"
            "try:\n    main()\nexcept UsageError as e:\n    print('refused', e)\n")
    proc = _run_script(tmp_path, body)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "guarded ok" in proc.stdout and "refused" in proc.stdout and "(line 12)" in proc.stdout, proc.stdout


def test_run_simulation_takes_a_cluster_as_a_dict_like_its_json_file():
    from perfpredict.sim.run import run_simulation

    spec = {"name": "two", "servers": [{"gpus": 4, "cpus": 16, "count": 2}]}
    run = run_simulation("synergy:n=4,seed=2", spec)
    assert run.result.cluster.total_gpus == 8 and run.params["cluster"] == "two" and len(run.result.finished) == 4
    with pytest.raises(UsageError, match="cluster dict: server field gpus"):
        run_simulation("synergy:n=4", {"servers": [{"gpus": "x"}]})
    with pytest.raises(UsageError, match="got int"):
        run_simulation("synergy:n=4", 16)


def test_predict_from_features_names_an_unknown_key(pred):
    f = {"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5, "activation_bytes_per_sample": 1e4,
         "num_nodes": 5, "op_count": {"Gemm": 2}}
    default = Predictor()  # what a first try types: the default models folder, as Predictor.load()
    assert default.device_types == pred.device_types and default.unusable_calibrations == pred.unusable_calibrations
    card = default.predict(features=f, batch_size=8, device_type="cpu")
    assert "unknown feature key(s) ignored: 'op_count' (did you mean 'op_counts'?)" in card.prediction.notes


# -- scheduler API misuse (audit of the simulator's Python API) -------------------------------------------
def test_values_that_used_to_be_clamped_or_misread_are_refused():
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sim.horus_workload import horus_trace

    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="max_it"):
            make_mechanism("andreas", max_it=bad)  # was clamped to 1 and printed as a valid run
    with pytest.raises(ValueError, match="interarrival"):
        horus_trace("small", interarrival_s=-5)  # was read as 'all jobs at once'
    assert make_mechanism("swaf:backfill=no").backfill is False  # was the truthy string "no"
    with pytest.raises(ValueError, match="foo"):
        make_mechanism("tune", foo=1)
    with pytest.raises(ValueError, match="named by a string"):
        make_policy(None)


def test_nan_resources_and_bad_speedups_are_refused_with_the_name():
    from perfpredict.fit.speedup import SpeedupCurve
    from perfpredict.sched import PerfModel
    from perfpredict.sched.cluster import Share

    with pytest.raises(ValueError, match="finite"):
        Share(0, 1, float("nan"), 62.5, (0,))
    with pytest.raises(ValueError, match="finite"):
        Share(0, 1, 3, float("inf"), (0,))
    with pytest.raises(ValueError, match="m: speedup must be a function"):
        PerfModel("m", speedup={1: 1.0})
    with pytest.raises(ValueError, match=r"m: speedup\(1\)"):
        PerfModel("m", speedup=lambda p: 0.0)
    with pytest.raises(ValueError, match=r"m: speedup\(1\)"):
        PerfModel("m", speedup=lambda p: -1.0)
    with pytest.raises(ValueError, match="no points"):
        SpeedupCurve.from_dict({})


def test_a_mechanism_returning_the_wrong_type_is_named():
    from perfpredict.sched import PerfModel
    from perfpredict.sched.base import Mechanism
    from perfpredict.sched.cluster import Share
    from perfpredict.sim.simulator import SimulationError, simulate

    class Wrong(Mechanism):
        name = "wrong"

        def __init__(self, out):
            super().__init__()
            self.out = out

        def allocate(self, ordered, cluster, running, now):
            return self.out(ordered)

    jobs = [Job(id="a", arrival=0, gpus=1, work=60, model="m")]
    for out, words in ((lambda o: None, "returned NoneType"), (lambda o: [], "returned list"),
                       (lambda o: {o[0].id: Share(0, 1, 3, 62.5, (0,))}, "gave job 'a' a Share")):
        with pytest.raises(SimulationError, match=words):
            simulate(jobs, ClusterSpec.homogeneous(1), make_policy("fifo"), Wrong(out), {"m": PerfModel("m")})


def test_run_simulation_checks_out_dir_before_simulating(tmp_path):
    from perfpredict.sim.run import run_simulation

    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        run_simulation("synergy:n=3", "1x8", out_dir=f)


def test_the_guard_check_lets_python_m_package_through(tmp_path):
    """multiprocessing never imports a package's __main__ again, so `python -m pkg` needs no guard."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("from perfpredict.profile.main_guard import check_main_guard\n"
                                     "check_main_guard()\nprint('not refused')\n")
    proc = subprocess.run([sys.executable, "-m", "mypkg"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "not refused" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("spec, words", [
    ("tetris:threshold=abc", "threshold=abc must be a finite number >= 0"),
    ("tetris:policy_weight=nan", "policy_weight=nan must be a finite number"),
    ("horus:k=inf", "k=inf must be a whole number"),
    ("horus-f:beta=2.5", "beta=2.5 must be a whole number"),  # HorusF passes **kwargs on to Horus
    ("obp:max_colocated=-1", "max_colocated=-1 must be a whole number >= 0"),
    ("andreas:period_s=soon", "period_s=soon must be a finite number"),
    ("swaf:backfill=2", "backfill=2 must be true or false"),
    ("horus:bogus=1", "has no option 'bogus'; its options: k, beta"),
])
def test_mechanism_options_are_checked_against_the_constructor(spec, words):
    """Found by fuzzing: these reached the mechanism and failed inside a decision (TypeError, AssertionError,
    OverflowError) or were silently taken."""
    from perfpredict.sched.mechanisms import make_mechanism

    with pytest.raises(ValueError, match=re.escape(words)):
        make_mechanism(spec)
    # and the forms that are meant to work still do
    assert make_mechanism("horus:overcommit=1.5").__class__.__name__ == "Horus"
    assert make_mechanism("horus:overcommit=breakeven,k=3").k == 3


def test_fuzzed_api_arguments_are_usage_errors(tmp_path):
    """Found by fuzzing: each one used to escape as a TypeError/AttributeError/ValueError from deep inside."""
    from perfpredict.card import PerformanceCard
    from perfpredict.errors import PerfPredictError
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sim.run import run_simulation

    with pytest.raises(UsageError, match="steady must be a"):
        run_simulation("synergy:n=5", "1x8", steady=(1.5, 3))
    with pytest.raises(UsageError, match="cards must be"):
        run_simulation("synergy:n=5", "1x8", cards=5)
    with pytest.raises(ValueError, match="named by a string"):
        make_mechanism(None)
    with pytest.raises(PerfPredictError, match="not a readable card"):
        PerformanceCard.from_json('{"schema_version": "1.0", "x": ' + "9" * 5000 + "}")
    assert run_simulation("synergy:n=5", "1x8", steady=(1.0, 3)).metrics.n_measured == 2  # whole floats are fine


def test_run_simulation_takes_a_policy_or_mechanism_of_your_own():
    """docs/simulator.md's 'Your own scheduler': a Policy subclass ran through simulate() but run_simulation()
    refused it ('a policy is named by a string'), so it had no jobs.csv, metrics.json or MLflow run."""
    from perfpredict.sched.base import Policy
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sim import run_simulation

    class LargestFirst(Policy):
        name = "largest-first"

        def key(self, js, now, cluster, n_active):
            return -js.job.gpus

    trace = "synergy:n=60,load=6,multi=1"
    mine = run_simulation(trace, "2x8", LargestFirst(), "tune")
    fifo = run_simulation(trace, "2x8", "fifo", make_mechanism("tune"))
    assert mine.params["policy"] == "largest-first" and len(mine.result.finished) == 60
    starts = {js.id: js.first_start for js in mine.result.finished}
    assert starts != {js.id: js.first_start for js in fifo.result.finished}  # the order it set is the one used
    with pytest.raises(UsageError, match="mechanism_kwargs"):
        run_simulation(trace, "2x8", "fifo", make_mechanism("tune"), mechanism_kwargs={"x": 1})
