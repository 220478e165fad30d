"""The REST routers; `API_ROUTERS` are under /api/v1 (behind the API key), `health.router` is open."""

from . import collections, convert, documents, ingest, search

API_ROUTERS = (ingest.router, convert.router, search.router, documents.router, collections.router)
