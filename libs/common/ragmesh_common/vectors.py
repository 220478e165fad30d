"""Dense vectors out of an embedder response, whichever way it carries them (ragmesh.embedder.v1.DenseFormat).

Callers that ask for DENSE_FORMAT_PACKED_FLOAT32 get one byte string per response instead of one repeated
float per text: the embedder builds it with one `tobytes()` and this reads it with one `frombytes()`, so no
Python work is done per number on either side.
"""

from __future__ import annotations

import sys
from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragmesh.embedder.v1.embedder_service_pb2 import EmbedResponse, EmbedStreamResponse


def dense_rows(response: EmbedResponse | EmbedStreamResponse) -> list[list[float]]:
    """One list of floats per text, in request order, from an EmbedResponse or EmbedStreamResponse: its packed
    `dense_matrix` when set, else each embedding's `dense`."""
    if not response.HasField("dense_matrix"):
        return [list(embedding.dense) for embedding in response.embeddings]
    matrix = response.dense_matrix
    rows, columns = matrix.rows, matrix.columns
    if rows != len(response.embeddings) or len(matrix.data) != rows * columns * 4:
        raise ValueError(
            f"a dense_matrix of {len(matrix.data)} bytes cannot hold {rows} x {columns} float32 "
            f"values for {len(response.embeddings)} embeddings"
        )
    values = array("f")
    values.frombytes(matrix.data)
    if sys.byteorder == "big":  # the wire format is little-endian
        values.byteswap()
    flat = values.tolist()
    return [flat[start : start + columns] for start in range(0, rows * columns, columns)]
