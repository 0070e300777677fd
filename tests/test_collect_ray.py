"""Dataset collection on a Ray cluster (`collect_dataset.py measure --ray`, `collect(..., ray_address=...)`): the
points a local run measures, written by the driver, with the nodes in the provenance; rows from another device
type are not written; nothing is started or written for a wrong request; a Ctrl-C keeps the rows."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfpredict.dataset.collect import CollectSettings, collect, plan_sweep, provenance_path, read_dataset
from perfpredict.dataset.ray_collect import SameDevice
from perfpredict.errors import UsageError
from perfpredict.hostinfo import cpu_id, cpu_model_name
from tests.conftest import FAST_TIMING, interrupt_after_first_row

ray = pytest.importorskip("ray")  # a dev dependency: installed by `make test`

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "profilers" / "collect_dataset.py"


@pytest.fixture(scope="module")
def ray_here():
    """One Ray instance for the module's in-process tests (a program's own connection is kept by ``collect``, as
    tests/test_compare_ray.py checks), instead of one started and stopped per test (~5 s each on 2 cores)."""
    import logging

    # one CPU: Ray then sets its tasks' OMP_NUM_THREADS to 1, which a measurement must not take for its threads
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield
    ray.shutdown()


def _plans(n: int = 2):
    return plan_sweep(["mlp"], batch_sizes=[8, 16], max_gmacs=0.0005)[:n]


def _settings(**kw) -> CollectSettings:
    return CollectSettings(**{"device": "cpu", "timing": FAST_TIMING, "threads": 1, **kw})


def test_ray_measures_every_point_and_records_where(tmp_path, ray_here):
    plans = _plans()
    out = tmp_path / "cpu.csv"
    # a sentinel asked for is not timed on Ray (many machines, no one step to time)
    summary = collect(plans, out, _settings(sentinel_every_s=0.0, threads=None), ray_address="local")
    assert ray.is_initialized()  # this program's connection is left open
    rows = read_dataset(out)
    # torch's own default threads, as a local run without --threads has them, not the task's one CPU
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    default = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert {r["threads"] for r in rows} == {default}
    assert sorted((r["config"], int(r["batch_size"])) for r in rows) == sorted(
        (p.config, b) for p in plans for b in p.batch_sizes)
    assert all(r["status"] == "ok" and float(r["iter_time_s"]) > 0 and r["device_name"] == cpu_model_name()
               for r in rows)
    on = summary["ray"]
    assert summary["counts"] == {"ok": len(rows)} and summary["speed_drift"] is None
    assert on["not_started"] == 0 and not on["refused"] and not on["lost"]
    assert [t["num_cpus"] for t in on["task_resources"]] == [on["cpus"]]  # a whole node per CPU task
    (host,) = on["measured_by"].values()
    assert host["architectures"] == len(plans) and host["rows"] == len(rows)
    if os.geteuid() == 0:  # allowed to leave Ray's niceness 15
        assert host["niceness"] == [0]
    run = json.loads(provenance_path(out).read_text())["runs"][-1]
    assert run["ray"]["measured_by"] == on["measured_by"] and "speed_sentinel" not in run
    assert run["process_isolation"].startswith("one Ray task per architecture")
    assert run["device_info"]["cpu_id"] == cpu_id()

    # a finished file: nothing to measure, so Ray is not even asked and no row is added
    again = collect(plans, out, _settings(), ray_address="127.0.0.1:1")
    assert "ray" not in again and again["counts"] == {} and read_dataset(out) == rows


def test_rows_measured_on_another_device_type_are_not_written(tmp_path, ray_here):
    plans = _plans()
    out = tmp_path / "cpu.csv"
    collect(plans[:1], out, _settings())
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:  # the file now says it was measured on another CPU model
        r["device_name"] = "Another CPU (test)"
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = collect(plans, out, _settings(), ray_address="local")
    assert len(read_dataset(out)) == len(rows)  # the second architecture's rows were not added
    (refused,) = summary["ray"]["refused"]
    assert refused["config"] == plans[1].config and "Another CPU (test)" in refused["why"]
    assert summary["counts"] == {} and not summary["ray"]["measured_by"]


def _node_id(i: int) -> str:
    return f"{i + 1:056x}"  # Ray's node ids: 28 bytes in hex


class _FakeCluster:
    """What ``task_slots`` reads of Ray: its nodes' ids and resources."""

    def __init__(self, *nodes: tuple[int, int]) -> None:
        self._nodes = [{"Alive": True, "NodeID": _node_id(i), "Resources": {"CPU": c, **({"GPU": g} if g else {})}}
                       for i, (c, g) in enumerate(nodes)]

    def nodes(self):
        return self._nodes


