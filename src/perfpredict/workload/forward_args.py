"""A model's forward arguments, given by position (a Tensor or a tuple) or by name (a dict).

Most models people bring today take keyword arguments: a Hugging Face-style language model is called as
``model(input_ids=..., attention_mask=..., labels=...)``. A ``model.py`` says so by returning a ``dict`` from
``example_inputs``; :class:`KeywordInputs` carries it, and :func:`call_forward` passes it by name.

Graph tools (the ONNX exporters, fvcore's tracer, saved-tensor counting) pass positional tensors only, so for
them :func:`as_positional` wraps the model in :class:`KeywordForward`, a module whose positional arguments
are the dict's tensor-carrying values, in the dict's order, and whose other values (``use_cache=False``,
``None``) stay fixed keyword arguments. A forward that takes one dict as its *positional* argument is written
as a 1-tuple, ``return (batch_dict,)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class KeywordInputs(tuple):
    """Keyword forward arguments: a tuple of the values (so byte counts and ``to_device`` see every tensor)
    that remembers the names they go with."""

    names: tuple[str, ...]

    def __new__(cls, mapping: Mapping[str, Any]) -> KeywordInputs:
        bad = [k for k in mapping if not isinstance(k, str)]
        if bad:  # model(**d) takes string keys only (any string: a **kwargs forward accepts "input-ids")
            raise TypeError(f"example_inputs returned a dict whose keys must be argument names (strings), found "
                            f"{bad[0]!r}")
        obj = super().__new__(cls, mapping.values())
        obj.names = tuple(mapping)
        return obj

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.names, self))

    def __repr__(self) -> str:
        return f"KeywordInputs({', '.join(self.names)})"


def call_forward(model: Any, inputs: tuple[Any, ...]) -> Any:
    """``model(*inputs)``, or ``model(**inputs)`` when the inputs are :class:`KeywordInputs`. A forward that
    refuses its arguments gets the ``model.py`` rule that shaped them added to its TypeError."""
    try:
        if isinstance(inputs, KeywordInputs):
            return model(**inputs.as_dict())
        return model(*inputs)
    except TypeError as e:
        hint = _argument_hint(str(e), inputs)
        if hint:
            e.args = (f"{e.args[0] if e.args else e}{hint}", *e.args[1:])
        raise


def _argument_hint(message: str, inputs: tuple[Any, ...]) -> str:
    if isinstance(inputs, KeywordInputs) and "unexpected keyword argument" in message:
        return (" (example_inputs returned a dict, which is passed by name, model(**inputs); to pass one dict as the "
                "forward's single argument, return it in a tuple: return (batch,))")
    if (not isinstance(inputs, KeywordInputs) and len(inputs) == 1 and isinstance(inputs[0], list)
            and "required positional argument" in message):
        return (" (example_inputs returned a list, which is passed as one argument; return a tuple to pass its "
                "items as separate arguments)")
    return ""


def has_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a tensor or a (nested) list, tuple or dict holding one."""
    from perfpredict.workload.spec import iter_tensors

    return next(iter_tensors(obj), None) is not None


class KeywordForward(torch.nn.Module):
    """``model`` called by name from positional tensors: what tracers and ONNX exporters need.

    ``forward(*values)`` calls ``model(**dict(zip(names, values)), **constants)``. The wrapped model is a
    submodule, so its parameters, buffers and train/eval state are the wrapper's.
    """

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...], constants: Mapping[str, Any]):
        super().__init__()
        self.model = model
        self.names = tuple(names)
        self.constants = dict(constants)

    def forward(self, *values: Any) -> Any:
        return self.model(**dict(zip(self.names, values)), **self.constants)


def positional_args(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments :func:`as_positional`'s module takes for ``inputs``: the tensor-carrying values of keyword
    inputs, in order; positional inputs as they are."""
    if not isinstance(inputs, KeywordInputs):
        return tuple(inputs)
    return tuple(v for v in inputs if has_tensor(v))


def as_positional(model: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """``(module, args)`` such that ``module(*args)`` runs ``call_forward(model, inputs)`` with tensors only
    in ``args``: the model itself for positional inputs, a :class:`KeywordForward` for keyword ones."""
    if not isinstance(inputs, KeywordInputs):
        return model, tuple(inputs)
    named = inputs.as_dict()
    names = tuple(k for k, v in named.items() if has_tensor(v))
    constants = {k: v for k, v in named.items() if k not in names}
    return KeywordForward(model, names, constants), tuple(named[k] for k in names)


def input_signature(value: Any, depth: int = 0) -> Any:
    """What a batch size can change in a model's inputs: each tensor's shape and each plain number's value, in
    the inputs' own nesting (other objects by type name). Two batch sizes with the same signature mean
    ``example_inputs`` ignores its ``batch_size``, so no batch size can run out of memory (``max-batch`` stops
    on it). JSON-able: lists, strings and numbers."""
    if depth > 8:
        return "..."
    if isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape)]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, Mapping):
        return ["dict", [[str(k), input_signature(v, depth + 1)] for k, v in value.items()]]
    if isinstance(value, (tuple, list)):
        names = list(getattr(value, "names", ()))
        return ["seq", names, [input_signature(v, depth + 1) for v in value]]
    return ["object", type(value).__name__]
