"""`ragmesh mcp --remote URL --api-key KEY`: a local MCP server (stdio) for a laptop whose documents stay on
the laptop while ragmesh runs elsewhere.

Local tools read files under RAGMESH_MCP_ROOTS on this machine (`..` and symlinks out refused) and send them
to the remote gateway over REST with the bearer key:
- `convert_to_text(path)`: a local file (or an http(s) URL) converted to Markdown by the remote converter;
- `convert_and_ingest(path, collection)`: a file or a whole folder (walked with the `ragmesh index` rules:
  .gitignore, default skips, secrets never read, binaries skipped) uploaded as ZIP archive jobs, followed with
  progress notifications until the jobs finish.
Every other tool of the remote gateway's `/mcp` (search, fetch_document, get_job, ...) is proxied as it is,
through the official MCP client. REST calls are retried with exponential backoff on 429, 502, 503, 504 and
connection errors, waiting as long as a Retry-After header asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import Field
from ragmesh_common.errors import RagmeshError, not_found
from ragmesh_common.logs import log_to_stderr
from ragmesh_common.paths import under_roots
from ragmesh_common.reasons import Reason
from ragmesh_common.validation import path_field
from ragmesh_common.walk import size_groups, walk, zip_files

log = logging.getLogger(__name__)
DOMAIN = "bridge.ragmesh"
ROOTS_SETTING = "RAGMESH_MCP_ROOTS"
RETRY_STATUSES = (429, 502, 503, 504)
LOCAL_TOOLS = ("convert_to_text", "convert_and_ingest")
JOB_POLL_SECONDS = 0.5


class RemoteError(Exception):
    """A REST call the remote gateway answered with an error body (or not at all)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{body.get('reason')}: {body.get('message')}")
        self.status = status
        self.body = body


class Remote:
    """REST calls to the remote gateway with the bearer key, retried with backoff (Retry-After honoured)."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        attempts: int = 6,
        backoff: float = 0.5,
        max_delay: float = 30.0,
        timeout: float = 300.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)
        self.attempts = attempts
        self.backoff = backoff
        self.max_delay = max_delay

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(self.attempts):
            last = attempt == self.attempts - 1
            try:
                response = await self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if last:
                    raise RemoteError(
                        503,
                        {
                            "code": "UNAVAILABLE",
                            "reason": Reason.REMOTE_UNREACHABLE,
                            "message": f"{self.url} did not answer: {exc}",
                        },
                    ) from None
                await asyncio.sleep(self._delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                delay = self._delay(attempt, response.headers.get("retry-after"))
                log.info("%s %s -> %d; retrying in %.1fs", method, path, response.status_code, delay)
                await asyncio.sleep(delay)
                continue
            if response.is_success:
                return response.json()
            try:
                body = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                body = {"code": "UNKNOWN", "reason": f"HTTP_{response.status_code}", "message": response.text[:500]}
            raise RemoteError(response.status_code, body)
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            with contextlib.suppress(ValueError):
                return min(max(float(retry_after), 0.0), self.max_delay)
        return min(self.backoff * 2**attempt, self.max_delay)

    async def close(self) -> None:
        await self.http.aclose()


def error_result(body: dict[str, Any]) -> CallToolResult:
    """A tool error in the shape the gateway's MCP tools use: structured {"error": {...}}, text "REASON: msg"."""
    text = f"{body.get('reason')}: {body.get('message')}\n{json.dumps({'error': body}, ensure_ascii=False)}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content={"error": body}, is_error=True
    )


def local_error(exc: RagmeshError) -> dict[str, Any]:
    return {
        "code": exc.code.name,
        "reason": exc.reason,
        "message": exc.message,
        "details": {**exc.metadata, "domain": exc.domain or DOMAIN},
        "request_id": "",
        "trace_id": "",
    }


