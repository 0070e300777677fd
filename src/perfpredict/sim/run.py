"""One simulation from user-facing inputs: cluster and trace specs, policy and mechanism names, card sources.

This is what ``perfpredict simulate`` and the experiments call. It turns text into objects (with clear errors
for bad input), runs :func:`perfpredict.sim.simulator.simulate`, computes the metrics, and writes the per-job
records (CSV), the metrics (JSON) and plots to an output directory.

Spec formats:

* cluster: a JSON file (see :meth:`perfpredict.sched.cluster.ClusterSpec.from_dict`) or ``SxG`` for S servers
  of G GPUs, optionally with per-server resources: ``16x8:cpus=24,mem=500,gpu_mem=32,type=V100``; or the servers
  a public trace ran on: ``philly:cluster_machine_list[,cpus_per_gpu=3,mem_per_gpu=62.5]``,
  ``pai:pai_machine_spec.csv[,gpu_type=V100/V100M32]``, ``helios:cluster_gpu_number.csv[,date=,vc=]``.
* trace: a ``.csv`` or ``.swf`` file, or a generator: ``synergy:n=1000,load=9,split=20/70/10,multi=0``
  (load in jobs/hour; omit it for a static trace where every job arrives at 0), or seed 002's synthetic DL
  bag-of-tasks workload: ``dlbags:n=2000,bags_per_day=12,median=1800,opennmt=0.2``.
* trace: a public DL-cluster trace with its reader's options after the file,
  ``philly:cluster_job_log[,status=Pass,vc=,attempts=sum|last|span,start=,end=,tz=,max_jobs=,model=,split=]``,
  ``helios:cluster_log.csv[,...]`` or ``pai:pai_task_table.csv,jobs=pai_job_table.csv[,gpu_type=V100,...]``
  (:mod:`perfpredict.sim.public_traces`); a Philly log or a Helios log given as a plain file is recognised.
* ANDREAS (seed 000): cluster ``andreas:nodes=N,case=1|2`` or ``armida``, trace
  ``andreas:nodes=N[,case=,jobs=,load=,phase_h=,seed=]`` or ``andreas-table5``
  (:mod:`perfpredict.sim.andreas_workload`).
* GENIE (seed 003): cluster ``genie[:nodes=4,gpus=4]``, trace ``genie[:rate=10,hours=24,mix=5/35/60,train=0.5,
  batches=8/16/32/64/128,iters=10000/500000,requests=1/2/4,seed=]`` (Table 3,
  :mod:`perfpredict.sim.genie_workload`); runs with GENIE task models also report §7.1's metrics
  (``SimRun.extra["genie"]``: QoS-guarantee %, makespan, average normalised latency).
* Horus (seed 004): cluster ``horus-testbed`` (3 x 4 H100), ``horus-scale`` (128 x 8) or
  ``horus:nodes=3,gpus=4,gpu_mem=80``, trace ``horus-small``, ``horus-large``, ``horus-scale`` or
  ``horus:workload=large,n=100,interarrival=36,load=1.3,seed=`` (jobs are perfpredict's measured H100 points,
  :mod:`perfpredict.sim.horus_workload`); such traces, and mechanisms that share devices (``horus``, ``horus-f``,
  ``obp``, ``pab``), run with GPU sharing (:mod:`perfpredict.sim.sharing`). The schedulers see the shipped
  Predictor's predictions for those jobs, or with cards ``horus:predictions=family-cv`` (and/or
  ``memory=median``) the leave-one-family-out ones.
* cards: ``paper`` (models derived from the seeds' statements, the default) or a directory of
  ``card.json`` files from ``perfpredict profile`` (keyed by the file's stem and by ``model.name``), which
  override paper models of the same name.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.output_paths import output_dir_problem
from perfpredict.sched.base import Mechanism, Policy, UnsupportedInput
from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import Job
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.perf import PerfModel
from perfpredict.sched.policies import make_policy
from perfpredict.sim.job_records import job_records, jobs_table, write_jobs_csv, write_jobs_parquet
from perfpredict.sim.simulator import SimConfig, SimResult, SimulationError, simulate

log = logging.getLogger(__name__)

__all__ = ["SimRun", "load_perf_models", "parse_cluster", "parse_trace", "run_simulation", "trace_seed", "write_outputs"]


def parse_cluster(text: str | Path | ClusterSpec | Mapping[str, Any]) -> ClusterSpec:
    """A cluster from a spec string, a JSON file or the JSON file's content as a dict (see the module
    docstring), checked: at least one GPU (and, by :class:`ClusterSpec` itself, at most
    :data:`~perfpredict.sched.cluster.MAX_SERVERS` servers)."""
    if isinstance(text, ClusterSpec):
        return text
    if isinstance(text, Mapping):
        try:
            spec = ClusterSpec.from_dict(dict(text))
        except (ValueError, TypeError, KeyError, OverflowError) as e:  # OverflowError: a count of inf
            raise UsageError(f"cluster dict: {e}", step="cluster") from None
        text = spec.name
    elif not isinstance(text, (str, Path)):
        raise UsageError(f"cluster must be a spec such as '16x8', a JSON file, a dict or a ClusterSpec, got "
                         f"{type(text).__name__}", step="cluster")
    else:
        if not str(text).strip():
            raise UsageError("cluster is empty: give SERVERSxGPUS like 16x8, a JSON file, or one of the papers' "
                             f"clusters: {', '.join(NAMED_CLUSTERS)}", step="cluster")
        spec = _parse_cluster(str(text))
    if spec.total_gpus <= 0:
        raise UsageError(f"cluster {str(text)!r} has no GPUs", step="cluster")
    return spec


#: The seed papers' clusters by name (their options after a colon are in ``perfpredict simulate --help``).
NAMED_CLUSTERS = ("synergy (16x8)", "armida", "andreas:nodes=N,case=1|2", "genie[:nodes=4,gpus=4]", "horus-testbed",
                  "horus-scale", "horus:nodes=3,gpus=4,gpu_mem=80")


def _parse_cluster(s: str) -> ClusterSpec:
    if s == "synergy":
        return ClusterSpec.homogeneous(16, name="synergy")  # §5.1: 16 servers x 8 GPUs, 24 CPUs, 500 GB
    if s == "armida" or s.startswith("andreas:") or s == "andreas":
        from perfpredict.sim.andreas_workload import cluster_from_spec

        try:
            return cluster_from_spec(s)
        except ValueError as e:
            raise UsageError(f"cluster {s!r}: {e}", step="cluster") from None
    if s == "genie" or s.startswith("genie:"):
        from perfpredict.sim import genie_workload

        try:
            return genie_workload.cluster_from_spec(s)
        except ValueError as e:
            raise UsageError(f"cluster {s!r}: {e}", step="cluster") from None
    if s.partition(":")[0] in _PUBLIC_CLUSTER_OPTIONS and ":" in s and not Path(s).is_file():
        return _public_cluster(s)
    if s in ("horus", "horus-testbed", "horus-scale") or s.startswith("horus:"):
        from perfpredict.sim import horus_workload

        try:
            return horus_workload.cluster_from_spec(s)
        except ValueError as e:
            raise UsageError(f"cluster {s!r}: {e}", step="cluster") from None
    p = Path(s)
    if s.endswith(".json") and p.is_dir():
        raise UsageError(f"cluster {s} is a directory, expected a JSON file or SERVERSxGPUS like 16x8",
                         step="cluster")
    if s.endswith(".json") or p.is_file():
        if not p.exists():
            raise UsageError(f"cluster file {s} does not exist", step="cluster")
        try:
            return ClusterSpec.load(p)
        except OSError as e:
            raise UsageError(f"cluster file {s}: cannot read it ({e.strerror or e})", step="cluster") from None
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as e:
            # OverflowError: 1e999 (inf) as a count; RecursionError: nesting too deep for the JSON reader
            raise UsageError(f"cluster file {s}: {type(e).__name__ + ': ' if isinstance(e, (OverflowError, RecursionError)) else ''}"
                             f"{str(e)[:200]}", step="cluster") from None
    if p.is_dir():
        raise UsageError(f"cluster {s} is a directory, expected a JSON file or SERVERSxGPUS like 16x8",
                         step="cluster")
    head, _, opts = s.partition(":")
    try:
        n, g = (int(x) for x in head.lower().split("x"))
    except ValueError:
        raise UsageError(f"cluster {s!r}: expected a JSON file, SERVERSxGPUS like 16x8[:cpus=24,mem=500], or one of "
                         f"the papers' clusters: {', '.join(NAMED_CLUSTERS)}", step="cluster") from None
    kw: dict[str, Any] = {}
    names = {"cpus": ("cpus", float), "mem": ("mem_gb", float), "gpu_mem": ("gpu_mem_gb", float),
             "type": ("gpu_type", str), "energy": ("energy_cost", float)}
    typed: list[str] = []
    for item in filter(None, opts.split(",")):
        key, _, val = item.partition("=")
        if key not in names:
            raise UsageError(f"cluster {s!r}: unknown option {key!r} (use {', '.join(names)})", step="cluster")
        field_name, conv = names[key]
        if field_name in kw:
            raise UsageError(f"cluster {s!r}: {key} is given twice", step="cluster")
        try:
            kw[field_name] = conv(val)
        except ValueError:
            raise UsageError(f"cluster {s!r}: {key}={val!r} is not a valid value", step="cluster") from None
        if key != "type":
            typed.append(f"{key}={val}")
    try:
        spec = ClusterSpec.homogeneous(n, gpus=g, **kw)
    except ValueError as e:
        raise UsageError(f"cluster {s!r}: {e}", step="cluster") from None
    # the name records the options (runs.csv, metrics.json and MLflow tell a CPU:GPU sweep's clusters apart)
    return replace(spec, name=f"{spec.name}:{','.join(typed)}") if typed else spec


def _names(text: str) -> tuple[str, ...]:
    """``Pass/Killed`` -> ("Pass", "Killed"): a filter's values, slash-separated."""
    names = tuple(x.strip() for x in text.split("/") if x.strip())
    if not names:
        raise ValueError(f"no name in {text!r}")
    return names


