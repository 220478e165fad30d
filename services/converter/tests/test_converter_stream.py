"""ConvertStream: header first, size cap enforced as the pieces arrive."""

from __future__ import annotations

import asyncio

from ragmesh.converter.v1 import converter_service_pb2 as pb


def _header(**fields) -> pb.ConvertStreamRequest:
    return pb.ConvertStreamRequest(header=pb.ConvertStreamHeader(**fields))


def _chunk(data: bytes) -> pb.ConvertStreamRequest:
    return pb.ConvertStreamRequest(chunk=data)


async def _then_never_end(*messages):
    """Send the messages, then keep the stream open forever: only a server that stops reading answers."""
    for message in messages:
        yield message
    await asyncio.Event().wait()


async def _messages(*messages):
    for message in messages:
        yield message


async def test_streamed_document_converts(converter, documents):
    data = (documents / "test.docx").read_bytes()
    pieces = [_chunk(data[i : i + 16384]) for i in range(0, len(data), 16384)]

    reply = await converter.ConvertStream(_messages(_header(filename="test.docx", size_bytes=len(data)), *pieces))

    assert "AutoGen: Enabling Next-Gen LLM Applications" in reply.document.markdown
    assert reply.document.size_bytes == len(data)
    assert reply.document.filename == "test.docx"


async def test_stream_must_start_with_a_header(converter, rpc_error):
    error = await rpc_error(converter.ConvertStream(_messages(_chunk(b"hello"), _chunk(b" world"))))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "STREAM_HEADER_MISSING")


async def test_empty_stream_has_no_header(converter, rpc_error):
    error = await rpc_error(converter.ConvertStream(_messages()))
    assert error.reason == "STREAM_HEADER_MISSING"


async def test_second_header_is_refused(converter, rpc_error):
    error = await rpc_error(converter.ConvertStream(_messages(_header(), _chunk(b"text"), _header())))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "STREAM_HEADER_DUPLICATE")


async def test_header_only_is_an_empty_document(converter, rpc_error):
    error = await rpc_error(converter.ConvertStream(_messages(_header(filename="a.txt"))))
    assert error.reason == "EMPTY_DOCUMENT"


async def test_declared_size_over_the_cap_is_refused_before_any_content(small_converter, rpc_error, small_cap):
    call = small_converter.ConvertStream(_then_never_end(_header(size_bytes=small_cap + 1)), timeout=60)
    error = await rpc_error(call)
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")
    assert error.metadata["max_bytes"] == str(small_cap)


async def test_running_total_over_the_cap_is_refused_without_reading_the_rest(small_converter, rpc_error, small_cap):
    pieces = [_chunk(b"x" * 16384) for _ in range(small_cap // 16384 + 1)]
    call = small_converter.ConvertStream(_then_never_end(_header(filename="big.txt"), *pieces), timeout=60)
    error = await rpc_error(call)
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")


async def test_stream_shorter_than_announced(converter, rpc_error):
    error = await rpc_error(converter.ConvertStream(_messages(_header(size_bytes=100), _chunk(b"only ten b"))))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "STREAM_SIZE_MISMATCH")
    assert error.metadata["received_bytes"] == "10"
