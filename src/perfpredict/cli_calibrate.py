"""``perfpredict calibrate``: carry a CPU model set's time predictions to this machine's CPU (registered on the
main app). The method and its measured accuracy are in :mod:`perfpredict.estimators.device_calibration`."""

from __future__ import annotations

import math
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfpredict.cli import (
    Mode,
    app,
    check_experiment,
    err_console,
    interrupted_by,
    out_console,
    prepare_mlflow,
    progress_bar,
)
from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.estimators.device_calibration import REFERENCE_MIN_TIME_S


def reference_plans(mode: str):
    """The reference suite as the dataset collector's plans, in :data:`REFERENCE_CONFIGS` order."""
    from perfpredict.dataset.collect import ArchPlan
    from perfpredict.estimators.device_calibration import REFERENCE_BATCHES, REFERENCE_CONFIGS
    from perfpredict.workload.zoo import enumerate_configs, get_family

    wanted = {c.split("-", 1)[0] for c in REFERENCE_CONFIGS}
    by_name = {}
    for fam_name in sorted(wanted):
        fam = get_family(fam_name)
        for name, cfg in enumerate_configs(fam_name):
            by_name[fam.config_name(cfg)] = (name, cfg, fam)
    missing = [c for c in REFERENCE_CONFIGS if c not in by_name]
    if missing:  # the zoo's grid changed under the suite: a bug, not a user error
        raise PerfPredictError(f"reference configurations no longer in the zoo's grid: {', '.join(missing)}",
                               step="calibrate")
    plans = []
    for c in REFERENCE_CONFIGS:
        name, cfg, fam = by_name[c]
        plans.append(ArchPlan(name, cfg, c, REFERENCE_BATCHES, fam.closed_form_macs(cfg) / 1e9))
    return plans


def _pick_source(pred, set_name: str | None, mode: str):
    from perfpredict.estimators.device_calibration import check_source
    from perfpredict.predictor import _measured_on_this_cpu, is_calibrated

    if set_name is not None:
        if set_name not in pred.sets:
            raise UsageError(f"--set {set_name!r}: no such model set; CPU sets: "
                             + ", ".join(n for n, s in pred.sets.items() if s.device_kind == "cpu"
                                         and not is_calibrated(s)), step="arguments")
        src = pred.sets[set_name]
        check_source(src)
        if src.mode != mode:
            raise UsageError(f"--set {set_name} predicts {src.mode}-mode steps; give --mode {src.mode} or a "
                             f"{mode}-mode set", step="arguments")
        return src
    cands = [s for s in pred.sets.values() if s.device_kind == "cpu" and s.mode == mode and s.precision == "fp32"
             and not is_calibrated(s)]
    if not cands:
        raise UsageError(f"no fp32 {mode}-mode CPU model set to calibrate (run `perfpredict train`)", step="arguments")
    picked = pred.model_set("cpu", mode)  # a calibration already made here stands for its source
    src = picked.source if is_calibrated(picked) else picked
    if src.cpu_id is not None and _measured_on_this_cpu(src):
        raise UsageError(f"{src.name} was measured on this CPU, so there is nothing to calibrate; name another set "
                         "with --set to calibrate it to this CPU anyway", step="arguments")
    if _measured_on_this_cpu(src):  # the same model name, and no cpu_id on record to tell the two apart
        err_console.print(f"{src.name} was measured on a CPU of this name ({escape(src.device_name)}) but its record "
                          "has no cpu_id, so whether it is this CPU is not known: the factor will say")
    return src


