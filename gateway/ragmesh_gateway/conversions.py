"""Proto <-> model conversions at the gateway's boundary: every response message of the services as the REST/MCP
models of `ragmesh_gateway.models`, and the models the gateway sends on as messages. `MeshClients` calls
these and nothing else maps a message; `tests/test_gateway_conversions.py` checks that every field of every
message read here reaches its model (or is listed there as not exposed, with the reason)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Literal, cast, get_args

import grpc
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from ragmesh.answer.v1 import answer_service_pb2 as answer_pb
from ragmesh.converter.v1 import converter_service_pb2 as conv_pb
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.indexer.v1 import indexer_service_pb2 as idx_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError

from .errors import ErrorObject, error_object
from .models import (
    AnswerUsage,
    AskResponse,
    AskSource,
    Chunk,
    CollectionInfo,
    CollectionVersion,
    ConvertResponse,
    Datasource,
    Direction,
    Document,
    EntityInput,
    EntityType,
    Evaluation,
    ExpiredDocument,
    ExploreResponse,
    FusionName,
    GoldenQuery,
    GoldenSetResponse,
    GoldenSetSummary,
    GraphEntity,
    GraphInfo,
    GraphIngestResponse,
    GraphQueryResponse,
    GraphRelation,
    IndexSettings,
    IngestResult,
    Job,
    JobDocumentError,
    JobStateName,
    MatchedChunk,
    Neighbour,
    OntologyResponse,
    PathsResponse,
    QueryTargetName,
    ReindexDecision,
    ReindexInfo,
    RollbackResponse,
    SearchHit,
    SearchModeName,
    SearchResponse,
    SessionResponse,
    SessionTurn,
    SkippedFile,
    SourceLocation,
    TypePath,
    TypeRelation,
    VersionStateName,
)

# --- enums ------------------------------------------------------------------------------------------------
MODES: dict[SearchModeName, search_pb.SearchMode] = {
    "hybrid": search_pb.SEARCH_MODE_HYBRID,
    "dense": search_pb.SEARCH_MODE_DENSE,
    "sparse": search_pb.SEARCH_MODE_SPARSE,
    "semantic": search_pb.SEARCH_MODE_SEMANTIC,
    "keyword": search_pb.SEARCH_MODE_KEYWORD,
}
MODE_NAMES = {value: name for name, value in MODES.items()}
FUSIONS: dict[FusionName, search_pb.Fusion] = {
    "rrf": search_pb.FUSION_RRF,
    "dbsf": search_pb.FUSION_DBSF,
    "relative_score": search_pb.FUSION_RELATIVE_SCORE,
    "adaptive": search_pb.FUSION_ADAPTIVE,
}
FUSION_NAMES = {value: name for name, value in FUSIONS.items()}
INGEST_STATUS: dict[int, Literal["indexed", "unchanged"]] = {
    idx_pb.INGEST_STATUS_INDEXED: "indexed",
    idx_pb.INGEST_STATUS_UNCHANGED: "unchanged",
}
GENERATORS: dict[int, Literal["model", "extractive"]] = {
    answer_pb.GENERATOR_MODEL: "model",
    answer_pb.GENERATOR_EXTRACTIVE: "extractive",
}
JOB_STATES: dict[int, JobStateName] = {
    idx_pb.JOB_STATE_QUEUED: "queued",
    idx_pb.JOB_STATE_RUNNING: "running",
    idx_pb.JOB_STATE_DONE: "done",
    idx_pb.JOB_STATE_FAILED: "failed",
    idx_pb.JOB_STATE_CANCELLED: "cancelled",
    idx_pb.JOB_STATE_REJECTED: "rejected",
}
DECISIONS: dict[str, ReindexDecision] = {d: d for d in get_args(ReindexDecision)}
VERSION_STATES: dict[str, VersionStateName] = {s: s for s in get_args(VersionStateName)}


# --- values -------------------------------------------------------------------------------------------------
def plain(message: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain JSON values; whole numbers come back as ints (Struct carries every number as double)."""

    def unwrap(value: Any) -> Any:
        if isinstance(value, float):
            return validation.whole_number(value)
        if isinstance(value, list):
            return [unwrap(v) for v in value]
        return value

    return {key: unwrap(value) for key, value in MessageToDict(message).items()}


def location(message: Any) -> SourceLocation | None:
    """The `location` field of a search result or a chunk (None when unset)."""
    if not message.HasField("location"):
        return None
    loc = message.location
    return SourceLocation(path=loc.path, language=loc.language, start_line=loc.start_line, end_line=loc.end_line)


def _took_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


# --- converter ------------------------------------------------------------------------------------------------
def converted(document: conv_pb.ConvertedDocument) -> ConvertResponse:
    return ConvertResponse(
        markdown=document.markdown,
        title=document.title,
        mime_type=document.mime_type,
        size_bytes=document.size_bytes,
        url=document.url,
        filename=document.filename,
    )


