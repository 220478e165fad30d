"""The REST routers; `API_ROUTERS` are under /api/v1 (behind the API key), `health.router` is open."""

from . import ask, collections, convert, documents, golden, ingest, jobs, search, sessions

API_ROUTERS = (
    ingest.router,
    convert.router,
    search.router,
    documents.router,
    collections.router,
    jobs.router,
    golden.router,
    ask.router,
    sessions.router,
)
