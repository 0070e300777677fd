"""Models called with keyword arguments: ``example_inputs`` returning a dict (the Hugging Face convention).

Each path that runs a model file's forward is exercised on a real small model: the measuring worker (train and
infer), graph features (ONNX export + fvcore through the positional wrapper), saved-tensor counting, the
Predictor's feature extraction and the input-pipeline worker of sensitivity profiling.
"""

from __future__ import annotations

import json

import pytest
import torch

from perfpredict.workload import load_model_file
from perfpredict.workload.forward_args import (
    KeywordForward,
    KeywordInputs,
    as_positional,
    call_forward,
    positional_args,
)

from .conftest import FAST_TIMING

_MODEL = """
import torch, torch.nn as nn

class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.mix = nn.Linear(16, 16)
        self.head = nn.Linear(16, 100)

    def forward(self, input_ids, attention_mask=None, labels=None, return_hidden=False):
        h = torch.relu(self.mix(self.emb(input_ids)))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        logits = self.head(h)
        out = {{"logits": logits}}
        if return_hidden:
            out["hidden"] = h
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return out

def build_model():
    return TinyLM()

{inputs}

BATCH_SIZES = [2, 4]
"""

KEYWORD = _MODEL.format(inputs='''
def example_inputs(batch_size):
    ids = torch.randint(0, 100, (batch_size, 8))
    # keys in another order than forward's parameters, and a non-tensor value: both go by name
    return {"attention_mask": torch.ones_like(ids), "input_ids": ids, "return_hidden": True}

def loss_fn(outputs):
    return outputs["logits"].float().mean() + outputs["hidden"].mean()
''')

POSITIONAL = _MODEL.format(inputs='''
def example_inputs(batch_size):
    ids = torch.randint(0, 100, (batch_size, 8))
    return ids, torch.ones_like(ids), None, True

def loss_fn(outputs):
    return outputs["logits"].float().mean() + outputs["hidden"].mean()
''')


def test_keyword_inputs_keep_their_names_and_values():
    a, b = torch.zeros(2), torch.ones(2)
    kw = KeywordInputs({"y": b, "x": a, "flag": False})
    assert kw.names == ("y", "x", "flag") and tuple(kw) == (b, a, False)
    assert kw.as_dict() == {"y": b, "x": a, "flag": False}
    assert call_forward(lambda x, y, flag: (x, y, flag), kw) == (a, b, False)
    assert call_forward(lambda x, y: x - y, (b, a)).tolist() == [1.0, 1.0]  # positional stays positional
    assert positional_args(kw) == (b, a)  # tensor-carrying values only, in the dict's order
    with pytest.raises(TypeError, match="argument names"):
        KeywordInputs({1: a})
    assert call_forward(lambda **kw: sorted(kw), KeywordInputs({"input-ids": a})) == ["input-ids"]  # **kwargs forward


def test_the_positional_wrapper_calls_the_model_by_name_with_its_constants():
    lin = torch.nn.Linear(3, 2)

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, *, x, scale, bias=None):
            return self.lin(x) * scale + (0 if bias is None else bias)

    x, bias = torch.randn(4, 3), torch.randn(2)
    wrapper, args = as_positional(Named(), KeywordInputs({"bias": bias, "x": x, "scale": 3.0}))
    assert isinstance(wrapper, KeywordForward) and args == (bias, x)
    assert torch.allclose(wrapper(*args), lin(x) * 3.0 + bias)
    assert [p is q for p, q in zip(wrapper.parameters(), lin.parameters())] == [True, True]
    wrapper.eval()
    assert not wrapper.model.training  # train/eval reaches the wrapped model
    same, pos = as_positional(lin, (x,))
    assert same is lin and pos == (x,)


def test_workload_inputs_return_keyword_inputs_from_a_dict(write_model):
    wl = load_model_file(write_model(KEYWORD))
    inputs = wl.inputs(3)
    assert isinstance(inputs, KeywordInputs) and inputs.names == ("attention_mask", "input_ids", "return_hidden")
    assert inputs.as_dict()["input_ids"].shape == (3, 8)
    out = call_forward(wl.build_model(), inputs)
    assert out["logits"].shape == (3, 8, 100) and "hidden" in out  # return_hidden=True reached forward


