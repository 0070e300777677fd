"""Saved-tensor bytes estimated from an ONNX graph, for inputs that come without the exact count.

The exact count (:mod:`perfpredict.features.saved`) runs the model's forward pass, which an uploaded ONNX
file or a bare feature vector cannot give. What the graph does give is the bytes each op type produces per
sample. Autograd keeps a share of each group's outputs for the backward pass (a convolution's input, a
normalisation's input, an activation's output, a recurrent layer's gates and states), so the estimate is
``Σ_g k_g · activation bytes of group g``, with non-negative shares fitted by least squares on relative
residuals over the training architectures.

A linear, non-negative form extrapolates to a family it never saw in proportion to that family's
activations. The ridge regression on log bytes used before did not: with the speech family held out it
predicted 2 500× its saved bytes (family-CV MAPE 23 000%, median 78% for the CUDA count), and a memory
prediction from an ONNX file inherited that error. Under the same leave-one-family-out check this model's
median error is 32% (CUDA count) and 15% (CPU count), its worst family 105% (``tests/test_cpu_memory_model.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perfpredict.estimators.arch import ArchFeatures
from perfpredict.estimators.design import ACT_GROUPS, activation_bytes_by_group

#: The saved-tensor counts an architecture carries, by the kernels they are counted for.
SAVED_ATTRS = {"saved_bytes_per_sample": "CUDA", "saved_cpu_bytes_per_sample": "CPU"}
#: Every per-sample count the same form can estimate: the saved tensors, and the peak of live activations in
#: a forward pass, which an ONNX graph gives exactly but a bare feature vector may leave out.
ESTIMABLE_ATTRS = {**SAVED_ATTRS, "peak_live_bytes_per_sample": "a forward pass"}


def activation_groups(archs: Sequence[ArchFeatures]) -> np.ndarray:
    """Per-sample activation bytes by :data:`~perfpredict.estimators.design.ACT_GROUPS`, one row per arch."""
    return np.array([[activation_bytes_by_group(a)[g] for g in ACT_GROUPS] for a in archs], float).reshape(
        len(archs), len(ACT_GROUPS))


class SavedBytesEstimator:
    """``fit(archs)`` on the architectures that have ``attr``; ``predict(archs)`` → bytes per sample."""

    def __init__(self, attr: str = "saved_bytes_per_sample") -> None:
        if attr not in ESTIMABLE_ATTRS:
            raise ValueError(f"attr must be one of {sorted(ESTIMABLE_ATTRS)}, got {attr!r}")
        self.attr = attr
        self.coef_: np.ndarray | None = None

    def fit(self, archs: Sequence[ArchFeatures]) -> SavedBytesEstimator:
        from scipy.optimize import nnls

        have = [a for a in archs if getattr(a, self.attr) is not None]
        if not have:
            raise ValueError(f"no architecture has {self.attr}")
        y = np.maximum(np.array([getattr(a, self.attr) for a in have], float), 1.0)
        A = activation_groups(have)
        scale = np.maximum(A.max(axis=0), 1e-30)  # well conditioned; undone below
        coef, _ = nnls((A / scale) / y[:, None], np.ones(len(y)))
        self.coef_ = coef / scale
        return self

    def predict(self, archs: Sequence[ArchFeatures]) -> np.ndarray:
        if self.coef_ is None:
            raise RuntimeError("fit first")
        return activation_groups(archs) @ self.coef_


def with_estimated_counts(fit_on: Sequence[ArchFeatures], archs: Sequence[ArchFeatures]) -> list[ArchFeatures]:
    """``archs`` as an ONNX file would reach the Predictor: both saved-tensor counts replaced by the estimate
    fitted on ``fit_on`` (the fixed parts unknown, 0)."""
    from dataclasses import replace

    estimators = {attr: SavedBytesEstimator(attr).fit(fit_on) for attr in SAVED_ATTRS}
    preds = {attr: np.maximum(e.predict(archs), 0.0) for attr, e in estimators.items()}
    return [replace(a, saved_bytes_fixed=0.0, saved_cpu_bytes_fixed=0.0,
                    **{attr: float(preds[attr][i]) for attr in SAVED_ATTRS}) for i, a in enumerate(archs)]
