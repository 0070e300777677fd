"""Review of ``perfpredict trace`` and the clusters the public traces ran on (``--cluster philly:`` / ``pai:``):
an empty trace on a cluster, GPU sizes that print alike, the options a public cluster was read with, and the
messages of a PAI machine spec that gives no usable server."""

from __future__ import annotations

import json

import pytest

from perfpredict.errors import UsageError
from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import Job
from perfpredict.sim.public_traces import read_pai, read_pai_machines
from perfpredict.sim.run import parse_cluster
from perfpredict.sim.trace_summary import summarize_trace
from perfpredict.sim.traces import TraceError

MACHINE_LIST = "machineId, number of GPUs, single GPU mem\nm31,8, 24GB\nm32,2, 12GB\n"
MACHINE_SPEC = "82e5af3cd5c4af3f56c62c54,T4,96,512,2\nm2,V100,96,512,8\nm3,CPU,64,256,0\n"


def test_an_empty_trace_on_a_cluster_is_summarised_not_an_internal_error(run_cli, tmp_path):
    """A trace with no job (a header-only CSV, a public log whose filter keeps nothing) on a cluster: no job is
    wider than a server or larger than the cluster; the command printed nothing and exited 70 (a TypeError)."""
    s = summarize_trace([], cluster=ClusterSpec.homogeneous(2, gpus=8))
    assert (s.jobs_wider_than_a_server, s.jobs_larger_than_the_cluster, s.offered_load) == (0, 0, None)
    trace = tmp_path / "empty.csv"
    trace.write_text("id,arrival_s,gpus,work_s\n")
    res = run_cli("trace", trace, "--cluster", "2x8", "--json", tmp_path / "s.json")
    assert res.returncode == 0 and "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert "n/a (no job)" in res.stdout and "jobs larger than the cluster" in res.stdout
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["jobs"] == 0 and doc["cluster_gpus"] == 16 and doc["jobs_larger_than_the_cluster"] == 0


def test_gpu_sizes_that_print_alike_are_counted_together(tmp_path):
    """PAI with ``fractional=keep``: a job of tasks asking 10% and 20% of a GPU sums to 0.30000000000000004, one
    asking 30% to 0.3; both print as 0.3, and the histogram kept the last one's count alone (2 jobs, 1 counted)."""
    tasks, jobs = tmp_path / "pai_task_table.csv", tmp_path / "pai_job_table.csv"
    tasks.write_text("j1,worker,1.0,Terminated,100.0,200.0,600.0,10.0,10.0,V100\n"
                     "j1,ps,1.0,Terminated,100.0,200.0,600.0,10.0,20.0,V100\n"
                     "j2,worker,1.0,Terminated,150.0,250.0,600.0,10.0,30.0,V100\n"
                     "j3,worker,2.0,Terminated,150.0,250.0,600.0,10.0,50.0,V100\n")
    jobs.write_text("j1,x,u1,Terminated,100.0,200.0\nj2,x,u2,Terminated,150.0,250.0\nj3,x,u3,Terminated,150.0,250.0\n")
    trace = read_pai(tasks, job_table=jobs, fractional="keep").jobs
    assert sorted(j.gpus for j in trace) == [0.3, 0.1 + 0.2, 1.0]
    s = summarize_trace(trace)
    assert s.gpu_demand == {"0.3": 2, "1": 1} and sum(s.gpu_demand.values()) == s.jobs
    mixed = [Job(id=str(g), arrival=0.0, gpus=g, work=60.0) for g in (16.0, 0.5, 2.0, 0.25)]
    assert list(summarize_trace(mixed).gpu_demand) == ["0.25", "0.5", "2", "16"]  # by size, not as text


def test_a_public_clusters_options_are_in_its_name(tmp_path):
    """runs.csv and metrics.json record the cluster by its name: ``philly:FILE,cpus_per_gpu=6`` and the defaults,
    or ``pai:FILE,gpu_type=V100`` and the whole spec, were both named ``philly:FILE`` / ``pai:FILE``, as
    ``4x8:cpus=12`` is named with its option."""
    ml, spec = tmp_path / "cluster_machine_list", tmp_path / "pai_machine_spec.csv"
    ml.write_text(MACHINE_LIST)
    spec.write_text(MACHINE_SPEC)
    names = [parse_cluster(s).name for s in (f"philly:{ml}", f"philly:{ml},cpus_per_gpu=6",
                                             f"philly:{ml},mem_per_gpu=100,cpus_per_gpu=3", f"pai:{spec}",
                                             f"pai:{spec},gpu_type=V100", f"pai:{spec},gpu_type=V100/T4")]
    assert names == ["philly:cluster_machine_list", "philly:cluster_machine_list,cpus_per_gpu=6",
                     "philly:cluster_machine_list,mem_per_gpu=100", "pai:pai_machine_spec.csv",
                     "pai:pai_machine_spec.csv,gpu_type=V100", "pai:pai_machine_spec.csv,gpu_type=T4/V100"]
    assert read_pai_machines(spec, gpu_mem_gb={"T4": 15.0}).name == "pai:pai_machine_spec.csv,gpu_mem_gb=T4:15"


def test_a_pai_machine_spec_without_a_usable_server_says_why(tmp_path):
    """A bad cap_cpu named the file and line twice; a gpu_type= that keeps no server, or a blank one, said
    only "no server with GPUs" of a file that has them."""
    spec = tmp_path / "pai_machine_spec.csv"
    spec.write_text("m1,T4,nan,512,2\n")
    with pytest.raises(TraceError) as e:
        read_pai_machines(spec)
    assert str(e.value).count("line 1") == 1 and "cap_cpu is not finite" in str(e.value)
    spec.write_text(MACHINE_SPEC)
    with pytest.raises(TraceError, match="no server with GPUs of type A100; the file has T4/V100"):
        read_pai_machines(spec, gpu_type="A100")
    with pytest.raises(UsageError, match="no name in ''"):
        parse_cluster(f"pai:{spec},gpu_type=")


def test_a_machine_list_header_after_blank_lines_or_spelt_otherwise_is_still_the_header(tmp_path):
    from perfpredict.sim.public_traces import read_pai, read_philly_machines

    ml = tmp_path / "cluster_machine_list"
    ml.write_text("\n\nmachineid, number of GPUs, single GPU mem\nm31,8, 24GB\n")
    assert read_philly_machines(ml).total_gpus == 8
    tasks = tmp_path / "tasks.csv"
    tasks.write_text("\nJOB_NAME,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type\n"
                     "a,worker,1.0,Terminated,10.0,20.0,600.0,1.0,100.0,T4\n")
    assert [j.id for j in read_pai(tasks).jobs] == ["a"]
