"""The timing harness and the per-point subprocess runner, on tiny real models."""

from __future__ import annotations

import random
import statistics
import sys
import time

import pytest
import torch

from perfpredict.errors import ModelRunError, NonFiniteLossError
from perfpredict.profile import ProfileSettings, TimingConfig, profile_workload
from perfpredict.profile.host_load import BUSY_HOST_CPUS
from perfpredict.profile.request import PointRequest
from perfpredict.profile.runner import run_in_subprocess
from perfpredict.profile.timing import time_iterations
from perfpredict.workload import load_model_file
from perfpredict.workload.spec import WorkloadRef
from tests.conftest import EXAMPLES, FAST_TIMING, TINY_MODEL


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# -- the timing loop --------------------------------------------------------------------------------------
def test_timing_loop_warms_up_then_stops_when_median_is_stable():
    cfg = TimingConfig(warmup_iters=3, warmup_s=0.0, min_iters=8, min_time_s=0.05, max_time_s=5.0, rel_tol=0.05)
    res = time_iterations(lambda: _busy(0.004), lambda: None, cfg)
    s = res.stats()
    assert s["warmup_iterations"] >= 3
    assert s["stop_reason"] == "stable"
    assert s["iterations"] >= 8 and s["timed_s"] >= 0.05
    assert s["p10_s"] <= s["median_s"] <= s["p90_s"]
    assert 0.004 <= s["median_s"] < 0.02  # it measures the busy-wait, not something else
    assert s["cv"] == pytest.approx(s["std_s"] / s["mean_s"])


def test_timing_loop_stops_at_time_cap_when_never_stable():
    rng = random.Random(0)
    cfg = TimingConfig(warmup_iters=1, warmup_s=0.0, min_iters=3, min_time_s=0.0, max_time_s=0.3, rel_tol=0.0,
                       max_iters=10_000)
    res = time_iterations(lambda: _busy(rng.uniform(0.001, 0.01)), lambda: None, cfg)
    assert res.stop_reason == "time_cap"
    assert sum(res.times_s) >= 0.3


def test_timing_loop_respects_max_iters_and_calls_before_timed_once():
    calls = []
    cfg = TimingConfig(warmup_iters=2, warmup_s=0.0, min_iters=1, min_time_s=100.0, max_iters=7)
    res = time_iterations(lambda: _busy(0.0005), lambda: None, cfg, before_timed=lambda: calls.append(1))
    assert res.stop_reason == "max_iters" and len(res.times_s) == 7 and calls == [1]


# -- one point in a fresh subprocess ---------------------------------------------------------------------
def test_point_in_subprocess_measures_a_tiny_model(write_model):
    path = write_model(TINY_MODEL)
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 16, timing=FAST_TIMING), 120)
    assert res["status"] == "ok", res.get("error")
    t = res["timing"]
    assert t["iterations"] >= FAST_TIMING.min_iters
    assert 0 < t["p10_s"] <= t["median_s"] <= t["p90_s"]
    assert res["memory"]["kind"] == "cpu_rss_increase" and res["memory"]["peak_bytes"] > 0
    if sys.platform.startswith("linux"):  # the forked process faults in torch's code for its kernels
        assert 2**20 < res["memory"]["file_backed_bytes"] <= res["memory"]["peak_bytes"]
    assert res["device_info"]["kind"] == "cpu" and res["device"] == "cpu"
    assert res["optimizer_state_bytes"] == (32 * 64 + 64 + 64 * 8 + 8) * 4  # SGD momentum: one buffer per param
    assert set(res["startup"]) == {"load_s", "build_s", "setup_s", "first_iter_extra_s"}
    e = res["energy"]
    assert e["available"] is False and e["reason"] or e["available"] is True and e["energy_per_iter_j"] > 0


