"""Bounded load test of `perfpredict serve` on loopback: 100 concurrent requests, then bad input, then health.

Starts the real command (``python -m perfpredict serve``) on a free loopback port, waits for ``/health``,
fires ``--requests`` POST /predict requests (feature vectors of the zoo's architectures) from ``--concurrency``
threads at once, counts non-200 answers and connection-level failures (refused, dropped, timed out; by kind), then sends a malformed ONNX file (expects 400), an oversized upload
(413) and a wrong-schema JSON (422), and checks the service still answers.

    python benchmarks/service_load.py [--requests 100] [--concurrency 100]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, timeout: float = 60, **kwargs) -> tuple[int | str, float]:
    """POST to ``url``: (status code, seconds), or (the failure's kind, seconds) where the connection itself failed
    (refused, dropped, timed out), so one such request counts as a failed request instead of ending the run."""
    import httpx

    t = time.perf_counter()
    try:
        outcome: int | str = httpx.post(url, timeout=timeout, **kwargs).status_code
    except httpx.TransportError as e:
        outcome = type(e).__name__
    return outcome, time.perf_counter() - t


def failures(results: list[tuple[int | str, float]]) -> Counter:
    """The failed requests of ``results`` (from `request`) by kind: "HTTP <code>" for a non-200 answer, the
    connection error's name where there was no answer."""
    return Counter(f"HTTP {code}" if isinstance(code, int) else code for code, _ in results if code != 200)


def main(argv: list[str] | None = None) -> int:
    import httpx

    from perfpredict.estimators.data import load_training_data
    from perfpredict.script_args import describe, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--requests", type=positive_int, default=100)
    ap.add_argument("--concurrency", type=positive_int, default=100, help="client threads")
    args = ap.parse_args(argv)

    data = load_training_data(REPO / "datasets" / "cuda_h100.csv")
    bodies = [{"features": {k: v for k, v in a.as_dict().items() if k not in ("family", "notes")},
               "batch_sizes": [int(b)]} for a, b in zip(data.archs, data.batch)]
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "perfpredict", "serve", "--port", str(port), "--max-upload-mb", "1",
                             "--models", str(REPO / "trained_models")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() - t0 > 60:
                print("the service did not start:", proc.stderr.read() if proc.stderr else "")
                return 1
            time.sleep(0.2)
        print(f"service up in {time.monotonic() - t0:.1f} s on {base}")

        def one(i: int) -> tuple[int | str, float]:
            return request(f"{base}/predict", json=bodies[i % len(bodies)])

        t = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as ex:
            results = list(ex.map(one, range(args.requests)))
        wall = time.perf_counter() - t
        failed = failures(results)
        errors = sum(failed.values())
        lat = sorted(d for _, d in results)
        kinds = f" ({', '.join(f'{k}: {n}' for k, n in sorted(failed.items()))})" if failed else ""
        print(f"{args.requests} requests, {args.concurrency} concurrent: {errors} errors{kinds}, {wall:.2f} s wall, "
              f"{args.requests / wall:.0f} req/s, latency p50 {statistics.median(lat) * 1e3:.0f} ms, "
              f"max {lat[-1] * 1e3:.0f} ms")

        answers = {
            "malformed ONNX -> 400": (400, request(f"{base}/predict/onnx", timeout=30, files={
                "file": ("bad.onnx", b"definitely not protobuf", "application/octet-stream")})[0]),
            "oversized upload -> 413": (413, request(f"{base}/predict/onnx", timeout=30, files={
                "file": ("big.onnx", b"\0" * 2_000_000, "application/octet-stream")})[0]),
            "wrong-schema JSON -> 422": (422, request(f"{base}/predict", timeout=30,
                                                      content=json.dumps({"features": {"param_count": "x"}}),
                                                      headers={"content-type": "application/json"})[0]),
            "still serving afterwards": (200, request(f"{base}/predict", json=bodies[0], timeout=30)[0]),
        }
        checks = {k: got == want for k, (want, got) in answers.items()}
        for k, (_, got) in answers.items():
            print(f"{k}: {'ok' if checks[k] else f'FAILED (got {got})'}")
        passed = errors == 0 and all(checks.values())
        print(f"\nload test: {'PASS' if passed else 'FAIL'}")
        return 0 if passed else 1
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
