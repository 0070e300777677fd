"""Simulation runs spread over a Ray cluster: ``perfpredict compare --ray ADDRESS`` and ``compare(...,
ray_address=...)``.

The architecture's rule for scale-out (ARCHITECTURE.md): when one machine is not enough for a sweep over loads,
seeds and schedulers, use an existing engine, Ray, and keep local mode the default. Each (scheduler, seed) run
is one Ray task asking for one CPU, and Ray places the tasks on the cluster's nodes.

- **Outputs need no shared filesystem.** A task simulates into a temporary folder on the node that runs it and
  returns its row with the bytes of every file it wrote. The driver writes them under the comparison's folder, so
  the output is the one a local run writes.
- **Inputs given as files do.** A trace file, a cluster JSON or a cards folder is read by the node that runs the
  task, at the path given (Ray's usual arrangement: the same paths on every node). A node without the file fails
  that run with the trace's or cluster's own "not found" message, and the comparison records it.
- **Addresses** are :func:`perfpredict.ray_cluster.connected`'s: ``local``, ``auto``, ``HOST:PORT`` or
  ``ray://HOST:PORT``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from perfpredict.errors import error_line
from perfpredict.ray_cluster import ray_map

if TYPE_CHECKING:
    from perfpredict.sim.compare import RunTask

def _safe_relative(rel: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        raise ValueError(f"a run returned a file outside its folder: {rel!r}")
    return p


def run_and_collect(task: RunTask, caches: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """On a Ray worker: one comparison task run into a temporary folder (when it has a run folder), with the
    files it wrote as {relative path: bytes}."""
    from perfpredict.sim.compare import _run_one, prime_caches

    prime_caches(caches)
    if task.run_dir is None:
        return _run_one(*task), {}
    with tempfile.TemporaryDirectory(prefix="perfpredict-run-") as tmp:
        root = Path(tmp) / "run"
        row = _run_one(*task._replace(run_dir=root))
        files = ({p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
                 if root.is_dir() else {})
    return row, files


def write_files(run_dir: Path, files: dict[str, bytes]) -> None:
    """The driver's half of :func:`run_and_collect`: a run's files under its folder."""
    for rel, data in files.items():
        dest = run_dir.joinpath(*_safe_relative(rel).parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def run_tasks(ray: Any, tasks: Sequence[RunTask], caches: dict[str, Any], record: Callable[[dict[str, Any]], None],
              max_in_flight: int | None = None) -> None:
    """``compare``'s tasks through :func:`ray_map`: ``record`` each row as its run ends, after writing the run's
    files."""
    def finished(i: int, ref: Any) -> None:
        task = tasks[i]
        row, files = _result(ray, ref, task)
        if files and task.run_dir is not None:
            write_files(Path(task.run_dir), files)
        record(row)

    ray_map(ray, run_and_collect, tasks, finished, max_in_flight, args=(ray.put(caches),))


def _result(ray: Any, ref: Any, task: RunTask) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A finished task's (row, files); a task Ray itself lost (its worker or node died) is an error row."""
    from perfpredict.sim.compare import _failed_row

    try:
        return ray.get(ref)
    except Exception as e:  # noqa: BLE001 - a lost worker must not lose the other runs
        return _failed_row(task.scheduler, task.seed, "error", f"Ray lost the run: {error_line(e, 482)}",
                           task.metrics), {}


__all__ = ["run_and_collect", "run_tasks", "write_files"]
