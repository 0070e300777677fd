"""What the estimators predict, and on which scale they learn it.

Tree ensembles cannot extrapolate beyond the targets they were trained on, and grouped cross-validation asks
them to predict architecture families they never saw, whose sizes may lie outside every other family's. So
each target is learned on a scale where unseen families look like seen ones:

- **peak memory** in bytes through :class:`~perfpredict.estimators.models.StructuredMemoryModel`: a
  non-negative linear baseline over parameter bytes and activation bytes by op group (what Horus eq. 2 adds
  up, with coefficients measured instead of assumed), times a learned correction. A model ten times
  larger than any in training still gets a sensible answer, which a tree on raw bytes cannot give;
- **iteration time** as log seconds, by a learned model or by a roofline-like physical baseline
  (:class:`~perfpredict.estimators.models.LogBaselineModel`: ``c0 + c_M·MACs + c_B·bytes`` per iteration,
  kind ``none``); family CV picks between them per device (on the CPU the baseline generalises far better,
  on the H100 XGBoost does);
- **GPU utilisation** as the fraction itself, clipped to (0, 1] on the way out, by a regressor that also
  sees a physical prior (:class:`~perfpredict.estimators.models.UtilizationPriorModel`: busy over idle
  seconds per iteration, whose coefficients are fitted from the measured utilisation × iteration time, so
  the target trains with the iteration time as an auxiliary column).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfpredict.estimators.models import (
    MEMORY_TERMS,
    MODEL_KINDS,
    QUANTILES,
    TIME_TERMS,
    LogBaselineModel,
    StructuredMemoryModel,
    UtilizationPriorModel,
    fit_grouped,
    make_model,
    make_quantile_model,
    memory_terms,
    time_terms,
)

#: Model kind of a log-scale target: its physical baseline times an XGBoost correction of the log-residuals.
BASELINE_CORRECTION = "baseline_xgboost"


@dataclass(frozen=True)
class TargetSpec:
    name: str
    column: str  # the dataset column
    unit: str
    transform: str  # "structured_memory" | "log" | "identity01"
    cuda_only: bool = False
    #: Over-estimating is the safe side for placement (Horus §4.1.1): the quantile a scheduler should use.
    safe_quantile: float | None = None
    #: For a log-scale target: the terms of a physical baseline offered as model kind ``none``.
    baseline_terms: tuple[tuple[str, ...], ...] | None = None
    #: For a structured-memory target: whether its baseline has a constant term (see StructuredMemoryModel).
    memory_intercept: bool = True
    #: A second dataset column the model trains on (GPU utilisation: the iteration time, for its prior).
    aux_column: str | None = None
    #: For a structured-memory target: its baseline's terms (training: saved tensors; inference: activations).
    memory_terms: tuple[tuple[str, ...], ...] = MEMORY_TERMS
    #: For GPU utilisation: the iteration-time baseline's terms its second prior column divides by
    #: (:func:`~perfpredict.estimators.models.busy_share_prior`); None: the busy/idle column alone.
    prior_time_terms: tuple[tuple[str, ...], ...] | None = None

    def to_model(self, y: np.ndarray, X: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if self.transform == "log":
            return np.log(y)
        return y  # identity01, and structured_memory (the model takes bytes)

    def from_model(self, z: np.ndarray, X: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        if self.transform == "log":
            return np.exp(z)
        if self.transform == "identity01":
            return np.clip(z, 0.005, 1.0)
        return z

    def fit_model(self, model, X: np.ndarray, y: np.ndarray, aux: np.ndarray | None = None,
                  groups: np.ndarray | None = None):
        """Fit ``model`` (from :meth:`make_model` or :meth:`make_quantile_model`) to the target ``y`` on its
        natural scale; ``aux`` is the :attr:`aux_column` of the same rows, required when the target has one;
        ``groups`` each row's family, for the models that choose a hyper-parameter by family (the ridge)."""
        z = self.to_model(y, X)
        if self.aux_column is None:
            return fit_grouped(model, X, z, groups=groups)
        if aux is None:
            raise ValueError(f"{self.name} trains with the {self.aux_column!r} column too")
        return fit_grouped(model, X, z, aux, groups=groups)

    def make_model(self, kind: str):
        """A fresh regressor of ``kind`` for this target (memory wraps it in the structured model, utilisation
        in the prior model)."""
        if self.aux_column == UtilizationPriorModel.aux_column:
            return UtilizationPriorModel(kind, time_terms=self.prior_time_terms)
        if self.transform == "structured_memory":
            return StructuredMemoryModel(kind, intercept=self.memory_intercept, terms=self.memory_terms)
        if kind == "none" and self.baseline_terms:
            return LogBaselineModel(self.baseline_terms)
        if kind == BASELINE_CORRECTION and self.baseline_terms:
            return LogBaselineModel(self.baseline_terms, residual_kind="xgboost")
        return make_model(kind)

    def make_quantile_model(self, kind: str = "xgboost"):
        """The interval model that goes with the point model ``kind`` (the baseline-only memory model gets
        the training residuals' quantiles; every other one an XGBoost quantile booster)."""
        if self.aux_column == UtilizationPriorModel.aux_column:
            return UtilizationPriorModel(quantiles=QUANTILES, time_terms=self.prior_time_terms)
        if self.transform == "structured_memory":
            return StructuredMemoryModel("none" if kind == "none" else "xgboost", quantiles=QUANTILES,
                                         intercept=self.memory_intercept, terms=self.memory_terms)
        if kind == "none" and self.baseline_terms:
            return LogBaselineModel(self.baseline_terms, quantiles=QUANTILES)
        if kind == BASELINE_CORRECTION and self.baseline_terms:
            return LogBaselineModel(self.baseline_terms, quantiles=QUANTILES, residual_kind="xgboost")
        return make_quantile_model()

    @property
    def default_kind(self) -> str:
        """The kind fitted without cross-validation (``--no-eval``): the one family CV ships on most committed
        sets (memory: the physical baseline; iteration time: the baseline × an XGBoost correction; utilisation:
        XGBoost on its priors), so a set trained without scores is the usual model, not a weaker one."""
        if self.transform == "structured_memory":
            return "none"
        return BASELINE_CORRECTION if self.baseline_terms else "xgboost"

    @property
    def kinds(self) -> tuple[str, ...]:
        """Model kinds compared; memory and iteration time add ``none``: the physical baseline alone (for
        memory the other kinds are corrections on top of it); iteration time also the baseline × an XGBoost
        correction (:data:`BASELINE_CORRECTION`)."""
        if self.baseline_terms:
            return ("none", BASELINE_CORRECTION) + MODEL_KINDS
        return (("none",) if self.transform == "structured_memory" else ()) + MODEL_KINDS


