"""The ragmesh embedder: texts -> dense vectors (a local sentence-transformers model, any OpenAI-compatible
/v1/embeddings API, or a hashing backend for tests) and sparse BM25 vectors, with dynamic batching."""