def test_graph_features_of_a_keyword_model_equal_its_positional_twin(write_model):
    from perfpredict.features import extract_features

    kw = load_model_file(write_model(KEYWORD, "kw.py"))
    pos = load_model_file(write_model(POSITIONAL, "pos.py"))
    torch.manual_seed(0)
    fk = extract_features(kw)
    torch.manual_seed(0)
    fp = extract_features(pos)
    assert fk.available, fk.error
    assert fp.available, fp.error
    # 8 tokens × (16·16 + 16·100) MACs per sample: the same graph, reached by name or by position
    assert fk.forward_macs_per_sample == fp.forward_macs_per_sample == 8 * (16 * 16 + 16 * 100)
    assert fk.param_bytes == fp.param_bytes == 4 * (100 * 16 + 16 * 16 + 16 + 16 * 100 + 100)
    assert fk.activation_bytes_per_sample == fp.activation_bytes_per_sample
    assert fk.op_counts == fp.op_counts
    assert fk.fvcore_macs_per_sample == fk.forward_macs_per_sample  # fvcore traced it through the wrapper


def test_saved_tensor_count_reaches_a_keyword_model(write_model):
    from perfpredict.features.saved import saved_bytes_split

    kw = load_model_file(write_model(KEYWORD, "kw.py"))
    pos = load_model_file(write_model(POSITIONAL, "pos.py"))
    torch.manual_seed(0)
    per_kw, fixed_kw = saved_bytes_split(kw)
    torch.manual_seed(0)
    per_pos, fixed_pos = saved_bytes_split(pos)
    assert per_kw > 0 and (per_kw, fixed_kw) == (per_pos, fixed_pos)


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_a_keyword_model_is_measured_in_a_fresh_process(write_model, mode):
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = write_model(KEYWORD)
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 4, mode=mode, timing=FAST_TIMING), 120)
    assert res["status"] == "ok", res.get("error")
    assert res["timing"]["iterations"] >= FAST_TIMING.min_iters and res["timing"]["median_s"] > 0
    if mode == "train":  # SGD momentum: one buffer per parameter
        assert res["optimizer_state_bytes"] == 4 * (100 * 16 + 16 * 16 + 16 + 16 * 100 + 100)


def test_perfpredict_profile_and_predict_take_a_keyword_model(write_model, run_cli, tmp_path):
    path = write_model(KEYWORD)
    out = tmp_path / "out"
    r = run_cli("profile", path, "-b", "2,4", "--max-time", "1", "--min-time", "0.2", "--no-mlflow", "--out", out)
    assert r.returncode == 0, r.stderr + r.stdout
    card = json.loads((out / "card.json").read_text())
    assert [p["status"] for p in card["throughput"]] == ["ok", "ok"]
    assert card["features"]["available"] and card["features"]["forward_macs_per_sample"] == 8 * (16 * 16 + 16 * 100)
    assert (out / "model.onnx").stat().st_size > 0
    r = run_cli("predict", path, "-b", "8", "--device-type", "cpu", "--out", tmp_path / "pred.json")
    assert r.returncode == 0, r.stderr + r.stdout
    pred = json.loads((tmp_path / "pred.json").read_text())
    assert pred["prediction"]["points"][0]["batch_size"] == 8


def test_a_dict_with_a_key_that_is_not_an_argument_name_is_one_readable_error(write_model, run_cli, tmp_path):
    path = write_model(_MODEL.format(inputs='''
def example_inputs(batch_size):
    return {0: torch.randint(0, 100, (batch_size, 8))}
'''))
    r = run_cli("profile", path, "-b", "2", "--max-time", "1", "--min-time", "0.2", "--no-mlflow", "--no-features",
                "--out", tmp_path / "out")
    assert r.returncode != 0 and "Traceback" not in r.stderr + r.stdout
    assert "example_inputs" in r.stderr and "argument names" in r.stderr


