"""Copies of an ONNX graph without its weights' data, for the tools that read only their shapes.

ONNX shape inference and onnxruntime take a ``ModelProto`` as bytes: handing them an exported model serialised
its weights each time, and shape inference parsed them back into a second full copy (a 38M-parameter encoder:
150 MB, about 1 s per export for inference alone). What they get instead is a copy whose bulk weights
(:func:`is_bulk_weight`) are references marked as external data, which carry their name, type and dimensions
but no bytes:

- shape inference types an initializer from its type and dimensions, which stay; it reads an initializer's
  values only as a shape parameter (``Reshape``'s shape, ``Resize``'s scales, ``Slice``'s bounds, a ``Range``
  or ``OneHot`` scalar: one value per dimension at most) and, with ``data_prop``, only integer ones. A bulk
  weight is floating point and larger than any of them, so what it infers is what it infers with the data
  (:func:`infer_shapes` puts the data back into its result);
- onnxruntime is given the same bytes from memory (``SessionOptions.add_external_initializers``), as constant
  initializers, as it would have parsed them from the proto
  (:func:`perfpredict.features.graph._runtime_shapes`).
"""

from __future__ import annotations

from typing import Any

#: Floating-point initializers of more elements than this are bulk weights. A shape parameter that shape inference
#: reads (Resize's scales) holds one value per dimension of a tensor; onnxruntime's model editor takes the same
#: line (an initializer "involved in shape inferencing ... uses less than 128 bytes").
BULK_ELEMENTS = 1024
#: FLOAT, FLOAT16, DOUBLE, BFLOAT16
_FLOAT_TYPES = frozenset({1, 10, 11, 16})
#: the ``location`` a bulk weight's reference names: no such file is ever read
IN_MEMORY = "perfpredict-in-memory"


def is_bulk_weight(tensor: Any) -> bool:
    """Whether ``tensor`` (an initializer) is a floating-point weight of more than :data:`BULK_ELEMENTS` elements
    whose data is in the proto (an external-data reference has none to leave out)."""
    import onnx

    if tensor.data_type not in _FLOAT_TYPES or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    n = 1
    for d in tensor.dims:
        n *= d
    return n > BULK_ELEMENTS


def without_bulk_data(model_proto: Any) -> tuple[Any, list[tuple[int, Any]]]:
    """A copy of ``model_proto`` whose main graph's bulk weights are external-data references without their
    bytes, and those weights as (position among the initializers, the original tensor); the weights are never
    copied. Subgraphs' initializers are copied as they are."""
    import onnx

    light = type(model_proto)()
    _copy_fields(model_proto, light, skip="graph")
    _copy_fields(model_proto.graph, light.graph, skip="initializer")
    bulk = []
    for i, t in enumerate(model_proto.graph.initializer):
        out = light.graph.initializer.add()
        if not is_bulk_weight(t):
            out.CopyFrom(t)
            continue
        out.name, out.data_type, out.data_location = t.name, t.data_type, onnx.TensorProto.EXTERNAL
        out.dims.extend(t.dims)
        entry = out.external_data.add()
        entry.key, entry.value = "location", IN_MEMORY
        bulk.append((i, t))
    return light, bulk


def _copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Copy every set field of the message ``src`` but ``skip`` into ``dst``, a fresh message of its type."""
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def infer_shapes(model_proto: Any) -> Any:
    """``onnx.shape_inference.infer_shapes(model_proto, data_prop=True)``, equal to it, run on a copy without the
    bulk weights' data (:func:`without_bulk_data`), which is then put back in. Raises as it raises."""
    from onnx import shape_inference

    light, bulk = without_bulk_data(model_proto)
    if not bulk:
        return shape_inference.infer_shapes(model_proto, data_prop=True)
    inferred = shape_inference.infer_shapes(light, data_prop=True)
    del light
    inits = inferred.graph.initializer
    if len(inits) != len(model_proto.graph.initializer) or any(inits[i].name != t.name for i, t in bulk):
        return shape_inference.infer_shapes(model_proto, data_prop=True)  # not expected: the proto as it was
    for i, t in bulk:
        inits[i].CopyFrom(t)
    return inferred
