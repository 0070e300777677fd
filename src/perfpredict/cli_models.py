"""``perfpredict train``, ``perfpredict predict`` and ``perfpredict serve`` (registered on the main app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from perfpredict.cli import app, err_console, out_console, print_prediction
from perfpredict.errors import PerfPredictError, UsageError


@app.command()
def train(
    datasets: Annotated[Path, typer.Option(help="folder of measured datasets (*.csv + zoo_features.csv)")] = Path("datasets"),
    out: Annotated[Path, typer.Option(help="where the models go (one folder per dataset)")] = Path("trained_models"),
    no_eval: Annotated[bool, typer.Option("--no-eval", help="skip cross-validation: fit the final models only, of the kinds it usually ships, with uncalibrated intervals")] = False,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    no_register: Annotated[bool, typer.Option("--no-register", help="log to MLflow but do not register models")] = False,
    only: Annotated[list[str] | None, typer.Option("--only", help="train only this dataset (file stem, e.g. "
                                                                  "cpu_epyc_2vcpu_infer; repeatable)")] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-estimators",
) -> None:
    """Rebuild the estimators from datasets/: grouped CV of XGBoost/LightGBM/RF/linear, fit, save, log to MLflow.

    Scores are leave-one-family-out (families never seen in training). For memory, the XGBoost/LightGBM/RF/
    linear columns are learned corrections on top of the physical baseline."""
    from perfpredict.cli import check_out_dir
    from perfpredict.estimators.targets import BASELINE_CORRECTION
    from perfpredict.estimators.train import rows_left_out, train_all

    if not datasets.is_dir():
        raise UsageError(f"no datasets folder at {datasets}", step="train")
    check_out_dir(out)
    from perfpredict.cli import check_experiment

    check_experiment(no_mlflow, experiment)
    if not no_mlflow:
        from perfpredict.cli import prepare_mlflow

        prepare_mlflow(experiment)  # a bad tracking URI fails now, not after training

    def report(ts) -> None:
        """Print and log one set as soon as it is saved: a later set's failure must not lose it."""
        t = Table(title=f"{ts.name} ({ts.metadata['device_name']}, {ts.metadata['rows']} rows)")
        for c in ("target", "shipped model", "family-CV MAPE", "RMSLE", "XGBoost", "LightGBM", "random forest",
                  "linear", "q10-q90 coverage (raw → calibrated)"):
            t.add_column(c)
        shown = {"none": "physical baseline", BASELINE_CORRECTION: "baseline × XGBoost"}
        for name, e in ts.metadata["targets"].items():
            ev = e.get("evaluation")
            if not ev:
                t.add_row(name, shown.get(e["point_kind"], e["point_kind"]), *["-"] * 7)
                continue
            f, k = ev["family_cv"], ev["shipped_kind"]
            t.add_row(name, shown.get(k, k), f"{f[k]['mape']:.1%}", f"{f[k]['rmsle']:.3f}",
                      *(f"{f[x]['mape']:.1%}" if x in f else "-" for x in ("xgboost", "lightgbm", "random_forest",
                                                                            "linear")),
                      f"{ev['quantiles_family_cv']['coverage']:.0%} → "
                      f"{ev['interval_calibration']['nested_family_cv']['coverage']:.0%}")
        out_console.print(t)
        for name in ts.metadata["targets"]:
            left_out = rows_left_out(ts.metadata, name)
            if left_out:
                out_console.print(f"note: {name}: {escape(left_out)}", style="dim", highlight=False)
        out_console.print(f"saved to {ts.out_dir}/ (report.md has the full tables)")
        if not no_mlflow:
            from perfpredict.estimators.tracking import log_training

            try:
                run_id = log_training(ts, register=not no_register, experiment=experiment)
            except Exception as e:  # noqa: BLE001 - the set is saved; the next sets must still be trained
                err_console.print(f"[yellow]warning[/]: MLflow logging of {ts.name} failed ({type(e).__name__}: "
                                  f"{escape(str(e))}); the set is saved in {ts.out_dir}", highlight=False)
                return
            out_console.print(f"MLflow run {run_id}" + ("" if no_register else
                                                         f"; registered perfpredict-{ts.name}-<target>"))

    try:
        with out_console.status("training") as status:
            train_all(datasets, out, evaluate=not no_eval, progress=lambda m: status.update(m), only=only,
                      on_done=report)
    except KeyboardInterrupt:
        err_console.print(f"interrupted: the sets saved above are complete; the one in training was discarded and "
                          f"{out} keeps its previous version", highlight=False)
        raise typer.Exit(130) from None


