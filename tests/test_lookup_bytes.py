"""Weights that are only looked up (embedding tables): counted from the ONNX graph, carried to the feature vector,
and left out of what an inference pass's time baseline charges as read."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from torch import nn

from perfpredict.errors import PerfPredictError
from perfpredict.estimators.arch import from_onnx_proto, from_table_row
from perfpredict.estimators.design import FEATURE_NAMES, design_row
from perfpredict.features.graph import analyze_onnx
from perfpredict.features.onnx_export import export_onnx
from tests.conftest import REPO


class _Tagger(nn.Module):
    """An embedding read by lookup, a classifier read whole; optionally the classifier *is* the embedding."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(500, 16)
        self.mix = nn.Linear(16, 16)
        self.out = nn.Linear(16, 500, bias=False)
        if tied:
            self.out.weight = self.emb.weight

    def forward(self, tokens):
        return self.out(torch.relu(self.mix(self.emb(tokens))))


def _proto(model: nn.Module):
    return export_onnx(model, (torch.randint(0, 500, (2, 7)),)).model_proto


def test_an_embedding_table_is_lookup_only_unless_a_matmul_also_reads_it():
    torch.manual_seed(0)
    untied, tied = _Tagger(tied=False), _Tagger(tied=True)
    table = 500 * 16 * 4
    s = analyze_onnx(_proto(untied))
    assert s.lookup_param_bytes == table
    assert s.initializer_bytes == sum(p.numel() * 4 for p in untied.parameters())
    # Tied to the output projection, the table is read whole by the MatMul: nothing is lookup-only.
    assert analyze_onnx(_proto(tied)).lookup_param_bytes == 0
    # The service's path (shape inference only, weights dropped) counts the same bytes.
    arch = from_onnx_proto(_proto(untied))
    assert arch.lookup_param_bytes == table
    row = design_row(arch, 8)
    assert row["log_dense_param_bytes"] == pytest.approx(np.log10(arch.param_bytes - table + 1))
    assert row["log_param_bytes"] > row["log_dense_param_bytes"]


def test_a_model_without_embeddings_has_no_lookup_bytes():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    s = analyze_onnx(export_onnx(model, (torch.randn(2, 8),)).model_proto)
    assert s.lookup_param_bytes == 0 and s.initializer_bytes > 0


def test_the_features_table_has_lookup_bytes_for_every_architecture_and_they_match_the_modules():
    """Every exported row carries the column; for the zoo it equals the bytes of its nn.Embedding(Bag) weights
    (each family's embeddings are only looked up, never tied to a projection)."""
    from perfpredict.workload.zoo import get_family

    with open(REPO / "datasets" / "zoo_features.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if not r["error"]]
    assert rows and all(r["lookup_param_bytes"] not in (None, "") for r in rows)
    for r in rows:
        fam = get_family(r["family"])
        with torch.device("meta"):
            model = fam.build_model(fam.resolve(json.loads(r["config_json"])))
        emb = sum(m.weight.numel() * m.weight.element_size() for m in model.modules()
                  if isinstance(m, (nn.Embedding, nn.EmbeddingBag)))
        assert float(r["lookup_param_bytes"]) == emb, r["config"]
        assert float(r["lookup_param_bytes"]) <= float(r["param_bytes"])
    assert {r["family"] for r in rows if float(r["lookup_param_bytes"]) > 0} == {"dlrm", "lstm", "transformer"}


def test_a_table_row_without_the_column_is_an_error_not_a_silent_zero():
    with open(REPO / "datasets" / "zoo_features.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["family"] == "dlrm")
    assert from_table_row(row).lookup_param_bytes > 0
    with pytest.raises(PerfPredictError, match="lookup_param_bytes"):
        from_table_row({k: v for k, v in row.items() if k != "lookup_param_bytes"})


def test_the_service_rejects_lookup_bytes_larger_than_the_parameters():
    from pydantic import ValidationError

    from perfpredict.service import FeatureVector

    ok = {"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5, "activation_bytes_per_sample": 1e4,
          "num_nodes": 10}
    assert FeatureVector(**ok, lookup_param_bytes=2e5).lookup_param_bytes == 2e5
    assert FeatureVector(**ok).lookup_param_bytes == 0
    with pytest.raises(ValidationError, match="cannot exceed"):
        FeatureVector(**ok, lookup_param_bytes=5e5)
    assert "log_dense_param_bytes" in FEATURE_NAMES


def test_the_backfill_fills_missing_cells_and_leaves_a_failed_export_empty(tmp_path):
    from perfpredict.dataset.features_table import FEATURE_TABLE_COLUMNS, backfill_export_columns, read_features_table

    columns = ("lookup_param_bytes", "recurrent_steps_json")
    with open(REPO / "datasets" / "zoo_features.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    smallest = {fam: min((r for r in rows if r["family"] == fam), key=lambda r: float(r["param_bytes"]))
                for fam in ("lstm", "mlp")}
    broken = dict(smallest["lstm"], config="lstm-broken", config_json=json.dumps({"layers": "many"}))
    table = tmp_path / "features.csv"
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FEATURE_TABLE_COLUMNS)
        w.writeheader()
        for r in (smallest["lstm"], smallest["mlp"], broken):
            w.writerow({k: ("" if k in columns else r.get(k)) for k in FEATURE_TABLE_COLUMNS})
    seen: list[tuple[str, str, object]] = []
    assert backfill_export_columns(table, lambda *a: seen.append(a)) == {c: 2 for c in columns}
    got = read_features_table(table)
    lstm, mlp = got[smallest["lstm"]["config"]], got[smallest["mlp"]["config"]]
    want = float(smallest["lstm"]["lookup_param_bytes"])
    assert want > 0 and float(lstm["lookup_param_bytes"]) == want
    assert json.loads(lstm["recurrent_steps_json"]) == json.loads(smallest["lstm"]["recurrent_steps_json"])
    assert json.loads(lstm["recurrent_steps_json"])["LSTM"] > 0
    # no Gather and no recurrent op: known without an export
    assert float(mlp["lookup_param_bytes"]) == 0 and mlp["recurrent_steps_json"] == "{}"
    assert got["lstm-broken"]["lookup_param_bytes"] == "" and got["lstm-broken"]["recurrent_steps_json"] == ""
    assert {("lstm-broken", c, None) for c in columns} <= set(seen)
    # the filled rows are not redone; the broken one fails again, quietly
    assert backfill_export_columns(table) == {c: 0 for c in columns}