@app.command()
def calibrate(
    set_name: Annotated[str | None, typer.Option("--set", help="the CPU model set to carry to this CPU [the one "
                                                               "`--device-type cpu` would use]")] = None,
    mode: Annotated[Mode, typer.Option(help="train (training steps) or infer (forward passes)")] = Mode.train,
    models: Annotated[Path | None, typer.Option(help="trained_models folder (the calibration is written "
                                                     "there)")] = None,
    name: Annotated[str | None, typer.Option(help="the calibrated set's name [<set>_on_<this CPU>]")] = None,
    threads: Annotated[int | None, typer.Option(help="torch intra-op threads per measurement [all cores]")] = None,
    min_time: Annotated[float, typer.Option(help="seconds each reference step is timed for [what the committed "
                                                 "CPU datasets were measured with]")] = REFERENCE_MIN_TIME_S,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-profiles",
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,  # noqa: ARG001
) -> None:
    """Carry a CPU model set's iteration-time predictions to this machine's CPU from 22 reference training steps
    (about a minute on an idle 2-vCPU VM), instead of collecting a dataset of its own (about 25 minutes).

    The result is one more model set, <set>_on_<this CPU>, in the models folder: `--device-type cpu` picks it on
    this CPU (after a set measured here), and its cards say so. Run it again to finish an interrupted
    calibration; a finished one is measured anew."""
    import datetime as dt
    import re

    import torch

    from perfpredict.dataset.collect import CollectSettings, git_commit_of
    from perfpredict.estimators.device_calibration import (
        CALIBRATION_FILE,
        MIN_REFERENCE_POINTS,
        RETIME_LOG_DEVIATION,
        STEADINESS_POINTS,
        STEADINESS_REPEATS,
        CalibratedModelSet,
        TimeCalibration,
        default_name,
        predicted_times,
    )
    from perfpredict.hostinfo import cpu_id, cpu_model_name
    from perfpredict.predictor import Predictor, default_models_dir
    from perfpredict.profile.host_load import busy_now, competed
    from perfpredict.profile.timing import TimingConfig

    mode_s = mode.value
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}", step="arguments")
    if not (math.isfinite(min_time) and min_time > 0):
        raise UsageError(f"--min-time must be a positive number of seconds, got {min_time}", step="arguments")
    if name is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", name or "") or name in (".", ".."):
        raise UsageError(f"--name {name!r}: use letters, digits, '_', '-' and '.' only", step="arguments")
    check_experiment(no_mlflow, experiment)
    root = Path(models) if models else default_models_dir()
    pred = Predictor.load(root)
    src = _pick_source(pred, set_name, mode_s)
    here_id, here_name = cpu_id(), cpu_model_name()
    name = name or default_name(src.name, here_id, here_name)
    if name in pred.sets and not isinstance(pred.sets[name], CalibratedModelSet):
        raise UsageError(f"--name {name}: a trained model set has that name", step="arguments")
    folder = root / name
    if (folder / "metadata.json").exists():
        raise UsageError(f"{folder} holds a trained model set; give another --name", step="arguments")
    refs_csv = folder / "references.csv"
    if (folder / CALIBRATION_FILE).exists():  # a finished calibration is measured anew
        _remove_with_provenance(refs_csv)
        (folder / CALIBRATION_FILE).unlink()

    if not no_mlflow:
        prepare_mlflow(experiment)
    plans = reference_plans(mode_s)
    timing = TimingConfig(min_time_s=min_time)
    settings = CollectSettings(device="cpu", mode=mode_s, precision=src.precision, timing=timing, threads=threads,
                               command=" ".join(shlex.quote(a) for a in ["perfpredict", *sys.argv[1:]]),
                               git_commit=git_commit_of(Path(__file__).resolve().parents[2]))
    err_console.print(f"calibrating {src.name} (measured on {escape(src.device_name)}) to this CPU "
                      f"({escape(here_name)}): {sum(len(p.batch_sizes) for p in plans)} reference {mode_s} steps")
    busy = busy_now()
    cpus = os.cpu_count() or 1  # /proc/stat counts the host's CPUs
    if competed(busy, threads or cpus, cpus):
        err_console.print(f"[yellow]warning[/]: other processes keep {busy:.2f} of this machine's {cpus} CPUs busy: "
                          "the references timed beside them read slow, and the factor carries that load into "
                          "every prediction; calibrate on an idle machine")
    _measure(plans, refs_csv, settings, "measuring")
    features: dict[str, dict] = {}
    refs, failed = _references(plans, refs_csv, features)
    # A reference far from the others' factor was most likely timed while something else ran: time it again once.
    retimed_csv = folder / "references_retimed.csv"
    _remove_with_provenance(retimed_csv)
    # one file per round of end timings (the collector measures a point once per file)
    again_csvs = [folder / f"references_again{k + 1}.csv" for k in range(STEADINESS_REPEATS)]
    for stale in [folder / "references_again.csv", *again_csvs]:  # the first is the older single round's
        _remove_with_provenance(stale)
    repeats = []
    if len(refs) >= MIN_REFERENCE_POINTS:  # fewer: CalibratedModelSet below says so, before more is measured
        lr = np.log(np.array([r.measured_s for r in refs]) / predicted_times(src, refs, features))
        odd = {(r.config, r.batch_size) for r, x in zip(refs, lr) if abs(x - np.median(lr)) > RETIME_LOG_DEVIATION}
        if odd:
            again = _single_points(plans, odd)
            err_console.print(f"timing {len(again)} reference step(s) again: more than "
                              f"{math.exp(RETIME_LOG_DEVIATION):.0f}x "
                              "from the others' factor")
            _measure(again, retimed_csv, settings, "re-timing")
            refs, failed = _references(plans, refs_csv, features, retimed_csv)
        # The suite's first points timed again: did the machine's speed move while the suite ran?
        # Each point again in fresh processes, the points interleaved, so their spread says what noise is.
        first = {(r.config, r.batch_size) for r in refs[:STEADINESS_POINTS]}
        for k, again_csv in enumerate(again_csvs):
            _measure(_single_points(plans, first), again_csv, settings,
                     f"timing the first steps again ({k + 1}/{len(again_csvs)})")
            repeats += _references(plans, again_csv, features)[0]
    calib = TimeCalibration(name=name, source_set=src.name, mode=mode_s, precision=src.precision,
                            device_name=here_name, cpu_id=here_id,
                            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                            command=settings.command, git_commit=settings.git_commit,
                            torch_version=torch.__version__, references=refs, repeats=repeats,
                            architectures={c: f for c, f in features.items() if c in {r.config for r in refs}},
                            host_busy_cpus=busy)
    cal = CalibratedModelSet(src, calib)  # fits the factor: fewer than MIN_REFERENCE_POINTS is an error here
    calib.save(folder / CALIBRATION_FILE)

    t = Table(title=f"{name}: {src.name} carried to {escape(here_name)}")
    for c in ("reference", "batch", "measured (ms)", "source predicts (ms)", "measured / predicted"):
        t.add_column(c, justify="right" if c != "reference" else "left")
    for r, lr in zip(refs, cal.log_ratios):
        t.add_row(r.family, str(r.batch_size), f"{r.measured_s * 1e3:.2f}", f"{r.measured_s / math.exp(lr) * 1e3:.2f}",
                  f"{math.exp(lr):.2f}")
    out_console.print(t)
    for f in failed:
        err_console.print(f"not used: {escape(f)}")
    out_console.print(f"time factor x{cal.factor:.3f} (median of {len(refs)} references), interval widened "
                      f"x{math.exp(cal.log_margin):.2f}; written to {folder / CALIBRATION_FILE}")
    drift, noise = calib.speed_drift, calib.speed_noise
    if drift is not None:
        ratios = calib.repeat_ratios
        out_console.print(f"steadiness: the first {STEADINESS_POINTS} reference steps, timed again at the end "
                          f"({len(ratios)} fresh processes), took " + ", ".join(f"x{r:.3f}" for r in ratios)
                          + f" their first time: median x{drift:.3f}"
                          + (f", against {noise:.0%} between the processes at the end" if noise is not None else ""),
                          highlight=False)
        if calib.unsteady:
            moved = math.exp(abs(math.log(drift))) - 1  # slower over faster, as the noise is measured
            err_console.print(f"[yellow]warning[/]: this machine's speed moved by {moved:.0%} while the "
                              "references ran, more than the same step varies between processes, so the factor "
                              "reads a moving speed; calibrate again when the machine is steady, and next to the "
                              "predictions that matter")
    try:  # "cpu" picks it only where no set was measured on this CPU itself (Predictor.model_set's order)
        picked = Predictor.load(root).model_set("cpu", src.mode, src.precision).name
    except PerfPredictError:
        picked = None
    also = "   (or --device-type cpu on this CPU)" if picked == name else ""
    out_console.print(f"use: perfpredict predict model.py --device-type {name}{also}")
    if not no_mlflow:
        from perfpredict.tracking import log_calibration, tracking_uri

        try:
            run_id = log_calibration(cal, folder / CALIBRATION_FILE, min_time_s=min_time, experiment=experiment)
            out_console.print(f"mlflow: run {run_id} in {tracking_uri()} (experiment {experiment!r})", highlight=False,
                              markup=False)
        except Exception as e:  # noqa: BLE001 - tracking failure must not lose the calibration (already on disk)
            err_console.print(f"[yellow]warning[/]: MLflow logging failed ({type(e).__name__}: {escape(str(e))}); the "
                              f"calibration is at {escape(str(folder / CALIBRATION_FILE))}")


