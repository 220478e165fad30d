"""`ragmesh chat`: a terminal conversation with a chat model that searches a running mesh.

The model (any OpenAI-compatible API with tool calling: OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's
server) gets two tools, `search` and `fetch_document`, which this process runs against the search service over
gRPC. With the graph (RAGMESH_GRAPH_ENABLED=true, `--graph`) it also gets the graph tools (GRAPH_TOOLS: the
collection's entity types, explore an entity, an entity's details, shortest paths between entity types, a
read-only Cypher query), run against the graph service. Each question gets at most `max_rounds` rounds of tool
calls; the last round offers no tools, so the model has to answer. Every document a tool returns gets a number
(`ref`) for the whole conversation, the model cites them as [ref], and the sources the answer cites are printed
under it.

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


GRAPH_SYSTEM = (
    " The collection also has an entity graph: `graph_entity_types` lists its entity types and relation types; "
    "an entity id is '<type>/<primary key values joined by '/'>', e.g. 'Deployment/ragmesh/search'. "
    "`graph_explore_data_entity` shows an entity's neighbours (direction incoming: the neighbour points at it), "
    "`graph_fetch_data_entity_details` all its properties, `graph_shortest_path_between_entity_types` how two "
    "types connect, and `graph_raw_query_data` runs a read-only Cypher query. Cite graph facts by entity id."
)
_ENTITY_ID = {"type": "string", "description": "The entity's id, e.g. 'Deployment/ragmesh/search'."}


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


GRAPH_TOOLS = [
    _function("graph_entity_types", "The graph's entity types (with counts) and relation types.", {}, []),
    _function(
        "graph_explore_data_entity",
        "An entity and its neighbours: each with the relation that reached it and its direction (outgoing: "
        "via_id -> neighbour; incoming: neighbour -> via_id).",
        {"entity_id": _ENTITY_ID, "depth": {"type": "integer", "minimum": 1, "maximum": 3, "description": "Hops."}},
        ["entity_id"],
    ),
    _function(
        "graph_fetch_data_entity_details",
        "Every property and every relation (both directions) of an entity.",
        {"entity_id": _ENTITY_ID},
        ["entity_id"],
    ),
    _function(
        "graph_shortest_path_between_entity_types",
        "The shortest paths of relation types between two entity types, in Cypher notation.",
        {
            "from_type": {"type": "string", "description": "An entity type, e.g. 'Service'."},
            "to_type": {"type": "string", "description": "Another entity type."},
        },
        ["from_type", "to_type"],
    ),
    _function(
        "graph_raw_query_data",
        "Run one read-only Cypher statement on the graph, e.g. "
        '"MATCH (s:Service)-[:SELECTS]->(d:Deployment) RETURN s.id, d.id". Writes are refused.',
        {"query": {"type": "string", "description": "One read-only Cypher statement."}},
        ["query"],
    ),
]


def _plain(value: Any) -> Any:
    """A graph answer as the model reads it: whole numbers as ints (protobuf's Value carries every number as a
    double), directions as "outgoing"/"incoming"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {
            k: v.removeprefix("DIRECTION_").lower() if k == "direction" and isinstance(v, str) else _plain(v)
            for k, v in value.items()
        }
    return value


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
        graph: ServiceClient | None = None,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
    ) -> None:
        self.model = model
        self.search = search
        self.graph = graph
        self.tools = TOOLS + GRAPH_TOOLS if graph is not None else TOOLS
        self.collection = collection
        self.top_k = top_k
        self.max_rounds = max_rounds
        self.out = out
        self.err = err
        self.reset()

    def reset(self) -> None:
        system = SYSTEM.format(collection=self.collection) + (GRAPH_SYSTEM if self.graph is not None else "")
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
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

    async def _graph(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """A graph tool's result (the service's answer as JSON); None for a call that is not a valid graph tool
        call."""
        from google.protobuf.json_format import MessageToDict
        from ragmesh.graph.v1 import graph_service_pb2 as pb

        if self.graph is None:
            return None
        entity_id = arguments.get("entity_id")
        request: tuple[str, Any] | None = None
        if name == "graph_entity_types":
            request = "ListEntityTypes", pb.ListEntityTypesRequest(collection=self.collection)
        elif name == "graph_explore_data_entity" and isinstance(entity_id, str):
            depth = arguments.get("depth", 1)
            request = (
                "ExploreEntity",
                pb.ExploreEntityRequest(
                    collection=self.collection, entity_id=entity_id, depth=depth if isinstance(depth, int) else 1
                ),
            )
        elif name == "graph_fetch_data_entity_details" and isinstance(entity_id, str):
            request = "GetEntity", pb.GetEntityRequest(collection=self.collection, entity_id=entity_id)
        elif name == "graph_shortest_path_between_entity_types" and all(
            isinstance(arguments.get(k), str) for k in ("from_type", "to_type")
        ):
            request = (
                "ShortestPaths",
                pb.ShortestPathsRequest(
                    collection=self.collection, from_type=arguments["from_type"], to_type=arguments["to_type"]
                ),
            )
        elif name == "graph_raw_query_data" and isinstance(arguments.get("query"), str):
            request = (
                "Query",
                pb.QueryRequest(
                    collection=self.collection, query=arguments["query"], target=pb.QUERY_TARGET_DATA, row_limit=100
                ),
            )
        if request is None:
            return None
        reply = await self.graph.call(*request)
        return _plain(MessageToDict(reply, preserving_proto_field_name=True))

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's result as the model sees it; a failure is reported to the model, not raised."""
        try:
            if name.startswith("graph_") and (graph := await self._graph(name, arguments)) is not None:
                result = graph
                self._note(f"{name} {json.dumps(arguments, ensure_ascii=False)}")
            elif name == "search" and isinstance(arguments.get("query"), str) and arguments["query"].strip():
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
                tools = self.tools if round_ < self.max_rounds else ()
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
    graph_addr: str | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Read questions until /exit or end of input; returns the exit code. With `graph_addr` the model also gets
    the graph tools."""
    from ragmesh.graph.v1 import graph_service_pb2_grpc as graph_grpc
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
    graph = ServiceClient("graph", graph_addr, graph_grpc.GraphServiceStub, timeout=30) if graph_addr else None
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
            f"ragmesh chat: collection {collection!r} ({held}{', with its graph' if graph else ''}), "
            f"model {model_name!r} at {model.base_url}\n"
            "Ask a question; /new starts a new conversation, /exit (or Ctrl-D) quits.\n"
        )
        chat = Chat(
            model, search, collection=collection, top_k=top_k, max_rounds=max_rounds, graph=graph, out=out, err=err
        )
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
        if graph is not None:
            await graph.close()
