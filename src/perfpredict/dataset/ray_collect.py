"""Dataset collection across a Ray cluster: ``profilers/collect_dataset.py measure --ray ADDRESS`` and
``collect(..., ray_address=...)``.

ARCHITECTURE.md names "profiling a model zoo on many GPUs" as the other scale-out job for Ray (beside simulation
sweeps). Each architecture still to measure is one Ray task, and the task measures its points exactly as a local
run does (:func:`perfpredict.dataset.collect.measure_architecture`: a fresh process per architecture on CUDA,
per point on a CPU). What differs is only where the task runs and what it may share:

- **One measurement per device.** A CUDA task asks Ray for one whole GPU (``num_gpus=1``; Ray sets the task's
  ``CUDA_VISIBLE_DEVICES``, so it measures on ``cuda:0`` of what it sees), so a node with 8 GPUs measures 8
  architectures at once and no two share a GPU. They do share the node's host CPUs, which launch their kernels:
  each task asks for its GPU's share of them (and gets as many torch threads), and ``tasks_at_once``
  (``--tasks-at-once``) caps the tasks in flight where that matters. A CUDA task gets a fresh
  worker process (``max_calls=1``), so the fork server it starts sees that task's GPU and no earlier one's.
  A CPU task is pinned to a node and asks for all its CPUs, so a node measures one architecture at a time, as a
  local run does: two measurements sharing a CPU's cores, caches and memory bandwidth would time each other.
  Measuring processes run at niceness 0 where allowed (:func:`normal_priority`), and without ``--threads`` with
  torch's default threads, as locally (Ray's ``OMP_NUM_THREADS`` for the task is dropped).
- **One device type per file.** A dataset's time model is one machine's (two VMs both called "AMD EPYC" ran the
  same steps 0.75x apart), so the driver checks each finished task's device against the file's: the name in the
  results (what a row records as ``device_name``), or where no result has one, the name the node reports (NVML's
  GPU name, /proc/cpuinfo's CPU model and ``cpu_id``). A task from another device type writes no row, and the
  run's provenance lists it; its points stay to measure. A task whose device cannot be told writes no row either.
- **The driver writes.** Rows reach the CSV from the driver only, an architecture's rows when its task ends, so
  the file stays one append-only writer's and a resumed run skips what is there. A Ctrl-C cancels the tasks in
  flight: their architectures have no rows and are measured at the next run. A task that raised (``failed``,
  with its own error) or that Ray lost (``lost``: its worker or node died) is listed in the provenance and
  measured at the next run too.
- **No speed sentinel.** The sentinel times one fixed step on the machine that measures; with many machines
  there is no one such step, so a Ray run times none and its provenance says so.

Inputs: nothing but the plan travels (the zoo is part of the package), so the nodes need perfpredict installed,
not the dataset files.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perfpredict.errors import UsageError

if TYPE_CHECKING:
    from perfpredict.dataset.collect import ArchPlan, CollectSettings


def node_device(device_kind: str) -> dict[str, Any]:
    """This node's device as a dataset records it, read without torch (so the task's own process holds no CUDA
    context beside the measuring one): GPU name through NVML for the GPU Ray gave this task, or the CPU's model
    name and :func:`~perfpredict.hostinfo.cpu_id`."""
    from perfpredict.hostinfo import cpu_id, cpu_model_name, gpu_names

    node: dict[str, Any] = {"hostname": socket.gethostname()}
    if device_kind != "cuda":
        return {**node, "kind": "cpu", "name": cpu_model_name(), "cpu_id": cpu_id()}
    names = gpu_names()
    # a node with GPUs of several models cannot say which one Ray gave the task (NVML's order need not be CUDA's):
    # then only the results' own names count
    name = names[0] if len(set(names)) == 1 else None
    return {**node, "kind": "cuda", "name": name}


def normal_priority() -> int:
    """Put this process (and the measuring processes it starts) back at niceness 0 where allowed, returning the
    niceness it measures at. Ray starts its workers at niceness 15, so that anything else on the node goes first:
    a local run measures at 0, and a busy node would time a task at 15 against its other work. (On an idle node it
    makes no difference: ``benchmarks/collect_on_ray.py``'s ``nice -n 15`` arm.) Lowering niceness needs root or
    CAP_SYS_NICE; without them it stays, and the provenance records it."""
    try:
        now = os.getpriority(os.PRIO_PROCESS, 0)
        if now > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except (OSError, AttributeError):  # not allowed, or not a POSIX system: measure at what Ray gave
        pass
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (OSError, AttributeError):
        return 0


def measure_architecture_task(job: tuple[ArchPlan, list[int]], settings: CollectSettings) -> dict[str, Any]:
    """On a Ray worker: one architecture's points, measured as a local run measures them, with the node's
    device (:func:`node_device`)."""
    from perfpredict.dataset.collect import measure_architecture

    plan, batch_sizes = job
    if settings.threads is None:
        # Ray sets OMP_NUM_THREADS to the task's CPUs (its logical ones); a local run leaves torch its own default
        # (the physical cores), and the file's rows must be measured alike
        os.environ.pop("OMP_NUM_THREADS", None)
    kind = "cuda" if settings.device.startswith("cuda") else "cpu"
    here = dataclasses.replace(settings, device="cuda:0" if kind == "cuda" else "cpu")
    results: list[dict[str, Any]] = []
    node = {**node_device(kind), "niceness": normal_priority()}
    measure_architecture(plan, batch_sizes, here, results.append)
    return {"node": node, "results": results}


class SameDevice:
    """The one-device-type-per-file rule applied to finished tasks (see the module docstring)."""

    def __init__(self, kind: str, names: set[str], cpu_id: str | None) -> None:
        self.kind = kind
        self.names = set(names)
        self.cpu_id = cpu_id

    def refusal(self, out: dict[str, Any]) -> str | None:
        """Why a task's rows may not join the file, or None when they may (the first accepted task's device becomes
        the file's when the file has none yet)."""
        node = out.get("node") or {}
        infos = [r["device_info"] for r in out.get("results", []) if isinstance(r.get("device_info"), dict)]
        name = next((i.get("name") for i in infos if i.get("name")), None) or node.get("name")
        cid = next((i.get("cpu_id") for i in infos if i.get("cpu_id")), None) or node.get("cpu_id")
        kind = next((i.get("kind") for i in infos if i.get("kind")), None) or node.get("kind")
        host = node.get("hostname", "a node")
        if not name:
            return f"{host}: its device could not be told (no result named it and the node did not)"
        if kind and kind != self.kind:
            return f"{host} measured on {kind}, not {self.kind}"
        if self.names and name not in self.names:
            return f"{host} has {name}; the file holds {', '.join(sorted(self.names))}"
        if self.kind == "cpu" and self.cpu_id and cid and cid != self.cpu_id:
            return f"{host} is {name} ({cid}); the file's CPU is {self.cpu_id}"
        self.names = self.names or {name}
        if self.kind == "cpu" and not self.cpu_id:
            self.cpu_id = cid
        return None


def task_slots(ray: Any, device_kind: str, tasks_at_once: int | None = None) -> dict[str, Any]:
    """How measuring tasks are placed: ``options`` for every task and one ``slots`` entry per task that may run at
    once (a task in flight holds one; :func:`perfpredict.ray_cluster.ray_map`), the first ``tasks_at_once`` of
    them if given, and ``described``, the same for the provenance.

    CUDA: one slot per GPU in the cluster; a task asks for one GPU and its GPU's share of the node's CPUs (the
    smallest share over the GPU nodes), so Ray does not crowd a node's host with more work than its GPUs. CPU: one
    slot per node, pinned to it (a hard node affinity) and asking for all its CPUs, so two measurements never
    share a node even where nodes differ in size."""
    from perfpredict.ray_cluster import node_resources

    nodes = node_resources(ray)
    if device_kind == "cuda":
        shares = [cpus // gpus for _, cpus, gpus in nodes if gpus > 0]
        if not shares:
            raise UsageError("--device cuda on Ray: the cluster has no GPUs (ray.cluster_resources() lists none); "
                             "start the GPU nodes' raylets with their GPUs or use --device cpu", step="device")
        options = {"num_gpus": 1, "num_cpus": max(1, min(shares)), "max_calls": 1}
        slots: list[dict[str, Any]] = [{} for _, _, gpus in nodes for _ in range(gpus)]
        described: list[dict[str, Any]] = [dict(options) for _ in slots]
    else:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpu_nodes = [(node_id, cpus) for node_id, cpus, _ in nodes if cpus > 0]
        if not cpu_nodes:
            raise UsageError("--ray: the cluster has no CPUs to measure on", step="device")
        options = {}
        slots = [{"num_cpus": cpus, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
                 for node_id, cpus in cpu_nodes]
        described = [{"num_cpus": cpus, "node_id": node_id} for node_id, cpus in cpu_nodes]
    n = min(len(slots), tasks_at_once) if tasks_at_once else len(slots)
    return {"options": options, "slots": slots[:n], "described": described[:n]}


def measure_on_ray(ray: Any, jobs: list[tuple[ArchPlan, list[int]]], settings: CollectSettings,
                   gate: SameDevice, record: Callable[[ArchPlan, dict[str, Any]], None],
                   keep_going: Callable[[], bool], placing: dict[str, Any], into: dict[str, Any]) -> None:
    """Every job as a Ray task placed as :func:`task_slots` says (see the module docstring), ``record``-ing each
    accepted task's results as it ends. ``into`` (the run's provenance) gets, as they happen, the nodes that
    measured, the tasks refused, failed or lost, and at the end how many jobs the time budget left unstarted: a
    Ctrl-C keeps what was recorded so far."""
    from perfpredict.errors import error_line
    from perfpredict.ray_cluster import ray_map

    nodes: dict[str, dict[str, Any]] = {}
    refused: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    lost: list[dict[str, str]] = []
    into.update(task_resources=placing["described"], tasks_at_once=len(placing["slots"]), measured_by=nodes,
                refused=refused, failed=failed, lost=lost)

    def finished(i: int, ref: Any) -> None:
        plan = jobs[i][0]
        try:
            out = ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the task itself raised: its own error, not Ray's wrapping
            cause = getattr(e, "cause", None)
            failed.append({"config": plan.config, "error": error_line(cause if cause is not None else e)})
            return
        except Exception as e:  # noqa: BLE001 - a worker or node Ray lost must not lose the other architectures
            lost.append({"config": plan.config, "error": error_line(e)})
            return
        reason = gate.refusal(out)
        host = (out.get("node") or {}).get("hostname", "?")
        if reason:
            refused.append({"config": plan.config, "points": len(out.get("results", [])), "why": reason})
            return
        entry = nodes.setdefault(host, {"device": next(iter(gate.names)), "architectures": 0, "rows": 0,
                                        "niceness": []})
        entry["architectures"] += 1
        nice = (out.get("node") or {}).get("niceness")
        if nice is not None and nice not in entry["niceness"]:
            entry["niceness"] = sorted([*entry["niceness"], nice])
        for res in out.get("results", []):
            entry["rows"] += 1
            record(plan, res)

    into["not_started"] = ray_map(ray, measure_architecture_task, jobs, finished, args=(settings,),
                                  options=placing["options"], keep_going=keep_going, slots=placing["slots"])


__all__ = ["SameDevice", "measure_architecture_task", "measure_on_ray", "node_device", "normal_priority",
           "task_slots"]
