"""The optional rerank stage: a cross-encoder behind an HTTP `/rerank` API re-orders the best candidates.

Off unless RAGMESH_SEARCH_RERANK_URL is set. Two request shapes cover the servers users run:
- "cohere" (Cohere, Infinity, Jina, vLLM, LocalAI): `{"model", "query", "documents": [...], "top_n"}` ->
  `{"results": [{"index", "relevance_score"}]}`;
- "tei" (Hugging Face text-embeddings-inference): `{"query", "texts": [...]}` -> `[{"index", "score"}]`.
Scores are relevance in 0..1 (Cohere and Infinity return that; TEI applies a sigmoid by default); they are
clipped to 0..1 and become the results' scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import httpx
from ragmesh_common.errors import unavailable
from ragmesh_common.reasons import Reason

RerankApi = Literal["cohere", "tei"]


class Reranker(Protocol):
    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score (0..1) per text, in the order of `texts`."""

    async def close(self) -> None: ...


class HttpReranker:
    """A `/rerank` HTTP API client; one connection pool, created at start-up."""

    def __init__(
        self, url: str, *, api: RerankApi = "cohere", model: str = "", api_key: str = "", timeout: float = 10.0
    ) -> None:
        self.url = url
        self.api = api
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=timeout, headers=headers)

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        body: dict[str, Any]
        if self.api == "tei":
            body = {"query": query, "texts": list(texts), "truncate": True}
        else:
            body = {"query": query, "documents": list(texts), "top_n": len(texts), "return_documents": False}
            if self.model:
                body["model"] = self.model
        try:
            response = await self._client.post(self.url, json=body)
            response.raise_for_status()
            return _scores(response.json(), len(texts))
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise unavailable(
                Reason.RERANKER_UNAVAILABLE,
                f"the reranker at {self.url} failed: {exc}"[:500],
                service="reranker",
                url=self.url,
            ) from exc

    async def close(self) -> None:
        await self._client.aclose()


def _scores(payload: Any, count: int) -> list[float]:
    """Scores by input index from a Cohere-style (`results`, `relevance_score`) or TEI-style answer."""
    items = payload["results"] if isinstance(payload, dict) else payload
    scores = [0.0] * count
    seen = 0
    for item in items:
        index = int(item["index"])
        if not 0 <= index < count:
            raise ValueError(f"the reranker answered index {index} for {count} texts")
        score = float(item["relevance_score"] if "relevance_score" in item else item["score"])
        scores[index] = min(1.0, max(0.0, score))
        seen += 1
    if seen != count:
        raise ValueError(f"the reranker scored {seen} of {count} texts")
    return scores
