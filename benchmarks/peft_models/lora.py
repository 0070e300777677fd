"""LoRA (r=8, alpha 16) on every block's query and value projections of the frozen decoder (_decoder.py): only
the A and B matrices train, AdamW."""
from _decoder import Decoder, LoRALinear, example_inputs, example_targets, freeze_all, loss_fn, make_optimizer  # noqa: F401
from torch import nn


def build_model() -> nn.Module:
    model = freeze_all(Decoder())
    for block in model.blocks:
        block.q, block.v = LoRALinear(block.q), LoRALinear(block.v)
    return model
