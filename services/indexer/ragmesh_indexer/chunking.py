"""Chunking: Markdown sections, then recursive splitting measured in the embedding model's tokens.

Every chunk is an exact, whitespace-trimmed slice of the document (`text == document[start:start+len(text)]`)
and holds at most `max_tokens` model tokens, special tokens included, so the model never truncates one.
`separator` is the document's text between the previous chunk's end (the document's start, for the first
chunk) and this chunk's start ("" when the chunks overlap), so a reader can rebuild the document exactly from
the chunks alone (plus the text after the last chunk, which the indexer stores as that chunk's `tail`):

    document = separator + text of the first chunk, then for each next chunk: separator + text (or, when it
    overlaps the previous one, only the part of its text past the previous chunk's end), then the tail
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
from langchain_text_splitters import Language, MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter
from ragmesh_common.tokens import tokenizer_fingerprint
from tokenizers import Encoding, Tokenizer

# Bump when chunk boundaries change for the same input, so stored documents get re-chunked on re-ingest.
CHUNKER_VERSION = 2
_HEADERS = [("#", "h1"), ("##", "h2"), ("###", "h3")]
# Source files are split along their language's syntax instead of Markdown headings.
_CODE_LANGUAGES = {
    ".py": Language.PYTHON,
    ".js": Language.JS,
    ".mjs": Language.JS,
    ".jsx": Language.JS,
    ".ts": Language.TS,
    ".tsx": Language.TS,
    ".go": Language.GO,
    ".java": Language.JAVA,
    ".kt": Language.KOTLIN,
    ".rs": Language.RUST,
    ".rb": Language.RUBY,
    ".c": Language.C,
    ".h": Language.C,
    ".cc": Language.CPP,
    ".cpp": Language.CPP,
    ".hpp": Language.CPP,
    ".cs": Language.CSHARP,
    ".php": Language.PHP,
    ".scala": Language.SCALA,
    ".swift": Language.SWIFT,
    ".proto": Language.PROTO,
    ".lua": Language.LUA,
    ".pl": Language.PERL,
    ".hs": Language.HASKELL,
    ".ex": Language.ELIXIR,
    ".ps1": Language.POWERSHELL,
    ".sol": Language.SOL,
    ".tex": Language.LATEX,
    ".rst": Language.RST,
    ".pyi": Language.PYTHON,
    ".cjs": Language.JS,
    ".mts": Language.TS,
    ".cts": Language.TS,
    ".kts": Language.KOTLIN,
    ".cxx": Language.CPP,
    ".hh": Language.CPP,
    ".hxx": Language.CPP,
    ".exs": Language.ELIXIR,
    ".psm1": Language.POWERSHELL,
    ".cbl": Language.COBOL,
    ".cob": Language.COBOL,
    ".vb": Language.VISUALBASIC6,
    ".bas": Language.VISUALBASIC6,
    ".r": Language.R,
}
# How a language is named in chunk payloads and filters ("language": "python"); others use the enum value.
_LANGUAGE_NAMES = {Language.JS: "javascript", Language.TS: "typescript", Language.VISUALBASIC6: "visualbasic"}
# A text's model tokens: the tokenizer's int32 array, or a sequence (() when there are none).
TokenIds = Sequence[int] | np.ndarray


@dataclass(frozen=True)
class Chunk:
    """One piece of a document."""

    text: str
    start: int
    separator: str
    tokens: int
    # The chunk's model tokens (int32), special tokens included (`tokens` of them), from the tokenizer whose
    # fingerprint is `Chunker.tokenizer`: what the embedder embeds when the chunk has no title or heading context.
    token_ids: TokenIds = field(default=(), compare=False, repr=False)


def code_language(filename: str) -> Language | None:
    """The programming language a file name suggests, if it is a source file the splitter knows."""
    return _CODE_LANGUAGES.get(PurePosixPath(filename.lower()).suffix) if filename else None


def language_name(language: Language) -> str:
    """The name of a language in chunk payloads and filters: "python", "javascript", "go", ..."""
    return _LANGUAGE_NAMES.get(language, language.value)


def _separators(language: Language | None) -> list[str]:
    """Split points, best first. Markdown: headings already bound the sections, and a heading pattern would
    also match "# comment" lines inside code blocks, so it is left out."""
    separators = RecursiveCharacterTextSplitter.get_separators_for_language(language or Language.MARKDOWN)
    return separators if language else [s for s in separators if not s.startswith("\n#")]


def _normalize_line(line: str) -> str:
    # What MarkdownHeaderTextSplitter does to every line before emitting it.
    return "".join(filter(str.isprintable, line.strip()))


class Chunker:
    """Splits documents into chunks that fit the embedding model. Thread-safe; create once."""

    def __init__(self, tokenizer_path: Path, chunk_tokens: int, overlap_tokens: int) -> None:
        tokenizer_file = tokenizer_path / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        # Count every token: the packaged tokenizer.json truncates and pads to 128 by default.
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        # Counting needs no character offsets: the batch call without them (tokenizers >= 0.21) costs ~15 % less
        # than `encode` and gives the GIL up while it runs, so the model threads need not wait for a count.
        self._encode_counted = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self._special_tokens = len(self._tokenizer.encode("", add_special_tokens=True).ids)
        self.tokenizer = tokenizer_fingerprint(tokenizer_file)
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens

    def resized(self, chunk_tokens: int, overlap_tokens: int) -> Chunker:
        """A chunker with other sizes sharing this one's tokenizer (a collection version's own chunking)."""
        other = copy.copy(self)
        other.chunk_tokens = chunk_tokens
        other.overlap_tokens = overlap_tokens
        return other

    def count_tokens(self, text: str) -> int:
        """Model tokens of `text` as the embedder sees it, special tokens included."""
        return len(self._encoding(text))

    def token_ids(self, text: str) -> np.ndarray:
        """The model tokens of `text` as the embedder sees it, special tokens included (int32)."""
        return np.asarray(self._encoding(text).ids, dtype=np.int32)

    def _encoding(self, text: str) -> Encoding:
        return self._encode_counted([text], add_special_tokens=True)[0]

    def _content_tokens(self, text: str) -> int:
        return len(self._encoding(text)) - self._special_tokens

    def limits(self, max_sequence_length: int) -> tuple[int, int]:
        """(chunk size, overlap) in tokens for a model that embeds `max_sequence_length` tokens whole."""
        size = min(self.chunk_tokens, max_sequence_length) if max_sequence_length > 0 else self.chunk_tokens
        return size, min(self.overlap_tokens, size // 2 - 1)

    def fingerprint(self, max_sequence_length: int, filename: str = "") -> dict[str, object]:
        """Everything that decides chunk boundaries, for the document's content hash."""
        size, overlap = self.limits(max_sequence_length)
        language = code_language(filename)
        return {
            "version": CHUNKER_VERSION,
            "tokens": size,
            "overlap": overlap,
            "tokenizer": self.tokenizer,
            "splitter": language.value if language else "markdown",
        }

    def split(self, text: str, *, max_sequence_length: int, filename: str = "") -> list[Chunk]:
        """Chunk a document; empty when it has no visible text."""
        size, overlap = self.limits(max_sequence_length)
        language = code_language(filename)
        # Chunk budget without the special tokens the model adds once per chunk; the length function then
        # adds up (almost) exactly over the pieces the splitter merges.
        budget = size - self._special_tokens
        # The splitter measures most pieces twice (splitting, then merging), and each measure is a tokenizer call:
        # measured once per call. Each measure keeps the piece's token ids with its special tokens (4 bytes a token),
        # so a chunk's tokens are at hand for the embedder.
        ids_of = functools.cache(self.token_ids)

        def length(piece: str) -> int:
            return len(ids_of(piece)) - self._special_tokens

        splitter = RecursiveCharacterTextSplitter(
            separators=_separators(language),
            is_separator_regex=True,
            # New text per chunk leaves room for the overlap, which is added afterwards, where each chunk's
            # offset is known exactly.
            chunk_size=budget - overlap,
            chunk_overlap=0,
            length_function=length,
            keep_separator=True,
            strip_whitespace=True,
        )
        spans = [(0, len(text))] if language else self._sections(text)
        pieces: list[tuple[int, str]] = []
        for begin, end in spans:
            section = text[begin:end]
            if length(section) <= budget - overlap:
                # Within budget the splitter gives the section back whole, stripped: skip its passes.
                if piece := section.strip():
                    pieces.append((begin + section.index(piece), piece))
                continue
            cursor = 0
            for piece in splitter.split_text(section):
                found = section.find(piece, cursor)
                local = found if found >= 0 else section.find(piece)
                cursor = local + len(piece)
                pieces.extend(self._fit(begin + local, piece, budget - overlap, length))
        if overlap:
            pieces = self._with_overlap(text, pieces, overlap, budget)
        chunks: list[Chunk] = []
        previous_end = 0
        for start, piece in pieces:
            gap = "" if start < previous_end else text[previous_end:start]
            # From the measure the splitter (mostly) made already.
            ids = ids_of(piece)
            chunks.append(Chunk(piece, start, gap, len(ids), ids))
            previous_end = max(previous_end, start + len(piece))
        return chunks

    def _with_overlap(
        self, text: str, pieces: list[tuple[int, str]], overlap: int, budget: int
    ) -> list[tuple[int, str]]:
        """Extend each piece back over up to `overlap` tokens of the previous one, from a word start, as far as
        the budget allows. Offsets stay exact: a chunk is always the document's text from its start."""
        out = pieces[:1]
        for (prev_start, prev), (start, piece) in zip(pieces, pieces[1:], strict=False):
            chosen = (start, piece)
            offsets = self._tokenizer.encode(prev, add_special_tokens=False).offsets
            for k in range(max(1, len(offsets) - overlap), len(offsets)):  # never all of the previous piece
                begin = prev_start + offsets[k][0]
                if begin > prev_start and not text[begin - 1].isspace():
                    continue  # inside a word
                candidate = text[begin : start + len(piece)]
                if self._content_tokens(candidate) <= budget:
                    chosen = (begin, candidate)
                    break
            out.append(chosen)
        return out

    def _sections(self, text: str) -> list[tuple[int, int]]:
        """(begin, end) offsets of the document's Markdown sections (a heading and what follows it)."""
        if "#" not in text:  # no heading: one section, as the splitter says, without its pass over every line
            return [(0, len(text))] if text.strip() else []
        return self._markdown_sections(text)

    def _markdown_sections(self, text: str) -> list[tuple[int, int]]:
        documents = MarkdownHeaderTextSplitter(_HEADERS, strip_headers=False).split_text(text)
        lines = text.split("\n")
        line_starts, offset = [], 0
        for line in lines:
            line_starts.append(offset)
            offset += len(line) + 1
        bounds, line_no = [0], 0
        # The splitter rewrites whitespace, so find each section's first line among the original lines.
        for document in documents[1:]:
            first = document.page_content.split("\n", 1)[0].rstrip()
            for j in range(line_no + 1, len(lines)):
                if _normalize_line(lines[j]) == first:
                    bounds.append(line_starts[j])
                    line_no = j
                    break
        bounds.append(len(text))
        return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip()]

    def _fit(self, start: int, piece: str, budget: int, length: Callable[[str], int]) -> list[tuple[int, str]]:
        """The piece, cut at token boundaries when it is over budget (a single huge "word", say)."""
        if length(piece) <= budget:
            return [(start, piece)]
        offsets = self._tokenizer.encode(piece, add_special_tokens=False).offsets
        out: list[tuple[int, str]] = []
        window = budget
        while True:
            out.clear()
            cuts = [offsets[i][0] for i in range(0, len(offsets), window)] + [len(piece)]
            for a, b in zip(cuts, cuts[1:], strict=False):
                part = piece[a:b]
                stripped = part.strip()
                if stripped:
                    out.append((start + a + (len(part) - len(part.lstrip())), stripped))
            if all(self._content_tokens(p) <= budget for _, p in out) or window == 1:
                return out
            window = max(1, window * 3 // 4)
