"""Real multi-process runs: DDP over gloo, co-located copies, virtual network nodes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfpredict.card import ColocationInfo, PerformanceCard
from perfpredict.errors import UsageError
from perfpredict.profile import host_load
from perfpredict.profile.colocation import BUSY_NOTE, _run, busy_host_note, measure_colocation, measure_pair
from perfpredict.profile.group import run_group
from perfpredict.profile.group_request import GroupTiming
from perfpredict.profile.netns import VirtualNodes, netns_support
from perfpredict.profile.scaling import (
    Placement,
    measure_placement,
    measure_scaling,
    plan_members,
)
from perfpredict.workload.spec import WorkloadRef
from tests.conftest import TINY_MODEL

QUICK = GroupTiming(warmup_iters=2, warmup_s=0.05, window_s=0.4, min_iters=5, max_iters=100, barrier_timeout_s=60)

LEARNING_MODEL = TINY_MODEL + """
def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.05)
"""


def test_two_gloo_ranks_train_in_sync(write_model):
    ref = WorkloadRef("file", str(write_model(LEARNING_MODEL)))
    members = plan_members(ref, Placement(1, 2), 32, "cpu")
    assert [m.batch_size for m in members] == [16, 16]
    assert members[0].seed != members[1].seed  # different data per rank, as with a sharded sampler
    res = run_group(members, QUICK, 120)
    assert [r["status"] for r in res] == ["ok", "ok"], res
    # Both ranks ran the broadcast iteration count, and all-reduce kept the learning replicas identical even
    # though each saw different inputs.
    assert res[0]["iterations"] == res[1]["iterations"] >= QUICK.min_iters
    assert res[0]["param_checksum"] == pytest.approx(res[1]["param_checksum"], rel=1e-9, abs=1e-9)
    assert res[0]["cpus"] != res[1]["cpus"]  # pinned to disjoint core groups
    assert {r["threads"] for r in res} == {1}


def test_scaling_reports_speedup_relative_to_one_worker(write_model):
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    info = measure_scaling(ref, 32, [2], timing=QUICK, timeout_s=120)
    assert [p.workers for p in info.points] == [1, 2]  # k = 1 is always measured as the baseline
    one, two = info.points
    assert one.status == two.status == "ok", (one.error, two.error)
    assert one.speedup == 1.0
    assert two.speedup == pytest.approx(two.samples_per_s / one.samples_per_s)
    assert two.local_batch == 16 and two.backend == "gloo" and two.device == "cpu"


def test_ranks_the_machine_cannot_run_are_noted_and_the_others_kept(write_model):
    """--workers 1,2,4,8 on a 2-core machine used to lose the whole scaling section (k = 1, 2 too)."""
    import os

    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    cores = len(os.sched_getaffinity(0))
    info = measure_scaling(ref, 4 * cores, [2, 4 * cores], timing=QUICK, timeout_s=120)
    assert [p.workers for p in info.points] == [1, 2] and all(p.status == "ok" for p in info.points)
    assert f"k = {4 * cores} not measured" in info.note and f"{cores} cores" in info.note
    odd = measure_scaling(ref, 7, [2], timing=QUICK, timeout_s=120)
    assert [p.workers for p in odd.points] == [1] and "k = 2 not measured" in odd.note and "split evenly" in odd.note


def test_uneven_split_and_too_many_workers_are_usage_errors(write_model):
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    with pytest.raises(UsageError, match="does not split evenly"):
        plan_members(ref, Placement(1, 2), 33, "cpu")
    with pytest.raises(UsageError, match="cores"):
        plan_members(ref, Placement(1, 64), 64, "cpu")


def test_a_failing_rank_stops_the_group_quickly(write_model):
    src = TINY_MODEL + """
import os
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 8)
    def forward(self, x):
        if torch.distributed.get_rank() == 1:
            raise RuntimeError("rank one is broken")
        return self.lin(x)

def build_model():
    return Net()
