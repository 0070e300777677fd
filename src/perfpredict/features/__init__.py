"""Graph features of a workload: ONNX export → shape inference → MACs / bytes / op counts, fvcore cross-check.

Per-sample quantities are exact rather than divided-by-batch approximations: the model is analysed at batch
sizes 1 and 2 and the difference is the per-sample part (what remains is the batch-independent part).
A failure here never ends a profile: it is recorded on the card (``features.available = False``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from perfpredict.card import GraphFeatures
from perfpredict.errors import first_line
from perfpredict.estimators.kernel_nodes import rows_at_fixed_batch, split_nodes
from perfpredict.features.fvcore_check import fvcore_counts
from perfpredict.features.graph import GraphStats, analyze_onnx, unknown_shapes_note
from perfpredict.features.onnx_export import export_onnx
from perfpredict.workload.forward_args import as_positional
from perfpredict.workload.spec import Workload

__all__ = ["analyze_onnx", "export_onnx", "extract_features", "features_from_onnx", "fvcore_counts"]


def _split(at1: int, at2: int, b1: int, b2: int) -> tuple[int, int]:
    """(per-sample, fixed) from values measured at two batch sizes, assuming value = fixed + b·per_sample."""
    per = (at2 - at1) // (b2 - b1)
    return int(per), int(at1 - b1 * per)


def extract_features(workload: Workload, model: torch.nn.Module | None = None,
                     onnx_path: str | Path | None = None, *, use_fvcore: bool = True,
                     graphs: dict[int, GraphStats] | None = None) -> GraphFeatures:
    """Graph features for ``workload`` (built fresh unless ``model`` is given); never raises. ``graphs``, when
    given, receives the analysed exports by batch size (so a caller need not export them again)."""
    try:
        if model is None:
            torch.manual_seed(0)
            model = workload.build_model()
        # Keyword inputs (example_inputs returned a dict) reach the exporters and fvcore through a wrapper that
        # takes their tensors by position; one wrapper per batch size, as its fixed values may depend on it.
        model = model.to("cpu")
        b1, b2 = 1, 2
        model1, args1 = as_positional(model, workload.inputs(b1))
        if not _forward_runs(model1, args1):  # some models reject batch 1 (e.g. squeeze())
            b1, b2 = 2, 4
            model1, args1 = as_positional(model, workload.inputs(b1))
            if not _forward_runs(model1, args1):
                # Both exporters run this forward; they would fail too, one of them slowly.
                return GraphFeatures(available=False, error="not exported: the model's forward pass fails "
                                                            "in eval mode at batch sizes 1 and 2")
        model2, args2 = as_positional(model, workload.inputs(b2))
        first = export_onnx(model1, args1, onnx_path)
        second = export_onnx(model2, args2)
        s1, s2 = analyze_onnx(first.model_proto), analyze_onnx(second.model_proto)
        if graphs is not None:
            graphs.update({b1: s1, b2: s2})
    except BaseException as e:  # the user's code runs here: sys.exit() included
        if isinstance(e, KeyboardInterrupt):
            raise
        return GraphFeatures(available=False, error=f"{type(e).__name__}: {first_line(e) or type(e).__name__}"[:1000])

    feats = _from_stats(s1, s2, b1, b2)
    if s1.op_counts != s2.op_counts:
        # the per-sample split assumes one graph whose sizes scale with the batch
        if _grows_with_batch(model, workload, s1, s2, b1, b2):
            feats.notes.append(f"the exported graph grows with the batch ({s1.num_nodes} nodes at batch {b1}, "
                               f"{s2.num_nodes} at {b2}, by as many again at {2 * b2 - b1}: the exporter writes some "
                               "nodes once per sample, as for EmbeddingBag): the per-sample counts follow it, but "
                               "its kernels are not listed node by node")
        else:
            feats.notes.append(f"the exports at batch {b1} and {b2} traced different graphs ({s1.num_nodes} and "
                               f"{s2.num_nodes} nodes): the forward pass takes another path on each call (random or "
                               "data-dependent control flow), so the per-sample counts mix two paths and are rough")
    feats.exporter, feats.opset = first.exporter, first.opset
    feats.onnx_file = Path(onnx_path).name if onnx_path else None
    feats.export_batch_size = b1
    if use_fvcore:
        try:
            f1, f2 = fvcore_counts(model1, args1), fvcore_counts(model2, args2)
            macs, _ = _split(f1["macs"], f2["macs"], b1, b2)
            flops, _ = _split(f1["total"], f2["total"], b1, b2)
            if macs < 0 or flops < 0:
                # fewer MACs at the larger batch: the two traced passes took different paths
                raise ValueError(f"fvcore counted fewer MACs at batch {b2} ({f2['macs']:,}) than at batch {b1} "
                                 f"({f1['macs']:,}): the forward pass takes another path on each call")
            feats.fvcore_macs_per_sample, feats.fvcore_flops_per_sample = macs, flops
            feats.fvcore_by_operator = {k: _split(f1["by_operator"].get(k, 0), v, b1, b2)[0]
                                        for k, v in f2["by_operator"].items()}
            feats.fvcore_unsupported = f2["unsupported"]
            if feats.forward_macs_per_sample:
                feats.macs_rel_diff = abs(feats.forward_macs_per_sample - feats.fvcore_macs_per_sample) \
                    / feats.forward_macs_per_sample
        except BaseException as e:  # the cross-check is optional; it runs the user's forward
            if isinstance(e, KeyboardInterrupt):
                raise
            feats.fvcore_error = f"{type(e).__name__}: {str(e).strip()[:300]}"
    return feats


def _grows_with_batch(model: torch.nn.Module, workload: Workload, s1: GraphStats, s2: GraphStats,
                      b1: int, b2: int) -> bool:
    """Whether two exports whose op counts differ belong to one graph that grows with the batch: an export at
    ``2*b2 - b1`` adds to every op count what the step from ``b1`` to ``b2`` added (a forward that switches
    between two paths cannot, as that needs a third graph). False where that export fails."""
    b3 = 2 * b2 - b1
    try:
        model3, args3 = as_positional(model, workload.inputs(b3))
        s3 = analyze_onnx(export_onnx(model3, args3).model_proto)
    except BaseException as e:  # the user's code runs here
        if isinstance(e, KeyboardInterrupt):
            raise
        return False
    ops = set(s1.op_counts) | set(s2.op_counts) | set(s3.op_counts)
    return all(s3.op_counts.get(k, 0) - s2.op_counts.get(k, 0) == s2.op_counts.get(k, 0) - s1.op_counts.get(k, 0)
               for k in ops)


def _forward_runs(model: torch.nn.Module, args: tuple) -> bool:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*args)
        return True
    except BaseException as e:  # any failure (sys.exit() included) means "cannot export at this batch size"
        if isinstance(e, KeyboardInterrupt):
            raise
        return False
    finally:
        model.train(was_training)


def features_from_onnx(model_proto, batch_size: int = 1) -> GraphFeatures:
    """Features of an already-exported ONNX graph at its fixed ``batch_size`` (no per-sample split).

    Per-sample values are the whole-graph values divided by ``batch_size``: use :func:`extract_features`
    when the PyTorch model is at hand, which separates the batch-independent part exactly.
    """
    s = analyze_onnx(model_proto)
    return GraphFeatures(
        available=True, export_batch_size=batch_size,
        forward_macs_per_sample=s.macs // batch_size,
        macs_by_op={k: v // batch_size for k, v in s.macs_by_op.items()},
        param_bytes=s.initializer_bytes, lookup_param_bytes=s.lookup_param_bytes, buffer_bytes=s.buffer_bytes,
        recurrent_steps_by_op=s.recurrent_steps_by_op,
        activation_bytes_per_sample=s.activation_bytes // batch_size,
        activation_bytes_by_op={k: v // batch_size for k, v in s.activation_bytes_by_op.items()},
        peak_live_bytes_per_sample=s.peak_live_activation_bytes // batch_size,
        graph_saved_bytes_per_sample=s.graph_saved_bytes // batch_size,
        op_counts=s.op_counts, num_nodes=s.num_nodes, kernel_nodes=rows_at_fixed_batch(s.kernel_nodes, batch_size),
        notes=list(s.notes))


def _from_stats(s1: GraphStats, s2: GraphStats, b1: int, b2: int) -> GraphFeatures:
    macs, macs_fixed = _split(s1.macs, s2.macs, b1, b2)
    act, act_fixed = _split(s1.activation_bytes, s2.activation_bytes, b1, b2)
    live, live_fixed = _split(s1.peak_live_activation_bytes, s2.peak_live_activation_bytes, b1, b2)
    gsaved, gsaved_fixed = _split(s1.graph_saved_bytes, s2.graph_saved_bytes, b1, b2)
    by_op = {k: max(_split(s1.macs_by_op.get(k, 0), v, b1, b2)[0], 0) for k, v in s2.macs_by_op.items()}
    act_by_op = {k: _split(s1.activation_bytes_by_op.get(k, 0), v, b1, b2)[0]
                 for k, v in s2.activation_bytes_by_op.items()}
    err = None
    if s1.unknown_shape_ops:
        err = unknown_shapes_note(s1.unknown_shape_ops)
    # Counts at 0 or more, as split_nodes holds the kernel rows' fixed parts: a graph that grows faster than the
    # batch (a batch x batch similarity matrix, as in a contrastive loss) splits into a negative intercept, and a
    # card carrying a negative count is refused when it is read back.
    return GraphFeatures(
        available=True, error=err,
        forward_macs_per_sample=max(macs, 0), forward_macs_fixed=max(macs_fixed, 0), macs_by_op=by_op,
        param_bytes=s1.initializer_bytes, lookup_param_bytes=s1.lookup_param_bytes, buffer_bytes=s1.buffer_bytes,
        recurrent_steps_by_op=s1.recurrent_steps_by_op,
        activation_bytes_per_sample=max(act, 0), activation_bytes_fixed=max(act_fixed, 0),
        activation_bytes_by_op={k: v for k, v in act_by_op.items() if v > 0},
        peak_live_bytes_per_sample=max(live, 0), peak_live_bytes_fixed=max(live_fixed, 0),
        graph_saved_bytes_per_sample=max(gsaved, 0), graph_saved_bytes_fixed=max(gsaved_fixed, 0),
        op_counts=s1.op_counts, num_nodes=s1.num_nodes,
        kernel_nodes=split_nodes(s1.kernel_nodes, s2.kernel_nodes, b1, b2), notes=list(s1.notes))
