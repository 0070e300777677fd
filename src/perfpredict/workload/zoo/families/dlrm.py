"""DLRM recommendation models (Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and
Recommendation Systems"), in the layout of the reference implementation's Criteo setup.

A sample is ``num_dense`` continuous features (Criteo: 13 log-transformed counts) and ``num_tables`` categorical
features (Criteo: 26 hashed ids), each an index (or ``lookups`` indices, multi-hot) into its own embedding table
of ``rows_per_table`` × ``emb_dim``. The dense features go through the bottom MLP (Linear + ReLU, last layer
to ``emb_dim``); every categorical feature is looked up in its table (multi-hot lookups are summed, the
``sum`` mode of the reference's ``EmbeddingBag``). The ``n = num_tables + 1`` vectors meet in the pairwise
dot-product interaction: ``Z = T Tᵀ`` for ``T = [bottom output, embeddings]`` ([B, n, emb_dim]), of which the
strictly lower triangle (the ``n(n-1)/2`` distinct pairs, no self-interaction) is kept and concatenated with the
bottom MLP's output. The top MLP (Linear + ReLU, no ReLU on its last layer) maps that to one click logit
``[B, 1]``; the loss is binary cross-entropy with logits against 0/1 click labels ``[B, 1]`` (float).

The tables are plain ``nn.Embedding`` with dense gradients (the reference's default, not ``sparse=True``), so
each step writes a full-size gradient and the optimizer updates every row: the memory-bound regime of DLRM on
one device. ``nn.Embedding`` + sum is used rather than ``nn.EmbeddingBag`` because it exports to plain ONNX
``Gather`` + ``ReduceSum`` (the TorchScript exporter turns an EmbeddingBag into a Loop).

MACs (:meth:`DLRMFamily.closed_form_macs`) are the two MLPs' and the interaction's batched matmul as computed,
``n·n·emb_dim`` per sample (the whole ``T Tᵀ``, of which only the lower triangle is used afterwards, as the
reference computes it). Embedding lookups count 0 MACs: they are gathers (memory traffic, no multiply-add),
``Gather`` in the ONNX graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ZooFamily, ZooParam, generator


def parse_widths(spec: str) -> list[int]:
    """``"512-256-64"`` → ``[512, 256, 64]``; ``""`` → ``[]``. Raises ValueError on anything else."""
    spec = spec.strip()
    if not spec:
        return []
    widths = [int(w) for w in spec.split("-")]
    if any(w < 1 for w in widths):
        raise ValueError(spec)
    return widths


def _mlp(dims: list[int], relu_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        lin = nn.Linear(a, b)
        # The reference's initialisation: weights N(0, sqrt(2 / (fan_in + fan_out))), biases N(0, sqrt(1 / fan_out)).
        nn.init.normal_(lin.weight, 0.0, (2.0 / (a + b)) ** 0.5)
        nn.init.normal_(lin.bias, 0.0, (1.0 / b) ** 0.5)
        layers.append(lin)
        if relu_last or i < len(dims) - 2:
            layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class DotInteraction(nn.Module):
    """``T`` [B, n, d] → its ``n(n-1)/2`` pairwise dot products [B, n(n-1)/2]: the strict lower triangle of T Tᵀ."""

    def __init__(self, n: int) -> None:
        super().__init__()
        li, lj = torch.tril_indices(n, n, offset=-1)
        # Flat positions in the [n * n] row-major products: one Gather in ONNX. A buffer, so it moves with the
        # model and a forward pass does not build it (nor copy it to the device) again.
        self.register_buffer("pairs", li * n + lj)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        z = torch.bmm(t, t.transpose(1, 2))
        return z.flatten(1).index_select(1, self.pairs)


class DLRM(nn.Module):
    def __init__(self, num_dense: int, num_tables: int, rows_per_table: int, emb_dim: int,
                 bottom: list[int], top: list[int]) -> None:
        super().__init__()
        self.bottom = _mlp([num_dense, *bottom, emb_dim], relu_last=True)
        # The reference's U(-sqrt(1/rows), sqrt(1/rows)), drawn once (not over nn.Embedding's own N(0, 1) init:
        # the tables are most of the model, GBs at the top of the grid).
        bound = (1.0 / rows_per_table) ** 0.5
        self.embeddings = nn.ModuleList(
            nn.Embedding(rows_per_table, emb_dim, _weight=torch.empty(rows_per_table, emb_dim).uniform_(-bound, bound))
            for _ in range(num_tables))
        n = num_tables + 1
        self.interaction = DotInteraction(n)
        self.top = _mlp([emb_dim + n * (n - 1) // 2, *top, 1], relu_last=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``dense`` [B, num_dense] float, ``sparse`` [B, num_tables] (one-hot) or [B, num_tables, lookups]
        (multi-hot, summed) int64 → click logits [B, 1]."""
        x = self.bottom(dense)
        vectors = [x]
        for i, emb in enumerate(self.embeddings):
            e = emb(sparse[:, i])
            vectors.append(e.sum(1) if e.dim() == 3 else e)
        z = self.interaction(torch.stack(vectors, dim=1))
        return self.top(torch.cat([x, z], dim=1))


