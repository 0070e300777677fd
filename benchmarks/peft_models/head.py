"""A frozen decoder (_decoder.py) under a trained classification head (linear probing), AdamW."""
from _decoder import Decoder, example_inputs, example_targets, freeze_all, loss_fn, make_optimizer  # noqa: F401
from torch import nn


def build_model() -> nn.Module:
    model = freeze_all(Decoder())
    model.head.requires_grad_(True)
    return model
