"""Jobs a cluster cannot run: refused up front with the reason, or, when only the run can tell, a run that stops
and says which jobs can never finish (it must neither loop for ever nor pass NaN metrics off as a result).
Clusters whose devices differ in memory: every mechanism places a job only on GPUs that hold it."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass

import numpy as np
import pytest

from perfpredict.errors import UsageError
from perfpredict.sched import ClusterSpec, Job, PerfModel, ServerSpec, make_policy
from perfpredict.sched.andreas import AndreasProblem, NodeClass, check_schedule, greedy, randomized_greedy, solve_milp
from perfpredict.sched.base import Mechanism
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sim.run import load_perf_models, run_simulation
from perfpredict.sim.simulator import STALL_DECISIONS, SimConfig, SimulationError, simulate
from tests.conftest import RecordingMechanism

#: a 16 GB GPU beside eight 8 GB ones; the paper cards' opennmt needs 10.8 GB on its device
HET = {"name": "het", "servers": [{"gpus": 8, "cpus": 24, "mem_gb": 500, "gpu_mem_gb": 8},
                                  {"gpus": 1, "cpus": 24, "mem_gb": 500, "gpu_mem_gb": 16}]}


def _het() -> ClusterSpec:
    return ClusterSpec.from_dict(HET)


def test_a_server_with_gpus_and_no_cpus_is_refused():
    with pytest.raises(ValueError, match="needs CPUs"):
        ServerSpec(gpus=8, cpus=0)
    ServerSpec(gpus=0, cpus=0)  # a server without GPUs (storage, a head node) may have none
    with pytest.raises(UsageError, match="needs CPUs"):
        run_simulation("synergy:n=3", "1x8:cpus=0")


@dataclass(frozen=True)
class _Stuck(PerfModel):
    """A card under which no allocation gets any throughput."""

    def rate(self, alloc, ref_gpus, cluster=None) -> float:  # noqa: ARG002
        return 0.0


class _NeverPlaces(Mechanism):
    name = "never"
    round_based = False

    def allocate(self, ordered, cluster, running, now):
        return {}


def _jobs(n: int = 2, model: str = "m") -> list[Job]:
    return [Job(id=f"j{i}", arrival=10.0 * i, gpus=1, work=600.0, model=model) for i in range(n)]


def test_a_periodic_mechanism_whose_jobs_never_progress_stops_and_says_so():
    """ANDREAS decides every 300 s: before the stall check, a job of rate 0 made the loop tick for ever."""
    res = simulate(_jobs(), ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), make_mechanism("andreas"),
                   {"m": _Stuck(name="m")})
    assert res.stall is not None and "give no throughput" in res.stall, res.stall
    assert f"{STALL_DECISIONS} decisions" in res.stall
    assert not res.finished and len(res.unfinished) == 2
    assert res.decisions <= STALL_DECISIONS + 3


def test_an_event_mechanism_whose_jobs_never_progress_stops_and_says_so():
    res = simulate(_jobs(), ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), make_mechanism("proportional"),
                   {"m": _Stuck(name="m")})
    assert res.stall is not None and "2 job(s) hold allocations under which their performance models give no throughput" in res.stall


def test_a_mechanism_that_places_nothing_is_named():
    res = simulate(_jobs(3), ClusterSpec.homogeneous(1, gpus=4), make_policy("las"), _NeverPlaces(),
                   {"m": PerfModel(name="m")})
    assert res.stall is not None and "the never mechanism places none of the 3 job(s) left" in res.stall


@pytest.mark.parametrize("mechanism", ["proportional", "greedy"])
def test_a_run_whose_preemptions_undo_its_work_stops_and_says_so(mechanism):
    """LAS swaps two one-epoch jobs every round and each swap rolls the preempted one back to its start: a
    completion is always scheduled, so the frozen-run checks never fired and the run went on for ever (found by
    a randomised scan)."""
    jobs = [Job("a", 0.0, 1.0, 600.0, model="resnet18", epochs=1), Job("b", 0.0, 1.0, 600.0, model="resnet18", epochs=1)]
    r = run_simulation(jobs, "1x1:cpus=3,mem=62.5", "las", mechanism).result
    assert not r.finished and len(r.unfinished) == 2
    assert r.stall is not None and r.stall.startswith("50000 decisions in a row in which no job finished")
    assert f"(las with {mechanism};" in r.stall and "s of work rolled back to epoch checkpoints in all" in r.stall
    # the same jobs with ten epochs keep what each round did, and finish
    jobs = [Job(j.id, 0.0, 1.0, 600.0, model="resnet18", epochs=10) for j in jobs]
    r = run_simulation(jobs, "1x1:cpus=3,mem=62.5", "las", mechanism).result
    assert r.stall is None and len(r.finished) == 2


def test_jobs_that_lose_ground_most_of_the_time_but_finish_epochs_are_not_stopped():
    """FTF with Synergy-Greedy on 1-second rounds preempts these jobs so often that their total work done stays
    under its best for 10 000 decisions, yet they finish epochs now and then and the run ends (the review's
    case: the first version of the check stopped it with one of three jobs done)."""
    jobs = [Job("j0", 0.0, 2.0, 20000.0, model="alexnet", epochs=100),
            Job("j1", 0.0, 1.0, 100000.0, model="resnet50", epochs=10),
            Job("j3", 100.0, 1.0, 20000.0, model="shufflenetv2", epochs=100)]
    cfg = SimConfig(mode="round", round_s=1.0, restart_overhead_s=10.0, start_overhead_s=600.0)
    r = run_simulation(jobs, "1x2", "ftf", "greedy", config=cfg).result
    assert r.stall is None and len(r.finished) == 3


def test_a_start_overhead_of_many_rounds_is_not_taken_for_no_progress():
    """12 000 one-second rounds of start overhead with nothing else going on is slow, not stuck (review)."""
    jobs = [Job("a", 0.0, 1.0, 600.0, model="resnet18"), Job("b", 0.0, 1.0, 1200.0, model="resnet18")]
    cfg = SimConfig(mode="round", round_s=1.0, start_overhead_s=12000.0)
    r = run_simulation(jobs, "1x1:cpus=3,mem=62.5", "srtf", "proportional", config=cfg).result
    assert r.stall is None and len(r.finished) == 2


def test_restart_overheads_that_eat_every_round_stop_the_run():
    jobs = [Job("a", 0.0, 1.0, 600.0, model="resnet18"), Job("b", 0.0, 1.0, 600.0, model="resnet18")]
    cfg = SimConfig(mode="round", round_s=300, restart_overhead_s=300)
    r = run_simulation(jobs, "1x1:cpus=3,mem=62.5", "las", "proportional", config=cfg).result
    assert r.stall is not None and "got further than at an earlier check" in r.stall and not r.finished
    r = run_simulation(jobs, "1x1:cpus=3,mem=62.5", "las", "proportional",
                       config=SimConfig(mode="round", round_s=300, restart_overhead_s=100)).result
    assert r.stall is None and len(r.finished) == 2


def test_a_complete_run_has_no_stall():
    res = simulate(_jobs(3), ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), make_mechanism("andreas"),
                   {"m": PerfModel(name="m")})
    assert res.stall is None and len(res.finished) == 3


def test_a_gang_job_with_too_few_devices_big_enough_is_refused_before_the_run():
    jobs = [Job(id="a", arrival=0, gpus=2, work=3600, model="opennmt")]
    with pytest.raises(UsageError, match=r"needs 2 GPUs with 10.8 GB of device memory each; the cluster has 1"):
        run_simulation(jobs, _het(), mechanism="tune")
    with pytest.raises(SimulationError, match="needs 2 GPUs"):
        simulate(jobs, _het(), make_policy("fifo"), make_mechanism("rigid"), load_perf_models("paper"))


@pytest.mark.parametrize("mechanism", ["andreas", "andreas-baseline", "moldable-equipartition",
                                       "malleable-equipartition", "moldable-proportional", "proportional", "tune"])
def test_jobs_run_only_on_devices_that_hold_them(mechanism):
    """Two 10.8 GB jobs and a small one on 8 GB + 16 GB GPUs: before, ANDREAS put a big job on an 8 GB device
    (an internal CapacityError) and the moldable mechanisms sized it for GPUs it could not use (it waited for
    ever). Every job must finish, the big ones on server 1 only."""
    jobs = [Job(id="big1", arrival=0, gpus=1, work=3600, model="opennmt"),
            Job(id="small", arrival=0, gpus=1, work=3600, model="resnet18"),
            Job(id="big2", arrival=60, gpus=1, work=3600, model="opennmt")]
    rec = RecordingMechanism(make_mechanism(mechanism))
    res = simulate(jobs, _het(), make_policy("fifo"), rec, load_perf_models("paper"))
    assert res.stall is None and len(res.finished) == 3, res.stall
    seen_big = 0
    for _, allocs in rec.log:
        for jid, a in allocs.items():
            if jid.startswith("big"):
                seen_big += 1
                assert a.servers == (1,), (jid, a)
    assert seen_big > 0


def test_genie_on_an_asymmetric_cluster_is_a_usage_error(tmp_path, run_cli):
    (tmp_path / "het.json").write_text(json.dumps(HET))
    (tmp_path / "t.csv").write_text("id,arrival_s,gpus,work_s,model\na,0,1,3600,resnet18\n")
    proc = run_cli("simulate", "--cluster", "het.json", "--trace", "t.csv", "--mechanism", "swaf", "--no-mlflow",
                   "--out", "o")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "GENIE assumes a symmetric cluster" in proc.stderr and "internal error" not in proc.stderr


def test_the_cli_refuses_a_moldable_job_whose_minimum_size_never_fits(tmp_path, run_cli):
    """A job sized for more 16 GB devices than exist under a moldable mechanism with its own minimum: before, it
    was accepted and the run stalled; now the CLI refuses it up front with one readable message and exit 2."""
    (tmp_path / "het.json").write_text(json.dumps(HET))
    (tmp_path / "t.csv").write_text("id,arrival_s,gpus,work_s,model,min_gpus\n"
                                    "a,0,2,3600,opennmt,2\nb,0,1,3600,resnet18,\n")
    proc = run_cli("simulate", "--cluster", "het.json", "--trace", "t.csv", "--mechanism", "moldable-equipartition",
                   "--no-mlflow", "--out", "o")
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "job a (opennmt) needs at least 2 GPUs with 10.8 GB of device memory each" in proc.stderr
    assert "moldable-equipartition" in proc.stderr and "the cluster has 1 such GPU(s)" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_a_stalled_run_keeps_the_records(tmp_path):
    """A run that stalls (here: a card under which no allocation progresses) still writes every job's record and
    says why in metrics.json, instead of NaN metrics passed off as a result."""
    jobs = _jobs(2) + [Job(id="ok", arrival=0, gpus=1, work=600.0, model="fine")]
    run = run_simulation(jobs, ClusterSpec.homogeneous(1, gpus=4), mechanism="proportional",
                         cards={"m": _Stuck(name="m"), "fine": PerfModel(name="fine")}, out_dir=tmp_path / "o")
    assert run.result.stall and "2 job(s) hold allocations" in run.result.stall
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert doc["simulation"]["stall"] == run.result.stall and doc["simulation"]["unfinished"] == 2
    with open(tmp_path / "o" / "jobs.csv", newline="") as f:
        finished = {r["id"]: r["finished"] for r in csv.DictReader(f)}
    assert finished == {"j0": "False", "j1": "False", "ok": "True"}


# -- moldable/malleable jobs whose minimum size can never fit -----------------------------------------------
FLEXIBLE = ["moldable-equipartition", "malleable-equipartition", "moldable-proportional", "malleable-proportional"]


@pytest.mark.parametrize("mechanism", FLEXIBLE)
def test_a_moldable_job_with_too_few_devices_big_enough_for_its_minimum_is_refused_before_the_run(mechanism):
    """The moldable mirror of the rigid case above: min_gpus=2 of a 10.8 GB job, one 16 GB GPU. Before, the job was
    accepted and the run only stopped when the stall detector saw it wait for ever."""
    jobs = [Job(id="a", arrival=0, gpus=2, work=3600, model="opennmt", min_gpus=2),
            Job(id="b", arrival=0, gpus=1, work=3600, model="resnet18")]
    msg = (rf"job a \(opennmt\) needs at least 2 GPUs with 10.8 GB of device memory each \(its minimum size under "
           rf"the {mechanism} mechanism\); the cluster has 1 such GPU\(s\)")
    with pytest.raises(SimulationError, match=msg):
        simulate(jobs, _het(), make_policy("fifo"), make_mechanism(mechanism), load_perf_models("paper"))
    with pytest.raises(UsageError, match=msg):
        run_simulation(jobs, _het(), mechanism=mechanism)
    # with oversized="drop" it is left out and reported; the rest runs to completion
    res = simulate(jobs, _het(), make_policy("fifo"), make_mechanism(mechanism), load_perf_models("paper"),
                   SimConfig(oversized="drop"))
    assert [j.id for j in res.dropped] == ["a"]
    assert res.stall is None and [js.id for js in res.finished] == ["b"] and not res.unfinished


@pytest.mark.parametrize("mechanism", FLEXIBLE)
def test_a_moldable_minimum_above_every_gpu_of_the_cluster_is_refused(mechanism):
    """A minimum of 8 GPUs on a 4-GPU cluster, for a job asking for 1 (so the demand check lets it through), and
    for a card that gives no device memory (every GPU holds it: the count alone decides)."""
    jobs = [Job(id="a", arrival=0, gpus=1, work=600, model="m", min_gpus=8)]
    with pytest.raises(SimulationError, match=rf"job a \(m\) needs at least 8 GPUs \(its minimum size under the "
                                              rf"{mechanism} mechanism\); the cluster has 4 \(to leave such jobs out"):
        simulate(jobs, ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), make_mechanism(mechanism),
                 {"m": PerfModel(name="m")})


def test_the_mechanisms_default_minimum_counts_too():
    """No min_gpus on the job: the mechanism's p_min decides (2 here), so a 10.8 GB job on one 16 GB GPU."""
    jobs = [Job(id="a", arrival=0, gpus=1, work=3600, model="opennmt")]
    mech = make_mechanism("moldable-equipartition:p_min=2")
    with pytest.raises(SimulationError, match="needs at least 2 GPUs with 10.8 GB"):
        simulate(jobs, _het(), make_policy("fifo"), mech, load_perf_models("paper"))
    # the paper's default p_min (1/4) needs one device, which the cluster has
    res = simulate(jobs, _het(), make_policy("fifo"), make_mechanism("moldable-equipartition"),
                   load_perf_models("paper"))
    assert res.stall is None and len(res.finished) == 1


