"""Measurement: timing harness, per-point subprocess runner, memory and energy counters, the sweep."""

import importlib
import sys
import types
from typing import TYPE_CHECKING

from perfpredict.profile.timing import TimingConfig

if TYPE_CHECKING:
    from perfpredict.profile.profiler import ProfileListener, ProfileOutcome, ProfileSettings, profile_workload

__all__ = ["ProfileListener", "ProfileOutcome", "ProfileSettings", "TimingConfig", "profile_workload"]

#: Imported on first use: the profiler imports torch (~1.5 s), which a command checking its arguments
#: (``perfpredict.profile.request``) or the fork server's preload list does not need yet.
_LAZY = {"ProfileListener", "ProfileOutcome", "ProfileSettings", "profile_workload"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module("perfpredict.profile.profiler"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallablePackage(types.ModuleType):
    """``perfpredict.profile`` names both this package and the top-level ``profile()`` function. Once the package
    is imported (the function itself imports it), Python binds the package to that name, so
    ``perfpredict.profile(...)`` and a later ``from perfpredict import profile`` would get a module that cannot
    be called. Calling the package runs the function instead."""

    def __call__(self, *args, **kwargs):
        import perfpredict

        return perfpredict.profile_model(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
