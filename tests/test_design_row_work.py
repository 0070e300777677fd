"""A design matrix computes only the columns its model set uses, and an architecture's batch-independent part once
however many batch sizes it is asked at, with the same bits: a CUDA set's card used to price the CPU's kernel
times it then dropped (the costliest part of a design row), as did the nearest-neighbour distance of every card,
and every batch size re-made the kernel rows, code bytes and op-group counts of its architecture."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BATCHES = [1, 8, 64, 512]
#: the per-architecture helpers a design row calls, and the per-batch-size one
COUNTED = ("priced_kernels", "code_bytes", "activation_bytes_by_group", "_group_counts", "kernel_seconds_by_mode")


@pytest.fixture(scope="module")
def predictor():
    from perfpredict import Predictor

    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def arch():
    from perfpredict.estimators.data import load_training_data

    return load_training_data(REPO / "datasets" / "cpu_epyc_2vcpu.csv").archs[0]


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """Calls of :data:`COUNTED` from the design module."""
    import perfpredict.estimators.design as design

    got: Counter = Counter()
    for name in COUNTED:
        def counted(*a, _f=getattr(design, name), _name=name, **k):
            got[_name] += 1
            return _f(*a, **k)
        monkeypatch.setattr(design, name, counted)
    return got


@pytest.mark.parametrize("kernel_rows", [True, False], ids=["kernel_rows", "op_types_only"])
def test_a_cuda_sets_card_prices_no_kernel_times(predictor, arch, calls, kernel_rows):
    """Its feature list has no kernel-time column: before, each of its batch sizes priced the kernels (and so
    did the nearest-neighbour distance, which uses architecture columns only)."""
    job = arch if kernel_rows else replace(arch, kernel_nodes=[])
    predictor.card_for(job, BATCHES, device_type="cuda_h100")
    assert calls["kernel_seconds_by_mode"] == 0


def test_a_cpu_sets_card_prices_each_batch_size_once(predictor, arch, calls):
    predictor.card_for(arch, BATCHES, device_type="cpu_epyc_2vcpu")
    assert calls["kernel_seconds_by_mode"] == len(BATCHES)


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_per_architecture_work_is_done_once_per_architecture(arch, calls, kind):
    from perfpredict.estimators.design import design_matrix

    other = replace(arch, kernel_nodes=[], name="other")
    design_matrix([(a, b) for a in (arch, other) for b in BATCHES], device_kind=kind)
    assert calls["priced_kernels"] == calls["activation_bytes_by_group"] == calls["_group_counts"] == 2
    assert calls["code_bytes"] == 2 * 2  # inference and training, per architecture
    assert calls["kernel_seconds_by_mode"] == (2 * len(BATCHES) if kind == "cpu" else 0)


def test_the_matrix_is_the_design_rows_bit_for_bit(arch):
    """Rows of a repeated architecture, of another object equal to it and of a bare feature vector (stand-in
    kernels on the CPU), any column subset: the same bits as one :func:`design_row` each."""
    from perfpredict.estimators.arch import ArchFeatures
    from perfpredict.estimators.design import FEATURE_NAMES, design_matrix, design_row, feature_names

    bare = ArchFeatures(forward_macs_per_sample=arch.forward_macs_per_sample, param_count=arch.param_count,
                        param_bytes=arch.param_bytes, activation_bytes_per_sample=arch.activation_bytes_per_sample,
                        num_nodes=arch.num_nodes)
    items = [(a, b) for a in (arch, bare, replace(arch), replace(arch, kernel_nodes=[])) for b in (*BATCHES, 3)]
    for kind in ("cpu", "cuda"):
        names = feature_names(kind)
        rows = [design_row(a, b, bare_stand_in=kind == "cpu") for a, b in items]
        np.testing.assert_array_equal(design_matrix(items, kind), np.array([[r[k] for k in names] for r in rows]))
        some = [FEATURE_NAMES[i] for i in (0, 5, 20, -3, -1)]
        np.testing.assert_array_equal(design_matrix(items, kind, columns=some),
                                      np.array([[r[k] for k in some] for r in rows]))
        assert design_matrix(items[:0], kind).shape == (0, len(names))
