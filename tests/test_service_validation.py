"""The HTTP service refuses bad input with a 4xx that names the problem (never a 500, never a card of NaNs),
and keeps answering valid requests afterwards. One client (the shipped models) for the whole module."""

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

REPO = Path(__file__).resolve().parents[1]
F = {"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5, "activation_bytes_per_sample": 1e4,
     "num_nodes": 5}


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.service import create_app

    return TestClient(create_app(Predictor.load(REPO / "trained_models"), max_upload_bytes=200_000),
                      raise_server_exceptions=False)


@pytest.fixture(scope="module")
def onnx_bytes() -> bytes:
    """A small MLP (MatMul, Add, Relu) with a symbolic batch, built with onnx.helper (no export, nothing run)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _post(client, features=None, raw: str | None = None, **body):
    if raw is not None:  # NaN / Infinity: what json.dumps writes and the service's parser reads
        return client.post("/predict", content=raw, headers={"content-type": "application/json"})
    return client.post("/predict", json={"features": F | (features or {}), **body})


def _assert_refused(r, *words, status=422):
    assert r.status_code == status, r.text
    text = r.text
    for w in words:
        assert w in text, f"{w!r} not in {text}"


def _assert_still_serving(client):
    r = _post(client, batch_sizes=[8, 32])
    assert r.status_code == 200, r.text
    points = r.json()["prediction"]["points"]
    assert [p["batch_size"] for p in points] == [8, 32]
    assert all(p["iter_time_s"] > 0 and p["samples_per_s"] > 0 for p in points)


def test_valid_request_is_answered(client):
    _assert_still_serving(client)


def test_the_base_url_lists_the_endpoints_and_the_docs(client):
    r = client.get("/")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["docs"] == "/docs" and client.get(body["docs"]).status_code == 200
    assert {"GET /health", "GET /models", "POST /predict", "POST /predict/onnx", "POST /colocation",
            "POST /max-batch"} <= set(body["endpoints"])
    assert "GET /" not in body["endpoints"]  # the index itself is not an endpoint of the API


@pytest.mark.parametrize("field,value", [("forward_macs_per_sample", float("nan")),
                                         ("param_bytes", float("inf")),
                                         ("activation_bytes_per_sample", float("-inf")),
                                         ("num_nodes", float("nan"))])
def test_non_finite_feature_is_422(client, field, value):
    r = _post(client, raw=json.dumps({"features": F | {field: value}}))
    _assert_refused(r, field, "finite number")
    _assert_still_serving(client)


@pytest.mark.parametrize("features,field", [
    ({"op_counts": {"Gemm": -5}}, "op_counts"),
    ({"macs_by_op": {"Gemm": -1e6}}, "macs_by_op"),
    ({"activation_bytes_by_op": {"Relu": -1}}, "activation_bytes_by_op"),
    ({"peak_live_bytes_fixed": -1}, "peak_live_bytes_fixed"),
    ({"graph_saved_bytes_fixed": -1}, "graph_saved_bytes_fixed"),
    ({"saved_bytes_fixed": -1}, "saved_bytes_fixed"),
    ({"param_count": -1}, "param_count"),
])
def test_negative_count_or_bytes_is_422(client, features, field):
    _assert_refused(_post(client, features), field, "greater than or equal to 0")
    _assert_still_serving(client)


def test_non_finite_dict_value_is_422(client):
    r = _post(client, raw=json.dumps({"features": F | {"macs_by_op": {"Gemm": float("nan")}}}))
    _assert_refused(r, "macs_by_op", "finite number")
    _assert_still_serving(client)


def test_absurdly_large_feature_is_422(client):
    _assert_refused(_post(client, {"param_bytes": 1e300}), "param_bytes", "less than or equal to")
    _assert_still_serving(client)


@pytest.mark.parametrize("sizes,words", [([0], ("batch_sizes", "greater than or equal to 1")),
                                         ([-4], ("batch_sizes", "greater than or equal to 1")),
                                         ([10**30], ("batch_sizes", "less than or equal to 1000000")),
                                         ([], ("batch_sizes", "at least 1")),
                                         (list(range(1, 66)), ("batch_sizes", "at most 64"))])
def test_bad_batch_sizes_json_route_is_422(client, sizes, words):
    _assert_refused(_post(client, batch_sizes=sizes), *words)
    _assert_still_serving(client)


@pytest.mark.parametrize("text,words", [(",", ("batch_sizes", "at least 1")),
                                        ("0", ("batch_sizes[0]", "greater than or equal to 1")),
                                        ("8,-8", ("batch_sizes[1]", "greater than or equal to 1")),
                                        ("10000000", ("batch_sizes[0]", "less than or equal to 1000000")),
                                        (",".join(["8"] * 199), ("batch_sizes", "at most 64")),
                                        ("8,abc", ("batch_sizes", "comma-separated integers"))])
def test_bad_batch_sizes_upload_route_is_422(client, onnx_bytes, text, words):
    r = client.post("/predict/onnx", files={"file": ("m.onnx", onnx_bytes, "application/octet-stream")},
                    data={"batch_sizes": text})
    _assert_refused(r, *words)
    assert isinstance(r.json()["detail"], str)
    _assert_still_serving(client)


def test_upload_route_takes_the_same_batch_sizes_as_the_json_route(client, onnx_bytes):
    files = {"file": ("m.onnx", onnx_bytes, "application/octet-stream")}
    r = client.post("/predict/onnx", files=files, data={"batch_sizes": " 1, 1000000 ," + ",".join(["8"] * 62)})
    assert r.status_code == 200, r.text
    # 64 entries are accepted; the card has one point per distinct batch size, in order
    assert [p["batch_size"] for p in r.json()["prediction"]["points"]] == [1, 8, 1_000_000]
    r = client.post("/predict", json={"features": F, "batch_sizes": [1, 1_000_000] + [8] * 62})
    assert r.status_code == 200, r.text
    assert [p["batch_size"] for p in r.json()["prediction"]["points"]] == [1, 8, 1_000_000]


def test_oversized_upload_is_413(client):
    r = client.post("/predict/onnx", files={"file": ("big.onnx", b"\0" * 300_000, "application/octet-stream")})
    _assert_refused(r, "larger than 200000 bytes", status=413)
    _assert_still_serving(client)


@pytest.mark.parametrize("limit", [-5e6, 0, 0.5, float("nan"), float("inf"), "big", True])
def test_create_app_refuses_a_non_positive_upload_limit(limit):
    from perfpredict.errors import UsageError
    from perfpredict.service import create_app

    # raised before any model is loaded (no predictor given: it would load the default models otherwise)
    with pytest.raises(ValueError, match="max_upload_bytes") as info:
        create_app(object(), max_upload_bytes=limit)
    assert isinstance(info.value, UsageError)


def test_parse_batch_sizes_helper():
    from perfpredict.service import parse_batch_sizes

    assert parse_batch_sizes("8, 32,,64") == [8, 32, 64]
    with pytest.raises(ValueError, match=r"batch_sizes\[0\]"):
        parse_batch_sizes("0")


@pytest.mark.parametrize("bad,field", [({"forward_macs_per_sample": float("nan")}, "forward_macs_per_sample"),
                                       ({"param_bytes": -5}, "param_bytes"),
                                       ({"op_counts": {"Gemm": -1}}, "op_counts.Gemm"),
                                       ({"param_bytes": "abc"}, "param_bytes")])
def test_python_api_refuses_the_same_feature_vectors_by_name(bad, field):
    """Predictor.predict(features=...) checks a mapping against the service's schema: one UsageError naming the
    field, not a math error from inside the estimators."""
    from perfpredict import Predictor
    from perfpredict.errors import UsageError

    pred = Predictor.load(REPO / "trained_models")
    with pytest.raises(UsageError, match=field):
        pred.predict(features=F | bad, batch_sizes=[32])
    with pytest.raises(UsageError, match="Field required"):
        pred.predict_values({"param_count": 1}, [32])
    assert pred.predict(features=F | {"family": "mine"}, batch_sizes=[32]).prediction.points[0].iter_time_s > 0


def test_an_unknown_feature_key_is_named_with_the_field_it_probably_meant(client):
    """A misspelt optional key used to vanish silently (the prediction then left that feature out)."""
    r = _post(client, {"peak_live_byte_per_sample": 5e3, "colour": "blue", "notes": 7})
    assert r.status_code == 200, r.text
    notes = r.json()["prediction"]["notes"]
    named = [n for n in notes if n.startswith("unknown feature key(s) ignored")]
    assert named == ["unknown feature key(s) ignored: 'colour', 'peak_live_byte_per_sample' (did you mean "
                     "'peak_live_bytes_per_sample'?)"], notes
    # keys a card's features section carries (fvcore counts, the source) are not news
    quiet = _post(client, {"fvcore_macs_per_sample": 1e6, "source": "analytic", "family": "mlp"})
    assert quiet.status_code == 200 and not any("unknown" in n for n in quiet.json()["prediction"]["notes"])


def test_an_unknown_key_is_echoed_bounded(client):
    r = _post(client, {"k" * 100_000: 1})
    assert r.status_code == 200
    note = next(n for n in r.json()["prediction"]["notes"] if n.startswith("unknown feature key"))
    assert len(note) < 200 and note.endswith("...")


def test_an_upload_whose_weights_point_at_files_is_answered_without_looking_at_the_disk(client, onnx_bytes, tmp_path,
                                                                                         monkeypatch):
    """ONNX's checker resolves external-data locations against the working directory: the service's answer used
    to differ by whether a file of that name existed there (found by fuzzing). Such weights are read as shapes
    (tests/test_onnx_input_findings.py), the file never looked for."""
    import onnx
    from onnx.external_data_helper import set_external_data

    m = onnx.load_from_string(onnx_bytes)
    w = m.graph.initializer[0]
    set_external_data(w, location="w.bin")
    w.ClearField("raw_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    data = m.SerializeToString()
    monkeypatch.chdir(tmp_path)
    answers = []
    for exists in (False, True):
        if exists:
            (tmp_path / "w.bin").write_bytes(b"\0" * 512)
        r = client.post("/predict/onnx", files={"file": ("m.onnx", data, "application/octet-stream")},
                        data={"batch_sizes": "8"})
        answers.append((r.status_code, r.json()))
    assert answers[0] == answers[1] and answers[0][0] == 200
    assert answers[0][1]["features"]["param_bytes"] == 4 * (16 * 8 + 8)
    _assert_still_serving(client)


def test_precision_picks_the_set_trained_at_it_on_both_routes(client, onnx_bytes):
    r = _post(client, batch_sizes=[16], device_type="cpu", precision="bf16")
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["run"]["precision"] == "bf16" and card["prediction"]["model_set"] in ("cpu_xeon_2vcpu_bf16",
                                                                                    "cpu_epyc_genoa_2vcpu_bf16")
    files = {"file": ("m.onnx", onnx_bytes, "application/octet-stream")}
    r = client.post("/predict/onnx", files=files, data={"batch_sizes": "16", "device_type": "cpu", "precision": "bf16"})
    assert r.status_code == 200, r.text
    assert r.json()["run"]["precision"] == "bf16"
    _assert_refused(_post(client, batch_sizes=[16], precision="int8"), "precision")
    r = _post(client, batch_sizes=[16], device_type="cpu", precision=" BF16 ")  # as the CLI and the API take it
    assert r.status_code == 200 and r.json()["run"]["precision"] == "bf16", r.text
    r = client.post("/predict/onnx", files=files, data={"batch_sizes": "16", "device_type": "cpu", "precision": "BF16"})
    assert r.status_code == 200 and r.json()["run"]["precision"] == "bf16", r.text
    _assert_refused(_post(client, batch_sizes=[16], device_type="cuda", precision="bf16"), "at bf16")
    models = client.get("/models").json()
    assert models["cpu_xeon_2vcpu_bf16"]["precision"] == "bf16" and models["cuda_h100"]["precision"] == "fp32"
    # two machines with one CPU name are told apart by the cpu_id their datasets recorded (None: from before it)
    assert models["cpu_epyc_genoa_2vcpu"]["cpu_id"].startswith("AuthenticAMD family 25 model 17")
    assert models["cpu_epyc_2vcpu"]["device_name"] == models["cpu_epyc_genoa_2vcpu"]["device_name"]
    assert models["cpu_epyc_2vcpu"]["cpu_id"] is None
    _assert_still_serving(client)


def test_a_key_a_route_does_not_know_is_refused_by_name_not_ignored(client):
    """``batch_size`` for ``batch_sizes`` used to be answered for the default batch, 32, without a word."""
    r = _post(client, batch_size=64)
    _assert_refused(r, "batch_size", "Extra inputs are not permitted")
    r = client.post("/max-batch", json={"features": F, "memory_limit_bytes": 2**30, "device_type": "cpu",
                                        "quantile_": "median"})
    _assert_refused(r, "quantile_")
    r = client.post("/colocation", json={"jobs": [{"features": F, "batch": 8}, {"features": F}]})
    _assert_refused(r, "batch")
    _assert_still_serving(client)


def test_batch_sizes_are_integers_on_the_json_route_as_in_the_python_api(client):
    _assert_refused(_post(client, batch_sizes=["64", True]), "batch_sizes", "valid integer")
    _assert_refused(_post(client, batch_sizes=[8.0]), "batch_sizes", "valid integer")


def test_mode_is_taken_in_any_case_like_precision(client, onnx_bytes):
    r = _post(client, batch_sizes=[16], device_type="cpu", mode=" INFER ")
    assert r.status_code == 200, r.text
    assert r.json()["run"]["mode"] == "infer"
    files = {"file": ("m.onnx", onnx_bytes, "application/octet-stream")}
    r = client.post("/predict/onnx", files=files, data={"batch_sizes": "16", "device_type": "cpu", "mode": "Infer"})
    assert r.status_code == 200 and r.json()["run"]["mode"] == "infer", r.text


def test_upload_route_refuses_digits_python_reads_but_nobody_types(client, onnx_bytes):
    files = {"file": ("m.onnx", onnx_bytes, "application/octet-stream")}
    for text in ("８", "1_0"):
        _assert_refused(client.post("/predict/onnx", files=files, data={"batch_sizes": text}),
                        "comma-separated integers")


def test_upload_route_takes_allow_fallback_as_the_json_route_does(client, onnx_bytes):
    """The tiny MLP is out of distribution for the CPU sets: by default the nearest profiled model answers; with
    allow_fallback false the estimators do, on both routes alike (the field was ignored on the upload route)."""
    files = {"file": ("m.onnx", onnx_bytes, "application/octet-stream")}
    methods = {}
    for allow in (True, False):
        r = client.post("/predict/onnx", files=files, data={"batch_sizes": "16", "device_type": "cpu_xeon_2vcpu",
                                                            "allow_fallback": str(allow).lower()})
        assert r.status_code == 200, r.text
        methods[allow] = r.json()["prediction"]["method"]
    assert methods == {True: "nearest_profiled", False: "estimator"}


def test_a_declared_oversized_body_is_refused_before_it_is_received():
    """The 413 comes from the Content-Length header: the app never asks for the body (it used to read and buffer
    all of it first, 745 MB resident for a 600 MB upload)."""
    import asyncio

    from perfpredict import Predictor
    from perfpredict.service import create_app

    app = create_app(Predictor.load(REPO / "trained_models"), max_upload_bytes=1000)
    sent: list[dict] = []

    async def receive():
        raise AssertionError("the body was read")

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/predict/onnx", "raw_path": b"/predict/onnx", "query_string": b"",
             "root_path": "", "headers": [(b"content-length", str(10**9).encode()),
                                          (b"content-type", b"multipart/form-data; boundary=x")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 413 and b"larger than 1000 bytes" in body


def test_a_validation_error_does_not_echo_a_long_input(client):
    r = _post(client, {"param_bytes": "9" * 5000 + "x"})
    _assert_refused(r, "param_bytes")
    assert len(r.text) < 1000 and "9999999999" not in r.text
    r = _post(client, {"param_bytes": "abc"})  # a short one is still echoed
    _assert_refused(r, '"input":"abc"')


def test_the_upload_route_is_run_off_the_event_loop_and_the_schema_documents_its_errors_and_answers(client):
    """The ONNX route parses and shape-infers for seconds on a large graph: as a coroutine it held every other
    request (a /health took 8.9 s behind three uploads)."""
    import inspect

    from fastapi.routing import APIRoute

    route = next(r for r in client.app.routes if isinstance(r, APIRoute) and r.path == "/predict/onnx")
    assert not inspect.iscoroutinefunction(route.endpoint)
    spec = client.get("/openapi.json").json()
    onnx_route = spec["paths"]["/predict/onnx"]["post"]
    assert {"200", "400", "413", "422"} <= set(onnx_route["responses"])
    schema_of = {p: spec["paths"][p]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
                 for p in ("/predict", "/predict/onnx", "/colocation", "/max-batch")}
    assert schema_of["/predict"]["$ref"].endswith("/PerformanceCard")
    assert schema_of["/colocation"]["$ref"].endswith("/PairPrediction")
    assert schema_of["/max-batch"]["$ref"].endswith("/BatchLimit")
    form = spec["components"]["schemas"][onnx_route["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
                                         .rsplit("/", 1)[-1]]
    assert "comma-separated" in form["properties"]["batch_sizes"]["description"]
    assert "allow_fallback" in form["properties"]


def test_an_upload_with_a_constant_stored_in_a_file_is_refused_too(client, tmp_path, monkeypatch):
    """External data in a node's attribute (a Constant) was not looked for: the answer then said whether a file
    of that name existed in the server's working directory."""
    from onnx import TensorProto, helper

    def model(location: str) -> bytes:
        t = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
        for k, v in (("location", location), ("offset", "0"), ("length", "16")):
            e = t.external_data.add()
            e.key, e.value = k, v
        nodes = [helper.make_node("Constant", [], ["c"], value=t), helper.make_node("Add", ["x", "c"], ["y"])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.bin").write_bytes(b"\0" * 64)
    answers = {client.post("/predict/onnx", files={"file": ("m.onnx", model(loc), "application/octet-stream")}).text
               for loc in ("here.bin", "absent.bin")}
    assert len(answers) == 1 and "in an external file" in answers.pop()


def test_an_onnx_file_with_its_weights_beside_it_is_read_from_any_working_directory(tmp_path, monkeypatch,
                                                                                      onnx_bytes):
    """Exporters write weights over 2 GB beside the model (external data); the checker looked them up in the
    working directory, so the CLI and the Python API read such a file only when run from its folder."""
    import onnx

    from perfpredict.estimators.arch import from_onnx_file

    m = onnx.load_from_string(onnx_bytes)
    folder = tmp_path / "export"
    folder.mkdir()
    onnx.save_model(m, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    assert (folder / "m.data").is_file()
    monkeypatch.chdir(tmp_path)
    inline = from_onnx_file(_write(tmp_path / "inline.onnx", onnx_bytes))
    external = from_onnx_file(folder / "m.onnx")
    assert external.param_count == inline.param_count == 16 * 8 + 8


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_chunked_body_over_the_limit_is_refused_while_it_arrives():
    """A body sent without a Content-Length (chunked) was buffered whole on the JSON routes: 800 MB resident
    for an 800 MB request. It is counted as it arrives, on every route, and refused with a 413."""
    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.service import create_app

    client = TestClient(create_app(Predictor.load(REPO / "trained_models"), max_upload_bytes=1000))

    def chunks():
        for _ in range(200):
            yield b"x" * 4096

    for route, kind in (("/predict", "application/json"), ("/max-batch", "application/json"),
                        ("/predict/onnx", "multipart/form-data; boundary=x")):
        r = client.post(route, content=chunks(), headers={"content-type": kind})
        assert r.status_code == 413 and "larger than 1000 bytes" in r.json()["detail"], (route, r.text)
    small = client.post("/predict", json={"features": {}, "batch_sizes": [8]})  # a small body still gets through
    assert small.status_code == 422, small.text


def test_an_error_quoting_a_long_input_is_bounded(client):
    """A 100 kB device_type came back whole in the 422's detail."""
    r = _post(client, device_type="y" * 100_000)
    _assert_refused(r, "no trained models for device type", "more characters")
    assert len(r.text) < 3000
