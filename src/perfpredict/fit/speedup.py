"""The speedup curve S(p) of one job: monotone, concave, through the origin, with a parametric tail.

Moldable/malleable schedulers (Moldable/Malleable DL scheduling, Fig. 1) allot a job an amount of device
``p`` and need its speed ``S(p)`` relative to one whole device. Measured points come in two kinds:

``p = 1/n`` (co-located)
    n copies of the job share one device; each copy runs at ``s_n`` times its solo speed, so a 1/n share of
    a device is worth ``S(1/n) = s_n`` (≤ 1, and ≥ 1/n when co-location does not lose aggregate throughput).
``p = k`` (data parallel)
    the job on k devices, ``S(k)`` = its throughput over the single-device throughput.

``S(1) = 1`` by definition (it is the unit everything is measured in), and is pinned exactly.

Shape: concave, non-decreasing, through the origin
    ``S(0) = 0`` (no device, no progress) is a knot of the fit, and the fitted curve is the least-squares
    concave non-decreasing function through it. Concavity *through the origin* means the efficiency S(p)/p
    never rises with p, which gives the two physical bounds for free: ``S(1/n) ≥ 1/n`` (time-slicing the
    device between n jobs always achieves 1/n each, so a fractional share is never worth less) and
    ``S(k) ≤ k`` (no superlinear data parallelism). Measurements that break them — co-located copies that
    thrash to an aggregate below 1, or cache effects making k devices more than k times faster — are
    projected onto the bound and show up in the residuals; a scheduler planning with the curve should not
    count on either. Without the origin knot the fit could be concave on the measured range yet turn
    convex on the segment down to zero, and the "linear to the origin" rule below the smallest measured p
    would then contradict the data.

The fit is a non-negative least-squares problem (no general QP solver needed): every concave
non-decreasing piecewise-linear function through the origin with knots ``x_k`` is
``S(p) = Σ_k e_k · min(p, x_k)`` with ``e_k ≥ 0`` (``e_k`` is the drop in slope at knot k; the slope past
the last knot is 0 only beyond the fitted range, where the tail takes over). Knots at the measured p values
lose nothing: the interpolant of any concave non-decreasing function at the data has the same residuals.
Residuals are relative (each point weighs the same whatever its size) unless ``sigma`` is given. Between
knots the curve interpolates linearly; below the smallest measured p it is the straight line to the origin.

Beyond the largest measured p: a parametric tail
    Amdahl's ``A(p) = 1 / ((1 − f) + f/p)`` (default; it saturates at ``1/(1 − f)``, the conservative guess
    for devices nobody measured) or a power law ``p^a`` (``a ≤ 1``) is fitted to the measured p > 1 points,
    then scaled to pass through the last fitted knot ``(p_max, S(p_max))`` so the curve is continuous. Its
    parameter is capped so its slope at the join does not exceed the last fitted segment's, which keeps the
    whole curve concave and non-decreasing on [0, ∞) (a plateau in the data stays a plateau). With no
    p > 1 measurement the tail is flat: nothing says more devices help. The relative uncertainty is the
    in-range value × (1 + doublings beyond the measured range), as for the rate model.

The in-range uncertainty is the leave-one-out (LOO) relative error when there are enough points to compute
it: each measured p is predicted by the curve fitted without it — the error the curve itself makes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.errors import FitError

SOLO = "solo"
COLOCATED = "colocated"
DATA_PARALLEL = "data_parallel"

AMDAHL = "amdahl"
POWER_LAW = "power_law"
FLAT = "flat"
TAIL_KINDS = (AMDAHL, POWER_LAW, FLAT)

MODEL = "concave_monotone_piecewise_linear"

#: Uncertainty assumed when there is nothing to estimate it from.
_UNKNOWN_REL_UNCERTAINTY = 0.5
#: Floor on the in-range relative uncertainty: timing noise on shared machines is rarely below this.
_MIN_REL_UNCERTAINTY = 0.01
#: How far the measured speedup at p = 1 may be from 1 (relative) and still count as normalised.
_UNIT_TOL = 1e-3
#: Weight of the S(1) = 1 constraint row relative to the heaviest data row (then made exact by rescaling).
_ANCHOR_WEIGHT = 1e6

ArrayLike = float | Sequence[float] | np.ndarray


class SpeedupFitError(FitError, ValueError):
    """Unusable speedup measurements (a :class:`ValueError` too, so plain ``except ValueError`` works)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, step="fit speedup curve")