def frozen_option(values: list[str] | None, option: str, is_onnx: bool, example: str = "backbone.") -> list[str]:
    """A ``--frozen``-style option's initializer name prefixes (repeatable, or comma-separated:
    :func:`~perfpredict.estimators.arch.given_frozen`); a UsageError when it is given but names none, or given for
    a target that is not an ONNX file. (A prefix that starts no initializer's name is refused by the prediction,
    which reads the graph.)"""
    from perfpredict.estimators.arch import given_frozen

    try:
        prefixes = given_frozen(values, option, f"{option} {example}")
    except ValueError as e:
        raise UsageError(str(e), step="arguments") from None
    if prefixes and not is_onnx:
        raise UsageError(f"{option} only applies to an ONNX file (a model file says which weights are frozen "
                         "itself, with requires_grad=False, and so does a card)", step="arguments")
    return prefixes


def frozen_or_trained_options(frozen: list[str] | None, trained: list[str] | None, options: tuple[str, str],
                              is_onnx: bool) -> tuple[list[str], list[str]]:
    """``--frozen``'s and ``--trained``'s prefixes (``options``: their names), each as :func:`frozen_option`
    reads it; a UsageError when both name some (:func:`~perfpredict.estimators.arch.check_frozen_or_trained`)."""
    from perfpredict.estimators.arch import PREFIX_EXAMPLES, check_frozen_or_trained

    prefixes = (frozen_option(frozen, options[0], is_onnx),
                frozen_option(trained, options[1], is_onnx, PREFIX_EXAMPLES["trained"]))
    check_frozen_or_trained(*prefixes, names=options, step="arguments")
    return prefixes


def dims_option(values: list[str] | None, option: str, is_onnx: bool) -> dict[str, int]:
    """A ``--dim``-style option's sizes of symbolic input dimensions besides the batch (``NAME=SIZE``,
    repeatable: :func:`~perfpredict.estimators.arch.parse_dims`); a UsageError for a malformed or repeated one,
    or for a target that is not an ONNX file."""
    from perfpredict.estimators.arch import DimGivenTwice, parse_dims

    try:
        dims = parse_dims(values or (), max_size=10**9)
    except DimGivenTwice as e:
        raise UsageError(f"{option} {e.args[0]} is given twice", step="arguments") from None
    except ValueError as e:
        raise UsageError(f"{option} {e.args[0]!r}: expected NAME=SIZE with a whole size from 1 to 1e9, e.g. {option} "
                         "seq=128", step="arguments") from None
    if dims and not is_onnx:
        raise UsageError(f"{option} only applies to an ONNX file (a model file's inputs are its example_inputs)",
                         step="arguments")
    return dims


OPTIMIZER_STATES_HELP = ("copies of each trained weight the training job's optimizer keeps as state, charged to "
                         "training memory: 1 as the training data (SGD with momentum), 0 plain SGD, 2 Adam/AdamW "
                         "[a model file's make_optimizer, probed; else 1]")
OPTIMIZER_HELP = ("the training job's optimizer, one of torch.optim's own by name (case-insensitive; sgd, "
                  "sgd-momentum, adam, adamw, adagrad, rmsprop, ...), optionally with options: adamw:foreach=true. "
                  "Its state copies and its step's temporaries are probed over the trained weights' shapes; for a "
                  "model file it replaces make_optimizer. Not with --optimizer-states")


#: ``perfpredict predict``'s and ``perfpredict max-batch --predicted``'s options for an ONNX file.
BATCH_AXIS_HELP = (".onnx only: the axis of the first input that is the batch, negative from the last as in Python "
                   "(default: the first, or the symbolic one)")
