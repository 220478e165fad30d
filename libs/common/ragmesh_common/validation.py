"""Input rules shared by every service (the same rule in the gateway, the indexer and search)."""

from __future__ import annotations

import re

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from .errors import invalid_argument

COLLECTION_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
DOC_ID_MAX_CHARS = 512
METADATA_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
DEFAULT_COLLECTION = "default"


def collection_name(name: str, *, field: str = "collection") -> str:
    """Return a valid collection name (empty -> "default") or raise COLLECTION_NAME_INVALID."""
    name = name or DEFAULT_COLLECTION
    if not COLLECTION_NAME_RE.fullmatch(name):
        raise invalid_argument(
            "COLLECTION_NAME_INVALID",
            f"collection name {name[:80]!r} is invalid: use 1-63 characters a-z, 0-9, '_' or '-', "
            "starting with a letter or digit",
            field=field,
            collection=name[:80],
        )
    return name


def doc_id(value: str, *, field: str = "doc_id") -> str:
    """Return a valid document id or raise DOCUMENT_ID_INVALID (empty ids are the caller's business)."""
    if len(value) > DOC_ID_MAX_CHARS or any(ord(c) < 32 for c in value) or value != value.strip():
        raise invalid_argument(
            "DOCUMENT_ID_INVALID",
            f"doc_id must be at most {DOC_ID_MAX_CHARS} printable characters without surrounding spaces",
            field=field,
        )
    return value


Scalar = str | int | float | bool


def flat_metadata(struct: struct_pb2.Struct | dict | None, *, field: str = "metadata") -> dict[str, Scalar]:
    """Return flat user metadata (key -> string, number or boolean) or raise METADATA_INVALID."""
    if struct is None:
        return {}
    data = MessageToDict(struct) if isinstance(struct, struct_pb2.Struct) else dict(struct)
    out: dict[str, Scalar] = {}
    for key, value in data.items():
        if not METADATA_KEY_RE.fullmatch(key):
            raise invalid_argument(
                "METADATA_INVALID",
                f"metadata key {key[:70]!r} is invalid: use 1-64 characters A-Z, a-z, 0-9, '_', '.', '-'",
                field=f"{field}.{key[:70]}",
            )
        if isinstance(value, float) and value.is_integer() and isinstance(struct, struct_pb2.Struct):
            value = int(value)  # Struct carries every number as a double
        if value is None or isinstance(value, (dict, list)):
            raise invalid_argument(
                "METADATA_INVALID",
                f"metadata value for {key!r} must be a string, number or boolean (metadata is flat)",
                field=f"{field}.{key}",
            )
        out[key] = value
    return out
