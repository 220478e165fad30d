"""The gateway's one gRPC client layer: REST routes now, MCP tools later, call these methods.

`MeshClients` holds one `ServiceClient` (one channel) per backend, created once at start-up. Every method
validates what the gateway can check itself with the shared rules (`ragmesh_common.validation`, same
reasons as the services), calls the backend with a deadline, and returns the response models of
`ragmesh_gateway.models` (made from the messages by `ragmesh_gateway.conversions`). Failures raise
`RagmeshError` carrying the callee's reason.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

import grpc
from ragmesh.answer.v1 import answer_service_pb2 as answer_pb
from ragmesh.answer.v1.answer_service_pb2_grpc import AnswerServiceStub
from ragmesh.converter.v1 import converter_service_pb2 as conv_pb
from ragmesh.converter.v1.converter_service_pb2_grpc import ConverterServiceStub
from ragmesh.embedder.v1.embedder_service_pb2_grpc import EmbedderServiceStub
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.graph.v1.graph_service_pb2_grpc import GraphServiceStub
from ragmesh.indexer.v1 import indexer_service_pb2 as idx_pb
from ragmesh.indexer.v1.indexer_service_pb2_grpc import IndexerServiceStub
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh.search.v1.search_service_pb2_grpc import SearchServiceStub
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, failed_precondition, invalid_argument
from ragmesh_common.messages import struct
from ragmesh_common.reasons import Reason

from . import conversions
from .config import GatewaySettings
from .models import (
    GRAPH_MAX_DEPTH,
    GRAPH_MAX_PATH_DEPTH,
    AskResponse,
    BatchDocument,
    CollectionInfo,
    ConvertResponse,
    Datasource,
    Document,
    EntityInput,
    Evaluation,
    ExpiredDocument,
    ExploreResponse,
    FusionName,
    GoldenQuery,
    GoldenSetResponse,
    GoldenSetSummary,
    GraphEntity,
    GraphIngestResponse,
    GraphQueryResponse,
    GraphTypesResponse,
    IngestResult,
    Job,
    OntologyResponse,
    PathsResponse,
    QueryTargetName,
    RollbackResponse,
    SearchModeName,
    SearchResponse,
    SessionResponse,
)

# Pieces of an upload streamed to the converter.
STREAM_PIECE_BYTES = 256 * 1024

P = ParamSpec("P")
T = TypeVar("T")


def _unicode_checked(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Refuse strings protobuf cannot encode (lone surrogates, which JSON can carry) as INVALID_ARGUMENT
    TEXT_INVALID instead of failing inside the gateway."""

    @functools.wraps(method)
    async def checked(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except UnicodeEncodeError:
            raise invalid_argument(
                Reason.TEXT_INVALID, "the request contains text that is not valid Unicode (a lone surrogate)"
            ) from None

    return checked


class Readable(Protocol):
    """What an upload looks like to the client layer (Starlette's UploadFile, an open file wrapper)."""

    async def read(self, size: int = -1) -> bytes: ...


class MeshClients:
    """Typed async access to the services for the REST routes and the MCP tools."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings

        def client(name: str, stub: type, timeout: float = settings.gateway_timeout_seconds) -> ServiceClient:
            return ServiceClient(
                name,
                settings.addresses[name],
                stub,
                timeout=timeout,
                max_message_bytes=settings.grpc_max_message_bytes,
                caller="gateway",
            )

        self.converter = client("converter", ConverterServiceStub)
        self.embedder = client("embedder", EmbedderServiceStub)
        self.indexer = client("indexer", IndexerServiceStub)
        self.search_client = client("search", SearchServiceStub)
        self.answer = client("answer", AnswerServiceStub, settings.gateway_answer_timeout_seconds)
        # Its channel connects on the first call: without RAGMESH_GRAPH_ENABLED nothing calls it.
        self.graph = client("graph", GraphServiceStub)

    @property
    def services(self) -> dict[str, ServiceClient]:
        """The backends the gateway uses (/ready checks each): the graph service only when the graph is enabled."""
        services = {
            "converter": self.converter,
            "embedder": self.embedder,
            "indexer": self.indexer,
            "search": self.search_client,
            "answer": self.answer,
        }
        if self.settings.graph_enabled:
            services["graph"] = self.graph
        return services

    async def close(self) -> None:
        await asyncio.gather(*(client.close() for client in {**self.services, "graph": self.graph}.values()))

    # --- ingestion ---------------------------------------------------------------------------------------
    @_unicode_checked
    async def ingest_text(
        self,
        text: str,
        *,
        collection: str = validation.DEFAULT_COLLECTION,
        doc_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Ingest plain text or Markdown."""
        document = _document(collection, doc_id, title, metadata)
        document.text = text
        return await self._ingest(document)

    @_unicode_checked
    async def ingest_file(
        self,
        data: bytes,
        *,
        filename: str,
        mime_type: str = "",
        collection: str = validation.DEFAULT_COLLECTION,
        doc_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Ingest a file's bytes; the indexer converts it first."""
        document = _document(collection, doc_id, title, metadata)
        document.file.CopyFrom(idx_pb.FileInput(data=data, filename=filename, mime_type=mime_type))
        return await self._ingest(document)

    @_unicode_checked
    async def ingest_url(
        self,
        url: str,
        *,
        collection: str = validation.DEFAULT_COLLECTION,
        doc_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
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
                results[event.index] = conversions.ingest_error(event.error)
            else:
                results[event.index] = conversions.ingest_result(event.result)
        return [
            r
            if r is not None
            else RagmeshError(
                grpc.StatusCode.INTERNAL,
                Reason.INGEST_RESULT_MISSING,
                "the indexer finished the batch without a result for this document",
                "gateway.ragmesh",
            )
            for r in results
        ]

    async def _ingest(self, document: idx_pb.DocumentInput) -> IngestResult:
        response = await self.indexer.call(
            "IngestDocument",
            idx_pb.IngestDocumentRequest(document=document),
            timeout=self.settings.gateway_ingest_timeout_seconds,
        )
        return conversions.ingest_result(response.result)

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
        return conversions.converted(response.document)

    @_unicode_checked
    async def convert_url(self, url: str) -> ConvertResponse:
        """Fetch an http(s) URL and convert it to Markdown."""
        response = await self.converter.call(
            "Convert", conv_pb.ConvertRequest(url=url), timeout=self.settings.gateway_ingest_timeout_seconds
        )
        return conversions.converted(response.document)

    # --- search and documents ----------------------------------------------------------------------------
    @_unicode_checked
    async def search(
        self,
        query: str,
        *,
        collections: Sequence[str] = (validation.DEFAULT_COLLECTION,),
        top_k: int = 5,
        mode: SearchModeName = "hybrid",
        filters: Mapping[str, Any] | None = None,
        group_by_document: bool = False,
        score_threshold: float | None = None,
        fusion: FusionName | None = None,
        rrf_k: int | None = None,
    ) -> SearchResponse:
        """Search one or more collections (the search service fans out over several and merges)."""
        names = [
            _collection(name, field=f"collections[{i}]" if len(collections) > 1 else "collection")
            for i, name in enumerate(collections)
        ]
        started = time.perf_counter()
        request = search_pb.SearchRequest(
            query=query,
            collections=names,
            top_k=top_k,
            mode=conversions.MODES[mode],
            group_by_document=group_by_document,
            fusion=conversions.FUSIONS[fusion] if fusion else search_pb.FUSION_UNSPECIFIED,
            rrf_k=rrf_k,
        )
        if filters:
            request.filters.CopyFrom(struct(filters))
        if score_threshold is not None:
            request.score_threshold = score_threshold
        response = await self.search_client.call("Search", request)
        return conversions.search_response(response, query=query, mode=mode, started=started)

    @_unicode_checked
    async def get_document(self, doc_id: str, *, collection: str = validation.DEFAULT_COLLECTION) -> Document:
        """A whole document: its chunks in order and their text joined."""
        request = search_pb.GetDocumentRequest(collection=_collection(collection), doc_id=_doc_id(doc_id))
        d = await self.search_client.call("GetDocument", request)
        return conversions.document(d)

    @_unicode_checked
    async def delete_document(self, doc_id: str, *, collection: str = validation.DEFAULT_COLLECTION) -> int:
        """Delete all chunks of a document; returns how many were deleted."""
        request = idx_pb.DeleteDocumentRequest(collection=_collection(collection), doc_id=_doc_id(doc_id))
        response = await self.indexer.call("DeleteDocument", request)
        return response.deleted_chunks

    async def list_collections(self) -> list[CollectionInfo]:
        """The collections with their document and chunk counts, and their versions."""
        response = await self.search_client.call("ListCollections", search_pb.ListCollectionsRequest())
        return [conversions.collection_info(c) for c in response.collections]

    async def delete_collection(self, name: str, *, confirm: bool) -> int:
        """Delete a collection and everything in it; refuses (CONFIRMATION_REQUIRED) unless `confirm`.
        Returns how many chunks were deleted."""
        name = _collection(name, field="name")
        if not confirm:
            raise failed_precondition(
                Reason.CONFIRMATION_REQUIRED,
                f"deleting collection {name!r} removes all of its documents; repeat with confirm=true",
                collection=name,
            )
        response = await self.indexer.call("DeleteCollection", idx_pb.DeleteCollectionRequest(name=name))
        return int(response.deleted_chunks)

    # --- golden sets and evaluations -------------------------------------------------------------------
    @_unicode_checked
    async def set_golden_set(self, collection: str, queries: Sequence[GoldenQuery]) -> GoldenSetSummary:
        """Store a collection's golden set (judged queries), replacing the one it had."""
        request = search_pb.SetGoldenSetRequest(collection=_collection(collection, field="name"))
        for i, q in enumerate(queries):
            for doc_id, grade in q.relevant.items():
                if not 0 <= grade <= validation.GOLDEN_MAX_GRADE:  # before it meets protobuf's int32
                    raise invalid_argument(
                        Reason.GOLDEN_GRADE_INVALID,
                        f"queries[{i}]: document {doc_id[:80]!r} has grade {grade}; grades are "
                        f"0..{validation.GOLDEN_MAX_GRADE} (0: judged not relevant)",
                        field=f"queries[{i}].relevant",
                        query_id=q.query_id[:80],
                        grade=grade,
                    )
            request.queries.append(conversions.golden_query_message(q))
        r = await self.search_client.call("SetGoldenSet", request)
        return conversions.golden_set_summary(r)

    async def get_golden_set(self, collection: str) -> GoldenSetResponse:
        """A collection's golden set (NOT_FOUND GOLDEN_SET_NOT_FOUND when it has none)."""
        request = search_pb.GetGoldenSetRequest(collection=_collection(collection, field="name"))
        r = await self.search_client.call("GetGoldenSet", request)
        return conversions.golden_set(r)

    async def delete_golden_set(self, collection: str) -> int:
        """Remove a collection's golden set; returns how many queries it held."""
        request = search_pb.DeleteGoldenSetRequest(collection=_collection(collection, field="name"))
        return (await self.search_client.call("DeleteGoldenSet", request)).deleted_queries

    async def evaluate_collection(
        self, collection: str, modes: Sequence[SearchModeName] = (), version: int | None = None
    ) -> list[Evaluation]:
        """Score a collection's current index (or another `version` it keeps) on its golden set (each mode;
        default: the service's default mode); the active version's scores are added to its history. Runs every
        golden query, so it has the ingest deadline."""
        request = search_pb.EvaluateCollectionRequest(
            collection=_collection(collection, field="name"),
            modes=[conversions.MODES[m] for m in modes],
            version=version or 0,
        )
        response = await self.search_client.call(
            "EvaluateCollection", request, timeout=self.settings.gateway_ingest_timeout_seconds
        )
        return [conversions.evaluation(e) for e in response.evaluations]

    async def list_evaluations(
        self, collection: str, *, mode: SearchModeName | None = None, limit: int = 0
    ) -> list[Evaluation]:
        """A collection's evaluation history, oldest first (one mode's when given; the newest `limit`)."""
        request = search_pb.ListEvaluationsRequest(
            collection=_collection(collection, field="name"),
            mode=conversions.MODES[mode] if mode else search_pb.SEARCH_MODE_UNSPECIFIED,
            limit=limit,
        )
        return [
            conversions.evaluation(e) for e in (await self.search_client.call("ListEvaluations", request)).evaluations
        ]

    # --- jobs ---------------------------------------------------------------------------------------------
    @_unicode_checked
    async def create_job(
        self,
        *,
        collection: str = validation.DEFAULT_COLLECTION,
        urls: Sequence[str] | None = None,
        documents: Sequence[BatchDocument] | None = None,
        folder: str | None = None,
        archive: bytes | None = None,
        archive_name: str = "",
        prune: bool = False,
        fresh_for_seconds: int = 0,
    ) -> Job:
        """Queue a bulk ingestion job (one source) and return it at once."""
        request = idx_pb.CreateJobRequest(
            collection=_collection(collection), prune=prune, fresh_for_seconds=fresh_for_seconds
        )
        if urls is not None:
            request.urls.urls.extend(urls)
        elif documents is not None:
            for i, doc in enumerate(documents):
                item = _document(collection, doc.doc_id, doc.title, doc.metadata, field_prefix=f"documents[{i}].")
                item.text = doc.text
                request.documents.documents.append(item)
        elif folder is not None:
            request.folder = folder
        elif archive is not None:
            request.archive.CopyFrom(idx_pb.Archive(data=archive, filename=archive_name))
        response = await self.indexer.call("CreateJob", request, timeout=self.settings.gateway_ingest_timeout_seconds)
        return conversions.job_model(response.job)

    async def get_job(self, job_id: str) -> Job:
        """A job with its counts, per-document errors and skipped files."""
        return conversions.job_model((await self.indexer.call("GetJob", idx_pb.GetJobRequest(job_id=job_id))).job)

    async def list_jobs(self, limit: int = 50) -> list[Job]:
        """Recent jobs, newest first (without per-document details)."""
        response = await self.indexer.call("ListJobs", idx_pb.ListJobsRequest(limit=limit))
        return [conversions.job_model(j) for j in response.jobs]

    async def cancel_job(self, job_id: str) -> Job:
        """Cancel a job: documents not started yet are not ingested."""
        return conversions.job_model((await self.indexer.call("CancelJob", idx_pb.CancelJobRequest(job_id=job_id))).job)

    async def list_datasources(self, collection: str | None = None) -> list[Datasource]:
        """The folders and URL lists synced into collections (one collection's, when named)."""
        name = _collection(collection) if collection is not None else ""
        response = await self.indexer.call("ListDatasources", idx_pb.ListDatasourcesRequest(collection=name))
        return [conversions.datasource(d) for d in response.datasources]

    async def sync_datasources(self, collection: str | None = None, *, everything: bool = False) -> list[Job]:
        """Queue a job for each datasource that is due (each one with `everything`; one collection's, when
        named)."""
        name = _collection(collection) if collection is not None else ""
        response = await self.indexer.call(
            "SyncDatasources",
            idx_pb.SyncDatasourcesRequest(collection=name, all=everything),
            timeout=self.settings.gateway_ingest_timeout_seconds,
        )
        return [conversions.job_model(j) for j in response.jobs]

    async def expired_documents(self, collection: str) -> list[ExpiredDocument]:
        """Documents of a collection whose fresh_until has passed."""
        request = idx_pb.ListExpiredDocumentsRequest(collection=_collection(collection))
        response = await self.indexer.call("ListExpiredDocuments", request)
        return [conversions.expired_document(d) for d in response.documents]

    async def prune_expired(self, collection: str) -> list[str]:
        """Delete the documents of a collection whose fresh_until has passed; returns their ids."""
        request = idx_pb.PruneExpiredDocumentsRequest(collection=_collection(collection))
        return list((await self.indexer.call("PruneExpiredDocuments", request)).doc_ids)

    # --- versions ------------------------------------------------------------------------------------------
    async def reindex_collection(
        self,
        collection: str,
        *,
        chunk_tokens: int | None = None,
        chunk_overlap_tokens: int | None = None,
        model: str | None = None,
        tolerance: float | None = None,
        force: bool = False,
        retention_seconds: int | None = None,
    ) -> Job:
        """Queue a re-index of a collection into a new version (settings left out keep the current version's);
        returns the job at once. Not retried: a second call would be refused as REINDEX_IN_PROGRESS."""
        name = _collection(collection, field="name")
        if chunk_tokens is not None and chunk_overlap_tokens is not None and chunk_overlap_tokens >= chunk_tokens // 2:
            raise invalid_argument(  # the indexer's reason; it checks a lone overlap against the tokens in force
                Reason.CHUNK_OVERLAP_OUT_OF_RANGE,
                f"chunk_overlap_tokens must be at least 0 and less than half of chunk_tokens ({chunk_tokens})",
                field="chunk_overlap_tokens",
            )
        request = idx_pb.ReindexCollectionRequest(
            collection=name,
            chunk_tokens=chunk_tokens,
            chunk_overlap_tokens=chunk_overlap_tokens,
            model=model or "",
            tolerance=tolerance,
            force=force,
            retention_seconds=retention_seconds,
        )
        return conversions.job_model((await self.indexer.call("ReindexCollection", request)).job)

    async def rollback_collection(self, collection: str) -> RollbackResponse:
        """Switch a collection back to the version it used before (while that one is kept)."""
        request = idx_pb.RollbackCollectionRequest(collection=_collection(collection, field="name"))
        response = await self.indexer.call("RollbackCollection", request)
        return conversions.rollback(response, request.collection)

    # --- answers and sessions -----------------------------------------------------------------------------
    @staticmethod
    def _question(
        query: str,
        collections: Sequence[str],
        top_k: int,
        filters: Mapping[str, Any] | None,
        session_id: str | None,
    ) -> dict[str, Any]:
        names = [
            validation.collection_name(name, field=f"collections[{i}]" if len(collections) > 1 else "collection")
            for i, name in enumerate(collections)
        ]
        question: dict[str, Any] = {
            "query": query,
            "collections": names,
            "top_k": top_k,
            "session_id": session_id or "",
        }
        if filters:
            question["filters"] = struct(filters)
        return question

    @_unicode_checked
    async def ask(
        self,
        query: str,
        *,
        collections: Sequence[str] = (validation.DEFAULT_COLLECTION,),
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AskResponse:
        """Answer a question with cited sources (NOT_FOUND NO_RESULTS when nothing relevant is found)."""
        started = time.perf_counter()
        request = answer_pb.AskRequest(**self._question(query, collections, top_k, filters, session_id))
        response = await self.answer.call("Ask", request)
        return conversions.asked(response.answer, started)

    async def ask_stream(
        self,
        query: str,
        *,
        collections: Sequence[str] = (validation.DEFAULT_COLLECTION,),
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AsyncGenerator[str | AskResponse, None]:
        """Answer a question, yielding the text as it is written, then the whole AskResponse."""
        started = time.perf_counter()
        try:
            request = answer_pb.AskStreamRequest(**self._question(query, collections, top_k, filters, session_id))
        except UnicodeEncodeError:
            raise invalid_argument(Reason.TEXT_INVALID, "the request contains text that is not valid Unicode") from None
        async for event in self.answer.stream("AskStream", request):
            if event.WhichOneof("event") == "answer":
                yield conversions.asked(event.answer, started)
            else:
                yield event.delta

    async def get_session(self, session_id: str) -> SessionResponse:
        """A conversation's stored turns (NOT_FOUND SESSION_NOT_FOUND when there is none)."""
        response = await self.answer.call("GetSession", answer_pb.GetSessionRequest(session_id=session_id))
        return conversions.session(response)

    async def delete_session(self, session_id: str) -> int:
        """Forget a conversation; returns how many turns it had."""
        response = await self.answer.call("DeleteSession", answer_pb.DeleteSessionRequest(session_id=session_id))
        return response.deleted_turns

    # --- graph ---------------------------------------------------------------------------------------------
    # Ids, types and queries are checked by the graph service (ENTITY_INVALID, QUERY_INVALID, ...): its reasons
    # reach the caller as they are. Depths are checked here too: the service takes 0 as its default, which the
    # API's callers may not send.
    async def graph_types(self, collection: str) -> GraphTypesResponse:
        """A collection's datasources (from the indexer) and its graph's entity and relation types (empty
        when it has no graph), fetched in parallel."""
        name = _collection(collection)

        async def graphs_of() -> graph_pb.ListEntityTypesResponse:
            try:
                return await self.graph.call("ListEntityTypes", graph_pb.ListEntityTypesRequest(collection=name))
            except RagmeshError as exc:
                if exc.code == grpc.StatusCode.NOT_FOUND:  # no graph (yet)
                    return graph_pb.ListEntityTypesResponse()
                raise

        datasources, graphs = await asyncio.gather(self.list_datasources(name), graphs_of())
        info = next((conversions.graph_info(g) for g in graphs.graphs if g.collection == name), None)
        return GraphTypesResponse(
            collection=name,
            datasources=datasources,
            entity_types=info.entity_types if info else [],
            relations=info.relations if info else [],
            entities=info.entities if info else 0,
        )

    @_unicode_checked
    async def explore_ontology(self, collection: str, entity_type: str, *, depth: int = 1) -> OntologyResponse:
        """An entity type and the relation types within `depth` (1..3) hops of it."""
        request = graph_pb.ExploreOntologyRequest(
            collection=_collection(collection), entity_type=entity_type, depth=_depth(depth, GRAPH_MAX_DEPTH)
        )
        return conversions.ontology(await self.graph.call("ExploreOntology", request))

    @_unicode_checked
    async def explore_entity(
        self, collection: str, entity_id: str, *, depth: int = 1, limit: int = 0
    ) -> ExploreResponse:
        """An entity and its neighbours within `depth` (1..3) hops, nearest first (at most `limit`; 0: 100)."""
        request = graph_pb.ExploreEntityRequest(
            collection=_collection(collection), entity_id=entity_id, depth=_depth(depth, GRAPH_MAX_DEPTH), limit=limit
        )
        return conversions.explored(await self.graph.call("ExploreEntity", request))

    @_unicode_checked
    async def get_entity(self, collection: str, entity_id: str) -> GraphEntity:
        """An entity with every property and every relation, in both directions."""
        request = graph_pb.GetEntityRequest(collection=_collection(collection), entity_id=entity_id)
        return conversions.graph_entity((await self.graph.call("GetEntity", request)).entity)

    @_unicode_checked
    async def shortest_paths(
        self, collection: str, from_type: str, to_type: str, *, max_depth: int = 4
    ) -> PathsResponse:
        """Every shortest path of relation types between two entity types (relations in either direction)."""
        request = graph_pb.ShortestPathsRequest(
            collection=_collection(collection),
            from_type=from_type,
            to_type=to_type,
            max_depth=_depth(max_depth, GRAPH_MAX_PATH_DEPTH, field="max_depth"),
        )
        return conversions.type_paths(await self.graph.call("ShortestPaths", request))

    @_unicode_checked
    async def graph_query(
        self,
        collection: str,
        query: str,
        *,
        target: QueryTargetName = "data",
        parameters: Mapping[str, Any] | None = None,
        row_limit: int | None = None,
    ) -> GraphQueryResponse:
        """Run one read-only Cypher statement (PERMISSION_DENIED QUERY_NOT_READ_ONLY when it writes)."""
        request = graph_pb.QueryRequest(
            collection=_collection(collection),
            query=query,
            target=conversions.QUERY_TARGETS[target],
            row_limit=row_limit or 0,
        )
        if parameters:
            request.parameters.CopyFrom(struct(parameters))
        return conversions.query_rows(await self.graph.call("Query", request))

    @_unicode_checked
    async def ingest_entities(
        self,
        collection: str,
        *,
        entities: Sequence[EntityInput] = (),
        files: Sequence[tuple[str, bytes, str]] = (),
        max_property_chars: int | None = None,
    ) -> GraphIngestResponse:
        """Store entities, given or read from files ((filename, bytes, mime type or ""): Kubernetes YAML/JSON,
        JSON Lines of entities), in the collection's graph and as searchable documents."""
        request = idx_pb.IngestEntitiesRequest(
            collection=_collection(collection),
            entities=[conversions.entity_input_message(e) for e in entities],
            files=[idx_pb.FileInput(data=data, filename=name, mime_type=mime) for name, data, mime in files],
            max_property_chars=max_property_chars or 0,
        )
        response = await self.indexer.call(
            "IngestEntities", request, timeout=self.settings.gateway_ingest_timeout_seconds
        )
        return conversions.entities_ingested(response)

    @_unicode_checked
    async def delete_entities(self, collection: str, ids: Sequence[str]) -> list[str]:
        """Delete entities (with their child entities and relations) from both stores; returns the ids deleted."""
        request = idx_pb.DeleteEntitiesRequest(collection=_collection(collection), ids=ids)
        return list((await self.indexer.call("DeleteEntities", request)).deleted_ids)

    # --- health ------------------------------------------------------------------------------------------
    async def health(self, timeout: float | None = None) -> dict[str, bool]:
        """Service name -> whether its grpc.health.v1 reports SERVING; all checked in parallel."""
        timeout = self.settings.gateway_ready_timeout_seconds if timeout is None else timeout
        clients = self.services
        answers = await asyncio.gather(*(c.check_health(timeout=timeout) for c in clients.values()))
        return dict(zip(clients, answers, strict=True))


# --- requests ------------------------------------------------------------------------------------------------
def _document(
    collection: str,
    doc_id: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
    *,
    field_prefix: str = "",
) -> idx_pb.DocumentInput:
    document = idx_pb.DocumentInput(
        collection=_collection(collection),
        doc_id=validation.doc_id(doc_id, field=f"{field_prefix}doc_id") if doc_id is not None else "",
        title=title or "",
    )
    flat = validation.flat_metadata(dict(metadata or {}), field=f"{field_prefix}metadata")
    if flat:
        document.metadata.CopyFrom(struct(flat))
    return document


def _collection(name: str, *, field: str = "collection") -> str:
    """A collection the caller named: valid by the shared rule, and not empty (the API's own default is
    "default"; an empty name is a mistake, not a request for the default)."""
    if name == "":
        raise invalid_argument(
            Reason.COLLECTION_NAME_INVALID, "the collection name is empty", field=field, collection=""
        )
    return validation.collection_name(name, field=field)


def _depth(depth: int, maximum: int, *, field: str = "depth") -> int:
    """A graph walk's depth: 1..maximum, else INVALID_ARGUMENT DEPTH_OUT_OF_RANGE (the graph service's reason)."""
    if not 1 <= depth <= maximum:
        raise invalid_argument(
            Reason.DEPTH_OUT_OF_RANGE, f"{field} must be 1..{maximum}, not {depth}", field=field, maximum=maximum
        )
    return depth


def _doc_id(doc_id: str) -> str:
    """A document id that names an existing document: required, and valid."""
    if not doc_id:
        raise invalid_argument(Reason.DOCUMENT_ID_INVALID, "doc_id is required", field="doc_id")
    return validation.doc_id(doc_id)