BATCH_INPUT_HELP = (".onnx only: the name of the input that carries the batch when it is not the first (a static "
                    "positions or mask input first); --batch-axis is then an axis of it")
DIM_HELP = ".onnx only: NAME=SIZE for a symbolic input dimension besides the batch, e.g. --dim seq=128 (repeatable)"
FROZEN_HELP = (".onnx only: PREFIX of the initializer names of weights the training job freezes (requires_grad=False), "
               "e.g. --frozen backbone. (repeatable): they get no gradient nor optimizer state; a model file says "
               "which are frozen itself")
TRAINED_HELP = (".onnx only, instead of --frozen: PREFIX of the initializer names of the weights that train, every "
                "other floating-point weight frozen, e.g. --trained blocks.0.q.lora_ (repeatable): LoRA, adapters, "
                "BitFit")


def check_onnx_target(target: str, params: dict | None) -> None:
    """The checks on an ONNX file target that need no parsing: no ``--param`` (one fixed architecture), and a
    file there. (A file that is not an ONNX graph is refused by the prediction, which parses it.)"""
    if params:
        raise UsageError("--param only applies to zoo models (zoo:<family>), not to an ONNX file", step="arguments")
    if not Path(target).is_file():
        raise UsageError(f"no ONNX file at {target}", step="arguments")


def optimizer_options(optimizer: str | None, states: float | None, option: str = "--optimizer",
                      states_option: str = "--optimizer-states"):
    """``--optimizer-states`` (or ``-a``/``-b``'s, ``states_option``) checked
    (:func:`~perfpredict.predictor.check_optimizer_state_copies`) and ``--optimizer`` (``option``)
    (:func:`~perfpredict.predictor.check_optimizer_given`: refused beside it): the copies and the named optimizer.
    Imports torch: call it after the checks that must answer before."""
    from perfpredict.predictor import check_optimizer_given, check_optimizer_state_copies

    copies = check_optimizer_state_copies(states, states_option, step="arguments")
    return copies, check_optimizer_given(optimizer, copies, names=(option, states_option), step="arguments")


