"""A GPT-style causal decoder (not in the zoo): pre-norm blocks with fused causal attention
(F.scaled_dot_product_attention, is_causal=True), GELU MLP, weight-tied embedding and head. 2 layers, width 128,
4 heads, vocabulary 512, sequence 64."""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQ = 512, 128, 4, 2, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, WIDTH))
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied

    def forward(self, idx):
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos)))


def build_model() -> nn.Module:
    return GPT()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, SEQ))


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, SEQ))


def loss_fn(outputs, targets):
    return F.cross_entropy(outputs.reshape(-1, VOCAB), targets.reshape(-1))
