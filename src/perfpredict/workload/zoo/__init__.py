"""The built-in model zoo: parametric, pure-torch families addressable as ``zoo:<family>``.

>>> from perfpredict.workload.zoo import families, enumerate_configs
>>> sorted(families())            # doctest: +SKIP
['convnext', 'dlrm', 'lstm', 'mlp', 'mobilenetv2', 'resnet', 'speech', 'transformer', 'unet', 'vgg', 'vit']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfpredict.errors import UsageError
from perfpredict.workload.spec import Workload, WorkloadRef
from perfpredict.workload.zoo.base import ZooFamily, ZooParam
from perfpredict.workload.zoo.families import ALL_FAMILIES

_REGISTRY: dict[str, ZooFamily] = {f.name: f for f in (cls() for cls in ALL_FAMILIES)}


def families() -> dict[str, ZooFamily]:
    """All registered families by name."""
    return dict(_REGISTRY)


def get_family(name: str) -> ZooFamily:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown zoo family {name!r}; available: {', '.join(sorted(_REGISTRY))}",
                         step="zoo") from None


def enumerate_configs(family: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every grid configuration, fully resolved, as ``(family, cfg)`` pairs in a deterministic order."""
    names = [family] if family else sorted(_REGISTRY)
    out = []
    for n in names:
        fam = get_family(n)
        for overrides in fam.grid():
            out.append((n, fam.resolve(overrides)))
    return out


def load_zoo_workload(family: str, params: Mapping[str, Any] | None = None) -> Workload:
    """A :class:`Workload` for ``family`` with ``params`` overriding the family defaults."""
    fam = get_family(family)
    cfg = fam.resolve(params)
    make_dataset, preprocess = fam.input_pipeline(cfg) or (None, None)
    return Workload(
        name=fam.config_name(cfg),
        ref=WorkloadRef(kind="zoo", target=family, params=tuple(sorted(cfg.items()))),
        build_model=lambda: fam.build_model(cfg),
        example_inputs=lambda b: fam.example_inputs(cfg, b),
        loss_fn=fam.loss_fn,
        example_targets=lambda b: fam.example_targets(cfg, b),
        make_dataset=make_dataset,
        preprocess=preprocess,
        batch_sizes=fam.default_batch_sizes,
        description=fam.description,
        extra={"family": family, "config": cfg},
    )


__all__ = ["ZooFamily", "ZooParam", "enumerate_configs", "families", "get_family", "load_zoo_workload"]
