"""The torch-free half of a workload's description: :class:`WorkloadRef`, the picklable pointer a measuring
process rebuilds its workload from, and the batch-size and precision choices a command line is checked against.

Kept apart from :mod:`perfpredict.workload.spec` (which imports torch) so that a command can check its arguments
and refuse a bad one in the half second the CLI takes to start, not the ~1.5 s importing torch adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from perfpredict.workload.spec import Workload

#: Batch sizes swept when neither the model file nor the command line says otherwise.
DEFAULT_BATCH_SIZES: tuple[int, ...] = (4, 8, 16, 32, 64)

#: Training precisions: fp32, or mixed precision under ``torch.autocast`` with bfloat16 or float16 (the latter
#: with a gradient scaler, as mixed-precision training runs it).
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")


def autocast_note(precision: str) -> str:
    """How the note a measured card carries for steps run under ``torch.autocast`` at ``precision`` begins (the
    profiler writes it): what tells such a run's ``run.precision`` from one its model's own weight dtype gave
    (``model.half()`` runs every op in float16 without autocast, and its model file predicts with the fp32 set)."""
    return f"precision {precision}: every measurement ran the forward pass and the loss under torch.autocast"


def check_precision(value: Any, what: str = "precision") -> str:
    """``value`` as one of :data:`PRECISIONS`, or a :class:`UsageError` naming them."""
    from perfpredict.errors import UsageError

    if not isinstance(value, str) or value.strip().lower() not in PRECISIONS:
        raise UsageError(f"{what} must be one of {', '.join(PRECISIONS)}, got {value!r}", step="arguments")
    return value.strip().lower()


@dataclass(frozen=True)
class WorkloadRef:
    """A picklable pointer to a workload: a model file path, or a zoo family plus its parameters."""

    kind: Literal["file", "zoo"]
    target: str
    params: tuple[tuple[str, Any], ...] = ()
    #: Training precision chosen for this run (``--precision``); None: the file's ``PRECISION``, else fp32.
    precision: str | None = None
    #: ``--compile``: measure ``torch.compile(model)``
    compile: bool = False

    def load(self) -> Workload:
        if self.kind == "file":
            from perfpredict.workload.loader import load_model_file

            wl = load_model_file(self.target)
        else:
            from perfpredict.workload.zoo import load_zoo_workload

            wl = load_zoo_workload(self.target, dict(self.params))
        return wl.with_options(precision=self.precision, compile=self.compile or None)

    def describe(self) -> str:
        if self.kind == "file":
            return self.target
        args = ",".join(f"{k}={v}" for k, v in self.params)
        return f"zoo:{self.target}" + (f"[{args}]" if args else "")
