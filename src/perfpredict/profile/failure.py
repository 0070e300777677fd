"""One readable line, and the right step, for an exception raised inside a measuring process.

Some errors arrive wrapped: torch.compile reports a bug in the model's own forward (a shape mismatch) as a
``TorchRuntimeError`` about "fake tensors", inductor's failures carry the reason on their second line, and a
DataLoader worker's error reaches the main process as "Caught TypeError in DataLoader worker process 0." with
the real message at the end of the text. Reporting the first line of such a text, or blaming the compiler for
the model's bug, sends the user to the wrong place.
"""

from __future__ import annotations

import re
import traceback

from perfpredict.errors import PerfPredictError, full_exception_text, message_lines

#: ``got RuntimeError('a and b must have same reduction dim ...')`` inside a dynamo TorchRuntimeError's text
_WRAPPED = re.compile(r"got (\w+(?:Error|Exception))\((['\"])(.*?)\2\)", re.S)


def _dynamo_exc():
    try:
        from torch._dynamo import exc
    except Exception:  # noqa: BLE001 - torch without dynamo: nothing is a compile error
        return None
    return exc


def _model_error_in_compile(e: BaseException) -> tuple[str, str] | None:
    """(type name, message) of the model's own error that dynamo found while tracing, or None."""
    exc = _dynamo_exc()
    if exc is None or not isinstance(e, getattr(exc, "TorchRuntimeError", ())):
        return None
    m = _WRAPPED.search(full_exception_text(e))
    return (m.group(1), m.group(3)) if m else None


def failure_phase(e: BaseException, current: str) -> str:
    """The step to report: the exception's own ``step``, ``"compile"`` for a failure of torch.compile itself
    (not for the model's error dynamo found while tracing, which belongs to ``current``), else ``current``."""
    step = getattr(e, "step", None)
    if step:
        return step
    exc = _dynamo_exc()
    base = getattr(exc, "TorchDynamoException", None) if exc is not None else None
    if base is not None and isinstance(e, base) and _model_error_in_compile(e) is None:
        from perfpredict.profile.memory import is_oom_error

        if not is_oom_error(e):
            return "compile"
    return current


def unwrapped_line(e: BaseException) -> str:
    """The message of ``e`` as one line (ANSI colours removed), unwrapped where a wrapper hides it."""
    inner = _model_error_in_compile(e)
    if inner is not None:
        return f"{inner[0]}: {inner[1]} (found by torch.compile while tracing the forward)"[:500]
    lines = message_lines(full_exception_text(e)) or [type(e).__name__]
    if lines[0].startswith("Caught ") and "DataLoader worker" in lines[0] and len(lines) > 1:
        return f"{lines[-1]} (in a DataLoader worker)"[:500]
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:  # "backend='inductor' raised:" and the reason below it
        first = f"{first} {lines[1]}"
    return first[:500]


def failure_text(e: BaseException) -> str:
    """``"<Type>: <message>"`` for a report; a wrapped model error is named by its own type."""
    line = unwrapped_line(e)
    if isinstance(e, AttributeError) and "'DistributedDataParallel' object has no attribute" in line:
        line += (" (with --scaling the model is wrapped in DistributedDataParallel: a train_step hook reaches "
                 "the model's own attributes through model.module)")
    if _model_error_in_compile(e) is not None or line.startswith(f"{type(e).__name__}:"):
        return line
    return f"{type(e).__name__}: {line}"


class NonFiniteLoss(Exception):
    """A training step's loss was NaN or infinite (reported with status ``"nonfinite"``)."""


def failure_report(e: BaseException, phase: str) -> dict[str, str]:
    """What a measuring process reports for the exception its step raised, called in the ``except`` block: the
    step it failed at (:func:`failure_phase`), the traceback, a status (``"nonfinite"``, ``"oom"`` or
    ``"error"``) and one readable line. One rule for the sweep's, a co-located group's and the input pipeline's
    processes, so the same failure reads the same in each."""
    from perfpredict.profile.memory import is_oom_error

    if isinstance(e, NonFiniteLoss):
        status, error = "nonfinite", str(e)
    elif is_oom_error(e):
        status, error = "oom", unwrapped_line(e)
    elif isinstance(e, PerfPredictError):
        status, error = "error", e.message
    else:
        status, error = "error", failure_text(e)
    return {"phase": failure_phase(e, phase), "traceback": traceback.format_exc(), "status": status,
            "error": error}