"""
    ref = WorkloadRef("file", str(write_model(src)))
    t0 = time.monotonic()
    pt = measure_placement(ref, Placement(1, 2), 16, timing=QUICK, timeout_s=60)
    assert pt.status == "error" and "rank one is broken" in pt.error and "rank1" in pt.error
    assert time.monotonic() - t0 < 30  # not the 60 s deadline: rank 0 was stopped when rank 1 failed


def test_colocated_copies_are_measured_together(write_model):
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    info = measure_colocation(ref, 16, copies=(2,), timing=QUICK, timeout_s=120)
    assert [p.copies for p in info.points] == [1, 2]
    solo, pair = info.points
    assert solo.status == pair.status == "ok"
    assert solo.per_copy_relative == 1.0 and len(pair.per_copy_samples_per_s) == 2
    assert pair.aggregate_samples_per_s == pytest.approx(sum(pair.per_copy_samples_per_s))
    assert pair.per_copy_relative == pytest.approx(pair.aggregate_samples_per_s / 2 / solo.aggregate_samples_per_s)
    cores = len(os.sched_getaffinity(0))
    assert (solo.threads_per_copy, pair.threads_per_copy) == (cores, max(1, cores // 2))  # 1/n of the cores each
    if host_load.reading() is not None:  # the load from outside each group is recorded, and survives the card
        for p in info.points:
            _plausible_other_cpus(p.other_cpus)
        assert ColocationInfo.model_validate_json(info.model_dump_json()) == info


def test_pair_slowdown_follows_its_definition(write_model):
    job = WorkloadRef("file", str(write_model(TINY_MODEL)))
    partner = WorkloadRef("zoo", "mlp", (("depth", 2), ("width", 64)))
    pr = measure_pair(job, 16, partner, 16, timing=QUICK, timeout_s=120)
    assert pr.status == "ok", pr.error
    assert pr.partner == "zoo:mlp[depth=2,width=64]"
    assert pr.job_slowdown == pytest.approx(abs(pr.job_solo_samples_per_s / pr.job_colocated_samples_per_s - 1))
    assert pr.cumulative_gpu_utilization is None  # CPU: no GPU utilisation is invented
    if host_load.reading() is not None:  # each of the three runs records the load from outside it
        for v in (pr.other_cpus, pr.job_solo_other_cpus, pr.partner_solo_other_cpus):
            _plausible_other_cpus(v)


def _plausible_other_cpus(v: float | None) -> None:
    """A measured ``other_cpus``: a finite number of CPUs, >= 0 and at most the host's (an idle host gives about 0;
    this machine may run other tests, so no tighter bound holds)."""
    assert v is not None and math.isfinite(v) and 0 <= v <= (os.cpu_count() or 1) + 0.1, v


def test_a_group_leaves_its_own_cpu_time_out_of_the_load_from_outside(write_model):
    """Two copies keep the CPUs busy themselves: that is the group's work, not another process's. Checked within
    the group's own window against the host's busy CPUs over the same span, so outside load cannot flip it."""
    if host_load.reading() is None:
        pytest.skip("/proc/stat is not readable here")
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    results = _run([(ref, 16)] * 2, "cpu", "train", QUICK, 120)
    assert [r["status"] for r in results] == ["ok", "ok"], results
    windows = [r["host_load"] for r in results]
    other = host_load.group_other_cpus(windows)
    (t0, busy0), (t1, busy1) = max((w[0][:2] for w in windows)), min((w[1][:2] for w in windows))
    host = (busy1 - busy0) / (t1 - t0)  # every process, the copies included
    own = sum((w[1][2] - w[0][2]) / (w[1][0] - w[0][0]) for w in windows)  # CPUs the copies kept busy
    assert own >= 0.5, own
    assert other is not None and other == pytest.approx(max(0.0, host - own), abs=0.1), (host, own, other)
    assert other <= host - 0.4


def test_copies_timed_beside_a_busy_process_record_it_and_get_a_note(write_model):
    """A process spinning beside the group is load from outside it: every run records it, and on CPU, where it
    competes with the copies' threads for the cores, the card gets the co-location busy-host note."""
    if host_load.reading() is None:
        pytest.skip("/proc/stat is not readable here")
    ref = WorkloadRef("file", str(write_model(TINY_MODEL)))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it start
        info = measure_colocation(ref, 16, copies=(2,), timing=QUICK, timeout_s=120)
    finally:
        hog.kill()
        hog.wait()
    assert [p.status for p in info.points] == ["ok", "ok"], [p.error for p in info.points]
    assert all(p.other_cpus is not None and p.other_cpus >= 0.3 for p in info.points), info.points
    cpus = os.cpu_count() or 1
    note = busy_host_note(info, cpus)
    assert note is not None and note.startswith(BUSY_NOTE) and "1 copy" in note and "2 copies" in note, note
    # the note is about CPU co-location only: a GPU's rates do not depend on the host's spare cores that way
    assert busy_host_note(info.model_copy(update={"device": "cuda:0"}), cpus) is None


