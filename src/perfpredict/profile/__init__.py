"""Measurement: timing harness, per-point subprocess runner, memory and energy counters, the sweep."""

from perfpredict.profile.profiler import (
    ProfileListener,
    ProfileOutcome,
    ProfileSettings,
    profile_workload,
)
from perfpredict.profile.timing import TimingConfig

__all__ = ["ProfileListener", "ProfileOutcome", "ProfileSettings", "TimingConfig", "profile_workload"]
