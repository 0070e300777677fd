"""Benchmark: how far a feature vector cut to fewer fields carries the iteration-time prediction.

A scheduler may send ``POST /predict`` only the required fields (forward MACs, parameters, parameter bytes,
activation bytes, node count), or op types without their MACs. For every architecture each shipped model set
was trained on, its committed features are cut to (a) the required fields, (b) those plus ``op_counts``, and
predicted at the batch sizes it was measured at, without the fallback; the figure is predicted ÷ measured
iteration time (median, p10, p90) and its MAPE, beside the full features'. These architectures were in the
training data, so the full-feature row is an in-sample fit: it shows what the cut loses, not the error on an
unseen family (docs/estimators.md has that).

    python benchmarks/bare_feature_vectors.py [--sets cpu_epyc_genoa_2vcpu,cuda_h100]
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings

REQUIRED = ("forward_macs_per_sample", "param_count", "param_bytes", "activation_bytes_per_sample", "num_nodes",
            "name")


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, name_list

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--sets", type=name_list, default=None,
                    help="model sets, comma-separated (default: every fp32 training set)")
    args = ap.parse_args(argv)

    import numpy as np

    from perfpredict.predictor import Predictor

    warnings.filterwarnings("ignore")
    p = Predictor.load()
    names = (args.sets if args.sets else
             [n for n, ms in sorted(p.sets.items()) if ms.mode == "train" and ms.precision == "fp32"
              and not ms.calibration_info()])
    unknown = [n for n in names if n not in p.sets]
    if unknown:
        ap.error(f"unknown model set(s) {', '.join(unknown)}; have {', '.join(sorted(p.sets))}")
    print(f"{'set':<24} {'features':<22} {'points':>6} {'median':>7} {'p10':>6} {'p90':>6} {'MAPE':>7}")
    for name in names:
        ms = p.sets[name]
        ratios: dict[str, list[float]] = {"full": [], "required only": [], "required + op_counts": []}
        for arch_name, arch in ms.profiled_archs.items():
            pts = ms.profiled[arch_name]["points"]
            bs = sorted(int(b) for b in pts if pts[b].get("iter_time_s"))
            if not bs:
                continue
            measured = np.array([pts[str(b)]["iter_time_s"] for b in bs])
            d = dataclasses.asdict(arch)
            cuts = {"full": {k: v for k, v in d.items() if v is not None},
                    "required only": {k: d[k] for k in REQUIRED},
                    "required + op_counts": {**{k: d[k] for k in REQUIRED}, "op_counts": d["op_counts"]}}
            for cut, features in cuts.items():
                v = p.predict_values(features, bs, device_type=name, allow_fallback=False)
                ratios[cut].extend(np.asarray(v["iter_time"]["median"]) / measured)
        for cut, r in ratios.items():
            a = np.array(r)
            print(f"{name:<24} {cut:<22} {a.size:>6} {np.median(a):>7.3g} {np.quantile(a, 0.1):>6.3g} "
                  f"{np.quantile(a, 0.9):>6.3g} {100 * np.mean(np.abs(a - 1)):>6.1f}%")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
