"""Argument types and the entry wrapper shared by the scripts under ``experiments/`` and ``benchmarks/``.

Those scripts are commands users type, so they follow the CLI's rule: a bad value ends in one line naming the
option and exit 2 (argparse's own error, through these ``type=`` callables), never a traceback minutes into a
run, and never a value quietly clamped or read as the default (``--max-it 0``, ``--loads -0.5``).
:func:`run_script` turns a :class:`~perfpredict.errors.PerfPredictError` raised later (a bad input file, a
model that does not load) into one line with its exit code, and Ctrl-C into exit 130.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sized
from pathlib import Path

from perfpredict.errors import PerfPredictError
from perfpredict.output_paths import output_dir_problem, output_file_problem

__all__ = ["command_line", "describe", "device_spelling", "float_list", "int_list", "measure_keeping_partial",
           "nonneg_float", "nonneg_int", "out_csv", "out_dir", "out_file", "positive_float", "positive_int",
           "run_script", "seed_list", "stop_requested"]


def _number(text: str, kind: type, low: float, strict: bool, what: str) -> float:
    try:
        v = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(v) or (v <= low if strict else v < low):
        raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
    return v


def positive_int(text: str) -> int:
    return int(_number(text, int, 0, True, "a whole number >= 1"))


def nonneg_int(text: str) -> int:
    return int(_number(text, int, 0, False, "a whole number >= 0"))


def positive_float(text: str) -> float:
    return float(_number(text, float, 0, True, "a finite number > 0"))


def nonneg_float(text: str) -> float:
    return float(_number(text, float, 0, False, "a finite number >= 0"))


def _list(item: Callable[[str], float]) -> Callable[[str], list]:
    def parse(text: str) -> list:
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated values such as 1,2,4")
        values = [item(p) for p in parts]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:  # a seed given twice was averaged in twice, a size run twice
            shown = ", ".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in twice)
            raise argparse.ArgumentTypeError(f"{text!r}: {shown} given twice")
        return values

    parse.__name__ = f"list of {item.__name__}"
    return parse


#: comma-separated whole numbers >= 1 (counts, GPU sizes, seeds use :data:`seed_list`)
int_list = _list(positive_int)
#: comma-separated whole numbers >= 0
seed_list = _list(nonneg_int)
#: comma-separated finite numbers > 0
float_list = _list(positive_float)


def name(text: str) -> str:
    return text


#: comma-separated names (model sets, families): none blank, none twice
name_list = _list(name)


def out_dir(text: str) -> Path:
    """An output folder: refused up front when it, or a folder above it, is a file (found only at the end before)."""
    problem = output_dir_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def out_csv(text: str) -> Path:
    """A dataset CSV to write (the collectors' ``--out``, created with its folders): refused up front when it is a
    folder or a path under a file, the rule of :func:`perfpredict.dataset.collect.check_output_path`, checked here
    without importing torch, so a wrong flag is answered at once."""
    problem = output_file_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def device_spelling(text: str) -> str:
    """``--device``: auto, cpu, cuda or cuda:<index> (whether a CUDA device exists is checked when measuring
    starts)."""
    req = text.strip().lower()
    if req in ("auto", "cpu", "cuda") or (req.startswith("cuda:") and req[5:].isdigit()):
        return req
    raise argparse.ArgumentTypeError(f"{text!r}: expected auto, cpu, cuda or cuda:<index>")


def out_file(text: str) -> Path:
    """An output file (``--json``): refused up front when it is a folder or its folder does not exist."""
    problem = output_file_problem(text, parent_must_exist=True)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


#: set by a Ctrl-C during :func:`measure_keeping_partial`'s loop (see :func:`stop_requested`)
_stop_asked = False


def stop_requested() -> bool:
    """Whether Ctrl-C was pressed during :func:`measure_keeping_partial`'s loop. Python drops a KeyboardInterrupt
    raised inside a finalizer (a DataLoader's worker clean-up prints "Exception ignored ..." and goes on), so a
    loop checks this between items: ``if stop_requested(): raise KeyboardInterrupt``."""
    return _stop_asked


#: ``__del__`` methods that fail with an AttributeError on an instance whose ``__init__`` a Ctrl-C cut short.
HALF_BUILT_DELS = frozenset({"_MultiProcessingDataLoaderIter.__del__"})


def _half_built_finalizer(info) -> bool:
    """Whether an unraisable exception is the clean-up of an object a Ctrl-C cut in half, which fails with an
    ``AttributeError`` for what its constructor never set when the object dies:

    - a multiprocessing finalizer: a KeyboardInterrupt between ``Finalize.__init__``'s weakref and its registry
      key leaves a callback that fails on ``_key`` (a CPython race, seen as a DataLoader unwound);
    - a DataLoader's worker iterator interrupted in its ``__init__`` before ``_workers`` existed, whose
      ``__del__`` then shuts down workers it has no list of."""
    from multiprocessing.util import Finalize

    if not isinstance(info.exc_value, AttributeError):
        return False
    return isinstance(info.object, Finalize) or getattr(info.object, "__qualname__", None) in HALF_BUILT_DELS


def measure_keeping_partial(loop: Callable[[], None], rows: Sized) -> bool:
    """Run a benchmark's measuring ``loop`` (it appends to ``rows``); Ctrl-C ends it early with a line saying the
    results so far follow. Returns whether it was interrupted: the caller reports and saves what it has, then
    raises KeyboardInterrupt (exit 130 through :func:`run_script`). With nothing measured: exit 130 at once
    after a Ctrl-C, else "nothing measured" and exit 1. A Ctrl-C is remembered even where Python swallowed its
    KeyboardInterrupt (:func:`stop_requested`)."""
    global _stop_asked
    _stop_asked = False

    def on_sigint(signum, frame) -> None:
        global _stop_asked
        _stop_asked = True
        raise KeyboardInterrupt

    def on_unraisable(info) -> None:
        # Python calls this for an exception it cannot raise (in a __del__, a finalizer, an at-fork callback):
        # a Ctrl-C landing there is remembered (stop_requested) instead of printed as a traceback
        if isinstance(info.exc_value, KeyboardInterrupt) or (_stop_asked and _half_built_finalizer(info)):
            return
        previous_hook(info)

    previous_hook = sys.unraisablehook
    sys.unraisablehook = on_unraisable

    old = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        old = signal.signal(signal.SIGINT, on_sigint)
    interrupted = False
    try:
        loop()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
        sys.unraisablehook = previous_hook
    interrupted = interrupted or _stop_asked
    if interrupted:
        print("interrupted: results so far", file=sys.stderr)
    if not rows:
        if interrupted:
            raise KeyboardInterrupt
        print("nothing measured", file=sys.stderr)
        raise SystemExit(1)
    return interrupted


def run_script(main: Callable[[], int | None]) -> None:
    """Run a script's ``main()`` and exit: its return code, a :class:`PerfPredictError` as one line with its exit
    code, 130 on Ctrl-C, or quietly 1 when the reader of its output went away (``script.py | head``)."""
    try:
        rc = main()
        sys.stdout.flush()  # a closed pipe is often found only here, at the last buffered write
    except PerfPredictError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        _stdout_gone()
        sys.exit(1)
    except OSError as e:  # writing the results (a folder where a file goes, a full disk), reading an input
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        from perfpredict.sim.kept_runs import say_unfinished

        say_unfinished()
        sys.exit(1)
    except Exception as e:
        # the simulator's refusals (a trace no mechanism can run, a mechanism for another seed's traces) are the
        # arguments' fault, not a bug: one line, exit 2
        from perfpredict.sched.base import UnsupportedInput
        from perfpredict.sim.simulator import SimulationError

        if not isinstance(e, (SimulationError, UnsupportedInput)):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc or 0)


def _stdout_gone() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not fail a second time on the closed
    pipe and print 'Exception ignored ... BrokenPipeError' (the recipe of Python's signal module docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def command_line(script_file: str, argv: list[str] | None) -> str:
    """The command that ran a script, for its provenance: the shell's command line when ``main`` parsed
    ``sys.argv``, else the script's path (relative to the repository) and the arguments ``main`` was given (a
    test or a notebook calling it, where ``sys.argv`` is the caller's, e.g. pytest's)."""
    if argv is None:
        return " ".join(shlex.quote(a) for a in sys.argv)
    script = Path(script_file).resolve()
    shown = script.relative_to(script.parents[1]) if len(script.parents) > 1 else script
    return " ".join(shlex.quote(a) for a in [str(shown), *argv])


def describe(doc: str | None) -> str:
    """A script docstring's first paragraph as one line, for ``ArgumentParser(description=...)`` (its first line
    alone stops mid-sentence)."""
    para = (doc or "").strip().split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines())


def places_to_tell(a: float, b: float, fewest: int = 1, most: int = 6) -> int:
    """The decimal places (from ``fewest``, at most ``most``) at which ``a`` and ``b`` print differently: a
    figure printed beside a verdict on it (14.96% against a 15% target, a QoS of 88.64% against 88.65%) must not
    read as the other side of it once rounded. Both in the unit they are printed in (a percentage's hundredths)."""
    for places in range(fewest, most + 1):
        if f"{a:.{places}f}" != f"{b:.{places}f}":
            return places
    return most
