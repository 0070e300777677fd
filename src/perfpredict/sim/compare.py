"""Compare schedulers on one trace and cluster: every (policy, mechanism) on the same jobs, over several seeds.

This is the question a scheduler researcher asks first: is mine better than the baselines, by how much, and is
the difference larger than the spread between traces? Each seed generates one trace (synthetic specs take the
seed; see :func:`perfpredict.sim.run.parse_trace`), and every scheduler replays that same trace, so the
comparison is *paired*: a scheduler's change against the baseline is computed per seed and then averaged, which
removes the trace-to-trace variance that dominates unpaired means (Horus' makespan varies by 20-40 min between
traces; the difference between two schedulers on one trace varies far less).

Rows are written to ``runs.csv`` as each run ends, so a Ctrl-C or a failing scheduler loses nothing already
simulated; a scheduler that cannot run this trace (a GENIE mechanism on a Synergy trace) is recorded as failed
and the others go on.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from perfpredict.errors import UsageError

#: metrics compared by default (all are "lower is better" except the utilisations and GENIE's QoS guarantee)
DEFAULT_METRICS = ("avg_jct_s", "p99_jct_s", "makespan_s", "avg_queue_delay_s", "gpu_util")
#: metrics where a larger value is better; every other compared metric is better smaller
HIGHER_IS_BETTER = frozenset({"n_finished", "n_measured", "gpu_util", "cpu_util", "mem_util", "volume_util", "busy_gpu_util",
                              "genie.qos_guarantee"})


@dataclass(frozen=True)
class Scheduler:
    policy: str
    mechanism: str

    @property
    def label(self) -> str:
        return f"{self.policy}+{self.mechanism}"


@dataclass
class Comparison:
    """The runs (one dict per scheduler and seed) and, per scheduler, each metric's mean, standard deviation
    and paired change against the baseline (the first scheduler)."""

    schedulers: list[Scheduler]
    seeds: list[int]
    metrics: list[str]
    runs: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    #: where the runs ran: {"backend": "local", "jobs": n} or Ray's {"backend": "ray", "address", "nodes", "cpus"}
    backend: dict[str, Any] = field(default_factory=lambda: {"backend": "local", "jobs": 1})
    #: what the user should know about the comparison's outputs (runs of an earlier comparison left beside these)
    notes: list[str] = field(default_factory=list)
    #: why an output file could not be written (a full disk), or None; the runs are still in ``runs``
    write_error: str | None = None

    @property
    def baseline(self) -> Scheduler:
        return self.schedulers[0]

    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r["status"] != "ok"]

    def unpaired(self) -> str | None:
        """A warning when, on some seed, the schedulers did not all run the same jobs: with ``--drop-oversized``
        a rigid mechanism drops a job larger than the cluster that a resizing one runs shrunk, and a change
        against the baseline then compares different work."""
        seeds = []
        for seed in self.seeds:
            kept = {r["scheduler"]: r.get("_dropped_ids", ()) for r in self.runs
                    if r["seed"] == seed and r["status"] == "ok"}
            if len(set(kept.values())) > 1:
                seeds.append(f"seed {seed}: " + ", ".join(f"{k} dropped {len(v)}" for k, v in kept.items()))
        if not seeds:
            return None
        return ("the schedulers did not run the same jobs (" + "; ".join(seeds) + "), so the paired changes compare "
                "different work: drop the jobs larger than the cluster from the trace itself, or compare mechanisms "
                "that drop the same ones")

    def summary(self) -> list[dict[str, Any]]:
        """Per scheduler and metric: ``mean``, ``sd`` (over seeds), ``n`` and ``vs_baseline`` (the mean over
        seeds of value / baseline's value on the same seed, minus 1; None for the baseline itself or without a
        paired seed) with its standard error ``vs_baseline_se``."""
        ok = {(r["scheduler"], r["seed"]): r for r in self.runs if r["status"] == "ok"}
        out = []
        for s in self.schedulers:
            for m in self.metrics:
                vals = [ok[(s.label, k)][m] for k in self.seeds if (s.label, k) in ok and _num(ok[(s.label, k)].get(m))]
                changes = []
                if s != self.baseline:
                    for k in self.seeds:
                        a, b = ok.get((s.label, k)), ok.get((self.baseline.label, k))
                        if a and b and _num(a.get(m)) and _num(b.get(m)) and b[m] != 0:
                            changes.append(a[m] / b[m] - 1.0)
                out.append({
                    "scheduler": s.label, "policy": s.policy, "mechanism": s.mechanism, "metric": m,
                    "n": len(vals), "mean": statistics.fmean(vals) if vals else None,
                    "sd": statistics.stdev(vals) if len(vals) > 1 else None,
                    "vs_baseline": statistics.fmean(changes) if changes else None,
                    "vs_baseline_se": (statistics.stdev(changes) / math.sqrt(len(changes))) if len(changes) > 1 else None,
                    "paired_seeds": len(changes),
                    "better": None if not changes else _better(m, statistics.fmean(changes)),
                })
        return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _better(metric: str, change: float) -> bool | None:
    """Whether a change against the baseline is an improvement; None for no change (a tie is not worse)."""
    if change == 0:
        return None
    return change > 0 if metric in HIGHER_IS_BETTER else change < 0


def folder_name(label: str) -> str:
    """A scheduler label as a folder name (mechanism options bring ':', ',' and '=')."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", label).strip("_") or "scheduler"


