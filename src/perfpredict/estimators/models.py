"""The regressors compared (Horus Table 4): XGBoost (primary), LightGBM, random forest, a linear model.

All follow scikit-learn's ``fit(X, y)`` / ``predict(X)``. Hyper-parameters are fixed, modest and the same
for every target (no tuning on the evaluation folds, which would flatter the scores). The quantile model is
XGBoost's pinball-loss objective with several quantiles in one booster.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MODEL_KINDS = ("xgboost", "lightgbm", "random_forest", "linear")
#: Quantiles the interval model predicts: an 80% interval and its median.
QUANTILES = (0.1, 0.5, 0.9)

_XGB_PARAMS: dict[str, Any] = dict(n_estimators=400, max_depth=4, learning_rate=0.05, subsample=0.8,
                                   colsample_bytree=0.8, min_child_weight=2.0, reg_lambda=1.0, n_jobs=2,
                                   random_state=0, tree_method="hist")


def make_model(kind: str):
    """A fresh, unfitted regressor of ``kind`` (one of :data:`MODEL_KINDS`)."""
    if kind == "xgboost":
        from xgboost import XGBRegressor

        return XGBRegressor(**_XGB_PARAMS)
    if kind == "lightgbm":
        from lightgbm import LGBMRegressor

        return LGBMRegressor(n_estimators=400, learning_rate=0.05, num_leaves=15, min_child_samples=5,
                             subsample=0.8, subsample_freq=1, colsample_bytree=0.8, reg_lambda=1.0,
                             random_state=0, n_jobs=2, verbose=-1)
    if kind == "random_forest":
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(n_estimators=300, min_samples_leaf=2, random_state=0, n_jobs=2)
    if kind == "linear":
        from sklearn.linear_model import RidgeCV
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13)))
    raise ValueError(f"unknown model kind {kind!r}; expected one of {MODEL_KINDS}")


def make_quantile_model(quantiles: tuple[float, ...] = QUANTILES):
    from xgboost import XGBRegressor

    return XGBRegressor(objective="reg:quantileerror", quantile_alpha=np.array(quantiles), **_XGB_PARAMS)


def feature_importance(model, names: list[str]) -> dict[str, float]:
    """XGBoost's total-gain importance, normalised to sum to 1 (empty for models without one)."""
    try:
        gain = model.get_booster().get_score(importance_type="total_gain")
    except AttributeError:
        return {}
    total = sum(gain.values()) or 1.0
    by_name = {names[int(k[1:])] if k.startswith("f") and k[1:].isdigit() else k: v / total for k, v in gain.items()}
    return dict(sorted(by_name.items(), key=lambda kv: -kv[1]))


class StructuredMemoryModel:
    """Peak training memory = a physical baseline × a learned correction.

    The baseline is ``c0 + k_P·P + k_S·S``: a constant (allocator and library workspaces), the parameter
    bytes P (weights, gradients and optimizer state are multiples of it), and the bytes S autograd saves for
    the backward pass in one iteration (:mod:`perfpredict.features.saved`). On the H100 data the fit gives
    c0 ≈ 75 MiB, k_P ≈ 3 (weights + gradients + momentum) and k_S ≈ 1 for CNNs: the formula is physical, and
    so it carries over to families the correction never saw. Its coefficients are fitted by non-negative
    least squares on relative residuals, so they stay physical and small models weigh as much as large ones. The correction is any regressor of :data:`MODEL_KINDS` (or the
    quantile booster) fitted to ``log(y / baseline)`` on the full feature vector.
    """

    def __init__(self, residual_kind: str = "xgboost", quantiles: tuple[float, ...] | None = None) -> None:
        self.residual_kind = residual_kind  # a MODEL_KINDS entry, or "none": the baseline alone
        self.quantiles = quantiles
        self.coef_: np.ndarray | None = None
        self.residual_ = None
        #: with residual_kind "none" and quantiles: the training log-residuals' quantiles (constant interval)
        self.residual_quantiles_: np.ndarray | None = None

    @staticmethod
    def components(X: np.ndarray) -> np.ndarray:
        """[1, P, S] in bytes, recovered from the log10(x + 1) features."""
        from perfpredict.estimators.design import FEATURE_NAMES

        cols = [FEATURE_NAMES.index("log_param_bytes"), FEATURE_NAMES.index("log_saved_bytes_iter")]
        raw = np.maximum(10.0 ** np.asarray(X, float)[:, cols] - 1.0, 0.0)
        return np.column_stack([np.ones(len(raw)), raw])

    def baseline(self, X: np.ndarray) -> np.ndarray:
        return np.maximum(self.components(X) @ self.coef_, 1.0)

    def fit(self, X: np.ndarray, y: np.ndarray) -> StructuredMemoryModel:
        from scipy.optimize import nnls

        C = self.components(X)
        y = np.asarray(y, float)
        # Scale columns so NNLS is well conditioned, then undo the scaling on the coefficients.
        scale = np.maximum(np.abs(C).max(axis=0), 1.0)
        coef, _ = nnls((C / scale) / y[:, None], np.ones(len(y)), maxiter=50 * C.shape[1])
        self.coef_ = coef / scale
        r = np.log(y / self.baseline(X))
        if self.residual_kind == "none":
            self.residual_ = None
            if self.quantiles:
                self.residual_quantiles_ = np.quantile(r, self.quantiles)
            return self
        self.residual_ = make_quantile_model(self.quantiles) if self.quantiles else make_model(self.residual_kind)
        self.residual_.fit(X, r)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        base = self.baseline(X)
        if self.residual_ is None:
            if self.residual_quantiles_ is not None:
                return base[:, None] * np.exp(self.residual_quantiles_)[None, :]
            return base
        r = np.asarray(self.residual_.predict(X), float)
        return (base[:, None] if r.ndim == 2 else base) * np.exp(r)
