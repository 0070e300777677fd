"""``profile_workload``: measure a workload across batch sizes and assemble its PerformanceCard.

Order of work, chosen so that nothing measured can be lost:

1. load and build the model in this process (fast failure for a broken ``model.py``; exact parameter count);
2. measure each batch size in a fresh subprocess; the card is rewritten to ``card.json`` after every point,
   so an interrupt, a crash or a later failure still leaves every finished measurement on disk;
3. fit the rate model and the latency's ν to the successful points;
4. export to ONNX and extract graph features (never fatal), then the Horus memory estimate per batch.

Failures of the model itself (an exception in forward, a NaN loss) are recorded per batch size; the sweep
stops early when the same failure repeats, since then it is the model, not the batch size.
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfpredict import __version__
from perfpredict.card import (
    CardError,
    DeviceInfo,
    EnergyInfo,
    EnergyPoint,
    GraphFeatures,
    LatencyModel,
    MemoryPoint,
    ModelInfo,
    PerformanceCard,
    ProfileRun,
    StartupTimes,
    ThroughputPoint,
    TimingStats,
    utc_now,
)
from perfpredict.errors import ModelRunError, NonFiniteLossError, PerfPredictError, UsageError, exception_text
from perfpredict.profile.host_load import competed
from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.spec import (
    Workload,
    packed_weights,
    parameter_bytes,
    sample_input_bytes,
    weights_precision,
)

if TYPE_CHECKING:
    from perfpredict.estimators.arch import SavedCounts


@dataclass
class ProfileSettings:
    batch_sizes: tuple[int, ...] | None = None  # None: the workload's own (BATCH_SIZES or zoo default)
    mode: str = "train"
    device: str = "auto"
    timing: TimingConfig = field(default_factory=TimingConfig)
    threads: int | None = None
    memory_limit_bytes: int | None = None  # CPU: None → 90% of the memory available at the start; CUDA: None = no cap
    point_timeout_s: float | None = None  # None → derived from the timing caps
    features: bool = True
    fvcore: bool = True
    measure_energy: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        # The Python API reaches here without the CLI's checks: a wrong value is one UsageError, found before
        # anything is built or measured.
        if self.mode not in ("train", "infer"):
            raise UsageError(f"mode must be 'train' or 'infer', got {self.mode!r}", step="arguments")
        from perfpredict.profile.request import check_threads

        check_threads(self.threads)
        if self.batch_sizes is not None:  # as the CLI's --batch-sizes: sorted, each once, positive integers
            from perfpredict.workload_args import parse_batch_sizes

            self.batch_sizes = parse_batch_sizes(self.batch_sizes, "batch_sizes")
        for name in ("memory_limit_bytes", "point_timeout_s"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
                raise UsageError(f"{name} must be a positive number, got {v!r}", step="arguments")
        if not isinstance(self.timing, TimingConfig):
            raise UsageError(f"timing must be a TimingConfig (perfpredict.profile.TimingConfig), got "
                             f"{type(self.timing).__name__}", step="arguments")

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "device": self.device, "threads": self.threads,
                "memory_limit_bytes": self.memory_limit_bytes, "point_timeout_s": self.point_timeout_s,
                "features": self.features, "fvcore": self.fvcore, "measure_energy": self.measure_energy,
                "seed": self.seed, "timing": self.timing.as_dict()}


class ProfileListener:
    """Progress callbacks (the CLI draws a progress bar from these). All optional."""

    def stage(self, name: str) -> None: ...

    def point_started(self, batch_size: int, index: int, total: int) -> None: ...

    def point_finished(self, point: ThroughputPoint, index: int, total: int) -> None: ...


@dataclass
class ProfileOutcome:
    card: PerformanceCard
    card_path: Path | None
    onnx_path: Path | None
    #: The failure to report (non-zero exit) after everything measured was written; None on success.
    error: PerfPredictError | None = None


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "numpy", "scipy", "onnx", "onnxruntime", "fvcore", "mlflow", "pydantic"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _run_option_notes(workload: Workload, mode: str) -> list[str]:
    """What the card says about how its steps ran: mixed precision, a ``train_step`` hook, ``torch.compile``."""
    from perfpredict.workload.ref import autocast_note
    from perfpredict.workload.spec import AUTOCAST_DTYPES

    notes = []
    hook = workload.train_step is not None and mode == "train"
    if workload.precision != "fp32":
        dtype = str(AUTOCAST_DTYPES[workload.precision]).removeprefix("torch.")
        notes.append(
            f"{autocast_note(workload.precision)}({dtype})"
            + (" with a gradient scaler" if workload.precision == "fp16" and mode == "train" and not hook else "")
            + "; the graph features and the Horus eq. 2 memory estimate describe the fp32 graph")
    if hook:
        notes.append(
            "train_step: every training measurement timed the model file's own train_step(model, inputs, targets, "
            "optimizer) instead of the default step"
            + ("; under fp16 it does its own loss scaling (no GradScaler is added)" if workload.precision == "fp16"
               else ""))
    if workload.compile:
        notes.append(
            "compiled: each measuring process called torch.compile(model) and compiled at its first step, so the "
            "compile time is in startup.first_iter_extra_s and the latency's ν, not in the timed iterations; on CPU "
            "the peak RSS includes the compiler's own memory")
    return notes


def _packed_weights_notes(model: Any) -> list[str]:
    """What the card says of weights a quantized module holds packed (no nn.Parameter): counted in the model's
    parameters and bytes at their stored size, as frozen; or, where they cannot be unpacked, that they are not."""
    packed = packed_weights(model)
    notes = []
    if packed.count:
        notes.append(f"{packed.count:,} of the model's parameters ({packed.bytes:,} B) are weights its quantized "
                     "modules hold packed (torch.ao.quantization.quantize_dynamic's Linear), counted at their stored "
                     "size (one byte a qint8 weight) and as frozen: autograd computes no gradient for them")
    if packed.uncounted:
        notes.append("the packed weights of quantized module(s) " + ", ".join(packed.uncounted[:5])
                     + (f" and {len(packed.uncounted) - 5} more" if len(packed.uncounted) > 5 else "")
                     + " are not counted in the model's parameters and bytes (they cannot be unpacked here)")
    return notes


def _compiled_by_file(model: Any) -> bool:
    """Whether ``build_model`` itself returned a ``torch.compile``'d module (an ``OptimizedModule``)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # noqa: BLE001 - a torch without dynamo compiles nothing
        return False
    return isinstance(model, OptimizedModule)