def parse_schedulers(policies: Sequence[str], mechanisms: Sequence[str]) -> list[Scheduler]:
    """Every policy with every mechanism, in the order given (the first is the baseline); names are checked
    here, before any simulation."""
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sched.policies import make_policy

    if not policies or not mechanisms:
        raise UsageError("name at least one policy and one mechanism", step="arguments")
    for p in policies:
        try:
            make_policy(p)
        except ValueError as e:
            raise UsageError(str(e), step="arguments") from None
    for m in mechanisms:
        try:
            make_mechanism(m)
        except ValueError as e:
            raise UsageError(str(e), step="arguments") from None
    out = [Scheduler(p.strip(), m.strip()) for p in policies for m in mechanisms]
    seen: dict[str, str] = {}  # folder name -> label: two spellings of one scheduler would share a folder
    for s in out:
        folder = folder_name(s.label)
        if folder in seen:
            same = s.label if seen[folder] == s.label else f"{seen[folder]} and {s.label}"
            raise UsageError(f"{same} is named twice", step="arguments")
        seen[folder] = s.label
    return out


#: GENIE's own metrics (§7.1), present when the trace's jobs are GENIE tasks
GENIE_METRICS = ("genie.qos_guarantee", "genie.makespan_s", "genie.avg_norm_latency", "genie.avg_norm_response")


def known_metrics() -> list[str]:
    """The numeric metrics a run reports (:class:`perfpredict.sim.metrics.SimMetrics`) and GENIE's."""
    import dataclasses

    from perfpredict.sim.metrics import SimMetrics

    return [f.name for f in dataclasses.fields(SimMetrics) if f.type in ("int", "float", int, float)] + list(GENIE_METRICS)


def check_metrics(metrics: Sequence[str]) -> list[str]:
    """``metrics`` without repeats, each one a metric runs report (else a usage error naming the close ones)."""
    import difflib

    known = known_metrics()
    out = []
    for m in metrics:
        m = m.strip()
        if m not in known:
            near = difflib.get_close_matches(m, known, n=3)
            hint = f" (did you mean {', '.join(near)}?)" if near else f"; known: {', '.join(known)}"
            raise UsageError(f"unknown metric {m!r}{hint}", step="arguments")
        if m not in out:
            out.append(m)
    if not out:
        raise UsageError("name at least one metric", step="arguments")
    return out


def seed_independent(trace: str | Path) -> bool:
    """Whether ``trace`` is the same whatever the seed: a file, or a spec that fixes ``seed=``
    (:func:`~perfpredict.sim.run.trace_seed` is the same for two seeds)."""
    from perfpredict.sim.run import trace_seed

    return trace_seed(trace, 0) == trace_seed(trace, 1)


def _row(s: Scheduler, seed: int, run: Any, metrics: Sequence[str]) -> dict[str, Any]:
    m = run.metrics.to_dict()
    for name, values in run.extra.items():  # e.g. genie.qos_guarantee
        if isinstance(values, dict):
            m.update({f"{name}.{k}": v for k, v in values.items() if _num(v)})
    row: dict[str, Any] = {"scheduler": s.label, "policy": s.policy, "mechanism": s.mechanism, "seed": seed,
                           "status": "ok" if not run.result.stall else "stalled", "error": run.result.stall or "",
                           "jobs": run.params["jobs"], "n_finished": m.get("n_finished"),
                           "dropped": len(run.result.dropped),
                           "_dropped_ids": tuple(sorted(j.id for j in run.result.dropped)),
                           "sim_wall_s": run.result.wall_s, "decision_time_s": run.result.decision_time_s}
    for k in metrics:
        v = m.get(k)
        row[k] = float(v) if _num(v) else None
    return row


