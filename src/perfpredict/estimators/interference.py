"""Horus's interference model refitted from perfpredict's own co-location measurements (one per device type).

Reads a ``*_colocation.csv`` written by ``profilers/collect_colocation.py`` and fits
:func:`perfpredict.fit.interference.fit_interference` (linear up to 100% cumulative utilisation, quadratic
above) to both jobs' slowdowns of every measured pair.
"""

from __future__ import annotations

import csv
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


def fit_from_colocation_csv(path: str | Path) -> tuple[InterferenceModel, dict[str, Any]]:
    from perfpredict.estimators.data import file_sha256

    us, ys, pairs = colocation_points(path)
    try:
        model = fit_interference(us, ys)
    except InterferenceFitError as e:
        raise PerfPredictError(str(e), source=str(path), step="fit interference") from None
    info = {"file": Path(path).name, "sha256": file_sha256(path), "pairs": pairs, "points": len(us),
            **model.to_dict()}
    return model, info
