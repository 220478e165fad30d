"""Constructed retrieval checks from a BEIR dataset (default msmarco-5k), for `ragmesh eval` and bench_fusion:
conditions the fusion was not tuned on, built only from what we ship.

    .venv/bin/python -m bench.make_checks ../shared/datasets/msmarco-5k .ragmesh-eval/checks

Writes BEIR folders over the same corpus (so `ragmesh eval --collection eval-msmarco-5k` reuses the ingested
collection):
- `<name>-typo`: every test query with two inner letters of each word of 4+ letters swapped ("cost" ->
  "csot"): the lexical side matches only the untouched words, the dense side still reads most of the query
  (BM25 weak but not useless, as on the held-out entity set);
- `<name>-keyword`: known-item keyword lookups (a passage queried by words drawn from it, as in Azzopardi, de
  Rijke & Balog, "Building Simulated Queries for Known-Item Topics", SIGIR 2007): passages drawn at random
  (seed 13), each queried by its 3 rarest words (by the corpus' BM25 IDF) and judged relevant, until there are
  120; a passage whose 3 words are all in another passage too is skipped, as its query has no single known
  item (msmarco holds near-duplicate passages, and a query whose words identify two passages equally but is
  judged on one of them scores a coin toss between them). BM25 is near perfect here and the dense side weak.
The split of the test queries by which single mode wins is computed by `ragmesh eval`'s per-query output, not
here.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
from collections import Counter
from pathlib import Path

from qdrant_edge import Bm25
from ragmesh_cli.evaluation import Dataset, load_dataset

SEED = 13
KEYWORD_QUERIES = 120
KEYWORD_TERMS = 3


def typo(word: str, rng: random.Random) -> str:
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 2)
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


def write(target: Path, dataset: Dataset, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> None:
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    with (target / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, (title, text) in dataset.corpus.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (target / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
    (target / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args()
    dataset = load_dataset(args.dataset)
    rng = random.Random(SEED)
    judged = dataset.judged_queries()
    write(
        args.target / f"{args.dataset.name}-typo",
        dataset,
        {q: " ".join(typo(w, rng) for w in dataset.queries[q].split()) for q in judged},
        {q: dataset.qrels[q] for q in judged},
    )

    bm25 = Bm25()
    terms = {
        doc_id: frozenset(bm25.embed_document(f"{title}\n\n{text}").indices)
        for doc_id, (title, text) in dataset.corpus.items()
    }
    df: Counter[int] = Counter(t for held in terms.values() for t in held)
    n = len(dataset.corpus)

    def idf(word: str) -> float:
        return max(
            (math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in bm25.embed_query(word).indices if df[t]),
            default=0.0,
        )

    def known_item(doc_id: str, query: str) -> bool:
        """True if no other passage holds every term of the query (as BM25 tokenizes it)."""
        wanted = set(bm25.embed_query(query).indices)
        return not any(wanted <= held for other, held in terms.items() if other != doc_id)

    queries, qrels = {}, {}
    for doc_id in rng.sample(sorted(dataset.corpus), len(dataset.corpus)):
        words = dict.fromkeys(w for w in re.findall(r"[A-Za-z][A-Za-z'-]+", dataset.corpus[doc_id][1]) if len(w) > 2)
        rare = [w for score, w in sorted(((idf(w), w) for w in words), reverse=True) if score > 0][:KEYWORD_TERMS]
        if len(rare) == KEYWORD_TERMS and known_item(doc_id, query := " ".join(rare)):
            queries[f"kw-{doc_id}"] = query
            qrels[f"kw-{doc_id}"] = {doc_id: 1}
            if len(queries) == KEYWORD_QUERIES:
                break
    write(args.target / f"{args.dataset.name}-keyword", dataset, queries, qrels)
    print(f"{args.target}: {len(judged)} typo queries, {len(queries)} keyword queries")


if __name__ == "__main__":
    main()
