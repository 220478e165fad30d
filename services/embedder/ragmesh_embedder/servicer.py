"""gRPC face of the embedder: validate the request, call the Embedder, map the result to protos."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc
from ragmesh_common.errors import invalid_argument
from ragmesh_common.messages import message_from
from ragmesh_common.reasons import Reason

from .service import Embedder, Embeddings, InputType, TokenIds

Context = grpc.aio.ServicerContext[Any, Any]

# How many requests of one EmbedStream are embedded at once; beyond it the stream is not read, so a bulk
# client is slowed by flow control instead of filling the queue.
STREAM_MAX_IN_FLIGHT = 8

_INPUT_TYPES = {
    pb2.INPUT_TYPE_UNSPECIFIED: InputType.DOCUMENT,
    pb2.INPUT_TYPE_DOCUMENT: InputType.DOCUMENT,
    pb2.INPUT_TYPE_QUERY: InputType.QUERY,
}


def _input_type(value: pb2.InputType) -> InputType:
    if value not in _INPUT_TYPES:
        raise invalid_argument(
            Reason.INPUT_TYPE_INVALID, f"input_type {value} is not a known InputType", field="input_type", value=value
        )
    return _INPUT_TYPES[value]


def _kinds(kinds: Sequence[int]) -> tuple[bool, bool]:
    """(dense, sparse) wanted; an empty list means both."""
    for index, kind in enumerate(kinds):
        if kind not in (pb2.VECTOR_KIND_DENSE, pb2.VECTOR_KIND_SPARSE):
            raise invalid_argument(
                Reason.VECTOR_KIND_INVALID,
                f"kinds[{index}] is {pb2.VectorKind.Name(kind) if kind in pb2.VectorKind.values() else kind}; "
                "use VECTOR_KIND_DENSE and/or VECTOR_KIND_SPARSE (an empty list means both)",
                field=f"kinds[{index}]",
                index=index,
            )
    if not kinds:
        return True, True
    return pb2.VECTOR_KIND_DENSE in kinds, pb2.VECTOR_KIND_SPARSE in kinds


def _packed(dense_format: int) -> bool:
    if dense_format not in pb2.DenseFormat.values():
        raise invalid_argument(
            Reason.DENSE_FORMAT_INVALID,
            f"dense_format {dense_format} is not a known DenseFormat",
            field="dense_format",
            value=dense_format,
        )
    return dense_format == pb2.DENSE_FORMAT_PACKED_FLOAT32


def _response_fields(embeddings: Embeddings, packed: bool) -> dict[str, Any]:
    """The response's embeddings (and packed matrix), built from the arrays with no per-number Python work."""
    counts, truncated = embeddings.token_counts.tolist(), embeddings.truncated.tolist()
    fields: dict[str, Any] = {}
    if embeddings.dense is not None and packed:
        matrix = embeddings.dense
        fields["dense_matrix"] = pb2.DenseMatrix(
            data=matrix.astype("<f4", copy=False).tobytes(), rows=matrix.shape[0], columns=matrix.shape[1]
        )
        rows = [()] * len(counts)
    elif embeddings.dense is not None:
        rows = embeddings.dense.tolist()  # one C call; protobuf copies a list far faster than numpy rows
    else:
        rows = [()] * len(counts)
    if embeddings.sparse is None:
        fields["embeddings"] = [
            pb2.Embedding(dense=row, token_count=count, truncated=cut)
            for row, count, cut in zip(rows, counts, truncated, strict=True)
        ]
    else:
        fields["embeddings"] = [
            pb2.Embedding(
                dense=row,
                token_count=count,
                truncated=cut,
                sparse=pb2.SparseVector(indices=sparse.indices, values=sparse.values),
            )
            for row, count, cut, sparse in zip(rows, counts, truncated, embeddings.sparse, strict=True)
        ]
    return fields


class EmbedderServicer(pb2_grpc.EmbedderServiceServicer):
    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    async def _embed(self, request: pb2.EmbedRequest | pb2.EmbedStreamRequest) -> dict[str, Any]:
        model = self._embedder.model(request.model)
        dense, sparse = _kinds(request.kinds)
        packed = _packed(request.dense_format)
        token_ids = None
        if request.HasField("token_ids"):
            given = request.token_ids
            token_ids = TokenIds(given.tokenizer, given.ids, given.lengths)
        embeddings = await self._embedder.embed(
            request.texts,
            _input_type(request.input_type),
            dense=dense,
            sparse=sparse,
            model=model.name,
            token_ids=token_ids,
        )
        backend = model.backend
        return {
            **_response_fields(embeddings, packed),
            "model_id": backend.model_id,
            "dimension": backend.dimension,
            "model": model.name,
        }

    async def Embed(self, request: pb2.EmbedRequest, context: Context) -> pb2.EmbedResponse:
        return pb2.EmbedResponse(**await self._embed(request))

    async def _answer(self, request: pb2.EmbedStreamRequest) -> pb2.EmbedStreamResponse:
        return pb2.EmbedStreamResponse(request_id=request.request_id, **await self._embed(request))

    async def EmbedStream(
        self, request_iterator: AsyncIterator[pb2.EmbedStreamRequest], context: Context
    ) -> AsyncIterator[pb2.EmbedStreamResponse]:
        """Requests are embedded concurrently and answered as they finish (match them by request_id).
        The first bad request ends the stream with its error."""
        requests = aiter(request_iterator)
        next_request: asyncio.Future[Any] | None = None
        reading = True
        in_flight: set[asyncio.Task[Any]] = set()
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

    async def GetModelInfo(self, request: pb2.GetModelInfoRequest, context: Context) -> pb2.GetModelInfoResponse:
        info = self._embedder.model_info(request.model)
        return message_from(
            pb2.GetModelInfoResponse,
            info,
            model=info.name,
            models=[message_from(pb2.ModelInfo, each) for each in self._embedder.infos],
        )
