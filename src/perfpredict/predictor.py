"""The Predictor: performance cards for jobs nobody has profiled, from the estimators in ``trained_models/``.

    from perfpredict import Predictor
    pred = Predictor.load()                                   # every model set under trained_models/
    card = pred.predict("model.py", batch_sizes=[16, 32, 64])  # exports the model to ONNX (runs its code)
    card = pred.predict(onnx_path="net.onnx", batch_size=32)   # static analysis only, nothing executed
    card.prediction.points[0].device_memory_safe_bytes         # the q90 of GPU memory a placement should reserve
    pred.predict_values(features, [32])                        # the raw numbers, without building a card

Every value on a predicted card says ``source: predicted`` and carries its 80% interval. When the request's
graph features are farther from every training architecture than any training architecture is from its own
nearest neighbour, the estimators would be extrapolating: the Predictor then answers with the measurements
of the most similar profiled architecture (GENIE §6's model database), carried to the request's own
parameters and activations and interpolated between the batch sizes it was measured at, and says so on the
card (``prediction.method = "nearest_profiled"``).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from perfpredict.errors import PerfPredictError, UsageError, first_line
from perfpredict.estimators.arch import TRAIN_STEP_NOTE, ArchFeatures, fixed_parts_at_least_zero
from perfpredict.estimators.design import FEATURE_NAMES, design_matrix, feature_names, needs_bare_kernels
from perfpredict.estimators.evaluate import calibrated
from perfpredict.estimators.forest import compile_model_file
from perfpredict.estimators.models import (
    LEGACY_MEMORY_TERMS,
    TermComponents,
    components_of,
    rowwise_dot,
    with_utilization_prior,
)
from perfpredict.estimators.saved_estimate import ESTIMABLE_ATTRS, SAVED_ATTRS, SavedBytesEstimator
from perfpredict.hostinfo import cpu_id, cpu_model_name, gpu_names

if TYPE_CHECKING:
    from perfpredict.card import CalibrationInfo, PerformanceCard

#: Features describing the architecture alone (no batch size): the space the fallback measures distance in
#: (``ops_onednn`` re-counts the conv and LSTM ops already in ``ops_conv`` and ``ops_rnn``, so it is left out).
_ARCH_COLUMNS = [i for i, n in enumerate(FEATURE_NAMES)
                 if n.startswith(("log_macs_per_sample", "log_params", "log_act_bytes_per_sample", "log_nodes",
                                  "share_", "ops_")) and n != "ops_onednn"]
_ARCH_FEATURES = [FEATURE_NAMES[i] for i in _ARCH_COLUMNS]


def model_set_dirs(root: Path) -> list[Path]:
    """The model sets under ``root``: its folders holding a ``metadata.json``. A dot-folder is a set `perfpredict
    train` is still writing (or one a crash left), never a model set."""
    return sorted(p.parent for p in root.glob("*/metadata.json") if not p.parent.name.startswith("."))


def default_models_dir() -> Path:
    """``$PERFPREDICT_MODELS``, else ``./trained_models``, else the repository's ``trained_models/``."""
    env = os.environ.get("PERFPREDICT_MODELS")
    if env:
        return Path(env)
    here = Path("trained_models")
    if (here / "").is_dir() and model_set_dirs(here):
        return here
    return Path(__file__).resolve().parents[2] / "trained_models"


