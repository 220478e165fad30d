"""The OpenAI-compatible backend against a small local fake of POST /v1/embeddings (the real API is paid)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.errors import RagmeshError
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.server import create_server


class FakeEmbeddingsAPI(ThreadingHTTPServer):
    """Answers like the OpenAI API: vector i of a text is its length and then i's, not normalised; the data
    comes back in reverse order (clients must use `index`). `fail_status` makes it fail instead."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict] = []
        self.fail_status: int | None = None
        self.drop_one = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @staticmethod
    def vector(text: str, dimensions: int) -> list[float]:
        return [float(len(text))] + [float(i) for i in range(1, dimensions)]


class _Handler(BaseHTTPRequestHandler):
    server: FakeEmbeddingsAPI

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if self.server.fail_status:
            return self._reply(self.server.fail_status, {"error": {"message": "overloaded", "type": "server_error"}})
        dimensions = body.get("dimensions", 8)
        inputs = body["input"][: -1 if self.server.drop_one else None]
        data = [
            {"object": "embedding", "index": i, "embedding": FakeEmbeddingsAPI.vector(text, dimensions)}
            for i, text in enumerate(inputs)
        ]
        self._reply(
            200,
            {
                "object": "list",
                "data": data[::-1],
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def _reply(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        """Quiet."""


@pytest.fixture
def api() -> Iterator[FakeEmbeddingsAPI]:
    server = FakeEmbeddingsAPI()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def settings_for(api: FakeEmbeddingsAPI, **extra) -> EmbedderSettings:
    values = {"openai_max_retries": 1, **extra}
    return EmbedderSettings(
        port=0,
        backend="openai",
        openai_base_url=api.base_url,
        openai_api_key="sk-test",
        openai_model="fake-embed-1",
        **values,
    )


async def test_openai_backend_embeds_through_the_api(api, serve, vectors):
    async with serve(settings_for(api, openai_dimensions=6)) as running:
        texts = ["hello", "a longer text"]
        reply = await running.stub.Embed(pb2.EmbedRequest(texts=texts))
        info = await running.stub.GetModelInfo(pb2.GetModelInfoRequest())
    expected = np.array([FakeEmbeddingsAPI.vector(text, 6) for text in texts])
    np.testing.assert_allclose(
        vectors(reply.embeddings), expected / np.linalg.norm(expected, axis=1)[:, None], rtol=1e-6
    )
    assert (reply.model_id, reply.dimension) == ("fake-embed-1", 6)
    assert len(reply.embeddings[0].sparse.indices) == 1  # BM25 is computed locally whatever the backend
    assert (info.backend, info.model_id, info.dimension) == ("openai", "fake-embed-1", 6)
    call = api.seen[-1]
    assert (call["path"], call["auth"], call["model"], call["dimensions"], call["input"]) == (
        "/v1/embeddings",
        "Bearer sk-test",
        "fake-embed-1",
        6,
        texts,
    )


async def test_the_dimension_is_learnt_from_the_api_at_start_up(api, serve):
    async with serve(settings_for(api)) as running:
        info = await running.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert info.dimension == 8
    assert "dimensions" not in api.seen[0]


async def test_a_failing_api_answers_embedding_backend_failed(api, serve, rpc_error):
    async with serve(settings_for(api)) as running:
        api.fail_status = 503
        seen_before = len(api.seen)
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=["hello"])))
        assert (error.code, error.reason, error.domain) == (
            grpc.StatusCode.UNAVAILABLE,
            "EMBEDDING_BACKEND_FAILED",
            "embedder.ragmesh",
        )
        assert error.metadata["status"] == "503"
        assert len(api.seen) - seen_before == 2  # the openai client retried once, as configured
        api.fail_status = None
        assert len((await running.stub.Embed(pb2.EmbedRequest(texts=["hello"]))).embeddings) == 1


async def test_a_malformed_api_answer_is_embedding_backend_failed(api, serve, rpc_error):
    async with serve(settings_for(api)) as running:
        api.drop_one = True
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=["one", "two"])))
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "EMBEDDING_BACKEND_FAILED")


def test_an_unreachable_api_fails_start_up_with_the_reason(api):
    api.fail_status = 401
    with pytest.raises(RagmeshError) as info:
        create_server(settings_for(api, openai_max_retries=0))
    assert info.value.reason == "EMBEDDING_BACKEND_FAILED" and "AuthenticationError" in info.value.message
