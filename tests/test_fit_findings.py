"""Defects a property scan of ``perfpredict.fit`` found (session 40): a rate model whose card did not load back, a
selected quadratic with an infinite time between two measured batch sizes, half batch sizes, hand-edited speedup
fits that crashed ``show`` or bent the curve, aggregate co-location sigmas, and fits of extreme numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from perfpredict.card import PerformanceCard
from perfpredict.errors import FitError, PerfPredictError
from perfpredict.fit.rate import QUADRATIC, RateModel, fit_rate_model
from perfpredict.fit.speedup import SpeedupCurve, SpeedupFitError, fit_speedup_curve
from perfpredict.sched.paper_cards import paper_card


def test_a_rate_model_with_a_throughput_dip_loads_back_from_its_card():
    """The unselected quadratic (rate -69 samples/s at batch 20) was stored, and from_card refused the card."""
    m = fit_rate_model([8, 16, 32], [1000.0, 50.0, 1000.0])
    back = RateModel.from_card(m.to_card())
    assert back.iter_time(20) == pytest.approx(m.iter_time(20)) and back.iter_time(20) > 0
    assert QUADRATIC not in [c.kind for c in m.candidates] and "falls to zero or below" in m.selection


def test_a_card_written_before_keeps_loading_without_its_unusable_candidate():
    """Cards written before the fix carry such a quadratic beside the selected linear form."""
    good = fit_rate_model([8, 16, 32, 64], [400.0, 600.0, 700.0, 750.0], kind="linear_time")
    card = good.to_card()
    bad_quadratic = card.candidates[0].model_copy(update={"kind": QUADRATIC, "target": "samples_per_s",
                                                          "coefficients": {"k0": 1.0, "k1": 1.0, "k2": -1.0}})
    card = card.model_copy(update={"candidates": [card.candidates[0], bad_quadratic]})
    back = RateModel.from_card(card)
    assert [c.kind for c in back.candidates] == ["linear_time"]
    assert back.iter_time(30) == pytest.approx(good.iter_time(30))


def test_no_selected_quadratic_answers_an_infinite_time_inside_the_measured_range():
    b, r = [21, 47, 98, 141, 199], [723.86, 571.45, 400.45, 11.0, 10.0]
    m = fit_rate_model(b, r)  # the quadratic's rate dips below zero between 141 and 199
    t = m.iter_time(np.linspace(21, 199, 400))
    assert np.all(np.isfinite(t)) and np.all(t > 0)
    # a card whose selected quadratic dips between the three batch sizes the old check sampled is refused
    from perfpredict.fit.rate import positive_within

    quad = fit_rate_model(b, r, kind=QUADRATIC)
    assert not positive_within(quad.selected, 21, 199)
    with pytest.raises(FitError, match=r"quadratic_rate gives a non-positive or infinite iteration time"):
        RateModel.from_card(quad.to_card())


def test_positive_within_is_exact_at_the_vertex():
    from perfpredict.fit.rate import Candidate, positive_within

    dips = Candidate(QUADRATIC, {"k0": 100.0, "k1": -20.0, "k2": 1.0})  # rate 0 at b = 10 only
    assert not positive_within(dips, 1, 19)
    assert positive_within(dips, 11, 19) and positive_within(dips, 1, 9)


def test_half_batch_sizes_are_refused():
    """6.5 was taken as 6: the top measured point was answered as an extrapolation, 12% off."""
    with pytest.raises(FitError, match=r"batch sizes must be whole numbers >= 1, got \[1.5, 6.5\]"):
        fit_rate_model([1.5, 2, 4, 6.5], [10.0, 12.0, 14.0, 15.0])


def test_rates_at_the_end_of_the_float_range_are_a_fit_error():
    with pytest.raises(FitError, match="cannot fit a rate model"):
        fit_rate_model([1, 2, 3, 4], [1e-310, 2e-310, 3e-310, 3.5e-310])


def _card_with_fit(tmp_path, edit):
    doc = json.loads(paper_card("mcnn").to_json())
    edit(doc["speedup_curve"]["fit"])
    path = tmp_path / "mcnn" / "card.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _set(key, value):
    def edit(fit):
        fit[key] = value
    return edit


def _knots(speedups):
    def edit(fit):
        fit["knots"]["speedup"] = speedups(fit["knots"]["speedup"])
        fit["tail"]["anchor_speedup"] = fit["knots"]["speedup"][-1]
    return edit


def _drop_speedup(fit):
    del fit["points"][0]["speedup"]


@pytest.mark.parametrize(("edit", "message"), [
    (_drop_speedup, r"points need numbers p and speedup"),
    (_set("sigma", [0.1]), r"sigma must be null or one value per point"),
    (_set("rel_uncertainty", "x"), r"rel_uncertainty and loo_rel_error must be numbers"),
    (_set("rel_uncertainty", -0.5), r"rel_uncertainty and loo_rel_error must be finite numbers >= 0, got -0.5"),
    (_set("points", 5), r"points must be a list of objects"),
    (_set("model", []), r"model \[\] is not"),
    (lambda fit: fit["tail"].update(anchor_speedup=0.5), r"the tail must start at the last knot"),
    (_knots(lambda s: [x / 5 for x in s]), r"a knot must be S\(1\) = 1.*got S\(1\) = 0.2"),
    (_knots(lambda s: [0.0, *[x * x for x in s[1:]]]), r"knot slopes must not rise"),
])
def test_a_hand_edited_speedup_fit_is_refused_when_the_card_is_read(tmp_path, edit, message):
    """Each was read: show failed with an internal error (the first five) or printed a curve that falls past
    its last knot, has S(1) = 0.2, or speeds up more per device the more it has."""
    path = _card_with_fit(tmp_path, edit)
    with pytest.raises(PerfPredictError, match=r"invalid card: speedup_curve.fit: " + message):
        PerformanceCard.load(path)
    with pytest.raises(ValueError, match=r"not a speedup curve: " + message):
        SpeedupCurve.from_dict(json.loads(path.read_text())["speedup_curve"]["fit"])


def test_show_names_the_damaged_speedup_fit(tmp_path):
    path = _card_with_fit(tmp_path, _drop_speedup)
    proc = subprocess.run([sys.executable, "-m", "perfpredict", "show", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and proc.returncode != 70, proc.stderr
    assert "speedup_curve.fit: points need numbers" in proc.stderr and "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr


def test_aggregate_colocated_throughputs_give_the_per_copy_fit_and_sigmas():
    """The totals were divided by n but their sigmas were not: co-located points weighed n times less."""
    p = np.array([0.25, 0.5, 1.0, 2.0])
    per_copy, sigma = np.array([50.0, 55.0, 100.0, 150.0]), np.array([1.0, 10.0, 1.0, 5.0])
    total = np.where(p < 1, per_copy / p, per_copy)
    total_sigma = np.where(p < 1, sigma / p, sigma)
    a = SpeedupCurve.from_throughputs(p, per_copy, sigma)
    b = SpeedupCurve.from_throughputs(p, total, total_sigma, aggregate_colocated=True)
    assert b.speedup(0.25) == pytest.approx(a.speedup(0.25))
    assert [q.sigma for q in b.points] == pytest.approx([q.sigma for q in a.points])


@pytest.mark.parametrize(("speedups", "sigma"), [
    ([1e155, 1.5e155, 2e155], None),  # squares overflow: the tail's parameter came out NaN, silently
    ([1e-160, 1.5e-160, 2e-160], None),  # LinAlgError (SVD did not converge)
    ([0.7, 1.5, 2.0], 1e-160),
])
def test_speedups_at_the_ends_of_the_float_range_are_a_fit_error(speedups, sigma):
    with pytest.raises(SpeedupFitError, match="cannot fit a speedup curve"):
        fit_speedup_curve([0.5, 2, 4], speedups, sigma)


def test_a_fit_without_cross_validation_picks_the_linear_form():
    """The docstring offers cross_validate=False; with four batch sizes it failed comparing two missing errors
    (review)."""
    m = fit_rate_model([1, 2, 4, 8], [10.0, 18.0, 30.0, 40.0], cross_validate=False)
    assert m.kind == "linear_time" and "cross-validation skipped" in m.selection
