"""Trace-driven simulation: trace readers and generators (:mod:`.traces`; the Philly, Helios and PAI logs in
:mod:`.public_traces`), the event-driven simulator
(:mod:`.simulator`), the metrics computed from its output (:mod:`.metrics`), and :func:`run_simulation`, which
does all of it from text specs (what ``perfpredict simulate`` calls); :func:`compare` runs several schedulers
on the same traces (``perfpredict compare``)."""

from perfpredict.sim.compare import Comparison, Scheduler, compare, parse_schedulers
from perfpredict.sim.metrics import SimMetrics, compute_metrics, metrics_from_result
from perfpredict.sim.public_traces import read_helios, read_pai, read_philly
from perfpredict.sim.run import SimRun, run_simulation
from perfpredict.sim.simulator import SimConfig, SimResult, SimulationError, simulate
from perfpredict.sim.traces import (
    TraceError,
    load_trace,
    read_csv_trace,
    read_swf,
    synergy_trace,
    write_csv_trace,
)

__all__ = [
    "Comparison", "Scheduler", "SimConfig", "SimMetrics", "compare", "parse_schedulers", "SimResult", "SimRun", "SimulationError", "TraceError", "compute_metrics",
    "load_trace", "metrics_from_result", "read_csv_trace", "read_helios", "read_pai", "read_philly", "read_swf",
    "run_simulation", "simulate",
    "synergy_trace", "write_csv_trace",
]
