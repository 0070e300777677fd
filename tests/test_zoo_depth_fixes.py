"""Fixes in the zoo's size checks: a configuration whose depth knob stacks ~1e8 layers (tiny weights, tiny
tensors) passed the parameter and sample-tensor caps and was built module after module; a transformer or ViT's
heads x tokens² attention scores were not among the sample tensors counted."""

from __future__ import annotations

import csv
import glob
import json
from pathlib import Path

import pytest

from perfpredict.errors import UsageError
from perfpredict.workload.zoo import get_family
from tests.conftest import assert_zoo_refuses_in_subprocess

REPO = Path(__file__).resolve().parents[1]

#: each passed both earlier caps (at most 3.6e9 parameters, at most 4e8 elements in a sample's tensor)
DEEP = [
    ("mlp", {"depth": 10**8, "width": 1}),
    ("transformer", {"layers": 10**8, "d_model": 1, "heads": 1, "ffn_mult": 1}),
    ("vit", {"depth": 10**8, "d_model": 1, "heads": 1, "mlp_ratio": 1}),
    ("lstm", {"layers": 10**8, "embed": 1, "hidden": 1}),
    ("speech", {"rnn_layers": 10**8, "hidden": 1}),
    ("convnext", {"blocks": "1-1-10000000-1", "width": 1}),
    ("mobilenetv2", {"depth_mult": 1e5, "width_mult": 0.05}),
    ("dlrm", {"num_tables": 20000, "rows_per_table": 1, "emb_dim": 1, "bottom_mlp": "", "top_mlp": ""}),
]


def test_a_configuration_stacking_1e8_layers_is_refused_before_any_module_is_built() -> None:
    """They resolved, and building them ran until memory ran out. Run with a 3 GiB address-space limit."""
    assert_zoo_refuses_in_subprocess(DEEP, match="layers (blocks, tables), more than the 1e+04",
                                     address_space_gib=3, timeout=120)


def test_the_layer_cap_still_takes_a_configuration_at_the_cap() -> None:
    from perfpredict.workload.zoo.base import MAX_LAYERS

    assert get_family("mlp").resolve({"depth": MAX_LAYERS - 1, "width": 1})["depth"] == MAX_LAYERS - 1
    assert get_family("transformer").resolve({"layers": MAX_LAYERS, "d_model": 4})["layers"] == MAX_LAYERS
    with pytest.raises(UsageError, match="would stack 1e\\+04 layers"):
        get_family("transformer").resolve({"layers": MAX_LAYERS + 1, "d_model": 4})


@pytest.mark.parametrize(("family", "overrides"), [
    ("transformer", {"d_model": 4, "heads": 4, "ffn_mult": 1, "seq_len": 200000}),    # 1.6e11 scores
    ("vit", {"image_size": 512, "patch": 1, "d_model": 1, "heads": 1, "mlp_ratio": 1}),  # 6.9e10 scores
])
def test_attention_scores_count_among_a_samples_tensors(family, overrides) -> None:
    """A small width kept the feed-forward layer under the cap while heads x tokens² attention scores (which a
    training step on the CPU materialises) were far over it."""
    with pytest.raises(UsageError, match="elements in one sample's attention scores, more than the 1e\\+10"):
        get_family(family).resolve(overrides)


def test_every_configuration_in_the_committed_datasets_still_resolves() -> None:
    """Every config named by a committed dataset is one of zoo_features.csv's, and each passes every cap."""
    from perfpredict.workload.zoo.base import MAX_LAYERS

    with open(REPO / "datasets" / "zoo_features.csv", newline="") as f:
        known = {row["config"]: (row["family"], json.loads(row["config_json"])) for row in csv.DictReader(f)}
    named = set()
    for path in glob.glob(str(REPO / "datasets" / "*.csv")):
        with open(path, newline="") as f:
            named |= {row["config"] for row in csv.DictReader(f) if "config" in row}
    assert named and named <= set(known)
    for name, (family, overrides) in known.items():
        fam = get_family(family)
        cfg = fam.resolve(overrides)
        assert fam.config_name(cfg) == name
        assert fam.closed_form_layers(cfg) is None or fam.closed_form_layers(cfg) <= MAX_LAYERS / 100


@pytest.mark.parametrize("knob", ["depth_mult", "width_mult"])
def test_a_finite_knob_whose_count_overflows_is_a_usage_error(knob: str) -> None:
    """mobilenetv2 depth_mult=1e308 is finite, but n x depth_mult is not: math.ceil raised an OverflowError."""
    with pytest.raises(UsageError, match="too large to size"):
        get_family("mobilenetv2").resolve({knob: "1e308"})