def _model_info(workload: Workload) -> tuple[ModelInfo, Any]:
    import torch

    torch.manual_seed(0)
    try:
        model = workload.build_model()
    except BaseException as e:  # user code: sys.exit() included
        if isinstance(e, KeyboardInterrupt):
            raise
        import traceback

        raise ModelRunError(f"build_model() raised {type(e).__name__}: {exception_text(e)}", source=workload.source,
                            step="build_model", detail=traceback.format_exc()) from None
    if not isinstance(model, torch.nn.Module):
        raise ModelRunError(f"build_model() returned {type(model).__name__}, expected a torch.nn.Module",
                            source=workload.source, step="build_model")
    params = list(model.parameters())
    packed = packed_weights(model)  # a quantized module's packed weights: no nn.Parameter, and no gradient
    sha = None
    if workload.ref.kind == "file":
        sha = hashlib.sha256(Path(workload.ref.target).read_bytes()).hexdigest()
    info = ModelInfo(
        name=workload.name, source=workload.source,
        parameters=sum(p.numel() for p in params) + packed.count,
        trainable_parameters=sum(p.numel() for p in params if p.requires_grad),
        param_bytes=parameter_bytes(model) + packed.bytes,
        frozen_param_bytes=parameter_bytes(model, trainable=False) + packed.bytes,
        buffer_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        family=workload.extra.get("family"), config=workload.extra.get("config"), file_sha256=sha)
    return info, model