@pytest.mark.parametrize("mechanism", FLEXIBLE)
@pytest.mark.parametrize("min_gpus", [0.25, 0.3, 0.5, 1.0])
def test_a_fractional_minimum_needs_one_device(mechanism, min_gpus):
    """1/n of a GPU is still one device that must hold the job: a 10.8 GB job with a fractional minimum on the one
    16 GB GPU is accepted and finishes; a sharing bound is never counted as several devices."""
    assert make_mechanism(mechanism).min_devices(Job(id="x", arrival=0, gpus=1, work=1, min_gpus=min_gpus)) == 1
    jobs = [Job(id="a", arrival=0, gpus=1, work=3600, model="opennmt", min_gpus=min_gpus),
            Job(id="b", arrival=0, gpus=1, work=3600, model="resnet18", min_gpus=min_gpus)]
    res = simulate(jobs, _het(), make_policy("fifo"), make_mechanism(mechanism), load_perf_models("paper"))
    assert res.stall is None and len(res.finished) == 2 and not res.dropped


def test_min_devices_per_mechanism():
    """Rigid: the gang's whole GPUs (a fraction: one device); moldable: p_min snapped (I4: 1.5 -> 2, 0.3 -> 1/3);
    the others keep the old rule (one device: the mechanism chooses the size)."""
    def job(gpus: float, min_gpus: float | None = None) -> Job:
        return Job(id="x", arrival=0, gpus=gpus, work=1, min_gpus=min_gpus)

    for name in ("rigid", "tune", "proportional", "horus"):
        m = make_mechanism(name)
        assert m.rigid
        assert [m.min_devices(job(g)) for g in (0.25, 1, 2, 2.5, 3)] == [1, 1, 2, 3, 3], name
    flex = make_mechanism("malleable-equipartition")
    assert [flex.min_devices(job(4, lo)) for lo in (None, 0.3, 1, 1.5, 2, 3)] == [1, 1, 1, 2, 2, 3]
    assert make_mechanism("moldable-proportional:p_min=3").min_devices(job(1)) == 3
    for name in ("andreas", "swaf"):
        m = make_mechanism(name)
        assert not m.rigid and m.min_devices(job(4)) == 1, name


