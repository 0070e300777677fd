"""Prompt tuning on the frozen decoder (_decoder.py): 20 trained virtual-token embeddings go before the input's
64, only they train, AdamW."""
import torch
from _decoder import D, Decoder, example_inputs, example_targets, freeze_all, loss_fn, make_optimizer  # noqa: F401
from torch import nn


def build_model() -> nn.Module:
    model = freeze_all(Decoder())
    model.prompt = nn.Parameter(torch.randn(20, D) * 0.02)
    return model