def _put_saved_counts(features: GraphFeatures, counts: SavedCounts) -> None:
    """A measured training card's saved-tensor counts (:func:`~perfpredict.estimators.arch.saved_counts_of_model`),
    and the bytes a checkpointing model's recomputation saves at once (null where nothing is recomputed, as a
    predicted card writes them: with exact saved bytes, which keep only the segments' inputs, they are charged on
    top). A count that failed leaves them null, said in the features' notes, and the profile goes on."""
    if counts.failure is not None:
        features.notes.append(f"{counts.failure}; the saved-tensor counts are left out, so predicting from this card "
                              "estimates them from the graph (with the wider intervals of estimated counts)")
        return
    features.saved_bytes_per_sample, features.saved_bytes_fixed = counts.saved
    features.saved_cpu_bytes_per_sample, features.saved_cpu_bytes_fixed = counts.saved_cpu
    if any(counts.recomputed + counts.recomputed_cpu):
        features.recompute_saved_bytes_per_sample, features.recompute_saved_bytes_fixed = counts.recomputed
        features.recompute_saved_cpu_bytes_per_sample, features.recompute_saved_cpu_bytes_fixed = counts.recomputed_cpu


def profile_workload(workload: Workload, settings: ProfileSettings | None = None, *,
                     out_dir: str | Path | None = None, listener: ProfileListener | None = None,
                     command: str | None = None, extended=None) -> ProfileOutcome:
    """Profile ``workload`` and return its card (also written to ``out_dir/card.json`` when given).

    ``extended`` (:class:`~perfpredict.profile.extended.ExtendedSettings`) adds co-location, data-parallel
    scaling, the comm model and CPU/memory sensitivity after the batch sweep.

    Raises :class:`PerfPredictError` only for failures before anything is measured (a model that cannot
    be built, a CUDA request without a GPU); later failures are returned in ``ProfileOutcome.error``.
    """
    from perfpredict.profile import runner
    from perfpredict.profile.device import describe_device, resolve_device
    from perfpredict.profile.memory import available_memory_bytes
    from perfpredict.profile.request import PointRequest, same_inputs_as

    settings = settings or ProfileSettings()
    listener = listener or ProfileListener()
    t_begin = time.perf_counter()
    device = resolve_device(settings.device)
    runner.warm_up()  # the fork server imports torch while we build the model here
    batch_sizes = tuple(settings.batch_sizes or workload.batch_sizes)
    listener.stage("building model")
    info, model = _model_info(workload)
    # a file whose build_model returns torch.compile(...) is measured compiled without --compile: the card said
    # compiled false, and nothing of the compile time in its first step and ν
    compiled_by_file = not workload.compile and _compiled_by_file(model)
    # parameter gradients exist only for trainable parameters (Horus eq. 2's parameter term)
    trainable_param_bytes = parameter_bytes(model, trainable=True)

    mem_limit = settings.memory_limit_bytes
    if device == "cpu" and mem_limit is None:
        mem_limit = int(available_memory_bytes() * 0.9)
    timeout = settings.point_timeout_s or (settings.timing.max_time_s * 4 + 300)

    out = Path(out_dir) if out_dir is not None else None
    card_path = out / "card.json" if out else None
    card = PerformanceCard(
        status="partial", model=info,
        device=DeviceInfo(kind="cuda" if device.startswith("cuda") else "cpu", name="(not yet measured)"),
        run=ProfileRun(mode=settings.mode, precision=weights_precision(model, workload.precision),
                       compiled=workload.compile or compiled_by_file,
                       batch_sizes=list(batch_sizes), started_at=utc_now(),
                       perfpredict_version=__version__, library_versions=library_versions(), command=command,
                       settings={**settings.as_dict(), "device": device, "memory_limit_bytes": mem_limit}),
        notes=_run_option_notes(workload, settings.mode) + _packed_weights_notes(model) + ([
            "compiled: the model file's build_model returned a torch.compile'd module, so every measurement ran "
            "it compiled, compiling at its first step: the compile time is in startup.first_iter_extra_s and the "
            "latency's ν, not in the timed iterations; on CPU the peak RSS includes the compiler's own memory"]
            if compiled_by_file else []))
    energy = EnergyInfo(available=False)
    optimizer_state: list[int] = []
    overheads: list[int] = []
    device_described = False
    last_failure: tuple[str, str] | None = None

    def save() -> None:
        if card_path is not None:
            card.save(card_path)

    # Graph features first: they need only the model, and the fork server is still importing torch, so this
    # work overlaps its start-up instead of adding to the wall time. Nothing is measured yet, so a crash in
    # an exporter cannot lose measurements.
    onnx_path = None
    if settings.features:
        listener.stage("exporting ONNX / graph features")
        from perfpredict.features import extract_features

        onnx_path = out / "model.onnx" if out else None
        graphs: dict = {}  # the exports extract_features analysed, by batch size
        card.features = extract_features(workload, model=model, onnx_path=onnx_path, use_fvcore=settings.fvcore,
                                         graphs=graphs)
        if not card.features.available:
            onnx_path = None
            card.errors.append(CardError(step="export_onnx", message=card.features.error or "export failed"))
        else:  # features=card reads it as a model file's prediction does (0 before: a step time 1-4.6% apart)
            try:
                card.features.input_bytes_per_sample = sample_input_bytes(workload)
            except Exception:  # noqa: BLE001 - a file's example_inputs refusing batch 1: left null, read as 0
                pass
        if card.features.available and settings.mode == "train":
            # what Predictor.predict(features=card) needs to predict this job's training step on another device
            # as predicting its model file does: the optimizer's state, the step work frozen weights skip, the
            # forward work activation checkpointing recomputes and the parameters the step never uses
            from perfpredict.estimators.arch import training_probes_of_model

            # the same runs, in the same order, as predicting the model file makes them
            probes = training_probes_of_model(workload, model, graphs.get(2))
            # the saved-tensor counts of the training forward: features=card then charges them, not an estimate
            # from the eval-mode graph with the wider intervals of estimated counts
            _put_saved_counts(card.features, probes.counts)
            # None where no probe could tell the copies (null says "as the training data's"); copies probed but a
            # step the meta probe could not take keep them
            card.features.optimizer_state_copies = probes.copies
            card.features.optimizer_step_bytes = probes.step_bytes
            card.features.frozen_step_work_ratio = probes.frozen_ratio
            card.features.recompute_step_work_ratio = probes.step.recompute_ratio
            # a step that failed, or frozen weights whose step work could not be weighed, leave the time unadjusted:
            # the card says so, as a model file's prediction notes it (and features=card repeats the notes)
            card.features.notes.extend(probes.notes)
            if probes.unused_bytes:  # null where none is, as the predicted card writes it
                card.features.unused_param_bytes = int(probes.unused_bytes)
                card.features.unused_frozen_param_bytes = int(probes.unused_frozen_bytes)
    del model

    def close_sweep(interrupted: bool) -> None:
        """What the finished points give, whether the sweep ran through or was interrupted: the device (when no
        point described it), their energy and utilisation, and the rate model."""
        if not device_described:
            try:
                card.device = DeviceInfo(**describe_device(device, settings.threads))
            except Exception:  # noqa: BLE001 - describing must not hide the real failure
                pass
        card.energy = energy
        ok = card.measured_points()
        if not ok:
            return
        listener.stage("fitting rate model")
        try:
            _fit(card, ok, device)
        except Exception:  # noqa: BLE001 - on the way out of an interrupt a fit problem must not lose the points
            if not interrupted:
                raise

    save()
    signatures: dict[int, object] = {}  # batch size -> the shapes of the inputs it timed (input_signature)
    # Ctrl-C anywhere in the sweep (in a measurement, or between one and the next) keeps every finished point.
    try:
        for i, b in enumerate(batch_sizes):
            listener.point_started(b, i, len(batch_sizes))
            req = PointRequest(ref=workload.ref, batch_size=b, mode=settings.mode, device=device,
                               timing=settings.timing, threads=settings.threads, memory_limit_bytes=mem_limit,
                               seed=settings.seed, measure_energy=settings.measure_energy)
            res = runner.run_in_subprocess(req, timeout)
            same = same_inputs_as(signatures, b, res)
            if same is not None:  # every "batch size" timed the same inputs: the throughputs would be fiction
                res = {"status": "error", "batch_size": b, "phase": "example_inputs",
                       "error": f"example_inputs returned the same inputs at batch size {same} and {b} (the same "
                                "tensor shapes), so the model ignores its batch_size argument and no throughput "
                                f"here is per batch size (batch {same}'s included)"}
            point = _throughput_point(res, device)
            card.throughput.append(point)
            if point.ok and not device_described and res.get("device_info"):
                card.device = DeviceInfo(**res["device_info"])
                device_described = True
                ran_on, given = res["device_info"].get("threads"), res.get("threads")
                if ran_on and given and ran_on != given:
                    card.notes.append(f"the model file changed torch's thread count: the steps ran on {ran_on} "
                                      f"thread(s), not the {given} the profiler set"
                                      + (" (--threads)" if settings.threads else "")
                                      + "; a torch.set_num_threads() in the model file wins over --threads")
            if (point.denormal_speedup or 0) >= DENORMAL_NOTE_SPEEDUP and not any("denormal" in n for n in card.notes):
                # the two settings are interleaved step by step, so a load change lands on both; a busy host
                # still makes each step noisier
                busy = (" (timed while the host was busy, so confirm on an idle machine)"
                        if _timed_on_busy_host(card, point) else "")
                flushed = point.denormal_flushed_iter_time_s
                card.notes.append(f"denormal floats slow this job: at batch {b}, steps with denormals flushed to zero "
                                  f"took {flushed * 1e3:.3g} ms against {flushed * point.denormal_speedup * 1e3:.3g} ms "
                                  f"with PyTorch's default, interleaved ({point.denormal_speedup:.1f}x){busy}; "
                                  "torch.set_flush_denormal(True) in the training script would give that speed-up (the "
                                  "throughput here is the default's)")
            if point.ok:
                _note_busy_host(card)
                card.memory.append(MemoryPoint(batch_size=b, device=device, **res["memory"]))
                peak = res["memory"].get("peak_bytes") or 0
                if (device == "cpu" and settings.memory_limit_bytes and peak > settings.memory_limit_bytes
                        and not any(n.startswith(OVER_LIMIT_NOTE) for n in card.notes)):
                    card.notes.append(f"{OVER_LIMIT_NOTE} batch {b}'s peak RSS increase ({peak / 2**20:.1f} MiB) is "
                                      f"above it ({settings.memory_limit_bytes / 2**20:.3g} MiB): on the CPU the limit "
                                      "caps private memory (RLIMIT_DATA), and the library code the kernels page in "
                                      "comes on top; `perfpredict max-batch` holds the whole peak to its limit")
                e = res.get("energy") or {}
                if e.get("available"):
                    energy.available, energy.scope = True, e.get("scope")
                    energy.points.append(EnergyPoint(batch_size=b, device=device, **{
                        k: e.get(k) for k in ("gpu_utilization", "utilization_samples", "mean_power_w",
                                              "energy_per_iter_j", "energy_method")}))
                elif not energy.available:
                    energy.reason = e.get("reason")
                if res.get("optimizer_state_bytes") is not None:
                    optimizer_state.append(int(res["optimizer_state_bytes"]))
                if res["memory"].get("baseline_bytes") and device != "cpu":
                    overheads.append(int(res["memory"]["baseline_bytes"]))
                last_failure = None
            else:
                card.errors.append(CardError(step=res.get("phase") or "measure", batch_size=b,
                                             message=res.get("error") or point.status))
                if point.status in ("error", "nonfinite", "timeout"):
                    key = (point.status, res.get("error") or "")
                    # a timeout is not tried again at a larger batch, which would not answer sooner (a hung step
                    # cost 4 x --max-time + 300 s at every batch size that followed)
                    why = ("the same failure repeated at two batch sizes, so it is the model, not the batch"
                           if key == last_failure else
                           f"batch {b} gave no result in time, and a larger batch would not be faster"
                           if point.status == "timeout" else None)
                    if why:
                        for rest in batch_sizes[i + 1:]:
                            card.errors.append(CardError(step="not measured", batch_size=rest,
                                                         message=f"sweep stopped: {why}"))
                        listener.point_finished(point, i, len(batch_sizes))
                        save()
                        break
                    last_failure = key
            listener.point_finished(point, i, len(batch_sizes))
            save()
    except KeyboardInterrupt:
        done = {p.batch_size for p in card.throughput}
        nxt = next((b for b in batch_sizes if b not in done), None)
        card.errors.append(CardError(step="interrupted", batch_size=nxt,
                                     message="interrupted by the user; earlier points are kept"))
        close_sweep(interrupted=True)  # the kept points still give a rate model, utilisation and the device
        _finish(card, t_begin)
        save()
        raise
    close_sweep(interrupted=False)

    if card.features is not None:
        _attach_memory_estimates(card, settings.mode, optimizer_state, overheads, trainable_param_bytes)

    if extended is not None and extended.any:
        from dataclasses import replace

        from perfpredict.profile.extended import run_extended

        save()
        try:
            run_extended(card, workload, replace(extended, device=device, mode=settings.mode), save, listener.stage)
        except KeyboardInterrupt:
            card.errors.append(CardError(step="interrupted", message="interrupted by the user during the "
                                         "extended profiles; everything measured before is kept"))
            _finish(card, t_begin)
            save()
            raise

    _finish(card, t_begin)
    save()
    return ProfileOutcome(card, card_path, onnx_path if onnx_path and onnx_path.exists() else None,
                          _outcome_error(card, workload))