# --- indexer: ingestion ---------------------------------------------------------------------------------------
def ingest_result(result: idx_pb.IngestResult) -> IngestResult:
    return IngestResult(
        status=INGEST_STATUS.get(result.status, "indexed"),
        doc_id=result.doc_id,
        chunks=result.chunks,
        collection=result.collection,
        title=result.title,
        mime_type=result.mime_type,
        url=result.url,
        content_hash=result.content_hash,
    )


def ingest_error(error: idx_pb.IngestError) -> RagmeshError:
    code = grpc.StatusCode.__members__.get(error.code, grpc.StatusCode.UNKNOWN)
    return RagmeshError(code, error.reason or code.name, error.message, error.domain, dict(error.metadata))


# --- indexer: jobs, datasources, versions -------------------------------------------------------------------------
def job_model(job: idx_pb.Job) -> Job:
    return Job(
        job_id=job.job_id,
        collection=job.collection,
        state=JOB_STATES.get(job.state, "queued"),
        kind=job.kind,
        source=job.source,
        total=job.total,
        indexed=job.indexed,
        unchanged=job.unchanged,
        failed=job.failed,
        skipped=job.skipped,
        deleted=job.deleted,
        bytes=job.bytes,
        errors=[
            JobDocumentError(document=e.document, error=ErrorObject.model_validate(error_object(ingest_error(e.error))))
            for e in job.errors
        ],
        skipped_files=[SkippedFile(path=s.path, reason=s.reason) for s in job.skipped_files],
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        documents_per_second=round(job.documents_per_second, 3),
        bytes_per_second=round(job.bytes_per_second, 1),
        datasource_id=job.datasource_id,
        prune=job.prune,
        error=job.error,
        reindex=reindex_info(job.reindex) if job.HasField("reindex") else None,
    )


def datasource(d: idx_pb.Datasource) -> Datasource:
    return Datasource(
        datasource_id=d.datasource_id,
        collection=d.collection,
        kind=cast("Literal['folder', 'manifest', 'urls']", d.kind),  # checked by the model, as any field
        folder=d.folder,
        host=d.host,
        urls=list(d.urls),
        prune=d.prune,
        fresh_for_seconds=d.fresh_for_seconds,
        fresh_until=d.fresh_until,
        last_job_id=d.last_job_id,
        last_synced_at=d.last_synced_at,
        due=d.due,
    )


def expired_document(d: idx_pb.ExpiredDocument) -> ExpiredDocument:
    return ExpiredDocument(doc_id=d.doc_id, fresh_until=d.fresh_until, datasource_id=d.datasource_id)


def rollback(response: idx_pb.RollbackCollectionResponse, collection: str) -> RollbackResponse:
    """The rollback's answer; `collection` (the one asked for) when the response names none."""
    return RollbackResponse(
        collection=response.collection or collection,
        version=response.version,
        replaced_version=response.replaced_version,
    )


def reindex_info(info: idx_pb.ReindexInfo) -> ReindexInfo:
    return ReindexInfo(
        from_version=info.from_version,
        to_version=info.to_version,
        settings=index_settings(info.settings),
        tolerance=info.tolerance,
        force=info.force,
        retention_seconds=info.retention_seconds,
        decision=DECISIONS.get(info.decision),
        current=evaluation(info.current) if info.HasField("current") else None,
        candidate=evaluation(info.candidate) if info.HasField("candidate") else None,
    )


def index_settings(s: search_pb.IndexSettings) -> IndexSettings:
    return IndexSettings(
        model=s.model,
        model_id=s.model_id,
        dimension=s.dimension,
        sparse_model_id=s.sparse_model_id,
        chunk_tokens=s.chunk_tokens,
        chunk_overlap_tokens=s.chunk_overlap_tokens,
        chunker_fingerprint=s.chunker_fingerprint,
    )


# --- search: collections, documents, results ----------------------------------------------------------------------
def collection_version(v: search_pb.CollectionVersion) -> CollectionVersion:
    return CollectionVersion(
        version=v.version,
        state=VERSION_STATES.get(v.state, "previous"),
        settings=index_settings(v.settings) if v.HasField("settings") else None,
        created_at=v.created_at,
        retained_until=v.retained_until,
        job_id=v.job_id,
        documents=v.documents,
        chunks=v.chunks,
    )


def collection_info(c: search_pb.CollectionInfo) -> CollectionInfo:
    return CollectionInfo(
        name=c.name,
        documents=c.documents,
        chunks=c.chunks,
        version=c.version or 1,
        versions=[collection_version(v) for v in c.versions],
    )