def test_a_model_taking_one_dict_positionally_says_so_with_a_one_tuple(write_model):
    path = write_model('''
import torch, torch.nn as nn

class Batch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, batch):
        return self.lin(batch["x"])

def build_model():
    return Batch()

def example_inputs(batch_size):
    return ({"x": torch.randn(batch_size, 4)},)
''')
    wl = load_model_file(path)
    inputs = wl.inputs(2)
    assert not isinstance(inputs, KeywordInputs) and isinstance(inputs[0], dict)
    assert call_forward(wl.build_model(), inputs).shape == (2, 2)


def test_the_input_pipeline_feeds_collated_dicts_by_name(write_model):
    """Sensitivity profiling's worker: per-sample dicts from preprocess, collated by a real DataLoader."""
    from perfpredict.profile.pipeline_worker import PipelineRequest, forward_args
    from perfpredict.profile.runner import run_pipeline_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = write_model(KEYWORD + '''
def make_dataset():
    return list(range(64))

def preprocess(i):
    g = torch.Generator().manual_seed(i)
    ids = torch.randint(0, 100, (8,), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}  # return_hidden comes from example_inputs
''')
    batch = torch.utils.data.default_collate([{"input_ids": torch.zeros(8, dtype=torch.long)}] * 2)
    args = forward_args(batch, multi=False, keyword=True, constants={"return_hidden": True})
    assert isinstance(args, KeywordInputs) and args.as_dict() == {"return_hidden": True, "input_ids": batch["input_ids"]}
    assert forward_args(batch, multi=False) == (batch,)  # a model that takes one dict
    req = PipelineRequest(WorkloadRef("file", str(path)), batch_size=4, cpus=(0,), window_s=0.5,
                          warmup_batches=1, num_workers=0)
    res = run_pipeline_in_subprocess(req, 120)
    assert res["status"] == "ok", res.get("error")
    assert res["samples_per_s"] > 0


def test_the_keyword_example_trains_by_name():
    from .conftest import EXAMPLES

    wl = load_model_file(EXAMPLES / "keyword_lm.py")
    torch.manual_seed(0)
    model = wl.build_model()
    inputs = wl.inputs(2)
    assert isinstance(inputs, KeywordInputs) and set(inputs.names) == {"input_ids", "attention_mask", "labels"}
    loss = wl.loss(call_forward(model, inputs))
    assert abs(loss.item() - torch.log(torch.tensor(2048.0)).item()) < 1.0  # untrained: about ln(vocabulary)
    loss.backward()
    assert model.tokens.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0


# -- findings of a review: trailing dicts, batch-dependent fixed values, collated flags --------------------

def test_a_dict_as_the_last_positional_argument_is_exported_as_an_argument(write_model):
    """torch.onnx.export reads a trailing dict in args as keyword arguments: the README's one-dict convention
    (``return (batch,)``) and a keyword model whose last tensor argument is a dict both lost their features."""
    from perfpredict.features import extract_features

    one_dict = load_model_file(write_model('''
import torch, torch.nn as nn

class Batch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, batch):
        return self.lin(batch["x"] * batch["w"])

def build_model():
    return Batch()

def example_inputs(batch_size):
    return ({"x": torch.randn(batch_size, 4), "w": torch.randn(batch_size, 4)},)
''', "one_dict.py"))
    last_dict = load_model_file(write_model('''
import torch, torch.nn as nn

class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x, extra):
        return self.b(self.a(x) + extra["u"] * extra["v"])

def build_model():
    return Pair()

def example_inputs(batch_size):
    return {"x": torch.randn(batch_size, 4), "extra": {"u": torch.randn(batch_size, 8), "v": torch.randn(batch_size, 8)}}
''', "last_dict.py"))
    f1, f2 = extract_features(one_dict), extract_features(last_dict)
    assert f1.available, f1.error
    assert f2.available, f2.error
    assert f1.forward_macs_per_sample == f1.fvcore_macs_per_sample == 4 * 2
    assert f2.forward_macs_per_sample == f2.fvcore_macs_per_sample == 4 * 8 + 8 * 8


