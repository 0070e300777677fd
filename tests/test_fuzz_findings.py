"""Inputs a fuzzing pass found ending in a raw exception (CLI exit 70), a MemoryError or a hang; each is now one
readable error. Small and real: every case runs the code path that failed."""

from __future__ import annotations

import json

import pytest

from perfpredict.card import PerformanceCard
from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.sim.run import parse_cluster, parse_trace, run_simulation
from perfpredict.sim.traces import TraceError, load_trace, read_swf


def _paper_card_dict(name: str) -> dict:
    from perfpredict.sched.paper_cards import paper_card

    return json.loads(paper_card(name).to_json())


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["sensitivity"].__setitem__("cpu_values", []), "cannot build a performance model"),
    (lambda d: d["sensitivity"]["matrix"].__setitem__(0, []), "cannot build a performance model"),
])
def test_a_card_that_loads_but_makes_no_model_names_the_file(tmp_path, edit, words):
    d = _paper_card_dict("resnet18")
    edit(d)
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "card.json").write_text(json.dumps(d))
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\n0,0,1,500,resnet18\n")
    with pytest.raises(UsageError, match=words) as ei:
        run_simulation(str(trace), "2x4", cards=tmp_path / "cards")
    assert "card.json" in str(ei.value)


def test_nan_and_infinity_in_a_card_are_refused_when_read(tmp_path):
    d = _paper_card_dict("resnet18")
    d["sensitivity"]["mem_values_gb"][0] = float("nan")  # json.dumps writes NaN, json.loads reads it back
    with pytest.raises(PerfPredictError, match=r"sensitivity.mem_values_gb.0: nan is not a finite number"):
        PerformanceCard.from_json(json.dumps(d))


def test_show_takes_a_predicted_card_without_nearest_and_refuses_one_without_points(run_cli, tmp_path):
    proc = run_cli("predict", "zoo:mlp", "-b", "8", "--out", "p.json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "p.json").read_text())
    d["prediction"]["nearest"] = None
    (tmp_path / "a.json").write_text(json.dumps(d))
    assert run_cli("show", "a.json").returncode == 0
    d["prediction"]["points"] = []
    (tmp_path / "b.json").write_text(json.dumps(d))
    for args in (("show", "b.json"), ("colocate", "b.json", "p.json")):
        proc = run_cli(*args)
        assert proc.returncode == 1 and "prediction.points is empty" in proc.stderr, proc.stderr
    proc = run_cli("colocate", "p.json", "p.json", "-b", ",")
    assert proc.returncode == 2 and "--batch-sizes" in proc.stderr


def test_show_takes_a_measured_point_with_numbers_left_out(run_cli, tmp_path):
    from tests.test_card import build_card

    card, _ = build_card()
    d = json.loads(card.to_json())
    for k in ("cv", "p10_s", "p90_s", "samples_per_s"):
        d["throughput"][0][k] = None
    (tmp_path / "c.json").write_text(json.dumps(d))
    proc = run_cli("show", "c.json")
    assert proc.returncode == 0, proc.stderr


def test_cluster_files_with_infinite_counts_or_deep_nesting_are_usage_errors(tmp_path):
    inf = tmp_path / "inf.json"
    inf.write_text('{"servers": [{"gpus": 8, "count": 1e999}]}')
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    for f in (inf, deep):
        with pytest.raises(UsageError, match="cluster file"):
            parse_cluster(str(f))
    with pytest.raises(UsageError, match="cluster dict"):
        parse_cluster({"servers": [{"gpus": 8, "count": float("inf")}]})


@pytest.mark.parametrize("spec, words", [
    ("synergy:n=1000000000", "10,000,000"), ("dlbags:n=1000000000", "10,000,000"),
    ("andreas:nodes=1000000000", "10,000,000"), ("horus:n=1000000000", "10,000,000"),
    ("genie:hours=inf", "finite"), ("genie:rate=1e12,hours=1", "10,000,000"),
    ("genie:batches=99999999999999999999", r"2\^31"),
])
def test_generated_traces_of_impossible_size_are_refused_before_allocating(spec, words):
    with pytest.raises(UsageError, match=words):
        parse_trace(spec)


@pytest.mark.parametrize("spec", ["horus:nodes=1000000000", "andreas:nodes=1000000000"])
def test_clusters_of_impossible_size_are_refused_before_building(spec):
    with pytest.raises(UsageError, match="100,000"):
        parse_cluster(spec)


def test_mechanism_options_that_ran_out_of_memory_or_never_ended():
    # p_max far above the cluster's GPUs: sizes are listed only up to them
    run = run_simulation("synergy:n=3", "2x8", "fifo", "moldable-proportional:p_max=100000000000")
    assert run.metrics.n_finished == 3
    for spec, words in (("andreas:max_it=2000000000", "1,000,000"), ("andreas:period_s=0.001", "at least 1 second")):
        with pytest.raises(UsageError, match=words):
            run_simulation("synergy:n=3", "2x8", "fifo", spec)
    with pytest.raises(UsageError, match="LP1 cannot be solved"):
        run_simulation("synergy:n=1", "1x1:cpus=1e300,mem=1e300", "fifo", "opt")


def test_api_trace_arguments_are_trace_or_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="seed must be a whole number"):
        parse_trace("genie:rate=1,hours=1", seed=1.5)
    swf = tmp_path / "t.swf"
    swf.write_text("1 0 0 100 4 -1 -1 4 100 -1 1 1 1 1 1 -1 -1 -1\n")
    for kw in (dict(gpus_per_proc=0), dict(max_jobs=-1), dict(gpus_per_proc="x")):
        with pytest.raises(TraceError):
            read_swf(swf, **kw)
    csv_trace = tmp_path / "t.csv"
    csv_trace.write_text("id,arrival_s,gpus,work_s\n0,0,1,10\n")
    with pytest.raises(TraceError, match="SWF traces only"):
        load_trace(csv_trace, gpus_per_proc=2)


def test_the_synergy_cluster_by_name_and_an_unknown_name_lists_the_named_ones():
    synergy = parse_cluster("synergy")
    assert synergy.total_gpus == 128 and len(synergy.servers) == 16
    assert {(s.gpus, s.cpus, s.mem_gb) for s in synergy.servers} == {(8, 24, 500.0)}  # seed 001 §5.1
    assert synergy.servers == parse_cluster("16x8").servers
    with pytest.raises(UsageError, match="synergy \\(16x8\\), armida, .*horus-testbed"):
        parse_cluster("synergie")
