"""GENIE (seed 003): the models of eq. 4-11 by hand, Alg. 1's placement rule and waiting allowance (eq. 12-13),
the baselines' rules, simulator invariants under every GENIE scheduler, Table 3 traces, §7.1 metrics, the CLI."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfpredict.sched import Allocation, ClusterSpec, Job, JobState, Ledger, PerfModel, make_policy
from perfpredict.sched.genie import (
    GeniePerfModel,
    Placement,
    Platform,
    TaskView,
    cer,
    comm_generic,
    cost,
    ect_offset,
    genie_model_key,
    meets_ect,
    parse_model_key,
    realize,
    swaf_select,
    swaf_select_many,
)
from perfpredict.sched.genie_cards import GENIE_TYPES, MEASURED, genie_card, genie_model, genie_models, genie_nu_s
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.mechanisms.genie import GenieCapacity
from perfpredict.sched.placement import proportional_allocation, whole_gpus
from perfpredict.sim.genie_workload import describe_trace, genie_cluster, genie_metrics, genie_trace
from perfpredict.sim.simulator import SimConfig, simulate
from tests.conftest import RecordingMechanism

REPO = Path(__file__).resolve().parents[1]
MECHS = ("swaf", "genie-fifo", "genie-capacity", "genie-min-min", "genie-weighted-fair", "genie-tetris-perf",
         "genie-tetris-cer")


def _spr(b: float) -> float:
    return 100.0 * b / (b + 10.0)


def toy(training: bool = True, batch: float = 32.0, gamma: float = 0.5, lam: float = 0.6,
        nu: float = 2.0) -> GeniePerfModel:
    return GeniePerfModel(name=genie_model_key("toy", training, batch), task_type="toy", training=training,
                          batch=batch, spr=_spr, gamma=gamma, lam=lam, nu_s=nu)


# -- eq. 4-11 by hand ---------------------------------------------------------------------------------------
def test_comm_pr_and_lat_by_hand():
    m = toy()
    s = Placement(2, 2)
    # eq. 8: ((d_node − 1)·d_gn + λ(d_gn − 1))·γ / (n − 1)
    comm = ((2 - 1) * 2 + 0.6 * (2 - 1)) * 0.5 / 3
    assert m.comm(s) == pytest.approx(comm)
    assert m.comm(Placement(1, 1)) == 0.0
    assert m.comm(Placement(1, 4)) == pytest.approx(0.6 * 0.5)  # one node: λγ whatever d_gn
    assert m.comm(Placement(4, 1)) == pytest.approx(0.5)  # one GPU per node: γ
    # eq. 5-7: (n − Comm)·sPR(b / n)
    assert m.pr(s) == pytest.approx((4 - comm) * _spr(32 / 4))
    # inference: no synchronisation, Comm = 0
    assert toy(training=False).pr(s) == pytest.approx(4 * _spr(8))
    # eq. 4: w_bat·w_iter / PR + ν; a job asking for 1 GPU has work = samples / PR⟨1,1⟩
    samples = 32 * 1000
    job = Job("a", 0.0, 1, samples / m.pr(Placement(1, 1)), model=m.name)
    assert m.samples(job) == pytest.approx(samples) and m.iterations(job) == pytest.approx(1000)
    assert m.lat(job, s) == pytest.approx(samples / ((4 - comm) * _spr(8)) + 2.0)
    assert m.lat_single(job) == pytest.approx(samples / _spr(32) + 2.0)
    # a job asking for 2 GPUs: work is at ⟨1,2⟩, the latency of a placement does not depend on the request
    job2 = Job("b", 0.0, 2, samples / m.pr(Placement(1, 2)), model=m.name)
    assert m.lat(job2, s) == pytest.approx(m.lat(job, s))
    # the asymmetric generalisation equals eq. 8 on symmetric splits
    assert comm_generic([2, 2], 0.5, 0.6) == pytest.approx(comm)
    assert m.pr_split([3, 1]) == pytest.approx((4 - comm_generic([3, 1], 0.5, 0.6)) * _spr(8))


def test_cost_and_cer_by_hand():
    p = Platform(4, 4)
    m = toy()
    # eq. 10: n/(N·G) + θ·d_node/N, θ = 0.4
    assert cost(Placement(2, 2), p) == pytest.approx(4 / 16 + 0.4 * 2 / 4)
    assert cost(Placement(1, 1), p) == pytest.approx(1 / 16 + 0.1)
    assert cost(Placement(4, 4), p) == pytest.approx(1 + 0.4)
    # concentrated is cheaper: same GPUs on fewer nodes
    assert cost(Placement(1, 4), p) < cost(Placement(2, 2), p) < cost(Placement(4, 1), p)
    # eq. 11
    assert cer(m, Placement(2, 2), p) == pytest.approx(m.pr(Placement(2, 2)) / 0.45)
    assert len(p.placements()) == 16 and len(p.placements(max_gpus=4)) == 8


def test_ect_by_hand_and_in_the_trace():
    assert ect_offset("urgent", 100.0) == 0.0
    assert ect_offset("prior", 100.0) == 100.0
    assert ect_offset("normal", 100.0) == 200.0 and ect_offset(None, 100.0) == 200.0
    with pytest.raises(ValueError):
        ect_offset("vip", 1.0)
    for j in genie_trace(10, hours=4, seed=1):
        lat11 = genie_model(*parse_model_key(j.model)).lat_single(j)
        assert j.deadline == pytest.approx(j.arrival + {"urgent": 0, "prior": 1, "normal": 2}[j.qos] * lat11)
    assert meets_ect(100.0 + 1e-10, 100.0) and not meets_ect(100.001, 100.0)


# -- Alg. 1 ---------------------------------------------------------------------------------------------------
def test_swaf_select_by_hand():
    p = Platform(2, 2)
    m = toy(batch=64, nu=0.0)
    samples = 64 * 10_000
    job = Job("x", 0.0, 1, samples / m.pr(Placement(1, 1)), model=m.name, qos="prior",
              deadline=samples / m.pr(Placement(1, 1)))
    js = JobState(job, m)
    v = TaskView.of(js, p)
    lat = {s: samples / m.pr(s) for s in p.placements()}
    r = {s: m.pr(s) / cost(s, p) for s in p.placements()}
    # at arrival every placement at least as fast as one GPU meets the Prior ECT (eq. 12): the highest CER wins
    ok = [s for s in p.placements() if lat[s] <= job.deadline + 1e-6]
    best = max(ok, key=lambda s: r[s])
    j, w, met = swaf_select(v, 0.0)
    assert v.placements[j] == best and met
    assert w == pytest.approx(job.deadline - lat[best])  # eq. 13
    # later, only the faster placements still meet it
    t = 0.3 * job.deadline
    ok = [s for s in p.placements() if lat[s] + t <= job.deadline]
    assert ok and len(ok) < len(p.placements())
    j, w, met = swaf_select(v, t)
    assert v.placements[j] == max(ok, key=lambda s: r[s]) and met
    # too late for any: the highest CER of all, and a negative allowance
    t = job.deadline
    j, w, met = swaf_select(v, t)
    assert v.placements[j] == max(p.placements(), key=lambda s: r[s]) and not met and w < 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 10**6), st.floats(0, 100))
def test_swaf_select_property(n, q, seed, now):
    rng = np.random.default_rng(seed)
    lat = rng.uniform(1, 100, (n, q))
    cer_ = rng.uniform(0, 10, (n, q))
    ect = rng.uniform(0, 200, n)
    j, w, ok = swaf_select_many(lat, cer_, ect, now)
    for i in range(n):
        feasible = lat[i] + now <= ect[i]
        if feasible.any():
            assert feasible[j[i]] and ok[i] and cer_[i, j[i]] == cer_[i][feasible].max()
        else:
            assert not ok[i] and cer_[i, j[i]] == cer_[i].max()
        assert w[i] == pytest.approx(ect[i] - lat[i, j[i]] - now)


def test_swaf_launches_in_allowance_order_with_its_eq12_placements():
    cl = genie_cluster(2)
    platform = Platform.from_cluster(cl)
    jobs = genie_trace(8, hours=6, seed=4)
    rec = RecordingMechanism(make_mechanism("swaf"))
    r = simulate(jobs, cl, make_policy("fifo"), rec, genie_models(), SimConfig(start_overhead_s=genie_nu_s()))
    assert not r.unfinished
    launched_any = 0
    for (t, allocs), waiting, queue in zip(rec.log, rec.waiting, rec.queues, strict=True):
        if not queue:  # no GPU free: nothing can start
            assert not any(js.id in allocs for js in waiting)
            continue
        ids = [tid for tid, *_ in queue]
        assert sorted(ids) == sorted(js.id for js in waiting)
        assert [w for _, _, w, _ in queue] == sorted(w for _, _, w, _ in queue)  # SWAF: ascending allowance
        started = [tid for tid in ids if tid in allocs]
        assert ids[:len(started)] == started  # launched in queue order, none past one that did not fit
        by_id = {js.id: js for js in waiting}
        for tid, s, w, met in queue:
            js = by_id[tid]
            m = js.perf
            places = [p for p in platform.placements(max_gpus=m.batch) if m.pr(p) > 0]
            feasible = [p for p in places if meets_ect(t + m.lat(js.job, p), js.job.deadline)]
            pool = feasible or places
            assert m.pr(s) / cost(s, platform) == pytest.approx(max(m.pr(p) / cost(p, platform) for p in pool))
            assert met == bool(feasible)
            assert w == pytest.approx(js.job.deadline - (m.lat(js.job, s) + t), abs=1e-6)
            if tid in allocs:  # the placement launched is the one Alg. 1 chose: d_node nodes of d_g/n GPUs
                launched_any += 1
                assert sorted(sh.gpus for sh in allocs[tid].shares) == [float(s.d_gn)] * s.d_node
    assert launched_any == len(jobs)


@pytest.mark.parametrize("backfill", [False, True])
def test_swaf_waits_only_when_the_placement_does_not_fit(backfill):
    cl = genie_cluster(2)
    jobs = genie_trace(20, hours=6, seed=2)
    rec = RecordingMechanism(make_mechanism("swaf", backfill=backfill))
    r = simulate(jobs, cl, make_policy("fifo"), rec, genie_models())
    assert not r.unfinished
    blocked = 0
    for (_, allocs), queue in zip(rec.log, rec.queues, strict=True):
        after = Ledger(cl)
        after.take_all(allocs.values())  # the GPUs still free once this decision's tasks have started
        left = [s for tid, s, _, _ in queue if tid not in allocs]
        # strict (the paper): the first task left did not fit, and launching stopped there;
        # backfill: none of the tasks left fits
        for s in left[:1] if not backfill else left:
            assert realize(after, s) is None
        blocked += bool(left) and after.total_free_gpus > 0
    assert blocked > 0  # some tasks waited although GPUs were free: their placement needed more


def _one_node_two_gpus_with_one_busy():
    """1 node x 2 GPUs, a long task on GPU 0, and a toy model whose highest-CER placement is ⟨1,1⟩ while only
    ⟨1,2⟩ is faster."""
    cl = genie_cluster(1, gpus_per_node=2)
    p = Platform.from_cluster(cl)
    m = toy(batch=32, nu=0.0)
    assert cer(m, Placement(1, 1), p) > cer(m, Placement(1, 2), p) and m.pr(Placement(1, 2)) > m.pr(Placement(1, 1))
    lat11 = 1000.0
    work = lat11  # one GPU asked: work = Lat⟨1,1⟩ (ν = 0)
    busy = JobState(Job("busy", 0.0, 1, 100 * work, model=m.name, qos="normal", deadline=200 * lat11), m)
    ledger = Ledger(cl)
    running = {"busy": proportional_allocation(ledger, {0: ledger.free_devices(0)[:1]})}
    return cl, m, lat11, work, busy, running


@pytest.mark.parametrize("backfill", [False, True])
def test_swaf_serves_an_overdue_task_first_and_blocks_at_the_head(backfill):
    """The two readings of §5.4 the diagnosis in docs/simulator.md rests on, on a hand-built queue:

    * eq. 13's allowance orders the queue whatever its sign ("w could be negative, which has no impact on the task
      ordering"): a Prior task already past its ECT (w < 0) goes before a Normal task that just arrived (w > 0);
    * "when the cluster cannot meet the resource requirements, the tasks in the waiting queue keep waiting" (§5.4;
      §6: "the task with the maximum priority is popped"): a head task whose Alg. 1 placement does not fit blocks
      the tasks behind it, even one that would fit (``backfill=True``, not the paper, launches it)."""
    cl, m, lat11, work, busy, running = _one_node_two_gpus_with_one_busy()
    now = 5000.0
    # (1) overdue Prior task (ECT passed at 1000 s) vs a fresh Normal task: one GPU free
    late = JobState(Job("late", 0.0, 1, work, model=m.name, qos="prior", deadline=lat11), m)
    fresh = JobState(Job("fresh", now, 1, work, model=m.name, qos="normal", deadline=now + 2 * lat11), m)
    swaf = make_mechanism("swaf", backfill=backfill)
    out = swaf.allocate([busy, late, fresh], cl, dict(running), now)
    queue = {tid: (s, w, met) for tid, s, w, met in swaf.last_queue}
    assert [tid for tid, *_ in swaf.last_queue] == ["late", "fresh"]
    assert queue["late"][1] < 0 < queue["fresh"][1] and not queue["late"][2] and queue["fresh"][2]
    assert queue["late"][0] == Placement(1, 1)  # no placement meets its ECT: the highest CER (Alg. 1 line 13)
    assert "late" in out and "fresh" not in out  # the one free GPU goes to the overdue task
    # (2) a Prior task that can still meet its ECT only on ⟨1,2⟩ heads the queue and does not fit
    t_arr = now - 0.1 * lat11
    tight = JobState(Job("tight", t_arr, 1, work, model=m.name, qos="prior", deadline=t_arr + lat11), m)
    swaf = make_mechanism("swaf", backfill=backfill)
    out = swaf.allocate([busy, tight, fresh], cl, dict(running), now)
    head = swaf.last_queue[0]
    assert head[0] == "tight" and head[1] == Placement(1, 2) and head[3] and 0 < head[2] < swaf.last_queue[1][2]
    assert "tight" not in out
    if backfill:
        assert "fresh" in out
    else:
        assert "fresh" not in out and set(out) == {"busy"}  # a GPU stays idle behind the head
    # Tetris+CER, for contrast: packs whatever fits, QoS not considered
    out = make_mechanism("genie-tetris-cer").allocate([busy, tight, fresh], cl, dict(running), now)
    assert len(set(out) - {"busy"}) == 1


# -- the baselines' rules -------------------------------------------------------------------------------------
def test_tetris_variants_use_the_highest_pr_and_cer_placements():
    cl = genie_cluster(2)
    p = Platform.from_cluster(cl)
    jobs = genie_trace(6, hours=6, seed=5)
    for which, key in (("genie-tetris-perf", "pr"), ("genie-tetris-cer", "cer")):
        rec = RecordingMechanism(make_mechanism(which))
        r = simulate(jobs, cl, make_policy("fifo"), rec, genie_models())
        assert not r.unfinished
        seen = set()
        for (_, allocs), waiting in zip(rec.log, rec.waiting, strict=True):
            for js in waiting:
                if js.id in allocs and js.id not in seen:
                    seen.add(js.id)
                    v = TaskView.of(js, p)
                    s = v.placements[int(np.argmax(v.pr if key == "pr" else v.cer))]
                    assert sorted(sh.gpus for sh in allocs[js.id].shares) == [float(s.d_gn)] * s.d_node
        assert len(seen) == len(jobs)


def test_black_box_baselines_orders_requests_and_capacity_quotas():
    cl = genie_cluster(2)
    jobs = genie_trace(12, hours=6, seed=6)
    quota = GenieCapacity().quotas(cl.total_gpus)
    assert sum(quota.values()) == 8 and max(quota.values()) - min(quota.values()) <= 1
    assert GenieCapacity().quotas(16) == dict(zip(GENIE_TYPES, (3, 3, 3, 3, 2, 2), strict=True))
    assert min(GenieCapacity().quotas(4).values()) == 1  # fewer GPUs than types: none starves
    keys = {"genie-fifo": lambda j: j.arrival, "genie-min-min": lambda j: j.deadline,
            "genie-weighted-fair": lambda j: 0.5 * j.arrival + 0.5 * j.deadline}
    for which in ("genie-fifo", "genie-min-min", "genie-weighted-fair", "genie-capacity"):
        rec = RecordingMechanism(make_mechanism(which))
        r = simulate(jobs, cl, make_policy("fifo"), rec, genie_models())
        assert not r.unfinished
        by_id = {js.id: js for js in r.finished}
        for (_, allocs), waiting in zip(rec.log, rec.waiting, strict=True):
            started = [js for js in waiting if js.id in allocs]
            for js in started:
                want = whole_gpus(js.job.gpus)
                if which == "genie-capacity":
                    want = min(want, quota[js.job.task])
                assert allocs[js.id].gpus == want  # the user's request (cut to the queue's quota)
            if which in keys:  # strict order: every task launched comes before every task left waiting
                left = [js for js in waiting if js.id not in allocs]
                if started and left:
                    k = keys[which]
                    assert max((k(js.job), js.arrival_key) for js in started) < min((k(js.job), js.arrival_key)
                                                                                    for js in left)
            if which == "genie-capacity":
                used: dict[str, float] = {}
                for jid, a in allocs.items():
                    used[by_id[jid].job.task] = used.get(by_id[jid].job.task, 0) + a.gpus
                assert all(used[q] <= quota[q] for q in used)  # no type beyond its capacity


# -- simulator invariants ---------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MECHS), st.integers(1, 3), st.floats(2, 30), st.integers(0, 10**6))
def test_simulator_invariants_under_genie(which, nodes, rate, seed):
    cl = genie_cluster(nodes)
    jobs = genie_trace(rate, hours=3, seed=seed)
    nu = genie_nu_s()
    rec = RecordingMechanism(make_mechanism(which))
    r = simulate(jobs, cl, make_policy("fifo"), rec, genie_models(), SimConfig(start_overhead_s=nu))
    assert not r.unfinished and len(r.finished) == len(jobs)
    first_alloc: dict[str, Allocation] = {}
    for t, allocs in rec.log:
        Ledger(cl).take_all(allocs.values())  # no device used twice, no server over-committed
        for jid, a in allocs.items():
            assert not a.is_fractional  # exclusive, whole GPUs
            first_alloc.setdefault(jid, a)
            assert a == first_alloc[jid]  # no preemption, no migration, no resizing
    for js in r.finished:
        assert js.preemptions == 0 and js.restarts == 0
        assert js.first_start >= js.job.arrival
        # it ran without a break on its placement: ν + samples / PR (eq. 4)
        m = js.perf
        pr = m.pr_split([int(sh.gpus) for sh in first_alloc[js.id].shares])
        assert js.finish - js.first_start == pytest.approx(nu + m.samples(js.job) / pr, rel=1e-9)
        assert js.run_time == pytest.approx(js.finish - js.first_start, rel=1e-9)
    g = genie_metrics(r)
    assert 0 <= g["qos_guarantee"] <= 1
    urgent = g["qos_by_class"]["urgent"]
    assert urgent == 0.0 or math.isnan(urgent)  # an ECT of 0 is never met


# -- workload, cards, metrics -------------------------------------------------------------------------------
def test_table3_trace():
    a = genie_trace(10, seed=3)
    assert a == genie_trace(10, seed=3)  # deterministic
    assert all(0 < j.arrival < 24 * 3600 for j in a) and 180 < len(a) < 300  # Poisson, 10/h over 24 h
    n = len(a)
    d = describe_trace(a, 16, 24)
    assert abs(d["training"] - n / 2) <= 1
    for c, share in zip(("urgent", "prior", "normal"), (0.05, 0.35, 0.60), strict=True):
        assert abs(d["qos"][c] - share * n) < 1
    assert set(d["types"]) == set(GENIE_TYPES) and all(v > 0 for v in d["types"].values())
    assert {j.gpus for j in a} == {1.0, 2.0, 4.0}
    for j in a:
        t, training, b = parse_model_key(j.model)
        assert t == j.task and b in (8, 16, 32, 64, 128)
        assert 10_000 <= round(genie_model(t, training, b).iterations(j)) <= 500_000
    assert 0.4 < d["offered_load"] < 1.0


def test_cards_come_from_the_measured_data():
    pytest.importorskip("pandas")
    import pandas as pd

    data = REPO / "datasets" / "cuda_h100.csv"
    if not data.exists():
        pytest.skip("datasets/ not in this checkout")
    df = pd.read_csv(data)
    feats = pd.read_csv(REPO / "datasets" / "zoo_features.csv").set_index("config")
    for gt in GENIE_TYPES.values():
        rows = df[df.config == gt.zoo_config].sort_values("batch_size")
        m = MEASURED[gt.zoo_config]
        assert [p[0] for p in m.points] == rows.batch_size.tolist()
        assert [p[1] for p in m.points] == pytest.approx(rows.iter_time_s.tolist(), rel=1e-12)
        assert [p[2] for p in m.points] == pytest.approx(rows.first_iter_extra_s.tolist(), rel=1e-12)
        assert m.param_bytes == feats.loc[gt.zoo_config, "param_bytes"]
        card = genie_card(gt.name)
        # the rate model reproduces the measured points within its own leave-one-out error scale
        for b, t, _ in m.points:
            assert card.iter_time(b) == pytest.approx(t, rel=0.35)
        cm = card.comm_model
        assert cm.gamma > 0 and 0 < cm.lambda_ and cm.identifiable["lambda"]
    tr, inf = genie_model("resnet50", True, 64.0), genie_model("resnet50", False, 64.0)
    assert inf.pr(Placement(1, 1)) == pytest.approx(3 * tr.pr(Placement(1, 1)))
    assert inf.comm(Placement(4, 4)) == 0 and tr.comm(Placement(4, 4)) > 0


def test_genie_metrics_by_hand():
    m = toy(batch=8, nu=0.0)
    lat11 = 1000.0
    work = lat11  # 1 GPU asked: work = Lat⟨1,1⟩ − ν
    jobs = [Job("u", 0.0, 1, work, model=m.name, qos="urgent", deadline=0.0),
            Job("p", 0.0, 1, work, model=m.name, qos="prior", deadline=lat11),
            Job("n", 0.0, 1, work, model=m.name, qos="normal", deadline=2 * lat11),
            Job("x", 0.0, 1, work, model=m.name, qos="normal", deadline=2 * lat11)]
    states = [JobState(j, m) for j in jobs]
    for js, start, fin in zip(states, (0.0, 0.0, 1500.0, None), (1000.0, 1000.0, 2500.0, None), strict=True):
        js.first_start, js.finish = start, fin
    g = genie_metrics(states)
    assert g["qos_guarantee"] == pytest.approx(1 / 4)  # only "p" met its ECT; the unfinished one did not
    assert g["qos_by_class"] == {"urgent": 0.0, "prior": 1.0, "normal": 0.0}
    assert g["makespan_s"] == 2500.0
    # eq. 16: L_wall is the walltime under the placement (start to completion); "n" waited 1500 s, ran 1000 s
    assert g["avg_norm_latency"] == pytest.approx((1 + 1 + 1) / 3)
    assert g["avg_norm_response"] == pytest.approx((1 + 1 + 2.5) / 3)  # waiting included
    states[0].first_start = None
    with pytest.raises(ValueError, match="start time"):
        genie_metrics(states)


def test_eq16_normalised_latency_is_the_run_not_the_wait():
    """Eq. 16 on a simulation: L_wall / Lat⟨1,1⟩ with L_wall the walltime under the chosen placement — queueing
    does not count (Tetris+Perf has "the most effective placement solutions" although its tasks wait, §7.2.1)."""
    cl = genie_cluster(1)
    jobs = genie_trace(20, hours=4, seed=1)
    r = simulate(jobs, cl, make_policy("fifo"), make_mechanism("genie-tetris-perf"), genie_models(),
                 SimConfig(start_overhead_s=genie_nu_s()))
    assert not r.unfinished
    g = genie_metrics(r)
    runs = [(js.finish - js.first_start) / js.perf.lat_single(js.job) for js in r.finished]
    resp = [(js.finish - js.job.arrival) / js.perf.lat_single(js.job) for js in r.finished]
    assert g["avg_norm_latency"] == pytest.approx(np.mean(runs))
    assert g["avg_norm_response"] == pytest.approx(np.mean(resp))
    assert any(js.first_start > js.job.arrival + 1.0 for js in r.finished)  # some tasks queued on 4 GPUs ...
    assert g["avg_norm_latency"] < g["avg_norm_response"]  # ... and that wait is not in eq. 16
    assert g["avg_norm_latency"] <= 1.0 + 1e-9  # the highest-PR placement is never slower than one GPU


def test_platform_and_model_keys():
    assert Platform.from_cluster(genie_cluster(8)) == Platform(8, 4)
    with pytest.raises(ValueError, match="symmetric"):
        Platform.from_cluster(ClusterSpec.from_dict({"servers": [{"gpus": 4}, {"gpus": 2}]}))
    assert parse_model_key(genie_model_key("seq2seq", False, 16)) == ("seq2seq", False, 16.0)
    with pytest.raises(ValueError):
        parse_model_key("resnet50")
    with pytest.raises(ValueError, match="GENIE task model"):
        TaskView.of(JobState(Job("a", 0, 1, 10, model="x"), PerfModel("plain")), Platform(1, 1))


# -- CLI ----------------------------------------------------------------------------------------------------
def test_cli_simulate_genie(tmp_path):
    from typer.testing import CliRunner

    from perfpredict.cli import app
    from perfpredict.sim.traces import write_csv_trace

    trace = tmp_path / "genie.csv"
    write_csv_trace(genie_trace(6, hours=2, seed=7), trace)
    out = tmp_path / "sim"
    res = CliRunner().invoke(app, ["simulate", "--cluster", "genie:nodes=2", "--trace", str(trace), "--mechanism",
                                   "swaf", "--mode", "event", "--no-mlflow", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "GENIE §7.1: QoS guarantee" in res.output
    doc = json.loads((out / "metrics.json").read_text())
    g = doc["genie"]
    rows = list(csv.DictReader(open(out / "jobs.csv")))
    assert g["n_tasks"] == len(rows) == doc["metrics"]["n_finished"] and 0 <= g["qos_guarantee"] <= 1
    res = CliRunner().invoke(app, ["simulate", "--cluster", "genie", "--trace", "genie:rate=4,hours=2,seed=1",
                                   "--mechanism", "genie-tetris-cer", "--no-mlflow", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["simulate", "--cluster", "genie", "--trace", "genie:rate=4,speed=2",
                                   "--mechanism", "swaf", "--no-mlflow", "-o", str(tmp_path / "c")])
    assert res.exit_code != 0 and "speed" in str(res.exception)


def test_experiment_fast(tmp_path):
    import subprocess
    import sys

    def run(out, *extra):
        return subprocess.run([sys.executable, str(REPO / "experiments" / "genie_qos.py"), "--fast", "--hours", "6",
                               *extra, "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=300)

    r = run(tmp_path, "--workers", "2")  # each trace in one of two worker processes
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    serial = run(tmp_path / "serial")
    assert serial.returncode == 0, serial.stderr[-3000:]
    timings = {"wall_s", "decision_ms"}
    assert [{k: v for k, v in row.items() if k not in timings} for row in res["rows"]] == [
        {k: v for k, v in row.items() if k not in timings}
        for row in json.loads((tmp_path / "serial" / "results.json").read_text())["rows"]]
    assert set(res["checks"]) == {"qos_10", "makespan_10", "qos_20", "makespan_20", "tables"}
    for c in res["checks"].values():
        assert f"{'PASS' if c['ok'] else 'FAIL'}: {c['text']}" in r.stdout
    assert res["checks"]["tables"]["ok"] and "| tasks/h (16 GPUs, mix 5/35/60) |" in r.stdout
    assert {row["method"] for row in res["rows"]} >= {"SWAF", "FIFO", "Capacity", "Min-Min", "Weighted Fair",
                                                       "Tetris+Perf", "Tetris+CER"}
    assert (tmp_path / "genie_qos.png").stat().st_size > 0


def test_genie_metrics_reach_mlflow(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from perfpredict.cli import app

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlruns.db")
    res = CliRunner().invoke(app, ["simulate", "--cluster", "genie:nodes=2", "--trace", "genie:rate=4,hours=1,seed=3",
                                   "--mechanism", "swaf", "--mode", "event", "-o", str(tmp_path / "sim")])
    assert res.exit_code == 0, res.output
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["perfpredict-simulations"])
    assert len(runs) == 1
    qos = runs.iloc[0]["metrics.genie.qos_guarantee"]
    assert 0 <= qos <= 1
