"""Review of the card's precision (f6beb6d): ``features=card`` took a measured card's ``run.precision`` as the
autocast precision its job trained at, but a model built with ``.bfloat16()`` or ``.half()`` and run without
autocast says bf16 / fp16 there too (its weights' dtype), while its model file, which asks for no precision,
predicts with the fp32 set: the card of a ``.bfloat16()`` MLP was predicted with cpu_xeon_2vcpu_bf16 (0.790 ms at
batch 16 against the file's 0.513 ms), and a ``.half()`` one's notes said "the model file asks for fp16 mixed
precision". And docs/estimators.md's PEFT table gave the head's predicted time ratio as 0.34 (it is 0.3346)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfpredict import Predictor
from tests.conftest import FAST_TIMING
from tests.test_left_alone47_fixes import BF16_MLP

REPO = Path(__file__).resolve().parents[1]
XEON = "cpu_xeon_2vcpu"

#: an MLP whose weights are all of one low-precision dtype, run without autocast (no PRECISION)
WEIGHTS_MLP = """
import torch
import torch.nn as nn

def build_model():
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(torch.{dtype})

def example_inputs(batch_size):
    return torch.randn(batch_size, 128, dtype=torch.{dtype})
"""


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


def _measured(path: Path):
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file

    settings = ProfileSettings(batch_sizes=(4,), device="cpu", timing=FAST_TIMING, threads=1, fvcore=False,
                               measure_energy=False)
    return profile_workload(load_model_file(str(path)), settings).card


@pytest.mark.parametrize("dtype, said", [("bfloat16", "bf16"), ("float16", "fp16")])
def test_a_low_precision_weights_card_picks_the_set_its_model_file_does(predictor, write_model, dtype,
                                                                       said) -> None:
    """The measured card says its weights' dtype, without autocast: it is predicted with the set (and without
    the mixed-precision note) its model file is, as a float64 model's card is."""
    path = write_model(WEIGHTS_MLP.format(dtype=dtype))
    card = _measured(path)
    assert card.run.precision == said
    from_file = predictor.predict(str(path), batch_sizes=[16], device_type=XEON)
    again = predictor.predict(features=card, batch_sizes=[16], device_type=XEON)
    assert from_file.prediction.model_set == again.prediction.model_set == XEON
    assert not any("mixed precision" in n for n in again.prediction.notes)
    assert predictor.predict_values(card, [16], device_type=XEON)["precision"] == "fp32"
    # an explicit precision still decides
    if said == "bf16":
        asked = predictor.predict(features=card, batch_sizes=[16], device_type=XEON, precision="bf16")
        assert asked.prediction.model_set == f"{XEON}_bf16"


def test_an_autocast_card_still_picks_its_precisions_set(predictor, write_model) -> None:
    """A guard (held before too): a file's ``PRECISION = "bf16"`` runs under autocast, its card's note says so,
    and the card picks the bf16 set, measured or predicted."""
    path = write_model(BF16_MLP)
    card = _measured(path)
    assert card.run.precision == "bf16" and any(n.startswith("precision bf16: every measurement") for n in card.notes)
    assert predictor.predict(features=card, batch_sizes=[16], device_type=XEON).prediction.model_set == f"{XEON}_bf16"
    predicted = predictor.predict(str(path), batch_sizes=[16], device_type=XEON)
    again = predictor.predict(features=predicted, batch_sizes=[16], device_type=XEON)
    assert again.prediction.model_set == f"{XEON}_bf16"


def test_the_peft_tables_predicted_time_ratios_are_the_files(predictor) -> None:
    """docs/estimators.md's PEFT table: each file's predicted step time over full.py's (Xeon set, batch 16), to
    the two decimals it gives."""
    text = (REPO / "docs" / "estimators.md").read_text()
    rows = dict(re.findall(r"^\| (full|LoRA|BitFit|prompt|adapter|head) \| [^|]+ \| [^|]+ \| ([\d.]+) \|", text, re.M))
    assert len(rows) == 6
    files = {"full": "full", "LoRA": "lora", "BitFit": "bitfit", "prompt": "prompt", "adapter": "adapter",
             "head": "head"}
    times = {k: predictor.predict(str(REPO / "benchmarks" / "peft_models" / f"{f}.py"), batch_sizes=[16],
                                  device_type=XEON).prediction.points[0].iter_time_s for k, f in files.items()}
    wrong = {k: (v, f"{times[k] / times['full']:.2f}") for k, v in rows.items()
             if float(v) != round(times[k] / times["full"], 2)}
    assert not wrong, wrong
