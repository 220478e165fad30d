"""Model token ids between services (ragmesh.embedder.v1.TokenIds): which tokenizer made them, and how they are
packed, so that a text the indexer has tokenised already (it sizes chunks in model tokens) is not tokenised again
by the embedder: one little-endian int32 string per request, built and read without Python work per token."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def tokenizer_fingerprint(tokenizer_json: Path) -> str:
    """A tokenizer's fingerprint: the first 16 hex digits of its tokenizer.json's SHA-256. Two tokenizers with the
    same fingerprint give the same ids for the same text."""
    return hashlib.sha256(Path(tokenizer_json).read_bytes()).hexdigest()[:16]


def packed_ids(ids: Sequence[Sequence[int] | np.ndarray]) -> bytes:
    """Every text's ids one after the other, as little-endian int32 (TokenIds.ids)."""
    if not ids:
        return b""
    return np.concatenate([np.asarray(each, dtype="<i4") for each in ids]).tobytes()


def unpacked_ids(data: bytes) -> np.ndarray:
    """TokenIds.ids as one array (ValueError when its length is not a whole number of int32s)."""
    return np.frombuffer(data, dtype="<i4")
