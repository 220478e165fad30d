"""The markitdown instance the converter uses: only the formats we serve, and a PDF path that keeps the
spaces between words.

Left out on purpose: audio (transcribes through a web API), images (need an LLM or exiftool), YouTube
(fetches transcripts itself, around the SSRF guard), Bing result pages and the Azure converters.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

import pdfplumber
from markitdown import DocumentConverterResult, MarkItDown, StreamInfo
from markitdown.converters import (
    CsvConverter,
    DocxConverter,
    EpubConverter,
    HtmlConverter,
    IpynbConverter,
    OutlookMsgConverter,
    PlainTextConverter,
    PptxConverter,
    RssConverter,
    WikipediaConverter,
    XlsConverter,
    XlsxConverter,
    ZipConverter,
)
from markitdown.converters import PdfConverter as MarkItDownPdfConverter
from markitdown.converters._pdf_converter import (  # markitdown's own helpers, reused as they are
    _extract_form_content_from_words,
    _merge_partial_numbering_lines,
)
from pdfminer.high_level import extract_pages
from pdfminer.layout import LAParams, LTTextContainer

_GENERIC = 10.0  # markitdown's PRIORITY_GENERIC_FILE_FORMAT: tried after the specific formats


class PdfConverter(MarkItDownPdfConverter):
    """markitdown's PDF conversion, with prose pages always read by pdfminer's layout analysis.

    markitdown renders pages that look like forms as tables (pdfplumber), and once any page does, it reads
    the other pages with pdfplumber's `extract_text` too, which drops the spaces between words in many
    TeX-made PDFs ("Largelanguagemodelsarebecoming..."). Here form pages keep markitdown's tables and
    every other page comes from pdfminer (one pass over the document), which keeps the spacing.
    """

    def convert(self, file_stream: BinaryIO, stream_info: StreamInfo, **kwargs: Any) -> DocumentConverterResult:
        data = file_stream.read()
        pages: list[str | None] = []  # None: a prose page, filled in by pdfminer below
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for page in pdf.pages:
                pages.append(_extract_form_content_from_words(page))
                page.close()
        prose = [index for index, text in enumerate(pages) if text is None]
        if prose:
            layouts = extract_pages(io.BytesIO(data), page_numbers=prose, laparams=LAParams())
            for index, layout in zip(prose, layouts, strict=True):
                pages[index] = "".join(item.get_text() for item in layout if isinstance(item, LTTextContainer))
        markdown = "\n\n".join(text.strip() for text in pages if text and text.strip())
        return DocumentConverterResult(markdown=_merge_partial_numbering_lines(markdown))


def build_markitdown() -> MarkItDown:
    """A MarkItDown with the converters for the formats in the spec (later registrations are tried first)."""
    engine = MarkItDown(enable_builtins=False, enable_plugins=False)
    engine.register_converter(PlainTextConverter(), priority=_GENERIC)
    engine.register_converter(ZipConverter(markitdown=engine), priority=_GENERIC)
    engine.register_converter(HtmlConverter(), priority=_GENERIC)
    for converter in (
        RssConverter(),
        WikipediaConverter(),
        DocxConverter(),
        XlsxConverter(),
        XlsConverter(),
        PptxConverter(),
        IpynbConverter(),
        PdfConverter(),
        OutlookMsgConverter(),
        EpubConverter(),
        CsvConverter(),
    ):
        engine.register_converter(converter)
    return engine
