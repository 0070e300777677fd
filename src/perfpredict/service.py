"""The Predictor over HTTP (FastAPI). It never executes anything a client sends.

    perfpredict serve --host 127.0.0.1 --port 8000      # OpenAPI schema at /docs and /openapi.json

- ``GET  /health``  — liveness, and which model sets are loaded;
- ``GET  /models``  — each model set: device, dataset hash, rows, families, grouped-CV scores;
- ``POST /predict`` — JSON ``{"features": {...graph features...}, "batch_sizes": [32], "device_type": ...}``,
  answered with a predicted :class:`~perfpredict.card.PerformanceCard`;
- ``POST /predict/onnx`` — multipart upload of an ONNX file (``file``) with ``batch_sizes`` (comma-separated)
  and optional ``device_type``. The file is parsed and shape-inferred by the ``onnx`` library only: no
  onnxruntime session, no Python from the client, nothing executed. Uploads over ``max_upload_bytes`` are
  refused with 413 before they are parsed.

Errors are 4xx with ``{"detail": "<one line>"}``: 400 for an unreadable ONNX file, 413 for an oversized
upload, 422 for a request that does not match the schema or asks for something impossible.
"""


from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from perfpredict.errors import PerfPredictError
from perfpredict.estimators.kernel_nodes import KERNEL_CLASSES

DEFAULT_MAX_UPLOAD_BYTES = 256 * 1024 * 1024


#: One row of ``kernel_nodes``: a kernel class and seven non-negative integers.
_Count = Annotated[int, Field(ge=0)]
KernelRow = tuple[Literal[KERNEL_CLASSES], Annotated[int, Field(ge=1)], _Count, _Count, _Count, _Count, _Count, _Count]


class FeatureVector(BaseModel):
    """Graph features of one architecture (what ``perfpredict.estimators.arch.ArchFeatures`` holds)."""

    forward_macs_per_sample: float = Field(ge=0)
    param_count: float = Field(ge=0)
    param_bytes: float = Field(ge=0)
    activation_bytes_per_sample: float = Field(ge=0)
    num_nodes: float = Field(ge=1)
    forward_macs_fixed: float = Field(0.0, ge=0)
    activation_bytes_fixed: float = Field(0.0, ge=0)
    input_bytes_per_sample: float = Field(0.0, ge=0)
    lookup_param_bytes: float = Field(0.0, ge=0, description="bytes of weights only indexed (embedding tables); "
                                                             "part of param_bytes")
    recurrent_steps_by_op: dict[Literal["LSTM", "GRU", "RNN"], Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict, description="time steps of the recurrent layers per pass (sequence length × "
                                          "directions, summed per ONNX op type); independent of the batch size")
    op_counts: dict[str, int] = Field(
        default_factory=dict, description="ONNX op type -> count. Which types are present sets the library code "
                                          "a CPU process pages in (a third to a half of a small model's RSS); "
                                          "left out, CPU memory is under-predicted and the card says so")
    macs_by_op: dict[str, float] = Field(default_factory=dict)
    activation_bytes_by_op: dict[str, float] = Field(default_factory=dict)
    saved_bytes_per_sample: float | None = Field(
        None, ge=0, description="bytes autograd saves for backward per sample, as CUDA's kernels keep them (a "
                                "predicted card's features.saved_bytes_per_sample); left out, it is estimated from "
                                "the activation bytes, and the card says so")
    saved_bytes_fixed: float = Field(0.0, ge=0)
    saved_cpu_bytes_per_sample: float | None = Field(
        None, ge=0, description="the same as the CPU's own kernels keep them (unfused attention, float dropout "
                                "noise): what the CPU memory model charges; left out, it is estimated")
    saved_cpu_bytes_fixed: float = Field(0.0, ge=0)
    peak_live_bytes_per_sample: float | None = Field(
        None, ge=0, description="the most activation bytes alive at once in a forward pass, per sample (a "
                                "predicted card's features.peak_live_bytes_per_sample): what inference memory "
                                "charges; left out, it is estimated from the activation bytes, and the card says so")
    peak_live_bytes_fixed: float = 0.0
    graph_saved_bytes_per_sample: float | None = Field(
        None, ge=0, description="activation bytes a backward pass would keep per sample by per-op rules on the "
                                "graph (a predicted card's features.graph_saved_bytes_per_sample): what the "
                                "saved-bytes estimate rests on when the exact counts are left out")
    graph_saved_bytes_fixed: float = 0.0
    kernel_nodes: list[KernelRow] = Field(
        default_factory=list, max_length=20000,
        description="the kernels one pass runs, identical ones merged: [class, count, MACs per sample, MACs fixed, "
                    "activation bytes per sample, fixed, weight bytes, recurrent steps] (a predicted card's "
                    "features.kernel_nodes; perfpredict.estimators.kernel_nodes). What the CPU time baseline "
                    "prices; left out, stand-ins are made from the per-op-type totals, and the card says so")
    name: str = Field("features", max_length=200)

    @model_validator(mode="after")
    def _lookup_within_params(self) -> "FeatureVector":
        if self.lookup_param_bytes > self.param_bytes:
            raise ValueError("lookup_param_bytes is part of param_bytes, so it cannot exceed it")
        return self


