"""The Predictor over HTTP (FastAPI). It never executes anything a client sends.

    perfpredict serve --host 127.0.0.1 --port 8000      # OpenAPI schema at /docs and /openapi.json

- ``GET  /health``  — liveness, and which model sets are loaded;
- ``GET  /models``  — each model set: device, dataset hash, rows, families, grouped-CV scores, how much
  its memory q90 grows per doubling past the trained batch sizes;
- ``POST /predict`` — JSON ``{"features": {...graph features...}, "batch_sizes": [32], "device_type": ...}``,
  answered with a predicted :class:`~perfpredict.card.PerformanceCard`;
- ``POST /predict/batch`` — JSON ``{"jobs": [<a /predict body>, ...]}`` (1 to 1,000 jobs, at most 16,384 batch
  sizes in all, each job's distinct ones counted, else one 422): a scheduler's round
  in one request, answered with ``{"results": [...], "errors": <count>}``, one result per job in order: ``{"status":
  200, "card": {...}}``, the card /predict gives for it, or ``{"status": 422, "detail": ...}``, the error /predict
  gives for it (a bad job does not fail the others);
- ``POST /predict/onnx`` — multipart upload of an ONNX file (``file``) with ``batch_sizes`` (comma-separated)
  and optional ``device_type`` (and ``mode``, ``precision``, ``batch_axis``, ``batch_input``, ``dims``, ``frozen``: the
  weights a training job freezes, by initializer name prefix, comma-separated, or ``trained``: the weights that
  train, every other floating-point one frozen). The file is parsed and shape-inferred by the ``onnx`` library only: no
  onnxruntime session, no Python from the client, nothing executed. Uploads over ``max_upload_bytes`` are
  refused with 413 before they are parsed, and before their body is read when their Content-Length says so.

Errors are 4xx, never 500: 400 for an unreadable ONNX file, 413 for an oversized upload, 422 for a request
that does not match the schema or asks for something impossible. A request the schema refuses (a NaN or
infinite number, a negative count or byte total, a batch size outside 1-1,000,000, more than 64 batch sizes)
gets FastAPI's ``{"detail": [{"loc": [..., "<field>"], "msg": "...", ...}]}``; every other error
``{"detail": "<one line>"}``.
"""


import json
import math
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.estimators.feature_schema import FeatureVector, request_features
from perfpredict.predictor import MAX_BATCH_SIZE, MAX_BATCH_SIZES, MAX_OPTIMIZER_STATE_COPIES

#: The most jobs one POST /predict/batch may hold (its body is held to the upload limit besides, as every route's)
MAX_BATCH_JOBS = 1000
#: The most cards' rows (each valid job's distinct batch sizes, a card's points, summed) one POST /predict/batch may
#: ask for: 1,000 jobs at 64 batch sizes each took 33 s and 450 MiB on a 2-vCPU VM, a worker held that long by one
#: client
MAX_BATCH_ROWS = 16_384

DEFAULT_MAX_UPLOAD_BYTES = 256 * 1024 * 1024
#: what a multipart body may hold beyond the file: the envelope and the other form fields
_FORM_MARGIN_BYTES = 64 * 1024

#: strict: "64" or true is not a batch size (the Python API refuses them too)
BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE, strict=True)]
BatchSizes = Annotated[list[BatchSize], Field(min_length=1, max_length=MAX_BATCH_SIZES)]
_BATCH_SIZES = TypeAdapter(BatchSizes)


class UploadLimitError(UsageError, ValueError):
    """A non-positive or non-finite ``max_upload_bytes`` (a ValueError for API callers, one line for the CLI)."""


def _lower(v: Any) -> Any:
    return v.strip().lower() if isinstance(v, str) else v


#: fp32 / bf16 / fp16, in any case and with surrounding spaces, as the CLI and the Python API take it
Precision = Annotated[Literal["fp32", "bf16", "fp16"], BeforeValidator(_lower)]
#: train / infer, likewise
Mode = Annotated[Literal["train", "infer"], BeforeValidator(_lower)]


