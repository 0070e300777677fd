"""The noise-floor benchmark pairs each committed ``*_repeat.csv`` with its dataset, and training datasets of
one device kind and mode measured on different devices with each other, and scores the second file as a
prediction of the first."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def _run() -> str:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "noise_floor.py")], capture_output=True,
                          text=True, check=True, cwd=REPO).stdout


def test_every_pair_is_scored_and_the_caching_allocator_repeats_exactly():
    out = _run()
    pairs = sorted(p.name for p in (REPO / "datasets").glob("*_repeat.csv"))
    assert pairs and all(f" vs {name}: " in out for name in pairs)
    assert "cpu_epyc_2vcpu.csv vs cpu_xeon_2vcpu.csv" in out  # two CPU models, one mode
    # two VMs with one CPU name ("AMD EPYC"), told apart by the cpu_id the newer one's provenance records
    assert "cpu_epyc_2vcpu.csv vs cpu_epyc_genoa_2vcpu.csv" in out
    assert "cpu_epyc_genoa_2vcpu.csv vs cpu_epyc_genoa_2vcpu_repeat.csv" in out
    # one precision per comparison: a bf16 set is compared with the other machine's bf16 set only
    assert "cpu_epyc_genoa_2vcpu_bf16.csv vs cpu_xeon_2vcpu_bf16.csv" in out
    for line in out.splitlines():
        if " vs " in line:
            first, second = line.split(":", 1)[0].split(" vs ")
            assert ("_bf16" in first) == ("_bf16" in second), line
    h100 = out.split("cuda_h100.csv vs")[1].split(".csv vs")[0]
    # torch's peak allocated bytes are a deterministic function of the program: the same point twice agrees
    assert "peak_memory      MAPE   0.0%" in h100
    # timing is not: two runs of one point differ, on every device
    assert "iter_time        MAPE   0.0%" not in out


def test_a_pair_measured_on_two_devices_is_not_called_a_noise_floor():
    out = _run()
    for block in out.split("\n"):
        if " vs " in block:
            devices = block.split("; ", 1)[1].removesuffix(")").split(" then ")
            assert ("noise floor: the same device twice" in block) == (devices[0] == devices[1]), block
