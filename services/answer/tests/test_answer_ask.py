"""AnswerService over real gRPC: search, embedder and indexer are the real services (hash embedder), the chat
model is the local fake OpenAI-compatible server (tests/support/fake_chat.py) over real HTTP."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb

from tests.support.zoo import DOCS, NOTHING_RELEVANT, PANDA_ANSWER, ingest

pytestmark = pytest.mark.asyncio(loop_scope="session")
# The hash embedder scores by shared words; questions here share few with their chunks.
RELEVANCE = 0.15
ROOT = Path(__file__).resolve().parents[3]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory, fake_chat):
    mesh = await mesh_factory(answer={"base_url": fake_chat.url, "model": "fake-chat", "min_relevance": RELEVANCE})
    await ingest(mesh)
    return mesh


@pytest.fixture
def answer(mesh, fake_chat):
    fake_chat.reset()
    return mesh.stub("answer")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_answer_cites_its_sources_and_lists_the_matched_chunks(answer, fake_chat):
    reply = (await answer.Ask(pb.AskRequest(query="What do giant pandas eat?", collections=["zoo"]))).answer
    assert reply.generator == pb.GENERATOR_MODEL and reply.model == "fake-chat"
    # The fake quotes the numbered source that best matches the question: the panda document, cited as [1].
    assert reply.text == f"{PANDA_ANSWER} [1]"
    first = reply.sources[0]
    assert (first.number, first.doc_id, first.collection, first.title, first.cited) == (
        1,
        "panda",
        "zoo",
        "Giant pandas",
        True,
    )
    assert "bamboo" in first.snippet and 0 < first.relevance_score <= 1
    assert [s.cited for s in reply.sources] == [True] + [False] * (len(reply.sources) - 1)
    assert reply.matched_chunks and all(0 <= c.relevance_score <= 1 for c in reply.matched_chunks)
    scores = [c.relevance_score for c in reply.matched_chunks]
    assert scores == sorted(scores, reverse=True)
    assert reply.matched_chunks[0].doc_id == "panda" and reply.matched_chunks[0].source_number == 1
    assert reply.session_id and reply.standalone_query == "What do giant pandas eat?"
    assert reply.input_tokens > 0 and reply.output_tokens > 0
    # What the model was sent: the instructions, then the numbered sources holding the retrieved chunk's text.
    (request,) = fake_chat.calls()
    prompt = request["messages"][-1]["content"]
    assert request["messages"][0]["role"] == "system" and "[1]" in request["messages"][0]["content"]
    assert "[1] Giant pandas (zoo/panda)" in prompt and reply.matched_chunks[0].text.strip() in prompt
    assert prompt.rstrip().endswith("Question: What do giant pandas eat?")


async def test_the_cited_source_is_listed_first_even_when_it_is_not_the_best_match(answer):
    # The rocket chunk ranks first (more shared words), the fake cites the source sharing the most content words.
    reply = (
        await answer.Ask(
            pb.AskRequest(query="rocket rocket rocket nozzle, and bread dough", collections=["zoo"], top_k=5)
        )
    ).answer
    numbers = {s.doc_id: s.number for s in reply.sources}
    cited = [s for s in reply.sources if s.cited]
    assert len(cited) == 1 and reply.sources[0] == cited[0]
    assert reply.text.endswith(f"[{cited[0].number}]") and set(numbers) >= {"rocket", "bread"}


async def test_ask_stream_sends_the_text_as_it_comes_then_the_whole_answer(answer):
    events = [
        e async for e in answer.AskStream(pb.AskStreamRequest(query="What do giant pandas eat?", collections=["zoo"]))
    ]
    deltas = [e.delta for e in events if e.WhichOneof("event") == "delta"]
    assert len(deltas) > 5, deltas  # word by word, as the model streamed them
    assert events[-1].WhichOneof("event") == "answer" and all(e.WhichOneof("event") == "delta" for e in events[:-1])
    final = events[-1].answer
    assert "".join(deltas).strip() == final.text and final.sources[0].doc_id == "panda" and final.sources[0].cited


async def test_nothing_relevant_is_no_results_without_calling_the_model(answer, fake_chat, rpc_error):
    err = await rpc_error(answer.Ask(pb.AskRequest(query=NOTHING_RELEVANT, collections=["zoo"])))
    assert (err.code, err.reason, err.domain) == (grpc.StatusCode.NOT_FOUND, "NO_RESULTS", "answer.ragmesh")
    assert "zoo" in err.message
    stream_err = await rpc_error(
        _drain(answer.AskStream(pb.AskStreamRequest(query=NOTHING_RELEVANT, collections=["zoo"])))
    )
    assert stream_err.reason == "NO_RESULTS"
    assert fake_chat.calls() == []


async def _drain(call):
    return [event async for event in call]


@pytest.mark.parametrize(
    ("request_fields", "reason"),
    [
        ({"query": "   "}, "QUERY_EMPTY"),
        ({"query": "x" * 1001}, "QUERY_TOO_LONG"),
        ({"query": "pandas", "top_k": 51}, "TOP_K_OUT_OF_RANGE"),
        ({"query": "pandas", "top_k": -1}, "TOP_K_OUT_OF_RANGE"),
        ({"query": "pandas", "session_id": "not a valid id!"}, "SESSION_ID_INVALID"),
        ({"query": "pandas", "collections": ["Bad Name"]}, "COLLECTION_NAME_INVALID"),
    ],
)
async def test_bad_questions_are_invalid_argument_with_a_reason(answer, fake_chat, rpc_error, request_fields, reason):
    err = await rpc_error(answer.Ask(pb.AskRequest(**request_fields)))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason), err
    assert err.field_violations
    assert fake_chat.calls() == []


async def test_a_missing_collection_is_the_search_services_not_found(answer, rpc_error):
    err = await rpc_error(answer.Ask(pb.AskRequest(query="pandas", collections=["nowhere"])))
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "COLLECTION_NOT_FOUND")


async def test_without_a_model_the_answer_is_extractive_and_cited(mesh, rpc_error, answer_service):
    async with answer_service(mesh, min_relevance=RELEVANCE) as answer:
        reply = (
            await answer.Ask(pb.AskRequest(query="how much bamboo does a giant panda eat a day", collections=["zoo"]))
        ).answer
        assert reply.generator == pb.GENERATOR_EXTRACTIVE and reply.model == ""
        panda = DOCS["panda"][1]
        # Every sentence is quoted from a retrieved chunk and cites its document; the closest comes first.
        assert reply.text.startswith(
            "The giant panda eats bamboo almost exclusively, up to twelve kilograms of bamboo a day [1]."
        )
        for sentence in reply.text.split(". "):
            quoted = sentence.rsplit(" [", 1)[0]
            assert quoted.rstrip(".") in panda or any(quoted.rstrip(".") in text for _, text in DOCS.values())
        assert reply.sources[0].doc_id == "panda" and reply.sources[0].cited
        assert reply.output_tokens == len(reply.text.split()) and reply.input_tokens == 0
        events = [
            e
            async for e in answer.AskStream(
                pb.AskStreamRequest(query="how much bamboo does a giant panda eat", collections=["zoo"])
            )
        ]
        assert events[-1].answer.generator == pb.GENERATOR_EXTRACTIVE
        assert "".join(e.delta for e in events[:-1]) == events[-1].answer.text
        err = await rpc_error(answer.Ask(pb.AskRequest(query=NOTHING_RELEVANT, collections=["zoo"])))
        assert err.reason == "NO_RESULTS"


async def test_require_model_refuses_extractive_answers_naming_the_setting(mesh, rpc_error, answer_service):
    async with answer_service(mesh, require_model=True) as answer:
        err = await rpc_error(answer.Ask(pb.AskRequest(query="What do giant pandas eat?", collections=["zoo"])))
    assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "CHAT_MODEL_NOT_CONFIGURED")
    assert "RAGMESH_ANSWER_REQUIRE_MODEL" in err.message and "RAGMESH_ANSWER_MODEL" in err.message


async def test_a_model_that_is_down_is_unavailable_naming_its_endpoint_and_search_still_works(
    mesh, rpc_error, answer_service
):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    async with answer_service(mesh, base_url=url, model="fake-chat", max_retries=0, min_relevance=RELEVANCE) as answer:
        err = await rpc_error(answer.Ask(pb.AskRequest(query="What do giant pandas eat?", collections=["zoo"])))
        assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "CHAT_MODEL_UNAVAILABLE")
        assert url in err.message and err.metadata["endpoint"] == url
        stream_err = await rpc_error(
            _drain(answer.AskStream(pb.AskStreamRequest(query="What do giant pandas eat?", collections=["zoo"])))
        )
        assert stream_err.reason == "CHAT_MODEL_UNAVAILABLE"
    found = await mesh.stub("search").Search(search_pb.SearchRequest(query="giant pandas", collections=["zoo"]))
    assert found.results[0].doc_id == "panda"


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [
        (401, grpc.StatusCode.UNAVAILABLE, "CHAT_MODEL_REJECTED"),
        (404, grpc.StatusCode.UNAVAILABLE, "CHAT_MODEL_REJECTED"),
        (429, grpc.StatusCode.RESOURCE_EXHAUSTED, "CHAT_MODEL_RATE_LIMITED"),
        (500, grpc.StatusCode.UNAVAILABLE, "CHAT_MODEL_UNAVAILABLE"),
    ],
)
async def test_model_errors_map_to_reasons_with_the_apis_message(answer, fake_chat, rpc_error, status, code, reason):
    fake_chat.fail_with = (status, f"fake refusal {status}")
    try:
        err = await rpc_error(answer.Ask(pb.AskRequest(query="What do giant pandas eat?", collections=["zoo"])))
    finally:
        fake_chat.reset()
    assert (err.code, err.reason) == (code, reason)
    assert f"fake refusal {status}" in err.message and err.metadata["status"] == str(status)


async def test_a_model_failing_mid_stream_ends_the_stream_with_its_error(answer, fake_chat):
    fake_chat.break_after = 3
    deltas = []
    try:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for event in answer.AskStream(
                pb.AskStreamRequest(query="What do giant pandas eat?", collections=["zoo"])
            ):
                deltas.append(event.delta)
    finally:
        fake_chat.reset()
    assert len(deltas) == 3 and failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "broke down mid-answer" in failed.value.details()


async def test_an_extractive_answer_from_source_code_quotes_whole_lines_as_code(mesh, answer_service):
    """A Python file and a Markdown page with code blocks, read from this repository: the extractive answer's
    code is whole lines of the files, identifiers and punctuation as written, each on a line of its own."""
    from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb

    files = {path: (ROOT / path).read_text() for path in ("libs/common/ragmesh_common/walk.py", "docs/operations.md")}
    for path, text in files.items():
        await mesh.stub("indexer").IngestDocument(
            indexer_pb.IngestDocumentRequest(
                document=indexer_pb.DocumentInput(
                    collection="code",
                    file=indexer_pb.FileInput(data=text.encode(), filename=Path(path).name, path=path),
                )
            )
        )
    lines = {line.strip() for text in files.values() for line in text.splitlines()}
    async with answer_service(mesh, min_relevance=0.0, extractive_sentences=5) as answer:
        reply = (
            await answer.Ask(pb.AskRequest(query="which files does walk skip as is_secret names", collections=["code"]))
        ).answer
    code = [line.rsplit(" [", 1)[0] for line in reply.text.splitlines() if line.startswith("`")]
    assert code, reply.text
    for span in code:
        assert span.strip("`").strip() in lines  # a whole line, unchanged
    identifiers = set(re.findall(r"\b[A-Za-z]\w*_\w+\b", "\n".join(files.values())))
    assert any(i in reply.text for i in identifiers)
    assert not [i for i in identifiers if i.replace("_", "") in reply.text and i not in reply.text]
