"""Traces: the Synergy trace generator, the Standard Workload Format reader, and perfpredict's CSV format.

Every reader returns :class:`~perfpredict.sched.job.Job` s with ``work`` in *reference seconds* (the run time
at the job's requested GPUs with its perf model's reference CPUs and memory, see :mod:`perfpredict.sched.job`)
and ``arrival`` in seconds from the start of the trace. Malformed input raises :class:`TraceError` naming the
file and line, never an exception from deep inside a parser.

Synergy's production-derived trace (seed 001 §5.1), :func:`synergy_trace`
    * duration ``10**x`` minutes, ``x ~ U[1.5, 3]`` with probability 0.8 and ``U[3, 4]`` with 0.2 — the
      duration at the GPU-proportional allocation, hence ``Job.work``;
    * arrivals all at 0 (static trace) or a Poisson process of ``load_jobs_per_hour`` (dynamic trace);
    * a model per job: the task by the workload split (exact counts, shuffled — the paper's split is the
      percentage of jobs of each task in the trace), then a Table 4 model of that task uniformly (the paper
      does not weigh the models of a task);
    * GPU demand 1, or for multi-GPU traces a Philly-like distribution, :data:`PHILLY_LIKE_GPU_DEMAND`. The
      paper says only that the demand is extracted from the Philly trace and that jobs ask for "up to 16
      GPUs" (§5.1, §5.3.2); the authors' released generator keeps Philly demands of 1, 2, 4, 8, 16 and, in its
      synthetic mode, draws 1/2/4/8 GPUs with probabilities 0.70/0.10/0.15/0.05 (the Gavel distribution). We
      take those probabilities and move one point of the 8-GPU mass to 16 GPUs, so the largest class the paper
      names exists but stays rare, as large jobs are in Philly.

    Arrivals, durations, tasks/models and GPU demands come from independent streams of one seed, so two
    traces with the same seed and different loads (or single vs multi-GPU) share everything else — common
    random numbers for comparing loads.

Standard Workload Format (Parallel Workloads Archive), :func:`read_swf`
    ``;`` header lines (``; Key: value`` pairs are kept), then 18 whitespace-separated fields per job, ``-1``
    meaning unknown. Seed 002 (§VI) replays HPC2N "treating a CPU in the workload as a GPU", so by default
    one processor is one GPU (``gpus_per_proc=1``); ``gpus = ceil(procs * gpus_per_proc)`` otherwise (e.g.
    ``1/8`` for 8-core nodes with one GPU each), at least 1. The processors are the allocated ones (field 5,
    what the run time was measured on), else the requested ones (field 8). ``work`` is the run time: the job
    is taken to need its recorded run time on its mapped GPUs (seed 002's volume ``runtime x procs`` is then
    ``work x gpus`` under its linear speedup). Jobs with a non-positive run time or processor count, or an
    unknown submit time, are skipped and counted (:func:`read_swf_report`).

CSV (perfpredict's own), :func:`read_csv_trace` / :func:`write_csv_trace`
    A header row naming the columns, in any order: ``id``, ``arrival_s``, ``gpus``, ``work_s`` (required),
    ``model``, ``task``, ``user``, ``min_gpus``, ``max_gpus``, ``priority``, ``deadline_s``, ``qos``,
    ``weight``, ``epochs`` (optional; a blank cell is "not given"; ``weight`` is ANDREAS' tardiness weight ω,
    ``epochs`` the checkpoint count). ``arrival_s`` is seconds from the trace start, ``work_s``
    reference seconds, ``deadline_s`` an absolute time on the same clock as ``arrival_s``. Lines starting
    with ``#`` before the header are comments (provenance); blank lines are ignored. Unknown columns are an error (a misspelt optional column must not be silently
    ignored). A field may be quoted but holds no line break: a record spanning lines is a quote left open.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import heapq
import io
import logging
import math
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfpredict.errors import PerfPredictError
from perfpredict.sched.cluster import MAX_TRACE_JOBS
from perfpredict.sched.job import Job
from perfpredict.sched.paper_cards import SYNERGY_TASK_MODELS

__all__ = [
    "CSV_COLUMNS", "DL_MAX_CONCURRENCY", "DL_MEAN_CONCURRENCY", "PHILLY_LIKE_GPU_DEMAND", "SwfReport", "TraceError", "TraceReport", "load_trace", "read_csv_trace", "read_swf",
    "dl_bag_trace", "read_swf_report", "synergy_trace", "with_synergy_models", "write_csv_trace",
]

log = logging.getLogger(__name__)

#: GPU demand -> probability for multi-GPU Synergy traces (see the module docstring for why these).
PHILLY_LIKE_GPU_DEMAND: dict[int, float] = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.04, 16: 0.01}
_TASKS = ("image", "language", "speech")


class TraceError(PerfPredictError, ValueError):
    """Malformed trace input: ``<file>: line <n>: <what is wrong>`` (a :class:`ValueError` too)."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None) -> None:
        super().__init__(message, source=None if path is None else str(path),
                         step=None if line is None else f"line {line}")
        self.path = None if path is None else str(path)
        self.line = line


