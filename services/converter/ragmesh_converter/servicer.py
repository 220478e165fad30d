"""gRPC face of the converter: validate, call `Converter`, map the result to protos."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ragmesh.converter.v1 import converter_service_pb2 as pb
from ragmesh.converter.v1 import converter_service_pb2_grpc as pb_grpc
from ragmesh_common.errors import invalid_argument
from ragmesh_common.reasons import Reason

from .service import ConvertedDoc, Converter

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ConverterService"].full_name


def _document(doc: ConvertedDoc) -> pb.ConvertedDocument:
    return pb.ConvertedDocument(
        markdown=doc.markdown,
        title=doc.title,
        mime_type=doc.mime_type,
        size_bytes=doc.size_bytes,
        url=doc.url,
        filename=doc.filename,
    )


class ConverterServicer(pb_grpc.ConverterServiceServicer):
    def __init__(self, converter: Converter) -> None:
        self.converter = converter

    async def Convert(self, request: pb.ConvertRequest, context: object) -> pb.ConvertResponse:
        source = request.WhichOneof("source")
        if source == "url":
            doc = await self.converter.convert_url(request.url)
        elif source == "content":
            doc = await self.converter.convert_bytes(request.content, request.filename, request.mime_type)
        else:
            raise invalid_argument(Reason.SOURCE_MISSING, "set either content or url", field="source")
        return pb.ConvertResponse(document=_document(doc))

    async def ConvertStream(
        self, request_iterator: AsyncIterator[pb.ConvertStreamRequest], context: object
    ) -> pb.ConvertStreamResponse:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("part") != "header":
            raise invalid_argument(
                Reason.STREAM_HEADER_MISSING, "the first message of ConvertStream must be a header", field="header"
            )
        header = first.header
        doc = await self.converter.convert_chunks(
            _chunks(request_iterator), header.filename, header.mime_type, header.size_bytes
        )
        return pb.ConvertStreamResponse(document=_document(doc))


async def _chunks(requests: AsyncIterator[pb.ConvertStreamRequest]) -> AsyncIterator[bytes]:
    async for message in requests:
        if message.WhichOneof("part") != "chunk":
            raise invalid_argument(
                Reason.STREAM_HEADER_DUPLICATE,
                "only the first message of ConvertStream may be a header",
                field="header",
            )
        yield message.chunk
