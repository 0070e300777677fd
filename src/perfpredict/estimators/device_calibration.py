"""Carry a CPU model set's iteration time to another CPU from a few reference runs (``perfpredict calibrate``).

A CPU time model does not carry over between CPU models: the committed sets predict the zoo's steps on another
CPU 17-86% off (training steps) and 23-151% off (inference passes; MAPE), because one CPU runs a depthwise
convolution or a GRU step relatively faster than another. Collecting a dataset of one's own takes about 25
minutes on 2 vCPUs. A calibration measures a fixed suite of zoo models instead (:data:`REFERENCE_CONFIGS` at
:data:`REFERENCE_BATCHES`, about a minute) and scales the source set's time predictions by the median of
measured / predicted over those points. Memory is not re-scaled: peak RSS of the same points agreed within a
mean 2.9-4.5% between the three CPU models measured so far.

Why one factor: ``benchmarks/cpu_calibration.py --alternatives`` compares it, on the committed datasets of three
CPU models, with local factors: the ratio of the nearest reference architecture (graph-feature distance) or the
median of the three nearest. For a model of a family the suite has, the three nearest tie one factor (mean MAPE
over the six CPU pairs 22.1% against 21.6% for training steps, 22.0% against 23.0% for inference passes); for a
family the suite lacks (its reference left out) every local factor is worse (22.9-26.0% against 21.6%, and
23.8-25.8% against 23.0%). A user's model is of an unknown kind, so one factor. It is refitted whenever a
calibration is loaded, from the stored measurements and the source set's current predictions, so retraining
the source set never leaves it stale.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, ValidationError, model_validator

from perfpredict.errors import PerfPredictError, UsageError

#: One architecture per zoo family: the median by batch-8 training-step time among its family's architectures
#: that cpu_xeon_2vcpu.csv measured at both :data:`REFERENCE_BATCHES` (so neither its smallest, dispatch-bound,
#: nor its largest model), all present in every committed CPU dataset at both sizes. One training step of each at
#: both sizes summed to 1.4-2.4 s on the 2-vCPU Xeon VM (datasets/calibrations/).
REFERENCE_CONFIGS: tuple[str, ...] = (
    "convnext-image_size32-stem_stride2-width32-blocks2-2-2-2-kernel7-mlp_ratio4-num_classes10",
    "dlrm-num_dense13-num_tables26-rows_per_table100000-emb_dim16-lookups1-bottom_mlp512-256-64-top_mlp512-256",
    "lstm-embed128-hidden256-layers2-seq_len64-vocab1000",
    "mlp-input_dim784-depth3-width1024-num_classes10",
    "mobilenetv2-width_mult1-depth_mult1-image_size96-num_classes1000",
    "resnet-depth34-width16-image_size32-num_classes10",
    "speech-n_mels32-frames100-conv_layers1-conv_channels8-rnn_layers2-hidden128-num_classes29-target_len16",
    "transformer-layers2-d_model128-heads2-ffn_mult4-seq_len128-vocab30522-num_classes2",
    "unet-image_size32-base_width16-depth3-num_classes4",
    "vgg-depth19-width16-batch_norm1-image_size32-hidden512-num_classes10",
    "vit-image_size32-patch4-d_model128-depth4-heads4-mlp_ratio4-num_classes10",
)
REFERENCE_BATCHES: tuple[int, ...] = (8, 32)
#: Seconds each reference point is timed for: what the committed CPU datasets were measured with.
REFERENCE_MIN_TIME_S = 1.0
#: Fewer usable reference points than this and the factor is not trusted (a calibration cut short).
MIN_REFERENCE_POINTS = 6
#: A reference whose measured / predicted lies more than 3x from the others' median is timed once more. Real
#: differences between CPUs are smaller: the family medians of the committed CPU pairs lie within 0.30-0.77x of
#: each other (first EPYC against the Xeon, inference); a step timed while another process ran was 5-84x off.
RETIME_LOG_DEVIATION = math.log(3.0)
#: The suite's first points are timed again at its end: how far the machine's own speed moved during the
#: calibration. A VM's host can move it a lot: on 2026-11-26 one VM's factor for the same set read 1.07, 1.02,
#: 1.28 and 1.67 within an hour (docs/estimators.md).
STEADINESS_POINTS = 2
#: Each of those points is timed this many more times at the end, each in a fresh process, interleaved. One
#: timing per point could not tell drift from noise: the same step timed in fresh processes back to back varies
#: by 23-31% on the Xeon VM (dataset/sentinel.py), and on 2026-11-27 one calibration's two points read x1.34 and
#: x0.93, opposite ways, and the one-timing check called that a 34% drift.
STEADINESS_REPEATS = 3
#: A drift (the points' median end timing over their first) is called one when it passes this and the end
#: timings' own spread (the noise between fresh processes), as the collector's speed sentinel judges its runs.
UNSTEADY_LOG_DRIFT = math.log(1.10)
CALIBRATION_FILE = "calibration.json"
SCHEMA_VERSION = "1.0"


class ReferencePoint(BaseModel):
    """One reference measurement on the calibrated CPU (its architecture's graph features are the calibration's
    ``architectures[config]``)."""

    config: str
    family: str
    batch_size: int = Field(gt=0)
    measured_s: float = Field(gt=0, description="median iteration time measured on the calibrated CPU")


class TimeCalibration(BaseModel):
    """What ``perfpredict calibrate`` measured: the source set, the CPU it was carried to, and the references.

    The factor and the interval margin are not stored: :func:`fit_factor` derives them from the references and
    the source set as it is when loaded."""

    schema_version: str = SCHEMA_VERSION
    name: str = Field(description="the calibrated model set's name (device_type in predictions)")
    source_set: str
    mode: str
    precision: str
    device_name: str = Field(description="the calibrated CPU's model name")
    cpu_id: str | None = None
    created_at: str
    command: str = ""
    git_commit: str | None = None
    torch_version: str | None = None
    references: list[ReferencePoint]
    repeats: list[ReferencePoint] = Field(default_factory=list, description="the suite's first points timed again "
                                          "at its end (STEADINESS_POINTS, each STEADINESS_REPEATS times in fresh "
                                          "processes): how far the machine's speed moved")
    architectures: dict[str, dict[str, Any]] = Field(description="each reference architecture's graph features "
                                                     "(ArchFeatures.as_dict), which the source set predicts from")
    host_busy_cpus: float | None = Field(None, description="CPUs other processes kept busy in the second before "
                                         "the references ran (perfpredict.profile.host_load.busy_now)")

    @property
    def repeat_ratios(self) -> list[float]:
        """Each repeated point's time at the end of the suite over its first timing."""
        first = {(r.config, r.batch_size): r.measured_s for r in self.references}
        return [r.measured_s / first[(r.config, r.batch_size)] for r in self.repeats
                if (r.config, r.batch_size) in first]

    def _repeats_by_point(self) -> dict[tuple[str, int], tuple[float, list[float]]]:
        """{(config, batch): (first timing, the end timings)} for the repeated reference points."""
        first = {(r.config, r.batch_size): r.measured_s for r in self.references}
        out: dict[tuple[str, int], tuple[float, list[float]]] = {}
        for r in self.repeats:
            key = (r.config, r.batch_size)
            if key in first:
                out.setdefault(key, (first[key], []))[1].append(r.measured_s)
        return out

    @property
    def speed_drift(self) -> float | None:
        """The median over the repeated points of (the median of a point's end timings / its first timing); None
        without repeats. With one end timing per point (calibrations before STEADINESS_REPEATS), the median of
        :attr:`repeat_ratios`."""
        per_point = [float(np.median(ends)) / t0 for t0, ends in self._repeats_by_point().values()]
        return float(np.median(per_point)) if per_point else None

    @property
    def speed_noise(self) -> float | None:
        """The end timings' own spread: the largest, over the repeated points, of slowest / fastest - 1 (the
        variation between fresh processes at one moment); None without two end timings of a point."""
        spreads = [max(ends) / min(ends) - 1.0 for _, ends in self._repeats_by_point().values() if len(ends) >= 2]
        return round(max(spreads), 4) if spreads else None

    @property
    def unsteady(self) -> bool:
        """Whether the machine's speed moved while the suite ran: :attr:`speed_drift` is more than
        UNSTEADY_LOG_DRIFT from 1 and further from 1 than :attr:`speed_noise` (when measured). Both sides are
        slower over faster, as the noise is: a speed-up to x0.85 is a 1/0.85 - 1 = 17.6% move, as a slow-down to
        x1.176 is."""
        drift, noise = self.speed_drift, self.speed_noise
        if drift is None or abs(math.log(drift)) <= UNSTEADY_LOG_DRIFT:
            return False
        return noise is None or math.exp(abs(math.log(drift))) - 1.0 > noise

    @model_validator(mode="after")
    def _every_reference_has_its_features(self) -> TimeCalibration:
        missing = sorted({r.config for r in self.references} - set(self.architectures))
        if missing:
            raise ValueError(f"no graph features for reference architecture(s) {', '.join(missing)}")
        return self

    @classmethod
    def load(cls, path: str | Path) -> TimeCalibration:
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise PerfPredictError(f"cannot read the calibration: {e}", source=str(p),
                                   step="load calibration") from None
        try:
            calib = cls.model_validate(raw)
        except ValidationError as e:
            errs = e.errors()
            where = ".".join(str(x) for x in errs[0]["loc"]) or "the file"
            more = f"; and {len(errs) - 1} more" if len(errs) > 1 else ""
            raise PerfPredictError(f"not a perfpredict calibration ({where}: {errs[0]['msg']}{more})", source=str(p),
                                   step="load calibration") from None
        if calib.schema_version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise PerfPredictError(f"calibration schema {calib.schema_version} is not readable by this perfpredict "
                                   f"(schema {SCHEMA_VERSION})", source=str(p), step="load calibration")
        return calib

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=1) + "\n")


