"""Findings of the property scan of host calibration (perfpredict calibrate): the steadiness rule and loading."""

from __future__ import annotations

import math
import random
from pathlib import Path

from perfpredict.estimators.device_calibration import CALIBRATION_FILE, ReferencePoint, TimeCalibration
from perfpredict.predictor import Predictor

REPO = Path(__file__).resolve().parents[1]


def _with_ends(ends: list[list[float]]) -> TimeCalibration:
    """Two reference points first timed at 1 s, then ``ends`` (one list of end timings per point)."""
    refs = [ReferencePoint(config=f"c{i}", family="mlp", batch_size=8, measured_s=1.0) for i in range(len(ends))]
    reps = [ReferencePoint(config=f"c{i}", family="mlp", batch_size=8, measured_s=t)
            for i, e in enumerate(ends) for t in e]
    return TimeCalibration(name="n", source_set="s", mode="train", precision="fp32", device_name="d",
                           created_at="2026-11-27T00:00:00+00:00", references=refs, repeats=reps,
                           architectures={f"c{i}": {} for i in range(len(ends))})


def test_a_speed_up_is_weighed_against_the_noise_as_its_mirror_slow_down_is():
    """The noise is slower over faster; a drift to x0.85 is 17.6% in that frame (as x1.176 is), so with 16% of
    noise both are a drift. It was compared as |0.85 - 1| = 15% and passed as steady."""
    slow = _with_ends([[1 / 0.85, 1 / 0.85 * 1.16, 1 / 0.85], [1 / 0.85] * 3])
    fast = _with_ends([[0.85, 0.85 * 1.16, 0.85], [0.85] * 3])
    assert slow.speed_noise == fast.speed_noise == 0.16
    assert slow.unsteady and fast.unsteady
    rng = random.Random(0)
    for _ in range(300):
        d, n = math.exp(rng.uniform(-0.5, 0.5)), rng.uniform(0.0, 0.5)
        a = _with_ends([[d, d * (1 + n), d], [d] * 3])
        b = _with_ends([[1 / d, (1 + n) / d, 1 / d], [1 / d] * 3])
        assert a.unsteady == b.unsteady, (d, n)


def test_a_second_file_of_the_same_calibration_name_is_reported_not_swapped_in(tmp_path):
    """A copy of a calibration folder (``<name>_old``) held the same name: it replaced the one in ``<name>/``
    because it sorted later, and nothing said so."""
    root = tmp_path / "models"
    root.mkdir()
    (root / "cpu_xeon_2vcpu").symlink_to(REPO / "trained_models" / "cpu_xeon_2vcpu", target_is_directory=True)
    cal = REPO / "datasets" / "calibrations"
    here = TimeCalibration.load(cal / "cpu_xeon_2vcpu_on_intel_f6m207.json")
    other = TimeCalibration.load(cal / "cpu_xeon_2vcpu_on_intel_f6m207_run4.json").model_copy(
        update={"name": here.name})
    for folder, c in ((here.name, here), (here.name + "_old", other)):
        (root / folder).mkdir()
        c.save(root / folder / CALIBRATION_FILE)
    pred = Predictor.load(root)
    got = pred.sets[here.name]
    assert got.path == root / here.name / CALIBRATION_FILE
    assert got.calibration.created_at == here.created_at
    assert any(here.name + "_old" in line and "also" in line for line in pred.unusable_calibrations)
