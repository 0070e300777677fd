"""Readers for the public GPU-cluster traces deep-learning scheduler studies replay: Philly, Helios and Alibaba PAI.

Each reader returns a :class:`~perfpredict.sim.traces.TraceReport`: the jobs (``arrival`` in seconds from the
first kept submission, ``work`` the recorded run time in seconds, ``gpus`` the recorded demand, ``model`` the
perf-model key every job gets, default ``"linear"``), and the records it passed over, counted by reason. A
replay takes each job to need its recorded run time at its recorded GPUs (the traces hold no per-job speedup
curve: a moldable mechanism scales that run time by the job's perf model, perfect speedup for ``"linear"``).
Filters (``statuses``, ``vc``, ``gpu_type``, the ``start``/``end`` window) count what they leave out as skipped
too, so the summary always adds up to the records read. ``max_jobs`` keeps the first jobs *by submission* after
the filters. Malformed input is a :class:`~perfpredict.sim.traces.TraceError` naming the file and the line
(or the JSON record), never an exception from inside a parser.

Microsoft Philly (``cluster_job_log`` of github.com/msr-fiddle/philly-traces, Jeon et al., ATC '19), :func:`read_philly`
    A JSON list of jobs: ``jobid``, ``user``, ``vc``, ``status`` (Pass / Killed / Failed), ``submitted_time``
    and ``attempts``, each with ``start_time``, ``end_time`` and ``detail`` (the servers and their GPUs). Times
    are ``YYYY-MM-DD HH:MM:SS`` clock times without a zone, read as US Pacific (``tz=`` :data:`PHILLY_TZ`: the
    trace's utilisation logs mark theirs PDT / PST), so a job that spans the end of daylight saving (5 Nov
    2017) runs an hour longer than the written times say; the repeated 1-2 AM hour is read as its first pass
    (daylight time); ``tz="UTC"`` reads the times as written. The demand is the GPUs of the job's first
    attempt (the trace's analysis notebook's ``num_gpus``). The work is, by default (``attempts="sum"``), the run
    time of every attempt (what the cluster ran: it keeps the trace's offered load; an attempt that failed and
    was retried ran on the cluster too); ``attempts="last"`` takes the last attempt alone (a retry that
    restarted from scratch), ``attempts="span"`` the notebook's run time, from the first attempt's start to the
    last one's end (the waits between attempts included). A jobid seen again is skipped and counted. A job with no
    attempt, with an attempt missing a time, or still running when the log was taken (its last ``end_time`` is
    ``None``, the README's notes) is skipped and counted. A missing time is the string ``"None"`` in the log
    (Python's ``None`` printed: the README's notebook and Synergy's parser test for it); ``null`` and ``""``
    are read as missing too.

SenseTime Helios (``cluster_log.csv`` of github.com/S-Lab-System-Group/HeliosData, Hu et al., SC '21), :func:`read_helios`
    A CSV with a header: ``job_id``, ``user``, ``vc``, ``gpu_num``, ``cpu_num``, ``node_num``, ``state``,
    ``submit_time``, ``start_time``, ``end_time``, ``duration`` (seconds, end - start), ``queue``. The demand is
    ``gpu_num``, the work ``duration``; the times are read as written (no zone). Helios logs every Slurm job:
    CPU-only jobs (``gpu_num`` 0, about half the records) are skipped and counted, as is a job_id seen again.

Alibaba PAI (``pai_task_table.csv`` and ``pai_job_table.csv`` of github.com/alibaba/clusterdata, cluster-trace-gpu-v2020, Weng et al., NSDI '22), :func:`read_pai`
    Headerless CSVs (a header row, as the ``.header`` files give it, is accepted too). A job is the tasks of
    one ``job_name`` (e.g. a parameter server and its workers); its demand is the sum over its tasks of
    ``inst_num x plan_gpu / 100`` (``plan_gpu`` is percent of one GPU: PAI shares GPUs), its work the span from
    its first task's start to its last task's end. A fractional demand is rounded up to whole GPUs by default
    (``fractional="ceil"``): the recorded run time is what the job took on its share, and a mechanism that
    gives whole devices would otherwise read a 50% job's run time as work at half a GPU, finishing it twice as
    fast on a whole one under a linear perf model. ``fractional="keep"`` keeps the share for the mechanisms
    that place a share of a device (``rigid``, ``moldable-*``, ``malleable-*``); those that place whole GPUs
    only (Synergy's, ``horus``, ``obp``, ``pab``, which share whole devices) round it up again, with that
    speed-up (the run's notes say so). Tasks are
    launched after the job waited, so the arrival is the job table's ``start_time`` (the submission) when the
    job table is given, else the first task's start (no queueing in the record). Times are seconds on the
    trace's own clock; a time of 0 is a missing one (a task that never started, as the trace's own
    ``analysis/utils.py`` reads it). A job with no GPU task, or a task without its times, is skipped and counted;
    so is a job the job table says was submitted after its first task started (the README reads the gap
    between them as the job's wait: the two tables disagree), and a ``job_name`` repeated in the job table (the
    README gives each job_name one ``inst_id``: the first row is the job's, each repeat a skipped record).
    ``gpu_type`` keeps the jobs whose GPU tasks ran on that type (PAI is heterogeneous: MISC, P100, T4, V100,
    V100M32).

The clusters they ran on, as :class:`~perfpredict.sched.cluster.ClusterSpec` s: Philly's ``cluster_machine_list``
(:func:`read_philly_machines`), PAI's ``pai_machine_spec.csv`` (:func:`read_pai_machines`) and a day of Helios'
``cluster_gpu_number.csv`` (:func:`read_helios_gpus`); what the files do not say (Philly's CPUs and memory,
PAI's and Helios' device memory, Helios' servers) is a stated default each function documents.
"""