@app.command()
def predict(
    target: Annotated[str, typer.Argument(help="model.py, zoo:<family> or a .onnx file")],
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", "-b", help="comma-separated")] = "32",
    device_type: Annotated[str | None, typer.Option(
        help="model set (e.g. cuda_h100, cpu_xeon_2vcpu) or kind (cuda, cpu; cpu: the set measured on this "
             "machine's CPU model if any)")] = None,
    mode: Annotated[str | None, typer.Option(help="train (default) or infer: the model set trained on "
                                                  "training steps or on inference passes")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | bf16 | fp16: the model set trained at that autocast "
                                                       "precision [a model file's PRECISION if a set has it, else fp32]")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="zoo parameter name=value (repeatable)")] = None,
    models: Annotated[Path | None, typer.Option(help="trained_models folder")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write the predicted card here")] = None,
    batch_axis: Annotated[int | None, typer.Option(help=BATCH_AXIS_HELP)] = None,
    batch_input: Annotated[str | None, typer.Option(help=BATCH_INPUT_HELP)] = None,
    dim: Annotated[list[str] | None, typer.Option("--dim", help=DIM_HELP)] = None,
    frozen: Annotated[list[str] | None, typer.Option("--frozen", help=FROZEN_HELP)] = None,
    trained: Annotated[list[str] | None, typer.Option("--trained", help=TRAINED_HELP)] = None,
    optimizer_states: Annotated[float | None, typer.Option("--optimizer-states", help=OPTIMIZER_STATES_HELP)] = None,
    optimizer: Annotated[str | None, typer.Option("--optimizer", help=OPTIMIZER_HELP)] = None,
    mlflow: Annotated[bool, typer.Option("--mlflow", help="also log the prediction as an MLflow run (kind "
                                                          "'prediction'; off by default: a query, not a measurement)")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name (with --mlflow)")] = "perfpredict-predictions",
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,  # noqa: ARG001
) -> None:
    """Predict a card for a job nobody has profiled (from the estimators in trained_models/)."""
    from perfpredict.cli import check_experiment, prepare_mlflow
    from perfpredict.output_paths import output_file_problem
    from perfpredict.workload_args import check_target, parse_batch_sizes, parse_params

    # Everything typed is checked before the models load and the model file runs.
    bs = list(parse_batch_sizes(batch_sizes, "--batch-sizes"))
    params = parse_params(param)
    if precision is not None:
        from perfpredict.workload.ref import check_precision

        precision = check_precision(precision, "--precision")
    if device_type is not None and not device_type.strip():
        raise UsageError("--device-type is empty: give a model set (e.g. cuda_h100) or a kind (cuda, cpu)",
                         step="arguments")
    is_onnx = target.lower().endswith(".onnx")
    dims = dims_option(dim, "--dim", is_onnx)
    prefixes, trained_prefixes = frozen_or_trained_options(frozen, trained, ("--frozen", "--trained"), is_onnx)
    copies, named = optimizer_options(optimizer, optimizer_states)
    if is_onnx:
        check_onnx_target(target, params)
    else:
        check_target(target, params)
    if out is not None:
        if out.is_dir():
            raise UsageError(f"--out {out} is a folder; give the card's file name, e.g. {out / 'card.json'}",
                             step="arguments")
        problem = output_file_problem(out)
        if problem:
            raise UsageError(f"--out: {problem}", step="arguments")
    if mlflow:
        check_experiment(False, experiment)
        prepare_mlflow(experiment)

    from perfpredict.predictor import Predictor

    pred = Predictor.load(models)
    warn_unusable_calibrations(pred)
    if is_onnx:
        card = pred.predict(onnx_path=target, batch_sizes=bs, device_type=device_type, mode=mode,
                            batch_axis=batch_axis, precision=precision, dims=dims or None, frozen=prefixes or None,
                            optimizer_state_copies=copies, batch_input=batch_input, optimizer=named,
                            trained=trained_prefixes or None)
    else:
        card = pred.predict(target, batch_sizes=bs, device_type=device_type, params=params or None, mode=mode,
                            batch_axis=batch_axis, precision=precision, optimizer_state_copies=copies,
                            batch_input=batch_input, optimizer=named)
    print_prediction(card)
    if out:
        try:
            card.save(out)
        except OSError as e:
            raise UsageError(f"cannot write the card to {out}: {e.strerror or e}", step="write") from None
        out_console.print(f"card: {out}")
    if mlflow:
        from perfpredict.tracking import log_profile, tracking_uri

        try:
            run_id = log_profile(card, experiment=experiment, files=[out] if out else ())
            out_console.print(f"mlflow: run {run_id} in {tracking_uri()} (experiment {experiment!r})", highlight=False)
        except Exception as e:  # noqa: BLE001 - the prediction is printed (and saved with -o)
            err_console.print(f"[yellow]warning[/]: MLflow logging failed ({type(e).__name__}: {escape(str(e))})",
                              highlight=False)


@app.command()
def models(
    models_dir: Annotated[Path | None, typer.Option("--models", help="trained_models folder")] = None,
) -> None:
    """List the model sets (and calibrations) the Predictor loads, with what each predicts and which set
    `--device-type cpu` / `cuda` picks on this machine."""
    from perfpredict.estimators.device_calibration import short_cpu_id
    from perfpredict.hostinfo import cpu_id, cpu_model_name, gpu_names
    from perfpredict.predictor import Predictor

    pred = Predictor.load(models_dir)
    warn_unusable_calibrations(pred)
    picked: dict[str, list[str]] = {}
    for kind in ("cpu", "cuda"):
        for mode in ("train", "infer"):
            for precision in ("fp32", "bf16", "fp16"):
                try:
                    ms = pred.model_set(kind, mode, precision)
                except PerfPredictError:
                    continue
                picked.setdefault(ms.name, []).append(kind + ("" if mode == "train" else f" --mode {mode}")
                                                      + ("" if precision == "fp32" else f" --precision {precision}"))
    here = short_cpu_id(cpu_id())
    this_cpu = cpu_model_name() + (f" ({here})" if here else "")
    gpus = ", ".join(sorted(set(gpu_names()))) or "none"
    t = Table(title=escape(f"model sets ({len(pred.sets)}); this CPU: {this_cpu}; GPUs: {gpus}"))
    t.add_column("set", no_wrap=True)
    for c in ("device", "mode", "precision", "rows", "calibrated from", "time factor", "--device-type here"):
        t.add_column(c)
    for name, ms in pred.sets.items():
        source, factor = "-", "-"
        info = ms.calibration_info()
        if info is not None:
            source = info.source_set
            factor = f"x{info.time_factor:.3f} ({info.calibrated_at[:16].replace('T', ' ')})"
        short = short_cpu_id(ms.cpu_id)
        t.add_row(name, escape(ms.device_name + (f" ({short})" if short else "")), ms.mode, ms.precision,
                  str(ms.meta["rows"]), source, factor, escape(", ".join(picked.get(name, [])) or "-"))
    out_console.print(t)


def warn_unusable_calibrations(pred) -> None:
    """One line per model set and per calibration under the models folder that could not be loaded (damaged
    files; a calibration whose source set is gone, or a file that is not one): the prediction goes on without."""
    for line in pred.unusable_sets.values():
        err_console.print(f"warning: model set not used: {escape(line)}")
    for line in pred.unusable_calibrations:
        err_console.print(f"warning: calibration not used: {escape(line)}")


@app.command()
def colocate(
    job_a: Annotated[str, typer.Argument(help="a card.json (predicted or measured on CUDA), model.py, zoo:<family> "
                                              "or .onnx (a zoo model with parameters: its card from `perfpredict "
                                              "predict zoo:<family> -p NAME=VALUE -o a.json`)")],
    job_b: Annotated[str, typer.Argument(help="the job sharing the GPU with it (same forms)")],
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", "-b", help="A's and B's batch sizes, e.g. 32,64 "
                                                                         "(one: both) [a card's first point, else 32]")] = "",
    device_type: Annotated[str | None, typer.Option(help="CUDA model set whose interference model answers "
                                                         "[a CUDA set]")] = None,
    frozen_a: Annotated[list[str] | None, typer.Option("--frozen-a", help="A an .onnx: PREFIX of the initializer "
                                                         "names of weights its training freezes (repeatable), as "
                                                         "`perfpredict predict --frozen`")] = None,
    frozen_b: Annotated[list[str] | None, typer.Option("--frozen-b", help="the same for B")] = None,
    trained_a: Annotated[list[str] | None, typer.Option("--trained-a", help="A an .onnx, instead of --frozen-a: "
                                                        "PREFIX of the initializer names of the weights that train, "
                                                        "every other floating-point weight frozen (repeatable), as "
                                                        "`perfpredict predict --trained`")] = None,
    trained_b: Annotated[list[str] | None, typer.Option("--trained-b", help="the same for B")] = None,
    dim_a: Annotated[list[str] | None, typer.Option("--dim-a", help="A an .onnx: NAME=SIZE for a symbolic input "
                                                    "dimension besides the batch (repeatable), as `perfpredict "
                                                    "predict --dim`")] = None,
    dim_b: Annotated[list[str] | None, typer.Option("--dim-b", help="the same for B")] = None,
    batch_axis_a: Annotated[int | None, typer.Option(help="A an .onnx: the axis of its first input that is the "
                                                          "batch, as `perfpredict predict --batch-axis`")] = None,
    batch_axis_b: Annotated[int | None, typer.Option(help="the same for B")] = None,
    batch_input_a: Annotated[str | None, typer.Option(help="A an .onnx: the name of its input that carries the "
                                                           "batch, as `perfpredict predict --batch-input`")] = None,
    batch_input_b: Annotated[str | None, typer.Option(help="the same for B")] = None,
    optimizer_states_a: Annotated[float | None, typer.Option("--optimizer-states-a", help="A a model file or .onnx: "
                                                             "as `perfpredict predict --optimizer-states`")] = None,
    optimizer_states_b: Annotated[float | None, typer.Option("--optimizer-states-b", help="the same for B")] = None,
    optimizer_a: Annotated[str | None, typer.Option("--optimizer-a", help="A a model file or .onnx: as `perfpredict "
                                                    "predict --optimizer` (adamw, sgd-momentum, ...)")] = None,
    optimizer_b: Annotated[str | None, typer.Option("--optimizer-b", help="the same for B")] = None,
    models: Annotated[Path | None, typer.Option(help="trained_models folder")] = None,
) -> None:
    """Predict two jobs sharing one GPU: each one's slowdown (Horus's interference model), the pair's throughput
    and whether they fit the device's memory. Nothing is run on a GPU."""
    from perfpredict.card import PerformanceCard
    from perfpredict.predictor import Predictor
    from perfpredict.workload_args import check_target, parse_batch_sizes

    bs: list[int | None] = [None, None]
    if batch_sizes.strip():
        items = [x for x in batch_sizes.split(",") if x.strip()]
        if not items or len(items) > 2:
            raise UsageError(f"--batch-sizes takes one or two values (A's, B's), got {batch_sizes!r}", step="arguments")
        parsed = [parse_batch_sizes(x, "--batch-sizes")[0] for x in items]
        bs = [parsed[0], parsed[-1]]
    frozen = [frozen_or_trained_options(f, tr, o, t.lower().endswith(".onnx"))
              for f, tr, o, t in ((frozen_a, trained_a, ("--frozen-a", "--trained-a"), job_a),
                                  (frozen_b, trained_b, ("--frozen-b", "--trained-b"), job_b))]
    dims = [dims_option(d, o, t.lower().endswith(".onnx"))
            for d, o, t in ((dim_a, "--dim-a", job_a), (dim_b, "--dim-b", job_b))]
    axes = [batch_axis_a, batch_axis_b]
    batch_inputs = [batch_input_a, batch_input_b]
    for a, o, t in zip([*axes, *batch_inputs], ("--batch-axis-a", "--batch-axis-b", "--batch-input-a",
                                                "--batch-input-b"), (job_a, job_b) * 2):
        if a is not None and t.lower().endswith(".json"):
            raise UsageError(f"{o} does not apply to a card (its features are counted already): give an ONNX file",
                             step="arguments")
        if a is not None and not t.lower().endswith(".onnx"):
            raise UsageError(f"{o} only applies to an ONNX file (a model file is exported at batch 1 and 2)",
                             step="arguments")
    copies, named = zip(optimizer_options(optimizer_a, optimizer_states_a, "--optimizer-a", "--optimizer-states-a"),
                        optimizer_options(optimizer_b, optimizer_states_b, "--optimizer-b", "--optimizer-states-b"))
    for c, o, t in zip([*copies, *named], ("--optimizer-states-a", "--optimizer-states-b", "--optimizer-a",
                                           "--optimizer-b"), (job_a, job_b) * 2):
        if c is not None and t.lower().endswith(".json"):
            raise UsageError(f"{o} does not apply to a card (its memory is predicted or measured already): give a "
                             "model file or an ONNX file", step="arguments")
    for t in (job_a, job_b):
        if t.lower().endswith((".json", ".onnx")):
            if not Path(t).is_file():
                raise UsageError(f"no file at {t}", step="arguments")
        else:
            check_target(t)
    pred = Predictor.load(models)
    given = {t: PerformanceCard.load(t) for t in (job_a, job_b) if t.lower().endswith(".json")}
    # a job without a card is predicted on the GPU a given predicted card is for, not on the default set
    predict_on = device_type or pred.cards_set(*given.values()) or "cuda"
    cards = []
    for t, b, f, d, a, c, i, o in zip((job_a, job_b), bs, frozen, dims, axes, copies, batch_inputs, named):
        if t in given:
            cards.append(given[t])
        elif t.lower().endswith(".onnx"):
            cards.append(pred.predict(onnx_path=t, batch_sizes=[b or 32], device_type=predict_on,
                                      frozen=f[0] or None, trained=f[1] or None, dims=d or None, batch_axis=a,
                                      optimizer_state_copies=c, batch_input=i, optimizer=o))
        else:
            cards.append(pred.predict(t, batch_sizes=[b or 32], device_type=predict_on, batch_axis=a,
                                      optimizer_state_copies=c, batch_input=i, optimizer=o))
    r = pred.colocation(*cards, batch_sizes=(bs[0], bs[1]), device_type=device_type)
    gpus = {c.device.name for c in cards if c.device.kind == "cuda"}
    gpu = gpus.pop() if len(gpus) == 1 else r.device_name  # the GPU the cards are for, not the interference model's
    t = Table(title=f"sharing one {gpu} ({r.device_type}'s interference model)")
    t.add_column("job", overflow="fold")  # a model's name is an identifier: wrapped, never cut with an ellipsis
    for c in ("batch", "source", "solo GPU util", "solo iter time", "shared iter time", "GPU memory"):
        t.add_column(c)
    for j in r.jobs:
        t.add_row(j.name, str(j.batch_size), j.source, f"{j.gpu_utilization:.0%}", f"{j.iter_time_s * 1e3:.2f} ms",
                  f"{j.iter_time_colocated_s * 1e3:.2f} ms",
                  "-" if j.device_memory_bytes is None else f"{j.device_memory_bytes / 2**30:.2f} GiB")
    out_console.print(t)
    rmse = ("" if r.slowdown_rmse_unseen_job is None else
            f" (RMSE {r.slowdown_rmse_unseen_job:.2f} on a job the model has not seen, "
            f"{r.slowdown_rmse_mean_baseline:.2f} for the mean slowdown)")
    out_console.print(f"cumulative utilisation {r.cumulative_utilization:.0%}: slowdown T_deg {r.slowdown:.2f} for "
                      f"each{rmse}; together {r.aggregate_throughput:.2f} solo jobs' worth of work", highlight=False)
    if r.fits_in_memory is not None:
        out_console.print(f"memory: {r.device_memory_bytes / 2**30:.1f} of {r.device_capacity_bytes / 2**30:.1f} GiB "
                          f"({'fits' if r.fits_in_memory else 'does NOT fit'})", highlight=False)
    for n in r.notes:
        err_console.print(f"note: {n}", highlight=False)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    models: Annotated[Path | None, typer.Option(help="trained_models folder")] = None,
    max_upload_mb: Annotated[float, typer.Option(help="largest ONNX upload accepted, MB")] = 256.0,
) -> None:
    """Serve the Predictor over HTTP (FastAPI; OpenAPI at /docs). Never executes client code."""

    from perfpredict.service import serve as run

    if not 1 <= port <= 65535:
        raise UsageError(f"--port must be 1-65535, got {port}", step="arguments")
    if not 0.001 <= max_upload_mb <= 1e6:  # nan fails too; below 1 kB not even a header fits
        raise UsageError(f"--max-upload-mb must be from 0.001 (1 kB) to 1e6 (1 TB), got {max_upload_mb:g}",
                         step="arguments")
    import errno
    import os
    import socket

    try:  # a port in use is found before the models load and before the banner says the service runs
        with socket.create_server((host, port)):
            pass
    except socket.gaierror as e:  # its errno is the resolver's (-2), which os.strerror does not know
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror} (give an address of this machine, e.g. "
                         "127.0.0.1 or 0.0.0.0)", step="arguments") from None
    except OSError as e:
        why = (e.strerror or (os.strerror(e.errno) if e.errno else str(e))).split(" (while attempting")[0]
        hint = " (another server there? try --port)" if e.errno == errno.EADDRINUSE else ""
        raise UsageError(f"cannot listen on {host}:{port}: {why}{hint}", step="arguments") from None
    run(host, port, str(models) if models else None, int(max_upload_mb * 1e6),
        on_ready=lambda: out_console.print(f"perfpredict serving on http://{host}:{port} (OpenAPI: /docs)"))
