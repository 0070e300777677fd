"""Workloads: a user's ``model.py`` or a built-in zoo family, resolved from what the user typed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfpredict.errors import UsageError
from perfpredict.workload.loader import load_model_file
from perfpredict.workload.spec import (
    DEFAULT_BATCH_SIZES,
    Workload,
    WorkloadRef,
    parse_batch_sizes,
)

ZOO_PREFIX = "zoo:"


def resolve_workload(target: str, params: Mapping[str, Any] | None = None) -> Workload:
    """``zoo:<family>`` (with ``params``) or a path to a ``model.py``."""
    if target.startswith(ZOO_PREFIX):
        from perfpredict.workload.zoo import load_zoo_workload

        return load_zoo_workload(target[len(ZOO_PREFIX):], params)
    if params:
        raise UsageError(f"--param only applies to zoo models (zoo:<family>), not to {target}", step="arguments")
    return load_model_file(target)


def parse_params(items: list[str] | None) -> dict[str, str]:
    """``["depth=18", "width=32"]`` → ``{"depth": "18", "width": "32"}`` (values parsed by the family)."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise UsageError(f"--param expects name=value, got {part!r}", step="arguments")
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


__all__ = [
    "DEFAULT_BATCH_SIZES",
    "Workload",
    "WorkloadRef",
    "load_model_file",
    "parse_batch_sizes",
    "parse_params",
    "resolve_workload",
]
