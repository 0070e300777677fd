"""A Hugging Face GPT-2 built from a config (nothing downloaded), profiled through its keyword arguments.

Needs the optional `transformers` package (`pip install transformers`; perfpredict does not depend on it):

    perfpredict profile examples/hf_gpt2.py
    perfpredict predict examples/hf_gpt2.py -b 8 --device-type cpu
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

CONFIG = dict(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=64)


def build_model() -> torch.nn.Module:
    return GPT2LMHeadModel(GPT2Config(**CONFIG))


def example_inputs(batch_size: int) -> dict:
    ids = torch.randint(0, CONFIG["vocab_size"], (batch_size, CONFIG["n_positions"]))
    # labels: the model computes its own next-token loss; use_cache=False: a training step keeps no KV cache
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids, "use_cache": False}


def loss_fn(outputs):
    return outputs["loss"]  # a ModelOutput is a dict


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-4)


BATCH_SIZES = [4, 8, 16, 32]
MODEL_NAME = "hf-gpt2-tiny"
