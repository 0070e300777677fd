"""The dataset and co-location collectors on bad input and after an interrupted run: one readable message and a
non-zero exit, never a traceback; rows already measured are kept, a row cut short is measured again."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfpredict.dataset.collect import (
    DATASET_COLUMNS,
    CollectSettings,
    _done_points,
    collect,
    plan_sweep,
    prepare_resume,
    provenance_path,
    read_dataset,
    row_from_result,
)
from perfpredict.errors import UsageError
from perfpredict.profile.timing import TimingConfig
from tests.conftest import interrupt_after_first_row, load_script

REPO = Path(__file__).resolve().parents[1]
DATASET_SCRIPT = REPO / "profilers" / "collect_dataset.py"
COLOCATION_SCRIPT = REPO / "profilers" / "collect_colocation.py"
QUICK = TimingConfig(warmup_iters=2, warmup_s=0.05, min_iters=5, min_time_s=0.1, max_time_s=1.0)


def _colocation():
    return load_script(COLOCATION_SCRIPT)


def _run(script: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def _tiny_plan():
    (plan,) = plan_sweep(["mlp"], batch_sizes=[8, 16], max_gmacs=0.0005)[:1]
    return plan


def _fake_ok_row(plan, batch: int) -> dict:
    res = {"status": "ok", "batch_size": batch, "timing": {"median_s": 0.001, "p10_s": 0.0009, "p90_s": 0.0011,
                                                           "cv": 0.05, "iterations": 20},
           "memory": {"peak_bytes": 1000, "kind": "cpu_rss_increase"}, "threads": 1}
    return row_from_result(plan, res, "train", "cpu")


def _write(path: Path, rows: list[dict], tail: str = "") -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=DATASET_COLUMNS)
        w.writeheader()
        w.writerows(rows)
        f.write(tail)


def test_a_cut_short_last_row_is_dropped_and_measured_again(tmp_path) -> None:
    """An interrupted run left half a row without a line end: the resumed run's row is not glued onto it (it
    was lost before), the complete rows stay, and the cut point is measured again."""
    plan = _tiny_plan()
    out = tmp_path / "cpu.csv"
    done = _fake_ok_row(plan, 8)
    cut = ",".join(str(v if v is not None else "") for v in _fake_ok_row(plan, 16).values())[:-40]
    assert ",ok," in cut  # the cut row even has its status: before, it counted as measured
    _write(out, [done], tail=cut)
    from perfpredict.dataset.collect import _append_provenance

    _append_provenance(out, {"run_id": "earlier", "device": "cpu", "precision": "fp32"})  # the run that was cut
    settings = CollectSettings(device="cpu", timing=QUICK, threads=1, command="test", git_commit="abc1234")
    summary = collect([plan], out, settings)
    assert summary["counts"] == {"ok": 1} and summary["dropped_partial_row"]
    rows = read_dataset(out)
    assert [int(r["batch_size"]) for r in rows] == [8, 16]
    assert rows[0] == {k: str(v if v is not None else "") for k, v in done.items()}
    assert None not in rows[1] and float(rows[1]["iter_time_s"]) > 0 and rows[1]["measured_at"]
    assert rows[1]["iter_time_s"] != str(_fake_ok_row(plan, 16)["iter_time_s"])  # measured, not the cut one
    run = json.loads(provenance_path(out).read_text())["runs"][-1]
    assert run["dropped_partial_row"] == cut and run["rows_written"] == 1


def test_prepare_resume_keeps_complete_rows_and_needs_the_numbers() -> None:
    plan = _tiny_plan()
    ok = _fake_ok_row(plan, 8)
    no_time = dict(_fake_ok_row(plan, 16), iter_time_s=None, samples_per_s=None)
    garbled = dict(_fake_ok_row(plan, 32), batch_size="3x")
    rows = [{k: str(v if v is not None else "") for k, v in r.items()} for r in (ok, no_time, garbled)]
    assert _done_points(rows).points == {(plan.config, 8, "train")}
    oom = dict(rows[1], status="oom")
    assert (plan.config, 16, "train") in _done_points([oom]).points  # an oom needs no timing


def test_prepare_resume_refuses_binary_and_foreign_csv_and_mends_a_cut_header(tmp_path) -> None:
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x00\xff\xfe\x89PNG")
    with pytest.raises(UsageError, match="not a CSV text file"):
        prepare_resume(binary, DATASET_COLUMNS)
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(UsageError, match="header 'a,b,c'"):
        prepare_resume(foreign, DATASET_COLUMNS)
    assert foreign.read_text() == "a,b,c\n1,2,3\n"  # refused, not rewritten
    cut_header = tmp_path / "cut.csv"
    cut_header.write_text("config,family,batch")
    assert prepare_resume(cut_header, DATASET_COLUMNS) == ([], "config,family,batch")
    assert cut_header.read_text() == ""
    with pytest.raises(UsageError, match="is a folder"):
        prepare_resume(tmp_path, DATASET_COLUMNS)


def test_a_malformed_provenance_file_is_refused_before_measuring(tmp_path) -> None:
    out = tmp_path / "cpu.csv"
    provenance_path(out).write_text("{not json")
    settings = CollectSettings(device="cpu", timing=QUICK, threads=1, command="test", git_commit="abc1234")
    t0 = time.monotonic()
    with pytest.raises(UsageError, match="meta.json"):
        collect([_tiny_plan()], out, settings)
    assert not out.exists() and time.monotonic() - t0 < 5  # nothing measured
    proc = _run(DATASET_SCRIPT, "measure", "--out", str(out), "--device", "cpu", "--families", "mlp",
                "--batch-sizes", "8", "--max-gmacs", "0.0005")
    assert proc.returncode == 2 and "provenance" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--every", "0"], "--every"),
    (["--every", "-1"], "--every"),
    (["--batch-sizes=-4,0"], "--batch-sizes"),
    (["--batch-sizes", "abc"], "--batch-sizes"),
    (["--min-time", "-1"], "--min-time"),
    (["--device", "nosuch"], "--device"),
    (["--families", "nosuch", "--dry-run"], "unknown zoo family"),
    (["--skip-configs-of", "no/such/held_out.csv", "--dry-run"], "--skip-configs-of"),
])
def test_collect_dataset_refuses_bad_arguments_in_one_line(tmp_path, args, message) -> None:
    proc = _run(DATASET_SCRIPT, "measure", "--out", str(tmp_path / "m.csv"), *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "m.csv").exists()


@pytest.mark.parametrize(("script", "args", "message"), [
    (DATASET_SCRIPT, ["measure", "--out", "{tmp}", "--families", "mlp"], "is a folder"),
    (DATASET_SCRIPT, ["measure", "--out", "{tmp}/m.csv", "--device", "tpu"], "--device"),
    (DATASET_SCRIPT, ["features", "--out", "{tmp}"], "is a folder"),
    (COLOCATION_SCRIPT, ["--out", "{tmp}/c.csv", "--jobs", "999"], "--jobs"),
    (COLOCATION_SCRIPT, ["--out", "{tmp}", "--device", "tpu"], "--out"),
])
def test_a_wrong_flag_is_answered_before_torch_is_imported(tmp_path, script, args, message) -> None:
    """The collectors check their flags before importing torch (a second or more), so a typo is answered at once."""
    argv = [str(script), *(a.replace("{tmp}", str(tmp_path)) for a in args)]
    code = ("import runpy, sys\n"
            f"sys.argv = {argv!r}\n"
            "try:\n"
            f"    runpy.run_path({str(script)!r}, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    print('exit', e.code, 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.stdout.strip() == "exit 2 False", proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_skip_configs_of_leaves_out_exactly_a_held_out_files_architectures(tmp_path) -> None:
    """How the large-batch training rows were kept apart from the far-batch check's architectures."""
    held_out_file = REPO / "datasets" / "cpu_epyc_genoa_2vcpu_far_batch.csv"
    args = ["measure", "--out", str(tmp_path / "m.csv"), "--families", "mlp,dlrm", "--batch-sizes", "128,256",
            "--max-gflop-iter", "150", "--dry-run"]

    def planned(*extra: str) -> set[str]:
        proc = _run(DATASET_SCRIPT, *args, *extra)
        assert proc.returncode == 0, proc.stderr
        return {line.split("\t")[0] for line in proc.stdout.splitlines() if line.strip()}

    every, rest = planned(), planned("--skip-configs-of", str(held_out_file))
    held_out = {r["config"] for r in read_dataset(held_out_file)}
    assert rest and rest < every and not rest & held_out
    assert every - rest == every & held_out


