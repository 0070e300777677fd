"""The contract every built-in zoo family meets.

A family is a parametric model (ResNet-style, VGG-style, ...) with a few depth/width knobs. Families must be
cheap to enumerate (``grid()`` returns plain dicts, nothing is built) and reproducible (same parameters →
same architecture, same initial weights under a fixed seed, same example inputs). ``closed_form_macs``
gives the per-sample forward multiply-accumulate count from the architecture's formula, independently of
any graph tracing: tests hold the ONNX and fvcore counts against it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from perfpredict.errors import UsageError

#: the most parameters a zoo configuration may have: 1e10 fp32 weights with Adam's two moments and the gradients
#: take 160 GB, more than any one GPU holds
MAX_PARAMETERS = 10**10
#: the most elements one sample's input or one of its activations may have: 1e10 fp32 values take 40 GB for
#: one sample, 160 GB at the smallest default batch size (4), more than any one GPU holds
MAX_SAMPLE_ELEMENTS = 10**10
#: the most layers (blocks, embedding tables) a zoo configuration's depth knobs may stack, each built as its own
#: module: ten times the deepest published ResNet (1001 layers); the grid's deepest count is 36 (ConvNeXt-S's
#: 3-3-27-3 blocks)
MAX_LAYERS = 10**4


@dataclass(frozen=True)
class ZooParam:
    """One knob of a family. Its type is the type of ``default``; ``choices`` restricts the values."""

    name: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None

    def parse(self, value: Any) -> Any:
        """Convert ``value`` (a CLI string or a Python value) to this knob's type and validate it."""
        kind = type(self.default)
        try:
            if kind is bool:
                if isinstance(value, str):
                    low = value.strip().lower()
                    if low not in ("1", "0", "true", "false", "yes", "no"):
                        raise ValueError(value)
                    out: Any = low in ("1", "true", "yes")
                else:
                    out = bool(value)
            elif kind is int:
                if isinstance(value, float) and not value.is_integer():
                    raise ValueError(value)
                out = int(value)
            elif kind is float:
                out = float(value)
                if not math.isfinite(out):  # nan passed every minimum check and crashed deep in the family
                    raise ValueError(value)
            else:
                out = str(value)
        except (TypeError, ValueError):
            raise UsageError(f"parameter {self.name} expects {kind.__name__}, got {value!r}",
                             step="zoo parameters") from None
        if self.choices is not None and out not in self.choices:
            raise UsageError(f"parameter {self.name} must be one of {list(self.choices)}, got {out!r}",
                             step="zoo parameters")
        if self.minimum is not None and out < self.minimum:
            raise UsageError(f"parameter {self.name} must be >= {self.minimum}, got {out!r}",
                             step="zoo parameters")
        return out


