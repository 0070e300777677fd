"""A sweep's finished runs, kept on disk as they end, and reused by ``--resume``.

The experiments' sweeps run for minutes (``synergy_jct.py``: about 19 minutes serially) and wrote their rows
once, at the end: a Ctrl-C, a closed terminal or a failure in the last simulation lost every run before it.
Each finished run is now appended to ``<out>/finished_runs.jsonl`` as it ends (one flushed JSON line, readable
as it stands), the file is removed once ``results.json`` is written, and ``--resume`` reuses the runs it holds
instead of simulating them again; the simulations are deterministic given their inputs, so the tables come
out the same (a reused row keeps the wall time measured when it ran).

Kept runs are reused only by the same sweep: the same script, the same arguments (all but ``--workers``,
``--ray``, ``--resume`` and ``--out``, which change where it runs, not what), the same number of runs and the
same git commit; otherwise ``--resume`` is refused with what differs. Uncommitted edits are not told apart (the
commit reads ``-dirty`` both times). A sweep started afresh moves an earlier sweep's file that holds runs aside
to ``finished_runs.prev.jsonl`` (``prev2``, ``prev3``, ... when that name is taken) rather than overwrite it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from perfpredict.errors import UsageError

FILE_NAME = "finished_runs.jsonl"
#: names the script whose results a folder holds: another experiment's --out is refused, not overwritten
OWNER_NAME = ".perfpredict-experiment"
PREVIOUS_NAME = "finished_runs.prev.jsonl"
#: arguments that change where or how a sweep runs, not its rows
NOT_IDENTITY = ("workers", "ray", "resume", "out")


def _plain(value: Any) -> Any:
    """A JSON-writable form of an argument or result value (numpy scalars, paths and tuples included)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):  # numpy scalar
        return _plain(value.item())
    return str(value)


def sweep_identity(script: str | Path, args: argparse.Namespace, runs: int) -> dict[str, Any]:
    """What a kept run must share with the sweep that reuses it (see the module's docstring)."""
    from perfpredict.git_commit import git_commit_of

    script = Path(script).resolve()
    return {"script": script.name, "runs": runs, "commit": git_commit_of(script.parent),
            "arguments": {k: _plain(v) for k, v in sorted(vars(args).items()) if k not in NOT_IDENTITY}}


def _differences(kept: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("script", "runs", "commit"):
        if kept.get(key) != now.get(key):
            out.append(f"{key} {kept.get(key)!r} there, {now.get(key)!r} now")
    a, b = kept.get("arguments") or {}, now.get("arguments") or {}
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"--{k.replace('_', '-')} {a.get(k)!r} there, {b.get(k)!r} now")
    return out


def read_kept(path: Path) -> tuple[dict[str, Any], dict[int, Any]]:
    """A kept file's header and its runs by index. A torn last line (the process killed while writing it) is
    dropped; anything else unreadable is an error naming the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}", step="resume") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a file of kept runs (not text)", step="resume") from None
    docs: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) and n > 1:
                break  # torn last line
            raise UsageError(f"{path}, line {n}: not a kept run (not JSON); remove the file to start afresh",
                             step="resume") from None
        if not isinstance(doc, dict):
            raise UsageError(f"{path}, line {n}: not a kept run; remove the file to start afresh", step="resume")
        docs.append(doc)
    if not docs or "sweep" not in docs[0]:
        raise UsageError(f"{path} has no sweep header: not a file of kept runs; remove it to start afresh",
                         step="resume")
    header = docs[0]["sweep"]
    total = header.get("runs") if isinstance(header, dict) else None
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise UsageError(f"{path}, line 1: not a sweep header (no number of runs); remove the file to start afresh",
                         step="resume")
    runs: dict[int, Any] = {}
    for n, doc in enumerate(docs[1:], 2):
        i = doc.get("run")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < total or "result" not in doc:
            raise UsageError(f"{path}, line {n}: not a kept run of this sweep; remove the file to start afresh",
                             step="resume")
        runs[i] = doc["result"]
    return header, runs


def _aside_name(path: Path) -> Path:
    """The first of ``finished_runs.prev.jsonl``, ``finished_runs.prev2.jsonl``, ... not taken: a second sweep
    started afresh overwrote the first one's runs moved there."""
    n = 1
    while True:
        aside = path.with_name(PREVIOUS_NAME if n == 1 else PREVIOUS_NAME.replace(".prev.", f".prev{n}."))
        if not aside.exists():
            return aside
        n += 1


def _holds_runs(path: Path) -> bool:
    """Whether a kept file holds a finished run (one that does not read is kept too: it is not ours to drop)."""
    try:
        return bool(read_kept(path)[1])
    except UsageError:
        return True


#: sweeps begun and not finished, for :func:`say_unfinished`
_UNFINISHED: list[KeptRuns] = []


def say_unfinished() -> None:
    """Where the finished runs of each sweep that did not finish are (a script that failed after its sweep, while
    writing its results, says so)."""
    for keep in list(_UNFINISHED):
        keep.say_kept()


