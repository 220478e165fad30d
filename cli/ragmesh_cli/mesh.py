"""Start ragmesh services in this process: `ragmesh up` (all of them) and `ragmesh serve NAME...`.

Each gRPC service is still a real gRPC server on its own port, for callers outside the process. In `ragmesh up`
a service calls another directly instead of over loopback gRPC, with the same answers, errors, deadlines,
metrics and spans (`ragmesh_common.inprocess`; RAGMESH_IN_PROCESS_CALLS=false: over gRPC). With the embedded
store, the indexer and search must share one process (one owner of the shard), so when both run here they
share one store object. The graph service is optional: `ragmesh up` starts it when RAGMESH_GRAPH_ENABLED=true
(`up_services`), before the indexer, answer and the gateway, which then reach it at RAGMESH_GRAPH_ADDR;
`ragmesh serve graph` serves it whatever the setting says.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragmesh_common.config import OPTIONAL_SERVICES, SERVICES, ConfigError, GraphFeatureSettings, load
from ragmesh_common.inprocess import InProcessSettings
from ragmesh_common.loop import loop_name
from ragmesh_common.server import Service, freeze_startup_heap
from ragmesh_common.telemetry import serve_metrics, setup_telemetry

if TYPE_CHECKING:
    from ragmesh_store import Store

log = logging.getLogger(__name__)

GRPC_SERVICES = (*SERVICES, *OPTIONAL_SERVICES)  # converter, embedder, indexer, search, answer; graph
ALL = (*GRPC_SERVICES, "gateway")
# Each service starts after those it calls, so that `ragmesh up` can hand it their addresses (the indexer calls
# search for a re-index's gate and the graph for entities; answer calls search and the graph; the gateway calls
# them all).
START_ORDER = ("converter", "embedder", "search", "graph", "indexer", "answer", "gateway")
_SETTINGS = {
    "converter": ("ragmesh_converter.config", "ConverterSettings"),
    "embedder": ("ragmesh_embedder.config", "EmbedderSettings"),
    "indexer": ("ragmesh_indexer.config", "IndexerSettings"),
    "search": ("ragmesh_search.config", "SearchSettings"),
    "answer": ("ragmesh_answer.config", "AnswerSettings"),
    "graph": ("ragmesh_graph.config", "GraphSettings"),
    "gateway": ("ragmesh_gateway.config", "GatewaySettings"),
}


def settings_class(name: str) -> type:
    module, cls = _SETTINGS[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"service {name!r} is not installed in this environment ({exc.name} missing); "
            f"install the ragmesh-{name} package"
        ) from None


def up_services() -> list[str]:
    """What `ragmesh up` starts: every service, but the optional ones whose feature is off."""
    enabled = {"graph": load(GraphFeatureSettings).enabled}
    return [name for name in ALL if enabled.get(name, True)]


def validate_names(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise ConfigError(f"unknown service(s): {', '.join(unknown)}; choose from {', '.join(ALL)}")
    if not names:
        raise ConfigError(f"name at least one service: {', '.join(ALL)}")
    return [n for n in START_ORDER if n in names]  # no duplicates


async def run(names: Sequence[str], *, local: bool) -> None:
    """Run the named services until SIGTERM/SIGINT. `local=True` (ragmesh up) wires them to each other
    over loopback using the ports they actually bound."""
    names = validate_names(names)
    # Validate every settings class before anything starts, so a typo fails fast with the variable's name.
    # Each is read again just before its service starts: in `ragmesh up` the addresses of the services
    # started before it come from the ports they bound.
    for name in names:
        load(settings_class(name))
    in_process = local and load(InProcessSettings).calls
    stop = _stop_on_signal()
    started: list[Service] = []
    closers = []
    # One process serving one service reports under OTEL_SERVICE_NAME (when set); several, each its own name.
    for name in names:
        setup_telemetry(name, use_env_service_name=len(names) == 1)
    try:
        store = None
        for name in [n for n in names if n in GRPC_SERVICES]:
            settings: Any = load(settings_class(name))  # the settings class of whichever service `name` is
            module = importlib.import_module(f"ragmesh_{name}.server")
            if name in ("indexer", "search") and {"indexer", "search"} <= set(names):
                if store is None:
                    store = await _open_shared_store(settings)
                    closers.append(store.close)
                service = await _maybe_await(module.create_server(settings, store=store))
            else:
                service = await _maybe_await(module.create_server(settings))
            await service.start()
            started.append(service)
            log.info("%s listening on %s:%d", name, settings.host, service.port)
            stop_metrics = serve_metrics(setup_telemetry(name), settings.host, settings.metrics_port)
            if stop_metrics is not None:
                closers.append(stop_metrics)
            if local:
                os.environ[f"RAGMESH_{name.upper()}_ADDR"] = f"127.0.0.1:{service.port}"
                if in_process:
                    service.serve_in_process(f"127.0.0.1:{service.port}")
        async with contextlib.AsyncExitStack() as stack:
            if "gateway" in names:
                from ragmesh_gateway.app import run_gateway

                url = await stack.enter_async_context(run_gateway(load(settings_class("gateway"))))
                log.info("gateway serving REST on %s/api/v1 and MCP on %s/mcp", url, url)
            frozen = freeze_startup_heap()
            log.info(
                "ragmesh ready: %s on %s's event loop (%d start-up objects kept out of garbage collection)",
                ", ".join(names),
                loop_name(asyncio.get_running_loop()),
                frozen,
            )
            await stop.wait()
            log.info("shutting down: draining in-flight calls")
    finally:
        await asyncio.gather(*(s.stop() for s in reversed(started)), return_exceptions=True)
        for close in closers:
            close()


async def _open_shared_store(settings: Any) -> Store:  # the indexer's or the search service's settings
    """One embedded (or server) store for the indexer and search of this process."""
    from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
    from ragmesh_common.clients import ServiceClient
    from ragmesh_store.aio import open_store_for

    embedder = ServiceClient("embedder", settings.embedder_addr, embedder_grpc.EmbedderServiceStub, timeout=10)
    try:
        return await open_store_for("indexer+search", embedder, settings.embedder_wait_seconds)
    finally:
        await embedder.close()


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value):
        return await value
    return value


def _stop_on_signal() -> asyncio.Event:
    """An event set by SIGTERM/SIGINT, installed before anything starts so that a signal during start-up
    still shuts down cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
