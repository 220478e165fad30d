"""Completeness checks for the proto <-> model conversions (after qdrant-client's
`tests/conversions/test_validate_conversions.py`): a message with every field set, walked from its descriptor, so
that a field added to a proto is set here too, and a conversion that does not carry it fails its test.

- `filled(cls)`: every field set to a value that is not its default (sub-messages filled in turn; repeated
  fields and maps with one entry; of each oneof, the first member or the one `oneofs` names).
- `unread(message, convert)`: the fields whose clearing leaves `convert(message)` unchanged, that is the fields
  the conversion drops ("Type.field"). A conversion that raises counts as a change.
- `unset(message)`: the fields of a built message left at their default ("Type.field"), for conversions that
  produce messages; `unread_keys(record, convert)`: the same as `unread` for a stored record (a JSON dict).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_INTS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_SFIXED64,
}
_STRUCT = "google.protobuf.Struct"
_VALUE = "google.protobuf.Value"  # filled as a string (its oneof's first member, null_value, is a default)


def _real_oneof(field: FieldDescriptor) -> Any:
    """The field's oneof, unless it is the one-member oneof that proto3 `optional` makes."""
    oneof = field.containing_oneof
    if oneof is None or (len(oneof.fields) == 1 and oneof.name == f"_{field.name}"):
        return None
    return oneof


def scalar(field: FieldDescriptor, overrides: Mapping[str, Any]) -> Any:
    """A value for a scalar field that is not its default: `overrides["Type.field"]` when given; the last value
    of an enum (its first is UNSPECIFIED, its second often the fallback of a mapping)."""
    key = f"{field.containing_type.name}.{field.name}"
    if key in overrides:
        return overrides[key]
    kind = field.type
    if kind == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values[-1].number
    if kind == FieldDescriptor.TYPE_STRING:
        return f"{field.name}-set"
    if kind == FieldDescriptor.TYPE_BYTES:
        return f"{field.name}-set".encode()
    if kind == FieldDescriptor.TYPE_BOOL:
        return True
    if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return 0.75  # exact in float32 and under any rounding to 1+ decimals
    if kind in _INTS:
        return 7
    raise AssertionError(f"no value for {key} (type {kind})")


def fill(message: Message, overrides: Mapping[str, Any] = {}, oneofs: Mapping[str, str] = {}) -> Message:
    """Set every field of `message` (see the module doc); `oneofs` maps "Type.oneof" to the member to set."""
    descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        oneof = _real_oneof(field)
        if oneof is not None:
            chosen = oneofs.get(f"{descriptor.name}.{oneof.name}", oneof.fields[0].name)
            if field.name != chosen:
                continue
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            if value_field.message_type is not None:
                fill(value["key-set"], overrides, oneofs)
            else:
                value["key-set"] = scalar(value_field, overrides)
        elif field.message_type is not None and field.message_type.full_name == _STRUCT:
            (value.add() if field.is_repeated else value).update({"key": "value-set"})
        elif field.message_type is not None and field.message_type.full_name == _VALUE:
            (value.add() if field.is_repeated else value).string_value = f"{field.name}-set"
        elif field.message_type is not None:
            fill(value.add() if field.is_repeated else value, overrides, oneofs)
        elif field.is_repeated:
            value.append(scalar(field, overrides))
        else:
            setattr(message, field.name, scalar(field, overrides))
    return message


def filled(cls: type[Message], overrides: Mapping[str, Any] = {}, oneofs: Mapping[str, str] = {}) -> Message:
    return fill(cls(), overrides, oneofs)


def oneof_cases(cls: type[Message]) -> Iterator[dict[str, str]]:
    """One `oneofs` choice per member of each oneof of `cls` (and one without choices when it has none)."""
    members = [
        (f"{cls.DESCRIPTOR.name}.{oneof.name}", field.name)
        for oneof in cls.DESCRIPTOR.oneofs
        for field in oneof.fields
        if _real_oneof(field) is oneof
    ]
    if not members:
        yield {}
    for key, name in members:
        yield {key: name}


def _paths(message: Message, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every set field, recursing into sub-messages (the first element of a repeated one)."""
    for field, value in message.ListFields():
        path = (*prefix, field.name)
        yield path
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.message_type.full_name in (_STRUCT, _VALUE):
            continue
        yield from _paths(value[0] if field.is_repeated else value, path)


def _without(message: Message, path: tuple[str, ...]) -> tuple[Message, str]:
    """A copy of `message` with the field at `path` cleared, and that field's "Type.field"."""
    copy = type(message)()
    copy.CopyFrom(message)
    holder = copy
    for name in path[:-1]:
        value = getattr(holder, name)
        repeated = holder.DESCRIPTOR.fields_by_name[name].is_repeated
        holder = value[0] if repeated else value
    holder.ClearField(path[-1])
    return copy, f"{holder.DESCRIPTOR.name}.{path[-1]}"


def _outcome(convert: Callable[[Any], Any], message: Any) -> Any:
    try:
        return convert(message)
    except Exception as exc:  # noqa: BLE001 - a conversion that refuses the cleared message has read the field
        return ("raised", type(exc).__name__, str(exc))


def unread(message: Message, convert: Callable[[Any], Any]) -> set[str]:
    """The fields ("Type.field") whose clearing leaves the conversion's result unchanged (not those inside a
    dropped sub-message)."""
    full = _outcome(convert, message)
    dropped: set[str] = set()
    dropped_paths: list[tuple[str, ...]] = []
    for path in _paths(message):
        if any(path[: len(p)] == p for p in dropped_paths):
            continue
        cleared, name = _without(message, path)
        if _outcome(convert, cleared) == full:
            dropped.add(name)
            dropped_paths.append(path)
    return dropped


def unset(message: Message) -> set[str]:
    """The fields ("Type.field") of a built message left at their default: repeated or map fields empty,
    sub-messages and optional scalars absent, other scalars zero or empty (a oneof's other members than the one
    set are not counted). Set sub-messages are walked too."""
    missing = set()
    for field in message.DESCRIPTOR.fields:
        name = f"{message.DESCRIPTOR.name}.{field.name}"
        oneof = _real_oneof(field)
        if oneof is not None and message.WhichOneof(oneof.name) not in (None, field.name):
            continue  # another member of its oneof is set
        value = getattr(message, field.name)
        if field.is_repeated:
            if not len(value):
                missing.add(name)
            elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
                if field.message_type.full_name != _STRUCT:
                    missing |= unset(value[0])
        elif field.message_type is not None:
            if not message.HasField(field.name):
                missing.add(name)
            elif field.message_type.full_name != _STRUCT:
                missing |= unset(value)
        elif field.has_presence and _real_oneof(field) is None:
            if not message.HasField(field.name):
                missing.add(name)
        elif value == field.default_value:
            missing.add(name)
    return missing


def unread_keys(record: Mapping[str, Any], convert: Callable[[Any], Any]) -> set[str]:
    """The keys of a record (a JSON dict) whose removal leaves the conversion's result unchanged."""
    full = _outcome(convert, record)
    return {key for key in record if _outcome(convert, {k: v for k, v in record.items() if k != key}) == full}
