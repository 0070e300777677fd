"""Which calibration answers a named calibration asked for in the other mode (Predictor.model_set's twins)."""

from __future__ import annotations

from perfpredict.predictor import Predictor
from tests.test_device_calibration import _calibration_from_dataset, _models_with

CPU = "GenuineIntel family 6 model 1 stepping 1; avx2"


def _calibration(target: str, source: str, name: str, made: str):
    calib, _ = _calibration_from_dataset(target, source, device_name="Some Other CPU", cpu=CPU, name=name)
    calib.created_at = made
    return calib


def test_a_calibration_asked_in_the_other_mode_gives_way_to_its_own_source_cpus_then_the_nearest_in_time(tmp_path):
    """Several inference calibrations to one CPU: the training calibration of cpu_xeon_2vcpu gives way to the
    inference calibration of cpu_xeon_2vcpu_infer made nearest to it, not to the first by file order (an EPYC
    set's, made a minute after it); a calibration with no same-source twin takes the one made nearest to it."""
    calibs = [
        _calibration("cpu_xeon_2vcpu", "cpu_xeon_2vcpu", "xeon_train", "2026-11-26T12:00:00+00:00"),
        _calibration("cpu_xeon_2vcpu", "cpu_epyc_genoa_2vcpu", "genoa_train", "2026-11-25T10:30:00+00:00"),
        _calibration("cpu_xeon_2vcpu_infer", "cpu_epyc_2vcpu_infer", "a_epyc_infer", "2026-11-26T12:01:00+00:00"),
        _calibration("cpu_xeon_2vcpu_infer", "cpu_xeon_2vcpu_infer", "xeon_infer_old", "2026-11-25T10:00:00+00:00"),
        _calibration("cpu_xeon_2vcpu_infer", "cpu_xeon_2vcpu_infer", "xeon_infer_near", "2026-11-26T12:30:00+00:00"),
    ]
    sets = ("cpu_xeon_2vcpu", "cpu_xeon_2vcpu_infer", "cpu_epyc_2vcpu_infer", "cpu_epyc_genoa_2vcpu")
    pred = Predictor.load(_models_with(tmp_path, sets, calibs))
    assert pred.unusable_calibrations == []
    assert pred.model_set("xeon_train", "infer").name == "xeon_infer_near"
    assert pred.model_set("genoa_train", "infer").name == "xeon_infer_old"  # no genoa one: the nearest in time
    assert pred.model_set("xeon_infer_old", "train").name == "xeon_train"
    assert pred.model_set("a_epyc_infer", "train").name == "xeon_train"  # no EPYC one: 12:00 is a minute away
    # a measured set still gives way to its own device's measured set, not to a calibration
    assert pred.model_set("cpu_xeon_2vcpu", "infer").name == "cpu_xeon_2vcpu_infer"
