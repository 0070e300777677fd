"""Horus (seed 004, §4.2): the placement cost of eq. 7-10, k-means job queues and weighted-fair picking.

These are the pieces of Algorithm 1, free of any simulator state, so they can be tested by hand:

* :func:`placement_cost` — eq. 7: ``Cost_jng = ω1·C^GMem + ω2·C^GUtil`` with ``C^GMem = (UR^GMem_ng + GMem_j) /
  CP^GMem_ng`` (eq. 8) and ``C^GUtil = f(UR^GUtil_ng + GUtil_j)`` (eq. 9-10), ``f`` the interference model
  (:func:`perfpredict.sim.sharing.slowdown_model`: linear up to 100 % cumulative utilisation, quadratic beyond).
  "We set all weights equally by default": ω1 = ω2 = 1.
* :func:`job_features` — the four clustering features of §4.2.2: (1) number of tasks, (2) predicted GPU
  utilisation, (3) GPUs per task, (4) estimated GPU memory. A job is taken to run one task per node it spans
  (``σ = ⌈λ / GPUs per node⌉`` tasks of ``λ / σ`` GPUs), the paper's λ and σ of Algorithm 1.
* :func:`kmeans_l1` — "the L1 Distance metric is used to identify similar jobs" with k-means: Lloyd iterations
  with L1 assignment and the L1-optimal centre (the coordinate-wise median), on features scaled to [0, 1]
  (the paper does not say how it scales them; unscaled, memory in bytes would be the only feature that counts).
  Deterministic: the initial centres are the jobs at evenly spaced quantiles of the summed scaled features.
* :func:`weighted_fair_quota` — §4.2.2: queue ``x`` weighs ``w_x = max{Len(Q_x), Med(Q_x) × Len(Q_x)}`` (median
  waiting time times length; the max keeps it non-zero when every job just arrived), and contributes
  ``w_x / Σ w × β`` of the β jobs of a scheduling round (largest remainders, capped at the queue's length, the
  rest going to the other queues by weight).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["job_features", "kmeans_l1", "placement_cost", "weighted_fair_quota"]


def placement_cost(used_mem_gb: np.ndarray, cap_mem_gb: np.ndarray, used_util: np.ndarray, job_mem_gb: float,
                   job_util: float, slowdown: Callable[[float], float], w_mem: float = 1.0,
                   w_util: float = 1.0) -> np.ndarray:
    """Eq. 7-10 for one job on every device given: ``w_mem·(UR_mem + GMem_j)/CP_mem + w_util·f(UR_util + GUtil_j)``."""
    used_mem = np.asarray(used_mem_gb, float)
    c_mem = (used_mem + job_mem_gb) / np.asarray(cap_mem_gb, float)
    u_after = np.asarray(used_util, float) + job_util
    many = getattr(slowdown, "many", None)
    c_util = (np.asarray(many(u_after), float) if many is not None
              else np.fromiter((slowdown(float(u)) for u in u_after), float, count=u_after.size))
    return w_mem * c_mem + w_util * c_util


def job_features(gpus: float, util: float, mem_gb: float, gpus_per_node: int) -> tuple[float, float, float, float]:
    """(tasks, predicted utilisation, GPUs per task, memory GB) of a job asking for ``gpus`` GPUs."""
    lam = max(1, math.ceil(gpus - 1e-9))
    sigma = max(1, math.ceil(lam / max(1, gpus_per_node)))
    return float(sigma), float(util), lam / sigma, float(mem_gb)


def _scale(X: np.ndarray) -> np.ndarray:
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.where(hi - lo > 1e-12, hi - lo, 1.0)
    return (X - lo) / span


def kmeans_l1(X: np.ndarray | Sequence[Sequence[float]], k: int, iters: int = 25) -> np.ndarray:
    """Cluster labels 0..k'-1 (k' <= k, no empty cluster) of the rows of ``X`` (see the module docstring).

    Labels are ordered by cluster centre (smallest summed scaled features first), so equal inputs give equal
    labels whatever the row order's ties."""
    X = np.asarray(X, float)
    n = len(X)
    if n == 0:
        return np.zeros(0, int)
    k = max(1, min(int(k), n))
    if k == 1:
        return np.zeros(n, int)
    Z = _scale(X)
    distinct = np.unique(Z, axis=0)
    k = min(k, len(distinct))
    if k == 1:
        return np.zeros(n, int)
    order = np.lexsort((np.arange(len(distinct)), distinct.sum(axis=1)))
    pick = order[np.round(np.linspace(0, len(distinct) - 1, k)).astype(int)]
    centres = distinct[pick].copy()
    labels = np.full(n, -1)
    for _ in range(iters):
        d = np.abs(Z[:, None, :] - centres[None, :, :]).sum(axis=2)
        new = d.argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(k):
            members = Z[labels == c]
            if len(members):
                centres[c] = np.median(members, axis=0)
    used = np.unique(labels)
    rank = np.argsort(np.argsort(centres[used].sum(axis=1) + 1e-12 * used))
    remap = {int(c): int(r) for c, r in zip(used, rank, strict=True)}
    return np.array([remap[int(c)] for c in labels], int)


def weighted_fair_quota(lengths: Sequence[int], median_waits: Sequence[float], beta: int) -> list[int]:
    """How many of the β jobs of a round each queue gives (see the module docstring)."""
    lengths = [int(n) for n in lengths]
    w = np.array([max(n, m * n) if n > 0 else 0.0 for n, m in zip(lengths, median_waits, strict=True)], float)
    quota = [0] * len(lengths)
    left = min(int(beta), sum(lengths))
    while left > 0:
        open_ = [i for i, n in enumerate(lengths) if quota[i] < n]
        total = float(sum(w[i] for i in open_))
        shares = {i: (w[i] / total if total > 0 else 1.0 / len(open_)) * left for i in open_}
        give = {i: min(int(math.floor(shares[i])), lengths[i] - quota[i]) for i in open_}
        handed = sum(give.values())
        rest = left - handed
        # largest remainders (ties: heavier queue, then lower index) for the rest, one each
        for i in sorted(open_, key=lambda i: (-(shares[i] - math.floor(shares[i])), -w[i], i)):
            if rest <= 0:
                break
            if quota[i] + give[i] < lengths[i]:
                give[i] += 1
                rest -= 1
        for i, g in give.items():
            quota[i] += g
        left -= sum(give.values())
        if sum(give.values()) == 0:
            break
    return quota