def _measure(plans, csv: Path, settings, label: str) -> None:
    """Measure ``plans`` into ``csv`` with the dataset collector (resumable, with provenance), a progress bar."""
    from perfpredict.dataset.collect import collect

    with progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn()) as progress:
        task = progress.add_task(label, total=sum(len(p.batch_sizes) for p in plans))

        def advance(plan, row) -> None:
            progress.update(task, advance=1, description=f"{label} {plan.family} b={row['batch_size']}")

        try:
            summary = collect(plans, csv, settings, advance)
        except KeyboardInterrupt:
            err_console.print(f"[yellow]interrupted[/] ({interrupted_by()}): the reference steps measured so far are in "
                              f"{escape(str(csv))}; the same command again measures the rest", highlight=False)
            raise typer.Exit(130) from None
    if summary.get("dropped_partial_row"):
        err_console.print(f"note: the cut-short last row of {escape(str(csv))} (an interrupted run) was removed and "
                          "measured again", highlight=False)


def _single_points(plans, points: set[tuple[str, int]]) -> list:
    """``plans`` cut to the (config, batch size) ``points``, one plan per point (measured in the suite's order)."""
    from perfpredict.dataset.collect import ArchPlan

    return [ArchPlan(p.family, p.cfg, p.config, (b,), p.gmacs_per_sample)
            for p in plans for b in p.batch_sizes if (p.config, b) in points]


