"""Horus's co-location interference model: slowdown as a function of the pair's cumulative GPU utilisation.

Horus (seed 004, §3.2, Fig. 4) observes that when two jobs share a GPU, the slowdown each suffers,
``T_deg = |T_colo − T_solo| / T_solo``, tracks the *sum* of their solo GPU utilisations ``U`` (in percent):
roughly linear while ``U ≤ 100`` (the kernels mostly fit between each other's), and non-linear once the GPU
is over-committed (``U > 100``), where a quadratic fits (R² 0.88 on a GTX 1080, 0.84 on an RTX 2080).

:func:`fit_interference` fits exactly that: ordinary least squares of ``T_deg = a₀ + a₁·U`` on the points with
``U ≤ knee`` and ``T_deg = b₀ + b₁·U + b₂·U²`` on those above, each branch with its own R². The branches are
fitted independently (as in the paper); the model reports the jump between them at the knee so a user can
see whether the data agree. A branch with too few distinct utilisations to fit (2 for the line, 3 for the
quadratic) uses the other branch's formula, and the fit says so in ``notes``, rather than inventing a shape.

The data come from :class:`perfpredict.card.PairColocation` entries of measured cards (CUDA runs fill
``cumulative_gpu_utilization``); :func:`interference_points` collects them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.polynomial import polynomial as P

__all__ = ["InterferenceFitError", "InterferenceModel", "fit_interference", "interference_points"]


class InterferenceFitError(ValueError):
    """The points cannot support the fit (too few, non-finite, or negative)."""


def _r2(y: np.ndarray, yhat: np.ndarray) -> float | None:
    if y.size < 2:
        return None
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        return None
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot


@dataclass(frozen=True)
class InterferenceModel:
    """``T_deg(U)``: a line at or below the knee, a quadratic above (coefficients lowest order first).

    A branch that could not be fitted is ``None`` and the other branch's formula is used on its side too.
    """

    knee: float
    linear: tuple[float, float] | None
    quadratic: tuple[float, float, float] | None
    r2_linear: float | None
    r2_quadratic: float | None
    n_linear: int
    n_quadratic: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def _branch(self, above: bool) -> tuple[float, ...]:
        first, other = (self.quadratic, self.linear) if above else (self.linear, self.quadratic)
        return first if first is not None else other  # type: ignore[return-value]

    def predict(self, cumulative_utilization: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
        """Predicted slowdown (clipped at 0) at the given cumulative utilisation(s), as fractions (1.0 = 100%)."""
        u = np.asarray(cumulative_utilization, dtype=float)
        lo = P.polyval(u, self._branch(above=False))
        hi = P.polyval(u, self._branch(above=True))
        out = np.maximum(np.where(u <= self.knee, lo, hi), 0.0)
        return float(out) if out.ndim == 0 else out

    @property
    def jump_at_knee(self) -> float | None:
        """Quadratic branch minus linear branch at the knee; near 0 when the two fits agree. None if one is missing."""
        if self.linear is None or self.quadratic is None:
            return None
        return float(P.polyval(self.knee, self.quadratic) - P.polyval(self.knee, self.linear))

    def to_dict(self) -> dict:
        return {"model": "horus_linear_below_knee_quadratic_above", "knee": self.knee,
                "linear": None if self.linear is None else list(self.linear),
                "quadratic": None if self.quadratic is None else list(self.quadratic),
                "r2_linear": self.r2_linear, "r2_quadratic": self.r2_quadratic, "n_linear": self.n_linear,
                "n_quadratic": self.n_quadratic, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: dict) -> InterferenceModel:
        lin, quad = d.get("linear"), d.get("quadratic")
        return cls(knee=float(d["knee"]), linear=None if lin is None else tuple(lin),
                   quadratic=None if quad is None else tuple(quad), r2_linear=d.get("r2_linear"),
                   r2_quadratic=d.get("r2_quadratic"), n_linear=int(d["n_linear"]),
                   n_quadratic=int(d["n_quadratic"]), notes=tuple(d.get("notes", ())))


def fit_interference(cumulative_utilization: Sequence[float], slowdown: Sequence[float],
                     knee: float = 1.0) -> InterferenceModel:
    """Fit Horus's piecewise slowdown model to (cumulative utilisation, T_deg) pairs.

    Utilisations are fractions as the card stores them (a pair of jobs at 60% and 70% is 1.3); ``knee`` is
    where the GPU becomes over-committed (1.0 = 100%). Least squares on each side; see the module docstring.
    """
    u = np.asarray(cumulative_utilization, dtype=float)
    y = np.asarray(slowdown, dtype=float)
    if u.shape != y.shape or u.ndim != 1:
        raise InterferenceFitError(f"need two 1-d sequences of equal length, got shapes {u.shape} and {y.shape}")
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(y))):
        raise InterferenceFitError("utilisations and slowdowns must be finite")
    if np.any(u < 0) or np.any(y < 0):
        raise InterferenceFitError("utilisations and slowdowns must be >= 0 (T_deg is an absolute relative change)")
    below, above = u <= knee, u > knee
    nb, na = int(below.sum()), int(above.sum())
    lin = quad = None
    r2_lin = r2_quad = None
    if len(np.unique(u[below])) >= 2:
        c = P.polyfit(u[below], y[below], 1)
        lin = (float(c[0]), float(c[1]))
        r2_lin = _r2(y[below], P.polyval(u[below], c))
    if len(np.unique(u[above])) >= 3:
        c = P.polyfit(u[above], y[above], 2)
        quad = (float(c[0]), float(c[1]), float(c[2]))
        r2_quad = _r2(y[above], P.polyval(u[above], c))
    if lin is None and quad is None:
        raise InterferenceFitError(f"too few distinct utilisations to fit either branch: {nb} point(s) at or "
                                   f"below the knee ({knee:g}), {na} above; need 2 distinct below or 3 above")
    notes = []
    if lin is None:
        notes.append(f"{nb} point(s) at or below {knee:g}: the quadratic fit is used there too")
    if quad is None:
        notes.append(f"{na} point(s) above {knee:g}: the linear fit is extended there")
    return InterferenceModel(knee=float(knee), linear=lin, quadratic=quad, r2_linear=r2_lin, r2_quadratic=r2_quad,
                             n_linear=nb, n_quadratic=na, notes=tuple(notes))


def interference_points(cards: Iterable) -> tuple[list[float], list[float]]:
    """(cumulative utilisation, slowdown) pairs from cards' co-location pairs: each measured pair gives two
    points (the job's slowdown and the partner's, at the same cumulative utilisation). Pairs without a
    utilisation (CPU runs) or that did not run are skipped."""
    us: list[float] = []
    ys: list[float] = []
    for card in cards:
        co = getattr(card, "colocation", None)
        for pair in (co.pairs if co is not None else []):
            if pair.status != "ok" or pair.cumulative_gpu_utilization is None:
                continue
            for s in (pair.job_slowdown, pair.partner_slowdown):
                if s is not None:
                    us.append(float(pair.cumulative_gpu_utilization))
                    ys.append(float(s))
    return us, ys