def _failed_row(s: Scheduler, seed: int, status: str, error: str, metrics: Sequence[str]) -> dict[str, Any]:
    return {"scheduler": s.label, "policy": s.policy, "mechanism": s.mechanism, "seed": seed, "status": status,
            "error": error, **{k: None for k in metrics}}


#: a failure at one of these steps is the trace's, cluster's or cards' (wrong for every scheduler): one error
FATAL_STEPS = ("arguments", "trace", "cluster", "cards")


class RunTask(NamedTuple):
    """One (scheduler, seed) simulation of a comparison: :func:`_run_one`'s arguments, picklable for a worker
    process or a Ray task."""

    trace: Any
    cluster: Any
    scheduler: Scheduler
    seed: int
    metrics: Sequence[str]
    cards: Any
    config: Any
    steady: tuple[int, int] | None
    run_dir: Path | None


def _run_one(trace: Any, cluster: Any, s: Scheduler, seed: int, metrics: Sequence[str], cards: Any, config: Any,
             steady: tuple[int, int] | None, run_dir: Path | None,
             on_decision: Callable[[float, int, int], None] | None = None) -> dict[str, Any]:
    """One scheduler on one seed's trace, as a row (a failure is a row too, with its step in ``_step``).
    Module-level so that a process pool can run it."""
    from perfpredict.sim.run import run_simulation

    try:
        run = run_simulation(trace, cluster, s.policy, s.mechanism, cards=cards, config=config, seed=seed,
                             steady=steady, out_dir=run_dir, on_decision=on_decision)
        return _row(s, seed, run, metrics)
    except UsageError as e:
        return {**_failed_row(s, seed, "failed", e.message, metrics), "_step": e.step}
    except Exception as e:  # noqa: BLE001 - a bug in one scheduler must not lose the others' runs
        return _failed_row(s, seed, "error", f"internal error: {type(e).__name__}: {e}", metrics)


def _run_task(task: RunTask) -> dict[str, Any]:
    return _run_one(*task)


def worker_caches() -> dict[str, Any]:
    """What this process has computed that a worker process would compute again: the Horus workloads' refitted
    predictions (a family-CV refit is ~17 s on 2 cores, and each worker starts from the fork server, empty)."""
    mod = sys.modules.get("perfpredict.sim.horus_workload")
    refits = mod.refit_cache_entries() if mod is not None else {}
    return {"horus_refits": refits} if refits else {}


def prime_caches(caches: dict[str, Any]) -> None:
    """Take the caches of :func:`worker_caches` made in another process (entries already here stay)."""
    if caches.get("horus_refits"):
        from perfpredict.sim.horus_workload import prime_refit_cache

        prime_refit_cache(caches["horus_refits"])


def init_worker(caches: dict[str, Any]) -> None:
    """A pool worker's start: ignore Ctrl-C (:func:`perfpredict.sim.parallel.ignore_sigint`) and take the
    parent's caches."""
    from perfpredict.sim.parallel import ignore_sigint

    ignore_sigint()
    prime_caches(caches)