@pytest.mark.parallel_safe  # compares no times
def test_an_optimizer_wrapper_with_a_plain_zero_grad_is_stepped(write_model):
    """The README lets make_optimizer return any object with step() and zero_grad(); the step used to call
    zero_grad(set_to_none=True), which a wrapper around an optimizer and its LR scheduler does not take."""
    path = write_model(TINY_MODEL + """
class WithScheduler:
    def __init__(self, params):
        self.opt = torch.optim.Adam(params, lr=1e-3)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, 10)

    def zero_grad(self):
        self.opt.zero_grad()

    def step(self):
        self.opt.step()
        self.sched.step()

def make_optimizer(params):
    return WithScheduler(params)
""")
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 8, timing=FAST_TIMING), 120)
    assert res["status"] == "ok", res.get("error")
    assert res["timing"]["iterations"] >= FAST_TIMING.min_iters


def _independent_throughput(w, b: int) -> float:
    """The same train step timed by a plain loop in this process (the reference for the harness)."""
    torch.manual_seed(0)
    model = w.build_model().train()
    opt = w.make_optimizer(model.parameters())
    x, y = w.inputs(b), w.targets(b)
    times = []
    for i in range(25):
        t0 = time.perf_counter()
        opt.zero_grad()
        w.loss(model(*x), y).backward()
        opt.step()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return b / statistics.median(times)


def test_harness_throughput_agrees_with_an_independent_timing_loop():
    """The issue's acceptance check: within 30% of the same train step timed beside it.

    The reference loop is timed right before and right after the harness, and the harness is
    compared with their mean. A shared 2-core CI machine can slow down for seconds at a time
    (one CI run read 796 against 1178 samples/s), so a disagreement is re-measured up to twice;
    a harness that is systematically off by more than 30% still fails every round.
    """
    ref = WorkloadRef("file", str(EXAMPLES / "cnn_classifier.py"))
    w = load_model_file(EXAMPLES / "cnn_classifier.py")
    b = 32
    rounds = []
    for _ in range(3):
        before = _independent_throughput(w, b)
        res = run_in_subprocess(PointRequest(ref, b, timing=TimingConfig(min_time_s=1.0)), 300)
        assert res["status"] == "ok"
        harness = b / res["timing"]["median_s"]
        independent = (before + _independent_throughput(w, b)) / 2
        rounds.append((harness, independent))
        if harness == pytest.approx(independent, rel=0.30):
            break
    assert harness == pytest.approx(independent, rel=0.30), rounds


# -- failures: recorded per batch size, sweep continues or stops, nothing lost -----------------------------
OOM_AT_16 = TINY_MODEL + """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 8)
    def forward(self, x):
        if x.shape[0] == 16:
            torch.zeros(10**10)  # 40 GB: beyond the measuring process's memory limit
        return self.lin(x)

def build_model():
    return Net()
"""


def test_oom_is_recorded_as_infeasible_and_the_sweep_continues(write_model, tmp_path):
    w = load_model_file(write_model(OOM_AT_16))
    out = profile_workload(w, ProfileSettings(batch_sizes=(8, 16, 32), timing=FAST_TIMING, features=False),
                           out_dir=tmp_path / "out")
    status = {p.batch_size: p.status for p in out.card.throughput}
    assert status == {8: "ok", 16: "oom", 32: "ok"}
    assert "allocate" in out.card.throughput[1].error
    assert out.error is None  # an infeasible batch size is a finding, not a failure
    assert out.card.rate_model is not None and out.card.rate_model.fit_points == 2


def test_real_memory_limit_turns_large_batches_into_oom(write_model, tmp_path):
    w = load_model_file(write_model(TINY_MODEL))
    s = ProfileSettings(batch_sizes=(8, 2_000_000), timing=FAST_TIMING, features=False,
                        memory_limit_bytes=200 * 2**20)
    out = profile_workload(w, s, out_dir=tmp_path / "out")
    assert [p.status for p in out.card.throughput] == ["ok", "oom"]


NAN_LOSS = TINY_MODEL + """
def loss_fn(outputs):
    return torch.log(outputs.mean() * 0 - 1.0)  # log(-1) = NaN
"""


