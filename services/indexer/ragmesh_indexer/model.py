"""The indexer's data: a document to ingest (`DocumentIn`, `FileIn`, `StoredContent`), the version it is written
to (`Target`), a document ready to embed (`Prepared`) and what its caller gets back (`IngestOutcome`). The
ingest (service.py), its batch pipeline (pipeline.py), jobs and re-indexes all pass these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

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


# --- jobs: the records a job store keeps (JSON in SQLite, JSON inside a Redis hash) -----------------------------
# TypedDicts, not dataclasses: these are what is stored, read back with json.loads; a record written by an older
# indexer (missing keys, hence NotRequired) still loads as it is, and no to/from-dict code can drift from it.
class ErrorRecord(TypedDict):
    """A failed document's error: the IngestError message's fields."""

    code: str  # a grpc.StatusCode name
    reason: str
    domain: str
    message: str
    metadata: dict[str, str]


class JobErrorRecord(TypedDict):
    """One failed document of a job (the JobDocumentError message)."""

    document: str  # its label: path, URL or id
    error: ErrorRecord


class ReindexRecord(TypedDict):
    """A re-index job's `reindex` fields: the ReindexInfo message as JSON (field names as in the proto)."""

    from_version: int
    to_version: int
    settings: dict[str, Any]  # the new version's IndexSettings (ragmesh_store's dataclass as a dict)
    tolerance: float
    force: bool
    retention_seconds: int
    decision: str  # "" until the gate decides: switched, forced, rejected, no_golden_set
    current: NotRequired[dict[str, Any] | None]  # both versions' Evaluation (json_format), once scored
    candidate: NotRequired[dict[str, Any] | None]


class JobRecord(TypedDict):
    """A job as its store returns it: the record saved at creation, its mutable fields and counters, and (read
    with details) its documents' errors. Keys a record may lack are NotRequired."""

    job_id: str
    collection: str
    state: str  # queued, running, done, failed, cancelled, rejected
    created_at: NotRequired[str]
    kind: NotRequired[str]  # folder, urls, archive, documents, manifest, reindex
    source: NotRequired[str]  # for people: the folder, "3 URLs", the archive's name, ...
    folder: NotRequired[str]  # a folder job's root ("" otherwise)
    prune: NotRequired[bool]
    datasource_id: NotRequired[str]
    doc_ids: NotRequired[list[str]]  # a pruning job: the doc ids this run saw
    manifest: NotRequired[dict[str, str]]  # a manifest job: path -> SHA-256 of the files it stands for
    partial: NotRequired[bool]  # a manifest job over a part of its folder (hashes added, not replaced)
    skipped_files: NotRequired[list[list[str]]]  # [path, reason] pairs (JSON has no tuples)
    skipped: NotRequired[int]
    total: NotRequired[int]
    reindex: NotRequired[ReindexRecord]
    # Mutable (queues.FIELDS) and counted, kept beside the record.
    started_at: NotRequired[str]
    finished_at: NotRequired[str]
    error: NotRequired[str]
    deleted: NotRequired[int]
    indexed: NotRequired[int]
    unchanged: NotRequired[int]
    failed: NotRequired[int]
    bytes: NotRequired[int]
    errors: NotRequired[list[JobErrorRecord]]  # only when read with details


class FileRecord(TypedDict):
    """A queued file: its bytes (base64) unless a folder job reads them from its path when the batch runs."""

    filename: str
    mime_type: str
    path: str
    data: NotRequired[str]


class ItemRecord(TypedDict):
    """One document on the queue: the fields of DocumentIn that are set, its label and size."""

    label: str  # for people and errors: its path, URL or id
    size: int  # bytes (0 when unknown)
    doc_id: NotRequired[str]
    title: NotRequired[str]
    text: NotRequired[str]
    url: NotRequired[str]
    datasource: NotRequired[str]
    fresh_until: NotRequired[str]
    metadata: NotRequired[dict[str, validation.Scalar]]
    file: NotRequired[FileRecord]
    # A manifest job's file that was not uploaded: "unchanged" (stored with its hash) or "missing" (it fails).
    kept: NotRequired[str]


class BatchRecord(TypedDict):
    """A queue message's payload: consecutive items of one job, from position `start`."""

    job_id: str
    start: int
    items: list[ItemRecord]


class DatasourceRecord(TypedDict):
    """A folder or URL list synced into a collection, as saved; `due` is worked out when listed."""

    datasource_id: str
    collection: str
    kind: str  # folder, manifest (a folder on a client's machine) or urls
    folder: NotRequired[str]
    host: NotRequired[str]  # a manifest's: the machine that has the folder
    files: NotRequired[dict[str, str]]  # a manifest's: path -> SHA-256 of the files its jobs ingested
    urls: NotRequired[list[str]]
    prune: NotRequired[bool]
    fresh_for_seconds: NotRequired[int]
    fresh_until: NotRequired[str]
    last_job_id: NotRequired[str]
    last_synced_at: NotRequired[str]
    due: NotRequired[bool]
