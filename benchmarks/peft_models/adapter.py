"""Bottleneck adapters (256 -> 32 -> 256, GELU, residual) after each frozen block of the decoder (_decoder.py):
only the adapters train, AdamW."""
from _decoder import D, Decoder, example_inputs, example_targets, freeze_all, loss_fn, make_optimizer  # noqa: F401
from torch import nn


def build_model() -> nn.Module:
    model = freeze_all(Decoder())
    model.adapters = nn.ModuleList(nn.Sequential(nn.Linear(D, 32), nn.GELU(), nn.Linear(32, D))
                                   for _ in model.blocks)
    return model
