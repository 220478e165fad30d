"""Conversation sessions: the last N turns of each conversation, forgotten a while after the last one.

Two stores with one interface (`SessionStore`):

- `RedisSessions` (RAGMESH_REDIS_URL): one list per session, `<prefix>session:<id>`, of JSON turns; a turn is
  appended, the list trimmed to the last N and its TTL renewed in one MULTI/EXEC, so every replica of the
  answer service serves every turn of every conversation.
- `SqliteSessions` (the embedded default): one SQLite file under the data directory in WAL mode. SQLite
  (stdlib, no server) is safe under concurrent access from threads and processes (file locks, a busy
  timeout), and a committed transaction survives the process being killed (-9 included) because the WAL is
  replayed on the next open; `synchronous=NORMAL` only risks the last commits on a power cut, which for a
  chat history is the right trade. It has its own folder (`<data_dir>/answer/`), apart from the embedded
  Qdrant shard.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.reasons import Reason

log = logging.getLogger(__name__)
T = TypeVar("T")

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def session_id(value: str) -> str:
    """A valid session id, or SESSION_ID_INVALID."""
    if not SESSION_ID_RE.fullmatch(value):
        raise invalid_argument(
            Reason.SESSION_ID_INVALID,
            "session_id must be 1-128 characters A-Z, a-z, 0-9, '_', '.', ':' or '-'",
            field="session_id",
        )
    return value


@dataclass
class StoredSource:
    """A source as a turn remembers it."""

    number: int
    doc_id: str
    collection: str
    title: str = ""
    url: str = ""
    filename: str = ""
    cited: bool = False


@dataclass
class Turn:
    """One question and its answer."""

    query: str
    standalone_query: str
    answer: str
    generator: str  # "model" or "extractive"
    sources: list[StoredSource] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Turn:
        data: dict[str, Any] = json.loads(raw)
        data["sources"] = [StoredSource(**s) for s in data.get("sources", [])]
        return cls(**data)


class SessionStore(Protocol):
    """Where conversations live."""

    async def load(self, session_id: str) -> list[Turn]:
        """The session's turns, oldest first; [] when it does not exist (or expired)."""
        ...

    async def append(self, session_id: str, turn: Turn) -> None:
        """Add a turn, keep the last N, and renew the session's time to live."""
        ...

    async def delete(self, session_id: str) -> int:
        """Forget a session; returns how many turns it had."""
        ...

    async def close(self) -> None: ...


def _store_unavailable(kind: str, exc: Exception) -> RagmeshError:
    return RagmeshError(
        grpc.StatusCode.UNAVAILABLE,
        Reason.SESSION_STORE_UNAVAILABLE,
        f"the session store ({kind}) failed: {type(exc).__name__}: {exc}",
        metadata={"store": kind},
    )


class RedisSessions:
    """Sessions in Redis (see the module docstring)."""

    def __init__(self, url: str, *, prefix: str, max_turns: int, ttl_seconds: int) -> None:
        import redis.asyncio as redis

        self._redis = redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30)
        self.prefix = prefix
        self.max_turns = max_turns
        self.ttl_seconds = ttl_seconds

    def key(self, session_id: str) -> str:
        return f"{self.prefix}session:{session_id}"

    async def load(self, session_id: str) -> list[Turn]:
        from redis.exceptions import RedisError

        try:
            raw = await self._redis.lrange(self.key(session_id), 0, -1)
        except (RedisError, OSError) as exc:
            raise _store_unavailable("redis", exc) from exc
        return [Turn.from_json(item) for item in raw]

    async def append(self, session_id: str, turn: Turn) -> None:
        from redis.exceptions import RedisError

        key = self.key(session_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.rpush(key, turn.to_json())
                pipe.ltrim(key, -self.max_turns, -1)
                pipe.expire(key, self.ttl_seconds)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise _store_unavailable("redis", exc) from exc

    async def delete(self, session_id: str) -> int:
        from redis.exceptions import RedisError

        key = self.key(session_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.llen(key)
                pipe.delete(key)
                turns, _ = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise _store_unavailable("redis", exc) from exc
        return int(turns)

    async def close(self) -> None:
        await self._redis.aclose()


class SqliteSessions:
    """Sessions in one SQLite file (see the module docstring). Calls run in a worker thread."""

    # Expired sessions are purged at start-up and every this many appends.
    PURGE_EVERY = 200

    def __init__(self, path: Path, *, max_turns: int, ttl_seconds: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_turns = max_turns
        self.ttl_seconds = ttl_seconds
        self._lock = threading.Lock()
        self._appends = 0
        self._db = sqlite3.connect(path, timeout=10, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS turns (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, "
            "created_at REAL NOT NULL, body TEXT NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS turns_by_session ON turns (session_id, seq)")
        self._purge()

    def _expired_before(self) -> float:
        return time.time() - self.ttl_seconds

    def _purge(self) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM turns WHERE session_id IN "
                "(SELECT session_id FROM turns GROUP BY session_id HAVING MAX(created_at) < ?)",
                (self._expired_before(),),
            )

    def _load(self, session_id: str) -> list[Turn]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body, created_at FROM turns WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        if rows and max(created for _, created in rows) < self._expired_before():
            self._delete(session_id)
            return []
        return [Turn.from_json(body) for body, _ in rows[-self.max_turns :]]

    def _append(self, session_id: str, turn: Turn) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO turns (session_id, created_at, body) VALUES (?, ?, ?)",
                    (session_id, turn.created_at, turn.to_json()),
                )
                self._db.execute(
                    "DELETE FROM turns WHERE session_id = ? AND seq NOT IN "
                    "(SELECT seq FROM turns WHERE session_id = ? ORDER BY seq DESC LIMIT ?)",
                    (session_id, session_id, self.max_turns),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._appends += 1
            purge = self._appends % self.PURGE_EVERY == 0
        if purge:
            self._purge()

    def _delete(self, session_id: str) -> int:
        with self._lock:
            return self._db.execute("DELETE FROM turns WHERE session_id = ?", (session_id,)).rowcount

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except sqlite3.Error as exc:
            raise _store_unavailable("sqlite", exc) from exc

    async def load(self, session_id: str) -> list[Turn]:
        return await self._run(self._load, session_id)

    async def append(self, session_id: str, turn: Turn) -> None:
        await self._run(self._append, session_id, turn)

    async def delete(self, session_id: str) -> int:
        return await self._run(self._delete, session_id)

    async def close(self) -> None:
        with self._lock:
            self._db.close()


def open_sessions(*, redis_url: str, redis_prefix: str, path: Path, max_turns: int, ttl_seconds: int) -> SessionStore:
    """Redis when a URL is given, else SQLite at `path`."""
    if redis_url:
        return RedisSessions(redis_url, prefix=redis_prefix, max_turns=max_turns, ttl_seconds=ttl_seconds)
    return SqliteSessions(path, max_turns=max_turns, ttl_seconds=ttl_seconds)
