"""``rsi params ALGORITHM``: the parameters an algorithm accepts, straight from its pydantic
model, so the printed table can never drift from what a config is validated against."""

from __future__ import annotations

import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from rsi.registry import algorithm_class


def params_rows(name: str) -> list[dict]:
    """One row per field (nested models flattened as ``outer.inner``): name, type, default,
    bounds and description."""
    return _rows(algorithm_class(name).Params, "")


def _rows(model: type[BaseModel], prefix: str) -> list[dict]:
    rows = []
    for field_name, field in model.model_fields.items():
        if field_name == "name" and not prefix:
            continue  # the algorithm's own name
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows += _rows(ann, f"{prefix}{field_name}.")
            continue
        if field.default_factory is not None:
            default = field.get_default(call_default_factory=True)
        else:
            default = None if field.default is PydanticUndefined else field.default
        bounds = [
            f"{op} {getattr(m, attr)}"
            for m in field.metadata
            for op, attr in ((">=", "ge"), (">", "gt"), ("<=", "le"), ("<", "lt"))
            if hasattr(m, attr)
        ]
        rows.append(
            {
                "parameter": prefix + field_name,
                "type": _type_name(ann),
                "default": "(required)" if field.is_required() else repr(default),
                "range": ", ".join(bounds),
                "description": field.description or "",
            }
        )
    return rows


def _type_name(ann) -> str:
    origin = typing.get_origin(ann)
    if origin is None:
        return getattr(ann, "__name__", str(ann))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(ann))
    args = ", ".join(_type_name(a) for a in typing.get_args(ann))
    name = getattr(origin, "__name__", str(origin)).replace("UnionType", "").replace("Union", "")
    return f"{name}[{args}]" if name else " | ".join(_type_name(a) for a in typing.get_args(ann))