def test_collect_dataset_refuses_an_output_that_cannot_be_a_file(tmp_path) -> None:
    (tmp_path / "afile").write_text("x")
    for out, message in ((tmp_path, "is a folder"), (tmp_path / "afile" / "m.csv", "is a file")):
        proc = _run(DATASET_SCRIPT, "measure", "--out", str(out), "--families", "mlp", "--dry-run")
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--jobs", "-1"], "--jobs"),
    (["--jobs", "0"], "--jobs"),
    (["--window", "-1"], "--window"),
    (["--sample-jobs", "-3"], "--sample-jobs"),
    (["--partners", "-2"], "--partners"),
])
def test_collect_colocation_refuses_bad_arguments_in_one_line(tmp_path, args, message) -> None:
    proc = _run(COLOCATION_SCRIPT, "--out", str(tmp_path / "c.csv"), "--dry-run", *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_collect_colocation_refuses_a_dataset_it_cannot_read(tmp_path) -> None:
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x00\xff\xfe\x89PNG")
    text_number = tmp_path / "text.csv"
    rows = read_dataset(REPO / "datasets" / "cpu_xeon_2vcpu.csv")
    first_ok = next(i for i, r in enumerate(rows) if r["status"] == "ok")
    rows[first_ok]["iter_time_s"] = "abc"
    with open(text_number, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for dataset, message in ((binary, "not a readable CSV"), (text_number, "iter_time_s is 'abc'")):
        proc = _run(COLOCATION_SCRIPT, "--out", str(tmp_path / "c.csv"), "--from-dataset", str(dataset),
                    "--sample-jobs", "3", "--dry-run")
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_colocation_row_counts_as_done_only_with_its_numbers() -> None:
    cc = _colocation()
    full = dict.fromkeys(cc.COLUMNS, "")
    full.update(job="a", partner="b", status="ok", window_s="0.2", **dict.fromkeys(cc.DONE_NUMBERS[:-1], "1.5"))
    cut = {"job": "a", "job_batch": "32", "partner": "c", "partner_batch": "32", "status": "ok", "error": ""}
    nan = dict(full, partner="d", job_slowdown="nan")
    assert cc.done_pairs([full, cut, nan]) == {("a", "b")}


def test_colocation_resume_measures_a_cut_row_again_on_cpu(tmp_path) -> None:
    cc = _colocation()
    out = tmp_path / "pairs.csv"
    out.write_text(",".join(cc.COLUMNS) + "\r\nmlp-small-b32,32,mlp-small-b32,32,ok,,")
    # a 0.6 s window: the host's other load (below) is only read over spans of at least 0.2 s, and a 0.2 s window
    # left the common span of the pair (latest start to earliest end) shorter than that in one full test run of four
    proc = _run(COLOCATION_SCRIPT, "--out", str(out), "--device", "cpu", "--jobs", "1", "--window", "0.6")
    assert proc.returncode == 0, proc.stderr
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "ok" and float(row["job_slowdown"]) >= 0 and row["measured_at"]
    # the host's other load during the pair and each solo run (read from /proc/stat on Linux)
    assert all(float(row[k]) >= 0 for k in ("other_cpus", "job_solo_other_cpus", "partner_solo_other_cpus"))
    meta = json.loads(provenance_path(out).read_text())
    assert meta["columns"] == cc.COLUMNS  # the co-location columns, not the dataset's
    assert meta["runs"][-1]["dropped_partial_row"] == "mlp-small-b32,32,mlp-small-b32,32,ok,,"


def test_ctrl_c_keeps_the_rows_records_the_run_and_exits_130(tmp_path) -> None:
    out = tmp_path / "cpu.csv"
    rc, err = interrupt_after_first_row(
        [sys.executable, str(DATASET_SCRIPT), "measure", "--out", str(out), "--device", "cpu", "--threads", "1",
         "--families", "mlp", "--max-gmacs", "0.0005", "--batch-sizes", "8,16", "--min-time", "1"], out)
    assert rc == 130, err
    assert "Traceback" not in err and "rows written to" in err and "resume" in err
    rows = read_dataset(out)
    assert rows and all(None not in r and r["status"] == "ok" for r in rows)
    run = json.loads(provenance_path(out).read_text())["runs"][-1]
    assert run["interrupted"] is True and run["rows_written"] == len(rows)


def test_prepare_resume_never_cuts_measured_rows(tmp_path) -> None:
    """Review findings: an unclosed quote in an older file swallows the rows after it into one 'short' record
    (cutting it lost 50 rows); a whole last row without its line end was deleted; a trailing blank line was
    recorded as a dropped row; a byte-order mark was refused."""
    plan = _tiny_plan()
    ok = {k: str(v if v is not None else "") for k, v in _fake_ok_row(plan, 8).items()}
    line = ",".join(ok[c] for c in DATASET_COLUMNS)
    header = ",".join(DATASET_COLUMNS)

    older = tmp_path / "older.csv"
    older.write_text(header + "\r\n" + line + "\r\n" + 'mlp-x,mlp,16,train,cpu,,error,"cut mid-quote\r\n'
                     + "".join(line + "\r\n" for _ in range(50)))
    before = older.read_bytes()
    with pytest.raises(UsageError, match="do not parse as rows"):
        prepare_resume(older, DATASET_COLUMNS)
    assert older.read_bytes() == before

    whole = tmp_path / "whole.csv"
    whole.write_text(header + "\r\n" + line + "\r\n" + line)  # the last row complete, its line end missing
    rows, dropped = prepare_resume(whole, DATASET_COLUMNS)
    assert len(rows) == 2 and dropped is None and whole.read_bytes().endswith((line + "\r\n").encode())

    blank = tmp_path / "blank.csv"
    blank.write_text(header + "\r\n" + line + "\r\n\r\n")
    assert prepare_resume(blank, DATASET_COLUMNS) == ([ok], None)

    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (header + "\r\n" + line + "\r\n" + line[:30]).encode())
    rows, dropped = prepare_resume(bom, DATASET_COLUMNS)
    assert rows == [ok] and dropped == line[:30]
    assert bom.read_bytes() == b"\xef\xbb\xbf" + (header + "\r\n" + line + "\r\n").encode()


def test_the_features_table_resumes_past_a_cut_row_and_refuses_a_binary_file(tmp_path) -> None:
    """The features step appends too: an export interrupted mid-row is removed and exported again."""
    from perfpredict.dataset.features_table import build_features_table, read_features_table

    plans = plan_sweep(["mlp"], max_gmacs=0.0005)[:2]
    out = tmp_path / "features.csv"
    assert build_features_table([("mlp", plans[0].cfg)], out, isolate=False) == 1
    first = out.read_bytes()
    out.write_bytes(first + first.splitlines()[-1][:50])  # a second row cut by an interrupted write
    assert build_features_table([("mlp", p.cfg) for p in plans], out, isolate=False) == 1
    rows = read_features_table(out)
    assert set(rows) == {p.config for p in plans} and all(not r["error"] for r in rows.values())
    assert out.read_bytes().startswith(first)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(UsageError, match="not a features table|not a CSV text file"):
        read_features_table(binary)
    with pytest.raises(UsageError, match="not a CSV text file"):
        build_features_table([("mlp", plans[0].cfg)], binary, isolate=False)


def test_a_ctrl_c_while_a_run_is_being_recorded_still_records_it_whole(tmp_path):
    """The first Ctrl-C ends the sweep and its run is recorded; a second one during that write used to leave
    the .meta.json cut short (every earlier run's provenance lost) or the run unrecorded."""
    import os

    from perfpredict.dataset.collect import _append_provenance, provenance_path

    data = tmp_path / "d.csv"
    data.write_text("arch\n")
    _append_provenance(data, {"run": 1})

    class CtrlCWhileWritten:
        def __str__(self) -> str:  # json.dumps(default=str) calls this while the record is being written
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            return "written"

    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell may have started us ignoring it
    try:
        with pytest.raises(KeyboardInterrupt):
            _append_provenance(data, {"run": 2, "marker": CtrlCWhileWritten()})
    finally:
        signal.signal(signal.SIGINT, old)
    runs = json.loads(provenance_path(data).read_text())["runs"]
    assert [r["run"] for r in runs] == [1, 2] and runs[1]["marker"] == "written"
    assert not list(tmp_path.glob("*.tmp"))


def test_one_process_per_architecture_measures_on_cpu_too(tmp_path) -> None:
    """The CUDA collector's mode (every batch size of an architecture in one process) runs on the CPU when asked,
    so its process handling is tested without a GPU."""
    plan = _tiny_plan()
    out = tmp_path / "cpu.csv"
    settings = CollectSettings(device="cpu", timing=QUICK, threads=1, command="test", git_commit="abc1234",
                               process_per_arch=True)
    summary = collect([plan], out, settings)
    assert summary["counts"] == {"ok": 2}
    rows = read_dataset(out)
    assert [int(r["batch_size"]) for r in rows] == [8, 16]
    assert all(float(r["iter_time_s"]) > 0 and r["device_kind"] == "cpu" for r in rows)
    run = json.loads(provenance_path(out).read_text())["runs"][-1]
    assert run["process_isolation"] == "one process per architecture"


def _v1_file(path: Path, cc, rows: list[dict], tail: str = "") -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cc.COLUMNS_V1)
        w.writeheader()
        w.writerows(rows)
        f.write(tail)


