"""Resumable collection of a measured dataset: zoo architectures × batch sizes on one device.

Every row is one (architecture, batch size, mode) measured with perfpredict's own worker
(:func:`perfpredict.profile.worker.measure_point`: warm-up, per-iteration timing with device sync, peak
memory, NVML utilisation and energy on CUDA). Rows are appended to a CSV as they are measured, so an
interrupted sweep loses nothing and a re-run measures only what is missing.

Process isolation differs by device, on purpose:

- **CPU**: one fresh process per point (the profiler's fork server), because the RSS high-water mark that
  CPU memory is read from cannot be separated between two models in one process.
- **CUDA**: one fresh process per *architecture*, measuring its batch sizes in ascending order. CUDA
  context creation costs ~1 s per process, which would dominate a short GPU lease; torch's peak-allocated
  counter is reset between points and the caching allocator emptied, so the memory of each point is still
  its own. After an out-of-memory point the larger batch sizes of that architecture are not attempted.

Each dataset has a ``.meta.json`` beside it with its provenance: one entry per collection run (device,
driver, CUDA and torch versions, date, command, git commit).
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.profile.request import PointRequest
from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.spec import WorkloadRef

#: Columns of a measured dataset CSV, in file order. ``config`` joins it to the features table.
DATASET_COLUMNS = [
    "config", "family", "batch_size", "mode", "device_kind", "device_name", "status", "phase", "error",
    "iter_time_s", "iter_time_p10_s", "iter_time_p90_s", "iter_time_cv", "iterations", "samples_per_s",
    "peak_memory_bytes", "memory_kind", "cuda_reserved_bytes", "nvml_process_bytes", "nvml_context_bytes",
    "gpu_utilization", "utilization_samples", "mean_power_w", "energy_per_iter_j", "threads",
    "first_iter_extra_s", "measured_at",
]

#: Statuses that are final answers for a point (a re-run does not measure them again).
FINAL_STATUSES = ("ok", "oom")

#: Timing used for datasets on CUDA: GPU iteration times are steady, so a 1 s window is enough.
CUDA_DATASET_TIMING = TimingConfig(warmup_iters=3, warmup_s=0.3, min_iters=10, min_time_s=1.0, max_time_s=5.0)


@dataclass(frozen=True)
class ArchPlan:
    """One architecture of the sweep and the batch sizes to measure it at."""

    family: str
    cfg: Mapping[str, Any]
    config: str
    batch_sizes: tuple[int, ...]
    gmacs_per_sample: float

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(kind="zoo", target=self.family, params=tuple(sorted(self.cfg.items())))


def plan_sweep(families: Iterable[str] | None = None, batch_sizes: Iterable[int] | None = None,
               max_gmacs: float | None = None, max_sample_gmacs_per_iter: float | None = None,
               max_param_bytes: float | None = None) -> list[ArchPlan]:
    """The zoo grid as a list of :class:`ArchPlan`, filtered by forward GMACs per sample.

    ``batch_sizes`` overrides each family's default sweep. ``max_sample_gmacs_per_iter`` drops the batch
    sizes whose forward GMACs per iteration (GMACs/sample × batch) exceed it, so slow devices skip points
    that would take tens of seconds each. ``max_param_bytes`` drops architectures whose fp32 weights exceed it
    (training holds about three copies: weights, gradients, momentum), e.g. the multi-GB DLRM tables on a
    small CPU machine, where FLOP filters do not catch them.
    """
    from perfpredict.workload.zoo import enumerate_configs, get_family

    plans = []
    for fam_name in (list(families) if families else [None]):
        for name, cfg in enumerate_configs(fam_name):
            fam = get_family(name)
            gmacs = fam.closed_form_macs(cfg) / 1e9
            if max_gmacs is not None and gmacs > max_gmacs:
                continue
            params = fam.closed_form_params(cfg)
            if max_param_bytes is not None and params is not None and 4 * params > max_param_bytes:
                continue
            bss = tuple(sorted(batch_sizes or fam.default_batch_sizes))
            if max_sample_gmacs_per_iter is not None:
                bss = tuple(b for b in bss if gmacs * b <= max_sample_gmacs_per_iter)
            if bss:
                plans.append(ArchPlan(name, cfg, fam.config_name(cfg), bss, gmacs))
    return _interleave_families(plans)


def _interleave_families(plans: list[ArchPlan]) -> list[ArchPlan]:
    """Round-robin over families (each family's own order kept), so a sweep cut short by a time budget
    still covers every family rather than only the first few."""
    by_family: dict[str, list[ArchPlan]] = {}
    for p in plans:
        by_family.setdefault(p.family, []).append(p)
    queues = list(by_family.values())
    out: list[ArchPlan] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def row_from_result(plan: ArchPlan, res: Mapping[str, Any], mode: str, device_kind: str) -> dict[str, Any]:
    """Flatten one worker result dict into a dataset row."""
    timing = res.get("timing") or {}
    memory = res.get("memory") or {}
    energy = res.get("energy") or {}
    info = res.get("device_info") or {}
    median = timing.get("median_s")
    bs = int(res.get("batch_size", 0))
    return {
        "config": plan.config, "family": plan.family, "batch_size": bs, "mode": mode,
        "device_kind": info.get("kind", device_kind), "device_name": info.get("name"),
        "status": res.get("status"), "phase": res.get("phase"), "error": (res.get("error") or None),
        "iter_time_s": median, "iter_time_p10_s": timing.get("p10_s"), "iter_time_p90_s": timing.get("p90_s"),
        "iter_time_cv": timing.get("cv"), "iterations": timing.get("iterations"),
        "samples_per_s": bs / median if median else None,
        "peak_memory_bytes": memory.get("peak_bytes"), "memory_kind": memory.get("kind"),
        "cuda_reserved_bytes": memory.get("cuda_reserved_bytes"),
        "nvml_process_bytes": memory.get("nvml_process_bytes"), "nvml_context_bytes": memory.get("baseline_bytes")
        if memory.get("kind", "").startswith("cuda") else None,
        "gpu_utilization": energy.get("gpu_utilization"), "utilization_samples": energy.get("utilization_samples"),
        "mean_power_w": energy.get("mean_power_w"), "energy_per_iter_j": energy.get("energy_per_iter_j"),
        "threads": res.get("threads"),
        "first_iter_extra_s": (res.get("startup") or {}).get("first_iter_extra_s"),
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------------------
# CUDA: one process per architecture
# ---------------------------------------------------------------------------------------------------------
def _arch_entry(reqs: list[PointRequest], conn) -> None:
    """Child: measure each request in turn in this process, sending each result as soon as it exists."""
    import gc

    import torch

    from perfpredict.profile.worker import measure_point

    try:
        for req in reqs:
            res = measure_point(req)
            conn.send(res)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            if res.get("status") == "oom":
                break  # larger batches of this architecture would only run out of memory too
    finally:
        conn.close()


def run_arch_in_subprocess(reqs: list[PointRequest], timeout_s: float,
                           on_result: Callable[[dict[str, Any]], None]) -> None:
    """Run ``reqs`` in one fresh process; call ``on_result`` for each point, including a failed last one.

    If the process dies or times out, the point it was measuring gets a status that says how (``oom`` for
    SIGKILL, ``error`` for another death, ``timeout``); points it never reached get no row, so a re-run
    measures them.
    """
    from perfpredict.profile.runner import _ctx

    ctx = _ctx()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_arch_entry, args=(reqs, send), name="perfpredict-arch", daemon=True)
    got = 0
    deadline = time.monotonic() + timeout_s
    try:
        proc.start()
        send.close()
        while got < len(reqs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if recv.poll(min(remaining, 0.5)):
                try:
                    res = recv.recv()
                except EOFError:
                    break
                got += 1
                on_result(res)
                if res.get("status") == "oom":
                    return
            elif not proc.is_alive() and not recv.poll(0.1):
                break
        if got >= len(reqs):
            return
        bs = reqs[got].batch_size
        if proc.is_alive() and time.monotonic() >= deadline:
            proc.kill()
            proc.join(timeout=10)
            on_result({"status": "timeout", "batch_size": bs, "phase": "measure",
                       "error": f"no result within the architecture's {timeout_s:.0f} s budget"})
            return
        proc.join(timeout=10)
        code = proc.exitcode
        if code is not None and code < 0 and -code == 9:
            on_result({"status": "oom", "batch_size": bs, "phase": "measure",
                       "error": "the measuring process was killed (SIGKILL), most likely out of memory"})
        else:
            on_result({"status": "error", "batch_size": bs, "phase": "measure",
                       "error": f"the measuring process died (exit code {code}) before reporting"})
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        recv.close()


# ---------------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------------
@dataclass
class CollectSettings:
    device: str = "cpu"  # "cpu" or "cuda:<i>" (already resolved)
    mode: str = "train"
    timing: TimingConfig = field(default_factory=TimingConfig)
    threads: int | None = None
    time_budget_s: float | None = None
    command: str = ""
    git_commit: str | None = None
    #: One process per architecture (True) or per point (False); None = per architecture on CUDA only.
    process_per_arch: bool | None = None

    @property
    def per_arch(self) -> bool:
        return self.device.startswith("cuda") if self.process_per_arch is None else self.process_per_arch


def read_dataset(path: str | Path) -> list[dict[str, str]]:
    p = Path(path)
    if not p.exists():
        return []
    with open(p, newline="") as f:
        return list(csv.DictReader(f))


def _done_points(rows: list[dict[str, str]]) -> set[tuple[str, int, str]]:
    return {(r["config"], int(r["batch_size"]), r["mode"]) for r in rows if r["status"] in FINAL_STATUSES}


def collect(plans: list[ArchPlan], out_csv: str | Path, settings: CollectSettings,
            progress: Callable[[ArchPlan, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Measure every point of ``plans`` not yet in ``out_csv``; append rows as they come; write provenance.

    Returns a summary: points measured, by status, whether the time budget stopped the sweep.
    """
    out = Path(out_csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done_points(read_dataset(out))
    # Earlier non-final rows (errors, timeouts) of points measured again are superseded: keep the file
    # append-only and let readers take the last row per point.
    new_file = not out.exists()
    is_cuda = settings.device.startswith("cuda")
    device_kind = "cuda" if is_cuda else "cpu"
    started = time.monotonic()
    run_meta = _run_provenance(settings)
    counts: dict[str, int] = {}
    stopped_by_budget = False
    device_info: dict[str, Any] | None = None

    with open(out, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=DATASET_COLUMNS)
        if new_file:
            writer.writeheader()

        def record(plan: ArchPlan, res: dict[str, Any]) -> None:
            nonlocal device_info
            row = row_from_result(plan, res, settings.mode, device_kind)
            writer.writerow(row)
            f.flush()
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            if device_info is None and res.get("device_info"):
                device_info = res["device_info"]
            if progress:
                progress(plan, row)

        for plan in plans:
            todo = [b for b in plan.batch_sizes if (plan.config, b, settings.mode) not in done]
            if not todo:
                continue
            if settings.time_budget_s is not None and time.monotonic() - started > settings.time_budget_s:
                stopped_by_budget = True
                break
            reqs = [PointRequest(ref=plan.ref, batch_size=b, mode=settings.mode, device=settings.device,
                                 timing=settings.timing, threads=settings.threads) for b in todo]
            per_point = settings.timing.max_time_s * 2 + 60.0
            if settings.per_arch:
                run_arch_in_subprocess(reqs, per_point * len(reqs) + 60.0, lambda r, p=plan: record(p, r))
            else:
                from perfpredict.profile.runner import run_in_subprocess

                for req in reqs:
                    res = run_in_subprocess(req, per_point)
                    record(plan, res)
                    if res.get("status") == "oom":
                        break

    run_meta.update(finished_at=_now(), wall_s=round(time.monotonic() - started, 1), counts=counts,
                    stopped_by_time_budget=stopped_by_budget, device_info=device_info)
    _append_provenance(out, run_meta)
    return {"counts": counts, "stopped_by_time_budget": stopped_by_budget, "wall_s": run_meta["wall_s"]}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run_provenance(settings: CollectSettings) -> dict[str, Any]:
    import torch

    meta: dict[str, Any] = {
        "started_at": _now(), "command": settings.command, "git_commit": settings.git_commit,
        "device": settings.device, "mode": settings.mode, "timing": settings.timing.as_dict(),
        "threads": settings.threads, "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(), "platform": platform.platform(),
        "hostname": platform.node(), "cpu_count": os.cpu_count(),
        "process_isolation": "one process per architecture" if settings.per_arch else "one process per point",
    }
    if settings.device.startswith("cuda"):
        meta["cudnn_version"] = torch.backends.cudnn.version()
        meta["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        meta["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
        meta["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    return meta


def provenance_path(dataset_csv: str | Path) -> Path:
    p = Path(dataset_csv)
    return p.with_name(p.stem + ".meta.json")


def _append_provenance(dataset_csv: Path, run_meta: dict[str, Any]) -> None:
    path = provenance_path(dataset_csv)
    meta = json.loads(path.read_text()) if path.exists() else {"dataset": dataset_csv.name, "columns": DATASET_COLUMNS,
                                                                "runs": []}
    meta["runs"].append(run_meta)
    path.write_text(json.dumps(meta, indent=2, default=str) + "\n")


def git_commit_of(repo: str | Path = ".") -> str | None:
    """``HEAD``'s commit (with ``-dirty`` when the tree has changes), or None outside a git checkout."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


__all__ = ["ArchPlan", "CUDA_DATASET_TIMING", "CollectSettings", "DATASET_COLUMNS", "collect", "git_commit_of",
           "plan_sweep", "provenance_path", "read_dataset", "row_from_result"]
