"""The numbered context a model answers from, and the citations in an answer.

Retrieved chunks (best first) are taken while they fit a token budget, then grouped by document: each
document is one numbered source, `[n] title (collection/doc_id)`, followed by its chunks in document order.
The answer cites sources as `[n]`; `cited_numbers` reads them back.

A source that is a graph entity (its document's metadata says is_graph_entity) may carry its neighbourhood
in the graph as one more line below its chunks: `Relations of <id>: -[SELECTS]-> <id>; <-[SCALES]- <id>.`
(`relations_line`), outside the token budget but bounded by the number of entities and relations listed.

Tokens are estimated as 4 characters each (OpenAI's rule of thumb for English): the service talks to any
model, whose tokenizer it does not have, and the budget only needs to keep the prompt well inside a window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from markdown_it import MarkdownIt

CHARS_PER_TOKEN = 4
SNIPPET_CHARS = 300
_CITATION = re.compile(r"\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_HEADING_MARK = re.compile(r"^\s*#{1,6}\s+")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_WORDS = re.compile(r"\w+")
# Languages whose chunks are prose (anything else with a language is source code, quoted line by line).
PROSE_LANGUAGES = frozenset({"", "markdown", "text", "rst", "asciidoc"})
# CommonMark's inline parser: emphasis and links are read as Markdown reads them, so an underscore inside a word
# (is_flag) or a bracket that is not a link stays as written.
_MARKDOWN = MarkdownIt("commonmark")


def estimate_tokens(text: str) -> int:
    return max(1, (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN)


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """`text` on one line, without Markdown heading marks, cut to `limit` characters at most."""
    text = " ".join(_HEADING_MARK.sub("", line) for line in text.splitlines())
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass
class Chunk:
    """A retrieved chunk."""

    chunk_id: str
    doc_id: str
    collection: str
    chunk_index: int
    text: str
    score: float
    title: str = ""
    url: str = ""
    filename: str = ""
    language: str = ""  # the file's language for chunks of files ("python", "markdown", ...), else ""
    entity_id: str = ""  # the graph entity the chunk's document stands for, if it is one


@dataclass
class SourceDoc:
    """One numbered document of the context."""

    number: int
    doc_id: str
    collection: str
    title: str
    url: str
    filename: str
    chunks: list[Chunk] = field(default_factory=list)  # in document order
    best: Chunk | None = None
    cited: bool = False
    relations: str = ""  # a graph entity's neighbourhood (`relations_line`), when the graph gave one

    @property
    def entity_id(self) -> str:
        """The graph entity this document stands for, or ""."""
        return self.best.entity_id if self.best else ""

    @property
    def relevance_score(self) -> float:
        return self.best.score if self.best else 0.0

    def header(self) -> str:
        name = self.title or self.filename or self.doc_id
        return f"[{self.number}] {name} ({self.collection}/{self.doc_id})"


@dataclass
class Context:
    """The sources (numbered from 1) and the chunks they hold, best first."""

    sources: list[SourceDoc]
    chunks: list[Chunk]

    def number_of(self, chunk: Chunk) -> int:
        return next(s.number for s in self.sources if (s.collection, s.doc_id) == (chunk.collection, chunk.doc_id))

    def render(self) -> str:
        """The sources as the prompt shows them."""
        blocks = []
        for source in self.sources:
            body = "\n\n".join(chunk.text.strip() for chunk in source.chunks)
            if source.relations:
                body += f"\n\n{source.relations}"
            blocks.append(f"{source.header()}\n{body}")
        return "\n\n".join(blocks)

    def cite(self, numbers: Iterable[int]) -> list[SourceDoc]:
        """Mark the cited sources; returns all sources, the cited ones first in citation order."""
        order = [n for n in dict.fromkeys(numbers) if 1 <= n <= len(self.sources)]
        for source in self.sources:
            source.cited = source.number in order
        by_number = {s.number: s for s in self.sources}
        return [by_number[n] for n in order] + [s for s in self.sources if not s.cited]


def build_context(chunks: Sequence[Chunk], budget_tokens: int) -> Context:
    """Take chunks (best first) while they fit `budget_tokens` (the first one is cut to fit if it must), and
    group them into numbered documents in the order of their best chunk."""
    taken: list[Chunk] = []
    headers: set[tuple[str, str]] = set()
    used = 0
    for chunk in chunks:
        key = (chunk.collection, chunk.doc_id)
        cost = estimate_tokens(chunk.text) + (0 if key in headers else estimate_tokens(chunk.title) + 12)
        if used + cost > budget_tokens:
            if taken:
                continue  # a smaller chunk further down may still fit
            room = max(1, budget_tokens - estimate_tokens(chunk.title) - 12) * CHARS_PER_TOKEN
            chunk = Chunk(**{**chunk.__dict__, "text": chunk.text[:room]})
            cost = budget_tokens
        taken.append(chunk)
        headers.add(key)
        used += cost
    sources: dict[tuple[str, str], SourceDoc] = {}
    for chunk in taken:
        key = (chunk.collection, chunk.doc_id)
        if key not in sources:
            sources[key] = SourceDoc(
                len(sources) + 1, chunk.doc_id, chunk.collection, chunk.title, chunk.url, chunk.filename, best=chunk
            )
        sources[key].chunks.append(chunk)
    for source in sources.values():
        source.chunks.sort(key=lambda c: c.chunk_index)
    return Context(list(sources.values()), taken)


def relations_line(entity_id: str, relations: Sequence[tuple[str, bool, str]]) -> str:
    """One sentence naming an entity's relations, each `(type, outgoing, other id)`:
    `Relations of Service/default/web: -[SELECTS]-> Deployment/default/web; <-[SCALES]- ...`; "" without any."""
    if not relations:
        return ""
    hops = "; ".join(f"-[{kind}]-> {to}" if outgoing else f"<-[{kind}]- {to}" for kind, outgoing, to in relations)
    return f"Relations of {entity_id}: {hops}."


def cited_numbers(answer: str) -> list[int]:
    """The source numbers an answer cites ([1], [2, 3], [1][4]), in order of first citation."""
    numbers: list[int] = []
    for match in _CITATION.finditer(answer):
        numbers.extend(int(n) for n in re.split(r"\s*[,;]\s*", match.group(1)))
    return list(dict.fromkeys(numbers))


def plain_text(markdown: str) -> str:
    """Inline Markdown as text: emphasis marks and link targets dropped (a link shows its text, an image its alt
    text), code spans kept in backticks, every other character as written."""
    parts: list[str] = []
    for block in _MARKDOWN.parseInline(markdown):
        for token in block.children or []:
            if token.type in ("text", "image"):
                parts.append(token.content)
            elif token.type == "code_inline":
                parts.append(code_span(token.content))
            elif token.type in ("softbreak", "hardbreak"):
                parts.append(" ")
    return "".join(parts)


def code_span(code: str) -> str:
    """`code` as an inline code span whose content is exactly `code` (longer fences around backticks)."""
    fence = "`" * (max((len(m) for m in re.findall(r"`+", code)), default=0) + 1)
    pad = " " if code.startswith("`") or code.endswith("`") else ""
    return f"{fence}{pad}{code}{pad}{fence}"


def is_code(language: str) -> bool:
    return language.lower() not in PROSE_LANGUAGES


def sentences(text: str, *, language: str = "", min_words: int = 4, max_chars: int = 400) -> list[str]:
    """The sentences of a chunk worth quoting. Prose: headings, titles, questions, table rows and fragments
    dropped, Markdown emphasis, links and list bullets removed, overlong sentences cut at a word. Code (a chunk
    of source code, or a fenced block in Markdown): whole lines, unchanged, as code spans."""
    if is_code(language):
        return code_lines(text.splitlines(), max_chars=max_chars)
    out: list[str] = []
    prose: list[str] = []
    fence = ""
    code: list[str] = []
    for line in [*text.splitlines(), ""]:
        marker = _FENCE.match(line)
        if fence:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                out.extend(code_lines(code, max_chars=max_chars))
                fence, code = "", []
            else:
                code.append(line)
        elif marker:
            out.extend(_prose(prose, min_words, max_chars))
            fence, prose = marker.group(1), []
        elif line.strip():
            prose.append(line)
        else:
            out.extend(_prose(prose, min_words, max_chars))
            prose = []
    out.extend(code_lines(code, max_chars=max_chars))  # a fence left open runs to the end of the chunk
    return out


def code_lines(lines: Iterable[str], *, max_chars: int = 400) -> list[str]:
    """The lines of code worth quoting, each whole and unchanged as a code span: at least two words, no longer
    than `max_chars` (a long line is skipped, never cut)."""
    out = []
    for line in lines:
        code = line.strip()
        if len(_WORDS.findall(code)) >= 2 and len(code) <= max_chars:
            out.append(code_span(code))
    return out


def _prose(lines: list[str], min_words: int, max_chars: int) -> list[str]:
    """The quotable sentences of one paragraph of prose."""
    lines = [line for line in lines if not line.lstrip().startswith(("#", "|", "---", "==="))]
    if not lines:
        return []
    # A list keeps one item per line; prose lines are re-joined.
    items = (
        [_LIST_MARK.sub("", line) for line in lines]
        if any(_LIST_MARK.match(x) for x in lines)
        else [" ".join(line.strip() for line in lines)]
    )
    out = []
    for item in items:
        for sentence in _SENTENCE_END.split(plain_text(item.strip())):
            sentence = " ".join(sentence.split())
            words = len(sentence.split())
            # Too short, a question (it answers nothing), or a title (no full stop, few words).
            if words < min_words or sentence.endswith("?") or (sentence[-1] not in ".!…\"')" and words < 8):
                continue
            if len(sentence) > max_chars:
                sentence = sentence[:max_chars].rsplit(" ", 1)[0] + "…"
            out.append(sentence)
    return out


def with_citation(sentence: str, number: int) -> str:
    """`sentence` citing source `number` before its final punctuation: "Pandas eat bamboo [1]."."""
    if sentence and sentence[-1] in ".!?":
        return f"{sentence[:-1]} [{number}]{sentence[-1]}"
    return f"{sentence} [{number}]"