# ---------------------------------------------------------------------------------------------------------
# Synergy's generator
# ---------------------------------------------------------------------------------------------------------
def synergy_trace(n_jobs: int, *, load_jobs_per_hour: float | None = None,
                  split: Sequence[float] = (20, 70, 10), multi_gpu: bool = False, seed: int = 0,
                  gpu_demand: Mapping[float, float] | None = None) -> list[Job]:
    """``n_jobs`` jobs of Synergy's production-derived trace (seed 001 §5.1), deterministic for ``seed``.

    ``load_jobs_per_hour``: Poisson arrival rate λ (mean gap 3600/λ s, the first job one gap after 0);
    ``None`` is the static trace (all jobs at 0). ``split``: percent of image, language and speech jobs
    (normalised, so (33, 33, 33) works). ``multi_gpu``: draw demands from ``gpu_demand`` (default
    :data:`PHILLY_LIKE_GPU_DEMAND`) instead of 1. Job ids are ``"0"`` .. ``str(n_jobs - 1)`` in arrival order.
    """
    if not 0 <= n_jobs <= MAX_TRACE_JOBS:
        raise ValueError(f"n_jobs must be from 0 to {MAX_TRACE_JOBS:,}, got {n_jobs}")
    if load_jobs_per_hour is not None and not (load_jobs_per_hour > 0 and math.isfinite(load_jobs_per_hour)):
        raise ValueError(f"load_jobs_per_hour must be a positive number or None, got {load_jobs_per_hour}")
    weights = _split_weights(split)
    demand = dict(gpu_demand) if gpu_demand is not None else PHILLY_LIKE_GPU_DEMAND
    if not demand or any(not (0 < g < math.inf and 0 <= p < math.inf) for g, p in demand.items()) \
            or sum(demand.values()) <= 0:
        raise ValueError(f"gpu_demand must map positive GPU counts to non-negative probabilities, got {demand}")

    arr_rng, dur_rng, task_rng, gpu_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))

    if load_jobs_per_hour is None:
        arrivals = np.zeros(n_jobs)
    else:
        arrivals = np.cumsum(arr_rng.exponential(3600.0 / load_jobs_per_hour, size=n_jobs))

    long = dur_rng.random(n_jobs) < 0.2
    x = np.where(long, dur_rng.uniform(3.0, 4.0, n_jobs), dur_rng.uniform(1.5, 3.0, n_jobs))
    work = 60.0 * 10.0 ** x

    picked = _synergy_models(n_jobs, weights, task_rng)

    if multi_gpu:
        keys = sorted(demand)  # demand[int(size)] was a KeyError for a fractional size such as 0.5
        sizes = np.array(keys, dtype=float)
        probs = np.array([demand[k] for k in keys], dtype=float)
        gpus = gpu_rng.choice(sizes, size=n_jobs, p=probs / probs.sum())
    else:
        gpus = np.ones(n_jobs)

    return [Job(id=str(i), arrival=float(arrivals[i]), gpus=float(gpus[i]), work=float(work[i]), model=model,
                task=task) for i, (task, model) in enumerate(picked)]


def _split_weights(split: Sequence[float]) -> np.ndarray:
    weights = np.asarray(split, dtype=float)
    if weights.shape != (3,) or np.any(weights < 0) or not np.all(np.isfinite(weights)) or weights.sum() <= 0:
        raise ValueError(f"split must be three non-negative percentages (image, language, speech), got {split}")
    return weights


