"""Many independent simulations at once, for the experiments' sweeps: in local worker processes (``workers``)
or as tasks on a Ray cluster (``ray_address``, :mod:`perfpredict.ray_cluster`). Serial by default.

Each simulation is deterministic given its inputs, so where it runs changes nothing but the wall time; results
come back in the order of the inputs whatever order they finished in. The function must be importable by the
workers: a module-level function of a package, or of a script with an ``if __name__ == "__main__":`` guard
(local processes start from the forkserver and import it; Ray pickles a script's function by value).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from perfpredict.errors import UsageError

if TYPE_CHECKING:
    from perfpredict.sim.kept_runs import KeptRuns

T = TypeVar("T")
R = TypeVar("R")


def map_runs(fn: Callable[[T], R], items: Iterable[T], *, workers: int = 1, ray_address: str | None = None,
             on_result: Callable[[int, R], None] | None = None, keep: KeptRuns | None = None) -> list[R]:
    """``[fn(x) for x in items]``, run serially, in ``workers`` local processes, or as Ray tasks (one CPU each;
    ``workers`` > 1 then caps the tasks in flight). ``on_result(index, result)`` is called as each one ends. A
    Ctrl-C stops the workers or cancels the tasks and is raised again.

    With ``keep`` (:class:`perfpredict.sim.kept_runs.KeptRuns`, for one call), each result is written to its file
    as it ends, the runs it already holds (``--resume``) are not run again, and a sweep that stops early says
    where its finished runs are."""
    todo: Sequence[T] = list(items)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be a whole number >= 1, got {workers!r}", step="arguments")
    if keep is not None:
        keep.begin(len(todo))
    out: list[Any] = [None] * len(todo)

    def done(i: int, r: R) -> None:
        out[i] = r
        if keep is not None:
            keep.add(i, r)
        if on_result is not None:
            on_result(i, r)

    left = list(range(len(todo)))
    if keep is not None and keep.reused:
        print(f"reusing {len(keep.reused)} of {len(todo)} runs kept in {keep.path}", flush=True)
        for i in sorted(keep.reused):
            out[i] = keep.reused[i]
            if on_result is not None:
                try:
                    on_result(i, out[i])
                except Exception as e:  # a kept line of the right form whose result is not this sweep's kind
                    raise UsageError(f"{keep.path}: the kept run {i} is not a result of this sweep ({type(e).__name__}"
                                     f": {e}); remove the file to start afresh", step="resume") from None
        left = [i for i in left if i not in keep.reused]
    run = [todo[i] for i in left]
    try:
        if ray_address is not None:
            from perfpredict.ray_cluster import connected, ray_map

            with connected(ray_address) as (ray, _):
                ray_map(ray, fn, run, lambda j, ref: done(left[j], ray.get(ref)), workers if workers > 1 else None)
        elif workers > 1 and len(run) > 1:
            from perfpredict.profile.main_guard import check_main_guard

            check_main_guard("perfpredict.sim.parallel.map_runs(workers > 1)")
            in_processes(fn, run, lambda j, r: done(left[j], r), min(workers, len(run)))
        else:
            for j, x in enumerate(run):
                done(left[j], fn(x))
    except BaseException:
        if keep is not None:
            keep.say_kept()
        raise
    if keep is not None:
        keep.close()
    return out


def add_sweep_options(ap: argparse.ArgumentParser) -> None:
    """An experiment script's ``--workers`` and ``--ray`` (the arguments of :func:`map_runs`)."""
    from perfpredict.script_args import positive_int

    ap.add_argument("--workers", type=positive_int, default=1, help="simulations at once in local worker processes "
                    "(the rows do not depend on it)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS", help="run the simulations as Ray tasks: 'local', "
                    "'auto' or the head's HOST:PORT (needs perfpredict[ray]; --workers then caps the tasks in flight)")
    ap.add_argument("--resume", action="store_true", help="reuse the runs an unfinished sweep with the same "
                    "arguments kept in --out's finished_runs.jsonl (each run is kept there as it ends)")


def where_runs(workers: int, ray_address: str | None) -> str:
    """How :func:`map_runs` runs them, for a progress line."""
    if ray_address:
        return f"as Ray tasks ({ray_address})"
    return f"in {workers} worker processes" if workers > 1 else "one after another"


def ignore_sigint() -> None:
    """In a pool worker: Ctrl-C reaches the whole process group; the parent alone handles it (and stops us)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _indexed(arg: tuple[Callable[[Any], Any], int, Any]) -> tuple[int, Any]:
    fn, i, x = arg
    return i, fn(x)


def in_processes(fn: Callable[[T], R], items: Sequence[T], done: Callable[[int, R], None], workers: int,
                 initializer: Callable[..., None] = ignore_sigint, initargs: tuple = ()) -> None:
    """``fn(item)`` for every item in ``workers`` forkserver processes started with ``initializer(*initargs)``
    (which must ignore SIGINT, as :func:`ignore_sigint` does), calling ``done(index, result)`` as each one
    ends. The workers are stopped on the way out, a Ctrl-C included: the runs still going are not left to
    finish."""
    import multiprocessing

    from perfpredict.profile.runner import sigint_blocked

    pool = None
    try:
        # A Ctrl-C in the middle of Pool() left a worker the parent did not know about; it failed to unpickle the
        # pool's (by then unlinked) semaphores and printed a traceback. Held back until the pool exists, it is
        # raised here and the pool is terminated below.
        with sigint_blocked():
            pool = multiprocessing.get_context("forkserver").Pool(workers, initializer, initargs)
        for i, r in pool.imap_unordered(_indexed, [(fn, i, x) for i, x in enumerate(items)]):
            done(i, r)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


__all__ = ["add_sweep_options", "ignore_sigint", "in_processes", "map_runs", "where_runs"]