#: the copies of each trained weight a job's optimizer keeps as state (Predictor.predict's optimizer_state_copies)
OptimizerStateCopies = Annotated[float | None, Field(
    ge=0, le=MAX_OPTIMIZER_STATE_COPIES, strict=True, allow_inf_nan=False,
    description="copies of each trained weight the training job's optimizer keeps as state, charged to training "
                "memory: 1 (as the training data: SGD with momentum; the default), 0 plain SGD, 2 Adam/AdamW")]


class _Request(BaseModel):
    """A JSON request body: a key the route does not know is refused (422 naming it), not ignored, since a
    misspelt ``batch_size`` would otherwise be answered for the default batch."""

    model_config = ConfigDict(extra="forbid")


class PredictRequest(_Request):
    features: FeatureVector
    batch_sizes: BatchSizes = Field(default_factory=lambda: [32], description=f"1 to {MAX_BATCH_SIZES} batch "
                                    f"sizes, each 1 to {MAX_BATCH_SIZE}")
    device_type: str | None = Field(None, description="a model set (e.g. cuda_h100; GET /models lists them with "
                                     "their devices) or a kind (cuda / cpu; cpu: the set measured on the "
                                     "server's CPU model if any, else the first)")
    mode: Mode | None = Field(
        None, description="training steps (default) or inference passes: picks the model set trained on them")
    precision: Precision | None = Field(
        None, description="the autocast precision the job trains at (default fp32): picks the set trained at it")
    optimizer_state_copies: OptimizerStateCopies = None
    allow_fallback: bool = True


class BatchPredictRequest(_Request):
    jobs: list[Any] = Field(min_length=1, max_length=MAX_BATCH_JOBS,
                            description=f"1 to {MAX_BATCH_JOBS} jobs, each a /predict request body; one that is not "
                                        "valid gets its own 422 in the results, the others their cards. At most "
                                        f"{MAX_BATCH_ROWS:,} batch sizes in all (each job's distinct ones), "
                                        "else the request's one 422")


class BatchResult(BaseModel):
    """One job's answer in POST /predict/batch: the card /predict gives for it, or the error it gives."""

    status: Literal[200, 422]
    card: dict[str, Any] | None = Field(None, description="the predicted PerformanceCard (status 200)")
    detail: str | list[dict[str, Any]] | None = Field(None, description="why the job was refused (status 422), "
                                                      "as /predict says it: the schema's errors as a list, their "
                                                      "loc starting [\"body\", \"jobs\", <index>], or one line")


class BatchPredictResponse(BaseModel):
    results: list[BatchResult]
    errors: int = Field(description="how many jobs were refused")


