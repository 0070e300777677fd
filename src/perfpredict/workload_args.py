"""What a user typed about a workload, parsed and checked without importing torch.

The CLI calls these before it starts a measuring process or imports torch (several seconds together), so a
mistyped batch size, a ``--param`` on a ``model.py`` or a missing file is reported at once.
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfpredict.errors import ModelLoadError, UsageError

ZOO_PREFIX = "zoo:"


def whole_numbers(values: Sequence[Any], what: str = "batch sizes", step: str = "arguments") -> list[int]:
    """``values`` as ints, in order; :class:`UsageError` naming ``what`` for a fraction, a bool or a non-number
    (``int()`` alone would turn 2.7 into 2)."""
    try:
        out = [int(v) for v in values]
        if any(isinstance(v, bool) or v != int(v) for v in values):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{what} must be whole numbers, got {values!r}", step=step) from None
    return out


def parse_batch_sizes(value: str | Sequence[int], what: str = "batch sizes") -> tuple[int, ...]:
    """Parse ``"8,16,32"`` (or a sequence) into sorted, unique, positive integers; ``what`` names the option
    in the error (``"--copies"``)."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
        try:
            sizes = [int(v) for v in items]
        except ValueError:
            raise UsageError(f"{what} must be comma-separated integers, got {value!r}",
                             step="arguments") from None
    else:
        sizes = whole_numbers(value, what)
    if not sizes or any(s <= 0 for s in sizes):
        raise UsageError(f"{what} must be positive integers, got {value!r}", step="arguments")
    return tuple(sorted(set(sizes)))


def parse_params(items: list[str] | None, flag: str = "--param") -> dict[str, str]:
    """``["depth=18", "width=32"]`` → ``{"depth": "18", "width": "32"}`` (values parsed by the family); ``flag``
    names the option in the error (``--new-param``)."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise UsageError(f"{flag} expects name=value, got {part!r}", step="arguments")
            k, v = part.split("=", 1)
            if k.strip() in out and out[k.strip()] != v.strip():  # the last one used to win without a word
                raise UsageError(f"{flag} {k.strip()} is given twice ({out[k.strip()]} and {v.strip()})",
                                 step="arguments")
            out[k.strip()] = v.strip()
    return out


#: Suffixes of files that are never a model script (cards, graphs, weights, data): refused by name instead of
#: being imported as Python. Any other file (a ``.py``, a script without a suffix) is loaded.
NOT_PYTHON = frozenset({".onnx", ".json", ".pt", ".pth", ".pb", ".h5", ".pkl", ".safetensors", ".bin", ".csv",
                        ".swf", ".gz", ".zip", ".tar", ".npz", ".npy", ".png", ".md"})


def check_model_path(path: str | Path) -> Path:
    """The resolved path of a ``model.py`` that exists and is a file; :class:`ModelLoadError` otherwise."""
    p = Path(path).expanduser()
    _check_utf8(p, path)
    if not p.exists():
        raise ModelLoadError("file not found", source=str(path), step="load")
    if p.is_dir():
        raise ModelLoadError("is a directory, expected a Python file defining build_model() and "
                             "example_inputs(batch_size)", source=str(path), step="load")
    if p.suffix.lower() in NOT_PYTHON:
        hint = (" (to predict from an ONNX graph without running anything: perfpredict predict "
                f"{path})" if p.suffix.lower() == ".onnx" else "")
        raise ModelLoadError(f"expected a Python model file (.py) defining build_model() and "
                             f"example_inputs(batch_size), not a {p.suffix}{hint}", source=str(path), step="load")
    resolved = p.resolve()
    # the path imported and recorded is the resolved one: a relative name in a folder named in another encoding,
    # or a link to a file there, reaches it too
    _check_utf8(resolved, path)
    return resolved


def _check_utf8(p: Path, given: str | Path) -> None:
    """:class:`ModelLoadError` when ``p`` is not UTF-8 text (a name in another encoding: Python holds its bytes
    as surrogates, and importing it ended in an internal UnicodeEncodeError)."""
    try:
        str(p).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(p).encode("utf-8", "backslashreplace").decode()
        raise ModelLoadError("its path is not UTF-8 text" + ("" if p == Path(given).expanduser() else f" ({shown})")
                             + ": rename the file or its folder (a card records its model's path as text)",
                             source=str(given).encode("utf-8", "backslashreplace").decode(), step="load") from None


def check_params(target: str, params: Mapping[str, Any] | None = None) -> None:
    """``--param`` only with ``zoo:<family>`` (a zoo family's parameters are checked when it is loaded)."""
    if params and not target.startswith(ZOO_PREFIX):
        raise UsageError(f"--param only applies to zoo models (zoo:<family>), not to {target}", step="arguments")


def check_target(target: str, params: Mapping[str, Any] | None = None) -> None:
    """The checks on a profiling target that need no import: :func:`check_params`, and a ``model.py`` that
    exists and parses. (A zoo family's name and parameters are checked when it is loaded.)"""
    check_params(target, params)
    if not target.startswith(ZOO_PREFIX):
        check_model_syntax(check_model_path(target), shown=target)


def syntax_error(e: SyntaxError, source: str, detail: str | None = None,
                 model_path: Path | None = None) -> ModelLoadError:
    """The one-line report of a model file that does not parse (the same words whether it is found by
    :func:`check_model_syntax` or when the file is imported). When the file that does not parse is another one
    the model imports (``model_path`` is the model's), it is named: the line number is that file's."""
    where = f"line {e.lineno}" if e.lineno else "unknown line"
    if model_path is not None and e.filename and Path(e.filename).resolve() != Path(model_path).resolve():
        where = f"{e.filename} {where}"
    return ModelLoadError(f"syntax error at {where}: {e.msg}", source=source, step="import", detail=detail)


def check_model_syntax(path: Path, shown: str | None = None) -> None:
    """Parse ``path`` without running it: a typo in ``model.py`` is reported before a measuring process starts
    or torch is imported (about 2 s sooner). A file that cannot be read is left to the import, which says why."""
    try:
        source = path.read_bytes()
    except OSError:
        return
    try:
        with warnings.catch_warnings():  # a SyntaxWarning (an invalid escape such as \d) is the import's to show
            warnings.simplefilter("ignore")
            compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:  # IndentationError, invalid UTF-8 and null bytes included
        raise syntax_error(e, shown or str(path), detail="".join(traceback.format_exception_only(e))) from None
    except ValueError:  # null bytes, on Pythons that raise ValueError for them: left to the import
        return