def _synergy_models(n: int, weights: np.ndarray, rng: np.random.Generator) -> list[tuple[str, str]]:
    """(task, model) for ``n`` jobs: exact split counts shuffled, then a Table 4 model of the task uniformly."""
    counts = _exact_counts(weights / weights.sum(), n)
    tasks = np.repeat(np.arange(3), counts)
    rng.shuffle(tasks)
    model_pick = rng.random(n)
    out = []
    for i in range(n):
        task = _TASKS[int(tasks[i])]
        names = SYNERGY_TASK_MODELS[task]
        out.append((task, names[min(int(model_pick[i] * len(names)), len(names) - 1)]))
    return out


def with_synergy_models(jobs: Sequence[Job], split: Sequence[float] = (20, 70, 10), *, seed: int = 0) -> list[Job]:
    """``jobs`` with a Synergy model each, as :func:`synergy_trace` assigns them (seed 001 §5.1: exact workload
    split counts of image / language / speech jobs, shuffled, then a Table 4 model of the task uniformly).

    The paper builds its traces from Philly's arrivals, durations and GPU demands and gives each job a model by
    the split; this does that for a trace read from a file (e.g. :func:`~perfpredict.sim.public_traces.read_philly`),
    so Synergy's mechanisms have CPU and memory sensitivities to act on. Deterministic for ``seed``; arrivals,
    demands and work are kept.
    """
    picked = _synergy_models(len(jobs), _split_weights(split), np.random.default_rng(seed))
    return [dataclasses.replace(j, model=model, task=task) for j, (task, model) in zip(jobs, picked, strict=True)]


#: Seed 002 §V-A: processes observed on a GPU together with a task, on average over the tasks, and at most.
DL_MEAN_CONCURRENCY = 3.95
DL_MAX_CONCURRENCY = 16


def _mcnn_concurrency(opennmt_bag_share: float, mean_concurrency: float, max_concurrency: int) -> float:
    """Binomial ``q`` of an MCNN bag's concurrency ``1 + Binomial(max - 1, q)`` that makes the task-weighted mean
    over the workload (OpenNMT bags run at concurrency 1) equal to ``mean_concurrency``."""
    want = (mean_concurrency - opennmt_bag_share) / max(1e-12, 1.0 - opennmt_bag_share)
    return min(1.0, max(0.0, (want - 1.0) / max(1, max_concurrency - 1)))


def _inv_concurrency_mean(q: float, max_concurrency: int) -> float:
    """E[1/c] for c = 1 + Binomial(max - 1, q)."""
    n = max_concurrency - 1
    if q <= 0.0:  # c = 1 always (k * log(0) would be 0 * -inf = nan at k = 0)
        return 1.0
    if q >= 1.0:  # c = max_concurrency always
        return 1.0 / (n + 1)
    k = np.arange(n + 1)
    logc = np.array([math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1) for x in k])
    with np.errstate(divide="ignore"):
        logp = logc + k * (math.log(q) if q > 0 else -np.inf) + (n - k) * (math.log1p(-q) if q < 1 else -np.inf)
    pmf = np.exp(np.where(np.isfinite(logp), logp, -np.inf))
    pmf = pmf / pmf.sum()
    return float(np.sum(pmf / (k + 1)))


