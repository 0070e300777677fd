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


def _save(fig, ax, path: str | Path, ylabel: str, title: str, xlabel: str = "batch size") -> Path:
    """A log2 x-axis, labels, grid, legend; write the PNG and free the figure."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_speedup(card: PerformanceCard, path: str | Path) -> Path | None:
    """Measured speedup points (fractional p = 1/n from co-location, p = k from DDP) and the fitted curve."""
    sc = card.speedup_curve
    if sc is None:
        return None
    from perfpredict.fit.speedup import SpeedupCurve

    curve = SpeedupCurve.from_dict(sc.fit)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    p = np.array([q.p for q in sc.points])
    grid = np.geomspace(p.min() / 1.5, p.max() * 2, 200)
    y = np.asarray(curve.speedup(grid), float)
    unc = np.asarray(curve.uncertainty(grid), float)
    ax.plot(grid, grid, ls=":", color="grey", label="linear (ideal)")
    ax.plot(grid, y, color="tab:blue", label="fitted: monotone, concave")
    ax.fill_between(grid, y / (1 + unc), y * (1 + unc), color="tab:blue", alpha=0.15, label="±1σ")
    for kind, marker, color in (("colocated", "s", "tab:orange"), ("data_parallel", "o", "black"),
                                ("solo", "D", "tab:green")):
        pts = [q for q in sc.points if q.kind == kind]
        if pts:
            ax.plot([q.p for q in pts], [q.speedup for q in pts], marker, color=color, ls="none",
                    label={"colocated": "co-located copies (p = 1/n)", "data_parallel": "DDP ranks (p = k)",
                           "solo": "solo (p = 1)"}[kind], zorder=3)
    ax.set_yscale("log", base=2)
    out = _save(fig, ax, path, "speedup S(p)", f"{card.model.name} — speedup curve ({sc.device})",
                xlabel="allocation p (devices)")
    return out


def plot_sensitivity(card: PerformanceCard, path: str | Path) -> Path | None:
    """Synergy's W[c, m] as a heat-map, probed CPU counts marked, the demand vector circled."""
    sens = card.sensitivity
    if sens is None:
        return None
    w = np.asarray(sens.matrix, float)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    im = ax.imshow(w, origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label="samples / s")
    mem = sens.mem_values_gb
    # The memory values differ by cache sizes that can be tiny next to the process itself: label each column
    # with enough digits to tell them apart, and with the share of the dataset its cache holds.
    digits = 2
    while digits < 9 and len({f"{m:.{digits}g}" for m in mem}) < len(set(mem)):
        digits += 1
    labels = [f"{m:.{digits}g}" for m in mem]
    if sens.cache_fractions and len(sens.cache_fractions) == len(mem):
        labels = [f"{lab}\n{f:.0%} cached" for lab, f in zip(labels, sens.cache_fractions)]
    ax.set_xticks(range(len(mem)), labels, fontsize=7)
    ax.set_yticks(range(len(sens.cpu_values)), [str(c) for c in sens.cpu_values], fontsize=7)
    ax.set_xlabel("memory (GB)")
    ax.set_ylabel("CPUs")
    for c in sens.profiled_cpu_values:
        ax.annotate("probed", (-0.45, sens.cpu_values.index(c)), color="white", fontsize=6, va="center")
    ci = sens.cpu_values.index(sens.demand.cpus)
    mi = int(np.argmin([abs(m - sens.demand.mem_gb) for m in sens.mem_values_gb]))
    ax.plot([mi], [ci], "o", mfc="none", mec="red", ms=14, mew=2, label="demand")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(f"{card.model.name} — CPU/memory sensitivity ({sens.device})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_card(card: PerformanceCard, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = [plot_throughput(card, out / "throughput.png"), plot_memory(card, out / "memory.png"),
            plot_speedup(card, out / "speedup.png"), plot_sensitivity(card, out / "sensitivity.png")]
    return [p for p in made if p is not None]
