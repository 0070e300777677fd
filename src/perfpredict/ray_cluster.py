"""A connection to a Ray cluster and a bounded task loop, shared by the scale-out paths: simulation sweeps
(:mod:`perfpredict.sim.ray_backend`, :mod:`perfpredict.sim.parallel`) and dataset collection across a cluster's
GPUs or nodes (:mod:`perfpredict.dataset.ray_collect`).

ARCHITECTURE.md's rule for scale-out: when one machine is not enough, use an existing engine, Ray, and keep local
mode the default. Ray is an optional extra (``perfpredict[ray]``); without it ``--ray`` is one error naming it.

Addresses: ``local`` starts a Ray instance on this machine and stops it afterwards. Any other address goes to
``ray.init``: ``auto`` joins the cluster this machine is part of, ``HOST:PORT`` a cluster's head,
``ray://HOST:10001`` a remote one through Ray Client. A program that has already called ``ray.init`` keeps its
connection, and it is left open.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from perfpredict.errors import UsageError, first_line

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
    """What a run used: the connected cluster's live nodes, CPUs and GPUs, and its head's address."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    resources = ray.cluster_resources()
    info: dict[str, Any] = {"nodes": len(nodes), "cpus": int(resources.get("CPU", 0)),
                            "gpus": int(resources.get("GPU", 0))}
    try:
        info["gcs_address"] = ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001, S110 - Ray Client connections do not expose it; the address given stays
        pass
    return info


def node_resources(ray: Any) -> list[tuple[str, int, int]]:
    """(node id, CPUs, GPUs) Ray may hand out on each live node (its "CPU" and "GPU" resources)."""
    return [(str(n.get("NodeID")), int(n.get("Resources", {}).get("CPU", 0)), int(n.get("Resources", {}).get("GPU", 0)))
            for n in ray.nodes() if n.get("Alive")]


@contextmanager
def connected(address: str, worker_niceness: int | None = None) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Ray, connected to ``address`` (see the module docstring), and :func:`cluster_info` with the address.
    An instance this starts or a connection this opens is closed on exit. ``worker_niceness`` sets the niceness
    of the workers of an instance this starts (``local``; Ray's default is 15, which puts every other process of
    the machine first: measurements want 0); a cluster's own setting stays."""
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
        niceness = os.environ.get("RAY_worker_niceness")
        if address == "local" and worker_niceness is not None:
            os.environ["RAY_worker_niceness"] = str(int(worker_niceness))
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001 - Ray's own errors (connection, version mismatch) in one line
            why = first_line(e) or type(e).__name__
            if "Could not find any running Ray instance" in why:  # Ray's text names its own --address flag
                why = ("no Ray instance is running on this machine: start one (ray start --head), give the "
                       "cluster's --ray HOST:PORT, or --ray local to start one for this command")
            raise UsageError(f"--ray {address}: {why}", step="arguments") from None
        finally:
            if niceness is None:
                os.environ.pop("RAY_worker_niceness", None)
            else:
                os.environ["RAY_worker_niceness"] = niceness
        opened = True
    try:
        yield ray, {"backend": "ray", "address": address, **cluster_info(ray)}
    finally:
        if opened:
            ray.shutdown()


def ray_map(ray: Any, fn: Callable[..., Any], items: Sequence[Any], done: Callable[[int, Any], None],
            max_in_flight: int | None = None, args: tuple = (), options: dict[str, Any] | None = None,
            keep_going: Callable[[], bool] | None = None, slots: Sequence[dict[str, Any]] | None = None) -> int:
    """``fn(item, *args)`` for every item as a Ray task asking for one CPU, or for ``options`` (``ray.remote``'s:
    ``num_gpus``, ``num_cpus``, ``max_calls``...), at most ``max_in_flight`` at once (None: all), calling
    ``done(index, ref)`` as each one ends (the caller gets its result). With ``slots``, a task in flight holds one
    of them, its options added to ``options`` (e.g. one slot per node, pinned there), so at most ``len(slots)`` run
    at once. Items start in order while ``keep_going()`` (default: always) says so; returns how many never
    started. A Ctrl-C or an error in ``done`` cancels the tasks not yet finished and is raised again."""
    remote = ray.remote(**{"num_cpus": 1, "max_retries": 0, **(options or {})})(fn)
    queue = list(enumerate(items))
    limit = max_in_flight or len(queue) or 1
    free = list(range(len(slots))) if slots is not None else []
    if slots is not None:
        limit = min(limit, len(slots))
    pending: dict[Any, tuple[int, int | None]] = {}
    started = 0
    try:
        while queue or pending:
            if queue and keep_going is not None and not keep_going():
                queue.clear()
                continue
            while queue and len(pending) < limit:
                i, x = queue.pop(0)
                slot = free.pop(0) if slots is not None else None
                call = remote.options(**slots[slot]) if slot is not None else remote
                pending[call.remote(x, *args)] = (i, slot)
                started += 1
            # a bounded wait: a Ctrl-C is raised here within half a second (a wait without a timeout held it
            # until a run ended)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                i, slot = pending.pop(ref)
                if slot is not None:
                    free.append(slot)
                done(i, ref)
    except BaseException:
        # Ctrl-C, or the caller's own error: tasks left running would hold the cluster's CPUs and GPUs
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return len(items) - started


__all__ = ["CONNECT_TIMEOUT_S", "cluster_info", "connected", "node_resources", "ray_map"]
