"""``name:key=value,...`` specs (clusters, traces, mechanisms): the typed options after the colon."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def spec_options(spec: str, allowed: Mapping[str, Callable[[str], Any]]) -> dict[str, Any]:
    """The options of ``spec`` converted by ``allowed[key]``; an unknown key or a bare word is a ValueError."""
    out: dict[str, Any] = {}
    for item in filter(None, spec.partition(":")[2].split(",")):
        k, sep, v = item.partition("=")
        k = k.strip()
        if not sep or k not in allowed:
            raise ValueError(f"expected key=value with keys {', '.join(allowed)}, got {item!r}")
        out[k] = allowed[k](v.strip())
    return out
