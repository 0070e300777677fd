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
- **Addresses.** ``local`` starts a Ray instance on this machine for the comparison and stops it afterwards.
  Any other address goes to ``ray.init``: ``auto`` joins the cluster this machine is part of, ``HOST:PORT`` a
  cluster's head, ``ray://HOST:10001`` a remote one through Ray Client. A program that has already called
  ``ray.init`` keeps its connection, and it is left open.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from perfpredict.errors import UsageError

if TYPE_CHECKING:
    from perfpredict.sim.compare import RunTask

#: seconds to wait for a cluster's head to accept a TCP connection before ``ray.init`` is tried: a wrong
#: address would otherwise keep Ray retrying for minutes
CONNECT_TIMEOUT_S = 5.0


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray, which is not installed: pip install 'perfpredict[ray]'",
                         step="arguments") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for ``auto`` and other forms."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _check_reachable(address: str) -> None:
    hp = _host_port(address)
    if hp is None:
        return
    try:
        socket.create_connection(hp, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e})",
                         step="arguments") from None


def cluster_info(ray: Any) -> dict[str, Any]:
    """What the comparison ran on: the connected cluster's live nodes and CPUs, and its head's address."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    info: dict[str, Any] = {"nodes": len(nodes), "cpus": int(ray.cluster_resources().get("CPU", 0))}
    try:
        info["gcs_address"] = ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001, S110 - Ray Client connections do not expose it; the address given stays
        pass
    return info


@contextmanager
def connected(address: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Ray, connected to ``address`` (see the module docstring), and :func:`cluster_info` with the address.
    An instance this starts or a connection this opens is closed on exit."""
    if not isinstance(address, str) or not address.strip():
        raise UsageError("--ray is empty: give 'local', 'auto' or the cluster's HOST:PORT",
                         step="arguments")
    address = address.strip()
    ray = _import_ray()
    import logging

    opened = False
    if not ray.is_initialized():
        if address != "local":
            _check_reachable(address)
        kwargs: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if address == "local":
            kwargs.update(address="local", include_dashboard=False)
        else:
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001 - Ray's own errors (connection, version mismatch) in one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"--ray {address}: {first}", step="arguments") from None
        opened = True
    try:
        yield ray, {"backend": "ray", "address": address, **cluster_info(ray)}
    finally:
        if opened:
            ray.shutdown()


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


def ray_map(ray: Any, fn: Callable[..., Any], items: Sequence[Any], done: Callable[[int, Any], None],
            max_in_flight: int | None = None, args: tuple = ()) -> None:
    """``fn(item, *args)`` for every item as a Ray task asking for one CPU (at most ``max_in_flight`` at once;
    None: all), calling ``done(index, ref)`` as each one ends (the caller gets its result). A Ctrl-C cancels the
    tasks not yet finished and is raised again."""
    remote = ray.remote(num_cpus=1, max_retries=0)(fn)
    queue = list(enumerate(items))
    limit = max_in_flight or len(queue)
    pending: dict[Any, int] = {}
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                i, x = queue.pop(0)
                pending[remote.remote(x, *args)] = i
            # a bounded wait: a Ctrl-C is raised here within half a second (a wait without a timeout held it
            # until a run ended)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                done(pending.pop(ref), ref)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


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
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return _failed_row(task.scheduler, task.seed, "error", f"Ray lost the run: {type(e).__name__}: {first}"[:500],
                           task.metrics), {}


__all__ = ["CONNECT_TIMEOUT_S", "cluster_info", "connected", "ray_map", "run_and_collect", "run_tasks",
           "write_files"]
