"""Findings of the simulator-semantics scan: hand-built cases with exact expected numbers.

* With a decision period (``SimConfig.period_s`` / ``Mechanism.period_s``), a decision that suspends every job
  after the last arrival was declared a stall ("nothing else will happen") although the periodic decision was due.
* An overhead cut short by the next change is time lost, not owed (documented in ``perfpredict.sim.simulator``
  and docs/simulator.md; the scan proposed charging the rest, which was not taken: the restart it interrupted
  never completes).
"""

from __future__ import annotations

import pytest

from perfpredict.sched import Allocation, ClusterSpec
from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Share
from perfpredict.sched.job import Job
from perfpredict.sched.perf import PerfModel
from perfpredict.sim import SimConfig, simulate

LIN = {"lin": PerfModel("lin")}  # linear in GPUs, insensitive to CPUs and memory: rate 1 on one GPU


class Scripted(Mechanism):
    """Places each job on the devices ``script(now)`` names for it (``{id: device}``) on server 0; others wait."""

    name = "scripted"
    preemptive, rigid, round_based = True, False, False

    def __init__(self, script) -> None:
        super().__init__()
        self.script = script

    def allocate(self, ordered, cluster, running, now):
        spec = self.script(now, [js.id for js in ordered])
        return {jid: Allocation((Share(0, 1.0, 3.0, 10.0, devices=(d,)),)) for jid, d in spec.items()}


def _one(script, cfg):
    res = simulate([Job("J", 0.0, 1, 1000.0, model="lin")], ClusterSpec.homogeneous(1, gpus=2), "fifo",
                   Scripted(script), LIN, cfg)
    assert res.stall is None, res.stall
    (js,) = res.finished
    return js


@pytest.mark.parametrize("mode", ["round", "event"])
def test_suspending_every_job_is_not_a_stall_when_a_periodic_decision_is_due(mode):
    # suspended at 300, resumed by the periodic decision at 600 (50 s restart overhead)
    def script(now, ids):
        return {} if 300 <= now < 600 else {"J": 0}

    js = _one(script, SimConfig(mode=mode, round_s=300.0, restart_overhead_s=50.0, period_s=300.0))
    assert (js.preemptions, js.restarts) == (1, 1)
    assert js.finish == pytest.approx(1000.0 + 300.0 + 50.0)


def test_a_mechanism_that_never_places_anything_with_a_period_still_stops():
    class Never(Mechanism):
        name = "never"
        round_based = False

        def allocate(self, ordered, cluster, running, now):
            return {}

    res = simulate([Job("J", 0.0, 1, 100.0, model="lin")], ClusterSpec.homogeneous(1, gpus=1), "fifo", Never(),
                   LIN, SimConfig(mode="event", period_s=60.0))
    assert res.stall is not None and not res.finished


def test_a_move_during_the_last_moves_overhead_loses_the_time_spent_and_starts_over():
    # device 0 until 300, device 1 from 300, device 0 again from 330 (decisions every 30 s); 50 s per move: the
    # second move cuts the first one's overhead after 30 s (lost) and starts its own 50 s
    def script(now, ids):
        return {"J": 0 if now < 300 or now >= 330 else 1}

    js = _one(script, SimConfig(mode="event", restart_overhead_s=50.0, period_s=30.0))
    assert js.restarts == 2
    assert js.finish == pytest.approx(300.0 + 30.0 + 50.0 + 700.0)
