"""perfpredict.sim.parallel.map_runs, the experiments' sweeps at once: local worker processes and Ray tasks give
the serial results, in the inputs' order, and report each one as it ends."""

from __future__ import annotations

import math
import os
import time

import pytest

from perfpredict.errors import UsageError
from perfpredict.sim.parallel import map_runs


def _slow_square(x: int) -> tuple[int, int, int]:
    time.sleep(0.05 * (4 - x % 4))  # later inputs end first
    return x, x * x, os.getpid()


def _small_simulation(seed: int) -> dict:
    from perfpredict.sim.run import run_simulation

    run = run_simulation("synergy:n=60,load=6", "2x8", "fifo", "tune", seed=seed)
    return {k: (None if isinstance(v, float) and math.isnan(v) else v)  # NaN (no value) != NaN
            for k, v in run.metrics.to_dict().items() if not k.endswith("wall_s")}


@pytest.mark.parametrize("mode", [{"workers": 2}, {"ray_address": "local", "workers": 3}])
def test_workers_and_ray_give_the_serial_results_in_order(mode):
    seen: list[int] = []
    got = map_runs(_slow_square, range(8), on_result=lambda i, r: seen.append(i), **mode)
    assert [(x, y) for x, y, _ in got] == [(x, x * x) for x in range(8)]
    assert sorted(seen) == list(range(8))
    assert os.getpid() not in {pid for *_, pid in got}  # they ran elsewhere
    sims = map_runs(_small_simulation, [0, 1, 2], **mode)
    assert sims == [_small_simulation(k) for k in (0, 1, 2)]


def test_serial_runs_here_and_a_bad_worker_count_is_refused():
    assert [pid for *_, pid in map_runs(_slow_square, [1, 2])] == [os.getpid()] * 2
    with pytest.raises(UsageError, match="workers must be a whole number >= 1"):
        map_runs(_slow_square, [1], workers=0)
