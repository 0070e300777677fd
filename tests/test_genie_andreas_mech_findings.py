"""Findings of the GENIE/ANDREAS mechanism-conformance scan (seed 003 Alg. 1 and §7.1; seed 000 §III-V)."""

from __future__ import annotations

import pytest

from perfpredict.sched import Job, make_policy
from perfpredict.sched.base import UnsupportedInput
from perfpredict.sched.genie_cards import genie_models
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sim.genie_workload import genie_cluster
from perfpredict.sim.simulator import simulate

#: the GENIE schedulers that compute each task's ECT or latency (Capacity orders by arrival only and needs neither)
GENIE_MECHS = ("swaf", "genie-fifo", "genie-min-min", "genie-weighted-fair", "genie-tetris-perf", "genie-tetris-cer")


@pytest.mark.parametrize("which", GENIE_MECHS)
def test_unknown_qos_class_without_deadline_is_a_usage_error(which):
    """A trace task with a QoS class outside eq. 9 and no deadline has no ECT: every GENIE scheduler must refuse it
    as unsupported input (reported as a usage error naming the job), not as an internal error."""
    models = genie_models()
    key = next(k for k in models if k.endswith("/train/b32"))
    jobs = [Job("a", 0.0, 1, 100.0, model=key, qos="high")]
    with pytest.raises(UnsupportedInput, match="job a: unknown QoS class 'high'"):
        simulate(jobs, genie_cluster(1), make_policy("fifo"), make_mechanism(which), models)
    if which == "swaf":  # Capacity needs no ECT and runs the task
        r = simulate(jobs, genie_cluster(1), make_policy("fifo"), make_mechanism("genie-capacity"), models)
        assert [js.id for js in r.finished] == ["a"]
