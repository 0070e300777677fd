"""One check for output paths, shared by the CLI, the Python API, the experiments, benchmarks and collectors:
a path that cannot be written is refused before any work, worded the same way everywhere."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from perfpredict.errors import UsageError
from perfpredict.output_paths import blocking_file, output_dir_problem, output_file_problem

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def afile(tmp_path: Path) -> Path:
    f = tmp_path / "afile"
    f.write_text("x")
    return f


def test_a_folder_that_exists_or_can_be_created_is_fine(tmp_path):
    assert output_dir_problem(tmp_path) is None
    assert output_dir_problem(tmp_path / "new" / "deeper") is None
    assert blocking_file(tmp_path / "new" / "deeper") is None


def test_a_file_in_the_way_of_a_folder_is_named(afile):
    assert output_dir_problem(afile) == f"{afile} is a file, not a folder"
    below = afile / "sub" / "out"
    assert blocking_file(below) == afile
    assert output_dir_problem(below) == f"cannot create {below}: {afile} is a file, not a folder"


def test_an_output_file_that_is_a_folder_or_sits_under_a_file_is_named(tmp_path, afile):
    assert output_file_problem(tmp_path / "r.json") is None
    assert output_file_problem(tmp_path / "new" / "r.json") is None  # its folder is created when written
    assert "is a folder" in output_file_problem(tmp_path)
    assert output_file_problem(afile / "r.json") == f"cannot create {afile / 'r.json'}: {afile} is a file, not a folder"
    assert "does not exist" in output_file_problem(tmp_path / "new" / "r.json", parent_must_exist=True)
    assert output_file_problem("r.json", parent_must_exist=True) is None  # the working folder


def test_every_caller_refuses_a_path_under_a_file(afile):
    from perfpredict import script_args
    from perfpredict.cli import check_out_dir
    from perfpredict.dataset.collect import check_output_path
    from perfpredict.sim.run import run_simulation

    under = afile / "out"
    with pytest.raises(UsageError, match="afile is a file, not a folder"):
        check_out_dir(under)
    with pytest.raises(UsageError, match="afile is a file, not a folder"):
        check_output_path(under / "d.csv")
    with pytest.raises(UsageError, match="afile is a file, not a folder"):
        run_simulation("synergy:n=3", "1x8", out_dir=under)
    # experiments' --out used to pass a path under a file and fail when writing, after the run
    for parse in (script_args.out_dir, script_args.out_file):
        with pytest.raises(argparse.ArgumentTypeError, match="afile is a file, not a folder"):
            parse(str(under / "r.json"))


def test_profile_refuses_an_out_dir_that_is_a_file_before_measuring(afile):
    import perfpredict

    with pytest.raises(UsageError, match="out_dir: .*is a file, not a folder"):
        perfpredict.profile(str(REPO / "examples" / "minimal_mlp.py"), batch_sizes=[2], out_dir=afile)
    assert afile.read_text() == "x"


def test_predict_out_under_a_file_is_a_usage_error(afile):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "perfpredict", "predict", "zoo:mlp", "-b", "8",
                           "--out", str(afile / "card.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "afile is a file, not a folder" in proc.stderr and "Traceback" not in proc.stderr


def test_a_folder_that_cannot_be_made_is_said_up_front():
    """`--out /proc/x` passed the check (no file in the way) and the scripts ended in a FileNotFoundError
    traceback; the check now tries the nearest existing folder."""
    from perfpredict.output_paths import output_dir_problem

    assert "does not take new files" in output_dir_problem("/proc/perfpredict-x")


def test_a_file_that_cannot_be_written_is_said_up_front(tmp_path):
    """`perfpredict predict -o /proc/x.json` predicted and printed the card, then failed to write it; files are
    now checked like folders, by trying the folder they go in."""
    import subprocess

    from perfpredict.output_paths import output_file_problem

    assert output_file_problem("/proc/perfpredict-x.json") == "cannot write /proc/perfpredict-x.json (No such file or directory)"
    assert output_file_problem(tmp_path / "new" / "x.json") is None  # a folder still to be made is fine
    proc = subprocess.run([sys.executable, "-m", "perfpredict", "predict", "zoo:mlp", "-b", "8", "-o",
                           "/proc/perfpredict-x.json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot write /proc/perfpredict-x.json" in proc.stderr
    assert "nearest profiled" not in proc.stdout  # refused before predicting
