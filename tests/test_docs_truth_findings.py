"""The command lines the documentation quotes name commands and options that exist.

README.md and docs/*.md quote many ``perfpredict <command> --flag ...`` lines and
``python benchmarks|experiments|profilers/<script>.py --flag ...`` invocations. A renamed or removed option
leaves those lines wrong without any test noticing, so these tests read every quoted line (fenced shell
blocks, with ``\\`` continuations joined, and inline code spans, also those broken over two lines) and check
each option against the click command tree of the ``perfpredict`` group (no subprocess) or against the
options the script's own source declares.
"""

from __future__ import annotations

import bisect
import functools
import re
import shlex
import sys
from pathlib import Path

import pytest

from perfpredict import cli

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
#: option words every command takes: click's own --help, and --debug, which ``perfpredict``'s entry point takes
#: out of the arguments for any command (cli._main)
EVERY_COMMAND = {"--help", "--debug"}


def quoted_lines() -> list[tuple[str, str]]:
    """(``file:line``, text) for every shell line of a fenced block and every inline code span."""
    out: list[tuple[str, str]] = []
    for path in DOCS:
        name = path.relative_to(ROOT).as_posix()
        lines = path.read_text().splitlines()
        fence: str | None = None
        joined, start = "", 0
        prose: list[tuple[int, str]] = []
        for i, line in enumerate(lines, 1):
            stripped = line.strip()
            if stripped.startswith("```"):
                fence = stripped[3:].strip().lower() if fence is None else None
                continue
            if fence is None:
                prose.append((i, line))
                continue
            if fence not in SHELL_FENCES:
                continue
            if not joined:
                start = i
            if stripped.endswith("\\"):
                joined += stripped[:-1] + " "
                continue
            out.append((f"{name}:{start}", joined + stripped))
            joined = ""
        # inline spans over the prose with the fences blanked out, so a span broken over two lines is read whole
        text = "\n".join(line for _, line in prose)
        numbers = [i for i, _ in prose]
        breaks = [m.start() for m in re.finditer("\n", text)]
        for m in re.finditer(r"`([^`]+)`", text):
            out.append((f"{name}:{numbers[bisect.bisect(breaks, m.start())]}", " ".join(m.group(1).split())))
    return out


def words(text: str) -> list[str]:
    text = re.split(r"\s#\s|^#\s", text)[0]  # a shell comment
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote in prose
        return text.split()


def invocations(pattern: str) -> list[tuple[str, str, list[str]]]:
    """(where, program, its words) for each quoted line that runs ``pattern`` (the words stop at ``&&``, ``|``,
    ``;`` or the next program); ``where`` ends in ``^`` when the program is the line's first word."""
    found = []
    for where, text in quoted_lines():
        ws = words(text)
        for k, w in enumerate(ws):
            if re.fullmatch(pattern, w):
                rest = []
                for x in ws[k + 1:]:
                    if x in ("&&", "||", "|", ";") or re.fullmatch(pattern, x) or x == "python":
                        break
                    rest.append(x)
                found.append((where + ("^" if k == 0 else ""), w, rest))
    return found


def option_names(command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | EVERY_COMMAND


def test_the_docs_quote_perfpredict_command_lines():
    """The parser finds the quoted lines at all (a change to the docs' layout must not make the checks vacuous)."""
    commands = cli.build_command().commands
    lines = [w for w in invocations(r"perfpredict") if w[2] and w[2][0] in commands]
    assert len(lines) > 100
    assert {rest[0] for _, _, rest in lines} >= {"profile", "predict", "simulate", "compare", "max-batch", "ab"}


def test_every_quoted_perfpredict_option_exists():
    group = cli.build_command()
    root_options = option_names(group) | {"--version"}
    wrong = []
    for where, _, rest in invocations(r"perfpredict"):
        first, where = where.endswith("^"), where.rstrip("^")
        if not rest or rest[0] == "...":
            continue
        if rest[0].startswith("-"):
            wrong += [f"{where}: perfpredict {w}" for w in rest if w.startswith("--") and w.split("=")[0] not in root_options]
            continue
        command = group.commands.get(rest[0])
        if command is None:
            if re.fullmatch(r"[a-z][a-z-]*", rest[0]) and (first or rest[1:2] and rest[1].startswith("-")):
                wrong.append(f"{where}: no command perfpredict {rest[0]}")
            continue
        known = option_names(command)
        for w in rest[1:]:
            w = w.strip("[]()")
            if re.fullmatch(r"--?[a-zA-Z][\w-]*(=.*)?", w) and w.split("=")[0] not in known:
                wrong.append(f"{where}: perfpredict {rest[0]} has no option {w.split('=')[0]}")
    assert not wrong, "\n".join(wrong)


@functools.cache
def declared_options(script: Path) -> frozenset[str]:
    """The ``"--option"`` strings in a script's source and in the sources of the perfpredict modules it imports
    (the experiments take --workers/--ray/--resume from ``perfpredict.sim.parallel``)."""
    texts = [script.read_text()]
    for name in set(re.findall(r"^\s*(?:from|import)\s+(perfpredict[\w.]*)", texts[0], re.M)):
        base = SRC.joinpath(*name.split("."))
        texts += [f.read_text() for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()]
    return frozenset(m for text in texts for m in re.findall(r"""["'](--[a-z][\w-]*)["']""", text))


def test_every_quoted_script_exists_and_takes_its_options():
    wrong, seen = [], 0
    for where, program, rest in invocations(r"(benchmarks|experiments|profilers)/[\w/]+\.py"):
        where = where.rstrip("^")
        path = ROOT / program
        if not path.is_file():
            wrong.append(f"{where}: no script {program}")
            continue
        if "def build_model(" in path.read_text():
            continue  # a model file, quoted as perfpredict's target (its options are perfpredict's, checked above)
        declared = declared_options(path) | {"--help"}
        for w in rest:
            if re.fullmatch(r"--[a-z][\w-]*(=.*)?", w):
                seen += 1
                if w.split("=")[0] not in declared:
                    wrong.append(f"{where}: {program} declares no option {w.split('=')[0]}")
    assert not wrong, "\n".join(wrong)
    assert seen > 20  # the quoted options were found


@pytest.mark.parametrize("line,expected", [
    ("perfpredict simulate --trace x --no-such-flag", "has no option --no-such-flag"),
    ("perfpredict nosuch --flag", "no command perfpredict nosuch"),
    ("perfpredict zooo transformer", "no command perfpredict zooo"),
])
def test_a_wrong_quoted_option_is_caught(monkeypatch, line, expected):
    """The check itself: a line naming an option or a command that does not exist is reported."""
    monkeypatch.setattr(sys.modules[__name__], "quoted_lines", lambda: [("x.md:1", line)])
    with pytest.raises(AssertionError, match=expected):
        test_every_quoted_perfpredict_option_exists()
