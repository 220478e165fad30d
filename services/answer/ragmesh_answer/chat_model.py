"""Any OpenAI-compatible chat-completions API through the `openai` package: streamed or whole completions,
tool calls, token usage, one CLIENT span per call, and the API's failures as RagmeshErrors that name the
endpoint.

The span follows the OpenTelemetry GenAI semantic conventions: `chat <model>`, with gen_ai.operation.name,
gen_ai.provider.name, gen_ai.request.model / response.model, gen_ai.usage.input_tokens / output_tokens,
gen_ai.response.finish_reasons, server.address and server.port. (The openai package speaks HTTP through
httpx2, which the httpx instrumentation does not see, so this span is the model call in a trace.)

`ragmesh chat` uses the same class for its tool-calling loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import grpc
from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason

from .errors import DOMAIN

OPENAI_BASE_URL = "https://api.openai.com/v1"


@dataclass
class ToolCall:
    """A function the model asks to call."""

    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it

    def parsed(self) -> dict[str, Any]:
        """The arguments as a dict ({} when they are not a JSON object)."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Completion:
    """A finished completion: its text, tool calls, token usage and why it stopped."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str = ""
    model: str = ""

    def assistant_message(self) -> dict[str, Any]:
        """The message to append to the conversation for this completion."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [call.message() for call in self.tool_calls]
        return message