class PredictRequest(BaseModel):
    features: FeatureVector
    batch_sizes: list[int] = Field(default_factory=lambda: [32], min_length=1, max_length=64)
    device_type: str | None = Field(None, description="a model set (e.g. cuda_h100; GET /models lists them with "
                                     "their devices) or a kind (cuda / cpu; cpu: the set measured on the "
                                     "server's CPU model if any, else the first)")
    mode: Literal["train", "infer"] | None = Field(
        None, description="training steps (default) or inference passes: picks the model set trained on them")
    allow_fallback: bool = True


def create_app(predictor=None, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES):
    """The FastAPI application around ``predictor`` (``Predictor.load()`` when None)."""
    from fastapi import FastAPI, File, Form, HTTPException, Request, UploadFile
    from fastapi.responses import JSONResponse

    from perfpredict import __version__
    from perfpredict.estimators.arch import ArchFeatures, ArchFeaturesError, from_onnx_proto, load_onnx_bytes
    from perfpredict.predictor import Predictor

    pred = predictor or Predictor.load()
    app = FastAPI(title="perfpredict", version=__version__,
                  description="Performance predictions for deep-learning training jobs (no code is executed).")

    @app.exception_handler(PerfPredictError)
    async def _pp_error(request: Request, exc: PerfPredictError):  # noqa: ARG001
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "model_sets": pred.device_types}

    @app.get("/models")
    def models() -> dict[str, Any]:
        out = {}
        for name, ms in pred.sets.items():
            out[name] = {"device_kind": ms.device_kind, "device_name": ms.device_name, "mode": ms.mode,
                         "dataset_sha256": ms.meta["dataset_sha256"], "rows": ms.meta["rows"],
                         "families": ms.meta["families"], "batch_sizes": ms.trained_batches,
                         "targets": {k: t.scores for k, t in ms.targets.items()},
                         "trained_at": ms.meta["trained_at"]}
        return out

    @app.post("/predict")
    def predict(req: PredictRequest) -> dict[str, Any]:
        arch = ArchFeatures.from_dict(req.features.model_dump())
        card = pred.card_for(arch, req.batch_sizes, device_type=req.device_type, source=arch.name,
                             allow_fallback=req.allow_fallback, mode=req.mode)
        return card.model_dump(mode="json")

    @app.post("/predict/onnx")
    async def predict_onnx(file: UploadFile = File(...), batch_sizes: str = Form("32"),
                           device_type: str | None = Form(None),
                           mode: Literal["train", "infer"] | None = Form(None),
                           batch_axis: int | None = Form(None)) -> dict[str, Any]:
        try:
            bs = [int(b) for b in batch_sizes.split(",") if b.strip()]
        except ValueError:
            raise HTTPException(422, f"batch_sizes must be comma-separated integers, got {batch_sizes!r}") from None
        data = await file.read(max_upload_bytes + 1)
        if len(data) > max_upload_bytes:
            raise HTTPException(413, f"upload larger than {max_upload_bytes} bytes")
        name = (file.filename or "upload.onnx").rsplit("/", 1)[-1][:200]
        try:
            arch = from_onnx_proto(load_onnx_bytes(data, name), name=name.removesuffix(".onnx"), batch_axis=batch_axis)
        except ArchFeaturesError as e:
            raise HTTPException(400, str(e)) from None
        card = pred.card_for(arch, bs, device_type=device_type, source=name, mode=mode)
        return card.model_dump(mode="json")

    return app


def serve(host: str = "127.0.0.1", port: int = 8000, models_dir: str | None = None,
          max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES) -> None:
    import uvicorn

    from perfpredict.predictor import Predictor

    app = create_app(Predictor.load(models_dir), max_upload_bytes=max_upload_bytes)
    uvicorn.run(app, host=host, port=port, log_level="warning")
