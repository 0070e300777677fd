"""GENIE's communication penalty Comm(s), fitted to measured placements (GENIE eq. 5 and 8).

A placement ``s = ⟨d_node, d_gn⟩`` runs a job on ``n = d_node·d_gn`` devices (``d_gn`` per node). GENIE
predicts its processing rate from the single-device rate ``sPR(local batch)`` (eq. 5)::

    PR(t, s) = (n − Comm(s)) · sPR(b / n)

and models the penalty — devices' worth of throughput lost to communication — as (eq. 8)::

    Comm(s) = 0                                                          if n = 1
            = ((d_node − 1)·d_gn·γ + (d_gn − 1)·λγ) / (n − 1)            otherwise

γ is the cost of a cross-node link, λγ that of an intra-node one (so λ is their ratio). The two weights
sum to 1 (``(d_node − 1)·d_gn + d_gn − 1 = n − 1``), so Comm is a weighted average of γ and λγ and always lies
between them. Comm is linear in the
two unknowns ``(γ, λγ)``, so a measured rate gives one linear equation
``Comm_obs = n − PR_meas / sPR(b/n)`` and the fit is a two-unknown non-negative least-squares problem
(penalties cannot be negative: a superlinear measurement, e.g. a smaller local batch that fits in cache,
is fitted at no penalty and shows in the residuals). The rows are weighted by ``sPR/PR_meas`` so the
residuals minimised are the *relative* errors of the predicted rates, as for the rate model.

Identifiability. Each placement contributes the row ``((d_node − 1)·d_gn, d_gn − 1) / (n − 1)``:

* only intra-node placements (``d_node = 1``): every row is ``(0, 1)`` — Comm is λγ whatever ``d_gn``, so
  λγ is identified, γ (hence λ) is not, and nothing multi-node can be predicted;
* only one device per node (``d_gn = 1``): every row is ``(1, 0)`` — γ is identified, λγ is not;
* the same placement shape repeated (rows all parallel): only that combination is identified.

:attr:`CommModel.identifiable` says which of ``gamma``, ``lambda_gamma`` and ``lambda`` the data determine
(λ also needs γ > 0), and :meth:`CommModel.comm` raises ``ValueError`` for a placement whose penalty the
measured ones do not determine instead of returning a number the fit made up.

Predicted rates are clamped at 0 (which can only bite when γ or λγ exceeds n): ``Comm > n`` would mean adding devices makes the job run backwards — the
eq. 8 fit extrapolated past where it means anything. A rate of 0 keeps a scheduler from choosing the
placement; a negative one could win a naive ``work / rate`` comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.errors import FitError
from perfpredict.fit.nnls import nnls2

MODEL = "genie_eq8"
#: γ at or below this (devices) is treated as 0 when forming λ = λγ / γ.
_GAMMA_EPS = 1e-9
#: Singular values below this fraction of the largest do not count towards the rank of the placements' rows.
_RANK_TOL = 1e-9
#: Relative tolerance for "this placement's row lies in the span of the measured ones".
_SPAN_TOL = 1e-6

SPR = Callable[[float], float]


class CommFitError(FitError, ValueError):
    """Unusable placement measurements (a :class:`ValueError` too, so plain ``except ValueError`` works)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, step="fit comm penalty")


def comm_penalty(d_node: int, d_gn: int, gamma: float, lam: float) -> float:
    """GENIE eq. 8 for given ``γ`` and ``λ``: devices' worth of throughput lost at ``⟨d_node, d_gn⟩``."""
    d_node, d_gn = _placement((d_node, d_gn))
    return float(_row(d_node, d_gn) @ np.array([gamma, lam * gamma]))


def _row(d_node: int, d_gn: int) -> np.ndarray:
    n = d_node * d_gn
    if n == 1:
        return np.zeros(2)
    return np.array([(d_node - 1) * d_gn, d_gn - 1], dtype=float) / (n - 1)


@dataclass(frozen=True)
class PlacementMeasurement:
    """A measured placement with the single-device rate it was compared with."""

    d_node: int
    d_gn: int
    global_batch: float
    samples_per_s: float
    spr_samples_per_s: float  # sPR(global_batch / n), as evaluated when fitting

    @property
    def workers(self) -> int:
        return self.d_node * self.d_gn

    @property
    def local_batch(self) -> float:
        return self.global_batch / self.workers

    @property
    def comm_observed(self) -> float:
        """``n − PR / sPR(b/n)``."""
        return self.workers - self.samples_per_s / self.spr_samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {"d_node": self.d_node, "d_gn": self.d_gn, "global_batch": self.global_batch,
                "samples_per_s": self.samples_per_s, "spr_samples_per_s": self.spr_samples_per_s,
                "comm_observed": self.comm_observed}


