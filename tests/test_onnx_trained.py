"""The weights that train, for an ONNX file, instead of the frozen ones: ``trained`` (Python ``trained=[...]``,
``perfpredict predict --trained``, ``colocate --trained-a/-b``, the upload route's ``trained`` field) names them by
initializer name prefix and freezes every other floating-point initializer. A LoRA, adapter or BitFit job trains a
few small weights over a frozen base, and ``frozen`` could only list every base weight's prefix (36 for the LoRA
decoder of benchmarks/peft_models/ against 8 for its A and B matrices).

The LoRA export keeps its parameter names (``blocks.0.q.lora_A``, ``blocks.0.q.base.weight``, ...) when exported
with ``do_constant_folding=False`` and distinct values, as a fine-tuned checkpoint's are; torch.onnx.export's
default constant folding transposes every Linear weight of a 3-d input (each projection, LoRA's A and B too) into
an ``onnx::MatMul_N`` constant, and its deduplication merges equal tensors (a fresh LoRA's zero B matrices, its
LayerNorms' ones), so there a LoRA prefix names nothing and is refused."""

import io
import json

import pytest
import torch

from perfpredict import Predictor
from perfpredict.errors import UsageError
from tests.test_onnx_frozen import MODELS
from tests.test_peft_features import BACKBONE_BYTES, FP32, LAYERS, D, R, _load
from tests.test_peft_features import MODELS as PEFT

LORA = [f"blocks.{i}.{m}.lora_" for i in range(LAYERS) for m in ("q", "v")]
#: every frozen weight of the LoRA decoder by module prefix: what ``frozen`` had to list
BASE = ["embed.", "pos", "ln_f.", "head.", *(f"blocks.{i}.{m}." for i in range(LAYERS)
                                             for m in ("ln1", "ln2", "q.base", "k", "v.base", "o", "fc1", "fc2"))]
TRAINED_COUNT = LAYERS * 2 * 2 * R * D  # A (r x d) and B (d x r) of q and v in every block
KW = {"batch_sizes": [4, 16], "device_type": "cpu", "optimizer": "adamw"}


def _export(fold: bool) -> bytes:
    """benchmarks/peft_models/lora.py's model, each weight moved off its initial value (a fine-tuned one's: no
    two equal tensors for the exporter to merge), exported with a symbolic batch."""
    module = _load("lora")
    torch.manual_seed(0)
    model = module.build_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    buf = io.BytesIO()
    torch.onnx.export(model.eval(), (module.example_inputs(2),), buf, input_names=["x"], opset_version=17,
                      dynamo=False, dynamic_axes={"x": {0: "batch"}}, do_constant_folding=fold)
    return buf.getvalue()


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(MODELS)


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx_trained") / "lora.onnx"
    path.write_bytes(_export(fold=False))
    return path


@pytest.fixture(scope="module")
def trained_card(predictor, onnx_file):
    return predictor.predict(onnx_path=onnx_file, trained=LORA, **KW)


def _same(card) -> dict:
    """A card's predicted sections (its run's time and host aside)."""
    return {k: v for k, v in card.model_dump(mode="json").items() if k != "run"}


def test_the_export_keeps_the_parameter_names(onnx_file) -> None:
    import onnx

    from perfpredict.features.graph import all_initializers

    names = {t.name for t in all_initializers(onnx.load(str(onnx_file)).graph)}
    model = _load("lora").build_model()
    assert names == {n for n, _ in model.named_parameters()}
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {n for n in names if n.startswith(tuple(LORA))}


def test_trained_prefixes_predict_as_listing_every_frozen_prefix(predictor, onnx_file, trained_card) -> None:
    listed = predictor.predict(onnx_path=onnx_file, frozen=BASE, **KW)
    assert trained_card.model.frozen_param_bytes == listed.model.frozen_param_bytes == BACKBONE_BYTES
    assert trained_card.model.trainable_parameters == listed.model.trainable_parameters == TRAINED_COUNT
    ratio = trained_card.features.frozen_step_work_ratio
    assert ratio == listed.features.frozen_step_work_ratio and 0.6 < ratio < 0.7
    assert [m.peak_bytes for m in trained_card.memory] == [m.peak_bytes for m in listed.memory]
    assert _same(trained_card) == _same(listed)
    # trained over every weight: the same as naming nothing; and the frozen model predicts less than it
    everything = predictor.predict(onnx_path=onnx_file, trained=["blocks.", "embed.", "pos", "ln_f.", "head."], **KW)
    assert _same(everything) == _same(predictor.predict(onnx_path=onnx_file, **KW))
    assert everything.model.frozen_param_bytes == 0
    assert all(t.peak_bytes < e.peak_bytes for t, e in zip(trained_card.memory, everything.memory, strict=True))
    # largest_batch takes it too (its search's own wall time aside)
    limit = dict(memory_limit_bytes=2**30, device_type="cpu", optimizer="adamw")
    found = [predictor.largest_batch(onnx_path=onnx_file, **given, **limit).model_dump(exclude={"wall_s"})
             for given in ({"trained": LORA}, {"frozen": BASE})]
    assert found[0] == found[1] and found[0]["largest_ok"] > 0


