"""`perfpredict simulate`: a real run end to end (records, metrics, plots, MLflow) and clear errors for bad input."""

from __future__ import annotations

import csv
import json

import pytest


def test_simulate_writes_records_metrics_plots_and_an_mlflow_run(run_cli, tmp_path):
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "notes.txt").write_text("the user's own file")  # not the simulation's: not logged
    proc = run_cli("simulate", "--trace", "synergy:n=120,load=4,seed=3", "--cluster", "2x8", "--policy", "srtf",
                   "--mechanism", "proportional", "--out", "sim")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(open(tmp_path / "sim" / "jobs.csv")))
    assert len(rows) == 120 and all(r["finished"] == "True" for r in rows)
    for r in rows:
        assert float(r["finish_s"]) >= float(r["first_start_s"]) >= float(r["arrival_s"])
        assert float(r["jct_s"]) == pytest.approx(float(r["finish_s"]) - float(r["arrival_s"]))
    doc = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert doc["params"]["policy"] == "srtf" and doc["params"]["gpus"] == 16
    m = doc["metrics"]
    assert m["n_finished"] == 120 and 0 < m["gpu_util"] <= 1
    assert m["avg_jct_s"] == pytest.approx(sum(float(r["jct_s"]) for r in rows) / 120)
    assert (tmp_path / "sim" / "jct_cdf.png").stat().st_size > 0
    assert "mlflow: run" in proc.stdout and "avg_jct_s" in proc.stdout

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["perfpredict-simulations"])
    assert len(runs) == 1 and runs["params.mechanism"][0] == "proportional"
    assert runs["metrics.avg_jct_s"][0] == pytest.approx(m["avg_jct_s"])
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(runs["run_id"][0])}
    assert {"jobs.csv", "jobs.parquet", "metrics.json", "jct_cdf.png"} <= arts and "notes.txt" not in arts, arts


def test_a_csv_trace_runs_and_a_malformed_one_is_one_clear_error(run_cli, tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("id,arrival_s,gpus,work_s,model\na,0,1,3600,resnet18\nb,10,2,7200,gnmt\n")
    proc = run_cli("simulate", "--trace", good, "--cluster", "1x4", "--no-mlflow", "--out", "o1",
                   "--mode", "event")
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in csv.DictReader(open(tmp_path / "o1" / "jobs.csv"))}
    assert float(rows["a"]["first_start_s"]) == 0.0 and float(rows["b"]["first_start_s"]) == 10.0

    bad = tmp_path / "bad.csv"
    bad.write_text("id,arrival_s,gpus,work_s\na,0,1,3600\nb,ten,1,60\n")
    proc = run_cli("simulate", "--trace", bad, "--cluster", "1x4", "--no-mlflow", "--out", "o2")
    assert proc.returncode != 0
    assert "line 3" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--mechanism", "magic"), "unknown mechanism"),
    (("--policy", "random"), "unknown policy"),
    (("--cluster", "lots"), "SERVERSxGPUS"),
    (("--cluster", "2x8:cores=4"), "unknown option"),
    (("--cluster", ""), "cluster is empty"),  # it said "cluster  is a directory" (the working one)
    (("--trace", "synergy:n=10,speed=3"), "unknown option"),
    (("--trace", "nowhere.csv"), "does not exist"),
    (("--steady", "10-20"), "FIRST:LAST"),
])
def test_bad_arguments_are_one_readable_error(run_cli, args, message):
    proc = run_cli("simulate", "--trace", "synergy:n=10", "--cluster", "1x8", "--no-mlflow", *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_swf_files_run_from_the_cli_with_the_linear_model_or_the_options_after_the_name(run_cli, tmp_path):
    swf = tmp_path / "t.swf"
    # job, submit, wait, run time, procs (allocated), ..., requested procs, ..., user (field 12)
    swf.write_text("; MaxProcs: 8\n"
                   "1 0 0 3600 2 -1 -1 2 7200 -1 1 1 1 -1 1 -1 -1 -1\n"
                   "2 60 0 1800 4 -1 -1 4 7200 -1 1 2 1 -1 1 -1 -1 -1\n")
    proc = run_cli("simulate", "--trace", swf, "--cluster", "2x4", "--mechanism", "rigid", "--no-mlflow",
                   "--out", "s1")
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in csv.DictReader(open(tmp_path / "s1" / "jobs.csv"))}
    assert {r["model"] for r in rows.values()} == {"linear"}
    # the linear model runs a rigid job for its recorded run time on its recorded processors
    assert float(rows["1"]["run_time_s"]) == pytest.approx(3600) and float(rows["2"]["run_time_s"]) == pytest.approx(1800)
    assert json.loads((tmp_path / "s1" / "metrics.json").read_text())["params"]["seed"] is None  # no seed changes a file

    proc = run_cli("simulate", "--trace", f"{swf}:model=mcnn,gpus_per_proc=1/2", "--cluster", "2x4",
                   "--mechanism", "rigid", "--no-mlflow", "--out", "s2")
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in csv.DictReader(open(tmp_path / "s2" / "jobs.csv"))}
    assert rows["1"]["model"] == "mcnn" and float(rows["1"]["gpus"]) == 1 and float(rows["2"]["gpus"]) == 2

    proc = run_cli("simulate", "--trace", f"{swf}:model=mcnn,procs=2", "--cluster", "2x4", "--no-mlflow",
                   "--out", "s3")
    assert proc.returncode == 2 and "unknown SWF option(s) ['procs']" in proc.stderr and "Traceback" not in proc.stderr


