"""MLflow tracking as a team queries it (perfpredict.tracking): every run says which perfpredict made it, a
prediction is logged as one, a stalled simulation ends FAILED, runs nest inside a caller's own run, and an
unusable local store or artifact location is refused at once, before any work."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfpredict import tracking
from perfpredict.sched import ClusterSpec, Job, PerfModel
from tests.conftest import REPO


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # artifacts go under the working directory
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _runs(client, experiment):
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def test_a_predicted_card_is_logged_as_a_prediction_with_the_common_tags(store):
    """log_profile() of a Predictor card raised MlflowException on a None metric and left a FAILED run tagged as
    a measured profile."""
    import perfpredict
    from perfpredict import Predictor

    card = Predictor.load().predict("zoo:mlp", batch_sizes=[8, 16], device_type="cuda_h100")
    run_id = tracking.log_profile(card, experiment="preds")
    run = store.get_run(run_id)
    assert run.info.status == "FINISHED"
    tags, params = run.data.tags, run.data.params
    assert tags["perfpredict.kind"] == "prediction" and tags["perfpredict.model_set"] == "cuda_h100"
    assert tags["perfpredict.version"] == perfpredict.__version__ and tags["perfpredict.interrupted"] == "false"
    assert params["model_family"] == "mlp" and params["model_set"] == "cuda_h100" and params["compiled"] == "false"
    hist = store.get_metric_history(run_id, "predicted_iter_time_s")
    assert sorted(m.step for m in hist) == [8, 16]
    assert {m.step: m.value for m in hist} == {p.batch_size: pytest.approx(p.iter_time_s) for p in card.prediction.points}
    if (REPO / ".git").exists():  # a fresh clone (CI) is a checkout too
        assert tags["mlflow.source.git.commit"] == tags["perfpredict.git_commit"].removesuffix("-dirty")


def test_a_stalled_simulation_ends_failed_and_runs_nest_in_a_callers_run(store):
    """simulate exits 1 on a stall, but its run ended FINISHED; and inside a user's own run every tracking call
    failed with 'Run ... is already active'."""
    from dataclasses import dataclass

    import mlflow

    from perfpredict.sim.run import run_simulation

    @dataclass(frozen=True)
    class Stuck(PerfModel):
        def rate(self, alloc, ref_gpus, cluster=None) -> float:  # noqa: ARG002
            return 0.0

    jobs = [Job(id=f"j{i}", arrival=0.0, gpus=1, work=600.0, model="m") for i in range(2)]
    run = run_simulation(jobs, ClusterSpec.homogeneous(1, gpus=4), cards={"m": Stuck(name="m")})
    assert run.result.stall
    mlflow.set_tracking_uri(tracking.tracking_uri())
    mlflow.set_experiment("mine")
    with mlflow.start_run() as outer:
        run_id = tracking.log_simulation(run, experiment="mine")
    inner = store.get_run(run_id)
    assert inner.info.status == "FAILED" and "perfpredict.stall" in inner.data.tags
    assert inner.data.tags["mlflow.parentRunId"] == outer.info.run_id


def test_an_unusable_sqlite_store_is_refused_at_once(tmp_path, monkeypatch):
    """A store path that is a folder (or in a place that takes no files) took MLflow about 105 s of retries."""
    (tmp_path / "adir").mkdir()
    for uri, says in ((f"sqlite:///{tmp_path}/adir", "is a folder"),
                      (f"sqlite:///{tmp_path}/missing/x.db", "does not exist"),
                      ("sqlite:////proc/perfpredict-x.db", "cannot write")):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        t0 = time.monotonic()
        with pytest.raises(ValueError, match=says):
            tracking.prepare("x", quick=True)
        assert time.monotonic() - t0 < 10


def test_an_experiment_whose_artifacts_cannot_be_written_is_refused_before_the_work(store, tmp_path):
    """Its runs used to be logged FAILED, after the work, with params and no artifacts and nothing saying why."""
    import mlflow

    (tmp_path / "afile").write_text("x")
    mlflow.set_tracking_uri(tracking.tracking_uri())
    mlflow.create_experiment("badart", artifact_location=str(tmp_path / "afile" / "art"))
    with pytest.raises(ValueError, match="keeps its artifacts at .*afile is a file"):
        tracking.prepare("badart", quick=True)


def test_commands_opening_a_new_store_at_once_leave_it_usable(tmp_path):
    """Three commands creating the default store together broke it for good (`table _alembic_tmp_metrics already
    exists` on every later use): the store's folder is locked while it is opened."""
    code = ("import sys; from perfpredict import tracking; tracking.prepare(sys.argv[1]); print('ok')")
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/fresh.db", "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", code, f"exp{i}"], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 and o.strip() == "ok" for p, (o, _) in zip(procs, outs)), [e[-800:] for _, e in outs]
    done = subprocess.run([sys.executable, "-c", code, "after"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(tmp_path / "fresh.db").stat().st_size > 0


def test_predict_logs_a_prediction_only_when_asked(tmp_path):
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db", "PATH": "/usr/bin:/bin"}
    for extra in ([], ["--mlflow", "--experiment", "team-preds"]):
        r = subprocess.run([sys.executable, "-m", "perfpredict", "predict", "zoo:mlp", "-b", "8", *extra], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-2000:]
        assert ("mlflow: run" in r.stdout) == bool(extra)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    assert [e.name for e in client.search_experiments()] == ["team-preds"] or \
        sorted(e.name for e in client.search_experiments()) == ["Default", "team-preds"]
    (run,) = _runs(client, "team-preds")
    assert run.data.tags["perfpredict.kind"] == "prediction" and run.info.status == "FINISHED"