#: the clusters the public traces ran on, by spec prefix, and their options (:mod:`perfpredict.sim.public_traces`)
_PUBLIC_CLUSTER_OPTIONS: dict[str, dict[str, Callable[[str], Any]]] = {
    "philly": {"cpus_per_gpu": float, "mem_per_gpu": float},
    "pai": {"gpu_type": _names},
    "helios": {"date": str, "vc": _names, "gpus_per_server": int, "cpus_per_gpu": float, "mem_per_gpu": float,
               "gpu_mem": float},
}


def _file_and_options(spec: str, tables: Mapping[str, Mapping[str, Any]], step: str) -> tuple[str, str, dict[str, str]]:
    """``KIND:PATH[,key=value,...]`` -> (kind, path, options): the path first (it holds no comma), each option one
    ``tables[kind]`` names, else a :class:`UsageError` for ``step`` (``trace`` or ``cluster``) quoting the spec."""
    kind, _, rest = spec.partition(":")
    path, _, opts = rest.partition(",")
    if not path.strip() or "=" in path:
        raise UsageError(f"{step} {spec!r}: give the file first: {kind}:PATH[,option=value,...]", step=step)
    try:
        kv = _kv(opts)
    except UsageError as e:
        raise UsageError(f"{step} {spec!r}: {e.message}", step=step) from None
    unknown = sorted(set(kv) - set(tables[kind]))
    if unknown:
        raise UsageError(f"{step} {spec!r}: unknown {kind} option(s) {unknown}; use {', '.join(tables[kind])}",
                         step=step)
    return kind, path, kv


