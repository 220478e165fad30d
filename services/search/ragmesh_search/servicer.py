"""gRPC SearchService: maps requests to the domain (`service.Searcher`) and results back to protos."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from google.protobuf.json_format import MessageToDict
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc
from ragmesh_common.errors import invalid_argument
from ragmesh_common.messages import message_from, struct
from ragmesh_common.reasons import Reason
from ragmesh_common.telemetry import Attr, annotate
from ragmesh_store.base import Fusion

from .fusion import SearchMode
from .golden import GoldenSets
from .records import Evaluation, GoldenQuery
from .service import Searcher, SearchIn, VersionOut

DOMAIN = "search.ragmesh"
_MODES: dict[pb.SearchMode, SearchMode] = {
    pb.SEARCH_MODE_HYBRID: "hybrid",
    pb.SEARCH_MODE_DENSE: "dense",
    pb.SEARCH_MODE_SPARSE: "sparse",
    pb.SEARCH_MODE_SEMANTIC: "semantic",
    pb.SEARCH_MODE_KEYWORD: "keyword",
}
_MODE_ENUMS: dict[str, pb.SearchMode] = {name: value for value, name in _MODES.items()}
_FUSIONS: dict[pb.Fusion, Fusion] = {
    pb.FUSION_RRF: "rrf",
    pb.FUSION_DBSF: "dbsf",
    pb.FUSION_RELATIVE_SCORE: "relative_score",
    pb.FUSION_ADAPTIVE: "adaptive",
}
_FUSION_ENUMS: dict[str, pb.Fusion] = {name: value for value, name in _FUSIONS.items()}


class SearchServicer(pb_grpc.SearchServiceServicer):
    def __init__(self, searcher: Searcher, golden: GoldenSets) -> None:
        self.searcher = searcher
        self.golden = golden

    async def Search(self, request: pb.SearchRequest, context: object) -> pb.SearchResponse:
        annotate({Attr.COLLECTION: ",".join(request.collections) or None, Attr.TOP_K: request.top_k or None})
        searched = await self.searcher.search(
            SearchIn(
                query=request.query,
                collections=list(request.collections),
                top_k=request.top_k,
                mode=_MODES.get(request.mode),
                filters=MessageToDict(request.filters) if request.HasField("filters") else {},
                group_by_document=request.group_by_document,
                score_threshold=request.score_threshold if request.HasField("score_threshold") else None,
                fusion=_FUSIONS.get(request.fusion),
                rrf_k=request.rrf_k if request.HasField("rrf_k") else None,
            )
        )
        results = []
        for f in searched.found:
            p = f.hit.payload
            results.append(
                pb.SearchResult(
                    doc_id=p.get("doc_id", ""),
                    chunk_id=f.hit.id,
                    chunk_index=p.get("chunk_index", 0),
                    text=p.get("text", ""),
                    score=f.hit.score,
                    title=p.get("title", ""),
                    collection=f.collection,
                    metadata=struct(p.get("metadata")),
                    source=p.get("source", ""),
                    filename=p.get("filename", ""),
                    url=p.get("url", ""),
                    mime_type=p.get("mime_type", ""),
                    location=_location(p),
                )
            )
        used = searched.plan
        annotate({Attr.MODE: used.mode, Attr.RESULT_COUNT: len(results)})
        return pb.SearchResponse(
            query=request.query,
            results=results,
            mode=_MODE_ENUMS[used.mode],
            fusion=_FUSION_ENUMS.get(used.fusion or "", pb.FUSION_UNSPECIFIED),
            versions=searched.versions,
        )

    async def GetDocument(self, request: pb.GetDocumentRequest, context: object) -> pb.GetDocumentResponse:
        document = await self.searcher.get_document(request.collection, request.doc_id)
        p = document.payload
        return pb.GetDocumentResponse(
            doc_id=document.doc_id,
            collection=document.collection,
            title=p.get("title", ""),
            text=document.text,
            chunks=[
                pb.Chunk(
                    chunk_id=c.id,
                    chunk_index=c.payload.get("chunk_index", 0),
                    text=c.payload.get("text", ""),
                    location=_location(c.payload),
                )
                for c in document.chunks
            ],
            metadata=struct(p.get("metadata")),
            source=p.get("source", ""),
            filename=p.get("filename", ""),
            url=p.get("url", ""),
            mime_type=p.get("mime_type", ""),
            content_hash=p.get("content_hash", ""),
            ingested_at=p.get("ingested_at", ""),
        )

    async def ListCollections(self, request: pb.ListCollectionsRequest, context: object) -> pb.ListCollectionsResponse:
        return pb.ListCollectionsResponse(
            collections=[
                pb.CollectionInfo(
                    name=c.name,
                    documents=c.documents,
                    chunks=c.chunks,
                    version=c.version,
                    versions=[_version(v) for v in c.versions],
                )
                for c in await self.searcher.list_collections()
            ]
        )

    # --- golden sets and evaluations ----------------------------------------------------------------------
    async def SetGoldenSet(self, request: pb.SetGoldenSetRequest, context: object) -> pb.SetGoldenSetResponse:
        annotate({Attr.COLLECTION: request.collection or None, Attr.QUERY_COUNT: len(request.queries)})
        golden = await self.golden.set(
            request.collection, [GoldenQuery(q.query_id, q.text, dict(q.relevant)) for q in request.queries]
        )
        return pb.SetGoldenSetResponse(
            collection=golden.collection,
            queries=len(golden.queries),
            judgments=golden.judgments,
            updated_at=golden.updated_at,
            golden_set_id=golden.golden_set_id,
        )

    async def GetGoldenSet(self, request: pb.GetGoldenSetRequest, context: object) -> pb.GetGoldenSetResponse:
        annotate({Attr.COLLECTION: request.collection or None})
        golden = await self.golden.get(request.collection)
        return pb.GetGoldenSetResponse(
            collection=golden.collection,
            updated_at=golden.updated_at,
            golden_set_id=golden.golden_set_id,
            queries=[pb.GoldenQuery(query_id=q.query_id, text=q.text, relevant=q.relevant) for q in golden.queries],
        )

    async def DeleteGoldenSet(self, request: pb.DeleteGoldenSetRequest, context: object) -> pb.DeleteGoldenSetResponse:
        annotate({Attr.COLLECTION: request.collection or None})
        deleted = await self.golden.delete(request.collection)
        return pb.DeleteGoldenSetResponse(collection=deleted.collection, deleted_queries=len(deleted.queries))

    async def EvaluateCollection(
        self, request: pb.EvaluateCollectionRequest, context: object
    ) -> pb.EvaluateCollectionResponse:
        modes = [_mode(value, f"modes[{i}]") for i, value in enumerate(request.modes)]
        annotate({Attr.COLLECTION: request.collection or None, Attr.MODE: ",".join(modes) or None})
        evaluations = await self.golden.evaluate(request.collection, modes, request.version)
        annotate(
            {
                Attr.QUERY_COUNT: evaluations[0].queries if evaluations else None,
                Attr.NDCG_AT_10: evaluations[0].ndcg_at_10 if evaluations else None,
            }
        )
        return pb.EvaluateCollectionResponse(evaluations=[_evaluation(e) for e in evaluations])

    async def ListEvaluations(self, request: pb.ListEvaluationsRequest, context: object) -> pb.ListEvaluationsResponse:
        annotate({Attr.COLLECTION: request.collection or None})
        mode = _mode(request.mode, "mode") if request.mode else None
        found = await self.golden.history(request.collection, mode, request.limit)
        annotate({Attr.RESULT_COUNT: len(found)})
        return pb.ListEvaluationsResponse(evaluations=[_evaluation(e) for e in found])


def _mode(value: pb.SearchMode, field: str) -> SearchMode:
    if value not in _MODES:
        raise invalid_argument(Reason.MODE_INVALID, f"{field} is not a search mode ({value})", field=field, mode=value)
    return _MODES[value]


def _evaluation(e: Evaluation) -> pb.Evaluation:
    return message_from(
        pb.Evaluation,
        e,
        mode=_MODE_ENUMS.get(e.mode, pb.SEARCH_MODE_UNSPECIFIED),
        fusion=_FUSION_ENUMS.get(e.fusion or "", pb.FUSION_UNSPECIFIED),
    )


def _version(v: VersionOut) -> pb.CollectionVersion:
    settings = v.version.settings
    return pb.CollectionVersion(
        version=v.version.version,
        state=v.version.state,
        created_at=v.version.created_at,
        retained_until=v.version.retained_until,
        job_id=v.version.job_id,
        documents=v.documents,
        chunks=v.chunks,
        settings=pb.IndexSettings(**dataclasses.asdict(settings)) if settings else None,
    )


def _location(payload: Mapping[str, Any]) -> pb.SourceLocation | None:
    """Where a chunk lies in its file (documents read from files), else None."""
    if not payload.get("path") and not payload.get("language"):
        return None
    return pb.SourceLocation(
        path=payload.get("path", ""),
        language=payload.get("language", ""),
        start_line=payload.get("start_line", 0),
        end_line=payload.get("end_line", 0),
    )
