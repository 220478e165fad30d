"""Building a proto message (or a pydantic model) from an object whose attributes carry its field names, and a
Struct from plain JSON values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from google.protobuf import struct_pb2
from google.protobuf.message import Message
from pydantic import BaseModel

M = TypeVar("M", bound=Message)
B = TypeVar("B", bound=BaseModel)


def struct(values: Mapping[str, Any] | None) -> struct_pb2.Struct:
    """Plain JSON values (a mapping; None is empty) as a Struct."""
    message = struct_pb2.Struct()
    if values:
        message.update(dict(values))
    return message


def message_from(message_cls: type[M], source: object, /, *, skip: Iterable[str] = (), **values: Any) -> M:
    """A `message_cls` with `values`, and each of its other fields (but those in `skip`) read from `source`'s
    attribute of the same name. A field `source` lacks raises AttributeError, so a field added to the proto
    is either given here, skipped by name, or missing loudly."""
    return message_cls(**_same_named([f.name for f in message_cls.DESCRIPTOR.fields], source, skip, values))


def model_from(model_cls: type[B], source: object, /, *, skip: Iterable[str] = (), **values: Any) -> B:
    """`message_from` for a pydantic model: its fields but `values` and `skip` are read from `source`."""
    return model_cls(**_same_named(list(model_cls.model_fields), source, skip, values))


def _same_named(names: list[str], source: object, skip: Iterable[str], values: dict[str, Any]) -> dict[str, Any]:
    left_out = {*values, *skip}
    return {**{name: getattr(source, name) for name in names if name not in left_out}, **values}