def _public_cluster(spec: str) -> ClusterSpec:
    """``philly:cluster_machine_list[,cpus_per_gpu=3,mem_per_gpu=62.5]``, ``pai:pai_machine_spec.csv[,gpu_type=
    V100/V100M32]`` or ``helios:cluster_gpu_number.csv[,date=,vc=]``: the servers a public trace ran on."""
    from perfpredict.sim import public_traces, traces

    kind, path, kv = _file_and_options(spec, _PUBLIC_CLUSTER_OPTIONS, "cluster")
    if not Path(path).is_file():
        raise UsageError(f"cluster {spec!r}: {path} is not a file", step="cluster")
    options = _typed_options(spec, kv, _PUBLIC_CLUSTER_OPTIONS[kind], step="cluster")
    try:
        renamed = {{"mem_per_gpu": "mem_per_gpu_gb", "gpu_mem": "gpu_mem_gb"}.get(k, k): v for k, v in options.items()}
        reader = {"philly": public_traces.read_philly_machines, "pai": public_traces.read_pai_machines,
                  "helios": public_traces.read_helios_gpus}[kind]
        return reader(path, **renamed)
    except traces.TraceError as e:
        raise UsageError(str(e), step="cluster") from None


def _kv(spec: str) -> dict[str, str]:
    out = {}
    for item in filter(None, spec.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise UsageError(f"expected key=value, got {item!r}", step="trace")
        if k.strip() in out:  # the last one used to win without a word
            raise UsageError(f"option {k.strip()} is given twice in {spec!r}", step="trace")
        out[k.strip()] = v.strip()
    return out


def parse_trace(text: str | Path | list[Job], seed: int = 0, notes: list[str] | None = None) -> list[Job]:
    """A trace file or a generator spec (see the module docstring) → jobs. ``notes``, when given, gets what the
    reader passed over (an SWF file's skipped records, which are otherwise logged)."""
    if isinstance(text, list):
        return text
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise UsageError(f"seed must be a whole number >= 0, got {seed!r}", step="arguments")
    from perfpredict.sim import traces

    s = str(text)
    if s.startswith("andreas:") or s in ("andreas", "andreas-table5"):
        from perfpredict.sim.andreas_workload import trace_from_spec

        try:
            return trace_from_spec(s, seed)
        except ValueError as e:
            raise UsageError(f"trace {s!r}: {e}", step="trace") from None
    if s == "genie" or s.startswith("genie:"):
        from perfpredict.sim import genie_workload

        try:
            return genie_workload.trace_from_spec(s, seed)
        except ValueError as e:
            raise UsageError(f"trace {s!r}: {e}", step="trace") from None
    if s in ("horus-small", "horus-large", "horus-scale") or s.startswith("horus:"):
        from perfpredict.sim import horus_workload

        try:
            return horus_workload.trace_from_spec(s, seed)
        except ValueError as e:
            raise UsageError(f"trace {s!r}: {e}", step="trace") from None
    if s.startswith("synergy:") or s == "synergy":
        kv = _kv(s.partition(":")[2])
        allowed = {"n", "load", "split", "multi", "seed"}
        if set(kv) - allowed:
            raise UsageError(f"trace {s!r}: unknown option(s) {sorted(set(kv) - allowed)}; use {sorted(allowed)}",
                             step="trace")
        try:
            split = tuple(float(x) for x in kv.get("split", "20/70/10").split("/"))
            if kv.get("multi", "0").lower() not in ("0", "1", "true", "false", "yes", "no"):
                raise ValueError(f"multi={kv['multi']!r}: use 0 or 1")
            n = kv.get("n", "1000")
            if not n.isdigit():
                raise ValueError(f"n={n!r}: the number of jobs is a whole number")
            return traces.synergy_trace(int(n),
                                        load_jobs_per_hour=float(kv["load"]) if "load" in kv else None,
                                        split=split, multi_gpu=kv.get("multi", "0").lower() in ("1", "true", "yes"),
                                        seed=int(kv.get("seed", seed)))
        except ValueError as e:
            raise UsageError(f"trace {s!r}: {e}", step="trace") from None
    if s.startswith("dlbags:") or s == "dlbags":
        kv = _kv(s.partition(":")[2])
        allowed = {"n": int, "users": int, "bag": float, "bags_per_day": float, "median": float, "opennmt": float,
                   "concurrency": float, "seed": int}
        if set(kv) - set(allowed):
            raise UsageError(f"trace {s!r}: unknown option(s) {sorted(set(kv) - set(allowed))}; use {sorted(allowed)}",
                             step="trace")
        a = _typed_options(s, kv, allowed)
        try:
            return traces.dl_bag_trace(a.get("n", 2000), users=a.get("users", 14), tasks_per_bag=a.get("bag", 33.5),
                                       bags_per_day=a.get("bags_per_day", 12.0),
                                       median_runtime_s=a.get("median", 1800.0),
                                       opennmt_share=a.get("opennmt", 0.2),
                                       concurrency=a.get("concurrency", traces.DL_MEAN_CONCURRENCY),
                                       seed=a.get("seed", seed))
        except ValueError as e:
            raise UsageError(f"trace {s!r}: {e}", step="trace") from None
    if s.partition(":")[0] in _PUBLIC_TRACE_OPTIONS and ":" in s and not Path(s).is_file():
        return _public_trace(s, seed, notes)
    p = Path(s)
    swf = _SWF_WITH_OPTIONS.match(s)
    if swf and not p.is_file():
        return _swf_with_options(swf.group(1), swf.group(2), notes)
    if p.is_dir():
        raise UsageError(f"trace {s} is a directory (give a .csv/.swf file or synergy:n=...,load=...)", step="trace")
    if not p.exists():  # a pipe (<(zcat t.csv)) is read as a file is
        kind = s.partition(":")[0]
        if ":" in s and "." not in kind and "/" not in kind:  # foo:n=3: a generator name, not a file
            raise UsageError(f"trace {s!r}: unknown trace kind {kind!r}; generators are synergy, dlbags, andreas, "
                             f"genie and horus (see perfpredict simulate --help), files .csv and .swf", step="trace")
        raise UsageError(f"trace {s} does not exist (give a .csv/.swf file or synergy:n=...,load=...)",
                         step="trace")
    if notes is not None and _SWF_FILE.search(s):
        return _read_swf(p, {}, notes)
    if not _SWF_FILE.search(s):
        from perfpredict.sim import public_traces

        kind = public_traces.sniff_format(p)
        if kind in ("philly", "helios"):
            return _read_public(kind, p, {}, notes)
        if kind == "pai":
            raise UsageError(f"trace {s} looks like Alibaba PAI's pai_task_table.csv (no header, its 10 columns): "
                             f"give pai:{s},jobs=pai_job_table.csv (the job table holds the submission times)",
                             step="trace")
    try:
        return traces.load_trace(p)
    except traces.TraceError as e:
        raise UsageError(str(e), step="trace") from None


def _read_swf(path: str | Path, options: dict[str, Any], notes: list[str] | None) -> list[Job]:
    """An SWF file's jobs; its skipped records go to ``notes`` (then kept in metrics.json), else to the log."""
    from perfpredict.sim import traces

    try:
        if notes is None:
            return traces.read_swf(path, **options)
        rep = traces.read_swf_report(path, **options)
    except traces.TraceError as e:
        raise UsageError(str(e), step="trace") from None
    if rep.skipped:
        notes.append(rep.skip_summary(path))
    return rep.jobs


def trace_seed(trace: str | Path | list[Job], seed: int) -> int | None:
    """The seed a trace was generated with: a generator spec's own ``seed=`` (it wins over ``seed``), else
    ``seed``; None for what no seed changes: a file (options after a colon included), a list of jobs,
    ``andreas-table5``."""
    if isinstance(trace, list):
        return None
    text = str(trace)
    public = text.partition(":")[0] in _PUBLIC_TRACE_OPTIONS and not Path(text).is_file()
    if public and re.search(r",split=", text):  # the Synergy models it assigns are drawn with a seed
        own = re.search(r",seed=(\d+)", text)
        return int(own.group(1)) if own else seed
    if Path(text).is_file() or Path(text.partition(":")[0]).is_file() or text == "andreas-table5" or public:
        return None
    own = re.search(r"(?:^|[:,])seed=(\d+)", text)
    return int(own.group(1)) if own else seed


#: an SWF file with read_swf's options after a colon: ``hpc2n.swf.gz:model=mcnn,gpus_per_proc=1/8,max_jobs=5000``
_SWF_WITH_OPTIONS = re.compile(r"^(.+\.swf(?:\.gz)?):(.*)$", re.IGNORECASE)
_SWF_FILE = re.compile(r"\.swf(?:\.gz)?$", re.IGNORECASE)


def _swf_with_options(path: str, opts: str, notes: list[str] | None = None) -> list[Job]:
    spec = f"{path}:{opts}"
    if not Path(path).is_file():
        raise UsageError(f"trace {path} does not exist", step="trace")

    def number(text: str) -> float:  # 0.125 or 1/8
        num, slash, den = text.partition("/")
        return float(num) / float(den) if slash else float(text)

    kinds: dict[str, Callable[[str], Any]] = {"model": str, "gpus_per_proc": number, "min_gpus": number,
                                              "max_gpus": number, "max_jobs": int}
    kv = _kv(opts)
    unknown = sorted(set(kv) - set(kinds))
    if unknown:
        raise UsageError(f"trace {spec!r}: unknown SWF option(s) {unknown}; use {', '.join(kinds)}", step="trace")
    return _read_swf(path, _typed_options(spec, kv, kinds), notes)


#: the public DL-cluster traces by spec prefix, and the options each takes (:mod:`perfpredict.sim.public_traces`)
_PUBLIC_TRACE_OPTIONS: dict[str, dict[str, Callable[[str], Any]]] = {
    "philly": {"attempts": str, "status": _names, "vc": _names, "start": str, "end": str, "max_jobs": int,
               "model": str, "tz": str},
    "helios": {"status": _names, "vc": _names, "start": str, "end": str, "max_jobs": int, "model": str},
    "pai": {"jobs": str, "status": _names, "gpu_type": _names, "start": float, "end": float, "fractional": str,
            "max_jobs": int, "model": str},
}


def _split(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split("/"))


#: options every public trace takes besides its reader's: Synergy models by a workload split, and their seed
_MODEL_OPTIONS: dict[str, Callable[[str], Any]] = {"split": _split, "seed": int}


def _public_trace(spec: str, seed: int, notes: list[str] | None) -> list[Job]:
    """``philly:PATH[,key=value...]``, ``helios:PATH[,...]`` or ``pai:TASKS[,jobs=JOBS,...]``: a public trace file
    with its reader's options (the path first; it holds no comma). ``split=20/70/10[,seed=]`` gives each job a
    Synergy model by that workload split (:func:`perfpredict.sim.traces.with_synergy_models`)."""
    from perfpredict.sim import traces

    tables = {name: {**options, **_MODEL_OPTIONS} for name, options in _PUBLIC_TRACE_OPTIONS.items()}
    kind, path, kv = _file_and_options(spec, tables, "trace")
    options = _typed_options(spec, kv, tables[kind])
    split, own_seed = options.pop("split", None), options.pop("seed", seed)
    if own_seed < 0:
        raise UsageError(f"trace {spec!r}: seed must be >= 0", step="trace")
    if "seed" in kv and split is None:
        raise UsageError(f"trace {spec!r}: seed= draws the models of split=; give split= too", step="trace")
    if split is not None and "model" in options:
        raise UsageError(f"trace {spec!r}: model= gives every job one model, split= draws Synergy's: give one",
                         step="trace")
    for name in ("jobs", "start", "end", "attempts", "fractional", "model", "tz"):
        if options.get(name) == "":
            raise UsageError(f"trace {spec!r}: {name}= is blank", step="trace")
    for p in (path, options.get("jobs")):
        if p is not None and not Path(p).is_file():
            raise UsageError(f"trace {spec!r}: {p} is not a file", step="trace")
    jobs = _read_public(kind, Path(path), options, notes)
    if split is None:
        return jobs
    try:
        return traces.with_synergy_models(jobs, split, seed=own_seed)
    except ValueError as e:
        raise UsageError(f"trace {spec!r}: {e}", step="trace") from None


def _read_public(kind: str, path: Path, options: dict[str, Any], notes: list[str] | None) -> list[Job]:
    """A public trace's jobs; its skipped records go to ``notes`` (then kept in metrics.json), else to the log."""
    from perfpredict.sim import public_traces, traces

    renamed = {{"status": "statuses", "jobs": "job_table"}.get(k, k): v for k, v in options.items()}
    reader = {"philly": public_traces.read_philly, "helios": public_traces.read_helios,
              "pai": public_traces.read_pai}[kind]
    try:
        rep = reader(path, **renamed)
    except traces.TraceError as e:
        raise UsageError(str(e), step="trace") from None
    if rep.skipped:
        if notes is None:
            log.warning("%s", rep.skip_summary(path))
        else:
            notes.append(rep.skip_summary(path))
    return rep.jobs


def _typed_options(spec: str, kv: Mapping[str, str], kinds: Mapping[str, Callable[[str], Any]],
                   step: str = "trace") -> dict[str, Any]:
    """A generator's or file's ``key=value`` options converted by ``kinds``; a value that does not convert is a
    usage error for ``step`` (``trace`` or ``cluster``) naming it (and, for a converter of our own, why)."""
    out: dict[str, Any] = {}
    for k, v in kv.items():
        try:
            out[k] = kinds[k](v)
        except (ValueError, ZeroDivisionError) as e:
            what = {int: "a whole number", float: "a number"}.get(kinds[k])
            raise UsageError(f"{step} {spec!r}: {k}={v!r} is not {what or f'a valid value ({e})'}",
                             step=step) from None
    return out


def load_perf_models(cards: str | Path | dict[str, PerfModel] | None = "paper",
                     notes: dict[str, list[str]] | None = None,
                     ambiguous: dict[str, list[Path]] | None = None) -> dict[str, PerfModel]:
    """Paper-derived models, overridden by any cards in a directory, or (``horus[:predictions=trained|family-cv,
    memory=safe|median]``) by the Horus jobs' predicted models (:func:`perfpredict.sim.horus_workload.horus_perf_models`).
    ``notes``, when given, gets what a card from the folder leaves out (:func:`card_notes`), by model name;
    ``ambiguous`` the names two or more cards answer to (left out of the models), with their files."""
    if isinstance(cards, dict):
        return cards
    if cards is not None and not isinstance(cards, (str, Path)):
        raise UsageError(f"cards must be 'paper', a folder of card.json files, a horus:... spec or a dict of "
                         f"perf models, got {type(cards).__name__}", step="cards")
    from perfpredict.sched import paper_cards

    models: dict[str, PerfModel] = dict(paper_cards.synergy_models())
    models.update(paper_cards.moldable_models())
    from perfpredict.sched.andreas_cards import andreas_models

    models.update(andreas_models())
    from perfpredict.sched.genie_cards import genie_models

    models.update(genie_models())
    if cards in (None, "paper"):
        return models
    if str(cards) == "horus" or str(cards).startswith("horus:"):
        from perfpredict.sim.horus_workload import perf_models_from_spec

        try:
            return {**models, **perf_models_from_spec(str(cards))}
        except ValueError as e:
            raise UsageError(f"cards {cards!r}: {e}", step="cards") from None
    if not str(cards).strip():
        raise UsageError("cards '' names no folder (Path('') would be the current one): give a folder of cards, "
                         "'paper' or 'horus'", step="cards")
    d = Path(cards)
    if not d.is_dir():
        raise UsageError(f"{d} is not a directory of card.json files (or use 'paper')", step="cards")
    from perfpredict.card import PerformanceCard

    # perfpredict's own output folder also holds ab.json, max_batch*.json and the like beside the cards: a JSON
    # object without a card's schema_version is not a card and is passed over; a card that is broken is an error
    found = [f for f in sorted(d.rglob("*.json")) if f.name == "card.json" or _looks_like_card(f)]
    if not found:
        raise UsageError(f"no card.json files under {d}", step="cards")
    origin: dict[str, list[Path]] = {}
    for f in found:
        try:
            card = PerformanceCard.load(f)
        except PerfPredictError as e:  # a broken card: the user's input, like a bad trace
            raise UsageError(str(e), step="cards") from None
        if card.status == "failed" and card.sensitivity is None and card.speedup_curve is None:
            why = f" ({card.errors[0].message[:200]})" if card.errors else ""
            raise UsageError(f"{f}: a failed profile, no batch size measured{why}: it describes no job; fix the "
                             "model and profile it again, or move the card out of the folder", step="cards")
        # Trace durations are at the GPU-proportional share of Synergy's reference server (3 CPUs, 62.5 GB
        # per GPU): measure every card's grid against that, not against the card's own demand.
        try:
            model = PerfModel.from_card(card, ref_cpus_per_gpu=paper_cards.REF_CPUS_PER_GPU,
                                        ref_mem_per_gpu=paper_cards.REF_MEM_PER_GPU)
        except PerfPredictError as e:
            raise UsageError(f"{f}: {e.message}", step="cards") from None
        except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError) as e:
            # a card that passed the schema but whose sections do not make a model (an empty sensitivity grid,
            # a speedup fit without knots)
            raise UsageError(f"{f}: cannot build a performance model from it ({type(e).__name__}: {e})",
                             step="cards") from None
        keys = dict.fromkeys([card.model.name, f.stem if f.stem != "card" else f.parent.name])
        for key in keys:
            models[key] = model
            origin.setdefault(key, []).append(f)
        if notes is not None:
            said = card_notes(card, f)
            for key in keys:
                notes[key] = said
    # a name two cards answer to (every model.py card is named "model") names neither: the last file read used
    # to win without a word; the trace names such a card by its file or folder name instead
    for key, files in origin.items():
        if len(files) > 1:
            models.pop(key, None)
            if ambiguous is not None:
                ambiguous[key] = files
    return models


