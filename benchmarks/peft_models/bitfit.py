"""BitFit on the decoder (_decoder.py): only the biases train (the Linears' and LayerNorms'), AdamW."""
from _decoder import Decoder, example_inputs, example_targets, loss_fn, make_optimizer  # noqa: F401
from torch import nn


def build_model() -> nn.Module:
    model = Decoder()
    for name, p in model.named_parameters():
        p.requires_grad_(name.endswith("bias"))
    return model
