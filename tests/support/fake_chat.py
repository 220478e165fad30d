"""A local stand-in for a paid OpenAI-compatible chat API: a real HTTP server (uvicorn on a free loopback
port, in a thread of its own) serving `POST /v1/chat/completions`, streamed (SSE) or not, with tool calls.

It is deterministic and answers from what the request carries, so a test that checks its answer checks that
our prompt carried the retrieved chunks:

- **rewrite** (the system message asks for a "standalone" question): the last `User:` line of the transcript
  in the user message, then the `Follow-up question:` line -- proof that the earlier turn was sent.
- **tool calling** (the request has `tools`): first a `search` tool call with the user's question; after a
  search result with hits, a `fetch_document` call for the first hit; after the document, the final answer:
  the document's first sentence, citing the hit's `ref` as `[ref]`. A search without hits ends with "I found
  nothing about that."
- **answer** (anything else): the numbered sources in the last user message (`[n] title` header lines, text
  below, up to `Question:`) are scored by the words they share with the question; the answer is the first
  sentence of the best one followed by `[n]`. Without any numbered source it answers "I don't know."

Usage counts words: prompt_tokens are the words of all messages, completion_tokens the streamed pieces.
`fail_with = (status, message)` makes every call fail with that HTTP status; `break_after = n` makes a
streamed answer fail after n pieces (an `error` object in the stream, as OpenAI reports mid-stream failures);
`token_delay` sleeps between streamed pieces. `script = [(tool, arguments), ...]` replaces the search/fetch
steps with those tool calls, one a round, then answers "Done: " and the last tool result's JSON. Every request
body is kept in `requests`.

    with FakeChat() as chat:
        settings = AnswerSettings(base_url=chat.url, model="fake-chat", ...)
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORD = re.compile(r"[a-z0-9]+")
SOURCE_HEADER = re.compile(r"^\[(\d+)\][^\n]*$", re.MULTILINE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s")
STOPWORDS = frozenset(
    "a an and are as at be by do does for from how in is it of on or the to was what when where "
    "which who why with".split()
)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def first_sentence(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.startswith("#")]
    body = " ".join(lines)
    return SENTENCE_END.split(body, maxsplit=1)[0].strip()


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


class FakeChat:
    """The fake server; a context manager that starts and stops it."""

    def __init__(self, *, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay
        self.fail_with: tuple[int, str] | None = None
        self.break_after: int | None = None
        self.script: list[tuple[str, dict[str, Any]]] | None = None
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The base URL an OpenAI client takes (…/v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeChat:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve(sock)), daemon=True, name="fake-chat")
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake chat server did not start")
            time.sleep(0.01)
        return self

    async def _serve(self, sock: socket.socket) -> None:
        assert self._server is not None
        await self._server.serve(sockets=[sock])
        sock.close()

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)

    def reset(self) -> None:
        """Forget the requests and any failure set up."""
        with self._lock:
            self.requests.clear()
        self.fail_with = self.break_after = self.script = None

    def calls(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The request bodies received so far (of one kind: "rewrite", "tools" or "answer")."""
        with self._lock:
            return [r for r in self.requests if kind is None or self.kind(r) == kind]

    # --- behaviour ---------------------------------------------------------------------------------------------
    @staticmethod
    def kind(body: dict[str, Any]) -> str:
        if body.get("tools"):
            return "tools"
        system = " ".join(_content(m) for m in body.get("messages", []) if m.get("role") == "system")
        return "rewrite" if "standalone" in system.lower() else "answer"

    def reply(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """(text, tool calls) for a request body."""
        messages = body.get("messages", [])
        kind = self.kind(body)
        if kind == "rewrite":
            return self._rewrite(messages), []
        if kind == "tools" and self.script is not None:
            return self._scripted(messages, self.script)
        if kind == "tools":
            return self._tool_step(messages)
        return self._answer(messages), []

    @staticmethod
    def _rewrite(messages: list[dict[str, Any]]) -> str:
        text = _content(next(m for m in reversed(messages) if m.get("role") == "user"))
        asked = [line.removeprefix("User:").strip() for line in text.splitlines() if line.startswith("User:")]
        follow_up = next(
            (
                line.split(":", 1)[1].strip()
                for line in text.splitlines()
                if line.lower().startswith("follow-up question:")
            ),
            text.strip(),
        )
        return f"{asked[-1]} {follow_up}" if asked else follow_up

    @staticmethod
    def _answer(messages: list[dict[str, Any]]) -> str:
        prompt = _content(next((m for m in reversed(messages) if m.get("role") == "user"), {}))
        context, _, question = prompt.rpartition("Question:")
        headers = list(SOURCE_HEADER.finditer(context))
        if not headers:
            return "I don't know."
        asked = set(words(question)) - STOPWORDS
        best: tuple[int, int, str] | None = None
        for i, header in enumerate(headers):
            end = headers[i + 1].start() if i + 1 < len(headers) else len(context)
            text = context[header.end() : end]
            overlap = len(asked & set(words(text)))
            if best is None or overlap > best[0]:
                best = (overlap, int(header.group(1)), text)
        assert best is not None
        return f"{first_sentence(best[2])} [{best[1]}]"

    @staticmethod
    def _scripted(
        messages: list[dict[str, Any]], script: list[tuple[str, dict[str, Any]]]
    ) -> tuple[str, list[dict[str, Any]]]:
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        results = [_content(m) for m in messages[last_user + 1 :] if m.get("role") == "tool"]
        if len(results) < len(script):
            name, arguments = script[len(results)]
            return "", [_tool_call(f"call_{last_user}_{len(results)}", name, arguments)]
        return f"Done: {results[-1] if results else ''}", []

    @staticmethod
    def _tool_step(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        question = _content(messages[last_user])
        results = [json.loads(_content(m)) for m in messages[last_user + 1 :] if m.get("role") == "tool"]
        step = len(results)
        if step == 0:
            return "", [_tool_call(f"call_{last_user}_0", "search", {"query": question})]
        last = results[-1]
        if "results" in last:
            if not last["results"]:
                return "I found nothing about that.", []
            hit = last["results"][0]
            return "", [
                _tool_call(
                    f"call_{last_user}_{step}",
                    "fetch_document",
                    {"doc_id": hit["doc_id"], "collection": hit["collection"]},
                )
            ]
        ref = next(
            (r["ref"] for res in results for r in res.get("results", []) if r["doc_id"] == last.get("doc_id")), 1
        )
        return f"{first_sentence(last.get('text', ''))} [{ref}]", []

    # --- HTTP ----------------------------------------------------------------------------------------------------
    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-chat", "object": "model", "owned_by": "test"}]})

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
        if self.fail_with is not None:
            status, message = self.fail_with
            return JSONResponse({"error": {"message": message, "type": "fake_error", "code": status}}, status)
        text, tool_calls = self.reply(body)
        model = body.get("model", "fake-chat")
        prompt_tokens = sum(len(_content(m).split()) for m in body.get("messages", []))
        pieces = re.findall(r"\S+\s*", text)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(pieces) + len(tool_calls),
            "total_tokens": prompt_tokens + len(pieces) + len(tool_calls),
        }
        finish = "tool_calls" if tool_calls else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            return JSONResponse(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._stream(model, pieces, tool_calls, finish, usage if include_usage else None),
            media_type="text/event-stream",
        )

    async def _stream(self, model, pieces, tool_calls, finish, usage):
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            return (
                "data: "
                + json.dumps(
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                    }
                )
                + "\n\n"
            )

        yield chunk({"role": "assistant", "content": ""})
        for n, piece in enumerate(pieces):
            if self.break_after is not None and n >= self.break_after:
                yield (
                    "data: "
                    + json.dumps({"error": {"message": "the fake model broke down mid-answer", "type": "server_error"}})
                    + "\n\n"
                )
                return
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            yield chunk({"content": piece})
        for index, call in enumerate(tool_calls):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2  # arguments arrive in pieces, as real APIs send them
            name = call["function"]["name"]
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": name, "arguments": arguments[:half]},
                        }
                    ]
                }
            )
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
        yield chunk({}, finish)
        if usage is not None:
            yield (
                "data: "
                + json.dumps(
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
                + "\n\n"
            )
        yield "data: [DONE]\n\n"


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