def _remove_with_provenance(csv: Path) -> None:
    """Delete a measurement file and its ``.meta.json``, so the collector measures it anew instead of resuming."""
    from perfpredict.dataset.collect import provenance_path

    csv.unlink(missing_ok=True)
    provenance_path(csv).unlink(missing_ok=True)


def _references(plans, refs_csv: Path, features: dict[str, dict], retimed_csv: Path | None = None):
    """The reference points measured (a re-timed row replacing the first), and a line per point that was not;
    ``features`` gains each measured architecture's graph features."""
    from perfpredict.dataset.collect import read_dataset
    from perfpredict.estimators import arch as archmod
    from perfpredict.estimators.device_calibration import ReferencePoint

    rows = {(r["config"], int(r["batch_size"])): r for r in read_dataset(refs_csv)}  # the last row per point
    if retimed_csv is not None:
        rows.update({(r["config"], int(r["batch_size"])): r for r in read_dataset(retimed_csv)
                     if r.get("status") == "ok"})
    refs, failed = [], []
    for plan in plans:
        for b in plan.batch_sizes:
            r = rows.get((plan.config, b)) or {}
            t = float(r["iter_time_s"]) if r.get("status") == "ok" and r.get("iter_time_s") else 0.0
            if t <= 0:
                failed.append(f"{plan.config} b={b}: {r.get('status', 'not measured')} {r.get('error') or ''}".strip())
                continue
            if plan.config not in features:
                features[plan.config] = archmod.from_workload(f"zoo:{plan.family}", dict(plan.cfg)).as_dict()
            refs.append(ReferencePoint(config=plan.config, family=plan.family, batch_size=b, measured_s=t))
    return refs, failed
