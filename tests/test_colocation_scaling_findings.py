"""Findings of the co-location / scaling / comm-model plumbing scan.

1. A co-location whose solo run (n = 1) failed, or a scaling section whose k = 1 run failed (the one-rank run
   holds the whole global batch, so it is the one that runs out of memory), leaves the other points without
   relative numbers (None). The CLI's summary formatted those Nones and ended the profile with an internal
   TypeError (exit 70) after the card was written.
2. The GENIE comm model dropped failed sPR runs and failed placements without a word on the card.
"""

from __future__ import annotations

import io
import types

from rich.console import Console

from perfpredict.card import ColocationInfo, ColocationPoint, ScalingInfo, ScalingPoint
from perfpredict.cli import _print_extended
from perfpredict.profile.comm_profile import measure_comm_model
from perfpredict.profile.group_request import GroupTiming
from perfpredict.profile.scaling import Placement
from perfpredict.workload.spec import WorkloadRef

QUICK = GroupTiming(warmup_iters=2, warmup_s=0.05, window_s=0.3, min_iters=5, max_iters=60, barrier_timeout_s=60)


def _card(colocation=None, scaling=None):
    return types.SimpleNamespace(colocation=colocation, scaling=scaling, comm_model=None, speedup_curve=None,
                                 sensitivity=None, errors=[], notes=[])


def _printed(card) -> str:
    buf = io.StringIO()
    _print_extended(card, Console(file=buf, width=200))
    return buf.getvalue()


def test_summary_prints_copies_whose_solo_run_failed():
    co = ColocationInfo(batch_size=16, window_s=1.0, device="cpu", points=[
        ColocationPoint(copies=1, batch_size=16, status="timeout", error="copy0: timed out", device="cpu"),
        ColocationPoint(copies=2, batch_size=16, status="ok", per_copy_samples_per_s=[5.0, 5.0],
                        aggregate_samples_per_s=10.0, device="cpu")])
    out = _printed(_card(colocation=co))
    assert "co-location ×2" in out and "10.0 samples/s" in out


def test_summary_prints_ranks_whose_one_rank_run_failed():
    sc = ScalingInfo(global_batch=16, backend="gloo", device="cpu", points=[
        ScalingPoint(workers=1, workers_per_node=1, global_batch=16, local_batch=16, status="oom",
                     error="rank0: out of memory", device="cpu"),
        ScalingPoint(workers=2, workers_per_node=2, global_batch=16, local_batch=8, status="ok",
                     samples_per_s=100.0, device="cpu")])
    out = _printed(_card(scaling=sc))
    assert "DDP k=2" in out and "100.0 samples/s" in out


BIG_FAILS = """
import torch
import torch.nn as nn

def build_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

def example_inputs(batch_size):
    if batch_size > 8:
        raise RuntimeError("stand-in for out of memory above batch 8")
    return torch.randn(batch_size, 32)
"""


def test_comm_model_says_which_measurements_failed(write_model):
    ref = WorkloadRef("file", str(write_model(BIG_FAILS)))
    # local batches 4, 8, 16: sPR at 16 fails; <1,2> at 8 and 16 (local 4 and 8) run
    card = measure_comm_model(ref, [8, 16], placements=[Placement(1, 1), Placement(1, 2)], timing=QUICK,
                              timeout_s=120)
    assert len(card.placements) == 2
    assert card.note is not None and "local batch 16" in card.note and "stand-in for out of memory" in card.note
    assert "[4, 8]" in card.spr_source
