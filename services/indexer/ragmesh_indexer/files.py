"""Files kept verbatim: source code and plain text skip the converter, so `GET /documents/{id}` returns their
exact bytes (Markdown conversion would collapse blank lines and read `__init__` as emphasis), and every chunk
of a file carries where it is: `path`, its folders (`path_prefixes`, for the `path_prefix` filter),
`language`, and its 1-based inclusive `start_line`/`end_line`.

A file is verbatim when it decodes as UTF-8, holds no NUL byte, and is not a format the converter exists for
(HTML, CSV, notebooks, e-mail, office documents, PDF, ...): a `.py` file, a README, a Makefile, a `.toml`.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ragmesh_store import path_prefixes

from .chunking import Chunk, code_language, language_name

# Formats the converter turns into better Markdown than their raw text (tables, notebooks, e-mail, markup).
CONVERTED_EXTENSIONS = frozenset(
    {
        ".html",
        ".htm",
        ".xhtml",
        ".csv",
        ".tsv",
        ".xml",
        ".rss",
        ".atom",
        ".ipynb",
        ".eml",
        ".msg",
        ".pdf",
        ".docx",
        ".pptx",
        ".xlsx",
        ".xls",
        ".epub",
        ".zip",
    }
)
_MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown", ".mdx"})


def decoded_verbatim(data: bytes, filename: str) -> str | None:
    """The file's text when it is stored verbatim (see the module doc), else None (it goes to the converter)."""
    if PurePosixPath(filename.lower()).suffix in CONVERTED_EXTENSIONS or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_language(filename: str) -> str:
    """The language of a verbatim file: a programming language's name, "markdown", or "text"."""
    language = code_language(filename)
    if language is not None:
        return language_name(language)
    return "markdown" if PurePosixPath(filename.lower()).suffix in _MARKDOWN_EXTENSIONS else "text"


def location_fields(path: str, language: str) -> dict[str, object]:
    """The payload fields that place a file's chunks: its path, the folders it lies in, its language."""
    fields: dict[str, object] = {}
    if path:
        fields |= {"path": path, "path_prefixes": path_prefixes(path)}
    if language:
        fields["language"] = language
    return fields


def line_ranges(text: str, chunks: list[Chunk]) -> list[tuple[int, int]]:
    """(start_line, end_line) of each chunk: 1-based, inclusive."""
    ranges = []
    line, offset = 1, 0
    for chunk in chunks:
        if chunk.start >= offset:
            line += text.count("\n", offset, chunk.start)
        else:  # overlapping chunks step back
            line -= text.count("\n", chunk.start, offset)
        offset = chunk.start
        ranges.append((line, line + chunk.text.count("\n")))
    return ranges