def card_notes(card: Any, path: Path) -> list[str]:
    """What a simulation on ``card`` should say about it: a card without a sensitivity matrix or a speedup
    curve (a plain ``perfpredict profile``) leaves those to defaults, and a CPU card stands in for a GPU."""
    out = []
    # (what the card lacks, how the job then runs) for each section a plain `perfpredict profile` leaves out
    missing = [(what, runs) for what, runs, have in (
        ("speedup curve", "linearly in its GPUs (S(n) = n)", card.speedup_curve is not None and card.speedup_curve.fit),
        ("CPU/memory sensitivity matrix", "insensitive to CPUs and memory", card.sensitivity is not None)) if not have]
    if missing:
        out.append(f"card {path}: no {' and no '.join(w for w, _ in missing)} (`perfpredict profile --all` measures "
                   f"them), so the job runs {' and '.join(r for _, r in missing)}")
    if card.device is not None and card.device.kind == "cpu":
        how = "predicted" if card.prediction is not None else "measured"
        out.append(f"card {path} was {how} for a CPU ({card.device.name}): its curves stand in for the cluster's "
                   "GPUs, and it gives no GPU memory or utilisation (a GPU-sharing mechanism such as horus or obp "
                   "packs it as holding no device memory at full utilisation)")
    return out


