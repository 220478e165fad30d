"""A bounded LRU cache of query embeddings: a query asked again (a popular question, a page of results
reloaded, an agent repeating itself) skips the embedder.

Keyed by (query text, vector kinds, model id): a dense-only entry never answers a hybrid query, and vectors of
one model never answer for another (the model id is the one the embedder reports in its responses; when it
changes, every entry of the old model is dropped). Used from one event loop only (no locking).
"""

from __future__ import annotations

from collections import OrderedDict

from .metrics import QueryCacheMetrics

CacheKey = tuple[str, tuple[int, ...], str]


class QueryCache:
    """At most `size` entries, least recently used evicted first; `size` 0 caches nothing."""

    def __init__(self, size: int, metrics: QueryCacheMetrics | None = None) -> None:
        self.size = size
        self.metrics = metrics
        self._entries: OrderedDict[CacheKey, object] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> object | None:
        """The cached value (now the most recently used), or None; counts a hit or a miss."""
        if self.size == 0:
            return None
        value = self._entries.get(key)
        if value is None:
            self._count(hit=False)
            return None
        self._entries.move_to_end(key)
        self._count(hit=True)
        return value

    def put(self, key: CacheKey, value: object) -> None:
        if self.size == 0:
            return
        model = key[2]
        if self._entries and next(reversed(self._entries))[2] != model:
            self._entries.clear()  # the embedder's model changed: the old vectors answer for nothing
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        if self.metrics is not None:
            self.metrics.entries.set(len(self._entries))

    def _count(self, *, hit: bool) -> None:
        if self.metrics is not None:
            (self.metrics.hits if hit else self.metrics.misses).inc()
