"""Load a user's ``model.py`` by path, in isolation, and check it follows the convention.

The convention (README, "The model.py convention"):

required
    ``build_model() -> torch.nn.Module`` and ``example_inputs(batch_size) -> Tensor | tuple | dict``
    (a tuple is the positional arguments, a dict the keyword arguments)
optional
    ``loss_fn(outputs) -> Tensor`` (or ``loss_fn(outputs, targets)`` with ``example_targets``),
    ``example_targets(batch_size)``, ``make_optimizer(params)``, ``BATCH_SIZES``, ``MODEL_NAME``,
    ``PRECISION`` (``"fp32"``, ``"bf16"`` or ``"fp16"``: mixed-precision training under ``torch.autocast``),
    ``train_step(model, inputs, targets, optimizer)`` (a whole training step of the user's own).

Each file is executed as a fresh module under a unique name (two files both called ``model.py`` never
collide), with its own directory importable so it can import sibling helpers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType

from perfpredict.errors import ModelLoadError, UsageError, exception_text
from perfpredict.workload.spec import (
    DEFAULT_BATCH_SIZES,
    Workload,
    WorkloadRef,
    check_precision,
    default_loss,
    default_optimizer,
)
from perfpredict.workload_args import check_model_path, syntax_error

REQUIRED_HOOKS = ("build_model", "example_inputs")
OPTIONAL_HOOKS = ("loss_fn", "example_targets", "make_optimizer", "make_dataset", "preprocess", "train_step")


def load_model_file(path: str | Path) -> Workload:
    """Import ``path`` and return its :class:`Workload`; raise :class:`ModelLoadError` naming the problem."""
    shown = str(path)
    p = check_model_path(path)
    module = _import_isolated(p, shown)
    return _workload_from_module(module, p, shown)


#: non-daemon threads that model code started (at import or in a hook) and left running: the CLI does not wait
#: for them at exit (:func:`perfpredict.cli.main`)
MODEL_THREADS: list[threading.Thread] = []

_REFUSAL_LOCK = threading.Lock()
#: how many os_exit_refused blocks are open in this process (a forked child starts again at 0:
#: :func:`_reset_after_fork`)
_open_refusals = 0
_REAL_EXIT = os._exit


def _guarded_exit(code: int) -> None:
    """The ``os._exit`` installed (once, for good) by :func:`os_exit_refused`: the real one unless model code is
    running in this process. A child forked meanwhile counts no open block and exits for real (multiprocessing
    ends every forked child with ``os._exit``)."""
    if _open_refusals > 0:
        raise SystemExit(f"the model code called os._exit({code}), which would end perfpredict without a word")
    _REAL_EXIT(code)


@contextlib.contextmanager
def os_exit_refused():
    """While model code runs, ``os._exit`` raises SystemExit instead of ending the process: called at import or
    in build_model() of the command's own process, it ended ``perfpredict`` with exit code 0 and no word (a
    measuring process that ends so is reported by its exit, but with no line of the model's). The non-daemon
    threads the code started are noted in :data:`MODEL_THREADS`.

    ``os._exit`` is replaced once and the blocks open are counted, so blocks entered from several threads
    (concurrent ``Predictor.predict`` calls) cannot leave a refusing ``os._exit`` behind, as swapping it in and
    back per block did."""
    global _open_refusals
    before = set(threading.enumerate())
    with _REFUSAL_LOCK:
        os._exit = _guarded_exit
        _open_refusals += 1
    try:
        yield
    finally:
        with _REFUSAL_LOCK:
            # not below 0: a child forked inside the block (counting from 0) may leave it on its way out
            _open_refusals = max(0, _open_refusals - 1)
        MODEL_THREADS.extend(t for t in threading.enumerate() if t not in before and not t.daemon)


def _reset_after_fork() -> None:
    """In a forked child: a lock another thread held at the fork would stay held for good, and the parent's open
    blocks are not the child's."""
    global _REFUSAL_LOCK, _open_refusals
    _REFUSAL_LOCK = threading.Lock()
    _open_refusals = 0


os.register_at_fork(after_in_child=_reset_after_fork)


