"""Workloads: a user's ``model.py`` or a built-in zoo family, resolved from what the user typed."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from perfpredict.workload.ref import DEFAULT_BATCH_SIZES, PRECISIONS, WorkloadRef, check_precision
from perfpredict.workload_args import ZOO_PREFIX, check_params, parse_batch_sizes, parse_params

if TYPE_CHECKING:
    from perfpredict.workload.loader import load_model_file
    from perfpredict.workload.spec import Workload

#: Imported on first use, since they import torch (see :mod:`perfpredict.workload.ref`)
_LAZY = {"Workload": "perfpredict.workload.spec", "load_model_file": "perfpredict.workload.loader"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_workload(target: str, params: Mapping[str, Any] | None = None,
                     precision: str | None = None, compile: bool | None = None) -> Workload:  # noqa: A002
    """``zoo:<family>`` (with ``params``) or a path to a ``model.py``; ``precision`` overrides the file's
    ``PRECISION`` (default fp32); ``compile`` measures ``torch.compile(model)``."""
    if target.startswith(ZOO_PREFIX):
        from perfpredict.workload.zoo import load_zoo_workload

        wl = load_zoo_workload(target[len(ZOO_PREFIX):], params)
    else:
        from perfpredict.workload.loader import load_model_file

        check_params(target, params)  # not check_target: the import right after finds a syntax error itself
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