# -- ANDREAS' configurations that cannot hold a job -------------------------------------------------------
def _mem_problem(seed: int = 0) -> AndreasProblem:
    """Three classes (8 GB, 16 GB, 8 GB) and six jobs, two of which fit only the 16 GB class."""
    rng = np.random.default_rng(seed)
    classes = (NodeClass("T4", 2, 0.016, (0, 1), 8.0), NodeClass("V100", 2, 0.0572, (2,), 16.0),
               NodeClass("T4b", 1, 0.01, (3,), 8.0))
    K = 5
    J = 6
    t = rng.uniform(600, 7200, size=(J, K))
    allowed = np.ones((J, K), dtype=bool)
    allowed[:2, :] = False
    allowed[:2, 2:4] = True  # the V100 class's configurations (g = 1, 2)
    return AndreasProblem(now=0.0, job_ids=tuple(f"j{i}" for i in range(J)), d_rel=rng.uniform(0, 9000, J),
                          weight=rng.uniform(0.5, 2, J), t=t, classes=classes, allowed=allowed)


@pytest.mark.parametrize("seed", range(5))
def test_randomized_greedy_greedy_and_the_milp_respect_the_configurations_a_job_fits(seed):
    p = _mem_problem(seed)
    for node, cfg in (greedy(p), (lambda r: (r.node, r.cfg))(randomized_greedy(p, 200, seed))):
        check_schedule(p, node, cfg)
        assert all(p.allowed[j, cfg[j]] for j in range(p.n_jobs) if cfg[j] >= 0)
    ex = solve_milp(p, time_limit_s=30)
    check_schedule(p, ex.node, ex.cfg)
    assert ex.objective <= randomized_greedy(p, 200, seed).f_obj + 1e-6


