"""POST /api/v1/ask and the session routes end to end: real HTTP to the gateway, real gRPC to the services
(root conftest's `mesh_factory`, hash embedder), the chat model a local fake OpenAI-compatible server over
real HTTP (tests/support/fake_chat.py)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from ragmesh_gateway.app import run_gateway

from tests.support.gateway import assert_error, settings_for
from tests.support.zoo import NOTHING_RELEVANT, PANDA_ANSWER, ingest

KEY = "ask-key"
RELEVANCE = 0.15  # the hash embedder scores by shared words
QUESTION = "What do giant pandas eat?"


def sse(response: httpx.Response) -> list[tuple[str, dict]]:
    """(event, data) of a Server-Sent Events body; comments (pings) skipped."""
    events = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        event = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        events.append((event, json.loads(data)))
    return events


@pytest.fixture(scope="module")
async def mesh(mesh_factory, fake_chat):
    mesh = await mesh_factory(answer={"base_url": fake_chat.url, "model": "fake-chat", "min_relevance": RELEVANCE})
    await ingest(mesh)
    await ingest(
        mesh,
        collection="zoo2",
        docs={"koala": ("Koalas", "Koalas eat eucalyptus leaves and sleep most of the day in Australian trees.")},
    )
    return mesh


@pytest.fixture(scope="module")
async def api(mesh):
    async with run_gateway(settings_for(mesh)) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


@pytest.fixture
def chat(fake_chat):
    fake_chat.reset()
    return fake_chat


async def test_ask_answers_with_cited_sources_and_matched_chunks(api, chat):
    response = await api.post("/api/v1/ask", json={"query": QUESTION, "collection": "zoo"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) >= {"answer", "sources", "matched_chunks", "session_id", "generator"}
    assert body["answer"] == f"{PANDA_ANSWER} [1]" and body["generator"] == "model" and body["model"] == "fake-chat"
    first = body["sources"][0]
    assert (first["number"], first["doc_id"], first["collection"], first["title"], first["cited"]) == (
        1,
        "panda",
        "zoo",
        "Giant pandas",
        True,
    )
    assert "bamboo" in first["snippet"]
    assert [s["cited"] for s in body["sources"]] == [True] + [False] * (len(body["sources"]) - 1)
    chunk = body["matched_chunks"][0]
    assert set(chunk) >= {"chunk_id", "text", "relevance_score"} and chunk["doc_id"] == "panda"
    assert all(0 <= c["relevance_score"] <= 1 for c in body["matched_chunks"])
    assert body["session_id"] and body["standalone_query"] == QUESTION
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0 and body["took_ms"] > 0
    # The chunk the answer lists is the one the model was given.
    assert chunk["text"].strip() in chat.calls("answer")[0]["messages"][-1]["content"]


async def test_several_collections_are_searched_together(api):
    response = await api.post(
        "/api/v1/ask",
        json={"query": "giant pandas eat bamboo, koalas eat eucalyptus", "collections": ["zoo", "zoo2"], "top_k": 6},
    )
    assert response.status_code == 200, response.text
    assert {s["collection"] for s in response.json()["sources"]} == {"zoo", "zoo2"}


@pytest.mark.parametrize("how", ["body", "accept-header"])
async def test_ask_streams_server_sent_events_then_the_whole_answer(api, how):
    request = {"query": QUESTION, "collection": "zoo"}
    headers = {}
    if how == "body":
        request["stream"] = True
    else:
        headers["Accept"] = "text/event-stream"
    response = await api.post("/api/v1/ask", json=request, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response)
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"token"} and len(kinds) > 5
    done = events[-1][1]
    assert "".join(data["text"] for kind, data in events if kind == "token").strip() == done["answer"]
    assert done["answer"] == f"{PANDA_ANSWER} [1]" and done["sources"][0]["doc_id"] == "panda"
    assert done["matched_chunks"] and done["session_id"]


async def test_a_failure_mid_stream_is_an_error_event_with_the_error_body(api, chat):
    chat.break_after = 4
    response = await api.post("/api/v1/ask", json={"query": QUESTION, "collection": "zoo", "stream": True})
    assert response.status_code == 200
    events = sse(response)
    assert [kind for kind, _ in events] == ["token"] * 4 + ["error"]
    error = events[-1][1]["error"]
    assert error["reason"] == "CHAT_MODEL_UNAVAILABLE" and "mid-answer" in error["message"]
    assert error["request_id"] == response.headers["x-request-id"]
    assert set(error) == {"code", "reason", "message", "details", "request_id", "trace_id"}


@pytest.mark.parametrize("stream", [False, True])
async def test_nothing_relevant_is_404_no_results_and_the_model_is_not_called(api, chat, stream):
    response = await api.post("/api/v1/ask", json={"query": NOTHING_RELEVANT, "collection": "zoo", "stream": stream})
    error = assert_error(response, 404, "NO_RESULTS")  # a plain error response: nothing was streamed yet
    assert error["details"]["collections"] == "zoo"
    assert chat.calls() == []


@pytest.mark.parametrize(
    ("body", "status", "reason", "field"),
    [
        ({"query": ""}, 400, "REQUEST_INVALID", "query"),
        ({"query": "x" * 1001}, 400, "REQUEST_INVALID", "query"),
        ({"query": "pandas", "top_k": 0}, 400, "REQUEST_INVALID", "top_k"),
        ({"query": "pandas", "top_k": 51}, 400, "REQUEST_INVALID", "top_k"),
        ({"query": "pandas", "collection": "zoo", "collections": ["zoo"]}, 400, "REQUEST_INVALID", "body"),
        ({"query": "pandas", "color": "blue"}, 400, "REQUEST_INVALID", "color"),
        ({"query": "pandas", "collection": "Not Valid!"}, 400, "COLLECTION_NAME_INVALID", "collection"),
        (
            {"query": "pandas", "collection": "zoo", "session_id": "no spaces allowed"},
            400,
            "SESSION_ID_INVALID",
            "session_id",
        ),
        ({"query": "   ", "collection": "zoo"}, 400, "QUERY_EMPTY", "query"),
        ({"query": "pandas", "collection": "missing"}, 404, "COLLECTION_NOT_FOUND", None),
    ],
)
async def test_bad_questions_get_a_4xx_with_a_reason(api, chat, body, status, reason, field):
    error = assert_error(await api.post("/api/v1/ask", json=body), status, reason)
    if field:
        assert field in {v["field"] for v in error["details"]["field_violations"]}, error
    assert chat.calls() == []


async def test_a_session_keeps_the_conversation_and_can_be_read_and_forgotten(api):
    first = (await api.post("/api/v1/ask", json={"query": QUESTION, "collection": "zoo"})).json()
    second = await api.post(
        "/api/v1/ask", json={"query": "And where do they live?", "collection": "zoo", "session_id": first["session_id"]}
    )
    assert second.status_code == 200, second.text
    assert second.json()["standalone_query"] == f"{QUESTION} And where do they live?"
    assert second.json()["sources"][0]["doc_id"] == "panda"
    session = await api.get(f"/api/v1/sessions/{first['session_id']}")
    assert session.status_code == 200, session.text
    turns = session.json()["turns"]
    assert [t["query"] for t in turns] == [QUESTION, "And where do they live?"]
    assert turns[0]["answer"] == first["answer"] and turns[0]["sources"][0]["doc_id"] == "panda"
    assert turns[0]["generator"] == "model" and turns[0]["created_at"].endswith("Z")
    deleted = await api.delete(f"/api/v1/sessions/{first['session_id']}")
    assert deleted.json() == {"session_id": first["session_id"], "deleted_turns": 2}
    assert_error(await api.get(f"/api/v1/sessions/{first['session_id']}"), 404, "SESSION_NOT_FOUND")
    assert (await api.delete(f"/api/v1/sessions/{first['session_id']}")).json()["deleted_turns"] == 0
    assert_error(await api.get("/api/v1/sessions/bad id"), 400, "SESSION_ID_INVALID")


async def test_a_model_that_is_down_is_503_naming_it_while_search_keeps_working(mesh, answer_service):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    async with (
        answer_service(mesh, base_url=dead, model="fake-chat", max_retries=0, min_relevance=RELEVANCE) as down,
        run_gateway(settings_for(mesh, answer_addr=down.addr)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        for stream in (False, True):
            response = await http.post("/api/v1/ask", json={"query": QUESTION, "collection": "zoo", "stream": stream})
            error = assert_error(response, 503, "CHAT_MODEL_UNAVAILABLE")
            assert dead in error["message"] and error["details"]["endpoint"] == dead
        found = await http.post("/api/v1/search", json={"query": "giant pandas", "collection": "zoo"})
        assert found.status_code == 200 and found.json()["results"][0]["doc_id"] == "panda"


async def test_extractive_answers_without_a_model_and_require_model_is_503(mesh, answer_service):
    async with (
        answer_service(mesh, min_relevance=RELEVANCE) as extractive,
        run_gateway(settings_for(mesh, answer_addr=extractive.addr)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        body = (
            await http.post(
                "/api/v1/ask", json={"query": "how much bamboo does a giant panda eat a day", "collection": "zoo"}
            )
        ).json()
        assert body["generator"] == "extractive" and body["model"] == ""
        assert body["answer"].startswith(PANDA_ANSWER.removesuffix(".") + " [1].")
    async with (
        answer_service(mesh, require_model=True) as strict,
        run_gateway(settings_for(mesh, answer_addr=strict.addr)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        error = assert_error(
            await http.post("/api/v1/ask", json={"query": QUESTION, "collection": "zoo"}),
            503,
            "CHAT_MODEL_NOT_CONFIGURED",
        )
        assert "RAGMESH_ANSWER_REQUIRE_MODEL" in error["message"]


async def test_ready_fans_out_to_the_answer_service_and_openapi_documents_ask(api):
    ready = await api.get("/ready")
    assert ready.status_code == 200 and ready.json()["services"]["answer"] == "SERVING"
    spec = (await api.get("/openapi.json")).json()
    ask = spec["paths"]["/api/v1/ask"]["post"]
    assert "text/event-stream" in ask["responses"]["200"]["content"]
    assert {"404", "503"} <= set(ask["responses"])
    assert spec["components"]["schemas"]["AskRequest"]["properties"]["query"]["maxLength"] == 1000
    assert {"/api/v1/sessions/{session_id}"} <= set(spec["paths"])


async def test_ask_and_sessions_need_the_key_and_the_web_page_is_open(mesh):
    async with (
        run_gateway(settings_for(mesh, api_keys=KEY)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        assert_error(await http.post("/api/v1/ask", json={"query": QUESTION}), 401, "API_KEY_MISSING")
        assert_error(await http.get("/api/v1/sessions/abc"), 401, "API_KEY_MISSING")
        ok = await http.post(
            "/api/v1/ask", json={"query": QUESTION, "collection": "zoo"}, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert ok.status_code == 200, ok.text
        page = await http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert '<script src="/web/app.js"' in page.text and "http" not in page.text.split("<body>")[0].replace(
            "http-equiv", ""
        )  # nothing loaded from elsewhere
        for asset, kind in (("/web/app.js", "javascript"), ("/web/style.css", "text/css")):
            served = await http.get(asset)
            assert served.status_code == 200 and kind in served.headers["content-type"], asset
        assert (await http.get("/web/nope.js")).status_code == 404
