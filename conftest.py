"""Fixtures shared by every test folder.

`mesh_factory` starts the five gRPC services in this process, each a real gRPC server on its own loopback
port (port 0), wired to each other over real gRPC: converter, embedder (backend "hash" by default: fast and
deterministic), indexer + search sharing one embedded store (EdgeStore) in a fresh temporary directory, and
answer (no chat model unless `answer={"base_url": ..., "model": ...}`; sessions under the data directory).
With `graph=True` (or a dict of GraphSettings overrides) the optional graph service starts too, after search and
before the indexer, with its graphs under the mesh's data directory; the other services are told where it is:
RAGMESH_GRAPH_ENABLED=true and RAGMESH_GRAPH_ADDR are set in the environment for the rest of the module, and a
settings class with a `graph_addr` field gets it as an override as well.

    async def test_something(mesh_factory):
        mesh = await mesh_factory()                                  # or embedder_backend="local"
        mesh = await mesh_factory(indexer={"chunk_tokens": 64})      # settings overrides by field name
        mesh = await mesh_factory(answer={"base_url": fake_chat.url, "model": "fake-chat"})
        mesh = await mesh_factory(graph=True)                        # + the graph service: mesh.stub("graph")
        mesh.addrs["search"]                                         # "127.0.0.1:<port>"
        mesh.settings["indexer"], mesh.store, mesh.data_dir
        indexer = mesh.stub("indexer")                               # generated stub, channel owned by mesh
        err = await rpc_error(indexer.DeleteDocument(request))       # the failed call as a RagmeshError

The fixture is module-scoped so a module can share one mesh through a fixture of its own; every mesh a
factory started is stopped when the module's tests are done (or earlier with `await mesh.stop()`).

Test tiers: every test runs in exactly one tier, a marker (registered in pyproject.toml, --strict-markers):

    unit     one process, no mesh, no real model, no child process      make test-fast (pytest -m unit)
    e2e      services talking over gRPC: `mesh_factory`'s in-process mesh, processes of `ragmesh up`/`serve`
             (tests/e2e), or a test that starts other child processes
    slow     seconds or gigabytes by design: the real embedding model, tiny benchmark runs, store snapshots,
             a backoff wait
    browser  the web page in headless Chromium
    deploy   manifests, the Dockerfile, image entrypoints (tests/deploy)

`make test` runs them all. A test's tier is, first to match: a tier mark on the test, its class or its module
(`pytestmark = pytest.mark.slow`); its folder (FOLDER_TIERS); the fixtures it uses, directly or through other
fixtures (FIXTURE_TIERS: a test on `mesh_factory` is e2e); else unit. Two different tier marks on one test
are an error. A unit test that takes more than UNIT_BUDGET_S is named at the end of the run; tests/test_tiers.py
checks that no unit test uses a mesh, the real model or Chromium, whatever its marks.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

SERVICE_NAMES = ("converter", "embedder", "indexer", "search", "answer")
# The repository root, so tests anywhere import the shared test support (tests.support.*).
_ROOT = str(Path(__file__).resolve().parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@dataclass
class Mesh:
    """The running services (by name), their settings, the shared store and its data directory."""

    services: dict[str, Any]  # name -> ragmesh_common.server.Service
    settings: dict[str, Any]  # name -> the service's settings object
    store: Any  # ragmesh_store.EdgeStore, shared by indexer and search
    data_dir: Path
    addrs: dict[str, str] = field(default_factory=dict)  # name -> "127.0.0.1:<port>"
    _channels: dict[str, Any] = field(default_factory=dict)
    _stopped: bool = False

    def stub(self, name: str) -> Any:
        """The generated client stub of service `name` (e.g. IndexerServiceStub), on one channel per service."""
        import grpc

        stubs = {
            "converter": "ragmesh.converter.v1.converter_service_pb2_grpc.ConverterServiceStub",
            "embedder": "ragmesh.embedder.v1.embedder_service_pb2_grpc.EmbedderServiceStub",
            "indexer": "ragmesh.indexer.v1.indexer_service_pb2_grpc.IndexerServiceStub",
            "search": "ragmesh.search.v1.search_service_pb2_grpc.SearchServiceStub",
            "answer": "ragmesh.answer.v1.answer_service_pb2_grpc.AnswerServiceStub",
            "graph": "ragmesh.graph.v1.graph_service_pb2_grpc.GraphServiceStub",
        }
        module, cls = stubs[name].rsplit(".", 1)
        if name not in self._channels:
            self._channels[name] = grpc.aio.insecure_channel(self.addrs[name])
        return getattr(importlib.import_module(module), cls)(self._channels[name])

    async def stop(self) -> None:
        """Stop every service (answer, search and indexer first) and close the store; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for channel in self._channels.values():
            await channel.close()
        for name in reversed(list(self.services)):
            await self.services[name].stop(0)
        self.store.close()