def test_task_slots_give_each_gpu_its_share_of_the_host_and_each_cpu_node_one_task():
    from perfpredict.dataset.ray_collect import task_slots

    # two 8-GPU nodes of 128 and 96 CPUs and a CPU-only head: 12 CPUs with each GPU, 16 GPU tasks at once
    cuda = task_slots(_FakeCluster((128, 8), (96, 8), (4, 0)), "cuda")
    assert cuda["options"] == {"num_gpus": 1, "num_cpus": 12, "max_calls": 1} and len(cuda["slots"]) == 16
    assert task_slots(_FakeCluster((16, 1)), "cuda")["options"]["num_cpus"] == 16  # as a local run on one GPU
    assert len(task_slots(_FakeCluster((128, 8)), "cuda", tasks_at_once=3)["slots"]) == 3
    # nodes of 4 and 8 CPUs: one task on each, pinned there and holding all its CPUs (never two on the larger)
    cpu = task_slots(_FakeCluster((4, 0), (8, 0)), "cpu")
    n0, n1 = _node_id(0), _node_id(1)
    assert cpu["described"] == [{"num_cpus": 4, "node_id": n0}, {"num_cpus": 8, "node_id": n1}]
    assert [(s["num_cpus"], s["scheduling_strategy"].node_id, s["scheduling_strategy"].soft) for s in cpu["slots"]] \
        == [(4, n0, False), (8, n1, False)]
    with pytest.raises(UsageError, match="no GPUs"):
        task_slots(_FakeCluster((4, 0)), "cuda")


