"""Session 49's review of batched prediction (``Predictor.cards_for``) and of ONNX files' external data read from
beside the file: a job's bad ``source`` stopped every job, bytes were read as batch sizes, and an external
location naming no file that can be looked up (a NUL byte, a name too long, a link loop) was a raw error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_predict_batch import REPO, F, predictor  # noqa: F401 - the module's fixture, shared


def test_a_job_whose_source_is_not_text_gets_its_error_and_the_others_their_cards(predictor):  # noqa: F811
    """``source=5`` raised the card's raw pydantic ValidationError out of ``cards_for``: no job got its card."""
    from perfpredict.errors import UsageError
    from perfpredict.predictor import CardError, CardRequest

    out = predictor.cards_for([{"features": F, "batch_sizes": [8]}, CardRequest(F, [8], source=5),
                               {"features": F, "source": ["a"]}])
    assert not isinstance(out[0], CardError) and out[0].model.source == "features"
    for k in (1, 2):
        assert isinstance(out[k], CardError) and isinstance(out[k].error, UsageError), out[k]
        assert str(out[k]).startswith(f"job {k}: ") and "source" in str(out[k])


@pytest.mark.parametrize("bs", [b"32", bytearray(b"8")])
def test_bytes_are_no_batch_sizes(predictor, bs):  # noqa: F811
    """``predict`` refuses a string of batch sizes; ``cards_for`` and ``predict_values`` read b"32" as the batch
    sizes [50, 51] (its bytes' codes) and answered for them."""
    from perfpredict.errors import UsageError
    from perfpredict.predictor import CardError

    with pytest.raises(UsageError, match="not the string"):
        predictor.predict(features=F, batch_sizes=bs)
    with pytest.raises(UsageError, match="not the string"):
        predictor.predict_values(F, bs)
    r = predictor.cards_for([{"features": F, "batch_sizes": bs}])[0]
    assert isinstance(r, CardError) and "not the string" in str(r), r


def _external_model(folder: Path) -> Path:
    """x [N, 8] @ W [8, 4], saved with W in the side file m.data."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w])
    path = folder / "m.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path),
                    save_as_external_data=True, location="m.data", size_threshold=0)
    return path


@pytest.mark.parametrize("where", ["nul", "long", "loop"])
def test_an_external_location_naming_no_readable_file_is_refused_not_a_raw_error(tmp_path, where):
    """A location with a NUL byte (ValueError), a name too long (OSError) or a link to itself (RuntimeError) was
    a raw error from ``from_onnx_file`` since the values are read from beside the file (ONNX's checker, which
    looked them up before, refused them as an invalid model)."""
    import onnx

    from perfpredict.estimators.arch import ArchFeaturesError, from_onnx_file

    path = _external_model(tmp_path)
    loc = {"nul": "m\x00.data", "long": "a" * 5000, "loop": "loop"}[where]
    if where == "loop":
        os.symlink("loop", tmp_path / "loop")
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        next(e for e in t.external_data if e.key == "location").value = loc
    onnx.save_model(m, str(path))
    with pytest.raises(ArchFeaturesError, match="names no file that can be read"):
        from_onnx_file(path)
