"""Findings of the property scan of the profilers' measuring logic (src/perfpredict/profile/)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from perfpredict.card import ThroughputPoint


def _card_measured_at(*batches: int):
    from tests.test_card import build_card

    card, _ = build_card()
    card.throughput = [ThroughputPoint(batch_size=b, status="ok", samples_per_s=100.0 * b, iter_time_s=0.01,
                                       device="cpu") for b in batches]
    return card


def _batches_used(monkeypatch, cores: int, batches=(8, 16, 32), **settings) -> dict[str, int]:
    """The batch size run_extended hands each section on a machine with ``cores`` CPUs (the sections are
    stand-ins that record it: the choice of batch is what is checked, not a measurement)."""
    from perfpredict.profile import extended, scaling

    got: dict[str, int] = {}
    monkeypatch.setattr(scaling, "max_workers", lambda device: cores)
    monkeypatch.setattr(extended, "_colocation", lambda card, ref, batch, *_: got.setdefault("colocation", batch))
    monkeypatch.setattr(extended, "_scaling", lambda card, ref, batch, *_: got.setdefault("scaling", batch))
    monkeypatch.setattr(extended, "_speedup", lambda card: None)
    card = _card_measured_at(*batches)
    extended.run_extended(card, SimpleNamespace(ref=None), extended.ExtendedSettings(comm_model=False, **settings),
                          save=lambda: None)
    return got


@pytest.mark.parallel_safe  # compares no times
@pytest.mark.parametrize("cores", [3, 6, 12])
def test_co_location_alone_runs_at_the_largest_measured_batch(monkeypatch, cores):
    """docs/profiling.md: the sections run "at one reference batch size (the largest measured one up to 64)". On
    a machine whose core count is not a power of two, co-location alone ran at a batch rounded down to a
    multiple of the core count (30 on 6 cores, 24 on 12), one the sweep never measured."""
    assert _batches_used(monkeypatch, cores, colocation=True) == {"colocation": 32}


@pytest.mark.parallel_safe  # compares no times
@pytest.mark.parametrize("cores", [3, 6, 12, 48])
def test_the_reference_batch_splits_over_every_default_rank_count(monkeypatch, cores):
    """Without --workers the scaling section measures k = 1, 2, 4, ... (powers of two that fit). The batch was
    rounded to a multiple of the core count instead: on 6 cores 32 became 30, which k = 4 does not divide, so
    k = 4 was dropped as "does not split evenly"; on 48 cores 64 became 48, losing k = 32."""
    got = _batches_used(monkeypatch, cores, (8, 16, 32, 64), scaling=True, colocation=True)
    batch = got["scaling"]
    assert got["colocation"] == batch
    assert batch == 64, batch  # the largest measured: every power of two up to 32 divides it


@pytest.mark.parallel_safe  # compares no times
def test_explicit_worker_counts_all_split_the_reference_batch(monkeypatch):
    """--workers 1,3,4 on 12 cores: the batch must split over 3 and 4 both (it was rounded to a multiple of 4
    only: 32, which k = 3 does not divide)."""
    got = _batches_used(monkeypatch, 12, scaling=True, workers=(1, 3, 4))
    assert got["scaling"] % 3 == 0 and got["scaling"] % 4 == 0, got