def search_hit(r: search_pb.SearchResult) -> SearchHit:
    return SearchHit(
        doc_id=r.doc_id,
        chunk_id=r.chunk_id,
        chunk_index=r.chunk_index,
        text=r.text,
        score=r.score,
        title=r.title,
        collection=r.collection,
        metadata=plain(r.metadata),
        source=r.source,
        filename=r.filename,
        url=r.url,
        mime_type=r.mime_type,
        location=location(r),
    )


def search_response(
    response: search_pb.SearchResponse, *, query: str, mode: SearchModeName, started: float
) -> SearchResponse:
    """The search's answer; `query` and `mode` (those asked for) when the response leaves them out, and the time
    since `started` (time.perf_counter())."""
    return SearchResponse(
        query=response.query or query,
        mode=MODE_NAMES.get(response.mode, mode),
        fusion=FUSION_NAMES.get(response.fusion),
        results=[search_hit(r) for r in response.results],
        took_ms=_took_ms(started),
        versions=dict(response.versions),
    )


def document(d: search_pb.GetDocumentResponse) -> Document:
    return Document(
        doc_id=d.doc_id,
        collection=d.collection,
        title=d.title,
        text=d.text,
        chunks=[
            Chunk(chunk_id=c.chunk_id, chunk_index=c.chunk_index, text=c.text, location=location(c)) for c in d.chunks
        ],
        metadata=plain(d.metadata),
        source=d.source,
        filename=d.filename,
        url=d.url,
        mime_type=d.mime_type,
        content_hash=d.content_hash,
        ingested_at=d.ingested_at,
    )


# --- search: golden sets and evaluations ----------------------------------------------------------------------------
def golden_query_message(q: GoldenQuery) -> search_pb.GoldenQuery:
    return search_pb.GoldenQuery(query_id=q.query_id, text=q.text, relevant=q.relevant)


def golden_query(q: search_pb.GoldenQuery) -> GoldenQuery:
    return GoldenQuery(query_id=q.query_id, text=q.text, relevant=dict(q.relevant))


def golden_set_summary(r: search_pb.SetGoldenSetResponse) -> GoldenSetSummary:
    return GoldenSetSummary(
        collection=r.collection,
        queries=r.queries,
        judgments=r.judgments,
        updated_at=r.updated_at,
        golden_set_id=r.golden_set_id,
    )


def golden_set(r: search_pb.GetGoldenSetResponse) -> GoldenSetResponse:
    return GoldenSetResponse(
        collection=r.collection,
        updated_at=r.updated_at,
        golden_set_id=r.golden_set_id,
        queries=[golden_query(q) for q in r.queries],
    )


def evaluation(e: search_pb.Evaluation) -> Evaluation:
    return Evaluation(
        collection=e.collection,
        evaluated_at=e.evaluated_at,
        mode=MODE_NAMES.get(e.mode, "hybrid"),
        fusion=FUSION_NAMES.get(e.fusion),
        queries=e.queries,
        ndcg_at_10=e.ndcg_at_10,
        recall_at_10=e.recall_at_10,
        mrr_at_10=e.mrr_at_10,
        documents=e.documents,
        chunks=e.chunks,
        model=e.model,
        golden_set_id=e.golden_set_id,
        took_ms=e.took_ms,
        version=e.version,
    )


# --- answer ---------------------------------------------------------------------------------------------------------
def source(s: answer_pb.Source) -> AskSource:
    return AskSource(
        number=s.number,
        doc_id=s.doc_id,
        collection=s.collection,
        title=s.title,
        url=s.url,
        filename=s.filename,
        cited=s.cited,
        snippet=s.snippet,
        relevance_score=round(s.relevance_score, 6),
    )


def matched_chunk(c: answer_pb.MatchedChunk) -> MatchedChunk:
    return MatchedChunk(
        chunk_id=c.chunk_id,
        doc_id=c.doc_id,
        collection=c.collection,
        chunk_index=c.chunk_index,
        text=c.text,
        relevance_score=round(c.relevance_score, 6),
        source=c.source_number,
    )


def asked(answer: answer_pb.Answer, started: float) -> AskResponse:
    """An answer, with the time since `started` (time.perf_counter())."""
    return AskResponse(
        answer=answer.text,
        sources=[source(s) for s in answer.sources],
        matched_chunks=[matched_chunk(c) for c in answer.matched_chunks],
        session_id=answer.session_id,
        generator=GENERATORS.get(answer.generator, "model"),
        model=answer.model,
        standalone_query=answer.standalone_query,
        usage=AnswerUsage(input_tokens=answer.input_tokens, output_tokens=answer.output_tokens),
        took_ms=_took_ms(started),
    )


def session_turn(t: answer_pb.Turn) -> SessionTurn:
    return SessionTurn(
        query=t.query,
        standalone_query=t.standalone_query,
        answer=t.answer,
        sources=[source(s) for s in t.sources],
        generator=GENERATORS.get(t.generator, "model"),
        created_at=t.created_at,
    )


