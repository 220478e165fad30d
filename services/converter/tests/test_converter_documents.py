"""Every shared sample document converts to Markdown with text we know is in it (or is refused, for the
one that is not a document), over real gRPC."""

from __future__ import annotations

import io
import re

import pypdfium2
import pytest
from ragmesh.converter.v1 import converter_service_pb2 as pb

# file -> (detected MIME type, texts that must appear in the Markdown, expected title)
EXPECTED = {
    "test.docx": (
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ["AutoGen: Enabling Next-Gen LLM Applications via Multi-Agent Conversation", "# Abstract"],
        "Abstract",
    ),
    "test.pptx": (
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        ["2cdda5c8-e50e-4db4-b5f0-9722a649f455", "AutoGen is an open-source framework"],
        "AutoGen: Enabling Next-Gen LLM Applications via Multi-Agent Conversation",
    ),
    "test.xlsx": (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        ["| Alpha | Beta | Gamma | Delta |", "6ff4173b-42a5-4784-9b19-f49caff4d93d"],
        "test.xlsx",
    ),
    "test.pdf": (
        "application/pdf",
        ["Large language models (LLMs) are becoming a crucial building block", "multi-agent conversation"],
        "test.pdf",
    ),
    "RECEIPT-2024-TXN-98765_retail_purchase.pdf": (
        "application/pdf",
        ["TECHMART ELECTRONICS", "Wireless Noise-Cancelling", "TOTAL $821.14"],
        "RECEIPT-2024-TXN-98765_retail_purchase.pdf",
    ),
    "movie-theater-booking-2024.pdf": (
        "application/pdf",
        ["STARLIGHT CINEMAS", "Holiday Movie Marathon Package", "| Sarah Johnson"],
        "movie-theater-booking-2024.pdf",
    ),
    "test.epub": (
        "application/epub+zip",
        ["# Chapter 1: Test Content", "This is a **test** paragraph"],
        "Test EPUB Document",
    ),
    "test.json": ("application/json", ['"key1": "string_value"', "9700dc99-6685-40b4-9a3a-5e406dcb37f3"], "test.json"),
    "test_blog.html": (
        "text/html",
        ["Large language models (LLMs) are powerful"],
        "Does Model and Inference Parameter Matter in LLM Applications? - A Case Study for MATH | AutoGen",
    ),
    "test_wikipedia.html": ("text/html", ["Microsoft Corporation", "Bill Gates"], "Microsoft - Wikipedia"),
    "test_mskanji.csv": (  # Shift-JIS
        "text/csv",
        ["| 名前 | 年齢 | 住所 |", "| 佐藤太郎 | 30 | 東京 |", "髙橋淳"],
        "test_mskanji.csv",
    ),
    "test_notebook.ipynb": (
        "application/x-ipynb+json",
        ["# Test Notebook", 'print("markitdown")'],
        "Test Notebook Title",
    ),
    "test_rss.xml": (
        "text/xml",
        ["# The Official Microsoft Blog", "Ignite 2024: Why nearly 70% of the Fortune 500"],
        "The Official Microsoft Blog",
    ),
}


def test_every_shared_document_is_covered(documents):
    names = {path.name for path in documents.iterdir()}
    assert names == set(EXPECTED) | {"random.bin"}, "a new sample document needs expectations here"


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_shared_document_converts(converter, documents, name):
    mime_type, texts, title = EXPECTED[name]
    data = (documents / name).read_bytes()

    reply = await converter.Convert(pb.ConvertRequest(content=data, filename=name))

    doc = reply.document
    assert doc.mime_type == mime_type
    for text in texts:
        assert text in doc.markdown
    assert doc.title == title
    assert doc.size_bytes == len(data)
    assert doc.filename == name
    assert doc.url == ""


@pytest.mark.parametrize("name", ["test.docx", "test.pdf", "test_mskanji.csv", "test_notebook.ipynb"])
async def test_format_is_detected_from_content_without_hints(converter, documents, name):
    mime_type, texts, _ = EXPECTED[name]
    reply = await converter.Convert(pb.ConvertRequest(content=(documents / name).read_bytes()))
    assert reply.document.mime_type == mime_type
    assert texts[0] in reply.document.markdown


async def test_content_wins_over_a_misleading_name(converter, documents):
    data = (documents / "test_blog.html").read_bytes()
    request = pb.ConvertRequest(content=data, filename="report.pdf", mime_type="application/pdf")
    reply = await converter.Convert(request)
    assert reply.document.mime_type == "text/html"
    assert "Large language models (LLMs) are powerful" in reply.document.markdown


@pytest.mark.parametrize("filename", ["random.bin", "notes.txt", "page.html", ""])
async def test_binary_junk_is_unsupported_whatever_its_name(converter, documents, rpc_error, filename):
    data = (documents / "random.bin").read_bytes()
    error = await rpc_error(converter.Convert(pb.ConvertRequest(content=data, filename=filename)))
    assert error.code.name == "INVALID_ARGUMENT"
    assert error.reason == "UNSUPPORTED_MEDIA_TYPE"
    assert error.domain == "converter.ragmesh"
    assert error.metadata["detected_mime_type"] == "application/octet-stream"


async def test_markdown_title_is_its_first_heading(converter):
    text = b"Intro line\n\n## The *Real* [Title](http://example.com)\n\nBody text.\n"
    reply = await converter.Convert(pb.ConvertRequest(content=text, filename="notes.md"))
    assert reply.document.title == "The Real Title"
    assert reply.document.mime_type == "text/markdown"
    assert "Body text." in reply.document.markdown


def _long_letter_runs(markdown: str) -> list[str]:
    return re.findall(r"[A-Za-z]{25,}", markdown)


async def test_pdf_prose_keeps_spaces_between_words(converter, documents):
    reply = await converter.Convert(pb.ConvertRequest(content=(documents / "test.pdf").read_bytes()))
    assert _long_letter_runs(reply.document.markdown) == []


async def test_pdf_with_form_and_prose_pages_keeps_both(converter, documents):
    """markitdown reads prose pages with pdfplumber once any page looks like a form, and pdfplumber runs the
    words of TeX PDFs together; the converter reads prose pages with pdfminer. The document is two real
    samples joined: the booking form, then the paper."""
    merged = pypdfium2.PdfDocument.new()
    for name in ("movie-theater-booking-2024.pdf", "test.pdf"):
        merged.import_pages(pypdfium2.PdfDocument(documents / name))
    buffer = io.BytesIO()
    merged.save(buffer)

    reply = await converter.Convert(pb.ConvertRequest(content=buffer.getvalue(), filename="merged.pdf"))

    markdown = reply.document.markdown
    assert "| Order / Rev: | 2024-12-5678" in markdown  # the form page is still a table
    assert "Large language models (LLMs) are becoming a crucial building block" in markdown
    assert _long_letter_runs(markdown) == []
    assert markdown.index("STARLIGHT CINEMAS") < markdown.index("Large language models")  # page order kept
