"""The MCP server end to end with the official client (`from mcp import Client`): over streamable HTTP to the
real gateway (uvicorn on a free port, /mcp) and over stdio to a `ragmesh mcp` subprocess, both backed by the
in-process mesh (root conftest's `mesh_factory`: hash embedder, embedded store)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import get_args

import httpx
import pytest
from mcp import Client, MCPError, StdioServerParameters
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.models import SearchModeName

from tests.support.gateway import mcp_http_client as http_client
from tests.support.gateway import settings_for
from tests.support.gateway import tool_failed as failed
from tests.support.gateway import tool_ok as ok

KEY = "mcp-key"
ROOT = Path(__file__).resolve().parents[2]
READ_TOOLS = {
    "search",
    "fetch_document",
    "convert_to_text",
    "list_collections",
    "get_job",
    "ask",
    "evaluate_collection",
}
WRITE_TOOLS = {
    "ingest_text",
    "ingest_url",
    "ingest_urls",
    "ingest_folder",
    "delete_document",
    "delete_collection",
    "reindex_collection",
    "rollback_collection",
}
RAGMESH = str(Path(sys.executable).with_name("ragmesh"))

# Distinct paragraphs, long enough to make several chunks and snippets that have to be cut.
GLACIER_TEXT = "\n\n".join(
    f"## Part {i}\n\nGlacier number {i} moves {i * 3} metres a year through the valley of {name}, carving "
    f"moraines of granite and gneiss while meltwater feeds the {name} river below the tongue of the ice. "
    f"In winter {i + 2} metres of snow settle on its upper basin and slowly turn into firn, then into blue ice. "
    f"Surveyors from {name} village have measured its front every autumn since {1890 + i * 7}, and the record "
    f"shows the tongue retreating by {i + 11} metres in an average year, faster in hot summers. "
    f"Crevasses open where the bed steepens; seracs fall from the icefall above the {name} hut."
    for i, name in enumerate(["Aletsch", "Rhone", "Gorner", "Morteratsch", "Hintereis"])
)


# --- fixtures and helpers -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture(scope="module")
async def gateway_url(mesh):
    async with run_gateway(settings_for(mesh)) as url:
        yield url


@pytest.fixture(scope="module")
async def rest(gateway_url):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as client:
        yield client


def stdio_params(mesh, **env: str) -> StdioServerParameters:
    addrs = {f"RAGMESH_{name.upper()}_ADDR": addr for name, addr in mesh.addrs.items()}
    return StdioServerParameters(command=RAGMESH, args=["mcp"], env={**addrs, "RAGMESH_LOG_LEVEL": "INFO", **env})


@pytest.fixture(params=["http", "stdio"])
def connect(request, mesh, gateway_url):
    """`async with connect(read_only=False) as client`: the official client over HTTP or over stdio."""

    @contextlib.asynccontextmanager
    async def open_client(*, read_only: bool = False) -> AsyncIterator[Client]:
        if request.param == "stdio":
            env = {"RAGMESH_MCP_READ_ONLY": "true"} if read_only else {}
            async with Client(stdio_params(mesh, **env)) as client:
                yield client
        elif read_only:
            async with run_gateway(settings_for(mesh, mcp_read_only=True)) as url, http_client(url) as client:
                yield client
        else:
            async with http_client(gateway_url) as client:
                yield client

    return open_client


# --- both transports ------------------------------------------------------------------------------------------
async def test_tools_are_listed_with_described_schemas(connect):
    async with connect() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == READ_TOOLS | WRITE_TOOLS
    for tool in tools.values():
        assert tool.description, tool.name
        assert tool.output_schema, tool.name
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    assert tools["delete_collection"].input_schema["required"] == ["collection"]
    assert tools["search"].input_schema["properties"]["mode"]["enum"] == list(get_args(SearchModeName))
    assert tools["search"].annotations.read_only_hint is True
    assert tools["delete_collection"].annotations.destructive_hint is True


async def test_ingest_reports_progress_then_search_finds_it_and_fetch_returns_it_whole(connect, rest, request):
    collection = f"glaciers-{request.node.callspec.id}"
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with connect() as client:
        ingested = ok(
            await client.call_tool(
                "ingest_text",
                {
                    "text": GLACIER_TEXT,
                    "collection": collection,
                    "title": "Alpine glaciers",
                    "metadata": {"region": "alps"},
                },
                progress_callback=on_progress,
            )
        )
        found = ok(
            await client.call_tool(
                "search",
                {
                    "query": "Morteratsch glacier meltwater",
                    "collection": collection,
                    "top_k": 3,
                    "filters": {"region": "alps"},
                },
            )
        )
        fetched = ok(await client.call_tool("fetch_document", {"doc_id": ingested["doc_id"], "collection": collection}))

    assert ingested["status"] == "indexed" and ingested["chunks"] > 1
    assert progress and progress[-1][0] == progress[-1][1]  # the last notification says "done"
    assert [done for done, _, _ in progress] == sorted(done for done, _, _ in progress)
    assert all(message for _, _, message in progress)

    hits = found["results"]
    assert hits and hits[0]["doc_id"] == ingested["doc_id"]
    assert {"doc_id", "chunk_id", "score", "title", "snippet"} <= set(hits[0])
    assert hits[0]["title"] == "Alpine glaciers"
    assert all(len(hit["snippet"]) <= 500 for hit in hits)
    assert any(hit["snippet"].endswith("…") for hit in hits)  # chunks are longer than a snippet

    assert fetched["chunks"] == ingested["chunks"]
    for name in ("Aletsch", "Morteratsch", "Hintereis"):
        assert f"valley of {name}" in fetched["text"]
    twin = await rest.get(f"/api/v1/documents/{ingested['doc_id']}", params={"collection": collection})
    assert fetched["text"] == twin.json()["text"]  # the tool and its REST twin agree


async def test_bad_arguments_are_tool_errors_with_reasons_and_the_session_survives(connect):
    async with connect() as client:
        error = failed(await client.call_tool("search", {"query": "", "top_k": 0}), "REQUEST_INVALID")
        assert error["code"] == "INVALID_ARGUMENT"
        assert {v["field"] for v in error["details"]["field_violations"]} == {"query", "top_k"}

        error = failed(await client.call_tool("search", {"top_k": 3}), "REQUEST_INVALID")
        assert [v["field"] for v in error["details"]["field_violations"]] == ["query"]

        failed(await client.call_tool("search", {"query": "x", "mode": "fuzzy"}), "REQUEST_INVALID")
        failed(
            await client.call_tool("ingest_text", {"text": "x", "metadata": {"nested": {"a": 1}}}), "REQUEST_INVALID"
        )
        failed(await client.call_tool("search", {"query": "x", "collection": "Not A Name!"}), "COLLECTION_NAME_INVALID")
        failed(await client.call_tool("no_such_tool", {}), "TOOL_NOT_FOUND")

        assert "collections" in ok(await client.call_tool("list_collections", {}))


async def test_read_only_mode_registers_no_write_tools(connect, rest):
    await rest.post(
        "/api/v1/ingest", json={"text": "Kept safe in read-only mode.", "collection": "kept", "doc_id": "safe"}
    )
    async with connect(read_only=True) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("delete_collection", {"collection": "kept", "confirm": True})
        found = ok(await client.call_tool("search", {"query": "read-only", "collection": "kept"}))
    assert tools == READ_TOOLS
    failed(refused, "TOOL_NOT_FOUND")
    assert [hit["doc_id"] for hit in found["results"]] == ["safe"]
    assert (await rest.get("/api/v1/documents/safe", params={"collection": "kept"})).status_code == 200


# --- over HTTP --------------------------------------------------------------------------------------------------
async def test_delete_collection_refuses_without_confirm_and_keeps_the_data(gateway_url):
    async with http_client(gateway_url) as client:
        ok(
            await client.call_tool(
                "ingest_text", {"text": "Doomed text about comets.", "collection": "doomed", "doc_id": "comet"}
            )
        )
        for arguments in ({"collection": "doomed"}, {"collection": "doomed", "confirm": False}):
            error = failed(await client.call_tool("delete_collection", arguments), "CONFIRMATION_REQUIRED")
            assert error["code"] == "FAILED_PRECONDITION"
        still = ok(await client.call_tool("fetch_document", {"doc_id": "comet", "collection": "doomed"}))
        assert "comets" in still["text"]

        deleted = ok(await client.call_tool("delete_collection", {"collection": "doomed", "confirm": True}))
        assert deleted == {"name": "doomed", "deleted": 1}
        failed(
            await client.call_tool("fetch_document", {"doc_id": "comet", "collection": "doomed"}),
            "COLLECTION_NOT_FOUND",
        )


async def test_delete_document_and_errors_match_rest(gateway_url, rest):
    async with http_client(gateway_url) as client:
        ok(
            await client.call_tool(
                "ingest_text", {"text": "A short note on tides.", "collection": "notes", "doc_id": "tides"}
            )
        )
        assert ok(await client.call_tool("delete_document", {"doc_id": "tides", "collection": "notes"})) == {
            "deleted": 1
        }
        missing = failed(
            await client.call_tool("fetch_document", {"doc_id": "tides", "collection": "notes"}), "DOCUMENT_NOT_FOUND"
        )
        # A loopback URL is refused by the converter (SSRF guard) -- with the same reason as over REST.
        url = f"{gateway_url}/health"
        converted = (await client.call_tool("convert_to_text", {"uri": url})).structured_content["error"]
        ingested = (await client.call_tool("ingest_url", {"url": url})).structured_content["error"]

    rest_missing = (await rest.get("/api/v1/documents/tides", params={"collection": "notes"})).json()["error"]
    assert (missing["code"], missing["reason"]) == (rest_missing["code"], rest_missing["reason"])
    rest_converted = (await rest.post("/api/v1/convert", json={"url": url})).json()["error"]
    rest_ingested = (await rest.post("/api/v1/ingest_url", json={"url": url})).json()["error"]
    assert converted["reason"] == rest_converted["reason"] and converted["code"] == rest_converted["code"]
    assert ingested["reason"] == rest_ingested["reason"] and ingested["code"] == rest_ingested["code"]


@pytest.fixture(scope="module")
async def keyed_url(mesh):
    async with run_gateway(settings_for(mesh, api_keys=f"other, {KEY}")) as url:
        yield url


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "API_KEY_MISSING"),
        ({"Authorization": "Bearer wrong"}, "API_KEY_INVALID"),
        ({"Authorization": f"Basic {KEY}"}, "API_KEY_MISSING"),
    ],
)
async def test_auth_rejects_a_missing_or_wrong_key_with_the_rest_error(keyed_url, headers, reason):
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=keyed_url) as raw:
        response = await raw.post("/mcp", json=INITIALIZE, headers={**accept, **headers})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert (error["code"], error["reason"]) == ("UNAUTHENTICATED", reason)
    assert error["request_id"] == response.headers["x-request-id"]


async def test_auth_official_client_fails_with_a_wrong_key_and_works_with_the_right_one(keyed_url):
    with pytest.raises(ExceptionGroup) as caught:
        async with http_client(keyed_url, key="wrong") as client:
            await client.list_tools()
    assert caught.group_contains(MCPError, depth=None)
    async with http_client(keyed_url, key=KEY) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == READ_TOOLS | WRITE_TOOLS


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("mcp-files")
    allowed, outside = base / "allowed", base / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "notes.md").write_text("# Field notes\n\nThe heron waited by the reeds.\n")
    (allowed / "big.txt").write_text("word " * 2000)  # 10,000 bytes: over the cap below
    (outside / "secret.txt").write_text("do not read me")
    (allowed / "escape.txt").symlink_to(outside / "secret.txt")
    return {"allowed": allowed, "outside": outside}


@pytest.fixture(scope="module")
async def rooted_url(mesh, roots):
    async with run_gateway(settings_for(mesh, mcp_roots=str(roots["allowed"]), max_upload_bytes=8192)) as url:
        yield url


async def test_convert_to_text_reads_local_files_only_under_the_roots(rooted_url, gateway_url, roots):
    allowed = roots["allowed"]
    async with http_client(rooted_url) as client:
        converted = ok(await client.call_tool("convert_to_text", {"uri": str(allowed / "notes.md")}))
        assert "heron waited by the reeds" in converted["markdown"]
        relative = ok(await client.call_tool("convert_to_text", {"uri": "notes.md"}))
        assert relative["markdown"] == converted["markdown"]
        as_uri = ok(await client.call_tool("convert_to_text", {"uri": (allowed / "notes.md").as_uri()}))
        assert as_uri["markdown"] == converted["markdown"]

        for uri in (
            str(allowed / ".." / "outside" / "secret.txt"),
            str(roots["outside"] / "secret.txt"),
            str(allowed / "escape.txt"),
            "/etc/hostname",
            "../outside/secret.txt",
        ):
            error = failed(await client.call_tool("convert_to_text", {"uri": uri}), "PATH_OUTSIDE_ROOTS")
            assert error["code"] == "PERMISSION_DENIED"
            assert "do not read me" not in json.dumps(error)
        failed(await client.call_tool("convert_to_text", {"uri": str(allowed / "absent.pdf")}), "FILE_NOT_FOUND")
        failed(await client.call_tool("convert_to_text", {"uri": str(allowed / "big.txt")}), "PAYLOAD_TOO_LARGE")
        failed(await client.call_tool("convert_to_text", {"uri": "ftp://example.com/a.pdf"}), "URI_SCHEME_UNSUPPORTED")

    async with http_client(gateway_url) as client:  # no roots configured
        failed(await client.call_tool("convert_to_text", {"uri": str(allowed / "notes.md")}), "LOCAL_PATHS_DISABLED")


# --- over stdio -------------------------------------------------------------------------------------------------
async def test_stdio_keeps_stdout_for_the_protocol_and_logs_to_stderr(mesh):
    params = stdio_params(mesh)
    process = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        env={**os.environ, **params.env},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    await process.stdin.drain()
    process.stdin.close()
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    lines = [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]
    assert lines and all(line.get("jsonrpc") == "2.0" for line in lines)
    assert lines[0]["id"] == 1 and lines[0]["result"]["serverInfo"]["name"] == "ragmesh"
    logs = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    assert any(entry["message"] == "serving MCP over stdio" for entry in logs)


async def test_browser_clients_may_send_the_mcp_headers_and_get_no_session(mesh):
    origin = "http://localhost:6274"  # e.g. the MCP Inspector
    async with run_gateway(settings_for(mesh, cors_origins=origin)) as url, httpx.AsyncClient(base_url=url) as raw:
        preflight = await raw.options(
            "/mcp",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, mcp-session-id, mcp-protocol-version",
            },
        )
        initialized = await raw.post(
            "/mcp", json=INITIALIZE, headers={"Origin": origin, "Accept": "application/json, text/event-stream"}
        )
    assert preflight.status_code == 200
    assert "mcp-session-id" in preflight.headers["access-control-allow-headers"].lower()
    # Stateless (any replica serves any request): no session id to keep, so none to expose.
    assert initialized.status_code == 200 and "mcp-session-id" not in initialized.headers
    assert initialized.headers["access-control-allow-origin"] == origin


async def test_a_hit_in_a_source_file_says_where_it_lies(mesh, gateway_url):
    path = "libs/common/ragmesh_common/walk.py"
    source = ROOT / path
    await mesh.stub("indexer").IngestDocument(
        indexer_pb.IngestDocumentRequest(
            document=indexer_pb.DocumentInput(
                collection="code",
                file=indexer_pb.FileInput(data=source.read_bytes(), filename=source.name, path=path),
            )
        )
    )
    async with http_client(gateway_url) as client:
        hits = ok(await client.call_tool("search", {"query": "skip secret files", "collection": "code"}))["results"]
    assert hits
    lines = source.read_text().splitlines()
    for hit in hits:
        where, _, span = hit["location"].rpartition(":")
        first, last = (int(n) for n in span.split("-"))
        assert where == path and 1 <= first <= last <= len(lines)
        # The lines named hold the snippet's first line.
        assert hit["snippet"].split("\n")[0].strip() in "\n".join(lines[first - 1 : last])


async def test_mcp_requests_are_labelled_with_their_route_in_the_request_metrics(mesh):
    count = "ragmesh_http_server_request_duration_seconds_count"

    def counts(scraped: str) -> dict[str, float]:
        """Requests counted so far, by their labels (the registry is the process's: other tests count too)."""
        lines = [line.removeprefix(count) for line in scraped.splitlines() if line.startswith(count + "{")]
        return {labels: float(value) for labels, value in (line.rsplit(" ", 1) for line in lines)}

    async with run_gateway(settings_for(mesh)) as url, httpx.AsyncClient(base_url=url) as raw:
        before = counts((await raw.get("/metrics")).text)
        async with http_client(url) as client:
            ok(await client.call_tool("list_collections", {}))
        assert (await raw.get("/no-such-page")).status_code == 404
        after = counts((await raw.get("/metrics")).text)
    added = {labels: n - before.get(labels, 0.0) for labels, n in after.items() if n != before.get(labels, 0.0)}
    assert added.get('{method="POST",route="/mcp",status_code="200"}', 0) >= 2, added  # initialize, the call
    # Only the request no route matches is left unlabelled.
    assert {labels: n for labels, n in added.items() if 'route="unmatched"' in labels} == {
        '{method="GET",route="unmatched",status_code="404"}': 1.0
    }
