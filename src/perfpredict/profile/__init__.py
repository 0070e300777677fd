"""Measurement: timing harness, per-point subprocess runner, memory and energy counters, the sweep."""

import sys
import types

from perfpredict.profile.profiler import (
    ProfileListener,
    ProfileOutcome,
    ProfileSettings,
    profile_workload,
)
from perfpredict.profile.timing import TimingConfig

__all__ = ["ProfileListener", "ProfileOutcome", "ProfileSettings", "TimingConfig", "profile_workload"]


class _CallablePackage(types.ModuleType):
    """``perfpredict.profile`` names both this package and the top-level ``profile()`` function. Once the package
    is imported (the function itself imports it), Python binds the package to that name, so
    ``perfpredict.profile(...)`` and a later ``from perfpredict import profile`` would get a module that cannot
    be called. Calling the package runs the function instead."""

    def __call__(self, *args, **kwargs):
        import perfpredict

        return perfpredict.profile_model(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