from __future__ import annotations

import csv
import json
import math
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from perfpredict.sched.cluster import MAX_TRACE_JOBS, ClusterSpec, ServerSpec
from perfpredict.sched.job import Job
from perfpredict.sim.traces import TraceError, TraceReport, _lines, _number, _open_text

__all__ = ["HELIOS_COLUMNS", "PAI_GPU_MEM_GB", "PAI_JOB_COLUMNS", "PAI_MACHINE_COLUMNS", "PAI_TASK_COLUMNS",
           "PHILLY_TZ", "read_helios", "read_helios_gpus", "read_pai", "read_pai_machines", "read_philly",
           "read_philly_machines", "sniff_format"]

#: Helios' ``cluster_log.csv`` columns (the reader needs ``job_id``, ``gpu_num``, ``submit_time``, ``duration``)
HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state", "submit_time", "start_time",
                  "end_time", "duration", "queue")
_HELIOS_REQUIRED = ("job_id", "gpu_num", "submit_time", "duration")
#: the columns of PAI's headerless ``pai_task_table.csv`` and ``pai_job_table.csv``, in order
PAI_TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem",
                    "plan_gpu", "gpu_type")
PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
#: the zone of Philly's clock times: the trace's utilisation logs mark theirs PDT / PST (its README's examples)
PHILLY_TZ = "America/Los_Angeles"


@dataclass(frozen=True)
class _Kept:
    """A record that passed the filters, before the clock is shifted to the first submission."""

    id: str
    submit: float
    gpus: float
    work: float
    user: str
    where: int  # line (CSV) or record (JSON) number, for a Job's own validation error


class _Tally:
    """The report being built: skips by reason and the kept records."""

    def __init__(self) -> None:
        self.report = TraceReport(jobs=[])
        self.kept: list[_Kept] = []

    def skip(self, reason: str, count: int = 1) -> None:
        self.report.skipped += count
        self.report.skip_reasons[reason] = self.report.skip_reasons.get(reason, 0) + count

    def finish(self, path: Path, *, model: str, max_jobs: int | None, record_lines: bool) -> TraceReport:
        """Jobs in submission order (file order on ties), the clock starting at the first kept submission."""
        kept = sorted(self.kept, key=lambda k: k.submit)
        if max_jobs is not None and len(kept) > max_jobs:
            self.skip(f"past max_jobs={max_jobs}", len(kept) - max_jobs)
            kept = kept[:max_jobs]
        origin = kept[0].submit if kept else 0.0
        rep = self.report
        rep.time_origin = origin
        rep.records = rep.skipped + len(kept)
        for k in kept:
            try:
                rep.jobs.append(Job(id=k.id, arrival=k.submit - origin, gpus=k.gpus, work=k.work, model=model,
                                    user=k.user))
            except ValueError as e:
                if record_lines:
                    raise TraceError(str(e), path=path, line=k.where) from None
                raise TraceError(f"record {k.where}: {e}", path=path) from None
        return rep


def _check_common(path: Path, max_jobs: int | None, model: str, statuses: Collection[str] | None) -> None:
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int)
                                 or not 0 <= max_jobs <= MAX_TRACE_JOBS):
        raise TraceError(f"max_jobs must be a whole number from 0 to {MAX_TRACE_JOBS:,}, got {max_jobs!r}", path=path)
    if not isinstance(model, str) or not model:
        raise TraceError(f"model must be a perf-model name, got {model!r}", path=path)
    if statuses is not None and (isinstance(statuses, str) or not statuses):
        raise TraceError(f"statuses must be a non-empty collection of status names, got {statuses!r}", path=path)


def _window(path: Path, start: str | float | None, end: str | float | None,
            parse: Callable[[str], float]) -> tuple[float, float]:
    """The ``[start, end)`` submission window on the trace's clock (-inf, inf when not given)."""
    def bound(value: str | float | None, default: float, name: str) -> float:
        if value is None:
            return default
        if isinstance(value, bool):
            raise TraceError(f"{name} must be a time, got {value!r}", path=path)
        if isinstance(value, (int, float)):
            if not math.isfinite(value):
                raise TraceError(f"{name} must be finite, got {value!r}", path=path)
            return float(value)
        try:
            return parse(str(value))
        except ValueError as e:
            raise TraceError(f"{name}={value!r}: {e}", path=path) from None

    lo, hi = bound(start, -math.inf, "start"), bound(end, math.inf, "end")
    if not lo < hi:
        raise TraceError(f"the window start={start!r} .. end={end!r} is empty", path=path)
    return lo, hi


