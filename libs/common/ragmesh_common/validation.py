"""Input rules shared by every service (the same rule in the gateway, the indexer and search)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from pydantic import Field

from .errors import invalid_argument
from .reasons import Reason

COLLECTION_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
DOC_ID_MAX_CHARS = 512
# Whitespace as str.strip() knows it, spelled out so that the pattern means the same in every regex engine
# (the OpenAPI schema publishes DOC_ID_PATTERN; JSON Schema validators use ECMA regexes).
_SPACE = r" \t\n\r\f\v\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_PRINTABLE = r"\x00-\x1f"
# 1-512 characters, none a control character (below U+0020), not starting or ending with whitespace.
DOC_ID_PATTERN = rf"^[^{_PRINTABLE}{_SPACE}](?:[^{_PRINTABLE}]{{0,{DOC_ID_MAX_CHARS - 2}}}[^{_PRINTABLE}{_SPACE}])?$"
DOC_ID_RE = re.compile(DOC_ID_PATTERN)
# Text with at least one character that is not whitespace (what `text.strip()` leaves something of).
NOT_BLANK_PATTERN = rf"[^{_SPACE}]"
METADATA_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
DEFAULT_COLLECTION = "default"
# A file, folder or URL an MCP tool takes (the gateway's and the CLI's bridge's).
PATH_MAX_CHARS = 4096
# Golden sets (judged queries a collection's search quality is measured on): the search service enforces these,
# the gateway's schema states them.
GOLDEN_MAX_QUERIES = 1000
GOLDEN_MAX_JUDGMENTS_PER_QUERY = 1000
GOLDEN_MAX_JUDGMENTS = 50_000
GOLDEN_MAX_GRADE = 10
GOLDEN_QUERY_ID_MAX_CHARS = 256
# Chunk payload fields search can filter on besides user metadata keys (their values are strings).
CHUNK_FILTER_FIELDS = (
    "doc_id",
    "title",
    "source",
    "filename",
    "mime_type",
    "url",
    "language",
    "path",
    "path_prefix",
    "datasource",
)


def collection_name(name: str, *, field: str = "collection") -> str:
    """Return a valid collection name (empty -> "default") or raise COLLECTION_NAME_INVALID."""
    name = name or DEFAULT_COLLECTION
    if not COLLECTION_NAME_RE.fullmatch(name):
        raise invalid_argument(
            Reason.COLLECTION_NAME_INVALID,
            f"collection name {name[:80]!r} is invalid: use 1-63 characters a-z, 0-9, '_' or '-', "
            "starting with a letter or digit",
            field=field,
            collection=name[:80],
        )
    return name


def doc_id(value: str, *, field: str = "doc_id") -> str:
    """Return a valid document id (DOC_ID_PATTERN) or raise DOCUMENT_ID_INVALID. Callers for which an id is
    optional check for "" before calling."""
    if not DOC_ID_RE.fullmatch(value):
        raise invalid_argument(
            Reason.DOCUMENT_ID_INVALID,
            f"doc_id must be at most {DOC_ID_MAX_CHARS} printable characters without surrounding spaces",
            field=field,
        )
    return value


Scalar = str | int | float | bool
_INT64 = 2**63


def whole_number(value: float) -> int | float:
    """A double that carries a whole number as an int (protobuf's Struct carries every number as a double);
    beyond the 64-bit range the store's integers hold, it stays a float."""
    return int(value) if value.is_integer() and -_INT64 <= value < _INT64 else value


def flat_metadata(
    struct: struct_pb2.Struct | Mapping[str, Any] | None, *, field: str = "metadata"
) -> dict[str, Scalar]:
    """Return flat user metadata (key -> string, number or boolean) or raise METADATA_INVALID."""
    if struct is None:
        return {}
    data = MessageToDict(struct) if isinstance(struct, struct_pb2.Struct) else dict(struct)
    out: dict[str, Scalar] = {}
    for key, value in data.items():
        if not METADATA_KEY_RE.fullmatch(key):
            raise invalid_argument(
                Reason.METADATA_INVALID,
                f"metadata key {key[:70]!r} is invalid: use 1-64 characters A-Z, a-z, 0-9, '_', '.', '-'",
                field=f"{field}.{key[:70]}",
            )
        if isinstance(value, float) and isinstance(struct, struct_pb2.Struct):
            value = whole_number(value)
        if value is None or isinstance(value, (dict, list)):
            raise invalid_argument(
                Reason.METADATA_INVALID,
                f"metadata value for {key!r} must be a string, number or boolean (metadata is flat)",
                field=f"{field}.{key}",
            )
        out[key] = value
    return out


def path_field(description: str) -> Any:
    """The pydantic Field of a tool's path argument: 1 to PATH_MAX_CHARS characters."""
    return Field(min_length=1, max_length=PATH_MAX_CHARS, description=description)
