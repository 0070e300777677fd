"""Findings of a property scan of the schedulers' paper formulas (ANDREAS Alg. 1 / App. A under device-memory
limits, seed 002's per-job flow time, GENIE's eq. 14), each checked on a small exact case."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from perfpredict.sched import make_policy
from perfpredict.sched.andreas import (
    AndreasProblem,
    NodeClass,
    check_schedule,
    greedy,
    objective,
    randomized_greedy,
    solve_milp,
)
from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.genie_cards import genie_models, genie_nu_s
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.perf import PerfModel
from perfpredict.sim.genie_workload import genie_cluster, genie_metrics, genie_trace
from perfpredict.sim.metrics import compute_metrics
from perfpredict.sim.simulator import SimConfig, simulate


# -- ANDREAS with device-memory limits (AndreasProblem.allowed) ----------------------------------------------
def _masked_problem() -> AndreasProblem:
    """Two 1-GPU T4 nodes (16 GB) and one 1-GPU V100 node (32 GB). Jobs a and b need the V100's memory, c fits
    anywhere; a and b are closer to their due dates, so they come first and one of them finds the V100 taken."""
    small = NodeClass("T4", 1, 0.016, (0, 1), gpu_mem_gb=16)
    big = NodeClass("V100", 1, 0.0572, (2,), gpu_mem_gb=32)
    return AndreasProblem(now=0.0, job_ids=("a", "b", "c"), d_rel=np.array([1500.0, 1200.0, 5000.0]),
                          weight=np.ones(3), t=np.array([[2000.0, 1000.0]] * 3),
                          classes=(small, big), allowed=np.array([[False, True], [False, True], [True, True]]))


def _brute_force_masked(p: AndreasProblem, work_conserving: bool) -> float:
    """min f_OBJ over the schedules that respect ``allowed``; ``work_conserving``: a postponed job has no node
    with room for a configuration that can hold it."""
    nc, ng = p.node_class, p.node_gpus
    opts = [(-1, -1)] + [(n, p.cfg_index(int(nc[n]), g)) for n in range(len(ng)) for g in range(1, ng[n] + 1)]
    best = math.inf
    for combo in itertools.product(opts, repeat=p.n_jobs):
        if any(k >= 0 and not p.allowed[j, k] for j, (_, k) in enumerate(combo)):
            continue
        used = np.zeros(len(ng), dtype=int)
        for n, k in combo:
            if k >= 0:
                used[n] += p.cfg_gpus[k]
        if np.any(used > ng):
            continue
        if work_conserving and any(
                k < 0 and any(p.allowed[j, p.cfg_index(int(nc[m]), g)] and ng[m] - used[m] >= g
                              for m in range(len(ng)) for g in range(1, ng[m] + 1))
                for j, (_, k) in enumerate(combo)):
            continue
        best = min(best, objective(p, np.array([c[0] for c in combo]), np.array([c[1] for c in combo])))
    return best


def test_rg_keeps_placing_after_a_job_that_fits_nowhere():
    """Alg. 1 postpones a job only when no configuration that can hold it fits; the next job still gets its turn
    (before: the iteration stopped at the first job that did not fit, leaving c waiting beside idle T4s)."""
    p = _masked_problem()
    node_g, cfg_g = greedy(p)
    assert cfg_g[2] >= 0  # the plain greedy puts c on a T4
    for it in (1, 50):
        rg = randomized_greedy(p, it, 0)
        check_schedule(p, rg.node, rg.cfg)
        assert rg.f_obj == pytest.approx(objective(p, rg.node, rg.cfg), rel=1e-9, abs=1e-12)
        assert rg.f_greedy == pytest.approx(objective(p, node_g, cfg_g), rel=1e-9, abs=1e-12)
        assert np.count_nonzero(rg.cfg >= 0) == 2 and rg.cfg[2] >= 0
    one = randomized_greedy(p, 1, 0)
    assert np.array_equal(one.node, node_g) and np.array_equal(one.cfg, cfg_g)


def test_rg_postpones_only_jobs_with_no_room_under_random_memory_limits():
    rng = np.random.default_rng(3)
    for _ in range(60):
        gs, gb = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        small = NodeClass("T4", gs, 0.016, tuple(range(2)), gpu_mem_gb=16)
        big = NodeClass("V100", gb, 0.0572, (2,), gpu_mem_gb=32)
        J = int(rng.integers(2, 9))
        t = rng.uniform(300, 5000, (J, 1)) * np.r_[[2.0 / g for g in range(1, gs + 1)], [1.0 / g for g in range(1, gb + 1)]]
        allowed = np.ones((J, gs + gb), dtype=bool)
        allowed[rng.random(J) < 0.5, :gs] = False
        p = AndreasProblem(now=0.0, job_ids=tuple(map(str, range(J))), d_rel=rng.uniform(-500, 8000, J),
                           weight=rng.choice([1.0, 2.0, 5.0], J), t=t, classes=(small, big), allowed=allowed)
        rg = randomized_greedy(p, 20, 1)
        check_schedule(p, rg.node, rg.cfg)
        free = p.node_gpus.copy()
        for j in np.flatnonzero(rg.cfg >= 0):
            free[rg.node[j]] -= p.cfg_gpus[rg.cfg[j]]
        for j in np.flatnonzero(rg.cfg < 0):
            assert not any(allowed[j, k] and free[p.node_class == p.cfg_class[k]].max() >= p.cfg_gpus[k]
                           for k in range(gs + gb))


def test_work_conserving_milp_respects_memory_limits():
    """The work-conserving MILP is the best schedule of the set RG searches: with memory limits a postponed job
    leaves idle only GPUs that cannot hold it (before: every node had to be full, and the model was infeasible)."""
    p = _masked_problem()
    wc = solve_milp(p, work_conserving=True)
    assert wc.optimal
    check_schedule(p, wc.node, wc.cfg)
    assert wc.objective == pytest.approx(_brute_force_masked(p, True), rel=1e-6, abs=1e-9)
    assert solve_milp(p).objective == pytest.approx(_brute_force_masked(p, False), rel=1e-6, abs=1e-9)
    assert wc.objective <= randomized_greedy(p, 20, 0).f_obj + 1e-9


# -- seed 002's per-job flow time ----------------------------------------------------------------------------
def _state(id: str, arrival: float, work: float, start: float | None, finish: float | None) -> JobState:
    js = JobState(Job(id=id, arrival=arrival, gpus=1.0, work=work, user="u"), PerfModel("linear"))
    js.first_start, js.finish = start, finish
    js.run_time = 0.0 if finish is None else finish - start
    return js


def test_an_unfinished_task_does_not_split_its_users_job():
    """a [0, 100], b arrives at 50 with 1000 s of work, c at 1000: one job (c starts while b's trace execution
    runs). If b is left unfinished the job has not finished — it used to be scored as two finished jobs of
    100 s flow time, better than the 1200 s of the schedule that ran b."""
    full = [_state("a", 0, 100, 0, 100), _state("b", 50, 1000, 100, 1100), _state("c", 1000, 100, 1100, 1200)]
    m = compute_metrics(full, [], ClusterSpec.homogeneous(1))
    assert (m.n_user_jobs, m.avg_job_flow_time_s) == (1, 1200.0)
    cut = [_state("a", 0, 100, 0, 100), _state("b", 50, 1000, None, None), _state("c", 1000, 100, 1000, 1100)]
    m = compute_metrics(cut, [], ClusterSpec.homogeneous(1))
    assert m.n_user_jobs == 0 and math.isnan(m.avg_job_flow_time_s) and math.isnan(m.max_job_stretch)
    assert m.avg_jct_s == pytest.approx(100.0)  # the per-task statistics still count a and c


# -- GENIE eq. 14 ----------------------------------------------------------------------------------------------
def test_qos_guarantee_uses_eq9_ect_when_the_trace_gives_no_deadline():
    """SWAF schedules a task without a deadline by arrival + eq. 9 (genie.task_ect); eq. 14 must count it by the
    same ECT (it counted every such task as missed). QoS class names are case-insensitive, as for eq. 9."""
    jobs = genie_trace(8, hours=2, seed=1)
    bare = [dataclasses.replace(j, deadline=None, qos=(j.qos or "normal").capitalize()) for j in jobs]
    cl = genie_cluster(2)
    cfg = SimConfig(start_overhead_s=genie_nu_s())
    g_dl = genie_metrics(simulate(jobs, cl, make_policy("fifo"), make_mechanism("swaf"), genie_models(), cfg))
    g_bare = genie_metrics(simulate(bare, cl, make_policy("fifo"), make_mechanism("swaf"), genie_models(), cfg))
    assert g_dl["n_met"] > 0
    assert g_bare["n_met"] == g_dl["n_met"]
    assert g_bare["qos_guarantee"] == pytest.approx(g_dl["qos_guarantee"])
    assert g_bare["qos_by_class"] == pytest.approx(g_dl["qos_by_class"], nan_ok=True)
