"""Non-negative least squares in two unknowns, solved exactly (the rate model's α, β and GENIE's γ, λγ)."""

from __future__ import annotations

import numpy as np


def nnls2(A: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """min ||A x − y|| subject to x ≥ 0 for two unknowns, exactly. By KKT the optimum is the unconstrained
    (minimum-norm) solution if it is feasible, else the best solution with one unknown pinned at 0, else 0.
    Closed form instead of ``scipy.optimize.nnls``: no scipy import on the fit's path."""
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    if np.all(x >= 0):
        return float(x[0]), float(x[1])
    best, best_res = (0.0, 0.0), float(y @ y)
    for j in (0, 1):
        col = A[:, j]
        denom = float(col @ col)
        v = max(0.0, float(col @ y) / denom) if denom > 0 else 0.0
        cand = np.zeros(2)
        cand[j] = v
        res = float(np.sum((A @ cand - y) ** 2))
        if res < best_res:
            best, best_res = (float(cand[0]), float(cand[1])), res
    return best
