"""A collection whose golden set tells chunkings apart (re-index tests of the gateway and the CLI): each golden
query names three words that its document holds in three different sentences, while other documents repeat one of
the words twice. Scored in dense mode with the hash embedder, whole-document chunks (256 tokens) and 32-token
chunks find every query's document (nDCG@10 0.93 and 1.0), but 16-token chunks split the three words apart and
rank the repeats first (0.63): a re-index from 256 to 16 tokens is worse, one to 32 is not."""

from __future__ import annotations

WORDS = {
    "harbor": ("lighthouse", "anchor", "tugboat"),
    "kitchen": ("whisk", "saucepan", "oven"),
    "garden": ("trowel", "compost", "hedge"),
    "workshop": ("chisel", "lathe", "sawdust"),
    "library": ("atlas", "catalogue", "reading"),
}
SENTENCES = (
    "The morning was quiet and nothing much happened while people walked along the old streets talking",
    "Later a train arrived from the north carrying letters parcels and a few tired travellers home",
    "By evening the clouds gathered over the hills and the market stalls were packed away slowly",
)
LETTER = (
    "Someone wrote a long letter about many different things such as family holidays prices music and sport and then"
)
DOCUMENTS = [
    *(
        {"doc_id": name, "text": " ".join(f"{s} about the {w}." for s, w in zip(SENTENCES, words, strict=True))}
        for name, words in WORDS.items()
    ),
    *(
        {"doc_id": f"{name}-{w}", "text": f"{LETTER} the {w} and the {w}. {SENTENCES[0]}. {SENTENCES[1]}."}
        for name, words in WORDS.items()
        for w in words
    ),
]
GOLDEN = {
    "queries": [{"query_id": name, "text": " ".join(words), "relevant": {name: 2}} for name, words in WORDS.items()]
}
# A mesh for them: whole-document chunks, golden sets scored in dense mode.
MESH = {"indexer": {"chunk_tokens": 256, "job_batch_size": 4}, "search": {"default_mode": "dense"}}
# A re-index the gate rejects (16-token chunks, no tolerance), and one it accepts.
WORSE = {"chunk_tokens": 16, "chunk_overlap_tokens": 0, "tolerance": 0}
BETTER = {"chunk_tokens": 32, "chunk_overlap_tokens": 0}
