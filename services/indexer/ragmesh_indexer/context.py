"""What each chunk is embedded as: the document title and the Markdown heading path above the chunk, then
the chunk itself ("title — heading > subheading\\n\\nchunk"). The stored text stays the chunk; the dense and
the BM25 vectors both see the context, so a chunk deep in a section still matches the words of its title.
RAGMESH_INDEXER_EMBED_CONTEXT=none embeds the chunk alone (measured: docs/decisions/titles-and-headings.md).

The chunker leaves room below the model's window (chunk_tokens 200 of 256 by default); the context is cut to
`MAX_CONTEXT_CHARS` (about 40 tokens) so the chunk itself is still embedded whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

# RAGMESH_INDEXER_EMBED_CONTEXT: "title+headings" embeds `embedded_text`, "none" the chunk alone.
EmbedContext = Literal["title+headings", "none"]

# Bumped whenever the embedded text of a chunk changes, so unchanged documents are re-embedded once.
CONTEXT_VERSION = 1


def context_fingerprint(context: EmbedContext) -> int | str:
    """What of the embedded-text rules goes into a document's content hash (the default's is the version alone,
    so stores written before the setting existed are not re-embedded)."""
    return CONTEXT_VERSION if context == "title+headings" else context


MAX_CONTEXT_CHARS = 160
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def heading_paths(text: str, starts: Sequence[int]) -> list[list[str]]:
    """For each offset in `starts`, the Markdown headings (outermost first) of the lines before it; headings
    inside fenced code blocks do not count."""
    events: list[tuple[int, int, str]] = []  # (line offset, level, heading)
    offset, fenced = 0, False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := _HEADING.match(line)):
            events.append((offset, len(match.group(1)), match.group(2).strip()))
        offset += len(line) + 1
    out: list[list[str]] = []
    for start in starts:
        path: list[tuple[int, str]] = []
        for at, level, heading in events:
            if at >= start:
                break
            path = [p for p in path if p[0] < level] + [(level, heading)]
        out.append([h for _, h in path])
    return out


def embedded_text(title: str, headings: Sequence[str], chunk: str) -> str:
    """The text a chunk is embedded as: "title — h1 > h2\\n\\nchunk" (without the parts that are empty or that
    the chunk already starts with), or the chunk alone."""
    path = [h for h in headings if h]
    if path and title and path[0].casefold() == title.casefold():
        path = path[1:]  # the title is often the first heading
    context = " — ".join(p for p in (title.strip(), " > ".join(path)) if p)
    context = context[:MAX_CONTEXT_CHARS].strip()
    if not context or chunk.lstrip("# \t").startswith(context):
        return chunk
    return f"{context}\n\n{chunk}"