def test_an_older_colocation_header_is_upgraded_without_losing_a_value(tmp_path) -> None:
    """The H100 pairs were written before the host-load columns: a resumed run would have been refused (the
    header differs), so the file is given the new header first, every old value under its own name."""
    from perfpredict.dataset.collect import upgrade_header

    cc = _colocation()
    assert set(cc.COLUMNS_V1) < set(cc.COLUMNS) and "other_cpus" in cc.COLUMNS
    shipped = REPO / "datasets" / "cuda_h100_colocation.csv"
    with open(shipped, newline="") as f:
        reader = csv.DictReader(f)
        old_rows = list(reader)
    if reader.fieldnames != cc.COLUMNS_V1:
        pytest.skip("the shipped file already has the current header")
    out = tmp_path / "pairs.csv"
    cut = "mlp-small-b32,32,lstm-small-b32,32,ok,,1999"
    _v1_file(out, cc, old_rows, tail=cut)
    provenance_path(out).write_text(json.dumps({"dataset": out.name, "columns": ["config"], "runs": []}))

    assert upgrade_header(out, cc.COLUMNS, [cc.COLUMNS_V1], by="test") == cc.COLUMNS_V1
    text = out.read_text()
    assert text.endswith(cut)  # the cut-short row is left for prepare_resume, which measures it again
    rows, dropped = prepare_resume(out, cc.COLUMNS)
    assert dropped == cut and len(rows) == len(old_rows)
    for old, new in zip(old_rows, rows):
        assert {k: new[k] for k in old} == old and new["other_cpus"] == new["job_solo_other_cpus"] == ""
    meta = json.loads(provenance_path(out).read_text())
    assert meta["columns"] == cc.COLUMNS
    (up,) = meta["header_upgrades"]
    assert up["from"] == cc.COLUMNS_V1 and up["rows"] == len(old_rows) and up["by"] == "test"
    assert up["added"] == ["other_cpus", "job_solo_other_cpus", "partner_solo_other_cpus"]
    # The interference model fitted from it is the one fitted from the shipped file.
    from perfpredict.estimators.interference import colocation_points, colocation_rows

    assert colocation_points(out) == colocation_points(shipped)
    assert colocation_rows(out) == colocation_rows(shipped)
    # Once upgraded there is nothing left to do.
    before = out.read_bytes()
    assert upgrade_header(out, cc.COLUMNS, [cc.COLUMNS_V1]) is None and out.read_bytes() == before