def library_thread(t: threading.Thread) -> bool:
    """A thread a library started for its own work rather than one the model code started itself: a
    ThreadPoolExecutor worker (torch.compile's inductor starts them in build_model) or a thread running torch's own
    code. Still in :data:`MODEL_THREADS` (a pool worker running an endless task holds the exit as any other), but
    the CLI's note does not say the model file started it."""
    target = getattr(t, "_target", None)
    module = getattr(target, "__module__", None) or ""
    return module == "concurrent.futures.thread" or module == "torch" or module.startswith("torch.")


def _exit_refused_in(fn):
    """``fn`` run under :func:`os_exit_refused` (for the hooks run once per process: not the timed step)."""
    if fn is None:
        return None

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        with os_exit_refused():
            return fn(*args, **kwargs)

    return guarded


def _import_isolated(path: Path, shown: str) -> ModuleType:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    mod_name = f"perfpredict_user_{path.stem}_{digest}"
    loader = importlib.machinery.SourceFileLoader(mod_name, str(path))
    spec = importlib.util.spec_from_file_location(mod_name, str(path), loader=loader)
    if spec is None:  # pragma: no cover - SourceFileLoader always yields a spec for an existing path
        raise ModelLoadError("cannot be imported as a Python module", source=shown, step="load")
    module = importlib.util.module_from_spec(spec)
    parent = str(path.parent)
    added = parent not in sys.path
    if added:
        sys.path.insert(0, parent)
    sys.modules[mod_name] = module
    try:
        with os_exit_refused():
            loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(mod_name, None)
        raise syntax_error(e, shown, detail=traceback.format_exc(), model_path=path) from None
    except BaseException as e:  # user code may raise anything, SystemExit included
        sys.modules.pop(mod_name, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise ModelLoadError(f"raised {type(e).__name__} while importing: {exception_text(e)}", source=shown, step="import",
                             detail=traceback.format_exc()) from None
    finally:
        if added:
            try:
                sys.path.remove(parent)
            except ValueError:
                pass
    return module


def _workload_from_module(module: ModuleType, path: Path, shown: str) -> Workload:
    missing = [h for h in REQUIRED_HOOKS if not hasattr(module, h)]
    if missing:
        raise ModelLoadError(
            f"does not define {' and '.join(f'{m}()' for m in missing)}; a model file needs "
            "build_model() -> torch.nn.Module and example_inputs(batch_size) -> Tensor | tuple | dict",
            source=shown, step="validate")
    for hook in REQUIRED_HOOKS + OPTIONAL_HOOKS:
        if hasattr(module, hook) and not callable(getattr(module, hook)):
            raise ModelLoadError(f"{hook} must be a function, found {type(getattr(module, hook)).__name__}",
                                 source=shown, step="validate")
    batch_sizes = DEFAULT_BATCH_SIZES
    if hasattr(module, "BATCH_SIZES"):
        raw = module.BATCH_SIZES
        try:
            batch_sizes = tuple(sorted({int(b) for b in raw}))
        except (TypeError, ValueError):
            raise ModelLoadError(f"BATCH_SIZES must be a list of positive integers, got {raw!r}",
                                 source=shown, step="validate") from None
        if not batch_sizes or min(batch_sizes) <= 0:
            raise ModelLoadError(f"BATCH_SIZES must be a non-empty list of positive integers, got {raw!r}",
                                 source=shown, step="validate")
    name = str(getattr(module, "MODEL_NAME", path.stem))
    precision = "fp32"
    if hasattr(module, "PRECISION"):
        try:
            precision = check_precision(module.PRECISION, "PRECISION")
        except UsageError as e:
            raise ModelLoadError(e.message, source=shown, step="validate") from None
    return Workload(
        name=name,
        ref=WorkloadRef(kind="file", target=str(path)),
        build_model=_exit_refused_in(module.build_model),
        example_inputs=_exit_refused_in(module.example_inputs),
        loss_fn=getattr(module, "loss_fn", default_loss),
        make_optimizer=getattr(module, "make_optimizer", default_optimizer),
        example_targets=getattr(module, "example_targets", None),
        make_dataset=_exit_refused_in(getattr(module, "make_dataset", None)),
        preprocess=getattr(module, "preprocess", None),
        train_step=getattr(module, "train_step", None),
        batch_sizes=batch_sizes,
        description=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else "",
        precision=precision,
    )