def parse_batch_sizes(text: str) -> list[int]:
    """The upload route's comma-separated ``batch_sizes`` under the JSON route's rules (:data:`BatchSizes`);
    a ValueError naming ``batch_sizes`` and what is wrong otherwise."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(p.isascii() and p.removeprefix("-").isdigit() for p in parts):  # int() would take "８" or "1_0"
        raise ValueError(f"batch_sizes must be comma-separated integers, got {text[:100]!r}")
    values = [int(p) for p in parts]
    try:
        return _BATCH_SIZES.validate_python(values)
    except ValidationError as e:
        err = e.errors()[0]
        where = "".join(f"[{i}]" for i in err["loc"] if isinstance(i, int))
        raise ValueError(f"batch_sizes{where}: {err['msg']} (give 1 to {MAX_BATCH_SIZES} comma-separated "
                         f"integers, each 1 to {MAX_BATCH_SIZE}; got {text[:100]!r})") from None


def _upload_limit(max_upload_bytes: Any) -> int:
    ok = (isinstance(max_upload_bytes, (int, float)) and not isinstance(max_upload_bytes, bool)
          and math.isfinite(max_upload_bytes) and int(max_upload_bytes) >= 1)
    if not ok:
        raise UploadLimitError(f"max_upload_bytes must be a positive number of bytes, got {max_upload_bytes!r}",
                               step="serve")
    return int(max_upload_bytes)


class MaxBatchRequest(_Request):
    features: FeatureVector
    memory_limit_bytes: Annotated[float, Field(ge=1, strict=True, allow_inf_nan=False, description="the memory to fit: on a CUDA "
                                               "set the GPU's (NVML process memory, context included), on a CPU "
                                               "set the peak RSS increase of a step")]
    device_type: str | None = Field(None, description="a model set or a kind, as for /predict (default cuda)")
    mode: Mode | None = None
    precision: Precision | None = None
    quantile: Literal["q90", "median"] = Field("q90", description="which prediction is held to the limit")
    multiple_of: BatchSize = 1
    max_batch: BatchSize | None = Field(None, description=f"largest batch size to consider (default {MAX_BATCH_SIZE})")
    optimizer_state_copies: OptimizerStateCopies = None


class PairJob(_Request):
    """One job of a co-location request: its graph features and the batch size it runs at."""

    features: FeatureVector
    batch_size: BatchSize = 32
    optimizer_state_copies: OptimizerStateCopies = None


class ColocationRequest(_Request):
    jobs: tuple[PairJob, PairJob]
    device_type: str | None = Field(None, description="a CUDA model set (e.g. cuda_h100) or 'cuda'")
    allow_fallback: bool = True


class ErrorMessage(BaseModel):
    """Every error the routes raise themselves (400, 413, and a 422 for a request the schema let through but
    the predictor cannot answer: an unknown model set, a batch size list the upload route cannot read)."""

    detail: str


#: the errors each POST route documents besides the schema's own 422
_ERRORS = {400: {"model": ErrorMessage, "description": "an ONNX file that cannot be read"},
           413: {"model": ErrorMessage, "description": "an upload over the size limit"}}
_REFUSED = {422: {"description": "the schema's errors as a list (`{\"detail\": [{\"loc\", \"msg\", ...}]}`), or "
                                 "one line (`{\"detail\": \"...\"}`) for a request the predictor cannot answer"}}

#: a validation error's ``input`` is echoed only this short (a whole feature vector or an upload's bytes were)
_ECHO_CHARS = 200


def _bounded(detail: str) -> str:
    """A one-line error, which may quote the client's input, bounded as a validation error's echo is."""
    return detail if len(detail) <= 2000 else f"{detail[:2000]}... ({len(detail) - 2000:,} more characters)"


def _short_inputs(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for e in errors:
        if "input" in e and len(repr(e["input"])) > _ECHO_CHARS:
            e = {k: v for k, v in e.items() if k != "input"}
        out.append(e)
    return out


def _json_safe(obj: Any) -> Any:
    """``obj`` with NaN and infinities as strings (a validation error echoes the client's input, which may hold
    them, and JSON cannot)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


