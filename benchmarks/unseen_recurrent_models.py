"""Benchmark: CPU iteration time and peak RSS of recurrent models outside the zoo, measured here against the
Predictor.

The zoo's only GRU family is `speech`, so family CV cannot score the CPU baseline's GRU/RNN step term on an
unseen recurrent family. These four model files (``benchmarks/recurrent_models/``) are not in any dataset:
a character-level GRU language model, a 2-layer GRU encoder, a bidirectional tanh-RNN tagger and a ReLU RNN.
Each is profiled on this machine (training steps and inference passes, batch 8 and 32), then predicted by the
Predictor's estimators for the CPU (``allow_fallback=False``: the estimators' own answer even where the
default Predictor would hand back its nearest profiled model, which the last column says). Prints measured
vs predicted iteration time and peak RSS increase, the CPUs other processes kept busy while each point was
timed ("busy": a loaded host times steps slower than the model sets were measured), and the MAPE of each per
mode.

    python benchmarks/unseen_recurrent_models.py [--models trained_models] [--batch-sizes 8,32]

``--models`` takes another trained-models folder, e.g. one checked out from an older commit, to compare.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ("gru_lm", "gru_small", "rnn_tagger", "rnn_relu")


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, int_list

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--models", default=None, help="trained_models folder (default: the shipped one)")
    ap.add_argument("--batch-sizes", type=int_list, default="8,32", help="comma-separated batch sizes [8,32]")
    args = ap.parse_args(argv)
    batches = args.batch_sizes
    if args.models and not Path(args.models).is_dir():
        ap.error(f"argument --models: {args.models} is not a folder")

    from perfpredict import Predictor

    pred = Predictor.load(args.models) if args.models else Predictor.load()
    compare(pred, [HERE / "recurrent_models" / f"{name}.py" for name in MODELS], batches)


def compare(pred, paths: list[Path], batches: list[int], **settings) -> None:
    """Profile each model file here in both modes, predict it with ``pred``'s CPU estimators, and print the
    table and the MAPE per mode. ``settings``: further ``perfpredict.profile`` settings (``threads``, ``timing``)."""
    from perfpredict import profile

    t0 = time.perf_counter()
    errors: dict[str, list[float]] = {"train": [], "infer": []}
    mem_errors: dict[str, list[float]] = {"train": [], "infer": []}
    width = max(11, *(len(f.stem) for f in paths))
    print(f"{'model':{width}s} {'mode':5s} {'batch':>5s} {'measured':>10s} {'predicted':>10s} {'ratio':>6s}  "
          f"{'RSS meas.':>10s} {'predicted':>10s} {'ratio':>6s}  {'busy':>4s}  default Predictor")
    for file in paths:
        name, path = file.stem, str(file)
        for mode in ("train", "infer"):
            card = profile(path, batch_sizes=batches, mode=mode, device="cpu", features=False, **settings).card
            measured = {t.batch_size: t.iter_time_s for t in card.throughput if t.iter_time_s}
            failed = {t.batch_size: t.error or t.status for t in card.throughput if not t.iter_time_s}
            busy = {t.batch_size: t.timing.other_cpus for t in card.throughput if t.timing}
            rss = {m.batch_size: m.peak_bytes for m in card.memory if m.peak_bytes}
            estimated = pred.predict(path, batch_sizes=batches, device_type="cpu", mode=mode, allow_fallback=False)
            default = pred.predict(path, batch_sizes=batches[:1], device_type="cpu", mode=mode)
            how = ("falls back to " + default.prediction.nearest.name) if default.prediction.method != "estimator" \
                else "estimator"
            for t in estimated.throughput:
                if t.batch_size not in measured:  # said, not left out: a run whose points all failed has no MAPE
                    why = failed.get(t.batch_size, "not measured")
                    print(f"{name:{width}s} {mode:5s} {t.batch_size:5d} not measured: {why[:100]}")
                    continue
                m, p = measured[t.batch_size], t.iter_time_s
                errors[mode].append(abs(p - m) / m)
                mm = rss.get(t.batch_size)
                pm = next(x.peak_memory_bytes for x in estimated.prediction.points if x.batch_size == t.batch_size)
                if mm:
                    mem_errors[mode].append(abs(pm - mm) / mm)
                mem = (f"{mm / 2**20:7.1f}MiB {pm / 2**20:7.1f}MiB {pm / mm:6.2f}" if mm
                       else f"{'-':>10s} {'-':>10s} {'':6s}")
                print(f"{name:{width}s} {mode:5s} {t.batch_size:5d} {m * 1e3:8.1f}ms {p * 1e3:8.1f}ms {p / m:6.2f}  "
                      f"{mem}  {_cpus(busy.get(t.batch_size))}  {how}")
    for mode, e in errors.items():
        me = mem_errors[mode]
        print(f"{mode}: iteration time MAPE {_mape(e)}; peak RSS MAPE {_mape(me)}")
    print(f"({time.perf_counter() - t0:.0f} s; device: {card.device.name}, {card.device.threads} threads)")



def _mape(errors: list[float]) -> str:
    """The mean of relative errors as a percentage and how many points it is over; n/a for none."""
    return f"{100 * sum(errors) / len(errors):.1f}% over {len(errors)} points" if errors else "n/a (no point measured)"


def _cpus(n: float | None) -> str:
    """The CPUs other processes kept busy while a point was timed (a loaded host times a step slower)."""
    return f"{n:4.1f}" if n is not None else f"{'-':>4s}"


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
