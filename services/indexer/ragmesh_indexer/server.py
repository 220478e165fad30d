"""Builds the indexer's gRPC server (not started: the caller awaits `service.start()` / `service.stop()`)."""

from __future__ import annotations

from ragmesh.converter.v1 import converter_service_pb2_grpc as converter_grpc
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_store import Store
from ragmesh_store.aio import open_store_for

from .chunking import Chunker
from .config import IndexerSettings
from .service import Indexer
from .servicer import DOMAIN, IndexerServicer


async def create_server(settings: IndexerSettings, store: Store | None = None) -> Service:
    """The indexer's server. With `store` (one process running indexer and search on the embedded store) it is
    used and left open; without, the store comes from StoreSettings with the embedder's dimension (waits up to
    settings.embedder_wait_seconds for the embedder) and is closed when the service stops."""
    converter = ServiceClient(
        "converter", settings.converter_addr, converter_grpc.ConverterServiceStub,
        timeout=settings.convert_timeout_seconds, idempotent=("Convert",),
        max_message_bytes=settings.max_message_bytes, caller="indexer",
    )
    embedder = ServiceClient(
        "embedder", settings.embedder_addr, embedder_grpc.EmbedderServiceStub,
        timeout=settings.embed_timeout_seconds, idempotent=("Embed", "GetModelInfo"),
        max_message_bytes=settings.max_message_bytes, caller="indexer",
    )
    closers = [converter.close, embedder.close]
    if store is None:
        try:
            store = await open_store_for("indexer", embedder, settings.embedder_wait_seconds)
        except BaseException:
            await converter.close()
            await embedder.close()
            raise
        closers.append(store.close)
    chunker = Chunker(settings.tokenizer_path, settings.chunk_tokens, settings.chunk_overlap_tokens)
    indexer = Indexer(
        setup_telemetry("indexer").traced_store(store), converter, embedder, chunker,
        max_concurrent_documents=settings.max_concurrent_documents,
        max_document_bytes=settings.max_document_bytes,
    )
    service = new_server(
        "indexer", settings,
        lambda server: pb_grpc.add_IndexerServiceServicer_to_server(IndexerServicer(indexer), server),
        [pb.DESCRIPTOR.services_by_name["IndexerService"].full_name],
        domain=DOMAIN,
    )
    service.closers.extend(closers)
    return service