@dataclass
class _Target:
    name: str
    point: Any  # CompiledForest or xgboost.Booster (both ``inplace_predict``), or None: the physical baseline alone (memory)
    quantile: Any  # CompiledForest or xgboost.Booster, or None: constant residual quantiles
    coef_point: np.ndarray | None
    coef_quantile: np.ndarray | None
    transform: str
    scores: dict[str, float]
    residual_quantiles: np.ndarray | None = None
    #: the physical baseline's terms (``metadata.json``'s ``term_features``); memory's by default
    terms: tuple[tuple[str, ...], ...] | None = None
    #: the interval widening calibrated for unseen families at training: ``metadata.json``'s
    #: ``interval_log_margin`` (added on both sides in log space), or ``interval_scale`` for sets trained before
    interval_scale: float = 1.0
    #: GPU utilisation's physical prior (``with_utilization_prior``'s busy, idle and, since the launch term, time
    #: coefficients and the time terms; ``metadata.json``'s ``prior_coef``): its boosters take the feature
    #: vector with the prior columns appended
    prior: tuple | None = None
    interval_log_margin: float = 0.0
    #: the margin for inputs whose saved-tensor counts were estimated (ONNX files); None: the one above
    interval_log_margin_estimated_counts: float | None = None
    #: log margin added to the upper quantile per doubling of the batch size past the largest trained one
    #: (memory: it grows faster than linearly in the batch; ``metadata.json``'s
    #: ``upper_extrapolation_log_margin_per_doubling``, 0 for sets trained before it)
    upper_extrapolation_margin: float = 0.0

    @property
    def q90_growth_per_doubling(self) -> float:
        """The factor the upper quantile grows by per doubling past the trained batch sizes (1: none)."""
        return math.exp(self.upper_extrapolation_margin)

    def _base(self, X: np.ndarray, coef: np.ndarray, floor: float = 1.0,
              components: TermComponents | None = None) -> np.ndarray:
        """The physical baseline per row; ``components``: ``X``'s, where the caller has them."""
        C = components_of(X, components)(self.terms or LEGACY_MEMORY_TERMS)
        return np.maximum(rowwise_dot(C, coef), floor)

    def baseline_shares(self, X: np.ndarray,
                        components: TermComponents | None = None) -> list[dict[str, float]] | None:
        """Per row, each term's share of the physical baseline (median model, before its learned correction),
        keyed by :data:`BASELINE_TERM_LABELS`; None for a target without a baseline."""
        if self.coef_point is None or self.terms is None:
            return None
        parts = components_of(X, components)(self.terms) * self.coef_point
        labels = ["fixed per step", *(BASELINE_TERM_LABELS.get(tuple(t), "+".join(t)) for t in self.terms)]
        total = np.maximum(parts.sum(axis=1), 1e-300)
        return [{lab: float(v) for lab, v in zip(labels, row / tot) if v > 0} for row, tot in zip(parts, total)]

    def predict(self, X: np.ndarray, estimated_counts: bool = False, doublings_past: np.ndarray | None = None,
                components: TermComponents | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(median point prediction, quantiles n × 3) on the target's natural scale; ``estimated_counts``: the
        rows' saved-tensor counts were estimated from the graph, so the interval takes that margin;
        ``doublings_past``: per row, log2 of the batch size over the largest trained one, 0 inside the range
        (:meth:`ModelSet.doublings_past`), which widens the upper quantile by :attr:`upper_extrapolation_margin`
        per doubling. ``components``: ``X``'s :class:`~perfpredict.estimators.models.TermComponents`, where the
        caller has them (the baselines and the utilisation prior share them)."""
        components = components_of(X, components)
        Xb = X if self.prior is None else with_utilization_prior(X, *self.prior, components=components)
        z = (np.zeros(len(X)) if self.point is None
             else np.asarray(self.point.inplace_predict(Xb), float).reshape(len(X)))
        q = (np.tile(self.residual_quantiles, (len(X), 1)) if self.quantile is None
             else np.asarray(self.quantile.inplace_predict(Xb), float).reshape(len(X), -1))
        if self.coef_point is not None:  # a physical baseline (memory, time) × its log-correction
            floor = 1.0 if self.transform == "structured_memory" else 1e-6  # bytes / seconds, as in training
            y = self._base(X, self.coef_point, floor, components) * np.exp(z)
            yq = self._base(X, self.coef_quantile, floor, components)[:, None] * np.exp(q)
        elif self.transform == "log":
            y, yq = np.exp(z), np.exp(q)
        else:
            y, yq = np.clip(z, 0.005, 1.0), np.clip(q, 0.005, 1.0)
        yq = np.sort(yq, axis=1)  # quantile crossing: keep q10 <= q50 <= q90
        margin = self.interval_log_margin
        if estimated_counts and self.interval_log_margin_estimated_counts is not None:
            margin = self.interval_log_margin_estimated_counts
        if self.interval_scale != 1.0 or margin:
            yq = calibrated(yq, margin=margin, scale=self.interval_scale)
            if self.transform == "identity01":
                yq = np.clip(yq, 0.005, 1.0)
        if self.upper_extrapolation_margin and doublings_past is not None:
            yq[:, -1] *= np.exp(self.upper_extrapolation_margin * np.asarray(doublings_past, float))
        return y, yq


#: How a card names the time baseline's terms (:meth:`_Target.baseline_shares`).
BASELINE_TERM_LABELS: dict[tuple[str, ...], str] = {
    ("log_macs_per_iter",): "compute (MACs)",
    ("log_act_bytes_per_iter", "log_param_bytes"): "memory traffic (bytes)",
    ("log_act_bytes_per_iter", "log_dense_param_bytes"): "memory traffic (bytes)",
    ("log_kernel_calls",): "kernel launches",
    ("log_recurrent_steps",): "recurrent time steps",
    ("log_stepwise_rnn_gate_steps",): "recurrent time steps",
    ("log_kernel_ns_infer",): "kernels (CPU cost table)",
    ("log_kernel_ns_train",): "kernels (CPU cost table)",
}


def _prior_of(target_meta: Mapping[str, Any]) -> tuple | None:
    """The saved prior's coefficients (busy, idle, time or None, time terms or None), checked against the terms
    this perfpredict computes."""
    from perfpredict.estimators.models import BUSY_TERMS, IDLE_TERMS

    p = target_meta.get("prior_coef")
    if not p:
        return None
    if ([tuple(t) for t in p["busy_terms"]] != list(BUSY_TERMS)
            or [tuple(t) for t in p["idle_terms"][1:]] != list(IDLE_TERMS)):
        raise PerfPredictError("the saved utilisation model's prior uses other terms than this perfpredict "
                               "computes; retrain with `perfpredict train`", step="load models")
    if "time" not in p:
        return np.array(p["busy"], float), np.array(p["idle"], float), None, None
    terms = tuple(tuple(t) for t in p["time_terms"][1:])
    unknown = sorted({f for t in terms for f in t if f not in FEATURE_NAMES})
    if unknown:
        raise PerfPredictError(f"the saved utilisation model's time prior uses features this perfpredict does not "
                               f"compute ({', '.join(unknown)}); retrain with `perfpredict train`",
                               step="load models")
    return np.array(p["busy"], float), np.array(p["idle"], float), np.array(p["time"], float), terms


class ModelSet:
    """The estimators trained on one dataset (one device type), loaded from ``trained_models/<name>/``."""

    #: iteration times are the estimators' times this: 1 for a set measured on the device it predicts; a
    #: calibrated set (:class:`~perfpredict.estimators.device_calibration.CalibratedModelSet`) has its factor
    time_factor = 1.0

    @property
    def trained_device_name(self) -> str:
        """The device whose measurements trained the estimators."""
        return self.device_name

    def calibration_info(self) -> CalibrationInfo | None:
        """How the set was carried to another CPU: None, it was measured on its own."""
        return None

    def calibration_note(self) -> str | None:
        return None

    def __init__(self, path: Path, compile_trees: bool = True) -> None:
        self.path = path
        self.meta: dict[str, Any] = json.loads((path / "metadata.json").read_text())
        if self.meta.get("feature_names") != feature_names(self.meta.get("device_kind", "cpu")):
            raise PerfPredictError("the saved models were trained on a different feature list than this "
                                   "perfpredict computes; retrain with `perfpredict train`", source=str(path),
                                   step="load models")
        self.name: str = self.meta["dataset"]
        self.device_kind: str = self.meta["device_kind"]
        self.device_name: str = self.meta["device_name"]
        #: "train" (training steps) or "infer" (forward passes): what the training rows measured
        self.mode: str = self.meta.get("mode", "train")
        #: "fp32", or "bf16"/"fp16": the autocast precision the training rows ran at (sets from before it was
        #: recorded: fp32)
        self.precision: str = self.meta.get("precision", "fp32")
        #: the measuring machine's CPU beyond its model name (hostinfo.cpu_id); None for sets from before it
        #: was recorded
        self.cpu_id: str | None = self.meta.get("cpu_id")
        self.trained_batches: list[int] = self.meta["batch_sizes"]
        self.targets: dict[str, _Target] = {}
        for tname, t in self.meta["targets"].items():
            boosters = {}
            for role in ("point", "quantile"):
                if role in t["files"]:
                    file = path / t["files"][role]
                    # the same trees evaluated with numpy: ~4x faster for one row (estimators/forest.py)
                    boosters[role] = compile_model_file(file) if compile_trees else None
                    if boosters[role] is None:  # XGBoost is imported only when its predictor is used
                        import xgboost as xgb

                        boosters[role] = xgb.Booster()
                        boosters[role].load_model(file)
            coef = t.get("baseline_coef") or {}
            ev = t.get("evaluation") or {}
            scores = ev.get("family_cv", {}).get(t.get("point_kind", "xgboost"), {})
            rq = t.get("residual_quantiles")
            self.targets[tname] = _Target(tname, boosters.get("point"), boosters.get("quantile"),
                                          np.array(coef["point"]) if coef else None,
                                          np.array(coef["quantile"]) if coef else None, t["transform"],
                                          {k: v for k, v in scores.items() if k in ("mape", "rmsle", "median_ape")},
                                          np.array(rq) if rq is not None else None,
                                          tuple(tuple(t) for t in coef["term_features"])
                                          if coef.get("term_features") else None,
                                          float(t.get("interval_scale", 1.0)),
                                          _prior_of(t), float(t.get("interval_log_margin", 0.0)),
                                          None if t.get("interval_log_margin_estimated_counts") is None
                                          else float(t["interval_log_margin_estimated_counts"]),
                                          float(t.get("upper_extrapolation_log_margin_per_doubling", 0.0)))
        prof = json.loads((path / "profiled.json").read_text())["architectures"]
        self.profiled_names = list(prof)
        self.profiled = prof
        #: per profiled architecture, the largest batch size it was measured at (the sweep caps each point's
        #: work, so a large model's rows stop at a smaller batch than an MLP's)
        self.largest_measured_batch: dict[str, int] = {
            n: max((int(b) for b in prof[n].get("points") or ()), default=max(self.trained_batches))
            for n in self.profiled_names}
        archs = [ArchFeatures.from_dict(prof[n]["features"]) for n in self.profiled_names]
        #: the profiled architectures' features (without their kernel rows: profiled.json leaves them out)
        self.profiled_archs: dict[str, ArchFeatures] = dict(zip(self.profiled_names, archs, strict=True))
        # columns taken from the full matrix (a Fortran-ordered copy): numpy sums a C-ordered one's columns in
        # another order, and the last bits of every distance would move
        A = design_matrix([(a, 32) for a in archs])[:, _ARCH_COLUMNS]
        self._mu, self._sd = A.mean(axis=0), np.where(A.std(axis=0) > 1e-9, A.std(axis=0), 1.0)
        self._ref = (A - self._mu) / self._sd
        d = np.linalg.norm(self._ref[:, None, :] - self._ref[None, :, :], axis=2)
        np.fill_diagonal(d, np.inf)
        self.ood_threshold = float(d.min(axis=1).max())
        self._saved_models = {attr: SavedBytesEstimator(attr).fit(archs) for attr in ESTIMABLE_ATTRS}
        self.interference = None
        #: the interference model's error on a job left out of its fit (``interference.json``), if recorded
        self.interference_holdout: dict[str, Any] | None = None
        if (path / "interference.json").exists():
            from perfpredict.fit.interference import InterferenceModel

            doc = json.loads((path / "interference.json").read_text())
            self.interference = InterferenceModel.from_dict(doc)
            self.interference_holdout = doc.get("leave_one_job_out")
        #: the measuring device's memory (GPU memory on CUDA), from the dataset's provenance
        mem = ((self.meta.get("provenance") or {}).get("device_info") or {}).get("memory_bytes")
        self.device_memory_bytes: int | None = int(mem) if mem else None
        self._check_models_answer(archs[0] if archs else None)
        #: :meth:`neighbour`'s, per profiled architecture, filled as the fallback first answers from each
        self._neighbours: dict[str, _Neighbour] = {}
        self._neighbours_lock = threading.Lock()

    def _check_models_answer(self, arch: ArchFeatures | None) -> None:
        """Each target predicts for one profiled architecture: a booster or baseline of another set copied here
        (another feature count) loaded without a word, and then failed every prediction."""
        if arch is None:
            raise PerfPredictError("profiled.json lists no architecture", source=str(self.path), step="load models")
        X = design_matrix([(arch, 32)], device_kind=self.device_kind)
        for name, target in self.targets.items():
            try:
                target.predict(X)
            except Exception as e:  # noqa: BLE001 - a mismatched file fails in numpy, XGBoost or the forest
                raise PerfPredictError(f"the saved {name} model does not fit this set's features "
                                       f"({type(e).__name__}: {str(e)[:200]})",
                                       source=str(self.path), step="load models") from None

    def reach(self, arch: ArchFeatures) -> tuple[str, int]:
        """How far in batch size the training rows reach for models like ``arch``: its nearest profiled
        architecture (graph features, as the fallback measures them) and the largest batch size that one was
        measured at. A profiled architecture is its own nearest."""
        name, _ = self.nearest(arch)
        return name, self.largest_measured_batch[name]

    def doublings_past(self, batch_sizes: Sequence[int], reach: int) -> np.ndarray:
        """Per batch size, how many doublings it lies past ``reach`` (:meth:`reach`'s batch size), 0 at or below
        it."""
        return np.maximum(np.log2(np.asarray(batch_sizes, float) / reach), 0.0)

    def q90_growth_per_doubling(self) -> dict[str, float]:
        """The targets whose upper quantile grows past the trained batch sizes (memory), and by how much per
        doubling."""
        return {n: t.q90_growth_per_doubling for n, t in self.targets.items() if t.upper_extrapolation_margin}

    def _estimated_counts_margin_note(self) -> str:
        """How the intervals of a prediction with estimated saved-tensor counts differ, for
        :meth:`with_graph_counts`' note: the targets whose margin for estimated counts is wider than for exact
        ones (a training set's memory); nothing where none is (the shipped inference sets' margins are equal)."""
        wider = [n.replace("_", " ") for n, t in self.targets.items()
                 if t.interval_log_margin_estimated_counts is not None
                 and t.interval_log_margin_estimated_counts > t.interval_log_margin]
        if not wider:
            return ""
        return f", so the {', '.join(wider)} intervals are the wider ones calibrated for estimated counts"

    def with_graph_counts(self, arch: ArchFeatures) -> ArchFeatures:
        """``arch`` with saved-tensor bytes (both counts, :data:`~perfpredict.estimators.saved_estimate.
        SAVED_ATTRS`): its own count when it has one, else an estimate fitted on the training architectures
        (:class:`~perfpredict.estimators.saved_estimate.SavedBytesEstimator`: the graph's rule-based count
        scaled, or activation bytes by op group where that count is missing). A feature vector without the
        peak of live activations gets it estimated from its activation bytes by op group (an ONNX file or a
        model file gives it exactly)."""
        from dataclasses import replace

        notes = list(arch.notes)
        est: dict[str, float] = {}
        missing = {attr: kernels for attr, kernels in SAVED_ATTRS.items() if getattr(arch, attr) is None}
        if missing:
            est = {attr: max(float(self._saved_models[attr].predict([arch])[0]), 0.0) for attr in missing}
            notes.append("saved-tensor bytes estimated from the graph's activation bytes ("
                         + ", ".join(f"{est[a] / 1e6:.2f} MB/sample as {k} kernels keep them"
                                     for a, k in missing.items())
                         + "): only a model file or a measured training card gives the exact count"
                         + self._estimated_counts_margin_note())
        if arch.peak_live_bytes_per_sample is None:
            live = max(float(self._saved_models["peak_live_bytes_per_sample"].predict([arch])[0]), 0.0)
            est["peak_live_bytes_per_sample"] = live
            notes.append(f"peak live activation bytes estimated from the activation bytes by op group "
                         f"({live / 1e6:.2f} MB/sample), a rough estimate (median error 50% on families it was "
                         "not fitted on) whose error the memory intervals do not cover: send "
                         "peak_live_bytes_per_sample (an ONNX file gives it exactly)")
        if not est:
            return arch
        return replace(arch, **est, notes=tuple(notes))

    def standardized(self, archs: Sequence[ArchFeatures]) -> np.ndarray:
        """Architectures as points of the space :meth:`nearest` measures distances in: their graph features at
        batch 32, standardized by the profiled architectures' mean and spread."""
        return (design_matrix([(a, 32) for a in archs], columns=_ARCH_FEATURES) - self._mu) / self._sd

    def nearest(self, arch: ArchFeatures) -> tuple[str, float]:
        return self.nearest_each([arch])[0]

    def neighbour(self, name: str) -> _Neighbour:
        """What the nearest-profiled fallback (:func:`_fallback`) carries from profiled architecture ``name``. It
        depends on the set alone (its targets and profiled.json), so it is built the first time a job falls back to
        ``name`` and shared by every job after: before, each fallback card built the neighbour's design rows and
        baselines again. Built under a lock (the HTTP service predicts from a threadpool); read-only. A calibrated
        set reaches its source's (the same baselines; its time factor applies after)."""
        got = self._neighbours.get(name)
        if got is None:
            with self._neighbours_lock:
                got = self._neighbours.get(name)
                if got is None:
                    got = self._neighbours[name] = _neighbour_of(self, name)
        return got

    def nearest_each(self, archs: Sequence[ArchFeatures]) -> list[tuple[str, float]]:
        """Per architecture, the nearest profiled one and its distance (one design matrix for them all)."""
        out = []
        for a in self.standardized(archs):
            d = np.linalg.norm(self._ref - a, axis=1)
            i = int(np.argmin(d))
            out.append((self.profiled_names[i], float(d[i])))
        return out


def _measured_on_this_cpu(ms: ModelSet) -> bool:
    """Whether a CPU set was measured on this machine's CPU, as far as its record says: the same model name, and
    the same :func:`~perfpredict.hostinfo.cpu_id` where both are known."""
    here = cpu_id()
    return ms.device_name == cpu_model_name() and (ms.cpu_id is None or here is None or ms.cpu_id == here)


def _local_cpu_first(sets: list[ModelSet]) -> list[ModelSet]:
    """CPU sets in the order to use them on this machine: measured on this CPU (name and cpu_id), then the
    calibrations to this CPU (``perfpredict calibrate``), the most recent first, then the same name with no cpu_id
    recorded (it may be this CPU), then the other measured sets as given, and last the calibrations for other
    CPUs."""
    here, name = cpu_id(), cpu_model_name()
    mine = [s for s in sets if s.device_name == name and s.cpu_id is not None and s.cpu_id == here]
    same = [s for s in mine if not is_calibrated(s)]
    # the most recent calibration first: a calibration is a reading of the machine's speed when it ran; by the
    # time it was made (_made_at: dates with other UTC offsets or fractional seconds do not sort as text), an
    # unreadable date last
    calibrated = sorted((s for s in mine if is_calibrated(s)),
                        key=lambda s: -t if (t := _made_at(s)) is not None else math.inf)
    unknown = [s for s in sets if s.device_name == name and s.cpu_id is None and not is_calibrated(s)]
    first = same + calibrated + unknown
    rest = [s for s in sets if s not in first]
    return first + [s for s in rest if not is_calibrated(s)] + [s for s in rest if is_calibrated(s)]


def _made_at(ms) -> float | None:
    """When a calibration was made (seconds since the epoch), None for a measured set or an unreadable date."""
    import datetime as dt

    if not is_calibrated(ms):
        return None
    try:
        t = dt.datetime.fromisoformat(ms.calibration.created_at)
    except (TypeError, ValueError):
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def _twins_first(named: ModelSet, twins: list[ModelSet]) -> list[ModelSet]:
    """``named``'s twins (the sets of its device in another mode or precision) in the order to answer it: the
    sets measured there, by name; then the calibrations to it, first those whose source set was measured on the
    same CPU as ``named``'s source (a calibration of ``cpu_xeon_2vcpu`` asked for "infer" gives way to one of
    ``cpu_xeon_2vcpu_infer``, not of another CPU's set), and within each, the one made nearest in time to
    ``named`` (a calibration reads the machine's speed when it ran), for a measured ``named`` the newest;
    an unreadable date last, and ties by name."""
    source = named.source if is_calibrated(named) else named
    at = _made_at(named)

    def order(s) -> tuple:
        if not is_calibrated(s):
            return (0, 0, 0.0, s.name)
        same_source = (s.source.device_name, s.source.cpu_id) == (source.device_name, source.cpu_id)
        t = _made_at(s)
        apart = math.inf if t is None else abs(t - at) if at is not None else -t
        return (1, 0 if same_source else 1, apart, s.name)

    return sorted(twins, key=order)


def _local_gpu_first(sets: list[ModelSet]) -> list[ModelSet]:
    """CUDA sets in the order to use them on this machine: those measured on a GPU model this machine has (by
    NVML's name, e.g. ``NVIDIA H200``), then the others as given (by set name). On the zoo's 315 common training
    steps the H200 took a median 0.82x the H100's time and showed 1.11x its utilisation
    (``benchmarks/noise_floor.py``), so a GPU's own set is the better answer where one exists."""
    here = set(gpu_names())
    return [s for s in sets if s.device_name in here] + [s for s in sets if s.device_name not in here]


def is_calibrated(ms) -> bool:
    from perfpredict.estimators.device_calibration import CalibratedModelSet

    return isinstance(ms, CalibratedModelSet)


def _estimated_counts(arch: ArchFeatures) -> frozenset[str]:
    """The saved-tensor counts (:data:`SAVED_ATTRS`) the Predictor will estimate for ``arch``: an ONNX file's, a
    bare feature vector's, a card's without them; none for a model file's or a measured training card's."""
    return frozenset(attr for attr in SAVED_ATTRS if getattr(arch, attr) is None)


def _load_sets(path: str | Path | None,
               compile_trees: bool) -> tuple[dict[str, ModelSet], list[str], dict[str, str]]:
    """The model sets under ``path`` with its calibrated sets, one line per calibration that could not be used,
    and why each set that could not be loaded was left out (:meth:`Predictor.load`). A damaged set (an edited
    metadata.json, a missing booster) is left out rather than stopping every prediction from the others."""
    root = Path(path) if path else default_models_dir()
    dirs = model_set_dirs(root)
    if not dirs:
        raise PerfPredictError("no trained models here (run `perfpredict train`)", source=str(root),
                               step="load models")
    sets: dict[str, ModelSet] = {}
    broken: dict[str, str] = {}
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        # a set's files without its metadata.json: named, not skipped as if no set were there
        if d.is_dir() and not d.name.startswith(".") and d not in dirs and \
                ((d / "profiled.json").exists() or any(d.glob("*.xgb.json"))):
            broken[d.name] = f"{d}: no metadata.json beside its model files"
    for d in dirs:
        try:
            sets[d.name] = ModelSet(d, compile_trees)
            # a set is named by its folder (what `perfpredict models`, GET /models and device_type use); its
            # metadata's dataset name differs in a copied folder (cuda_h100_old/), and the cards and
            # largest_batch's own look-ups by name then reached the other folder's set
            sets[d.name].name = d.name
        except Exception as e:  # noqa: BLE001 - any damage to one set's files; the others still answer
            # the first line: XGBoost's errors carry its native stack trace (30 lines) below it
            broken[d.name] = f"{d}: {e.message}" if isinstance(e, PerfPredictError) \
                else f"{d}: {type(e).__name__}: {first_line(e)}"
    if not sets:
        raise PerfPredictError("no model set here could be loaded (retrain with `perfpredict train`): "
                               + "; ".join(broken.values()), source=str(root), step="load models")
    from perfpredict.estimators.device_calibration import load_calibrations

    calibrated, unusable = load_calibrations(root, sets)
    return {**sets, **calibrated}, unusable, broken


@dataclass(frozen=True)
class CardRequest:
    """One job of :meth:`Predictor.cards_for`: its graph features (an :class:`ArchFeatures`, a feature mapping or
    a card, as :meth:`Predictor.predict`'s ``features``), its batch sizes and the options ``predict`` takes for
    them; ``source`` names it on its card (default: its name, else "features")."""

    features: ArchFeatures | Mapping[str, Any] | PerformanceCard
    batch_sizes: Sequence[int] = (32,)
    device_type: str | None = None
    mode: str | None = None
    precision: str | None = None
    optimizer_state_copies: float | None = None
    allow_fallback: bool = True
    source: str | None = None

    @classmethod
    def of(cls, job: CardRequest | Mapping[str, Any]) -> CardRequest:
        """``job`` as a request: a mapping's keys are the fields (an unknown one is a :class:`UsageError`)."""
        if isinstance(job, CardRequest):
            return job
        if not isinstance(job, Mapping):
            raise UsageError(f"a job must be a CardRequest or a mapping of its fields, got {type(job).__name__}",
                             step="predict")
        fields = cls.__dataclass_fields__
        unknown = sorted(str(k) for k in job if k not in fields)
        if unknown or "features" not in job:
            why = f"unknown key(s) {', '.join(unknown)[:200]}" if unknown else "no features"
            raise UsageError(f"{why}; a job's keys are {', '.join(fields)}", step="predict")
        return cls(**job)


@dataclass(frozen=True)
class CardError:
    """The place of a job :meth:`Predictor.cards_for` could not predict: its index in the jobs, and the error
    :meth:`Predictor.predict` would have raised for it."""

    index: int
    error: PerfPredictError

    @property
    def message(self) -> str:
        return f"job {self.index}: {self.error}"

    def __str__(self) -> str:
        return self.message


class Predictor:
    """Loads every model set under a ``trained_models/`` folder; predicts cards for unprofiled jobs."""

    def __init__(self, sets: Mapping[str, ModelSet] | None = None,
                 unusable_calibrations: list[str] | None = None,
                 unusable_sets: Mapping[str, str] | None = None) -> None:
        """``Predictor()`` loads the default models folder, as :meth:`load` does; ``sets`` gives the model sets
        by name instead (``unusable_calibrations``: the lines :meth:`load` reports for calibrations it skipped;
        ``unusable_sets``: why each set it could not load was left out)."""
        if sets is None:
            sets, unusable_calibrations, unusable_sets = _load_sets(None, compile_trees=True)
        if not sets:
            raise PerfPredictError("no trained models found (run `perfpredict train`)", step="load models")
        self.sets = dict(sets)
        #: calibrations under the models folder that could not be used, one line each (:meth:`load`)
        self.unusable_calibrations: list[str] = list(unusable_calibrations or [])
        #: model sets under the models folder that could not be loaded: name -> why (:meth:`load`)
        self.unusable_sets: dict[str, str] = dict(unusable_sets or {})

    @classmethod
    def load(cls, path: str | Path | None = None, compile_trees: bool = True) -> Predictor:
        """The model sets under ``path`` (default: :func:`default_models_dir`), and the calibrations there of its
        CPU sets to other CPUs (``<name>/calibration.json``, written by ``perfpredict calibrate``), each one more
        set. ``compile_trees=False`` keeps XGBoost's own predictor instead of the numpy one (same leaves; for
        comparison and debugging)."""
        return cls(*_load_sets(path, compile_trees))

    # -- choosing the model set ------------------------------------------------------------------------
    @property
    def device_types(self) -> list[str]:
        return list(self.sets)

    def model_set(self, device_type: str | None = None, mode: str | None = None,
                  precision: str | None = None) -> ModelSet:
        """``device_type`` is a model-set name (``cuda_h100``) or a kind (``cuda``/``cpu``); None = a CUDA set.
        ``mode`` ("train" or "infer"; None = train) picks among a kind's sets; a named set of the other mode
        gives way to the set measured on the same device in ``mode`` (``cpu_xeon_2vcpu`` with "infer" is
        ``cpu_xeon_2vcpu_infer``), and without one is an error. A calibration's twin may be a calibration to the
        same CPU: which one is :func:`_twins_first`'s order.

        A kind with several sets (two CPU models) picks the one measured on this machine's CPU model when
        there is one, else the first by name: a CPU time model does not carry over between CPU models (on the
        Intel Xeon VM the zoo's training steps take a median 0.62x and its forward passes 0.38x the time they
        take on the AMD EPYC one, ``benchmarks/noise_floor.py``). Among sets of the same model name, the one
        whose recorded CPU (``cpu_id``: family, model, vector ISA) is this machine's comes first, then one that
        recorded none: two VMs both named "AMD EPYC" differed by a median 0.75x. Name the set to predict for
        another machine. Likewise for ``cuda``: a set measured on a GPU model this machine has (NVML's name)
        comes first, else the first by name (``cuda_h100`` before ``cuda_h200``).

        ``precision`` ("fp32", "bf16", "fp16"; None = fp32, or a named set's own) picks the same way: sets
        trained on steps run at that autocast precision."""
        if device_type is not None and not isinstance(device_type, str):
            raise UsageError(f"device_type must be a model set's name or 'cuda'/'cpu', got {device_type!r}"[:200],
                             step="predict")
        if isinstance(mode, str) and mode.lower() in ("train", "infer"):
            mode = mode.lower()  # as precision and device_type are taken in any case (and the service's mode)
        if mode not in (None, "train", "infer"):
            raise UsageError(f"mode must be 'train' or 'infer', got {mode!r}"[:200], step="predict")
        if precision is not None:
            from perfpredict.workload.ref import check_precision

            precision = check_precision(precision)
        if isinstance(device_type, str) and re.fullmatch(r"(?i)cuda:\d+", device_type.strip()):
            device_type = "cuda"  # torch's spelling of a device: its kind picks the set
        if isinstance(device_type, str) and device_type not in self.sets and device_type.lower() in (
                {"cuda", "cpu"} | set(self.sets) | set(self.unusable_sets)):
            device_type = device_type.lower()  # CUDA, Cuda_H100: names are lower case
        if device_type in self.unusable_sets:
            raise UsageError(f"model set {device_type!r} could not be loaded ({self.unusable_sets[device_type]}); "
                             f"retrain it with `perfpredict train --only {device_type}`", step="predict")
        if device_type in self.sets:
            ms = self.sets[device_type]
            if (mode is None or ms.mode == mode) and (precision is None or ms.precision == precision):
                return ms
            mode, precision = mode or ms.mode, precision or ms.precision
            twin = [s for s in self.sets.values()
                    if s.device_kind == ms.device_kind and s.device_name == ms.device_name and s.cpu_id == ms.cpu_id
                    and s.mode == mode and s.precision == precision]
            if twin:
                return _twins_first(ms, twin)[0]
            raise UsageError(f"model set {device_type!r} was trained on {ms.precision} {ms.mode} measurements, "
                             f"and no {precision} {mode}-mode set was measured on its device ({ms.device_name})",
                             step="predict")
        kind, want, prec = device_type or "cuda", mode or "train", precision or "fp32"
        matches = [s for s in self.sets.values() if s.device_kind == kind and s.mode == want and s.precision == prec]
        if kind == "cpu" and len(matches) > 1:
            matches = _local_cpu_first(matches)
        elif kind == "cuda" and len(matches) > 1:
            matches = _local_gpu_first(matches)
        if matches:
            return matches[0]
        asked = repr(device_type) if device_type else f"'{kind}' (the default when none is named)"
        hint = ("; measure a set with `python profilers/collect_dataset.py measure --device cuda --mode infer` on a "
                "GPU and train it" if kind == "cuda" and want == "infer" else "")
        if not device_type and any(s.device_kind == "cpu" and s.mode == want and s.precision == prec
                                   for s in self.sets.values()):
            hint += "; for a CPU prediction name it: device_type='cpu' (--device-type cpu)"
        if device_type and kind not in ("cuda", "cpu"):
            typed = kind.lower().strip()
            near = [n for n, s in self.sets.items() if s.mode == want and s.precision == prec and typed
                    and (typed in n or typed == (s.device_name or "").lower() or typed in (s.device_name or "").lower())]
            if near:
                hint += "; did you mean " + " or ".join(repr(n) for n in near) + " (model sets are named by their "\
                        "folder in trained_models/, as `perfpredict models` lists them)"
        broken = ("; could not be loaded: " + "; ".join(self.unusable_sets.values())) if self.unusable_sets else ""
        raise UsageError(f"no trained models for device type {asked} in {want} mode at {prec}; available: "
                         + ", ".join(f"{n} ({s.mode}, {s.precision})" for n, s in self.sets.items()) + hint
                         + broken, step="predict")

    # -- predictions --------------------------------------------------------------------------------------
    def predict_values(self, features: ArchFeatures | Mapping[str, Any], batch_sizes: Sequence[int],
                       device_type: str | None = None, mode: str | None = None,
                       precision: str | None = None, allow_fallback: bool = True,
                       optimizer_state_copies: float | None = None) -> dict[str, Any]:
        """The predictions as plain numbers (the fast path: no card), with ``method`` as a card's
        ``prediction.method`` says it: the estimators', or out of distribution (and ``allow_fallback``) the
        nearest profiled model's (:func:`_fallback`); ``optimizer_state_copies`` as for :meth:`predict`."""
        copies = check_optimizer_state_copies(optimizer_state_copies)
        arch = with_optimizer_state_copies(_as_arch(features), copies)
        bs = _check_batches(batch_sizes)
        ms, _ = self._set_for(arch, device_type, mode, precision)
        estimated = _estimated_counts(arch)
        arch = ms.with_graph_counts(arch)
        e = _estimate(ms, arch, bs, estimated, allow_fallback)
        out: dict[str, Any] = {"batch_sizes": bs, "model_set": ms.name, "mode": ms.mode, "precision": ms.precision,
                               "method": e.method, "nearest_profiled": e.near, "largest_measured_batch": e.reach}
        for name, (y, q) in e.preds.items():
            out[name] = {"median": y.tolist(), "q10": q[:, 0].tolist(), "q90": q[:, -1].tolist()}
        return out

    def predict(self, model: str | None = None, *, onnx_path: str | Path | None = None,
                features: ArchFeatures | Mapping[str, Any] | PerformanceCard | None = None,
                batch_size: int | None = None,
                batch_sizes: Sequence[int] | None = None, device_type: str | None = None,
                params: Mapping[str, Any] | None = None, allow_fallback: bool = True, mode: str | None = None,
                batch_axis: int | None = None, precision: str | None = None, dims: Mapping[str, int] | None = None,
                frozen: Sequence[str] | None = None, optimizer_state_copies: float | None = None,
                batch_input: str | None = None, optimizer: str | None = None, trained: Sequence[str] | None = None):
        """A :class:`~perfpredict.card.PerformanceCard` predicted for a model file / ``zoo:`` target, an ONNX file, or
        ready graph features (exactly one of them); ``mode`` "train" (default) or "infer" picks the model set trained
        on training steps or on inference passes; ``batch_axis`` (ONNX files only) says which axis of the graph's
        first input is the batch where the graph cannot (see :func:`~perfpredict.estimators.arch.from_onnx_proto`),
        and ``batch_input`` (ONNX files only) names the input that carries the batch when it is not the first
        (``batch_axis`` is then an axis of it); ``precision`` ("fp32", "bf16", "fp16") picks the set trained at that
        autocast precision. Left out, it is a model file's ``PRECISION`` where a set was trained at it (else fp32,
        with a note), and fp32 for everything else. ``dims`` (ONNX files only) sizes the graph inputs' symbolic
        dimensions other than the batch (``{"seq": 128}``). ``frozen`` (ONNX files only) names the weights a training
        job freezes (``requires_grad=False``) by initializer name prefix (``["backbone."]``): they get no gradient nor
        optimizer state, as a model file's frozen parameters; a model file says which are frozen itself, and a feature
        vector by its ``frozen_param_bytes``. ``trained`` (ONNX files only), instead of ``frozen``: the prefixes of
        the weights that train (``["blocks.0.q.lora_"]``), every other floating-point initializer frozen, for a
        LoRA's, an adapter's or BitFit's few trained weights. ``optimizer_state_copies``: the copies of each trained
        weight the job's optimizer keeps as state (SGD with momentum 1, plain SGD 0, Adam/AdamW 2); left out, a model
        file's optimizer is probed for them, a predicted card repeats its own, and anything else is charged 1, as the
        training data's optimizer (SGD with momentum) keeps; given, it replaces them. Training memory is charged the
        copies past 1 times the trained parameter bytes on top of its baselines. ``optimizer`` (an ONNX file or a
        model file): the job's optimizer by the name of one of torch.optim's own classes, ``NAME[:KEY=VALUE,...]``
        (``"adamw"``, ``"sgd-momentum"``, ``"adam:amsgrad=true,foreach=true"``;
        :func:`~perfpredict.workload.spec.parse_optimizer`), probed for its state copies and the temporaries its step
        holds over "meta" tensors shaped like the trained weights (an ONNX file's float initializers less the frozen
        ones); for a model file it replaces ``make_optimizer``. Not with ``optimizer_state_copies``."""
        # The batch sizes are checked first: a model file is run and exported before its features exist.
        if batch_size is not None and batch_sizes is not None:
            raise UsageError("give batch_size or batch_sizes, not both", step="predict")
        bs = _check_batches(batch_sizes if batch_sizes is not None else [32 if batch_size is None else batch_size])
        # and that a model set answers (the same condition _set_for ends on), before the model file is run
        self.model_set(device_type, mode, precision)
        arch, source = _arch_of(model, onnx_path, features, params, batch_axis, dims, frozen, batch_input, optimizer,
                                trained, optimizer_state_copies)
        return self.card_for(arch, bs, device_type=device_type, source=source, allow_fallback=allow_fallback,
                             mode=mode, precision=precision)

    def largest_batch(self, model: str | None = None, *, memory_limit_bytes: int,
                      onnx_path: str | Path | None = None,
                      features: ArchFeatures | Mapping[str, Any] | PerformanceCard | None = None,
                      device_type: str | None = None, mode: str | None = None, precision: str | None = None,
                      params: Mapping[str, Any] | None = None, batch_axis: int | None = None,
                      quantile: str = "q90", multiple_of: int = 1, max_batch: int | None = None,
                      dims: Mapping[str, int] | None = None, frozen: Sequence[str] | None = None,
                      optimizer_state_copies: float | None = None, batch_input: str | None = None,
                      optimizer: str | None = None, trained: Sequence[str] | None = None):
        """The largest batch size predicted to fit ``memory_limit_bytes`` (a
        :class:`~perfpredict.profile.batch_search.BatchLimit` with ``source="predicted"``): on a CUDA set the q90
        of the GPU memory NVML will see (context included), on a CPU set the q90 of the step's peak RSS
        increase; ``quantile="median"`` holds the median instead. Nothing is run but the export of a model file.
        :func:`~perfpredict.profile.batch_search.find_largest_batch` measures the same on a device.
        ``optimizer_state_copies``, ``optimizer``, ``batch_axis``, ``batch_input``, ``frozen`` and ``trained`` as
        for :meth:`predict`."""
        from perfpredict.predicted_batch_limit import check_limit_args, predicted_largest_batch

        check_limit_args(memory_limit_bytes, quantile, multiple_of, max_batch)  # before a model file is run,
        self.model_set(device_type, mode, precision)  # and that a model set answers
        arch, _ = _arch_of(model, onnx_path, features, params, batch_axis, dims, frozen, batch_input, optimizer,
                           trained, optimizer_state_copies)
        return predicted_largest_batch(self, arch, memory_limit_bytes, device_type=device_type, mode=mode,
                                       precision=precision, quantile=quantile, multiple_of=multiple_of,
                                       max_batch=max_batch)

    def _set_for(self, arch: ArchFeatures, device_type: str | None, mode: str | None,
                 precision: str | None) -> tuple[ModelSet, str | None]:
        """The model set for a prediction, and a note when a model file's own ``PRECISION`` (or a card's) had no
        set of its precision here (an explicit ``precision`` without one is an error instead)."""
        asked = arch.precision if precision is None and arch.precision not in (None, "fp32") else None
        if asked is None:
            return self.model_set(device_type, mode, precision), None
        try:
            return self.model_set(device_type, mode, asked), None
        except UsageError:
            ms = self.model_set(device_type, mode, None)
            return ms, (f"{arch.precision_source} asks for {asked} mixed precision, but no {asked} set was trained "
                        f"for this device; these predict a {ms.precision} step with {ms.name} (profile it with "
                        f"--precision {asked} to measure)")

    def colocation(self, job_a, job_b, *, batch_sizes: tuple[int | None, int | None] = (None, None),
                   device_type: str | None = None):
        """Two jobs sharing one GPU, from their CUDA cards (predicted or measured): the slowdown each sees, the
        pair's aggregate throughput and whether they fit the device's memory
        (:class:`perfpredict.pair_prediction.PairPrediction`). ``batch_sizes`` picks each card's point
        (default: its first); ``device_type`` the model set whose interference model answers (default: a CUDA
        set). Nothing is run."""
        from perfpredict.card import PerformanceCard
        from perfpredict.pair_prediction import job_on_device, predict_pair

        for x in (job_a, job_b):
            if not isinstance(x, PerformanceCard):
                raise UsageError(f"colocation takes two PerformanceCards (PerformanceCard.load(path) reads one), got "
                                 f"{type(x).__name__}", step="colocation")
        if not (isinstance(batch_sizes, (tuple, list)) and len(batch_sizes) == 2):
            raise UsageError(f"batch_sizes is one batch size (or None) per job, got {batch_sizes!r}", step="colocation")
        if device_type is None:  # the cards' own set when it has an interference model (else a CUDA set's, noted)
            own = self.cards_set(job_a, job_b)
            device_type = own if own is not None and self.sets[own].interference is not None else "cuda"
        ms = self.model_set(device_type)
        return predict_pair(ms, job_on_device(job_a, batch_sizes[0]), job_on_device(job_b, batch_sizes[1]))

    def cards_set(self, *cards) -> str | None:
        """The CUDA model set the predicted CUDA cards among ``cards`` were predicted with, None without one; two
        sets of different GPUs are an error (a pair shares one GPU)."""
        names = sorted({c.prediction.model_set for c in cards
                        if c.prediction is not None and c.device.kind == "cuda" and c.prediction.model_set in self.sets})
        gpus = {self.sets[n].device_name for n in names}
        if len(gpus) > 1:
            raise UsageError(f"the cards were predicted for different GPUs ({', '.join(names)}); a pair shares one "
                             "GPU: predict both jobs for the same one", step="colocation")
        return names[0] if names else None

    def card_for(self, arch: ArchFeatures, batch_sizes: Sequence[int], *, device_type: str | None = None,
                 source: str = "features", allow_fallback: bool = True, mode: str | None = None,
                 precision: str | None = None):
        job = self._job(arch, batch_sizes, device_type, mode, precision, allow_fallback)
        return self._card(job, _estimates(job.ms, [job])[0], device_type, source)

    def cards_for(self, jobs: Sequence[CardRequest | Mapping[str, Any]]) -> list[PerformanceCard | CardError]:
        """One predicted card per job of ``jobs``, in order, each the card :meth:`predict` gives for its features
        (a :class:`CardRequest`, or a mapping of its fields), the same to the last bit: a scheduler asking for a
        round's queued jobs at once. The jobs of each model set share one design matrix, so each estimator
        runs once for all of them, not once per job. A job that cannot be predicted (a bad feature vector,
        batch size or option) does not stop the others: its place holds a :class:`CardError` naming its index
        and why (``str(r)``; ``r.error`` is the exception ``predict`` raises for it), so check each result with
        ``isinstance(r, CardError)``. Only ``jobs`` that is not a list at all raises."""
        if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
            raise UsageError(f"jobs must be a list of CardRequests (or mappings of their fields), got "
                             f"{type(jobs).__name__}", step="predict")
        out: list[PerformanceCard | CardError | None] = [None] * len(jobs)
        ready: dict[int, tuple[CardRequest, _Job]] = {}
        for i, given in enumerate(jobs):
            try:
                req = CardRequest.of(given)
                if req.source is not None and not isinstance(req.source, str):  # the card's pydantic error, raw
                    raise UsageError(f"a job's source names it on its card: text, got {type(req.source).__name__}",
                                     step="predict")
                arch = with_optimizer_state_copies(_as_arch(req.features),
                                                   check_optimizer_state_copies(req.optimizer_state_copies))
                ready[i] = req, self._job(arch, req.batch_sizes, req.device_type, req.mode, req.precision,
                                          req.allow_fallback)
            except PerfPredictError as e:
                out[i] = CardError(i, e)
        by_set: dict[int, list[int]] = {}
        for i, (_, job) in ready.items():
            by_set.setdefault(id(job.ms), []).append(i)
        for idx in by_set.values():
            estimates = _estimates(ready[idx[0]][1].ms, [ready[i][1] for i in idx])
            for i, e in zip(idx, estimates, strict=True):
                req, job = ready[i]
                try:
                    out[i] = self._card(job, e, req.device_type, req.source or job.given.name or "features")
                except PerfPredictError as err:
                    out[i] = CardError(i, err)
        return out  # type: ignore[return-value]  # every place is filled

    def _job(self, arch: ArchFeatures, batch_sizes: Sequence[int], device_type: str | None, mode: str | None,
             precision: str | None, allow_fallback: bool) -> _Job:
        """What a card is predicted from, checked: its batch sizes, model set and graph counts."""
        # a card has one point per batch size, in order, as a measured card does ([8, 8] would be two rows)
        batch_sizes = sorted(set(_check_batches(batch_sizes)))
        ms, precision_note = self._set_for(arch, device_type, mode, precision)
        counted = ms.with_graph_counts(arch)
        _check_computes(counted)
        return _Job(ms, arch, counted, batch_sizes, _estimated_counts(arch), allow_fallback, precision_note)

    def _card(self, job: _Job, e: _Estimate, device_type: str | None, source: str):
        """The card for ``job`` from its estimate ``e``: the predictions, and the notes on what they rest on."""
        from perfpredict.card import NearestProfiled, PredictedPoint, PredictionInfo

        ms, precision_note, given, arch = job.ms, job.precision_note, job.given, job.arch
        batch_sizes, estimated = job.batch_sizes, job.estimated
        near_name, dist, reach, preds, method = e.near, e.dist, e.reach, e.preds, e.method
        ood = dist > ms.ood_threshold
        nearest = NearestProfiled(name=near_name, family=ms.profiled[near_name]["family"], distance=dist,
                                  threshold=ms.ood_threshold)
        notes = [n for n in arch.notes if not (ms.mode == "infer" and n == TRAIN_STEP_NOTE)]  # no step to model
        notes += [precision_note] if precision_note else []
        if ms.device_kind == "cpu" and device_type in (None, "cpu") and not _measured_on_this_cpu(ms):
            here = cpu_id()
            notes.append(f"no {ms.precision} {ms.mode}-mode set was measured on this machine's CPU "
                         f"({cpu_model_name()}{'; ' + here if here else ''}): these predict {ms.device_name}"
                         f"{' (' + ms.cpu_id + ')' if ms.cpu_id else ''}, and a CPU time model does not carry over "
                         "between CPUs: `perfpredict calibrate` carries a set to this CPU in about a minute, "
                         "or collect one with profilers/collect_dataset.py")
        gpus_here = gpu_names() if ms.device_kind == "cuda" and device_type in (None, "cuda") else ()
        if gpus_here and ms.device_name not in gpus_here:
            notes.append(f"no {ms.precision} {ms.mode}-mode set was measured on this machine's GPU "
                         f"({', '.join(sorted(set(gpus_here)))}): these predict {ms.device_name}, and a time "
                         "model does not carry over between GPU models; collect one with "
                         "`python profilers/collect_dataset.py measure --device cuda` and `perfpredict train` it")
        calibration_note = ms.calibration_note()
        if calibration_note:
            notes.append(calibration_note)
        targets_meta = ms.meta.get("targets") or {}
        if targets_meta and not any("evaluation" in t for t in targets_meta.values()):
            notes.append("this model set was trained without cross-validation (perfpredict train --no-eval): its "
                         "intervals are the quantile models' own, not widened for unseen families, so they are "
                         "too narrow for a new architecture; retrain without --no-eval for calibrated intervals")
        if method == "nearest_profiled":
            notes.append(f"the graph features are farther from every training architecture ({dist:.2f}) than "
                         f"any training architecture is from its nearest neighbour ({ms.ood_threshold:.2f}): "
                         f"iteration time and memory are this model's physical baseline (its own parameters, "
                         f"activations, MACs) times what the most similar profiled model, {near_name}, measured "
                         "over its baseline, interpolated between the batch sizes it was measured at"
                         + (", GPU utilisation that model's" if "gpu_utilization" in ms.targets else "")
                         + "; the interval is the estimators' (read it as a lower bound on the uncertainty)")
        elif ood:
            notes.append(f"out of the training distribution (distance {dist:.2f} > {ms.ood_threshold:.2f}); "
                         "the estimators are extrapolating")
        # what the time and memory charge the frozen and unused weights, checkpointing and the optimizer
        notes.extend(n for n in (_unused_memory_note(arch, ms), _frozen_memory_note(arch, ms),
                                 _frozen_time_note(arch, ms), _recompute_time_note(arch, ms),
                                 _recompute_memory_note(arch, ms, estimated), _optimizer_memory_note(arch, ms)) if n)
        if ms.device_kind == "cpu" and not arch.op_counts:
            notes.append("no op types given (op_counts): the CPU memory baseline's code-page term counts only an "
                         "empty model's library code (about 5 MiB, against 13-30 MiB for the zoo's families), so "
                         "peak memory is under-predicted; send op_counts (an ONNX file gives them)")
        if needs_bare_kernels(arch) and (ms.device_kind == "cpu" or not (arch.op_counts or arch.kernel_nodes)):
            # measured by benchmarks/bare_feature_vectors.py on the sets' own training architectures
            what = ("the CPU time baseline prices stand-in kernels, one dense matrix product per node sharing the "
                    "forward MACs: on the training architectures such a vector's times came out 0.85-0.99x the "
                    "measured at the median, with 51-64% MAPE" if ms.device_kind == "cpu" else
                    "the GPU time baseline has the MACs but no kernel launches: on the training architectures "
                    "such a vector's times came out a median 0.25-0.45x the measured (51-70% MAPE), and 1.2x "
                    "(38% MAPE) with op_counts")
            notes.append(f"no kernel carrying the MACs given (kernel_nodes), nor op types with their MACs "
                         f"(op_counts, macs_by_op): {what}; send kernel_nodes (an ONNX file or a model file gives "
                         "them)")
        elif not arch.kernel_nodes:
            what = ("the CPU time baseline prices stand-in kernels made from the per-op-type totals (every "
                    "convolution taken as dense, views not told from copies)" if ms.device_kind == "cpu" else
                    "the GPU time baseline's launch count comes from the per-op-type totals, which count shape "
                    "arithmetic as kernels (up to 7x too many for a recurrent graph)")
            notes.append(f"no kernels given (kernel_nodes): {what}, so iteration time is rougher; send kernel_nodes "
                         "(an ONNX file or a model file gives them, unless its graph changes with the batch)")
        points = []
        shares = ms.targets["iter_time"].baseline_shares(e.X, e.components) if method == "estimator" else None
        for i, b in enumerate(batch_sizes):
            t, tq = preds["iter_time"][0][i], preds["iter_time"][1][i]
            m, mq = preds["peak_memory"][0][i], preds["peak_memory"][1][i]
            pt = dict(batch_size=b, iter_time_s=float(t), iter_time_interval_s=(float(tq[0]), float(tq[-1])),
                      samples_per_s=float(b / t), peak_memory_bytes=float(m),
                      peak_memory_interval_bytes=(float(mq[0]), float(mq[-1])),
                      peak_memory_safe_bytes=float(max(mq[-1], m)),
                      outside_trained_batches=not (min(ms.trained_batches) <= b <= reach),
                      iter_time_baseline_shares=shares[i] if shares else None)
            if "device_memory" in preds:
                d, dq = preds["device_memory"][0][i], preds["device_memory"][1][i]
                pt.update(device_memory_bytes=float(d), device_memory_interval_bytes=(float(dq[0]), float(dq[-1])),
                          device_memory_safe_bytes=float(max(dq[-1], d)))
            if "gpu_utilization" in preds:
                u, uq = preds["gpu_utilization"][0][i], preds["gpu_utilization"][1][i]
                pt.update(gpu_utilization=float(u), gpu_utilization_interval=(float(uq[0]), float(uq[-1])),
                          gpu_utilization_safe=float(max(uq[-1], u)))
            points.append(PredictedPoint(**pt))
        cap = ms.device_memory_bytes if ms.device_kind == "cuda" else None
        over = [p.batch_size for p in points if cap and (p.device_memory_safe_bytes or p.peak_memory_safe_bytes) > cap]
        if over:
            notes.append(f"batch size(s) {', '.join(map(str, over))} are predicted not to fit one {ms.device_name} "
                         f"({cap / 2**30:.1f} GiB; the q90 of the GPU memory is above it): `perfpredict max-batch "
                         "--predicted` (Predictor.largest_batch) finds the largest that does")
        if any(p.outside_trained_batches for p in points):
            widened = ms.q90_growth_per_doubling()
            notes.append(f"batch sizes outside {min(ms.trained_batches)}-{reach} are extrapolated ({reach}: the "
                         f"largest batch size the nearest profiled architecture, {near_name}, was measured at)"
                         + (" and the q90 of " + ", ".join(f"{n.replace('_', ' ')} grows x{g:.3f}"
                                                          for n, g in widened.items())
                            + f" per doubling past {reach} (calibrated at training)" if widened and e.past.any() else ""))
        info = PredictionInfo(method=method, model_set=ms.name, dataset_sha256=ms.meta["dataset_sha256"],
                              device_type=ms.name, out_of_distribution=ood, nearest=nearest, points=points,
                              estimator_scores={k: t.scores for k, t in ms.targets.items()}, notes=notes,
                              calibration=ms.calibration_info(),
                              asked_precision=arch.precision if precision_note else None)
        return _assemble_card(arch, source, ms, info, given)


#: The largest batch size a prediction may ask for, and how many batch sizes one call may ask for (the Python
#: API and both HTTP routes): far past any real job, and small enough that every feature times it stays finite.
MAX_BATCH_SIZE = 1_000_000
MAX_BATCH_SIZES = 64


def _as_arch(features: ArchFeatures | Mapping[str, Any]) -> ArchFeatures:
    """A caller's feature mapping, checked against the service's schema first (a NaN or a negative count is a
    :class:`UsageError` naming the field); an :class:`ArchFeatures` is taken as it is."""
    if isinstance(features, ArchFeatures):
        return features
    from perfpredict.card import PerformanceCard

    if isinstance(features, PerformanceCard):  # a measured or predicted card: its graph features and parameters
        if not features.features.available:
            why = features.features.error or "not exported"
            raise UsageError(f"card {features.model.name} has no graph features ({why}); predict from its model "
                             "file or an ONNX file", step="predict")
        # a measured card carries extract_features' two-batch split as it is: held at 0 as from_workload holds it
        graph = fixed_parts_at_least_zero(features.features.model_dump())
        ratio = graph.pop("frozen_step_work_ratio", None)  # a predicted card's, read off its graph (schema 1.22)
        # counted on a step of its model (schema 1.25 and 1.27)
        recompute, recomputed = _checked_recompute(graph)
        # a predicted or measured training card's (schema 1.24); None: as the data's. Held to the callers' range:
        # the schema bounds it below only, and 1e300 copies overflowed the card's memory bytes
        copies = check_optimizer_state_copies(graph.pop("optimizer_state_copies", None),
                                              "the card's features.optimizer_state_copies")
        unused = _checked_unused(graph, features.model)  # counted on a step (schema 1.28)
        frozen = _frozen_of(features.model, graph.get("param_bytes"), unused["unused_frozen_param_bytes"])
        # the estimators' parameter count is the graph's, as its param_bytes: the card's model section is the module's
        unused_count = _unused_count_of(features.model, unused["unused_param_bytes"])
        precision = _card_precision(features)  # the set its run's precision picks, as a model file's PRECISION
        features = {**graph, "param_count": features.model.parameters - unused_count,
                    "name": features.model.name, "family": features.model.family}
        # the frozen parameters after the schema's check: the unused frozen ones' bytes are not the graph's
        return replace(_as_arch(features), frozen_step_work_ratio=ratio, recompute_step_work_ratio=recompute,
                       **recomputed, optimizer_state_copies=1.0 if copies is None else float(copies),
                       optimizer_step_bytes=_checked_step_bytes(graph.pop("optimizer_step_bytes", None)),
                       frozen_param_count=frozen["frozen_param_count"],
                       frozen_param_bytes=frozen["frozen_param_bytes"] + unused["unused_frozen_param_bytes"],
                       **unused, unused_param_count=unused_count, precision=precision, precision_source="the card")
    if not isinstance(features, Mapping):
        hint = (": a card's graph features lack its parameter count, so pass the card itself (features=card)"
                if type(features).__name__ == "GraphFeatures" else "")
        raise UsageError(f"features must be a mapping of graph features, an ArchFeatures or a PerformanceCard, got "
                         f"{type(features).__name__}{hint}", step="predict")
    from perfpredict.estimators.feature_schema import check_feature_mapping

    # the frozen step-work ratio is read off a graph (a model file, an ONNX file), the recompute one and its saved
    # bytes and the unused parameters counted on a model file's steps, none taken from a caller, and
    # the optimizer's state copies are the predicting call's optimizer_state_copies
    return ArchFeatures.from_dict({k: v for k, v in _frozen_halves(check_feature_mapping(features)).items()
                                   if k not in ("frozen_step_work_ratio", "recompute_step_work_ratio",
                                                *RECOMPUTE_SAVED_FIELDS, *UNUSED_FIELDS, "optimizer_state_copies",
                                                "optimizer_state_note", "optimizer_step_bytes")})


#: The most a card's ``features.recompute_step_work_ratio`` may say: a step running its whole forward again some
#: 300 times (nested checkpointing recomputes a segment once per level), far past any real model's.
MAX_RECOMPUTE_STEP_WORK_RATIO = 100.0


def _checked_recompute(graph: dict[str, Any]) -> tuple[float | None, dict[str, float]]:
    """A card's activation-checkpointing fields, popped off its ``graph`` features: the recompute step-work ratio
    and :data:`RECOMPUTE_SAVED_FIELDS` (null: 0). The schema bounds them below only, so a hand-edited card's are
    held here to the range of the card's other features (a :class:`UsageError` naming the field): 10**400
    recomputed bytes raised OverflowError, 1e20 predicted 1e20 bytes of training memory, and a ratio of 1e300 a
    step of 1e297 s."""
    from perfpredict.estimators.feature_schema import MAX_QUANTITY

    ratio = graph.pop("recompute_step_work_ratio", None)
    if ratio is not None and not ratio <= MAX_RECOMPUTE_STEP_WORK_RATIO:
        raise UsageError(f"the card's features.recompute_step_work_ratio must be at most "
                         f"{MAX_RECOMPUTE_STEP_WORK_RATIO:g}, got {ratio!r}"[:300], step="predict")
    recomputed = {k: graph.pop(k, None) or 0 for k in RECOMPUTE_SAVED_FIELDS}
    for k, v in recomputed.items():
        if not 0 <= v <= MAX_QUANTITY:
            raise UsageError(f"the card's features.{k} must be a byte count from 0 to {MAX_QUANTITY:.0e}, got "
                             f"{v!r}"[:300], step="predict")
    return ratio, {k: float(v) for k, v in recomputed.items()}


def _checked_unused(graph: dict[str, Any], model) -> dict[str, float]:
    """A card's :data:`UNUSED_FIELDS` popped off its ``graph`` features (null: 0), held to what the card's
    ``model`` section can hold: the schema bounds them below only, so a hand-edited card's 10**400 raised
    OverflowError and 1e20 predicted 1e20 bytes of memory. The unused bytes are part of ``model.param_bytes``
    (the module's) and the frozen ones part of them; anything else is a :class:`UsageError` naming the field."""
    from perfpredict.estimators.feature_schema import MAX_QUANTITY

    unused = {k: graph.pop(k, None) or 0 for k in UNUSED_FIELDS}
    bounds = {"unused_param_bytes": (min(model.param_bytes, MAX_QUANTITY), "model.param_bytes"),
              "unused_frozen_param_bytes": (unused["unused_param_bytes"], "features.unused_param_bytes")}
    for k, (most, what) in bounds.items():
        if unused[k] and not 0 <= unused[k] <= most:  # none given: nothing to hold (a card before 1.28)
            raise UsageError(f"the card's features.{k} must be a byte count from 0 to {what} ({most:,}), got "
                             f"{unused[k]!r}"[:300], step="predict")
    return {k: float(v) for k, v in unused.items()}


def _checked_step_bytes(value: Any) -> dict[str, float] | None:
    """A card's ``features.optimizer_step_bytes``: the device kinds' (cpu, cuda) bytes, each a byte count from 0
    to 1 PiB (the schema bounds neither), or a :class:`UsageError` naming the field, as the card's other bounds
    are held; a hand-edited -5 or 1e300 used to be dropped without a word, so the card predicted as if its
    optimizer held no temporaries. None where it holds none; other device kinds' entries are not read."""
    if value is None:
        return None
    kept = {k: v for k, v in value.items() if k in ("cpu", "cuda")}
    for k, v in kept.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 2**50:
            raise UsageError(f"the card's features.optimizer_step_bytes[{k!r}] must be a byte count from 0 to "
                             f"{2**50:,} (1 PiB), got {v!r}"[:300], step="predict")
    return {k: float(v) for k, v in kept.items()} or None


def _frozen_halves(features: dict[str, Any]) -> dict[str, Any]:
    """A checked feature mapping whose frozen parameters are given by one of their count and bytes only, with
    the other as the same share of its whole (exact when every parameter has one dtype): a count alone made the
    card count fewer trainable parameters while eq. 2 charged every weight as trained."""
    count, frozen = features.get("frozen_param_count", 0.0), features.get("frozen_param_bytes", 0.0)
    params, param_bytes = features.get("param_count", 0.0), features.get("param_bytes", 0.0)
    if count > 0 and frozen == 0 and params > 0:
        return {**features, "frozen_param_bytes": param_bytes * count / params}
    if frozen > 0 and count == 0 and param_bytes > 0:
        return {**features, "frozen_param_count": float(round(params * frozen / param_bytes))}
    return features


def _unused_count_of(model, unused_bytes: float) -> float:
    """How many of a card's ``model.parameters`` its ``unused_bytes`` (features.unused_param_bytes) are: their
    share of ``model.param_bytes``, as :func:`_frozen_halves` shares (exact when every parameter has one dtype),
    at most all of them."""
    if unused_bytes <= 0 or not model.param_bytes:
        return 0.0
    return float(min(round(model.parameters * unused_bytes / model.param_bytes), model.parameters))


def _card_precision(card) -> str | None:
    """The autocast precision a card's job trained at, which picks the model set as a model file's ``PRECISION``
    does: a predicted card's ``prediction.asked_precision`` where its job's precision had no set on its device
    (``run.precision`` is then the set's it fell back to), else its ``run.precision`` (its set's); a measured
    card's where its steps ran under autocast
    (:func:`~perfpredict.workload.ref.autocast_note`). None for fp32 and for a measured run without autocast,
    whose ``run.precision`` is its weights' dtype (fp64 for ``model.double()``, fp16 / bf16 for ``model.half()`` /
    ``.bfloat16()``): its model file, which asks for no autocast precision, predicts at fp32."""
    from perfpredict.workload.ref import PRECISIONS, autocast_note

    if card.prediction is not None and card.prediction.asked_precision is not None:
        return card.prediction.asked_precision
    precision = card.run.precision
    if precision not in PRECISIONS or precision == "fp32":
        return None
    if card.prediction is not None or any(n.startswith(autocast_note(precision)) for n in card.notes):
        return precision
    return None


def _frozen_of(model, graph_param_bytes: float | None = None, unused_frozen: float = 0.0) -> dict[str, float]:
    """The frozen parameters' count and bytes a card's model section records. A card written before the bytes
    were recorded has the counts only: its frozen bytes are their share of the parameter bytes (exact when every
    parameter has one dtype). At most ``graph_param_bytes``, the card's graph's parameter bytes (what the
    feature vector's ``param_bytes`` is, and its frozen bytes are part of): a measured card counts
    ``model.param_bytes`` on the module, and its exported graph leaves out weights its forward does not use (an
    unused frozen module, a training-only branch), so the module's frozen bytes can exceed the graph's, as
    :func:`~perfpredict.estimators.design.horus_train_memory` holds them for a model file. The card's
    ``unused_frozen`` bytes (features.unused_frozen_param_bytes) are such: they are taken out first, so the bytes
    are the graph's frozen ones."""
    count = max(model.parameters - model.trainable_parameters, 0)
    frozen = model.frozen_param_bytes
    if frozen is None:
        frozen = model.param_bytes * count / model.parameters if model.parameters else 0.0
    frozen = max(min(frozen, model.param_bytes) - unused_frozen, 0.0)
    if isinstance(graph_param_bytes, (int, float)) and graph_param_bytes >= 0:
        frozen = min(frozen, graph_param_bytes)
    return {"frozen_param_count": float(count), "frozen_param_bytes": float(frozen)}


def frozen_time_factor(arch: ArchFeatures, ms: ModelSet) -> float | None:
    """What a training step's predicted time is multiplied by for ``arch``'s frozen parameters: its
    :attr:`~perfpredict.estimators.arch.ArchFeatures.frozen_step_work_ratio` (the step's MAC-weighted work with
    them frozen over training every weight). The sets were trained on models that train every parameter, so
    their times charge every layer a weight gradient and an input gradient. None for an inference set, where
    nothing is frozen, or where nobody walked the graph for the ratio."""
    r = arch.frozen_step_work_ratio
    if ms.mode == "infer" or arch.frozen_param_bytes_in_graph <= 0 or r is None or not 0 < r < 1:
        return None
    return float(r)


def recompute_time_factor(arch: ArchFeatures, ms: ModelSet) -> float | None:
    """What a training step's predicted time is multiplied by for the activation checkpointing of ``arch``'s model:
    its :attr:`~perfpredict.estimators.arch.ArchFeatures.recompute_step_work_ratio` (the step's work with the
    forward work its backward runs again over the same without). The sets were trained on steps that keep every
    activation. None for an inference set (nothing is recomputed without a backward) and where nothing is."""
    r = arch.recompute_step_work_ratio
    if ms.mode == "infer" or r is None or not r > 1:
        return None
    return float(r)


def _recompute_time_note(arch: ArchFeatures, ms: ModelSet) -> str | None:
    """The card's word on how a training step's time takes activation checkpointing (:func:`recompute_time_factor`)."""
    factor = recompute_time_factor(arch, ms)
    if factor is None:
        return None
    return (f"training-step times x {factor:.3f} for activation checkpointing: the model's forward checkpoints "
            "segments (torch.utils.checkpoint), whose forward the backward runs again, and the estimators were "
            "trained on steps that keep every activation; the factor is one default training step's FLOPs with the "
            "recomputation over the same without, counted on the CPU at a small batch (ops without FLOPs, such as "
            "normalisations and activations, which are recomputed too, are not weighed, so on a CPU the real "
            "ratio came out higher, docs/estimators.md)")


def _recompute_memory_note(arch: ArchFeatures, ms: ModelSet, estimated: frozenset[str]) -> str | None:
    """The card's word on what training memory charges for activation checkpointing (:func:`_training_memory`)."""
    t = ms.targets.get("peak_memory")
    if ms.mode == "infer" or t is None:
        return None
    term = next((term for term in _RECOMPUTED_BY_TERM if _term_charge(t, t.coef_point, term) is not None), None)
    fixed, at_one = recomputed_saved_bytes(arch, term, [0, 1], estimated) if term else (0.0, 0.0)
    per = at_one - fixed
    if per <= 0 and fixed <= 0:
        return None
    return (f"training memory charges activation checkpointing's recomputation: the saved-for-backward bytes keep "
            f"only the checkpointed segments' inputs, and the segment the backward recomputes holds its "
            f"activations beside them until its gradient is done, at most {per / 1e6:.3f} MB/sample + "
            f"{fixed / 2**20:.1f} MiB at once (counted on a step of the model), charged as saved bytes are "
            f"({_term_charge(t, t.coef_point, term):.2f} bytes each) on the memory baseline before the learned "
            "correction")


def _recompute_saved_fields(arch: ArchFeatures) -> dict[str, int | None]:
    """A card's :data:`RECOMPUTE_SAVED_FIELDS`: null where nothing is recomputed."""
    values = {f: getattr(arch, f) for f in RECOMPUTE_SAVED_FIELDS}
    return {f: int(v) if any(values.values()) else None for f, v in values.items()}


def _frozen_time_note(arch: ArchFeatures, ms: ModelSet) -> str | None:
    """The card's word on how a training step's time takes the frozen parameters (:func:`frozen_time_factor`)."""
    if ms.mode == "infer" or arch.frozen_param_bytes_in_graph <= 0:
        return None
    factor = frozen_time_factor(arch, ms)
    if factor is None:
        if arch.frozen_step_work_ratio is not None:
            return None  # frozen weights that skip no MAC work (biases, norms, an embedding table)
        return ("the training-step time is not adjusted for the frozen parameters: only a model file's or an "
                "ONNX file's graph says which layers they are, so every layer is charged its full backward work "
                "(the slow side)")
    return (f"training-step times x {factor:.3f} for the frozen parameters: the estimators were trained on steps "
            "that train every weight, and autograd computes no weight gradient for a frozen weight and no input "
            "gradient where no trained weight lies upstream; the factor is the step's MAC-weighted work (forward "
            "MACs F per node, F more per operand needing a gradient) with these weights frozen over the same with "
            "every weight trained; work it does not weigh (per-parameter costs such as the optimizer step, ops "
            "without MACs) moves the real ratio either way: on a CPU, five measured pairs came out 0.59-1.17 "
            "times this factor, docs/estimators.md)")


def _param_byte_charge(t: _Target, coef: np.ndarray | None) -> float | None:
    """The bytes a memory target's baseline charges per parameter byte (k_P: weights, gradients, optimizer
    state and what lives as long as they do), None for a target without a parameter term."""
    return _term_charge(t, coef, ("log_param_bytes",))


def _term_charge(t: _Target, coef: np.ndarray | None, term: tuple[str, ...]) -> float | None:
    """The bytes a memory target's baseline charges per byte of ``term``, None for a target without it."""
    terms = t.terms or LEGACY_MEMORY_TERMS
    if t.transform != "structured_memory" or coef is None or term not in terms:
        return None
    return float(coef[1 + terms.index(term)])


#: The card's and ArchFeatures' fields of the bytes activation checkpointing's recomputation saves at once
#: (per sample, fixed; as CUDA's kernels and as the CPU's save them).
RECOMPUTE_SAVED_FIELDS = ("recompute_saved_bytes_per_sample", "recompute_saved_bytes_fixed",
                          "recompute_saved_cpu_bytes_per_sample", "recompute_saved_cpu_bytes_fixed")
#: The card's and ArchFeatures' fields of the parameters a training step never uses (all of them, the frozen ones).
UNUSED_FIELDS = ("unused_param_bytes", "unused_frozen_param_bytes")
#: A memory baseline's saved-bytes term, and the recomputed bytes (per sample, fixed) charged as it charges it.
_RECOMPUTED_BY_TERM = {("log_saved_bytes_iter",): RECOMPUTE_SAVED_FIELDS[:2],
                       ("log_saved_cpu_bytes_iter",): RECOMPUTE_SAVED_FIELDS[2:]}
#: The saved-tensor count (:data:`SAVED_ATTRS`) each of those terms charges.
_SAVED_BY_TERM = {("log_saved_bytes_iter",): "saved_bytes_per_sample",
                  ("log_saved_cpu_bytes_iter",): "saved_cpu_bytes_per_sample"}


def recomputed_saved_bytes(arch: ArchFeatures, term: tuple[str, ...], batch_sizes: Sequence[int],
                           estimated: frozenset[str] = frozenset()) -> np.ndarray:
    """Per batch size, the bytes activation checkpointing's recomputation saves at once as the saved-bytes
    ``term`` counts saved bytes (CUDA's kernels or the CPU's): 0 for a term of another kind, and where that
    term's saved count is among the ``estimated`` (:func:`_estimated_counts`): an estimate from the graph keeps
    every checkpointed segment's activations already. Each kind on its own: a card with the CUDA count but not
    the CPU one is charged its recomputed bytes on a GPU."""
    fields = _RECOMPUTED_BY_TERM.get(term)
    if fields is None or _SAVED_BY_TERM[term] in estimated:
        return np.zeros(len(batch_sizes))
    per, fixed = (getattr(arch, f) for f in fields)
    return per * np.asarray(batch_sizes, float) + fixed


def _training_memory(ms: ModelSet, arch: ArchFeatures, X: np.ndarray, batch_sizes: Sequence[int], preds: dict,
                     estimated: frozenset[str] = frozenset(), components: TermComponents | None = None) -> dict:
    """Training memory with the frozen parameters charged their weights alone, the optimizer's state as the
    job's optimizer keeps it, and activation checkpointing's recomputed activations. The sets were trained on
    models that train every parameter with SGD with momentum, so their memory baselines charge each parameter
    byte k_P bytes (weight, gradient, one copy of optimizer state); a frozen byte needs one, its weight, so each
    row's baseline (the median's and the quantiles') loses (k_P - 1) x the frozen bytes, and an optimizer keeping
    ``c`` copies of each trained weight (Adam/AdamW 2, plain SGD 0) adds (c - 1) x the trained bytes to it (the
    buffers, :attr:`ArchFeatures.buffer_bytes`, a BatchNormalization's running statistics, are not trained: the
    baselines, fitted on zoo models whose graphs' param_bytes hold them, keep charging them as they were fitted,
    while the copies beyond the data's one leave them out), and
    the temporaries its step holds on this device kind (:func:`optimizer_step_charge`). They
    were trained on steps that keep every activation: a checkpointing model's saved bytes keep only its
    segments' inputs, and the segment its backward recomputes holds its activations beside them until its
    gradient is done, so the baseline adds those bytes (:func:`recomputed_saved_bytes`) charged k_S each, as
    it charges a saved byte. Its prediction (the learned correction times the baseline, or a neighbour's ratio
    times it) moves by the same share. The parameters the step never uses (:attr:`ArchFeatures.unused_param_bytes`,
    which the graph's ``param_bytes`` leaves out) add their weight alone, in inference too. Nothing changes in
    inference without them, or with nothing frozen nor unused, one copy and no temporaries (SGD with momentum's
    step holds none), nothing recomputed."""
    train = ms.mode != "infer"
    frozen = arch.frozen_param_bytes_in_graph if train else 0.0  # the baselines' own charge (see above)
    trained = max(arch.param_bytes - arch.untrained_param_bytes_in_graph, 0.0)
    extra = ((arch.optimizer_state_copies - 1.0) * trained
             + optimizer_step_charge(arch, ms.device_kind) if train else 0.0) + arch.unused_param_bytes
    recomputed = {term: recomputed_saved_bytes(arch, term, batch_sizes, estimated)
                  for term in _RECOMPUTED_BY_TERM} if train else {}
    if frozen <= 0 and extra == 0 and not any(r.any() for r in recomputed.values()):
        return preds
    out = dict(preds)
    for name, (y, q) in preds.items():
        t = ms.targets[name]
        kept = []
        for coef in (t.coef_point, t.coef_quantile):
            k = _param_byte_charge(t, coef)
            if k is None:
                break
            added = extra + sum(r * (_term_charge(t, coef, term) or 0.0) for term, r in recomputed.items())
            base = t._base(X, coef, 1.0, components)
            kept.append(np.maximum(base - max(k - 1.0, 0.0) * max(frozen, 0.0) + added, 1.0) / base)
        if len(kept) == 2:
            out[name] = (y * kept[0], q * kept[1][:, None])
    return out


def optimizer_step_charge(arch: ArchFeatures, device_kind: str) -> float:
    """The bytes of temporaries the optimizer's step holds at once on ``device_kind`` (0 where nobody probed).
    Charged whole on top of the baselines: measured on the CPU, a step's temporaries add to the peak RSS even
    where the backward pass held more (glibc keeps the freed activations' pages but the temporaries do not reuse
    them), and the SGD-momentum steps the baselines were fitted on hold none."""
    return float((arch.optimizer_step_bytes or {}).get(device_kind, 0.0))


def _unused_memory_note(arch: ArchFeatures, ms: ModelSet) -> str | None:
    """For a model with parameters a training step never uses: what the memory estimate charges them
    (:func:`_training_memory`)."""
    unused = arch.unused_param_bytes
    if unused <= 0:
        return None
    frozen = (f", {arch.unused_frozen_param_bytes / 2**20:,.1f} MiB of them frozen"
              if arch.unused_frozen_param_bytes > 0 else "")
    return (f"{unused / 2**20:,.1f} MiB of parameters ({unused:,.0f} bytes{frozen}) are never used by a training "
            "step (no op of its forward takes them, counted on one step of the model): the exported graph leaves "
            "them out, so its param_bytes and MACs hold none of them, but the module holds their weights; they "
            "get no gradient nor optimizer state, so memory is charged their weight alone on "
            "top of its baselines before the learned correction" + (", in inference too" if ms.mode == "infer"
                                                                     else ""))


def _frozen_memory_note(arch: ArchFeatures, ms: ModelSet) -> str | None:
    """For a training step with frozen parameters: what the memory estimate charges them
    (:func:`_training_memory`)."""
    frozen = arch.frozen_param_bytes_in_graph
    if ms.mode == "infer" or frozen <= 0:
        return None
    t = ms.targets.get("peak_memory")
    k = _param_byte_charge(t, t.coef_point) if t is not None else None
    share = f"{frozen / 2**20:,.1f} MiB ({frozen / max(arch.param_bytes, 1):.0%} of the parameter bytes) are frozen"
    if k is None:
        return (f"{share}: they need no gradient nor optimizer state, but the memory estimators were trained on "
                "models that train every parameter, so training memory is over-predicted for them (the safe side)")
    return (f"{share}: they need no gradient nor optimizer state; this set's memory baseline, fitted on models "
            f"that train every parameter, charges {k:.2f} bytes per parameter byte, and a frozen byte is charged "
            f"1 (its weight): {max(k - 1, 0) * frozen / 2**20:,.1f} MiB less before the learned correction")


#: The most state copies per trained weight a caller may say an optimizer keeps: far past any optimizer's (Adam
#: with amsgrad keeps 3), and small enough that the bytes it charges stay finite.
MAX_OPTIMIZER_STATE_COPIES = 100.0


def check_optimizer_state_copies(value: Any, name: str = "optimizer_state_copies",
                                 step: str = "predict") -> float | None:
    """A caller's optimizer state copies per trained weight as a float (None: not given); a UsageError naming
    ``name`` for anything but a finite number from 0 to :data:`MAX_OPTIMIZER_STATE_COPIES`."""
    if value is None:
        return None
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not ok or not math.isfinite(float(value)) or not 0 <= float(value) <= MAX_OPTIMIZER_STATE_COPIES:
        raise UsageError(f"{name} must be a number from 0 to {MAX_OPTIMIZER_STATE_COPIES:g}: the copies of each "
                         "trained weight the optimizer keeps as state (SGD with momentum 1, the default; plain SGD "
                         f"0; Adam/AdamW 2), got {value!r}"[:300], step=step)
    return float(value)


def check_optimizer_given(optimizer: Any, copies: float | None, features: Any = None,
                          names: tuple[str, str] = ("optimizer", "optimizer_state_copies"),
                          step: str = "predict"):
    """A caller's ``optimizer`` as :func:`~perfpredict.estimators.arch.check_optimizer` reads it; a
    :class:`UsageError` beside its state ``copies`` (each says the optimizer's state; ``names``: how the caller
    calls the two, ``--optimizer`` / ``--optimizer-states`` on the command line) or for ready ``features`` (no
    weights to build it over)."""
    from perfpredict.estimators.arch import check_optimizer

    named = check_optimizer(optimizer, names[0], step)
    if named is not None and copies is not None:
        raise UsageError(f"give {names[0]} or {names[1]}, not both: the optimizer named is probed for its state "
                         "copies (and its step's temporaries)", step=step)
    if named is not None and features is not None:
        raise UsageError("optimizer applies to an ONNX file or a model file (it is built over their weights); for "
                         "features give optimizer_state_copies", step=step)
    return named


def with_optimizer_state_copies(arch: ArchFeatures, copies: float | None) -> ArchFeatures:
    """``arch`` with the optimizer state copies a caller gave (None: as it says), and no probe's note nor step
    temporaries then (the caller's copies replace the probed optimizer)."""
    if copies is None:
        return arch
    return replace(arch, optimizer_state_copies=copies, optimizer_state_note=None, optimizer_step_bytes=None)


def _optimizer_memory_note(arch: ArchFeatures, ms: ModelSet) -> str | None:
    """For a training step: what the memory estimate charges the optimizer's state (:func:`_training_memory`),
    where the optimizer is not the training data's or a probe could not tell."""
    c = arch.optimizer_state_copies
    step = optimizer_step_charge(arch, ms.device_kind)
    if ms.mode == "infer" or (c == 1 and arch.optimizer_state_note is None and step == 0):
        return None
    temps = (f"; its step holds {step / 2**20:,.1f} MiB of temporaries at once on {ms.device_kind} (probed), "
             "charged on top" if step else "")
    if c == 1:
        return (arch.optimizer_state_note or "the optimizer keeps 1 state copy of each trained weight") + temps
    trained = max(arch.param_bytes - arch.untrained_param_bytes_in_graph, 0.0)
    said = arch.optimizer_state_note or f"the optimizer keeps {c:g} state copies of each trained weight"
    t = ms.targets.get("peak_memory")
    if t is None or _param_byte_charge(t, t.coef_point) is None:
        return (f"{said}, but this set's memory baseline has no parameter term to charge them to: training "
                "memory is predicted as for SGD with momentum (1 copy)")
    return (f"{said}; the memory estimators were trained on steps with SGD with momentum (1 copy), so training "
            f"memory is charged {c - 1:+g} x {trained / 2**20:,.1f} MiB of trained parameters = "
            f"{(c - 1) * trained / 2**20:+,.1f} MiB on top of its baselines before the learned correction{temps}")


def _arch_of(model: str | None, onnx_path: str | Path | None,
             features: ArchFeatures | Mapping[str, Any] | PerformanceCard | None, params: Mapping[str, Any] | None,
             batch_axis: int | None, dims: Mapping[str, int] | None = None,
             frozen: Sequence[str] | None = None, batch_input: str | None = None,
             optimizer: Any = None, trained: Sequence[str] | None = None,
             optimizer_state_copies: Any = None) -> tuple[ArchFeatures, str]:
    """:func:`_graph_features_of`, with the job's optimizer as :meth:`Predictor.predict` takes it: ``optimizer``
    and ``optimizer_state_copies`` checked first (:func:`check_optimizer_given`), before a model file is run,
    and the caller's copies put on the features (:func:`with_optimizer_state_copies`)."""
    copies = check_optimizer_state_copies(optimizer_state_copies)
    named = check_optimizer_given(optimizer, copies, features)
    arch, source = _graph_features_of(model, onnx_path, features, params, batch_axis, dims, frozen, batch_input,
                                      named, trained)
    return with_optimizer_state_copies(arch, copies), source


def _graph_features_of(model: str | None, onnx_path: str | Path | None,
                       features: ArchFeatures | Mapping[str, Any] | PerformanceCard | None,
                       params: Mapping[str, Any] | None, batch_axis: int | None,
                       dims: Mapping[str, int] | None = None, frozen: Sequence[str] | None = None,
                       batch_input: str | None = None, optimizer: Any = None,
                       trained: Sequence[str] | None = None) -> tuple[ArchFeatures, str]:
    """The graph features of exactly one of a model file / ``zoo:`` target, an ONNX file or a feature mapping,
    and the name of where they came from; ``optimizer`` (a model file's or an ONNX file's) as checked by
    :func:`check_optimizer_given`."""
    from perfpredict.estimators import arch as archmod

    if sum(x is not None for x in (model, onnx_path, features)) != 1:
        raise UsageError("give exactly one of a model (model.py or zoo:<family>), onnx_path or features",
                         step="predict")
    if batch_axis is not None and onnx_path is None:
        raise UsageError("batch_axis applies to ONNX files only (a model.py is exported at batch 1 and 2)",
                         step="predict")
    if batch_input is not None and onnx_path is None:
        raise UsageError("batch_input applies to ONNX files only (a model.py is exported at batch 1 and 2)",
                         step="predict")
    if batch_input is not None and (not isinstance(batch_input, str) or not batch_input):
        raise UsageError(f"batch_input must be the name of one of the graph's inputs, got {batch_input!r}"[:200],
                         step="predict")
    if params and model is None:
        raise UsageError("params apply to a model file or zoo:<family> only (an ONNX file or a feature vector is one "
                         "fixed architecture)", step="predict")
    if dims and onnx_path is None:
        raise UsageError("dims applies to ONNX files only (a model.py's inputs are its example_inputs)", step="predict")
    frozen, trained = archmod.check_frozen_or_trained(frozen, trained)
    if (frozen or trained) and onnx_path is None:
        raise UsageError(f"{'frozen' if frozen else 'trained'} applies to ONNX files only: a model file's frozen "
                         "parameters are those it builds with requires_grad=False, and a feature vector gives "
                         "frozen_param_bytes / frozen_param_count", step="predict")
    if dims is not None and not isinstance(dims, Mapping):
        raise UsageError(f"dims must map dimension names to sizes, e.g. {{'seq': 128}}, got {dims!r}"[:200],
                         step="predict")
    if model is not None:
        if not isinstance(model, (str, os.PathLike)):
            raise UsageError(f"model must be a model.py path or 'zoo:<family>', got {type(model).__name__}",
                             step="predict")
        if params is not None and not isinstance(params, Mapping):
            raise UsageError(f"params must be a mapping such as {{'width': 64}}, got {params!r}"[:200], step="predict")
        return archmod.from_workload(str(model), params, optimizer), str(model)
    if onnx_path is not None:
        return archmod.from_onnx_file(onnx_path, batch_axis=batch_axis, dims=dims, frozen=frozen,
                                      batch_input=batch_input, optimizer=optimizer, trained=trained), str(onnx_path)
    arch = _as_arch(features)
    return arch, arch.name or "features"


def _check_batches(batch_sizes: Sequence[int]) -> list[int]:
    from perfpredict.workload_args import whole_numbers

    if isinstance(batch_sizes, (str, bytes, bytearray, memoryview)):  # b"32" read as the batch sizes [50, 51]
        raise UsageError(f"batch_sizes must be a list of integers such as [16, 32], not the string "
                         f"{batch_sizes!r}"[:200], step="predict")
    if isinstance(batch_sizes, Mapping):  # {32: 1} read as [32], its values dropped without a word
        raise UsageError(f"batch_sizes must be a list of integers such as [16, 32], not a mapping "
                         f"{dict(batch_sizes)!r}"[:200], step="predict")
    bs = whole_numbers(batch_sizes, step="predict")
    if not bs or any(not 1 <= b <= MAX_BATCH_SIZE for b in bs) or len(bs) > MAX_BATCH_SIZES:
        raise UsageError(f"give 1 to {MAX_BATCH_SIZES} batch sizes, each from 1 to {MAX_BATCH_SIZE:,}, got "
                         f"{list(batch_sizes)[:8]!r}", step="predict")
    return bs


@dataclass
class _Estimate:
    """The targets' predictions for one architecture at some batch sizes, and what they rest on."""

    X: np.ndarray  # the design matrix, one row per batch size
    preds: dict[str, tuple[np.ndarray, np.ndarray]]  # target -> (median, quantiles)
    near: str  # the nearest profiled architecture
    dist: float  # its distance
    reach: int  # the largest batch size it was measured at
    past: np.ndarray  # per batch size, doublings past ``reach``
    method: str  # "estimator", or "nearest_profiled" when the fallback answered
    components: TermComponents  # ``X``'s baseline components


@dataclass(frozen=True)
class _Job:
    """One card to predict, checked (:meth:`Predictor._job`)."""

    ms: ModelSet
    given: ArchFeatures  # as the caller gave it, its optimizer state copies applied
    arch: ArchFeatures  # with its graph counts (:meth:`ModelSet.with_graph_counts`)
    batch_sizes: list[int]  # sorted, unique
    estimated: frozenset[str]  # the graph counts that were estimated (:func:`_estimated_counts`)
    allow_fallback: bool
    precision_note: str | None


def _check_computes(arch: ArchFeatures) -> None:
    if arch.forward_macs_per_sample + arch.forward_macs_fixed <= 0 and arch.param_count <= 0:
        raise UsageError("the graph features describe no computation (no multiply-accumulates and no parameters), "
                         "so there is nothing to predict; send the features of a real model (an ONNX file or a "
                         "model file gives them)", step="predict")


def _estimate(ms: ModelSet, arch: ArchFeatures, batch_sizes: Sequence[int], estimated: frozenset[str],
              allow_fallback: bool) -> _Estimate:
    """What ``card_for`` and ``predict_values`` both predict: the estimators, or out of distribution (and
    ``allow_fallback``) the nearest profiled model carried over (:func:`_fallback`). ``arch`` has its graph
    counts (:meth:`ModelSet.with_graph_counts`); ``estimated``: those of them that were estimated
    (:func:`_estimated_counts`)."""
    _check_computes(arch)
    return _estimates(ms, [_Job(ms, arch, arch, list(batch_sizes), estimated, allow_fallback, None)])[0]


#: The most rows one estimator call takes in :func:`_estimates` (a forest holds rows x trees node indices at once:
#: 1,024 x 1,200 trees is 10 MB); the rows are independent, so how they are split changes no bit.
_ROWS_PER_CALL = 1024


def _estimates(ms: ModelSet, jobs: Sequence[_Job]) -> list[_Estimate]:
    """:func:`_estimate` for each of ``jobs`` (all of model set ``ms``, their features checked): one design matrix
    for every job's batch sizes, and each estimator called once per block of :data:`_ROWS_PER_CALL` rows of the
    jobs whose interval margin is the same (estimated counts or not). Every step of a prediction is row by row
    (:func:`~perfpredict.estimators.models.rowwise_dot`, the forest's sums), so each job's numbers are those it
    gets alone, to the last bit; what is per job in Python (the design rows, the fallback, the training memory)
    stays per job."""
    X = design_matrix([(j.arch, b) for j in jobs for b in j.batch_sizes], device_kind=ms.device_kind)
    components = TermComponents(X)  # the baselines' terms, computed once for every estimator (and the card)
    ends = np.cumsum([len(j.batch_sizes) for j in jobs])
    spans = [slice(e - len(j.batch_sizes), e) for j, e in zip(jobs, ends, strict=True)]
    nearest = ms.nearest_each([j.arch for j in jobs])
    reach = [ms.largest_measured_batch[near] for near, _ in nearest]
    past = np.concatenate([ms.doublings_past(j.batch_sizes, r) for j, r in zip(jobs, reach, strict=True)])
    raw: list[dict[str, tuple[np.ndarray, np.ndarray]]] = [{} for _ in jobs]
    for flag in sorted({bool(j.estimated) for j in jobs}):
        members = [k for k, j in enumerate(jobs) if bool(j.estimated) == flag]
        rows = (slice(None) if len(members) == len(jobs)
                else np.concatenate([np.arange(len(X))[spans[k]] for k in members]))
        rows_components = components.rows(rows)
        for name, t in ms.targets.items():
            y, q = _in_blocks(t, X[rows], flag, past[rows], rows_components)
            at = 0
            for k in members:
                n = len(jobs[k].batch_sizes)
                raw[k][name] = y[at:at + n], q[at:at + n]
                at += n
    return [_finished(ms, j.arch, j.batch_sizes, j.estimated, j.allow_fallback, X[span], near, dist, r,
                      past[span], preds, components.rows(span))
            for j, span, (near, dist), r, preds in zip(jobs, spans, nearest, reach, raw, strict=True)]


def _in_blocks(t: _Target, X: np.ndarray, estimated: bool, past: np.ndarray,
               components: TermComponents) -> tuple[np.ndarray, np.ndarray]:
    """``t.predict`` on ``X`` (``components``: its baseline components), :data:`_ROWS_PER_CALL` rows at a time."""
    if len(X) <= _ROWS_PER_CALL:
        return t.predict(X, estimated_counts=estimated, doublings_past=past, components=components)
    parts = [t.predict(X[a:a + _ROWS_PER_CALL], estimated_counts=estimated, doublings_past=past[a:a + _ROWS_PER_CALL],
                       components=components.rows(slice(a, a + _ROWS_PER_CALL)))
             for a in range(0, len(X), _ROWS_PER_CALL)]
    return np.concatenate([y for y, _ in parts]), np.concatenate([q for _, q in parts])


def _finished(ms: ModelSet, arch: ArchFeatures, batch_sizes: Sequence[int], estimated: frozenset[str],
              allow_fallback: bool, X: np.ndarray, near: str, dist: float, reach: int, past: np.ndarray,
              preds: dict[str, tuple[np.ndarray, np.ndarray]], components: TermComponents) -> _Estimate:
    """One job's estimate from its estimators' predictions ``preds`` (its rows ``X``, their baseline
    ``components``): the fallback out of distribution, training memory's charges, and the intervals made to hold
    their medians."""
    method = "estimator"
    if allow_fallback and dist > ms.ood_threshold:
        method = "nearest_profiled"
        preds = _fallback(ms, near, arch, batch_sizes, preds, X, components)
    preds = _training_memory(ms, arch, X, batch_sizes, preds, estimated, components)
    if "device_memory" in preds and "peak_memory" in preds:
        preds["device_memory"] = _at_least(preds["device_memory"], preds["peak_memory"])
    for factor in (frozen_time_factor(arch, ms), recompute_time_factor(arch, ms)):
        if factor is not None and "iter_time" in preds:
            preds["iter_time"] = tuple(v * factor for v in preds["iter_time"])
    # the median is fitted apart from the quantiles (and the fallback moves both): an interval holds its median
    preds = {k: (y, np.column_stack([np.minimum(q[:, 0], y), q[:, 1:-1], np.maximum(q[:, -1], y)]))
             for k, (y, q) in preds.items()}
    if "gpu_utilization" in preds:  # a fallback's measured median is not clipped as the estimators' are
        preds["gpu_utilization"] = tuple(np.clip(a, 0.005, 1.0) for a in preds["gpu_utilization"])
    return _Estimate(X=X, preds=preds, near=near, dist=dist, reach=reach, past=past, method=method,
                     components=components)


def _at_least(device: tuple, peak: tuple) -> tuple:
    """The GPU memory NVML attributes to the process holds the allocator's peak (the reserve holds what was
    allocated, plus the CUDA context), so each of its quantiles is at least the peak's. The two are fitted
    apart, and past the trained batch sizes their q90s widen at different rates (H100 ResNet at batch 16384:
    device q90 0.85x the peak's), which would let a placement reserve less than the job allocates."""
    (d, dq), (m, mq) = device, peak
    return np.maximum(d, m), np.maximum(dq, mq)


#: Each target's column in profiled.json's points.
_PROFILED_KEYS = {"iter_time": "iter_time_s", "peak_memory": "peak_memory_bytes",
                  "gpu_utilization": "gpu_utilization", "device_memory": "nvml_process_bytes"}


@dataclass(frozen=True)
class _Carried:
    """One target's measurements of a profiled architecture, as :func:`_fallback` carries them."""

    have: np.ndarray  # indices of the measured batch sizes with a measurement of the target
    xs: np.ndarray  # log2 of those batch sizes
    values: np.ndarray  # there, memory's and time's measurement over the neighbour's own baseline; else as measured


@dataclass(frozen=True)
class _Neighbour:
    """A profiled architecture as the fallback answers from it (:meth:`ModelSet.neighbour`)."""

    measured: tuple[int, ...]  # the batch sizes it was measured at, ascending
    carried: Mapping[str, _Carried]  # per target with a measurement


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _neighbour_of(ms: ModelSet, name: str) -> _Neighbour:
    """:meth:`ModelSet.neighbour`, computed: the neighbour's design rows at its measured batch sizes and each
    target's measurements over its baseline there (nothing of the job's)."""
    pts = ms.profiled[name]["points"]
    measured = sorted(int(b) for b in pts)
    # the neighbour's saved-tensor counts are its own (exact at training); profiled.json has no kernel rows
    near = ms.with_graph_counts(ms.profiled_archs[name])
    X_near = design_matrix([(near, m) for m in measured], device_kind=ms.device_kind)
    near_c = TermComponents(X_near)  # each target's baseline reads the same terms (memory's, time's)
    carried = {}
    for tname, t in ms.targets.items():
        # a set trained before profiled.json left them out may hold what training took for no measurement
        have = [i for i, m in enumerate(measured) if _measured(pts[str(m)][_PROFILED_KEYS[tname]])]
        if not have:
            continue
        vals = np.array([pts[str(measured[i])][_PROFILED_KEYS[tname]] for i in have], float)
        xs = np.log2(np.array([measured[i] for i in have], float))
        if t.transform == "structured_memory":
            vals = vals / t._base(X_near[have], t.coef_point, 1.0, near_c.rows(have))
        elif getattr(t, "coef_point", None) is not None:  # time: a physical baseline to carry over
            vals = vals / t._base(X_near[have], t.coef_point, 1e-6, near_c.rows(have))
        carried[tname] = _Carried(_read_only(np.array(have)), _read_only(xs), _read_only(vals))
    return _Neighbour(tuple(measured), MappingProxyType(carried))


def _fallback(ms: ModelSet, name: str, arch: ArchFeatures, batch_sizes: Sequence[int], preds: dict,
              X: np.ndarray | None = None, components: TermComponents | None = None) -> dict:
    """What the nearest profiled model ``name`` measured, carried to ``arch``, for a job out of distribution
    (GENIE §6's most similar known model).

    Its GPU utilisation is taken as measured, interpolated in log batch size between its measured batch sizes
    (flat beyond them). Iteration time and memory are not taken as measured: a model ten times larger would get
    a tenth of its memory. They are ``arch``'s own physical baseline (parameters, saved activations and MACs,
    as the estimators' baselines weigh them) times the neighbour's measurement over its own baseline, that
    ratio interpolated the same way: the neighbour supplies the correction the estimators would have
    extrapolated. Both baselines are computed without kernel rows (profiled.json has none), so the ratio
    compares like with like. Memory's carried values are made non-decreasing across the neighbour's measured
    batch sizes (:func:`_memory_carried`). The interval keeps the estimators' shape, moved to the new median. A
    calibrated set's measurements are another CPU's, so their times take its factor.

    ``X``, ``components``: the job's design rows at ``batch_sizes`` and their baseline components, which are
    the rows without kernel rows where the job has none (then not built again). The neighbour's side is the
    set's (:meth:`ModelSet.neighbour`)."""
    nb = ms.neighbour(name)
    bare = replace(arch, kernel_nodes=())
    if X is None or arch.kernel_nodes:
        X, components = design_matrix([(bare, b) for b in batch_sizes], device_kind=ms.device_kind), None
    job_c = components_of(X, components)
    job_at: tuple[np.ndarray, TermComponents] | None = None  # the job at the neighbour's batch sizes: memory's
    at = np.log2(np.asarray(batch_sizes, float))
    out = {}
    for tname, (y, q) in preds.items():
        t = ms.targets[tname]
        c = nb.carried.get(tname)
        if c is None:
            out[tname] = (y, q)
            continue
        if t.transform == "structured_memory":
            if job_at is None:
                X_at = design_matrix([(bare, m) for m in nb.measured], device_kind=ms.device_kind)
                job_at = X_at, TermComponents(X_at)
            v = _memory_carried(c.values, c.xs, t._base(X, t.coef_point, 1.0, job_c),
                                t._base(job_at[0][c.have], t.coef_point, 1.0, job_at[1].rows(c.have)), at)
        elif getattr(t, "coef_point", None) is not None:  # time: a physical baseline to carry over
            v = t._base(X, t.coef_point, 1e-6, job_c) * np.interp(at, c.xs, c.values)
        else:
            v = np.interp(at, c.xs, c.values)
        if tname == "iter_time":
            v = v * ms.time_factor
        shift = np.where(y > 0, v / np.where(y > 0, y, 1.0), 1.0)
        q2 = q * shift[:, None]
        if tname == "gpu_utilization":
            q2 = np.clip(q2, 0.005, 1.0)
        out[tname] = (v, q2)
    return out


def _measured(v) -> bool:
    """Whether a profiled.json value is a measurement: a positive finite number, as training takes them (blank,
    NaN, zero and negative cells are none)."""
    return v is not None and math.isfinite(float(v)) and float(v) > 0


def _memory_carried(ratio: np.ndarray, xs: np.ndarray, base_job: np.ndarray, base_job_at: np.ndarray,
                    at: np.ndarray) -> np.ndarray:
    """Memory carried from the nearest profiled model: the job's baseline times the neighbour's measured ratio,
    fixed at the neighbour's measured batch sizes (log2 ``xs``; ``base_job_at`` the job's baseline there) and made
    non-decreasing across them, then interpolated in log memory between them and scaled by the job's own
    baseline beyond them. What a batch size gets depends on it alone: the running maximum over the batch sizes
    asked for gave batch 8 another answer beside batch 4 than alone, and ``max-batch --predicted`` (one batch
    size at a time) disagreed with ``predict``."""
    knots = np.maximum.accumulate(np.maximum(base_job_at * ratio, 1.0))
    inside = np.exp(np.interp(at, xs, np.log(knots)))
    below = knots[0] * base_job / np.maximum(base_job_at[0], 1.0)
    above = knots[-1] * base_job / np.maximum(base_job_at[-1], 1.0)
    return np.where(at < xs[0], np.minimum(below, knots[0]), np.where(at > xs[-1], np.maximum(above, knots[-1]),
                                                                          inside))


def _assemble_card(arch: ArchFeatures, source: str, ms: ModelSet, info, given: ArchFeatures):
    """The predicted card. Its features are ``arch``'s, but the counts the Predictor estimated stay as ``given``
    left them (null): a card written with the estimates as if counted was predicted again with the narrower
    intervals of exact counts, and without the notes saying they were estimated."""
    from perfpredict import __version__
    from perfpredict.card import (
        DeviceInfo,
        EnergyInfo,
        EnergyPoint,
        GraphFeatures,
        MemoryPoint,
        ModelInfo,
        PerformanceCard,
        ProfileRun,
        ThroughputPoint,
        utc_now,
    )

    dev = ms.device_kind
    bs = [p.batch_size for p in info.points]
    card = PerformanceCard(
        # the module's parameters, as a measured card counts them: the graph's and those no step uses
        model=ModelInfo(name=arch.name or Path(source).stem, source=source,
                        parameters=int(arch.param_count + arch.unused_param_count),
                        trainable_parameters=int(arch.param_count + arch.unused_param_count - arch.frozen_param_count),
                        param_bytes=int(arch.param_bytes + arch.unused_param_bytes),
                        frozen_param_bytes=int(arch.frozen_param_bytes_in_graph + arch.unused_frozen_param_bytes),
                        family=arch.family),
        # the measuring GPU's memory: what a pair of predicted cards is checked against (perfpredict colocate)
        device=DeviceInfo(kind=dev, name=ms.device_name, cpu_id=ms.cpu_id if dev == "cpu" else None,
                          memory_bytes=ms.device_memory_bytes if dev == "cuda" else None),
        run=ProfileRun(mode=ms.mode, precision=ms.precision, batch_sizes=bs, started_at=utc_now(),
                       perfpredict_version=__version__,
                       command=f"Predictor.predict ({ms.name})"),
        throughput=[ThroughputPoint(batch_size=p.batch_size, status="ok", samples_per_s=p.samples_per_s,
                                    iter_time_s=p.iter_time_s, p10_s=p.iter_time_interval_s[0],
                                    p90_s=p.iter_time_interval_s[1], source="predicted", device=dev)
                    for p in info.points],
        memory=[MemoryPoint(batch_size=p.batch_size, peak_bytes=int(p.peak_memory_bytes),
                            kind="cuda_peak_allocated" if dev == "cuda" else "cpu_rss_increase", source="predicted",
                            device=dev) for p in info.points],
        features=GraphFeatures(available=True, forward_macs_per_sample=int(arch.forward_macs_per_sample),
                               forward_macs_fixed=int(arch.forward_macs_fixed),
                               macs_by_op={k: round(v) for k, v in arch.macs_by_op.items()},  # a client's 1e6+0.5
                               param_bytes=int(arch.param_bytes), lookup_param_bytes=int(arch.lookup_param_bytes),
                               buffer_bytes=int(arch.buffer_bytes),
                               recurrent_steps_by_op={k: int(v) for k, v in arch.recurrent_steps_by_op.items()},
                               activation_bytes_per_sample=int(arch.activation_bytes_per_sample),
                               activation_bytes_fixed=int(arch.activation_bytes_fixed),
                               activation_bytes_by_op={k: round(v) for k, v in arch.activation_bytes_by_op.items()},
                               op_counts=dict(arch.op_counts), num_nodes=int(arch.num_nodes),
                               kernel_nodes=[list(r) for r in arch.kernel_nodes],
                               saved_bytes_per_sample=None if given.saved_bytes_per_sample is None
                               else int(given.saved_bytes_per_sample),
                               saved_cpu_bytes_per_sample=None if given.saved_cpu_bytes_per_sample is None
                               else int(given.saved_cpu_bytes_per_sample),
                               saved_bytes_fixed=int(arch.saved_bytes_fixed),
                               saved_cpu_bytes_fixed=int(arch.saved_cpu_bytes_fixed),
                               input_bytes_per_sample=int(arch.input_bytes_per_sample),
                               frozen_step_work_ratio=arch.frozen_step_work_ratio,
                               recompute_step_work_ratio=arch.recompute_step_work_ratio,
                               **_recompute_saved_fields(arch),
                               **{f: int(getattr(arch, f)) if arch.unused_param_bytes else None for f in UNUSED_FIELDS},
                               optimizer_state_copies=arch.optimizer_state_copies,
                               optimizer_step_bytes=arch.optimizer_step_bytes,
                               peak_live_bytes_per_sample=None if given.peak_live_bytes_per_sample is None
                               else int(given.peak_live_bytes_per_sample),
                               peak_live_bytes_fixed=int(arch.peak_live_bytes_fixed),
                               graph_saved_bytes_per_sample=None if arch.graph_saved_bytes_per_sample is None
                               else int(arch.graph_saved_bytes_per_sample),
                               graph_saved_bytes_fixed=int(arch.graph_saved_bytes_fixed)),
        prediction=info,
        notes=[f"predicted by perfpredict's estimators ({ms.name}, trained on {ms.meta['rows']} measured points "
               f"on {ms.trained_device_name}); nothing on this card was measured"],
    )
    if dev == "cuda" and info.points and info.points[0].gpu_utilization is not None:
        card.energy = EnergyInfo(available=True, scope="predicted GPU utilisation (NVML definition)",
                                 points=[EnergyPoint(batch_size=p.batch_size, gpu_utilization=p.gpu_utilization,
                                                     source="predicted", device=dev) for p in info.points])
    if len(bs) >= 2:
        from perfpredict.fit.rate import fit_rate_model

        try:
            rm = fit_rate_model(bs, [p.samples_per_s for p in info.points]).to_card(device=dev)
            card.rate_model = rm.model_copy(update={"source": "predicted"})
        except PerfPredictError:
            pass
    return card
