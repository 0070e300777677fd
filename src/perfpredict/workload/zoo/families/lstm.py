"""LSTM language models (Hochreiter & Schmidhuber 1997; the word-level setup of Zaremba et al. 2014).

Embedding → ``layers``-deep ``nn.LSTM`` (batch first) → a per-token linear decoder to the vocabulary.
Outputs ``[B, seq_len, vocab]`` logits; targets are the ``[B, seq_len]`` next-token ids, and the base
``loss_fn`` flattens both for cross-entropy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.workload.zoo.base import ZooFamily, ZooParam, generator


class LSTMLanguageModel(nn.Module):
    def __init__(self, embed: int, hidden: int, layers: int, vocab: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(ids))
        return self.decoder(out)


class LSTMFamily(ZooFamily):
    """Word-level LSTM language model, from tiny to PTB-large-like sizes."""

    name = "lstm"
    description = "LSTM language model (Hochreiter & Schmidhuber 1997; Zaremba et al. 2014 sizes)"
    task = "language"
    params = (
        ZooParam("embed", 64, "token embedding width", minimum=1),
        ZooParam("hidden", 128, "LSTM hidden size per layer", minimum=1),
        ZooParam("layers", 2, "stacked LSTM layers", minimum=1),
        ZooParam("seq_len", 64, "tokens per sequence (unrolled time steps)", minimum=1),
        ZooParam("vocab", 1000, "vocabulary size = decoder outputs per token", minimum=2),
    )
    default_batch_sizes = (8, 16, 32, 64, 128)

    def grid(self) -> list[dict[str, Any]]:
        return [
            {},  # the default: 2 x 128, seq 64, vocab 1000
            {"layers": 1},
            {"hidden": 256, "embed": 128},
            {"hidden": 256, "embed": 128, "layers": 3, "seq_len": 128},
            {"hidden": 200, "embed": 200, "seq_len": 20, "vocab": 10000},   # PTB small
            {"hidden": 650, "embed": 650, "seq_len": 35, "vocab": 10000},   # PTB medium
            {"hidden": 1500, "embed": 1500, "seq_len": 35, "vocab": 10000},  # PTB large
            {"hidden": 512, "embed": 256, "layers": 4, "seq_len": 128, "vocab": 10000},
            {"hidden": 1024, "embed": 512, "layers": 2, "seq_len": 64, "vocab": 32000},
            {"hidden": 512, "embed": 512, "layers": 2, "seq_len": 256, "vocab": 5000},
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return LSTMLanguageModel(cfg["embed"], cfg["hidden"], cfg["layers"], cfg["vocab"])

    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randint(0, cfg["vocab"], (batch_size, cfg["seq_len"]), generator=generator(0))

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randint(0, cfg["vocab"], (batch_size, cfg["seq_len"]), generator=generator(1))

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        t = cfg["seq_len"]
        return {"input (token ids)": t, "embedded tokens": t * cfg["embed"], "LSTM output": t * cfg["hidden"],
                "per-token logits": t * cfg["vocab"]}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        return cfg["layers"]

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        t, e, h = cfg["seq_len"], cfg["embed"], cfg["hidden"]
        recurrent = t * 4 * h * (e + h) + (cfg["layers"] - 1) * t * 4 * h * (h + h)
        return recurrent + t * h * cfg["vocab"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        e, h, v = cfg["embed"], cfg["hidden"], cfg["vocab"]
        lstm = 4 * h * (e + h) + 8 * h + (cfg["layers"] - 1) * (4 * h * (h + h) + 8 * h)
        return v * e + lstm + h * v + v
