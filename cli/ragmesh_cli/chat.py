"""`ragmesh chat`: a terminal conversation with a chat model that searches a running mesh.

The model (any OpenAI-compatible API with tool calling: OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's
server) gets two tools, `search` and `fetch_document`, which this process runs against the search service over
gRPC. Each question gets at most `max_rounds` rounds of tool calls; the last round offers no tools, so the
model has to answer. Every document a tool returns gets a number (`ref`) for the whole conversation, the model
cites them as [ref], and the sources the answer cites are printed under it.

The model client is the answer service's (`ragmesh_answer.chat_model.ChatModel`), so failures carry the same
reasons (CHAT_MODEL_UNAVAILABLE, CHAT_MODEL_REJECTED, ...).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason

if TYPE_CHECKING:
    from ragmesh_answer.chat_model import ChatModel
    from ragmesh_common.clients import ServiceClient

SNIPPET_CHARS = 400
# A fetched document is cut to this many characters before it goes to the model.
DOCUMENT_CHARS = 20_000
_CITATION = re.compile(r"\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]")

SYSTEM = (
    "You answer questions about the user's documents, stored in the ragmesh collection {collection!r}. Use the "
    "`search` tool to find relevant passages; every result has a `ref` number. When a snippet is not enough, "
    "read the whole document with `fetch_document`. Answer only from what the tools return and cite each "
    "statement with the ref of its document in square brackets, like [1]. If the documents do not answer the "
    "question, say so."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the user's documents; returns the best matching passages (snippets) with their "
            "doc_id and ref.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for, in natural language."},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many passages (5)."},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "fetch_document",
            "description": "Read a whole document by the doc_id a search result gave.",
            "parameters": {
                "type": "object",
                "properties": {
                    "doc_id": {"type": "string", "description": "The document's id, from a search result."},
                    "collection": {"type": "string", "description": "Its collection (default: the chat's)."},
                },
                "required": ["doc_id"],
            },
        },
    },
]


@dataclass
class Ref:
    """A document a tool returned, numbered for citations."""

    number: int
    doc_id: str
    collection: str
    title: str


class Chat:
    """One conversation: the messages so far and the documents the tools have returned."""

    def __init__(
        self,
        model: ChatModel,
        search: ServiceClient,
        *,
        collection: str,
        top_k: int = 5,
        max_rounds: int = 4,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
    ) -> None:
        self.model = model
        self.search = search
        self.collection = collection
        self.top_k = top_k
        self.max_rounds = max_rounds
        self.out = out
        self.err = err
        self.reset()

    def reset(self) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM.format(collection=self.collection)}]
        self.refs: dict[tuple[str, str], Ref] = {}

    def _ref(self, doc_id: str, collection: str, title: str) -> Ref:
        key = (collection, doc_id)
        if key not in self.refs:
            self.refs[key] = Ref(len(self.refs) + 1, doc_id, collection, title)
        elif title and not self.refs[key].title:
            self.refs[key].title = title
        return self.refs[key]

    # --- tools --------------------------------------------------------------------------------------------
    async def _search(self, query: str, top_k: int | None = None) -> dict[str, Any]:
        from ragmesh.search.v1 import search_service_pb2 as pb

        reply = await self.search.call(
            "Search",
            pb.SearchRequest(
                query=query, collections=[self.collection], top_k=max(1, min(int(top_k or self.top_k), 20))
            ),
        )
        results = []
        for r in reply.results:
            ref = self._ref(r.doc_id, r.collection, r.title)
            text = " ".join(r.text.split())
            results.append(
                {
                    "ref": ref.number,
                    "doc_id": r.doc_id,
                    "collection": r.collection,
                    "title": r.title,
                    "score": round(r.score, 3),
                    "snippet": text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…",
                }
            )
        return {"results": results}

    async def _fetch(self, doc_id: str, collection: str | None = None) -> dict[str, Any]:
        from ragmesh.search.v1 import search_service_pb2 as pb

        document = await self.search.call(
            "GetDocument", pb.GetDocumentRequest(collection=collection or self.collection, doc_id=doc_id)
        )
        ref = self._ref(document.doc_id, document.collection, document.title)
        return {
            "ref": ref.number,
            "doc_id": document.doc_id,
            "collection": document.collection,
            "title": document.title,
            "text": document.text[:DOCUMENT_CHARS],
        }

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's result as the model sees it; a failure is reported to the model, not raised."""
        try:
            if name == "search" and isinstance(arguments.get("query"), str) and arguments["query"].strip():
                result = await self._search(arguments["query"], arguments.get("top_k"))
                self._note(f"search {arguments['query']!r}: {len(result['results'])} results")
            elif name == "fetch_document" and isinstance(arguments.get("doc_id"), str):
                result = await self._fetch(arguments["doc_id"], arguments.get("collection"))
                self._note(f"fetch_document {result['doc_id']!r}: {len(result['text'])} characters")
            else:
                result = {
                    "error": {
                        "reason": Reason.TOOL_CALL_INVALID,
                        "message": f"unknown tool or missing arguments: {name}({arguments})",
                    }
                }
                self._note(f"{name}: invalid call")
        except RagmeshError as exc:
            result = {"error": {"reason": exc.reason, "message": exc.message}}
            self._note(f"{name}: {exc.reason}")
        return result

    def _note(self, text: str) -> None:
        self.err.write(f"  ↳ {text}\n")
        self.err.flush()

    # --- one question -------------------------------------------------------------------------------------
    async def ask(self, question: str) -> tuple[str, list[Ref]]:
        """Answer a question (tool rounds, then the answer, streamed to `out`); returns the answer and the
        sources it cites. On failure the question is forgotten and the error raised."""
        from ragmesh_answer.chat_model import Completion

        start = len(self.messages)
        self.messages.append({"role": "user", "content": question})
        try:
            for round_ in range(self.max_rounds + 1):
                tools = TOOLS if round_ < self.max_rounds else ()
                completion: Completion | None = None
                started = False
                async for item in self.model.stream(self.messages, tools=tools):
                    if isinstance(item, Completion):
                        completion = item
                    else:
                        if not started:
                            self.out.write("ragmesh> ")
                            started = True
                        self.out.write(item)
                        self.out.flush()
                assert completion is not None
                if started:
                    self.out.write("\n")
                self.messages.append(completion.assistant_message())
                if not completion.tool_calls:
                    return completion.text, self._cited(completion.text)
                for call in completion.tool_calls:
                    result = await self.run_tool(call.name, call.parsed())
                    self.messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result, ensure_ascii=False)}
                    )
        except BaseException:
            del self.messages[start:]
            raise
        raise AssertionError("unreachable: the last round offers no tools")

    def _cited(self, answer: str) -> list[Ref]:
        by_number = {ref.number: ref for ref in self.refs.values()}
        numbers = [int(n) for match in _CITATION.finditer(answer) for n in re.split(r"\s*[,;]\s*", match.group(1))]
        return [by_number[n] for n in dict.fromkeys(numbers) if n in by_number]


