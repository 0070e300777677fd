"""encoder.py with each layer activation-checkpointed in training (torch.utils.checkpoint, non-reentrant)."""
from encoder import Encoder, example_inputs  # noqa: F401 - the model file's hooks

MODEL_NAME = "encoder-checkpointed"


def build_model() -> Encoder:
    return Encoder(checkpointed=True)
