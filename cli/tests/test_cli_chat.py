"""`ragmesh chat` in a pseudo-terminal (pexpect), as a person types it: the real command against the real
mesh (in this process, hash embedder) and the fake OpenAI-compatible chat model over real HTTP, which calls
`search`, then `fetch_document`, then answers from the document it read."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import pytest_asyncio

from tests.support.zoo import PANDA_ANSWER, ingest

pytestmark = pytest.mark.asyncio(loop_scope="session")
RAGMESH = str(Path(sys.executable).with_name("ragmesh"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory()
    await ingest(mesh)
    return mesh


def chat_env(mesh, fake_chat, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "OTEL_"))}
    return {
        **env,
        "RAGMESH_SEARCH_ADDR": mesh.addrs["search"],
        "RAGMESH_ANSWER_BASE_URL": fake_chat.url,
        "TERM": "dumb",
        **extra,
    }


async def expect(child: pexpect.spawn, pattern: str) -> None:
    """Wait for `pattern` (a literal) without blocking the event loop that serves the mesh."""
    await asyncio.to_thread(child.expect_exact, pattern)


async def test_chat_answers_through_search_and_fetch_tool_calls_and_lists_its_sources(mesh, fake_chat):
    fake_chat.reset()
    child = pexpect.spawn(
        RAGMESH,
        ["chat", "--collection", "zoo", "--model", "fake-chat"],
        env=chat_env(mesh, fake_chat),
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 160),
    )
    try:
        await expect(child, "collection 'zoo' (3 documents), model 'fake-chat'")
        await expect(child, "you> ")
        child.sendline("What do giant pandas eat?")
        await expect(child, "search 'What do giant pandas eat?'")
        await expect(child, "fetch_document 'panda'")
        await expect(child, f"ragmesh> {PANDA_ANSWER} [1]")
        await expect(child, "Sources:")
        await expect(child, "[1] Giant pandas (zoo/panda)")
        await expect(child, "you> ")

        # The model saw what the tools returned: the search hits, then the whole document.
        rounds = fake_chat.calls("tools")
        assert len(rounds) == 3
        assert {t["function"]["name"] for t in rounds[0]["tools"]} == {"search", "fetch_document"}
        hits = json.loads(rounds[1]["messages"][-1]["content"])["results"]
        assert hits[0]["doc_id"] == "panda" and hits[0]["ref"] == 1 and "bamboo" in hits[0]["snippet"]
        document = json.loads(rounds[2]["messages"][-1]["content"])
        assert document["doc_id"] == "panda" and "Sichuan" in document["text"]

        # A model that fails: the error is shown and the conversation goes on.
        fake_chat.fail_with = (503, "the fake model is overloaded")
        child.sendline("And where do they live?")
        await expect(child, "CHAT_MODEL_UNAVAILABLE")
        await expect(child, "the fake model is overloaded")
        await expect(child, "you> ")
        fake_chat.reset()
        child.sendline("/exit")
        await asyncio.to_thread(child.expect, pexpect.EOF)
    finally:
        child.close(force=True)
        fake_chat.reset()
    assert child.exitstatus == 0


async def test_chat_without_a_model_or_with_a_bad_collection_exits_2_saying_why(mesh, fake_chat):
    env = chat_env(mesh, fake_chat)
    env.pop("RAGMESH_ANSWER_BASE_URL")
    proc = await asyncio.to_thread(
        subprocess.run, [RAGMESH, "chat"], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 2 and "RAGMESH_ANSWER_MODEL" in proc.stderr
    proc = await asyncio.to_thread(
        subprocess.run,
        [RAGMESH, "chat", "-c", "Bad Name", "-m", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and "collection name 'Bad Name' is invalid" in proc.stderr
