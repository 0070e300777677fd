"""``perfpredict train``, ``perfpredict predict`` and ``perfpredict serve`` (registered on the main app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from perfpredict.cli import app, err_console, out_console
from perfpredict.errors import UsageError


@app.command()
def train(
    datasets: Annotated[Path, typer.Option(help="folder of measured datasets (*.csv + zoo_features.csv)")] = Path("datasets"),
    out: Annotated[Path, typer.Option(help="where the models go (one folder per dataset)")] = Path("trained_models"),
    no_eval: Annotated[bool, typer.Option("--no-eval", help="skip cross-validation (fit the final models only)")] = False,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    no_register: Annotated[bool, typer.Option("--no-register", help="log to MLflow but do not register models")] = False,
    only: Annotated[list[str] | None, typer.Option("--only", help="train only this dataset (file stem, e.g. "
                                                                  "cpu_epyc_2vcpu_infer; repeatable)")] = None,
) -> None:
    """Rebuild the estimators from datasets/: grouped CV of XGBoost/LightGBM/RF/linear, fit, save, log to MLflow.

    Scores are leave-one-family-out (families never seen in training). For memory, the XGBoost/LightGBM/RF/
    linear columns are learned corrections on top of the physical baseline."""
    from perfpredict.estimators.targets import BASELINE_CORRECTION
    from perfpredict.estimators.train import train_all

    if not datasets.is_dir():
        raise UsageError(f"no datasets folder at {datasets}", step="train")
    if not no_mlflow:
        from perfpredict.estimators.tracking import TRAIN_EXPERIMENT
        from perfpredict.tracking import prepare

        prepare(TRAIN_EXPERIMENT)  # a bad tracking URI fails now, not after training
    with out_console.status("training") as status:
        sets = train_all(datasets, out, evaluate=not no_eval, progress=lambda m: status.update(m), only=only)
    for ts in sets:
        t = Table(title=f"{ts.name} ({ts.metadata['device_name']}, {ts.metadata['rows']} rows)")
        for c in ("target", "shipped model", "family-CV MAPE", "RMSLE", "XGBoost", "LightGBM", "random forest",
                  "linear", "q10-q90 coverage (raw → calibrated)"):
            t.add_column(c)
        for name, e in ts.metadata["targets"].items():
            ev = e.get("evaluation")
            if not ev:
                t.add_row(name, e["point_kind"], *["-"] * 7)
                continue
            f, k = ev["family_cv"], ev["shipped_kind"]
            t.add_row(name, {"none": "physical baseline", BASELINE_CORRECTION: "baseline × XGBoost"}.get(k, k), f"{f[k]['mape']:.1%}", f"{f[k]['rmsle']:.3f}",
                      *(f"{f[x]['mape']:.1%}" if x in f else "-" for x in ("xgboost", "lightgbm", "random_forest",
                                                                            "linear")),
                      f"{ev['quantiles_family_cv']['coverage']:.0%} → "
                      f"{ev['interval_calibration']['nested_family_cv']['coverage']:.0%}")
        out_console.print(t)
        out_console.print(f"saved to {ts.out_dir}/ (report.md has the full tables)")
        if not no_mlflow:
            from perfpredict.estimators.tracking import log_training

            run_id = log_training(ts, register=not no_register)
            out_console.print(f"MLflow run {run_id}" + ("" if no_register else
                                                         f"; registered perfpredict-{ts.name}-<target>"))


@app.command()
def predict(
    target: Annotated[str, typer.Argument(help="model.py, zoo:<family> or a .onnx file")],
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", "-b", help="comma-separated")] = "32",
    device_type: Annotated[str | None, typer.Option(
        help="model set (e.g. cuda_h100, cpu_xeon_2vcpu) or kind (cuda, cpu; cpu: the set measured on this "
             "machine's CPU model if any)")] = None,
    mode: Annotated[str | None, typer.Option(help="train (default) or infer: the model set trained on "
                                                  "training steps or on inference passes")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", help="zoo knob k=v (repeatable)")] = None,
    models: Annotated[Path | None, typer.Option(help="trained_models folder")] = None,
    out: Annotated[Path | None, typer.Option(help="write the predicted card here")] = None,
    batch_axis: Annotated[int | None, typer.Option(help=".onnx only: the axis of the first input that is the "
                                                        "batch (default: the first, or the symbolic one)")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,  # noqa: ARG001
) -> None:
    """Predict a card for a job nobody has profiled (from the estimators in trained_models/)."""
    from perfpredict.predictor import Predictor

    try:
        bs = [int(b) for b in batch_sizes.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--batch-sizes must be comma-separated integers, got {batch_sizes!r}",
                         step="arguments") from None
    params = dict(p.split("=", 1) for p in (param or []) if "=" in p)
    pred = Predictor.load(models)
    if target.endswith(".onnx"):
        card = pred.predict(onnx_path=target, batch_sizes=bs, device_type=device_type, mode=mode,
                            batch_axis=batch_axis)
    else:
        card = pred.predict(target, batch_sizes=bs, device_type=device_type, params=params or None, mode=mode,
                            batch_axis=batch_axis)
    info = card.prediction
    t = Table(title=f"{card.model.name}: predicted {card.run.mode} on {card.device.name} ({info.method})")
    # what the memory column is depends on the device the estimators were trained on (card.memory[].kind)
    peak = "peak allocated" if card.device.kind == "cuda" else "peak RSS increase"
    for c in ("batch", "iter time (q10-q90)", "samples/s", f"{peak} (q10-q90)", "GPU memory to reserve (q90)",
              "GPU util"):
        t.add_column(c)
    for p in info.points:
        t.add_row(str(p.batch_size),
                  f"{p.iter_time_s * 1e3:.2f} ms ({p.iter_time_interval_s[0] * 1e3:.2f}-{p.iter_time_interval_s[1] * 1e3:.2f})",
                  f"{p.samples_per_s:.0f}",
                  f"{p.peak_memory_bytes / 2**20:.0f} MiB ({p.peak_memory_interval_bytes[0] / 2**20:.0f}-"
                  f"{p.peak_memory_interval_bytes[1] / 2**20:.0f})",
                  "-" if p.device_memory_safe_bytes is None else f"{p.device_memory_safe_bytes / 2**20:.0f} MiB",
                  "-" if p.gpu_utilization is None else f"{p.gpu_utilization:.0%}")
    out_console.print(t)
    out_console.print(f"nearest profiled architecture: {info.nearest.name} (distance {info.nearest.distance:.2f}, "
                      f"in-distribution up to {info.nearest.threshold:.2f})", highlight=False)
    for p in [info.points[0], *info.points[1:][-1:]]:  # the first and the last batch size asked for
        if p.iter_time_baseline_shares:
            parts = sorted(p.iter_time_baseline_shares.items(), key=lambda kv: -kv[1])
            out_console.print(f"time baseline at batch {p.batch_size}: "
                              + ", ".join(f"{k} {v:.0%}" for k, v in parts if v >= 0.005), highlight=False)
    for n in info.notes:
        err_console.print(f"note: {n}", highlight=False)
    if out:
        card.save(out)
        out_console.print(f"card: {out}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    models: Annotated[Path | None, typer.Option(help="trained_models folder")] = None,
    max_upload_mb: Annotated[float, typer.Option(help="largest ONNX upload accepted, MB")] = 256.0,
) -> None:
    """Serve the Predictor over HTTP (FastAPI; OpenAPI at /docs). Never executes client code."""
    from perfpredict.service import serve as run

    out_console.print(f"perfpredict serving on http://{host}:{port} (OpenAPI: /docs)")
    run(host, port, str(models) if models else None, int(max_upload_mb * 1e6))
