"""The built-in zoo's families, one per module, in registration order."""

from __future__ import annotations

from perfpredict.workload.zoo.base import ZooFamily
from perfpredict.workload.zoo.families.convnext import ConvNeXtFamily
from perfpredict.workload.zoo.families.dlrm import DLRMFamily
from perfpredict.workload.zoo.families.lstm import LSTMFamily
from perfpredict.workload.zoo.families.mlp import MLPFamily
from perfpredict.workload.zoo.families.mobilenetv2 import MobileNetV2Family
from perfpredict.workload.zoo.families.resnet import ResNetFamily
from perfpredict.workload.zoo.families.speech import SpeechFamily
from perfpredict.workload.zoo.families.transformer import TransformerFamily
from perfpredict.workload.zoo.families.unet import UNetFamily
from perfpredict.workload.zoo.families.vgg import VGGFamily
from perfpredict.workload.zoo.families.vit import ViTFamily

ALL_FAMILIES: tuple[type[ZooFamily], ...] = (
    ResNetFamily,
    VGGFamily,
    MobileNetV2Family,
    TransformerFamily,
    LSTMFamily,
    MLPFamily,
    ViTFamily,
    UNetFamily,
    SpeechFamily,
    ConvNeXtFamily,
    DLRMFamily,
)

__all__ = [
    "ALL_FAMILIES",
    "ConvNeXtFamily",
    "DLRMFamily",
    "LSTMFamily",
    "MLPFamily",
    "MobileNetV2Family",
    "ResNetFamily",
    "SpeechFamily",
    "TransformerFamily",
    "UNetFamily",
    "VGGFamily",
    "ViTFamily",
]
