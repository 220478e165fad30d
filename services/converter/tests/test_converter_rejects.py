"""Bad uploads get a precise reason, never junk Markdown or a bare INTERNAL."""

from __future__ import annotations

import io
import zipfile

import pypdfium2
import pytest
from ragmesh.converter.v1 import converter_service_pb2 as pb


@pytest.fixture
def refused(rpc_error):
    """`await refused(stub, request)` -> (code name, reason, metadata) of a Convert call that must fail."""

    async def check(stub, request: pb.ConvertRequest) -> tuple[str, str, dict[str, str]]:
        error = await rpc_error(stub.Convert(request))
        assert error.domain == "converter.ragmesh"
        return error.code.name, error.reason, dict(error.metadata)

    return check


@pytest.mark.parametrize("content", [b"", b"  \n\n\t \n"])
async def test_empty_document(converter, refused, content):
    code, reason, _ = await refused(converter, pb.ConvertRequest(content=content, filename="empty.txt"))
    assert (code, reason) == ("INVALID_ARGUMENT", "EMPTY_DOCUMENT")


async def test_request_without_content_or_url(converter, rpc_error):
    error = await rpc_error(converter.Convert(pb.ConvertRequest(filename="a.pdf")))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "SOURCE_MISSING")


@pytest.mark.parametrize("name", ["test.pdf", "test.docx", "test.xlsx"])
async def test_truncated_document_fails_to_convert(converter, refused, documents, name):
    data = (documents / name).read_bytes()
    request = pb.ConvertRequest(content=data[: len(data) // 2], filename=name)
    code, reason, metadata = await refused(converter, request)
    assert (code, reason) == ("INVALID_ARGUMENT", "DOCUMENT_CONVERSION_FAILED")
    assert metadata["mime_type"]


async def test_password_protected_pdf(converter, refused, make_encrypted_pdf):
    data = make_encrypted_pdf("Quarterly figures", user_password=b"s3cret")
    # The fixture is a real encrypted PDF: it opens with its password and shows its text.
    assert pypdfium2.PdfDocument(data, password="s3cret")[0].get_textpage().get_text_range() == "Quarterly figures"

    code, reason, metadata = await refused(converter, pb.ConvertRequest(content=data, filename="locked.pdf"))

    assert (code, reason) == ("INVALID_ARGUMENT", "DOCUMENT_ENCRYPTED")
    assert metadata["mime_type"] == "application/pdf"


async def test_pdf_encrypted_without_a_user_password_converts(converter, make_encrypted_pdf):
    """Encrypted only with an owner password (printing/copying restrictions): anyone can read it."""
    data = make_encrypted_pdf("Open to all readers", user_password=b"")
    reply = await converter.Convert(pb.ConvertRequest(content=data))
    assert "Open to all readers" in reply.document.markdown


async def test_upload_over_the_cap(small_converter, refused, small_cap):
    request = pb.ConvertRequest(content=b"a" * (small_cap + 1), filename="big.txt")
    code, reason, metadata = await refused(small_converter, request)
    assert (code, reason) == ("INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")
    assert metadata["max_bytes"] == str(small_cap)
    assert metadata["size_bytes"] == str(small_cap + 1)


async def test_upload_at_the_cap_converts(small_converter, small_cap):
    data = (b"word " * (small_cap // 5)).ljust(small_cap, b" ")
    reply = await small_converter.Convert(pb.ConvertRequest(content=data, filename="exact.txt"))
    assert reply.document.size_bytes == small_cap
    assert reply.document.markdown.startswith("word word")


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


async def test_zip_converts_each_member(converter):
    data = _zip({"a.txt": b"alpha member text", "b.csv": b"x,y\n1,2\n"})
    reply = await converter.Convert(pb.ConvertRequest(content=data, filename="bundle.zip"))
    assert reply.document.mime_type == "application/zip"
    assert "alpha member text" in reply.document.markdown
    assert "| x | y |" in reply.document.markdown


@pytest.mark.parametrize("nested", [False, True])
async def test_zip_that_unpacks_past_the_limit(small_converter, refused, small_cap, nested):
    """A small ZIP of zeros that would unpack to 5 x the cap (4 x is allowed), also hidden inside a ZIP."""
    bomb = _zip({"zeros.txt": b"0" * (5 * small_cap)})
    data = _zip({"inner.zip": bomb}) if nested else bomb
    assert len(data) < small_cap
    code, reason, metadata = await refused(small_converter, pb.ConvertRequest(content=data, filename="bomb.zip"))
    assert (code, reason) == ("INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")
    assert metadata["max_bytes"] == str(4 * small_cap)


@pytest.mark.parametrize("filename", ["locked.docx", ""])
async def test_password_protected_office_file(converter, refused, make_encrypted_office, filename):
    request = pb.ConvertRequest(content=make_encrypted_office(), filename=filename)
    code, reason, metadata = await refused(converter, request)
    assert (code, reason) == ("INVALID_ARGUMENT", "DOCUMENT_ENCRYPTED")
    assert metadata["mime_type"] == "application/x-ole-storage"


async def test_zip_with_an_encrypted_member(converter, refused):
    """The member's headers flag it as encrypted (general purpose bit 0), as `zip -e` writes them."""
    data = bytearray(_zip({"secret.txt": b"ciphertext stand-in"}))
    data[6] |= 0x1  # local file header flags
    data[data.index(b"PK\x01\x02") + 8] |= 0x1  # central directory flags
    assert zipfile.ZipFile(io.BytesIO(data)).infolist()[0].flag_bits & 0x1
    code, reason, _ = await refused(converter, pb.ConvertRequest(content=bytes(data), filename="s.zip"))
    assert (code, reason) == ("INVALID_ARGUMENT", "DOCUMENT_ENCRYPTED")