def test_metrics_record_the_seed_the_trace_was_made_with_and_the_round_only_in_round_mode(run_cli, tmp_path):
    proc = run_cli("simulate", "--trace", "synergy:n=20,load=9,seed=1", "--seed", "5", "--cluster", "1x8",
                   "--mechanism", "rigid", "--round", "60", "--no-mlflow", "--out", "o")
    assert proc.returncode == 0, proc.stderr
    params = json.loads((tmp_path / "o" / "metrics.json").read_text())["params"]
    assert params["seed"] == 1 and params["mode"] == "event" and params["round_s"] is None


@pytest.mark.parametrize(("trace_args", "mechanism", "message"), [
    # a gang job above the cluster's GPUs, and a K80 cluster for ANDREAS' V100/T4 cards
    (("synergy:n=300,load=9,multi=1",), "rigid", "asks for 8 GPUs; the cluster has 4"),
    (("andreas:nodes=2,jobs=20",), "andreas", "has a speed for GPU type(s) T4, V100 only; the cluster has 'K80'"),
])
def test_jobs_the_cluster_cannot_run_are_refused_or_dropped_on_request(run_cli, tmp_path, trace_args, mechanism,
                                                                        message):
    cluster = "1x4:type=K80" if mechanism == "andreas" else "1x4"
    args = ("simulate", "--trace", *trace_args, "--cluster", cluster, "--mechanism", mechanism, "--no-mlflow")
    proc = run_cli(*args, "--out", "refused")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert "--drop-oversized" in proc.stderr  # the way out is named
    proc = run_cli(*args, "--drop-oversized", "--out", "dropped")
    if mechanism == "andreas":  # every job would be dropped: nothing left to simulate is an error too
        assert proc.returncode == 2 and "the cluster can run none of the 20 jobs, e.g. job 0" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "dropped" / "metrics.json").read_text())
    dropped = doc["simulation"]["dropped"]
    assert dropped > 0 and doc["metrics"]["n_finished"] + dropped == 300


def test_a_policy_with_nothing_to_order_by_says_it_ran_as_fifo(run_cli):
    proc = run_cli("simulate", "--trace", "synergy:n=20,load=9", "--cluster", "1x8", "--policy", "edf",
                   "--no-mlflow", "--out", "edf")
    assert proc.returncode == 0, proc.stderr
    assert "no job in the trace has a deadline" in proc.stderr and "ordered them as fifo" in proc.stderr
    from perfpredict.sim.run import parse_trace, policy_notes

    assert policy_notes("edf", parse_trace("andreas:nodes=2,jobs=10")) == []  # ANDREAS' jobs have due dates
    assert policy_notes("priority", parse_trace("andreas:nodes=2,jobs=10")) == []  # and tardiness weights


def test_an_unreachable_tracking_server_is_refused_before_the_work(run_cli, tmp_path):
    """simulate and compare check the store first, as profile does, and with one try: MLflow's own retries took
    four minutes to give up on a closed port, after the simulation had run."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"}
    for args in (["simulate", "--out", "s"], ["compare", "-m", "proportional", "-m", "tune", "--out", "c"]):
        proc = run_cli(*args, "--cluster", "1x4", "--trace", "synergy:n=5", env=env, timeout=90)
        assert proc.returncode == 2 and "cannot use the MLflow store" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists() and not (tmp_path / "c").exists()


def test_a_clusters_options_are_in_its_name_and_one_given_twice_is_refused():
    """A CPU:GPU sweep's clusters all logged as '2x4V100'; '2x4:cpus=8,cpus=48' quietly took the last value."""
    from perfpredict.errors import UsageError
    from perfpredict.sim.run import parse_cluster

    assert parse_cluster("2x4").name == "2x4V100"
    assert parse_cluster("2x4:cpus=8,mem=100").name == "2x4V100:cpus=8,mem=100"
    assert parse_cluster("2x4:type=T4,cpus=8").name == "2x4T4:cpus=8"
    with pytest.raises(UsageError, match="cpus is given twice"):
        parse_cluster("2x4:cpus=8,cpus=48")


