"""Building a proto message from a domain object whose attributes carry the message's field names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from google.protobuf.message import Message

M = TypeVar("M", bound=Message)


def message_from(message_cls: type[M], source: object, /, *, skip: Iterable[str] = (), **values: Any) -> M:
    """A `message_cls` with `values`, and each of its other fields (but those in `skip`) read from `source`'s
    attribute of the same name. A field `source` lacks raises AttributeError, so a field added to the proto
    is either given here, skipped by name, or missing loudly."""
    left_out = {*values, *skip}
    fields = {f.name: getattr(source, f.name) for f in message_cls.DESCRIPTOR.fields if f.name not in left_out}
    return message_cls(**fields, **values)
