"""Plots of a PerformanceCard (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

from perfpredict.card import PerformanceCard

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _pyplot():
    return plt


def plot_throughput(card: PerformanceCard, path: str | Path) -> Path | None:
    """Measured samples/s (median, p10–p90 bars) vs batch size, with the fitted curves and uncertainty band."""
    ok = card.measured_points()
    if not ok:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    b = np.array([p.batch_size for p in ok], float)
    r = np.array([p.samples_per_s for p in ok])
    lo = b / np.array([p.p90_s for p in ok])
    hi = b / np.array([p.p10_s for p in ok])
    ax.errorbar(b, r, yerr=[r - lo, hi - r], fmt="o", color="black", capsize=3, label="measured (median, p10–p90)",
                zorder=3)
    if card.rate_model is not None:
        from perfpredict.fit.rate import Candidate

        model = card.rate()
        grid = np.geomspace(max(1.0, b.min() / 2), b.max() * 2, 200)
        y = model.throughput(grid)
        unc = np.array([model.uncertainty(x) for x in grid])
        ax.plot(grid, y, color="tab:blue", label=f"selected: {model.kind}")
        ax.fill_between(grid, y / (1 + unc), y * (1 + unc), color="tab:blue", alpha=0.15,
                        label="±1σ (widens outside measured range)")
        for c in model.candidates:
            if c.kind != model.kind:
                inside = np.geomspace(b.min(), b.max(), 100)
                cand = Candidate(c.kind, c.coefficients)
                ax.plot(inside, inside / cand.iter_time(inside), ls="--", color="tab:orange", label=f"{c.kind}")
        lo_b, hi_b = model.batch_range
        ax.axvspan(lo_b, hi_b, color="grey", alpha=0.06)
    for p in card.throughput:
        if p.status == "oom":
            ax.axvline(p.batch_size, color="tab:red", ls=":", lw=1)
    return _save(fig, ax, path, "samples / s",
                 f"{card.model.name} — {card.run.mode} on {card.device.kind} ({card.device.name[:40]})")


def plot_memory(card: PerformanceCard, path: str | Path) -> Path | None:
    """Measured peak memory vs batch size beside the Horus eq. 2 estimate."""
    pts = [m for m in card.memory if m.peak_bytes is not None]
    if not pts:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    b = [m.batch_size for m in pts]
    label = "peak RSS increase (measured)" if pts[0].kind == "cpu_rss_increase" else "CUDA peak allocated (measured)"
    ax.plot(b, [m.peak_bytes / 2**20 for m in pts], "o-", color="black", label=label)
    if any(m.cuda_reserved_bytes for m in pts):
        ax.plot(b, [(m.cuda_reserved_bytes or 0) / 2**20 for m in pts], "s--", color="grey", label="CUDA reserved")
    est = [m for m in pts if m.analytic is not None]
    if est:
        ax.plot([m.batch_size for m in est], [m.analytic.total / 2**20 for m in est], "^--", color="tab:green",
                label="Horus eq. 2 estimate (analytic)")
    return _save(fig, ax, path, "MiB", f"{card.model.name} — memory ({card.device.kind})")


def _save(fig, ax, path: str | Path, ylabel: str, title: str) -> Path:
    """Batch size on a log2 x-axis, labels, grid, legend; write the PNG and free the figure."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_card(card: PerformanceCard, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = [plot_throughput(card, out / "throughput.png"), plot_memory(card, out / "memory.png")]
    return [p for p in made if p is not None]