def compare(trace: str | Path, cluster: Any, schedulers: Sequence[Scheduler], seeds: Sequence[int], *,
            metrics: Sequence[str] = DEFAULT_METRICS, cards: Any = "paper", config: Any = None,
            steady: tuple[int, int] | None = None, out_dir: str | Path | None = None, jobs: int = 1,
            on_run: Callable[[dict[str, Any], int, int], None] | None = None,
            on_decision: Callable[[float, int, int], None] | None = None,
            ray_address: str | None = None) -> Comparison:
    """Simulate every scheduler on the trace of every seed (see the module docstring).

    With ``out_dir``: each run's outputs in ``runs/<scheduler>/seed<k>/`` (as ``perfpredict simulate`` writes
    them), ``runs.csv`` row by row, and at the end ``summary.csv``, ``summary.json`` and ``compare.png``.
    ``jobs`` > 1 runs that many simulations at once in worker processes (the first run is made alone, so a
    trace or cluster that is wrong for everyone is one error; a script calling this needs an
    ``if __name__ == "__main__":`` guard). ``on_run(row, done, total)`` is called after each run, and
    ``on_decision`` (progress within a run) only when runs are not in worker processes. With ``ray_address``
    ('local', 'auto', 'HOST:PORT', 'ray://HOST:PORT') the runs after the first are Ray tasks on that cluster
    instead, ``jobs`` > 1 capping how many run at once (:mod:`perfpredict.sim.ray_backend`). Ctrl-C stops after
    what has been simulated: the comparison so far is returned with ``interrupted`` set (and written). Runs are
    returned in (seed, scheduler) order whatever order they finished in."""
    seeds = list(dict.fromkeys(int(k) for k in seeds))
    if not seeds:
        raise UsageError("give at least one seed", step="arguments")
    schedulers = list(schedulers)
    if not schedulers:
        raise UsageError("give at least one scheduler", step="arguments")
    named = next((s for s in schedulers if not (isinstance(s, Scheduler) and isinstance(s.policy, str)
                                                 and isinstance(s.mechanism, str))), None)
    if named is not None:
        # an instance would be one object for every seed (its state carried from run to run), labelled by its repr
        raise UsageError(f"compare names each policy and mechanism by string (parse_schedulers; a fresh one is "
                         f"made for every seed), got {named!r}: run your own Policy or Mechanism with "
                         f"run_simulation once per seed", step="arguments")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"jobs must be a whole number >= 1, got {jobs!r}", step="arguments")
    metrics = check_metrics(metrics)
    cmp = Comparison(schedulers=schedulers, seeds=seeds, metrics=metrics)
    out = Path(out_dir) if out_dir is not None else None
    fixed = ["scheduler", "policy", "mechanism", "seed", "status", "error", "jobs", "n_finished", "dropped"]
    # a compared metric that is a fixed column already (--metric n_finished) is not a second column of that name
    columns = [*fixed, *(m for m in metrics if m not in fixed), "sim_wall_s", "decision_time_s"]
    if out is not None:
        from perfpredict.output_paths import output_dir_problem

        problem = output_dir_problem(out)
        if problem:
            raise UsageError(f"out_dir: {problem}", step="arguments")
    if out is not None:
        stale = _stale_runs(out, schedulers, seeds)
        if stale:
            cmp.notes.append(f"{out / 'runs'} also holds runs this comparison did not make ({stale}): runs.csv and "
                             "the summary are this comparison's only; give a new --out to keep them apart")
    order = [(seed, s) for seed in seeds for s in schedulers]
    tasks = [RunTask(trace, cluster, s, seed, metrics, cards, config, steady,
                     out / "runs" / folder_name(s.label) / f"seed{seed}" if out is not None else None)
             for seed, s in order]
    sink = writer = None

    def record(row: dict[str, Any]) -> None:
        nonlocal sink, writer
        row.pop("_step", None)
        cmp.runs.append(row)
        if out is not None and cmp.write_error is None:
            try:
                if sink is None:  # created with the first row: a trace that fails at once leaves nothing
                    out.mkdir(parents=True, exist_ok=True)
                    sink = open(out / "runs.csv", "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed below
                    writer = csv.DictWriter(sink, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
                    writer.writeheader()
                writer.writerow(row)
                sink.flush()
            except OSError as e:  # a full disk: the runs go on (they are kept in memory and shown at the end)
                cmp.write_error = f"cannot write {out / 'runs.csv'}: {e.strerror or e}"
        if on_run is not None:
            on_run(row, len(cmp.runs), len(tasks))

    # picklable inputs only in worker processes (cards given as a dict of perf models may hold functions);
    # Ray's cloudpickle takes them
    on_ray = ray_address is not None and len(tasks) > 1
    parallel = not on_ray and jobs > 1 and len(tasks) > 2 and not isinstance(cards, dict)
    sessions = contextlib.ExitStack()  # Ray's connection, closed in the finally below
    if on_ray:
        from perfpredict.ray_cluster import connected

        ray, cmp.backend = sessions.enter_context(connected(ray_address))
    elif parallel:
        cmp.backend = {"backend": "local", "jobs": min(jobs, len(tasks) - 1)}
        from perfpredict.profile.main_guard import check_main_guard

        check_main_guard("perfpredict.sim.compare(jobs > 1)")
    try:
        first = _run_one(*tasks[0], on_decision=on_decision)
        if first.get("_step") in FATAL_STEPS:
            raise UsageError(first["error"], step=first["_step"])
        record(first)
        if on_ray:
            from perfpredict.sim.ray_backend import run_tasks

            run_tasks(ray, tasks[1:], worker_caches(), record, max_in_flight=jobs if jobs > 1 else None)
        elif not parallel:
            for task in tasks[1:]:
                record(_run_one(*task, on_decision=on_decision))
        else:
            from perfpredict.sim.parallel import in_processes

            # the workers take the predictions the first run (made here) refitted
            in_processes(_run_task, tasks[1:], lambda _, row: record(row), min(jobs, len(tasks) - 1),
                         init_worker, (worker_caches(),))
    except KeyboardInterrupt:
        cmp.interrupted = True
    finally:
        if sink is not None:
            with contextlib.suppress(OSError):  # a full disk's error was recorded when the row was written
                sink.close()
        sessions.close()
    rank = {(seed, s.label): i for i, (seed, s) in enumerate(order)}
    cmp.runs.sort(key=lambda r: rank[(r["seed"], r["scheduler"])])
    if out is not None and cmp.runs and cmp.write_error is None:
        try:
            write_summary(cmp, out)
        except OSError as e:
            cmp.write_error = f"cannot write the summary in {out}: {e.strerror or e}"
    return cmp


def _stale_runs(out: Path, schedulers: Sequence[Scheduler], seeds: Sequence[int]) -> str:
    """The run folders under ``out/runs`` that another comparison wrote (``fifo+tune/seed2, rigid``), or ''."""
    runs = out / "runs"
    if not runs.is_dir():
        return ""
    mine = {folder_name(s.label) for s in schedulers}
    stale = []
    for d in sorted(p for p in runs.iterdir() if p.is_dir()):
        if d.name not in mine:
            stale.append(d.name)
            continue
        stale += [f"{d.name}/{k.name}" for k in sorted(d.iterdir())
                  if k.is_dir() and k.name not in {f"seed{x}" for x in seeds}]
    return ", ".join(stale[:6]) + (f" and {len(stale) - 6} more" if len(stale) > 6 else "")


def write_summary(cmp: Comparison, out: Path) -> list[Path]:
    """``summary.csv``, ``summary.json`` and ``compare.png`` in ``out``."""
    rows = cmp.summary()
    made = [out / "summary.csv", out / "summary.json"]
    with open(made[0], "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    doc = {"baseline": cmp.baseline.label, "seeds": cmp.seeds, "metrics": cmp.metrics,
           "schedulers": [s.label for s in cmp.schedulers], "interrupted": cmp.interrupted, "ran_on": cmp.backend,
           "unpaired": cmp.unpaired(), "notes": cmp.notes,
           "failed": [{"scheduler": r["scheduler"], "seed": r["seed"], "status": r["status"], "error": r["error"]}
                      for r in cmp.failed()],
           "summary": rows}
    made[1].write_text(json.dumps(doc, indent=2, allow_nan=False, default=float))
    made.append(plot_comparison(cmp, rows, out / "compare.png"))
    return made


def plot_comparison(cmp: Comparison, rows: list[dict[str, Any]], path: Path) -> Path:
    """One panel per metric: each scheduler's mean over seeds with its standard deviation."""
    from perfpredict.sim.plots import plt

    n = len(cmp.metrics)
    fig, axes = plt.subplots(1, n, figsize=(max(3.0 * n, 4.5), 3.4 + 0.12 * len(cmp.schedulers)), squeeze=False)
    labels = [s.label for s in cmp.schedulers]
    for ax, m in zip(axes[0], cmp.metrics):
        by = {r["scheduler"]: r for r in rows if r["metric"] == m}
        scale, unit = (1 / 3600, " (h)") if m.endswith("_s") else (1.0, "")
        # a scheduler with no value (every run failed, or a metric it has not) gets no bar and "n/a", not a 0
        have = [by[x]["mean"] is not None for x in labels]
        means = [(by[x]["mean"] or 0.0) * scale for x in labels]
        sds = [(by[x]["sd"] or 0.0) * scale for x in labels]
        colours = ["#999999"] + ["#4c72b0"] * (len(labels) - 1)
        idx = [i for i, h in enumerate(have) if h]
        ax.bar(idx, [means[i] for i in idx], yerr=[sds[i] for i in idx], capsize=3, color=[colours[i] for i in idx])
        for i, h in enumerate(have):
            if not h:
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7, color="#aa3333")
        ax.set_xticks(range(len(labels)))
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
        ax.set_title(m + unit, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"mean ± sd over {len(cmp.seeds)} seed(s); grey: the baseline", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["DEFAULT_METRICS", "GENIE_METRICS", "HIGHER_IS_BETTER", "Comparison", "Scheduler", "check_metrics",
           "compare", "known_metrics", "parse_schedulers", "seed_independent", "write_summary"]