class _BodyLimit:
    """Refuses a request body over ``limit`` bytes with a 413, on every route: before it is received when its
    Content-Length says so, else while it arrives (a chunked body has no length; a JSON route used to buffer all
    of it, 800 MB for an 800 MB request). ``shown`` is the limit the message names (the upload's, without the
    margin for the multipart envelope and the form's other fields). A plain ASGI middleware: it sees each chunk."""

    def __init__(self, app, limit: int, shown: int) -> None:
        self.app, self.limit, self.shown = app, limit, shown

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await self._refuse(send)
            return
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    from fastapi import HTTPException  # FastAPI passes an HTTPException from the body read on

                    raise HTTPException(413, f"upload larger than {self.shown} bytes", headers={"Connection": "close"})
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"detail": f"upload larger than {self.shown} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def create_app(predictor=None, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES):
    """The FastAPI application around ``predictor`` (``Predictor.load()`` when None). ``max_upload_bytes``
    must be positive (:class:`UploadLimitError`, a ValueError, otherwise)."""
    from fastapi import Depends, FastAPI, File, Form, HTTPException, Request, UploadFile
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    from perfpredict import __version__
    from perfpredict.card import PerformanceCard
    from perfpredict.estimators.arch import (
        ArchFeatures,
        ArchFeaturesError,
        from_onnx_proto,
        load_onnx_bytes,
    )
    from perfpredict.pair_prediction import PairPrediction
    from perfpredict.predictor import CardError, CardRequest, Predictor, with_optimizer_state_copies
    from perfpredict.profile.batch_search import BatchLimit

    max_upload_bytes = _upload_limit(max_upload_bytes)
    pred = predictor or Predictor.load()
    app = FastAPI(title="perfpredict", version=__version__,
                  description="Performance predictions for deep-learning training jobs (no code is executed).")

    @app.exception_handler(PerfPredictError)
    async def _pp_error(request: Request, exc: PerfPredictError):  # noqa: ARG001
        return JSONResponse(status_code=422, content={"detail": _bounded(str(exc))})

    def _arch(features: FeatureVector, copies: float | None) -> ArchFeatures:
        """A request's feature vector as the Predictor takes it, with the optimizer state copies it gives."""
        return with_optimizer_state_copies(ArchFeatures.from_dict(request_features(features)), copies)

    def _schema_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # FastAPI's own rendering, save that it cannot render a NaN the client sent back to it (a 500)
        return _json_safe(jsonable_encoder(_short_inputs(errors)))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):  # noqa: ARG001
        return JSONResponse(status_code=422, content={"detail": _schema_errors(list(exc.errors()))})

    app.add_middleware(_BodyLimit, limit=max_upload_bytes + _FORM_MARGIN_BYTES, shown=max_upload_bytes)

    @app.get("/", include_in_schema=False)
    def index() -> dict[str, Any]:
        """What a browser or ``curl`` at the base URL finds (it was a 404): the endpoints and where the docs are."""
        from fastapi.routing import APIRoute

        endpoints = [f"{m} {r.path}" for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema
                     for m in sorted(r.methods)]
        return {"service": "perfpredict", "version": __version__, "docs": "/docs", "openapi": "/openapi.json",
                "endpoints": endpoints}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "model_sets": pred.device_types}

    @app.get("/models")
    def models() -> dict[str, Any]:
        out = {}
        for name, ms in pred.sets.items():
            out[name] = {"device_kind": ms.device_kind, "device_name": ms.device_name, "cpu_id": ms.cpu_id,
                         "mode": ms.mode, "precision": ms.precision,
                         "dataset_sha256": ms.meta["dataset_sha256"], "rows": ms.meta["rows"],
                         "families": ms.meta["families"], "batch_sizes": ms.trained_batches,
                         "targets": {k: t.scores for k, t in ms.targets.items()},
                         # how much a memory q90 grows per doubling past the largest trained batch size
                         "q90_growth_per_doubling_past_batches": ms.q90_growth_per_doubling(),
                         "trained_at": ms.meta["trained_at"],
                         # a CPU set carried here from another CPU's set by `perfpredict calibrate`: its scores are
                         # the source set's, measured on the source's CPU
                         "calibration": (info.model_dump(mode="json") if (info := ms.calibration_info()) else None)}
        return out

    @app.post("/predict", responses={200: {"model": PerformanceCard}, **_REFUSED})
    def predict(req: PredictRequest) -> dict[str, Any]:
        arch = _arch(req.features, req.optimizer_state_copies)
        card = pred.card_for(arch, req.batch_sizes, device_type=req.device_type, source=arch.name or "features",
                             allow_fallback=req.allow_fallback, mode=req.mode, precision=req.precision)
        return card.model_dump(mode="json")

    @app.post("/predict/batch", responses={200: {"model": BatchPredictResponse}, **_REFUSED})
    def predict_batch(req: BatchPredictRequest) -> dict[str, Any]:
        """Many /predict requests in one (``Predictor.cards_for``): each job's card as /predict answers it, to the
        last bit, or the 422 /predict gives it, in order. The jobs of each model set share one design matrix, so
        each estimator runs once for all of them."""
        results: list[dict[str, Any] | None] = [None] * len(req.jobs)
        valid, jobs = [], []
        for i, body in enumerate(req.jobs):
            try:
                one = PredictRequest.model_validate(body)
                arch = _arch(one.features, one.optimizer_state_copies)
            except ValidationError as e:
                errors = [{**err, "loc": ("body", "jobs", i, *err["loc"])} for err in e.errors(include_url=False)]
                results[i] = {"status": 422, "detail": _schema_errors(errors)}
                continue
            except PerfPredictError as e:
                results[i] = {"status": 422, "detail": _bounded(str(e))}
                continue
            valid.append(i)
            jobs.append(CardRequest(arch, one.batch_sizes, device_type=one.device_type, mode=one.mode,
                                    precision=one.precision, allow_fallback=one.allow_fallback,
                                    source=arch.name or "features"))
        rows = sum(len(set(j.batch_sizes)) for j in jobs)  # a card's points: [32, 32] is one, as for /predict
        if rows > MAX_BATCH_ROWS:
            raise UsageError(f"the jobs ask for {rows:,} batch sizes in all (each job's distinct ones); one request "
                             f"may ask for at most {MAX_BATCH_ROWS:,}: split the round over several requests")
        for i, r in zip(valid, pred.cards_for(jobs), strict=True):
            results[i] = ({"status": 422, "detail": _bounded(str(r.error))} if isinstance(r, CardError)
                          else {"status": 200, "card": r.model_dump(mode="json")})
        return {"results": results, "errors": sum(r["status"] != 200 for r in results if r is not None)}

    @app.post("/colocation", responses={200: {"model": PairPrediction}, **_REFUSED})
    def colocation(req: ColocationRequest) -> dict[str, Any]:
        """Two jobs sharing one GPU: each job's predicted card, then the interference model's slowdown at their
        cumulative predicted utilisation (``Predictor.colocation``). Both cards come from one ``cards_for``: one
        design matrix and one estimator call per target for the pair."""
        cards = pred.cards_for([CardRequest(_arch(j.features, j.optimizer_state_copies), [j.batch_size],
                                            device_type=req.device_type or "cuda", allow_fallback=req.allow_fallback,
                                            source="features") for j in req.jobs])
        for card in cards:  # the first job's error first, as predicting them one by one raised it
            if isinstance(card, CardError):
                raise card.error
        return pred.colocation(*cards, device_type=req.device_type).model_dump(mode="json")

    @app.post("/max-batch", responses={200: {"model": BatchLimit}, **_REFUSED})
    def max_batch(req: MaxBatchRequest) -> dict[str, Any]:
        """The largest batch size predicted to fit ``memory_limit_bytes`` (``Predictor.largest_batch``)."""
        arch = ArchFeatures.from_dict(request_features(req.features))
        limit = pred.largest_batch(features=arch, memory_limit_bytes=req.memory_limit_bytes,
                                   device_type=req.device_type, mode=req.mode, precision=req.precision,
                                   optimizer_state_copies=req.optimizer_state_copies,
                                   quantile=req.quantile, multiple_of=req.multiple_of, max_batch=req.max_batch)
        return limit.model_dump(mode="json")

    async def _fields_as_sent(request: Request) -> dict[str, str]:
        """The upload's ``frozen``, ``trained``, ``batch_input`` and ``optimizer`` fields as the client sent them
        (the form FastAPI has already read, so nothing waits): FastAPI hands an empty form field to the route as
        not sent, and each read so would predict another job than the client meant: ``frozen=`` one training
        every weight, ``batch_input=`` the counts split on the first input, ``optimizer=`` the training data's
        SGD with momentum."""
        form = await request.form()
        return {k: v for k in ("frozen", "trained", "batch_input", "optimizer") if isinstance(v := form.get(k), str)}

    # A plain def: FastAPI runs it in its thread pool. Parsing and shape-inferring a large graph takes seconds
    # (4.4 s for a 22 MB transformer), and as a coroutine it held the event loop, /health included, that long.
    @app.post("/predict/onnx", responses={200: {"model": PerformanceCard}, **_ERRORS, **_REFUSED})
    def predict_onnx(file: UploadFile = File(...),
                     batch_sizes: str = Form("32", description=f"1 to {MAX_BATCH_SIZES} comma-separated batch sizes, "
                                                               f"each 1 to {MAX_BATCH_SIZE}: 8,16,32"),
                     device_type: str | None = Form(None, description="a model set or a kind, as for /predict"),
                     mode: Annotated[Mode | None, Form()] = None,
                     precision: Annotated[Precision | None, Form()] = None,
                     batch_axis: int | None = Form(None, description="the axis of the first input that is the "
                                                                     "batch (default: the first, or the symbolic one)"),
                     batch_input: str | None = Form(None, max_length=1000,
                                                    description="the name of the input that carries the batch when it "
                                                                "is not the first (a static positions or mask input "
                                                                "first); batch_axis is then an axis of it. A name no "
                                                                "input has is a 400, the field sent empty a 422"),
                     dims: str | None = Form(None, description="sizes of the inputs' symbolic dimensions "
                                                               "besides the batch: seq=128,t=4"),
                     frozen: str | None = Form(None, description="comma-separated initializer name prefixes of the "
                                                                 "weights the training job freezes (requires_grad="
                                                                 "False): backbone.,embed. They get no gradient nor "
                                                                 "optimizer state; a prefix naming no initializer, or "
                                                                 "the field sent empty, is a 422"),
                     trained: str | None = Form(None, description="instead of frozen: comma-separated initializer "
                                                                  "name prefixes of the weights that train, every "
                                                                  "other floating-point weight frozen (LoRA, "
                                                                  "adapters, BitFit): blocks.0.q.lora_. A prefix "
                                                                  "naming no floating-point initializer, the field "
                                                                  "sent empty, or beside frozen is a 422"),
                     optimizer_state_copies: float | None = Form(
                         None, ge=0, le=MAX_OPTIMIZER_STATE_COPIES, allow_inf_nan=False,
                         description="copies of each trained weight the optimizer keeps as state, as for /predict"),
                     optimizer: str | None = Form(None, max_length=200,
                                                  description="the training job's optimizer, one of torch.optim's own "
                                                              "classes by name (adamw, sgd, sgd-momentum, adam, "
                                                              "adagrad, rmsprop, ...; case-insensitive), optionally "
                                                              "with options: adamw:foreach=true. Probed for its state "
                                                              "copies and step temporaries over the trained weights' "
                                                              "shapes; no client code runs. An unknown name, the field "
                                                              "sent empty, or beside optimizer_state_copies is a 422"),
                     allow_fallback: bool = Form(True, description="out of distribution, answer from the nearest "
                                                                   "profiled model (as /predict)"),
                     sent: dict[str, str] = Depends(_fields_as_sent)) -> dict[str, Any]:
        try:
            bs = parse_batch_sizes(batch_sizes)
            sizes = _dims_field(dims)
            prefixes = _frozen_field(frozen if frozen is not None else sent.get("frozen"))
            trained_prefixes = _frozen_field(trained if trained is not None else sent.get("trained"), "trained")
            if batch_input is None and "batch_input" in sent:  # sent empty
                raise ValueError("batch_input must name one of the graph's inputs, got '' (or leave the field out)")
            named = _optimizer_field(optimizer if optimizer is not None else sent.get("optimizer"),
                                     optimizer_state_copies)
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        data = file.file.read(max_upload_bytes + 1)
        if len(data) > max_upload_bytes:
            raise HTTPException(413, f"upload larger than {max_upload_bytes} bytes")
        name = (file.filename or "upload.onnx").rsplit("/", 1)[-1][:200]
        try:
            arch = from_onnx_proto(load_onnx_bytes(data, name, external_data=False), name=name.removesuffix(".onnx"),
                                   batch_axis=batch_axis, dims=sizes or None,
                                   frozen=prefixes or None, batch_input=batch_input, optimizer=named,
                                   trained=trained_prefixes or None)
        except ArchFeaturesError as e:
            raise HTTPException(400, str(e)) from None
        card = pred.card_for(with_optimizer_state_copies(arch, optimizer_state_copies), bs, device_type=device_type,
                             source=name, mode=mode, precision=precision, allow_fallback=allow_fallback)
        return card.model_dump(mode="json")

    return app


