"""Cross-validation grouped by architecture family: the score is for families never seen in training.

With leave-one-family-out folds, every prediction is made by a model that saw no member of that family (no
ResNet when predicting ResNets). Random folds are reported beside it for contrast: there, other depths and
widths of the same family are in training, which is the easy case.

Metrics: RMSLE (Horus' metric) and MAPE. For GPU utilisation the RMSLE is computed on percent (0-100), the
scale Horus reports; on fractions (0-1) the same predictions would score several times lower, so both are
given. Iteration time's RMSLE is on milliseconds: on seconds, log1p(t) is close to t for steps of a few ms, so
the "log error" would be an absolute error in seconds (0.016 beside a 20% MAPE on the H100 set). Interval models are scored by the coverage of their 80% interval and by how often the upper
quantile under-predicts (the unsafe side for placement).

Quantile models trained on some families are over-confident about the others (the spread *within* seen
families is smaller than the error on a new one). So the intervals are calibrated for unseen families: the
family-CV out-of-fold quantiles give the factor by which the outer quantiles must move away from the median
(in log space) for 80% of the points to fall inside, and that factor is checked by nested family CV (each
family's intervals widened by the factor the other families alone give), which is the coverage reported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfpredict.estimators.data import TrainingData
from perfpredict.estimators.models import QUANTILES
from perfpredict.estimators.targets import TargetSpec

#: The scale each unit's RMSLE is taken on (log1p reads a value well above 1 as a log, one below as itself).
RMSLE_SCALE = {"fraction": 100.0, "s": 1000.0}  # percent (Horus' scale), milliseconds; bytes as they are


def metrics(y: np.ndarray, yhat: np.ndarray, spec: TargetSpec) -> dict[str, float]:
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    scale = RMSLE_SCALE.get(spec.unit, 1.0)
    ape = np.abs(yhat - y) / np.abs(y)
    out = {"mape": float(np.mean(ape)), "median_ape": float(np.median(ape)), "p90_ape": float(np.percentile(ape, 90)),
           "n": int(len(y))}
    out["rmsle"] = float(np.sqrt(np.mean((np.log1p(scale * yhat) - np.log1p(scale * y)) ** 2)))
    if spec.name == "gpu_utilization":
        out["rmsle_fraction"] = float(np.sqrt(np.mean((np.log1p(yhat) - np.log1p(y)) ** 2)))
        out["mae"] = float(np.mean(np.abs(yhat - y)))
    return out


def _folds(data: TrainingData, scheme: str, seed: int = 0):
    from sklearn.model_selection import KFold, LeaveOneGroupOut

    if scheme == "family":
        return list(LeaveOneGroupOut().split(data.X, groups=data.families))
    return list(KFold(n_splits=5, shuffle=True, random_state=seed).split(data.X))


def valid_rows(data: TrainingData, spec: TargetSpec) -> np.ndarray:
    """Rows with the target (and its auxiliary column, if any) measured."""
    y = data.column(spec.column)
    ok = np.isfinite(y) & (y > 0)
    if spec.aux_column:
        a = data.column(spec.aux_column)
        ok &= np.isfinite(a) & (a > 0)
    return ok


def aux_values(data: TrainingData, spec: TargetSpec) -> np.ndarray | None:
    return data.column(spec.aux_column) if spec.aux_column else None


def out_of_fold(data: TrainingData, spec: TargetSpec, kind: str, scheme: str = "family") -> tuple[np.ndarray, np.ndarray]:
    """(y, out-of-fold predictions) over the rows that have the target."""
    keep = valid_rows(data, spec)
    sub = _subset(data, keep)
    y, aux = sub.column(spec.column), aux_values(sub, spec)
    pred = np.full(len(y), np.nan)
    for tr, te in _folds(sub, scheme):
        m = spec.fit_model(spec.make_model(kind), sub.X[tr], y[tr], None if aux is None else aux[tr],
                           groups=sub.families[tr])
        pred[te] = spec.from_model(m.predict(sub.X[te]), sub.X[te])
    return y, pred


def quantile_predictions_out_of_fold(data: TrainingData, spec: TargetSpec, scheme: str = "family",
                                     kind: str = "xgboost") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, out-of-fold quantile predictions n × len(QUANTILES), families) over the rows with the target."""
    y, q, _, fams = quantile_predictions_out_of_fold_both(data, spec, scheme, kind, estimated_counts=False)
    return y, q, fams