def dl_bag_trace(n_tasks: int, *, users: int = 14, tasks_per_bag: float = 33.5, bags_per_day: float = 12.0,
                 median_runtime_s: float = 1800.0, runtime_sigma: float = 1.4, opennmt_share: float = 0.2,
                 concurrency: float = DL_MEAN_CONCURRENCY, max_concurrency: int = DL_MAX_CONCURRENCY,
                 start_gap_s: float = 60.0, seed: int = 0) -> list[Job]:
    """A synthetic stand-in for seed 002's in-house DL workload (the trace itself is not public).

    Seed 002's trace is what a daemon saw on its production cluster (§V-A): each task is a process observed on
    a GPU for more than 300 s, recorded by its *start* and completion time, its concurrency ``c`` (processes
    on the GPU with it: 3.95 on average, 16 at most) and its device memory; its volume (run time alone on one
    GPU) is ``v = (t_cmp - t_bgn) / c``. There is no submission time, so the replay's arrival is the observed
    start. A job (bag) is "tasks that start during or within one minute after finishing the execution of
    another task of the same user" (§III-C): 77 677 tasks in 2 317 jobs, 33.5 per bag, from 14 users. This
    generator produces such records by running each bag the way those statistics describe it:

    * bags arrive as a Poisson process (``bags_per_day``; 2 317 jobs in six months is 12.7 a day), each with a
      random user and a geometric number of tasks of mean ``tasks_per_bag``;
    * a bag is one application, a parameter survey of one network (§II): OpenNMT or MCNN. OpenNMT tasks use
      > 90% of a 12 GB GPU and "may not share a GPU" (§V-B), so an OpenNMT bag runs one task at a time
      (``c = 1``); an MCNN bag (~20% of the memory, §II-B) runs ``c = 1 + Binomial(max_concurrency - 1, q)``
      tasks at a time on its GPU, with ``q`` such that the task-weighted mean concurrency of the workload is
      ``concurrency`` (§V-A's 3.95; at most §V-A's 16). The share of OpenNMT bags is set so that OpenNMT
      carries ``opennmt_share`` of the volume (an assumption: the paper says only that MCNN and OpenNMT
      together carry 97% of it);
    * each task's observed run time is lognormal (median ``median_runtime_s``, shape ``runtime_sigma``; Fig. 2
      plots it on a log scale, its values are not in the text) and at least 300 s (the daemon's threshold);
      its volume, ``Job.work``, is that run time divided by ``c``;
    * a bag's first ``c`` tasks start at its arrival; every later one starts when one of its running tasks
      ends, plus a uniform gap of up to ``start_gap_s`` (the job definition's minute).

    So a bag arrives over its lifetime, a wave of ``c`` tasks and then one task per completion, not all at
    one instant. Load is then set by the cluster size, as in the paper (fewer GPUs = more congested).
    """
    if n_tasks > MAX_TRACE_JOBS:
        raise ValueError(f"n_tasks must be at most {MAX_TRACE_JOBS:,}, got {n_tasks}")
    if (n_tasks < 0 or users <= 0 or tasks_per_bag < 1 or bags_per_day <= 0 or not 0 <= opennmt_share < 1
            or max_concurrency < 1 or not 1 <= concurrency <= max_concurrency or start_gap_s < 0
            or not median_runtime_s > 0 or not runtime_sigma >= 0):
        raise ValueError("need n_tasks >= 0, users > 0, tasks_per_bag >= 1, bags_per_day > 0, 0 <= opennmt_share < 1, "
                         "1 <= concurrency <= max_concurrency, start_gap_s >= 0, median run time > 0, sigma >= 0")
    # OpenNMT's share of bags b and MCNN's binomial q, consistently: OpenNMT volume / all volume = opennmt_share
    # with E[v] = E[r] for OpenNMT and E[r]·E[1/c] for MCNN; task-weighted mean concurrency = ``concurrency``.
    b = opennmt_share
    for _ in range(100):
        q = _mcnn_concurrency(b, concurrency, max_concurrency)
        inv = _inv_concurrency_mean(q, max_concurrency)
        b_new = opennmt_share * inv / (opennmt_share * inv + (1.0 - opennmt_share)) if opennmt_share > 0 else 0.0
        if abs(b_new - b) < 1e-12:
            break
        b = b_new
    q = _mcnn_concurrency(b, concurrency, max_concurrency)
    rng = np.random.default_rng(seed)
    recs: list[tuple[float, float, str, str]] = []  # start, volume, model, user
    t_bag = 0.0
    while len(recs) < n_tasks:
        t_bag += rng.exponential(86400.0 / bags_per_day)
        user = f"u{int(rng.integers(users))}"
        size = min(int(rng.geometric(1.0 / tasks_per_bag)), n_tasks - len(recs))
        model = "opennmt" if rng.random() < b else "mcnn"
        c = 1 if model == "opennmt" else 1 + int(rng.binomial(max_concurrency - 1, q))
        ends = [t_bag] * min(c, size)  # when each of the bag's c slots is next free; a min-heap
        heapq.heapify(ends)
        for k in range(size):
            free = heapq.heappop(ends)
            start = free if k < c else free + float(rng.uniform(0.0, start_gap_s))
            runtime = max(300.0, float(rng.lognormal(math.log(median_runtime_s), runtime_sigma)))
            heapq.heappush(ends, start + runtime)
            recs.append((start, runtime / c, model, user))
    recs.sort(key=lambda r: r[0])
    return [Job(id=str(i), arrival=start, gpus=1.0, work=v, model=model,
                task="language" if model == "opennmt" else "image", user=user)
            for i, (start, v, model, user) in enumerate(recs)]