def session(response: answer_pb.GetSessionResponse) -> SessionResponse:
    return SessionResponse(session_id=response.session_id, turns=[session_turn(t) for t in response.turns])


# --- graph ------------------------------------------------------------------------------------------------------
DIRECTIONS: dict[int, Direction] = {graph_pb.DIRECTION_OUTGOING: "outgoing", graph_pb.DIRECTION_INCOMING: "incoming"}
QUERY_TARGETS: dict[QueryTargetName, graph_pb.QueryTarget] = {
    "data": graph_pb.QUERY_TARGET_DATA,
    "ontology": graph_pb.QUERY_TARGET_ONTOLOGY,
}


def _value(value: struct_pb2.Value) -> Any:
    """A Value as a plain JSON value, whole numbers as ints at every depth (a node in a query's rows is an
    object of its properties)."""

    def unwrap(v: Any) -> Any:
        if isinstance(v, float):
            return validation.whole_number(v)
        if isinstance(v, list):
            return [unwrap(x) for x in v]
        if isinstance(v, dict):
            return {k: unwrap(x) for k, x in v.items()}
        return v

    return unwrap(MessageToDict(value))


def _properties(properties: Iterable[graph_pb.Property]) -> dict[str, Any]:
    return {p.name: _value(p.value) for p in properties}


def graph_relation(r: graph_pb.Relation) -> GraphRelation:
    return GraphRelation(
        type=r.type,
        target_id=r.target_id,
        target_type=r.target_type,
        direction=DIRECTIONS.get(r.direction, "outgoing"),
        index=r.index if r.HasField("index") else None,
    )


def graph_entity(e: graph_pb.Entity) -> GraphEntity:
    return GraphEntity(
        id=e.id,
        type=e.type,
        primary_key=_properties(e.primary_key),
        properties=_properties(e.properties),
        labels=list(e.labels),
        alternative_keys=list(e.alternative_keys),
        relations=[graph_relation(r) for r in e.relations],
        parent_id=e.parent_id,
    )


def entity_type(t: graph_pb.EntityType) -> EntityType:
    return EntityType(name=t.name, count=t.count, properties=list(t.properties), primary_key=list(t.primary_key))


def type_relation(r: graph_pb.TypeRelation) -> TypeRelation:
    return TypeRelation(from_type=r.from_type, type=r.type, to_type=r.to_type, count=r.count, depth=r.depth)


def graph_info(g: graph_pb.GraphInfo) -> GraphInfo:
    return GraphInfo(
        collection=g.collection,
        entity_types=[entity_type(t) for t in g.entity_types],
        relations=[type_relation(r) for r in g.relations],
        entities=g.entities,
    )


def ontology(r: graph_pb.ExploreOntologyResponse) -> OntologyResponse:
    return OntologyResponse(entity_type=entity_type(r.entity_type), relations=[type_relation(x) for x in r.relations])


def neighbour(n: graph_pb.Neighbour) -> Neighbour:
    return Neighbour(
        id=n.id,
        type=n.type,
        relation=n.relation,
        direction=DIRECTIONS.get(n.direction, "outgoing"),
        depth=n.depth,
        via_id=n.via_id,
    )


def explored(r: graph_pb.ExploreEntityResponse) -> ExploreResponse:
    return ExploreResponse(
        entity=graph_entity(r.entity), neighbours=[neighbour(n) for n in r.neighbours], truncated=r.truncated
    )


def type_paths(r: graph_pb.ShortestPathsResponse) -> PathsResponse:
    return PathsResponse(paths=[TypePath(cypher=p.cypher, hops=[type_relation(h) for h in p.hops]) for p in r.paths])


def query_rows(r: graph_pb.QueryResponse) -> GraphQueryResponse:
    return GraphQueryResponse(
        columns=list(r.columns),
        rows=[[_value(v) for v in row.values] for row in r.rows],
        truncated=r.truncated,
    )


def entities_ingested(r: idx_pb.IngestEntitiesResponse) -> GraphIngestResponse:
    return GraphIngestResponse(
        entities=r.entities,
        relations=r.relations,
        entity_types=dict(sorted(r.entity_types.items())),
        relation_types=dict(sorted(r.relation_types.items())),
        entity_ids=list(r.entity_ids),
        dangling_relations=list(r.dangling_relations),
        omitted_properties=list(r.omitted_properties),
    )


def entity_input_message(e: EntityInput) -> idx_pb.EntityInput:
    message = idx_pb.EntityInput(
        type=e.type,
        primary_key=e.primary_key,
        labels=e.labels,
        alternative_keys=e.alternative_keys,
        relations=[idx_pb.EntityRelation(type=r.type, target_id=r.target_id) for r in e.relations],
    )
    message.properties.update(e.properties)
    return message
