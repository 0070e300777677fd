"""Refuse a profile started from a script's top level without ``if __name__ == "__main__":``.

Measurements run in fork-server processes, which import the caller's main script again. A script that calls
:func:`perfpredict.profile` at its top level, unguarded, would call it again in every measuring process;
Python stops that with a long ``RuntimeError`` about the bootstrapping phase, in the child, and the parent
could only report that the measuring process "died before reporting". This check names the line and the fix
before any process starts.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import FrameType

from perfpredict.errors import UsageError


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` in any spelling that mentions both names."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    consts = {n.value for n in ast.walk(test) if isinstance(n, ast.Constant)}
    return "__name__" in names and "__main__" in consts


def _guarded_lines(tree: ast.AST) -> list[tuple[int, int]]:
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            first, last = node.body[0].lineno, max(getattr(n, "end_lineno", n.lineno) or n.lineno for n in node.body)
            spans.append((first, last))
    return spans


def _main_module_frame(frame: FrameType | None, main_globals: dict) -> FrameType | None:
    while frame is not None:
        if frame.f_globals is main_globals and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def check_main_guard(api: str = "perfpredict.profile()") -> None:
    """Raise :class:`UsageError` if the current call comes, through any chain of calls, from the top-level code
    of a ``__main__`` script outside an ``if __name__ == "__main__":`` block. Silent where it cannot tell (an
    interactive session, ``python -c``, a notebook, a script whose source cannot be read)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not str(path).endswith(".py"):
        return
    spec = getattr(main, "__spec__", None)
    if spec is not None and str(getattr(spec, "name", "")).endswith("__main__"):
        return  # `python -m pkg`: multiprocessing does not import a package's __main__ again (its own rule)
    frame = _main_module_frame(sys._getframe(1), vars(main))
    if frame is None:
        return
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return
    line = frame.f_lineno
    if any(a <= line <= b for a, b in _guarded_lines(tree)):
        return
    raise UsageError(f"{api} is called at the top level of {Path(path).name} (line {line}) without "
                     f"`if __name__ == \"__main__\":`. The measuring processes import your script again, so an "
                     f"unguarded call would run once more in each of them: put the call under that `if`",
                     source=str(path), step="arguments")
