"""Throughput-vs-batch models fitted to measurements, and GENIE's latency Lat(n, b).

Two candidate forms are fitted to the same (batch size, samples/s) measurements:

``quadratic_rate``
    GENIE eq. 7, the per-GPU processing rate as a quadratic in the (local) batch size:
    ``sPR(b) = k0 + k1·b + k2·b²`` (samples/s); iteration time ``T(b) = b / sPR(b)``.
``linear_time``
    Iteration time linear in batch size, ``T(b) = alpha + beta·b`` (s), throughput ``b / T(b)``: a fixed
    per-iteration cost plus a per-sample cost, saturating at ``1/beta`` samples/s.

Both are fitted by least squares on *relative* residuals (each point weighs the same whatever its
magnitude). The form used for a job is the one with the lower leave-one-out (LOO) relative error of the
iteration time — the error each would have made predicting a batch size it had not seen; the quadratic, having
one more parameter, must be lower by more than :data:`QUADRATIC_MARGIN` (relative) to win. A quadratic
extrapolates badly (it can turn negative or explode), so outside the measured batch range predictions
always use the linear-time form, anchored to the selected model's value at the nearest measured edge, and
carry an uncertainty that widens with the distance (in doublings) from that edge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from perfpredict.errors import FitError
from perfpredict.fit.nnls import nnls2

QUADRATIC = "quadratic_rate"
LINEAR = "linear_time"
CONSTANT = "constant_rate"

#: Relative LOO-error advantage the quadratic needs over the linear form to be selected.
QUADRATIC_MARGIN = 0.10
#: Uncertainty assumed when there is nothing to estimate it from (a single measured point).
_UNKNOWN_REL_UNCERTAINTY = 0.5
#: Floor on the in-range relative uncertainty: timing noise on shared machines is rarely below this.
_MIN_REL_UNCERTAINTY = 0.01


@dataclass(frozen=True)
class Candidate:
    """One fitted functional form."""

    kind: str
    coefficients: dict[str, float]
    r2: float | None = None
    loo_rel_error: float | None = None

    @property
    def target(self) -> str:
        return "samples_per_s" if self.kind == QUADRATIC else "iter_time_s"

    def iter_time(self, b: np.ndarray | float) -> np.ndarray:
        b = np.asarray(b, dtype=float)
        c = self.coefficients
        if self.kind == LINEAR:
            return c["alpha"] + c["beta"] * b
        if self.kind == QUADRATIC:
            rate = c["k0"] + c["k1"] * b + c["k2"] * b * b
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(rate > 0, b / np.where(rate > 0, rate, 1.0), np.inf)
        if self.kind == CONSTANT:
            return b / c["rate"]
        raise ValueError(self.kind)


def positive_within(c: Candidate, lo: float, hi: float) -> bool:
    """Whether ``c``'s iteration time is positive and finite at every batch size in ``[lo, hi]``, exactly: a
    line is checked at its ends, a quadratic rate also at its vertex (sampling missed a rate that fell to zero
    between two measured batch sizes and came back)."""
    k = c.coefficients
    with np.errstate(all="ignore"):
        if c.kind == LINEAR:
            ends = [k["alpha"] + k["beta"] * b for b in (lo, hi)]
        elif c.kind == QUADRATIC:
            ends = [k["k0"] + k["k1"] * b + k["k2"] * b * b for b in (lo, hi)]
            if k["k2"] > 0:
                v = -k["k1"] / (2 * k["k2"])
                if lo < v < hi:
                    ends.append(k["k0"] + k["k1"] * v + k["k2"] * v * v)
        elif c.kind == CONSTANT:
            ends = [k["rate"]]
        else:
            return False
    return all(math.isfinite(e) and e > 0 for e in ends)


@dataclass(frozen=True)
class Prediction:
    batch_size: float
    iter_time_s: float
    samples_per_s: float
    rel_uncertainty: float
    extrapolated: bool

    @property
    def iter_time_interval(self) -> tuple[float, float]:
        """A 1-sigma band on the iteration time (lower bound kept positive)."""
        lo = self.iter_time_s / (1.0 + self.rel_uncertainty)
        return lo, self.iter_time_s * (1.0 + self.rel_uncertainty)


@dataclass
class RateModel:
    """A fitted throughput model: ``throughput(b)``, ``iter_time(b)``, ``predict(b)``, ``latency(n, b)``."""

    kind: str
    coefficients: dict[str, float]
    batch_range: tuple[int, int]
    candidates: list[Candidate]
    selection: str
    fit_points: int
    rel_uncertainty: float
    r2: float | None = None
    loo_rel_error: float | None = None
    _linear: Candidate | None = field(default=None, repr=False)

    # -- predictions -----------------------------------------------------------------------------------
    @property
    def selected(self) -> Candidate:
        return next(c for c in self.candidates if c.kind == self.kind)

    def iter_time(self, batch_size: float | Sequence[float] | np.ndarray) -> np.ndarray | float:
        """Predicted seconds per iteration at ``batch_size`` (scalar in → scalar out)."""
        try:
            b = np.asarray(batch_size, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"batch size must be a positive number, got {batch_size!r}") from None
        if not np.all(np.isfinite(b)) or np.any(b <= 0):
            raise ValueError(f"batch size must be a positive, finite number, got {batch_size!r}")
        out = self._iter_time(b)
        return float(out) if out.ndim == 0 else out

    def throughput(self, batch_size: float | Sequence[float] | np.ndarray) -> np.ndarray | float:
        """Predicted samples per second at ``batch_size``."""
        b = np.asarray(batch_size, dtype=float)
        t = np.asarray(self.iter_time(b))
        out = b / t
        return float(out) if out.ndim == 0 else out

    def predict(self, batch_size: float) -> Prediction:
        b = float(batch_size)
        t = float(self.iter_time(b))
        return Prediction(b, t, b / t, self.uncertainty(b), self.is_extrapolation(b))

    def uncertainty(self, batch_size: float) -> float:
        """Relative 1-sigma uncertainty: the in-range value, times (1 + doublings outside the range)."""
        lo, hi = self.batch_range
        b = float(batch_size)
        if not (math.isfinite(b) and b > 0):
            raise ValueError(f"batch size must be a positive, finite number, got {batch_size!r}")
        if lo <= b <= hi:
            return self.rel_uncertainty
        edge = lo if b < lo else hi
        return float(self.rel_uncertainty * (1.0 + abs(np.log2(b / edge))))

    def is_extrapolation(self, batch_size: float) -> bool:
        lo, hi = self.batch_range
        return not (lo <= batch_size <= hi)

    def latency(self, iterations: float, batch_size: float, nu_s: float = 0.0) -> float:
        """GENIE eq. 4 on one device: ``iterations · T(batch_size) + nu_s`` seconds."""
        for name, v in (("iterations", iterations), ("nu_s", nu_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        return float(iterations) * float(self.iter_time(batch_size)) + float(nu_s)

    def _iter_time(self, b: np.ndarray) -> np.ndarray:
        lo, hi = self.batch_range
        inside = self.selected.iter_time(b)
        if self.kind == LINEAR or self.kind == CONSTANT or self._linear is None:
            return inside
        # Quadratic inside the measured range; outside, the linear-time form anchored at the nearest edge
        # so the curve is continuous and stays positive and increasing.
        lin = self._linear
        below, above = b < lo, b > hi
        out = np.array(inside, dtype=float, copy=True)
        if np.any(above):
            out = np.where(above, self.selected.iter_time(hi) * lin.iter_time(b) / lin.iter_time(hi), out)
        if np.any(below):
            out = np.where(below, self.selected.iter_time(lo) * lin.iter_time(b) / lin.iter_time(lo), out)
        return out

    # -- card round trip --------------------------------------------------------------------------------
    def to_card(self, device: str | None = None):
        from perfpredict.card import RateCandidateCard, RateModelCard

        return RateModelCard(
            kind=self.kind, coefficients=self.coefficients, r2=self.r2, loo_rel_error=self.loo_rel_error,
            selection=self.selection, batch_range=self.batch_range, fit_points=self.fit_points,
            rel_uncertainty=self.rel_uncertainty,
            extrapolation=("linear_time anchored at the nearest measured batch size; uncertainty x (1 + "
                           "doublings beyond the range)"),
            candidates=[RateCandidateCard(kind=c.kind, coefficients=c.coefficients, r2=c.r2, target=c.target,
                                          loo_rel_error=c.loo_rel_error) for c in self.candidates],
            device=device,
        )

    @classmethod
    def from_card(cls, card) -> RateModel:
        """The model a card stores, checked: a hand-edited or truncated card is an error naming what is wrong,
        never a NaN latency."""
        cands = [Candidate(c.kind, dict(c.coefficients), c.r2, c.loo_rel_error) for c in card.candidates]
        needed = {LINEAR: ("alpha", "beta"), QUADRATIC: ("k0", "k1", "k2"), CONSTANT: ("rate",)}

        def bad(msg: str) -> FitError:
            return FitError(f"the card's rate model is malformed: {msg}", step="rate model")

        if card.kind not in needed:
            raise bad(f"unknown kind {card.kind!r}")
        if not any(c.kind == card.kind for c in cands):
            raise bad(f"no candidate of the selected kind {card.kind!r} (candidates: "
                      f"{', '.join(c.kind for c in cands) or 'none'})")
        for c in [Candidate(card.kind, dict(card.coefficients)), *cands]:
            missing = [k for k in needed.get(c.kind, ()) if k not in c.coefficients]
            if missing:
                raise bad(f"{c.kind} lacks coefficient(s) {', '.join(missing)}")
            if not all(isinstance(v, (int, float)) and np.isfinite(v) for v in c.coefficients.values()):
                raise bad(f"{c.kind} has a non-finite coefficient ({c.coefficients})")
        lo, hi = card.batch_range
        if not 0 < lo <= hi:
            raise bad(f"batch_range {list(card.batch_range)} is not 0 < low <= high")
        # The selected form, and the linear one that extrapolates it, must give positive, finite times over the
        # measured range (a negative alpha or rate gives negative latencies; an all-zero quadratic or one whose
        # rate dips to zero between two batch sizes infinite ones). A candidate that answers nothing (an
        # unselected quadratic, which cards before 2026-11-29 kept even where its rate fell below zero) is only
        # dropped.
        lin = next((c for c in cands if c.kind == LINEAR), None)
        sel = next(c for c in cands if c.kind == card.kind)
        for c in (sel, *([lin] if lin is not None else [])):
            if not positive_within(c, lo, hi):
                raise bad(f"{c.kind} gives a non-positive or infinite iteration time within batch sizes {lo}-{hi}")
        if dict(card.coefficients) != sel.coefficients:  # answers come from the candidate; `show` prints these
            raise bad(f"its coefficients ({dict(card.coefficients)}) are not those of the selected {card.kind} "
                      f"candidate ({sel.coefficients})")
        # Outside the measured range the answers come from the linear form (anchored, for a quadratic), which
        # stays positive and finite at every batch size only with alpha, beta >= 0 (as the fit holds them).
        if card.kind == QUADRATIC and lin is None:
            raise bad(f"the {QUADRATIC} selection has no {LINEAR} candidate to extrapolate it beyond batch sizes "
                      f"{lo}-{hi}")
        if lin is not None and min(lin.coefficients["alpha"], lin.coefficients["beta"]) < 0:
            raise bad(f"{LINEAR} has a negative coefficient ({lin.coefficients}; alpha, beta >= 0): its iteration "
                      f"time falls to zero or below outside batch sizes {lo}-{hi}")
        cands = [c for c in cands if positive_within(c, lo, hi)]
        return cls(kind=card.kind, coefficients=dict(card.coefficients), batch_range=tuple(card.batch_range),
                   candidates=cands, selection=card.selection, fit_points=card.fit_points,
                   rel_uncertainty=card.rel_uncertainty, r2=card.r2, loo_rel_error=card.loo_rel_error,
                   _linear=lin)


# ---------------------------------------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------------------------------------
def fit_rate_model(batch_sizes: Sequence[float], samples_per_s: Sequence[float], *,
                   kind: str | None = None, cross_validate: bool = True) -> RateModel:
    """Fit the throughput model to measured ``samples_per_s`` at ``batch_sizes``.

    With ≥ 4 distinct batch sizes both forms are fitted and the one with the lower leave-one-out error is
    selected (``kind`` forces one). With 3 only ``linear_time`` can be cross-validated; with 2 it is fitted
    exactly; with 1 the rate is assumed constant (with a large uncertainty). ``cross_validate=False`` skips
    the LOO errors (used for the held-out fits themselves).
    """
    b, r, left_out = _clean(batch_sizes, samples_per_s)
    n = len(b)
    # the selection says which measurements the fit did not use (a failed sweep point, a zero throughput)
    note = (f"; {len(left_out)} unusable point(s) left out (batch sizes {', '.join(f'{x:g}' for x in left_out)})"
            if left_out else "")
    if kind is not None and kind not in (QUADRATIC, LINEAR, CONSTANT):
        raise FitError(f"unknown rate model kind {kind!r}", step="fit rate model")
    if kind == QUADRATIC and n < 3:
        raise FitError(f"a quadratic rate model needs at least 3 batch sizes, got {n}", step="fit rate model")
    if n == 1 or kind == CONSTANT:
        rate = float(np.exp(np.mean(np.log(r))))
        cand = Candidate(CONSTANT, {"rate": rate})
        return RateModel(CONSTANT, cand.coefficients, (int(b.min()), int(b.max())), [cand],
                         ("single measurement: constant samples/s assumed" if n == 1 else "forced") + note,
                         n, _UNKNOWN_REL_UNCERTAINTY)

    lin = _fit_linear(b, r)
    cv = cross_validate and kind is None
    lin = Candidate(LINEAR, lin.coefficients, lin.r2, _loo(b, r, LINEAR) if cv and n >= 3 else None)
    cands = [lin]
    dropped = ""
    if n >= 3:
        quad = _fit_quadratic(b, r)
        if kind is None and not positive_within(quad, b.min(), b.max()):
            # infinite or negative times between the measured batch sizes: it could answer nothing there
            dropped = f"the {QUADRATIC} fit's rate falls to zero or below within the measured batch sizes"
        else:
            cands.append(Candidate(QUADRATIC, quad.coefficients, quad.r2,
                                   _loo(b, r, QUADRATIC) if cv and n >= 4 else None))

    if kind is not None:
        chosen, how = kind, "forced"
    elif n >= 4 and len(cands) == 2 and not cv:
        chosen, how = LINEAR, "cross-validation skipped: linear_time, the form with fewer parameters"
    elif n >= 4 and len(cands) == 2:
        # Lower LOO error wins, but the 3-parameter quadratic must beat the 2-parameter linear form by a
        # clear margin (parsimony, in the spirit of the one-standard-error rule): on noisy timings a hair's
        # advantage is noise, and the quadratic's wiggles are what it would then fit.
        q, l_ = cands[1].loo_rel_error, cands[0].loo_rel_error
        chosen = QUADRATIC if q < l_ * (1.0 - QUADRATIC_MARGIN) else LINEAR
        how = (f"leave-one-out relative error ({LINEAR} {l_:.3g} vs {QUADRATIC} {q:.3g}; the quadratic must be "
               f">{QUADRATIC_MARGIN:.0%} lower to be chosen)")
    else:
        chosen = LINEAR
        how = (f"{dropped}, so linear_time is used" if dropped else
               "fewer than 4 batch sizes: the quadratic cannot be cross-validated, so linear_time is used"
               if n == 3 else "2 batch sizes: linear_time fitted exactly")
    sel = next(c for c in cands if c.kind == chosen)
    if n == 2 and kind is None and sel.r2 is not None and sel.r2 < 0.999:
        # the coefficients are held non-negative: a time that falls with the batch cannot be matched
        how = (f"2 batch sizes: linear_time with its coefficients held non-negative, which cannot pass through "
               f"both points (R² {sel.r2:.3f})")
    model = RateModel(chosen, sel.coefficients, (int(b.min()), int(b.max())), cands, how + note, n,
                      _UNKNOWN_REL_UNCERTAINTY, sel.r2, sel.loo_rel_error, _linear=lin)
    model.rel_uncertainty = _in_range_uncertainty(model, b, r)
    return model


def _clean(batch_sizes, samples_per_s) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Sorted usable (batch size, samples/s) and the batch sizes of the points left out."""
    b = np.asarray(list(batch_sizes), dtype=float)
    r = np.asarray(list(samples_per_s), dtype=float)
    if b.shape != r.shape:
        raise FitError(f"{len(b)} batch sizes but {len(r)} throughputs", step="fit rate model")
    frac = np.isfinite(b) & (b > 0) & (b != np.floor(b))
    if np.any(frac):  # a batch holds whole samples; 6.5 was taken as 6, its own point as an extrapolation
        raise FitError(f"batch sizes must be whole numbers >= 1, got {b[frac].tolist()}", step="fit rate model")
    # Unusable points (NaN or non-positive batch size or throughput: what a sweep records for an OOM or an
    # error) are left out of the fit, as documented, rather than refused.
    keep = np.isfinite(b) & np.isfinite(r) & (b > 0) & (r > 0)
    left_out = [float(x) for x in b[~keep]]
    b, r = b[keep], r[keep]
    if len(b) == 0:
        raise FitError("no positive, finite measurements to fit", step="fit rate model")
    # Repeated batch sizes: average their iteration times (the quantity we predict).
    uniq = np.unique(b)
    if len(uniq) != len(b):
        t = b / r
        r = np.array([u / t[b == u].mean() for u in uniq])
        b = uniq
    order = np.argsort(b)
    return b[order], r[order], left_out