def test_nan_loss_stops_the_sweep_with_a_readable_error_and_keeps_the_card(write_model, tmp_path):
    w = load_model_file(write_model(NAN_LOSS))
    out = profile_workload(w, ProfileSettings(batch_sizes=(4, 8, 16, 32), timing=FAST_TIMING, features=False),
                           out_dir=tmp_path / "out")
    assert [p.status for p in out.card.throughput] == ["nonfinite", "nonfinite"]  # stopped after the repeat
    assert isinstance(out.error, NonFiniteLossError)
    assert out.error.step == "loss" and "not finite" in str(out.error) and "model.py" in str(out.error)
    assert any(e.step == "not measured" and e.batch_size == 32 for e in out.card.errors)
    assert (tmp_path / "out" / "card.json").exists()


FAILS_ABOVE_16 = TINY_MODEL + """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 8)
    def forward(self, x):
        if x.shape[0] > 16:
            raise ValueError("this model only supports batches up to 16")
        return self.lin(x)

def build_model():
    return Net()
"""


def test_exception_in_forward_keeps_what_was_measured(write_model, tmp_path):
    w = load_model_file(write_model(FAILS_ABOVE_16))
    out = profile_workload(w, ProfileSettings(batch_sizes=(8, 16, 32, 64), timing=FAST_TIMING),
                           out_dir=tmp_path / "out")
    card = out.card
    assert [p.status for p in card.throughput] == ["ok", "ok", "error", "error"]
    assert card.status == "partial" and card.rate_model is not None
    assert isinstance(out.error, ModelRunError) and out.error.step == "forward"
    assert "only supports batches up to 16" in str(out.error) and "batch size 32" in str(out.error)
    from perfpredict.card import PerformanceCard

    saved = PerformanceCard.load(tmp_path / "out" / "card.json")
    assert [p.batch_size for p in saved.measured_points()] == [8, 16]


def test_a_killed_measuring_process_is_classified_not_lost(write_model, tmp_path):
    src = TINY_MODEL + """
import os, signal
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 8)
    def forward(self, x):
        if x.shape[0] == 32:
            os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
        return self.lin(x)

def build_model():
    return Net()
"""
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(write_model(src))), 32, timing=FAST_TIMING), 60)
    assert res["status"] == "oom" and "SIGKILL" in res["error"]


def test_a_hung_measurement_times_out(write_model):
    src = TINY_MODEL + """
import time
def example_inputs(batch_size):
    time.sleep(30)
    return torch.randn(batch_size, 32)
"""
    t0 = time.monotonic()
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(write_model(src))), 8, timing=FAST_TIMING), 3)
    assert res["status"] == "timeout" and time.monotonic() - t0 < 20


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"),
                    reason="denormal arithmetic is slow on x86; other CPUs may flush or handle it at full speed")
def _denormal_penalty() -> float:
    """How much slower this CPU runs elementwise and matrix kernels on denormal floats than on normal ones (the
    largest ratio of three; ~1.0 where the hardware has no denormal penalty). Each ratio is the median of five
    back-to-back pairs of timings: a single pair once read 1.95x on the Zen 4 VM, whose other runs read
    1.00-1.17x, and failed the test below on a scheduling blip."""
    import statistics

    import torch

    def seconds(fn, reps: int = 20) -> float:
        for _ in range(3):
            fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    def ratio(on_denormals, on_normals) -> float:
        return statistics.median(seconds(on_denormals) / seconds(on_normals) for _ in range(5))

    ratios = []
    for make in (lambda v: torch.full((1 << 20,), v), lambda v: torch.full((256, 256), v)):
        tiny, normal = make(1e-39), make(1e-3)
        out = torch.empty_like(tiny)
        if tiny.dim() == 1:
            ratios.append(ratio(lambda: torch.mul(tiny, 0.9, out=out), lambda: torch.mul(normal, 0.9, out=out)))
            ratios.append(ratio(lambda: torch.add(tiny, tiny, out=out), lambda: torch.add(normal, normal, out=out)))
        else:
            ratios.append(ratio(lambda: tiny @ tiny, lambda: normal @ normal))
    return max(ratios)