def test_a_configuration_that_cannot_hold_the_job_is_reported_by_check_schedule():
    p = _mem_problem()
    cfg = np.full(p.n_jobs, -1)
    node = np.full(p.n_jobs, -1)
    cfg[0], node[0] = 0, 0  # job 0 on the 8 GB class
    with pytest.raises(ValueError, match="cannot hold it"):
        check_schedule(p, node, cfg)
    with pytest.raises(ValueError, match="no configuration that can hold it"):
        AndreasProblem(now=0.0, job_ids=("a",), d_rel=[1.0], weight=[1.0], t=[[1.0, 2.0]],
                       classes=(NodeClass("T4", 2, 0.016, (0,), 8.0),), allowed=[[False, False]])


@pytest.mark.parametrize("mechanism", ["proportional", "tune", "greedy", "drf", "tetris", "opt"])
def test_a_fraction_of_a_gpu_gets_one_whole_gpu_from_the_whole_gpu_mechanisms(mechanism):
    """Synergy's mechanisms and GPU-proportional place whole GPUs: a 0.5-GPU job gets one device (the simulator's
    rigidity check used to stop the run, blaming the mechanism), while Rigid FCFS gives it half of one."""
    jobs = [Job(id="a", arrival=0, gpus=0.5, work=600, model="resnet50"),
            Job(id="b", arrival=0, gpus=2, work=600, model="resnet50")]
    rec = RecordingMechanism(make_mechanism(mechanism))
    res = simulate(jobs, ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), rec, load_perf_models("paper"))
    assert len(res.finished) == 2 and res.stall is None
    assert {a["a"].gpus for _, a in rec.log if "a" in a} == {1.0}
    rigid = RecordingMechanism(make_mechanism("rigid"))
    simulate(jobs, ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), rigid, load_perf_models("paper"))
    assert {a["a"].gpus for _, a in rigid.log if "a" in a} == {0.5}


