"""Builds the indexer's gRPC server (not started: the caller awaits `service.start()` / `service.stop()`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from ragmesh.converter.v1 import converter_service_pb2_grpc as converter_grpc
from ragmesh.graph.v1 import graph_service_pb2_grpc as graph_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.config import ConfigError, load
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_store import Store, StoreSettings
from ragmesh_store.aio import embedder_and_store

from .chunking import Chunker
from .config import IndexerSettings
from .entity_ingest import EntityIngest, Journal
from .jobs import Jobs
from .pipeline import PipelineLimits
from .queues import JobStore, JobStoreBusyError, RedisJobStore, SqliteJobStore
from .reindex import Reindexer
from .service import Indexer
from .servicer import DOMAIN, IndexerServicer


async def create_server(settings: IndexerSettings, store: Store | None = None) -> Service:
    """The indexer's server, on `store` or the configured one (see `embedder_and_store`)."""
    converter = ServiceClient(
        "converter",
        settings.converter_addr,
        converter_grpc.ConverterServiceStub,
        timeout=settings.convert_timeout_seconds,
        max_message_bytes=settings.max_message_bytes,
        caller="indexer",
    )
    embedder, store, opened = await embedder_and_store("indexer", settings, store, close_on_failure=(converter,))
    closers: list[Callable[[], object]] = [converter.close, *opened]
    chunker = Chunker(settings.tokenizer_path, settings.chunk_tokens, settings.chunk_overlap_tokens)
    indexer = Indexer(
        setup_telemetry("indexer").traced_store(store),
        converter,
        embedder,
        chunker,
        max_concurrent_documents=settings.max_concurrent_documents,
        max_document_bytes=settings.max_document_bytes,
        limits=PipelineLimits(
            batch_texts=settings.embed_batch_texts,
            calls_in_flight=settings.embed_calls_in_flight,
            lookahead_texts=settings.lookahead_texts,
            fill_wait=settings.batch_fill_wait_ms / 1000,
        ),
        chunk_threads=settings.chunk_threads,
    )
    data_dir = getattr(store, "data_dir", None)
    try:
        job_store = await open_job_store(settings, data_dir)
    except BaseException:
        for close in reversed(closers):
            await _maybe_await(close())
        raise
    entities = _entity_ingest(settings, indexer, job_folder(settings, data_dir))
    servicer = IndexerServicer(indexer, entities=entities)
    reindexer = Reindexer(
        indexer,
        search_addr=settings.search_addr,
        tolerance=settings.reindex_tolerance,
        retention_seconds=settings.version_retention_seconds,
    )
    jobs = Jobs(
        indexer,
        job_store,
        roots=settings.roots,
        batch_size=settings.job_batch_size,
        workers=settings.job_workers,
        max_archive_bytes=settings.max_archive_bytes,
        claim_idle_seconds=settings.job_claim_idle_seconds,
        reindexer=reindexer,
    )
    servicer.jobs = jobs
    service = new_server(
        "indexer",
        settings,
        lambda server: pb_grpc.add_IndexerServiceServicer_to_server(servicer, server),
        [pb.DESCRIPTOR.services_by_name["IndexerService"].full_name],
        domain=DOMAIN,
    )
    # Workers start with the server (they only need the indexer's clients) and stop before anything closes.
    jobs.start()
    graph_closers: list[Callable[[], object]] = []
    if entities is not None:
        entities.start()
        graph_closers = [entities.close, entities.graph.close]
    service.closers.extend([jobs.stop, *graph_closers, reindexer.close, job_store.close, *closers, indexer.close])
    return service


async def open_job_store(settings: IndexerSettings, data_dir: Path | None = None) -> JobStore:
    """Redis when RAGMESH_REDIS_URL is set (checked now, so a wrong URL stops start-up), else SQLite in
    RAGMESH_INDEXER_JOBS_DIR, or `<data_dir>/jobs` (the embedded store's directory, else RAGMESH_DATA_DIR)."""
    if settings.redis_url is not None:
        store = RedisJobStore(
            settings.redis_url.get_secret_value(), settings.redis_prefix, settings.job_claim_idle_seconds
        )
        try:
            await store.ping()
        except Exception as exc:  # noqa: BLE001 - any connection failure stops start-up with its reason
            await store.close()
            raise ConfigError(f"indexer: cannot reach RAGMESH_REDIS_URL: {exc}") from None
        return store
    folder = job_folder(settings, data_dir)
    try:
        return await asyncio.to_thread(SqliteJobStore, folder)
    except JobStoreBusyError as exc:
        raise ConfigError(f"indexer: {exc}") from None


async def _maybe_await(value: object) -> None:
    if asyncio.iscoroutine(value):
        await value


def job_folder(settings: IndexerSettings, data_dir: Path | None = None) -> Path:
    """RAGMESH_INDEXER_JOBS_DIR, or `<data_dir>/jobs` (the embedded store's directory, else RAGMESH_DATA_DIR)."""
    return settings.jobs_dir or (data_dir or load(StoreSettings).data_dir) / "jobs"


def _entity_ingest(settings: IndexerSettings, indexer: Indexer, folder: Path) -> EntityIngest | None:
    """Graph entities' dual storage, when the graph feature is on; its journal lies beside the job queue (a
    folder the indexer writes to, in containers too)."""
    if not settings.graph_enabled:
        return None
    graph = ServiceClient(
        "graph",
        settings.graph_addr,
        graph_grpc.GraphServiceStub,
        timeout=settings.graph_timeout_seconds,
        max_message_bytes=settings.max_message_bytes,
        caller="indexer",
    )
    journal = Journal(folder / "graph-pending.json", indexer.metrics.graph_pending.set)
    return EntityIngest(indexer, graph, journal, batch_entities=settings.graph_batch_entities)
