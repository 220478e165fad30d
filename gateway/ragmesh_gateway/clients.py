"""The gateway's one gRPC client layer: REST routes now, MCP tools later, call these methods.

`MeshClients` holds one `ServiceClient` (one channel) per backend, created once at start-up. Every method
validates what the gateway can check itself with the shared rules (`ragmesh_common.validation`, same
reasons as the services), calls the backend with a deadline, and returns the response models of
`ragmesh_gateway.models`. Failures raise `RagmeshError` carrying the callee's reason.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

import grpc
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from ragmesh.converter.v1 import converter_service_pb2 as conv_pb
from ragmesh.converter.v1.converter_service_pb2_grpc import ConverterServiceStub
from ragmesh.embedder.v1.embedder_service_pb2_grpc import EmbedderServiceStub
from ragmesh.indexer.v1 import indexer_service_pb2 as idx_pb
from ragmesh.indexer.v1.indexer_service_pb2_grpc import IndexerServiceStub
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh.search.v1.search_service_pb2_grpc import SearchServiceStub
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, failed_precondition, invalid_argument

from .config import GatewaySettings
from .models import (
    BatchDocument,
    Chunk,
    CollectionInfo,
    ConvertResponse,
    Document,
    FusionName,
    IngestResult,
    SearchHit,
    SearchModeName,
    SearchResponse,
)

# Pieces of an upload streamed to the converter.
STREAM_PIECE_BYTES = 256 * 1024

_MODES: dict[str, int] = {
    "hybrid": search_pb.SEARCH_MODE_HYBRID,
    "dense": search_pb.SEARCH_MODE_DENSE,
    "sparse": search_pb.SEARCH_MODE_SPARSE,
    "semantic": search_pb.SEARCH_MODE_SEMANTIC,
    "keyword": search_pb.SEARCH_MODE_KEYWORD,
}
_MODE_NAMES = {value: name for name, value in _MODES.items()}
_FUSIONS: dict[str, int] = {"rrf": search_pb.FUSION_RRF, "dbsf": search_pb.FUSION_DBSF,
                            "relative_score": search_pb.FUSION_RELATIVE_SCORE}
_FUSION_NAMES = {value: name for name, value in _FUSIONS.items()}
P = ParamSpec("P")
T = TypeVar("T")

_INGEST_STATUS = {idx_pb.INGEST_STATUS_INDEXED: "indexed", idx_pb.INGEST_STATUS_UNCHANGED: "unchanged"}


def _unicode_checked(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Refuse strings protobuf cannot encode (lone surrogates, which JSON can carry) as INVALID_ARGUMENT
    TEXT_INVALID instead of failing inside the gateway."""

    @functools.wraps(method)
    async def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except UnicodeEncodeError:
            raise invalid_argument(
                "TEXT_INVALID", "the request contains text that is not valid Unicode (a lone surrogate)"
            ) from None

    return checked


class Readable(Protocol):
    """What an upload looks like to the client layer (Starlette's UploadFile, an open file wrapper)."""

    async def read(self, size: int = -1) -> bytes: ...


