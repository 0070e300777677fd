"""Placement mechanisms, by name (``make_mechanism("tune")``), optionally with keyword options after a colon
(``make_mechanism("horus:k=3,interference=paper")``; numbers are converted)."""

from __future__ import annotations

import importlib

from perfpredict.sched.base import Mechanism

__all__ = ["MECHANISMS", "make_mechanism"]

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


def make_mechanism(name: str, **kwargs) -> Mechanism:
    name, _, opts = name.partition(":")
    for item in filter(None, opts.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"mechanism option {item!r}: expected key=value")
        kwargs.setdefault(k.strip(), _option(v.strip()))
    key = name.lower()
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; choose from {', '.join(MECHANISMS)}")
    module, cls = MECHANISMS[key]
    mod = importlib.import_module(f"perfpredict.sched.mechanisms.{module}")
    try:
        return getattr(mod, cls)(**kwargs)
    except (TypeError, ValueError) as e:  # an option the mechanism does not take, or a value it cannot use
        given = opts or ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"mechanism {name!r} with options {given}: {e}") from None