def point_kind(p: float) -> str:
    """``colocated`` below one device, ``solo`` at one, ``data_parallel`` above."""
    return SOLO if p == 1.0 else COLOCATED if p < 1.0 else DATA_PARALLEL


@dataclass(frozen=True)
class SpeedupPoint:
    """One measurement: allocation ``p`` (devices) and the speedup over one whole device."""

    p: float
    speedup: float
    kind: str
    sigma: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """``p``, ``speedup``, ``kind``: the card's ``SpeedupPointCard`` fields."""
        return {"p": self.p, "speedup": self.speedup, "kind": self.kind}


@dataclass(frozen=True)
class Tail:
    """The extrapolation beyond the largest measured p: a shape scaled to pass through the last knot.

    ``fitted`` is the shape parameter fitted to the p > 1 measurements (Amdahl's f or the power-law
    exponent a; ``None`` when there was nothing to fit), ``used`` the value after the concavity cap.
    """

    kind: str
    anchor_p: float
    anchor_speedup: float
    used: float = 0.0
    fitted: float | None = None
    capped: bool = False

    def __call__(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        y0, p0 = self.anchor_speedup, self.anchor_p
        if self.kind == FLAT:
            return np.full_like(p, y0)
        if self.kind == AMDAHL:
            return y0 * _amdahl(p, self.used) / _amdahl(p0, self.used)
        if self.kind == POWER_LAW:
            return y0 * (p / p0) ** self.used
        raise ValueError(f"unknown tail kind {self.kind!r}")

    @property
    def limit(self) -> float:
        """``S(p → ∞)``: Amdahl's scaled ``1/(1 − f)``; infinite for an increasing power law."""
        if self.kind == FLAT or self.used <= 0:
            return self.anchor_speedup
        if self.kind == AMDAHL and self.used < 1:
            return float(self.anchor_speedup / (_amdahl(self.anchor_p, self.used) * (1.0 - self.used)))
        return float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "anchor_p": self.anchor_p, "anchor_speedup": self.anchor_speedup,
                "used": self.used, "fitted": self.fitted, "capped": self.capped}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tail:
        return cls(kind=d["kind"], anchor_p=float(d["anchor_p"]), anchor_speedup=float(d["anchor_speedup"]),
                   used=float(d.get("used", 0.0)), fitted=None if d.get("fitted") is None else float(d["fitted"]),
                   capped=bool(d.get("capped", False)))


def _amdahl(p: np.ndarray | float, f: float) -> np.ndarray:
    return 1.0 / ((1.0 - f) + f / np.asarray(p, dtype=float))


