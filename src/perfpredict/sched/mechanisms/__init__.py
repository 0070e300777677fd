"""Placement mechanisms, by name (``make_mechanism("tune")``), optionally with keyword options after a colon
(``make_mechanism("horus:k=3,interference=paper")``; numbers are converted)."""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
from typing import Any

from perfpredict.sched.base import Mechanism

__all__ = ["MECHANISMS", "make_mechanism", "mechanism_module"]

#: name -> (module, class). Imported on demand so that e.g. the LP solver loads only for Synergy-Opt.
MECHANISMS: dict[str, tuple[str, str]] = {
    "proportional": ("proportional", "GpuProportional"),
    "greedy": ("synergy", "SynergyGreedy"),
    "tune": ("synergy", "SynergyTune"),
    "opt": ("synergy", "SynergyOpt"),
    "drf": ("synergy", "DRF"),
    "tetris": ("synergy", "Tetris"),
    "moldable-equipartition": ("moldable", "MoldableEquipartition"),
    "malleable-equipartition": ("moldable", "MalleableEquipartition"),
    "moldable-proportional": ("moldable", "MoldableProportional"),
    "malleable-proportional": ("moldable", "MalleableProportional"),
    "rigid": ("moldable", "RigidFCFS"),
    "andreas": ("andreas", "AndreasRG"),
    "andreas-baseline": ("andreas", "AndreasBaseline"),
    "swaf": ("genie", "SWAF"),
    "genie-fifo": ("genie", "GenieFIFO"),
    "genie-capacity": ("genie", "GenieCapacity"),
    "genie-min-min": ("genie", "GenieMinMin"),
    "genie-weighted-fair": ("genie", "GenieWeightedFair"),
    "genie-tetris-perf": ("genie", "GenieTetrisPerf"),
    "genie-tetris-cer": ("genie", "GenieTetrisCER"),
    "horus": ("horus", "Horus"),
    "horus-f": ("horus", "HorusF"),
    "obp": ("horus", "OpportunisticBinPacking"),
    "pab": ("horus", "PerformanceAwareBinPacking"),
    "fifo-exclusive": ("horus", "FifoExclusive"),
}


def _option(value: str):
    """A ``name:key=value`` option's value: a number, a boolean (``true/false/yes/no/on/off``; otherwise
    ``backfill=no`` would be the non-empty, truthy string "no"), or the text."""
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    flags = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
    return flags.get(value.lower(), value)


def mechanism_module(name: str) -> str | None:
    """The module of :data:`MECHANISMS` that the mechanism ``name`` (options after a colon allowed, as
    :func:`make_mechanism` takes it) comes from, e.g. ``"genie"`` for ``"swaf"``; None for an unknown name."""
    entry = MECHANISMS.get(name.partition(":")[0].strip().lower()) if isinstance(name, str) else None
    return entry[0] if entry is not None else None


def make_mechanism(name: str, **kwargs) -> Mechanism:
    if not isinstance(name, str):
        raise ValueError(f"a mechanism is named by a string such as 'tune' or 'horus:k=3', got {name!r}")
    name, _, opts = name.partition(":")
    given: set[str] = set()
    for item in filter(None, opts.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"mechanism option {item!r}: expected key=value")
        if k.strip() in given:  # the first one used to win without a word
            raise ValueError(f"mechanism option {k.strip()} is given twice in {opts!r}")
        given.add(k.strip())
        kwargs.setdefault(k.strip(), _option(v.strip()))
    key = name.lower()
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; choose from {', '.join(MECHANISMS)}")
    module, cls = MECHANISMS[key]
    mod = importlib.import_module(f"perfpredict.sched.mechanisms.{module}")
    _check_options(name, getattr(mod, cls), kwargs)
    try:
        return getattr(mod, cls)(**kwargs)
    except (TypeError, ValueError) as e:  # an option the mechanism does not take, or a value it cannot use
        given = opts or ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"mechanism {name!r} with options {given}: {e}") from None


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword options ``cls(...)`` takes, following ``**kwargs`` to the base classes' constructors."""
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        out.update({n: p for n, p in params.items() if n != "self" and n not in out
                    and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)})
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return out


def _check_options(name: str, cls: type, options: dict[str, Any]) -> None:
    """Each option of the right kind, from the constructor's annotations: a boolean for ``bool``, a finite
    number >= 0 for ``float``, a whole one for ``int``, text for ``str``. Values from ``name:key=value`` are
    text converted by :func:`_option`; before this check a mistyped or infinite one reached the mechanism and
    failed deep inside a decision (``tetris:threshold=abc``, ``horus:k=inf``)."""
    params = _parameters(cls)
    for key, value in options.items():
        p = params.get(key)
        if p is None:
            raise ValueError(f"mechanism {name!r} has no option {key!r}; its options: {', '.join(params) or 'none'}")
        kinds = str(p.annotation).replace(" ", "").split("|") if p.annotation is not p.empty else []
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if "bool" in kinds:
            ok = isinstance(value, bool)
            want = "true or false"
        elif "int" in kinds and "float" not in kinds:
            ok = number and math.isfinite(value) and value >= 0 and float(value).is_integer()
            want = "a whole number >= 0"
        elif "float" in kinds:
            ok = (number and math.isfinite(value) and value >= 0) or ("str" in kinds and isinstance(value, str))
            want = "a finite number >= 0" + (" or a name" if "str" in kinds else "")
        elif "str" in kinds:
            ok = isinstance(value, str)
            want = "a name"
        else:
            continue  # a structured option (e.g. a list of queue names): the mechanism checks it
        if not ok:
            raise ValueError(f"mechanism {name!r}: option {key}={value} must be {want}")