def test_cards_saved_before_the_co_location_load_was_recorded_still_load(tmp_path):
    """Schema 1.10 cards have no other_cpus in their co-location points and pairs: they load, with None."""
    from tests.test_card import build_card

    card, _ = build_card()
    doc = json.loads(card.to_json())
    doc["schema_version"] = "1.10"
    doc["colocation"] = {
        "batch_size": 16, "window_s": 3.0, "device": "cpu", "source": "measured",
        "points": [{"copies": 1, "batch_size": 16, "status": "ok", "per_copy_samples_per_s": [900.0],
                    "per_copy_relative": 1.0, "aggregate_samples_per_s": 900.0, "aggregate_relative": 1.0,
                    "threads_per_copy": 2, "device": "cpu"},
                   {"copies": 2, "batch_size": 16, "status": "ok", "per_copy_samples_per_s": [500.0, 480.0],
                    "per_copy_relative": 0.54, "aggregate_samples_per_s": 980.0, "aggregate_relative": 1.09,
                    "threads_per_copy": 1, "device": "cpu"}],
        "pairs": [{"partner": "zoo:mlp", "job_solo_samples_per_s": 900.0, "partner_solo_samples_per_s": 2000.0,
                   "job_colocated_samples_per_s": 600.0, "partner_colocated_samples_per_s": 1100.0,
                   "job_slowdown": 0.5, "partner_slowdown": 0.82, "status": "ok", "device": "cpu"}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    old = PerformanceCard.load(path)
    assert old.colocation is not None and [p.other_cpus for p in old.colocation.points] == [None, None]
    (pair,) = old.colocation.pairs
    assert (pair.other_cpus, pair.job_solo_other_cpus, pair.partner_solo_other_cpus) == (None, None, None)
    assert busy_host_note(old.colocation, 2) is None  # nothing recorded, nothing claimed


def test_a_broken_copy_is_reported_not_the_barrier(write_model):
    bad = write_model(TINY_MODEL.replace("nn.Linear(64, 8)", "nn.Linear(63, 8)"), name="bad.py")
    good = WorkloadRef("file", str(write_model(TINY_MODEL)))
    pr = measure_pair(good, 8, WorkloadRef("file", str(bad)), 8, timing=QUICK, timeout_s=60)
    assert pr.status == "error" and "shapes cannot be multiplied" in pr.error


SUPPORT = netns_support()


@pytest.mark.skipif(not SUPPORT[0], reason=f"virtual network nodes unavailable: {SUPPORT[1]}")
def test_ranks_on_two_virtual_nodes_cross_a_capped_link(write_model):
    ref = WorkloadRef("file", str(write_model(LEARNING_MODEL)))
    with VirtualNodes(2, rate_mbit=50) as nodes:
        assert len(set(nodes.addresses)) == 2
        pt = measure_placement(ref, Placement(2, 1), 32, timing=QUICK, nodes=nodes, timeout_s=120)
    assert pt.status == "ok", pt.error
    assert pt.nodes == 2 and pt.workers_per_node == 1 and "tbf 50 Mbit/s" in pt.link


def test_torchrun_launcher_measures_and_summarizes(write_model, tmp_path):
    """profilers/ddp_scaling_torchrun.py under real torchrun (2 local ranks), then --summarize."""
    import json
    import shutil
    import subprocess
    import sys

    from tests.conftest import REPO

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this interpreter")
    model = write_model(TINY_MODEL)
    script = REPO / "profilers" / "ddp_scaling_torchrun.py"
    out = tmp_path / "ranks"
    proc = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", str(script), str(model),
                           "--global-batch", "16", "--window", "0.3", "--out", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["rank0.json", "rank1.json"]
    summary = subprocess.run([sys.executable, str(script), "--summarize", str(out)], capture_output=True, text=True,
                             timeout=60)
    assert summary.returncode == 0, summary.stderr
    point = json.loads(summary.stdout)
    assert (point["workers"], point["d_node"], point["d_gn"], point["global_batch"]) == (2, 1, 2, 16)
    assert point["samples_per_s"] > 0


@pytest.mark.parallel_safe  # compares no times: the numbers are given
@pytest.mark.parametrize("solo_rate, per_copy, suspect", [(380.0, 0.55, None),
                                                          (380.0, 47.88, "each ran 47.88x as fast as one alone"),
                                                          (69.0, 0.6, "under half the 381 the sweep measured")])
def test_co_location_numbers_no_job_can_give_are_called_suspect_and_so_is_the_curve(solo_rate, per_copy, suspect):
    """On a busy 2-vCPU host a stalled solo run gave 'per copy 47.88x solo' and a solo rate 70x under the sweep's,
    with no word on the card, and the speedup curve was fitted through them."""
    from perfpredict.card import ColocationPoint
    from perfpredict.profile.extended import SUSPECT_COLOCATION, _implausible_colocation, _speedup
    from tests.test_card import build_card

    card, _ = build_card()  # the sweep: batch 4 at 381 samples/s
    points = [ColocationPoint(copies=n, batch_size=4, status="ok", per_copy_samples_per_s=[r] * n,
                              per_copy_relative=r / solo_rate, aggregate_samples_per_s=n * r,
                              aggregate_relative=n * r / solo_rate, device="cpu")
              for n, r in ((1, solo_rate), (2, solo_rate * per_copy))]
    card.colocation = ColocationInfo(batch_size=4, window_s=1.0, device="cpu", points=points)
    note = _implausible_colocation(card, card.colocation, 4)
    if suspect is None:
        assert note is None
    else:
        assert note.startswith(SUSPECT_COLOCATION) and suspect in note, note
        card.notes.append(note)
    _speedup(card)
    assert ("co-location the card calls suspect" in card.speedup_curve.fit["notes"]) == (suspect is not None)


@pytest.mark.parallel_safe  # compares no times: the numbers are given
def test_a_measured_speedup_the_curve_cannot_follow_is_named_on_it():
    """Two data-parallel ranks at S = 0.54 (slower than one): the monotone curve gives 1.0 there, and its notes
    were empty, so a scheduler would plan on a second rank costing nothing."""
    from perfpredict.card import ScalingInfo, ScalingPoint
    from perfpredict.profile.extended import _speedup
    from tests.test_card import build_card

    card, _ = build_card()
    card.scaling = ScalingInfo(global_batch=8, backend="gloo", device="cpu", points=[
        ScalingPoint(workers=2, workers_per_node=2, global_batch=8, local_batch=4, status="ok", speedup=0.54,
                     samples_per_s=100.0)])
    _speedup(card)
    assert "S(2) = 0.54 lie off the curve (1.00)" in card.speedup_curve.fit["notes"], card.speedup_curve.fit["notes"]


@pytest.mark.parallel_safe  # compares no times: the numbers are given
def test_show_prints_the_speedup_curve_and_the_sensitivity_matrix():
    """`perfpredict show` printed neither the speedup curve nor the W matrix (only the probed CPUs and demand)."""
    from rich.console import Console

    from perfpredict.card import ScalingInfo, ScalingPoint, SensitivityCard, SensitivityDemand
    from perfpredict.cli import print_summary
    from perfpredict.profile.extended import _speedup
    from tests.test_card import build_card

    card, _ = build_card()
    card.scaling = ScalingInfo(global_batch=8, backend="gloo", device="cpu", points=[
        ScalingPoint(workers=2, workers_per_node=2, global_batch=8, local_batch=4, status="ok", speedup=1.6,
                     samples_per_s=100.0)])
    _speedup(card)
    card.sensitivity = SensitivityCard(cpu_values=[1, 2], mem_values_gb=[1.0, 2.0], matrix=[[10.0, 12.5], [20.0, 24.0]],
                                       profiled_cpu_values=[2, 1], demand=SensitivityDemand(cpus=2, mem_gb=2.0),
                                       threshold=0.1, dataset_bytes=10**9, storage_bytes_per_s=2e8)
    console = Console(record=True, width=200)
    print_summary(card, console)
    text = console.export_text()
    assert "speedup curve: S(1) = 1.00, S(2) = 1.60 from 2 point(s)" in text
    assert "2 CPU(s):      20.0       24.0" in text and "storage" in text


@pytest.mark.parallel_safe  # compares no times: the sections are stand-ins
def test_a_ctrl_c_in_scaling_keeps_a_curve_through_the_co_location_already_measured(monkeypatch):
    """The co-location points were on the card after a Ctrl-C during scaling, but no speedup curve through them."""
    from types import SimpleNamespace

    from perfpredict.card import ColocationPoint
    from perfpredict.profile import extended
    from tests.test_card import build_card

    card, _ = build_card()
    info = ColocationInfo(batch_size=8, window_s=1.0, device="cpu", points=[
        ColocationPoint(copies=n, batch_size=8, status="ok", per_copy_samples_per_s=[100.0 * r] * n,
                        per_copy_relative=r, aggregate_samples_per_s=100.0 * r * n, aggregate_relative=r * n,
                        device="cpu") for n, r in ((1, 1.0), (2, 0.7))])

    def scaling(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(extended, "_colocation", lambda card, *_: setattr(card, "colocation", info))
    monkeypatch.setattr(extended, "_scaling", scaling)
    saved = []
    with pytest.raises(KeyboardInterrupt):
        extended.run_extended(card, SimpleNamespace(ref=None), extended.ExtendedSettings(
            colocation=True, scaling=True, batch_size=8), save=lambda: saved.append(card.speedup_curve))
    assert card.speedup_curve is not None and saved[-1] is card.speedup_curve
    assert [q.p for q in card.speedup_curve.points] == [0.5, 1.0]