_BUSY_NOTE = "the host was busy"


def _timed_on_busy_host(card: PerformanceCard, p: ThroughputPoint) -> bool:
    """Whether other processes competed with CPU point ``p`` for the CPUs while it was timed (see host_load)."""
    if card.device.kind != "cpu" or not p.ok or p.timing is None:
        return False
    cpus = card.device.cpu_count or os.cpu_count() or 1
    threads = card.device.threads or cpus
    return competed(p.timing.other_cpus, threads, cpus)


def _note_busy_host(card: PerformanceCard) -> None:
    """Keep one note naming the CPU points timed while other processes competed for the CPUs."""
    busy = [(p.batch_size, p.timing.other_cpus) for p in card.throughput if _timed_on_busy_host(card, p)]
    cpus = card.device.cpu_count or os.cpu_count() or 1
    threads = card.device.threads or cpus
    card.notes[:] = [n for n in card.notes if not n.startswith(_BUSY_NOTE)]
    if busy:
        worst = max(c for _, c in busy)
        card.notes.append(f"{_BUSY_NOTE}: other processes kept up to {worst:.2f} of its {cpus} CPUs busy while batch "
                          f"size(s) {', '.join(str(b) for b, _ in busy)} were timed with {threads} thread(s), so those "
                          f"times are likely slower than on an idle machine (see throughput[].timing.other_cpus)")


