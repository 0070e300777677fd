"""Optimistic CPU search (Synergy §3.1): which CPU counts it probes, and how well it rebuilds the curve.

The curves are recorded (a dict from CPU count to samples/s), so the probe logic is tested exactly; the
recorder also fails the test if any CPU count is measured twice.
"""

from __future__ import annotations

import math
import os
import re

import pytest

from perfpredict.profile.sensitivity import (
    CpuSearchResult,
    exhaustive_cpu_sweep,
    max_relative_error,
    optimistic_cpu_search,
)

CPUS = list(range(1, 17))


class Recorded:
    """A recorded throughput curve served as ``measure(c)``; remembers the calls, refuses repeats."""

    def __init__(self, curve: dict[int, float]) -> None:
        self.curve = curve
        self.calls: list[int] = []

    def __call__(self, c: int) -> float:
        assert c not in self.calls, f"{c} CPUs measured twice"
        self.calls.append(c)
        return self.curve[c]


def saturating(c: int) -> float:
    return min(c, 6) * 150.0


def noise(c: int) -> float:
    """Deterministic ±3%: alternating sign, varying size."""
    return 0.03 * (1 if c % 2 else -1) * (0.5 + 0.5 * math.cos(1.7 * c) ** 2)


def search(fn, cpus=CPUS, **kw) -> tuple[CpuSearchResult, Recorded]:
    rec = Recorded({c: fn(c) for c in cpus})
    return optimistic_cpu_search(rec, cpus, **kw), rec


def truth(fn, cpus=CPUS) -> list[float]:
    return [fn(c) for c in sorted(cpus)]


def test_flat_curve_probes_only_the_endpoints():
    res, rec = search(lambda c: 500.0)
    assert rec.calls == [16, 1]  # the maximum first, as the paper starts there
    assert res.probed == ((16, 500.0), (1, 500.0))
    assert res.n_probes == 2
    assert res.curve == tuple([500.0] * 16)
    assert res.demand() == 1


def test_nearly_flat_within_threshold_is_flat():
    res, _ = search(lambda c: 500.0 + 2.0 * c)  # 502 .. 532: 5.6% apart
    assert res.n_probes == 2
    assert max_relative_error(res.curve, truth(lambda c: 500.0 + 2.0 * c)) < 1e-12


def test_linear_curve_is_reconstructed_exactly():
    fn = lambda c: 100.0 * c
    res, rec = search(fn)
    assert res.n_probes > 2
    assert len(set(rec.calls)) == res.n_probes
    assert max_relative_error(res.curve, truth(fn)) < 1e-12
    # Where neighbours differ by >= 10% (low c) every value is measured.
    assert {1, 2, 3, 4, 5} <= set(res.probed_cpu_values)


def test_saturating_curve_costs_at_most_half_the_exhaustive_sweep():
    res, rec = search(saturating)
    full = exhaustive_cpu_sweep(saturating, CPUS)
    assert full.n_probes == 16
    assert res.n_probes <= full.n_probes // 2
    assert max_relative_error(res.curve, full.curve) <= 0.10
    # The knee is found exactly: all of 1..6 plus the plateau's ends are measured, nothing inside it.
    assert rec.calls[:2] == [16, 1]
    assert {1, 2, 3, 4, 5, 6} <= set(res.probed_cpu_values)
    assert not set(res.probed_cpu_values) & set(range(9, 16))
    assert res.demand(0.1) == 6
    assert res.demand(0.2) == 5


def test_noisy_saturating_curve_stays_within_tolerance():
    fn = lambda c: saturating(c) * (1 + noise(c))
    assert max(abs(noise(c)) for c in CPUS) <= 0.03
    res, _ = search(fn)
    full = exhaustive_cpu_sweep(fn, CPUS)
    assert res.n_probes < full.n_probes
    assert max_relative_error(res.curve, full.curve) <= 0.10  # against what an exhaustive sweep measures
    assert max_relative_error(res.curve, truth(saturating)) <= 0.10  # and against the noiseless curve
    assert res.demand(0.1) == 6


