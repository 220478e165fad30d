"""Conversations: the session stores on their own (SQLite under the data directory, a real Redis), and
follow-up questions through the real answer service, resolved against the earlier turn after a restart."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh_answer.sessions import RedisSessions, SqliteSessions, StoredSource, Turn

from tests.support.zoo import PANDA_ANSWER, ingest

pytestmark = pytest.mark.asyncio(loop_scope="session")
RELEVANCE = 0.15
REDIS_URL = os.environ.get("RAGMESH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
FIRST, FOLLOW_UP = "What do giant pandas eat?", "And where do they live?"


def redis_or_skip() -> str:
    """The test Redis URL, or skip when nothing listens there."""
    from urllib.parse import urlsplit

    url = urlsplit(REDIS_URL)
    try:
        socket.create_connection((url.hostname, url.port or 6379), timeout=1).close()
    except OSError:
        pytest.skip(f"no Redis at {REDIS_URL} (set RAGMESH_TEST_REDIS_URL to run the Redis session tests)")
    return REDIS_URL


def turn(n: int, created_at: float | None = None) -> Turn:
    return Turn(
        query=f"question {n}",
        standalone_query=f"standalone {n}",
        answer=f"answer {n} [1]",
        generator="model",
        sources=[StoredSource(1, f"doc-{n}", "zoo", cited=True)],
        created_at=created_at or time.time(),
    )


# --- the stores -----------------------------------------------------------------------------------------------
async def test_sqlite_keeps_the_last_turns_and_forgets_expired_sessions(tmp_path):
    store = SqliteSessions(tmp_path / "answer" / "sessions.sqlite3", max_turns=3, ttl_seconds=60)
    try:
        for n in range(5):
            await store.append("s1", turn(n))
        kept = await store.load("s1")
        assert [t.query for t in kept] == ["question 2", "question 3", "question 4"]
        assert kept[0].sources[0] == StoredSource(1, "doc-2", "zoo", cited=True)
        await store.append("old", turn(9, created_at=time.time() - 61))
        assert await store.load("old") == []  # expired: a minute after its last turn
        assert await store.load("never") == []
        assert await store.delete("s1") == 3 and await store.load("s1") == []
        assert await store.delete("s1") == 0
    finally:
        await store.close()


_WRITER = """
import asyncio, sys, time
from pathlib import Path
from ragmesh_answer.sessions import SqliteSessions, Turn

async def main(path, session, count, then_sleep):
    store = SqliteSessions(Path(path), max_turns=1000, ttl_seconds=3600)
    for n in range(count):
        await store.append(session, Turn(query=f"{session} {n}", standalone_query="", answer="", generator="model"))
    print("stored", flush=True)
    if then_sleep:
        time.sleep(60)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "sleep"))