def quantile_predictions_out_of_fold_both(data: TrainingData, spec: TargetSpec, scheme: str = "family",
                                          kind: str = "xgboost", estimated_counts: bool = True):
    """(y, out-of-fold quantiles with the exact saved-tensor counts, the same models' quantiles with the
    counts estimated from the graph as an ONNX file gets them — the estimator fitted on the fold's training
    architectures only — or None, families)."""
    from perfpredict.estimators.design import design_matrix
    from perfpredict.estimators.saved_estimate import with_estimated_counts

    keep = valid_rows(data, spec)
    sub = _subset(data, keep)
    y, aux = sub.column(spec.column), aux_values(sub, spec)
    q = np.full((len(y), len(QUANTILES)), np.nan)
    qe = np.full_like(q, np.nan) if estimated_counts else None
    for tr, te in _folds(sub, scheme):
        m = spec.fit_model(spec.make_quantile_model(kind), sub.X[tr], y[tr], None if aux is None else aux[tr])
        q[te] = spec.from_model(m.predict(sub.X[te]), sub.X[te])
        if qe is not None:
            seen = list({sub.archs[i].name: sub.archs[i] for i in tr}.values())
            Xe = design_matrix(zip(with_estimated_counts(seen, [sub.archs[i] for i in te]), sub.batch[te]),
                               device_kind=sub.device_kind)
            qe[te] = spec.from_model(m.predict(Xe), Xe)
    return y, np.sort(q, axis=1), (None if qe is None else np.sort(qe, axis=1)), sub.families


def upper_misses(y: np.ndarray, upper: np.ndarray) -> float:
    """The share of ``y`` above its upper quantile."""
    return float(np.mean(upper < y))


def interval_quality(y: np.ndarray, q: np.ndarray) -> dict[str, float]:
    lo, hi = q[:, 0], q[:, -1]
    return {"interval": f"[q{int(QUANTILES[0] * 100)}, q{int(QUANTILES[-1] * 100)}]",
            "coverage": float(np.mean((y >= lo) & (y <= hi))),
            "upper_under_predicts": upper_misses(y, hi),
            "median_rel_width": float(np.median((hi - lo) / y))}


# ---------------------------------------------------------------------------------------------------------
# Interval calibration for unseen families
# ---------------------------------------------------------------------------------------------------------
#: Nominal coverage of the [q10, q90] interval.
NOMINAL_COVERAGE = QUANTILES[-1] - QUANTILES[0]
_MAX_SCALE = 50.0


