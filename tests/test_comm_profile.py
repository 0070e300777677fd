"""GENIE placement profiling on real processes: sPR, placements over virtual nodes, fit and held-out check."""

from __future__ import annotations

import math

import pytest

from perfpredict.profile.comm_profile import default_placements, measure_comm_model
from perfpredict.profile.group_request import GroupTiming
from perfpredict.profile.netns import VirtualNodes, netns_support
from perfpredict.profile.scaling import Placement
from perfpredict.workload.spec import WorkloadRef
from tests.conftest import TINY_MODEL

QUICK = GroupTiming(warmup_iters=2, warmup_s=0.05, window_s=0.3, min_iters=5, max_iters=60, barrier_timeout_s=60)
SUPPORT = netns_support()


def test_default_placements_fit_the_devices():
    places = default_placements("cpu", cores_per_device=1, max_nodes=2)
    assert Placement(1, 1) in places and Placement(2, 1) in places
    import os

    cores = len(os.sched_getaffinity(0))
    assert all(p.workers <= cores for p in places)


def test_single_node_placements_identify_only_the_intra_node_term(write_model):
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    card = measure_comm_model(ref, [16, 32], placements=[Placement(1, 1), Placement(1, 2)], timing=QUICK,
                              timeout_s=120)
    assert card.identifiable["gamma"] is False and card.gamma is None
    assert len(card.placements) == 2 and all(p.d_node == 1 for p in card.placements)
    assert card.link.startswith("loopback")


@pytest.mark.skipif(not SUPPORT[0], reason=f"virtual network nodes unavailable: {SUPPORT[1]}")
def test_multi_node_placements_fit_gamma_lambda_and_predict_a_held_out_one(write_model):
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    with VirtualNodes(2, rate_mbit=200) as nodes:
        card = measure_comm_model(ref, [16, 32], placements=[Placement(1, 1), Placement(1, 2), Placement(2, 1)],
                                  timing=QUICK, nodes=nodes, timeout_s=120)
    assert len(card.placements) == 4
    held = [p for p in card.placements if p.held_out]
    assert len(held) == 1 and held[0].d_node == 2 and held[0].global_batch == 32
    assert card.gamma is not None and card.gamma >= 0 and card.lambda_ is not None
    assert card.holdout_rel_error is not None and math.isfinite(card.holdout_rel_error)
    assert card.holdout_rel_error == pytest.approx(
        abs(held[0].predicted_samples_per_s - held[0].samples_per_s) / held[0].samples_per_s)
    assert len(card.residuals) == 4 and "tbf 200 Mbit/s" in card.link
    assert card.model_dump(by_alias=True)["lambda"] == card.lambda_