def test_the_onnx_file_counts_what_the_model_file_does(onnx_file) -> None:
    """The frozen bytes and count, the step-work ratio and AdamW's state and step temporaries over the trained
    weights alone (the optimizer is probed over the complement too), as the model file counts them."""
    from perfpredict.estimators.arch import from_onnx_file, from_workload

    onnx, module = from_onnx_file(onnx_file, trained=LORA, optimizer="adamw"), from_workload(str(PEFT / "lora.py"))
    for field in ("param_count", "param_bytes", "frozen_param_bytes", "frozen_param_count",
                  "optimizer_state_copies", "optimizer_step_bytes"):
        assert getattr(onnx, field) == getattr(module, field), field
    assert onnx.frozen_step_work_ratio == pytest.approx(module.frozen_step_work_ratio, rel=1e-12)
    assert module.frozen_param_bytes == BACKBONE_BYTES
    # AdamW on the CPU, one tensor at a time: 2 x the largest trained tensor (8 KiB), not a base weight's
    assert onnx.optimizer_step_bytes["cpu"] == 3 * R * D * FP32
    assert from_onnx_file(onnx_file, optimizer="adamw").optimizer_step_bytes["cpu"] > 3 * R * D * FP32


def test_trained_is_refused_beside_frozen_for_no_match_and_for_other_inputs(predictor, onnx_file, tmp_path) -> None:
    with pytest.raises(UsageError, match="give frozen or trained, not both"):
        predictor.predict(onnx_path=onnx_file, frozen=["embed."], trained=LORA, **KW)
    # a prefix starts a name: 'lora_' starts none of blocks.0.q.lora_A's, and the message shows where it lies
    with pytest.raises(UsageError, match=r"trained prefix 'lora_' starts no floating-point initializer's name in "
                                         r"lora; it lies inside 'blocks\.0\.q\.lora_A', .*\(16 in all\)"):
        predictor.predict(onnx_path=onnx_file, trained=["blocks.0.q.lora_", "lora_"], **KW)
    with pytest.raises(UsageError, match="trained must be a list of initializer name prefixes"):
        predictor.predict(onnx_path=onnx_file, trained="head.", **KW)
    with pytest.raises(UsageError, match="trained: each prefix is a non-empty"):
        predictor.predict(onnx_path=onnx_file, trained=[" "], **KW)
    with pytest.raises(UsageError, match="trained applies to ONNX files only"):
        predictor.predict(str(PEFT / "lora.py"), trained=LORA, **KW)
    # the default export folded every projection's weight, LoRA's too, into onnx::MatMul_N constants
    folded = tmp_path / "folded.onnx"
    folded.write_bytes(_export(fold=True))
    with pytest.raises(UsageError, match=r"trained prefix 'blocks\.0\.q\.lora_' starts no"):
        predictor.predict(onnx_path=folded, trained=LORA, **KW)


def test_the_cli_flag_reaches_the_same_prediction(onnx_file, trained_card, tmp_path) -> None:
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers predict and colocate
    from perfpredict.cli import app

    def run(command, *args):
        return CliRunner().invoke(app, [command, *map(str, args), "--models", str(MODELS)])

    out = tmp_path / "card.json"
    res = run("predict", onnx_file, "--trained", ",".join(LORA[:4]), "--trained", ",".join(LORA[4:]), "-b", "4,16",
              "--device-type", "cpu", "--optimizer", "adamw", "-o", out)
    assert res.exit_code == 0, res.output[-2000:]
    card = json.loads(out.read_text())
    assert card["model"]["frozen_param_bytes"] == BACKBONE_BYTES
    assert card["model"]["trainable_parameters"] == TRAINED_COUNT
    assert [m["peak_bytes"] for m in card["memory"]] == pytest.approx([m.peak_bytes for m in trained_card.memory],
                                                                      rel=1e-12)
    model_file = PEFT / "lora.py"
    for args, needle in ((("predict", onnx_file, "--frozen", "embed.", "--trained", LORA[0]),
                          "give --frozen or --trained, not both"),
                         (("predict", onnx_file, "--trained", " "), "--trained is empty"),
                         (("predict", model_file, "--trained", LORA[0]), "--trained only applies to an ONNX file"),
                         (("predict", onnx_file, "--trained", "lora_", "--device-type", "cpu"),
                          "'lora_' starts no floating-point initializer's name"),
                         (("colocate", onnx_file, "zoo:mlp", "--frozen-b", "x", "--trained-a", LORA[0], "--frozen-a",
                           "embed."), "give --frozen-a or --trained-a, not both")):
        res = run(*args)  # perfpredict's entry point prints a UsageError as one line and exits 2
        assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]


def test_the_upload_route_takes_trained_prefixes(predictor, onnx_file, trained_card) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    client = TestClient(create_app(predictor), raise_server_exceptions=False)
    data = onnx_file.read_bytes()

    def post(**form):
        return client.post("/predict/onnx", files={"file": ("lora.onnx", data)},
                           data={"batch_sizes": "4,16", "device_type": "cpu", "optimizer": "adamw", **form})

    r = post(trained=",".join(LORA))
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["model"]["frozen_param_bytes"] == BACKBONE_BYTES
    assert card["model"]["trainable_parameters"] == TRAINED_COUNT
    assert [m["peak_bytes"] for m in card["memory"]] == pytest.approx([m.peak_bytes for m in trained_card.memory],
                                                                      rel=1e-12)
    for form, needle in (({"trained": LORA[0], "frozen": "embed."}, "give frozen or trained, not both"),
                         ({"trained": ""}, "trained is empty"),
                         ({"trained": "lora_"}, "'lora_' starts no floating-point initializer's name")):
        r = post(**form)
        assert r.status_code == 422 and needle in r.text, r.text
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/predict/onnx"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    form = spec["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    assert "weights that train" in form["properties"]["trained"]["description"]
