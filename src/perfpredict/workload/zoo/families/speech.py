"""DeepSpeech2-style speech recognisers (Amodei et al. 2016, "Deep Speech 2: End-to-End Speech Recognition in
English and Mandarin"), trained with CTC.

Input: a log-mel spectrogram ``[B, 1, n_mels, frames]`` (one channel, mel bands × 10 ms frames; the input
pipeline computes it from 16 kHz audio). Front-end: ``conv_layers`` (1 or 2) 2D convolutions with the paper's
kernels (as in deepspeech.pytorch): 41×11 (frequency × time) with stride 2×2, then 21×11 with stride 2×1,
each without bias, followed by BatchNorm and the clipped ReLU ``Hardtanh(0, 20)``. The time axis is halved
once, so the network emits ``ceil(frames / 2)`` output frames. The feature maps are flattened per frame to
``conv_channels × mel bands left`` features and fed to ``rnn_layers`` bidirectional GRU layers (one
``nn.GRU``, batch first, ``hidden`` units per direction; a layer after the first reads both directions,
``2 × hidden`` features). A final per-frame Linear gives ``[B, out_frames, num_classes]`` character logits,
class 0 being the CTC blank (29 = blank, apostrophe, a-z, space for English).

Targets are fixed-length label sequences ``[B, target_len]`` with labels in ``[1, num_classes - 1]``; the loss
is CTC (``F.ctc_loss`` on the log-softmax, every utterance using all of its output frames). CTC needs at least
``2 × target_len + 1`` output frames in the worst case (a blank between every pair of repeated labels), and
:meth:`SpeechFamily.validate` requires that much.

The paper's sequence-wise BatchNorm between recurrent layers and its lookahead convolution are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ZooFamily, ZooParam, generator

#: The front-end convolutions, as DeepSpeech2 (and deepspeech.pytorch) use them:
#: (kernel (freq, time), stride (freq, time), padding (freq, time)).
CONV_SPECS: tuple[tuple[tuple[int, int], tuple[int, int], tuple[int, int]], ...] = (
    ((41, 11), (2, 2), (20, 5)),
    ((21, 11), (2, 1), (10, 5)),
)
#: The clipped ReLU of DeepSpeech2: min(max(x, 0), 20).
HARDTANH_MAX = 20.0


def _out(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def conv_plan(n_mels: int, frames: int, conv_layers: int) -> list[tuple[int, int]]:
    """(mel bands, frames) after each front-end convolution."""
    f, t, out = n_mels, frames, []
    for (kf, kt), (sf, st), (pf, pt) in CONV_SPECS[:conv_layers]:
        f, t = _out(f, kf, sf, pf), _out(t, kt, st, pt)
        out.append((f, t))
    return out


def output_frames(cfg: Mapping[str, Any]) -> int:
    """Frames the network emits per utterance (the CTC input length): ``ceil(frames / 2)``."""
    return conv_plan(cfg["n_mels"], cfg["frames"], cfg["conv_layers"])[-1][1]


def rnn_input_size(cfg: Mapping[str, Any]) -> int:
    """Features per frame entering the first GRU layer: channels × mel bands left after the convolutions."""
    return cfg["conv_channels"] * conv_plan(cfg["n_mels"], cfg["frames"], cfg["conv_layers"])[-1][0]


class DeepSpeech2(nn.Module):
    def __init__(self, n_mels: int, frames: int, conv_layers: int, conv_channels: int, rnn_layers: int,
                 hidden: int, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 1
        for kernel, stride, padding in CONV_SPECS[:conv_layers]:
            layers += [nn.Conv2d(in_ch, conv_channels, kernel, stride, padding, bias=False),
                       nn.BatchNorm2d(conv_channels), nn.Hardtanh(0.0, HARDTANH_MAX, inplace=True)]
            in_ch = conv_channels
        self.conv = nn.Sequential(*layers)
        bands = conv_plan(n_mels, frames, conv_layers)[-1][0]
        self.rnn = nn.GRU(conv_channels * bands, hidden, num_layers=rnn_layers, batch_first=True,
                          bidirectional=True)
        self.fc = nn.Linear(2 * hidden, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)                                   # [B, C, F', T']
        b, c, f, t = x.shape
        x = x.permute(0, 3, 1, 2).reshape(b, t, c * f)     # [B, T', C·F']
        x, _ = self.rnn(x)                                 # [B, T', 2H]
        return self.fc(x)                                  # [B, T', num_classes]


class SpeechFamily(ZooFamily):
    """DeepSpeech2-style CTC speech recogniser: conv front-end, bidirectional GRUs, per-frame characters."""

    name = "speech"
    description = ("DeepSpeech2-style speech recogniser (Amodei et al. 2016): log-mel input, strided conv "
                   "front-end, bidirectional GRUs, CTC loss")
    task = "speech"
    params = (
        ZooParam("n_mels", 32, "log-mel bands of the input spectrogram (the paper: 161 linear bins)", minimum=1),
        ZooParam("frames", 100, "spectrogram frames per utterance at a 10 ms hop (100 = 1 s of audio)",
                 minimum=1),
        ZooParam("conv_layers", 2, "front-end 2D convolutions (41x11 stride 2x2, then 21x11 stride 2x1)",
                 choices=(1, 2)),
        ZooParam("conv_channels", 8, "channels of each front-end convolution (the paper: 32)", minimum=1),
        ZooParam("rnn_layers", 2, "stacked bidirectional GRU layers", minimum=1),
        ZooParam("hidden", 64, "GRU hidden units per direction", minimum=1),
        ZooParam("num_classes", 29, "output characters including the CTC blank (29: English letters, "
                 "apostrophe, space, blank)", minimum=2),
        ZooParam("target_len", 16, "labels per utterance's transcript (fixed length)", minimum=1),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        t_out, need = output_frames(cfg), 2 * cfg["target_len"] + 1
        if t_out < need:
            raise UsageError(f"speech emits {t_out} frames for {cfg['frames']} input frames, fewer than the "
                             f"{need} CTC needs for target_len {cfg['target_len']} (2 x target_len + 1); "
                             f"raise frames or lower target_len", step="zoo parameters")

    def grid(self) -> list[dict[str, Any]]:
        return [
            {},  # the default: 32 mels, 1 s, 8 channels, 2 x 64 GRUs
            {"conv_layers": 1, "hidden": 128},
            {"n_mels": 40, "frames": 200, "conv_channels": 16, "hidden": 128, "target_len": 30},
            {"n_mels": 40, "frames": 300, "conv_channels": 16, "rnn_layers": 3, "hidden": 256, "target_len": 50},
            {"n_mels": 64, "frames": 400, "conv_channels": 32, "rnn_layers": 3, "hidden": 256, "target_len": 60},
            {"n_mels": 80, "frames": 500, "conv_layers": 1, "conv_channels": 32, "hidden": 512,
             "target_len": 80},
            {"n_mels": 80, "frames": 600, "conv_channels": 32, "rnn_layers": 3, "hidden": 512, "target_len": 100},
            {"n_mels": 80, "frames": 600, "conv_channels": 32, "rnn_layers": 3, "hidden": 512,
             "num_classes": 6000, "target_len": 60},  # Mandarin-like output: ~6000 characters (the paper)
            {"n_mels": 128, "frames": 400, "conv_channels": 32, "rnn_layers": 4, "hidden": 768, "target_len": 60},
            {"n_mels": 80, "frames": 800, "conv_channels": 32, "rnn_layers": 5, "hidden": 512, "target_len": 120},
            {"n_mels": 40, "frames": 1500, "conv_layers": 1, "conv_channels": 32, "rnn_layers": 3, "hidden": 640,
             "target_len": 200},
            {"n_mels": 80, "frames": 1000, "conv_channels": 32, "rnn_layers": 3, "hidden": 800,
             "target_len": 150},
            {"n_mels": 80, "frames": 1000, "conv_channels": 32, "rnn_layers": 5, "hidden": 800,
             "target_len": 150},  # DeepSpeech2-sized: 10 s utterances, 5 x 800 bidirectional GRUs
            {"n_mels": 80, "frames": 600, "conv_channels": 32, "rnn_layers": 5, "hidden": 1024,
             "target_len": 100},  # deepspeech.pytorch's default width: 5 x 1024
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return DeepSpeech2(cfg["n_mels"], cfg["frames"], cfg["conv_layers"], cfg["conv_channels"],
                           cfg["rnn_layers"], cfg["hidden"], cfg["num_classes"])

    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        """A normalised log-mel spectrogram batch ``[B, 1, n_mels, frames]`` (float32)."""
        return torch.randn(batch_size, 1, cfg["n_mels"], cfg["frames"], generator=generator(0))

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        """Label sequences ``[B, target_len]`` (int64) in ``[1, num_classes - 1]``: never the blank."""
        return torch.randint(1, cfg["num_classes"], (batch_size, cfg["target_len"]), generator=generator(1))

    def loss_fn(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """CTC of logits ``[B, T, C]`` against label sequences ``[B, S]``, every utterance all T frames long."""
        log_probs = F.log_softmax(outputs, dim=-1).transpose(0, 1)  # [T, B, C], as ctc_loss takes it
        t, b = log_probs.shape[0], log_probs.shape[1]
        input_lengths = torch.full((b,), t, dtype=torch.long, device=outputs.device)
        target_lengths = torch.full((b,), targets.shape[1], dtype=torch.long, device=outputs.device)
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean")

    def input_pipeline(self, cfg: Mapping[str, Any]) -> tuple[Any, Any] | None:
        from perfpredict.workload.zoo.pipelines import speech_pipeline

        return speech_pipeline(dict(cfg))

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        plan = conv_plan(cfg["n_mels"], cfg["frames"], cfg["conv_layers"])
        t = plan[-1][1]
        return {"input spectrogram": cfg["n_mels"] * cfg["frames"],
                "first convolution's output": cfg["conv_channels"] * plan[0][0] * plan[0][1],
                "GRU output": t * 2 * cfg["hidden"], "per-frame logits": t * cfg["num_classes"]}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        return cfg["conv_layers"] + cfg["rnn_layers"]

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        plan = conv_plan(cfg["n_mels"], cfg["frames"], cfg["conv_layers"])
        c, h = cfg["conv_channels"], cfg["hidden"]
        macs, in_ch = 0, 1
        for ((kf, kt), _, _), (f, t) in zip(CONV_SPECS, plan):
            macs += c * f * t * in_ch * kf * kt
            in_ch = c
        t = plan[-1][1]
        # per step and direction: 3 gates x (input x hidden + hidden x hidden); later layers read 2H features
        recurrent = t * 2 * 3 * h * (rnn_input_size(cfg) + h)
        recurrent += (cfg["rnn_layers"] - 1) * t * 2 * 3 * h * (2 * h + h)
        return macs + recurrent + t * 2 * h * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        c, h, nc = cfg["conv_channels"], cfg["hidden"], cfg["num_classes"]
        total, in_ch = 0, 1
        for (kf, kt), _, _ in CONV_SPECS[:cfg["conv_layers"]]:
            total += c * in_ch * kf * kt + 2 * c  # conv weights (no bias) + BatchNorm's weight and bias
            in_ch = c
        # per direction: W_ih [3H, I], W_hh [3H, H], b_ih and b_hh [3H]
        gru = 2 * (3 * h * (rnn_input_size(cfg) + h) + 6 * h)
        gru += (cfg["rnn_layers"] - 1) * 2 * (3 * h * (2 * h + h) + 6 * h)
        return total + gru + 2 * h * nc + nc
