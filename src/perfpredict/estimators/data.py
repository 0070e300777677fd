"""Load a measured dataset joined to the architecture features: the estimators' training data."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.dataset.sentinel import run_sentinel
from perfpredict.errors import PerfPredictError
from perfpredict.estimators.arch import ArchFeatures, from_table_row
from perfpredict.estimators.design import design_matrix

#: Dataset files that are not training sets of their own (repeats measure the noise floor; co-location
#: pairs train the interference model; far-batch points check the memory q90 far past the trained batch sizes,
#: benchmarks/memory_past_trained_batches.py; calibration checks are points measured on a CPU that `perfpredict
#: calibrate` was run on, benchmarks/cpu_calibration.py).
NON_TRAINING_SUFFIXES = ("_repeat", "_colocation", "_far_batch", "_calibration_check")
FEATURES_FILE = "zoo_features.csv"


def _precision_of(provenance: dict[str, Any], path: Path) -> str:
    from perfpredict.dataset.collect import dataset_precision

    return _from_provenance(dataset_precision, provenance, path)


def _cpu_id_of(provenance: dict[str, Any], path: Path) -> str | None:
    from perfpredict.dataset.collect import dataset_cpu_id

    return _from_provenance(dataset_cpu_id, provenance, path)


def _from_provenance(read, provenance: dict[str, Any], path: Path):
    from perfpredict.errors import UsageError

    try:
        return read(provenance)
    except UsageError as e:
        raise PerfPredictError(e.message, source=str(path), step="load dataset") from None


@dataclass
class TrainingData:
    name: str  # dataset stem, e.g. "cuda_h100"
    device_kind: str  # "cuda" | "cpu"
    device_name: str
    archs: list[ArchFeatures]
    batch: np.ndarray
    X: np.ndarray
    families: np.ndarray
    configs: np.ndarray
    rows: list[dict[str, str]]
    sha256: str
    provenance: dict[str, Any] = field(default_factory=dict)
    #: what the rows measured: training steps ("train") or forward passes under no_grad ("infer")
    mode: str = "train"
    #: the precision every row ran at (fp32, or bf16/fp16 autocast), from the provenance file
    precision: str = "fp32"
    #: a CPU dataset's CPU beyond its model name (hostinfo.cpu_id), from the provenance; None when unrecorded,
    #: and for GPU datasets (their host CPU may differ between lent sessions; the rows are the GPU's)
    cpu_id: str | None = None

    def column(self, name: str) -> np.ndarray:
        """A numeric column (NaN where empty); a cell that is not a number is a :class:`PerfPredictError` naming
        the dataset, the row's configuration and the column."""
        out = np.full(len(self.rows), np.nan)
        for i, r in enumerate(self.rows):
            v = r.get(name)
            if v in (None, ""):
                continue
            try:
                out[i] = float(v)
            except (TypeError, ValueError):
                raise PerfPredictError(f"column {name} of {r.get('config')!r} at batch {r.get('batch_size')} is "
                                       f"{str(v)[:40]!r}, not a number", source=self.provenance.get("file")
                                       or self.name, step="load dataset") from None
        return out

    def __len__(self) -> int:
        return len(self.rows)


def training_datasets(datasets_dir: str | Path) -> list[Path]:
    """Every measured dataset CSV under ``datasets_dir`` that is a training set (see NON_TRAINING_SUFFIXES)."""
    d = Path(datasets_dir)
    return sorted(p for p in d.glob("*.csv") if p.name != FEATURES_FILE
                  and not p.stem.endswith(NON_TRAINING_SUFFIXES))


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _require_columns(have: Sequence[str] | None, need: Sequence[str], path: Path) -> None:
    """A CSV that is not one of ours (or is empty) is named as such, not met with a KeyError."""
    missing = [c for c in need if c not in (have or ())]
    if missing:
        raise PerfPredictError(f"not a perfpredict dataset: no {', '.join(missing)} column"
                               f"{'s' if len(missing) > 1 else ''} (see datasets/README.md)", source=str(path),
                               step="load dataset")