def _fit_linear(b: np.ndarray, r: np.ndarray) -> Candidate:
    t = b / r
    # Minimise sum(((alpha + beta*b) - t) / t)^2 with alpha, beta >= 0.
    A = np.column_stack([np.ones_like(b), b]) / t[:, None]
    alpha, beta = nnls2(A, np.ones_like(b))
    if alpha + beta * b.min() <= 0:  # degenerate: all-zero solution; fall back to proportional time
        beta = float(np.mean(t / b))
    return Candidate(LINEAR, {"alpha": alpha, "beta": beta}, _r2(t, alpha + beta * b))


def _fit_quadratic(b: np.ndarray, r: np.ndarray) -> Candidate:
    A = np.column_stack([np.ones_like(b), b, b * b]) / r[:, None]
    try:
        coef, *_ = np.linalg.lstsq(A, np.ones_like(b), rcond=None)
    except np.linalg.LinAlgError:  # SVD without convergence: rates near the float range's ends (1e-310)
        raise FitError(f"cannot fit a rate model to throughputs from {r.min():.3g} to {r.max():.3g} samples/s",
                       step="fit rate model") from None
    k0, k1, k2 = (float(v) for v in coef)
    return Candidate(QUADRATIC, {"k0": k0, "k1": k1, "k2": k2}, _r2(r, k0 + k1 * b + k2 * b * b))


