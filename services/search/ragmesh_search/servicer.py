"""gRPC SearchService: maps requests to the domain (`service.Searcher`) and results back to protos."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc
from ragmesh_common.telemetry import Attr, annotate
from ragmesh_store.base import Fusion

from .fusion import SearchMode
from .service import Searcher, SearchIn

DOMAIN = "search.ragmesh"
_MODES: dict[int, SearchMode] = {pb.SEARCH_MODE_HYBRID: "hybrid", pb.SEARCH_MODE_DENSE: "dense",
                                 pb.SEARCH_MODE_SPARSE: "sparse", pb.SEARCH_MODE_SEMANTIC: "semantic",
                                 pb.SEARCH_MODE_KEYWORD: "keyword"}
_MODE_ENUMS = {name: value for value, name in _MODES.items()}
_FUSIONS: dict[int, Fusion] = {pb.FUSION_RRF: "rrf", pb.FUSION_DBSF: "dbsf",
                               pb.FUSION_RELATIVE_SCORE: "relative_score"}
_FUSION_ENUMS = {name: value for value, name in _FUSIONS.items()}


def _struct(data: Mapping[str, Any] | None) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    if data:
        struct.update(dict(data))
    return struct


class SearchServicer(pb_grpc.SearchServiceServicer):
    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher

    async def Search(self, request: pb.SearchRequest, context) -> pb.SearchResponse:
        annotate({Attr.COLLECTION: ",".join(request.collections) or None, Attr.TOP_K: request.top_k or None})
        used, found = await self.searcher.search(SearchIn(
            query=request.query,
            collections=list(request.collections),
            top_k=request.top_k,
            mode=_MODES.get(request.mode),
            filters=MessageToDict(request.filters) if request.HasField("filters") else {},
            group_by_document=request.group_by_document,
            score_threshold=request.score_threshold if request.HasField("score_threshold") else None,
            fusion=_FUSIONS.get(request.fusion),
            rrf_k=request.rrf_k if request.HasField("rrf_k") else None,
        ))
        results = []
        for f in found:
            p = f.hit.payload
            results.append(pb.SearchResult(
                doc_id=p.get("doc_id", ""), chunk_id=f.hit.id, chunk_index=p.get("chunk_index", 0),
                text=p.get("text", ""), score=f.hit.score, title=p.get("title", ""), collection=f.collection,
                metadata=_struct(p.get("metadata")), source=p.get("source", ""), filename=p.get("filename", ""),
                url=p.get("url", ""), mime_type=p.get("mime_type", ""),
            ))
        annotate({Attr.MODE: used.mode, Attr.RESULT_COUNT: len(results)})
        return pb.SearchResponse(query=request.query, results=results, mode=_MODE_ENUMS[used.mode],
                                 fusion=_FUSION_ENUMS.get(used.fusion or "", pb.FUSION_UNSPECIFIED))

    async def GetDocument(self, request: pb.GetDocumentRequest, context) -> pb.GetDocumentResponse:
        document = await self.searcher.get_document(request.collection, request.doc_id)
        p = document.payload
        return pb.GetDocumentResponse(
            doc_id=document.doc_id, collection=document.collection, title=p.get("title", ""), text=document.text,
            chunks=[pb.Chunk(chunk_id=c.id, chunk_index=c.payload.get("chunk_index", 0), text=c.payload.get("text", ""))
                    for c in document.chunks],
            metadata=_struct(p.get("metadata")), source=p.get("source", ""), filename=p.get("filename", ""),
            url=p.get("url", ""), mime_type=p.get("mime_type", ""), content_hash=p.get("content_hash", ""),
            ingested_at=p.get("ingested_at", ""),
        )

    async def ListCollections(self, request: pb.ListCollectionsRequest, context) -> pb.ListCollectionsResponse:
        return pb.ListCollectionsResponse(collections=[
            pb.CollectionInfo(name=s.name, documents=s.documents, chunks=s.chunks)
            for s in await self.searcher.list_collections()
        ])
