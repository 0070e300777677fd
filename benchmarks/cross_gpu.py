"""How far one GPU's model set is off on another GPU: each CUDA set predicts every other CUDA training dataset's
rows, scored with the estimators' metrics, beside the other GPU's own set under family CV (from its metadata).

Every GPU sweeps the same plan, so a set has seen the other dataset's families, and where its own sweep reaches
further it has seen their very architectures (the H200's 315 points are the first 315 of the H100's 765): the
cross-GPU score measures the GPU, not an unseen family. The own set's family-CV score is the other way round
(its own GPU, families it never saw). Why it matters: ``device_type="cuda"`` has to pick one set, and on a GPU model
with no set of its own the card says which GPU it predicts.

    python benchmarks/cross_gpu.py          # every ordered pair of the shipped CUDA training sets (seconds)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from perfpredict.script_args import describe

REPO = Path(__file__).resolve().parents[1]


def cross_scores(pred, set_name: str, dataset_csv: Path) -> dict[str, dict]:
    """{target: metrics of ``set_name``'s medians against the dataset's measured values} over its ok rows."""
    from perfpredict.estimators.data import load_training_data
    from perfpredict.estimators.evaluate import metrics
    from perfpredict.estimators.targets import targets_for

    d = load_training_data(dataset_csv)
    specs = {n: spec for n, spec in targets_for(d.device_kind, d.mode).items() if n in pred.sets[set_name].targets}
    answers = [pred.predict_values(a, [int(b)], device_type=set_name) for a, b in zip(d.archs, d.batch)]
    out = {}
    for name, spec in specs.items():
        y = d.column(spec.column)
        keep = np.isfinite(y) & (y > 0)
        got = np.array([ans[name]["median"][0] for ans in answers])
        out[name] = metrics(y[keep], got[keep], spec)
    return out


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=describe(__doc__),
                            epilog="Takes no options: it scores every ordered pair of shipped CUDA training sets."
                            ).parse_args(argv)
    from perfpredict import Predictor

    pred = Predictor.load(REPO / "trained_models")
    cuda = {n: s for n, s in pred.sets.items()
            if s.device_kind == "cuda" and s.mode == "train" and s.precision == "fp32"
            and (REPO / "datasets" / f"{n}.csv").is_file()}
    if len(cuda) < 2:
        print(f"needs two CUDA training sets with their datasets; found {sorted(cuda) or 'none'}")
        return 0
    for own, own_set in cuda.items():
        for other, other_set in cuda.items():
            if other == own:
                continue
            scores = cross_scores(pred, other, REPO / "datasets" / f"{own}.csv")
            print(f"{other} ({other_set.device_name}) predicting {own}.csv ({own_set.device_name}), "
                  f"{max(m['n'] for m in scores.values())} rows; beside it {own}'s own set under family CV")
            for name, m in scores.items():
                ev = own_set.meta["targets"][name]["evaluation"]
                fam = ev["family_cv"][ev["shipped_kind"]]
                line = f"  {name:16s} other GPU: MAPE {m['mape']:6.1%}"
                if "rmsle_fraction" in m:
                    line += f"  RMSLE {m['rmsle']:.3f} on percent"
                line += f"   own GPU, unseen family: MAPE {fam['mape']:6.1%}"
                if "rmsle_fraction" in fam:
                    line += f"  RMSLE {fam['rmsle']:.3f} on percent"
                print(line)
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