def _r2(y: np.ndarray, yhat: np.ndarray) -> float | None:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot <= 0:
        return None
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot


def _loo(b: np.ndarray, r: np.ndarray, kind: str) -> float:
    """Mean |relative error| of iteration time when each point is predicted by a model fitted without it.

    The held-out model is the full predictor restricted to ``kind`` — including the anchored-linear
    extrapolation at the range edges — so this is the error perfpredict itself would make.
    """
    errs = []
    for i in range(len(b)):
        keep = np.arange(len(b)) != i
        sub = fit_rate_model(b[keep], r[keep], kind=kind, cross_validate=False)
        t_pred = float(sub.iter_time(b[i]))
        t_true = b[i] / r[i]
        errs.append(abs(t_pred - t_true) / t_true if np.isfinite(t_pred) else np.inf)
    return float(np.mean(errs))


def _in_range_uncertainty(model: RateModel, b: np.ndarray, r: np.ndarray) -> float:
    """LOO error when available (honest out-of-sample), else the in-sample relative RMS residual."""
    if model.loo_rel_error is not None and np.isfinite(model.loo_rel_error):
        return max(model.loo_rel_error, _MIN_REL_UNCERTAINTY)
    t = b / r
    pred = model.selected.iter_time(b)
    resid = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
    if len(b) <= len(model.selected.coefficients):  # an exact fit says nothing about its own error
        return max(_UNKNOWN_REL_UNCERTAINTY / 2, resid)
    return max(resid, _MIN_REL_UNCERTAINTY)


def lat(model: RateModel, iterations: float, batch_size: float, nu_s: float = 0.0) -> float:
    """GENIE's ``Lat(iterations, batch) = iterations · T(batch) + ν`` for a fitted :class:`RateModel`."""
    return model.latency(iterations, batch_size, nu_s)
