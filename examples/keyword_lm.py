"""A small causal language model called with keyword arguments, the Hugging Face way.

``example_inputs`` returns a dict, so perfpredict calls ``model(**inputs)``; the model computes its own loss
from ``labels`` and returns it in a dict, which ``loss_fn`` picks out. A Hugging Face model is profiled the
same way: ``build_model`` returns e.g. ``AutoModelForCausalLM.from_config(config)`` and ``example_inputs`` the
tokenizer-shaped dict.

    perfpredict profile examples/keyword_lm.py
"""

import torch
import torch.nn as nn

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 2048, 64, 128, 4, 2


class TinyCausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(CONTEXT, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        causal = torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), diagonal=1)  # True: may not attend
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, input_ids, attention_mask=None, labels=None):
        n = input_ids.shape[1]
        h = self.tokens(input_ids) + self.positions(torch.arange(n, device=input_ids.device))
        padding = None if attention_mask is None else attention_mask == 0
        h = self.blocks(h, mask=self.causal_mask[:n, :n], src_key_padding_mask=padding)
        logits = self.lm_head(self.norm(h))
        out = {"logits": logits}
        if labels is not None:  # next-token prediction, as a causal LM's forward computes it
            out["loss"] = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return out


def build_model() -> nn.Module:
    return TinyCausalLM()


def example_inputs(batch_size: int) -> dict:
    ids = torch.randint(0, VOCAB, (batch_size, CONTEXT))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def loss_fn(outputs):
    return outputs["loss"]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-4)


BATCH_SIZES = [4, 8, 16, 32]
MODEL_NAME = "keyword-lm"