async def rpc_error(call: Awaitable[Any]) -> Any:
    """Await a gRPC call that must fail; return its error as a `RagmeshError` (code, reason, domain, ...)."""
    import grpc
    from ragmesh_common.errors import from_rpc_error

    try:
        reply = await call
    except grpc.aio.AioRpcError as exc:
        return from_rpc_error(exc)
    raise AssertionError(f"the call succeeded: {reply}")


async def _built(value):
    return await value if asyncio.iscoroutine(value) else value


async def start_mesh(
    data_dir: Path,
    *,
    embedder_backend: str = "hash",
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    graph: bool | Mapping[str, Any] = False,
    env: pytest.MonkeyPatch | None = None,
) -> Mesh:
    """Start converter, embedder, indexer, search and answer on loopback port 0, and the graph service with
    `graph` (see the module docstring): then RAGMESH_GRAPH_ENABLED and RAGMESH_GRAPH_ADDR are set with `env`
    before the services that call it start."""
    from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
    from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
    from ragmesh_answer.config import AnswerSettings
    from ragmesh_answer.server import create_server as create_answer
    from ragmesh_common.clients import ServiceClient
    from ragmesh_converter.config import ConverterSettings
    from ragmesh_converter.server import create_server as create_converter
    from ragmesh_embedder.config import EmbedderSettings
    from ragmesh_embedder.server import create_server as create_embedder
    from ragmesh_indexer.config import IndexerSettings
    from ragmesh_indexer.server import create_server as create_indexer
    from ragmesh_search.config import SearchSettings
    from ragmesh_search.server import create_server as create_search
    from ragmesh_store import EdgeStore

    overrides = overrides or {}
    local = {"host": "127.0.0.1", "port": 0}
    services: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    addrs: dict[str, str] = {}
    store = None
    try:
        settings["converter"] = ConverterSettings(**{**local, **overrides.get("converter", {})})
        settings["embedder"] = EmbedderSettings(
            **{**local, "backend": embedder_backend, **overrides.get("embedder", {})}
        )
        for name, create in (("converter", create_converter), ("embedder", create_embedder)):
            services[name] = await _built(create(settings[name]))
            await services[name].start()
            addrs[name] = f"127.0.0.1:{services[name].port}"

        probe = ServiceClient("embedder", addrs["embedder"], embedder_grpc.EmbedderServiceStub, timeout=30)
        try:
            info = await probe.call("GetModelInfo", embedder_pb.GetModelInfoRequest())
        finally:
            await probe.close()
        store = EdgeStore(data_dir, info.dimension)

        settings["search"] = SearchSettings(
            **{**local, "embedder_addr": addrs["embedder"], **overrides.get("search", {})}
        )
        services["search"] = await _built(create_search(settings["search"], store=store))
        await services["search"].start()
        addrs["search"] = f"127.0.0.1:{services['search'].port}"
        if graph:
            from ragmesh_graph.config import GraphSettings
            from ragmesh_graph.server import create_server as create_graph

            graph_overrides = graph if isinstance(graph, Mapping) else {}
            settings["graph"] = GraphSettings(**{**local, "data_dir": data_dir, **graph_overrides})
            services["graph"] = await _built(create_graph(settings["graph"]))
            await services["graph"].start()
            addrs["graph"] = f"127.0.0.1:{services['graph'].port}"
            if env is not None:
                env.setenv("RAGMESH_GRAPH_ENABLED", "true")
                env.setenv("RAGMESH_GRAPH_ADDR", addrs["graph"])
        wiring = {
            "converter_addr": addrs["converter"],
            "embedder_addr": addrs["embedder"],
            "search_addr": addrs["search"],
        }
        settings["indexer"] = IndexerSettings(
            **{**local, **wiring, **_graph_addr(IndexerSettings, addrs), **overrides.get("indexer", {})}
        )
        services["indexer"] = await _built(create_indexer(settings["indexer"], store=store))
        await services["indexer"].start()
        addrs["indexer"] = f"127.0.0.1:{services['indexer'].port}"
        settings["answer"] = AnswerSettings(
            **{
                **local,
                "search_addr": addrs["search"],
                "embedder_addr": addrs["embedder"],
                "data_dir": data_dir,
                **_graph_addr(AnswerSettings, addrs),
                **overrides.get("answer", {}),
            }
        )
        services["answer"] = await _built(create_answer(settings["answer"]))
        await services["answer"].start()
        addrs["answer"] = f"127.0.0.1:{services['answer'].port}"
    except BaseException:
        for service in reversed(list(services.values())):
            await service.stop(0)
        if store is not None:
            store.close()
        raise
    return Mesh(services, settings, store, data_dir, addrs)