class ChatModel:
    """One chat model behind an OpenAI-compatible API."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str = "",
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 1,
        temperature: float | None = None,
        max_output_tokens: int | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        import openai

        self._openai = openai
        self.model = model
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        # Local OpenAI-compatible servers often need no key, but the client insists on one.
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key or "unused", timeout=timeout, max_retries=max_retries
        )
        self._tracer = tracer or trace.NoOpTracer()
        url = urlsplit(self.base_url)
        self._server: dict[str, AttributeValue] = {
            server_attributes.SERVER_ADDRESS: url.hostname or "",
            server_attributes.SERVER_PORT: url.port or (443 if url.scheme == "https" else 80),
        }

    async def close(self) -> None:
        await self._client.close()

    # --- calls ----------------------------------------------------------------------------------------------
    def _request(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        max_tokens: int | None,
        temperature: float | None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        temperature = self.temperature if temperature is None else temperature
        if temperature is not None:
            request["temperature"] = temperature
        if max_tokens or self.max_output_tokens:
            request["max_tokens"] = max_tokens or self.max_output_tokens
        if tools:
            request["tools"] = list(tools)
        return request

    def _span(self, request: Mapping[str, Any]) -> trace.Span:
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: "chat",
            gen_ai.GEN_AI_PROVIDER_NAME: "openai",
            gen_ai.GEN_AI_REQUEST_MODEL: self.model,
            **self._server,
        }
        if "temperature" in request:
            attributes[gen_ai.GEN_AI_REQUEST_TEMPERATURE] = request["temperature"]
        if "max_tokens" in request:
            attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = request["max_tokens"]
        return self._tracer.start_span(f"chat {self.model}", kind=SpanKind.CLIENT, attributes=attributes)

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One whole completion."""
        request = self._request(messages, tools, max_tokens, temperature)
        span = self._span(request)
        try:
            with trace.use_span(span, end_on_exit=False):
                response = await self._client.chat.completions.create(**request)
            choice = response.choices[0] if response.choices else None
            message = choice.message if choice else None
            usage = response.usage
            completion = Completion(
                text=(message.content or "") if message else "",
                tool_calls=[
                    ToolCall(c.id, c.function.name, c.function.arguments or "")
                    for c in (message.tool_calls or [])
                    if getattr(c, "function", None)
                ]
                if message
                else [],
                input_tokens=usage.prompt_tokens if usage else 0,
                output_tokens=usage.completion_tokens if usage else 0,
                finish_reason=(choice.finish_reason or "") if choice else "",
                model=response.model or self.model,
            )
        except self._openai.OpenAIError as exc:
            raise self._failed(span, exc) from exc
        except BaseException as exc:
            _end_with_error(span, exc)
            raise
        _end(span, completion)
        return completion

    async def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[str | Completion]:
        """Stream a completion: its text pieces (str) as they come, then the finished Completion (tool calls
        assembled from their pieces, usage when the API reports it)."""
        request = self._request(messages, tools, max_tokens, temperature)
        request |= {"stream": True, "stream_options": {"include_usage": True}}
        span = self._span(request)
        completion = Completion(model=self.model)
        calls: dict[int, ToolCall] = {}
        text: list[str] = []
        started = time.perf_counter()
        try:
            with trace.use_span(span, end_on_exit=False):
                response = await self._client.chat.completions.create(**request)
            async with response:
                async for chunk in response:
                    if chunk.model:
                        completion.model = chunk.model
                    if chunk.usage:
                        completion.input_tokens = chunk.usage.prompt_tokens or 0
                        completion.output_tokens = chunk.usage.completion_tokens or 0
                    for choice in chunk.choices:
                        delta = choice.delta
                        if choice.finish_reason:
                            completion.finish_reason = choice.finish_reason
                        if delta is None:
                            continue
                        if delta.content:
                            if not text:
                                span.add_event("gen_ai.first_token", {"ragmesh.seconds": time.perf_counter() - started})
                            text.append(delta.content)
                            yield delta.content
                        for piece in delta.tool_calls or ():
                            call = calls.setdefault(piece.index, ToolCall("", "", ""))
                            if piece.id:
                                call.id = piece.id
                            if piece.function is not None:
                                call.name += piece.function.name or ""
                                call.arguments += piece.function.arguments or ""
        except self._openai.OpenAIError as exc:
            raise self._failed(span, exc) from exc
        except BaseException as exc:
            _end_with_error(span, exc)
            raise
        completion.text = "".join(text)
        completion.tool_calls = [calls[i] for i in sorted(calls)]
        if not completion.output_tokens:
            completion.output_tokens = len(text)  # no usage reported: count the streamed pieces
        _end(span, completion)
        yield completion

    # --- failures ---------------------------------------------------------------------------------------------
    def _failed(self, span: trace.Span, exc: Exception) -> RagmeshError:
        error = self.error(exc)
        span.set_attribute(error_attributes.ERROR_TYPE, type(exc).__name__)
        span.set_status(Status(StatusCode.ERROR, error.message))
        span.end()
        return error

    def error(self, exc: Exception) -> RagmeshError:
        """The RagmeshError for a failed API call; the message names the endpoint and the model."""
        openai = self._openai
        meta = {"endpoint": self.base_url, "model": self.model}
        where = f"the chat model {self.model!r} at {self.base_url}"
        if isinstance(exc, openai.APITimeoutError):
            return RagmeshError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                Reason.CHAT_MODEL_TIMEOUT,
                f"{where} did not answer in time",
                DOMAIN,
                meta,
            )
        if isinstance(exc, openai.APIConnectionError):
            return RagmeshError(
                grpc.StatusCode.UNAVAILABLE,
                Reason.CHAT_MODEL_UNAVAILABLE,
                f"{where} cannot be reached: {_cause(exc)}",
                DOMAIN,
                meta,
            )
        if isinstance(exc, openai.APIStatusError):
            meta["status"] = str(exc.status_code)
            detail = _api_message(exc)
            if exc.status_code == 429:
                return RagmeshError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    Reason.CHAT_MODEL_RATE_LIMITED,
                    f"{where} is rate limiting requests: {detail}",
                    DOMAIN,
                    meta,
                )
            if exc.status_code >= 500:
                return RagmeshError(
                    grpc.StatusCode.UNAVAILABLE,
                    Reason.CHAT_MODEL_UNAVAILABLE,
                    f"{where} failed (HTTP {exc.status_code}): {detail}",
                    DOMAIN,
                    meta,
                )
            return RagmeshError(
                grpc.StatusCode.UNAVAILABLE,
                Reason.CHAT_MODEL_REJECTED,
                f"{where} refused the request (HTTP {exc.status_code}): {detail}",
                DOMAIN,
                meta,
            )
        return RagmeshError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.CHAT_MODEL_UNAVAILABLE,
            f"{where} failed: {type(exc).__name__}: {exc}",
            DOMAIN,
            meta,
        )


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)


def _api_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


def _end(span: trace.Span, completion: Completion) -> None:
    span.set_attributes(
        {
            gen_ai.GEN_AI_RESPONSE_MODEL: completion.model,
            gen_ai.GEN_AI_USAGE_INPUT_TOKENS: completion.input_tokens,
            gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: completion.output_tokens,
            gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: [completion.finish_reason or "unknown"],
        }
    )
    span.end()


def _end_with_error(span: trace.Span, exc: BaseException) -> None:
    span.set_attribute(error_attributes.ERROR_TYPE, type(exc).__name__)
    span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
    span.end()