class ZooFamily(ABC):
    """A parametric model family in the built-in zoo (pure torch, no torchvision)."""

    name: ClassVar[str]
    description: ClassVar[str]
    #: "image", "language", "tabular", "speech" or "recommendation": what kind of data the family consumes.
    task: ClassVar[str]
    params: ClassVar[tuple[ZooParam, ...]]
    default_batch_sizes: ClassVar[tuple[int, ...]] = (4, 8, 16, 32, 64)

    # -- configuration -------------------------------------------------------------------------------
    def resolve(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Defaults updated with ``overrides``, every value parsed and validated; unknown names rejected."""
        overrides = dict(overrides or {})
        known = {p.name: p for p in self.params}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise UsageError(f"zoo family {self.name!r} has no parameter {', '.join(unknown)}; "
                             f"it takes {', '.join(known)}", step="zoo parameters")
        cfg = {p.name: p.default for p in self.params}
        for k, v in overrides.items():
            cfg[k] = known[k].parse(v)
        self.validate(cfg)
        cfg = self.canonical(cfg)
        try:
            return self._within_caps(cfg)
        except OverflowError:  # mobilenetv2 depth_mult=1e308: n * depth_mult is infinite, and ceil() of it raised
            raise UsageError(f"{self.config_name(cfg)[:200]} is too large to size (a count overflowed); a zoo "
                             "model's knobs must keep it under its caps", step="zoo parameters") from None

    def _within_caps(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """``cfg`` when the model it describes is under the parameter, sample-tensor and layer caps; else a
        :class:`UsageError` saying which it exceeds."""
        params = self.closed_form_params(cfg)
        if params is not None and params > MAX_PARAMETERS:
            # depth=99999999 built layer after layer until memory ran out; a huge width failed deep in torch
            shown, gb = _count_and_gb(params, 16)
            raise UsageError(f"{self.config_name(cfg)[:200]} would have {shown} parameters, more than the "
                             f"{MAX_PARAMETERS:.0e} a zoo model may have (its weights and Adam's state alone would "
                             f"take {gb} GB)", step="zoo parameters")
        tensors = self.closed_form_sample_tensors(cfg)
        if tensors:
            # seq_len=1e12 or image_size=1e6 passed (their weights stay small) and failed allocating the inputs
            # deep in torch, or ran for hours
            what, elements = max(tensors.items(), key=lambda kv: kv[1])
            if elements > MAX_SAMPLE_ELEMENTS:
                shown, gb = _count_and_gb(elements, 4)
                raise UsageError(f"{self.config_name(cfg)[:200]} would have {shown} elements in one sample's "
                                 f"{what}, more than the {MAX_SAMPLE_ELEMENTS:.0e} a zoo sample's tensor may have "
                                 f"({gb} GB in fp32 for one sample)", step="zoo parameters")
        layers = self.closed_form_layers(cfg)
        if layers is not None and layers > MAX_LAYERS:
            # mlp depth=1e8 width=1 or transformer layers=1e8 d_model=1 passed both caps (tiny weights, tiny
            # tensors) and built 1e8 modules one after another until memory ran out
            raise UsageError(f"{self.config_name(cfg)[:200]} would stack {_count_and_gb(layers, 1)[0]} layers "
                             f"(blocks, tables), more than the {MAX_LAYERS:.0e} a zoo model may have (each is "
                             f"built as its own module)", step="zoo parameters")
        return cfg

    def validate(self, cfg: Mapping[str, Any]) -> None:
        """Cross-parameter checks (e.g. heads divide d_model); raise UsageError. Default: none."""

    def canonical(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """``cfg`` (already validated) with every value in one spelling, so that equal architectures get equal
        names (e.g. ``blocks=03-3-9-3`` is ``3-3-9-3``). Default: unchanged."""
        return cfg

    def config_name(self, cfg: Mapping[str, Any]) -> str:
        """A stable, filesystem-safe name listing every parameter, e.g. ``mlp-depth3-width256-...``; different
        configurations get different names."""
        def fmt(v: Any) -> str:
            if isinstance(v, bool):
                return str(int(v))
            if isinstance(v, float):
                short = f"{v:g}"
                # %g keeps 6 digits: depth_mult 0.3333333 and 0.3333334 (1 and 2 blocks per 3-block stage) both
                # printed 0.333333; the shortest exact form is used whenever %g loses the value
                return short if float(short) == v else repr(v)
            return str(v)

        return "-".join([self.name] + [f"{p.name}{fmt(cfg[p.name])}" for p in self.params])

    @abstractmethod
    def grid(self) -> list[dict[str, Any]]:
        """The configurations dataset sweeps enumerate: partial dicts of overrides, deterministic order."""

    # -- the model.py hooks ----------------------------------------------------------------------------
    @abstractmethod
    def build_model(self, cfg: Mapping[str, Any]) -> torch.nn.Module:
        """Build the network for ``cfg`` (weights follow torch's global RNG; callers seed it)."""

    @abstractmethod
    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Deterministic forward arguments for ``batch_size`` (use :func:`generator`)."""

    @abstractmethod
    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        """Deterministic targets matching the model's output: integer classes (float 0/1 click labels for
        recommendation)."""

    def loss_fn(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy; sequence outputs ``[B, T, C]`` are flattened against targets ``[B, T]``."""
        if outputs.dim() == 3:
            return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
        return F.cross_entropy(outputs, targets)

    def input_pipeline(self, cfg: Mapping[str, Any]) -> tuple[Any, Any] | None:
        """``(make_dataset, preprocess)`` feeding this configuration; default: the one of the family's task."""
        from perfpredict.workload.zoo.pipelines import pipeline_for

        return pipeline_for(self.task, dict(cfg))

    # -- ground truth for tests ------------------------------------------------------------------------
    @abstractmethod
    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        """Per-sample forward MACs of conv / linear / matmul / recurrent layers, from the formula."""

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int | None:
        """Exact trainable parameter count from the formula, when the family provides one."""
        return None

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        """Element counts of one sample's input and of its largest activations (tensors the forward pass
        materialises at batch size 1), by what they are; resolve() refuses a configuration whose largest one
        exceeds :data:`MAX_SAMPLE_ELEMENTS`. Default: none."""
        return {}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int | None:
        """How many layers, blocks or embedding tables the family's depth knobs stack (build_model makes each
        its own module); resolve() refuses more than :data:`MAX_LAYERS`. Default: None, for a family whose
        depth is a fixed choice or already bounded by another check."""
        return None


class ImageClassifierFamily(ZooFamily):
    """A family whose models classify ``image_size``×``image_size`` RGB images into ``num_classes``."""

    task = "image"

    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        s = cfg["image_size"]
        return torch.randn(batch_size, 3, s, s, generator=generator(0))

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        return {"input image": 3 * cfg["image_size"] ** 2}

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randint(0, cfg["num_classes"], (batch_size,), generator=generator(1))


def _count_and_gb(count: int, bytes_each: int) -> tuple[str, str]:
    """``count`` and the GB its ``bytes_each``-byte values take, as a refusal shows them. A count past float
    range (width=10**200, width_mult=1e300) is shown by its power of ten: :.3g and count / 1e9 raised
    OverflowError, an internal error."""
    if count < 1e300:
        return f"{count:.3g}", f"{bytes_each * count / 1e9:,.0f}"
    power = math.floor(math.log10(count))
    return f"about 1e{power}", f"about 1e{power + math.floor(math.log10(bytes_each)) - 9}"


def generator(seed: int = 0) -> torch.Generator:
    """A CPU generator with a fixed seed, so example inputs are identical run to run."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g