def _graph_addr(settings_cls: Any, addrs: Mapping[str, str]) -> dict[str, str]:
    """{"graph_addr": ...} for a settings class that has the field, when the mesh runs the graph service."""
    return {"graph_addr": addrs["graph"]} if "graph" in addrs and "graph_addr" in settings_cls.model_fields else {}


def rpc_count(service: str, method: str) -> float:
    """Calls of `method` the gRPC service `service` ("embedder", ...) has answered in this process, any status,
    as its own request metrics count them (ragmesh_grpc_server_handling_seconds)."""
    from ragmesh_common.telemetry import setup_telemetry

    return sum(
        sample.value
        for metric in setup_telemetry(service).registry.collect()
        if metric.name == "ragmesh_grpc_server_handling_seconds"
        for sample in metric.samples
        if sample.name.endswith("_count") and sample.labels.get("grpc_method") == method
    )


@pytest.fixture(name="rpc_count")
def rpc_count_fixture() -> Callable[[str, str], float]:
    """`rpc_count("embedder", "Embed")` -> how many such calls the real server has answered so far."""
    return rpc_count


@pytest.fixture(name="rpc_error")
def rpc_error_fixture() -> Callable[[Awaitable[Any]], Awaitable[Any]]:
    """`await rpc_error(stub.Method(request))` -> the RagmeshError the call failed with (fails if it did not)."""
    return rpc_error


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh_factory(tmp_path_factory) -> AsyncIterator[Callable[..., Awaitable[Mesh]]]:
    """A factory: `await mesh_factory(embedder_backend="hash", converter={...}, embedder={...},
    indexer={...}, search={...}, answer={...}, graph=False)` -> a started `Mesh` in a fresh data directory; the
    dicts override settings fields of each service; `graph=True` (or a dict of GraphSettings overrides) starts
    the graph service too and sets RAGMESH_GRAPH_ENABLED=true and RAGMESH_GRAPH_ADDR until the module's end. All
    meshes are stopped at the end of the module."""
    meshes: list[Mesh] = []
    env = pytest.MonkeyPatch()

    async def factory(
        *, embedder_backend: str = "hash", graph: bool | Mapping[str, Any] = False, **overrides: Mapping[str, Any]
    ) -> Mesh:
        unknown = set(overrides) - set(SERVICE_NAMES)
        if unknown:
            raise TypeError(f"unknown service(s) {sorted(unknown)}; overrides go by {SERVICE_NAMES}")
        mesh = await start_mesh(
            tmp_path_factory.mktemp("mesh"),
            embedder_backend=embedder_backend,
            overrides=overrides,
            graph=graph,
            env=env,
        )
        meshes.append(mesh)
        return mesh

    yield factory
    for mesh in reversed(meshes):
        await mesh.stop()
    env.undo()