class Bridge(MCPServer):
    """The local tools, plus the remote gateway's tools proxied (listed and called through `self.session`)."""

    def __init__(self, remote: Remote, roots: tuple[Path, ...], *, archive_bytes: int) -> None:
        super().__init__(
            "ragmesh-bridge",
            title="ragmesh (remote)",
            version="1.0.0",
            instructions=(
                "ragmesh on a remote gateway. `convert_and_ingest` uploads local files or folders (under the allowed "
                "roots) and indexes them; `search` then `fetch_document` read what is stored."
            ),
        )
        self.remote = remote
        self.roots = roots
        self.archive_bytes = archive_bytes
        self.session: Client | None = None
        self._register()

    async def list_tools(self) -> list[Tool]:
        local = await super().list_tools()
        remote = (
            [t for t in (await self.session.list_tools()).tools if t.name not in LOCAL_TOOLS] if self.session else []
        )
        return [*local, *remote]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name not in LOCAL_TOOLS:
            if self.session is None:
                return error_result(
                    {
                        "code": "UNAVAILABLE",
                        "reason": Reason.REMOTE_UNREACHABLE,
                        "message": "not connected to the remote gateway's /mcp",
                    }
                )
            return await self.session.call_tool(name, arguments)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, RemoteError):
                return error_result(cause.body)
            if isinstance(cause, RagmeshError):
                return error_result(local_error(cause))
            return error_result({"code": "INVALID_ARGUMENT", "reason": Reason.REQUEST_INVALID, "message": str(exc)})

    def _register(self) -> None:
        bridge = self

        @self.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=True))
        async def convert_to_text(
            path: Annotated[
                str,
                path_field(
                    "A file on this machine (under RAGMESH_MCP_ROOTS; relative to the first root), or an http(s) URL."
                ),
            ],
        ) -> dict[str, Any]:
            """Convert a local file (PDF, DOCX, PPTX, XLSX, HTML, EPUB, source code, ...) or a URL to Markdown
            with the remote converter, without storing it."""
            if urlsplit(path).scheme.lower() in ("http", "https"):
                return await bridge.remote.request("POST", "/api/v1/convert", json={"url": path})
            local = under_roots(path, bridge.roots, domain=DOMAIN, setting=ROOTS_SETTING, field="path")
            if not local.is_file():
                raise not_found(Reason.FILE_NOT_FOUND, "no such file", path=str(local))
            data = await asyncio.to_thread(local.read_bytes)
            return await bridge.remote.request("POST", "/api/v1/convert", files={"file": (local.name, data)})

        @self.tool(
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True
            )
        )
        async def convert_and_ingest(
            path: Annotated[
                str,
                path_field("A file or folder on this machine, under RAGMESH_MCP_ROOTS (relative to the first root)."),
            ],
            ctx: Context,
            collection: Annotated[str, Field(description="The remote collection.")] = "default",
        ) -> dict[str, Any]:
            """Upload a local file or a whole folder to the remote ragmesh and index it: folders follow
            .gitignore and the default skips, secrets are never read, binaries are skipped; source code is stored
            verbatim with line ranges. Reports progress until the remote jobs finish."""
            return await bridge.ingest(path, collection, ctx)

    async def ingest(self, path: str, collection: str, ctx: Context) -> dict[str, Any]:
        local = under_roots(path, self.roots, domain=DOMAIN, setting=ROOTS_SETTING, field="path")
        if not local.exists():
            raise not_found(Reason.FILE_NOT_FOUND, "no such file or folder", path=str(local))
        walked = await asyncio.to_thread(walk, local, max_bytes=self.archive_bytes)
        groups = size_groups(walked.files, self.archive_bytes)
        await ctx.report_progress(0, max(len(walked.files), 1), f"uploading {len(walked.files)} files")
        job_ids = []
        for group in groups:
            data = await asyncio.to_thread(zip_files, group)
            accepted = await self.remote.request(
                "POST",
                "/api/v1/jobs/archive",
                data={"collection": collection},
                files={"file": (f"{local.name}.zip", data, "application/zip")},
            )
            job_ids.append(accepted["job_id"])
        jobs = await self._follow(job_ids, len(walked.files), ctx)
        return {
            "collection": collection,
            "files": len(walked.files),
            "job_ids": job_ids,
            "state": "done" if all(j["state"] == "done" for j in jobs) else "incomplete",
            **{key: sum(j[key] for j in jobs) for key in ("indexed", "unchanged", "failed")},
            "errors": [e for j in jobs for e in j["errors"]],
            "skipped_files": [{"path": s.rel, "reason": s.reason} for s in walked.skipped if not s.quiet],
        }

    async def _follow(self, job_ids: list[str], total: int, ctx: Context) -> list[dict[str, Any]]:
        reported = -1
        while True:
            jobs = [await self.remote.request("GET", f"/api/v1/jobs/{job_id}") for job_id in job_ids]
            handled = sum(j["indexed"] + j["unchanged"] + j["failed"] for j in jobs)
            if handled != reported:
                await ctx.report_progress(handled, max(total, 1), f"{handled} of {total} files handled")
                reported = handled
            if all(j["state"] in ("done", "failed", "cancelled") for j in jobs):
                return jobs
            await asyncio.sleep(JOB_POLL_SECONDS)


async def serve(
    remote_url: str, api_key: str | None, roots: tuple[Path, ...], *, archive_bytes: int = 16 * 1024 * 1024
) -> None:
    """Serve the bridge over stdio until stdin closes; logs go to stderr."""
    log_to_stderr()
    remote = Remote(remote_url, api_key)
    bridge = Bridge(remote, roots, archive_bytes=archive_bytes)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=300) as http,
            Client(streamable_http_client(f"{remote.url}/mcp", http_client=http)) as session,
        ):
            bridge.session = session
            log.info("bridging MCP over stdio to %s/mcp", remote.url)
            await bridge.run_stdio_async()
    finally:
        await remote.close()
