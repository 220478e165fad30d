"""MCP: the `ask` tool (progress while the model streams), documents as resources and the search-then-fetch
prompt, with the official client over streamable HTTP against the real gateway and mesh (hash embedder, the
fake chat model)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from mcp import MCPError
from mcp.types import INVALID_PARAMS
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

from tests.support.gateway import mcp_http_client as client
from tests.support.zoo import NOTHING_RELEVANT, PANDA_ANSWER, ingest


@pytest.fixture(scope="module")
async def gateway_url(mesh_factory, fake_chat):
    mesh = await mesh_factory(answer={"base_url": fake_chat.url, "model": "fake-chat", "min_relevance": 0.15})
    await ingest(mesh)
    await ingest(mesh, docs={"notes/2024 plan": ("Plan", "The plan for 2024 is to plant bamboo for the pandas.")})
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, **addrs)) as url:
        yield url


async def test_ask_answers_with_cited_sources_reporting_progress_as_the_model_streams(gateway_url):
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with client(gateway_url) as mcp:
        result = await mcp.call_tool(
            "ask", {"query": "What do giant pandas eat?", "collection": "zoo"}, progress_callback=on_progress
        )
        assert not result.is_error, result.content
        answer = result.structured_content
        assert answer["answer"] == f"{PANDA_ANSWER} [1]" and answer["generator"] == "model"
        first = answer["sources"][0]
        assert (first["number"], first["doc_id"], first["cited"], first["uri"]) == (
            1,
            "panda",
            True,
            "ragmesh://zoo/panda",
        )
        # Progress: "searching", then while the answer streams, then done (total = pieces written).
        assert progress[0][2] == "searching" and len(progress) >= 3
        assert any(message.startswith("answering") for _, _, message in progress)
        assert progress[-1][0] == progress[-1][1] and progress[-1][0] > 5
        # A follow-up in the same session.
        again = await mcp.call_tool(
            "ask", {"query": "And where do they live?", "collection": "zoo", "session_id": answer["session_id"]}
        )
        assert again.structured_content["standalone_query"] == "What do giant pandas eat? And where do they live?"
        nothing = await mcp.call_tool("ask", {"query": NOTHING_RELEVANT, "collection": "zoo"})
        assert nothing.is_error and nothing.structured_content["error"]["reason"] == "NO_RESULTS"


async def test_documents_are_resources_named_in_search_results(gateway_url):
    async with client(gateway_url) as mcp:
        templates = (await mcp.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["ragmesh://{collection}/{doc_id}"]
        hits = await mcp.call_tool("search", {"query": "plant bamboo plan 2024", "collection": "zoo"})
        uri = next(h["uri"] for h in hits.structured_content["results"] if h["doc_id"] == "notes/2024 plan")
        assert uri == f"ragmesh://zoo/{quote('notes/2024 plan', safe='')}"
        document = await mcp.read_resource(uri)
        assert document.contents[0].text == "The plan for 2024 is to plant bamboo for the pandas."
        assert document.contents[0].mime_type == "text/markdown"
        panda = await mcp.read_resource("ragmesh://zoo/panda")
        assert PANDA_ANSWER in panda.contents[0].text
        with pytest.raises(MCPError) as missing:
            await mcp.read_resource("ragmesh://zoo/no-such-doc")
        assert missing.value.error.code == INVALID_PARAMS
        assert missing.value.error.message.startswith("DOCUMENT_NOT_FOUND: ")
        assert missing.value.error.data["error"]["reason"] == "DOCUMENT_NOT_FOUND"


async def test_the_prompt_tells_an_assistant_to_search_then_fetch(gateway_url):
    async with client(gateway_url) as mcp:
        prompts = {p.name: p for p in (await mcp.list_prompts()).prompts}
        assert set(prompts) == {"search_then_fetch"}
        assert {a.name for a in prompts["search_then_fetch"].arguments} == {"question", "collection"}
        got = await mcp.get_prompt("search_then_fetch", {"question": "Why is the sky blue?", "collection": "zoo"})
    text = got.messages[0].content.text
    assert "Why is the sky blue?" in text and "'zoo'" in text
    assert text.index("`search`") < text.index("`fetch_document`")
