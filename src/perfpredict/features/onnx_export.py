"""Export a workload's model to ONNX, trying the exporters in order until one works.

The TorchScript exporter (``dynamo=False``) is tried first: it is fast, and it keeps the op vocabulary of
Horus Table 3 (Conv, BatchNormalization, GlobalAveragePool, LSTM, Gemm, ...). The dynamo exporter
(torch.export + onnxscript) is the fallback for models the tracer cannot handle. The model is exported in
eval mode with constant folding off, so BatchNormalization is not fused into Conv and op counts describe the
network as written.

A model whose weights exceed :data:`EXTERNAL_DATA_BYTES` (e.g. a recommendation model's multi-GB embedding
tables) cannot be one protobuf, which is limited to 2 GiB: it is exported to a temporary directory with its
weights as ONNX external data, and the returned ``ModelProto`` keeps only their references (names, shapes,
dtypes), which is all the graph analysis reads. Saved to ``path``, such a model gets its weights in one file
beside it, ``<name>.data``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from perfpredict.errors import message_lines

TORCHSCRIPT_OPSET = 17
#: Weights (parameters and buffers) above this many bytes are exported as external data (protobuf's 2 GiB
#: limit, with room for the graph itself).
EXTERNAL_DATA_BYTES = 1 << 30
#: One export (or fvcore count, :mod:`perfpredict.features.fvcore_check`) at a time in a process. The exporters
#: keep global state (TorchScript's ``GLOBALS.in_onnx_export``: a second export beside the first failed, or fell
#: back to the dynamo exporter's other graph without a word), and :func:`_quiet` swaps the process's file
#: descriptors and ``sys.stdout``: two swaps interleaved left them on /dev/null for good. Concurrent
#: ``Predictor.predict`` calls on model files and zoo models export here.
EXPORT_LOCK = threading.Lock()


@dataclass
class ExportResult:
    model_proto: Any  # onnx.ModelProto
    exporter: str
    opset: int
    attempts: list[str]


@contextlib.contextmanager
def _quiet():
    """Silence exporter chatter while exporting.

    The exporters print progress lines, deprecation warnings and, when they fail, whole tracebacks through
    loggers bound to the original stderr and from C++ — so Python-level redirection is not enough: the
    process's file descriptors 1 and 2 are pointed at /dev/null for the duration, and logging is disabled.
    (Other threads' output is silenced with it; callers hold :data:`EXPORT_LOCK`.)
    """
    prev = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)
        logging.disable(prev)


def export_onnx(model: torch.nn.Module, args: tuple, path: str | Path | None = None) -> ExportResult:
    """Export ``model(*args)`` to an ONNX ModelProto (and to ``path`` if given).

    Raises RuntimeError listing every exporter's failure if none succeeds.
    """
    if args and isinstance(args[-1], Mapping):
        # torch.onnx.export reads a trailing dict in args as keyword arguments; an empty one after it keeps a
        # dict the model takes by position (``example_inputs`` returning ``(batch,)``) a positional argument.
        args = (*args, {})
    with EXPORT_LOCK:
        return _export_first_that_works(model, args, path)


@contextlib.contextmanager
def without_fused_attention():
    """Turn off ``nn.TransformerEncoderLayer``'s / ``nn.MultiheadAttention``'s fused inference fast path while a
    graph is exported or counted. Eval mode with grad enabled is not enough to keep it off: the layer takes it
    whenever none of its weights requires a grad, so a frozen encoder's graph hid its attention matmuls (222
    nodes against the training step's 301 for a 2-layer encoder). The switch is process-wide; callers hold
    ``EXPORT_LOCK``."""
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def _export_first_that_works(model: torch.nn.Module, args: tuple, path: str | Path | None) -> ExportResult:
    import onnx

    was_training = model.training
    model.eval()
    attempts: list[str] = []
    large = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())) \
        > EXTERNAL_DATA_BYTES
    try:
        with (tempfile.TemporaryDirectory(prefix="perfpredict-onnx-") if large
              else contextlib.nullcontext()) as tmp:
            for name, fn in (("torchscript", _export_torchscript), ("dynamo", _export_dynamo)):
                workdir = os.path.join(tmp, name) if tmp else None
                try:
                    # Grad stays enabled and the fast path off: either way, eval-mode nn.TransformerEncoderLayer
                    # would take a fused path that hides its attention matmuls from the exported graph.
                    with _quiet(), without_fused_attention():
                        proto = fn(model, args, workdir)
                except Exception as e:  # noqa: BLE001 - any exporter failure: record it and try the next one
                    # the exporters' messages run over several lines ("output 1 (3" then "[ CPULongType{} ]) of
                    # traced region did not have observable data dependence..."): the first alone says nothing
                    attempts.append(f"{name}: {type(e).__name__}: {' '.join(message_lines(str(e)))[:300]}")
                    continue
                opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
                if path is not None:
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                    if workdir is None:
                        onnx.save(proto, str(path))
                    else:
                        _save_external(proto, workdir, Path(path))
                attempts.append(f"{name}: ok")
                return ExportResult(proto, name, int(opset), attempts)
    finally:
        model.train(was_training)
    raise RuntimeError("ONNX export failed with every exporter: " + " | ".join(attempts))


def _export_torchscript(model: torch.nn.Module, args: tuple, workdir: str | None = None):
    """The graph, in memory; with ``workdir``, written there with external data and loaded without it."""
    import onnx

    # keep_initializers_as_inputs: without it the exporter merges initializers that hold equal values
    # (fresh BatchNorm affine params, identical layers of a new TransformerEncoder) into one tensor plus
    # Identity nodes, so the graph would under-count parameter bytes and show ops the model does not have.
    kwargs = dict(dynamo=False, opset_version=TORCHSCRIPT_OPSET, training=torch.onnx.TrainingMode.EVAL,
                  do_constant_folding=False, keep_initializers_as_inputs=True)
    if workdir is None:
        buf = io.BytesIO()
        torch.onnx.export(model, args, buf, **kwargs)
        proto = onnx.load_from_string(buf.getvalue())
    else:
        os.makedirs(workdir, exist_ok=True)
        out = os.path.join(workdir, "model.onnx")
        torch.onnx.export(model, args, out, **kwargs)  # a path: over 2 GiB it writes the weights beside it
        proto = onnx.load(out, load_external_data=False)
    # ... then take the weights back out of the graph inputs: a standard graph, nothing merged.
    weights = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in weights]
    del proto.graph.input[:]
    proto.graph.input.extend(inputs)
    return proto


def _export_dynamo(model: torch.nn.Module, args: tuple, workdir: str | None = None):
    """The graph, in memory; with ``workdir``, written there with external data and loaded without it."""
    import onnx

    prog = torch.onnx.export(model, args, dynamo=True, optimize=False)
    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
        out = os.path.join(workdir, "model.onnx")
        prog.save(out, external_data=True)
        return onnx.load(out, load_external_data=False)
    # The dynamo exporter writes external data next to a path; go through a temp dir to get one proto.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "model.onnx")
        prog.save(out)
        return onnx.load(out)


def _tensors(graph):
    """Every TensorProto of ``graph``: initializers and tensor attributes, subgraphs included."""
    import onnx

    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.TENSORS:
                yield from attr.tensors
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _tensors(sub)


def _save_external(proto, workdir: str, path: Path) -> None:
    """Save ``proto``, whose weights lie as external data under ``workdir``, to ``path`` with all of them
    copied, file to file (never all in memory), into one ``<path name>.data`` beside it."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    out = type(proto)()
    out.CopyFrom(proto)
    external = [t for t in _tensors(out.graph) if uses_external_data(t)]
    if not external:  # under 2 GiB after all: the exporter kept the weights in the graph
        onnx.save(out, str(path))
        return
    location = path.name + ".data"
    with open(path.parent / location, "wb") as data:
        for t in external:
            info = ExternalDataInfo(t)
            data.seek(-data.tell() % 4096, os.SEEK_CUR)  # page-aligned, as onnx's own writer does
            offset = data.tell()
            with open(os.path.join(workdir, info.location), "rb") as src:
                src.seek(info.offset or 0)
                if info.length:
                    remaining = info.length
                    while remaining:
                        chunk = src.read(min(remaining, 1 << 24))
                        if not chunk:
                            raise OSError(f"external data of {t.name} ends early in {info.location}")
                        data.write(chunk)
                        remaining -= len(chunk)
                else:
                    shutil.copyfileobj(src, data, 1 << 24)
            del t.external_data[:]
            for key, value in (("location", location), ("offset", offset), ("length", data.tell() - offset)):
                entry = t.external_data.add()
                entry.key, entry.value = key, str(value)
    onnx.save(out, str(path))
