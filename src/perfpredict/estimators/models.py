"""The regressors compared (Horus Table 4): XGBoost (primary), LightGBM, random forest, a linear model.

All follow scikit-learn's ``fit(X, y)`` / ``predict(X)``. Hyper-parameters are fixed, modest and the same
for every target (no tuning on the evaluation folds, which would flatter the scores), except the ridge's
penalty, which :class:`FamilyRidge` chooses by family on each training fold's own rows. The quantile model is
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
        return FamilyRidge()
    raise ValueError(f"unknown model kind {kind!r}; expected one of {MODEL_KINDS}")


#: The ridge penalties :class:`FamilyRidge` chooses among.
RIDGE_ALPHAS = np.logspace(-3, 3, 13)


class FamilyRidge:
    """Ridge regression on standardised features whose penalty is chosen by leave-one-family-out CV on its
    own training rows (``fit(X, y, groups=families)``), the grouping the estimators are scored by.

    scikit-learn's ``RidgeCV`` chooses by leave-one-*row*-out, where every family is in the training part:
    it picked the smallest penalty offered, and a held-out family far out on one column was then predicted
    exponentially wrong (CPU iteration-time MAPE of 10^4 to 10^11 %). Without ``groups`` (or with fewer than
    three families) it falls back to ``RidgeCV``."""

    fits_by_family = True

    def __init__(self, alphas: np.ndarray = RIDGE_ALPHAS) -> None:
        self.alphas = alphas
        self.model_ = None
        self.alpha_: float | None = None

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> FamilyRidge:
        from sklearn.linear_model import Ridge, RidgeCV
        from sklearn.model_selection import GridSearchCV, LeaveOneGroupOut
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if groups is None or len(set(np.asarray(groups).tolist())) < 3:
            self.model_ = make_pipeline(StandardScaler(), RidgeCV(alphas=self.alphas)).fit(X, y)
            self.alpha_ = float(self.model_[-1].alpha_)
            return self
        search = GridSearchCV(make_pipeline(StandardScaler(), Ridge()), {"ridge__alpha": list(self.alphas)},
                              cv=LeaveOneGroupOut(), scoring="neg_mean_squared_error")
        search.fit(X, y, groups=groups)
        self.model_, self.alpha_ = search.best_estimator_, float(search.best_params_["ridge__alpha"])
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model_.predict(X)


def fit_grouped(model, X: np.ndarray, y: np.ndarray, *args, groups: np.ndarray | None = None):
    """``model.fit(X, y, *args)``, with ``groups`` (each row's family) for the models that choose
    hyper-parameters by family (those with ``fits_by_family = True``: :class:`FamilyRidge`, and the wrappers
    that fit one inside)."""
    if groups is not None and getattr(model, "fits_by_family", False):
        return model.fit(X, y, *args, groups=groups)
    return model.fit(X, y, *args)


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


#: Physical baselines' terms: each a sum of raw quantities, recovered from ``log10(x + 1)`` feature columns,
#: or ``any:<feature>``, an indicator (1 where the feature is positive).
#: What a training step holds on top of its saved tensors: the activations live at once at the forward pass's
#: peak, outputs no backward needs (an MLP's pre-activations, a ReLU's input when it saves its output) among them,
#: and the backward's gradient buffers, which are as large as the activations they flow through. On a CPU glibc
#: keeps the freed ones resident (``benchmarks/glibc_heap.py``). Saved bytes alone left this out: an MLP's RSS at
#: batch 1024-4096 grew by about 3 bytes per saved byte where the fit gave 1.4, and held-out points far past
#: the trained batch sizes exceeded the q90 (``benchmarks/memory_past_trained_batches.py``). With this term the
#: family-CV MAPE of every training-step memory target fell (session 24: CPU RSS 5.6-9.3% from 6.8-9.7%; H100
#: peak allocated 8.1% from 8.4%, NVML 5.2% from 6.4%).
TRANSIENT_TERM: tuple[str, ...] = ("log_peak_live_bytes_iter",)
#: Memory before :data:`TRANSIENT_TERM`: parameter bytes (weights, gradients, optimizer state are multiples of
#: it), saved-tensor bytes and a fixed block for models with any GEMM (cuBLAS/cuBLASLt take their workspace from
#: torch's caching allocator on the first matrix product: about 64 MiB per stream on the H100, the floor of every
#: measured model with a Linear layer, absent from the conv-only U-Nets). Also how the coefficients of sets
#: trained before their terms were saved with them (``term_features``) are read.
LEGACY_MEMORY_TERMS: tuple[tuple[str, ...], ...] = (("log_param_bytes",), ("log_saved_bytes_iter",),
                                                    ("any:ops_matmul",))
#: Memory of a training step on a GPU.
MEMORY_TERMS: tuple[tuple[str, ...], ...] = LEGACY_MEMORY_TERMS + (TRANSIENT_TERM,)
#: The CPU's RSS carries a fixed block for models with any op PyTorch runs through oneDNN (convolutions, LSTM):
#: its code paged in and its JIT-compiled kernels (``design.ONEDNN_OPS``). Without it the constant (36 MiB)
#: over-predicted every small GEMM-only model (an MLP's smallest step holds 28.5 MiB).
ONEDNN_TERM: tuple[str, ...] = ("any:ops_onednn",)
#: Memory of a training step on the CPU (its RSS), whose saved tensors are counted as the CPU's kernels keep them: its
#: unfused attention keeps the L x L scores and its dropout float noise, 1.5-2.7x the CUDA count for the zoo's
#: transformers and ViTs (the same bytes for models with neither); with the oneDNN block, the library code a
#: training step pages in and :data:`TRANSIENT_TERM`.
CPU_MEMORY_TERMS: tuple[tuple[str, ...], ...] = (("log_param_bytes",), ("log_saved_cpu_bytes_iter",),
                                                 ("any:ops_matmul",), ONEDNN_TERM, ("log_code_bytes_train",),
                                                 TRANSIENT_TERM)
#: Memory of an inference pass on the CPU (its RSS): weights, the peak of live activations and the library code
#: the graph's op types page into the process (``log_code_bytes_infer``; :mod:`perfpredict.estimators.code_footprint`).
#: The code term replaces the oneDNN block and the GEMM indicator: with all three, the fit put both at 0.
CPU_INFER_MEMORY_TERMS: tuple[tuple[str, ...], ...] = (("log_param_bytes",), ("log_peak_live_bytes_iter",),
                                                       ("log_code_bytes_infer",))
#: Inference (forward passes under no_grad): weights, and activations that live only until their consumers
#: ran, so nothing is saved and the pass holds at most the graph's peak of live activations
#: (:func:`perfpredict.features.graph.peak_live_activation_bytes`). The sum of all activation bytes stood in for
#: it before: on the CPU inference data it fitted 0.15 x that sum, but the ratio of peak to sum ranges from a
#: few percent (deep ViTs, whose layers each free their inputs) to most of it (an LSTM's logits), and family
#: CV went 15.5% -> 10.4% with the peak (ViT 43% -> 4%).
INFER_MEMORY_TERMS: tuple[tuple[str, ...], ...] = (("log_param_bytes",), ("log_peak_live_bytes_iter",),
                                                   ("any:ops_matmul",))
#: Iteration time, roofline-like: compute (forward MACs per iteration; backward is a multiple of it) and
#: memory traffic (activation bytes per iteration + parameter bytes).
TIME_TERMS: tuple[tuple[str, ...], ...] = (("log_macs_per_iter",), ("log_act_bytes_per_iter", "log_param_bytes"))
#: The same for an inference pass, which reads only the looked-up rows of an embedding table (in the activation
#: bytes), not the whole table as a training step's optimizer does. On the CPU inference dataset this takes DLRM
#: from a 16x over-prediction to 66% and the family-CV MAPE of the baseline x XGBoost from 375% to 36%.
INFER_TIME_TERMS: tuple[tuple[str, ...], ...] = (("log_macs_per_iter",),
                                                 ("log_act_bytes_per_iter", "log_dense_param_bytes"))
#: The per-time-step cost of recurrent layers, by device kind, appended to the time terms above. A step waits
#: for the one before it, so it costs a fixed latency however small its work. On the CPU, PyTorch trains and
#: runs GRU and plain RNN one step at a time in ATen ops (≈ 0.4 ms per GRU step measured with torch.profiler)
#: but LSTM through one fused oneDNN call per layer, so only GRU/RNN steps are charged there, per gate (charging
#: LSTM steps the same cost took LSTM held out from 27% to 226% MAPE); cuDNN steps every recurrent op on the GPU.
#: The CPU's time baseline, by mode: the sum of the graph's kernels' costs measured on the CPU
#: (:mod:`perfpredict.estimators.kernel_time`), scaled. On the Xeon VM this took the inference baseline's
#: family-CV MAPE from 57% to 26% (× XGBoost: 44% to 16%) and training steps' from 36% to 24% (32% to 18%).
CPU_TIME_TERMS: dict[str, tuple[tuple[str, ...], ...]] = {"infer": (("log_kernel_ns_infer",),),
                                                          "train": (("log_kernel_ns_train",),)}
STEP_TERMS: dict[str, tuple[str, ...]] = {"cpu": ("log_stepwise_rnn_gate_steps",), "cuda": ("log_recurrent_steps",)}
#: The GPU's cost per kernel launched, appended to its roofline: an eager step launches one kernel per node of
#: the kernel walk (forward, and a multiple of it backward), each taking microseconds of host and device time
#: however little it computes, so a small model's step on an H100 is bounded by its launches, not by its MACs
#: or bytes. On the H100 training set this took the roofline's family-CV MAPE from 50% to 28% (MLP 147% -> 38%)
#: and × XGBoost's from 27% to 20%; ONNX's node count in its place, with views and shape arithmetic, gave
#: 46% and 27%. The CPU's kernel costs (CPU_TIME_TERMS) already price each call.
LAUNCH_TERMS: dict[str, tuple[str, ...]] = {"cuda": ("log_kernel_calls",)}


def memory_terms(device_kind: str, mode: str = "train") -> tuple[tuple[str, ...], ...]:
    """The memory baseline's terms for a ``device_kind`` and ``mode``: on CUDA :data:`MEMORY_TERMS` (training) or
    :data:`INFER_MEMORY_TERMS` (nothing saved); on the CPU :data:`CPU_MEMORY_TERMS` (with the oneDNN block,
    :data:`ONEDNN_TERM`, and the code pages of a training step) or :data:`CPU_INFER_MEMORY_TERMS`."""
    if device_kind == "cpu":
        return CPU_MEMORY_TERMS if mode != "infer" else CPU_INFER_MEMORY_TERMS
    return INFER_MEMORY_TERMS if mode == "infer" else MEMORY_TERMS


def time_terms(device_kind: str, mode: str = "train") -> tuple[tuple[str, ...], ...]:
    """The iteration-time baseline's terms for a ``device_kind`` ("cpu" or "cuda") and ``mode`` ("train" or
    "infer"), plus the device's :data:`LAUNCH_TERMS` and :data:`STEP_TERMS`: on CUDA :data:`TIME_TERMS` or
    :data:`INFER_TIME_TERMS` (a roofline: one rate per MAC, one per byte) and a cost per kernel launched, on the
    CPU :data:`CPU_TIME_TERMS` (the graph's kernels priced by the costs measured on the CPU, whose classes differ
    by orders of magnitude per MAC and per byte)."""
    if device_kind == "cpu":
        base = CPU_TIME_TERMS[mode if mode == "infer" else "train"]
    else:
        base = INFER_TIME_TERMS if mode == "infer" else TIME_TERMS
    extra = [LAUNCH_TERMS.get(device_kind), STEP_TERMS.get(device_kind)]
    return base + tuple(t for t in extra if t)


#: GPU-utilisation prior (see :class:`UtilizationPriorModel`): the GPU's busy seconds per iteration, from
#: compute (forward MACs), memory traffic (activation bytes, parameter bytes: the optimizer touches every one)
#: and a fixed cost per kernel (graph nodes); no constant, since an iteration without kernels keeps the GPU
#: idle.
BUSY_TERMS: tuple[tuple[str, ...], ...] = (("log_macs_per_iter",), ("log_act_bytes_per_iter",), ("log_param_bytes",),
                                           ("log_nodes",))
#: ... and its idle seconds per iteration: a fixed host cost per step, host work per kernel launched and the
#: input pipeline's work per input byte.
IDLE_TERMS: tuple[tuple[str, ...], ...] = (("log_nodes",), ("log_input_bytes_per_iter",))
#: The name of the prior's column appended to the feature vector.
PRIOR_FEATURE = "util_prior_log_busy_over_idle"
#: ... and of the second prior column (:func:`busy_share_prior`).
PRIOR_TIME_FEATURE = "util_prior_log_busy_over_time"


def baseline_components(X: np.ndarray, terms: tuple[tuple[str, ...], ...] = MEMORY_TERMS) -> np.ndarray:
    """``[1, term_1, ...]`` per row in raw units (bytes, MACs), recovered from the log10(x + 1) features;
    an ``any:<feature>`` term is 1 where that feature is positive, else 0."""
    from perfpredict.estimators.design import FEATURE_NAMES

    X = np.asarray(X, float)
    cols = [np.ones(len(X))]
    for term in terms:
        if len(term) == 1 and term[0].startswith("any:"):
            cols.append((X[:, FEATURE_NAMES.index(term[0][4:])] > 0).astype(float))
            continue
        idx = [FEATURE_NAMES.index(n) for n in term]
        cols.append(np.maximum(10.0 ** X[:, idx] - 1.0, 0.0).sum(axis=1))
    return np.column_stack(cols)


class TermComponents:
    """:func:`baseline_components` of one design matrix ``X``, each set of terms computed once: one prediction
    asks for the same sets about ten times over the same rows (each target's median and quantile baselines, the
    utilisation prior's busy, idle and time terms, the card's baseline shares). Made once per design matrix and
    passed down with it; the arrays it hands out are shared, so they are read-only."""

    def __init__(self, X: np.ndarray) -> None:
        self._X = np.asarray(X, float)
        self._by_terms: dict[tuple[tuple[str, ...], ...], np.ndarray] = {}

    def __call__(self, terms: tuple[tuple[str, ...], ...]) -> np.ndarray:
        C = self._by_terms.get(terms)
        if C is None:
            C = self._by_terms[terms] = self._computed(terms)
            C.flags.writeable = False
        return C

    def _computed(self, terms: tuple[tuple[str, ...], ...]) -> np.ndarray:
        return baseline_components(self._X, terms)

    def rows(self, sel: slice | np.ndarray) -> TermComponents:
        """The components of ``X[sel]``."""
        return _RowsOf(self, sel)


class _RowsOf(TermComponents):
    """Rows ``sel`` of another matrix's :class:`TermComponents`: its arrays, sliced. A row's components depend on
    that row alone, so these are the bits ``baseline_components(X[sel])`` gives."""

    def __init__(self, whole: TermComponents, sel: slice | np.ndarray) -> None:
        self._whole, self._sel = whole, sel
        self._by_terms = {}

    def _computed(self, terms: tuple[tuple[str, ...], ...]) -> np.ndarray:
        return self._whole(terms)[self._sel]


def components_of(X: np.ndarray, components: TermComponents | None) -> TermComponents:
    """``components`` (those of ``X``, made by the caller), or ``X``'s made here."""
    return components if components is not None else TermComponents(X)


