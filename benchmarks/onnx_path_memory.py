"""Memory predictions from an ONNX file (or a feature vector without saved-tensor counts) against those from a
model.py, under leave-one-family-out cross-validation.

A model.py gives the exact saved-tensor counts (its forward pass runs); an ONNX upload to the service does not,
so the Predictor estimates them from the graph's activation bytes
(:class:`perfpredict.estimators.saved_estimate.SavedBytesEstimator`). Here both the memory model and that
estimator are fitted without the held-out family, and the family's points are predicted twice: with their
exact counts and with estimated ones. Prints the MAPE of each, per memory target and dataset.

    python benchmarks/onnx_path_memory.py            # every committed dataset (about 1 min)
    python benchmarks/onnx_path_memory.py --only cpu_epyc_2vcpu
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from perfpredict.estimators.data import load_training_data, training_datasets
from perfpredict.estimators.design import design_matrix
from perfpredict.estimators.saved_estimate import with_estimated_counts
from perfpredict.estimators.targets import targets_for
from perfpredict.script_args import describe

REPO = Path(__file__).resolve().parents[1]


def family_cv_both_ways(data, spec, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(measured, predicted with exact counts, predicted with estimated counts) over the rows with the target."""
    y_all = data.column(spec.column)
    ok = np.isfinite(y_all)
    y, exact, est = y_all[ok], np.full(ok.sum(), np.nan), np.full(ok.sum(), np.nan)
    fams, X, archs, batch = data.families[ok], data.X[ok], [a for a, k in zip(data.archs, ok) if k], data.batch[ok]
    for f in sorted(set(fams.tolist())):
        te = fams == f
        model = spec.fit_model(spec.make_model(kind), X[~te], y[~te])
        exact[te] = spec.from_model(model.predict(X[te]), X[te])
        seen = list({a.name: a for a, t in zip(archs, ~te) if t}.values())
        held = [a for a, t in zip(archs, te) if t]
        Xe = design_matrix(zip(with_estimated_counts(seen, held), batch[te]), device_kind=data.device_kind)
        est[te] = spec.from_model(model.predict(Xe), Xe)
    return y, exact, est


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--only", help="one dataset (file stem)")
    args = ap.parse_args(argv)
    import json

    paths = training_datasets(REPO / "datasets")
    if args.only and args.only not in {p.stem for p in paths}:
        ap.error(f"argument --only: no dataset {args.only!r}; choose from {', '.join(p.stem for p in paths)}")
    t0 = time.perf_counter()
    for path in paths:
        if args.only and path.stem != args.only:
            continue
        data = load_training_data(path)
        meta = json.loads((REPO / "trained_models" / path.stem / "metadata.json").read_text())
        for name, spec in targets_for(data.device_kind, data.mode).items():
            if spec.transform != "structured_memory":
                continue
            kind = meta["targets"][name]["point_kind"]
            y, exact, est = family_cv_both_ways(data, spec, kind)
            a, b = np.abs(exact / y - 1), np.abs(est / y - 1)
            worst = max(sorted(set(data.families.tolist())),
                        key=lambda f: b[data.families[np.isfinite(data.column(spec.column))] == f].mean())
            print(f"{path.stem}/{name} ({kind}): family-CV MAPE {a.mean():.1%} with exact saved-tensor counts "
                  f"(model.py), {b.mean():.1%} with estimated ones (ONNX file; median {np.median(b):.1%}, "
                  f"worst family {worst})", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