"""


@pytest.mark.e2e  # child processes
async def test_sqlite_turns_survive_kill_9_and_concurrent_writer_processes(tmp_path):
    path = tmp_path / "sessions.sqlite3"

    async def writer(session: str, count: int, then: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, str(path), session, str(count), then, stdout=asyncio.subprocess.PIPE
        )

    victim = await writer("killed", 3, "sleep")
    try:
        assert await asyncio.wait_for(victim.stdout.readline(), 60) == b"stored\n"
    finally:
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
    writers = [await writer(name, 25, "exit") for name in ("a", "b", "a")]
    assert [await asyncio.wait_for(w.wait(), 60) for w in writers] == [0, 0, 0]
    store = SqliteSessions(path, max_turns=1000, ttl_seconds=3600)
    try:
        assert [t.query for t in await store.load("killed")] == ["killed 0", "killed 1", "killed 2"]
        assert len(await store.load("a")) == 50 and len(await store.load("b")) == 25
    finally:
        await store.close()


async def test_redis_keeps_the_last_turns_with_a_time_to_live():
    import redis.asyncio as redis

    prefix = f"ragmesh-test:{uuid.uuid4().hex}:"
    store = RedisSessions(redis_or_skip(), prefix=prefix, max_turns=3, ttl_seconds=600)
    client = redis.from_url(REDIS_URL)
    try:
        for n in range(5):
            await store.append("s1", turn(n))
        assert [t.query for t in await store.load("s1")] == ["question 2", "question 3", "question 4"]
        assert 590 <= await client.ttl(f"{prefix}session:s1") <= 600
        assert await store.load("never") == []
        assert await store.delete("s1") == 3 and await store.load("s1") == []
    finally:
        keys = [key async for key in client.scan_iter(f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        await store.close()


async def test_an_unreachable_redis_is_session_store_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisSessions(f"redis://127.0.0.1:{port}/0", prefix="x:", max_turns=3, ttl_seconds=600)
    try:
        with pytest.raises(Exception) as failed:
            await store.load("s1")
    finally:
        await store.close()
    assert (failed.value.code, failed.value.reason) == (grpc.StatusCode.UNAVAILABLE, "SESSION_STORE_UNAVAILABLE")


# --- follow-ups through the service -----------------------------------------------------------------------------
@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory()
    await ingest(mesh)
    return mesh


async def _ask(stub, query: str, session_id: str = "") -> pb.Answer:
    return (await stub.Ask(pb.AskRequest(query=query, collections=["zoo"], session_id=session_id))).answer


async def _follow_up_after_a_restart(answer_service, mesh, fake_chat, rpc_error, **settings) -> None:
    """Ask, restart the answer service (a fresh one over the same store), ask a follow-up in the session."""
    fake_chat.reset()
    async with answer_service(mesh, base_url=fake_chat.url, model="fake-chat", **settings) as answer:
        # Alone, the follow-up finds nothing: "they" could be anything.
        assert (await rpc_error(answer.Ask(pb.AskRequest(query=FOLLOW_UP, collections=["zoo"])))).reason == "NO_RESULTS"
        first = await _ask(answer, FIRST)
    async with answer_service(mesh, base_url=fake_chat.url, model="fake-chat", **settings) as answer:
        second = await _ask(answer, FOLLOW_UP, first.session_id)
        assert second.session_id == first.session_id
        # The model rewrote it with the earlier turn (the fake joins the last question and the follow-up).
        assert second.standalone_query == f"{FIRST} {FOLLOW_UP}"
        assert second.sources[0].doc_id == "panda" and second.sources[0].cited
        (rewrite,) = fake_chat.calls("rewrite")
        transcript = rewrite["messages"][-1]["content"]
        assert f"User: {FIRST}" in transcript and f"Assistant: {PANDA_ANSWER}" in transcript
        assert f"Follow-up question: {FOLLOW_UP}" in transcript
        # The answer call carries the conversation too.
        history = fake_chat.calls("answer")[-1]["messages"]
        assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
        assert history[1]["content"] == FIRST and history[2]["content"] == PANDA_ANSWER  # citations stripped
        stored = await answer.GetSession(pb.GetSessionRequest(session_id=first.session_id))
        assert [t.query for t in stored.turns] == [FIRST, FOLLOW_UP]
        assert stored.turns[1].standalone_query == second.standalone_query
        assert stored.turns[0].answer == first.text and stored.turns[0].sources[0].doc_id == "panda"
        assert stored.turns[0].generator == pb.GENERATOR_MODEL and stored.turns[0].created_at.endswith("Z")
        deleted = await answer.DeleteSession(pb.DeleteSessionRequest(session_id=first.session_id))
        assert deleted.deleted_turns == 2
        err = await rpc_error(answer.GetSession(pb.GetSessionRequest(session_id=first.session_id)))
        assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


async def test_a_follow_up_is_resolved_from_the_embedded_store_after_a_restart(
    mesh, fake_chat, rpc_error, answer_service
):
    await _follow_up_after_a_restart(answer_service, mesh, fake_chat, rpc_error, min_relevance=RELEVANCE)
    assert (mesh.data_dir / "answer" / "sessions.sqlite3").is_file()


async def test_a_follow_up_is_resolved_from_redis_by_another_replica(mesh, fake_chat, rpc_error, answer_service):
    prefix = f"ragmesh-test:{uuid.uuid4().hex}:"
    await _follow_up_after_a_restart(
        answer_service,
        mesh,
        fake_chat,
        rpc_error,
        min_relevance=RELEVANCE,
        redis_url=redis_or_skip(),
        redis_prefix=prefix,
        data_dir=Path("/nonexistent/not-used-with-redis"),
    )


async def test_without_a_model_a_follow_up_is_searched_with_the_previous_question(mesh, answer_service):
    async with answer_service(mesh, min_relevance=RELEVANCE, session_turns=2) as answer:
        first = await _ask(answer, FIRST)
        second = await _ask(answer, FOLLOW_UP, first.session_id)
        assert second.standalone_query == f"{FIRST} {FOLLOW_UP}"
        assert second.generator == pb.GENERATOR_EXTRACTIVE and second.sources[0].doc_id == "panda"
        await _ask(answer, "How heavy is a newborn panda cub?", first.session_id)
        stored = await answer.GetSession(pb.GetSessionRequest(session_id=first.session_id))
        assert [t.query for t in stored.turns] == [FOLLOW_UP, "How heavy is a newborn panda cub?"]  # the last two


async def test_without_a_model_chained_follow_ups_stay_within_the_query_limit(mesh, answer_service):
    async with answer_service(mesh, min_relevance=0.01, max_query_chars=40) as answer:
        first = await _ask(answer, FIRST)
        sid = first.session_id
        for follow_up in (FOLLOW_UP, "And how much bamboo do pandas eat?", "And the giant panda cubs?"):
            reply = await _ask(answer, follow_up, sid)
            assert len(reply.standalone_query) <= 40 and reply.standalone_query.endswith(follow_up)
