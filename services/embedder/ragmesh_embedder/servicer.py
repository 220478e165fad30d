"""gRPC face of the embedder: validate the request, call the Embedder, map the result to protos."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc
from ragmesh_common.errors import invalid_argument

from .service import Embedder, Embedding, InputType

# How many requests of one EmbedStream are embedded at once; beyond it the stream is not read, so a bulk
# client is slowed by flow control instead of filling the queue.
STREAM_MAX_IN_FLIGHT = 8

_INPUT_TYPES = {
    pb2.INPUT_TYPE_UNSPECIFIED: InputType.DOCUMENT,
    pb2.INPUT_TYPE_DOCUMENT: InputType.DOCUMENT,
    pb2.INPUT_TYPE_QUERY: InputType.QUERY,
}


def _input_type(value: int) -> InputType:
    if value not in _INPUT_TYPES:
        raise invalid_argument(
            "INPUT_TYPE_INVALID", f"input_type {value} is not a known InputType", field="input_type", value=value
        )
    return _INPUT_TYPES[value]


def _kinds(kinds: Sequence[int]) -> tuple[bool, bool]:
    """(dense, sparse) wanted; an empty list means both."""
    for index, kind in enumerate(kinds):
        if kind not in (pb2.VECTOR_KIND_DENSE, pb2.VECTOR_KIND_SPARSE):
            raise invalid_argument(
                "VECTOR_KIND_INVALID",
                f"kinds[{index}] is {pb2.VectorKind.Name(kind) if kind in pb2.VectorKind.values() else kind}; "
                "use VECTOR_KIND_DENSE and/or VECTOR_KIND_SPARSE (an empty list means both)",
                field=f"kinds[{index}]", index=index,
            )
    if not kinds:
        return True, True
    return pb2.VECTOR_KIND_DENSE in kinds, pb2.VECTOR_KIND_SPARSE in kinds


def _embedding_pb(embedding: Embedding) -> pb2.Embedding:
    message = pb2.Embedding(token_count=embedding.token_count, truncated=embedding.truncated)
    if embedding.dense is not None:
        message.dense.extend(embedding.dense.tolist())  # from a list: far cheaper than from numpy
    if embedding.sparse is not None:
        message.sparse.indices.extend(embedding.sparse.indices)
        message.sparse.values.extend(embedding.sparse.values)
    return message


class EmbedderServicer(pb2_grpc.EmbedderServiceServicer):
    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    async def _embed(self, request: pb2.EmbedRequest | pb2.EmbedStreamRequest) -> list[pb2.Embedding]:
        dense, sparse = _kinds(request.kinds)
        embeddings = await self._embedder.embed(
            request.texts, _input_type(request.input_type), dense=dense, sparse=sparse
        )
        return [_embedding_pb(embedding) for embedding in embeddings]

    async def Embed(self, request: pb2.EmbedRequest, context) -> pb2.EmbedResponse:
        embeddings = await self._embed(request)
        backend = self._embedder.backend
        return pb2.EmbedResponse(embeddings=embeddings, model_id=backend.model_id, dimension=backend.dimension)

    async def _answer(self, request: pb2.EmbedStreamRequest) -> pb2.EmbedStreamResponse:
        embeddings = await self._embed(request)
        backend = self._embedder.backend
        return pb2.EmbedStreamResponse(
            request_id=request.request_id, embeddings=embeddings, model_id=backend.model_id,
            dimension=backend.dimension,
        )

    async def EmbedStream(
        self, request_iterator: AsyncIterator[pb2.EmbedStreamRequest], context
    ) -> AsyncIterator[pb2.EmbedStreamResponse]:
        """Requests are embedded concurrently and answered as they finish (match them by request_id).
        The first bad request ends the stream with its error."""
        requests = aiter(request_iterator)
        next_request: asyncio.Future | None = None
        reading = True
        in_flight: set[asyncio.Task] = set()
        try:
            while True:
                if reading and next_request is None and len(in_flight) < STREAM_MAX_IN_FLIGHT:
                    next_request = asyncio.ensure_future(anext(requests, None))
                waiting = in_flight | ({next_request} if next_request else set())
                if not waiting:
                    return
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if next_request in done:
                    request, next_request = next_request.result(), None
                    if request is None:
                        reading = False
                    else:
                        in_flight.add(asyncio.create_task(self._answer(request)))
                for task in done & in_flight:
                    in_flight.discard(task)
                    yield task.result()
        finally:
            for pending in (*in_flight, *([next_request] if next_request else [])):
                pending.cancel()

    async def GetModelInfo(self, request: pb2.GetModelInfoRequest, context) -> pb2.GetModelInfoResponse:
        info = self._embedder.info
        return pb2.GetModelInfoResponse(
            model_id=info.model_id, dimension=info.dimension, max_sequence_length=info.max_sequence_length,
            sparse_model_id=info.sparse_model_id, backend=info.backend, max_batch_size=info.max_batch_size,
        )
