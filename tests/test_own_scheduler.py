"""A scheduler of the user's own (docs/simulator.md, 'Your own scheduler'): the documented example runs as
written, and the simulator checks such a mechanism's decisions and reports its mistakes by name."""

from __future__ import annotations

import re

import pytest

from perfpredict.errors import UsageError
from perfpredict.sched import Allocation, PerfModel
from perfpredict.sched.base import Mechanism
from perfpredict.sim import run_simulation
from perfpredict.sim.run import load_perf_models
from tests.conftest import REPO

#: a 16 GB and an 80 GB server
TWO_SIZES = {"servers": [{"gpus": 4, "cpus": 12, "mem_gb": 250, "gpu_mem_gb": 16},
                         {"gpus": 4, "cpus": 12, "mem_gb": 250, "gpu_mem_gb": 80}]}


def _documented_example() -> dict:
    """Run the docs' code block that defines FirstFit, as written; its names."""
    text = (REPO / "docs" / "simulator.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class FirstFit" in b]
    names: dict = {"__name__": "docs_example"}
    exec(compile(block, "docs/simulator.md", "exec"), names)  # noqa: S102 - the project's own documentation
    return names


@pytest.fixture(scope="module")
def example() -> dict:
    return _documented_example()


def _big_jobs(tmp_path, n: int = 2):
    trace = tmp_path / "big.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\n" + "".join(f"j{i},0,1,3600,big\n" for i in range(n)))
    models = load_perf_models("paper")
    models["big"] = PerfModel("big", device_mem_gb=40.0)
    return trace, models


def test_the_documented_example_runs_and_places_a_big_job_only_on_gpus_that_hold_it(example, tmp_path):
    run = example["run"]
    assert run.params["mechanism"] == "first-fit" and run.params["policy"] == "largest-first"
    assert len(run.result.finished) == 200 and run.result.stall is None
    trace, models = _big_jobs(tmp_path)
    big = run_simulation(trace, TWO_SIZES, "fifo", example["FirstFit"](), cards=models)
    # both ran, so both were on the 80 GB server: the simulator refuses a GPU smaller than the job (next test)
    assert len(big.result.finished) == 2 and big.result.stall is None


class _Careless(Mechanism):
    """First fit that ignores device memory: it reserves none, and puts a job anywhere."""

    name = "careless"
    rigid, preemptive, whole_gpus = True, False, True

    def __init__(self, fraction: bool = False) -> None:  # no super().__init__(): the simulator copes
        self.fraction = fraction

    def allocate(self, ordered, cluster, running, now):
        out = dict(running)
        ledger = self.current_ledger(cluster, running)
        for js in ordered:
            if js.id in out:
                continue
            for s, srv in enumerate(cluster.servers):
                devices = ledger.free_devices(s)[:1]
                if devices:
                    alloc = (Allocation.fraction(s, devices[0], 0.5, 1, 10) if self.fraction
                             else Allocation.proportional({s: devices}, srv.cpus_per_gpu, srv.mem_per_gpu))
                    ledger.take(alloc)
                    out[js.id] = alloc
                    break
        return out


def test_a_gpu_too_small_for_the_job_is_the_mechanisms_error(tmp_path):
    """The simulator took a 40 GB job on a 16 GB GPU from a mechanism that reserved no device memory."""
    trace, models = _big_jobs(tmp_path)
    with pytest.raises(UsageError, match=r"careless gave job j0 server 0's GPUs, with 16 GB .* needs 40 GB"):
        run_simulation(trace, TWO_SIZES, "fifo", _Careless(), cards=models)


def test_a_gpu_share_must_reserve_the_jobs_device_memory(tmp_path):
    """Half a GPU reserving 0 GB: the ledger could not keep the jobs beside it within the device."""
    trace, models = _big_jobs(tmp_path)
    one_size = {"servers": [{"gpus": 4, "cpus": 12, "mem_gb": 250, "gpu_mem_gb": 80}]}
    with pytest.raises(UsageError, match=r"careless gave job j0 a share of a GPU on server 0 that reserves 0 "
                                              r"GB of device memory \(its device_mem_gb\), and it needs 40 GB"):
        run_simulation(trace, one_size, "fifo", _Careless(fraction=True), cards=models)