def _exact_counts(fractions: np.ndarray, n: int) -> np.ndarray:
    """Integer counts summing to ``n`` closest to ``fractions * n`` (largest remainder)."""
    raw = fractions * n
    counts = np.floor(raw).astype(int)
    short = n - int(counts.sum())
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


# ---------------------------------------------------------------------------------------------------------
# reading files
# ---------------------------------------------------------------------------------------------------------
def _open_text(path: Path) -> io.TextIOBase:
    try:
        if path.suffix.lower() == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")
    except OSError as e:
        raise TraceError(f"cannot read: {e.strerror or e}", path=path) from None


#: the longest line a trace may have (an SWF record or a CSV row is a few hundred characters): /dev/zero or a
#: huge file without line breaks used to be read whole as its first line
MAX_LINE_CHARS = 2**20


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a text file, decoding and I/O errors as :class:`TraceError`."""
    with _open_text(path) as f:
        n = 0
        try:
            while text := f.readline(MAX_LINE_CHARS + 1):
                n += 1
                if len(text) > MAX_LINE_CHARS:
                    raise TraceError(f"a line longer than {MAX_LINE_CHARS:,} characters: not a trace", path=path,
                                     line=n)
                yield n, text
        except UnicodeDecodeError:
            raise TraceError("not a UTF-8 text file", path=path, line=n + 1) from None
        except (OSError, EOFError, zlib.error) as e:  # zlib.error: a corrupt .gz (not an OSError)
            raise TraceError(f"cannot read: {e}", path=path, line=n + 1) from None


def _number(token: str, what: str, path: Path, line: int) -> float:
    try:
        v = float(token)
    except ValueError:
        raise TraceError(f"{what} is not a number: {token!r}", path=path, line=line) from None
    if not math.isfinite(v):
        raise TraceError(f"{what} is not finite: {token!r}", path=path, line=line)
    return v


# -- SWF ------------------------------------------------------------------------------------------------------
_SWF_FIELDS = ("job number", "submit time", "wait time", "run time", "allocated processors", "average CPU time",
               "used memory", "requested processors", "requested time", "requested memory", "status", "user id",
               "group id", "executable", "queue", "partition", "preceding job", "think time")


@dataclass
class TraceReport:
    """What a trace reader read: the jobs, how many records it skipped and why, the header pairs (SWF's
    ``; Key: value`` lines; :func:`read_swf_report` and the readers of :mod:`perfpredict.sim.public_traces`)."""

    jobs: list[Job]
    skipped: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)
    header: dict[str, str] = field(default_factory=dict)
    #: submit time (trace clock, s) that arrival 0 corresponds to
    time_origin: float = 0.0
    #: job records read (kept and skipped)
    records: int = 0

    def skip_summary(self, path: str | Path) -> str:
        """``t.swf: skipped 2 of 4 job records (non-positive run time: 1, unknown submit time: 1)``."""
        return (f"{path}: skipped {self.skipped} of {self.records} job records ("
                + ", ".join(f"{k}: {c}" for k, c in sorted(self.skip_reasons.items())) + ")")


#: the name :func:`read_swf_report`'s report had before the other readers shared it
SwfReport = TraceReport


def read_swf_report(path: str | Path, *, gpus_per_proc: float = 1.0, max_jobs: int | None = None,
                    model: str = "linear", min_gpus: float | None = None, max_gpus: float | None = None) -> TraceReport:
    """Read a Standard Workload Format file (``.swf`` or ``.swf.gz``); see the module docstring for the mapping.

    ``max_jobs``: stop after that many kept jobs. ``model``: the perf-model key every job gets (default
    ``"linear"``, seed 002's model for its HPC2N runs: perfect speedup and no device memory, so a rigid job
    runs for its recorded run time). ``min_gpus``/``max_gpus``: set on every job (seed 002 uses
    (1, 240) for its moldable runs); ``None`` leaves them unset.
    """
    p = Path(path)
    # TraceError (a ValueError too): one readable error from the Python API as from the CLI
    if isinstance(gpus_per_proc, bool) or not isinstance(gpus_per_proc, (int, float)) \
            or not (gpus_per_proc > 0 and math.isfinite(gpus_per_proc)):
        raise TraceError(f"gpus_per_proc must be a positive number, got {gpus_per_proc!r}", path=path)
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 0):
        raise TraceError(f"max_jobs must be a whole number >= 0, got {max_jobs!r}", path=path)
    rep = TraceReport(jobs=[])
    raw: list[tuple[str, float, float, float, str, int]] = []  # id, submit, run, gpus, user, line
    seen: dict[str, int] = {}

    def skip(reason: str) -> None:
        rep.skipped += 1
        rep.skip_reasons[reason] = rep.skip_reasons.get(reason, 0) + 1

    for n, text in _lines(p):
        if max_jobs is not None and len(raw) >= max_jobs:
            break
        s = text.strip()
        if n == 1:
            s = s.lstrip("\ufeff").strip()  # a byte-order mark, as the CSV reader drops it
        if not s:
            continue
        if s.startswith(";"):
            key, sep, value = s.lstrip(";").partition(":")
            if sep and key.strip() and " " not in key.strip():
                rep.header[key.strip()] = value.strip()
            continue
        tokens = s.split()
        if len(tokens) != len(_SWF_FIELDS):
            raise TraceError(f"expected {len(_SWF_FIELDS)} whitespace-separated fields, got {len(tokens)}",
                             path=p, line=n)
        v = [_number(tok, name, p, n) for tok, name in zip(tokens, _SWF_FIELDS, strict=True)]
        for i in (1, 3, 4, 7, 11):  # the fields used: -1 is "unknown", anything below is malformed
            if v[i] < -1:
                raise TraceError(f"{_SWF_FIELDS[i]} is negative ({tokens[i]}); SWF uses -1 for unknown",
                                 path=p, line=n)
        job_id = tokens[0] if not v[0].is_integer() else str(int(v[0]))
        if job_id in seen:
            raise TraceError(f"job number {job_id} already used on line {seen[job_id]}", path=p, line=n)
        seen[job_id] = n
        submit, run_time = v[1], v[3]
        procs = v[4] if v[4] > 0 else v[7]
        if submit < 0:
            skip("unknown submit time")
            continue
        if run_time <= 0:
            skip("non-positive run time")
            continue
        if procs <= 0:
            skip("non-positive processors")
            continue
        wanted = procs * gpus_per_proc
        if not math.isfinite(wanted):  # math.ceil(inf) raised OverflowError
            raise TraceError(f"{_SWF_FIELDS[4 if v[4] > 0 else 7]} {tokens[4 if v[4] > 0 else 7]} x gpus_per_proc "
                             f"{gpus_per_proc!r} is not a finite number of GPUs", path=p, line=n)
        gpus = max(1.0, float(math.ceil(wanted - 1e-9)))
        user = str(int(v[11])) if v[11] >= 0 else ""
        raw.append((job_id, submit, run_time, gpus, user, n))

    origin = min((r[1] for r in raw), default=0.0)
    rep.time_origin = origin
    for job_id, submit, run_time, gpus, user, n in sorted(raw, key=lambda r: r[1]):  # stable: file order on ties
        rep.jobs.append(_job(p, n, id=job_id, arrival=submit - origin, gpus=gpus, work=run_time, model=model,
                             user=user, min_gpus=min_gpus, max_gpus=max_gpus))
    rep.records = rep.skipped + len(raw)
    return rep


def read_swf(path: str | Path, *, gpus_per_proc: float = 1.0, max_jobs: int | None = None, model: str = "linear",
             min_gpus: float | None = None, max_gpus: float | None = None) -> list[Job]:
    """The jobs of an SWF file (:func:`read_swf_report` without the report; skipped records are logged)."""
    rep = read_swf_report(path, gpus_per_proc=gpus_per_proc, max_jobs=max_jobs, model=model, min_gpus=min_gpus,
                          max_gpus=max_gpus)
    if rep.skipped:
        log.warning("%s", rep.skip_summary(path))
    return rep.jobs


def _job(path: Path, line: int, **kwargs) -> Job:
    """A Job, its own validation errors reported as :class:`TraceError` at ``line``."""
    try:
        return Job(**kwargs)
    except ValueError as e:
        raise TraceError(str(e), path=path, line=line) from None


# -- CSV ------------------------------------------------------------------------------------------------------
#: Column order written by :func:`write_csv_trace`; the first four are required.
CSV_COLUMNS: tuple[str, ...] = ("id", "arrival_s", "gpus", "work_s", "model", "task", "user", "min_gpus",
                                "max_gpus", "priority", "deadline_s", "qos", "weight", "epochs")
_CSV_REQUIRED = CSV_COLUMNS[:4]


def read_csv_trace(path: str | Path) -> list[Job]:
    """Read perfpredict's CSV trace format (see the module docstring); jobs in file order."""
    p = Path(path)
    numbered = _NumberedLines(_csv_lines(p))
    # not strict=True: that also refused `"resnet18" ,` (a space after a closing quote), which spreadsheets write;
    # a quote left open is found by _one_line_record instead
    reader = csv.reader(numbered)
    try:
        header = _one_line_record(next(reader), numbered, p)
    except StopIteration:
        raise TraceError("empty: no header row", path=p) from None
    except csv.Error as e:
        raise TraceError(f"bad CSV: {e}", path=p, line=numbered.line) from None
    cols = [h.strip() for h in header]
    unknown = [c for c in cols if c not in CSV_COLUMNS]
    if unknown:
        raise TraceError(f"unknown column(s) {', '.join(map(repr, unknown))}; columns are {', '.join(CSV_COLUMNS)}",
                         path=p, line=numbered.line)
    missing = [c for c in _CSV_REQUIRED if c not in cols]
    if missing:
        raise TraceError(f"missing required column(s) {', '.join(missing)}", path=p, line=numbered.line)
    if len(set(cols)) != len(cols):
        raise TraceError("a column appears twice in the header", path=p, line=numbered.line)

    jobs: list[Job] = []
    seen: dict[str, int] = {}
    while True:
        numbered.first = 0
        try:
            row = _one_line_record(next(reader), numbered, p)
        except StopIteration:
            break
        except csv.Error as e:
            raise TraceError(f"bad CSV: {e}", path=p, line=numbered.line) from None
        n = numbered.line
        if len(row) != len(cols):
            comment = row and row[0].lstrip().startswith("#")
            raise TraceError(f"expected {len(cols)} fields (as the header), got {len(row)}"
                             + ("; # comment lines are read only before the header (after it, # may begin a job "
                                "id)" if comment else ""), path=p, line=n)
        cell = {c: v.strip() for c, v in zip(cols, row, strict=True)}
        for c in _CSV_REQUIRED:
            if not cell[c]:
                raise TraceError(f"{c} is blank", path=p, line=n)
        job_id = cell["id"]
        if job_id in seen:
            raise TraceError(f"job id {job_id!r} already used on line {seen[job_id]}", path=p, line=n)
        seen[job_id] = n

        def opt_num(c: str, cell: dict[str, str] = cell, n: int = n) -> float | None:
            return _number(cell[c], c, p, n) if cell.get(c) else None

        priority = opt_num("priority")
        if priority is not None and not priority.is_integer():
            raise TraceError(f"priority must be an integer, got {cell['priority']!r}", path=p, line=n)
        epochs = opt_num("epochs")
        if epochs is not None and not epochs.is_integer():
            raise TraceError(f"epochs must be an integer, got {cell['epochs']!r}", path=p, line=n)
        weight = opt_num("weight")
        jobs.append(_job(p, n, id=job_id, arrival=_number(cell["arrival_s"], "arrival_s", p, n),
                         gpus=_number(cell["gpus"], "gpus", p, n), work=_number(cell["work_s"], "work_s", p, n),
                         model=cell.get("model", ""), task=cell.get("task", ""), user=cell.get("user", ""),
                         min_gpus=opt_num("min_gpus"), max_gpus=opt_num("max_gpus"),
                         priority=0 if priority is None else int(priority), deadline=opt_num("deadline_s"),
                         qos=cell.get("qos") or None, weight=1.0 if weight is None else weight,
                         epochs=None if epochs is None else int(epochs)))
    return jobs


