"""The rerank stage against a small local fake of a `/rerank` HTTP API (Cohere/Infinity and TEI shapes)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as pb

pytestmark = pytest.mark.asyncio(loop_scope="session")
DOCS = {
    "tides": "Tides rise and fall twice a day as the moon pulls on the ocean.",
    "moon-facts": "The moon has no air; its surface is dust and craters.",
    "moon-cake": "Moon cakes are pastries eaten at the autumn festival.",
}


class FakeReranker:
    """Scores a text 0.9 if it mentions "pastries", else 0.1 (TEI shape: raw list; Cohere shape: results)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict, str]] = []  # (path, body, authorization)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body, self.headers.get("Authorization", "")))
                if self.path == "/broken":
                    self.send_response(500)
                    self.end_headers()
                    return
                texts = body.get("documents") or body.get("texts")
                scored = [{"index": i, "score": 0.9 if "pastries" in t else 0.1} for i, t in enumerate(texts)]
                answer = (
                    scored
                    if self.path == "/tei/rerank"
                    else {"results": [{"index": s["index"], "relevance_score": s["score"]} for s in scored]}
                )
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeReranker]:
    fake = FakeReranker()
    yield fake
    fake.server.shutdown()


async def _mesh(mesh_factory, **search):
    mesh = await mesh_factory(search=search)
    documents = [indexer_pb.DocumentInput(collection="default", doc_id=d, text=t) for d, t in DOCS.items()]
    events = [
        e async for e in mesh.stub("indexer").IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents))
    ]
    assert all(e.result.status == indexer_pb.INGEST_STATUS_INDEXED for e in events)
    return mesh.stub("search")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def plain(mesh_factory):
    return await _mesh(mesh_factory)


async def test_without_a_reranker_fusion_decides(plain):
    reply = await plain.Search(pb.SearchRequest(query="moon tides ocean", top_k=3))
    assert reply.results[0].doc_id == "tides"


async def test_the_reranker_reorders_the_candidates(mesh_factory, fake):
    search = await _mesh(
        mesh_factory,
        rerank_url=f"{fake.url}/rerank",
        rerank_model="bge-reranker",
        rerank_api_key="s3cret",
        rerank_top_n=3,
    )
    fake.requests.clear()
    reply = await search.Search(pb.SearchRequest(query="moon tides ocean", top_k=2))
    assert [r.doc_id for r in reply.results][0] == "moon-cake"
    assert [r.score for r in reply.results] == pytest.approx([0.9, 0.1])
    path, body, auth = fake.requests[-1]
    assert (path, body["model"], body["query"], auth) == (
        "/rerank",
        "bge-reranker",
        "moon tides ocean",
        "Bearer s3cret",
    )
    assert len(body["documents"]) == 3  # rerank_top_n candidates, then cut to top_k


async def test_the_tei_shape_and_the_threshold_on_reranked_scores(mesh_factory, fake):
    search = await _mesh(mesh_factory, rerank_url=f"{fake.url}/tei/rerank", rerank_api="tei")
    reply = await search.Search(pb.SearchRequest(query="moon", top_k=3, score_threshold=0.5))
    assert [r.doc_id for r in reply.results] == ["moon-cake"]
    assert "texts" in fake.requests[-1][1]


async def test_a_failing_reranker_is_unavailable(mesh_factory, fake, rpc_error):
    search = await _mesh(mesh_factory, rerank_url=f"{fake.url}/broken")
    err = await rpc_error(search.Search(pb.SearchRequest(query="moon")))
    assert (err.code.name, err.reason) == ("UNAVAILABLE", "RERANKER_UNAVAILABLE")