def rowwise_dot(C: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``C @ coef``, summed one column after another, so that each row's value depends on that row alone. BLAS's
    matrix-vector product sums in an order that depends on how many rows it is given: a job's baseline came out
    some ulps apart predicted alone and among other jobs (:meth:`~perfpredict.predictor.Predictor.cards_for`
    answers exactly as one ``card_for`` per job)."""
    terms = np.asarray(C, float) * np.asarray(coef, float)
    if terms.shape[1] == 0:
        return np.zeros(len(terms))
    return np.add.accumulate(terms, axis=1)[:, -1]  # a running sum: in column order, by definition


def fit_baseline(C: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients of ``C @ coef ≈ y`` on *relative* residuals (small and large jobs weigh alike),
    so the coefficients stay physical (no negative bytes per parameter, no negative seconds per MAC)."""
    from scipy.optimize import nnls

    y = np.asarray(y, float)
    # Scale columns so NNLS is well conditioned, then undo the scaling on the coefficients.
    scale = np.maximum(np.abs(C).max(axis=0), 1e-30)
    coef, _ = nnls((C / scale) / y[:, None], np.ones(len(y)), maxiter=50 * C.shape[1])
    return coef / scale


class LogBaselineModel:
    """A physical baseline for a target learned on log scale (iteration time), alone or times a learned
    correction: ``fit(X, log y)``, ``predict(X) -> log baseline (+ correction)``.

    Trees cannot extrapolate to a family whose sizes lie outside the others'; a handful of non-negative
    physical coefficients can. ``residual_kind`` (a :data:`MODEL_KINDS` entry; None or "none": the baseline
    alone) adds a regressor fitted to the log-residuals ``log(y / baseline)`` on the full feature vector: the
    baseline carries the scale to unseen families, the correction what the physics misses (per-operator
    overheads, kernels that run below peak). With ``quantiles``: the training log-residuals' quantiles (a
    constant interval) for the baseline alone, or an XGBoost quantile booster on the residuals with a
    correction (n × len(quantiles)). ``intercept=False`` pins the constant term at 0 (its coefficient stays
    in the vector, so saved coefficient vectors keep their layout). :class:`StructuredMemoryModel` is the same
    model on bytes.
    """

    fits_by_family = True

    def __init__(self, terms: tuple[tuple[str, ...], ...] = TIME_TERMS,
                 quantiles: tuple[float, ...] | None = None, floor: float = 1e-6,
                 residual_kind: str | None = None, intercept: bool = True) -> None:
        self.terms = terms
        self.quantiles = quantiles
        self.floor = floor
        self.residual_kind = residual_kind
        self.intercept = intercept
        self.coef_: np.ndarray | None = None
        self.residual_ = None
        #: for the baseline alone with quantiles: the training log-residuals' quantiles (constant interval)
        self.residual_quantiles_: np.ndarray | None = None

    def components(self, X: np.ndarray) -> np.ndarray:
        """``[1, term_1, ...]`` in raw units for ``terms`` (see :func:`baseline_components`)."""
        return baseline_components(X, self.terms)

    def baseline(self, X: np.ndarray) -> np.ndarray:
        return np.maximum(self.components(X) @ self.coef_, self.floor)

    def _fit_natural(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None):
        """Fit on the target's natural scale ``y`` (seconds, bytes); ``groups``: each row's family, for a
        correction that chooses its hyper-parameters by family."""
        C = self.components(X)
        if self.intercept:
            self.coef_ = fit_baseline(C, y)
        else:
            self.coef_ = np.concatenate([[0.0], fit_baseline(C[:, 1:], y)])
        r = np.log(y / self.baseline(X))
        if self.residual_kind not in (None, "none"):
            self.residual_ = make_quantile_model(self.quantiles) if self.quantiles else make_model(self.residual_kind)
            fit_grouped(self.residual_, X, r, groups=groups)
        elif self.quantiles:
            self.residual_quantiles_ = np.quantile(r, self.quantiles)
        return self

    def _log_correction(self, X: np.ndarray) -> np.ndarray | None:
        """The learned log-correction (n, or n × quantiles), the constant residual quantiles (1 × quantiles)
        or None (the baseline alone)."""
        if self.residual_ is not None:
            return np.asarray(self.residual_.predict(X), float)
        if self.residual_quantiles_ is not None:
            return self.residual_quantiles_[None, :]
        return None

    def fit(self, X: np.ndarray, z: np.ndarray, groups: np.ndarray | None = None) -> LogBaselineModel:
        return self._fit_natural(X, np.exp(np.asarray(z, float)), groups)

    def predict(self, X: np.ndarray) -> np.ndarray:
        lb = np.log(self.baseline(X))
        r = self._log_correction(X)
        if r is None:
            return lb
        return (lb[:, None] if r.ndim == 2 else lb) + r


class StructuredMemoryModel(LogBaselineModel):
    """Peak training memory = a physical baseline × a learned correction, in bytes.

    The baseline is ``c0 + k_P·P + k_S·S + k_W·[any GEMM]``: a constant, the parameter bytes P (weights,
    gradients and optimizer state are multiples of it), the bytes S autograd saves for the backward pass in
    one iteration (:mod:`perfpredict.features.saved`) and the BLAS workspace of models with a matrix
    product. On the H100 data the fit gives k_P ≈ 2.9 (weights + gradients + momentum), k_S ≈ 1 and
    k_W ≈ 69 MiB: the formula is physical, and so it carries over to families the correction never saw.
    ``intercept=False`` pins c0 at 0, for targets that have no per-process constant: torch's peak
    *allocated* bytes are all tensors and workspaces (the fit with a constant gives 0.7 MiB), whereas a
    process's RSS or NVML memory carries the runtime and the CUDA context. Without the pin, a held-out
    family that alone lacks a GEMM (the U-Nets) cannot tell the constant from the workspace. Its
    coefficients are fitted by non-negative least squares on relative residuals (:func:`fit_baseline`). The
    correction is any regressor of :data:`MODEL_KINDS` (or the quantile booster; ``"none"``: the baseline
    alone) fitted to ``log(y / baseline)`` on the full feature vector: :class:`LogBaselineModel` on bytes.
    """

    def __init__(self, residual_kind: str = "xgboost", quantiles: tuple[float, ...] | None = None,
                 intercept: bool = True, terms: tuple[tuple[str, ...], ...] = MEMORY_TERMS) -> None:
        super().__init__(terms, quantiles, floor=1.0, residual_kind=residual_kind, intercept=intercept)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> StructuredMemoryModel:
        return self._fit_natural(X, np.asarray(y, float), groups)

    def predict(self, X: np.ndarray) -> np.ndarray:
        base = self.baseline(X)
        r = self._log_correction(X)
        if r is None:
            return base
        return (base[:, None] if r.ndim == 2 else base) * np.exp(r)


def with_utilization_prior(X: np.ndarray, busy_coef: np.ndarray, idle_coef: np.ndarray,
                           time_coef: np.ndarray | None = None,
                           prior_time_terms: tuple[tuple[str, ...], ...] | None = None,
                           components: TermComponents | None = None) -> np.ndarray:
    """``X`` with the prior columns appended, what the utilisation boosters take: :func:`utilization_prior`,
    and with ``time_coef`` and its ``prior_time_terms`` (sets trained since the launch term)
    :func:`busy_share_prior` too. ``components``: ``X``'s :class:`TermComponents`, if the caller has them."""
    X = np.asarray(X, float)
    components = components_of(X, components)
    cols = [X, utilization_prior(X, busy_coef, idle_coef, components)]
    if time_coef is not None:
        if not prior_time_terms:
            raise ValueError("time coefficients need the terms they were fitted on")
        cols.append(busy_share_prior(X, busy_coef, time_coef, prior_time_terms, components))
    return np.column_stack(cols)


def _busy_seconds(components: TermComponents, busy_coef: np.ndarray) -> np.ndarray:
    return np.maximum(rowwise_dot(components(BUSY_TERMS)[:, 1:], busy_coef), 1e-9)


def utilization_prior(X: np.ndarray, busy_coef: np.ndarray, idle_coef: np.ndarray,
                      components: TermComponents | None = None) -> np.ndarray:
    """``log(B / I)`` per row: the physical model's busy over idle seconds per iteration (``logit`` of its
    utilisation ``B / (B + I)``)."""
    components = components_of(X, components)
    idle = rowwise_dot(components(IDLE_TERMS), idle_coef)
    return np.log(_busy_seconds(components, busy_coef)) - np.log(np.maximum(idle, 1e-9))


def busy_share_prior(X: np.ndarray, busy_coef: np.ndarray, time_coef: np.ndarray,
                     terms: tuple[tuple[str, ...], ...], components: TermComponents | None = None) -> np.ndarray:
    """``log(B / t̂)`` per row: the busy seconds over the iteration time the GPU's time baseline predicts
    (roofline + a cost per kernel launched + per recurrent step, :func:`time_terms`), NVML's ``u = B / t``
    read with the time model that knows what a step's launches cost."""
    components = components_of(X, components)
    t = np.maximum(rowwise_dot(components(terms), time_coef), 1e-9)
    return np.log(_busy_seconds(components, busy_coef)) - np.log(t)


class UtilizationPriorModel:
    """GPU utilisation = a learned model over the features *and* a physical prior.

    NVML's utilisation is the fraction of the time a kernel runs, so over one iteration ``u = B / (B + I)``:
    B the GPU's busy seconds, I its idle seconds (host-side launch work, the input pipeline, synchronisation).
    Both are measured in training (``B = u·t``, ``I = t - B``, t the iteration time), and both are sums of
    physical work with non-negative coefficients (:data:`BUSY_TERMS`, :data:`IDLE_TERMS`, fitted by
    :func:`fit_baseline`). The prior ``log(B/I)`` alone generalises poorly (an RMSLE of 0.57 under family CV
    on the H100 data), but as one more column for the regressor it carries what trees cannot extrapolate to
    an unseen family: how busy and idle time scale with its work. Under leave-one-family-out CV on the H100
    data XGBoost's utilisation RMSLE (percent) went from 0.253 to 0.219 with it.

    A second column reads ``u = B / t`` with t from the device's iteration-time baseline (``time_terms``: on
    CUDA the roofline plus a cost per kernel launched and per recurrent step, fitted by :func:`fit_baseline` on
    the same rows' measured times): the idle terms above charge per ONNX node, views included, where the time
    baseline charges per kernel launched. With it the family-CV RMSLE went from 0.223 to 0.205 (0.226 to 0.208
    and 0.218 to 0.205 with two other booster seeds). ``time_terms=None`` leaves it out (the sets trained
    before).

    ``fit(X, u, iter_time_s)``: the target's :attr:`aux_column` is the third argument. The prior's
    coefficients are fitted on the training rows only, so cross-validation stays honest.
    """

    aux_column = "iter_time_s"

    fits_by_family = True

    def __init__(self, kind: str = "xgboost", quantiles: tuple[float, ...] | None = None,
                 time_terms: tuple[tuple[str, ...], ...] | None = None) -> None:
        self.kind = kind
        self.quantiles = quantiles
        self.time_terms = time_terms
        self.busy_coef_: np.ndarray | None = None
        self.idle_coef_: np.ndarray | None = None
        self.time_coef_: np.ndarray | None = None
        self.inner_ = None

    def augment(self, X: np.ndarray) -> np.ndarray:
        return with_utilization_prior(X, self.busy_coef_, self.idle_coef_, self.time_coef_, self.time_terms)

    def fit(self, X: np.ndarray, u: np.ndarray, iter_time_s: np.ndarray,
            groups: np.ndarray | None = None) -> UtilizationPriorModel:
        X, u, t = np.asarray(X, float), np.asarray(u, float), np.asarray(iter_time_s, float)
        busy = u * t
        idle = np.maximum(t - busy, 1e-3 * t)  # NVML can report 100 %: keep the idle share positive
        self.busy_coef_ = fit_baseline(baseline_components(X, BUSY_TERMS)[:, 1:], busy)
        self.idle_coef_ = fit_baseline(baseline_components(X, IDLE_TERMS), idle)
        if self.time_terms:
            self.time_coef_ = fit_baseline(baseline_components(X, self.time_terms), t)
        self.inner_ = make_quantile_model(self.quantiles) if self.quantiles else make_model(self.kind)
        fit_grouped(self.inner_, self.augment(X), u, groups=groups)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.inner_.predict(self.augment(X)), float)