def knots_problem(knots: Any) -> str | None:
    """What makes a saved curve's ``knots`` (``{"p": [...], "speedup": [...]}``) impossible for
    :class:`SpeedupCurve`'s fit (which starts at the origin and rises, at allocations that increase), or None: how
    a hand-edited card is caught on reading instead of answering ``S(1) = -1`` or a curve through knots out of
    order."""
    if not isinstance(knots, dict):
        return "knots must be an object of p and speedup lists"
    try:
        ps, ss = [float(v) for v in knots.get("p", ())], [float(v) for v in knots.get("speedup", ())]
    except (TypeError, ValueError):
        return "knots must be numbers"
    if len(ps) != len(ss) or len(ps) < 2:
        return f"knots need as many speedups as allocations, at least two ({len(ps)} and {len(ss)} given)"
    if not all(math.isfinite(v) for v in ps + ss):
        return "knots must be finite numbers"
    if ps[0] != 0.0 or ss[0] != 0.0:
        return f"the first knot must be the origin (0, 0), got ({ps[0]:g}, {ss[0]:g})"
    if any(b <= a for a, b in zip(ps, ps[1:])):
        return f"knot allocations must increase, got {', '.join(f'{v:g}' for v in ps)}"
    slack = 1e-9 * max(1.0, max(ss))
    if any(b < a - slack for a, b in zip(ss, ss[1:])):
        return f"knot speedups must not fall (the fit is monotone), got {', '.join(f'{v:.3g}' for v in ss)}"
    if 1.0 not in ps or abs(ss[ps.index(1.0)] - 1.0) > 1e-9:
        return ("a knot must be S(1) = 1 (speedups are relative to one device), got "
                + (f"S(1) = {ss[ps.index(1.0)]:.6g}" if 1.0 in ps else "no knot at p = 1"))
    slopes = [(s1 - s0) / (p1 - p0) for p0, p1, s0, s1 in zip(ps, ps[1:], ss, ss[1:])]
    if any(b > a * (1 + 1e-6) + slack for a, b in zip(slopes, slopes[1:])):
        return "knot slopes must not rise (the fit is concave: a device more never adds more than the one before)"
    return None


def tail_problem(tail: Any) -> str | None:
    """What makes a saved curve's ``tail`` impossible for :class:`Tail` (a known shape through a point of the
    first quadrant, its parameter in [0, 1] as the fit leaves it), or None: a hand-edited ``used`` of 2 ran a job
    faster on half its GPUs, an unknown kind or a zero anchor failed in the middle of a simulation."""
    if not isinstance(tail, dict):
        return "tail must be an object (kind, anchor_p, anchor_speedup, used)"
    if tail.get("kind") not in TAIL_KINDS:
        return f"tail kind must be one of {', '.join(TAIL_KINDS)}, got {tail.get('kind')!r}"
    try:
        p0, y0, used = float(tail["anchor_p"]), float(tail["anchor_speedup"]), float(tail.get("used", 0.0))
    except (KeyError, TypeError, ValueError):
        return "tail needs numbers anchor_p, anchor_speedup and used"
    if not (math.isfinite(p0) and p0 > 0 and math.isfinite(y0) and y0 > 0):
        return f"the tail's anchor must be a point with p > 0 and speedup > 0, got ({p0:g}, {y0:g})"
    if not 0.0 <= used <= 1.0:
        return f"the tail's parameter (Amdahl's f or the power law's exponent) must be in [0, 1], got {used:g}"
    return None


def curve_problem(d: Any) -> str | None:
    """What makes a saved curve (:meth:`SpeedupCurve.to_dict`'s dict, a card's ``speedup_curve.fit``) unreadable
    or impossible, or None: its knots and tail (:func:`knots_problem`, :func:`tail_problem`), a tail that does
    not start at the last knot (the curve jumped there), the points and their sigmas, and a negative
    uncertainty. A hand-edited card is caught on reading, not in the middle of ``show`` or a simulation."""
    if not isinstance(d, dict):
        return f"a speedup curve is a JSON object, got {type(d).__name__}"
    if d.get("model", MODEL) != MODEL:
        return f"model {d.get('model')!r} is not {MODEL!r}"
    missing = [k for k in ("points", "knots", "tail", "rel_uncertainty") if k not in d]
    if missing:
        return f"no {', '.join(missing)} (write one with SpeedupCurve.to_dict)"
    problem = knots_problem(d["knots"]) or tail_problem(d["tail"])
    if problem:
        return problem
    last = (float(d["knots"]["p"][-1]), float(d["knots"]["speedup"][-1]))
    anchor = (float(d["tail"]["anchor_p"]), float(d["tail"]["anchor_speedup"]))
    if any(abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(anchor, last)):
        return (f"the tail must start at the last knot ({last[0]:g}, {last[1]:.6g}), got its anchor at "
                f"({anchor[0]:g}, {anchor[1]:.6g})")
    pts, sig = d["points"], d.get("sigma")
    if not isinstance(pts, list) or not all(isinstance(q, dict) for q in pts):
        return "points must be a list of objects with p and speedup"
    if sig is not None and (not isinstance(sig, list) or len(sig) != len(pts)):
        return f"sigma must be null or one value per point ({len(pts)} points)"
    try:
        values = [float(q["p"]) for q in pts] + [float(q["speedup"]) for q in pts]
        values += [float(v) for v in (sig or []) if v is not None]
    except (KeyError, TypeError, ValueError):
        return "points need numbers p and speedup, and sigma must hold numbers"
    try:
        unc = [float(d["rel_uncertainty"]), *([] if d.get("loo_rel_error") is None else [float(d["loo_rel_error"])])]
    except (TypeError, ValueError):
        return "rel_uncertainty and loo_rel_error must be numbers"
    if not all(math.isfinite(v) and v > 0 for v in values):
        return "points' p, speedup and sigma must be finite numbers above 0"
    if not all(math.isfinite(v) and v >= 0 for v in unc):
        return f"rel_uncertainty and loo_rel_error must be finite numbers >= 0, got {', '.join(f'{v:g}' for v in unc)}"
    if not isinstance(d.get("notes", ""), str):
        return "notes must be text"
    return None