def test_denormal_bound_steps_are_measured_as_run_and_noted(tmp_path, write_model):
    """A ReLU RNN whose backward pass decays into denormal floats: the point keeps the default's time, and
    the worker's re-timing with denormals flushed to zero shows the speed-up and puts a note on the card
    (measured 97 ms against 38 ms at batch 8 on the Xeon VM). An ordinary model gets no note."""
    from tests.conftest import REPO

    relu = load_model_file(REPO / "benchmarks" / "recurrent_models" / "rnn_relu.py")
    out = profile_workload(relu, ProfileSettings(batch_sizes=(8,), timing=FAST_TIMING, features=False),
                           out_dir=tmp_path / "relu")
    p = out.card.throughput[0]
    assert p.ok and p.denormal_speedup is not None, p
    if p.denormal_speedup <= 1.5:
        # Only a CPU that slows down on denormal floats has anything to detect: Intel's microcode assists do
        # (the Xeon VM: 97 ms against 38 ms), AMD's Zen 4 does not (48 ms against 56 ms flushed). Then the
        # kernels themselves must show no penalty either, or the profiler missed one.
        penalty = _denormal_penalty()
        if penalty < 1.5:
            pytest.skip(f"this CPU does not slow down on denormal floats (kernels {penalty:.2f}x, the RNN step "
                        f"{p.denormal_speedup:.2f}x): nothing to detect")
        pytest.fail(f"the kernels run {penalty:.2f}x slower on denormals, but the profiler measured "
                    f"{p.denormal_speedup:.2f}x for a denormal-bound step")
    assert p.denormal_flushed_iter_time_s < p.iter_time_s
    assert any("denormal floats slow this job" in n for n in out.card.notes)
    plain = profile_workload(load_model_file(write_model(TINY_MODEL)), ProfileSettings(batch_sizes=(8,), timing=FAST_TIMING,
                                                                          features=False), out_dir=tmp_path / "tiny")
    q = plain.card.throughput[0]
    assert q.denormal_speedup is not None and q.denormal_speedup < 1.3
    assert not any("denormal" in n for n in plain.card.notes)


def test_the_denormal_check_compares_interleaved_steps_not_the_window_median():
    """The check used to divide the timed window's median by the flushed steps' median, so a load that ended
    between the two read as a denormal speed-up (125x for a plain MLP on a busy host). The ratio now comes from
    default and flushed steps interleaved: a window median that says nothing about the step (here 1 s for a
    ~2 ms step) cannot move it."""
    from perfpredict.profile.worker import _denormal_check

    a = torch.randn(256, 256)

    def step() -> None:
        for _ in range(8):
            a @ a

    r = _denormal_check(step, median_s=1.0)
    if r is None:
        pytest.skip("this CPU cannot flush denormals")
    assert r["steps"] == 3 and 0 < r["flushed_median_s"] < 0.5 and 0 < r["default_median_s"] < 0.5
    assert r["speedup"] == pytest.approx(r["default_median_s"] / r["flushed_median_s"])
    assert 0.67 < r["speedup"] < 1.5


# -- a busy host ------------------------------------------------------------------------------------------
def _hog():
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def test_other_load_counts_other_processes_and_not_the_measuring_one():
    """The measuring process spinning is its own work (left out); a second process spinning is another's.
    Each property is checked within one window, so load from outside the test cannot flip it."""
    from perfpredict.profile import host_load
    from perfpredict.profile.host_load import OtherLoad

    if host_load._host_busy_s() is None:
        pytest.skip("/proc/stat is not readable here")
    alone = OtherLoad()
    busy0, t0 = host_load._host_busy_s(), time.perf_counter()
    alone.start()
    _busy(0.6)
    own = alone.stop()
    host = (host_load._host_busy_s() - busy0) / (time.perf_counter() - t0)  # every process, this one included
    assert own is not None and host - own >= 0.5, (host, own)  # about one CPU (this spin) taken out
    hog = _hog()
    try:
        time.sleep(0.3)  # let it start
        beside = OtherLoad()
        beside.start()
        time.sleep(0.8)  # the hog has a CPU to itself
        other = beside.stop()
    finally:
        hog.kill()
        hog.wait()
    assert other is not None and other >= 0.6, other
    short = OtherLoad()
    short.start()
    assert short.stop() is None  # below the tick resolution: no number rather than a wrong one


