"""Workloads: a user's ``model.py`` or a built-in zoo family, resolved from what the user typed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfpredict.workload.loader import load_model_file
from perfpredict.workload.spec import DEFAULT_BATCH_SIZES, PRECISIONS, Workload, WorkloadRef, check_precision
from perfpredict.workload_args import ZOO_PREFIX, check_target, parse_batch_sizes, parse_params


def resolve_workload(target: str, params: Mapping[str, Any] | None = None,
                     precision: str | None = None, compile: bool | None = None) -> Workload:  # noqa: A002
    """``zoo:<family>`` (with ``params``) or a path to a ``model.py``; ``precision`` overrides the file's
    ``PRECISION`` (default fp32); ``compile`` measures ``torch.compile(model)``."""
    if target.startswith(ZOO_PREFIX):
        from perfpredict.workload.zoo import load_zoo_workload

        wl = load_zoo_workload(target[len(ZOO_PREFIX):], params)
    else:
        check_target(target, params)
        wl = load_model_file(target)
    return wl.with_options(precision=precision, compile=compile)


__all__ = [
    "DEFAULT_BATCH_SIZES",
    "PRECISIONS",
    "Workload",
    "WorkloadRef",
    "check_precision",
    "load_model_file",
    "parse_batch_sizes",
    "parse_params",
    "resolve_workload",
]
