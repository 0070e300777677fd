"""mlp.py with each block activation-checkpointed in training (torch.utils.checkpoint, non-reentrant)."""
from mlp import Net, example_inputs  # noqa: F401 - the model file's hooks

MODEL_NAME = "mlp-checkpointed"


def build_model() -> Net:
    return Net(checkpointed=True)
