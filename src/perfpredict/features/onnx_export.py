"""Export a workload's model to ONNX, trying the exporters in order until one works.

The TorchScript exporter (``dynamo=False``) is tried first: it is fast, and it keeps the op vocabulary of
Horus Table 3 (Conv, BatchNormalization, GlobalAveragePool, LSTM, Gemm, ...). The dynamo exporter
(torch.export + onnxscript) is the fallback for models the tracer cannot handle. The model is exported in
eval mode with constant folding off, so BatchNormalization is not fused into Conv and op counts describe the
network as written.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

TORCHSCRIPT_OPSET = 17


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
    import onnx

    was_training = model.training
    model.eval()
    attempts: list[str] = []
    try:
        for name, fn in (("torchscript", _export_torchscript), ("dynamo", _export_dynamo)):
            try:
                # Grad stays enabled: under no_grad, eval-mode nn.TransformerEncoderLayer takes a fused fast
                # path that hides its attention matmuls from the exported graph.
                with _quiet():
                    proto = fn(model, args)
            except Exception as e:  # noqa: BLE001 - any exporter failure: record it and try the next one
                attempts.append(f"{name}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}")
                continue
            opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
            if path is not None:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                onnx.save(proto, str(path))
            attempts.append(f"{name}: ok")
            return ExportResult(proto, name, int(opset), attempts)
    finally:
        model.train(was_training)
    raise RuntimeError("ONNX export failed with every exporter: " + " | ".join(attempts))


def _export_torchscript(model: torch.nn.Module, args: tuple):
    import onnx

    buf = io.BytesIO()
    # keep_initializers_as_inputs: without it the exporter merges initializers that hold equal values
    # (fresh BatchNorm affine params, identical layers of a new TransformerEncoder) into one tensor plus
    # Identity nodes, so the graph would under-count parameter bytes and show ops the model does not have.
    torch.onnx.export(model, args, buf, dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                      training=torch.onnx.TrainingMode.EVAL, do_constant_folding=False,
                      keep_initializers_as_inputs=True)
    proto = onnx.load_from_string(buf.getvalue())
    # ... then take the weights back out of the graph inputs: a standard graph, nothing merged.
    weights = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in weights]
    del proto.graph.input[:]
    proto.graph.input.extend(inputs)
    return proto


def _export_dynamo(model: torch.nn.Module, args: tuple):
    # The dynamo exporter writes external data next to a path; go through a temp dir to get one proto.
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "model.onnx")
        prog = torch.onnx.export(model, args, dynamo=True, optimize=False)
        prog.save(out)
        return onnx.load(out)