async def repl(
    *,
    model_name: str,
    base_url: str,
    api_key: str | None,
    search_addr: str,
    collection: str,
    top_k: int,
    max_rounds: int,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Read questions until /exit or end of input; returns the exit code."""
    from ragmesh.search.v1 import search_service_pb2 as pb
    from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc
    from ragmesh_answer.chat_model import ChatModel
    from ragmesh_common.clients import ServiceClient

    search = ServiceClient(
        "search",
        search_addr,
        pb_grpc.SearchServiceStub,
        timeout=30,
    )
    model = ChatModel(model=model_name, base_url=base_url, api_key=api_key, temperature=0.1)
    try:
        try:
            listed = await search.call("ListCollections", pb.ListCollectionsRequest())
        except RagmeshError as exc:
            err.write(f"ragmesh: {exc.code.name} {exc.reason}: {exc.message}\n")
            return 1
        info = next((c for c in listed.collections if c.name == collection), None)
        held = f"{info.documents} documents" if info else "not created yet"
        err.write(
            f"ragmesh chat: collection {collection!r} ({held}), model {model_name!r} at {model.base_url}\n"
            "Ask a question; /new starts a new conversation, /exit (or Ctrl-D) quits.\n"
        )
        chat = Chat(model, search, collection=collection, top_k=top_k, max_rounds=max_rounds, out=out, err=err)
        while True:
            try:
                line = await asyncio.to_thread(input, "you> ")
            except EOFError:
                out.write("\n")
                return 0
            question = line.strip()
            if not question:
                continue
            if question in ("/exit", "/quit"):
                return 0
            if question == "/new":
                chat.reset()
                err.write("(new conversation)\n")
                continue
            try:
                answer, cited = await chat.ask(question)
            except RagmeshError as exc:
                err.write(f"ragmesh: {exc.code.name} {exc.reason}: {exc.message}\n")
                continue
            if not answer:
                out.write("ragmesh> (no answer)\n")
            if cited:
                out.write("Sources:\n")
                for ref in cited:
                    out.write(f"  [{ref.number}] {ref.title or ref.doc_id} ({ref.collection}/{ref.doc_id})\n")
            out.flush()
    finally:
        await model.close()
        await search.close()