def _looks_like_card(path: Path) -> bool:
    """Whether a JSON file other than ``card.json`` is a card (``perfpredict predict -o name.json`` writes
    those): an object with a ``schema_version``. Unreadable files count, so that loading them says why."""
    from perfpredict.input_files import CARD_LIMIT_BYTES, read_bounded

    try:
        doc = json.loads(read_bounded(path, CARD_LIMIT_BYTES, "a card"))
    except (OSError, ValueError, RecursionError):  # InputTooLarge and UnicodeDecodeError are ValueErrors
        return True
    return not isinstance(doc, dict) or "schema_version" in doc


@dataclass
class SimRun:
    result: SimResult
    metrics: Any  # perfpredict.sim.metrics.SimMetrics
    params: dict[str, Any]
    out_dir: Path | None = None
    #: metrics of a seed's own (GENIE: ``"genie"``, :func:`perfpredict.sim.genie_workload.genie_metrics`)
    extra: dict[str, Any] = field(default_factory=dict)
    #: what the user should know about the run's inputs (a policy with nothing to order by)
    notes: list[str] = field(default_factory=list)
    #: the files :func:`write_outputs` wrote into ``out_dir`` (what tracking logs: not other files there)
    files: list[Path] = field(default_factory=list)
    #: the arrival indices the JCT statistics (and the JCT CDF) cover, or None for every job
    steady: tuple[int, int] | None = None

    def jobs_frame(self):
        """The per-job records (the columns of ``jobs.csv``/``jobs.parquet``) as a pandas DataFrame."""
        return jobs_table(job_records(self.result)).to_pandas()