def widen(q: np.ndarray, scale: float) -> np.ndarray:
    """Quantiles n × 3 with the outer ones moved away from the median by ``scale`` in log space:
    ``q50 · (q10 / q50)^scale`` and ``q50 · (q90 / q50)^scale``. Multiplicative, like the errors."""
    q = np.asarray(q, float)
    med = q[:, [len(QUANTILES) // 2]]
    return med * (np.maximum(q, 1e-300) / med) ** scale


def needed_scale(y: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per point, the smallest ``scale`` whose widened interval contains ``y`` (inf when the interval has no
    width on that side)."""
    y, q = np.asarray(y, float), np.asarray(q, float)
    lo, med, hi = q[:, 0], q[:, len(QUANTILES) // 2], q[:, -1]
    ly, lm = np.log(y), np.log(med)
    up, down = np.log(hi) - lm, lm - np.log(lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(ly > lm, (ly - lm) / up, np.where(ly < lm, (lm - ly) / down, 0.0))
    return np.where(np.isnan(s), np.inf, s)


def calibrate_scale(y: np.ndarray, q: np.ndarray, coverage: float = NOMINAL_COVERAGE) -> float:
    """The interval scale that makes ``coverage`` of these out-of-fold points fall inside (≥ 1: intervals are
    only ever widened; capped at 50)."""
    return float(min(max(conformal_score(needed_scale(y, q), coverage), 1.0), _MAX_SCALE))


def conformal_score(scores: np.ndarray, coverage: float) -> float:
    """The smallest of ``scores`` at or above which ``coverage`` of them lie (the conformal quantile)."""
    s = np.sort(np.asarray(scores, float))
    return float(s[max(int(np.ceil(coverage * len(s))) - 1, 0)])


def conformity(y: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per point, how far (in log space) ``y`` lies outside its [q10, q90] interval (negative: inside): the
    conformity score of conformalized quantile regression (Romano et al., 2019)."""
    ly, q = np.log(np.asarray(y, float)), np.asarray(q, float)
    return np.maximum(np.log(q[:, 0]) - ly, ly - np.log(q[:, -1]))


def calibrate_margin(y: np.ndarray, q: np.ndarray, coverage: float = NOMINAL_COVERAGE) -> float:
    """The log-space margin that, added on both sides of the [q10, q90] intervals, makes ``coverage`` of these
    out-of-fold points fall inside (≥ 0: intervals are only ever widened)."""
    return max(conformal_score(conformity(y, q), coverage), 0.0)


def widen_by_margin(q: np.ndarray, margin: float) -> np.ndarray:
    """Quantiles n × 3 with q10 divided and q90 multiplied by ``exp(margin)``; the median unchanged."""
    q = np.array(q, float)
    q[:, 0] *= np.exp(-margin)
    q[:, -1] *= np.exp(margin)
    return q


def calibrated(q: np.ndarray, *, margin: float = 0.0, scale: float = 1.0) -> np.ndarray:
    """``q`` widened as a model set says: by its log ``margin`` (sets trained since the margin) or its
    multiplicative ``scale`` (older sets)."""
    if scale != 1.0:
        q = widen(q, scale)
    return widen_by_margin(q, margin) if margin else np.asarray(q, float)


def calibrated_interval_quality(y: np.ndarray, q: np.ndarray, families: np.ndarray) -> dict[str, Any]:
    """The log margin fitted on every family's out-of-fold predictions (what the Predictor applies), and the
    honest check of it: nested leave-one-family-out, each family's intervals widened by the margin calibrated
    on the *other* families only.

    The margin is added in log space to the quantile model's own interval (conformalized quantile
    regression). The multiplicative scale used before (each side's log distance from the median times one
    factor) is computed the same way for comparison: it amplifies the rows whose raw interval is already wide,
    so at the same nested coverage its intervals were 1.1-3.6x wider at the median on the shipped sets, and
    their widest tenth spanned up to two orders of magnitude."""
    def nested(fit, apply):
        qs, by_family = np.full_like(q, np.nan), {}
        for f in sorted(set(families.tolist())):
            test = families == f
            by_family[f] = fit(y[~test], q[~test])
            qs[test] = apply(q[test], by_family[f])
        return interval_quality(y, qs), by_family

    by_margin, margins = nested(calibrate_margin, widen_by_margin)
    by_scale, scales = nested(calibrate_scale, widen)
    return {"method": "log_margin", "margin": calibrate_margin(y, q), "nested_family_cv": by_margin,
            "margin_by_held_out_family": margins,
            "scale": calibrate_scale(y, q), "nested_family_cv_scale": by_scale, "scale_by_held_out_family": scales}


def _subset(data: TrainingData, keep: np.ndarray) -> TrainingData:
    idx = np.flatnonzero(keep)
    return TrainingData(name=data.name, device_kind=data.device_kind, device_name=data.device_name,
                        archs=[data.archs[i] for i in idx], batch=data.batch[idx], X=data.X[idx],
                        families=data.families[idx], configs=data.configs[idx], rows=[data.rows[i] for i in idx],
                        sha256=data.sha256, provenance=data.provenance, mode=data.mode)


def evaluate_target(data: TrainingData, spec: TargetSpec, kinds: tuple[str, ...]) -> dict[str, Any]:
    """Grouped-by-family and random 5-fold scores of every model kind, the kind to ship (XGBoost, or for
    memory the better of the bare physical baseline and baseline × XGBoost correction, by family-CV MAPE),
    its per-family breakdown, and its interval model's quality."""
    out: dict[str, Any] = {"family_cv": {}, "random_cv": {}}
    per_family = {}
    for kind in kinds:
        y, p = out_of_fold(data, spec, kind, "family")
        out["family_cv"][kind] = metrics(y, p, spec)
        fams = data.families[valid_rows(data, spec)]
        per_family[kind] = {f: metrics(y[fams == f], p[fams == f], spec) for f in sorted(set(fams))}
        y2, p2 = out_of_fold(data, spec, kind, "random")
        out["random_cv"][kind] = metrics(y2, p2, spec)
    out["shipped_kind"] = ship_kind(spec, out["family_cv"])
    out["per_family_shipped"] = per_family.get(out["shipped_kind"], {})
    yq, q, qe, fams = quantile_predictions_out_of_fold_both(data, spec, "family", out["shipped_kind"])
    out["quantiles_family_cv"] = interval_quality(yq, q)
    out["interval_calibration"] = calibrated_interval_quality(yq, q, fams)
    # The same for inputs without saved-tensor counts (ONNX files): their error is larger, so is their margin.
    out["interval_calibration_estimated_counts"] = calibrated_interval_quality(yq, qe, fams)
    if spec.unit == "bytes":  # memory: an upper bound a scheduler reserves, asked for past the trained batches too
        out["batch_extrapolation"] = batch_extrapolation_margin(data, spec, out["shipped_kind"])
    return out


def batch_extrapolation_margin(data: TrainingData, spec: TargetSpec, kind: str) -> dict[str, Any]:
    """How much the upper quantile must grow per doubling of the batch size past the largest one an architecture
    was measured at.

    Memory grows faster than linearly in the batch size (glibc keeping freed heap chunks on a CPU, the caching
    allocator's rounding on a GPU), so a model fitted on small batches under-predicts large ones: on the shipped
    sets, the q90 sits below 18-27% of each architecture's measurements at its two largest batch sizes when those
    are left out of the fit, not 10%. Measured so per architecture, since the rows' batch sizes differ
    by architecture (the sweep caps each point's work, so a large model stops at a smaller batch than an MLP):
    every architecture measured at 4 or more batch sizes has its two largest held out, the ``kind`` interval model
    is fitted on every other row (all families: this is the batch's error, not the family's, whose margin is
    calibrated apart) and predicts the held-out ones. Each point's score is how far, in log space, it lies above
    its q90, divided by how many doublings it is past its architecture's largest fitted batch; the margin is the
    score that keeps the nominal share of points (90%) at or below their widened q90 (conformal, as
    :func:`calibrate_margin`). The check fits each architecture's two smallest batch sizes only and reports how
    often the q90 widened by that margin still misses at its larger ones. The Predictor counts the doublings
    past the largest batch its request's nearest profiled architecture was measured at
    (``ModelSet.reach``)."""
    keep = valid_rows(data, spec)
    sub = _subset(data, keep)
    y, aux, b = sub.column(spec.column), aux_values(sub, spec), sub.batch.astype(float)
    sizes_of: dict[str, list[float]] = {}
    for c, bb in zip(sub.configs.tolist(), b.tolist()):
        sizes_of.setdefault(c, []).append(bb)
    sizes_of = {c: sorted(set(v)) for c, v in sizes_of.items()}
    if not any(len(v) >= 4 for v in sizes_of.values()):
        most = max((len(v) for v in sizes_of.values()), default=0)
        return {"margin_per_doubling": 0.0,
                "why_none": f"needs an architecture measured at 4 batch sizes, the most any has is {most}"}

    def fit_predict(last_fitted) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Fit on each architecture's rows up to ``last_fitted(its sizes)`` (None: all of them), predict the
        rest: their q90, measurements, doublings past their architecture's largest fitted batch, batch sizes."""
        top = np.array([last_fitted(sizes_of[c]) or np.inf for c in sub.configs.tolist()])
        tr = b <= top
        m = spec.fit_model(spec.make_quantile_model(kind), sub.X[tr], y[tr], None if aux is None else aux[tr])
        q = np.sort(spec.from_model(m.predict(sub.X[~tr]), sub.X[~tr]), axis=1)
        return q[:, -1], y[~tr], np.log2(b[~tr] / top[~tr]), b[~tr]

    q90, yt, d, bt = fit_predict(lambda v: v[-3] if len(v) >= 4 else None)
    margin = conformal_score(np.maximum(np.log(yt) - np.log(q90), 0.0) / d, QUANTILES[-1])
    q90c, yc, dc, _ = fit_predict(lambda v: v[1] if len(v) >= 3 else None)

    def count(v: np.ndarray) -> dict[str, int]:
        return {str(int(k)): int(n) for k, n in zip(*np.unique(v, return_counts=True))}

    return {"margin_per_doubling": margin, "held_out": "each architecture's two largest batch sizes",
            "architectures": sum(len(v) >= 4 for v in sizes_of.values()), "tested_points_by_batch": count(bt),
            "doublings_tested": sorted({round(float(x), 2) for x in d}),
            "upper_under_predicts": upper_misses(yt, q90), "points": int(len(yt)),
            "check": {"held_out": "each architecture's batch sizes past its two smallest",
                      "points": int(len(yc)), "upper_under_predicts": upper_misses(yc, q90c),
                      "upper_under_predicts_with_margin": upper_misses(yc, q90c * np.exp(margin * dc))}}


def ship_kind(spec: TargetSpec, family_cv: dict[str, dict[str, float]]) -> str:
    candidates = [k for k in ("none", "baseline_xgboost", "xgboost") if k in family_cv]
    if not candidates:
        return "xgboost"
    return min(candidates, key=lambda k: family_cv[k]["mape"])
