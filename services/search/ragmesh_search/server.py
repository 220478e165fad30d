"""Builds the search service's gRPC server (not started: the caller awaits `service.start()` / `stop()`)."""

from __future__ import annotations

from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_store import Store
from ragmesh_store.aio import embedder_and_store

from .cache import QueryCache
from .config import SearchSettings
from .golden import GoldenSets
from .metrics import QualityMetrics, QueryCacheMetrics
from .rerank import HttpReranker
from .service import Searcher
from .servicer import DOMAIN, SearchServicer


def _reranker(settings: SearchSettings) -> HttpReranker | None:
    """The rerank stage, when RAGMESH_SEARCH_RERANK_URL is set."""
    if not settings.rerank_url:
        return None
    key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else ""
    return HttpReranker(
        settings.rerank_url,
        api=settings.rerank_api,
        model=settings.rerank_model,
        api_key=key,
        timeout=settings.rerank_timeout_seconds,
    )


async def create_server(settings: SearchSettings, store: Store | None = None) -> Service:
    """The search server, on `store` or the configured one (see `embedder_and_store`)."""
    embedder, store, closers = await embedder_and_store("search", settings, store)
    telemetry = setup_telemetry("search")
    traced_store = telemetry.traced_store(store)
    reranker = _reranker(settings)
    if reranker is not None:
        closers.append(reranker.close)
    searcher = Searcher.from_settings(
        settings,
        traced_store,
        embedder,
        reranker=reranker,
        query_cache=QueryCache(settings.query_cache_size, telemetry.metrics(QueryCacheMetrics)),
    )
    golden = GoldenSets(traced_store, searcher, telemetry.metrics(QualityMetrics))
    await golden.export_latest()
    service = new_server(
        "search",
        settings,
        lambda server: pb_grpc.add_SearchServiceServicer_to_server(SearchServicer(searcher, golden), server),
        [pb.DESCRIPTOR.services_by_name["SearchService"].full_name],
        domain=DOMAIN,
    )
    service.closers.extend(closers)
    return service
