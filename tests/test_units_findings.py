"""Units scan (session 45): quantities that changed unit on the way without a conversion, or whose name or
label stated a unit the number was not in."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfpredict.errors import UsageError
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]


def test_a_horus_utilisation_cap_given_in_percent_is_refused_not_run_as_no_cap():
    """The Horus paper writes GUtil in percent (``GUtil_jng > 100``); the cap compares fractions (1.5 = 150 %).
    ``horus:overcommit=150`` meant 15 000 %, which no pair of jobs reaches: the run was the uncapped one, with
    nothing said. A cap above what ``max_colocated`` jobs at 100 % each can reach is now refused."""
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sched.mechanisms.horus import Horus

    for cap in (100, 150.0, "150", 2.5):
        with pytest.raises(ValueError, match="fraction"):
            Horus(overcommit=cap)
    with pytest.raises(ValueError, match="percentage"):
        make_mechanism("horus:overcommit=150")
    assert Horus(overcommit=1.5).overcommit == 1.5                   # fractions as before, up to the limit
    assert Horus(overcommit=2).overcommit == 2.0
    assert Horus(overcommit=3, max_colocated=3).overcommit == 3.0
    assert Horus(overcommit="breakeven").overcommit == "breakeven"


def test_max_job_mem_gb_of_the_colocation_sampler_is_in_gb_not_gib():
    """``--max-job-mem-gb 31`` kept a point of 31.2 GB (1e9 bytes, the unit of every ``*_gb`` in perfpredict):
    the limit was multiplied by 2**30, 33.3 GB."""
    from perfpredict.dataset.collect import read_dataset

    cc = load_script(REPO / "profilers" / "collect_colocation.py")
    rows = [r for r in read_dataset(REPO / "datasets" / "cuda_h100.csv")
            if r["config"].startswith("vgg-depth16-width64-batch_norm1-image_size224") and r["batch_size"] == "128"]
    assert len(rows) == 1 and 31.0e9 < float(rows[0]["nvml_process_bytes"]) < 31.3e9
    with pytest.raises(UsageError, match="only 0 usable points"):
        cc.sample_jobs(rows, 1, seed=0, max_job_mem_gb=31.0)
    assert len(cc.sample_jobs(rows, 1, seed=0, max_job_mem_gb=31.3)) == 1