def _optimizer_field(text: str | None, copies: float | None):
    """The ``optimizer`` form field as the :class:`~perfpredict.workload.spec.NamedOptimizer` it names (None: not
    sent); a ValueError (the 422's message) for an unknown name or option, the field sent empty, or the field
    beside ``optimizer_state_copies`` (:func:`~perfpredict.predictor.check_optimizer_given`)."""
    from perfpredict.predictor import check_optimizer_given

    try:
        return check_optimizer_given(text, copies)
    except UsageError as e:
        raise ValueError(e.message) from None


def _frozen_field(text: str | None, field: str = "frozen") -> list[str]:
    """The ``frozen`` form field, ``backbone.,embed.``, as prefixes (none when the field is not sent), or the
    ``trained`` one's (``field``); a field sent naming no prefix (``frozen=``, ``frozen=,``) is a ValueError (the
    422's message), as ``--frozen ""`` is refused by the CLI."""
    from perfpredict.estimators.arch import PREFIX_EXAMPLES, given_frozen

    return given_frozen(None if text is None else [text], field,
                        f"{field}={PREFIX_EXAMPLES[field]} (or leave the field out)")


def _dims_field(text: str | None) -> dict[str, int]:
    """The ``dims`` form field, ``seq=128,t=4``, as sizes (ValueError: the 422's message); a client's names are
    echoed in errors, so they are bounded."""
    from perfpredict.estimators.arch import DimGivenTwice, parse_dims

    try:
        dims = parse_dims([text or ""], max_size=10**9)
    except DimGivenTwice as e:
        raise ValueError(f"dims: {e.args[0][:60]!r} is given twice") from None
    except ValueError as e:
        raise ValueError(f"dims: {e.args[0][:60]!r} is not NAME=SIZE with a whole size from 1 to 1e9") from None
    return {name[:100]: size for name, size in dims.items()}


def serve(host: str = "127.0.0.1", port: int = 8000, models_dir: str | None = None,
          max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES, on_ready: Callable[[], None] | None = None) -> None:
    """Load the models, then serve; ``on_ready`` is called once they loaded (the CLI's banner), so a wrong
    models folder is reported without a banner claiming the service runs."""
    import uvicorn

    from perfpredict.predictor import Predictor

    limit = _upload_limit(max_upload_bytes)  # before the models load
    pred = Predictor.load(models_dir)
    for line in pred.unusable_sets.values():
        print(f"warning: model set not used: {line}", file=sys.stderr)
    for line in pred.unusable_calibrations:
        print(f"warning: calibration not used: {line}", file=sys.stderr)
    app = create_app(pred, max_upload_bytes=limit)
    if on_ready is not None:
        on_ready()
    uvicorn.run(app, host=host, port=port, log_level="warning")