def run_simulation(trace: str | Path | list[Job], cluster: str | Path | ClusterSpec | Mapping[str, Any],
                   policy: str | Policy = "fifo", mechanism: str | Mechanism = "proportional", *, cards: str | Path | dict[str, PerfModel] | None = "paper",
                   config: SimConfig | None = None, seed: int = 0, steady: tuple[int, int] | None = None,
                   out_dir: str | Path | None = None,
                   on_decision: Callable[[float, int, int], None] | None = None,
                   mechanism_kwargs: dict[str, Any] | None = None) -> SimRun:
    """Parse, simulate, measure, and (with ``out_dir``) write ``jobs.csv``, ``jobs.parquet``, ``metrics.json``
    and plots. ``policy`` and ``mechanism`` are names (``perfpredict simulate``'s) or instances, a scheduler of
    your own included (subclasses of :class:`~perfpredict.sched.base.Policy` / ``Mechanism``)."""
    from perfpredict.sim.metrics import metrics_from_result

    spec = parse_cluster(cluster)
    trace_notes: list[str] = []
    jobs = parse_trace(trace, seed, trace_notes)
    if not jobs:
        why = f" ({'; '.join(trace_notes)})" if trace_notes else ""  # e.g. the SWF records it skipped, and why
        raise UsageError(f"trace {trace if not isinstance(trace, list) else '(list)'} has no jobs{why}", step="trace")
    if steady is not None:
        try:
            a, b = steady
            if any(isinstance(x, bool) or float(x) != int(x) for x in (a, b)):
                raise ValueError  # 1.5 is not a job index (it used to fail inside the metrics)
            a, b = int(a), int(b)
        except (TypeError, ValueError, OverflowError):
            raise UsageError(f"steady must be a (first, last) pair of job indices, got {steady!r}",
                             step="arguments") from None
        if not 0 <= a < b:
            raise UsageError(f"steady window {a}:{b}: need 0 <= FIRST < LAST", step="arguments")
        if a >= len(jobs):
            raise UsageError(f"steady window {a}:{b} holds no jobs: the trace has {len(jobs)}", step="arguments")
        steady = (a, b)
    if out_dir is not None:  # before simulating: a run that cannot be written would be lost
        od = Path(out_dir)
        problem = output_dir_problem(od)
        if problem:
            raise UsageError(f"out_dir: {problem}", step="arguments")
        try:
            od.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create out_dir {od}: {e.strerror or e}", step="arguments") from None
    said: dict[str, list[str]] = {}
    clashes: dict[str, list[Path]] = {}
    models = load_perf_models(cards, said, clashes)
    used_clash = next((j.model for j in jobs if j.model in clashes), None)
    if used_clash is not None:
        files = clashes[used_clash]
        raise UsageError(f"model {used_clash!r} is the name of {len(files)} cards ({', '.join(map(str, files[:4]))}): "
                         "name the card by its file or folder name in the trace instead", step="cards")
    try:
        pol = policy if isinstance(policy, Policy) else make_policy(policy)
        if isinstance(mechanism, Mechanism):
            if mechanism_kwargs:
                raise ValueError("mechanism_kwargs apply to a mechanism named by a string, not to a Mechanism instance")
            mech = mechanism
        else:
            mech = make_mechanism(mechanism, **(mechanism_kwargs or {}))
    except ValueError as e:
        raise UsageError(str(e), step="arguments") from None
    cfg = config or SimConfig()
    from perfpredict.sim.horus_workload import prepare_sharing

    models, cfg = prepare_sharing(jobs, models, mech, cfg)  # Horus: predicted cards and GPU sharing, if needed
    try:
        result = simulate(jobs, spec, pol, mech, models, cfg, on_decision=on_decision)
    except (SimulationError, UnsupportedInput) as e:
        raise UsageError(str(e), step="simulate") from None
    metrics = metrics_from_result(result, steady=steady)
    params = {"cluster": spec.name, "gpus": spec.total_gpus, "trace": str(trace) if not isinstance(trace, list)
              else f"{len(trace)} jobs", "jobs": len(jobs), "policy": pol.name, "mechanism": mech.name,
              "mode": result.mode, "round_s": cfg.round_s if result.mode == "round" else None,
              "start_overhead_s": cfg.start_overhead_s, "restart_overhead_s": cfg.restart_overhead_s, "seed": trace_seed(trace, seed), "cards": str(cards) if not isinstance(cards, dict) else "custom"}
    used = list(dict.fromkeys(n for j in jobs for n in said.get(j.model, ())))
    run = SimRun(result=result, metrics=metrics, params=params, steady=steady,
                 notes=trace_notes + policy_notes(pol.name, jobs) + fractional_notes(mech, jobs) + used
                 + cut_short_notes(result, cfg, len(jobs))
                 + sharing_notes(result, cfg) + steady_notes(result, steady))
    from perfpredict.sched.genie import GeniePerfModel

    if any(isinstance(js.perf, GeniePerfModel) for js in result.states):
        from perfpredict.sim.genie_workload import genie_metrics

        run.extra["genie"] = genie_metrics(result)
    if out_dir is not None:
        try:
            run.out_dir = write_outputs(run, out_dir)
        except OSError as e:
            where = f" ({e.filename2 or e.filename})" if (e.filename2 or e.filename) else ""
            raise UsageError(f"cannot write the results to {out_dir}{where}: {e.strerror or e}", step="write") \
                from None
    return run


