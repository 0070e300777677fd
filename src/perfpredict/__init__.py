"""perfpredict: profile, model and predict the performance of deep-learning training jobs.

Python API (the CLI is ``perfpredict``)::

    from perfpredict import profile, PerformanceCard, fit_rate_model

    if __name__ == "__main__":  # in a script: the measuring processes import it again (not in a notebook)
        card = profile("model.py", batch_sizes=[8, 16, 32]).card
        card.latency_s(iterations=1000, batch_size=64)
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

from perfpredict.card import SCHEMA_VERSION, PerformanceCard
from perfpredict.errors import PerfPredictError
from perfpredict.fit.rate import RateModel, fit_rate_model, lat


def profile_model(target: str, *, params: dict | None = None, batch_sizes=None, mode: str = "train",
                  device: str = "auto", out_dir=None, precision: str | None = None, compile: bool = False,  # noqa: A002
                  **settings):
    """Profile a model file or ``zoo:<family>`` and return a :class:`perfpredict.profile.ProfileOutcome`.

    ``precision`` is ``"fp32"``, ``"bf16"`` or ``"fp16"`` (mixed precision under ``torch.autocast``); None
    takes the model file's ``PRECISION``, else fp32. ``compile=True`` measures ``torch.compile(model)``.

    ``settings`` are further :class:`perfpredict.profile.ProfileSettings` fields (``timing``, ``threads``,
    ``features``, ...). Nothing is logged to MLflow; use the CLI or :mod:`perfpredict.tracking` for that.
    """
    from perfpredict.errors import UsageError
    from perfpredict.profile.main_guard import check_main_guard
    from perfpredict.profile.profiler import ProfileSettings, profile_workload
    from perfpredict.workload import resolve_workload

    check_main_guard("perfpredict.profile()")  # measuring processes import the caller's script again
    if not isinstance(target, (str, os.PathLike)):
        raise UsageError(f"target must be a model.py path or 'zoo:<family>', got {target!r}", step="arguments")
    if isinstance(batch_sizes, (int, float)):
        raise UsageError(f"batch_sizes is a list such as [8, 16], got {batch_sizes!r}", step="arguments")
    if out_dir is not None:  # before measuring: a profile that cannot be saved would be lost
        from perfpredict.output_paths import output_dir_problem

        problem = output_dir_problem(out_dir)
        if problem:
            raise UsageError(f"out_dir: {problem}", step="arguments")
    # ProfileSettings checks the sizes as --batch-sizes is checked ([] is an error, not the default)
    s = ProfileSettings(batch_sizes=batch_sizes, mode=mode, device=device, **settings)
    if not isinstance(compile, bool):
        raise UsageError(f"compile must be True or False, got {compile!r}", step="arguments")
    workload = resolve_workload(str(target), params, precision, compile or None)
    return profile_workload(workload, s, out_dir=out_dir)


#: ``from perfpredict import profile``: the function above. (Once ``perfpredict.profile``, the package, is
#: imported, the name is the package, which calls :func:`profile_model` when called.)
profile = profile_model


def largest_batch(target: str, *, memory_limit_bytes: int | None = None, params: dict | None = None,
                  device: str = "auto", mode: str = "train", precision: str | None = None,
                  compile: bool = False, multiple_of: int = 1, max_batch: int = 65536, **kw):  # noqa: A002
    """The largest batch size whose step fits the memory, found by running steps on ``device`` (doubling until
    one runs out of memory, then bisection): a :class:`perfpredict.profile.batch_search.BatchLimit`.
    ``memory_limit_bytes``: on CPU the peak RSS increase allowed (default 90 % of the free memory), on CUDA the
    caching allocator's cap (default the whole device). ``kw``: ``threads``, ``timeout_s``, ``start``,
    ``on_probe``, ``return_on_interrupt`` (a Ctrl-C returns the probes so far instead of raising).
    ``Predictor.largest_batch`` predicts the same without running anything."""
    from perfpredict.errors import UsageError
    from perfpredict.profile.batch_search import find_largest_batch
    from perfpredict.profile.main_guard import check_main_guard
    from perfpredict.workload import resolve_workload

    check_main_guard("perfpredict.largest_batch()")
    if not isinstance(target, (str, os.PathLike)):
        raise UsageError(f"target must be a model.py path or 'zoo:<family>', got {target!r}", step="arguments")
    if not isinstance(compile, bool):
        raise UsageError(f"compile must be True or False, got {compile!r}", step="arguments")
    workload = resolve_workload(str(target), params, precision, compile or None)
    return find_largest_batch(workload, device=device, mode=mode, memory_limit_bytes=memory_limit_bytes,
                              multiple_of=multiple_of, max_batch=max_batch, **kw)


def __getattr__(name: str):
    # The Predictor pulls in xgboost: import it only when asked for.
    if name == "Predictor":
        from perfpredict.predictor import Predictor

        return Predictor
    raise AttributeError(f"module 'perfpredict' has no attribute {name!r}")


__all__ = [
    "Predictor",
    "SCHEMA_VERSION",
    "PerfPredictError",
    "PerformanceCard",
    "RateModel",
    "__version__",
    "fit_rate_model",
    "largest_batch",
    "lat",
    "profile",
    "profile_model",
]
