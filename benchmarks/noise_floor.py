"""The same points measured twice, scored as if the second run predicted the first, with the metrics the
estimators are scored by (MAPE, median APE; utilisation's RMSLE on percent and on fractions).

Two kinds of pairs are committed under ``datasets/``:

- ``<dataset>_repeat.csv``: the same device, later, in fresh processes, with the same settings. That is the
  noise floor: no model can be expected to predict a measurement closer than the measurement repeats, so the
  family-CV scores in docs/estimators.md are read against it.
- two training datasets of one device kind, mode and precision measured on different devices (the CPU VMs,
  told apart by model name and, where recorded, ``cpu_id``): the same points on another device. That is how
  far a model trained on one device is off on the other before any model error: what carries over (memory)
  and what does not (time).

Each pair is joined on (config, batch size, mode), and the device names both files recorded are printed; a
repeat whose device differs from its dataset's is reported as a cross-device comparison, not a noise floor.

    python benchmarks/noise_floor.py            # every pair (well under a second)
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from perfpredict.estimators.evaluate import metrics
from perfpredict.estimators.targets import targets_for
from perfpredict.script_args import describe

REPO = Path(__file__).resolve().parents[1]


def _ok_rows(path: Path) -> dict[tuple[str, int, str], dict[str, str]]:
    """Successful rows by (config, batch size, mode); a point measured twice in one file keeps its last row."""
    with open(path, newline="") as f:
        return {(r["config"], int(r["batch_size"]), r["mode"]): r for r in csv.DictReader(f) if r["status"] == "ok"}


def _value(row: dict[str, str], column: str) -> float:
    try:
        v = float(row.get(column) or "nan")
    except ValueError:
        return math.nan
    return v if math.isfinite(v) and v > 0 else math.nan


def device_label(device_name: str, cpu_id: str | None, device_kind: str) -> str:
    """The device a file measured on: its rows' device name, and for a CPU the ``cpu_id`` its provenance records
    (two VMs both named "AMD EPYC" are different machines). A GPU's rows are the GPU's: the host CPU its
    provenance records can differ between lent sessions and is left out, as the training data leaves it out."""
    return f"{device_name} ({cpu_id})" if cpu_id and device_kind == "cpu" else device_name


def _cpu_id(dataset_csv: Path) -> str | None:
    from perfpredict.dataset.collect import check_provenance, dataset_cpu_id

    return dataset_cpu_id(check_provenance(dataset_csv))


def paired_scores(first_csv: Path, again_csv: Path) -> dict:
    """Points in both files, the device names each recorded, and {target: metrics of the second file's values
    against the first's}, plus the median ratio second / first per target."""
    first, again = _ok_rows(first_csv), _ok_rows(again_csv)
    both = sorted(set(first) & set(again))
    cpu_first, cpu_again = _cpu_id(first_csv), _cpu_id(again_csv)  # one provenance read per file
    out: dict = {"points": len(both), "targets": {}, "median_ratio": {},
                 "devices": (sorted({device_label(first[k]["device_name"], cpu_first, first[k]["device_kind"])
                                     for k in both}),
                             sorted({device_label(again[k]["device_name"], cpu_again, again[k]["device_kind"])
                                     for k in both}))}
    if not both:
        return out
    r0 = first[both[0]]
    for name, spec in targets_for(r0["device_kind"], r0["mode"]).items():
        pairs = np.array([(_value(first[k], spec.column), _value(again[k], spec.column)) for k in both])
        pairs = pairs[np.isfinite(pairs).all(axis=1)]
        if len(pairs):
            out["targets"][name] = metrics(pairs[:, 0], pairs[:, 1], spec)
            out["median_ratio"][name] = float(np.median(pairs[:, 1] / pairs[:, 0]))
    return out


def committed_pairs(datasets: Path) -> list[tuple[Path, Path]]:
    """(dataset, its repeat) for every repeat under ``datasets``, then (first, other) for the training datasets
    of one device kind and mode that were measured on different devices."""
    from perfpredict.dataset.collect import check_provenance, dataset_cpu_id, dataset_precision
    from perfpredict.estimators.data import training_datasets

    pairs = [(p.with_name(p.name.replace("_repeat.csv", ".csv")), p) for p in sorted(datasets.glob("*_repeat.csv"))]
    groups: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    for p in training_datasets(datasets):
        rows = _ok_rows(p)
        if rows:
            r = next(iter(rows.values()))
            meta = check_provenance(p)  # the rows name neither the precision nor the CPU id; the provenance does
            groups.setdefault((r["device_kind"], r["mode"], dataset_precision(meta)), []).append(
                (device_label(r["device_name"], dataset_cpu_id(meta), r["device_kind"]), p))
    for members in groups.values():
        first_device, first = members[0]
        pairs += [(first, p) for device, p in members[1:] if device != first_device]
    return pairs


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=describe(__doc__),
                            epilog="Takes no options: it scores every pair committed under datasets/.").parse_args(argv)
    for base, other in committed_pairs(REPO / "datasets"):
        if not base.exists():
            print(f"{other.name}: no {base.name} to pair with")
            continue
        s = paired_scores(base, other)
        same = s["devices"][0] == s["devices"][1]
        kind = "noise floor: the same device twice" if same else "two devices, not a noise floor"
        print(f"{base.name} vs {other.name}: {s['points']} points ({kind}; "
              f"{' / '.join(s['devices'][0])} then {' / '.join(s['devices'][1])})")
        for name, m in s["targets"].items():
            line = (f"  {name:16s} MAPE {m['mape']:6.1%}  median {m['median_ape']:6.1%}  "
                    f"median ratio {s['median_ratio'][name]:.2f}")
            if "rmsle_fraction" in m:  # Horus reports RMSLE for utilisation only
                line += f"  RMSLE {m['rmsle']:.3f} on percent, {m['rmsle_fraction']:.3f} on fractions"
            print(line + f"  [{m['n']} points]")
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
