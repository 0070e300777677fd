"""Saved-tensor bytes estimated from an ONNX graph, for inputs that come without the exact count.

The exact count (:mod:`perfpredict.features.saved`) runs the model's forward pass, which an uploaded ONNX
file or a bare feature vector cannot give. The graph gives two things:

- the bytes a backward pass would keep by per-op rules (:func:`perfpredict.features.graph.
  saved_for_backward_bytes`: a convolution keeps its input, a ReLU its output, each tensor counted once).
  The estimate is that count times the median exact/rule ratio over the training architectures (1.00 for
  the CUDA count, 1.01 for the CPU one). Under leave-one-family-out on the 153 zoo architectures its median
  error is 0.3% (CUDA count) and 0.7% (CPU count), its mean 3.5% and 8.1%: the rules miss what the graph does
  not show (dropout masks, what fused attention keeps), so ViTs get 1.18× their CUDA count and the CPU count
  of Transformers and ViTs (dropout noise) 0.52–0.65×; every other family is within 5%.
- the bytes each op type produces per sample. Autograd keeps a share of each group's outputs, so without the
  rule-based count (a bare feature vector) the estimate is ``Σ_g k_g · activation bytes of group g``, with
  non-negative shares fitted by least squares on relative residuals over the training architectures: median
  error 32% (CUDA count) and 15% (CPU count), mean 33% and 23%, under the same check.

Both forms are linear and non-negative, so they extrapolate to a family they never saw in proportion to its
graph. The ridge regression on log bytes used before did not: with the speech family held out it predicted
2 500× its saved bytes (family-CV MAPE 23 000%, median 78% for the CUDA count), and a memory prediction from
an ONNX file inherited that error (``tests/test_cpu_memory_model.py``, ``tests/test_graph_saved.py``).
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
    """``fit(archs)`` on the architectures that have ``attr``; ``predict(archs)`` → bytes per sample.

    For a saved-tensor count, an architecture that carries the graph's rule-based count
    (``graph_saved_bytes_per_sample``: every ONNX file and model file does) is estimated as that count times
    the median ratio of exact to rule-based counts over the training architectures (:attr:`rule_scale_`):
    the rules follow each op's derivative and count every kept tensor once, which the activation sums by op
    group cannot. The median, not a least-squares fit, because the rules miss whole kinds of memory for some
    families (dropout masks, what fused attention keeps) and a fit would bend to those. Without
    the rule-based count (a bare feature vector) the op-group form above is used.
    """

    def __init__(self, attr: str = "saved_bytes_per_sample") -> None:
        if attr not in ESTIMABLE_ATTRS:
            raise ValueError(f"attr must be one of {sorted(ESTIMABLE_ATTRS)}, got {attr!r}")
        self.attr = attr
        self.coef_: np.ndarray | None = None
        self.rule_scale_: float | None = None

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
        ruled = [(v, a.graph_saved_bytes_per_sample) for v, a in zip(y, have) if _rule_count(a)]
        if self.attr in SAVED_ATTRS and ruled:
            self.rule_scale_ = float(np.median([v / r for v, r in ruled]))
        return self

    def predict(self, archs: Sequence[ArchFeatures]) -> np.ndarray:
        if self.coef_ is None:
            raise RuntimeError("fit first")
        out = activation_groups(archs) @ self.coef_
        if self.rule_scale_ is not None:
            for i, a in enumerate(archs):
                if _rule_count(a):
                    out[i] = self.rule_scale_ * a.graph_saved_bytes_per_sample
        return out


def _rule_count(a: ArchFeatures) -> bool:
    return a.graph_saved_bytes_per_sample is not None and a.graph_saved_bytes_per_sample > 0


def with_estimated_counts(fit_on: Sequence[ArchFeatures], archs: Sequence[ArchFeatures]) -> list[ArchFeatures]:
    """``archs`` as an ONNX file would reach the Predictor: both saved-tensor counts replaced by the estimate
    fitted on ``fit_on`` (the fixed parts unknown, 0)."""
    from dataclasses import replace

    estimators = {attr: SavedBytesEstimator(attr).fit(fit_on) for attr in SAVED_ATTRS}
    preds = {attr: np.maximum(e.predict(archs), 0.0) for attr, e in estimators.items()}
    return [replace(a, saved_bytes_fixed=0.0, saved_cpu_bytes_fixed=0.0,
                    **{attr: float(preds[attr][i]) for attr in SAVED_ATTRS}) for i, a in enumerate(archs)]
