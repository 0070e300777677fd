"""What the estimators know about an architecture: its graph features, from whichever source is at hand.

Three sources give the same :class:`ArchFeatures`, so training and prediction share one code path:

- a row of ``datasets/zoo_features.csv`` (training);
- a PyTorch workload (``model.py`` or ``zoo:``), exported to ONNX at batch sizes 1 and 2 on the CPU;
- an ONNX file, analysed statically — *nothing in it is executed* (the HTTP service relies on this). A
  symbolic batch dimension is fixed to 1 and then 2 and shape inference run on each, which separates the
  per-sample part exactly, as the profiler does; a static batch dimension b is divided out (the fixed part
  is then unknown and taken as 0). The batch is the first input's first dimension, or, when that one is
  static, the input dimension that is symbolic (a sequence-first ``[T, batch, F]`` input); ``batch_input`` names
  another input as the batched one (a static positions input first).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.errors import PerfPredictError, UsageError, exception_text, first_line


class ArchFeaturesError(PerfPredictError):
    """The input cannot be turned into graph features (malformed ONNX, export failure, ...): the input given,
    so the CLI exits 2 as for other input errors."""

    exit_code = 2


@dataclass(frozen=True)
class ArchFeatures:
    """Device- and batch-independent graph features of one architecture (Horus Table 3 and a few more)."""

    forward_macs_per_sample: float
    param_count: float
    param_bytes: float
    activation_bytes_per_sample: float
    num_nodes: float
    forward_macs_fixed: float = 0.0
    activation_bytes_fixed: float = 0.0
    input_bytes_per_sample: float = 0.0
    op_counts: Mapping[str, int] = field(default_factory=dict)
    macs_by_op: Mapping[str, int] = field(default_factory=dict)
    #: per-sample activation bytes by producing op type (graph inputs: "input")
    activation_bytes_by_op: Mapping[str, int] = field(default_factory=dict)
    #: bytes autograd saves for backward per sample / fixed, as CUDA's kernels save them (counted on the CPU,
    #: :mod:`perfpredict.features.saved`); None when only an ONNX graph is at hand (the Predictor then
    #: estimates it from the graph)
    saved_bytes_per_sample: float | None = None
    saved_bytes_fixed: float = 0.0
    #: the same as the CPU's own kernels save them (unfused attention with dropout, float dropout noise)
    saved_cpu_bytes_per_sample: float | None = None
    saved_cpu_bytes_fixed: float = 0.0
    #: bytes of weights only ever indexed (embedding tables; :attr:`GraphStats.lookup_param_bytes`)
    lookup_param_bytes: float = 0.0
    #: bytes of the graph's weights that are buffers (a BatchNormalization's running statistics,
    #: :func:`~perfpredict.features.graph.buffer_names`; part of param_bytes): held, never trained, so they get no
    #: gradient nor optimizer state, as torch's optimizer never sees a module's buffers. Not a feature.
    buffer_bytes: float = 0.0
    #: bytes of the parameters that get no gradient (``requires_grad=False``; part of param_bytes), counted on a
    #: built model (:func:`from_workload`), on an ONNX graph's initializers named by prefix (``frozen``, as an
    #: ONNX file does not say which weights train), or given by a card's model section or a feature vector; 0
    #: where nobody said: all trained, as every zoo model is
    frozen_param_bytes: float = 0.0
    #: how many parameters those are (part of param_count, or of unused_param_count for those a step never uses)
    frozen_param_count: float = 0.0
    #: bytes of the parameters a training step never uses (no op of its forward takes them: a replaced head kept
    #: as an attribute, an auxiliary classifier behind a flag), frozen ones included, counted on a model file's
    #: step (:func:`step_probe_of_model`): the exported graph leaves them out, so they are *not* part of
    #: param_bytes, but the module holds them; they get no gradient nor optimizer state, so the Predictor charges
    #: their weight alone. 0 where nobody counted (an ONNX file, a feature vector). Not a feature.
    unused_param_bytes: float = 0.0
    #: the frozen ones' among them (part of frozen_param_bytes too, as a model file counts it)
    unused_frozen_param_bytes: float = 0.0
    #: how many parameters those are: *not* part of param_count, which counts the graph's parameters as
    #: param_bytes holds their bytes (the estimators' parameter-count input is the graph's, as the training data's
    #: zoo models, which have none unused, give it); a card's model.parameters is the sum. Not a feature.
    unused_param_count: float = 0.0
    #: the MAC-weighted work of a training step with those parameters frozen over the same step training every
    #: parameter (:func:`frozen_step_ratio`), which the Predictor multiplies its training-step times by; None
    #: where nothing is frozen or nobody walked the graph for it (a feature vector, a card). Not a feature.
    frozen_step_work_ratio: float | None = None
    #: the work of a training step that recomputes activation-checkpointed segments in its backward over the same
    #: step keeping their activations (:func:`step_probe_of_model`, > 1), which the Predictor multiplies
    #: its training-step times by; None where nothing is recomputed or nobody ran a step for it. Not a feature.
    recompute_step_work_ratio: float | None = None
    #: the most bytes that recomputation saves for the backward at once, per sample / fixed, as CUDA's kernels
    #: save them and as the CPU's (:func:`~perfpredict.features.saved.saved_and_recomputed_split`): a segment's
    #: activations, alive beside the segments' inputs (in the saved bytes) until its gradient is done, which the
    #: Predictor charges on top of the saved bytes; 0 where nothing is recomputed or nobody ran a step for it.
    #: Not a feature.
    recompute_saved_bytes_per_sample: float = 0.0
    recompute_saved_bytes_fixed: float = 0.0
    recompute_saved_cpu_bytes_per_sample: float = 0.0
    recompute_saved_cpu_bytes_fixed: float = 0.0
    #: time steps of the recurrent ops per pass, by op type (:attr:`GraphStats.recurrent_steps_by_op`)
    recurrent_steps_by_op: Mapping[str, int] = field(default_factory=dict)
    #: the most activation bytes alive at once in a forward pass, per sample / fixed
    #: (:func:`perfpredict.features.graph.peak_live_activation_bytes`); None for a bare feature vector without
    #: it (the Predictor then estimates it from the activation bytes)
    peak_live_bytes_per_sample: float | None = None
    peak_live_bytes_fixed: float = 0.0
    #: the activation bytes a backward pass would keep, by per-op rules on the graph, per sample / fixed
    #: (:func:`perfpredict.features.graph.saved_for_backward_bytes`): what the saved-bytes estimate for an
    #: input without the exact count rests on; None where nobody computed it
    graph_saved_bytes_per_sample: float | None = None
    graph_saved_bytes_fixed: float = 0.0
    #: the kernels one pass runs (:func:`perfpredict.estimators.kernel_nodes.split_nodes` rows); empty where
    #: nobody walked the graph for them (a bare feature vector, an older features table)
    kernel_nodes: tuple = ()
    name: str = ""
    family: str | None = None
    notes: tuple[str, ...] = ()
    #: the precision the source asks for (a model file's ``PRECISION``); None where it says nothing (an ONNX
    #: file, a feature vector). Not a feature: it picks the model set.
    precision: str | None = None
    #: who asks for ``precision``, as the Predictor's note names it where no set of that precision answers: "the
    #: model file", or "the card" a prediction from a card reads it off (:func:`perfpredict.predictor._as_arch`)
    precision_source: str = "the model file"
    #: copies of a trained weight the training job's optimizer keeps as state (SGD with momentum 1, plain SGD 0,
    #: Adam/AdamW 2): a model file's optimizer probed (:func:`~perfpredict.workload.spec.optimizer_state_copies`),
    #: a card's record, or what a caller says; 1 where nobody said, as every training row of the datasets was
    #: measured (the default optimizer, SGD with momentum). Not a feature: the Predictor charges the copies past
    #: 1 on top of its memory baselines.
    optimizer_state_copies: float = 1.0
    #: the optimizer's name and what the copies rest on (a model file's), or why they could not be found
    optimizer_state_note: str | None = None
    #: the most bytes of temporaries the optimizer's step holds at once, by device kind ("cpu", "cuda"), as torch
    #: runs it there (:func:`~perfpredict.workload.spec.optimizer_step_bytes`): a model file's optimizer probed or a
    #: card's record; None where nobody said (the training data's SGD with momentum holds none). Not a feature:
    #: the Predictor charges it on top of its memory baselines with the state copies.
    optimizer_step_bytes: dict[str, float] | None = None

    @property
    def frozen_param_bytes_in_graph(self) -> float:
        """The frozen bytes as part of ``param_bytes`` (the graph's): a model file's module counts frozen weights
        its exported forward leaves out (an unused frozen module, :attr:`unused_frozen_param_bytes`), which the
        graph's bytes do not hold."""
        return max(min(self.frozen_param_bytes - self.unused_frozen_param_bytes, self.param_bytes), 0.0)

    @property
    def untrained_param_bytes_in_graph(self) -> float:
        """The bytes of ``param_bytes`` no training step updates, charged their weight alone: the frozen
        parameters' (:attr:`frozen_param_bytes_in_graph`) and the buffers' (:attr:`buffer_bytes`)."""
        return min(self.frozen_param_bytes_in_graph + max(self.buffer_bytes, 0.0), self.param_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "forward_macs_per_sample": self.forward_macs_per_sample,
                "forward_macs_fixed": self.forward_macs_fixed, "param_count": self.param_count,
                "param_bytes": self.param_bytes, "activation_bytes_per_sample": self.activation_bytes_per_sample,
                "activation_bytes_fixed": self.activation_bytes_fixed, "num_nodes": self.num_nodes,
                "input_bytes_per_sample": self.input_bytes_per_sample, "op_counts": dict(self.op_counts),
                "macs_by_op": dict(self.macs_by_op), "activation_bytes_by_op": dict(self.activation_bytes_by_op),
                "saved_bytes_per_sample": self.saved_bytes_per_sample, "saved_bytes_fixed": self.saved_bytes_fixed,
                "saved_cpu_bytes_per_sample": self.saved_cpu_bytes_per_sample,
                "saved_cpu_bytes_fixed": self.saved_cpu_bytes_fixed,
                "lookup_param_bytes": self.lookup_param_bytes, "buffer_bytes": self.buffer_bytes,
                "frozen_param_bytes": self.frozen_param_bytes,
                "frozen_param_count": self.frozen_param_count,
                "recurrent_steps_by_op": dict(self.recurrent_steps_by_op),
                "peak_live_bytes_per_sample": self.peak_live_bytes_per_sample,
                "peak_live_bytes_fixed": self.peak_live_bytes_fixed,
                "graph_saved_bytes_per_sample": self.graph_saved_bytes_per_sample,
                "graph_saved_bytes_fixed": self.graph_saved_bytes_fixed,
                "kernel_nodes": [list(r) for r in self.kernel_nodes], "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ArchFeatures:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if "notes" in known:
            known["notes"] = tuple(known["notes"])
        if "kernel_nodes" in known:
            known["kernel_nodes"] = tuple(tuple(r) for r in known["kernel_nodes"] or ())
        return cls(**known)


def _num(v: Any, default: float = 0.0) -> float:
    if v is None or v == "":
        return default
    return _finite(v)


def _finite(v: Any) -> float:
    """``float(v)``; a ValueError for NaN or infinity (a features table's counts are finite, and a NaN reached
    the fit as "array must not contain infs or NaNs")."""
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{v!r} is not a finite number")
    return x


def from_table_row(row: Mapping[str, Any]) -> ArchFeatures:
    """An :class:`ArchFeatures` from a ``zoo_features.csv`` row (strings as read by ``csv``, or numbers)."""
    oc, mb = row.get("op_counts_json") or "{}", row.get("macs_by_op_json") or "{}"
    ab = row.get("act_bytes_by_op_json") or "{}"
    return ArchFeatures(
        forward_macs_per_sample=_num(row["forward_macs_per_sample"]),
        forward_macs_fixed=_num(row.get("forward_macs_fixed")),
        param_count=_num(row["param_count"]), param_bytes=_num(row["param_bytes"]),
        activation_bytes_per_sample=_num(row["activation_bytes_per_sample"]),
        activation_bytes_fixed=_num(row.get("activation_bytes_fixed")),
        num_nodes=_num(row["num_nodes"]), input_bytes_per_sample=_num(row.get("input_bytes_per_sample")),
        op_counts=_json_dict(oc), macs_by_op=_json_dict(mb), activation_bytes_by_op=_json_dict(ab),
        saved_bytes_per_sample=_num(row["saved_bytes_per_sample"]) if row.get("saved_bytes_per_sample") not in
        (None, "") else None, saved_bytes_fixed=_num(row.get("saved_bytes_fixed")),
        saved_cpu_bytes_per_sample=_finite(_required(row, "saved_cpu_bytes_per_sample")),
        saved_cpu_bytes_fixed=_num(row.get("saved_cpu_bytes_fixed")),
        lookup_param_bytes=_finite(_required(row, "lookup_param_bytes")),
        recurrent_steps_by_op=_json_dict(_required(row, "recurrent_steps_json")),
        peak_live_bytes_per_sample=_finite(_required(row, "peak_live_bytes_per_sample")),
        peak_live_bytes_fixed=_num(row.get("peak_live_bytes_fixed")),
        graph_saved_bytes_per_sample=_finite(_required(row, "graph_saved_bytes_per_sample")),
        graph_saved_bytes_fixed=_num(row.get("graph_saved_bytes_fixed")),
        kernel_nodes=tuple(tuple(r) for r in json.loads(row.get("kernel_nodes_json") or "[]")),
        name=str(row.get("config", "")), family=row.get("family") or None)


def _required(row: Mapping[str, Any], column: str) -> Any:
    """A column that older features tables lack: an error naming the command that fills it, never a silent 0
    (a missing lookup-bytes value would charge embedding tables in full, a missing step count would drop the
    per-step cost of recurrent layers)."""
    v = row.get(column)
    if v in (None, ""):
        raise ArchFeaturesError(f"the features table has no {column} for this architecture (`python "
                                "profilers/collect_dataset.py features --out <table>` fills it in)",
                                source=str(row.get("config", "?")), step="features")
    return v


def _json_dict(v: Any) -> dict[str, Any]:
    return json.loads(v) if isinstance(v, str) else dict(v)


def from_workload(target: str, params: Mapping[str, Any] | None = None, optimizer: Any = None) -> ArchFeatures:
    """Export a ``model.py`` / ``zoo:<family>`` to ONNX on the CPU (runs the user's code: not for the service).
    ``optimizer`` (:func:`check_optimizer`) replaces the file's ``make_optimizer`` for the optimizer's memory."""
    import torch

    from perfpredict.features import extract_features
    from perfpredict.workload import resolve_workload
    from perfpredict.workload.spec import parameter_bytes, sample_input_bytes

    wl = resolve_workload(target, params)
    _check_room_for_weights(wl, target)
    torch.manual_seed(0)
    try:
        model = wl.build_model()
    except BaseException as e:  # user code: sys.exit() included
        if isinstance(e, KeyboardInterrupt):
            raise
        raise ArchFeaturesError(f"build_model() raised {type(e).__name__}: {exception_text(e)[:300]}", source=target,
                                step="build_model") from None
    if not isinstance(model, torch.nn.Module):
        raise ArchFeaturesError(f"build_model() returned {type(model).__name__}, expected a torch.nn.Module",
                                source=target, step="build_model")
    graphs: dict = {}  # the exports extract_features analysed, by batch size
    feats = extract_features(wl, model=model, use_fvcore=False, graphs=graphs)
    if not feats.available:
        raise ArchFeaturesError(f"graph features unavailable: {feats.error}", source=target, step="features")
    # before the training-mode runs, as the profiler takes it (the step probe leaves the random state as it was)
    in_bytes = sample_input_bytes(wl)
    probes = training_probes_of_model(wl, model, graphs.get(2), optimizer)
    counts = probes.counts
    if counts.failure is not None:  # the user's forward failed in train mode (or exited): report, do not guess
        raise ArchFeaturesError(counts.failure, source=target, step="features")
    (saved, saved_fixed), (saved_cpu, saved_cpu_fixed) = counts.saved, counts.saved_cpu
    recomputed, recomputed_cpu = counts.recomputed, counts.recomputed_cpu
    unused_count = probes.unused_count
    # fixed (batch-independent) parts: held at 0 or more by the two-batch splits themselves (extract_features,
    # split_nodes, saved_bytes_split)
    return ArchFeatures(
        forward_macs_per_sample=float(feats.forward_macs_per_sample or 0),
        forward_macs_fixed=float(feats.forward_macs_fixed or 0),
        param_count=float(sum(p.numel() for p in model.parameters())) - unused_count,
        param_bytes=float(feats.param_bytes or 0),
        activation_bytes_per_sample=float(feats.activation_bytes_per_sample or 0),
        activation_bytes_fixed=float(feats.activation_bytes_fixed or 0), num_nodes=float(feats.num_nodes or 0),
        input_bytes_per_sample=float(in_bytes),
        op_counts=feats.op_counts, macs_by_op=feats.macs_by_op, activation_bytes_by_op=feats.activation_bytes_by_op,
        saved_bytes_per_sample=float(saved), saved_bytes_fixed=float(saved_fixed),
        saved_cpu_bytes_per_sample=float(saved_cpu), saved_cpu_bytes_fixed=float(saved_cpu_fixed),
        lookup_param_bytes=float(feats.lookup_param_bytes or 0), buffer_bytes=float(feats.buffer_bytes or 0),
        recurrent_steps_by_op=feats.recurrent_steps_by_op,
        frozen_param_bytes=float(parameter_bytes(model, trainable=False)),
        frozen_param_count=float(sum(p.numel() for p in model.parameters() if not p.requires_grad)),
        unused_param_bytes=probes.unused_bytes, unused_frozen_param_bytes=probes.unused_frozen_bytes,
        unused_param_count=unused_count, frozen_step_work_ratio=probes.frozen_ratio,
        recompute_step_work_ratio=probes.step.recompute_ratio,
        recompute_saved_bytes_per_sample=float(recomputed[0]), recompute_saved_bytes_fixed=float(recomputed[1]),
        recompute_saved_cpu_bytes_per_sample=float(recomputed_cpu[0]),
        recompute_saved_cpu_bytes_fixed=float(recomputed_cpu[1]),
        peak_live_bytes_per_sample=float(feats.peak_live_bytes_per_sample or 0),
        peak_live_bytes_fixed=float(feats.peak_live_bytes_fixed or 0),
        graph_saved_bytes_per_sample=float(feats.graph_saved_bytes_per_sample or 0),
        graph_saved_bytes_fixed=float(feats.graph_saved_bytes_fixed or 0),
        kernel_nodes=tuple(tuple(r) for r in feats.kernel_nodes), name=wl.name,
        notes=tuple(n for n in (feats.error, *feats.notes, _hook_note(wl)) if n) + probes.notes,
        precision=wl.precision,
        optimizer_state_copies=1.0 if probes.copies is None else probes.copies,
        optimizer_state_note=probes.copies_note, optimizer_step_bytes=probes.step_bytes)


def optimizer_state_copies_of(wl, model, optimizer: Any = None, unused: Iterable[str] = ()
                              ) -> tuple[float | None, str | None, dict[str, float] | None]:
    """The state copies per trained weight of the optimizer the model file's ``make_optimizer`` builds over
    ``model``'s parameters (built, never stepped: most optimizers allocate their state at the first step;
    Adagrad's, filled at construction, is freed when this returns), what they rest on, and the bytes of
    temporaries its step holds per device kind (:func:`probe_optimizer`) over the parameters but those named
    ``unused`` (a step never uses them, :class:`StepProbe`: they get no gradient, which the step skips);
    ``optimizer`` (a :class:`~perfpredict.workload.spec.NamedOptimizer`) replaces ``make_optimizer``, built over
    "meta" tensors shaped like the trained parameters the step uses."""
    skipped = set(unused)
    trained = [p for p in model.parameters() if p.requires_grad]
    stepped = [p for n, p in model.named_parameters() if p.requires_grad and n not in skipped]
    if optimizer is not None:
        return named_optimizer_probe(optimizer, [(tuple(p.shape), p.dtype) for p in stepped])
    if not trained:
        return 1.0, None, None  # nothing trains: no state to charge, no optimizer to probe (Workload.optimizer refuses)
    return probe_optimizer(lambda: wl.optimizer(model.parameters()), stepped, "make_optimizer()'s optimizer")


def named_optimizer_probe(optimizer, shapes) -> tuple[float | None, str | None, dict[str, float] | None]:
    """:func:`probe_optimizer` of a :class:`~perfpredict.workload.spec.NamedOptimizer` built over "meta" tensors
    of the trained weights' ``(shape, dtype)`` (nothing allocated); 1 without a word where nothing trains."""
    import torch

    if not shapes:
        return 1.0, None, None
    weights = [torch.empty(s, dtype=d, device="meta", requires_grad=True) for s, d in shapes]
    return probe_optimizer(lambda: optimizer.build(weights), weights, optimizer.label)


def probe_optimizer(make, params, name: str) -> tuple[float | None, str | None, dict[str, float] | None]:
    """The state copies per trained weight of the optimizer ``make()`` builds, weighed over ``params`` (the
    trained tensors its step updates), what they rest on, and the bytes of temporaries its step holds per device kind
    (:func:`~perfpredict.workload.spec.optimizer_step_bytes`); None for the copies, and the reason, where the
    probe cannot tell (the caller charges 1, the training data's SGD with momentum). A step no probe can take
    (over meta tensors nor small CPU ones) leaves the state copies as probed and charges no temporaries, noted."""
    from perfpredict.workload.spec import optimizer_state_copies, optimizer_step_bytes

    try:
        opt = make()
        name = type(opt).__name__
        copies = optimizer_state_copies(opt, params)
    except BaseException as e:  # the user's hook or optimizer class (sys.exit() included): the data's optimizer
        return None, (f"the optimizer state is charged as the training data's SGD with momentum (one copy of each "
                      f"trained weight): {name}'s could not be probed ({_probe_failure(e)})"), None
    # the training data's one copy needs no word on the card
    note = None if copies == 1 else f"{name} keeps {copies:g} state copies of each trained weight (probed)"
    try:
        step_bytes = optimizer_step_bytes(opt, params)
    except BaseException as e:  # the same: the copies stand, the step's temporaries are not known
        told = f"{name}'s step temporaries could not be probed ({_probe_failure(e)}): none charged"
        return copies, told if note is None else f"{note}; {told}", None
    return copies, note, step_bytes


def _probe_failure(e: BaseException) -> str:
    """Why a probe of a model file's optimizer failed, for its note (a KeyboardInterrupt is raised on)."""
    if isinstance(e, KeyboardInterrupt):
        raise e
    why = str(e.args[0]) if isinstance(e, ValueError) and e.args else f"{type(e).__name__}: {exception_text(e)}"
    return why[:200]


def frozen_step_ratio(stats, trained, weights) -> float | None:
    """The MAC-weighted work of a training step (:func:`~perfpredict.features.graph.step_work`) of the graph in
    ``stats`` (a :class:`~perfpredict.features.graph.GraphStats`) when the initializers ``trained(name)`` train,
    over the same when every initializer ``weights(name)`` trains; None when that step does no MAC work."""
    from perfpredict.features.graph import step_work

    full = step_work(stats, weights)
    return step_work(stats, trained) / full if full > 0 else None


def frozen_step_ratio_of_model(wl, model, at_2=None) -> tuple[float | None, str | None]:
    """For a model with frozen parameters, :func:`frozen_step_ratio` on its graph exported at batch 2 (``at_2``,
    the GraphStats extract_features already made of it, else exported here), the parameters matched to the
    initializers by name (the TorchScript exporter keeps module paths); and a note when it cannot be had (the
    time is then not adjusted). ``(None, None)`` for a model with nothing frozen."""
    from perfpredict.features import analyze_onnx, export_onnx
    from perfpredict.workload.forward_args import as_positional

    names = {n: p.requires_grad for n, p in model.named_parameters()}
    if all(names.values()):
        return None, None
    why = "its graph's weights are not named as its parameters"
    try:
        stats = at_2 if at_2 is not None else \
            analyze_onnx(export_onnx(*as_positional(model, wl.inputs(2))).model_proto)
        if any(n in names for n in stats.float_initializers):
            ratio = frozen_step_ratio(stats, lambda n: names.get(n, False), lambda n: n in names)
            if ratio is not None:
                return ratio, None
            why = "its graph has no multiply-accumulates"
    except BaseException as e:  # user code runs in the export
        if isinstance(e, KeyboardInterrupt):
            raise
        why = f"exporting it at batch 2 failed ({type(e).__name__})"
    return None, (f"the training-step time is not adjusted for the frozen parameters: {why}, so which layers "
                  "skip their backward work is unknown")


@dataclass(frozen=True)
class StepProbe:
    """What one default training step of a model file showed (:func:`step_probe_of_model`)."""

    #: its work with activation checkpointing's recomputation over the same without; None where nothing is
    #: recomputed or the step failed
    recompute_ratio: float | None = None
    #: why the step could not be run (its time and memory are then not adjusted)
    note: str | None = None
    #: the names of the parameters the step never used (:attr:`~perfpredict.features.recompute.StepCount.unused`)
    unused: tuple[str, ...] = ()


def step_probe_of_model(wl, model) -> StepProbe:
    """One default training step of ``model`` at batch 2 (4 where the training-mode forward rejects 2), counted
    (:func:`~perfpredict.features.recompute.step_count`): for a model whose forward checkpoints activations
    (``torch.utils.checkpoint``), its work with the recomputation over the same without
    (:func:`~perfpredict.features.recompute.recompute_step_ratio`), and the parameters it never uses; a note when
    the step cannot be run (the time is then not adjusted, nothing taken as unused). The step leaves the random
    state as it found it, so the counts run after it draw what they drew without."""
    import torch

    from perfpredict.features.recompute import StepCount, recompute_step_ratio, step_count

    def run(b: int) -> StepCount:
        with torch.random.fork_rng(devices=[]):  # the targets too: a file's example_targets may draw labels
            targets = wl.targets(b)
            return step_count(model, wl.inputs(b), lambda out: wl.loss(out, targets))

    try:
        try:
            count = run(2)
        except Exception:  # noqa: BLE001 - as the saved-bytes count, a batch the training-mode forward rejects
            count = run(4)
    except BaseException as e:  # user code runs in the step
        if isinstance(e, KeyboardInterrupt):
            raise
        return StepProbe(note="the training-step time and memory are not adjusted for any activation "
                              "checkpointing nor unused parameters: one training step, run to count the forward "
                              "work its backward recomputes and the parameters it uses, failed "
                              f"({type(e).__name__}: {exception_text(e)[:200]})")
    return StepProbe(recompute_ratio=recompute_step_ratio(count.flops), unused=count.unused)


@dataclass(frozen=True)
class SavedCounts:
    """The bytes autograd saves for a model file's training step (:func:`saved_counts_of_model`), each as
    (per sample, fixed): as CUDA's kernels save them and as the CPU's, and the most bytes activation
    checkpointing's recomputation saves at once, likewise ((0, 0) where nothing is recomputed); all None, and
    ``failure`` saying why, where the count could not be made."""

    saved: tuple[int, int] | None = None
    saved_cpu: tuple[int, int] | None = None
    recomputed: tuple[int, int] | None = None
    recomputed_cpu: tuple[int, int] | None = None
    #: why the training-mode forward (or a checkpointing model's backward) could not be counted
    failure: str | None = None


def saved_counts_of_model(wl, model, step: StepProbe) -> SavedCounts:
    """The saved-tensor counts of ``model``'s training step (:func:`~perfpredict.features.saved.
    saved_and_recomputed_split`, both kernels), run after its ``step`` (:func:`step_probe_of_model`): a model that
    recomputes (``step.recompute_ratio``) has its counting steps run the backward too, for the bytes the
    recomputation saves. What a model file's features (:func:`from_workload`) and a measured training card
    (the profiler) carry; a failure is returned, not raised, as the two handle it apart."""
    from perfpredict.features.saved import saved_and_recomputed_split

    backward = step.recompute_ratio is not None
    try:
        saved, recomputed = saved_and_recomputed_split(wl, model, backward=backward)
        saved_cpu, recomputed_cpu = saved_and_recomputed_split(wl, model, kernels="cpu", backward=backward)
    except BaseException as e:  # user code runs in the forward (sys.exit() included)
        if isinstance(e, KeyboardInterrupt):
            raise
        return SavedCounts(failure=f"training-mode forward (or a checkpointing model's backward) failed while "
                                   f"counting saved tensors: {type(e).__name__}: {str(e)[:200]}")
    return SavedCounts(saved=saved, saved_cpu=saved_cpu, recomputed=recomputed, recomputed_cpu=recomputed_cpu)


def unused_params_of(model, unused: Iterable[str], at_2=None) -> list:
    """``model``'s parameters named in ``unused`` (a step never used them, :class:`StepProbe`) but those the graph
    exported at batch 2 (``at_2``, a GraphStats) holds under their name, as ``param_bytes`` and ``param_count``
    count them already (an eval-mode forward may read what the training step does not)."""
    names = set(unused) - (at_2.float_initializers if at_2 is not None else frozenset())
    return [p for n, p in model.named_parameters() if n in names]


@dataclass(frozen=True)
class TrainingProbes:
    """What the runs of a model file's training step count beside its exported graph
    (:func:`training_probes_of_model`), as a model file's features (:func:`from_workload`) and a measured training
    card (the profiler) both carry them."""

    step: StepProbe
    counts: SavedCounts
    #: :func:`frozen_step_ratio_of_model`
    frozen_ratio: float | None
    frozen_note: str | None
    #: :func:`optimizer_state_copies_of`
    copies: float | None
    copies_note: str | None
    step_bytes: dict[str, float] | None
    #: the bytes and count of :func:`unused_params_of`, and the frozen ones' bytes among them
    unused_bytes: float
    unused_frozen_bytes: float
    unused_count: float

    @property
    def notes(self) -> tuple[str, ...]:
        """Why the step work of frozen weights could not be weighed, or the step probe could not run."""
        return tuple(n for n in (self.frozen_note, self.step.note) if n)


def training_probes_of_model(wl, model, at_2=None, optimizer: Any = None) -> TrainingProbes:
    """:class:`TrainingProbes` of ``model``: one default training step (:func:`step_probe_of_model`; the first of the
    training-mode runs, as a model that recomputes has its saved-bytes steps run the backward too), the saved-tensor
    counts (:func:`saved_counts_of_model`, a failure returned), the frozen weights' step work on the graph exported at
    batch 2 (``at_2``), the optimizer's state (``optimizer`` replacing ``make_optimizer``) and the parameters the
    step never uses."""
    step = step_probe_of_model(wl, model)
    counts = saved_counts_of_model(wl, model, step)
    ratio, ratio_note = frozen_step_ratio_of_model(wl, model, at_2)
    copies, copies_note, step_bytes = optimizer_state_copies_of(wl, model, optimizer, step.unused)
    picked = unused_params_of(model, step.unused, at_2)
    return TrainingProbes(step=step, counts=counts, frozen_ratio=ratio, frozen_note=ratio_note, copies=copies,
                          copies_note=copies_note, step_bytes=step_bytes,
                          unused_bytes=float(sum(p.numel() * p.element_size() for p in picked)),
                          unused_frozen_bytes=float(sum(p.numel() * p.element_size() for p in picked
                                                        if not p.requires_grad)),
                          unused_count=float(sum(p.numel() for p in picked)))


def _check_room_for_weights(wl, target: str) -> None:
    """Refuse, before building it, a model whose weights the export could not hold in this machine's free memory
    (twice the weights: the module and its exported graph): a 20 GB model used to take minutes and then the
    machine's memory. The weights are counted on the meta device (no memory); a model that cannot be built
    there is not checked."""
    import psutil
    import torch

    from perfpredict.workload.spec import parameter_bytes

    try:
        with torch.device("meta"):
            meta = wl.build_model()
        weights = parameter_bytes(meta) if isinstance(meta, torch.nn.Module) else 0
    except BaseException as e:  # noqa: BLE001 - user code (sys.exit() too): the real build below reports it
        if isinstance(e, KeyboardInterrupt):
            raise
        return
    free = psutil.virtual_memory().available
    if 2 * weights > free:
        raise ArchFeaturesError(f"its {weights / 1e9:.1f} GB of weights would be built and exported to read the "
                                f"graph, and this machine has {free / 1e9:.1f} GB free: export it to ONNX where "
                                "there is room (perfpredict predict model.onnx reads weights' shapes only) or send "
                                "its feature vector", source=target, step="build_model")


#: the note a model file with its own train_step gets (a training prediction only: inference runs no step)
TRAIN_STEP_NOTE = ("the model file defines its own train_step, which the estimators do not model: these predict "
                   "perfpredict's default step (forward, loss, backward, one optimizer step); profile the file to "
                   "measure the hook's step")


def _hook_note(wl) -> str | None:
    return None if wl.train_step is None else TRAIN_STEP_NOTE


# ---------------------------------------------------------------------------------------------------------
# ONNX, statically
# ---------------------------------------------------------------------------------------------------------
def _tensors(graph):
    """Every TensorProto a graph holds: initializers (sparse ones too) and node attributes' tensors, in
    subgraphs as well (an If's branches, a Loop's body)."""
    yield from graph.initializer
    yield from _tensors_besides_initializers(graph)


def _tensors_besides_initializers(graph):
    """:func:`_tensors` but the graph's own (dense) initializers."""
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _tensors(g)


def _uses_external_data(proto) -> bool:
    import onnx

    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in _tensors(proto.graph))


#: the most bytes of a model file's externally stored tensors other than its weights (shapes, indices, constants)
#: read from beside it: shape inference needs their values, where a weight's shape alone is enough
EXTERNAL_VALUES_LIMIT_BYTES = 256 * 2**20


def _external_tensors(proto) -> tuple[list, list]:
    """(the main graph's floating-point initializers stored in external files: its weights, every other tensor so
    stored: a node's constant, a subgraph's, integer values such as a Reshape's target, which shapes may depend
    on)."""
    import onnx

    def external(t) -> bool:
        return t.data_location == onnx.TensorProto.EXTERNAL

    main = [t for t in proto.graph.initializer if external(t)]
    weights = [t for t in main if t.data_type in _ONNX_FLOAT_DTYPES]
    others = [t for t in main if t.data_type not in _ONNX_FLOAT_DTYPES]
    return weights, others + [t for t in _tensors_besides_initializers(proto.graph) if external(t)]


def _external_extent(tensor, folder: Path, source: str) -> int:
    """The bytes ``tensor``'s external data takes in its file, which must lie inside ``folder`` (the model's,
    resolved): a relative location without ``..`` that no link leads out of, a regular file holding the range."""
    from pathlib import PurePosixPath, PureWindowsPath

    from onnx.external_data_helper import ExternalDataInfo

    def refuse(why: str) -> ArchFeaturesError:
        return ArchFeaturesError(f"tensor {tensor.name[:60]!r} is stored in an external file {why}", source=source,
                                 step="read onnx")

    try:
        info = ExternalDataInfo(tensor)
    except ValueError as e:
        raise refuse(f"at a malformed place ({first_line(e)[:100]})") from None
    loc = str(info.location)
    shown = repr(loc[:80])
    inside = ("external data must lie in files in the model's folder or below it (a relative location "
              "without '..')")
    if not loc or any(p.is_absolute() or ".." in p.parts for p in (PurePosixPath(loc), PureWindowsPath(loc))):
        raise refuse(f"at {shown}, outside the model's folder: {inside}")
    try:  # a NUL byte, a name too long, a link loop: refused, as ONNX's checker refused them
        f = (folder / loc).resolve()
        inside_folder, is_file = f.is_relative_to(folder), f.is_file()
    except (OSError, ValueError, RuntimeError) as e:
        raise refuse(f"at {shown}, which names no file that can be read ({first_line(e)[:100]})") from None
    if not inside_folder:
        raise refuse(f"at {shown}, a link out of the model's folder: {inside}")
    if not is_file:
        raise refuse(f"{shown} that is not in the model's folder ({str(folder)[:120]})")
    size = f.stat().st_size
    offset = info.offset or 0
    length = size - offset if info.length is None else info.length
    if offset < 0 or length < 0:  # onnx before 1.20 parses them: a seek before the file's start
        raise refuse(f"{shown} at a negative offset or length ({offset}, {length})")
    if offset + length > size:
        raise refuse(f"{shown} at bytes {offset}-{offset + length}, past the file's end ({size} bytes)")
    return length


def _external_values_loaded(proto, path: Path, source: str):
    """A copy of ``proto`` with its externally stored tensors other than its weights (:func:`_external_tensors`:
    a Reshape's target, a constant) read from the files beside ``path``: ONNX's checker and shape inference read
    no external data (a Reshape whose target lies in a file was refused: "Cannot parse data from external
    tensors"). Every external location, the weights' too, must be a file in the model's folder
    (:func:`_external_extent`); at most :data:`EXTERNAL_VALUES_LIMIT_BYTES` are read. The weights stay references
    (their shapes are what the features read), but for those only ever a recurrent op's initial state, whose
    values say whether it is the exporter's zeros or a learned state (:func:`recurrent_initial_states`)."""
    import onnx

    from perfpredict.features.graph import recurrent_initial_states

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    folder = path.parent.resolve()
    weights, others = _external_tensors(m)
    for t in weights:
        _external_extent(t, folder, source)
    states = recurrent_initial_states(m.graph, weights)  # every candidate: their values are not read yet
    others += [t for t in weights if t.name in states]
    total = sum(_external_extent(t, folder, source) for t in others)
    if total > EXTERNAL_VALUES_LIMIT_BYTES:
        raise ArchFeaturesError(f"the model's externally stored tensors besides its floating-point weights (shapes, "
                                f"indices, constants) hold {total / 2**20:.0f} MiB, more than the "
                                f"{EXTERNAL_VALUES_LIMIT_BYTES // 2**20} MiB read from beside a model", source=source,
                                step="read onnx")
    for t in others:
        _external_data_read(t, folder, source)
    return m


def _external_data_read(tensor, folder: Path, source: str) -> None:
    """``tensor``'s values read into it from its external file in ``folder`` (its place checked by
    :func:`_external_extent`), no longer a reference (as onnx 1.20 and later leave it; earlier ones kept the
    reference beside the values); a file that cannot be read (permission denied, gone since) is one line."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor

    try:
        load_external_data_for_tensor(tensor, str(folder))
    except OSError as e:
        raise ArchFeaturesError(f"tensor {tensor.name[:60]!r} is stored in an external file that cannot be read "
                                f"({first_line(e)[:100]})", source=source, step="read onnx") from None
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


def _external_weights_as_shapes(proto, source: str):
    """(the model with its main graph's externally stored initializers kept as shapes without values, the model
    the checker reads: those initializers as graph inputs of their shape). The features read weights' shapes
    only, so a model whose weights lie in a file beside it (what ``torch.onnx.export`` writes by default since
    torch 2.9, however small the model) is analysed without them, and no file is looked up. Any other tensor in
    an external file (a node's constant, a subgraph's, integer values) may be a value the shapes depend on (a
    Reshape's target): refused."""
    import onnx
    from onnx import helper

    main, others = _external_tensors(proto)
    if others:
        raise ArchFeaturesError("the model holds a tensor other than its floating-point weights (a node's constant, "
                                "integer values such as a shape) in an external file, which this service does not "
                                "read; upload a model with it inside (onnx.save_model's default size_threshold keeps "
                                "small tensors in the model) or send its feature vector to /predict", source=source,
                                step="parse onnx")
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    names = {t.name for t in main}
    for t in m.graph.initializer:
        if t.name in names:
            t.ClearField("external_data")
            t.data_location = onnx.TensorProto.DEFAULT
    checked = onnx.ModelProto()
    checked.CopyFrom(m)
    kept = [t for t in checked.graph.initializer if t.name not in names]
    del checked.graph.initializer[:]
    checked.graph.initializer.extend(kept)
    inputs = {i.name for i in checked.graph.input}
    checked.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                               for t in main if t.name not in inputs)
    return m, checked


def load_onnx_bytes(data: bytes, source: str = "upload", *, external_data: bool = True,
                    path: str | Path | None = None):
    """Parse ONNX bytes into a ModelProto and check it; raises :class:`ArchFeaturesError` with one line.

    ``external_data=False`` (the HTTP service) never looks up tensors stored as references to other files: ONNX's
    checker looks such files up relative to the working directory, so an upload could probe the server's disk
    (its error said whether a file of that name exists there). Weights so stored are read as shapes
    (:func:`_external_weights_as_shapes`), any other such tensor refused. With
    ``path`` (the file ``data`` was read from), external data is looked up beside it, where exporters put it,
    whatever the working directory: the tensors shapes may depend on (a Reshape's target, a constant) read
    (:func:`_external_values_loaded`), the weights checked as shapes. Without either (the Python API given
    bytes), ONNX's checker looks such files up itself."""
    import onnx

    try:
        proto = onnx.load_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types for garbage
        raise ArchFeaturesError(f"not an ONNX model ({type(e).__name__})", source=source, step="parse onnx") from None
    if not proto.graph.node:
        raise ArchFeaturesError("ONNX model has an empty graph", source=source, step="parse onnx")
    external = _uses_external_data(proto)
    checked = proto
    if not external_data and external:
        proto, checked = _external_weights_as_shapes(proto, source)
    elif external and path is not None:
        proto = _external_values_loaded(proto, Path(path), source)
        checked = _external_weights_as_shapes(proto, source)[1]
    try:
        # full_check adds strict shape inference, so a graph whose shapes contradict each other (a MatMul of
        # [1,16] by [3,8]) is refused rather than counted as if it ran
        onnx.checker.check_model(checked, full_check=True)
    except Exception as e:  # noqa: BLE001
        msg = first_line(e) or type(e).__name__
        raise ArchFeaturesError(f"invalid ONNX model: {msg[:300]}", source=source, step="check onnx") from None
    return proto


def _batch_axes(dims, batch_param: str | None, axis: int | None, static: int | None = None) -> list[int]:
    """The batch dimensions of one input: those named ``batch_param``, at any axis (a sequence-first input
    ``[T, batch, F]`` carries the batch second), or where it has none, the one at ``axis`` (exporters may name
    each input's batch axis differently) unless the file fixes it at another size than the batch's ``static``
    one (None: a symbolic batch, which no fixed size is): a positions or lookup-table input ``[64]`` beside a
    batched ``[batch, 64, d]`` is not batched, and sizing it as the batch broke shape inference."""
    named = [i for i, d in enumerate(dims) if batch_param and d.HasField("dim_param") and d.dim_param == batch_param]
    if named or axis is None or len(dims) <= axis:
        return named
    d = dims[axis]
    fixed = d.HasField("dim_value") and d.dim_value > 0
    return [axis] if not fixed or d.dim_value == static else []


def _with_batch(proto, batch: int, batch_param: str | None = None, axis: int | None = 0):
    """A copy of ``proto`` whose graph inputs' batch dimensions (:func:`_batch_axes`) are ``batch``."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    init = {i.name for i in m.graph.initializer}
    for vi in m.graph.input:
        if vi.name in init:
            continue
        dims = vi.type.tensor_type.shape.dim
        for i in _batch_axes(dims, batch_param, axis):
            dims[i].Clear()
            dims[i].dim_value = batch
    # Drop stale intermediate shapes so inference recomputes them for the new batch; an output's dimension
    # written as -1 or 0 (an exporter's "unknown", as the input's batch was) too, which inference keeps otherwise
    del m.graph.value_info[:]
    for vi in m.graph.output:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.Clear()
    return m


def _without_weight_data(proto, keep_bytes: int = 4096):
    """A copy of ``proto`` whose large initializers keep their shape and type but drop their values.

    Shape inference and the feature counts need only the dims of weights (small constants such as Reshape
    targets keep their values for data propagation); dropping ~100 MB of ResNet-50 weights makes each
    inference pass 10× faster.
    """
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    for t in m.graph.initializer:
        if t.ByteSize() > keep_bytes:
            for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                t.ClearField(f)
    return m


def _tied_transposes_as_nodes(proto):
    """``proto`` with each initializer that holds another's transpose written as a ``Transpose`` of it (a copy).

    The TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, the default before torch 2.9) folds the
    transpose of a weight a ``MatMul`` reads into a new initializer (``onnx::MatMul_16``); a weight tied to an
    embedding table (a language model's output projection) is then stored twice, as the table and as its
    transpose, and its parameters were counted twice (132,160 for a 68,160-parameter model: weights, gradients
    and optimizer state all charged twice). The dynamo exporter keeps one initializer and a ``Transpose`` node,
    which is what this writes. A pair is tied when its shapes are each other's transpose (not square), its values
    are too, and one of the two is such a folded constant (``onnx::``) while the other is not: two weights of
    the model (two parameters, or the folded transposes of two) that are only equal, as an identity-initialised
    down and up projection are, stay two; a constant-valued tensor (zeros) is never taken for a copy. Data held
    in external files is not read: such pairs stay as they are."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    def candidate(t) -> bool:
        holds = len(t.raw_data) or len(t.float_data) or len(t.double_data) or len(t.int32_data)  # fp16: int32
        return (len(t.dims) == 2 and min(t.dims) > 0 and t.dims[0] != t.dims[1]
                and t.data_type in _ONNX_FLOAT_DTYPES and t.data_location != onnx.TensorProto.EXTERNAL and bool(holds))

    by_shape: dict[tuple, list] = {}
    for t in proto.graph.initializer:
        if candidate(t):
            by_shape.setdefault((t.data_type, tuple(t.dims)), []).append(t)
    copies: dict[str, str] = {}  # copy -> the initializer it transposes
    for (dtype, (rows, cols)), group in by_shape.items():
        others = by_shape.get((dtype, (cols, rows)), [])
        if rows > cols or not others:  # each pair of shapes once
            continue
        # a transposed copy's first column is the first row: only those pairs are compared whole
        by_column: dict[bytes, list] = {}
        for u in others:
            b = numpy_helper.to_array(u)
            by_column.setdefault(b[:, 0].tobytes(), []).append((u, b))
        for t in group:
            a = numpy_helper.to_array(t)
            if (a == a.flat[0]).all():
                continue
            for u, b in by_column.get(a[0].tobytes(), []):
                folded = t.name.startswith("onnx::")
                if folded == u.name.startswith("onnx::") or u.name in copies or not np.array_equal(b, a.T):
                    continue
                # the exporter's folded constant is the copy, the parameter's own name is kept
                if folded:
                    copies[t.name] = u.name
                    break
                copies[u.name] = t.name
    if not copies:
        return proto
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    kept_inits = [t for t in g.initializer if t.name not in copies]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    kept_inputs = [i for i in g.input if i.name not in copies]  # an older exporter lists initializers as inputs
    del g.input[:]
    g.input.extend(kept_inputs)
    nodes = [helper.make_node("Transpose", [src], [copy], name=f"tied_transpose_{copy}")
             for copy, src in copies.items()] + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return m


def _batch_dim(proto, batch_axis: int | None = None,
               batch_input: str | None = None) -> tuple[bool, int | None, str | None, int | None]:
    """(symbolic, static value, name, axis) of the batch dimension.

    ``batch_input`` given: the input of that name is the batched one (a positions or mask input may come
    first), read as the first input is otherwise; a ValueError naming the graph's inputs when none is so named.
    ``batch_axis`` given: that axis of the batched input (the first real input by default). Otherwise its
    first dimension, static or symbolic; but when that one is static and another input dimension (of the named
    input only, when one is named) is symbolic, that named dimension is the batch (a sequence-first RNN input
    ``[T, batch, F]`` exported with a dynamic batch axis, or a batched input after a static one).
    """
    inputs = _real_inputs(proto)
    which = "the first input"
    if batch_input is not None:
        named = [vi for vi in inputs if vi.name == batch_input]
        if not named:
            shown = ", ".join(repr(vi.name[:60]) for vi in inputs[:8]) + (f", ... ({len(inputs)} in all)"
                                                                         if len(inputs) > 8 else "")
            raise ValueError(f"batch_input {batch_input[:60]!r} is not an input of the graph; its inputs are "
                             f"{shown or 'none'}")
        inputs, which = named, f"input {batch_input[:60]!r}"
    dims = inputs[0].type.tensor_type.shape.dim if inputs else []
    if batch_axis is not None:
        if not -len(dims) <= batch_axis < len(dims):
            raise ValueError(f"batch_axis {batch_axis} is not an axis of {which} ({len(dims)} dimensions)")
        axis = batch_axis % len(dims)
        d = dims[axis]
        if d.HasField("dim_value") and d.dim_value > 0:
            return False, int(d.dim_value), None, axis
        return True, None, d.dim_param or None, axis
    if not dims:
        return False, None, None, 0
    first = dims[0]
    if not (first.HasField("dim_value") and first.dim_value > 0):
        return True, None, first.dim_param or None, 0
    for vi in inputs:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param:
                return True, None, d.dim_param, None
    return False, int(first.dim_value), None, 0


def _real_inputs(proto) -> list:
    """The graph's inputs that are not initializers (the data a job feeds), in order."""
    init = {i.name for i in proto.graph.initializer}
    return [vi for vi in proto.graph.input if vi.name not in init]


def _symbolic_dims(proto) -> list[str]:
    """The names of the graph inputs' symbolic dimensions, in order of appearance."""
    names: list[str] = []
    for vi in _real_inputs(proto):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param and d.dim_param not in names:
                names.append(d.dim_param)
    return names


def parse_dims(items: Iterable[str], max_size: int | None = None) -> dict[str, int]:
    """``["seq=128", "t=4,b=2"]`` (the CLI's ``--dim``, the service's ``dims`` field) as ``{"seq": 128, ...}``;
    a ValueError whose argument is the first item that is not NAME=SIZE with a whole size from 1 (to
    ``max_size``), or a :class:`DimGivenTwice` naming a dimension given twice."""
    dims: dict[str, int] = {}
    for item in (x.strip() for raw in items for x in raw.split(",")):
        if not item:
            continue
        name, sep, size = item.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit() or int(size) < 1 \
                or (max_size is not None and int(size) > max_size):
            raise ValueError(item)
        if name.strip() in dims:
            raise DimGivenTwice(name.strip())
        dims[name.strip()] = int(size)
    return dims


class DimGivenTwice(ValueError):
    """A dimension named twice in :func:`parse_dims` (the last used to win without a word); its argument is
    the name."""


def _fix_dims(proto, dims: Mapping[str, int], name: str):
    """A copy of ``proto`` whose inputs' symbolic dimensions named in ``dims`` have those sizes (a sequence
    length exported as dynamic)."""
    import onnx

    have = _symbolic_dims(proto)
    for k, v in dims.items():
        if k not in have:
            raise ArchFeaturesError(f"no input dimension is named {k!r}; the inputs' symbolic dimensions are "
                                    f"{', '.join(map(repr, have)) or 'none'}", source=name, step="analyse onnx")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArchFeaturesError(f"dimension {k!r} must be a whole number >= 1, got {v!r}", source=name,
                                    step="analyse onnx")
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    for vi in m.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                size = dims[d.dim_param]
                d.Clear()
                d.dim_value = size
    del m.graph.value_info[:]
    return m


def parse_frozen(items: Iterable[str]) -> list[str]:
    """``["backbone.", "embed.,pos."]`` (the CLI's ``--frozen``, the service's ``frozen`` field) as the prefixes
    ``["backbone.", "embed.", "pos."]``: comma-separated as ``dims`` is, blanks skipped."""
    return [x.strip() for raw in items for x in raw.split(",") if x.strip()]


def given_frozen(values: Iterable[str] | None, name: str, example: str) -> list[str]:
    """:func:`parse_frozen` of an option or a form field that may be left out (None: no prefix); a ValueError
    naming ``name`` when it is given but names no prefix (``--frozen ""``, ``frozen=``), which would otherwise
    read as none: a job training every weight."""
    prefixes = parse_frozen(values or ())
    if values is not None and not prefixes:
        raise ValueError(f"{name} is empty: give an initializer name prefix, e.g. {example}")
    return prefixes


def check_optimizer(value: Any, name: str = "optimizer", step: str = "predict"):
    """A caller's optimizer, ``NAME[:KEY=VALUE,...]`` naming one of torch.optim's own classes, as the
    :class:`~perfpredict.workload.spec.NamedOptimizer` it names (None: not given); a :class:`UsageError` naming
    ``name`` for an unknown name (listing the known ones) or option
    (:func:`~perfpredict.workload.spec.parse_optimizer`)."""
    from perfpredict.workload.spec import NamedOptimizer, parse_optimizer

    if value is None or isinstance(value, NamedOptimizer):
        return value
    try:
        return parse_optimizer(value)
    except ValueError as e:
        raise UsageError(f"{name}: {e}", step=step) from None


#: ONNX element types of the weights an optimizer steps (float initializers), as torch's dtypes
_ONNX_FLOAT_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def onnx_trained_weights(init: list, frozen: frozenset[str]) -> list[tuple[tuple[int, ...], Any]]:
    """The ``(shape, dtype)`` of the weights a training job of the graph steps: the floating-point ones of its
    initializers ``init`` (:func:`~perfpredict.features.graph.all_initializers`, Constant weights too) less the
    ``frozen`` ones (:func:`frozen_names`, and the buffers: :func:`~perfpredict.features.graph.buffer_names`), what a :class:`~perfpredict.workload.spec.NamedOptimizer` is probed
    over."""
    import torch

    return [(tuple(t.dims), getattr(torch, _ONNX_FLOAT_DTYPES[t.data_type])) for t in init
            if t.data_type in _ONNX_FLOAT_DTYPES and t.name not in frozen]


#: a prefix to show in the messages about each way of naming the frozen weights
PREFIX_EXAMPLES = {"frozen": "backbone.", "trained": "head."}


def check_frozen(frozen: Any, name: str = "frozen") -> list[str] | None:
    """``frozen`` (initializer name prefixes; ``trained``'s too, ``name`` saying which) as a list, None for none; a
    :class:`UsageError` for anything but a list of non-empty strings (a bare string would freeze by its
    characters), and for ``trained=[]`` (no weight trains: read as none given, it would train every one)."""
    example = PREFIX_EXAMPLES.get(name, "backbone.")
    if frozen is None:
        return None
    if isinstance(frozen, (str, bytes)) or not isinstance(frozen, Iterable):
        raise UsageError(f"{name} must be a list of initializer name prefixes such as [{example!r}], got "
                         f"{frozen!r}"[:200], step="predict")
    frozen = list(frozen)
    bad = [p for p in frozen if not isinstance(p, str) or not p.strip()]
    if bad:
        raise UsageError(f"{name}: each prefix is a non-empty initializer name prefix such as {example!r}, got "
                         f"{bad[0]!r}"[:200], step="predict")
    if not frozen and name == "trained":  # read as none given, it would train every weight: the opposite
        raise UsageError(f"trained=[] names no weight that trains: give the prefixes of those that do, such as "
                         f"[{example!r}], or leave trained out (None) to train every weight", step="predict")
    return frozen or None


def check_frozen_or_trained(frozen: Any, trained: Any, names: tuple[str, str] = ("frozen", "trained"),
                            step: str = "predict") -> tuple[list[str] | None, list[str] | None]:
    """:func:`check_frozen` of ``frozen`` and ``trained`` (the prefixes of the weights that train, every other
    floating-point weight frozen); a :class:`UsageError` naming ``names`` when both name prefixes, as each says
    what the other's complement is."""
    frozen, trained = check_frozen(frozen, names[0]), check_frozen(trained, names[1])
    if frozen and trained:
        raise UsageError(f"give {names[0]} or {names[1]}, not both: {names[0]} names the weights that are frozen, "
                         f"{names[1]} the ones that train (every other floating-point weight frozen)", step=step)
    return frozen, trained


def is_frozen_name(name: str, frozen: Sequence[str], trained: Sequence[str] = ()) -> bool:
    """Whether a weight named ``name`` is frozen by the prefixes ``frozen`` (``--frozen``, ``frozen=``): its
    name starts with one of them; or, ``trained`` given (``--trained``, ``trained=``), it starts with none of
    those."""
    return not name.startswith(tuple(trained)) if trained else name.startswith(tuple(frozen))


def _shown_names(names: Sequence[str]) -> str:
    """Up to six of ``names``, quoted and cut to 60 characters, and how many there are in all past six."""
    return ", ".join(repr(n[:60]) for n in names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")


def _refuse_unmatched(prefixes: Sequence[str], tensors: list, option: str, what: str, name: str,
                      buffers: frozenset[str] = frozenset()) -> None:
    """A :class:`UsageError` for the first of ``prefixes`` (``option``'s) that starts none of ``tensors``' names
    (``what`` they are), naming some that exist, those it lies inside first (``lora_`` inside
    ``blocks.0.q.lora_A``): a prefix naming nothing would predict another job without a word. A prefix that
    starts only ``buffers``' names (a BatchNormalization's running statistics) names nothing a prefix freezes or
    trains either, and is refused saying so."""
    for prefix in prefixes:
        if not any(t.name.startswith(prefix) and t.name not in buffers for t in tensors):
            held = [t.name for t in tensors if t.name in buffers and t.name.startswith(prefix)]
            if held:
                params = [t.name for t in tensors if t.name not in buffers]
                raise UsageError(f"{option} prefix {prefix[:60]!r} starts only buffers' names in {name} "
                                 f"({_shown_names(held)}: a BatchNormalization's running statistics and the like, "
                                 "which no training step updates, so no prefix freezes or trains them); its "
                                 f"parameters are {_shown_names(params) or 'none'}", step="predict")
            inside = [t.name for t in tensors if prefix in t.name]
            names = inside or [t.name for t in tensors]
            where = (f"it lies inside {_shown_names(names)}: a prefix starts a name" if inside else
                     f"its {what}s are {_shown_names(names) or 'none'}")
            raise UsageError(f"{option} prefix {prefix[:60]!r} starts no {what}'s name in {name}; {where} (the "
                             "exporter's names: torch.onnx.export keeps module paths such as 'backbone.weight', "
                             "save weights it folded or transposed)", step="predict")


def frozen_names(init: list, frozen: Sequence[str] = (), trained: Sequence[str] = (),
                 name: str = "onnx", buffers: frozenset[str] = frozenset()) -> frozenset[str]:
    """The names of the graph's weights (its initializers ``init``, :func:`~perfpredict.features.graph.
    all_initializers`: a Loop's or If's own too, as ``param_count`` counts them) a training job freezes
    (``requires_grad=False``), which an ONNX file does not record: those the prefixes ``frozen`` start, or, with
    ``trained`` (a LoRA's or an adapter's few weights), every one but the floating-point ones a prefix of
    ``trained`` starts (:func:`is_frozen_name`): an integer weight (a quantized base's int8 matrices) never
    trains, whatever its name. Read from the names, nothing executed. A prefix that starts no initializer's name
    (``trained``: no floating-point one's) is a :class:`UsageError` naming some that exist. The ``buffers``
    (:func:`~perfpredict.features.graph.buffer_names`) are neither frozen nor trained, so a prefix that starts
    only theirs is a :class:`UsageError` too: it froze nothing (``frozen``), or every parameter (``trained``)."""
    if trained:
        floats = [t for t in init if t.data_type in _ONNX_FLOAT_DTYPES]
        _refuse_unmatched(trained, floats, "trained", "floating-point initializer", name, buffers)
        return frozenset(t.name for t in init if t.name not in buffers and (
            t.data_type not in _ONNX_FLOAT_DTYPES or is_frozen_name(t.name, frozen, trained)))
    _refuse_unmatched(frozen, init, "frozen", "initializer", name, buffers)
    return frozenset(t.name for t in init if t.name not in buffers and is_frozen_name(t.name, frozen))


def frozen_initializers(init: list, frozen: frozenset[str], params: frozenset[str] | None = None
                        ) -> tuple[float, float]:
    """The bytes and count of the initializers ``init`` named in ``frozen`` (:func:`frozen_names`), summed from
    their shapes and types; the count of those that are ``params`` only (None: every one), as ``param_count``
    counts them (a quantised weight's scale and zero point are bytes, no parameters)."""
    from perfpredict.features.graph import tensor_nbytes

    picked = [t for t in init if t.name in frozen]
    return (float(sum(tensor_nbytes(t) for t in picked)),
            float(sum(math.prod(t.dims) for t in picked if params is None or t.name in params)))


def from_onnx_proto(proto, name: str = "onnx", batch_axis: int | None = None,
                    dims: Mapping[str, int] | None = None, frozen: Sequence[str] | None = None,
                    batch_input: str | None = None, optimizer: Any = None,
                    trained: Sequence[str] | None = None) -> ArchFeatures:
    """Features of an ONNX graph without executing it (shape inference only). ``batch_axis``: which axis of the
    first input is the batch, where the graph cannot say (every dimension fixed, or a sequence-first input);
    by default the first axis, or the one symbolic dimension when the first is fixed. ``batch_input``: the name
    of the input that carries the batch when it is not the first (a static positions, mask or table input
    first, every dimension fixed); ``batch_axis`` is then an axis of that input. ``dims``: sizes for the
    inputs' other symbolic dimensions (``{"seq": 128}``). A symbolic dimension left besides the batch leaves
    the compute ops' shapes unknown, so every count would be wrong: that is an error asking for its size.
    ``frozen``: initializer name prefixes of the weights a training job freezes (``["backbone."]``,
    :func:`frozen_names`); their bytes and count are the features' ``frozen_param_bytes`` and ``frozen_param_count``,
    as a feature vector gives them. ``trained``, instead of ``frozen``: the prefixes of the weights that train, every
    other floating-point weight frozen (parameter-efficient fine-tuning: LoRA, adapters, BitFit). ``optimizer``: the
    training job's, one of torch.optim's own classes by name (:func:`check_optimizer`), probed for its state copies
    and step temporaries over "meta" tensors shaped like the trained weights (:func:`onnx_trained_weights`); None
    leaves them to the caller."""
    from perfpredict.estimators.kernel_nodes import rows_at_fixed_batch
    from perfpredict.features import _from_stats
    from perfpredict.features.graph import (
        all_initializers,
        analyze_onnx,
        buffer_names,
        inline_functions,
        parameter_names,
        recurrent_initial_states,
        unknown_shapes_note,
    )

    proto = inline_functions(proto)  # a function's Constant weights are weights: param_count counts them too
    proto = _tied_transposes_as_nodes(proto)  # a tied weight's folded transpose is no second weight
    if dims:
        proto = _fix_dims(proto, dims, name)
    try:
        symbolic, static, batch_param, axis = _batch_dim(proto, batch_axis, batch_input)
    except ValueError as e:
        raise ArchFeaturesError(str(e), source=name, step="analyse onnx") from None
    notes: list[str] = []
    # every weight, a Loop's or If's own included (counted once: a body's weights are shared by its iterations)
    init = all_initializers(proto.graph)
    # the buffers (a BatchNormalization's running statistics) are no parameters: a model file's count has none;
    # nor are shape constants and quantisation scales (torch's count, which the training data's param_count is),
    # nor a recurrent op's zero initial state that the dynamo exporter folds into an initializer: none trains
    states = recurrent_initial_states(proto.graph, init)  # read off their values, before those are dropped
    held = buffer_names(proto.graph, init) | states
    params = parameter_names(proto.graph, init, held)
    param_count = float(sum(math.prod(t.dims) for t in init if t.name in params))
    frozen, trained = check_frozen_or_trained(frozen, trained)
    frozen_set = frozen_names(init, frozen or (), trained or (), name, held)
    frozen_bytes, frozen_count = frozen_initializers(init, frozen_set, params)
    named = check_optimizer(optimizer)
    copies, copies_note, step_bytes = (1.0, None, None) if named is None else \
        named_optimizer_probe(named, onnx_trained_weights(init, frozen_set | held))
    proto = _without_weight_data(proto)
    # the frozen weights' layers keep no tensors for backward where no trained weight lies upstream
    trains = (lambda n: n not in frozen_set and n not in held) if frozen_count > 0 else None
    try:
        if symbolic:
            s1 = analyze_onnx(_with_batch(proto, 1, batch_param, axis), run_for_shapes=False, trained=trains,
                              initial_states=states)
            s2 = analyze_onnx(_with_batch(proto, 2, batch_param, axis), run_for_shapes=False, trained=trains,
                              initial_states=states)
            g = _from_stats(s1, s2, 1, 2)  # the per-sample / fixed split a model file's two exports get
            macs, macs_fixed = g.forward_macs_per_sample, g.forward_macs_fixed
            act, act_fixed = g.activation_bytes_per_sample, g.activation_bytes_fixed
            by_op, act_by_op = g.macs_by_op, g.activation_bytes_by_op
            live, live_fixed = g.peak_live_bytes_per_sample, g.peak_live_bytes_fixed
            gsaved, gsaved_fixed = g.graph_saved_bytes_per_sample, g.graph_saved_bytes_fixed
            kernels = g.kernel_nodes
            stats, work_stats = s1, s2  # the frozen weights' share of a step's work: at batch 2, as a model file's
        else:
            b = static or 1
            stats = work_stats = analyze_onnx(proto, run_for_shapes=False, trained=trains,
                                              initial_states=states)
            macs, macs_fixed = stats.macs / b, 0
            act, act_fixed = stats.activation_bytes / b, 0
            live, live_fixed = stats.peak_live_activation_bytes / b, 0
            gsaved, gsaved_fixed = stats.graph_saved_bytes / b, 0
            by_op = {k: v / b for k, v in stats.macs_by_op.items()}
            act_by_op = {k: v / b for k, v in stats.activation_bytes_by_op.items()}
            kernels = rows_at_fixed_batch(stats.kernel_nodes, b)
            which = "the first input" if batch_input is None else f"input {batch_input[:60]!r}"
            notes.append(f"the ONNX batch dimension (axis {axis} of {which}) is fixed at {b}: per-sample values are "
                         f"totals / {b}" + ("" if batch_axis is not None or batch_input is not None else
                                            "; give batch_axis if another axis is the batch, batch_input if "
                                            "another input carries it"))
    except Exception as e:  # noqa: BLE001 - a graph shape inference cannot follow
        raise ArchFeaturesError(f"cannot analyse the graph: {type(e).__name__}: {str(e)[:200]}", source=name,
                                step="analyse onnx") from None
    if stats.unknown_shape_ops:
        left = [d for d in _symbolic_dims(proto) if d != batch_param]
        if left:
            chosen = (f" (batch_axis {batch_axis} is fixed at {static} in the file while {left[0]!r} is symbolic: "
                      f"leave batch_axis out if {left[0]!r} is the batch)"
                      if batch_axis is not None and not symbolic else "")
            raise ArchFeaturesError(
                f"the inputs' symbolic dimension(s) {', '.join(map(repr, left))} besides the batch leave the shapes "
                f"of {sum(stats.unknown_shape_ops.values())} op(s) unknown, so the counts would be wrong: give "
                f"their sizes (Predictor.predict(..., dims={{{left[0]!r}: 128}}), perfpredict predict --dim "
                f"{left[0]}=128, colocate --dim-a / --dim-b), or export with them fixed{chosen}", source=name,
                step="analyse onnx")
        notes.append(unknown_shapes_note(stats.unknown_shape_ops, " without executing the graph"))
    notes.extend(stats.notes)  # what the control flow left uncertain (a loop's trip count, an If's branch)
    if macs <= 0:
        raise ArchFeaturesError("no multiply-accumulate ops with known shapes in the graph", source=name,
                                step="analyse onnx")
    ratio = None
    if frozen_count > 0:
        ratio = frozen_step_ratio(work_stats, trains, lambda n: n not in held)
    _check_counts_bounded(name, forward_macs_per_sample=macs, forward_macs_fixed=macs_fixed,
                          param_count=param_count, param_bytes=stats.initializer_bytes,
                          activation_bytes_per_sample=act, activation_bytes_fixed=act_fixed,
                          peak_live_bytes_per_sample=live, peak_live_bytes_fixed=live_fixed,
                          graph_saved_bytes_per_sample=gsaved, graph_saved_bytes_fixed=gsaved_fixed,
                          macs_by_op=by_op, activation_bytes_by_op=act_by_op,
                          kernel_nodes=[x for r in kernels for x in r[1:]], num_nodes=stats.num_nodes,
                          op_counts=stats.op_counts,
                          input_bytes_per_sample=(in_bytes := _input_bytes_per_sample(proto, batch_param, axis,
                                                                                          static)))
    return ArchFeatures(
        forward_macs_per_sample=float(macs), forward_macs_fixed=float(max(macs_fixed, 0)), param_count=param_count,
        param_bytes=float(stats.initializer_bytes), lookup_param_bytes=float(stats.lookup_param_bytes),
        buffer_bytes=float(stats.buffer_bytes), recurrent_steps_by_op=stats.recurrent_steps_by_op, activation_bytes_per_sample=float(max(act, 0)),
        activation_bytes_fixed=float(max(act_fixed, 0)), num_nodes=float(stats.num_nodes),
        input_bytes_per_sample=float(in_bytes), op_counts=stats.op_counts,
        macs_by_op={k: int(v) for k, v in by_op.items()},
        activation_bytes_by_op={k: int(v) for k, v in act_by_op.items() if v > 0},
        peak_live_bytes_per_sample=float(max(live, 0)), peak_live_bytes_fixed=float(live_fixed),
        graph_saved_bytes_per_sample=float(max(gsaved, 0)), graph_saved_bytes_fixed=float(gsaved_fixed),
        kernel_nodes=tuple(tuple(r) for r in kernels), frozen_param_bytes=frozen_bytes,
        frozen_param_count=frozen_count, frozen_step_work_ratio=ratio, name=name, notes=tuple(notes),
        optimizer_state_copies=1.0 if copies is None else copies, optimizer_state_note=copies_note,
        optimizer_step_bytes=step_bytes)


def _at_least_zero(v: Any) -> Any:
    return 0 if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 else v


#: the batch-independent parts of a feature vector (kernel rows aside): :func:`fixed_parts_at_least_zero`
FIXED_PARTS = ("forward_macs_fixed", "activation_bytes_fixed", "saved_bytes_fixed", "saved_cpu_bytes_fixed",
               "peak_live_bytes_fixed", "graph_saved_bytes_fixed")


def fixed_parts_at_least_zero(graph: Mapping[str, Any]) -> dict[str, Any]:
    """``graph`` (a card's graph features, as a dict) with its :data:`FIXED_PARTS` and the fixed parts of its kernel
    rows ``(class, n, macs/sample, macs fixed, io/sample, io fixed, weights, steps)`` held at 0 or more, as the
    two-batch splits now hold them (``extract_features``, ``split_nodes``): a card written before held a graph
    growing faster than its batch (a batch x batch similarity matrix) as negative intercepts, which the feature
    schema refuses."""
    out = {k: (_at_least_zero(v) if k in FIXED_PARTS else v) for k, v in graph.items()}
    rows = out.get("kernel_nodes")
    if rows and all(isinstance(r, (list, tuple)) for r in rows):  # anything else: the schema's check names it
        out["kernel_nodes"] = [[_at_least_zero(x) if i in (3, 5) else x for i, x in enumerate(r)] for r in rows]
    return out


def _check_counts_bounded(name: str, **counts: Any) -> None:
    """Refuses a graph whose counts are past what a feature vector may carry (``MAX_QUANTITY``, 1e18: the
    bound ``POST /predict`` and ``Predictor.predict(features=...)`` hold a client's numbers to). Shapes of 1e9 or
    more per axis give MACs of 1e27 and beyond: answered as if real (iteration times of 1e58 s), then past
    float range an OverflowError, a 500 from the upload route."""
    from perfpredict.estimators.feature_schema import MAX_QUANTITY

    for field_name, v in counts.items():
        values = v.values() if isinstance(v, Mapping) else v if isinstance(v, (list, tuple)) else (v,)
        for x in values:
            if not x <= MAX_QUANTITY:  # an int past float range compares exactly; NaN and inf fail too
                # math.log10, not len(str(x)): str() of an int past 4300 digits raises ValueError
                shown = (f"about 1e{math.floor(math.log10(x))}" if isinstance(x, int) and x > 10**300 else
                         f"{x:.3g}" if isinstance(x, (int, float)) else str(x)[:20])
                raise ArchFeaturesError(f"the graph's {field_name} ({shown}) is past {MAX_QUANTITY:.0e}, far beyond any "
                                        "real model: check its input shapes (or dims)", source=name,
                                        step="analyse onnx")


def _input_bytes_per_sample(proto, batch_param: str | None = None, axis: int | None = 0,
                            static: int | None = None) -> int:
    """Bytes of one sample of the graph inputs: every dimension but the batch ones (:func:`_batch_axes`);
    symbolic dimensions count 1. An exact int: shapes past float range are refused by
    :func:`_check_counts_bounded`, not an OverflowError here."""
    from perfpredict.features.graph import _dtype_size

    init = {i.name for i in proto.graph.initializer}
    total = 0
    for vi in proto.graph.input:
        if vi.name in init:
            continue
        t = vi.type.tensor_type
        dims = list(t.shape.dim)
        skip = set(_batch_axes(dims, batch_param, axis, static))
        n = 1
        for i, d in enumerate(dims):
            if i not in skip:
                n *= d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
        total += n * _dtype_size(t.elem_type)
    return total


def from_onnx_file(path: str | Path, batch_axis: int | None = None,
                   dims: Mapping[str, int] | None = None, frozen: Sequence[str] | None = None,
                   batch_input: str | None = None, optimizer: Any = None,
                   trained: Sequence[str] | None = None) -> ArchFeatures:
    from perfpredict.input_files import ONNX_LIMIT_BYTES, InputTooLarge, read_bounded

    p = Path(path)
    try:
        data = read_bounded(p, ONNX_LIMIT_BYTES, "an ONNX model (larger weights go in external data files)")
    except InputTooLarge as e:
        raise ArchFeaturesError(str(e), source=str(path), step="read onnx") from None
    except OSError as e:
        raise ArchFeaturesError(f"cannot read: {e.strerror}", source=str(path), step="read onnx") from None
    return from_onnx_proto(load_onnx_bytes(data, str(path), path=p), name=p.stem, batch_axis=batch_axis, dims=dims,
                           frozen=frozen, batch_input=batch_input, optimizer=optimizer, trained=trained)