def test_a_header_upgrade_refuses_what_it_cannot_map_and_changes_nothing(tmp_path) -> None:
    from perfpredict.dataset.collect import upgrade_header

    cc = _colocation()
    row = dict.fromkeys(cc.COLUMNS_V1, "1")
    bad = tmp_path / "bad.csv"
    _v1_file(bad, cc, [row], tail="a,b\r\n" + ",".join("1" for _ in cc.COLUMNS_V1) + "\r\n")
    before = bad.read_bytes()
    with pytest.raises(UsageError, match="has 2 fields, not the header's 18"):
        upgrade_header(bad, cc.COLUMNS, [cc.COLUMNS_V1])
    assert bad.read_bytes() == before
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b\r\n1,2\r\n")
    assert upgrade_header(foreign, cc.COLUMNS, [cc.COLUMNS_V1]) is None  # not an older header: left alone,
    with pytest.raises(UsageError, match="header 'a,b'"):                 # and prepare_resume refuses it
        prepare_resume(foreign, cc.COLUMNS)
    lossy = tmp_path / "lossy.csv"
    lossy.write_bytes(b"a,job\r\n1,2\r\n")
    with pytest.raises(UsageError, match="column\\(s\\) the current one lacks \\(a\\)"):
        upgrade_header(lossy, ["job"], [["a", "job"]])
    assert lossy.read_bytes() == b"a,job\r\n1,2\r\n"
    assert upgrade_header(tmp_path / "none.csv", cc.COLUMNS, [cc.COLUMNS_V1]) is None


def test_the_colocation_collector_resumes_a_file_with_the_older_header(tmp_path) -> None:
    cc = _colocation()
    done = dict.fromkeys(cc.COLUMNS_V1, "")
    done.update(job="mlp-small-b32", job_batch="32", partner="mlp-small-b32", partner_batch="32", status="ok",
                device="cpu", measured_at="2026-11-23T00:00:00+00:00",
                **dict.fromkeys(cc.DONE_NUMBERS, "0.5"))
    out = tmp_path / "pairs.csv"
    _v1_file(out, cc, [done])
    proc = _run(COLOCATION_SCRIPT, "--out", str(out), "--device", "cpu", "--jobs", "1", "--window", "0.2")
    assert proc.returncode == 0, proc.stderr
    assert "its header now has them" in proc.stderr and "0 pairs to measure" in proc.stderr
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        (row,) = list(reader)
    assert reader.fieldnames == cc.COLUMNS and row["job_slowdown"] == "0.5" and row["other_cpus"] == ""
    meta = json.loads(provenance_path(out).read_text())
    assert meta["columns"] == cc.COLUMNS and meta["header_upgrades"][0]["from"] == cc.COLUMNS_V1