def test_a_point_timed_beside_another_busy_process_says_so_on_the_card(write_model, tmp_path):
    w = load_model_file(write_model(TINY_MODEL))
    hog = _hog()
    try:
        time.sleep(0.3)
        # a window long enough for the kernel's 10 ms CPU-time ticks (shorter ones record None)
        timing = TimingConfig(warmup_iters=1, warmup_s=0.05, min_iters=5, max_iters=100_000, min_time_s=0.6,
                              max_time_s=2.0)
        out = profile_workload(w, ProfileSettings(batch_sizes=(8,), timing=timing, features=False),
                               out_dir=tmp_path / "out")
    finally:
        hog.kill()
        hog.wait()
    p = out.card.throughput[0]
    if p.timing.other_cpus is None:
        pytest.skip("/proc/stat is not readable here")
    # the hog shares the CPUs with the measuring threads (on CI's 2 cores it was seen at 0.4995 of one), so the
    # bar is the profiler's own: enough other load to be called competition
    assert p.timing.other_cpus >= BUSY_HOST_CPUS, p.timing.other_cpus
    threads, cpus = out.card.device.threads, out.card.device.cpu_count
    if p.timing.other_cpus + threads > cpus:
        assert any(n.startswith("the host was busy") and "batch size(s) 8" in n for n in out.card.notes), out.card.notes


def test_what_importing_the_model_file_takes_is_recorded_as_part_of_the_peak(write_model):
    """A model file whose imports are big (``import transformers`` is ~90-150 MiB) shows it: load_bytes is that
    part of the RSS increase, taken before the model was built, and the peak keeps it (as the datasets do)."""
    path = write_model(TINY_MODEL + """
_IMPORTED = bytearray(64 * 2**20)  # stands in for a large library import: 64 MiB, touched
for _i in range(0, len(_IMPORTED), 4096):
    _IMPORTED[_i] = 1
""")
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 16, timing=FAST_TIMING), 120)
    assert res["status"] == "ok", res.get("error")
    m = res["memory"]
    assert 60 * 2**20 <= m["load_bytes"] <= 80 * 2**20
    assert m["peak_bytes"] >= m["load_bytes"]


@pytest.mark.parallel_safe  # compares no times
def test_a_model_file_that_sets_the_thread_count_is_named_on_the_card(write_model, tmp_path):
    """A torch.set_num_threads(1) at the model file's import overrode --threads 2 without a word: the card's
    device said 1 thread and its settings 2."""
    path = write_model("import torch\ntorch.set_num_threads(1)\n" + TINY_MODEL)
    out = profile_workload(load_model_file(path), ProfileSettings(batch_sizes=(4,), timing=FAST_TIMING,
                                                                  features=False, threads=2), out_dir=tmp_path / "o")
    assert out.card.device.threads == 1
    assert any("the steps ran on 1 thread(s), not the 2 the profiler set (--threads)" in n for n in out.card.notes)


@pytest.mark.parallel_safe  # compares no times
def test_a_cpu_point_that_ran_past_the_memory_limit_says_what_the_limit_caps(write_model, tmp_path):
    """`profile --memory-limit 1MB` gave an ok card with a 26.7 MiB peak and no word, where max-batch holds the
    whole peak RSS increase to its limit: the limit caps private memory only, and the card now says so."""
    out = profile_workload(load_model_file(write_model(TINY_MODEL)),
                           ProfileSettings(batch_sizes=(2, 4), timing=FAST_TIMING, features=False,
                                           memory_limit_bytes=8 * 2**20), out_dir=tmp_path / "o")
    assert [p.status for p in out.card.throughput] == ["ok", "ok"]
    assert out.card.memory[0].peak_bytes > 8 * 2**20
    said = [n for n in out.card.notes if n.startswith("--memory-limit:")]
    assert len(said) == 1 and "batch 2's peak RSS increase" in said[0] and "RLIMIT_DATA" in said[0]
