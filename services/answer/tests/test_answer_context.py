"""The numbered context: the token budget, grouping by document, citations read back, quotable sentences."""

from __future__ import annotations

import re
from pathlib import Path

from ragmesh_answer.context import (
    Chunk,
    build_context,
    cited_numbers,
    estimate_tokens,
    relations_line,
    sentences,
    snippet,
    with_citation,
)


def chunk(doc: str, index: int, text: str, score: float, collection: str = "c") -> Chunk:
    return Chunk(
        chunk_id=f"{doc}-{index}",
        doc_id=doc,
        collection=collection,
        chunk_index=index,
        text=text,
        score=score,
        title=doc.title(),
    )


def test_chunks_are_grouped_by_document_numbered_by_their_best_chunk_and_kept_in_document_order():
    context = build_context(
        [
            chunk("b", 3, "B three.", 0.9),
            chunk("a", 0, "A zero.", 0.8),
            chunk("b", 1, "B one.", 0.7),
            chunk("a", 0, "Other collection.", 0.6, collection="d"),
        ],
        budget_tokens=1000,
    )
    numbered = [(s.number, s.collection, s.doc_id) for s in context.sources]
    assert numbered == [(1, "c", "b"), (2, "c", "a"), (3, "d", "a")]
    assert [c.chunk_index for c in context.sources[0].chunks] == [1, 3]
    assert context.sources[0].relevance_score == 0.9
    assert context.render() == (
        "[1] B (c/b)\nB one.\n\nB three.\n\n[2] A (c/a)\nA zero.\n\n[3] A (d/a)\nOther collection."
    )
    assert [c.chunk_id for c in context.chunks] == ["b-3", "a-0", "b-1", "a-0"]  # best first


def test_the_budget_keeps_the_best_chunks_that_fit_and_cuts_a_first_chunk_that_does_not():
    big, small = "x" * 4000, "small chunk"
    context = build_context(
        [chunk("a", 0, "y" * 400, 0.9), chunk("b", 0, big, 0.8), chunk("c", 0, small, 0.7)], budget_tokens=200
    )
    assert [s.doc_id for s in context.sources] == ["a", "c"]  # b does not fit, c still does
    assert sum(estimate_tokens(c.text) for c in context.chunks) <= 200
    cut = build_context([chunk("b", 0, big, 0.8)], budget_tokens=200)
    assert len(cut.chunks) == 1 and 0 < len(cut.chunks[0].text) < len(big)
    assert estimate_tokens(cut.render()) <= 200


def test_a_graph_entitys_relations_follow_its_chunks_in_both_directions():
    entity = Chunk("e-0", "Service/default/web", "k8s", 0, "Service web.", 0.9, entity_id="Service/default/web")
    context = build_context([entity, chunk("a", 0, "A zero.", 0.8)], budget_tokens=1000)
    assert [s.entity_id for s in context.sources] == ["Service/default/web", ""]
    context.sources[0].relations = relations_line(
        "Service/default/web",
        [("SELECTS", True, "Deployment/default/web"), ("PROTECTS", False, "NetworkPolicy/default/web")],
    )
    assert context.render() == (
        "[1] Service/default/web (k8s/Service/default/web)\nService web.\n\n"
        "Relations of Service/default/web: -[SELECTS]-> Deployment/default/web; "
        "<-[PROTECTS]- NetworkPolicy/default/web."
        "\n\n[2] A (c/a)\nA zero."
    )
    assert relations_line("Service/default/web", []) == ""


def test_citations_are_read_in_order_and_the_cited_sources_come_first():
    assert cited_numbers("Pandas eat bamboo [2]. They live in China [1][2], see [3, 1] and [4; 5].") == [2, 1, 3, 4, 5]
    assert cited_numbers("No citation here, [x] or [].") == []
    context = build_context([chunk(d, 0, d, 1 - i / 10) for i, d in enumerate("abcd")], budget_tokens=1000)
    ordered = context.cite([3, 9, 1])  # 9 is not a source
    assert [(s.number, s.cited) for s in ordered] == [(3, True), (1, True), (2, False), (4, False)]


def test_sentences_drop_headings_tables_and_fragments_and_keep_list_items_apart():
    text = (
        "# Title\n\nThe first sentence is here. And a **second** one follows it!\nIt wraps onto a line.\n\n"
        "| a | b |\n|---|---|\n\n- A list item with enough words.\n- Another item with words too\n\nToo short.\n\n"
        "What is new in this release? A Title Without A Full Stop\n\nThis line has no full stop but is long enough"
    )
    assert sentences(text) == [
        "The first sentence is here.",
        "And a second one follows it!",
        "It wraps onto a line.",
        "A list item with enough words.",
        "This line has no full stop but is long enough",
    ]
    assert sentences("word " * 200)[0].endswith("…") and len(sentences("word " * 200)[0]) <= 401


def test_snippets_are_one_line_without_heading_marks_and_cut_at_the_limit():
    assert snippet("# Giant pandas\n\nThey eat   bamboo.\n## Cubs") == "Giant pandas They eat bamboo. Cubs"
    assert snippet("word " * 100, limit=20) == "word word word word…"


def test_a_citation_goes_before_the_final_punctuation():
    assert with_citation("Pandas eat bamboo.", 2) == "Pandas eat bamboo [2]."
    assert with_citation("A list item", 1) == "A list item [1]"


ROOT = Path(__file__).resolve().parents[3]
_IDENTIFIER = re.compile(r"\b[A-Za-z]\w*_\w+\b")  # snake_case: what lost its underscores before


def test_code_is_quoted_as_whole_unchanged_lines():
    source = (ROOT / "libs/common/ragmesh_common/walk.py").read_text()
    lines = {line.strip() for line in source.splitlines()}
    quoted = sentences(source, language="python")
    assert len(quoted) > 20
    for sentence in quoted:
        assert sentence.startswith("`") and sentence.endswith("`")
        assert sentence.strip("`").strip() in lines  # a whole line of the file, every character as written
    assert any(_IDENTIFIER.search(s) for s in quoted)
    # A line that holds backticks is fenced with longer ones, its content intact.
    assert sentences("label = f`{a_b}` + other_value", language="javascript") == ["``label = f`{a_b}` + other_value``"]


def test_markdown_keeps_identifiers_and_code_blocks_and_drops_link_targets_and_emphasis():
    text = (
        "Pass `is_flag=True` to add_help_option and test_option_optional; see [Counting](#counting) and "
        "**bold** or _emphasis_ here.\n\n```python\ndef add_help_option(ctx):\n    return ctx.is_flag\n```\n"
    )
    assert sentences(text) == [
        "Pass `is_flag=True` to add_help_option and test_option_optional; see Counting and bold or emphasis here.",
        "`def add_help_option(ctx):`",
        "`return ctx.is_flag`",
    ]


def test_a_real_markdown_page_keeps_every_identifier_and_fenced_line():
    page = (ROOT / "docs/operations.md").read_text()
    quoted = sentences(page)
    fenced: set[str] = set()
    inside = False
    for line in page.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside and line.strip():
            fenced.add(line.strip())
    code = [s.strip("`").strip() for s in quoted if s.startswith("`") and s.endswith("`")]
    assert code and set(code) <= fenced
    prose = " ".join(s for s in quoted if not (s.startswith("`") and s.endswith("`")))
    assert "](" not in prose  # links show their text only
    # Before, `retry_after_seconds` came out as retryafterseconds: no identifier of the page is mangled so.
    for identifier in set(_IDENTIFIER.findall(page)):
        assert identifier in prose or identifier.replace("_", "") not in prose
    assert "retry_after_seconds" in prose
