"""The laptop bridge, `ragmesh mcp --remote URL --api-key KEY`, as a real stdio subprocess driven by the
official MCP client, against a real gateway with API keys on (over the in-process mesh): a local folder is
uploaded and indexed with progress, the remote tools are proxied, local paths stay inside their roots. The
REST retry loop is checked against a real HTTP server on loopback that answers 429/503 first."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from ragmesh_cli.bridge import Remote, RemoteError
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

pytestmark = pytest.mark.asyncio(loop_scope="session")
KEY = "bridge-key"
RAGMESH = str(Path(sys.executable).with_name("ragmesh"))
DOCUMENTS = Path(__file__).resolve().parents[3] / "shared" / "documents"
CODE = "def greet(name):\n    return f'hello {name}'\n\n\n# __main__ stays as it is\n"


@pytest.fixture(scope="module")
async def gateway_url(mesh_factory):
    mesh = await mesh_factory()
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, api_keys=KEY, **addrs)) as url:
        yield url


def bridge(url: str, roots: Path, key: str = KEY) -> StdioServerParameters:
    return StdioServerParameters(
        command=RAGMESH,
        args=["mcp", "--remote", url, "--api-key", key],
        env={"RAGMESH_MCP_ROOTS": str(roots), "RAGMESH_LOG_LEVEL": "INFO"},
    )


async def test_bridge_ingests_a_local_folder_and_proxies_the_remote_tools(gateway_url, tmp_path):
    laptop = tmp_path / "laptop"
    (laptop / "notes" / "src").mkdir(parents=True)
    (laptop / "notes" / "src" / "greet.py").write_text(CODE)
    (laptop / "notes" / "trip.md").write_text("# Trip\n\nThe ferry to the glacier leaves at nine.\n")
    (laptop / "notes" / ".env").write_text("TOKEN=secret\n")
    (laptop / "notes" / "manual.docx").write_bytes((DOCUMENTS / "test.docx").read_bytes())
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with Client(bridge(gateway_url, laptop)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"convert_to_text", "convert_and_ingest", "search", "fetch_document", "get_job"} <= names
        result = await client.call_tool(
            "convert_and_ingest", {"path": "notes", "collection": "laptop"}, progress_callback=on_progress
        )
        assert not result.is_error, result.content
        summary = result.structured_content
        assert (summary["state"], summary["files"], summary["indexed"], summary["failed"]) == ("done", 3, 3, 0)
        assert summary["skipped_files"] == [{"path": ".env", "reason": "SECRET"}]
        assert progress and progress[-1][:2] == (3, 3)

        hits = await client.call_tool("search", {"query": "ferry to the glacier", "collection": "laptop"})
        assert hits.structured_content["results"][0]["doc_id"] == "trip.md"
        fetched = await client.call_tool("fetch_document", {"doc_id": "src/greet.py", "collection": "laptop"})
        assert fetched.structured_content["text"] == CODE  # verbatim, through the remote store
        job = await client.call_tool("get_job", {"job_id": summary["job_ids"][0]})
        assert job.structured_content["state"] == "done"

        converted = await client.call_tool("convert_to_text", {"path": "notes/manual.docx"})
        assert not converted.is_error and converted.structured_content["markdown"].strip()
        outside = await client.call_tool("convert_to_text", {"path": "/etc/hostname"})
        assert outside.is_error and outside.structured_content["error"]["reason"] == "PATH_OUTSIDE_ROOTS"
        missing = await client.call_tool("convert_and_ingest", {"path": "nope", "collection": "laptop"})
        assert missing.is_error and missing.structured_content["error"]["reason"] == "FILE_NOT_FOUND"


async def test_bridge_reports_the_remote_error_for_a_wrong_collection(gateway_url, tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    async with Client(bridge(gateway_url, tmp_path)) as client:
        result = await client.call_tool("convert_and_ingest", {"path": "a.txt", "collection": "Not Valid"})
    assert result.is_error and result.structured_content["error"]["reason"] == "COLLECTION_NAME_INVALID"


class Flaky(BaseHTTPRequestHandler):
    """429 with Retry-After, then 503, then 200; records when each request came."""

    times: list[float] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        Flaky.times.append(time.monotonic())
        n = len(Flaky.times)
        status, headers = {1: (429, {"Retry-After": "1"}), 2: (503, {})}.get(n, (200, {}))
        body = json.dumps({"ok": n} if status == 200 else {"error": {"reason": "BUSY"}}).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json"}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


async def test_rest_calls_retry_with_backoff_and_honour_retry_after():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    remote = Remote(f"http://127.0.0.1:{server.server_port}", "k", backoff=0.2)
    try:
        Flaky.times = []
        assert await remote.request("GET", "/x") == {"ok": 3}
        first, second, third = Flaky.times
        assert second - first >= 0.95  # Retry-After: 1
        assert 0.15 <= third - second < 0.9  # backoff after the 503 (0.2 s · 2)
        remote.attempts = 1  # no retry: the first 429 is the answer
        Flaky.times = []
        with pytest.raises(RemoteError) as caught:
            await remote.request("GET", "/x")
        assert caught.value.status == 429
    finally:
        await remote.close()
        server.shutdown()
