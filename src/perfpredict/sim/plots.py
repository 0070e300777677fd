"""Plots of simulation runs: JCT CDF and utilisation over time for one run; JCT vs load across runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_jct_vs_load", "plot_run", "run_jct_hours"]


def run_jct_hours(run: Any) -> np.ndarray:
    """The sorted JCTs (hours) that ``jct_cdf.png`` draws: the finished jobs of the run's measurement window
    (``steady``, as its metrics take them; every job without one)."""
    from perfpredict.sim.metrics import jct_cdf

    states = list(run.result.finished) + list(run.result.unfinished)
    jct, _ = jct_cdf(states, steady=getattr(run, "steady", None))
    return jct / 3600


def plot_run(run: Any, out_dir: str | Path) -> list[Path]:
    """``jct_cdf.png`` and ``utilisation.png`` for one :class:`perfpredict.sim.run.SimRun` (each only when there is
    something to draw; :func:`perfpredict.sim.run.write_outputs` removes an earlier run's plot this one lacks)."""
    out = Path(out_dir)
    made = []
    # the jobs the run's JCT statistics cover (its --steady window), so the CDF's median is metrics.json's p50
    jct = run_jct_hours(run)
    if jct.size:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        # the empirical CDF is a step function, 0 below the first JCT and 1 from the last
        ax.step(np.concatenate([[jct[0]], jct]), np.arange(jct.size + 1) / jct.size, where="post", lw=1.5)
        ax.set_ylim(0, 1.02)
        ax.set_xscale("log")
        from matplotlib.ticker import LogLocator

        ax.xaxis.set_minor_locator(LogLocator(subs="all", numticks=12))
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # labels on decades only: minor ones overlapped
        ax.set_xlabel("job completion time (h)")
        ax.set_ylabel("fraction of jobs")
        window = getattr(run, "steady", None)
        ax.set_title(f"{run.params['policy']} + {run.params['mechanism']} on {run.params['cluster']}"
                     + (f", arrivals {window[0]}:{window[1]}" if window else ""), fontsize=9)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "jct_cdf.png", dpi=110)
        plt.close(fig)
        made.append(out / "jct_cdf.png")
    usage = np.asarray(run.result.usage, dtype=float)
    if len(usage) > 1:
        spec = run.result.cluster
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        t = usage[:, 0] / 3600
        for col, total, label in ((1, spec.total_gpus, "GPU"), (2, spec.total_cpus, "CPU"), (3, spec.total_mem_gb, "memory")):
            ax.step(t, usage[:, col] / total * 100, where="post", lw=1, label=label)
        ax.set_xlabel("time (h)")
        ax.set_ylabel("allocated (%)")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / "utilisation.png", dpi=110)
        plt.close(fig)
        made.append(out / "utilisation.png")
    return made


def plot_jct_vs_load(rows: Sequence[Mapping[str, Any]], path: str | Path, *, x: str = "load", y: str = "avg_jct_h",
                     series: str = "mechanism", title: str = "", xlabel: str = "load (jobs/hour)",
                     ylabel: str = "average JCT (h)", bound: Mapping[Any, float] | None = None) -> Path:
    """One line per ``series`` value of ``y`` against ``x`` (e.g. average JCT vs load per mechanism)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name in dict.fromkeys(r[series] for r in rows):
        pts = sorted((r[x], r[y]) for r in rows if r[series] == name and r.get(y) is not None)
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=4, label=str(name))
    if bound:
        pts = sorted(bound.items())
        ax.plot(*zip(*pts), ls="--", color="k", lw=1, label="opt bound")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
