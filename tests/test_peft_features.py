"""Parameter-efficient fine-tuning of benchmarks/peft_models/ (a GPT-style decoder, 4 blocks, d=256, FFN 1024,
64 tokens, 10 classes; AdamW): the features a model file's prediction reads, counted by hand for LoRA (r=8 on the
query and value projections) and BitFit (biases only), and the frozen step-work ratio against autograd's own
count of the products a step runs (torch's FLOP counter over forward and backward). docs/estimators.md,
"Frozen parameters", gives the measured step times and memory these files predict."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perfpredict.estimators.arch import from_workload

MODELS = Path(__file__).resolve().parents[1] / "benchmarks" / "peft_models"
T, D, FF, HEADS, LAYERS, VOCAB, CLASSES, R = 64, 256, 1024, 4, 4, 1000, 10, 8
FP32 = 4

#: per sample and block: the six projections' MACs (q, k, v, o: T d^2 each; fc1, fc2: T d FF each), and the
#: attention's two products (QK^T and AV: heads x T^2 x d/heads each)
PROJ, FFN_MACS, QK = T * D * D, T * D * FF, HEADS * T * T * (D // HEADS)
BLOCK_MACS = 4 * PROJ + 2 * FFN_MACS + 2 * QK
HEAD_MACS = D * CLASSES  # after mean-pooling: once per sample
LORA_MACS = T * R * D  # each of A (r x d) and B (d x r), per wrapped projection
#: every weight of the backbone: per block 2 LayerNorms, q/k/v/o and fc1/fc2 with their biases
BLOCK_PARAMS = 2 * 2 * D + 4 * (D * D + D) + (D * FF + FF) + (FF * D + D)
BACKBONE_BYTES = FP32 * (VOCAB * D + 2 * T * D + LAYERS * BLOCK_PARAMS + 2 * D + D * CLASSES + CLASSES)


def _load(name: str):
    sys.path.insert(0, str(MODELS))
    try:
        spec = importlib.util.spec_from_file_location(f"peft_{name}", MODELS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(MODELS))


def _autograd_step_ratio(name: str) -> float:
    """The products' FLOPs of one step (forward + backward, batch 2) of the file's model over the same with
    every parameter trained, as torch's FLOP counter sees autograd run them."""
    module = _load(name)
    torch.manual_seed(0)
    model = module.build_model()

    def flops() -> int:
        with FlopCounterMode(display=False) as counter:
            module.loss_fn(model(module.example_inputs(2)), module.example_targets(2)).backward()
        model.zero_grad(set_to_none=True)
        return counter.get_total_flops()

    peft = flops()
    model.requires_grad_(True)
    return peft / flops()


@pytest.fixture(scope="module")
def archs():
    return {name: from_workload(str(MODELS / f"{name}.py")) for name in ("full", "lora", "bitfit")}


def test_the_full_baseline_is_counted_as_the_backbone(archs) -> None:
    full = archs["full"]
    assert full.param_bytes == BACKBONE_BYTES
    assert full.frozen_param_bytes == 0
    assert full.forward_macs_per_sample == LAYERS * BLOCK_MACS + HEAD_MACS
    assert full.frozen_step_work_ratio is None


def test_lora_trains_its_low_rank_matrices_alone(archs) -> None:
    lora, trained = archs["lora"], LAYERS * 2 * 2 * R * D * FP32  # A and B of q and v in every block
    assert lora.param_bytes == BACKBONE_BYTES + trained
    assert lora.frozen_param_bytes == BACKBONE_BYTES  # the base Linears: no gradient nor optimizer state
    assert lora.optimizer_state_copies == 2  # AdamW: exp_avg and exp_avg_sq of the trained bytes alone
    # AdamW's step on the CPU, one tensor at a time: sqrt and its quotient of the largest (all are 8 KiB) and
    # the previous tensor's denom; its foreach step (CUDA) one sqrt of every trained tensor
    assert lora.optimizer_step_bytes == {"cpu": 3 * R * D * FP32, "cuda": trained}
    assert lora.forward_macs_per_sample == LAYERS * (BLOCK_MACS + 2 * 2 * LORA_MACS) + HEAD_MACS


