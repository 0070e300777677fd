"""MLflow tracking of profiles: one run per profile, with params, metrics and the card as artifacts.

The default store is embedded: a SQLite database ``mlruns.db`` in the working directory (artifacts under
``./mlruns``), viewable with ``mlflow ui --backend-store-uri sqlite:///mlruns.db``. ``MLFLOW_TRACKING_URI``
points perfpredict at any other store or server.
"""

from __future__ import annotations

import logging
import math
import os
from contextlib import contextmanager, nullcontext, suppress
from functools import lru_cache
from pathlib import Path

from perfpredict.card import PerformanceCard

DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"
PROFILE_EXPERIMENT = "perfpredict-profiles"
#: where a predicted card's run goes by default (``perfpredict predict --mlflow``, ``log_profile`` of one)
PREDICTION_EXPERIMENT = "perfpredict-predictions"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def ui_command(uri: str | None = None) -> str:
    uri = uri or tracking_uri()
    if uri.startswith(("http://", "https://", "databricks")):
        return f"open {uri} in a browser"
    return f"mlflow ui --backend-store-uri {uri}"


def _quiet_mlflow() -> None:
    """MLflow configures its loggers on import: call after importing it."""
    for name in ("mlflow", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)


#: the check before the work: one try, this many seconds per request, unless the user set MLflow's own variables
QUICK_CHECK_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@contextmanager
def _quick_http():
    """MLflow's HTTP defaults (7 retries with exponential backoff, 120 s per request) made an unreachable server
    take four minutes to refuse; the check before the work should answer in seconds. The logging after the work
    keeps the defaults, where a retry can save a run."""
    added = {k: v for k, v in QUICK_CHECK_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` store (relative to the working directory with three slashes,
    absolute with four), or None for another kind of store (or SQLite in memory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def _store_problem(uri: str) -> str | None:
    """Why a SQLite store's file cannot be used, found without MLflow: MLflow retried an unopenable file for
    about 105 s (nine multi-line warnings) before failing."""
    from perfpredict.output_paths import output_file_problem

    path = _sqlite_path(uri)
    if path is None:
        return None
    if path.is_file():
        return None if os.access(path, os.R_OK | os.W_OK) else f"{path} cannot be read and written"
    return output_file_problem(path, parent_must_exist=True)  # a folder, a missing folder, a place taking no files


@contextmanager
def _store_lock(uri: str):
    """Hold the SQLite store's folder locked while the store is opened: MLflow creates (and migrates) a new
    store's tables on first use, and two commands doing it at once broke the file for good (``table
    _alembic_tmp_metrics already exists`` on every later use)."""
    path = _sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl

    try:
        fd = os.open(path.parent if str(path.parent) else Path("."), os.O_RDONLY)
    except OSError:  # the store's own error says more
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _artifact_problem(location: str | None) -> str | None:
    """Why an experiment's local artifact location cannot take files (a file in the way, a place that takes no
    new folders), or None; remote locations are not checked. Found only when logging, after the work, before."""
    from perfpredict.output_paths import output_dir_problem

    if not location:
        return None
    if location.startswith("file://"):
        location = location[len("file://"):]
    elif "://" in location:
        return None
    return output_dir_problem(location)


def prepare(experiment: str = PROFILE_EXPERIMENT, *, quick: bool = False) -> str:
    """Connect to the tracking store and create ``experiment`` if needed; return its id.

    The CLI calls this *before* measuring, with ``quick``: a bad ``MLFLOW_TRACKING_URI`` fails in seconds instead
    of after a long profile, and the store's one-time set-up overlaps the measuring processes' start-up. A local
    SQLite file and a local artifact location are checked first, without MLflow's retries.
    """
    import mlflow

    _quiet_mlflow()
    uri = tracking_uri()
    problem = _store_problem(uri)
    if problem:
        raise ValueError(problem)
    mlflow.set_tracking_uri(uri)
    with _store_lock(uri), _quick_http() if quick and uri.startswith(("http://", "https://")) else nullcontext():
        exp = mlflow.set_experiment(experiment)
    problem = _artifact_problem(exp.artifact_location)
    if problem:
        raise ValueError(f"experiment {experiment!r} keeps its artifacts at {exp.artifact_location}: {problem}")
    return exp.experiment_id


@lru_cache(maxsize=1)
def _common_tags() -> dict[str, str]:
    """What every run carries, whatever its kind: the perfpredict version and, in a git checkout, its commit
    (``mlflow.source.git.commit`` is the one MLflow's UI shows)."""
    from perfpredict import __version__
    from perfpredict.git_commit import git_commit_of

    tags = {"perfpredict.version": __version__}
    commit = git_commit_of(Path(__file__).resolve().parent)
    if commit:
        tags["perfpredict.git_commit"] = commit
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
    return tags


@contextmanager
def _run(mlflow, run_name: str, tags: dict[str, str]):
    """``mlflow.start_run`` for every kind of run: the common tags and the command line; nested inside a caller's
    own active run instead of failing with "Run ... is already active"; and a failure while logging (an artifact
    store that refuses files) tagged ``perfpredict.logging_error`` on the run it leaves FAILED."""
    import sys

    nested = mlflow.active_run() is not None
    with mlflow.start_run(run_name=run_name, nested=nested) as run:
        try:
            mlflow.set_tags({**_common_tags(), "perfpredict.command": " ".join(sys.argv)[:5000], **tags})
            yield run
        except Exception as e:
            with suppress(Exception):
                mlflow.set_tag("perfpredict.logging_error", f"{type(e).__name__}: {e}"[:5000])
            raise


def _params(values: dict[str, object]) -> dict[str, str]:
    """Run params spelt one way in every run: None left out, booleans ``true``/``false`` (as the tags), the rest
    as text cut at MLflow's 500 characters."""
    return {k: (_flag(v) if isinstance(v, bool) else str(v))[:500] for k, v in values.items() if v is not None}


def _series(mlflow, key: str, value: object, step: int) -> None:
    """One point of a per-batch (or per-k) series; a value a card leaves empty (a predicted point has no
    measured cv) is left out instead of failing the run."""
    got = _metrics({key: value})
    if got:
        mlflow.log_metric(key, got[key], step=step)


def _metrics(values: dict[str, object]) -> dict[str, float]:
    """Finite numeric metrics only: MLflow refuses None, and NaN says nothing."""
    out = {}
    for k, v in values.items():
        if v is None or isinstance(v, bool):
            continue
        try:
            f = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out[k] = f
    return out


def _device_tags(device: str, name: str | None) -> dict[str, str]:
    """The device tags every run that measured or predicted on a device carries, as a profile's do."""
    return {"device.kind": device.split(":")[0], **({"device.name": name} if name else {})}


def _flag(value: bool) -> str:
    """A boolean tag, spelt one way in every run (``true``/``false``)."""
    return "true" if value else "false"


def _end(mlflow, *, interrupted: bool = False, failed: bool = False) -> None:
    """End the active run KILLED after a Ctrl-C, FAILED when the command exits with an error (the MLflow UI's
    status column then agrees with the exit code); else it ends FINISHED as the ``with`` block closes."""
    if interrupted or failed:
        mlflow.end_run(status="KILLED" if interrupted else "FAILED")


def log_profile(card: PerformanceCard, *, experiment: str | None = None, failed: bool = False,
                interrupted: bool = False, files: list[str | Path] | tuple[str | Path, ...] = ()) -> str:
    """Log ``card`` as one MLflow run, with ``card.json`` and the ``files`` the profile wrote (its ONNX export, its
    plots) as artifacts; return the run id. Nothing else in the output folder is logged: one shared with other
    work (or ``-o .``, which holds the MLflow store itself) is not copied into the store. The run ends FAILED
    with ``failed``, KILLED with ``interrupted`` (a Ctrl-C kept the card). ``experiment`` defaults to
    :data:`PROFILE_EXPERIMENT`, or :data:`PREDICTION_EXPERIMENT` for a predicted card."""
    import mlflow

    predicted = card.prediction is not None
    prepare(experiment or (PREDICTION_EXPERIMENT if predicted else PROFILE_EXPERIMENT))
    family = card.model.family or (card.model.source[4:].split("[")[0] if card.model.source.startswith("zoo:") else None)
    timing = (card.run.settings or {}).get("timing") or {}
    sections = [name for name in ("colocation", "scaling", "comm_model", "sensitivity") if getattr(card, name) is not None]
    tags = {
        # a predicted card (Predictor.predict) is logged as a prediction, never as a measured profile
        "perfpredict.kind": "prediction" if predicted else "profile",
        "perfpredict.status": card.status,
        # a section that failed (graph export, a co-location run) leaves the run FINISHED: this says so
        "perfpredict.errors": str(len(card.errors)),
        "perfpredict.interrupted": _flag(interrupted),
        "perfpredict.card_schema": card.schema_version,
        "device.kind": card.device.kind,
        "device.name": card.device.name,
        "model.source": card.model.source,
        **({"model.family": family} if family else {}),
        **({"perfpredict.command": card.run.command[:5000]} if card.run.command else {}),
        **({"perfpredict.model_set": card.prediction.model_set} if predicted else {}),
    }
    with _run(mlflow, card.model.name, tags) as run:
        params = {
            "model": card.model.name,
            "model_source": card.model.source,
            "model_family": family,
            "model_file_sha256": card.model.file_sha256,
            "device": card.device.kind,
            "device_name": card.device.name,
            "mode": card.run.mode,
            "precision": card.run.precision,
            "compiled": card.run.compiled,
            "batch_sizes": ",".join(str(b) for b in card.run.batch_sizes),
            "threads": card.device.threads,
            "min_time_s": timing.get("min_time_s"),
            "max_time_s": timing.get("max_time_s"),
            "sections": ",".join(sections) or None,
            "model_set": card.prediction.model_set if predicted else None,
            "perfpredict_version": card.run.perfpredict_version,
            **{f"version.{k}": v for k, v in card.run.library_versions.items()},
        }
        if card.model.config:
            params.update({f"config.{k}": v for k, v in card.model.config.items()})
        mlflow.log_params(_params(params))

        metrics: dict[str, float] = {"parameters": card.model.parameters}
        if card.run.wall_s is not None:
            metrics["profile_wall_s"] = card.run.wall_s
        if card.run.timed_s is not None:
            metrics["timed_s"] = card.run.timed_s
        ok = card.measured_points()
        if ok:
            metrics["max_samples_per_s"] = max(p.samples_per_s for p in ok)
            metrics["max_feasible_batch"] = max(p.batch_size for p in ok)
        if card.rate_model is not None:
            if card.rate_model.r2 is not None:
                metrics["rate_model_r2"] = card.rate_model.r2
            if card.rate_model.loo_rel_error is not None:
                metrics["rate_model_loo_rel_error"] = card.rate_model.loo_rel_error
        if card.latency is not None:
            metrics["startup_nu_s"] = card.latency.nu_s
        f = card.features
        if f is not None and f.available:
            for key in ("forward_macs_per_sample", "fvcore_macs_per_sample", "param_bytes",
                        "activation_bytes_per_sample", "macs_rel_diff"):
                if getattr(f, key) is not None:
                    metrics[key] = float(getattr(f, key))
        mlflow.log_metrics(_metrics(metrics))
        # Per-batch series: step = batch size, so MLflow charts them against batch size.
        for pp in card.prediction.points if predicted else ():
            _series(mlflow, "predicted_iter_time_s", pp.iter_time_s, step=pp.batch_size)
            _series(mlflow, "predicted_samples_per_s", pp.samples_per_s, step=pp.batch_size)
            _series(mlflow, "predicted_peak_memory_bytes", pp.peak_memory_bytes, step=pp.batch_size)
            if pp.device_memory_bytes is not None:
                _series(mlflow, "predicted_device_memory_bytes", pp.device_memory_bytes, step=pp.batch_size)
            if pp.gpu_utilization is not None:
                _series(mlflow, "predicted_gpu_utilization", pp.gpu_utilization, step=pp.batch_size)
        for p in ok:
            _series(mlflow, "samples_per_s", p.samples_per_s, step=p.batch_size)
            _series(mlflow, "iter_time_s", p.iter_time_s, step=p.batch_size)
            _series(mlflow, "iter_time_cv", p.cv, step=p.batch_size)
        for m in card.memory:
            if m.peak_bytes is not None:
                _series(mlflow, "peak_memory_bytes", m.peak_bytes, step=m.batch_size)
            if m.analytic is not None:
                _series(mlflow, "horus_memory_estimate_bytes", m.analytic.total, step=m.batch_size)
        if card.energy is not None:
            for e in card.energy.points:
                if e.gpu_utilization is not None:
                    _series(mlflow, "gpu_utilization", e.gpu_utilization, step=e.batch_size)
                if e.energy_per_iter_j is not None:
                    _series(mlflow, "energy_per_iter_j", e.energy_per_iter_j, step=e.batch_size)
        _log_extended(mlflow, card)
        mlflow.log_text(card.to_json(), "card.json")
        for f in files:
            if Path(f).is_file() and Path(f).name != "card.json":
                mlflow.log_artifact(str(f))
        _end(mlflow, interrupted=interrupted, failed=failed)
        return run.info.run_id


def log_batch_limit(result, path: str | Path, *, experiment: str = PROFILE_EXPERIMENT) -> str:
    """One MLflow run for a ``perfpredict max-batch`` search (measured or predicted): its settings as params,
    the answer and each probe's memory and iteration time as metrics (step = batch size), the JSON as artifact."""
    import mlflow

    prepare(experiment)
    with _run(mlflow, f"{result.model} max batch", {
            "perfpredict.kind": "max_batch", "perfpredict.source": result.source, "perfpredict.device": result.device,
            "perfpredict.interrupted": _flag(result.interrupted),
            **_device_tags(result.device, result.device_name)}) as run:
        mlflow.log_params(_params({
            "model": result.model, "device": result.device, "device_name": result.device_name,
            "model_set": result.model_set, "mode": result.mode,
            "precision": result.precision, "compiled": result.compiled, "memory_limit_bytes": result.memory_limit_bytes,
            "multiple_of": result.multiple_of, "max_batch": result.max_batch}))
        mlflow.log_metrics(_metrics({"largest_ok_batch": result.largest_ok, "smallest_failed_batch": result.smallest_failed,
                                     "search_wall_s": result.wall_s, "probes": len(result.probes)}))
        for p in result.probes:
            mlflow.log_metric("probe_fits", float(p.status == "ok"), step=p.batch_size)
            mem = p.device_bytes if p.device_bytes is not None else p.peak_bytes
            if mem is not None:
                mlflow.log_metric("probe_memory_bytes", float(mem), step=p.batch_size)
            if p.iter_time_s is not None and math.isfinite(p.iter_time_s):
                mlflow.log_metric("probe_iter_time_s", p.iter_time_s, step=p.batch_size)
        mlflow.log_artifact(str(path))
        _end(mlflow, interrupted=result.interrupted, failed=bool(result.model_error) or result.largest_ok is None)
        return run.info.run_id


def log_ab(result, path: str | Path, *, experiment: str = PROFILE_EXPERIMENT) -> str:
    """One MLflow run for a ``perfpredict ab`` comparison: both sides as params, the speed-up and its interval
    as metrics, each round's times at step = round, the JSON as artifact."""
    import mlflow

    prepare(experiment)
    with _run(mlflow, f"ab {result.base.model} vs {result.new.model}", {
            "perfpredict.kind": "ab", "perfpredict.verdict": result.verdict, "perfpredict.device": result.device,
            "perfpredict.interrupted": _flag(result.interrupted),
            **_device_tags(result.device, result.device_name)}) as run:
        mlflow.log_params(_params({
            "base": result.base.model, "base_precision": result.base.precision, "base_compiled": result.base.compiled,
            "new": result.new.model, "new_precision": result.new.precision, "new_compiled": result.new.compiled,
            "base_target": result.base.target, "new_target": result.new.target,
            "batch_size": result.batch_size, "mode": result.mode, "device": result.device,
            "device_name": result.device_name, "threads": result.threads, "min_time_s": result.min_time_s,
            "max_time_s": result.max_time_s}))
        mlflow.log_metrics(_metrics({"speedup": result.speedup, "speedup_ci_low": result.ci_low,
                                     "speedup_ci_high": result.ci_high, "peak_ratio": result.peak_ratio,
                                     "rounds": len(result.rounds), "ab_wall_s": result.wall_s}))
        for r in result.rounds:
            mlflow.log_metric("base_iter_time_s", r.base_iter_time_s, step=r.round)
            mlflow.log_metric("new_iter_time_s", r.new_iter_time_s, step=r.round)
        mlflow.log_artifact(str(path))
        _end(mlflow, interrupted=result.interrupted)
        return run.info.run_id


def log_calibration(cal, path: str | Path, *, min_time_s: float, experiment: str = PROFILE_EXPERIMENT) -> str:
    """One MLflow run for a ``perfpredict calibrate`` (a :class:`CalibratedModelSet`): the source set and the CPU
    as params, the factor and margin as metrics, each reference's measured time and measured / predicted at step
    = its index in the suite, and ``calibration.json`` as artifact."""
    import mlflow

    c = cal.calibration
    prepare(experiment)
    with _run(mlflow, f"calibrate {c.source_set} to {c.device_name}", {
            "perfpredict.kind": "calibration", "perfpredict.device": "cpu", "perfpredict.model_set": c.name,
            **_device_tags("cpu", c.device_name)}) as run:
        mlflow.log_params(_params({
            "source_set": c.source_set, "source_device_name": cal.source.device_name,
            "source_cpu_id": cal.source.cpu_id, "device_name": c.device_name, "cpu_id": c.cpu_id, "mode": c.mode,
            "precision": c.precision, "min_time_s": min_time_s, "version.torch": c.torch_version}))
        mlflow.log_metrics(_metrics({"time_factor": cal.factor, "interval_log_margin": cal.log_margin,
                                     "reference_points": float(len(c.references)), "speed_drift": c.speed_drift,
                                     "speed_noise": c.speed_noise, "host_busy_cpus": c.host_busy_cpus}))
        for i, (r, lr) in enumerate(zip(c.references, cal.log_ratios)):
            mlflow.log_metric("reference_measured_s", r.measured_s, step=i)
            mlflow.log_metric("reference_measured_over_predicted", math.exp(float(lr)), step=i)
        mlflow.log_artifact(str(path))
        return run.info.run_id


def _log_extended(mlflow, card: PerformanceCard) -> None:
    """Metrics of the scaling / co-location / comm-model / sensitivity sections (step = k, n or c)."""
    # a point can be "ok" with a number left empty (no solo co-location run to relate the copies to): left out
    if card.scaling is not None:
        for p in card.scaling.points:
            if p.status == "ok":
                _series(mlflow, "dp_samples_per_s", p.samples_per_s, step=p.workers)
                _series(mlflow, "dp_speedup", p.speedup, step=p.workers)
    if card.colocation is not None:
        for p in card.colocation.points:
            if p.status == "ok":
                _series(mlflow, "colocated_per_copy_relative", p.per_copy_relative, step=p.copies)
                _series(mlflow, "colocated_aggregate_relative", p.aggregate_relative, step=p.copies)
        for i, pair in enumerate(card.colocation.pairs):
            if pair.status == "ok":
                mlflow.log_metrics(_metrics({f"pair{i}_job_slowdown": pair.job_slowdown,
                                             f"pair{i}_partner_slowdown": pair.partner_slowdown}))
                mlflow.set_tag(f"pair{i}_partner", pair.partner)
    cm = card.comm_model
    if cm is not None:
        extra = {"comm_gamma": cm.gamma, "comm_lambda": cm.lambda_, "comm_holdout_rel_error": cm.holdout_rel_error}
        mlflow.log_metrics({k: float(v) for k, v in extra.items() if v is not None})
    sens = card.sensitivity
    if sens is not None:
        mlflow.log_metrics({"sensitivity_demand_cpus": sens.demand.cpus, "sensitivity_demand_mem_gb": sens.demand.mem_gb,
                            "sensitivity_probes": len(sens.profiled_cpu_values)})
        for c, t in zip(sens.profiled_cpu_values, sens.probed_throughput):
            mlflow.log_metric("pipeline_samples_per_s", t, step=c)


SIMULATION_EXPERIMENT = "perfpredict-simulations"


def log_comparison(cmp, out_dir: str | Path, *, trace: str, cluster: str,
                   experiment: str = SIMULATION_EXPERIMENT, cards: str | None = None, config=None) -> str:
    """Log a :class:`perfpredict.sim.compare.Comparison` as one MLflow run: what was compared, each scheduler's
    mean and paired change against the baseline per metric (``<scheduler>/<metric>`` and
    ``<scheduler>/<metric>.vs_baseline``, ``+`` and other characters MLflow keys refuse written ``_``), and the
    summary files as artifacts (the per-run records stay on disk:
    with many seeds of a large trace they would dwarf the store). Returns the run id."""
    import re

    import mlflow

    prepare(experiment)
    out = Path(out_dir)

    def key(text: str) -> str:  # MLflow keys allow letters, digits, _ - . space / and :
        return re.sub(r"[^\w.\- /:]", "_", text)

    if isinstance(cluster, str):  # the cluster's own name, as `simulate` logs it (16x8 -> 16x8V100)
        from perfpredict.sim.run import parse_cluster

        with suppress(Exception):
            cluster = parse_cluster(cluster).name
    with _run(mlflow, f"compare {len(cmp.schedulers)} schedulers@{cluster}", {
            "perfpredict.kind": "comparison", "perfpredict.baseline": cmp.baseline.label,
            "perfpredict.interrupted": _flag(cmp.interrupted)}) as active:
        mlflow.log_params(_params({
            "trace": trace, "cluster": cluster, "seeds": ",".join(map(str, cmp.seeds)),
            "schedulers": ";".join(s.label for s in cmp.schedulers), "metrics": ",".join(cmp.metrics),
            "cards": cards if isinstance(cards, (str, Path)) or cards is None else "custom",
            "mode": getattr(config, "mode", None), "round_s": getattr(config, "round_s", None),
            "restart_overhead_s": getattr(config, "restart_overhead_s", None),
            **{f"ran_on.{k}": v for k, v in cmp.backend.items()}}))
        metrics = {"failed_runs": float(len(cmp.failed())), "runs": float(len(cmp.runs))}
        for r in cmp.summary():
            if r["mean"] is not None and math.isfinite(r["mean"]):
                metrics[key(f"{r['scheduler']}/{r['metric']}")] = float(r["mean"])
            if r["vs_baseline"] is not None:
                metrics[key(f"{r['scheduler']}/{r['metric']}.vs_baseline")] = float(r["vs_baseline"])
        for r in cmp.summary():  # the spread over seeds, beside each mean
            if r.get("sd") is not None and math.isfinite(r["sd"]):
                metrics[key(f"{r['scheduler']}/{r['metric']}.sd")] = float(r["sd"])
        mlflow.log_metrics(metrics)
        for name in ("runs.csv", "summary.csv", "summary.json", "compare.png"):
            if (out / name).is_file():
                mlflow.log_artifact(str(out / name))
        _end(mlflow, interrupted=cmp.interrupted, failed=bool(cmp.failed()))
        return active.info.run_id


def log_simulation(run, *, experiment: str = SIMULATION_EXPERIMENT) -> str:
    """Log a :class:`perfpredict.sim.run.SimRun` as one MLflow run: its parameters, every numeric metric, and
    the output directory (jobs.csv, jobs.parquet, metrics.json, plots) as artifacts. Returns the run id."""
    import mlflow

    prepare(experiment)
    name = f"{run.params['policy']}+{run.params['mechanism']}@{run.params['cluster']}"
    with _run(mlflow, name, {"perfpredict.kind": "simulation", "perfpredict.mode": run.result.mode}) as active:
        if run.result.stall:
            mlflow.set_tag("perfpredict.stall", run.result.stall[:5000])
        mlflow.log_params(_params(run.params))
        metrics = {k: float(v) for k, v in run.metrics.to_dict().items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None}
        metrics.update({"sim_wall_s": run.result.wall_s, "sim_decisions": run.result.decisions,
                        "sim_decision_time_s": run.result.decision_time_s,
                        "unfinished_jobs": len(run.result.unfinished)})
        # A seed's own metrics (GENIE's QoS guarantee, normalised latency, ...), prefixed with the seed's name.
        for seed, values in (getattr(run, "extra", None) or {}).items():
            if isinstance(values, dict):
                metrics.update({f"{seed}.{k}": float(v) for k, v in values.items()
                                if isinstance(v, (int, float)) and not isinstance(v, bool)})
        mlflow.log_metrics({k: v for k, v in metrics.items() if not math.isnan(v)})
        for f in run.files:  # what this run wrote, not whatever else is in out_dir
            if Path(f).is_file():
                mlflow.log_artifact(str(f))
        # jobs that can never finish: `simulate` exits 1, and the run's status says the same
        _end(mlflow, failed=bool(run.result.stall))
        return active.info.run_id
