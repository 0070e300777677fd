"""Fixes in profiling, dataset collection, calibration and benchmarks: a load test that ended in a traceback on
one dropped connection, an A/B busy-host note judged by the threads asked for instead of those the steps ran on, and
a GPU dataset resumed on another MIG slice profile of the same board."""

from __future__ import annotations

import socket

from perfpredict.profile.timing import TimingConfig
from perfpredict.workload import resolve_workload
from tests.conftest import REPO, TINY_MODEL, load_script


def test_service_load_counts_a_refused_connection_as_a_failed_request_by_kind():
    mod = load_script(REPO / "benchmarks" / "service_load.py")
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outcome, seconds = mod.request(f"http://127.0.0.1:{port}/predict", timeout=5, json={})  # was: httpx.ConnectError
    assert outcome == "ConnectError" and seconds >= 0
    failed = mod.failures([(outcome, seconds), (200, 0.1), (500, 0.1)])
    assert failed == {"ConnectError": 1, "HTTP 500": 1}


def test_ab_judges_a_busy_host_by_the_threads_the_steps_ran_on(write_model):
    from perfpredict.profile.ab import busy_host_note, compare_jobs

    # the model file sets two threads: the steps ran on 2, not on the 1 that threads=1 (--threads 1) asked for
    path = write_model(TINY_MODEL.replace("def build_model():", "def build_model():\n    torch.set_num_threads(2)"))
    wl = resolve_workload(str(path))
    quick = TimingConfig(warmup_iters=1, warmup_s=0.02, min_iters=3, min_time_s=0.05, max_time_s=0.3)
    r = compare_jobs(wl, wl, 8, rounds=2, device="cpu", timing=quick, threads=1)
    assert [(x.base_threads, x.new_threads) for x in r.rounds] == [(2, 2), (2, 2)]  # was: not recorded
    # another process's half CPU on 2 CPUs competes with the 2 threads that ran (not with 1, as it was judged)
    ran = [(0.5, x.base_threads) for x in r.rounds] + [(0.1, x.new_threads) for x in r.rounds]
    note = busy_host_note(ran, r.threads, 2)
    assert note is not None and note.startswith("the host was busy") and "during 2 of 4 measurements" in note
    assert busy_host_note([(0.5, 1)], 1, 2) is None  # one thread beside half a CPU of others: no competition
    assert "--threads 1" not in busy_host_note([(1.5, 1)], None, 2)  # it already ran on one thread
    assert busy_host_note([(0.5, None)], 1, 2) is None  # not recorded (an older file): the threads asked for


A100 = "NVIDIA A100-SXM4-40GB"


def test_a_gpu_dataset_of_one_mig_slice_profile_is_refused_to_another_profile():
    from perfpredict.dataset.collect import device_refusal, recorded_devices

    # a file's provenance as the collector writes it: a finished run's device_info is the first result's (torch's
    # name, with the slice), a killed run's none; the rows name the device too
    meta = {"dataset": "cuda_a100.csv", "runs": [
        {"device": "cuda:0", "precision": "fp32", "device_info": {"kind": "cuda", "name": f"{A100} MIG 3g.20gb"}},
        {"device": "cuda:0", "precision": "fp32", "device_info": None}]}
    recorded = recorded_devices(meta, [])
    assert recorded == {f"{A100} MIG 3g.20gb"}
    assert recorded_devices(meta, [{"device_name": f"{A100} MIG 3g.20gb"}, {"device_name": ""}]) == recorded
    assert device_refusal(recorded, f"{A100} MIG 3g.20gb") is None  # its own slice profile resumes its file
    # was resumed (the boards agree) and left a file the loader refuses ("dataset mixes devices")
    why = device_refusal(recorded, f"{A100} MIG 1g.5gb")
    assert why == f"was measured on MIG slice 3g.20gb of {A100}; this run measures on MIG slice 1g.5gb, another device"
    assert "the whole GPU, another device" in device_refusal(recorded, A100)
    assert "MIG slice 2g.10gb" in device_refusal(recorded_devices({"runs": [{"device_info": {"name": A100}}]},
                                                                  []), f"{A100} MIG 2g.10gb")
    assert device_refusal(recorded, "NVIDIA H200").startswith("was measured on another device")
    assert device_refusal(recorded_devices({"runs": []}, []), f"{A100} MIG 1g.5gb") is None  # nothing measured yet
