"""`perfpredict compare --ray` / compare(ray_address=...): the runs as Ray tasks give the comparison a local run
gives, write the same files, stop on Ctrl-C, and a wrong address or a missing Ray is one error."""

from __future__ import annotations

import csv
import json
import sys
import time

import pytest

from perfpredict.errors import UsageError
from perfpredict.sim.compare import compare, parse_schedulers
from tests.test_compare import interrupted_compare

ray = pytest.importorskip("ray")  # a dev dependency: installed by `make test`

TRACE = "synergy:n=120,load=9"
#: what differs between two runs of the same simulation: how long it took
TIMINGS = {"sim_wall_s", "decision_time_s"}


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _without_timings(runs):
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in runs]


def test_ray_tasks_give_the_local_comparison_and_its_files(tmp_path):
    scheds = parse_schedulers(["fifo", "srtf"], ["proportional", "tune"])
    here = compare(TRACE, "2x8", scheds, [0, 1], out_dir=tmp_path / "here")
    on_ray = compare(TRACE, "2x8", scheds, [0, 1], out_dir=tmp_path / "ray", ray_address="local")
    assert not ray.is_initialized()  # the instance it started is stopped again
    assert len(on_ray.runs) == 8 and not on_ray.failed()
    assert _without_timings(on_ray.runs) == _without_timings(here.runs)
    assert on_ray.summary() == here.summary()
    # every run's files came back from the worker that wrote them, byte for byte what a local run writes
    files = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here" / "runs").rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "ray") for p in (tmp_path / "ray" / "runs").rglob("*")
                                     if p.is_file())
    for rel in files:
        if rel.name == "jobs.csv":
            assert (tmp_path / "ray" / rel).read_bytes() == (tmp_path / "here" / rel).read_bytes(), rel
    doc = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert doc["ran_on"]["backend"] == "ray" and doc["ran_on"]["address"] == "local"
    assert doc["ran_on"]["nodes"] == 1 and doc["ran_on"]["cpus"] >= 1
    assert json.loads((tmp_path / "here" / "summary.json").read_text())["ran_on"] == {"backend": "local", "jobs": 1}


def test_a_program_connected_to_ray_keeps_its_connection(tmp_path):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        cmp = compare(TRACE, "2x8", parse_schedulers(["fifo"], ["proportional", "greedy"]), [0, 1], ray_address="auto",
                      jobs=2)
        assert ray.is_initialized()
        assert len(cmp.runs) == 4 and not cmp.failed() and cmp.backend["cpus"] == 2
    finally:
        ray.shutdown()


def test_without_ray_installed_it_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(UsageError, match=r"pip install 'perfpredict\[ray\]'"):
        compare(TRACE, "2x8", parse_schedulers(["fifo"], ["proportional"]), [0, 1], ray_address="local")


@pytest.mark.parametrize("address, needle", [("127.0.0.1:1", "no Ray cluster answers there"),
                                             ("ray://127.0.0.1:1", "no Ray cluster answers there"),
                                             (" ", "--ray is empty")])
def test_a_wrong_address_is_one_error_before_anything_runs(run_cli, tmp_path, address, needle):
    proc = run_cli("compare", "-m", "proportional", "-m", "tune", "--trace", TRACE, "--cluster", "2x8",
                   "--seeds", "0,1", "--ray", address, "--no-mlflow", "--out", "c", timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "c").exists()


def test_cli_on_ray_prints_where_it_ran_and_a_ctrl_c_keeps_the_runs(tmp_path):
    out = tmp_path / "c"
    stdout, _ = interrupted_compare(tmp_path, out, "--ray", "local", after_rows=2)  # the local run and a Ray task
    assert "ran on Ray at local: 1 node(s)" in stdout
    rows = _rows(out / "runs.csv")
    assert 2 <= len(rows) < 12 and all(r["status"] == "ok" for r in rows)
    doc = json.loads((out / "summary.json").read_text())
    assert doc["interrupted"] is True and doc["ran_on"]["backend"] == "ray"
    # each recorded run has its files; the cancelled ones write nothing more
    written = sorted(out.glob("runs/*/*/metrics.json"))
    assert len(written) == len(rows)
    time.sleep(3)
    assert sorted(out.glob("runs/*/*/metrics.json")) == written
