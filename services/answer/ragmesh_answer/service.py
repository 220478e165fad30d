"""Questions -> answers with cited sources. No gRPC server code here.

    question -> (session: rewrite a follow-up into a standalone question) -> Search (gRPC)
             -> nothing at least min_relevance: NO_RESULTS, the model is not called
             -> numbered context within the token budget
             -> (graph enabled) sources that are graph entities get their relations (GraphService, one hop)
             -> the chat model, streamed (or, with none configured, the retrieved sentences closest to the
                question, ranked with the embedder, each cited)
             -> citations read back, sources ordered cited-first -> the turn stored in the session

`Answerer.ask` yields the answer's text pieces (str) as they come, then the finished `Answer`.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.messages import struct
from ragmesh_common.reasons import Reason

from . import context as ctx
from .chat_model import ChatModel, Completion
from .errors import DOMAIN
from .graph import Neighbourhoods, entity_id
from .metrics import AnswerMetrics
from .sessions import SessionStore, StoredSource, Turn, session_id

log = logging.getLogger(__name__)

MAX_TOP_K = 50
MODEL, EXTRACTIVE = "model", "extractive"
# Sentences ranked with the embedder for an extractive answer (one Embed call; on a CPU the model embeds a few
# dozen short texts a second, so this bounds the time to the first token): those sharing the most words with
# the question, then in retrieval order. And how far below the best a quoted sentence may score.
MAX_CANDIDATE_SENTENCES = 16
EXTRACTIVE_RELATIVE_FLOOR = 0.6
_WORD = re.compile(r"\w+")
# History given to the rewrite: each earlier answer cut to this many characters.
HISTORY_ANSWER_CHARS = 600

_SEARCH_MODES = {
    "hybrid": search_pb.SEARCH_MODE_HYBRID,
    "dense": search_pb.SEARCH_MODE_DENSE,
    "sparse": search_pb.SEARCH_MODE_SPARSE,
    "semantic": search_pb.SEARCH_MODE_SEMANTIC,
    "keyword": search_pb.SEARCH_MODE_KEYWORD,
}
_CITATIONS = re.compile(r"\s*\[\d{1,3}(?:\s*[,;]\s*\d{1,3})*\]")

ANSWER_INSTRUCTIONS = (
    "You answer questions using only the numbered sources you are given. Cite the source of every statement "
    "by its number in square brackets, like [1] or [2][3]. If the sources do not contain the answer, say that "
    "you don't know; never make anything up. Answer concisely, in the language of the question."
)
REWRITE_INSTRUCTIONS = (
    "Rewrite the follow-up question as a standalone question that can be understood without the conversation: "
    'replace pronouns and references ("it", "they", "the second one") with what they refer to in the '
    "conversation. Reply with the standalone question only. If it is already standalone, repeat it unchanged."
)


@dataclass(frozen=True)
class Question:
    query: str
    collections: Sequence[str] = ()
    top_k: int = 0
    filters: Mapping[str, Any] = field(default_factory=dict)
    session_id: str = ""


@dataclass
class Answer:
    text: str
    sources: list[ctx.SourceDoc]  # cited first
    chunks: list[ctx.Chunk]  # best first
    session_id: str
    generator: str  # MODEL or EXTRACTIVE
    model: str
    standalone_query: str
    input_tokens: int = 0
    output_tokens: int = 0
    numbers: dict[tuple[str, str], int] = field(default_factory=dict)  # (collection, doc_id) -> source number


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, completion: Completion) -> None:
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens


class Answerer:
    """The answer service's domain: see the module docstring."""

    def __init__(
        self,
        *,
        search: ServiceClient,
        embedder: ServiceClient,
        sessions: SessionStore,
        metrics: AnswerMetrics,
        model: ChatModel | None,
        require_model: bool = False,
        default_top_k: int = 5,
        search_mode: str = "dense",
        min_relevance: float = 0.3,
        context_tokens: int = 3000,
        max_query_chars: int = 1000,
        extractive_sentences: int = 3,
        session_turns: int = 5,
        neighbourhoods: Neighbourhoods | None = None,
    ) -> None:
        self.search = search
        self.embedder = embedder
        self.sessions = sessions
        self.metrics = metrics
        self.model = model
        self.require_model = require_model
        self.default_top_k = default_top_k
        self.search_mode = _SEARCH_MODES[search_mode]
        self.min_relevance = min_relevance
        self.context_tokens = context_tokens
        self.max_query_chars = max_query_chars
        self.extractive_sentences = extractive_sentences
        self.session_turns = session_turns
        self.neighbourhoods = neighbourhoods

    @property
    def generator(self) -> str:
        return MODEL if self.model is not None else EXTRACTIVE

    # --- sessions -------------------------------------------------------------------------------------------
    async def get_session(self, sid: str) -> list[Turn]:
        turns = await self.sessions.load(session_id(sid))
        if not turns:
            raise RagmeshError(
                grpc.StatusCode.NOT_FOUND,
                Reason.SESSION_NOT_FOUND,
                f"no session {sid!r} (or it expired)",
                DOMAIN,
                {"session_id": sid},
            )
        return turns

    async def delete_session(self, sid: str) -> int:
        return await self.sessions.delete(session_id(sid))

    # --- asking ---------------------------------------------------------------------------------------------
    def _validate(self, question: Question) -> tuple[str, list[str], int, str]:
        query = question.query.strip()
        if not query:
            raise invalid_argument(Reason.QUERY_EMPTY, "the question is empty", field="query")
        if len(query) > self.max_query_chars:
            raise invalid_argument(
                Reason.QUERY_TOO_LONG,
                f"the question is longer than {self.max_query_chars} characters",
                field="query",
                limit=self.max_query_chars,
            )
        top_k = question.top_k or self.default_top_k
        if not 1 <= top_k <= MAX_TOP_K:
            raise invalid_argument(Reason.TOP_K_OUT_OF_RANGE, f"top_k must be 1..{MAX_TOP_K}", field="top_k")
        collections = [
            validation.collection_name(c, field=f"collections[{i}]") for i, c in enumerate(question.collections)
        ] or [validation.DEFAULT_COLLECTION]
        sid = session_id(question.session_id) if question.session_id else uuid.uuid4().hex
        if self.model is None and self.require_model:
            raise RagmeshError(
                grpc.StatusCode.UNAVAILABLE,
                Reason.CHAT_MODEL_NOT_CONFIGURED,
                "no chat model is configured (RAGMESH_ANSWER_MODEL is empty) and RAGMESH_ANSWER_REQUIRE_MODEL=true "
                "refuses extractive answers",
                DOMAIN,
                {"setting": "RAGMESH_ANSWER_MODEL"},
            )
        return query, collections, top_k, sid

    async def ask(self, question: Question) -> AsyncIterator[str | Answer]:
        """The answer's text pieces as they come, then the finished Answer."""
        started = time.perf_counter()
        query, collections, top_k, sid = self._validate(question)
        history = await self.sessions.load(sid)
        usage = _Usage()
        standalone = await self._standalone(query, history, usage)
        context = await self._retrieve(standalone, collections, top_k, question.filters)
        generator = self.generator
        pieces: list[str] = []
        if self.model is not None:
            stream = self._generate(standalone, history, context, usage)
        else:
            stream = self._extract(standalone, context)
        async for piece in stream:
            if not pieces:
                self.metrics.time_to_first_token.labels(generator).observe(time.perf_counter() - started)
            pieces.append(piece)
            yield piece
        text = "".join(pieces).strip()
        if generator == EXTRACTIVE:
            usage.output_tokens = len(text.split())
        sources = context.cite(ctx.cited_numbers(text))
        answer = Answer(
            text=text,
            sources=sources,
            chunks=context.chunks,
            session_id=sid,
            generator=generator,
            model=self.model.model if self.model else "",
            standalone_query=standalone,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            numbers={(s.collection, s.doc_id): s.number for s in context.sources},
        )
        await self.sessions.append(
            sid,
            Turn(
                query=query,
                standalone_query=standalone,
                answer=text,
                generator=generator,
                sources=[
                    StoredSource(s.number, s.doc_id, s.collection, s.title, s.url, s.filename, s.cited) for s in sources
                ],
            ),
        )
        self.metrics.answers.labels(generator).inc()
        self.metrics.answer_tokens.labels(generator).observe(usage.output_tokens)
        yield answer

    async def _standalone(self, query: str, history: Sequence[Turn], usage: _Usage) -> str:
        """The question to search: a follow-up rewritten with the conversation (by the model; without one,
        the previous standalone question and the follow-up together)."""
        if not history:
            return query
        if self.model is None:
            # The previous question already carries the ones before it; its oldest words go first past the limit.
            return f"{history[-1].standalone_query} {query}"[-self.max_query_chars :].lstrip()
        transcript = "\n".join(
            f"User: {turn.query}\nAssistant: {ctx.snippet(_CITATIONS.sub('', turn.answer), HISTORY_ANSWER_CHARS)}"
            for turn in history[-self.session_turns :]
        )
        completion = await self.model.complete(
            [
                {"role": "system", "content": REWRITE_INSTRUCTIONS},
                {"role": "user", "content": f"Conversation:\n{transcript}\n\nFollow-up question: {query}"},
            ],
            max_tokens=200,
            temperature=0,
        )
        self._count(completion, usage)
        rewritten = " ".join(completion.text.split())
        return rewritten[: self.max_query_chars] if rewritten else query

    async def _retrieve(
        self, query: str, collections: list[str], top_k: int, filters: Mapping[str, Any]
    ) -> ctx.Context:
        request = search_pb.SearchRequest(
            query=query, collections=collections, top_k=top_k, mode=self.search_mode, score_threshold=self.min_relevance
        )
        if filters:
            request.filters.CopyFrom(struct(filters))
        reply = await self.search.call("Search", request)
        if not reply.results:
            self.metrics.no_results.inc()
            raise RagmeshError(
                grpc.StatusCode.NOT_FOUND,
                Reason.NO_RESULTS,
                f"nothing in {', '.join(collections)} is relevant to the question (no chunk scored at least "
                f"{self.min_relevance:g})",
                DOMAIN,
                {"collections": ",".join(collections), "min_relevance": f"{self.min_relevance:g}"},
            )
        chunks = [
            ctx.Chunk(
                chunk_id=r.chunk_id,
                doc_id=r.doc_id,
                collection=r.collection,
                chunk_index=r.chunk_index,
                text=r.text,
                score=min(1.0, max(0.0, r.score)),
                title=r.title,
                url=r.url,
                filename=r.filename,
                language=r.location.language,
                entity_id=entity_id(r.doc_id, MessageToDict(r.metadata)),
            )
            for r in reply.results
        ]
        context = ctx.build_context(chunks, self.context_tokens)
        if self.neighbourhoods is not None:
            await self.neighbourhoods.add(context)
        return context

    async def _generate(
        self, query: str, history: Sequence[Turn], context: ctx.Context, usage: _Usage
    ) -> AsyncIterator[str]:
        assert self.model is not None
        messages: list[dict[str, Any]] = [{"role": "system", "content": ANSWER_INSTRUCTIONS}]
        for turn in history[-self.session_turns :]:
            messages.append({"role": "user", "content": turn.query})
            messages.append({"role": "assistant", "content": _CITATIONS.sub("", turn.answer)})
        messages.append({"role": "user", "content": f"Sources:\n\n{context.render()}\n\nQuestion: {query}"})
        async for item in self.model.stream(messages):
            if isinstance(item, Completion):
                self._count(item, usage)
            else:
                yield item

    def _count(self, completion: Completion, usage: _Usage) -> None:
        usage.add(completion)
        self.metrics.model_tokens.labels("input").inc(completion.input_tokens)
        self.metrics.model_tokens.labels("output").inc(completion.output_tokens)

    async def _extract(self, query: str, context: ctx.Context) -> AsyncIterator[str]:
        """The retrieved sentences closest to the question (cosine of the embedder's dense vectors), each
        citing its source, best first."""
        candidates: dict[str, int] = {}
        for chunk in context.chunks:
            for sentence in ctx.sentences(chunk.text, language=chunk.language):
                candidates.setdefault(sentence, context.number_of(chunk))
        for source in context.sources:  # a graph entity's relations, one sentence
            if source.relations:
                candidates.setdefault(source.relations, source.number)
        asked = {w for w in _WORD.findall(query.lower()) if len(w) > 2}
        order = {sentence: i for i, sentence in enumerate(candidates)}
        texts = sorted(candidates, key=lambda s: (-len(asked & set(_WORD.findall(s.lower()))), order[s]))
        texts = texts[:MAX_CANDIDATE_SENTENCES]
        if not texts:  # chunks without a quotable sentence: quote the best one
            best = context.chunks[0]
            yield ctx.with_citation(ctx.snippet(best.text), context.number_of(best))
            return
        # One call for the question and the sentences (the input type only matters to sparse vectors).
        reply = await self.embedder.call(
            "Embed",
            embedder_pb.EmbedRequest(
                texts=[query, *texts], input_type=embedder_pb.INPUT_TYPE_QUERY, kinds=[embedder_pb.VECTOR_KIND_DENSE]
            ),
        )
        vectors = [list(e.dense) for e in reply.embeddings]
        question, rows = vectors[0], vectors[1:]
        scores = [sum(a * b for a, b in zip(question, row, strict=True)) for row in rows]
        ranked = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
        floor = scores[ranked[0]] * EXTRACTIVE_RELATIVE_FLOOR if scores[ranked[0]] > 0 else float("-inf")
        picked = [i for i in ranked[: self.extractive_sentences] if scores[i] >= floor] or ranked[:1]
        # Prose sentences run on; a line of code stands on a line of its own.
        previous = ""
        for i in picked:
            code = texts[i].startswith("`")
            yield ("" if not previous else "\n" if code or previous.startswith("`") else " ") + ctx.with_citation(
                texts[i], candidates[texts[i]]
            )
            previous = texts[i]
