"""Scale scan (session 46): work per decision that grew with the cluster's servers or devices times the queue.

* ``Ledger.total_free_gpus`` summed every server's count on each call, and FIFO-exclusive asked it once per
  queued job, on with the scan after the cluster was full: a decision was O(queue x servers).
* Moldable/malleable placement (``DeviceState.choose_whole``, ``n_vacant``) tested every device of the cluster
  for vacancy on every placement: O(devices) per placement.

The fixes keep every result the same; these tests check that (against the old algorithms, written out here)
and count the work, never time it.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger, ServerSpec
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.mechanisms.horus import FifoExclusive
from perfpredict.sched.mechanisms.moldable import DeviceState
from perfpredict.sched.perf import PerfModel
from perfpredict.sim.simulator import simulate
from perfpredict.sim.traces import dl_bag_trace, synergy_trace


class _CountingList(list):
    iterations = 0

    def __iter__(self):
        type(self).iterations += 1
        return super().__iter__()


def _random_changes(led: Ledger, rng: random.Random, steps: int) -> None:
    """Random takes and releases (exclusive, fractional, shared, and the proportional shortcuts)."""
    held: list[tuple[str, object]] = []
    spec = led.spec
    for _ in range(steps):
        if held and rng.random() < 0.4:
            kind, a = held.pop(rng.randrange(len(held)))
            if kind == "prop":
                led.release_proportional(*a)
            else:
                led.release(a)
            continue
        i = rng.randrange(spec.n_servers)
        srv = spec.servers[i]
        kind = rng.choice(["whole", "frac", "shared", "prop"])
        if kind == "frac":
            d = rng.randrange(srv.gpus)
            a = Allocation.fraction(i, d, rng.choice([0.25, 0.5]), cpus=0.1, mem_gb=0.1)
        else:
            free = led.free_devices(i)
            if not free:
                continue
            devs = rng.sample(free, rng.randint(1, len(free)))
            if kind == "prop":
                args = ({i: devs}, 0.1 * len(devs), 0.1 * len(devs), 0.0)
                led.take_proportional(*args)
                held.append(("prop", args))
                continue
            if kind == "shared":
                a = Allocation.shared_devices({i: devs}, cpus_per_gpu=0.01, mem_gb_per_gpu=0.01, device_mem_gb=0.0)
            else:
                a = Allocation.proportional({i: devs}, cpus=0.1 * len(devs), mem_gb=0.1 * len(devs))
        if led.fits(a) is None:
            led.take(a)
            held.append((kind, a))


@pytest.mark.parametrize("seed", range(6))
def test_total_free_gpus_stays_the_count_of_whole_free_devices(seed):
    rng = random.Random(seed)
    spec = ClusterSpec(tuple(ServerSpec(gpus=rng.randint(1, 8)) for _ in range(rng.randint(1, 12))))
    led = Ledger(spec)
    for _ in range(20):
        _random_changes(led, rng, 15)
        want = sum(1 for row in led.device_free for f in row if f >= 1 - EPS)
        assert led.total_free_gpus == want == sum(led.free_whole)
        copy = led.copy()
        assert copy.total_free_gpus == want
        _random_changes(copy, rng, 5)  # a copy's changes leave the original's count alone
        assert led.total_free_gpus == want


def test_total_free_gpus_does_not_go_over_the_servers():
    led = Ledger(ClusterSpec.homogeneous(512))
    led.take(Allocation.proportional({3: [0, 1]}, cpus=1, mem_gb=1))
    led.free_whole = _CountingList(led.free_whole)
    _CountingList.iterations = 0
    for _ in range(1000):
        assert led.total_free_gpus == 512 * 8 - 2
    assert _CountingList.iterations == 0  # it used to sum all 512 servers on each of the 1000 calls


class _CountingFifo(FifoExclusive):
    """FIFO-exclusive whose ledger counts how often a decision asks for the free GPUs."""

    asked = 0

    def current_ledger(self, cluster, running):
        led = super().current_ledger(cluster, running)
        led.__class__ = _CountingLedger
        return led


class _CountingLedger(Ledger):
    @property
    def total_free_gpus(self) -> int:
        _CountingFifo.asked += 1
        return super().total_free_gpus


class _OldFifo(FifoExclusive):
    """FIFO-exclusive as it was: every queued job is looked at, full cluster or not."""

    def allocate(self, ordered, cluster, running, now):
        from perfpredict.sched.mechanisms.horus import _lam
        from perfpredict.sched.placement import choose_devices, proportional_allocation

        out, ledger, pending = self._start(cluster, running, ordered)
        for js in pending:
            if sum(ledger.free_whole) < _lam(js):
                continue
            devices = choose_devices(ledger, _lam(js), device_mem_gb=js.device_mem_request_gb)
            if devices is None:
                continue
            alloc = proportional_allocation(ledger, devices, js.device_mem_request_gb)
            if ledger.fits(alloc) is not None:
                continue
            ledger.take(alloc)
            out[js.id] = alloc
        return out


def _states(n: int, gpus: float = 1.0) -> list[JobState]:
    return [JobState(Job(id=f"j{i}", arrival=0.0, gpus=gpus, work=100.0), PerfModel("m")) for i in range(n)]


def test_fifo_exclusive_stops_looking_once_no_gpu_is_free():
    spec = ClusterSpec.homogeneous(2, gpus=4)
    mech = _CountingFifo()
    _CountingFifo.asked = 0
    out = mech.allocate(_states(2000), spec, {}, 0.0)
    assert sorted(out, key=lambda k: int(k[1:])) == [f"j{i}" for i in range(8)]
    assert _CountingFifo.asked <= 10  # was 2000: one per queued job, each summing every server


@pytest.mark.parametrize("trace", ["synergy", "mixed"])
def test_fifo_exclusive_decides_as_before(trace):
    if trace == "synergy":
        jobs = synergy_trace(300, seed=5)  # every job arrives at 0: a long queue on a full cluster
    else:
        jobs = [Job(id=f"m{i}", arrival=float(i // 7), gpus=float(1 + i % 5), work=50.0 + 13 * (i % 11))
                for i in range(200)]
    spec = ClusterSpec(tuple([ServerSpec(gpus=8)] * 3 + [ServerSpec(gpus=2, gpu_mem_gb=80)] * 2))
    perf = {j.model: PerfModel(j.model) for j in jobs}
    new = simulate(jobs, spec, "fifo", FifoExclusive(), perf)
    old = simulate(jobs, spec, "fifo", _OldFifo(), perf)
    assert len(new.finished) == len(jobs)
    key = [(s.id, s.first_start, s.finish, s.preemptions) for s in new.states]
    assert key == [(s.id, s.first_start, s.finish, s.preemptions) for s in old.states]
    assert new.usage == old.usage


# -- moldable/malleable: DeviceState ---------------------------------------------------------------------
def _old_choose_whole(state: DeviceState, n, mem, prefer=None, exclude=None):
    """choose_whole as it was: every device of every server tested for vacancy."""
    exclude = exclude or set()
    if prefer is not None and not prefer.is_fractional and abs(prefer.gpus - n) < EPS:
        devs = [(s.server, d) for s in prefer.shares for d in s.devices]
        if all(0 <= i < state.cluster.n_servers and 0 <= d < state.cluster.servers[i].gpus
               and state.vacant(i, d) and (i, d) not in exclude
               and mem <= state.cluster.servers[i].gpu_mem_gb + EPS for i, d in devs):
            return {s.server: list(s.devices) for s in prefer.shares}
    free = []
    for i, srv in enumerate(state.cluster.servers):
        if mem > srv.gpu_mem_gb + EPS:
            continue
        vac = [d for d in range(srv.gpus) if state.vacant(i, d) and (i, d) not in exclude]
        if vac:
            free.append((len(vac), i, vac))
    fitting = [t for t in free if t[0] >= n]
    if fitting:
        _, i, vac = min(fitting, key=lambda t: (t[0], t[1]))
        return {i: vac[:n]}
    chosen = {}
    need = n
    for f, i, vac in sorted(free, key=lambda t: (-t[0], t[1])):
        if need <= 0:
            break
        chosen[i] = vac[:min(f, need)]
        need -= len(chosen[i])
    return chosen if need <= 0 else None


def _old_p_avl(state: DeviceState) -> float:
    return sum(max(0.0, state.free(i, d)) for i, d in state.devices())


@pytest.mark.parametrize("seed", range(8))
def test_device_state_placement_queries_match_a_scan_of_every_device(seed):
    rng = random.Random(seed)
    spec = ClusterSpec(tuple(ServerSpec(gpus=rng.choice([1, 2, 4, 8]), gpu_mem_gb=rng.choice([16.0, 32.0, 80.0]))
                             for _ in range(rng.randint(1, 10))))
    state = DeviceState(spec)
    for step in range(40):
        n_vac = sum(1 for i, d in state.devices() if state.vacant(i, d))
        assert state.n_vacant == n_vac
        assert state.p_avl == _old_p_avl(state)
        for n in range(1, spec.total_gpus + 2):
            for mem in (0.0, 20.0, 40.0, 100.0):
                assert state.choose_whole(n, mem) == _old_choose_whole(state, n, mem), (step, n, mem)
        excl = {(rng.randrange(spec.n_servers), 0)}
        assert state.choose_whole(2, 0.0, exclude=excl) == _old_choose_whole(state, 2, 0.0, exclude=excl)
        copy = state.copy()
        assert copy.n_vacant == n_vac
        before = [[list(d) for d in srv] for srv in state.shares]
        # change the state: a whole-device job, or a fraction of some device
        i = rng.randrange(spec.n_servers)
        if rng.random() < 0.5:
            js = JobState(Job(id=f"w{step}", arrival=0.0, gpus=1.0, work=1.0),
                          PerfModel("m", device_mem_gb=rng.choice([0.0, 10.0])))
            state.place(js, float(rng.randint(1, 4)))
        else:
            d = rng.randrange(spec.servers[i].gpus)
            if state.can_share(i, d, 0.5, 1.0):
                state.take(state.fraction_alloc(i, d, 0.5, 1.0))
        assert copy.n_vacant == n_vac  # a copy keeps its own counts and shares
        assert copy.shares == before
        if step % 5 == 0:  # and changing the copy leaves the original alone
            now = [[list(d) for d in srv] for srv in state.shares]
            j = rng.randrange(spec.n_servers)
            if copy.can_share(j, 0, 0.25, 0.0):
                copy.take(copy.fraction_alloc(j, 0, 0.25, 0.0))
                assert state.shares == now and copy.shares != now


class _CountingState(DeviceState):
    tested = 0

    def vacant(self, i, d):
        _CountingState.tested += 1
        return super().vacant(i, d)


def test_a_placement_does_not_test_every_device_of_a_large_cluster():
    spec = ClusterSpec.homogeneous(256)  # 2048 GPUs
    state = _CountingState(spec)
    _CountingState.tested = 0
    for k in range(20):
        js = JobState(Job(id=f"j{k}", arrival=0.0, gpus=2.0, work=1.0), PerfModel("m"))
        assert state.place(js, 2.0) is not None
    assert _CountingState.tested < 1000  # was 20 x 2048: every device on every placement


@pytest.mark.parametrize("name", ["malleable-equipartition", "moldable-equipartition", "malleable-proportional"])
def test_moldable_runs_decide_as_with_the_full_scan(name, monkeypatch):
    # arrivals 50 times denser than the generator's, on servers that differ in device memory: between them the
    # three runs reach Equipartition's cases 1-4 and Proportional's 2-3, with preemptions (malleable-proportional)
    jobs = [dataclasses.replace(j, arrival=j.arrival / 50) for j in dl_bag_trace(100, seed=7)]
    spec = ClusterSpec(tuple([ServerSpec(gpus=8, gpu_mem_gb=16)] * 2 + [ServerSpec(gpus=4, gpu_mem_gb=80)] * 2))
    from perfpredict.sim.run import load_perf_models

    perf = load_perf_models("paper")

    def run():
        r = simulate(jobs, spec, "fifo", make_mechanism(name, p_min=0.25), perf)
        assert len(r.finished) == len(jobs)
        return [(s.id, s.first_start, s.finish, s.preemptions, s.restarts) for s in r.states], r.usage

    new = run()
    monkeypatch.setattr(DeviceState, "choose_whole", _old_choose_whole)
    monkeypatch.setattr(DeviceState, "n_vacant",
                        property(lambda s: sum(1 for i, d in s.devices() if s.vacant(i, d))))
    monkeypatch.setattr(DeviceState, "p_avl", property(_old_p_avl))
    assert new == run()