def _one_line_record(row: list[str], numbered: _NumberedLines, path: Path) -> list[str]:
    """``row``, unless it took more than one line: no field of a trace holds a line break, so a record that spans
    lines is a quote left open, which would take the rest of the file as one value."""
    if any("\n" in v or "\r" in v for v in row):
        first = numbered.first or numbered.line
        span = f"lines {first}-{numbered.line}" if numbered.line > first else f"line {first} and the end of the file"
        raise TraceError(f"a field spans {span}: a quote left open on line {first}? (no field of a trace holds a "
                         "line break)", path=path, line=first)
    return row


def _csv_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines, without the ``#`` comment lines before the header (after it, ``#`` starts data)."""
    in_preamble = True
    for n, text in _lines(path):
        if n == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark (spreadsheet exports) is not part of the header
        if not text.strip():
            continue
        if in_preamble and text.lstrip().startswith("#"):
            continue
        in_preamble = False
        yield n, text


class _NumberedLines:
    """Feeds (line number, text) pairs to ``csv.reader`` and remembers the file line of the last one read."""

    def __init__(self, lines: Iterable[tuple[int, str]]) -> None:
        self._it = iter(lines)
        self.line = 0
        #: the line the record being read began on (0: set by the next line read)
        self.first = 0

    def __iter__(self) -> _NumberedLines:
        return self

    def __next__(self) -> str:
        self.line, text = next(self._it)
        self.first = self.first or self.line
        # a last line without its newline: a quote left open there would end the field silently at the end of
        # the file (csv's non-strict mode), where with the newline the field holds a line break and is caught
        return text if text.endswith(("\n", "\r")) else text + "\n"


