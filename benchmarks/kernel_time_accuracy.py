"""How well the sum of measured kernel costs predicts the CPU datasets' iteration times, before any fitting.

For every row of each CPU dataset, the kernel estimate (:func:`perfpredict.estimators.kernel_time.
kernel_seconds`: the graph's kernels priced by the microbenchmark table, in the dataset's mode) is set against
the measured iteration time. Printed per dataset: the log-log correlation, the one scale factor (median of
measured / estimate) and the MAPE after it, and the per-family median ratio, whose spread is what a single
rate for every MAC gets wrong. The same for a one-rate roofline fitted to the dataset itself (seconds = a +
b · MACs + c · bytes, NNLS) beside it, in family CV (so the roofline never sees the family it predicts; the
kernel estimate never saw any).

    python benchmarks/kernel_time_accuracy.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from perfpredict.script_args import describe

    ap = argparse.ArgumentParser(description=describe(__doc__),
                                 epilog="It reads every CPU dataset under datasets/ (those whose name starts with "
                                        "--only, if given).")
    ap.add_argument("--table", type=Path, help="a kernel-cost table to price the kernels with instead of the "
                    "package's (e.g. one measured on another CPU by profilers/collect_kernel_costs.py --out)")
    ap.add_argument("--only", default="cpu_", help="dataset name prefix (default: cpu_, every CPU set)")
    args = ap.parse_args(argv)
    if not args.only.startswith("cpu_"):
        ap.error("argument --only: the kernel table prices CPU sets only; give a prefix starting with cpu_")
    if args.table is not None and not args.table.is_file():
        ap.error(f"argument --table: no file at {args.table}")
    from perfpredict.estimators.data import load_training_data, training_datasets
    from perfpredict.estimators.kernel_time import TABLE_PATH, kernel_seconds, provenance
    from perfpredict.estimators.models import (
        INFER_TIME_TERMS,
        STEP_TERMS,
        TIME_TERMS,
        baseline_components,
        fit_baseline,
    )

    table = args.table or TABLE_PATH
    try:
        prov = provenance(table)
        kernel_seconds([], 1, "train", table)
    except (OSError, ValueError, KeyError, TypeError) as e:
        ap.error(f"argument --table: {table} is not a kernel-cost table ({type(e).__name__}: {str(e)[:120]})")
    print(f"kernel cost table: {table.name}, {prov.get('cpu_model')} ({prov.get('cpu_id', 'cpu id not recorded')}), "
          f"torch {prov.get('torch_version')}, measured {prov.get('measured_at')}")
    for path in training_datasets(ROOT / "datasets"):
        name = path.stem
        if not name.startswith(args.only):
            continue
        d = load_training_data(path)
        y = d.column("iter_time_s")
        ok = np.isfinite(y) & (y > 0) & np.array([bool(a.kernel_nodes) for a in d.archs])
        est = np.array([kernel_seconds(a.kernel_nodes, int(b), d.mode, table) if a.kernel_nodes else np.nan
                        for a, b in zip(d.archs, d.batch)])
        y, est, fam = y[ok], est[ok], d.families[ok]
        scale = float(np.median(y / est))
        mape = float(np.mean(np.abs(scale * est - y) / y))
        corr = float(np.corrcoef(np.log(est), np.log(y))[0, 1])
        # the one-rate roofline the CPU used before (with its GRU/RNN step term), family CV
        terms = (INFER_TIME_TERMS if d.mode == "infer" else TIME_TERMS) + (STEP_TERMS["cpu"],)
        C = baseline_components(d.X[ok], terms)
        roof = np.full(len(y), np.nan)
        for f in sorted(set(fam)):
            tr = fam != f
            coef = fit_baseline(C[tr], y[tr])
            roof[~tr] = np.maximum(C[~tr] @ coef, 1e-6)
        roof_mape = float(np.mean(np.abs(roof - y) / y))
        roof_corr = float(np.corrcoef(np.log(roof), np.log(y))[0, 1])
        print(f"\n{name} ({d.device_name}, {d.mode}, {len(y)} rows)")
        print(f"  kernel estimate: log-log corr {corr:.3f}; measured = {scale:.2f} x estimate (median) -> "
              f"MAPE {mape:.1%}")
        print(f"  one-rate roofline, family CV: log-log corr {roof_corr:.3f}, MAPE {roof_mape:.1%}")
        ks = {f: float(np.median(y[fam == f] / est[fam == f])) / scale for f in sorted(set(fam))}
        rs = {f: float(np.median(y[fam == f] / roof[fam == f])) for f in sorted(set(fam))}
        print("  per family, measured / predicted (median; kernel estimate after the scale | roofline):")
        print("   " + ", ".join(f"{f} {ks[f]:.2f}|{rs[f]:.2f}" for f in ks))
        spread = lambda r: float(np.std(np.log(list(r.values()))))  # noqa: E731
        print(f"  spread of the family ratios (sd of log): kernel {spread(ks):.2f}, roofline {spread(rs):.2f}")
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
