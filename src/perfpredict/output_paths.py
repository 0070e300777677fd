"""Checks that an output path can be written, made before any work starts.

A profile, a simulation or a benchmark can run for minutes; finding only at the end that ``--out`` names a file
(or a path under one) loses the run. Every command and script checks its output path with these functions up
front, and words the problem the same way. Each caller raises its own error type (UsageError, argparse's
ArgumentTypeError) with the message returned here.
"""

from __future__ import annotations

from pathlib import Path


def blocking_file(path: str | Path) -> Path | None:
    """The file that stops ``path`` from being used or created as a folder: ``path`` itself, or its nearest
    existing parent, when that is not a folder. ``None`` when nothing is in the way."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            return None if q.is_dir() else q
    return None


def output_dir_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be an output folder (it, or a folder above it, is a file), or ``None``."""
    p = Path(path)
    bad = blocking_file(p)
    if bad is None:
        return _not_creatable(p)
    if bad == p:
        return f"{p} is a file, not a folder"
    return f"cannot create {p}: {bad} is a file, not a folder"


def _not_creatable(p: Path) -> str | None:
    """Why a folder cannot be made (or written) at ``p``, found by making and removing a scratch folder in the
    nearest folder that exists (permissions alone do not tell: /proc refuses root too), or ``None``."""
    import tempfile

    here = p if p.is_dir() else next((a for a in p.absolute().parents if a.is_dir()), None)
    if here is None:
        return None
    try:
        tempfile.TemporaryDirectory(dir=here).cleanup()
    except OSError as e:
        if here == p:
            return f"cannot write in {p} ({e.strerror or e})"
        return f"cannot create {p}: {here} does not take new files ({e.strerror or e})"
    return None


def special_file_problem(path: str | Path) -> str | None:
    """Why ``path`` must not be written as an output file because it exists and is not a plain file (a device,
    a FIFO, a socket), or ``None``. Results are written beside the target and renamed over it, which would
    delete /dev/null or a named pipe and leave a plain file in its place."""
    import stat

    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return f"{path} exists and is not a plain file (a device, a pipe or a socket); give a file name"


def output_file_problem(path: str | Path, *, parent_must_exist: bool = False) -> str | None:
    """Why ``path`` cannot be an output file (it is a folder, a folder above it is a file, or, with
    ``parent_must_exist``, its folder does not exist), or ``None``."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a folder; give a file name"
    special = special_file_problem(p)
    if special:
        return special
    bad = blocking_file(p.parent)
    if bad is not None:
        return f"cannot create {p}: {bad} is a file, not a folder"
    if parent_must_exist and not p.parent.exists():
        return f"{p}: the folder {p.parent} does not exist"
    problem = _not_creatable(p.parent)  # a read-only place (or /proc) was found only when writing, at the end
    return problem.replace(f"cannot write in {p.parent}", f"cannot write {p}") if problem else None


__all__ = ["blocking_file", "output_dir_problem", "output_file_problem", "special_file_problem"]