def _clock_seconds(text: str, zone: tzinfo = timezone.utc) -> float:
    """A ``YYYY-MM-DD[ HH:MM:SS]`` clock time in ``zone`` as Unix seconds (the traces' times carry no zone; an
    offset written in the text is replaced by ``zone``). Only differences between times are used, so for a
    clock without daylight saving the default UTC reading is as good as any. The hour repeated when daylight
    saving ends is read as its first pass (``fold=0``: daylight time); a time in the hour skipped when it
    starts, at the offset before the change."""
    try:
        t = datetime.fromisoformat(text)  # reads "2017-10-07 01:11:39" 5x faster than strptime
    except ValueError:
        raise ValueError(f"not a time like 2017-10-07 01:11:39: {text!r}") from None
    return t.replace(tzinfo=zone, fold=0).timestamp()


def _zone(name: Any, p: Path) -> tzinfo:
    """The zone an IANA name (``America/Los_Angeles``, ``UTC``) gives, else a :class:`TraceError` saying so."""
    if isinstance(name, str) and name.strip():
        try:
            return ZoneInfo(name.strip())
        except (ZoneInfoNotFoundError, ValueError, OSError):  # ValueError: not a zone key at all ("../etc",
            pass  # "/abs"); OSError: a folder of the database ("America": IsADirectoryError), a name too long
    raise TraceError(f"tz={name!r} is not a time zone name (an IANA name such as {PHILLY_TZ} or UTC)", path=p)


def _filters(status: str, vc: str, statuses: Collection[str] | None, want_vc: Collection[str] | None) -> str | None:
    """The reason a record is filtered out, or None."""
    if statuses is not None and status not in statuses:
        return f"status {status or '(blank)'}"
    if want_vc is not None and vc not in want_vc:
        return "another virtual cluster"
    return None


