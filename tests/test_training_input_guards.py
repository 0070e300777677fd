"""Damaged datasets, model folders and resumed collection files (an audit in session 37): each ends in one line
naming the file, the other model sets still answer, and rows already measured are kept. Before, most of these were
"internal error ... please report it" (exit 70), which called the user's damaged file perfpredict's bug."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from perfpredict.errors import PerfPredictError
from perfpredict.estimators.data import load_training_data
from tests.test_train_bad_input import _copy_set

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO / "datasets"
MODELS = REPO / "trained_models"
SMALL = "cpu_xeon_2vcpu"


def _edit_cells(path: Path, column: str, value: str, rows: int | None = 1) -> None:
    with open(path, newline="") as f:
        body = list(csv.reader(f))
    i = body[0].index(column)
    for r in body[1:(None if rows is None else 1 + rows)]:
        r[i] = value
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(body)


@pytest.mark.parametrize("file, column, value, needle", [
    ("data", "batch_size", "inf", "batch_size 'inf' is not a whole number"),
    ("data", "batch_size", "1e400", "is not a whole number"),
    ("features", "param_bytes", "nan", "do not parse"),
    ("data", "mode", "foo", "a row's mode is train or infer"),
])
def test_impossible_cells_are_one_named_error(tmp_path, file, column, value, needle):
    csv_path = _copy_set(tmp_path)
    target = csv_path if file == "data" else tmp_path / "zoo_features.csv"
    _edit_cells(target, column, value, rows=None if column in ("mode", "param_bytes") else 1)
    with pytest.raises(PerfPredictError, match=needle):
        load_training_data(csv_path)


def test_text_in_a_column_the_set_does_not_train_on_is_one_line(tmp_path, run_cli):
    csv_path = _copy_set(tmp_path / "ds")
    _edit_cells(csv_path, "gpu_utilization", "n/a")
    proc = run_cli("train", "--datasets", "ds", "--out", "models", "--no-eval", "--no-mlflow", timeout=300)
    assert proc.returncode not in (0, 70), proc.stderr[-2000:]
    assert "column gpu_utilization" in proc.stderr and "'n/a', not a number" in proc.stderr
    assert "internal error" not in proc.stderr


def test_cross_validation_on_too_few_rows_says_so(tmp_path, run_cli):
    csv_path = _copy_set(tmp_path / "ds")
    with open(csv_path, newline="") as f:
        body = list(csv.reader(f))
    h = body[0]
    fam, status = h.index("family"), h.index("status")
    ok = [r for r in body[1:] if r[status] == "ok"]
    keep, seen = [], set()
    for r in ok:  # one row from each of four families
        if r[fam] not in seen and len(keep) < 4:
            seen.add(r[fam])
            keep.append(r)
    with open(csv_path, "w", newline="") as f:
        csv.writer(f).writerows([h, *keep])
    proc = run_cli("train", "--datasets", "ds", "--out", "models", "--no-mlflow", timeout=300)
    assert proc.returncode not in (0, 70), proc.stderr[-2000:]
    assert "needs at least 5 rows" in " ".join(proc.stderr.split()) and "internal error" not in proc.stderr


def _models_with(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "models"
    for n in names:
        shutil.copytree(MODELS / n, root / n)
    return root


def test_a_booster_copied_from_another_set_is_refused_at_load_not_at_every_prediction(tmp_path):
    from perfpredict import Predictor

    root = _models_with(tmp_path, "cuda_h100", SMALL)
    for f in ("iter_time.xgb.json", "iter_time.quantile.xgb.json"):
        shutil.copy(MODELS / SMALL / f, root / "cuda_h100" / f)
    pred = Predictor.load(root)
    assert "cuda_h100" not in pred.sets and SMALL in pred.sets
    assert "does not fit this set's features" in pred.unusable_sets["cuda_h100"]


def test_a_cut_booster_is_reported_in_one_line(tmp_path):
    from perfpredict import Predictor

    root = _models_with(tmp_path, "cuda_h100", SMALL)
    booster = root / SMALL / "iter_time.xgb.json"
    booster.write_bytes(booster.read_bytes()[: booster.stat().st_size // 2])
    pred = Predictor.load(root)
    why = pred.unusable_sets[SMALL]
    assert "\n" not in why and "[bt]" not in why, why


def test_a_set_folder_without_its_metadata_is_named(tmp_path):
    from perfpredict import Predictor

    root = _models_with(tmp_path, "cuda_h100", SMALL)
    (root / SMALL / "metadata.json").unlink()
    pred = Predictor.load(root)
    assert "no metadata.json" in pred.unusable_sets[SMALL]


def test_a_damaged_calibration_leaves_out_only_itself(tmp_path):
    from perfpredict import Predictor

    root = _models_with(tmp_path, "cuda_h100", "cpu_epyc_2vcpu")
    doc = json.loads((DATASETS / "calibrations" / "cpu_epyc_2vcpu_on_intel_f6m207.json").read_text())
    first = next(iter(doc["architectures"]))
    doc["architectures"][first] = {}
    (root / "calib").mkdir()
    (root / "calib" / "calibration.json").write_text(json.dumps(doc))
    pred = Predictor.load(root)
    assert {"cuda_h100", "cpu_epyc_2vcpu"} <= set(pred.sets)
    assert any("not a calibration this perfpredict reads" in line or "calibration.json" in line
               for line in pred.unusable_calibrations), pred.unusable_calibrations


@pytest.mark.parametrize("tail", [b"\0" * 64, "7,café ✗".encode()[:-2]])
def test_resume_drops_a_garbled_last_row_and_keeps_the_rest(tmp_path, tail):
    """NUL bytes a crash left after the last row, or a row cut inside a multi-byte character, made the whole file
    "not a CSV text file": resuming meant throwing the measured rows away."""
    from perfpredict.dataset.collect import prepare_resume

    p = tmp_path / "d.csv"
    p.write_bytes(b"a,b\r\n1,x\r\n2,y\r\n" + tail)
    rows, dropped = prepare_resume(p, ["a", "b"])
    assert rows == [{"a": "1", "b": "x"}, {"a": "2", "b": "y"}] and dropped is not None
    assert p.read_bytes() == b"a,b\r\n1,x\r\n2,y\r\n"


def test_resume_still_refuses_bad_bytes_before_the_last_row(tmp_path):
    from perfpredict.dataset.collect import prepare_resume
    from perfpredict.errors import UsageError

    p = tmp_path / "d.csv"
    before = b"a,b\r\n1,\0x\r\n2,y\r\n"
    p.write_bytes(before)
    with pytest.raises(UsageError, match="NUL bytes"):
        prepare_resume(p, ["a", "b"])
    assert p.read_bytes() == before


def test_a_file_not_of_ours_is_refused_untouched_even_with_a_garbled_tail(tmp_path):
    """The garbled tail was cut before the header check: a wrong --out lost its last line, then was refused."""
    from perfpredict.dataset.collect import prepare_resume
    from perfpredict.errors import UsageError

    p = tmp_path / "notes.csv"
    before = b"name,score\nalice,1\ncaf\xe9,2"
    p.write_bytes(before)
    with pytest.raises(UsageError):
        prepare_resume(p, ["a", "b"])
    assert p.read_bytes() == before


def test_a_garbled_tail_under_an_older_header_is_dropped_by_the_upgrade_and_reported(tmp_path):
    from perfpredict.dataset.collect import prepare_resume, upgrade_header

    p = tmp_path / "coloc.csv"
    p.write_bytes(b"a,b\r\n1,x\r\n" + b"\0" * 8)
    assert upgrade_header(p, ["a", "b", "c"], [["a", "b"]]) == ["a", "b"]
    rows, dropped = prepare_resume(p, ["a", "b", "c"])
    assert rows == [{"a": "1", "b": "x", "c": ""}] and dropped is not None