def short_cpu_id(cpu_id: str | None) -> str | None:
    """A :func:`~perfpredict.hostinfo.cpu_id` as vendor, family and model (``intel_f6m207``): what tells two VMs
    of the same model name apart. None where it does not parse."""
    import re

    m = re.match(r"(\w+) family (\d+) model (\d+)", cpu_id or "")
    if not m:
        return None
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(m.group(1), m.group(1).lower())
    return f"{vendor}_f{m.group(2)}m{m.group(3)}"


def default_name(source_set: str, cpu_id: str | None, device_name: str) -> str:
    """``<source set>_on_<this CPU>``, e.g. ``cpu_xeon_2vcpu_on_amd_f25m17``: the CPU named by
    :func:`short_cpu_id` where known, else by its model name."""
    import re

    short = short_cpu_id(cpu_id)
    if short:
        return f"{source_set}_on_{short}"
    slug = re.sub(r"[^a-z0-9]+", "_", device_name.lower()).strip("_")[:40] or "cpu"
    return f"{source_set}_on_{slug}"


def predicted_times(source, references: Sequence[ReferencePoint],
                    architectures: Mapping[str, Mapping[str, Any]]) -> np.ndarray:
    """The source set's median iteration time at each reference point (``architectures``: config -> graph
    features)."""
    from perfpredict.estimators.arch import ArchFeatures
    from perfpredict.estimators.design import design_matrix

    archs = [source.with_graph_counts(ArchFeatures.from_dict(dict(architectures[r.config]))) for r in references]
    X = design_matrix([(a, r.batch_size) for a, r in zip(archs, references)], device_kind=source.device_kind)
    y, _ = source.targets["iter_time"].predict(X)
    return np.asarray(y, float)


