"""Errors that end a perfpredict command with one readable message.

Every error a *user* can cause (a broken ``model.py``, a NaN loss, an out-of-memory batch, a bad flag)
is a :class:`PerfPredictError`. It names the file and the step that failed so the CLI can print a single
line and exit non-zero; the original traceback is kept in ``detail`` for ``--debug``.
"""

from __future__ import annotations


class PerfPredictError(Exception):
    """A user-facing failure: ``<source>: <step>: <message>``."""

    exit_code: int = 1

    def __init__(self, message: str, *, source: str | None = None, step: str | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.step = step
        self.detail = detail

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.step) if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message


class ModelLoadError(PerfPredictError):
    """The model file is missing, does not import, or does not follow the ``model.py`` convention."""

    exit_code = 2


class ModelRunError(PerfPredictError):
    """The model raised while it was being built or run (forward, loss, backward, optimizer step)."""

    exit_code = 3


class NonFiniteLossError(ModelRunError):
    """The loss became NaN or infinite during measurement."""


class UsageError(PerfPredictError):
    """A bad command-line value or API argument."""

    exit_code = 2


class FitError(PerfPredictError):
    """Not enough (or unusable) measurements to fit a model."""
