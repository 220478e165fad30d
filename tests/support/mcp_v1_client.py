"""An MCP client of the 1.x SDK generation (the 2025 protocol, `Mcp-Session-Id`), run as a script by the Python of
a venv holding `mcp<2` (tests/support/mcp_v1.py): it imports nothing of ragmesh.

    python mcp_v1_client.py URL COLLECTION [--key KEY] [--calls N] [--pause-after K] [--tools-only]

Over streamable HTTP to URL (…/mcp) it initialises one session, ingests a document into COLLECTION (receiving
progress notifications), lists the tools, gets the `search_then_fetch` prompt, reads the document as a resource,
and makes N `search` tool calls. With --pause-after K it prints `PAUSED` after K of them and waits for a line on
stdin (the test kills a gateway meanwhile), then goes on in the same session. With --tools-only it lists the tools
and tries `ingest_text` (a key's scope may not allow it), nothing else. It prints one JSON line at the end: what
it saw, every failure as text."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from importlib.metadata import version
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import AnyUrl

TEXT = (
    "The Aletsch glacier is the largest glacier in the Alps. Its tongue retreats every summer, and surveyors "
    "from the village have measured its front every autumn since 1890."
)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"sdk": version("mcp"), "calls_ok": 0, "errors": [], "progress": []}
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        report["progress"].append([done, total, message])

    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=300)) as http,
        streamable_http_client(args.url, http_client=http) as (read, write, get_session_id),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        report["protocol_version"] = init.protocolVersion
        report["session_id"] = get_session_id()
        if args.tools_only:
            report["tools"] = sorted(tool.name for tool in (await session.list_tools()).tools)
            refused = await session.call_tool("ingest_text", {"text": TEXT, "collection": args.collection})
            report["ingest_error"] = refused.structuredContent["error"]["reason"] if refused.isError else None
            return report
        ingested = await session.call_tool(
            "ingest_text",
            {"text": TEXT, "collection": args.collection, "title": "Aletsch"},
            progress_callback=on_progress,
        )
        assert not ingested.isError, ingested.content
        doc_id = ingested.structuredContent["doc_id"]
        report["tools"] = sorted(tool.name for tool in (await session.list_tools()).tools)
        prompt = await session.get_prompt("search_then_fetch", {"question": "glaciers?", "collection": args.collection})
        report["prompt"] = prompt.messages[0].content.text
        resource = await session.read_resource(AnyUrl(f"ragmesh://{args.collection}/{doc_id}"))
        report["resource"] = resource.contents[0].text
        for i in range(args.calls):
            if args.pause_after is not None and i == args.pause_after:
                print("PAUSED", flush=True)
                await asyncio.to_thread(sys.stdin.readline)
            try:
                result = await session.call_tool("search", {"query": "glacier tongue", "collection": args.collection})
            except Exception as exc:  # every failure is counted, never hidden
                report["errors"].append(f"call {i}: {type(exc).__name__}: {exc}")
                continue
            if result.isError or not result.structuredContent["results"]:
                report["errors"].append(f"call {i}: {result.content}")
            else:
                report["calls_ok"] += 1
        report["session_id_at_end"] = get_session_id()
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("collection")
    parser.add_argument("--key")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--pause-after", type=int)
    parser.add_argument("--tools-only", action="store_true")
    print(json.dumps(asyncio.run(main(parser.parse_args()))), flush=True)
