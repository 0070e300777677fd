"""Fixes to the simulator and `perfpredict simulate`: GENIE's ν charged by the CLI as by the experiment, a decision
period off the round grid refused in round mode; and what ``end_time`` and the stall rule are (unchanged)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from perfpredict.cli import app
from perfpredict.sched import Allocation, ClusterSpec
from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Share
from perfpredict.sched.job import Job
from perfpredict.sched.perf import PerfModel
from perfpredict.sim import SimConfig, metrics_from_result, simulate
from perfpredict.sim.simulator import SimulationError

GENIE = ["--cluster", "genie:nodes=2", "--trace", "genie:rate=4,hours=1,seed=3", "--no-mlflow"]


def _cli_metrics(tmp_path, name: str, *args: str) -> dict:
    res = CliRunner().invoke(app, ["simulate", *GENIE, *args, "-o", str(tmp_path / name)])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / name / "metrics.json").read_text())
    doc["output"] = res.output
    return doc


def test_cli_simulate_charges_genie_nu_as_the_experiment_does(tmp_path):
    from perfpredict.sched.genie_cards import genie_nu_s
    from perfpredict.sim.genie_workload import genie_metrics
    from perfpredict.sim.run import run_simulation

    nu = genie_nu_s()
    assert nu > 0
    # experiments/genie_qos.py: SimConfig(mode="event", start_overhead_s=genie_nu_s())
    api = run_simulation("genie:rate=4,hours=1,seed=3", "genie:nodes=2", "fifo", "swaf",
                         config=SimConfig(mode="event", start_overhead_s=nu))
    cli = _cli_metrics(tmp_path, "default", "--mechanism", "swaf")
    assert cli["params"]["start_overhead_s"] == nu and f"start overhead charged: {nu:g} s" in cli["output"]
    assert cli["metrics"]["makespan_s"] == api.metrics.to_dict()["makespan_s"]
    assert cli["genie"]["makespan_s"] == genie_metrics(api.result)["makespan_s"]
    assert cli["genie"]["avg_norm_latency"] == genie_metrics(api.result)["avg_norm_latency"]
    # --start-overhead overrides it; without ν the run is a different one
    zero = _cli_metrics(tmp_path, "zero", "--mechanism", "swaf", "--start-overhead", "0")
    assert zero["params"]["start_overhead_s"] == 0
    assert zero["metrics"]["makespan_s"] != cli["metrics"]["makespan_s"]
    assert zero["genie"]["avg_norm_latency"] != cli["genie"]["avg_norm_latency"]


def test_cli_simulate_start_overhead_defaults_to_zero_off_genie_and_is_checked(tmp_path):
    other = _cli_metrics(tmp_path, "p", "--mechanism", "proportional")
    assert other["params"]["start_overhead_s"] == 0 and "start overhead charged" not in other["output"]
    given = _cli_metrics(tmp_path, "g", "--mechanism", "proportional", "--start-overhead", "30")
    assert given["params"]["start_overhead_s"] == 30
    assert given["metrics"]["makespan_s"] > other["metrics"]["makespan_s"]
    res = CliRunner().invoke(app, ["simulate", *GENIE, "--start-overhead", "-1", "-o", str(tmp_path / "bad")])
    assert res.exit_code != 0 and "--start-overhead" in str(res.exception) + res.output


# -- round mode and decision periods --------------------------------------------------------------------------
LIN = {"lin": PerfModel("lin")}  # rate 1 on one GPU


class Scripted(Mechanism):
    """Places each job ``script(now, ids)`` names on that device of server 0; the others wait. ``wake``: the times
    it asks to decide at (``pop_wakeups``)."""

    name = "scripted"
    preemptive, rigid, round_based = True, False, False

    def __init__(self, script, wake=()) -> None:
        super().__init__()
        self.script, self.wake = script, list(wake)

    def allocate(self, ordered, cluster, running, now):
        return {jid: Allocation((Share(0, 1.0, 3.0, 10.0, devices=(d,)),))
                for jid, d in self.script(now, [js.id for js in ordered]).items()}

    def pop_wakeups(self):
        out, self.wake = self.wake, []
        return out


def test_a_period_off_the_round_grid_is_refused_in_round_mode():
    # before: decisions at 450 and 1350 s with 300 s rounds, and the arrival at 400 s decided at 450, not 600
    with pytest.raises(ValueError, match=r"period_s \(450 s\) must be a multiple of round_s \(300 s\)"):
        SimConfig(mode="round", round_s=300.0, period_s=450.0)
    with pytest.raises(ValueError, match="must be a multiple of round_s"):
        SimConfig(mode="round", round_s=300.0, period_s=60.0)
    jobs = [Job("J", 0, 1, 2000, model="lin")]
    with pytest.raises(SimulationError, match=r"andreas mechanism's period_s, 300 s\) is not a multiple of the round"):
        simulate(jobs, ClusterSpec.homogeneous(1, gpus=1), "fifo", "andreas", LIN,
                 SimConfig(mode="round", round_s=200.0))
    res = CliRunner().invoke(app, ["simulate", "--trace", "andreas:nodes=2,jobs=5", "--cluster", "andreas:nodes=2",
                                   "--mechanism", "andreas", "--mode", "round", "--round", "200", "--no-mlflow"])
    assert res.exit_code != 0 and "not a multiple of the round (200 s)" in str(res.exception) + res.output
    # on the grid (and in event mode) a period is taken: every decision on a round boundary
    times: list[float] = []
    simulate(jobs + [Job("K", 400, 1, 100, model="lin")], ClusterSpec.homogeneous(1, gpus=1), "fifo",
             "proportional", LIN, SimConfig(mode="round", round_s=300.0, period_s=900.0),
             on_decision=lambda t, *_: times.append(t))
    assert times and all(t % 300 == 0 for t in times) and 900 in times
    SimConfig(mode="event", round_s=300.0, period_s=450.0)


def test_end_time_is_where_the_run_stopped_and_makespan_the_last_finish():
    for mode, end in (("round", 1200.0), ("event", 1000.0)):
        r = simulate([Job("J", 0, 1, 1000, model="lin")], ClusterSpec.homogeneous(1, gpus=1), "fifo", "proportional",
                     LIN, SimConfig(mode=mode))
        m = metrics_from_result(r)
        assert r.end_time == end and r.finished[0].finish == 1000.0
        assert m.makespan_s == 1000.0 and m.gpu_util == pytest.approx(1.0)


def test_holding_a_job_while_others_run_is_no_stall_and_an_idle_wait_asks_for_a_wake_up():
    # J is held for 33 periods while K runs: K's completion is due, so the run is not stuck
    def serial(now, ids):
        return {"K": 0} if "K" in ids else {"J": 0}

    for mode in ("round", "event"):
        r = simulate([Job("K", 0, 1, 1000, model="lin"), Job("J", 0, 1, 500, model="lin")],
                     ClusterSpec.homogeneous(1, gpus=2), "fifo", Scripted(serial), LIN,
                     SimConfig(mode=mode, round_s=30.0, period_s=30.0))
        assert r.stall is None and {js.id: js.finish for js in r.finished} == {"K": 1000.0, "J": 1500.0 if mode ==
                                                                                "event" else 1520.0}

    # every job held 300-900 s with nothing running: stuck as far as the run can tell, unless a wake-up is due
    def idle(now, ids):
        return {} if 300 <= now < 900 else {"J": 0}

    cfg = SimConfig(mode="event", period_s=30.0)
    one = [Job("J", 0, 1, 1000, model="lin")]
    r = simulate(one, ClusterSpec.homogeneous(1, gpus=1), "fifo", Scripted(idle), LIN, cfg)
    assert r.stall is not None and r.stall.startswith("10 decisions in a row changed nothing")
    r = simulate(one, ClusterSpec.homogeneous(1, gpus=1), "fifo", Scripted(idle, wake=[900.0]), LIN, cfg)
    assert r.stall is None and r.finished[0].finish == 1600.0


def test_cli_compare_charges_every_scheduler_genie_nu_when_one_is_a_genie_mechanism(tmp_path):
    """`compare` shares simulate's default: a GENIE mechanism in the comparison charges ν to every scheduler on
    that trace (the same start-up for all), and --start-overhead overrides it."""
    import perfpredict.cli_compare  # noqa: F401 - registers compare on `app`, as main() does
    from perfpredict.sched.genie_cards import genie_nu_s

    def params(name: str, *args: str) -> dict[str, float]:
        out = tmp_path / name
        res = CliRunner().invoke(app, ["compare", "-m", "swaf", "-m", "proportional", "--cluster", "genie:nodes=2",
                                       "--trace", "genie:rate=4,hours=1,seed=3", "--seeds", "0", "--no-mlflow",
                                       *args, "-o", str(out)])
        assert res.exit_code == 0, res.output
        return {p.parent.parent.name: json.loads(p.read_text())["params"]["start_overhead_s"]
                for p in out.glob("runs/*/seed0/metrics.json")}

    assert params("default") == {"fifo+swaf": genie_nu_s(), "fifo+proportional": genie_nu_s()}
    assert params("given", "--start-overhead", "0") == {"fifo+swaf": 0, "fifo+proportional": 0}
