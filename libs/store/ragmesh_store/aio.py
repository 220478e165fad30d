"""The store as the async services use it: calls off the event loop with store failures mapped to the
error contract, and opening the store with the embedder's dimension."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Protocol, TypeVar

from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh_common.clients import ServiceClient, model_dimension
from ragmesh_common.config import ConfigError, load
from ragmesh_common.errors import not_found, unavailable
from ragmesh_common.reasons import Reason

from . import open_store
from .base import CollectionNotFound, Store, StoreBusyError, StoreError, StoreFormatError
from .config import StoreSettings

log = logging.getLogger(__name__)
T = TypeVar("T")


async def store_call(fn: Callable[..., T], *args: object, executor: Executor | None = None, inline: bool = False) -> T:
    """Run a blocking store call off the event loop (in `executor`, default: asyncio's own thread pool) in the
    caller's context, as `asyncio.to_thread` does (so a traced store call is a span of the caller's trace),
    mapping store failures to RagmeshError. `inline`: on the caller's thread instead, for a store whose calls hold
    the GIL anyway (`Store.holds_gil`), where a thread would only add a hand-off and GIL waits."""
    try:
        if inline:
            return fn(*args)
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(executor, call)
    except CollectionNotFound as exc:
        raise not_found(
            Reason.COLLECTION_NOT_FOUND, f"collection {exc.name!r} does not exist", collection=exc.name
        ) from None
    except StoreError as exc:
        log.warning("store call %s failed: %s", getattr(fn, "__name__", fn), exc)
        raise unavailable(Reason.STORE_UNAVAILABLE, f"the vector store failed: {exc}") from None


async def open_store_for(service: str, embedder: ServiceClient, wait_seconds: float) -> Store:
    """Open the configured store with the embedder's dense dimension (waiting for the embedder to load its
    model); a store owned by another process, in a format this version cannot read, or in a directory that
    cannot be written stops start-up with a message that says what to do."""
    settings = load(StoreSettings)
    dimension = await model_dimension(embedder, wait_seconds)
    try:
        return open_store(settings, dimension)
    except (StoreBusyError, StoreFormatError) as exc:
        raise ConfigError(f"{service}: cannot open the store: {exc}") from None
    except OSError as exc:
        if settings.qdrant_url:
            raise
        raise ConfigError(
            f"{service}: cannot use RAGMESH_DATA_DIR={settings.data_dir.resolve()}: "
            f"{exc.strerror or exc} ({exc.filename or settings.data_dir}); "
            "point RAGMESH_DATA_DIR at a directory this user can write"
        ) from None


class StoreUserSettings(Protocol):
    """The settings of a service that embeds and opens the store (the indexer's, the search service's)."""

    @property
    def embedder_addr(self) -> str: ...
    @property
    def embed_timeout_seconds(self) -> float: ...
    @property
    def embedder_wait_seconds(self) -> float: ...
    @property
    def max_message_bytes(self) -> int: ...


async def embedder_and_store(
    caller: str, settings: StoreUserSettings, store: Store | None, *, close_on_failure: Sequence[ServiceClient] = ()
) -> tuple[ServiceClient, Store, list[Callable[[], object]]]:
    """What the indexer and the search service start from: their embedder client and the store. A given `store`
    (one process running indexer and search on the embedded store) is used and left open; without, the store
    comes from StoreSettings with the embedder's dimension (waits up to settings.embedder_wait_seconds for the
    embedder). Returns them with the closers of what was opened here, for when the service stops; when the store
    cannot be opened, the clients in `close_on_failure` and the embedder's are closed before the error goes on."""
    embedder = ServiceClient(
        "embedder",
        settings.embedder_addr,
        embedder_grpc.EmbedderServiceStub,
        timeout=settings.embed_timeout_seconds,
        max_message_bytes=settings.max_message_bytes,
        caller=caller,
    )
    closers: list[Callable[[], object]] = [embedder.close]
    if store is None:
        try:
            store = await open_store_for(caller, embedder, settings.embedder_wait_seconds)
        except BaseException:
            for client in (*close_on_failure, embedder):
                await client.close()
            raise
        closers.append(store.close)
    return embedder, store, closers