def write_csv_trace(jobs: Iterable[Job], path: str | Path) -> Path:
    """Write ``jobs`` in the CSV format :func:`read_csv_trace` reads (all columns; blanks for ``None``).

    Numbers are written exactly (``repr`` of the float; integral values without a fraction), so reading the
    file back gives equal jobs.
    """
    jobs = list(jobs)
    seen_ids: set[str] = set()
    for j in jobs:  # the reader takes a field spanning lines for a quote left open: such a file would not read
        for name in ("id", "model", "task", "user", "qos"):
            value = getattr(j, name) or ""
            if "\n" in value or "\r" in value:
                raise ValueError(f"job {j.id!r}: its {name} {value[:80]!r} holds a line break, which a CSV "
                                 "trace cannot")
            if value != value.strip():  # the reader strips cells: " a" would read back as "a" (or clash with it)
                raise ValueError(f"job {j.id!r}: its {name} {value[:80]!r} begins or ends with white space, which "
                                 "a CSV trace does not keep")
        if not j.id:
            raise ValueError("a job with a blank id: a CSV trace's id column is required")
        if j.id in seen_ids:
            raise ValueError(f"job id {j.id!r} appears twice: the reader refuses a CSV trace that repeats an id")
        seen_ids.add(j.id)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for j in jobs:
            w.writerow([j.id, _fmt(j.arrival), _fmt(j.gpus), _fmt(j.work), j.model, j.task, j.user,
                        _fmt(j.min_gpus), _fmt(j.max_gpus), str(j.priority), _fmt(j.deadline), j.qos or "",
                        _fmt(j.weight), "" if j.epochs is None else str(j.epochs)])
    return p


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


# ---------------------------------------------------------------------------------------------------------
def load_trace(path: str | Path, **swf_options) -> list[Job]:
    """A trace file by its suffix: ``.swf`` / ``.swf.gz`` (options go to :func:`read_swf`), ``.csv`` / ``.csv.gz``."""
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    kind = suffixes[-2] if len(suffixes) >= 2 and suffixes[-1] == ".gz" else (suffixes[-1] if suffixes else "")
    if kind == ".swf":
        return read_swf(p, **swf_options)
    if kind == ".csv":
        if swf_options:
            raise TraceError(f"options {sorted(swf_options)} apply to SWF traces only", path=p)
        return read_csv_trace(p)
    raise TraceError(f"unknown trace format {kind or '(no suffix)'!r}; expected .swf or .csv (optionally .gz)",
                     path=p)