def _as_set(value: str | Collection[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset([value] if isinstance(value, str) else value)


# -- Philly ---------------------------------------------------------------------------------------------------
def read_philly(path: str | Path, *, attempts: str = "sum", statuses: Collection[str] | None = None,
                vc: str | Collection[str] | None = None, start: str | None = None, end: str | None = None,
                max_jobs: int | None = None, model: str = "linear", tz: str = PHILLY_TZ) -> TraceReport:
    """Read Philly's ``cluster_job_log`` (JSON, optionally ``.gz``); see the module docstring for the mapping.

    ``attempts``: ``"sum"`` (work = every attempt's run time), ``"last"`` or ``"span"``. ``statuses``: keep only these
    (e.g. ``{"Pass"}``). ``vc``: keep only this virtual cluster (or these). ``start``/``end``: keep jobs
    submitted in ``[start, end)`` (``"2017-10-01"`` or ``"2017-10-01 08:00:00"``, clock times in ``tz``; a
    number is Unix seconds). ``tz``: the zone of the log's clock times (``"UTC"`` reads them as written).
    """
    p = Path(path)
    _check_common(p, max_jobs, model, statuses)
    if attempts not in ("sum", "last", "span"):
        raise TraceError(f"attempts must be 'sum', 'last' or 'span', got {attempts!r}", path=p)
    zone = _zone(tz, p)
    lo, hi = _window(p, start, end, lambda text: _clock_seconds(text, zone))
    want_status, want_vc = _as_set(statuses), _as_set(vc)
    records = _philly_records(p)
    tally = _Tally()
    seen: dict[str, int] = {}
    for i, rec in enumerate(records, start=1):
        where = f"record {i}"
        if not isinstance(rec, dict):
            raise TraceError(f"{where} is a JSON {type(rec).__name__}, not a job object", path=p)
        job_id = _text_field(rec, "jobid", where, p, required=True)
        where = f"record {i} (jobid {job_id})"
        if job_id in seen:  # a public log's repeated record: the first one is the job (counted, not refused)
            tally.skip("a jobid repeated (the first record kept)")
            continue
        seen[job_id] = i
        reason = _filters(_text_field(rec, "status", where, p), _text_field(rec, "vc", where, p), want_status,
                          want_vc)
        if reason:
            tally.skip(reason)
            continue
        submitted = rec.get("submitted_time")
        if _no_philly_time(submitted):
            tally.skip("unknown submit time")
            continue
        submit = _philly_time(submitted, f"{where}: submitted_time", p, zone)
        if not lo <= submit < hi:
            tally.skip("submitted outside the window")
            continue
        tries = rec.get("attempts")
        if not isinstance(tries, list):
            raise TraceError(f"{where}: attempts is {type(tries).__name__}, not a list", path=p)
        if not tries:
            tally.skip("no attempt recorded")
            continue
        spans = [_attempt_span(a, f"{where}: attempt {k}", p, zone) for k, a in enumerate(tries, start=1)]
        if spans[-1][1] is None and spans[-1][0] is not None:
            tally.skip("still running when the log was taken")
            continue
        if any(s is None or e is None for s, e in spans):
            tally.skip("an attempt without its start or end time")
            continue
        runs = [e - s for s, e in spans]  # type: ignore[operator]
        if any(r < 0 for r in runs):
            tally.skip("an attempt ending before it started")
            continue
        work = {"sum": sum(runs), "last": runs[-1], "span": spans[-1][1] - spans[0][0]}[attempts]  # type: ignore[operator]
        gpus = _attempt_gpus(tries[0], f"{where}: attempt 1", p)  # the trace notebook's num_gpus
        if gpus <= 0:
            tally.skip("no GPU recorded")
            continue
        if work <= 0:
            tally.skip("non-positive run time")
            continue
        tally.kept.append(_Kept(job_id, submit, float(gpus), work, _text_field(rec, "user", where, p), i))
    return tally.finish(p, model=model, max_jobs=max_jobs, record_lines=False)


def _philly_records(p: Path) -> list[Any]:
    with _open_text(p) as f:
        try:
            data = json.loads(f.read().removeprefix("\ufeff"))  # a BOM, as the CSV readers and sniff_format take it
        except json.JSONDecodeError as e:
            raise TraceError(f"not JSON: {e.msg} (column {e.colno}); Philly's cluster_job_log is a JSON list",
                             path=p, line=e.lineno) from None
        except UnicodeDecodeError:
            raise TraceError("not a UTF-8 text file", path=p) from None
        except ValueError as e:  # an integer of more than 4,300 digits (sys.get_int_max_str_digits)
            raise TraceError(f"not a cluster_job_log: {e}", path=p) from None
        except (OSError, EOFError, zlib.error) as e:  # zlib.error: a corrupt .gz (not an OSError)
            raise TraceError(f"cannot read: {e}", path=p) from None
        except RecursionError:
            raise TraceError("JSON nested too deeply: not a cluster_job_log", path=p) from None
    if not isinstance(data, list):
        raise TraceError(f"the top level is a JSON {type(data).__name__}: Philly's cluster_job_log is a list of "
                         "jobs", path=p)
    return data


def _text_field(rec: dict, key: str, where: str, p: Path, *, required: bool = False) -> str:
    value = rec.get(key)
    if value is None:
        if required:
            raise TraceError(f"{where}: no {key!r}", path=p)
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TraceError(f"{where}: {key} is {type(value).__name__}, not text", path=p)
    value = str(value)
    if required and not value.strip():
        raise TraceError(f"{where}: {key} is blank", path=p)
    return value


def _philly_time(value: Any, what: str, p: Path, zone: tzinfo) -> float:
    if not isinstance(value, str):
        raise TraceError(f"{what} is {type(value).__name__}, not a time", path=p)
    try:
        return _clock_seconds(value.strip(), zone)
    except ValueError as e:
        raise TraceError(f"{what}: {e}", path=p) from None


def _attempt_span(attempt: Any, where: str, p: Path, zone: tzinfo) -> tuple[float | None, float | None]:
    if not isinstance(attempt, dict):
        raise TraceError(f"{where} is a JSON {type(attempt).__name__}, not an object", path=p)
    return tuple(None if _no_philly_time(attempt.get(k)) else _philly_time(attempt[k], f"{where}: {k}", p, zone)
                 for k in ("start_time", "end_time"))  # type: ignore[return-value]


def _no_philly_time(value: Any) -> bool:
    """Whether a Philly time is a missing one: the log writes ``"None"``; ``null`` and blank read so too."""
    return value is None or (isinstance(value, str) and value.strip() in ("", "None"))


def _attempt_gpus(attempt: dict, where: str, p: Path) -> int:
    detail = attempt.get("detail") or []
    if not isinstance(detail, list):
        raise TraceError(f"{where}: detail is {type(detail).__name__}, not a list", path=p)
    total = 0
    for server in detail:
        gpus = server.get("gpus") if isinstance(server, dict) else None
        if not isinstance(gpus, list):
            raise TraceError(f"{where}: a detail entry without a list of gpus", path=p)
        total += len(gpus)
    return total


# -- CSV readers (Helios, PAI) --------------------------------------------------------------------------------
def _csv_rows(p: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) of a CSV file's non-blank lines; a field holding a line break is an error."""
    line = [0]  # the file line of the last text handed to csv.reader

    def tracked() -> Iterator[str]:
        for n, text in _lines(p):
            line[0] = n
            yield text.removeprefix("\ufeff") if n == 1 else text

    try:
        for row in csv.reader(tracked()):
            if not any(c.strip() for c in row):
                continue
            if any("\n" in c or "\r" in c for c in row):
                raise TraceError("a field spans lines: a quote left open?", path=p, line=line[0])
            yield line[0], row
    except csv.Error as e:
        raise TraceError(f"bad CSV: {e}", path=p, line=line[0] or None) from None


def _header(p: Path, rows: Iterator[tuple[int, list[str]]]) -> tuple[int, list[str]]:
    """The line and the stripped names of a CSV's header row (the first of ``rows``)."""
    try:
        line, header = next(rows)
    except StopIteration:
        raise TraceError("empty: no header row", path=p) from None
    return line, [h.strip() for h in header]


def _check_positive(p: Path, **values: Any) -> None:
    """Each named option a finite number above 0, else a :class:`TraceError` naming it."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
            raise TraceError(f"{name} must be a positive number, got {v!r}", path=p)


def _optional_number(cell: str, what: str, p: Path, n: int) -> float | None:
    """A number, or None for the blank / ``nan`` cells pandas writes for a missing value."""
    cell = cell.strip()
    if not cell or cell.lower() in ("nan", "null", "none"):
        return None
    return _number(cell, what, p, n)


# -- Helios ---------------------------------------------------------------------------------------------------
def read_helios(path: str | Path, *, statuses: Collection[str] | None = None, vc: str | Collection[str] | None = None,
                start: str | None = None, end: str | None = None, max_jobs: int | None = None,
                model: str = "linear") -> TraceReport:
    """Read a Helios ``cluster_log.csv`` (optionally ``.gz``); see the module docstring for the mapping.

    ``statuses``: keep only these states (e.g. ``{"COMPLETED"}``); ``vc``, ``start``/``end``, ``max_jobs``,
    ``model`` as for :func:`read_philly`.
    """
    p = Path(path)
    _check_common(p, max_jobs, model, statuses)
    lo, hi = _window(p, start, end, _clock_seconds)
    want_status, want_vc = _as_set(statuses), _as_set(vc)
    rows = _csv_rows(p)
    header_line, cols = _header(p, rows)
    missing = [c for c in _HELIOS_REQUIRED if c not in cols]
    if missing:
        raise TraceError(f"not a Helios cluster_log.csv: no column(s) {', '.join(missing)} in the header "
                         f"(expected {', '.join(HELIOS_COLUMNS)})", path=p, line=header_line)
    if len(set(cols)) != len(cols):
        raise TraceError("a column appears twice in the header", path=p, line=header_line)
    tally = _Tally()
    seen: dict[str, int] = {}
    for n, row in rows:
        if len(row) != len(cols):
            raise TraceError(f"expected {len(cols)} fields (as the header), got {len(row)}", path=p, line=n)
        cell = {c: v.strip() for c, v in zip(cols, row, strict=True)}
        job_id = cell["job_id"]
        if not job_id:
            raise TraceError("job_id is blank", path=p, line=n)
        if job_id in seen:  # a public log's repeated record: the first one is the job (counted, not refused)
            tally.skip("a job_id repeated (the first record kept)")
            continue
        seen[job_id] = n
        reason = _filters(cell.get("state", ""), cell.get("vc", ""), want_status, want_vc)
        if reason:
            tally.skip(reason)
            continue
        gpus = _optional_number(cell["gpu_num"], "gpu_num", p, n)
        if gpus is None or gpus <= 0:
            tally.skip("CPU-only job (gpu_num 0)" if gpus == 0 else "unknown GPU count")
            continue
        if not cell["submit_time"]:
            tally.skip("unknown submit time")
            continue
        try:
            submit = _clock_seconds(cell["submit_time"])
        except ValueError as e:
            raise TraceError(f"submit_time: {e}", path=p, line=n) from None
        if not lo <= submit < hi:
            tally.skip("submitted outside the window")
            continue
        work = _optional_number(cell["duration"], "duration", p, n)
        if work is None:
            tally.skip("unknown run time")
            continue
        if work <= 0:
            tally.skip("non-positive run time")
            continue
        tally.kept.append(_Kept(job_id, submit, gpus, work, cell.get("user", ""), n))
    return tally.finish(p, model=model, max_jobs=max_jobs, record_lines=True)


# -- Alibaba PAI ----------------------------------------------------------------------------------------------
@dataclass
class _PaiJob:
    first_line: int
    gpus: float = 0.0
    start: float = math.inf
    end: float = -math.inf
    gpu_types: set[str] | None = None
    missing_time: bool = False
    statuses: set[str] | None = None


def read_pai(path: str | Path, *, job_table: str | Path | None = None, statuses: Collection[str] | None = None,
             gpu_type: str | Collection[str] | None = None, start: float | None = None, end: float | None = None,
             fractional: str = "ceil", max_jobs: int | None = None, model: str = "linear") -> TraceReport:
    """Read PAI's ``pai_task_table.csv`` (and, for arrivals and users, ``pai_job_table.csv``); see the module
    docstring for the mapping.

    ``statuses``: keep jobs whose every task has one of these statuses (e.g. ``{"Terminated"}``, PAI's
    successful end). ``gpu_type``: keep jobs whose GPU tasks all ran on this type (or these). ``start``/``end``:
    submission window in the trace's seconds. ``fractional``: ``"ceil"`` (a demand below or between whole GPUs
    is rounded up) or ``"keep"``.
    """
    p = Path(path)
    _check_common(p, max_jobs, model, statuses)
    if fractional not in ("ceil", "keep"):
        raise TraceError(f"fractional must be 'ceil' or 'keep', got {fractional!r}", path=p)
    lo, hi = _window(p, start, end, float)
    want_status, want_type = _as_set(statuses), _as_set(gpu_type)
    jobs: dict[str, _PaiJob] = {}
    for n, c in _pai_rows(p, PAI_TASK_COLUMNS):
        job = jobs.setdefault(c["job_name"], _PaiJob(first_line=n, gpu_types=set(), statuses=set()))
        job.statuses.add(c["status"])  # type: ignore[union-attr]
        inst = _optional_number(c["inst_num"], "inst_num", p, n)
        plan = _optional_number(c["plan_gpu"], "plan_gpu", p, n)
        if (inst is not None and inst < 0) or (plan is not None and plan < 0):
            raise TraceError("inst_num and plan_gpu must be >= 0", path=p, line=n)
        if inst and plan:
            job.gpus += inst * plan / 100.0
            job.gpu_types.add(c["gpu_type"])  # type: ignore[union-attr]
        t0 = _pai_time(c["start_time"], "start_time", p, n)
        t1 = _pai_time(c["end_time"], "end_time", p, n)
        if t0 is None or t1 is None:
            job.missing_time = True
        else:
            job.start, job.end = min(job.start, t0), max(job.end, t1)
    tally = _Tally()
    submitted = _pai_job_table(Path(job_table), tally) if job_table is not None else {}
    for name, job in jobs.items():
        if want_status is not None and not job.statuses <= want_status:  # type: ignore[operator]
            tally.skip("status " + "/".join(sorted(job.statuses - want_status)))  # type: ignore[operator]
            continue
        if job.gpus <= 0:
            tally.skip("no GPU task")
            continue
        if want_type is not None and not job.gpu_types <= want_type:  # type: ignore[operator]
            tally.skip("another GPU type")
            continue
        if job.missing_time:
            tally.skip("a task without its start or end time")
            continue
        if job_table is not None and name not in submitted:
            tally.skip("not in the job table")
            continue
        submit, user = submitted.get(name, (job.start, ""))
        if submit is None:
            tally.skip("unknown submit time")
            continue
        if not lo <= submit < hi:
            tally.skip("submitted outside the window")
            continue
        work = job.end - job.start
        if work <= 0:
            tally.skip("non-positive run time")
            continue
        if submit > job.start:  # a negative wait (the README reads the gap to the first task as the queueing)
            tally.skip("submitted after its first task started (the job and task tables disagree)")
            continue
        # 3 x 33.3% is one GPU; a sum that overflowed to inf is left for Job to refuse (math.ceil would raise)
        gpus = math.ceil(job.gpus - 1e-9) if fractional == "ceil" and math.isfinite(job.gpus) else job.gpus
        tally.kept.append(_Kept(name, submit, float(gpus), work, user, job.first_line))
    return tally.finish(p, model=model, max_jobs=max_jobs, record_lines=True)


def _pai_time(cell: str, what: str, p: Path, n: int) -> float | None:
    """A PAI time in seconds, or None when missing: blank, ``nan``, or 0 (what the trace holds for a task that
    never started or ended, as its own ``analysis/utils.py`` reads it)."""
    t = _optional_number(cell, what, p, n)
    return None if t == 0 else t


def _pai_rows(p: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a headerless PAI table as column -> cell (a first row naming the columns is skipped)."""
    for k, (n, row) in enumerate(_csv_rows(p)):
        if len(row) != len(columns):
            raise TraceError(f"expected the {len(columns)} columns of {p.name.split('.')[0] or 'a PAI table'} "
                             f"({', '.join(columns)}), got {len(row)}", path=p, line=n)
        cells = [v.strip() for v in row]
        if k == 0 and cells[0].lower() == columns[0]:  # the first row read (blank lines before it skipped)
            if [c.lower() for c in cells] != list(columns):
                raise TraceError(f"the header names {', '.join(cells)}; expected {', '.join(columns)}", path=p,
                                 line=n)
            continue
        yield n, dict(zip(columns, cells, strict=True))


def _pai_job_table(p: Path, tally: _Tally) -> dict[str, tuple[float | None, str]]:
    """job_name -> (submission time, user) from ``pai_job_table.csv``. A job_name seen again is a repeated row
    (the README: each job_name has one inst_id): the first row is the job's, the others are counted in ``tally``
    as Philly's and Helios' repeated ids are."""
    out: dict[str, tuple[float | None, str]] = {}
    for n, c in _pai_rows(p, PAI_JOB_COLUMNS):
        name = c["job_name"]
        if name in out:
            tally.skip("a job_name repeated in the job table (the first row kept)")
            continue
        out[name] = (_pai_time(c["start_time"], "start_time", p, n), c["user"])
    return out


# -- which one --------------------------------------------------------------------------------------------------
def sniff_format(path: str | Path) -> str | None:
    """``"philly"``, ``"helios"`` or ``"pai"`` when a file's first bytes look like that trace (a JSON list; a
    header naming Helios' columns; a headerless row of PAI's task table), else None (unreadable files too:
    the reader that is then tried says why; and a pipe, whose bytes a look would use up)."""
    p = Path(path)
    if not p.is_file():  # a named pipe: the reader opening it next would wait for a writer that has gone
        return None
    try:
        with _open_text(p) as f:
            head = f.read(4096)
    except (TraceError, OSError, EOFError, UnicodeDecodeError, zlib.error):
        return None  # the reader tried next says what is wrong
    text = head.lstrip("\ufeff \t\r\n")
    if text.startswith("["):
        return "philly"
    first = text.splitlines()[0] if text else ""
    cells = [c.strip() for c in first.split(",")]
    if all(c in cells for c in _HELIOS_REQUIRED):
        return "helios"
    if len(cells) == len(PAI_TASK_COLUMNS) and (cells == list(PAI_TASK_COLUMNS) or _looks_numeric(cells, (2, 4, 5, 8))):
        return "pai"
    return None


def _looks_numeric(cells: list[str], positions: tuple[int, ...]) -> bool:
    for i in positions:
        if cells[i] and cells[i].lower() != "nan":
            try:
                float(cells[i])
            except ValueError:
                return False
    return True


# -- the clusters the traces ran on -------------------------------------------------------------------------------
#: device memory (GB) of PAI's GPU types; MISC is "older generations, e.g. K40m, K80, M60" (12, 12 per die and 8
#: per die): its smallest, 8, so that co-location is never allowed more memory than the oldest card has
PAI_GPU_MEM_GB: dict[str, float] = {"V100M32": 32.0, "V100": 16.0, "P100": 16.0, "T4": 16.0, "MISC": 8.0}
PAI_MACHINE_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")


def read_philly_machines(path: str | Path, *, cpus_per_gpu: float = 3.0, mem_per_gpu_gb: float = 62.5) -> ClusterSpec:
    """The servers of Philly's ``cluster_machine_list`` (``machineId, number of GPUs, single GPU mem``, e.g.
    ``m31,8, 24GB``) as a :class:`~perfpredict.sched.cluster.ClusterSpec`, in file order.

    The list gives no CPUs, host memory or GPU model: each server gets ``cpus_per_gpu`` CPUs and
    ``mem_per_gpu_gb`` GB per GPU (default Synergy's 24 CPUs and 500 GB per 8-GPU server, seed 001 §5.1), and the
    GPU type ``philly-<mem>GB`` (the trace says only 12 GB and 24 GB devices). Servers without GPUs are left out.
    """
    p = Path(path)
    _check_positive(p, cpus_per_gpu=cpus_per_gpu, mem_per_gpu_gb=mem_per_gpu_gb)
    servers: list[ServerSpec] = []
    seen: dict[str, int] = {}
    for k, (n, row) in enumerate(_csv_rows(p)):
        cells = [c.strip() for c in row]
        if k == 0 and cells and cells[0].lower() == "machineid":  # the header, however spelt, after blank lines
            continue
        if len(cells) != 3:
            raise TraceError(f"expected 3 fields (machineId, number of GPUs, single GPU mem), got {len(cells)}",
                             path=p, line=n)
        machine, count, mem = cells
        if machine in seen:
            raise TraceError(f"machine {machine!r} already listed on line {seen[machine]}", path=p, line=n)
        seen[machine] = n
        gpus = _number(count, "number of GPUs", p, n)
        if gpus < 0 or not gpus.is_integer():
            raise TraceError(f"number of GPUs must be a whole number >= 0, got {count!r}", path=p, line=n)
        if gpus == 0:
            continue
        gb = mem.upper().removesuffix("GB").strip()
        gpu_mem = _number(gb, "single GPU mem", p, n)
        try:
            servers.append(ServerSpec(gpus=int(gpus), cpus=cpus_per_gpu * gpus, mem_gb=mem_per_gpu_gb * gpus,
                                      gpu_type=f"philly-{gpu_mem:g}GB", gpu_mem_gb=gpu_mem))
        except ValueError as e:
            raise TraceError(str(e), path=p, line=n) from None
    given = {"cpus_per_gpu": (cpus_per_gpu, 3.0), "mem_per_gpu": (mem_per_gpu_gb, 62.5)}
    return _cluster(p, servers, "philly", [f"{k}={v:g}" for k, (v, default) in given.items() if v != default])


def read_pai_machines(path: str | Path, *, gpu_type: str | Collection[str] | None = None,
                      gpu_mem_gb: Mapping[str, float] | None = None) -> ClusterSpec:
    """The GPU servers of PAI's ``pai_machine_spec.csv`` (``machine, gpu_type, cap_cpu, cap_mem, cap_gpu``:
    CPU cores, GB of memory, GPUs) as a :class:`~perfpredict.sched.cluster.ClusterSpec`, in file order.

    ``gpu_type``: keep the servers of this type (or these), as :func:`read_pai`'s filter keeps their jobs.
    ``gpu_mem_gb``: device memory by type, over :data:`PAI_GPU_MEM_GB` (the trace does not give it).
    """
    p = Path(path)
    want = _as_set(gpu_type)
    mem_of = {**PAI_GPU_MEM_GB, **(gpu_mem_gb or {})}
    servers: list[ServerSpec] = []
    seen: dict[str, int] = {}
    types: set[str] = set()  # of the servers with GPUs, kept or not
    for n, c in _pai_rows(p, PAI_MACHINE_COLUMNS):
        if c["machine"] in seen:
            raise TraceError(f"machine {c['machine']!r} already listed on line {seen[c['machine']]}", path=p, line=n)
        seen[c["machine"]] = n
        gpus = _optional_number(c["cap_gpu"], "cap_gpu", p, n) or 0.0
        if gpus < 0 or not gpus.is_integer():
            raise TraceError(f"cap_gpu must be a whole number >= 0, got {c['cap_gpu']!r}", path=p, line=n)
        if gpus > 0:
            types.add(c["gpu_type"])
        if gpus == 0 or (want is not None and c["gpu_type"] not in want):
            continue
        if c["gpu_type"] not in mem_of:
            raise TraceError(f"GPU type {c['gpu_type']!r} has no device memory in PAI_GPU_MEM_GB "
                             f"({', '.join(mem_of)}): give it (gpu_mem_gb=)", path=p, line=n)
        # read before the try: their TraceError already names the file and line (a ValueError, re-wrapped twice)
        cpus, mem = _number(c["cap_cpu"], "cap_cpu", p, n), _number(c["cap_mem"], "cap_mem", p, n)
        try:
            servers.append(ServerSpec(gpus=int(gpus), cpus=cpus, mem_gb=mem, gpu_type=c["gpu_type"],
                                      gpu_mem_gb=mem_of[c["gpu_type"]]))
        except ValueError as e:
            raise TraceError(str(e), path=p, line=n) from None
    if want is not None and types and not servers:
        raise TraceError(f"no server with GPUs of type {'/'.join(sorted(want))}; the file has "
                         f"{'/'.join(sorted(types))}", path=p)
    options = ([f"gpu_type={'/'.join(sorted(want))}"] if want is not None else []) + [
        f"gpu_mem_gb={t}:{gb:g}" for t, gb in (gpu_mem_gb or {}).items()]
    return _cluster(p, servers, "pai", options)


def read_helios_gpus(path: str | Path, *, date: str | None = None, vc: str | Collection[str] | None = None,
                     gpus_per_server: int = 8, cpus_per_gpu: float = 3.0, mem_per_gpu_gb: float = 62.5,
                     gpu_mem_gb: float = 32.0) -> ClusterSpec:
    """A cluster of the size Helios' ``cluster_gpu_number.csv`` gives for one day: that file lists the GPUs of
    each virtual cluster per day (``date, vc..., total``), not its servers, so the GPUs (the ``total`` column,
    or the sum of the ``vc`` columns named) are split into servers of ``gpus_per_server`` (Helios' nodes have 8;
    a remainder is one smaller server). ``date``: the day (``YYYY-MM-DD``; default the file's first). CPUs, host
    memory and device memory are not in the trace: Synergy's 3 CPUs and 62.5 GB per GPU, and 32 GB devices, by
    default.
    """
    p = Path(path)
    _check_positive(p, cpus_per_gpu=cpus_per_gpu, mem_per_gpu_gb=mem_per_gpu_gb, gpu_mem_gb=gpu_mem_gb,
                    gpus_per_server=gpus_per_server)
    if gpus_per_server != int(gpus_per_server):
        raise TraceError(f"gpus_per_server must be a whole number, got {gpus_per_server!r}", path=p)
    rows = _csv_rows(p)
    header_line, cols = _header(p, rows)
    if not cols or cols[0] != "date" or "total" not in cols:
        raise TraceError("not a Helios cluster_gpu_number.csv: the header is date, the virtual clusters, total",
                         path=p, line=header_line)
    wanted = _as_set(vc)
    unknown = sorted((wanted or set()) - set(cols[1:-1]) - {"total"}) if wanted else []
    if unknown:
        raise TraceError(f"no virtual cluster {', '.join(unknown)} in the header", path=p, line=header_line)
    picked = None
    for n, row in rows:
        if len(row) != len(cols):
            raise TraceError(f"expected {len(cols)} fields (as the header), got {len(row)}", path=p, line=n)
        cell = dict(zip(cols, (c.strip() for c in row), strict=True))
        if date is None or cell["date"] == date:
            picked = (n, cell)
            break
    if picked is None:
        raise TraceError(f"no row for the date {date!r}", path=p)
    n, cell = picked
    names = sorted(wanted) if wanted else ["total"]
    counts = [_number(cell[c], c, p, n) for c in names]
    if any(g < 0 or not g.is_integer() for g in counts):
        raise TraceError(f"GPU counts must be whole numbers >= 0, got {', '.join(cell[c] for c in names)}", path=p,
                         line=n)
    full, rest = divmod(int(sum(counts)), int(gpus_per_server))

    def server(gpus: int) -> ServerSpec:
        return ServerSpec(gpus=gpus, cpus=cpus_per_gpu * gpus, mem_gb=mem_per_gpu_gb * gpus, gpu_type="helios",
                          gpu_mem_gb=gpu_mem_gb)

    try:
        servers = [server(int(gpus_per_server))] * full + ([server(rest)] if rest else [])
    except ValueError as e:
        raise TraceError(str(e), path=p, line=n) from None
    given = {"gpus_per_server": (gpus_per_server, 8), "cpus_per_gpu": (cpus_per_gpu, 3.0),
             "mem_per_gpu": (mem_per_gpu_gb, 62.5), "gpu_mem": (gpu_mem_gb, 32.0)}
    # the day and the virtual clusters it was sized from, and the options that changed it, in its name
    return _cluster(p, servers, "helios", [f"date={cell['date']}", *([f"vc={'/'.join(names)}"] if wanted else []),
                                           *(f"{k}={v:g}" for k, (v, default) in given.items() if v != default)])


def _cluster(p: Path, servers: list[ServerSpec], kind: str, options: Sequence[str] = ()) -> ClusterSpec:
    """The servers as a cluster named ``kind:FILE[,options]``: the options that changed it are in the name, which
    runs.csv and metrics.json record (a sweep over ``cpus_per_gpu=`` or ``gpu_type=`` tells its clusters apart)."""
    if not servers:
        raise TraceError("no server with GPUs", path=p)
    try:
        return ClusterSpec(servers=tuple(servers), name=",".join([f"{kind}:{p.name}", *options]))
    except ValueError as e:
        raise TraceError(str(e), path=p) from None
