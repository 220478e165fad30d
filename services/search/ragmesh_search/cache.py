"""A bounded LRU cache of query embeddings: a query asked again (a popular question, a page of results
reloaded, an agent repeating itself) skips the embedder.

Keyed by (query text, vector kinds, model name): a dense-only entry never answers a hybrid query, and vectors of
one model never answer for another (the model name is the one asked of the embedder, "" for its default: the
collections of one request, or two versions of one collection, may be embedded with different models). The
cache holds no results, only query vectors, so switching a collection to another version never serves the
old version's results. When the embedder reports another model id for a name than it did (it was restarted with
another model), every entry of that name is dropped. Used from one event loop only (no locking).
"""

from __future__ import annotations

from collections import OrderedDict

from .metrics import QueryCacheMetrics

CacheKey = tuple[str, tuple[int, ...], str]  # (query text, vector kinds, model name)


class QueryCache:
    """At most `size` entries, least recently used evicted first; `size` 0 caches nothing."""

    def __init__(self, size: int, metrics: QueryCacheMetrics | None = None) -> None:
        self.size = size
        self.metrics = metrics
        self._entries: OrderedDict[CacheKey, object] = OrderedDict()
        self._model_ids: dict[str, str] = {}  # model name -> the model id the embedder last reported for it

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

    def put(self, key: CacheKey, value: object, model_id: str = "") -> None:
        """Keep `value` for `key`, embedded by the model the embedder reported as `model_id`."""
        if self.size == 0:
            return
        name = key[2]
        if self._model_ids.get(name, model_id) != model_id:  # the name now means another model: drop its vectors
            for old in [k for k in self._entries if k[2] == name]:
                del self._entries[old]
        self._model_ids[name] = model_id
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        if self.metrics is not None:
            self.metrics.entries.set(len(self._entries))

    def _count(self, *, hit: bool) -> None:
        if self.metrics is not None:
            (self.metrics.hits if hit else self.metrics.misses).inc()
