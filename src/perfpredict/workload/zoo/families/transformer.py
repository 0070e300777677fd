"""Transformer encoder classifiers (Vaswani et al. 2017, "Attention Is All You Need"; BERT-style sizes from
Devlin et al. 2019 and Turc et al. 2019).

Token embedding + learned positional embedding → ``layers`` post-norm encoder layers
(``nn.TransformerEncoderLayer``: multi-head self-attention and a ReLU feed-forward of ``ffn_mult * d_model``,
dropout 0.1) → mean pool over tokens → LayerNorm → linear head. Inputs are int64 token ids ``[B, seq_len]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ZooFamily, ZooParam, generator

DROPOUT = 0.1


class TransformerClassifier(nn.Module):
    def __init__(self, layers: int, d_model: int, heads: int, ffn_mult: int, seq_len: int, vocab: int,
                 num_classes: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Parameter(torch.empty(1, seq_len, d_model))
        nn.init.normal_(self.positions, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ffn_mult * d_model, dropout=DROPOUT,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions[:, : ids.shape[1]]
        x = self.encoder(x)
        return self.head(self.norm(x.mean(dim=1)))


class TransformerFamily(ZooFamily):
    """Encoder-only Transformer sequence classifier, from BERT-tiny-like up to BERT-large-like sizes."""

    name = "transformer"
    description = "Transformer encoder classifier (Vaswani et al. 2017), BERT-style sizes"
    task = "language"
    params = (
        ZooParam("layers", 2, "encoder layers (BERT-base: 12)", minimum=1),
        ZooParam("d_model", 128, "model (embedding) width (BERT-base: 768)", minimum=1),
        ZooParam("heads", 4, "attention heads; must divide d_model (BERT-base: 12)", minimum=1),
        ZooParam("ffn_mult", 4, "feed-forward width as a multiple of d_model", minimum=1),
        ZooParam("seq_len", 64, "tokens per sequence", minimum=1),
        ZooParam("vocab", 1000, "vocabulary size (BERT: 30522)", minimum=2),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        if cfg["d_model"] % cfg["heads"]:
            raise UsageError(f"transformer heads ({cfg['heads']}) must divide d_model ({cfg['d_model']})",
                             step="zoo parameters")

    def grid(self) -> list[dict[str, Any]]:
        bert = {"vocab": 30522, "num_classes": 2}
        return [
            {},  # the default: 2 x 128, seq 64
            {"layers": 4, "d_model": 128, "heads": 4, "seq_len": 128},
            {"layers": 2, "d_model": 128, "heads": 2, "seq_len": 128, **bert},        # BERT-tiny
            {"layers": 4, "d_model": 256, "heads": 4, "seq_len": 128, **bert},        # BERT-mini
            {"layers": 4, "d_model": 512, "heads": 8, "seq_len": 128, **bert},        # BERT-small
            {"layers": 8, "d_model": 512, "heads": 8, "seq_len": 128, **bert},        # BERT-medium
            {"layers": 6, "d_model": 256, "heads": 8, "seq_len": 256},
            {"layers": 6, "d_model": 512, "heads": 8, "ffn_mult": 2, "seq_len": 256},
            {"layers": 12, "d_model": 768, "heads": 12, "seq_len": 128, **bert},      # BERT-base
            {"layers": 12, "d_model": 768, "heads": 12, "seq_len": 256, **bert},
            {"layers": 12, "d_model": 768, "heads": 12, "seq_len": 512, **bert},
            {"layers": 24, "d_model": 1024, "heads": 16, "seq_len": 128, **bert},     # BERT-large
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return TransformerClassifier(cfg["layers"], cfg["d_model"], cfg["heads"], cfg["ffn_mult"], cfg["seq_len"],
                                     cfg["vocab"], cfg["num_classes"])

    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randint(0, cfg["vocab"], (batch_size, cfg["seq_len"]), generator=generator(0))

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randint(0, cfg["num_classes"], (batch_size,), generator=generator(1))

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        # with the heads x seq_len² attention scores: a fused kernel (flash, memory-efficient) need not materialise
        # them, but a training step on the CPU does (seq_len=4096, 8 heads: 2.1 GB peak for 0.54 GB of scores),
        # and d_model=4 seq_len=2e5 (1.6e11 scores) passed the cap on the feed-forward layer alone
        t = cfg["seq_len"]
        return {"input (token ids)": t, "feed-forward hidden layer": t * cfg["ffn_mult"] * cfg["d_model"],
                "attention scores": cfg["heads"] * t * t}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        return cfg["layers"]

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        t, d = cfg["seq_len"], cfg["d_model"]
        ffn = cfg["ffn_mult"] * d
        projections = 4 * t * d * d          # q, k, v and output projections
        attention = 2 * t * t * d            # Q K^T and attn · V, summed over heads
        feed_forward = 2 * t * d * ffn
        return cfg["layers"] * (projections + attention + feed_forward) + d * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        t, d, nc = cfg["seq_len"], cfg["d_model"], cfg["num_classes"]
        ffn = cfg["ffn_mult"] * d
        attention = (3 * d * d + 3 * d) + (d * d + d)
        feed_forward = (d * ffn + ffn) + (ffn * d + d)
        norms = 2 * (2 * d)
        per_layer = attention + feed_forward + norms
        embeddings = cfg["vocab"] * d + t * d
        return embeddings + cfg["layers"] * per_layer + 2 * d + d * nc + nc