def test_lora_step_work_counts_the_gradients_autograd_computes(archs) -> None:
    """The first block's input needs no gradient (nothing trained lies upstream): its frozen q/k/v cost their
    forward alone, A its weight's gradient, B its weight's and input's (A's weight gradient needs it), QK^T the
    query's side, AV both, o, fc1 and fc2 their inputs'. Past it every operand but a frozen weight needs one."""
    first = (3 * PROJ + 2 * PROJ + 2 * 2 * FFN_MACS  # q, k, v bases; o; fc1 and fc2
             + 2 * (2 * LORA_MACS + 3 * LORA_MACS) + 2 * QK + 3 * QK)
    later = 2 * (4 * PROJ + 2 * FFN_MACS) + 2 * 3 * 2 * LORA_MACS + 3 * 2 * QK
    full = 3 * (LAYERS * (BLOCK_MACS + 2 * 2 * LORA_MACS) + HEAD_MACS)
    by_hand = (first + (LAYERS - 1) * later + 2 * HEAD_MACS) / full  # the frozen head: its input's gradient
    assert archs["lora"].frozen_step_work_ratio == pytest.approx(by_hand, rel=1e-9)
    assert archs["lora"].frozen_step_work_ratio == pytest.approx(_autograd_step_ratio("lora"), rel=1e-6)


def test_bitfit_trains_the_biases_alone(archs) -> None:
    bitfit = archs["bitfit"]
    # per block q/k/v/o, fc1, fc2 and both LayerNorms' biases; the final LayerNorm's and the head's
    trained = FP32 * (LAYERS * (4 * D + FF + D + 2 * D) + D + CLASSES)
    assert bitfit.param_bytes == BACKBONE_BYTES
    assert bitfit.frozen_param_bytes == BACKBONE_BYTES - trained
    assert bitfit.optimizer_state_copies == 2
    # the CPU step's largest tensor is fc1's bias (FF floats), the one before it o's (D floats)
    assert bitfit.optimizer_step_bytes == {"cpu": FP32 * (2 * FF + D), "cuda": trained}
    assert bitfit.forward_macs_per_sample == LAYERS * BLOCK_MACS + HEAD_MACS


def test_bitfit_step_work_computes_no_weight_gradient(archs) -> None:
    """A trained bias (the first LayerNorm's already) makes every later activation need a gradient, but a
    bias's gradient is a reduction: every projection costs its forward and its input's gradient, never its
    weight's; both operands of the attention's products are activations, so they cost 3 F."""
    by_hand = (LAYERS * (2 * (4 * PROJ + 2 * FFN_MACS) + 3 * 2 * QK) + 2 * HEAD_MACS) \
        / (3 * (LAYERS * BLOCK_MACS + HEAD_MACS))
    assert archs["bitfit"].frozen_step_work_ratio == pytest.approx(by_hand, rel=1e-9)
    assert archs["bitfit"].frozen_step_work_ratio == pytest.approx(_autograd_step_ratio("bitfit"), rel=1e-6)


def test_the_docs_factors_come_from_the_model_files() -> None:
    """docs/estimators.md's table of the five files' factors (and their order in its sentence) is theirs."""
    doc = " ".join((MODELS.parents[1] / "docs" / "estimators.md").read_text().split())
    files = ("lora", "bitfit", "prompt", "adapter", "head")
    factors = [f"{from_workload(str(MODELS / f'{name}.py')).frozen_step_work_ratio:.3f}" for name in files]
    assert f"; {', '.join(factors[:-1])} and {factors[-1]})" in doc
    for name, factor in zip(("LoRA", "BitFit", "prompt", "adapter", "head"), factors):
        assert f"| {name} | {factor} |" in doc