def cut_short_notes(result: SimResult, cfg: SimConfig, n_jobs: int) -> list[str]:
    """A run stopped by ``max_time_s`` before its trace was done: the records hold only the jobs that had
    arrived, and makespan and utilisation span the finished jobs only (first arrival to last finish)."""
    if cfg.max_time_s is None or (not result.unfinished and len(result.states) + len(result.dropped) >= n_jobs):
        return []
    arrived = len(result.states)
    return [f"the run stopped at max_time {cfg.max_time_s:g} s with {len(result.unfinished)} job(s) unfinished and "
            f"{n_jobs - arrived - len(result.dropped)} not yet arrived (left out of the records): makespan and "
            "utilisation span the finished jobs only, from the first arrival to the last finish"]


def steady_notes(result: SimResult, steady: tuple[int, int] | None) -> list[str]:
    """The steady window counts the jobs simulated: with oversized jobs dropped, its indices are not the trace's."""
    if steady is None or not result.dropped:
        return []
    return [f"the steady window {steady[0]}:{steady[1]} counts the {len(result.states)} jobs simulated, in arrival "
            f"order: the {len(result.dropped)} dropped as oversized are not counted, so its indices are not the "
            f"trace's"]


def sharing_notes(result: SimResult, cfg: SimConfig) -> list[str]:
    """GPU sharing (Horus, OBP, PAB) reads each job's solo GPU utilisation and device memory from its perf model
    (or the measured truth). A paper card's has neither, so such a job counts as keeping its GPU 100% busy in 0 GB:
    say so rather than let the run's makespan read as a finding about sharing."""
    if cfg.sharing is None:
        return []
    blind = sorted({js.job.model for js in result.states if js.job.model not in cfg.sharing.truth
                    and (js.perf.gpu_util is None or js.perf.device_mem_gb <= 0)})
    if not blind:
        return []
    return [f"{len(blind)} model(s) of the trace ({', '.join(blind[:5])}{', ...' if len(blind) > 5 else ''}) carry no "
            "GPU utilisation or device memory (a paper card has neither): GPU sharing counted their jobs as keeping "
            "a GPU 100% busy in 0 GB of device memory; predicted or measured cards (perfpredict predict, perfpredict "
            "profile on CUDA) give them both"]


