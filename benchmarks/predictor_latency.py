"""Benchmark: Predictor latency for a feature vector and for a ResNet-50-size ONNX file.

Targets (issue #6): p50 < 5 ms for a feature vector; < 1 s from a ResNet-50-size ONNX file. The ONNX file
is exported once (not timed) from the zoo's ResNet-50 at 224×224 (25.6 M parameters, ~98 MB); each timed
call reads it from disk, parses and checks it, shape-infers it at batch 1 and 2 (nothing executed),
computes features and predicts a card. The feature-vector path is also timed with XGBoost's own
predictor (``Predictor.load(compile_trees=False)``) for the speed-up of the numpy tree evaluator.

    python benchmarks/predictor_latency.py [--repeats 200] [--onnx-repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--repeats", type=positive_int, default=200, help="timed feature-vector calls")
    ap.add_argument("--onnx-repeats", type=positive_int, default=5, help="timed ONNX-file calls")
    args = ap.parse_args(argv)

    import torch

    from perfpredict import Predictor
    from perfpredict.estimators.arch import from_onnx_file
    from perfpredict.workload.zoo import load_zoo_workload

    t0 = time.perf_counter()
    pred = Predictor.load()
    print(f"Predictor.load(): {time.perf_counter() - t0:.2f} s ({', '.join(pred.device_types)})")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resnet50.onnx"
        wl = load_zoo_workload("resnet", {"depth": 50, "width": 64, "image_size": 224, "num_classes": 1000})
        torch.manual_seed(0)
        model = wl.build_model().eval()
        torch.onnx.export(model, wl.inputs(1), str(path), input_names=["x"], dynamic_axes={"x": {0: "batch"}},
                          opset_version=17, dynamo=False)
        print(f"ResNet-50 ONNX: {path.stat().st_size / 1e6:.1f} MB, "
              f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
        arch = from_onnx_file(path)

        def p50(fn) -> tuple[float, float]:
            fn()  # warm
            ts = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            ts.sort()
            return statistics.median(ts), ts[int(0.9 * len(ts))]

        # XGBoost's own predictor for the same saved boosters, timed in the same run for the ratio
        xgb_pred = Predictor.load(compile_trees=False)
        card_label, xgb_label = "card_for (feature vector -> full card, 1 batch size)", "card_for with XGBoost's predictor"
        rows = {}
        for label, fn in (("predict_values (feature vector, 1 batch size)", lambda: pred.predict_values(arch, [32])),
                          (card_label, lambda: pred.card_for(arch, [32])),
                          (xgb_label, lambda: xgb_pred.card_for(arch, [32]))):
            rows[label] = p50(fn)
            print(f"{label}: p50 {rows[label][0] * 1e3:.2f} ms, p90 {rows[label][1] * 1e3:.2f} ms")
        p50_vec = rows[card_label][0]
        print(f"card_for speed-up from compiled trees: x{rows[xgb_label][0] / p50_vec:.2f}")

        ts = []
        for _ in range(args.onnx_repeats):
            t = time.perf_counter()
            card = pred.predict(onnx_path=path, batch_sizes=[32])
            ts.append(time.perf_counter() - t)
        p50_onnx = statistics.median(ts)
        print(f"predict(onnx_path=ResNet-50): median {p50_onnx:.3f} s over {len(ts)} calls "
              f"(MACs/sample {card.features.forward_macs_per_sample / 1e9:.2f} G)")
    print(f"\nfeature vector -> card p50: {p50_vec * 1e3:.2f} ms (target < 5 ms): {'PASS' if p50_vec < 0.005 else 'FAIL'}")
    print(f"ResNet-50 ONNX -> card: {p50_onnx:.3f} s (target < 1 s): {'PASS' if p50_onnx < 1.0 else 'FAIL'}")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