#: A point whose steps run this much faster with denormals flushed gets a note on the card. Measured on the
#: 2-vCPU Xeon VM: 0.96-1.09x for the zoo's MLP, LSTM, ResNet, Transformer and speech model and the example CNN
#: at batch 4 and 32; 2.56x for a ReLU RNN whose backward pass decays into denormals.
DENORMAL_NOTE_SPEEDUP = 1.3
#: the start of the note that a CPU point ran past --memory-limit (once per card)
OVER_LIMIT_NOTE = "--memory-limit:"


def _throughput_point(res: dict, device: str) -> ThroughputPoint:
    status = res.get("status", "error")
    b = int(res["batch_size"])
    if status != "ok":
        return ThroughputPoint(batch_size=b, status=status, error=res.get("error"), device=device)
    t = res["timing"]
    dn = res.get("denormal_check") or {}
    return ThroughputPoint(
        batch_size=b, status="ok", samples_per_s=b / t["median_s"], iter_time_s=t["median_s"],
        p10_s=t["p10_s"], p90_s=t["p90_s"], cv=t["cv"], iterations=t["iterations"],
        timing=TimingStats(**t), startup=StartupTimes(**res["startup"]),
        denormal_flushed_iter_time_s=dn.get("flushed_median_s"), denormal_speedup=dn.get("speedup"), device=device)


