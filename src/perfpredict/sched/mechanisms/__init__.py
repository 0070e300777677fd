"""Placement mechanisms, by name (``make_mechanism("tune")``)."""

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
}


def make_mechanism(name: str, **kwargs) -> Mechanism:
    key = name.lower()
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; choose from {', '.join(MECHANISMS)}")
    module, cls = MECHANISMS[key]
    mod = importlib.import_module(f"perfpredict.sched.mechanisms.{module}")
    return getattr(mod, cls)(**kwargs)
