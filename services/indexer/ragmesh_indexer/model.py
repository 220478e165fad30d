"""The indexer's data: a document to ingest (`DocumentIn`, `FileIn`, `StoredContent`), the version it is written
to (`Target`), a document ready to embed (`Prepared`) and what its caller gets back (`IngestOutcome`). The
ingest (service.py), its batch pipeline (pipeline.py), jobs and re-indexes all pass these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ragmesh_common import validation

from .chunking import Chunk, Chunker, TokenIds


@dataclass(frozen=True)
class FileIn:
    """A file's bytes. `path` is where it lies relative to the folder it was read from (POSIX): its document
    id and, for source code and plain text, its title."""

    data: bytes
    filename: str = ""
    mime_type: str = ""
    path: str = ""


@dataclass(frozen=True)
class Target:
    """Where a write goes: one version of a collection (its physical store collection), chunked and embedded
    with that version's settings. `model` is the embedder's name for the model ("" = its default)."""

    collection: str
    version: int
    physical: str
    chunker: Chunker
    model: str = ""


@dataclass(frozen=True)
class StoredContent:
    """A document as a version stores it (its text rebuilt from its chunks and the fields its chunks carry):
    what a re-index writes into a new version, with no need for the original file."""

    text: str
    source: str
    filename: str = ""
    url: str = ""
    mime_type: str = ""
    path: str = ""
    language: str = ""


@dataclass(frozen=True)
class DocumentIn:
    """One document to ingest: exactly one of text, file and url."""

    collection: str = ""
    doc_id: str = ""
    title: str = ""
    metadata: Mapping[str, validation.Scalar] = field(default_factory=dict)
    text: str | None = None
    file: FileIn | None = None
    url: str | None = None
    # The datasource (a synced folder or URL list) the document came from, and until when it is fresh
    # (ISO 8601, empty: always); both stored on its chunks so a sync can prune and expire them.
    datasource: str = ""
    fresh_until: str = ""
    stored: StoredContent | None = None  # a re-index: the document as another version of it stores it


@dataclass(frozen=True)
class IngestOutcome:
    status: Literal["indexed", "unchanged"]
    doc_id: str
    chunks: int
    collection: str
    title: str
    mime_type: str
    url: str
    content_hash: str


@dataclass(frozen=True)
class Prepared:
    """A document converted and chunked, waiting to be embedded and written (its lock held)."""

    outcome: IngestOutcome  # what the caller gets once the chunks are stored
    chunks: list[Chunk]
    texts: list[str]  # what each chunk is embedded as
    token_ids: list[TokenIds]  # and its model tokens, when the model takes the chunker's (else each empty)
    payload: dict[str, object]  # the fields every chunk point carries
    replaces: bool  # an older version is stored: its leftover chunks are deleted after the upsert
    target: Target  # where it is written
    lines: list[tuple[int, int]] = field(default_factory=list)  # each chunk's first and last line (1-based)
    tail: str = ""  # the text after the last chunk
