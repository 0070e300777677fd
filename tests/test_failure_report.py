"""The three kinds of measuring process (a batch-size point, a member of a co-located or data-parallel group, an
input-pipeline probe) report a failure of the model's step by one rule (``profile.failure.failure_report``): the
same status, step and one-line message, whichever of them ran it."""

from __future__ import annotations

import pytest

from perfpredict.profile.failure import NonFiniteLoss, failure_report
from tests.conftest import TINY_MODEL

# (a batch, one item of the dataset, what is reported): a wrong-shaped input is the model's own error, a NaN input
# gives a NaN loss; the sweep and the group name the step (forward, loss), the pipeline its warm-up
CASES = [("torch.ones(batch_size, 31)", "torch.ones(31)", "error",
          "RuntimeError: mat1 and mat2 shapes cannot be multiplied", "forward"),
         ("torch.full((batch_size, 32), float('nan'))", "torch.full((32,), float('nan'))", "nonfinite",
          "loss is nan (not finite)", "loss")]


def _model(write_model, inputs: str, item: str):
    return write_model(TINY_MODEL + f"\ndef example_inputs(batch_size):\n    return {inputs}\n\n"
                       "class DS(torch.utils.data.Dataset):\n    def __len__(self):\n        return 64\n"
                       f"    def __getitem__(self, i):\n        return {item}\n\ndef make_dataset():\n    return DS()\n")


@pytest.mark.parametrize("inputs, item, status, says, step", CASES)
def test_every_measuring_process_reports_a_failed_step_alike(write_model, inputs, item, status, says, step):
    from perfpredict.profile.group import run_group
    from perfpredict.profile.group_request import GroupMember, GroupTiming
    from perfpredict.profile.pipeline_worker import PipelineRequest
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess, run_pipeline_in_subprocess
    from perfpredict.profile.timing import TimingConfig
    from perfpredict.workload.spec import WorkloadRef

    ref = WorkloadRef("file", str(_model(write_model, inputs, item)))
    point = run_in_subprocess(PointRequest(ref, 8, timing=TimingConfig(min_time_s=0.1, max_time_s=0.2)), 120)
    (member,) = run_group([GroupMember(ref=ref, batch_size=8, label="copy0")], GroupTiming(window_s=0.2), 120)
    pipeline = run_pipeline_in_subprocess(PipelineRequest(ref, 8, (0,), window_s=0.2), 120)
    for res in (point, member, pipeline):
        assert res["status"] == status and res["error"].startswith(says), (res["status"], res["error"])
        assert "\n" not in res["error"] and "Traceback" in res["traceback"]
    assert (point["phase"], member["phase"], pipeline["phase"]) == (step, step, "warm-up")


def test_an_oom_and_a_perfpredict_error_are_named_as_such():
    from perfpredict.errors import ModelLoadError

    def report(e: BaseException) -> dict:
        try:
            raise e
        except BaseException as caught:  # noqa: BLE001 - the measuring processes' own catch
            return failure_report(caught, "forward")

    oom = report(MemoryError("cannot allocate 3 GiB"))
    assert (oom["status"], oom["phase"]) == ("oom", "forward")
    loaded = report(ModelLoadError("no build_model() in the file", step="load"))
    assert (loaded["status"], loaded["error"], loaded["phase"]) == ("error", "no build_model() in the file", "load")
    assert report(NonFiniteLoss("loss is inf (not finite)"))["status"] == "nonfinite"
    assert report(ValueError("bad"))["error"] == "ValueError: bad"