class MeshClients:
    """Typed async access to the four services for the REST routes and the MCP tools."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        timeout = settings.gateway_timeout_seconds
        size = settings.grpc_max_message_bytes
        addr = settings.addresses
        # IngestDocument(s) is idempotent by design (deterministic point ids, unchanged content skipped),
        # so a call that never reached the indexer may be retried.
        self.converter = ServiceClient(
            "converter", addr["converter"], ConverterServiceStub, timeout=timeout,
            idempotent=("Convert",), max_message_bytes=size, caller="gateway",
        )
        self.embedder = ServiceClient(
            "embedder", addr["embedder"], EmbedderServiceStub, timeout=timeout,
            idempotent=("Embed", "GetModelInfo"), max_message_bytes=size, caller="gateway",
        )
        self.indexer = ServiceClient(
            "indexer", addr["indexer"], IndexerServiceStub, timeout=timeout,
            idempotent=("IngestDocument", "IngestDocuments", "DeleteDocument", "CreateCollection",
                        "DeleteCollection"),
            max_message_bytes=size, caller="gateway",
        )
        self.search_client = ServiceClient(
            "search", addr["search"], SearchServiceStub, timeout=timeout,
            idempotent=("Search", "GetDocument", "ListCollections"), max_message_bytes=size, caller="gateway",
        )

    @property
    def services(self) -> dict[str, ServiceClient]:
        return {
            "converter": self.converter, "embedder": self.embedder,
            "indexer": self.indexer, "search": self.search_client,
        }

    async def close(self) -> None:
        await asyncio.gather(*(client.close() for client in self.services.values()))

    # --- ingestion ---------------------------------------------------------------------------------------
    @_unicode_checked
    async def ingest_text(
        self, text: str, *, collection: str = validation.DEFAULT_COLLECTION, doc_id: str | None = None,
        title: str | None = None, metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Ingest plain text or Markdown."""
        document = _document(collection, doc_id, title, metadata)
        document.text = text
        return await self._ingest(document)

    @_unicode_checked
    async def ingest_file(
        self, data: bytes, *, filename: str, mime_type: str = "", collection: str = validation.DEFAULT_COLLECTION,
        doc_id: str | None = None, title: str | None = None, metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Ingest a file's bytes; the indexer converts it first."""
        document = _document(collection, doc_id, title, metadata)
        document.file.CopyFrom(idx_pb.FileInput(data=data, filename=filename, mime_type=mime_type))
        return await self._ingest(document)

    @_unicode_checked
    async def ingest_url(
        self, url: str, *, collection: str = validation.DEFAULT_COLLECTION, doc_id: str | None = None,
        title: str | None = None, metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Fetch an http(s) URL, convert and ingest it."""
        document = _document(collection, doc_id, title, metadata)
        document.url = url
        return await self._ingest(document)

    @_unicode_checked
    async def ingest_batch(
        self, documents: Sequence[BatchDocument], *, collection: str = validation.DEFAULT_COLLECTION
    ) -> list[IngestResult | RagmeshError]:
        """Ingest several texts with one streaming call; one result per document, in request order.
        A document that fails gets its RagmeshError in its slot; the others are not affected."""
        inputs = []
        for i, doc in enumerate(documents):
            field = f"documents[{i}]"
            item = _document(collection, doc.doc_id, doc.title, doc.metadata, field_prefix=f"{field}.")
            item.text = doc.text
            inputs.append(item)
        request = idx_pb.IngestDocumentsRequest(documents=inputs)
        results: list[IngestResult | RagmeshError | None] = [None] * len(inputs)
        async for event in self.indexer.stream(
            "IngestDocuments", request, timeout=self.settings.gateway_ingest_timeout_seconds
        ):
            if not 0 <= event.index < len(results):
                continue
            if event.result.status == idx_pb.INGEST_STATUS_FAILED or event.HasField("error"):
                results[event.index] = _ingest_error(event.error)
            else:
                results[event.index] = _ingest_result(event.result)
        return [
            r if r is not None else RagmeshError(
                grpc.StatusCode.INTERNAL, "INGEST_RESULT_MISSING",
                "the indexer finished the batch without a result for this document", "gateway.ragmesh",
            )
            for r in results
        ]

    async def _ingest(self, document: idx_pb.DocumentInput) -> IngestResult:
        response = await self.indexer.call(
            "IngestDocument", idx_pb.IngestDocumentRequest(document=document),
            timeout=self.settings.gateway_ingest_timeout_seconds,
        )
        return _ingest_result(response.result)

    # --- conversion --------------------------------------------------------------------------------------
    async def convert_file(
        self, file: Readable, *, filename: str = "", mime_type: str = "", size: int = 0
    ) -> ConvertResponse:
        """Convert a file to Markdown, streaming it to the converter in pieces (never held whole here).
        `size` (bytes, 0 if unknown) lets the converter refuse an oversized file before reading it."""

        async def pieces() -> AsyncIterator[conv_pb.ConvertStreamRequest]:
            header = conv_pb.ConvertStreamHeader(filename=filename, mime_type=mime_type, size_bytes=size)
            yield conv_pb.ConvertStreamRequest(header=header)
            while piece := await file.read(STREAM_PIECE_BYTES):
                yield conv_pb.ConvertStreamRequest(chunk=piece)

        response = await self.converter.call(
            "ConvertStream", pieces(), timeout=self.settings.gateway_ingest_timeout_seconds
        )
        return _converted(response.document)

    @_unicode_checked
    async def convert_url(self, url: str) -> ConvertResponse:
        """Fetch an http(s) URL and convert it to Markdown."""
        response = await self.converter.call(
            "Convert", conv_pb.ConvertRequest(url=url), timeout=self.settings.gateway_ingest_timeout_seconds
        )
        return _converted(response.document)

    # --- search and documents ----------------------------------------------------------------------------
    @_unicode_checked
    async def search(
        self, query: str, *, collections: Sequence[str] = (validation.DEFAULT_COLLECTION,), top_k: int = 5,
        mode: SearchModeName = "hybrid", filters: Mapping[str, Any] | None = None,
        group_by_document: bool = False, score_threshold: float | None = None,
        fusion: FusionName | None = None, rrf_k: int | None = None,
    ) -> SearchResponse:
        """Search one or more collections (the search service fans out over several and merges)."""
        names = [
            validation.collection_name(name, field=f"collections[{i}]" if len(collections) > 1 else "collection")
            for i, name in enumerate(collections)
        ]
        started = time.perf_counter()
        request = search_pb.SearchRequest(
            query=query, collections=names, top_k=top_k, mode=_MODES[mode], group_by_document=group_by_document,
            fusion=_FUSIONS[fusion] if fusion else search_pb.FUSION_UNSPECIFIED, rrf_k=rrf_k,
        )
        if filters:
            request.filters.CopyFrom(_struct(filters))
        if score_threshold is not None:
            request.score_threshold = score_threshold
        response = await self.search_client.call("Search", request)
        return SearchResponse(
            query=response.query or query,
            mode=_MODE_NAMES.get(response.mode, mode),
            fusion=_FUSION_NAMES.get(response.fusion),
            results=[
                SearchHit(
                    doc_id=r.doc_id, chunk_id=r.chunk_id, chunk_index=r.chunk_index, text=r.text, score=r.score,
                    title=r.title, collection=r.collection, metadata=_plain(r.metadata), source=r.source,
                    filename=r.filename, url=r.url, mime_type=r.mime_type,
                )
                for r in response.results
            ],
            took_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    @_unicode_checked
    async def get_document(self, doc_id: str, *, collection: str = validation.DEFAULT_COLLECTION) -> Document:
        """A whole document: its chunks in order and their text joined."""
        request = search_pb.GetDocumentRequest(
            collection=validation.collection_name(collection), doc_id=_doc_id(doc_id)
        )
        d = await self.search_client.call("GetDocument", request)
        return Document(
            doc_id=d.doc_id, collection=d.collection, title=d.title, text=d.text,
            chunks=[Chunk(chunk_id=c.chunk_id, chunk_index=c.chunk_index, text=c.text) for c in d.chunks],
            metadata=_plain(d.metadata), source=d.source, filename=d.filename, url=d.url, mime_type=d.mime_type,
            content_hash=d.content_hash, ingested_at=d.ingested_at,
        )

    @_unicode_checked
    async def delete_document(self, doc_id: str, *, collection: str = validation.DEFAULT_COLLECTION) -> int:
        """Delete all chunks of a document; returns how many were deleted."""
        request = idx_pb.DeleteDocumentRequest(
            collection=validation.collection_name(collection), doc_id=_doc_id(doc_id)
        )
        response = await self.indexer.call("DeleteDocument", request)
        return response.deleted_chunks

    async def list_collections(self) -> list[CollectionInfo]:
        """The collections with their document and chunk counts."""
        response = await self.search_client.call("ListCollections", search_pb.ListCollectionsRequest())
        return [CollectionInfo(name=c.name, documents=c.documents, chunks=c.chunks) for c in response.collections]

    async def delete_collection(self, name: str, *, confirm: bool) -> int:
        """Delete a collection and everything in it; refuses (CONFIRMATION_REQUIRED) unless `confirm`.
        Returns how many chunks were deleted."""
        name = validation.collection_name(name, field="name")
        if not confirm:
            raise failed_precondition(
                "CONFIRMATION_REQUIRED",
                f"deleting collection {name!r} removes all of its documents; repeat with confirm=true",
                collection=name,
            )
        response = await self.indexer.call("DeleteCollection", idx_pb.DeleteCollectionRequest(name=name))
        return int(response.deleted_chunks)

    # --- health ------------------------------------------------------------------------------------------
    async def health(self, timeout: float | None = None) -> dict[str, bool]:
        """Service name -> whether its grpc.health.v1 reports SERVING; all checked in parallel."""
        timeout = self.settings.gateway_ready_timeout_seconds if timeout is None else timeout
        clients = self.services
        answers = await asyncio.gather(*(c.check_health(timeout=timeout) for c in clients.values()))
        return dict(zip(clients, answers, strict=True))


# --- proto <-> model helpers ------------------------------------------------------------------------------
def _document(
    collection: str, doc_id: str | None, title: str | None, metadata: Mapping[str, Any] | None,
    *, field_prefix: str = "",
) -> idx_pb.DocumentInput:
    document = idx_pb.DocumentInput(
        collection=validation.collection_name(collection),
        doc_id=validation.doc_id(doc_id, field=f"{field_prefix}doc_id") if doc_id else "",
        title=title or "",
    )
    flat = validation.flat_metadata(dict(metadata or {}), field=f"{field_prefix}metadata")
    if flat:
        document.metadata.CopyFrom(_struct(flat))
    return document


def _doc_id(doc_id: str) -> str:
    """A document id that names an existing document: required, and valid."""
    if not doc_id:
        raise invalid_argument("DOCUMENT_ID_INVALID", "doc_id is required", field="doc_id")
    return validation.doc_id(doc_id)


def _struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values))
    return struct


def _plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain JSON values; whole numbers come back as ints (Struct carries every number as double)."""

    def unwrap(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, list):
            return [unwrap(v) for v in value]
        return value

    return {key: unwrap(value) for key, value in MessageToDict(struct).items()}


def _ingest_result(result: idx_pb.IngestResult) -> IngestResult:
    return IngestResult(
        status=_INGEST_STATUS.get(result.status, "indexed"), doc_id=result.doc_id, chunks=result.chunks,
        collection=result.collection, title=result.title, mime_type=result.mime_type, url=result.url,
        content_hash=result.content_hash,
    )


def _ingest_error(error: idx_pb.IngestError) -> RagmeshError:
    code = grpc.StatusCode.__members__.get(error.code, grpc.StatusCode.UNKNOWN)
    return RagmeshError(code, error.reason or code.name, error.message, error.domain, dict(error.metadata))


def _converted(document: conv_pb.ConvertedDocument) -> ConvertResponse:
    return ConvertResponse(
        markdown=document.markdown, title=document.title, mime_type=document.mime_type,
        size_bytes=document.size_bytes, url=document.url, filename=document.filename,
    )