TARGETS: dict[str, TargetSpec] = {
    "peak_memory": TargetSpec("peak_memory", "peak_memory_bytes", "bytes", "structured_memory", safe_quantile=0.9),
    # What the device really holds for the process (NVML): CUDA context + the caching allocator's reserve.
    # torch's peak allocated (above) can sit gigabytes below it, so placement should reserve this one.
    "device_memory": TargetSpec("device_memory", "nvml_process_bytes", "bytes", "structured_memory", cuda_only=True,
                                safe_quantile=0.9),
    "iter_time": TargetSpec("iter_time", "iter_time_s", "s", "log", baseline_terms=TIME_TERMS),
    "gpu_utilization": TargetSpec("gpu_utilization", "gpu_utilization", "fraction", "identity01", cuda_only=True,
                                  safe_quantile=0.9, aux_column=UtilizationPriorModel.aux_column),
}


def targets_for(device_kind: str, mode: str = "train") -> dict[str, TargetSpec]:
    """The targets a dataset of ``device_kind`` ("cuda" or "cpu") and ``mode`` ("train" or "infer") trains,
    each as that device measures it.

    On CUDA, ``peak_memory`` is torch's peak allocated bytes: every byte a tensor or a library workspace, so
    its baseline has no constant (on the CPU it is the process's RSS increase, which does have one). The
    training memory baselines count the saved tensors as the device's kernels keep them, and in inference,
    where nothing is kept for a backward pass, activations instead
    (:func:`~perfpredict.estimators.models.memory_terms`); the inference time baseline reads only
    the weights that are not embedding tables (:data:`~perfpredict.estimators.models.INFER_TIME_TERMS`). On the
    CPU the time baseline is the graph's kernels priced by the costs measured there instead of a roofline, and
    its per-recurrent-step term depends on the device kind (:func:`~perfpredict.estimators.models.time_terms`)."""
    from dataclasses import replace

    if mode not in ("train", "infer"):
        raise ValueError(f"mode must be 'train' or 'infer', got {mode!r}")
    out = {}
    for name, spec in TARGETS.items():
        if spec.cuda_only and device_kind != "cuda":
            continue
        if name == "peak_memory" and device_kind == "cuda":
            spec = replace(spec, memory_intercept=False)
        if spec.transform == "structured_memory":
            spec = replace(spec, memory_terms=memory_terms(device_kind, mode))
        if spec.baseline_terms:
            spec = replace(spec, baseline_terms=time_terms(device_kind, mode))
        if spec.aux_column == UtilizationPriorModel.aux_column:
            spec = replace(spec, prior_time_terms=time_terms(device_kind, mode))
        out[name] = spec
    return out