class KeptRuns:
    """The kept-runs file of one sweep, ``<out>/finished_runs.jsonl``: made before the runs, passed to
    :func:`perfpredict.sim.parallel.map_runs` (``keep=``, which calls :meth:`begin` with the number of runs),
    and :meth:`finish`-ed once the results are written. With ``resume``, the runs it holds from the same sweep
    are reused (refused, saying what differs, when they are another sweep's)."""

    def __init__(self, out: str | Path, script: str | Path, args: argparse.Namespace, *, resume: bool = False) -> None:
        self.path = Path(out) / FILE_NAME
        self.script, self.args, self.resume = script, args, resume
        self.identity: dict[str, Any] = {}
        self.total = 0
        self.reused: dict[int, Any] = {}
        self.kept = 0
        self._file: IO[str] | None = None
        self._said = False

    def begin(self, runs: int) -> None:
        """Check (``resume``) or move aside an earlier sweep's file, and start this sweep's."""
        self.identity = sweep_identity(self.script, self.args, runs)
        self.total = runs
        self._claim_folder()
        if self.resume:
            if not self.path.exists():
                raise UsageError(f"--resume: no runs were kept in {self.path.parent} (no {FILE_NAME}: the last "
                                 "sweep there finished, or none ran with this --out)", step="resume")
            header, self.reused = read_kept(self.path)
            diff = _differences(header, self.identity)
            if diff:
                raise UsageError(f"--resume: the runs kept in {self.path} are another sweep's ({'; '.join(diff)}); "
                                 "rerun with its arguments, or leave out --resume to start afresh", step="resume")
        elif self.path.exists() and _holds_runs(self.path):
            prev = _aside_name(self.path)
            try:
                self.path.replace(prev)
            except OSError as e:
                raise UsageError(f"cannot move {self.path} aside: {e.strerror or e}", step="resume") from None
            print(f"note: {self.path} held the finished runs of an unfinished sweep; moved to {prev.name} (to "
                  f"reuse them, rename it back to {FILE_NAME} and rerun that sweep with --resume)", file=sys.stderr,
                  flush=True)
        self.kept = len(self.reused)
        self._rewrite()
        _UNFINISHED.append(self)

    def _claim_folder(self) -> None:
        """Refuse a folder another experiment wrote (its results.json would be replaced and its plots left beside
        this one's), else mark it as this script's."""
        owner = self.path.with_name(OWNER_NAME)
        mine = self.identity["script"]
        try:
            theirs = owner.read_text(encoding="utf-8").strip() if owner.is_file() else ""
        except (OSError, UnicodeDecodeError):
            theirs = ""
        results = [n for n in ("results.json", FILE_NAME, PREVIOUS_NAME) if (self.path.parent / n).exists()]
        if theirs and theirs != mine and results:
            raise UsageError(f"{self.path.parent} holds the results of {theirs} ({', '.join(results)}), not "
                             f"{mine}: give another --out, or move them away and remove {owner}", step="arguments")
        if theirs != mine:  # unclaimed, or another script's folder emptied of its results
            try:
                owner.write_text(mine + "\n", encoding="utf-8")
            except OSError as e:
                raise UsageError(f"cannot write in {self.path.parent}: {e.strerror or e}", step="arguments") from None

    def _line(self, doc: dict[str, Any]) -> str:
        return json.dumps(_plain(doc), allow_nan=True) + "\n"

    def _rewrite(self) -> None:
        """The header and the reused runs, written afresh (a torn line dropped), then opened for appending."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                f.write(self._line({"sweep": self.identity}))
                for i in sorted(self.reused):
                    f.write(self._line({"run": i, "result": self.reused[i]}))
            tmp.replace(self.path)
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write {self.path}: {e.strerror or e}", step="resume") from None

    def add(self, index: int, result: Any) -> None:
        """One finished run, written and flushed at once."""
        if self._file is None:
            return
        try:
            self._file.write(self._line({"run": index, "result": result}))
            self._file.flush()
        except OSError as e:  # a full disk: the sweep goes on, only no longer kept
            print(f"warning: cannot keep finished runs in {self.path} any longer ({e.strerror or e}): the "
                  f"{self.kept} kept so far stay there, later ones are not kept", file=sys.stderr, flush=True)
            self.close()
            return
        self.kept += 1

    def say_kept(self) -> None:
        """On the way out of an unfinished sweep: where its finished runs are and how to reuse them."""
        self.close()
        if self.kept and not self._said and self.path.exists():
            self._said = True
            print(f"kept {self.kept} of {self.total} finished runs in {self.path}; rerun with the same arguments "
                  "and --resume to skip them", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):  # the line that did not fit is lost either way
                self._file.close()
            self._file = None

    def finish(self) -> None:
        """The sweep's results are written: the kept runs are no longer needed."""
        self.close()
        self.path.unlink(missing_ok=True)
        if self in _UNFINISHED:
            _UNFINISHED.remove(self)


__all__ = ["FILE_NAME", "OWNER_NAME", "KeptRuns", "PREVIOUS_NAME", "read_kept", "say_unfinished", "sweep_identity"]
