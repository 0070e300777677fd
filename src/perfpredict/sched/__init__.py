"""Scheduler core: cluster and job model, performance models read from cards, policies and mechanisms."""

from perfpredict.sched.base import Mechanism, Policy
from perfpredict.sched.cluster import (
    Allocation,
    CapacityError,
    ClusterSpec,
    Ledger,
    ServerSpec,
    Share,
)
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.perf import PerfModel
from perfpredict.sched.policies import make_policy

__all__ = [
    "Allocation", "CapacityError", "ClusterSpec", "Job", "JobState", "Ledger", "Mechanism", "PerfModel", "Policy",
    "ServerSpec", "Share", "make_policy",
]
