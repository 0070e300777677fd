"""Many independent simulations at once, for the experiments' sweeps: in local worker processes (``workers``)
or as tasks on a Ray cluster (``ray_address``, :mod:`perfpredict.sim.ray_backend`). Serial by default.

Each simulation is deterministic given its inputs, so where it runs changes nothing but the wall time; results
come back in the order of the inputs whatever order they finished in. The function must be importable by the
workers: a module-level function of a package, or of a script with an ``if __name__ == "__main__":`` guard
(local processes start from the forkserver and import it; Ray pickles a script's function by value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from perfpredict.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")


def map_runs(fn: Callable[[T], R], items: Iterable[T], *, workers: int = 1, ray_address: str | None = None,
             on_result: Callable[[int, R], None] | None = None) -> list[R]:
    """``[fn(x) for x in items]``, run serially, in ``workers`` local processes, or as Ray tasks (one CPU each;
    ``workers`` > 1 then caps the tasks in flight). ``on_result(index, result)`` is called as each one ends. A
    Ctrl-C stops the workers or cancels the tasks and is raised again."""
    todo: Sequence[T] = list(items)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be a whole number >= 1, got {workers!r}", step="arguments")
    out: list[Any] = [None] * len(todo)

    def done(i: int, r: R) -> None:
        out[i] = r
        if on_result is not None:
            on_result(i, r)

    if ray_address is not None:
        from perfpredict.sim.ray_backend import connected

        with connected(ray_address) as (ray, _):
            _on_ray(ray, fn, todo, done, workers if workers > 1 else None)
    elif workers > 1 and len(todo) > 1:
        _in_processes(fn, todo, done, min(workers, len(todo)))
    else:
        for i, x in enumerate(todo):
            done(i, fn(x))
    return out


def _indexed(arg: tuple[Callable[[Any], Any], int, Any]) -> tuple[int, Any]:
    fn, i, x = arg
    return i, fn(x)


def _in_processes(fn, todo, done, workers: int) -> None:
    import multiprocessing

    from perfpredict.profile.main_guard import check_main_guard
    from perfpredict.profile.runner import sigint_blocked
    from perfpredict.sim.compare import _ignore_sigint

    check_main_guard("perfpredict.sim.parallel.map_runs(workers > 1)")
    pool = None
    try:
        with sigint_blocked():  # a Ctrl-C while the pool starts is raised once it exists (compare() found why)
            pool = multiprocessing.get_context("forkserver").Pool(workers, _ignore_sigint)
        for i, r in pool.imap_unordered(_indexed, [(fn, i, x) for i, x in enumerate(todo)]):
            done(i, r)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def _on_ray(ray, fn, todo, done, max_in_flight: int | None) -> None:
    remote = ray.remote(num_cpus=1, max_retries=0)(fn)
    queue = list(enumerate(todo))
    limit = max_in_flight or len(queue)
    pending: dict[Any, int] = {}
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                i, x = queue.pop(0)
                pending[remote.remote(x)] = i
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)  # bounded: Ctrl-C within 0.5 s
            for ref in ready:
                done(pending.pop(ref), ray.get(ref))
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


__all__ = ["map_runs"]
