"""Findings of a review of the property-scan fixes (ANDREAS, GENIE eq. 14, Synergy's full-memory cache), each
checked on a small exact case."""

from __future__ import annotations

import dataclasses
import types

import torch

from perfpredict.sched import make_policy
from perfpredict.sched.cluster import ClusterSpec, ServerSpec
from perfpredict.sched.genie_cards import genie_models, genie_nu_s
from perfpredict.sched.job import Job
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.perf import PerfModel
from perfpredict.sim.genie_workload import genie_cluster, genie_metrics, genie_trace
from perfpredict.sim.simulator import SimConfig, simulate


def test_genie_metrics_count_a_task_of_an_unknown_qos_class_as_missed():
    """A mechanism that never reads ECTs (rigid) runs a task of a class eq. 9 does not know; eq. 14 has no ECT
    for it, so it cannot meet one. genie_metrics raised ValueError after the whole simulation had run (and
    `perfpredict simulate` lost the run) once it computed eq. 9 for tasks without a deadline."""
    jobs = [dataclasses.replace(j, deadline=None, qos="gold" if i == 0 else j.qos)
            for i, j in enumerate(genie_trace(8, hours=1, seed=1))]
    res = simulate(jobs, genie_cluster(2), make_policy("fifo"), make_mechanism("rigid"), genie_models(),
                   SimConfig(start_overhead_s=genie_nu_s()))
    g = genie_metrics(res)
    known = genie_metrics([js for js in res.states if js.job.qos != "gold"])
    assert g["n_tasks"] == known["n_tasks"] + 1
    assert g["n_met"] == known["n_met"] and g["qos_by_class"] == known["qos_by_class"]


class _Rows(torch.utils.data.Dataset):
    """An in-memory dataset whose items are rows of one tensor (views of it), declaring its total bytes."""

    def __init__(self, n: int, k: int) -> None:
        self.data = torch.arange(n * k, dtype=torch.int32).reshape(n, k)
        self.dataset_bytes = self.data.numel() * self.data.element_size()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return self.data[i], i % 10


def test_full_memory_cache_of_tensor_views_holds_the_rows_not_the_whole_tensor():
    """Pickling data[i] writes all of data: the cache stored every row as the whole tensor, and the full-memory
    arena, sized from item 0's stored bytes, grew as n² (here 200 rows of 256 B: 12.8 MB for a 51 kB set)."""
    from perfpredict.data.minio_cache import stored_bytes
    from perfpredict.profile.pipeline_worker import prepare_dataset

    src = _Rows(200, 64)
    row = src[3]
    assert stored_bytes(row) == stored_bytes((row[0].clone(), row[1]))
    ds = prepare_dataset(types.SimpleNamespace(make_dataset=lambda: src))
    assert ds.capacity_bytes < 4 * (src.dataset_bytes + 1024 * len(src))
    assert ds.warm() == len(src)
    x, y = ds[7]
    assert torch.equal(x, src.data[7]) and y == 7


def test_andreas_baseline_starts_a_job_behind_ones_that_fit_nowhere():
    """One free T4 (16 GB) while b (24 GB) waits for the V100: c (8 GB) fits the T4 and starts at once. The
    baseline looked only at as many waiting jobs as there were free GPUs, so c waited for a to finish."""
    cl = ClusterSpec(servers=(ServerSpec(gpus=1, cpus=8, mem_gb=64, gpu_type="V100", gpu_mem_gb=32, energy_cost=0.36),
                              ServerSpec(gpus=1, cpus=8, mem_gb=64, gpu_type="T4", gpu_mem_gb=16, energy_cost=0.1)))
    models = {"big": PerfModel("big", device_mem_gb=24), "small": PerfModel("small", device_mem_gb=8)}
    jobs = [Job("a", 0.0, 1, 1000.0, model="big"), Job("b", 10.0, 1, 100.0, model="big"),
            Job("c", 20.0, 1, 100.0, model="small")]
    for pol in ("fifo", "edf", "priority"):
        r = simulate(jobs, cl, make_policy(pol), make_mechanism("andreas-baseline"), models)
        got = {js.id: (js.first_start, js.finish) for js in r.finished}
        assert got == {"a": (0.0, 1000.0), "b": (1000.0, 1100.0), "c": (20.0, 120.0)}
