"""Whole documents from their stored chunks."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Hit


def reassemble(chunks: Sequence[Hit]) -> str:
    """The document's text from its chunks in order, each overlap counted once (see the indexer's chunking:
    chunks carry their offset `start` and the `separator` text before them; the last one the `tail` after it),
    byte for byte the text that was ingested."""
    parts: list[str] = []
    end: int | None = None
    for chunk in chunks:
        text = str(chunk.payload.get("text", ""))
        start = int(chunk.payload.get("start", end or 0))
        if end is not None and start < end:
            parts.append(text[end - start :])
        else:
            parts.append(str(chunk.payload.get("separator", "")) + text)
        end = max(end or 0, start + len(text))
    if chunks:
        parts.append(str(chunks[-1].payload.get("tail", "")))
    return "".join(parts)