@pytest.mark.parametrize("mechanism", ["malleable-equipartition", "moldable-proportional"])
def test_a_moldable_job_asking_for_more_gpus_than_the_cluster_has_runs_smaller(mechanism):
    """Its minimum size decides (p_min = 1/4 of 8 GPUs = 2), not its demand; a rigid mechanism refuses it."""
    jobs = [Job(id="big", arrival=0, gpus=8, work=600, model="mcnn")]
    rec = RecordingMechanism(make_mechanism(mechanism))
    res = simulate(jobs, ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), rec, load_perf_models("paper"))
    assert len(res.finished) == 1 and max(a["big"].gpus for _, a in rec.log if "big" in a) <= 4
    with pytest.raises(SimulationError, match="asks for 8 GPUs; the cluster has 4"):
        simulate(jobs, ClusterSpec.homogeneous(1, gpus=4), make_policy("fifo"), make_mechanism("rigid"),
                 load_perf_models("paper"))


def test_a_gpu_type_a_card_has_no_speed_for_is_refused_before_the_run():
    """ANDREAS' cards know V100 and T4: a K80 cluster used to fail mid-run as an internal error."""
    from perfpredict.sim.run import parse_trace

    jobs = parse_trace("andreas:nodes=2,jobs=6")
    with pytest.raises(SimulationError, match=r"has a speed for GPU type\(s\) T4, V100 only; the cluster has 'K80'"):
        simulate(jobs, ClusterSpec.homogeneous(2, gpus=4, gpu_type="K80"), make_policy("fifo"),
                 make_mechanism("andreas"), load_perf_models("paper"))
    mixed = ClusterSpec.from_dict({"servers": [{"gpus": 4, "gpu_type": "V100"}, {"gpus": 4, "gpu_type": "K80"}]})
    with pytest.raises(SimulationError, match="can run none of the 6 jobs, e.g. job"):
        simulate(jobs, mixed, make_policy("fifo"), make_mechanism("andreas"), load_perf_models("paper"),
                 SimConfig(oversized="drop"))