_SAMPLER = '''
import torch, torch.nn as nn

class Sampler(nn.Module):
    """Draws num_samples latents and decodes them: the fixed value is the batch size."""
    def __init__(self):
        super().__init__()
        self.dec = nn.Linear(64, 256)
        self.cond = nn.Linear(8, 256)

    def forward(self, cond, num_samples):
        if num_samples != cond.shape[0]:
            raise ValueError(f"num_samples {num_samples} for a batch of {cond.shape[0]}")
        return self.dec(torch.ones(num_samples, 64)) + self.cond(cond)

def build_model():
    return Sampler()

def example_inputs(batch_size):
    return {"cond": torch.randn(batch_size, 8), "num_samples": batch_size}

def make_dataset():
    return list(range(64))

def preprocess(i):
    return {"cond": torch.randn(8, generator=torch.Generator().manual_seed(i))}
'''


def test_fixed_values_that_depend_on_the_batch_size_are_taken_at_each_batch_size(write_model):
    from perfpredict.features import extract_features
    from perfpredict.profile.pipeline_worker import PipelineRequest
    from perfpredict.profile.runner import run_pipeline_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = write_model(_SAMPLER)
    f = extract_features(load_model_file(path))
    assert f.available, f.error
    assert f.forward_macs_per_sample == f.fvcore_macs_per_sample == 64 * 256 + 8 * 256 and f.forward_macs_fixed == 0
    # the input pipeline's batches get num_samples of their own batch size (the model raises otherwise)
    res = run_pipeline_in_subprocess(PipelineRequest(WorkloadRef("file", str(path)), batch_size=8, cpus=(0,),
                                                     window_s=0.3, warmup_batches=1, num_workers=0), 120)
    assert res["status"] == "ok", res.get("error")


def test_a_fixed_value_of_example_inputs_wins_over_a_collated_per_sample_flag():
    from perfpredict.profile.pipeline_worker import forward_args

    batch = torch.utils.data.default_collate([{"x": torch.zeros(2), "use_cache": False}] * 4)
    assert isinstance(batch["use_cache"], torch.Tensor)  # what collation does to a flag
    args = forward_args(batch, multi=False, keyword=True, constants={"use_cache": False})
    assert args.as_dict()["use_cache"] is False


def test_the_hugging_face_example_profiles_or_names_the_missing_package(run_cli, tmp_path):
    """examples/hf_gpt2.py needs the optional transformers package. With it, a real HF GPT-2 goes through the
    keyword path (measured and exported: 35.45 M MACs per sample for 2 layers x 64 tokens, by the formula
    below); without it (CI), the file fails at import with one readable line."""
    import importlib.util

    from .conftest import EXAMPLES

    args = ("profile", EXAMPLES / "hf_gpt2.py", "-b", "4", "--min-time", "0.2", "--max-time", "1", "--no-mlflow",
            "--out", tmp_path / "out")
    r = run_cli(*args)
    if importlib.util.find_spec("transformers") is None:
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert ": import: raised ModuleNotFoundError" in r.stderr and "transformers" in r.stderr
        return
    assert r.returncode == 0, r.stderr + r.stdout
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    per_token = 2 * (128 * 384 + 128 * 128 + 2 * 128 * 512 + 2 * 64 * 128) + 128 * 1000  # blocks + attention + head
    assert card["features"]["forward_macs_per_sample"] == 64 * per_token


def test_a_forward_that_refuses_its_arguments_is_told_the_model_py_rule_that_shaped_them():
    """A list from example_inputs is one argument, and a dict is passed by name: the raw TypeErrors ('missing 1
    required positional argument', 'unexpected keyword argument') did not say how to fix the model file."""
    from perfpredict.workload.forward_args import KeywordInputs, call_forward

    def two(a, b):
        return a + b

    def one(batch):
        return batch["ids"]

    with pytest.raises(TypeError, match=r"missing 1 required positional argument.*returned a list.*return a tuple"):
        call_forward(two, ([torch.ones(1), torch.ones(1)],))
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'ids'.*passed by name.*return \(batch,\)"):
        call_forward(one, KeywordInputs({"ids": torch.ones(1)}))
    with pytest.raises(TypeError) as e:  # a TypeError of another kind is left as it is
        call_forward(lambda x: x + "s", (torch.ones(1),))
    assert "example_inputs" not in str(e.value)