def test_the_device_rule_refuses_other_gpus_other_cpus_and_unknown_devices():
    def task(**info):
        return {"node": {"hostname": "n1"}, "results": [{"status": "ok", "device_info": info}]}

    gpus = SameDevice("cuda", set(), None)
    assert gpus.refusal(task(kind="cuda", name="NVIDIA H100 80GB HBM3")) is None  # the first one sets the file's
    assert "NVIDIA H100 80GB HBM3" in gpus.refusal(task(kind="cuda", name="NVIDIA H200"))
    assert "not cuda" in gpus.refusal(task(kind="cpu", name="Some CPU"))
    assert "could not be told" in gpus.refusal({"node": {"hostname": "n2"}, "results": [{"status": "oom"}]})
    # a task whose results carry no device (a killed process) is judged by the device its node reports
    assert gpus.refusal({"node": {"hostname": "n3", "kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
                         "results": [{"status": "oom"}]}) is None
    cpus = SameDevice("cpu", {"AMD EPYC"}, "AuthenticAMD family 25 model 17")
    assert cpus.refusal(task(kind="cpu", name="AMD EPYC", cpu_id="AuthenticAMD family 25 model 17")) is None
    assert "the file's CPU" in cpus.refusal(task(kind="cpu", name="AMD EPYC", cpu_id="AuthenticAMD family 25 model 1"))


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "measure", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize(("args", "says"), [
    (["--device", "cuda", "--ray", "local"], "the cluster has no GPUs"),
    (["--device", "auto", "--ray", "local"], "say --device cuda"),
    (["--device", "cuda:1", "--ray", "local"], "say --device cuda"),
    (["--device", "cpu", "--tasks-at-once", "2"], "needs --ray"),
    (["--device", "cpu", "--ray", "127.0.0.1:1"], "no Ray cluster answers there"),
])
def test_a_wrong_ray_request_is_one_line_and_writes_nothing(tmp_path, args, says):
    from perfpredict.hostinfo import gpu_names

    if "no GPUs" in says and gpu_names():
        pytest.skip(f"this machine has a GPU ({', '.join(gpu_names())})")
    out = tmp_path / "d.csv"
    proc = _run(["--out", str(out), "--families", "mlp", "--max-gmacs", "0.0005", "--batch-sizes", "8", *args])
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and says in errors[0], proc.stderr
    assert not out.exists() and not provenance_path(out).exists()


def test_a_gpu_file_whose_runs_had_different_host_cpus_is_resumed(tmp_path):
    """The one-CPU-per-file rule is a CPU file's: the committed H200 set plus a run on another host CPU gets as far
    as Ray (no GPU here), not a "mixes CPUs" refusal."""
    import shutil

    out = tmp_path / "cuda_h200.csv"
    shutil.copy(REPO / "datasets" / "cuda_h200.csv", out)
    meta = json.loads((REPO / "datasets" / "cuda_h200.meta.json").read_text())
    meta["runs"].append({**meta["runs"][-1], "run_id": "other-host",
                         "device_info": {**meta["runs"][-1]["device_info"], "cpu_id": "AuthenticAMD family 25 model 1"}})
    provenance_path(out).write_text(json.dumps(meta))
    with pytest.raises(UsageError) as e:
        collect(plan_sweep(["mlp"], batch_sizes=[8, 4096]), out, CollectSettings(device="cuda"),
                ray_address="127.0.0.1:1")
    assert e.value.step in ("arguments", "device") and "mixes CPUs" not in e.value.message


def test_a_wrong_address_leaves_a_file_with_a_cut_short_row_as_it_was(tmp_path):
    """The connection comes before anything is changed, the removal of a cut-short last row included (which is
    recorded in the provenance of the run that removes it)."""
    out = tmp_path / "cpu.csv"
    collect(_plans(1), out, _settings())
    with open(out, "a", encoding="utf-8") as f:
        f.write("mlp-cut-short,mlp,8,tr")
    before = out.read_bytes(), provenance_path(out).read_bytes()
    proc = _run(["--out", str(out), "--families", "mlp", "--max-gmacs", "0.0005", "--batch-sizes", "8,16,32",
                 "--device", "cpu", "--ray", "127.0.0.1:1"])
    assert proc.returncode == 2 and "no Ray cluster answers there" in proc.stderr, proc.stderr
    assert (out.read_bytes(), provenance_path(out).read_bytes()) == before


def test_ctrl_c_on_ray_keeps_the_rows_and_records_the_run(tmp_path):
    out = tmp_path / "cpu.csv"
    rc, err = interrupt_after_first_row(
        [sys.executable, str(SCRIPT), "measure", "--out", str(out), "--device", "cpu", "--threads", "1", "--ray",
         "local", "--families", "mlp", "--max-gmacs", "0.0005", "--batch-sizes", "8,16", "--min-time", "1"], out,
        timeout=120)
    assert rc == 130, err
    assert "Traceback" not in err and "cancelled on Ray" in err
    rows = read_dataset(out)
    assert rows and all(r["status"] == "ok" for r in rows)
    run = json.loads(provenance_path(out).read_text())["runs"][-1]
    assert run["interrupted"] is True and run["rows_written"] == len(rows)
    # where the rows came from is recorded even though the run was cut short
    assert sum(n["rows"] for n in run["ray"]["measured_by"].values()) == len(rows)


def test_a_task_that_raises_is_reported_with_its_own_error(tmp_path, ray_here):
    """A task's own exception is listed under ``failed`` with its message, not Ray's coloured wrapping, and not as
    a lost node. Here: a time limit that only the task does arithmetic with, set past TimingConfig's check."""
    timing = replace(FAST_TIMING)
    object.__setattr__(timing, "max_time_s", "1")
    plans = _plans(1)
    summary = collect(plans, tmp_path / "cpu.csv", _settings(timing=timing), ray_address="local")
    (failed,) = summary["ray"]["failed"]
    assert failed["config"] == plans[0].config and not summary["ray"]["lost"] and summary["counts"] == {}
    assert failed["error"].startswith("TypeError: ") and "\x1b" not in failed["error"], failed


def test_a_time_budget_stops_starting_architectures(tmp_path, ray_here):
    plans = _plans(3)
    summary = collect(plans, tmp_path / "cpu.csv", _settings(time_budget_s=1e-6), ray_address="local")
    assert summary["stopped_by_time_budget"] and summary["ray"]["not_started"] == len(plans)
    assert summary["counts"] == {}