@dataclass(frozen=True)
class CommModel:
    """A fitted eq. 8: ``comm(d_node, d_gn)``, ``predict_rate(...)``, ``residuals``, ``identifiable``.

    ``gamma_fit``/``lambda_gamma_fit`` are the least-squares solution used for predictions (a parameter the
    data do not determine is left at whatever the solver chose, usually 0, and never used: see
    :meth:`comm`); :attr:`gamma`, :attr:`lam` and :attr:`lambda_gamma` are ``None`` unless identified.
    """

    gamma_fit: float
    lambda_gamma_fit: float
    points: tuple[PlacementMeasurement, ...]

    # -- parameters --------------------------------------------------------------------------------------
    @property
    def identifiable(self) -> dict[str, bool]:
        """Which of ``gamma``, ``lambda_gamma``, ``lambda`` the measured placements determine."""
        basis = self._row_space()
        g = _in_span(np.array([1.0, 0.0]), basis)
        lg = _in_span(np.array([0.0, 1.0]), basis)
        return {"gamma": g, "lambda_gamma": lg, "lambda": g and lg and self.gamma_fit > _GAMMA_EPS}

    @property
    def gamma(self) -> float | None:
        """γ: the cross-node penalty coefficient (``None`` if the placements do not determine it)."""
        return self.gamma_fit if self.identifiable["gamma"] else None

    @property
    def lambda_gamma(self) -> float | None:
        """λγ: the intra-node penalty, which is also Comm of every single-node placement."""
        return self.lambda_gamma_fit if self.identifiable["lambda_gamma"] else None

    @property
    def lam(self) -> float | None:
        """λ = λγ / γ (``None`` unless both are identified and γ > 0)."""
        return self.lambda_gamma_fit / self.gamma_fit if self.identifiable["lambda"] else None

    @property
    def notes(self) -> str:
        ident = self.identifiable
        if ident["gamma"] and ident["lambda_gamma"]:
            return "" if ident["lambda"] else "γ fitted at 0 (no cross-node penalty measured): λ = λγ/γ undefined"
        if ident["lambda_gamma"]:
            return ("only single-node placements: Comm = λγ for all of them; γ and λ need a multi-node placement")
        if ident["gamma"]:
            return "only one device per node: γ is identified; λγ and λ need a placement with d_gn > 1"
        return ("every measured placement has the same shape: only that combination of γ and λγ is identified; "
                "measure a placement of another shape")

    def _row_space(self) -> np.ndarray:
        """Orthonormal basis (rows) of the span of the measured placements' eq. 8 rows."""
        rows = np.array([_row(q.d_node, q.d_gn) for q in self.points])
        rows = rows[np.linalg.norm(rows, axis=1) > 0]
        if rows.size == 0:
            return np.zeros((0, 2))
        _, sv, vt = np.linalg.svd(rows, full_matrices=False)
        rank = int(np.sum(sv > sv[0] * _RANK_TOL))
        return vt[:rank]

    # -- predictions -----------------------------------------------------------------------------------
    def comm(self, d_node: int, d_gn: int) -> float:
        """Eq. 8 at ``⟨d_node, d_gn⟩`` (devices lost). ``ValueError`` if the fit does not determine it."""
        d_node, d_gn = _placement((d_node, d_gn))
        r = _row(d_node, d_gn)
        if not _in_span(r, self._row_space()):
            raise CommFitError(f"Comm⟨{d_node},{d_gn}⟩ is not determined by the measured placements "
                               f"({', '.join(sorted({f'⟨{q.d_node},{q.d_gn}⟩' for q in self.points}))}): "
                               f"{self.notes}")
        return float(r @ np.array([self.gamma_fit, self.lambda_gamma_fit]))

    def predict_rate(self, d_node: int, d_gn: int, global_batch: float, spr: SPR) -> float:
        """Eq. 5: ``(n − Comm) · sPR(b/n)`` samples/s, clamped at 0 (see the module docstring)."""
        d_node, d_gn = _placement((d_node, d_gn))
        b = _batch(global_batch)
        n = d_node * d_gn
        return max(0.0, (n - self.comm(d_node, d_gn)) * _spr(spr, b / n))

    @property
    def comm_fitted(self) -> np.ndarray:
        return np.array([self.comm(q.d_node, q.d_gn) for q in self.points])

    @property
    def fitted_rates(self) -> np.ndarray:
        """Predicted samples/s at each measured placement (with the sPR values used in the fit)."""
        n = np.array([q.workers for q in self.points], dtype=float)
        spr = np.array([q.spr_samples_per_s for q in self.points])
        return np.maximum(0.0, (n - self.comm_fitted) * spr)

    @property
    def residuals(self) -> np.ndarray:
        """Measured minus predicted samples/s, per placement, in the order given."""
        return np.array([q.samples_per_s for q in self.points]) - self.fitted_rates

    @property
    def relative_residuals(self) -> np.ndarray:
        """Residuals over the measured rate."""
        return self.residuals / np.array([q.samples_per_s for q in self.points])

    @property
    def comm_residuals(self) -> np.ndarray:
        """Observed minus fitted Comm (devices)."""
        return np.array([q.comm_observed for q in self.points]) - self.comm_fitted

    @property
    def r2(self) -> float | None:
        """R² of Comm over the multi-device placements; ``None`` when the observed Comm does not vary."""
        keep = np.array([q.workers > 1 for q in self.points])
        obs = np.array([q.comm_observed for q in self.points])[keep]
        if obs.size < 2:
            return None
        ss_tot = float(np.sum((obs - obs.mean()) ** 2))
        if ss_tot <= 1e-24 * max(1.0, float(np.sum(obs ** 2))):
            return None
        return 1.0 - float(np.sum(self.comm_residuals[keep] ** 2)) / ss_tot

    # -- JSON round trip ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` rebuilds the same model without refitting."""
        return {"model": MODEL, "gamma": self.gamma, "lambda": self.lam, "lambda_gamma": self.lambda_gamma,
                "gamma_fit": self.gamma_fit, "lambda_gamma_fit": self.lambda_gamma_fit,
                "identifiable": self.identifiable, "r2": self.r2,
                "points": [q.to_dict() for q in self.points],
                "residuals": [float(v) for v in self.residuals],
                "relative_residuals": [float(v) for v in self.relative_residuals],
                "notes": self.notes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CommModel:
        if d.get("model", MODEL) != MODEL:
            raise ValueError(f"not a GENIE comm model: model {d.get('model')!r}")
        pts = tuple(PlacementMeasurement(int(q["d_node"]), int(q["d_gn"]), float(q["global_batch"]),
                                         float(q["samples_per_s"]), float(q["spr_samples_per_s"]))
                    for q in d["points"])
        return cls(float(d["gamma_fit"]), float(d["lambda_gamma_fit"]), pts)


def _in_span(r: np.ndarray, basis: np.ndarray) -> bool:
    norm = float(np.linalg.norm(r))
    if norm == 0:
        return True
    resid = r - basis.T @ (basis @ r) if basis.size else r
    return float(np.linalg.norm(resid)) <= _SPAN_TOL * norm


# ---------------------------------------------------------------------------------------------------------
# fitting
# ---------------------------------------------------------------------------------------------------------
def fit_comm_penalty(placements: Sequence[Any], measured_rates: Sequence[float], spr: SPR,
                     global_batch: float | Sequence[float]) -> CommModel:
    """Fit γ and λ of eq. 8 to measured rates (samples/s) at ``placements``.

    ``placements``: ``(d_node, d_gn)`` pairs or objects with ``d_node``/``d_gn``. ``spr``: the single-device
    rate (samples/s) at a local batch size. ``global_batch``: one value for all placements or one each.
    Single-device placements (n = 1) may be included — Comm is 0 there by definition, so they only add a
    residual (a check on sPR) — but at least 2 multi-device measurements are needed.
    Raises :class:`CommFitError` (a ``ValueError``) on unusable input.
    """
    pts = _measurements(placements, measured_rates, spr, global_batch)
    multi = [q for q in pts if q.workers > 1]
    if len(multi) < 2:
        raise CommFitError(f"the communication penalty needs at least 2 measured multi-device placements "
                           f"(d_node·d_gn > 1), got {len(multi)}")
    A = np.array([_row(q.d_node, q.d_gn) for q in multi])
    y = np.array([q.comm_observed for q in multi])
    # weight sPR/PR: the residual (Comm_fit − Comm_obs)·sPR/PR is the relative error of the predicted rate
    w = np.array([q.spr_samples_per_s / q.samples_per_s for q in multi])
    gamma, lam_gamma = nnls2(A * w[:, None], y * w)
    return CommModel(gamma, lam_gamma, pts)


def holdout_error(placements: Sequence[Any], rates: Sequence[float], spr: SPR,
                  global_batch: float | Sequence[float], holdout_index: int) -> float:
    """|predicted − measured| / measured at ``placements[holdout_index]``, fitted on all the others.

    ``ValueError`` if the others cannot be fitted or do not determine the held-out placement's penalty.
    """
    places = list(placements)
    r = list(rates)
    if len(places) != len(r):
        raise CommFitError(f"{len(places)} placements but {len(r)} rates")
    batches = _batches(global_batch, len(places))
    i = int(holdout_index)
    if not -len(places) <= i < len(places):
        raise CommFitError(f"holdout_index {holdout_index} out of range for {len(places)} placements")
    i %= len(places)
    keep = [j for j in range(len(places)) if j != i]
    model = fit_comm_penalty([places[j] for j in keep], [r[j] for j in keep], spr, [batches[j] for j in keep])
    d_node, d_gn = _placement(places[i])
    measured = float(r[i])
    if not (np.isfinite(measured) and measured > 0):
        raise CommFitError(f"held-out rate must be finite and > 0, got {measured}")
    return abs(model.predict_rate(d_node, d_gn, batches[i], spr) - measured) / measured


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------
def _placement(p: Any) -> tuple[int, int]:
    if hasattr(p, "d_node") and hasattr(p, "d_gn"):
        raw = (p.d_node, p.d_gn)
    else:
        try:
            raw = tuple(p)
        except TypeError:
            raise CommFitError(f"a placement is a (d_node, d_gn) pair, got {p!r}") from None
        if len(raw) != 2:
            raise CommFitError(f"a placement is a (d_node, d_gn) pair, got {p!r}")
    out = []
    for v in raw:
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise CommFitError(f"placement {p!r}: d_node and d_gn must be integers") from None
        if not (np.isfinite(f) and f == int(f) and f >= 1):
            raise CommFitError(f"placement {p!r}: d_node and d_gn must be integers >= 1")
        out.append(int(f))
    return out[0], out[1]


def _batch(b: Any) -> float:
    try:
        f = float(b)
    except (TypeError, ValueError):
        raise CommFitError(f"global batch must be a number, got {b!r}") from None
    if not (np.isfinite(f) and f > 0):
        raise CommFitError(f"global batch must be finite and > 0, got {b!r}")
    return f


def _batches(global_batch: Any, n: int) -> list[float]:
    if np.ndim(global_batch) == 0:
        return [_batch(global_batch)] * n
    bs = [_batch(b) for b in global_batch]
    if len(bs) != n:
        raise CommFitError(f"{n} placements but {len(bs)} global batch sizes")
    return bs


def _spr(spr: SPR, local_batch: float) -> float:
    try:
        v = float(np.asarray(spr(local_batch), dtype=float))
    except (TypeError, ValueError) as exc:
        raise CommFitError(f"sPR({local_batch:g}) did not return a number ({exc})") from None
    if not (np.isfinite(v) and v > 0):
        raise CommFitError(f"sPR({local_batch:g}) = {v}: the single-device rate must be finite and > 0")
    return v


def _measurements(placements: Sequence[Any], rates: Sequence[float], spr: SPR,
                  global_batch: Any) -> tuple[PlacementMeasurement, ...]:
    places = [_placement(p) for p in placements]
    r = np.asarray(list(rates), dtype=float)
    if r.ndim != 1 or len(places) != r.size:
        raise CommFitError(f"{len(places)} placements but {r.size} measured rates")
    bad = ~(np.isfinite(r) & (r > 0))
    if np.any(bad):
        raise CommFitError(f"measured rates must be finite and > 0; bad at positions {np.flatnonzero(bad).tolist()}")
    batches = _batches(global_batch, len(places))
    return tuple(PlacementMeasurement(dn, dg, b, float(rate), _spr(spr, b / (dn * dg)))
                 for (dn, dg), rate, b in zip(places, r, batches, strict=True))
