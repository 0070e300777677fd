"""`perfpredict profile --colocation --scaling --sensitivity`: real runs end to end, card sections and plots."""

from __future__ import annotations

import json

from perfpredict.profile.netns import netns_support
from tests.conftest import TINY_MODEL

FAST = ("--min-time", "0.2", "--max-time", "1", "--no-features", "--window", "0.4")


def test_colocation_and_scaling_fill_the_card_and_the_speedup_curve(run_cli, write_model, tmp_path):
    model = write_model(TINY_MODEL)
    proc = run_cli("profile", model, "-b", "8,16", "--colocation", "--scaling", "--copies", "2",
                   "--workers", "2", "--partner", "zoo:mlp", "--out", "out", *FAST)
    assert proc.returncode == 0, proc.stderr
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    co = card["colocation"]
    assert [p["copies"] for p in co["points"]] == [1, 2] and co["device"] == "cpu"
    assert all(p["status"] == "ok" for p in co["points"])
    assert len(co["points"][1]["per_copy_samples_per_s"]) == 2
    assert co["pairs"][0]["partner"].startswith("zoo:mlp[") and co["pairs"][0]["job_slowdown"] >= 0
    sc = card["scaling"]
    assert [p["workers"] for p in sc["points"]] == [1, 2] and sc["backend"] == "gloo"
    assert sc["points"][1]["global_batch"] == 16 and sc["points"][1]["local_batch"] == 8
    curve = card["speedup_curve"]
    kinds = {p["kind"]: p for p in curve["points"]}
    assert set(kinds) == {"colocated", "data_parallel", "solo"}
    assert kinds["colocated"]["p"] == 0.5 and kinds["data_parallel"]["p"] == 2.0
    assert curve["fit"] and curve["source"] == "fitted"
    assert (tmp_path / "out" / "speedup.png").stat().st_size > 0
    if netns_support()[0]:
        cm = card["comm_model"]
        assert cm["placements"] and "lambda" in cm and "gamma" in cm
    else:
        assert any("virtual network nodes" in n for n in card["notes"])
    assert "co-location ×2" in proc.stdout and "DDP k=2" in proc.stdout


def test_sensitivity_without_an_input_pipeline_is_a_note_not_a_failure(run_cli, write_model, tmp_path):
    proc = run_cli("profile", write_model(TINY_MODEL), "-b", "8", "--sensitivity", "--out", "out", "--no-mlflow",
                   *FAST)
    assert proc.returncode == 0, proc.stderr
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    assert card["sensitivity"] is None
    assert any("make_dataset" in n for n in card["notes"])
