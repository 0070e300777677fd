"""The backbone the parameter-efficient fine-tuning files of docs/estimators.md ("Frozen parameters") share: a
GPT-style decoder (4 causal blocks, d=256, 4 heads, FFN 1024, 64 tokens of a 1000-word vocabulary) classifying
a sequence by its mean-pooled last hidden state into 10 classes, in pure torch (no peft library). Each file
freezes it (``freeze_all``) and trains its own parameters: LoRA on the query and value projections
(``LoRALinear``), the biases (BitFit), a prompt, bottleneck adapters, or the head; ``full.py`` trains every
weight. AdamW is every file's optimizer."""
import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, D, HEADS, FFN, LAYERS, SEQ, CLASSES = 1000, 256, 4, 1024, 4, 64, 10


class LoRALinear(nn.Module):
    """A frozen ``base`` Linear plus a trained low-rank update: ``base(x) + B(A(x)) * alpha / r``, A (r x in),
    B (out x r, zero at the start), as peft's LoRA layer computes it (without dropout, its default)."""

    def __init__(self, base: nn.Linear, r: int = 8, alpha: int = 16) -> None:
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.scaling = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling


class Block(nn.Module):
    """A pre-norm causal self-attention block with separate q/k/v/o projections (so LoRA can wrap q and v)."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(D, FFN), nn.Linear(FFN, D)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, HEADS, D // HEADS).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // HEADS)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Decoder(nn.Module):
    """The backbone; ``prompt`` virtual tokens (a trained (n, D) embedding) go before the input's, and each
    block's output passes through its ``adapters`` entry (a residual bottleneck MLP) when given."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(2 * SEQ, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)
        self.prompt: nn.Parameter | None = None
        self.adapters: nn.ModuleList | None = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.prompt is not None:
            x = torch.cat([self.prompt.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos[: x.shape[1]]
        for i, block in enumerate(self.blocks):
            x = block(x)
            if self.adapters is not None:
                x = x + self.adapters[i](x)
        return self.head(self.ln_f(x).mean(dim=1))


def freeze_all(model: nn.Module) -> nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, SEQ))


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, CLASSES, (batch_size,))


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-4)