class DLRMFamily(ZooFamily):
    """DLRM click-through-rate models, from a toy to Criteo-scale tables of several GB."""

    name = "dlrm"
    description = ("DLRM recommendation model (Naumov et al. 2019): bottom MLP, per-feature embedding tables, "
                   "pairwise dot interaction, top MLP to a click logit")
    task = "recommendation"
    params = (
        ZooParam("num_dense", 13, "continuous input features (Criteo: 13)", minimum=1),
        ZooParam("num_tables", 8, "categorical features, one embedding table each (Criteo: 26)", minimum=1),
        ZooParam("rows_per_table", 1000, "rows of every embedding table (hashed ids are taken modulo it)",
                 minimum=1),
        ZooParam("emb_dim", 16, "embedding width = the bottom MLP's output width", minimum=1),
        ZooParam("lookups", 1, "indices per table per sample, summed (1 = one-hot as in Criteo)", minimum=1),
        ZooParam("bottom_mlp", "64-32", "hidden widths of the bottom MLP, dash-separated (then a layer to "
                 "emb_dim); empty = one Linear"),
        ZooParam("top_mlp", "64-32", "hidden widths of the top MLP, dash-separated (then a layer to 1 logit); "
                 "empty = one Linear"),
    )
    default_batch_sizes = (8, 16, 32, 64, 128)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        for key in ("bottom_mlp", "top_mlp"):
            try:
                parse_widths(cfg[key])
            except ValueError:
                raise UsageError(f"dlrm {key} must be positive integers separated by '-', e.g. 512-256, "
                                 f"got {cfg[key]!r}", step="zoo parameters") from None

    def canonical(self, cfg: dict[str, Any]) -> dict[str, Any]:
        return {**cfg, **{k: "-".join(str(w) for w in parse_widths(cfg[k])) for k in ("bottom_mlp", "top_mlp")}}

    def grid(self) -> list[dict[str, Any]]:
        criteo = {"num_tables": 26, "bottom_mlp": "512-256"}
        mlperf_top = "1024-1024-512-256"
        return [
            {},  # the default: 8 tables x 1000 x 16, 13-64-32-16 bottom, 64-32-1 top
            {"num_tables": 4, "rows_per_table": 500, "emb_dim": 8, "bottom_mlp": "32", "top_mlp": "32"},
            {"rows_per_table": 10000, "emb_dim": 32, "bottom_mlp": "128-64", "top_mlp": "128-64"},
            {"num_tables": 16, "rows_per_table": 20000, "emb_dim": 32, "lookups": 4,
             "bottom_mlp": "128-64", "top_mlp": "256-128"},                          # multi-hot
            # the reference's Criteo Kaggle setup (13-512-256-64-16 bottom, 512-256-1 top), 100k-row tables
            {**criteo, "rows_per_table": 100000, "emb_dim": 16, "bottom_mlp": "512-256-64", "top_mlp": "512-256"},
            {**criteo, "rows_per_table": 50000, "emb_dim": 32, "bottom_mlp": "256-128", "top_mlp": "512-256"},
            {**criteo, "rows_per_table": 100000, "emb_dim": 64, "top_mlp": mlperf_top},
            {**criteo, "rows_per_table": 20000, "emb_dim": 128, "top_mlp": "2048-2048-1024-512"},  # compute-heavy
            {"num_tables": 8, "rows_per_table": 200000, "emb_dim": 64, "lookups": 8,
             "bottom_mlp": "256-128", "top_mlp": "512-256"},                         # multi-hot
            {**criteo, "rows_per_table": 250000, "emb_dim": 64, "top_mlp": mlperf_top},
            # MLPerf's Criteo Terabyte architecture (13-512-256-128 bottom, 1024-1024-512-256-1 top), tables capped
            {**criteo, "rows_per_table": 250000, "emb_dim": 128, "top_mlp": mlperf_top},             # 3.4 GB
            {**criteo, "rows_per_table": 500000, "emb_dim": 64, "top_mlp": mlperf_top},              # 3.4 GB
            {"num_tables": 13, "rows_per_table": 1000000, "emb_dim": 64, "bottom_mlp": "512-256",
             "top_mlp": mlperf_top},                                                 # 3.3 GB
            {"num_tables": 6, "rows_per_table": 2000000, "emb_dim": 64, "lookups": 4, "bottom_mlp": "512-256",
             "top_mlp": "512-256"},                                                  # 3.1 GB, multi-hot
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return DLRM(cfg["num_dense"], cfg["num_tables"], cfg["rows_per_table"], cfg["emb_dim"],
                    parse_widths(cfg["bottom_mlp"]), parse_widths(cfg["top_mlp"]))

    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(dense [B, num_dense] float32: log(1 + count), sparse [B, num_tables(, lookups)] int64 indices)."""
        counts = torch.randint(0, 1000, (batch_size, cfg["num_dense"]), generator=generator(0))
        shape = (batch_size, cfg["num_tables"]) + ((cfg["lookups"],) if cfg["lookups"] > 1 else ())
        sparse = torch.randint(0, cfg["rows_per_table"], shape, generator=generator(2))
        return torch.log1p(counts.float()), sparse

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        """0/1 click labels ``[B, 1]`` as float32 (the shape of the logits)."""
        return torch.randint(0, 2, (batch_size, 1), generator=generator(1)).float()

    def loss_fn(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy of the click logits ``[B, 1]`` against 0/1 labels ``[B, 1]``."""
        return F.binary_cross_entropy_with_logits(outputs, targets.to(outputs.dtype))

    def _dims(self, cfg: Mapping[str, Any]) -> tuple[list[int], list[int]]:
        n = cfg["num_tables"] + 1
        bottom = [cfg["num_dense"], *parse_widths(cfg["bottom_mlp"]), cfg["emb_dim"]]
        top = [cfg["emb_dim"] + n * (n - 1) // 2, *parse_widths(cfg["top_mlp"]), 1]
        return bottom, top

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        n = cfg["num_tables"] + 1
        return {"dense features": cfg["num_dense"], "table indices": cfg["num_tables"] * cfg["lookups"],
                "interaction's stacked vectors": n * cfg["emb_dim"], "interaction's T Tᵀ": n * n}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        """Embedding tables and the two MLPs' Linear layers."""
        bottom, top = self._dims(cfg)
        return cfg["num_tables"] + len(bottom) - 1 + len(top) - 1

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        """Bottom and top MLPs, plus the interaction's ``T Tᵀ`` (n·n·emb_dim); lookups and their sums: 0."""
        bottom, top = self._dims(cfg)
        n = cfg["num_tables"] + 1
        mlps = sum(a * b for dims in (bottom, top) for a, b in zip(dims, dims[1:]))
        return mlps + n * n * cfg["emb_dim"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        bottom, top = self._dims(cfg)
        mlps = sum(a * b + b for dims in (bottom, top) for a, b in zip(dims, dims[1:]))
        return mlps + cfg["num_tables"] * cfg["rows_per_table"] * cfg["emb_dim"]