def _fit(card: PerformanceCard, ok: list[ThroughputPoint], device: str) -> None:
    from perfpredict.fit.rate import fit_rate_model

    model = fit_rate_model([p.batch_size for p in ok], [p.samples_per_s for p in ok])
    card.rate_model = model.to_card(device=device)
    nus = [p.startup.total_s for p in ok if p.startup is not None]
    if nus:
        card.latency = LatencyModel(nu_s=statistics.median(nus), device=device)


def _attach_memory_estimates(card: PerformanceCard, mode: str, optimizer_state: list[int],
                             overheads: list[int], trainable_param_bytes: int | None = None) -> None:
    from perfpredict.fit.memory import horus_memory_estimate

    feats: GraphFeatures | None = card.features
    if feats is None or not feats.available:
        return
    opt_bytes = max(optimizer_state) if optimizer_state else 0
    overhead = int(statistics.median(overheads)) if overheads else 0
    for i, mp in enumerate(card.memory):
        est = horus_memory_estimate(feats, mp.batch_size, mode=mode, param_bytes=card.model.param_bytes,
                                    optimizer_state_bytes=opt_bytes, overhead_bytes=overhead,
                                    trainable_param_bytes=trainable_param_bytes)
        card.memory[i] = mp.model_copy(update={"analytic": est})