def policy_notes(policy: str, jobs: list[Job]) -> list[str]:
    """A policy whose sort key no job in the trace has orders the jobs as FIFO: say so rather than let a
    comparison read EDF = FIFO as a finding."""
    if policy == "edf" and all(j.deadline is None for j in jobs):
        return ["no job in the trace has a deadline (CSV column deadline_s), so edf ordered them as fifo"]
    if policy == "priority" and len({(j.weight, j.priority) for j in jobs}) == 1:
        return ["every job in the trace has the same weight and priority (CSV columns weight, priority), so "
                "priority ordered them as fifo"]
    return []


def fractional_notes(mech: Mechanism, jobs: list[Job]) -> list[str]:
    """A mechanism that places whole GPUs only (``whole_gpus``: Synergy's, ``horus``, ``obp``, ``pab``,
    ``fifo-exclusive``) gives a demand of part of a GPU (PAI's ``fractional=keep``) a whole device, on which the
    job's perf model runs it faster than the share its work was recorded on (a 50% job twice as fast under
    ``linear``): say so, with the way to avoid it."""
    if not getattr(mech, "whole_gpus", False):
        return []
    parts = [j for j in jobs if abs(j.gpus - round(j.gpus)) > 1e-9]
    if not parts:
        return []
    j = parts[0]
    return [f"{len(parts)} job(s) ask for part of a GPU (e.g. {j.id}: {j.gpus:g}), and {mech.name} places whole "
            f"GPUs: each got its demand rounded up, and its perf model runs it faster on that than on the share its "
            f"work was recorded on (under linear, a 50% job twice as fast); to keep the recorded run times, read "
            f"the trace with fractional=ceil, or use a mechanism that places a share below one GPU (rigid, "
            f"moldable-*, malleable-*)"]


def _finite(x: Any) -> Any:
    """``x`` with every NaN or infinite float (numpy's included) replaced by None, recursively."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) or (hasattr(x, "dtype") and getattr(x, "shape", None) == ()):
        try:
            v = float(x)
        except (TypeError, ValueError):
            return x
        return v if math.isfinite(v) else None
    return x


#: The files a run writes into its folder (the plots only when there is something to draw).
RUN_FILES = ("jobs.csv", "jobs.parquet", "metrics.json", "jct_cdf.png", "utilisation.png")


def write_outputs(run: SimRun, out_dir: str | Path) -> Path:
    """Write the run's files (:data:`RUN_FILES`) into ``out_dir``. They are written in a staging folder there and
    moved into place once all are written: a failure part-way (a value the Parquet schema cannot hold, a full
    disk) leaves an earlier run's files as they were, not new records beside old metrics."""
    import shutil
    import tempfile

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (out / name).is_dir():
            raise IsADirectoryError(errno.EISDIR, "a folder is in the way", str(out / name))
    stage = Path(tempfile.mkdtemp(prefix=".writing-", dir=out))
    try:
        made = _write_run_files(run, stage)
        for f in made:
            f.replace(out / f.name)
        for name in RUN_FILES:  # an earlier run's file this run has none of must not pass for this run's
            if stage / name not in made and (out / name).is_file():
                (out / name).unlink()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    run.files = [out / f.name for f in made]
    return out


def _write_run_files(run: SimRun, out: Path) -> list[Path]:
    rows = job_records(run.result)
    files = [write_jobs_csv(rows, out / "jobs.csv"), write_jobs_parquet(rows, out / "jobs.parquet")]
    doc = {"params": run.params, "metrics": run.metrics.to_dict(),
           "simulation": {"decisions": run.result.decisions, "decision_time_s": run.result.decision_time_s,
                          "wall_s": run.result.wall_s, "end_time_s": run.result.end_time,
                          "unfinished": len(run.result.unfinished), "dropped": len(run.result.dropped),
                          "stall": run.result.stall}}
    if run.result.mechanism_stats:
        doc["mechanism_stats"] = run.result.mechanism_stats
    if run.notes:
        doc["notes"] = run.notes
    doc.update(run.extra)
    # Strict JSON: a metric with no value (no finished job in the window) is null, never a bare NaN.
    (out / "metrics.json").write_text(json.dumps(_finite(doc), indent=2, default=float, allow_nan=False))
    files.append(out / "metrics.json")
    from perfpredict.sim.plots import plot_run

    return files + plot_run(run, out)