@pytest.fixture(scope="module")
def fake_chat():
    """A local fake of an OpenAI-compatible chat API over real HTTP (tests/support/fake_chat.py): `.url` is the
    base URL (…/v1) for RAGMESH_ANSWER_BASE_URL, `.requests` what it received, `.fail_with = (status, message)`
    makes it fail."""
    from tests.support.fake_chat import FakeChat

    with FakeChat() as chat:
        yield chat


@pytest.fixture
def answer_service():
    """`async with answer_service(mesh, **settings) as stub:` another answer service on a running mesh (its search
    and embedder, its data directory), with settings of its own, stopped on exit; `stub.addr` is where it
    listens."""
    import grpc
    from ragmesh.answer.v1 import answer_service_pb2_grpc as pb_grpc
    from ragmesh_answer.config import AnswerSettings
    from ragmesh_answer.server import create_server

    @contextlib.asynccontextmanager
    async def start(mesh, **overrides):
        settings = AnswerSettings(
            **{
                "host": "127.0.0.1",
                "port": 0,
                "search_addr": mesh.addrs["search"],
                "embedder_addr": mesh.addrs["embedder"],
                "data_dir": mesh.data_dir,
                **overrides,
            }
        )
        service = create_server(settings)
        await service.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
        stub = pb_grpc.AnswerServiceStub(channel)
        stub.addr = f"127.0.0.1:{service.port}"
        try:
            yield stub
        finally:
            await channel.close()
            await service.stop(0)

    return start


# --- test tiers (see the module docstring) --------------------------------------------------------------------
TIERS = ("unit", "e2e", "slow", "browser", "deploy")
FOLDER_TIERS = (("tests/deploy/", "deploy"), ("tests/e2e/", "e2e"))
FIXTURE_TIERS = (
    ("browser", frozenset({"browser"})),  # gateway/tests/test_gateway_web.py: Chromium
    ("slow", frozenset({"local", "reference"})),  # services/embedder/tests/conftest.py: the real model
    ("e2e", frozenset({"mesh_factory", "answer_service"})),  # this file: a mesh of real gRPC services
)
UNIT_BUDGET_S = 3.0  # the slowest unit tests wait out a retry or a lease by design: ~2-2.7 s


def tier_of(item: pytest.Item) -> str:
    """The one tier of a collected test (see the module docstring for the rules)."""
    marked = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
    if len(marked) > 1:
        raise pytest.UsageError(f"{item.nodeid} has tier marks {sorted(marked)}; a test has exactly one tier")
    if marked:
        return marked.pop()
    file = Path(str(item.path)).resolve()
    path = file.relative_to(_ROOT).as_posix() if file.is_relative_to(_ROOT) else file.as_posix()
    for folder, tier in FOLDER_TIERS:
        if path.startswith(folder):
            return tier
    fixtures = set(getattr(item, "fixturenames", ()))
    for tier, names in FIXTURE_TIERS:
        if fixtures & names:
            return tier
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        item.user_properties.append(("tier", tier))
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)


_slow_units: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and ("tier", "unit") in report.user_properties and report.duration > UNIT_BUDGET_S:
        _slow_units.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter) -> None:
    if _slow_units:
        terminalreporter.section(f"unit tests over {UNIT_BUDGET_S:g} s: make them faster or mark them slow or e2e")
        for duration, nodeid in sorted(_slow_units, reverse=True):
            terminalreporter.write_line(f"{duration:6.2f}s {nodeid}")