def test_a_card_without_curves_or_measured_on_a_cpu_is_named_in_the_run_notes(tmp_path):
    from perfpredict.errors import UsageError

    """A plain `perfpredict profile` card has no speedup curve and no sensitivity matrix: the simulator runs it
    linearly and insensitive to CPUs, and a CPU card stands in for GPUs; both used to pass without a word."""
    from perfpredict.card import DeviceInfo
    from perfpredict.sim.run import run_simulation
    from tests.test_card import build_card

    card, _ = build_card()
    (tmp_path / "cards" / "mine").mkdir(parents=True)
    card.save(tmp_path / "cards" / "mine" / "card.json")
    cpu = card.model_copy(update={"device": DeviceInfo(kind="cpu", name="Some CPU")})
    (tmp_path / "cards" / "cpuone").mkdir()
    cpu.save(tmp_path / "cards" / "cpuone" / "card.json")
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\na,0,1,600,mine\nb,0,1,600,resnet50\n")
    run = run_simulation(str(trace), "1x2", "fifo", "proportional", cards=str(tmp_path / "cards"),
                         out_dir=tmp_path / "o")
    assert len(run.notes) == 1 and "no speedup curve and no CPU/memory sensitivity matrix" in run.notes[0]
    assert "mine" in run.notes[0] and "linearly in its GPUs" in run.notes[0]
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["notes"] == run.notes
    trace.write_text("id,arrival_s,gpus,work_s,model\na,0,1,600,cpuone\n")
    run = run_simulation(str(trace), "1x2", "fifo", "proportional", cards=str(tmp_path / "cards"))
    assert any("measured for a CPU (Some CPU)" in n and "no GPU memory" in n for n in run.notes), run.notes
    # cards answering to one name (every model.py card is named "model"): the trace must name the file
    (tmp_path / "cards" / "other").mkdir()
    card.save(tmp_path / "cards" / "other" / "card.json")
    trace.write_text(f"id,arrival_s,gpus,work_s,model\na,0,1,600,{card.model.name}\n")
    with pytest.raises(UsageError, match=r"is the name of 3 cards .*name the card by its file or folder name"):
        run_simulation(str(trace), "1x2", "fifo", "proportional", cards=str(tmp_path / "cards"))
    trace.write_text("id,arrival_s,gpus,work_s,model\na,0,1,600,other\n")
    assert len(run_simulation(str(trace), "1x2", "fifo", "proportional", cards=str(tmp_path / "cards"))
               .result.finished) == 1


def test_jobs_csv_records_the_gpus_a_resizing_mechanism_gave_and_has_unix_line_ends(tmp_path):
    """A malleable mechanism caps a job at p_max = 4 GPUs: an 8-GPU job on an idle 2x4 cluster took twice its
    rigid time, and jobs.csv had no column saying what it was given. Its lines ended in \\r\\n as well."""
    from perfpredict.sim.run import run_simulation

    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\ng8,0,8,3600,resnet50\n")
    runs = {m: run_simulation(str(trace), "2x4", "fifo", m, out_dir=tmp_path / m)
            for m in ("proportional", "malleable-equipartition")}
    rows = {m: next(csv.DictReader(open(tmp_path / m / "jobs.csv", newline=""))) for m in runs}
    assert float(rows["proportional"]["mean_gpus"]) == pytest.approx(8.0)
    assert float(rows["malleable-equipartition"]["mean_gpus"]) == pytest.approx(4.0)
    assert b"\r" not in (tmp_path / "proportional" / "jobs.csv").read_bytes()


def test_a_run_cut_short_by_max_time_says_what_its_records_and_metrics_leave_out():
    """With --max-time the jobs not yet arrived were simply missing from jobs.csv and n_jobs, and utilisation
    spanned only the finished jobs, with nothing saying so."""
    from perfpredict.sim.run import run_simulation
    from perfpredict.sim.simulator import SimConfig

    run = run_simulation("synergy:n=40,load=6,multi=1", "2x4", config=SimConfig(max_time_s=10800))
    arrived = len(run.result.states)
    assert arrived < 40 and run.result.unfinished
    note = next(n for n in run.notes if n.startswith("the run stopped at max_time 10800 s"))
    assert f"{len(run.result.unfinished)} job(s) unfinished and {40 - arrived} not yet arrived" in note
    assert not any("max_time" in n for n in run_simulation("synergy:n=40,load=6,multi=1", "2x4").notes)


def test_a_run_that_makes_no_plot_leaves_no_earlier_plot_behind(run_cli, tmp_path):
    """A rerun into the same --out that finished no job kept the last run's jct_cdf.png beside its new metrics."""
    args = ["simulate", "--trace", "synergy:n=30,load=4,seed=3", "--cluster", "1x8", "--no-mlflow", "--out", "sim"]
    assert run_cli(*args).returncode == 0
    assert (tmp_path / "sim" / "jct_cdf.png").is_file()
    proc = run_cli(*args, "--max-time", "1")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "sim" / "jct_cdf.png").exists()
