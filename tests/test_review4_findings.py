"""Findings of a fourth review (of the commits 5c14904..5bff223): an ONNX upload past float range, a model path
that resolves to a non-UTF-8 one, and huge finite zoo parameters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfpredict.errors import UsageError
from tests.conftest import assert_zoo_refuses_in_subprocess
from tests.test_predictor_findings import CONTRASTIVE_MODEL

REPO = Path(__file__).resolve().parents[1]


def _matmul_of_two_inputs(n_axes: int) -> bytes:
    """x @ y with both operands graph inputs of ``n_axes`` axes of 1e18 besides the batch (as in
    test_service_findings): their shapes alone set the counts."""
    from onnx import TensorProto, helper

    dims = [10**18] * n_axes
    nodes = [helper.make_node("MatMul", ["x", "y"], ["z"]), helper.make_node("Relu", ["z"], ["o"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *dims]),
                                            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *dims])],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [f"o{i}" for i in range(n_axes + 1)])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("n_axes", [18, 240])
def test_an_upload_past_float_range_is_refused_by_name(n_axes) -> None:
    """dd3d6f9 refused counts past MAX_QUANTITY, but with 18 axes of 1e18 (a 650-byte file) the inputs' bytes per
    sample were summed as a float first (OverflowError: a 500 from POST /predict/onnx), and a count past 4300
    digits could not be shown (str() of the int raised ValueError)."""
    import onnx

    from perfpredict.estimators.arch import ArchFeaturesError, from_onnx_proto

    with pytest.raises(ArchFeaturesError, match="forward_macs_per_sample .about 1e"):
        from_onnx_proto(onnx.load_from_string(_matmul_of_two_inputs(n_axes)), name="mm")


def test_a_model_path_that_resolves_to_a_non_utf8_one_is_refused(tmp_path, monkeypatch) -> None:
    """5c14904 checked the path as given: a relative name in a folder named in another encoding, or a link to a
    file there, passed and the resolved path ended in an internal UnicodeEncodeError at import."""
    from perfpredict.errors import ModelLoadError
    from perfpredict.workload_args import check_model_path

    folder = tmp_path / os.fsdecode(b"d\xe9")
    folder.mkdir()
    (folder / "model.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to(folder / "model.py")
    monkeypatch.chdir(folder)
    with pytest.raises(ModelLoadError, match="not UTF-8"):
        check_model_path("model.py")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match="not UTF-8"):
        check_model_path("link.py")
    # valid UTF-8 names, relative or under ~, are not refused
    (tmp_path / "dossier é").mkdir()
    (tmp_path / "dossier é" / "modèle.py").write_text("x = 1\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    for given in ("dossier é/modèle.py", "~/dossier é/modèle.py", tmp_path / "dossier é" / "modèle.py"):
        assert check_model_path(given) == (tmp_path / "dossier é" / "modèle.py").resolve()


@pytest.mark.parametrize(("family", "overrides"), [
    ("mobilenetv2", {"width_mult": "1e300"}),
    ("mlp", {"width": str(10**200)}),
])
def test_a_zoo_model_counted_past_float_range_is_refused_by_name(family, overrides) -> None:
    """5bff223 refused nan/inf multipliers, but a finite 1e300 (or a 200-digit width) still ended in an internal
    OverflowError: the refusal's message formatted the count with :.3g."""
    from perfpredict.workload.zoo import get_family

    with pytest.raises(UsageError, match="about 1e"):
        get_family(family).resolve(overrides)


def test_a_huge_depth_multiplier_is_refused_without_building_its_blocks() -> None:
    """mobilenetv2 depth_mult=1e8 (finite, above its minimum) listed 1.7e9 blocks to count the parameters before
    the size check could refuse it: memory ran out. Run with a 3 GiB address-space limit."""
    assert_zoo_refuses_in_subprocess([("mobilenetv2", {"depth_mult": v}) for v in ("1e8", "1e300")],
                                     match="parameters, more than", address_space_gib=3, timeout=120)


def test_a_measured_card_of_a_model_growing_faster_than_its_batch_predicts_again(tmp_path) -> None:
    """9cdb821 held a model file's fixed feature parts at 0 in from_workload, but ``perfpredict profile`` writes
    extract_features' raw two-batch split into the card: a batch x batch similarity matrix's negative intercepts
    stayed there, and Predictor.predict(features=card) refused that card ("bad feature vector")."""
    from perfpredict import Predictor
    from perfpredict.features import extract_features
    from perfpredict.workload import resolve_workload

    model = tmp_path / "contrastive.py"
    model.write_text(CONTRASTIVE_MODEL)
    pred = Predictor.load(REPO / "trained_models")
    card = pred.predict(str(model), batch_sizes=[8, 32], device_type="cpu_xeon_2vcpu")
    # the features section as the profiler writes it (profiler.py: card.features = extract_features(...)): its
    # split holds the intercepts at 0 now (03a1e38, split_nodes), so its kernel rows have none below 0 ...
    card.features = extract_features(resolve_workload(str(model)), use_fvcore=False)
    assert card.features.kernel_nodes and all(r[3] >= 0 and r[5] >= 0 for r in card.features.kernel_nodes)
    # ... and a card written before kept them, as the card reader (which does not check kernel rows) loads it
    card.features.kernel_nodes = [r[:3] + [-64] + r[4:5] + [-16] + r[6:] for r in card.features.kernel_nodes]
    again = pred.predict(features=card, batch_sizes=[8, 32], device_type="cpu_xeon_2vcpu")
    assert all(p.iter_time_s > 0 for p in again.prediction.points)
    f = again.features
    assert min(f.forward_macs_fixed, f.activation_bytes_fixed, f.graph_saved_bytes_fixed) == 0
    assert all(r[3] >= 0 and r[5] >= 0 for r in f.kernel_nodes)
