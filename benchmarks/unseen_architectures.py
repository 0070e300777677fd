"""Benchmark: CPU iteration time and peak RSS of architectures in no zoo family, measured here against the
Predictor.

The CPU estimators were trained on the zoo's families only (convnext, dlrm, lstm, mlp, mobilenetv2, resnet,
speech, transformer, unet, vgg, vit). These six model files (``benchmarks/unseen_models/``) are in no dataset:
a GPT-style causal decoder (fused ``scaled_dot_product_attention``, tied embedding and head), an MLP-Mixer,
an EfficientNet-like CNN (depthwise convolutions, squeeze-excitation, SiLU), a DenseNet-like CNN (a
concatenation per layer), a WaveNet-like stack of dilated gated Conv1d layers and a convolutional VAE
(ConvTranspose2d decoder). Each is profiled on this machine (training steps and inference passes, batch 8 and
32), then predicted by the Predictor's estimators for the CPU (``allow_fallback=False``, as in
``unseen_recurrent_models.py``, whose table this prints: measured vs predicted iteration time and peak RSS
increase, and the MAPE of each per mode).

    python benchmarks/unseen_architectures.py [--models trained_models] [--batch-sizes 8,32] [--threads N]
                                              [--min-time 0.5] [--max-time 2]

``--threads`` defaults to torch's default (every core), as the CPU model sets were measured; ``--threads 1``
measures one thread, which the 2-vCPU sets do not predict. Their graph counts (parameters, MACs) are checked
against hand formulas by ``tests/test_unseen_architectures.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from unseen_recurrent_models import compare

HERE = Path(__file__).resolve().parent
MODELS = ("gpt_decoder", "mlp_mixer", "effnet_se", "densenet_small", "wavenet_tcn", "conv_vae")


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, int_list, positive_float, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--models", default=None, help="trained_models folder (default: the shipped one)")
    ap.add_argument("--batch-sizes", type=int_list, default="8,32", help="comma-separated batch sizes [8,32]")
    ap.add_argument("--threads", type=positive_int, default=None, help="torch threads [every core]")
    ap.add_argument("--min-time", type=positive_float, default=0.5, help="timed seconds per point, at least [0.5]")
    ap.add_argument("--max-time", type=positive_float, default=2.0, help="timed seconds per point, at most [2]")
    args = ap.parse_args(argv)
    if args.models and not Path(args.models).is_dir():
        ap.error(f"argument --models: {args.models} is not a folder")
    if args.max_time < args.min_time:
        ap.error("argument --max-time: must be at least --min-time")

    from perfpredict import Predictor
    from perfpredict.profile import TimingConfig

    pred = Predictor.load(args.models) if args.models else Predictor.load()
    compare(pred, [HERE / "unseen_models" / f"{name}.py" for name in MODELS], args.batch_sizes,
            threads=args.threads, timing=TimingConfig(min_time_s=args.min_time, max_time_s=args.max_time))


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
