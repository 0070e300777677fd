"""The schema of a bare feature vector: what ``Predictor.predict(features=...)`` and ``POST /predict`` accept.

Every number is a finite, non-negative count or byte total, so a NaN, a negative op count or an absurd size is
refused with the field's name (a ``UsageError`` from the Python API, a 422 from the service) instead of
surfacing as a math error deep in the estimators. Keys the schema does not use are ignored: silently when a
card's ``features`` section has them (``fvcore_*``, ``source``, ...), otherwise (a misspelt optional key) named
in a note on the predicted card, with the field it probably meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from perfpredict.errors import UsageError
from perfpredict.estimators.kernel_nodes import KERNEL_CLASSES

#: The largest count or byte total a feature may carry (an exa-MAC per sample, an exabyte of weights: far past
#: any real model, and small enough that times MAX_BATCH_SIZE it stays a finite float and an exact int).
MAX_QUANTITY = 10**18

#: A non-negative, finite count or byte total (float-valued features).
_Quantity = Annotated[float, Field(ge=0, le=MAX_QUANTITY, allow_inf_nan=False)]
#: A non-negative integer count.
_Count = Annotated[int, Field(ge=0, le=MAX_QUANTITY)]
#: One row of ``kernel_nodes``: a kernel class and seven non-negative integers.
KernelRow = tuple[Literal[KERNEL_CLASSES], Annotated[int, Field(ge=1, le=MAX_QUANTITY)],
                  _Count, _Count, _Count, _Count, _Count, _Count]


class FeatureVector(BaseModel):
    """Graph features of one architecture (what ``perfpredict.estimators.arch.ArchFeatures`` holds). Every
    number is a finite, non-negative count or byte total (at most :data:`MAX_QUANTITY`)."""

    # extra keys are kept (not validated) so that the routes can name the unknown ones in a note
    model_config = ConfigDict(allow_inf_nan=False, extra="allow")

    forward_macs_per_sample: _Quantity
    param_count: _Quantity = Field(description="the model's parameter count (a card's features section has none: "
                                               "it is the card's model.parameters, less those a step never "
                                               "uses: features.unused_param_bytes' share of model.param_bytes)")
    param_bytes: _Quantity
    activation_bytes_per_sample: _Quantity
    num_nodes: Annotated[float, Field(ge=1, le=MAX_QUANTITY, allow_inf_nan=False)]
    forward_macs_fixed: _Quantity = 0.0
    activation_bytes_fixed: _Quantity = 0.0
    input_bytes_per_sample: _Quantity = 0.0
    lookup_param_bytes: _Quantity = Field(0.0, description="bytes of weights only indexed (embedding tables); "
                                                            "part of param_bytes")
    buffer_bytes: _Quantity = Field(0.0, description="bytes of the weights that are buffers (a BatchNormalization's "
                                                      "running mean and variance); part of param_bytes. Training "
                                                      "memory charges them no gradient nor optimizer state")
    frozen_param_bytes: _Quantity = Field(
        0.0, description="bytes of the parameters that get no gradient (requires_grad=False, e.g. a frozen "
                         "backbone); part of param_bytes. Training memory's Horus eq. 2 charges them no gradient "
                         "nor optimizer state. An ONNX file cannot say which weights train: send it here")
    frozen_param_count: _Quantity = Field(0.0, description="how many parameters those are; part of param_count")
    recurrent_steps_by_op: dict[Literal["LSTM", "GRU", "RNN"], _Count] = Field(
        default_factory=dict, description="time steps of the recurrent layers per pass (sequence length × "
                                          "directions, summed per ONNX op type); independent of the batch size")
    op_counts: dict[str, _Count] = Field(
        default_factory=dict, description="ONNX op type -> count. Which types are present sets the library code "
                                          "a CPU process pages in (a third to a half of a small model's RSS); "
                                          "left out, CPU memory is under-predicted and the card says so")
    macs_by_op: dict[str, _Quantity] = Field(default_factory=dict)
    activation_bytes_by_op: dict[str, _Quantity] = Field(default_factory=dict)
    saved_bytes_per_sample: _Quantity | None = Field(
        None, description="bytes autograd saves for backward per sample, as CUDA's kernels keep them (a "
                          "predicted card's features.saved_bytes_per_sample); left out, it is estimated from "
                          "the activation bytes, and the card says so")
    saved_bytes_fixed: _Quantity = 0.0
    saved_cpu_bytes_per_sample: _Quantity | None = Field(
        None, description="the same as the CPU's own kernels keep them (unfused attention, float dropout "
                          "noise): what the CPU memory model charges; left out, it is estimated")
    saved_cpu_bytes_fixed: _Quantity = 0.0
    peak_live_bytes_per_sample: _Quantity | None = Field(
        None, description="the most activation bytes alive at once in a forward pass, per sample (a "
                          "predicted card's features.peak_live_bytes_per_sample): what inference memory "
                          "charges; left out, it is estimated from the activation bytes, and the card says so")
    peak_live_bytes_fixed: _Quantity = 0.0
    graph_saved_bytes_per_sample: _Quantity | None = Field(
        None, description="activation bytes a backward pass would keep per sample by per-op rules on the "
                          "graph (a predicted card's features.graph_saved_bytes_per_sample): what the "
                          "saved-bytes estimate rests on when the exact counts are left out")
    graph_saved_bytes_fixed: _Quantity = 0.0
    kernel_nodes: list[KernelRow] = Field(
        default_factory=list, max_length=20000,
        description="the kernels one pass runs, identical ones merged: [class, count, MACs per sample, MACs fixed, "
                    "activation bytes per sample, fixed, weight bytes, recurrent steps] (a predicted card's "
                    "features.kernel_nodes; perfpredict.estimators.kernel_nodes). What the CPU time baseline "
                    "prices; left out, stand-ins are made from the per-op-type totals, and the card says so")
    name: str = Field("features", max_length=200)

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_given(cls, data: Any) -> Any:
        """A card's ``features`` section writes null for what it does not know (``lookup_param_bytes``, a fixed
        term): for a field with a default that is "not given", as if the key were left out."""
        if isinstance(data, Mapping):
            fields = cls.model_fields
            return {k: v for k, v in data.items()
                    if not (v is None and k in fields and not fields[k].is_required() and fields[k].default is not None)}
        return data

    @model_validator(mode="after")
    def _parts_within_wholes(self) -> "FeatureVector":
        for part, whole in (("lookup_param_bytes", "param_bytes"), ("buffer_bytes", "param_bytes"),
                            ("frozen_param_bytes", "param_bytes"),
                            ("frozen_param_count", "param_count")):
            if getattr(self, part) > getattr(self, whole):
                raise ValueError(f"{part} is part of {whole}, so it cannot exceed it")
        return self


def unknown_keys_note(keys: Iterable[str]) -> str | None:
    """A note naming the keys that are neither schema fields nor keys of a card's ``features`` section (which
    are ignored silently), each with the schema field it probably meant; None when there are none."""
    from perfpredict.card import GraphFeatures

    fields = list(FeatureVector.model_fields)
    known = set(fields) | set(GraphFeatures.model_fields) | {"family", "notes"}
    unknown = sorted(str(k) for k in keys if k not in known)
    if not unknown:
        return None
    named = []
    for k in unknown[:6]:
        close = difflib.get_close_matches(k[:100], fields, n=1, cutoff=0.75)
        shown = repr(k[:40]) + ("..." if len(k) > 40 else "")  # a client's key is echoed, so bounded
        named.append(shown + (f" (did you mean {close[0]!r}?)" if close else ""))
    more = f" and {len(unknown) - 6} more" if len(unknown) > 6 else ""
    return f"unknown feature key(s) ignored: {', '.join(named)}{more}"


def request_features(fv: FeatureVector) -> dict[str, Any]:
    """What an HTTP route predicts from: the validated schema fields, and a note naming any unknown key (a
    client's other keys, ``notes`` included, are not passed on)."""
    d = fv.model_dump()
    out = {k: d[k] for k in FeatureVector.model_fields if k in d}
    note = unknown_keys_note(d)
    if note:
        out["notes"] = (note,)
    return out


def check_feature_mapping(features: Mapping[str, Any]) -> dict[str, Any]:
    """``features`` with every schema field validated and converted (``"1e6"`` → 1e6), other keys (``family``,
    ``notes``) kept; :class:`UsageError` naming the first fields at fault when it would not pass
    :class:`FeatureVector` (the service's 422, as one line for Python callers)."""
    try:
        checked = FeatureVector.model_validate(dict(features)).model_dump()
    except ValidationError as e:
        parts = [f"{'.'.join(str(x) for x in err['loc']) or 'features'}: {err['msg']}" for err in e.errors()[:4]]
        more = f" (and {len(e.errors()) - 4} more)" if len(e.errors()) > 4 else ""
        hint = ""
        if "param_count" not in features and "available" in features:  # a card's features section as it is
            hint = (": a card's features section has no param_count; pass the card itself (features=card) or add "
                    "its model.parameters as param_count")
        raise UsageError("bad feature vector: " + "; ".join(parts) + more + hint, step="predict") from None
    out = {**dict(features), **{k: checked[k] for k in FeatureVector.model_fields}}
    # the two other keys the Python API takes (a card's model.family, and notes to carry onto the card)
    if out.get("family") is not None and not isinstance(out["family"], str):
        raise UsageError(f"bad feature vector: family must be text, got {out['family']!r}"[:200], step="predict")
    notes = out.pop("notes", None)
    if notes is not None:
        notes = (notes,) if isinstance(notes, str) else notes
        if not isinstance(notes, (list, tuple, set, frozenset)) or not all(isinstance(n, str) for n in notes):
            raise UsageError(f"bad feature vector: notes must be text or a list of texts, got {notes!r}"[:200],
                             step="predict")
        out["notes"] = tuple(notes)
    note = unknown_keys_note(features)
    if note:  # notes, when given, are a tuple by now
        out["notes"] = out.get("notes", ()) + (note,)
    return out