def fit_factor(log_ratios: Sequence[float]) -> tuple[float, float]:
    """(log factor, log margin) from the references' log(measured / predicted).

    The factor is their median. The margin widens the interval on both sides (log space) by the spread the
    factor leaves: the 80th percentile of the references' absolute deviation from the median, each left out of
    the median it is compared with (a reference would otherwise pull the median towards itself)."""
    r = np.asarray(log_ratios, float)
    if len(r) < MIN_REFERENCE_POINTS:
        raise PerfPredictError(f"{len(r)} reference point(s) measured, fewer than the {MIN_REFERENCE_POINTS} a "
                               "calibration needs; run `perfpredict calibrate` again to measure the rest",
                               step="calibrate")
    med = float(np.median(r))
    loo = np.array([abs(r[i] - np.median(np.delete(r, i))) for i in range(len(r))])
    return med, float(np.quantile(loo, 0.8))


class _CalibratedTime:
    """The source's iteration-time target, scaled by the calibration factor and widened by its margin."""

    def __init__(self, inner, log_factor: float, log_margin: float) -> None:
        self.inner = inner
        self.log_factor = log_factor
        self.log_margin = log_margin

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def predict(self, X: np.ndarray, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        y, q = self.inner.predict(X, **kwargs)
        f = math.exp(self.log_factor)
        q = q * f
        q[:, 0] /= math.exp(self.log_margin)
        q[:, -1] *= math.exp(self.log_margin)
        return y * f, q


class CalibratedModelSet:
    """A CPU model set carried to another CPU by a :class:`TimeCalibration`: the source set's estimators, with
    iteration time scaled, answering as the calibrated CPU (its name, ``cpu_id`` and the calibration's name).
    Everything else (memory, the nearest profiled architecture, the trained batch sizes) is the source's."""

    def __init__(self, source, calibration: TimeCalibration, path: Path | None = None) -> None:
        if source.device_kind != "cpu":
            raise PerfPredictError(f"calibration {calibration.name} names source set {source.name}, which is not a "
                                   "CPU set (only CPU sets are calibrated)", step="load calibration")
        if (source.mode, source.precision) != (calibration.mode, calibration.precision):
            raise PerfPredictError(f"calibration {calibration.name} measured {calibration.precision} "
                                   f"{calibration.mode}-mode steps, but its source set {source.name} predicts "
                                   f"{source.precision} {source.mode}-mode ones", step="load calibration")
        self.source = source
        self.calibration = calibration
        self.path = path
        self.name = calibration.name
        self.device_name = calibration.device_name
        self.cpu_id = calibration.cpu_id
        pred = predicted_times(source, calibration.references, calibration.architectures)
        meas = np.array([r.measured_s for r in calibration.references])
        self.log_ratios = np.log(meas / pred)
        self.log_factor, self.log_margin = fit_factor(self.log_ratios)
        self.targets = dict(source.targets)
        self.targets["iter_time"] = _CalibratedTime(source.targets["iter_time"], self.log_factor, self.log_margin)

    @property
    def factor(self) -> float:
        return math.exp(self.log_factor)

    @property
    def time_factor(self) -> float:
        return self.factor

    @property
    def trained_device_name(self) -> str:
        return self.source.device_name

    def __getattr__(self, name: str):
        # only reached for what this class does not set: everything the source set knows
        if name == "source":
            raise AttributeError(name)
        return getattr(self.source, name)

    def calibration_info(self):
        from perfpredict.card import CalibrationInfo

        return CalibrationInfo(source_set=self.source.name, source_device_name=self.source.device_name,
                               source_cpu_id=self.source.cpu_id, time_factor=self.factor,
                               interval_log_margin=self.log_margin,
                               reference_points=len(self.calibration.references),
                               calibrated_at=self.calibration.created_at,
                               speed_drift=self.calibration.speed_drift, speed_noise=self.calibration.speed_noise)

    def calibration_note(self) -> str:
        c = self.calibration
        return (f"iteration time: {self.source.name}'s estimators (measured on {self.source.device_name}"
                f"{' (' + self.source.cpu_id + ')' if self.source.cpu_id else ''}) x {self.factor:.3f}, the median "
                f"of measured / predicted over {len(c.references)} reference steps timed on this CPU on "
                f"{c.created_at[:10]} (`perfpredict calibrate`); the interval is widened by "
                f"x{math.exp(self.log_margin):.2f} "
                "for the references' spread around that factor. Memory is the source set's, not re-measured")


def load_calibrations(root: Path, sets: Mapping[str, Any]) -> tuple[dict[str, CalibratedModelSet], list[str]]:
    """The calibrations under ``root`` (``<name>/calibration.json``) whose source set is in ``sets``, and a line
    for each one that could not be used (its source set is gone, the file is not a calibration, or another file
    holds a calibration of the same name)."""
    out: dict[str, CalibratedModelSet] = {}
    problems: list[str] = []
    loaded = []
    for p in sorted(root.glob(f"*/{CALIBRATION_FILE}")):
        if p.parent.name.startswith("."):
            continue
        try:
            loaded.append((p, TimeCalibration.load(p)))
        except PerfPredictError as e:
            problems.append(f"{p}: {e.message}")
        except Exception as e:  # noqa: BLE001 - a hand-edited file: one calibration left out, not every set
            problems.append(f"{p}: not a calibration this perfpredict reads ({type(e).__name__}: "
                            f"{str(e)[:200]})")
    # Two files of one name (a copied folder): the one in the folder of its name, as `perfpredict calibrate`
    # writes it, answers; the other is named as unused (the later one by path had replaced it unsaid).
    loaded.sort(key=lambda pc: (pc[1].name != pc[0].parent.name, str(pc[0])))
    taken: dict[str, Path] = {}
    for p, calib in loaded:
        try:
            if calib.name in taken:
                problems.append(f"{p}: its name {calib.name!r} is also {taken[calib.name]}'s, which is used")
                continue
            if calib.source_set not in sets:
                problems.append(f"{p}: its source set {calib.source_set!r} is not among the trained models")
                continue
            if calib.name in sets:
                problems.append(f"{p}: its name {calib.name!r} is a trained model set's")
                continue
            out[calib.name] = CalibratedModelSet(sets[calib.source_set], calib, p)
            taken[calib.name] = p
        except PerfPredictError as e:
            problems.append(f"{p}: {e.message}")
        except Exception as e:  # noqa: BLE001 - a hand-edited file: one calibration left out, not every set
            problems.append(f"{p}: not a calibration this perfpredict reads ({type(e).__name__}: "
                            f"{str(e)[:200]})")
    return out, problems


def check_source(source) -> None:
    """A set can be calibrated if it is a measured CPU set (not itself a calibration)."""
    if isinstance(source, CalibratedModelSet):
        raise UsageError(f"{source.name} is itself a calibration (of {source.source.name}); calibrate its source set",
                         step="arguments")
    if source.device_kind != "cpu":
        raise UsageError(f"{source.name} is a {source.device_kind} set; only CPU sets can be calibrated",
                         step="arguments")
