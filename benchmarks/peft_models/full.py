"""Full fine-tuning of the shared decoder (_decoder.py): every weight trains, AdamW."""
from _decoder import Decoder, example_inputs, example_targets, loss_fn, make_optimizer  # noqa: F401
from torch import nn


def build_model() -> nn.Module:
    return Decoder()
