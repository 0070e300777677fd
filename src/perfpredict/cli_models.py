"""``perfpredict train``, ``perfpredict predict`` and ``perfpredict serve`` (registered on the main app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from perfpredict.cli import app, err_console, out_console, print_prediction
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
        from perfpredict.tracking import prepare, tracking_uri

        try:
            prepare(TRAIN_EXPERIMENT)  # a bad tracking URI fails now, not after training
        except Exception as e:  # noqa: BLE001 - an unusable store is a usage problem, found before training
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise UsageError(f"cannot use the MLflow store {tracking_uri()} ({type(e).__name__}: {first}); "
                             "fix MLFLOW_TRACKING_URI or pass --no-mlflow", step="mlflow") from None
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
    from perfpredict.cli import check_out_dir
    from perfpredict.workload_args import check_target, parse_batch_sizes, parse_params

    # Everything typed is checked before the models load and the model file runs.
    bs = list(parse_batch_sizes(batch_sizes, "--batch-sizes"))
    params = parse_params(param)
    if device_type is not None and not device_type.strip():
        raise UsageError("--device-type is empty: give a model set (e.g. cuda_h100) or a kind (cuda, cpu)",
                         step="arguments")
    if batch_axis is not None and batch_axis < 0:
        raise UsageError(f"--batch-axis must be 0 or more (an axis of the first input), got {batch_axis}",
                         step="arguments")
    is_onnx = target.lower().endswith(".onnx")
    if is_onnx:
        if params:
            raise UsageError("--param only applies to zoo models (zoo:<family>), not to an ONNX file", step="arguments")
        if not Path(target).is_file():
            raise UsageError(f"no ONNX file at {target}", step="arguments")
    else:
        check_target(target, params)
    if out is not None:
        if out.is_dir():
            raise UsageError(f"--out {out} is a directory; give the card's file name, e.g. {out / 'card.json'}",
                             step="arguments")
        check_out_dir(out.parent)

    from perfpredict.predictor import Predictor

    pred = Predictor.load(models)
    if is_onnx:
        card = pred.predict(onnx_path=target, batch_sizes=bs, device_type=device_type, mode=mode,
                            batch_axis=batch_axis)
    else:
        card = pred.predict(target, batch_sizes=bs, device_type=device_type, params=params or None, mode=mode,
                            batch_axis=batch_axis)
    print_prediction(card)
    if out:
        try:
            card.save(out)
        except OSError as e:
            raise UsageError(f"cannot write the card to {out}: {e.strerror or e}", step="write") from None
        out_console.print(f"card: {out}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    models: Annotated[Path | None, typer.Option(help="trained_models folder")] = None,
    max_upload_mb: Annotated[float, typer.Option(help="largest ONNX upload accepted, MB")] = 256.0,
) -> None:
    """Serve the Predictor over HTTP (FastAPI; OpenAPI at /docs). Never executes client code."""
    import math

    from perfpredict.service import serve as run

    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0-65535, got {port}", step="arguments")
    if not (math.isfinite(max_upload_mb) and max_upload_mb > 0):
        raise UsageError(f"--max-upload-mb must be a positive number, got {max_upload_mb}", step="arguments")
    run(host, port, str(models) if models else None, int(max_upload_mb * 1e6),
        on_ready=lambda: out_console.print(f"perfpredict serving on http://{host}:{port} (OpenAPI: /docs)"))