def test_interpolates_in_cpu_units_on_non_uniform_values():
    cpus = [32, 1, 8, 2, 16, 4]  # any order
    fn = lambda c: 100.0 * min(c, 4)
    res, rec = search(fn, cpus)
    assert res.cpu_values == (1, 2, 4, 8, 16, 32)
    assert rec.calls == [32, 1, 4, 2]  # 4..32 is flat: 8 and 16 are interpolated
    assert res.curve == (100.0, 200.0, 400.0, 400.0, 400.0, 400.0)


def test_interpolated_values_lie_on_the_line_between_probes():
    # 1 and 4 agree within 10%, so 2 and 3 are not measured (the spike at 3 is missed: the blind spot).
    res, rec = search({1: 100.0, 2: 104.0, 3: 999.0, 4: 108.0}.__getitem__, [1, 2, 3, 4])
    assert rec.calls == [4, 1]
    assert res.curve == pytest.approx((100.0, 100.0 + 8.0 / 3, 100.0 + 16.0 / 3, 108.0))


def test_a_bump_both_endpoints_miss_is_the_documented_blind_spot_and_max_gap_guards_it():
    fn = lambda c: 300.0 if 6 <= c <= 10 else 100.0
    blind, _ = search(fn)
    assert blind.n_probes == 2 and blind.value_at(8) == 100.0  # declared flat: the bump is invisible
    guarded, _ = search(fn, max_gap=4)
    assert guarded.value_at(8) == 300.0
    assert max_relative_error(guarded.curve, truth(fn)) < 1e-12  # both edges of the bump are found
    assert guarded.n_probes < 16


def test_single_value():
    res, rec = search(lambda c: 42.0, [4])
    assert rec.calls == [4]
    assert res.cpu_values == (4,) and res.curve == (42.0,) and res.n_probes == 1
    assert res.demand() == 4


def test_two_values_are_both_probed_once():
    res, rec = search(lambda c: 10.0 * c, [2, 8])
    assert rec.calls == [8, 2] and res.curve == (20.0, 80.0)


def test_zero_throughput_is_allowed_and_flat():
    res, _ = search(lambda c: 0.0)
    assert res.n_probes == 2 and res.curve == tuple([0.0] * 16)


@pytest.mark.parametrize("values, error, message", [
    ([], ValueError, "empty"),
    ([0, 1], ValueError, "positive"),
    ([-2, 4], ValueError, "positive"),
    ([1, 2, 2, 4], ValueError, "duplicates"),
    ([1, 2.5], TypeError, "integers"),
    ([True, 2], TypeError, "integers"),
])
def test_bad_cpu_values_are_rejected(values, error, message):
    for fn in (lambda m, v: optimistic_cpu_search(m, v), exhaustive_cpu_sweep):
        with pytest.raises(error, match=message):
            fn(lambda c: 1.0, values)


@pytest.mark.parametrize("threshold", [0.0, 1.0, -0.1, 1.5])
def test_threshold_must_be_in_the_open_unit_interval(threshold):
    with pytest.raises(ValueError, match="threshold"):
        optimistic_cpu_search(lambda c: 1.0, CPUS, threshold=threshold)


@pytest.mark.parametrize("gap", [0, -1, 2.0])
def test_max_gap_must_be_a_positive_integer(gap):
    with pytest.raises(ValueError, match="max_gap"):
        optimistic_cpu_search(lambda c: 1.0, CPUS, max_gap=gap)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_unusable_measurements_are_rejected(bad):
    with pytest.raises(ValueError, match="finite and >= 0"):
        optimistic_cpu_search(lambda c: bad, CPUS)


def test_measurement_errors_propagate():
    def measure(c: int) -> float:
        if c == 1:
            raise RuntimeError("worker died at 1 CPU")
        return 10.0

    with pytest.raises(RuntimeError, match="worker died"):
        optimistic_cpu_search(measure, CPUS)


def test_result_is_frozen_and_demand_validates():
    res, _ = search(saturating)
    with pytest.raises(AttributeError):
        res.curve = ()  # type: ignore[misc]
    with pytest.raises(ValueError, match="threshold"):
        res.demand(1.0)
    with pytest.raises(ValueError, match="not one of"):
        res.value_at(17)


