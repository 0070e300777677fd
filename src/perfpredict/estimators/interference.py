"""Horus's interference model refitted from perfpredict's own co-location measurements (one per device type).

Reads a ``*_colocation.csv`` written by ``profilers/collect_colocation.py`` and fits
:func:`perfpredict.fit.interference.fit_interference` (linear up to 100% cumulative utilisation, quadratic
above) to both jobs' slowdowns of every measured pair, and scores it on jobs it has not seen:
:func:`leave_one_job_out` refits it without every pair a job is in and predicts that job's slowdowns, which
is what a scheduler asks of it for a new job. The mean slowdown of the same training pairs is the bar a
model must clear to say anything about an unseen job.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

from perfpredict.errors import PerfPredictError
from perfpredict.fit.interference import InterferenceFitError, InterferenceModel, fit_interference


def colocation_points(path: str | Path) -> tuple[list[float], list[float], int]:
    """(cumulative utilisation, slowdown) points and the number of pairs they came from."""
    us, ys, pairs = [], [], 0
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") != "ok" or not r.get("cumulative_gpu_utilization"):
                continue
            pairs += 1
            u = float(r["cumulative_gpu_utilization"])
            for k in ("job_slowdown", "partner_slowdown"):
                if r.get(k):
                    us.append(u)
                    ys.append(float(r[k]))
    return us, ys, pairs


def colocation_rows(path: str | Path) -> list[tuple[str, str, float, float]]:
    """(job, partner, cumulative utilisation, job's slowdown): both directions of every ok pair."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") != "ok" or not r.get("cumulative_gpu_utilization"):
                continue
            u = float(r["cumulative_gpu_utilization"])
            for job, partner, k in ((r["job"], r["partner"], "job_slowdown"),
                                    (r["partner"], r["job"], "partner_slowdown")):
                if r.get(k):
                    out.append((job, partner, u, float(r[k])))
    return out


def architecture_of(label: str) -> str:
    """A job label without its batch size (``<config>-b32`` → ``<config>``): one architecture at two batch sizes
    is one job to hold out, or the fold would keep it in training."""
    return re.sub(r"-b\d+$", "", label)


def leave_one_job_out(rows: list[tuple[str, str, float, float]]) -> dict[str, Any] | None:
    """Each job's slowdowns predicted by the model fitted on the pairs without it (both as job and partner);
    a job is an architecture (:func:`architecture_of`), all its batch sizes held out together.

    Returns RMSE and MAE of the model and of the training pairs' mean slowdown (the no-information bar),
    over the held-out jobs' slowdowns, and the number of jobs; None with fewer than 3 jobs or when a fold
    cannot be fitted. Only the slowdowns of the held-out job count (its partners' are in other folds)."""
    import numpy as np

    rows = [(architecture_of(a), architecture_of(b), u, y) for a, b, u, y in rows]
    jobs = sorted({r[0] for r in rows})
    if len(jobs) < 3:
        return None
    err_m, err_c = [], []
    for j in jobs:
        train = [r for r in rows if j not in (r[0], r[1])]
        test = [r for r in rows if r[0] == j]
        try:
            model = fit_interference([r[2] for r in train], [r[3] for r in train])
        except InterferenceFitError:
            return None
        mean = float(np.mean([r[3] for r in train]))
        y = np.array([r[3] for r in test])
        err_m.extend(np.asarray(model.predict([r[2] for r in test]), dtype=float) - y)
        err_c.extend(mean - y)
    em, ec = np.array(err_m), np.array(err_c)
    return {"jobs": len(jobs), "points": len(em),
            "rmse": round(float(np.sqrt(np.mean(em ** 2))), 4), "mae": round(float(np.mean(np.abs(em))), 4),
            "rmse_mean_slowdown": round(float(np.sqrt(np.mean(ec ** 2))), 4),
            "mae_mean_slowdown": round(float(np.mean(np.abs(ec))), 4)}


def fit_from_colocation_csv(path: str | Path) -> tuple[InterferenceModel, dict[str, Any]]:
    from perfpredict.estimators.data import file_sha256

    us, ys, pairs = colocation_points(path)
    try:
        model = fit_interference(us, ys)
    except InterferenceFitError as e:
        raise PerfPredictError(str(e), source=str(path), step="fit interference") from None
    info = {"file": Path(path).name, "sha256": file_sha256(path), "pairs": pairs, "points": len(us),
            **model.to_dict(), "leave_one_job_out": leave_one_job_out(colocation_rows(path))}
    return model, info
