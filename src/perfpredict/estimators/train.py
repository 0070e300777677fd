"""Train, evaluate and save the estimators of every dataset in ``datasets/`` into ``trained_models/``.

For each training dataset (one device) and each target it can support:

1. grouped-by-family cross-validation of XGBoost, LightGBM, random forest and a linear model (and random
   5-fold CV for contrast) — :mod:`perfpredict.estimators.evaluate`;
2. the final XGBoost point model and quantile model (q10, q50, q90) fitted on all rows and saved in
   XGBoost's native JSON;
3. ``metadata.json``: feature list, dataset and features-table SHA-256, row count, the CV metrics, library
   versions, and the memory model's baseline coefficients; ``report.md``: the comparison tables and XGBoost's
   feature importance; ``profiled.json``: the training architectures' features and measurements (the
   Predictor's nearest-neighbour fallback); ``interference.json`` when co-location pairs exist.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.dataset.sentinel import drift_warning
from perfpredict.errors import PerfPredictError
from perfpredict.estimators.data import TrainingData, load_training_data, training_datasets
from perfpredict.estimators.design import feature_names
from perfpredict.estimators.evaluate import evaluate_target, valid_rows
from perfpredict.estimators.models import (
    BUSY_TERMS,
    IDLE_TERMS,
    MODEL_KINDS,
    PRIOR_FEATURE,
    PRIOR_TIME_FEATURE,
    QUANTILES,
    LogBaselineModel,
    UtilizationPriorModel,
    feature_importance,
)
from perfpredict.estimators.targets import BASELINE_CORRECTION, targets_for

METADATA_FILE = "metadata.json"


@dataclass
class TrainedSet:
    """What ``train_dataset`` produced for one dataset."""

    name: str
    out_dir: Path
    metadata: dict[str, Any]
    files: list[Path] = field(default_factory=list)


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("perfpredict", "xgboost", "lightgbm", "scikit-learn", "numpy", "scipy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _booster_of(model):
    if isinstance(model, LogBaselineModel):  # time and memory (StructuredMemoryModel) baselines
        return model.residual_  # None for the baseline alone
    if isinstance(model, UtilizationPriorModel):
        return model.inner_
    return model


#: targets every model set has (the Predictor's card needs them); the NVML ones are skipped when not measured
REQUIRED_TARGETS = ("iter_time", "peak_memory")

#: families the grouped cross-validation needs: one held out, and the interval calibration's nested
#: leave-one-family-out holds out a second from the rest
MIN_CV_FAMILIES = 3
#: the random 5-fold comparison needs a row per fold
MIN_CV_ROWS = 5


def train_dataset(dataset_csv: str | Path, out_root: str | Path, *, kinds: tuple[str, ...] = MODEL_KINDS,
                  evaluate: bool = True, progress=None) -> TrainedSet:
    """Evaluate and fit every target of one dataset; write the artefacts under ``out_root/<dataset>/``.

    The set is written into a staging folder beside it and swapped in only once complete: a run that fails or
    is interrupted leaves the previous set as it was (a half-replaced set mixed new boosters with old metadata
    and predicted 150x off without a word)."""
    name = Path(dataset_csv).stem  # the set's name (TrainingData.name), known before the file is read
    final = Path(out_root) / name
    out = Path(out_root) / f".{name}.training"
    old = Path(out_root) / f".{name}.replaced"
    for p in (final, old, out):  # a file where the set (or its swap folders) goes would be hidden, then fail
        if p.exists() and not p.is_dir():
            raise PerfPredictError(f"{p} is a file, not a model set folder: move it away, or train into another "
                                   f"--out", source=str(p), step="train")
    if old.is_dir() and not final.exists():
        old.rename(final)  # a swap cut between its two renames: the previous set comes back first
    data = load_training_data(dataset_csv)
    try:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
    except OSError as e:
        raise PerfPredictError(f"cannot write the model set there: {e.strerror or e}", source=str(out),
                               step="train") from None
    try:
        meta, files = _train_into(data, dataset_csv, out, kinds=kinds, evaluate=evaluate, progress=progress)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    try:
        out.rename(final)
    except BaseException:
        if old.exists() and not final.exists():
            old.rename(final)
        shutil.rmtree(out, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return TrainedSet(data.name, final, meta, [final / f.name for f in files])


def _train_into(data: TrainingData, dataset_csv: str | Path, out: Path, *, kinds: tuple[str, ...],
                evaluate: bool, progress) -> tuple[dict[str, Any], list[Path]]:
    say = progress or (lambda msg: None)
    meta: dict[str, Any] = {
        "dataset": data.name, "device_kind": data.device_kind, "device_name": data.device_name, "mode": data.mode,
        "precision": data.precision, "cpu_id": data.cpu_id,
        "dataset_sha256": data.sha256, "rows": len(data), "families": sorted(set(data.families.tolist())),
        "architectures": len(set(data.configs.tolist())),
        "batch_sizes": sorted(set(int(b) for b in data.batch)), "provenance": data.provenance,
        "feature_names": feature_names(data.device_kind), "quantiles": list(QUANTILES), "versions": library_versions(),
        "trained_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "targets": {},
    }
    files = []
    for spec in targets_for(data.device_kind, data.mode).values():
        keep = valid_rows(data, spec)
        if not keep.any():
            why = f"column {spec.column} is missing, empty or never a positive number"
            if spec.name not in REQUIRED_TARGETS:
                # e.g. NVML unavailable (MIG, a container without it): the set still predicts time and memory
                meta.setdefault("skipped_targets", {})[spec.name] = why
                say(f"{data.name}/{spec.name}: skipped ({why})")
                continue
            raise PerfPredictError(f"no usable rows for target {spec.name}: {why}", source=str(dataset_csv),
                                   step="train")
        fams = sorted(set(data.families[keep].tolist()))
        if evaluate and len(fams) < MIN_CV_FAMILIES:
            raise PerfPredictError(f"target {spec.name}: cross-validation by family needs at least "
                                   f"{MIN_CV_FAMILIES} families, the rows have {len(fams)} ({', '.join(fams)}); "
                                   f"add measurements of other families or pass --no-eval to fit without scores",
                                   source=str(dataset_csv), step="train")
        if evaluate and keep.sum() < MIN_CV_ROWS:
            raise PerfPredictError(f"target {spec.name}: cross-validation needs at least {MIN_CV_ROWS} rows, the "
                                   f"dataset has {int(keep.sum())} usable; add measurements or pass --no-eval to fit "
                                   "without scores", source=str(dataset_csv), step="train")
        X, y = data.X[keep], data.column(spec.column)[keep]
        aux = None if spec.aux_column is None else data.column(spec.aux_column)[keep]
        entry: dict[str, Any] = {"column": spec.column, "unit": spec.unit, "transform": spec.transform,
                                 "safe_quantile": spec.safe_quantile, "rows": int(keep.sum())}
        kind = spec.default_kind
        if evaluate:
            tk = tuple(k for k in spec.kinds
                       if k in kinds or k == "none" or (k == BASELINE_CORRECTION and "xgboost" in kinds))
            say(f"{data.name}/{spec.name}: cross-validating {', '.join(tk)}")
            entry["evaluation"] = evaluate_target(data, spec, tk)
            kind = entry["evaluation"]["shipped_kind"]
        entry["point_kind"] = kind
        # How far the Predictor widens the [q10, q90] interval for unseen families, in log space on each side
        # (0: not calibrated).
        entry["interval_log_margin"] = (entry["evaluation"]["interval_calibration"]["margin"] if evaluate else 0.0)
        # ... for inputs whose saved-tensor counts the Predictor had to estimate (ONNX files)
        entry["interval_log_margin_estimated_counts"] = (
            entry["evaluation"]["interval_calibration_estimated_counts"]["margin"] if evaluate else 0.0)
        # ... and how much its upper quantile grows per doubling past the largest trained batch (memory only)
        if evaluate and "batch_extrapolation" in entry["evaluation"]:
            entry["upper_extrapolation_log_margin_per_doubling"] = \
                entry["evaluation"]["batch_extrapolation"]["margin_per_doubling"]
        say(f"{data.name}/{spec.name}: fitting the final {kind} point and interval models on {len(y)} rows")
        point = spec.fit_model(spec.make_model(kind), X, y, aux, groups=data.families[keep])
        quant = spec.fit_model(spec.make_quantile_model(kind), X, y, aux)
        entry["files"] = {}
        if _booster_of(point) is not None:
            pf = out / f"{spec.name}.xgb.json"
            _booster_of(point).save_model(pf)
            files.append(pf)
            entry["files"]["point"] = pf.name
        if _booster_of(quant) is not None:
            qf = out / f"{spec.name}.quantile.xgb.json"
            _booster_of(quant).save_model(qf)
            files.append(qf)
            entry["files"]["quantile"] = qf.name
        if isinstance(point, LogBaselineModel):
            entry["baseline_coef"] = {"point": point.coef_.tolist(), "quantile": quant.coef_.tolist(),
                                      "terms": ["const", *("+".join(t) for t in point.terms)],
                                      "term_features": [list(t) for t in point.terms]}
            if quant.residual_quantiles_ is not None:
                entry["residual_quantiles"] = quant.residual_quantiles_.tolist()
        names = feature_names(data.device_kind)
        if isinstance(point, UtilizationPriorModel):
            # one prior for both boosters: NNLS on the same rows is deterministic
            entry["prior_coef"] = {"busy": point.busy_coef_.tolist(), "idle": point.idle_coef_.tolist(),
                                   "busy_terms": [list(t) for t in BUSY_TERMS],
                                   "idle_terms": [["const"], *(list(t) for t in IDLE_TERMS)],
                                   "feature": PRIOR_FEATURE}
            names = [*names, PRIOR_FEATURE]
            if point.time_coef_ is not None:
                entry["prior_coef"] |= {"time": point.time_coef_.tolist(),
                                        "time_terms": [["const"], *(list(t) for t in point.time_terms)],
                                        "time_feature": PRIOR_TIME_FEATURE}
                names = [*names, PRIOR_TIME_FEATURE]
        entry["feature_importance"] = (feature_importance(_booster_of(point), names)
                                       if _booster_of(point) is not None else {})
        fit_pred = spec.from_model(point.predict(X), X)
        entry["train_mape"] = float(np.mean(np.abs(fit_pred - y) / y))
        meta["targets"][spec.name] = entry

    profiled = out / "profiled.json"
    profiled.write_text(json.dumps(_profiled_table(data), indent=1) + "\n")
    files.append(profiled)
    coloc = Path(dataset_csv).with_name(Path(dataset_csv).stem + "_colocation.csv")
    if coloc.exists():
        from perfpredict.estimators.interference import fit_from_colocation_csv

        try:
            model, info = fit_from_colocation_csv(coloc)
        except (KeyError, ValueError, UnicodeDecodeError) as e:
            raise PerfPredictError(f"the co-location pairs do not parse ({type(e).__name__}: {str(e)[:160]})",
                                   source=str(coloc), step="train") from None
        (out / "interference.json").write_text(json.dumps(info, indent=2) + "\n")
        files.append(out / "interference.json")
        meta["interference"] = {k: info[k] for k in ("file", "sha256", "pairs", "points", "r2_linear", "r2_quadratic",
                                                    "leave_one_job_out")}
    (out / METADATA_FILE).write_text(json.dumps(meta, indent=2, default=float) + "\n")
    (out / "report.md").write_text(render_report(meta))
    files += [out / METADATA_FILE, out / "report.md"]
    return meta, files


def _profiled_table(data: TrainingData) -> dict[str, Any]:
    """Per architecture: its features and what was measured at each batch size."""
    archs: dict[str, Any] = {}
    columns = ("iter_time_s", "peak_memory_bytes", "nvml_process_bytes", "gpu_utilization")
    # read through TrainingData.column: a text cell in a column this set does not train on is one named error
    values = {c: data.column(c) for c in columns}
    for i, (arch, row) in enumerate(zip(data.archs, data.rows)):
        # the kernel rows stay out: the nearest-model distance does not use them, and they would double the file
        feats = {k: v for k, v in arch.as_dict().items() if k != "kernel_nodes"}
        e = archs.setdefault(row["config"], {"family": row["family"], "features": feats, "points": {}})
        # what training takes for no measurement (blank, NaN, zero or negative; evaluate.valid_rows) is none here
        # too: the Predictor's nearest-profiled fallback carries these values over as measured (a 0 utilisation
        # became a 0.5% answer with an interval of no width)
        e["points"][row["batch_size"]] = {c: (float(values[c][i]) if np.isfinite(values[c][i]) and values[c][i] > 0
                                              else None) for c in columns}
    return {"dataset": data.name, "device_name": data.device_name, "architectures": archs}


def train_all(datasets_dir: str | Path = "datasets", out_root: str | Path = "trained_models", *,
              kinds: tuple[str, ...] = MODEL_KINDS, evaluate: bool = True, progress=None,
              only: list[str] | None = None,
              on_done: Callable[[TrainedSet], None] | None = None) -> list[TrainedSet]:
    """Train every training dataset under ``datasets_dir`` (or the ones whose stem is in ``only``).

    ``on_done(set)`` is called as each set is saved (report it, log it), so a later set's failure loses
    nothing: a dataset that cannot be trained is skipped, the others go on, and a :class:`PerfPredictError`
    naming every failure is raised at the end."""
    from perfpredict.errors import UsageError

    sets = training_datasets(datasets_dir)
    if not sets:
        raise PerfPredictError("no training datasets (*.csv beside zoo_features.csv)", source=str(datasets_dir),
                               step="train")
    if only:
        unknown = set(only) - {p.stem for p in sets}
        if unknown:
            raise UsageError(f"no training dataset {', '.join(sorted(unknown))}; available: "
                             + ", ".join(p.stem for p in sets), step="train")
        sets = [p for p in sets if p.stem in only]
    done: list[TrainedSet] = []
    failed: list[PerfPredictError] = []
    for p in sets:
        try:
            ts = train_dataset(p, out_root, kinds=kinds, evaluate=evaluate, progress=progress)
        except PerfPredictError as e:
            failed.append(e)
            continue
        done.append(ts)
        if on_done is not None:
            on_done(ts)
    if len(failed) == 1 and len(sets) == 1:
        raise failed[0]
    if failed:
        kept = f"; {len(done)} other set(s) trained and saved" if done else ""
        raise PerfPredictError(f"{len(failed)} of {len(sets)} dataset(s) not trained{kept} (the model sets already "
                               f"there are left as they were): " + " | ".join(map(str, failed)), step="train")
    return done


# ---------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------
def _fmt(m: dict[str, float], spec_name: str) -> str:
    s = f"{m['mape']:.1%} | {m['median_ape']:.1%} | {m['rmsle']:.3f}"
    return s + (f" | {m['rmsle_fraction']:.3f}" if spec_name == "gpu_utilization" else "")


def rows_left_out(meta: dict[str, Any], name: str) -> str | None:
    """Why target ``name`` of a trained set's ``meta`` was fitted on fewer rows than the set has (blank, NaN, zero
    or negative values are no measurement), or None; the train summary and report.md both say it."""
    t = meta["targets"][name]
    if t.get("rows", meta["rows"]) >= meta["rows"]:
        return None
    prior = " (or its prior column)" if name == "gpu_utilization" else ""
    return (f"Fitted on {t['rows']} of the {meta['rows']} rows; the other {meta['rows'] - t['rows']} have no "
            f"positive finite `{t['column']}`{prior}")


def render_report(meta: dict[str, Any]) -> str:
    lines = [f"# Estimators for `{meta['dataset']}` ({meta['device_name']})", "",
             f"{meta['rows']} measured {'training steps' if meta.get('mode', 'train') == 'train' else 'inference passes'}"
             f" ({meta.get('mode', 'train')} mode), {meta['architectures']} architectures in "
             f"{len(meta['families'])} famil{'y' if len(meta['families']) == 1 else 'ies'} "
             f"({', '.join(meta['families'])}), batch sizes "
             f"{meta['batch_sizes']}. Dataset SHA-256 `{meta['dataset_sha256'][:16]}…`, trained "
             f"{meta['trained_at']}.", "",
             "Leave-one-family-out CV: each prediction comes from a model that never saw that family. Random "
             "5-fold CV (same families in training) for contrast. GPU-utilisation RMSLE is on percent "
             "(Horus' scale; the fraction-scale RMSLE is beside it), iteration time's on milliseconds.", ""]
    for name, why in meta.get("skipped_targets", {}).items():
        lines += [f"Not trained: **{name}** ({why}); predicted cards of this set leave it out.", ""]
    for run in meta.get("provenance", {}).get("runs", []):
        s = run.get("speed_sentinel") or {}
        warning = drift_warning(s.get("drift"), s.get("noise"), f"The collection run of {run.get('started_at')}")
        if warning:
            lines += [f"**{warning}.**", ""]
    for name, t in meta["targets"].items():
        ev = t.get("evaluation")
        lines += [f"## {name} ({t['unit']})", ""]
        left_out = rows_left_out(meta, name)
        if left_out:
            lines += [f"{left_out}.", ""]
        if not ev:
            lines += ["(not evaluated)", ""]
            continue
        extra = " | RMSLE (0-1)" if name == "gpu_utilization" else ""
        lines += [f"| model | family-CV MAPE | median APE | RMSLE{extra} | random-CV MAPE |",
                  "|---|---|---|---|---|" + ("---|" if extra else "")]
        for kind, m in ev["family_cv"].items():
            label = {"none": "physical baseline alone", BASELINE_CORRECTION: "baseline × xgboost correction"}.get(
                kind, kind)
            if t["transform"] == "structured_memory" and kind != "none":
                label = f"baseline × {kind} correction"
            lines.append(f"| {label} | {_fmt(m, name)} | {ev['random_cv'][kind]['mape']:.1%} |")
        q = ev["quantiles_family_cv"]
        shipped = {"none": "the physical baseline alone", BASELINE_CORRECTION: "the physical baseline × an XGBoost "
                   "correction"}.get(ev["shipped_kind"], ev["shipped_kind"])
        cal = ev.get("interval_calibration")
        cal_text = ("" if not cal else
                    f" Calibrated for unseen families (conformalized quantile regression: q10 divided and q90 "
                    f"multiplied by ×{np.exp(cal['margin']):.2f}, the log margin that makes 80% of the family-CV "
                    f"points fall inside), checked by nested family CV: covers "
                    f"{cal['nested_family_cv']['coverage']:.0%}, the upper quantile under-predicts "
                    f"{cal['nested_family_cv']['upper_under_predicts']:.0%}, median width "
                    f"{cal['nested_family_cv']['median_rel_width']:.0%} of the value (the multiplicative widening "
                    f"used before, ×{cal['scale']:.2f} in log space: covers "
                    f"{cal['nested_family_cv_scale']['coverage']:.0%}, median width "
                    f"{cal['nested_family_cv_scale']['median_rel_width']:.0%}). The Predictor serves the "
                    f"calibrated interval.")
        cal_e = ev.get("interval_calibration_estimated_counts")
        if cal_e:
            cal_text += (f" For an input without saved-tensor counts (an ONNX file; counts estimated from the "
                         f"graph, the estimator fitted without the held-out family) the margin is "
                         f"×{np.exp(cal_e['margin']):.2f}: nested family CV covers "
                         f"{cal_e['nested_family_cv']['coverage']:.0%}, median width "
                         f"{cal_e['nested_family_cv']['median_rel_width']:.0%}.")
        ext = ev.get("batch_extrapolation")
        if ext and "held_out" in ext:
            chk = ext["check"]
            cal_text += (f" Past the largest batch size an architecture was measured at, the q90 grows by "
                         f"×{np.exp(ext['margin_per_doubling']):.3f} per doubling: with {ext['held_out']} held out "
                         f"({ext['architectures']} architectures, {ext['points']} points), the q90 under-predicts "
                         f"{ext['upper_under_predicts']:.0%} of them, and the margin is what keeps 90% at or below "
                         f"it. Checked by fitting each architecture's two smallest batch sizes and predicting its "
                         f"larger ones: the q90 under-predicts {chk['upper_under_predicts']:.0%} of "
                         f"{chk['points']} points, with the margin {chk['upper_under_predicts_with_margin']:.0%}.")
        lines += ["", f"Shipped: **{shipped}**. Its interval model, family CV: {q['interval']} covers "
                      f"{q['coverage']:.0%} of the measurements (nominal 80%); the upper quantile under-predicts "
                      f"{q['upper_under_predicts']:.0%}; median interval width {q['median_rel_width']:.0%} of the value."
                      + cal_text,
                  "", f"Per held-out family ({shipped}): " + ", ".join(
                      f"{f} {m['mape']:.1%}" for f, m in ev["per_family_shipped"].items()), ""]
        if "baseline_coef" in t and t["unit"] == "bytes":
            c = t["baseline_coef"]["point"]
            lines += [f"Baseline fitted on all rows: {c[0] / 2**20:.1f} MiB + {c[1]:.2f} × parameter bytes + "
                      f"{c[2]:.2f} × "
                      + _MEMORY_WORDS.get(t["baseline_coef"]["terms"][2], t["baseline_coef"]["terms"][2])
                      + " per iteration"
                      + "".join(f" + {ci:.2f} × {_SCALED_WORDS[term]}" if term in _SCALED_WORDS
                                else f" + {ci / 2**20:.1f} MiB for models with {_BLOCK_WORDS.get(term, term)}"
                                for ci, term in zip(c[3:], t["baseline_coef"]["terms"][3:]))
                      + ".", ""]
        elif "baseline_coef" in t:
            lines += ["Baseline fitted on all rows: "
                      + _time_baseline_text(t["baseline_coef"]["point"], t["baseline_coef"]["term_features"])
                      + ", per iteration.", ""]
        if "prior_coef" in t:
            b, i = t["prior_coef"]["busy"], t["prior_coef"]["idle"]
            lines += [f"Physical prior (the feature `{t['prior_coef']['feature']}` = log busy/idle seconds per "
                      f"iteration), fitted on all rows from utilisation × iteration time: GPU busy = "
                      f"{b[0] * 1e15:.1f} fs per forward MAC + {b[1] * 1e12:.2f} ps per activation byte + "
                      f"{b[2] * 1e12:.2f} ps per parameter byte + {b[3] * 1e6:.2f} µs per graph node; idle = "
                      f"{i[0] * 1e3:.2f} ms + {i[1] * 1e6:.2f} µs per graph node + {i[2] * 1e12:.2f} ps per "
                      f"input byte.", ""]
            if "time" in t["prior_coef"]:
                lines += [f"Second prior column (`{t['prior_coef']['time_feature']}` = log of GPU busy seconds "
                          f"over the time baseline's seconds per iteration); that baseline, fitted on all rows: "
                          + _time_baseline_text(t["prior_coef"]["time"], t["prior_coef"]["time_terms"][1:]) + ".",
                          ""]
        if t["feature_importance"]:
            lines += ["Top features (XGBoost total gain): " + ", ".join(
                f"{k} {v:.2f}" for k, v in list(t["feature_importance"].items())[:8]), ""]
    if "interference" in meta:
        i = meta["interference"]
        lines += ["## Interference (Horus slowdown vs cumulative GPU utilisation)", "",
                  f"{i['pairs']} measured pairs ({i['points']} points), R² linear branch {i['r2_linear']}, "
                  f"quadratic branch {i['r2_quadratic']}: see interference.json.", ""]
        lojo = i.get("leave_one_job_out")
        if lojo:
            lines += [f"On a job left out of the fit ({lojo['jobs']} jobs, each refitted without its pairs): "
                      f"slowdown RMSE {lojo['rmse']} (MAE {lojo['mae']}), against {lojo['rmse_mean_slowdown']} "
                      f"(MAE {lojo['mae_mean_slowdown']}) for the training pairs' mean slowdown.", ""]
    return "\n".join(lines)


#: How the report names a memory baseline's per-iteration bytes term.
_MEMORY_WORDS = {"log_act_bytes_per_iter": "activation bytes",
                 "log_peak_live_bytes_iter": "peak live activation bytes",
                 "log_saved_bytes_iter": "saved-tensor bytes (as CUDA's kernels keep them)",
                 "log_saved_cpu_bytes_iter": "saved-tensor bytes (as the CPU's kernels keep them)"}
#: How the report names a memory baseline's fixed blocks.
_BLOCK_WORDS = {"any:ops_matmul": "a GEMM (BLAS workspace)",
                "any:ops_onednn": "a oneDNN op (convolution, LSTM: its code and JIT kernels)"}
#: How the report names a memory baseline's later terms that scale with a byte count (not indicators).
_SCALED_WORDS = {"log_code_bytes_infer": "the library code its op types page in (inference)",
                 "log_code_bytes_train": "the library code its op types page in (training)",
                 # the training step's transient term (models.TRANSIENT_TERM): bytes, not a fixed block
                 "log_peak_live_bytes_iter": "the forward pass's peak of live activation bytes per iteration"}
#: How the report names a time baseline's per-step terms.
_STEP_WORDS = {"log_recurrent_steps": "recurrent time step (LSTM, GRU, RNN)",
               "log_stepwise_rnn_gate_steps": "gate × time step of GRU/RNN layers (run step by step on the CPU)"}


#: How the report names a time baseline's other terms: (unit scale, unit, words).
_TIME_WORDS = {
    ("log_macs_per_iter",): (1e15, "fs", "per forward MAC"),
    ("log_act_bytes_per_iter", "log_param_bytes"): (1e12, "ps", "per byte of activations and parameters"),
    ("log_act_bytes_per_iter", "log_dense_param_bytes"): (
        1e12, "ps", "per byte of activations and non-embedding parameters (embedding tables are read by lookup)"),
    ("log_kernel_ns_infer",): (1.0, "×", "the sum of its kernels' costs measured on the CPU (inference)"),
    ("log_kernel_ns_train",): (1.0, "×", "the sum of its kernels' costs measured on the CPU (training step)"),
    ("log_kernel_calls",): (1e6, "µs", "per kernel of a forward pass (launches, forward and backward)"),
}


def _time_baseline_text(coef: Sequence[float], term_features: Sequence[Sequence[str]]) -> str:
    """A time baseline in words: its constant (``coef[0]``, seconds) and each term after it."""
    return f"{coef[0] * 1e3:.2f} ms" + "".join(" + " + _time_term_text(ci, term)
                                                for ci, term in zip(coef[1:], term_features))


def _time_term_text(coef: float, term: Sequence[str]) -> str:
    """One term of a time baseline in words (``coef`` is in seconds per raw unit of ``term``)."""
    key = tuple(term)
    if len(key) == 1 and key[0] in _STEP_WORDS:
        return f"{coef * 1e6:.1f} µs per {_STEP_WORDS[key[0]]}"
    scale, unit, words = _TIME_WORDS.get(key, (1.0, "×", " + ".join(key)))
    if unit == "×":  # a term in nanoseconds: its coefficient is a plain factor
        return f"{coef * 1e9:.2f} × {words}"
    return f"{coef * scale:.1f} {unit} {words}"


def read_csv(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
