"""Errors that end a perfpredict command with one readable message.

Every error a *user* can cause (a broken ``model.py``, a NaN loss, an out-of-memory batch, a bad flag)
is a :class:`PerfPredictError`. It names the file and the step that failed so the CLI can print a single
line and exit non-zero; the original traceback is kept in ``detail`` for ``--debug``.
"""

from __future__ import annotations

import re

_TERMINAL_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


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
        # "trace: trace x.csv has no jobs" says the step twice: a message that starts by naming it keeps that.
        # A model file's errors keep the documented "<file>: <step>: <what>" ("loss: loss is nan").
        step = None if self.step and not self.source and self.message.startswith(
            (f"{self.step} ", f"--{self.step}")) else self.step  # nor "resume: --resume: ..."
        parts = [p for p in (self.source, step) if p]
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


def forget_handled_interrupt() -> None:
    """Let the exit status a command chose stand after it handled a Ctrl-C.

    CPython (3.8 and later) remembers a KeyboardInterrupt that left an ``exec()`` or ``eval()`` of a string, even
    when the program caught it further up; run as ``python -m perfpredict`` (runpy), it then kills itself with
    SIGINT at exit, and the parent sees a death by signal (``returncode == -2``) instead of the 130 that
    perfpredict's Ctrl-C handling chose. (A script run as a file, like the ``perfpredict`` console script, exits
    through ``sys.exit`` before the flag is read.) Creating a dataclass
    or a namedtuple runs such an ``exec``, so a Ctrl-C that lands in a lazy import hits this (an interrupted
    ``perfpredict compare`` on a busy machine died so). The flag is reset at the start of every such ``exec``, so a
    harmless one clears it; called where a command's exit code is final."""
    exec("None")  # noqa: S102 - a constant string: this runs nothing but the reset


def message_lines(text: str) -> list[str]:
    """The non-empty lines of an error message, stripped, without the terminal colour codes some libraries (Ray's
    task errors) put in it."""
    return [ln.strip() for ln in _TERMINAL_COLOURS.sub("", text).splitlines() if ln.strip()]


#: the most of an exception's message a report shows (a model's error of megabytes was printed whole)
MAX_MESSAGE_CHARS = 4000


def full_exception_text(e: BaseException) -> str:
    """``str(e)`` whole, or a stand-in when the exception's own ``__str__`` fails (model code can raise anything,
    and a report of its error must not become a second one). For classifying an error (an OOM's words can sit
    anywhere in it, a DataLoader worker's real error is its last line); :func:`exception_text` for showing one."""
    try:
        return str(e)
    except Exception:  # noqa: BLE001 - any failure of foreign code's __str__
        return f"<a {type(e).__name__} whose message cannot be shown: its __str__ failed>"


def exception_text(e: BaseException) -> str:
    """:func:`full_exception_text` for a report: over :data:`MAX_MESSAGE_CHARS`, its head and its tail (where a
    wrapped error's own message sits) with the middle left out."""
    return cut_middle(full_exception_text(e), MAX_MESSAGE_CHARS)


def cut_middle(text: str, limit: int) -> str:
    """``text`` when it is at most ``limit`` characters, else its first and last ``limit // 2`` around a note of
    how much was left out."""
    if len(text) <= limit + 60:  # the note of what was left out is longer than that
        return text
    half = limit // 2
    return f"{text[:half]} ... ({len(text) - 2 * half:,} more characters left out) ... {text[-half:]}"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message for a one-line report, '' when it has none
    (:func:`message_lines`; a measuring process unwraps more: :func:`perfpredict.profile.failure.unwrapped_line`)."""
    lines = message_lines(full_exception_text(e))
    return cut_middle(lines[0], MAX_MESSAGE_CHARS) if lines else ""


def error_line(e: BaseException, limit: int | None = 300) -> str:
    """``Type: first line`` of an exception (:func:`first_line`), cut at ``limit`` characters (None: not cut)."""
    return f"{type(e).__name__}: {first_line(e)}"[:limit]