def test_an_error_in_a_mechanism_or_a_policy_is_noted_with_its_name_and_the_time():
    from perfpredict.sched.base import Policy

    class Broken(Mechanism):
        name = "broken"

        def allocate(self, ordered, cluster, running, now):
            return {js.id: js.nothing for js in ordered}

    class Uncomparable(Policy):
        name = "uncomparable"

        def key(self, js, now, cluster, n_active):
            return None if js.id == "0" else 1.0

    with pytest.raises(AttributeError) as e:
        run_simulation("synergy:n=5", "1x8", "fifo", Broken())
    assert any("mechanism 'broken'" in n and "simulated time" in n for n in e.value.__notes__)
    with pytest.raises(TypeError) as e:
        run_simulation("synergy:n=5,load=100", "1x8", Uncomparable(), "tune")
    assert any("policy 'uncomparable'" in n for n in e.value.__notes__)


def test_simulate_takes_names_as_run_simulation_does():
    from perfpredict.sched import ClusterSpec, make_policy
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sim import simulate, synergy_trace

    jobs, cluster, models = synergy_trace(40, load_jobs_per_hour=9, seed=0), ClusterSpec.homogeneous(1), \
        load_perf_models("paper")
    by_name = simulate(jobs, cluster, "srtf", "tune", models)
    by_instance = simulate(jobs, cluster, make_policy("srtf"), make_mechanism("tune"), models)
    assert [(js.id, js.finish) for js in by_name.finished] == [(js.id, js.finish) for js in by_instance.finished]
    with pytest.raises(ValueError, match="unknown policy 'nosuch'"):
        simulate(jobs, cluster, "nosuch", "tune", models)


@pytest.mark.parametrize("mechanism, trace, cluster", [
    ("andreas", "andreas:nodes=4", "andreas:nodes=4"),       # a random generator
    ("pab", "horus-small", "horus-testbed"),                 # jobs on probation and pairs to avoid, by job id
    ("horus", "horus-small", "horus-testbed"),               # placements kept between decisions
    ("swaf", "genie:hours=2", "genie"),                      # per-task views
])
def test_one_instance_gives_every_run_a_fresh_instances_results(mechanism, trace, cluster):
    """An ANDREAS instance used for a second run gave other results than a fresh one (its random generator went
    on), and PAB's records of which job ids to keep apart carried into the next trace's jobs of the same ids."""
    from perfpredict.sched.mechanisms import make_mechanism

    def jcts(run) -> list[tuple[str, float]]:
        return sorted((js.id, js.finish) for js in run.result.finished)

    reused = make_mechanism(mechanism)
    first, second = (jcts(run_simulation(trace, cluster, "fifo", reused)) for _ in range(2))
    assert first == second == jcts(run_simulation(trace, cluster, "fifo", mechanism))


def test_compare_refuses_a_policy_or_mechanism_instance():
    """compare labelled an instance by its repr and shared one object across seeds."""
    from perfpredict.sim.compare import Scheduler, compare

    with pytest.raises(UsageError, match="names each policy and mechanism by string"):
        compare("synergy:n=5", "1x8", [Scheduler("fifo", _Careless())], [0])


def test_built_in_mechanisms_still_run_on_gpus_of_several_sizes_after_a_simulated_oom():
    """The device-memory check first compared shares with the request a simulated OOM raises, which only the
    sharing mechanisms reserve: the moldable ones, reserving the card's footprint, were refused on such a cluster."""
    cluster = {"servers": [{"gpus": 4, "cpus": 32, "mem_gb": 500, "gpu_mem_gb": m} for m in (40, 80, 24)]}
    run = run_simulation("horus-small", cluster, "fifo", "moldable-proportional")
    assert len(run.result.finished) == 100 and run.result.stall is None


def test_the_documented_mechanism_takes_a_fractional_demand_above_one_gpu(example, tmp_path):
    trace = tmp_path / "frac.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\nj0,0,2.5,3600,resnet50\nj1,0,1,600,resnet50\n")
    run = run_simulation(trace, "2x8", "fifo", example["FirstFit"]())
    assert len(run.result.finished) == 2


def test_horus_f_reused_on_another_trace_with_the_same_job_ids_answers_as_a_fresh_one():
    """Horus' k-means features were cached by job id across runs: a second trace reusing the ids was queued
    by the first trace's jobs' features."""
    from dataclasses import replace

    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sim.run import parse_trace

    first = parse_trace("horus-small", 0, [])
    second = [replace(j, gpus=[4.0, 2.0, 1.0][i % 3]) for i, j in enumerate(first)]
    reused = make_mechanism("horus-f")
    run_simulation(first, "horus-testbed", "fifo", reused)

    def finishes(run) -> list[tuple[str, float]]:
        return sorted((js.id, js.finish) for js in run.result.finished)

    assert finishes(run_simulation(second, "horus-testbed", "fifo", reused)) == \
        finishes(run_simulation(second, "horus-testbed", "fifo", "horus-f"))