def _finish(card: PerformanceCard, t_begin: float) -> None:
    card.run.finished_at = utc_now()
    card.run.wall_s = time.perf_counter() - t_begin
    card.run.timed_s = sum(p.timing.timed_s for p in card.throughput if p.timing is not None)
    model_failures = [e for e in card.errors if e.step not in ("export_onnx",)]
    card.status = ("complete" if card.throughput and not model_failures
                   else "partial" if card.measured_points() else "failed")


def _outcome_error(card: PerformanceCard, workload: Workload) -> PerfPredictError | None:
    """The failure to report after the card is written, or None when the profile succeeded."""
    bad = [p for p in card.throughput if p.status in ("error", "nonfinite", "timeout")]
    step_of = {(e.batch_size, e.message): e.step for e in card.errors}
    if bad:
        p = bad[0]
        step = step_of.get((p.batch_size, p.error), "measure")
        cls = NonFiniteLossError if p.status == "nonfinite" else ModelRunError
        n_ok = len(card.measured_points())
        kept = f"; {n_ok} batch size(s) measured before/around it were kept" if n_ok else ""
        return cls(f"{p.error} (batch size {p.batch_size}){kept}", source=workload.source, step=step)
    if card.throughput and not card.measured_points():
        p = card.throughput[0]
        step = step_of.get((p.batch_size, p.error), "measure")
        return ModelRunError(f"out of memory at every batch size tried (smallest {p.batch_size}): {p.error}",
                             source=workload.source, step=step)
    return None

