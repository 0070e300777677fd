"""Property-scan findings in the built-in zoo: parameter parsing, config names, and the input pipelines."""

from __future__ import annotations

import math

import pytest
import torch

from perfpredict.errors import UsageError
from perfpredict.workload.zoo import enumerate_configs, get_family, load_zoo_workload


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "1e309", float("nan"), float("inf")])
@pytest.mark.parametrize("name", ["width_mult", "depth_mult"])
def test_non_finite_float_parameter_is_refused_by_name(name, value) -> None:
    # nan passed the ">= 0.05" check (every comparison with nan is false) and inf passed it too; both then
    # crashed in make_divisible / ceil as an "internal error: ValueError: cannot convert float NaN to integer"
    with pytest.raises(UsageError, match=name):
        get_family("mobilenetv2").resolve({name: value})


def test_config_names_tell_apart_floats_that_g_formatting_merges() -> None:
    fam = get_family("mobilenetv2")
    a, b = fam.resolve({"depth_mult": "0.3333333"}), fam.resolve({"depth_mult": "0.3333334"})
    # different architectures: a 3-block stage keeps ceil(3 * 0.3333333) = 1 block, or ceil(1.0000002) = 2
    assert fam.closed_form_params(a) != fam.closed_form_params(b)
    assert fam.config_name(a) != fam.config_name(b)
    # the names of plain values are as before (datasets and the reference suite are keyed by them)
    assert fam.config_name(fam.resolve({})) == "mobilenetv2-width_mult0.5-depth_mult1-image_size32-num_classes10"


def test_grid_names_unchanged_and_unique() -> None:
    names = [get_family(f).config_name(c) for f, c in enumerate_configs()]
    assert len(set(names)) == len(names) == 153
    assert all(" " not in n for n in names)
    assert "mobilenetv2-width_mult1.4-depth_mult1-image_size224-num_classes1000" in names


@pytest.mark.parametrize(("family", "key", "spellings"), [
    ("convnext", "blocks", ["3-3-9-3", "03-3-9-3", "3-3-09-3", "\uff13-3-9-3"]),
    ("dlrm", "bottom_mlp", ["64-32", " 64 - 32 ", "+64-32", "064-32"]),
    ("dlrm", "top_mlp", ["64", "+64", " 64"]),
])
def test_one_architecture_gets_one_name(family, key, spellings) -> None:
    fam = get_family(family)
    cfgs = [fam.resolve({key: s}) for s in spellings]
    names = {fam.config_name(c) for c in cfgs}
    assert len(names) == 1, names
    name = names.pop()
    assert name.isascii() and " " not in name
    assert all(c == cfgs[0] for c in cfgs)
    # the ref a measuring process rebuilds the workload from names the same configuration
    wl = load_zoo_workload(family, {key: spellings[1]})
    assert wl.name == name and wl.ref.load().name == name


def test_tabular_pipeline_with_a_single_feature_gives_finite_inputs() -> None:
    # input_dim's documented minimum is 1; the sample std of one value is NaN, so every input was NaN
    wl = load_zoo_workload("mlp", {"input_dim": 1, "depth": 0})
    ds = wl.make_dataset()
    x, y = wl.preprocess(ds[3])
    assert x.shape == (1,) and x.dtype == torch.float32 and torch.isfinite(x).all()
    torch.manual_seed(0)
    loss = wl.loss(wl.build_model()(x.unsqueeze(0)), torch.tensor([y]))
    assert math.isfinite(loss.item())
    # more than one feature: standardised as before
    wl = load_zoo_workload("mlp", {"input_dim": 5})
    x, _ = wl.preprocess(wl.make_dataset()[3])
    assert float(x.mean()) == pytest.approx(0, abs=1e-6) and float(x.std()) == pytest.approx(1, rel=1e-4)


@pytest.mark.parametrize("num_classes", [256, 300, 70000])
def test_segmentation_pipeline_holds_more_than_256_classes(num_classes) -> None:
    # the class map was stored as uint8 whatever num_classes was: numpy refused with "high is out of bounds"
    wl = load_zoo_workload("unet", {"image_size": 8, "base_width": 1, "depth": 1, "num_classes": num_classes})
    ds = wl.make_dataset()
    assert ds[4] == wl.make_dataset()[4]
    masks = [wl.preprocess(ds[i])[1] for i in range(16)]
    assert all(m.dtype == torch.int64 and m.shape == (8, 8) for m in masks)
    top = max(int(m.max()) for m in masks)
    assert 0 <= min(int(m.min()) for m in masks) and top < num_classes
    assert top > 255 or num_classes <= 256  # the ids above uint8 do occur
    x, m = wl.preprocess(ds[0])
    torch.manual_seed(0)
    loss = wl.loss(wl.build_model()(x.unsqueeze(0)), m.unsqueeze(0))
    assert math.isfinite(loss.item())