def test_max_relative_error():
    assert max_relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert max_relative_error([1.1, 2.0], [1.0, 2.0]) == pytest.approx(0.1)
    assert max_relative_error([2.0], [1.0]) == pytest.approx(1.0)
    assert max_relative_error([1.0], [2.0]) == pytest.approx(0.5)  # relative to the reference
    assert max_relative_error([0.0], [0.0]) == 0.0
    assert max_relative_error([1.0], [0.0]) == math.inf
    with pytest.raises(ValueError, match="length"):
        max_relative_error([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        max_relative_error([], [])


@pytest.mark.parametrize("hook, says", [
    ('def make_dataset():\n    raise FileNotFoundError("/data/imagenet missing")\n',
     "make_dataset() failed: FileNotFoundError: /data/imagenet missing"),
    ("def make_dataset():\n    return 42\n", "returned a int, not a dataset"),
    ("class DS:\n    def __len__(self): return 4\n    def __getitem__(self, i): raise KeyError(i)\n"
     "def make_dataset():\n    return DS()\n", "reading the dataset's items to size it failed: KeyError"),
])
def test_a_broken_make_dataset_is_the_sections_error_not_an_internal_one(write_model, hook, says):
    """A make_dataset() that raised (or returned no dataset) ended `profile --sensitivity` with 'internal error
    ... please report it', exit 70, and no MLflow run; it is now a PerfPredictError the section records."""
    from perfpredict.errors import PerfPredictError
    from perfpredict.profile.sensitivity_profile import dataset_stats
    from perfpredict.workload.spec import WorkloadRef
    from tests.conftest import TINY_MODEL

    path = write_model(TINY_MODEL + "\n" + hook)
    with pytest.raises(PerfPredictError, match=re.escape(says)) as e:
        dataset_stats(WorkloadRef("file", str(path)))
    assert e.value.step == "make_dataset"


def test_a_pipelines_own_dataloader_workers_are_not_counted_as_other_load():
    """The pipeline probe's DataLoader workers are child processes whose CPU time os.times() counts only once
    they exit: without them the probe's own workers would read as a busy host."""
    import subprocess
    import sys
    import time

    from perfpredict.profile.host_load import OtherLoad

    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat here")
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: pass"])
    try:
        time.sleep(0.3)  # started
        mine, everyone = OtherLoad(with_children=True), OtherLoad()
        mine.start(), everyone.start()
        time.sleep(1.5)
        got_mine, got_everyone = mine.stop(), everyone.stop()
    finally:
        child.kill()
        child.wait()
    assert got_mine is not None and got_everyone is not None
    assert got_everyone - got_mine > 0.3  # the busy child: up to one CPU (less beside other tests), ours with with_children


def test_busy_now_sees_another_process_keeping_a_cpu_busy():
    """`perfpredict calibrate` checks the host with it before timing its references."""
    import subprocess
    import sys
    import time

    from perfpredict.profile.host_load import busy_now

    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat here")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        got = busy_now(1.0)
    finally:
        hog.kill()
        hog.wait()
    assert got is not None and got > 0.7


def test_sensitivity_probes_record_a_busy_host_and_the_card_says_so(tmp_path):
    """`profile --sensitivity` on a busy host bought CPUs from probes other processes had slowed, and said
    nothing; each probe now records the CPUs others kept busy, and the profile notes the ones that competed."""
    import subprocess
    import sys

    from perfpredict.profile.sensitivity_profile import BUSY_NOTE, busy_host_note, profile_sensitivity
    from perfpredict.workload.spec import WorkloadRef
    from tests.conftest import EXAMPLES

    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat here")
    cpus = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        sens = profile_sensitivity(WorkloadRef("file", str(EXAMPLES / "image_pipeline.py")), 16, cpu_values=[1],
                                   window_s=1.0)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert sens.profiled_cpu_values == [1] and len(sens.probed_other_cpus) == 1
    assert sens.probed_other_cpus[0] is not None and sens.probed_other_cpus[0] > 0.5 * cpus
    note = busy_host_note(sens, cpus)
    assert note is not None and note.startswith(BUSY_NOTE) and "probe(s) at 1 CPU(s)" in note
    idle = sens.model_copy(update={"probed_other_cpus": [0.02]})
    assert busy_host_note(idle, cpus) is None
