"""How well does `perfpredict calibrate` carry a CPU set's iteration time to another CPU?

The committed datasets hold the same zoo points measured on three CPU models (the first EPYC VM, the Xeon VM
and the Zen 4 EPYC VM), so every ordered pair (source set, target CPU) can be scored from real measurements.
For each pair the calibration is done exactly as `perfpredict calibrate` does it, on the target's own rows at
the reference suite (:data:`REFERENCE_CONFIGS` x :data:`REFERENCE_BATCHES`): the factor is the median of
measured / predicted by the *shipped* source set (which, like the command, has seen the reference models), and
the margin comes from their spread. It is then scored on every other row of the target:

- "seen": the shipped source set's predictions (the zoo architectures were in its training data: the error is
  the CPU transfer alone);
- "unseen family": the source set's leave-one-family-out predictions (each family predicted by the estimators
  refitted without it), scaled by the same factor: a user's model of a kind the source never saw, on a CPU it
  never saw. Its q10-q90 interval (the source's, widened by its own margin, then by the calibration's) is
  checked for coverage, nominal 80%.

Beside them: the error before calibration, and the target CPU's own family-CV error (what collecting a
25-minute dataset there and training on it gives).

Then the calibrations `perfpredict calibrate` really made (``datasets/calibrations/*.json``: the reference steps it
timed, with provenance) are scored on the held-out points measured on the same CPU (``datasets/*_calibration_check
.csv``, matched by ``cpu_id``; the reference architectures left out): the source set's MAPE as shipped, and
calibrated.

    python benchmarks/cpu_calibration.py             # train and infer sets (about 1 min on 2 vCPUs)
    python benchmarks/cpu_calibration.py --mode train
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

import numpy as np

from perfpredict.script_args import describe

REPO = Path(__file__).resolve().parents[1]
SETS = ("cpu_epyc_2vcpu", "cpu_xeon_2vcpu", "cpu_epyc_genoa_2vcpu")


def _keyed(data, values) -> dict[tuple[str, int], float]:
    return {(str(c), int(b)): float(v) for c, b, v in zip(data.configs, data.batch, values)}


def source_predictions(name: str, predictor) -> dict:
    """Per (config, batch) of the source's own rows: the shipped median, and the family-CV out-of-fold median and
    q10/q90 (widened by the margin the source set ships)."""
    from perfpredict.estimators.data import load_training_data
    from perfpredict.estimators.design import design_matrix
    from perfpredict.estimators.evaluate import (
        _subset,
        calibrated,
        out_of_fold,
        quantile_predictions_out_of_fold,
        valid_rows,
    )
    from perfpredict.estimators.targets import targets_for

    data = load_training_data(REPO / "datasets" / f"{name}.csv")
    meta = json.loads((REPO / "trained_models" / name / "metadata.json").read_text())["targets"]["iter_time"]
    spec = targets_for(data.device_kind, data.mode)["iter_time"]
    sub = _subset(data, valid_rows(data, spec))
    ms = predictor.sets[name]
    shipped, _ = ms.targets["iter_time"].predict(design_matrix(list(zip(sub.archs, sub.batch)), device_kind="cpu"))
    _, oof = out_of_fold(data, spec, meta["evaluation"]["shipped_kind"])
    _, q, _ = quantile_predictions_out_of_fold(data, spec)
    q = calibrated(q, margin=float(meta.get("interval_log_margin", 0.0)))
    return {"shipped": _keyed(sub, shipped), "oof": _keyed(sub, oof), "q10": _keyed(sub, q[:, 0]),
            "q90": _keyed(sub, q[:, -1]), "archs": {str(c): a for c, a in zip(sub.configs, sub.archs)}}


@functools.cache  # read once per run: the pair table and --alternatives both ask
def measured(name: str) -> tuple[dict[tuple[str, int], float], dict[str, str], float]:
    """The target's measured times per (config, batch), each config's family, and its own family-CV MAPE."""
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(REPO / "datasets" / f"{name}.csv")
    y = data.column("iter_time_s")
    ok = np.isfinite(y) & (y > 0)
    meta = json.loads((REPO / "trained_models" / name / "metadata.json").read_text())["targets"]["iter_time"]
    ev = meta["evaluation"]
    own = ev["family_cv"][ev["shipped_kind"]]["mape"]
    return ({(str(c), int(b)): float(v) for c, b, v in zip(data.configs[ok], data.batch[ok], y[ok])},
            {str(c): str(f) for c, f in zip(data.configs, data.families)}, own)


def score_pair(src: dict, target: dict[tuple[str, int], float]) -> dict:
    from perfpredict.estimators.device_calibration import REFERENCE_BATCHES, REFERENCE_CONFIGS, fit_factor

    refs = [(c, b) for c in REFERENCE_CONFIGS for b in REFERENCE_BATCHES]
    missing = [r for r in refs if r not in target or r not in src["shipped"]]
    if missing:
        raise SystemExit(f"reference points missing from the datasets: {missing[:3]}")
    log_factor, log_margin = fit_factor([math.log(target[r] / src["shipped"][r]) for r in refs])
    f, m = math.exp(log_factor), math.exp(log_margin)
    keys = [k for k in target if k not in set(refs) and k in src["oof"]]
    y = np.array([target[k] for k in keys])

    def mape(p):
        return float(np.mean(np.abs(np.asarray(p) / y - 1)))

    shipped = np.array([src["shipped"][k] for k in keys])
    oof = np.array([src["oof"][k] for k in keys])
    lo = np.array([src["q10"][k] for k in keys]) * f / m
    hi = np.array([src["q90"][k] for k in keys]) * f * m
    return {"points": len(keys), "factor": f, "margin": m,
            "seen_raw": mape(shipped), "seen_calibrated": mape(shipped * f),
            "unseen_raw": mape(oof), "unseen_calibrated": mape(oof * f),
            "coverage": float(np.mean((y >= lo) & (y <= hi))), "above_q90": float(np.mean(y > hi)),
            "width": float(np.median(hi / lo - 1))}


def alternatives(src: dict, target: dict[tuple[str, int], float], families: dict[str, str], ms) -> dict:
    """The unseen-family MAPE of one factor against local factors: the ratio of the nearest reference
    architecture (graph-feature distance, :meth:`ModelSet.standardized`) and the median of the three nearest, each
    either over the whole suite or with the row's own family's reference left out (a user's model of a kind the
    suite lacks)."""
    from perfpredict.estimators.device_calibration import REFERENCE_BATCHES, REFERENCE_CONFIGS, fit_factor

    refs = [(c, b) for c in REFERENCE_CONFIGS for b in REFERENCE_BATCHES]
    lr = {r: math.log(target[r] / src["shipped"][r]) for r in refs}
    one, _ = fit_factor(list(lr.values()))
    per_ref = np.array([np.mean([lr[(c, b)] for b in REFERENCE_BATCHES]) for c in REFERENCE_CONFIGS])
    ref_points = ms.standardized([src["archs"][c] for c in REFERENCE_CONFIGS])
    keys = [k for k in target if k not in set(refs) and k in src["oof"]]
    configs = sorted({k[0] for k in keys})
    dist = dict(zip(configs, (np.linalg.norm(ref_points - a, axis=1) for a in
                              ms.standardized([src["archs"][c] for c in configs]))))
    ref_family = np.array([c.split("-", 1)[0] for c in REFERENCE_CONFIGS])
    errs: dict[str, list[float]] = {k: [] for k in ("one factor", "nearest", "3 nearest", "nearest, own family out",
                                                     "3 nearest, own family out")}
    for k in keys:
        p, y, d = src["oof"][k], target[k], dist[k[0]]
        errs["one factor"].append(abs(p * math.exp(one) / y - 1))
        for tag, dd in (("", d), (", own family out", np.where(ref_family == families[k[0]], np.inf, d))):
            order = np.argsort(dd)
            errs["nearest" + tag].append(abs(p * math.exp(per_ref[order[0]]) / y - 1))
            errs["3 nearest" + tag].append(abs(p * math.exp(np.median(per_ref[order[:3]])) / y - 1))
    return {k: float(np.mean(v)) for k, v in errs.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--mode", choices=("train", "infer", "both"), default="both")
    ap.add_argument("--alternatives", action="store_true",
                    help="also score local factors (the nearest reference architectures' ratios) against one factor")
    args = ap.parse_args(argv)
    from perfpredict.predictor import Predictor

    pred = Predictor.load(REPO / "trained_models")
    for mode in (("train", "infer") if args.mode == "both" else (args.mode,)):
        names = [s + ("" if mode == "train" else "_infer") for s in SETS]
        sources = {n: source_predictions(n, pred) for n in names}
        print(f"\n{mode}: iteration-time MAPE on the target CPU's rows outside the reference suite")
        print(f"{'source set':28s} {'target CPU':28s} {'points':>6s} {'factor':>7s} | {'seen: raw':>9s} "
              f"{'calibrated':>10s} | {'unseen family: raw':>18s} {'calibrated':>10s} {'q10-q90 covers':>14s} "
              f"{'above q90':>9s} {'width':>6s} | {'own dataset (family CV)':>23s}")
        for t in names:
            target, _, own = measured(t)
            for s in names:
                if s == t:
                    continue
                r = score_pair(sources[s], target)
                print(f"{s:28s} {t:28s} {r['points']:6d} {r['factor']:7.3f} | {r['seen_raw']:9.1%} "
                      f"{r['seen_calibrated']:10.1%} | {r['unseen_raw']:18.1%} {r['unseen_calibrated']:10.1%} "
                      f"{r['coverage']:14.0%} {r['above_q90']:9.0%} {r['width']:6.0%} | {own:23.1%}")
        if args.alternatives:
            print(f"\n{mode}: unseen-family MAPE, one factor against local factors")
            header = None
            for t in names:
                target, families, _ = measured(t)
                for s in names:
                    if s == t:
                        continue
                    a = alternatives(sources[s], target, families, pred.sets[s])
                    if header is None:
                        header = list(a)
                        print(f"{'source set':28s} {'target CPU':28s} " + " ".join(f"{h:>25s}" for h in header))
                    print(f"{s:28s} {t:28s} " + " ".join(f"{a[h]:25.1%}" for h in header))
    real_calibrations(pred, ("train", "infer") if args.mode == "both" else (args.mode,))
    return 0


def score_real_calibrations(pred, modes: tuple[str, ...] = ("train", "infer")) -> list[dict]:
    """Every committed calibration of ``modes``, scored on every held-out check measured on its CPU in its mode
    (the reference architectures left out): the source set's MAPE and q10-q90 coverage as shipped and
    calibrated, and how many minutes lay between the calibration and the check's start."""
    import datetime as dt

    from perfpredict.estimators.data import load_training_data
    from perfpredict.estimators.design import design_matrix
    from perfpredict.estimators.device_calibration import REFERENCE_CONFIGS, CalibratedModelSet, TimeCalibration

    checks = []
    for csv in sorted((REPO / "datasets").glob("*_calibration_check.csv")):
        run = json.loads(csv.with_suffix(".meta.json").read_text())["runs"][0]
        d = load_training_data(csv)
        y = d.column("iter_time_s")
        keep = np.isfinite(y) & (y > 0) & ~np.isin(d.configs, REFERENCE_CONFIGS)
        checks.append({"name": csv.stem, "cpu_id": run["device_info"].get("cpu_id"), "mode": d.mode,
                       "started": dt.datetime.fromisoformat(run["started_at"]), "y": y[keep],
                       "X": design_matrix(list(zip(d.archs, d.batch)), device_kind="cpu")[keep]})
    rows = []
    for path in sorted((REPO / "datasets" / "calibrations").glob("*.json")):
        calib = TimeCalibration.load(path)
        if calib.mode not in modes:
            continue
        cal = CalibratedModelSet(pred.sets[calib.source_set], calib)
        made = dt.datetime.fromisoformat(calib.created_at)
        for c in checks:
            if c["cpu_id"] != calib.cpu_id or c["mode"] != calib.mode:
                continue
            y = c["y"]
            raw, q_raw = cal.source.targets["iter_time"].predict(c["X"])
            got, q = cal.targets["iter_time"].predict(c["X"])
            rows.append({"calibration": path.stem, "made": calib.created_at[:16], "check": c["name"],
                         "minutes_apart": (c["started"] - made).total_seconds() / 60, "points": len(y),
                         "factor": cal.factor, "spread": math.exp(cal.log_margin),
                         "mape_shipped": float(np.mean(np.abs(raw / y - 1))),
                         "mape_calibrated": float(np.mean(np.abs(got / y - 1))),
                         "covers_shipped": float(np.mean((y >= q_raw[:, 0]) & (y <= q_raw[:, -1]))),
                         "covers_calibrated": float(np.mean((y >= q[:, 0]) & (y <= q[:, -1])))})
    return rows


def real_calibrations(pred, modes: tuple[str, ...]) -> None:
    """Print :func:`score_real_calibrations`."""
    print("\ncalibrations measured by `perfpredict calibrate` (datasets/calibrations/), on held-out points measured on "
          "the same CPU (check started this many minutes after the calibration)")
    print(f"{'calibration':42s} {'made':>16s} {'check':36s} {'min':>5s} {'factor':>7s} {'spread':>6s} | "
          f"{'MAPE: as shipped':>16s} {'calibrated':>10s} | {'q10-q90 covers: as shipped':>26s} {'calibrated':>10s}")
    for r in score_real_calibrations(pred, modes):
        print(f"{r['calibration']:42s} {r['made']:>16s} {r['check']:36s} {r['minutes_apart']:5.0f} {r['factor']:7.3f} "
              f"{r['spread']:6.2f} | {r['mape_shipped']:16.1%} {r['mape_calibrated']:10.1%} | "
              f"{r['covers_shipped']:26.0%} {r['covers_calibrated']:10.0%}")


if __name__ == "__main__":
    raise SystemExit(main())
