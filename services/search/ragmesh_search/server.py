"""Builds the search service's gRPC server (not started: the caller awaits `service.start()` / `stop()`)."""

from __future__ import annotations

from collections.abc import Callable

from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_store import Store
from ragmesh_store.aio import open_store_for

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
    """The search server. With `store` (one process running indexer and search on the embedded store) it is
    used and left open; without, the store comes from StoreSettings with the embedder's dimension (waits up to
    settings.embedder_wait_seconds for the embedder) and is closed when the service stops."""
    embedder = ServiceClient(
        "embedder",
        settings.embedder_addr,
        embedder_grpc.EmbedderServiceStub,
        timeout=settings.embed_timeout_seconds,
        max_message_bytes=settings.max_message_bytes,
        caller="search",
    )
    closers: list[Callable[[], object]] = [embedder.close]
    if store is None:
        try:
            store = await open_store_for("search", embedder, settings.embedder_wait_seconds)
        except BaseException:
            await embedder.close()
            raise
        closers.append(store.close)
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