def _read_csv(path: Path, need: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a CSV of ours (a byte-order mark allowed); one error naming the file when it is not text or
    lacks a column."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            _require_columns(reader.fieldnames, need, path)
            return list(reader)
    except UnicodeDecodeError:
        raise PerfPredictError("not a text CSV (it is not UTF-8)", source=str(path), step="load dataset") from None
    except OSError as e:  # a folder by the name, an unreadable file
        raise PerfPredictError(f"cannot read: {e.strerror or e}", source=str(path), step="load dataset") from None
    except csv.Error as e:
        raise PerfPredictError(f"not a readable CSV: {e}", source=str(path), step="load dataset") from None


def _whole(text: str) -> int:
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = float("nan")
    if not (math.isfinite(v) and v >= 1 and v == int(v)):  # int(inf) raised OverflowError
        raise ValueError(f"batch_size {text!r} is not a whole number >= 1")
    return int(v)


def _read_sidecar(meta_path: Path) -> dict[str, Any]:
    """The provenance sidecar (``<dataset>.meta.json``; absent: none), checked for the shape it is read in."""
    if not meta_path.exists():
        return {}
    try:
        doc = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PerfPredictError(f"the provenance sidecar is not JSON ({e})", source=str(meta_path),
                               step="load dataset") from None
    except OSError as e:
        raise PerfPredictError(f"cannot read the provenance sidecar: {e.strerror or e}", source=str(meta_path),
                               step="load dataset") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs", []), list) \
            or not all(isinstance(r, dict) for r in doc.get("runs", [])):
        raise PerfPredictError("the provenance sidecar must be an object whose 'runs' is a list of objects",
                               source=str(meta_path), step="load dataset")
    return doc


def load_training_data(dataset_csv: str | Path, features_csv: str | Path | None = None,
                       mode: str | None = None) -> TrainingData:
    """Successful ``mode`` rows of ``dataset_csv`` (the last row of each point wins), joined to features.

    ``mode`` None takes the file's own mode ("train" or "infer"): one file per device and mode, so a file
    that mixes modes needs it named."""
    path = Path(dataset_csv)
    fpath = Path(features_csv) if features_csv else path.parent / FEATURES_FILE
    if not path.exists():
        raise PerfPredictError("no such dataset", source=str(path), step="load dataset")
    if not fpath.exists():
        raise PerfPredictError("no features table (run `python profilers/collect_dataset.py features`)",
                               source=str(fpath), step="load dataset")
    feats = {r["config"]: r for r in _read_csv(fpath, ("config",)) if not r.get("error")}
    # a row cut short (an interrupted write) or with extra cells is no measurement: left out, like a failed one
    all_rows = [r for r in _read_csv(path, ("config", "batch_size", "status", "device_kind", "family"))
                if None not in r and None not in r.values()]
    if mode is None:
        modes = sorted({r.get("mode") or "train" for r in all_rows})
        if len(modes) > 1:
            raise PerfPredictError(f"dataset mixes modes ({', '.join(modes)}); name one, or keep one file per "
                                   "mode", source=str(path), step="load dataset")
        mode = modes[0] if modes else "train"
    if mode not in ("train", "infer"):
        raise PerfPredictError(f"mode {str(mode)[:40]!r} in the dataset's mode column: a row's mode is train or "
                               "infer", source=str(path), step="load dataset")
    latest: dict[tuple[str, str], dict[str, str]] = {}
    for r in all_rows:
        if (r.get("mode") or "train") == mode:
            latest[(r["config"], r["batch_size"])] = r
    rows = [r for r in latest.values() if r["status"] == "ok" and r["config"] in feats]
    if not rows:
        raise PerfPredictError(f"no successful {mode} rows joined to features", source=str(path),
                               step="load dataset")
    archs_by_config = {}
    for c in sorted({r["config"] for r in rows}):
        try:
            archs_by_config[c] = from_table_row(feats[c])
        except (KeyError, TypeError, ValueError) as e:  # a text cell, a truncated row, broken *_json
            raise PerfPredictError(f"the features of {c!r} do not parse ({type(e).__name__}: {str(e)[:120]})",
                                   source=str(fpath), step="load dataset") from None
    archs = [archs_by_config[r["config"]] for r in rows]
    try:
        batch = np.array([_whole(r["batch_size"]) for r in rows])
    except ValueError as e:
        raise PerfPredictError(str(e), source=str(path), step="load dataset") from None
    provenance = _read_sidecar(path.with_name(path.stem + ".meta.json"))
    kinds = {r["device_kind"] for r in rows}
    names = {r["device_name"] for r in rows if r.get("device_name")}
    if len(kinds) != 1 or len(names) > 1:
        raise PerfPredictError(f"dataset mixes devices ({sorted(kinds)}, {sorted(names)}); one file per device",
                               source=str(path), step="load dataset")
    kind = kinds.pop()
    return TrainingData(
        name=path.stem, device_kind=kind, device_name=names.pop() if names else "unknown", archs=archs,
        batch=batch, X=design_matrix(zip(archs, batch), device_kind=kind), families=np.array([r["family"] for r in rows]),
        configs=np.array([r["config"] for r in rows]), rows=rows, sha256=file_sha256(path),
        provenance={"file": path.name, "features_file": fpath.name, "features_sha256": file_sha256(fpath),
                    "runs": [{**{k: run.get(k) for k in ("started_at", "command", "git_commit", "device",
                                                         "torch_version", "cuda_version", "counts")},
                              "speed_sentinel": run_sentinel(run)}
                             for run in provenance.get("runs", [])],
                    "device_info": next((run.get("device_info") for run in provenance.get("runs", [])
                                         if run.get("device_info")), None)},
        mode=mode, precision=_precision_of(provenance, path), cpu_id=_cpu_id_of(provenance, path) if kind == "cpu" else None)