@dataclass(frozen=True)
class SpeedupCurve:
    """A fitted speedup curve: ``speedup(p)``, ``uncertainty(p)``, ``efficiency(p)``; JSON via ``to_dict``.

    ``knots_p``/``knots_speedup`` are the fitted piecewise-linear curve, starting at the origin; ``points``
    the measurements it was fitted to (in the order given).
    """

    knots_p: tuple[float, ...]
    knots_speedup: tuple[float, ...]
    tail: Tail
    points: tuple[SpeedupPoint, ...]
    rel_uncertainty: float
    loo_rel_error: float | None = None
    notes: str = ""

    # -- predictions -----------------------------------------------------------------------------------
    def speedup(self, p: ArrayLike) -> np.ndarray | float:
        """``S(p)`` (scalar in → scalar out). ``S(0) = 0``; negative or non-finite p is an error."""
        x = _alloc(p, allow_zero=True)
        out = self._speedup(x)
        return float(out) if out.ndim == 0 else out

    def uncertainty(self, p: ArrayLike) -> np.ndarray | float:
        """Relative 1-sigma uncertainty of ``S(p)``: the in-range value × (1 + doublings outside the range)."""
        x = _alloc(p, allow_zero=False)
        lo, hi = self.p_range
        doublings = np.maximum(0.0, np.log2(x / hi)) + np.maximum(0.0, np.log2(lo / x))
        out = self.rel_uncertainty * (1.0 + doublings)
        return float(out) if out.ndim == 0 else out

    def efficiency(self, p: ArrayLike) -> np.ndarray | float:
        """``S(p) / p``: speed per device allotted; non-increasing in p by construction."""
        x = _alloc(p, allow_zero=False)
        out = self._speedup(x) / x
        return float(out) if out.ndim == 0 else out

    def is_extrapolation(self, p: float) -> bool:
        lo, hi = self.p_range
        return not (lo <= float(p) <= hi)

    def _speedup(self, x: np.ndarray) -> np.ndarray:
        kp, ks = np.asarray(self.knots_p), np.asarray(self.knots_speedup)
        inside = np.interp(x, kp, ks)
        above = x > kp[-1]
        if not np.any(above):
            return inside
        return np.where(above, self.tail(np.where(above, x, kp[-1])), inside)

    # -- descriptions ----------------------------------------------------------------------------------
    @property
    def p_range(self) -> tuple[float, float]:
        """Smallest and largest measured allocation (p = 1 included: it is exact by definition)."""
        return self.knots_p[1], self.knots_p[-1]

    @property
    def knots(self) -> list[tuple[float, float]]:
        """The fitted curve's ``(p, S(p))`` vertices, origin first."""
        return list(zip(self.knots_p, self.knots_speedup, strict=True))

    @property
    def saturation(self) -> float:
        """``S(p → ∞)`` under the tail (``inf`` for a still-rising power law or a linear Amdahl tail)."""
        return self.tail.limit

    @property
    def fit_points(self) -> int:
        return len(self.points)

    @property
    def fitted(self) -> np.ndarray:
        """The curve at each measured point."""
        return self._speedup(np.array([q.p for q in self.points]))

    @property
    def residuals(self) -> np.ndarray:
        """Measured minus fitted speedup, per point (in the order given)."""
        return np.array([q.speedup for q in self.points]) - self.fitted

    @property
    def relative_residuals(self) -> np.ndarray:
        """Residuals over the measured speedup."""
        return self.residuals / np.array([q.speedup for q in self.points])

    @property
    def rms_rel_residual(self) -> float:
        return float(np.sqrt(np.mean(self.relative_residuals ** 2)))

    @property
    def params(self) -> dict[str, Any]:
        """Everything fitted, in one flat-ish dict (knots, tail parameters, uncertainty)."""
        return {"knots_p": list(self.knots_p), "knots_speedup": list(self.knots_speedup),
                "tail": self.tail.to_dict(), "saturation": self.saturation,
                "rel_uncertainty": self.rel_uncertainty, "loo_rel_error": self.loo_rel_error}

    # -- JSON round trip ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` rebuilds the same curve without refitting."""
        sig = [q.sigma for q in self.points]
        return {
            "model": MODEL,
            "knots": {"p": list(self.knots_p), "speedup": list(self.knots_speedup)},
            "tail": self.tail.to_dict(),
            "points": [q.to_dict() for q in self.points],
            "sigma": None if all(s is None for s in sig) else sig,
            "rel_uncertainty": self.rel_uncertainty,
            "loo_rel_error": self.loo_rel_error,
            "residuals": [float(r) for r in self.residuals],
            "relative_residuals": [float(r) for r in self.relative_residuals],
            "notes": self.notes,
            "extrapolation": (f"{self.tail.kind} tail scaled to the last knot, slope capped to keep the curve "
                              "concave; linear to the origin below the smallest p; uncertainty x (1 + doublings "
                              "outside the measured range)"),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeedupCurve:
        problem = curve_problem(d)
        if problem:
            raise ValueError(f"not a speedup curve: {problem}")
        sig = d.get("sigma") or [None] * len(d["points"])
        pts = tuple(SpeedupPoint(float(q["p"]), float(q["speedup"]), q.get("kind") or point_kind(float(q["p"])),
                                 None if s is None else float(s)) for q, s in zip(d["points"], sig, strict=True))
        return cls(knots_p=tuple(float(v) for v in d["knots"]["p"]),
                   knots_speedup=tuple(float(v) for v in d["knots"]["speedup"]),
                   tail=Tail.from_dict(d["tail"]), points=pts, rel_uncertainty=float(d["rel_uncertainty"]),
                   loo_rel_error=None if d.get("loo_rel_error") is None else float(d["loo_rel_error"]),
                   notes=d.get("notes", ""))

    @classmethod
    def from_throughputs(cls, p_values: Sequence[float], throughputs: Sequence[float],
                         sigma: ArrayLike | None = None, *, tail: str = AMDAHL,
                         aggregate_colocated: bool = False) -> SpeedupCurve:
        """Fit from raw throughputs (samples/s), normalised by the (mean) throughput measured at p = 1.

        At p = 1/n the throughput is that of *one* of the n co-located copies; pass
        ``aggregate_colocated=True`` if it is the copies' total (it is then divided by n = 1/p). ``sigma``
        is in throughput units. A p = 1 measurement is required: it is the unit.
        """
        p = _array(p_values, "p")
        t = _array(throughputs, "throughputs")
        if p.shape != t.shape:
            raise SpeedupFitError(f"{p.size} allocations but {t.size} throughputs")
        _check_finite_positive(p, "p")
        _check_finite_positive(t, "throughput")
        unit = p == 1.0
        if not np.any(unit):
            raise SpeedupFitError("no measurement at p = 1 (one whole device): throughputs cannot be turned into "
                                  f"speedups without it; got p = {sorted(set(p.tolist()))}")
        sig = None if sigma is None else _broadcast_sigma(sigma, p.size)
        if aggregate_colocated:  # one copy's share of the total, and of its spread
            t = np.where(p < 1.0, t * p, t)
            sig = None if sig is None else np.where(p < 1.0, sig * p, sig)
        base = float(np.mean(t[unit]))
        s = t / base
        sig = None if sig is None else sig / base
        return fit_speedup_curve(p, s, sig, tail=tail)


# ---------------------------------------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------------------------------------
def fit_speedup_curve(p: Sequence[float], speedup: Sequence[float], sigma: ArrayLike | None = None, *,
                      tail: str = AMDAHL, cross_validate: bool = True) -> SpeedupCurve:
    """Fit the monotone concave speedup curve to measured ``speedup`` at allocations ``p``.

    ``p``: 1/n for n co-located copies, k for k data-parallel devices (any positive value is accepted).
    ``speedup``: relative to one device, so the value at p = 1, if given, must be 1 (it is added if absent;
    use :meth:`SpeedupCurve.from_throughputs` for raw throughputs). ``sigma``: 1-sigma of each speedup
    (scalar or per point, same units); by default errors are taken as relative. ``tail``: ``amdahl``
    (default), ``power_law`` or ``flat``. ``cross_validate=False`` skips the LOO error.
    Raises :class:`SpeedupFitError` (a ``ValueError``) on unusable input.
    """
    if tail not in TAIL_KINDS:
        raise SpeedupFitError(f"unknown tail kind {tail!r}; expected one of {', '.join(TAIL_KINDS)}")
    x = _array(p, "p")
    s = _array(speedup, "speedup")
    if x.shape != s.shape:
        raise SpeedupFitError(f"{x.size} allocations p but {s.size} speedups")
    _check_finite_positive(x, "p")
    _check_finite_positive(s, "speedup")
    sig = None if sigma is None else _broadcast_sigma(sigma, x.size)
    unit = x == 1.0
    if np.any(unit) and abs(float(np.mean(s[unit])) - 1.0) > _UNIT_TOL:
        raise SpeedupFitError(f"the speedup at p = 1 must be 1 (speedups are relative to one device), got "
                              f"{float(np.mean(s[unit])):.6g}; normalise, or use SpeedupCurve.from_throughputs")
    if np.all(unit):
        raise SpeedupFitError("need at least one measurement at p != 1 (co-located 1/n or k devices); "
                              "S(1) = 1 alone says nothing about the curve")
    pts = tuple(SpeedupPoint(float(a), float(b), point_kind(float(a)), None if sig is None else float(c))
                for a, b, c in zip(x, s, sig if sig is not None else [None] * x.size, strict=True))
    try:
        curve = _fit(pts, tail, cross_validate)
    except np.linalg.LinAlgError:  # no convergence: speedups or sigmas near the float range's ends (1e-160)
        curve = None
    if curve is None or not all(math.isfinite(v) for v in (*curve.knots_speedup, curve.tail.used)):
        # e.g. speedups of 1e155, whose squares overflow: a curve of NaN would answer NaN to every question
        raise SpeedupFitError(f"cannot fit a speedup curve to speedups from {s.min():.3g} to {s.max():.3g}"
                              + ("" if sig is None else f" with sigmas from {sig.min():.3g} to {sig.max():.3g}"))
    return curve


def _fit(pts: tuple[SpeedupPoint, ...], tail_kind: str, cross_validate: bool) -> SpeedupCurve:
    x = np.array([q.p for q in pts])
    s = np.array([q.speedup for q in pts])
    sig = np.array([q.sigma if q.sigma is not None else q.speedup for q in pts])  # default: relative errors
    knots_p, knots_s = _concave_fit(x, s, sig)
    tail = _fit_tail(x, s, sig, knots_p, knots_s, tail_kind)

    notes = []
    if not np.any(x == 1.0):
        notes.append("no p = 1 measurement: S(1) = 1 added by definition")
    if tail.kind == FLAT and tail_kind != FLAT:
        notes.append("no p > 1 measurement: flat tail (no speedup assumed beyond the measured range)")
    if tail.capped:
        notes.append(f"{tail.kind} tail parameter capped from {tail.fitted:.4g} to {tail.used:.4g} so the tail's "
                     "slope does not exceed the last fitted segment's (concavity)")
    curve = SpeedupCurve(knots_p, knots_s, tail, pts, _UNKNOWN_REL_UNCERTAINTY, None, "; ".join(notes))

    held = np.unique(x[x != 1.0])
    loo = _loo(pts, held, tail_kind) if cross_validate and held.size >= 2 else None
    if loo is not None and np.isfinite(loo):
        unc = max(loo, _MIN_REL_UNCERTAINTY)
    else:
        resid = curve.rms_rel_residual
        # one non-unit p: the curve passes through it, which says nothing about its error
        unc = max(_UNKNOWN_REL_UNCERTAINTY / 2, resid) if held.size < 2 else max(resid, _MIN_REL_UNCERTAINTY)
    return SpeedupCurve(knots_p, knots_s, tail, pts, float(unc), loo, curve.notes)


def _concave_fit(x: np.ndarray, s: np.ndarray, sig: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Weighted least-squares concave non-decreasing fit through the origin with S(1) = 1.

    ``S(p) = Σ_k e_k min(p, knot_k)``, ``e ≥ 0`` (non-negative least squares). ``S(1) = 1`` is a heavily
    weighted extra row, then made exact by dividing by S(1): the feasible set is a cone, so rescaling keeps
    the curve concave and non-decreasing.
    """
    from scipy.optimize import nnls  # lazy: keep `import perfpredict` free of scipy

    knots = np.unique(np.append(x, 1.0))
    w = 1.0 / sig
    A = np.minimum(x[:, None], knots[None, :]) * w[:, None]
    big = _ANCHOR_WEIGHT * float(w.max())
    A = np.vstack([A, big * np.minimum(1.0, knots)[None, :]])
    y = np.append(s * w, big)
    e, _ = nnls(A, y, maxiter=50 * knots.size)
    e = _polish(A[:-1], y[:-1], A[-1] / big, e)
    vals = np.minimum(knots[:, None], knots[None, :]) @ e
    unit = vals[np.searchsorted(knots, 1.0)]
    if not unit > 0:  # cannot happen with the anchor row; guard against a solver failure
        raise SpeedupFitError("speedup fit failed: S(1) came out non-positive")
    vals = vals / unit
    vals[np.searchsorted(knots, 1.0)] = 1.0
    return (0.0, *map(float, knots)), (0.0, *map(float, vals))


def _polish(A: np.ndarray, y: np.ndarray, a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Re-solve on NNLS's active set with ``a·e = 1`` as an exact equality (the 10⁶ weight costs digits).

    Kept only if it stays feasible (e ≥ 0) and is no worse; otherwise the NNLS solution stands.
    """
    free = e > 0
    k = int(free.sum())
    if k == 0:
        return e
    Af = A[:, free]
    kkt = np.block([[Af.T @ Af, a[free][:, None]], [a[free][None, :], np.zeros((1, 1))]])
    rhs = np.append(Af.T @ y, 1.0)
    sol, *_ = np.linalg.lstsq(kkt, rhs, rcond=None)
    cand = np.zeros_like(e)
    cand[free] = sol[:k]
    if np.any(cand < 0) or not abs(a @ cand - 1.0) < 1e-9:
        return e
    scale = a @ e
    ref = e / scale if scale > 0 else e
    return cand if np.sum((A @ cand - y) ** 2) <= np.sum((A @ ref - y) ** 2) * (1 + 1e-9) + 1e-30 else e


def _fit_tail(x: np.ndarray, s: np.ndarray, sig: np.ndarray, knots_p: tuple[float, ...],
              knots_s: tuple[float, ...], kind: str) -> Tail:
    """Fit the tail shape to the p > 1 measurements; scale it to the last knot; cap its slope there."""
    p_m, y_m = knots_p[-1], knots_s[-1]
    slope = (knots_s[-1] - knots_s[-2]) / (knots_p[-1] - knots_p[-2])  # last segment, ≥ 0
    g = max(0.0, slope) / y_m  # the tail's d(log S)/dp at the join must not exceed this
    dp = x > 1.0
    if kind == FLAT or not np.any(dp):
        return Tail(FLAT, p_m, y_m)
    rel = sig[dp] / s[dp]  # relative 1-sigma
    if kind == AMDAHL:
        # 1/S = (1 - f) + f/p  ⇔  1/S - 1 = f (1/p - 1): linear in f. S·δ(1/S) ≈ -δS/S, so weighting the
        # rows by S/rel minimises the relative residuals of S.
        u, v, w = 1.0 / s[dp] - 1.0, 1.0 / x[dp] - 1.0, s[dp] / rel
        fitted = float(np.clip(np.sum(w * w * u * v) / np.sum(w * w * v * v), 0.0, 1.0))
        # slope of y_m·A(p)/A(p_m) at p_m over y_m is f / (p_m ((1-f) p_m + f)); solve for f at equality
        cap = g * p_m * p_m / (1.0 + g * p_m * (p_m - 1.0))
    else:
        lp, ls, w = np.log(x[dp]), np.log(s[dp]), 1.0 / rel
        fitted = float(np.clip(np.sum(w * w * lp * ls) / np.sum(w * w * lp * lp), 0.0, 1.0))
        cap = g * p_m  # slope of y_m (p/p_m)^a at p_m over y_m is a / p_m
    cap = min(max(cap, 0.0), 1.0)
    used = min(fitted, cap)
    return Tail(kind, p_m, y_m, used=used, fitted=fitted, capped=used < fitted * (1.0 - 1e-12) - 1e-15)


def _loo(pts: tuple[SpeedupPoint, ...], held: np.ndarray, tail_kind: str) -> float:
    """Mean |relative error| predicting each measured p (all its repeats) from a fit without it."""
    errs = []
    for q in held:
        rest = tuple(pt for pt in pts if pt.p != q)
        sub = _fit(rest, tail_kind, cross_validate=False)
        pred = float(sub.speedup(q))
        errs.append(float(np.mean([abs(pred - pt.speedup) / pt.speedup for pt in pts if pt.p == q])))
    return float(np.mean(errs))


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------
def _array(values: Any, name: str) -> np.ndarray:
    try:
        a = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise SpeedupFitError(f"{name} must be a sequence of numbers ({exc})") from None
    if a.ndim != 1:
        raise SpeedupFitError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size == 0:
        raise SpeedupFitError(f"no {name} values given")
    return a.copy()


def _check_finite_positive(a: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(a)
    if np.any(bad):
        raise SpeedupFitError(f"{name} contains NaN or infinite values at positions {np.flatnonzero(bad).tolist()}")
    if np.any(a <= 0):
        raise SpeedupFitError(f"{name} must be > 0, got {a[a <= 0].tolist()} at positions "
                              f"{np.flatnonzero(a <= 0).tolist()}")


def _broadcast_sigma(sigma: ArrayLike, n: int) -> np.ndarray:
    sig = np.asarray(sigma, dtype=float)
    if sig.ndim == 0:
        sig = np.full(n, float(sig))
    if sig.shape != (n,):
        raise SpeedupFitError(f"sigma must be a scalar or one value per point ({n}), got shape {sig.shape}")
    _check_finite_positive(sig, "sigma")
    return sig


def _alloc(p: ArrayLike, *, allow_zero: bool) -> np.ndarray:
    x = np.asarray(p, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("allocation p must be finite")
    if np.any(x < 0) or (not allow_zero and np.any(x == 0)):
        raise ValueError(f"allocation p must be {'>= 0' if allow_zero else '> 0'}")
    return x
