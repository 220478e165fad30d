"""Where jobs live: their state (record, counts, per-document results) and their work (a queue of batches).

Two implementations of one interface (`JobStore`):

- `SqliteJobStore` (embedded default): one SQLite database in WAL mode under the data directory
  (`<data_dir>/jobs/jobs.sqlite3`, next to the store's shards but never inside them). A write is committed
  before it returns, so a killed process loses nothing; one process owns the queue (`flock` on
  `<data_dir>/jobs/.lock`), so on open every batch that was taken but not acknowledged is a batch its dead
  owner never finished, and goes back on the queue.
- `RedisJobStore` (RAGMESH_REDIS_URL): a Redis Stream with a consumer group, so every indexer replica takes
  batches from one queue. At-least-once: a batch is acknowledged (XACK) only after its documents are in the
  store and their results recorded; a replica that dies leaves its batches pending, and XAUTOCLAIM hands them
  to another replica once idle past `claim_idle_seconds` (a live worker keeps its batch fresh with XCLAIM).
  Job state is a hash per job; results are recorded with HSETNX per document, so a batch delivered twice
  counts once.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from .model import DatasourceRecord, JobErrorRecord, JobRecord

COUNTERS = ("indexed", "unchanged", "failed")
# Mutable job fields, stored beside the immutable record.
# What `update` may change. "outcome" is a JSON object merged into the job when read (what a job found out at its
# end, such as a re-index gate's decision and scores).
FIELDS = ("state", "started_at", "finished_at", "deleted", "error", "outcome")
MAX_ERRORS_KEPT = 1000
T = TypeVar("T")


@dataclass(frozen=True)
class Message:
    """One batch of a job, taken from the queue; `ack` it once its results are recorded."""

    id: str
    job_id: str
    payload: bytes


@dataclass(frozen=True)
class ItemResult:
    """The outcome of one document of a job: status indexed / unchanged / failed."""

    index: int
    status: str
    size: int
    error: JobErrorRecord | None = None


class JobStore(Protocol):
    async def create(self, job: JobRecord, batches: Sequence[bytes]) -> None:
        """Save a new job (its record, state "queued") and queue its batches, all or nothing."""

    async def get(self, job_id: str, *, details: bool = True) -> JobRecord | None:
        """The job: record + counters + mutable fields (+ "errors" when `details`)."""

    async def list(self, limit: int) -> list[JobRecord]:
        """Recent jobs, newest first, without details."""

    async def update(self, job_id: str, **fields: Any) -> None:
        """Set mutable fields (FIELDS)."""

    async def start(self, job_id: str, started_at: str) -> None:
        """queued -> running, recording when (no-op in any other state)."""

    async def record(self, job_id: str, results: Sequence[ItemResult]) -> dict[str, int]:
        """Record results, each document once (a redelivered batch changes nothing); returns the counters."""

    async def claim(self, consumer: str, block_seconds: float) -> Message | None:
        """The next batch for `consumer`, waiting up to `block_seconds`; None when there is none."""

    async def keep_alive(self, message: Message, consumer: str) -> None:
        """Tell the queue the batch is still being worked on."""

    async def ack(self, message: Message) -> None:
        """The batch is done: never deliver it again."""

    async def save_datasource(self, datasource: DatasourceRecord) -> None: ...

    async def list_datasources(self) -> builtins.list[DatasourceRecord]: ...

    async def close(self) -> None: ...


# --- SQLite (embedded) -----------------------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, created REAL NOT NULL, record TEXT NOT NULL, state TEXT NOT NULL,
    started_at TEXT NOT NULL DEFAULT '', finished_at TEXT NOT NULL DEFAULT '', deleted INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '', indexed INTEGER NOT NULL DEFAULT 0, unchanged INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS items (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, status TEXT NOT NULL, error TEXT, PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, payload BLOB NOT NULL, claimed_by TEXT
);
CREATE TABLE IF NOT EXISTS datasources (datasource_id TEXT PRIMARY KEY, data TEXT NOT NULL);
"""


class JobStoreBusyError(RuntimeError):
    """The embedded job queue is owned by another process."""


class SqliteJobStore:
    """The embedded job store and queue (see the module doc). Thread-safe; calls run off the event loop."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise JobStoreBusyError(
                f"the job queue at {folder} is owned by another process; run one indexer per data directory, "
                "or set RAGMESH_REDIS_URL to share jobs between indexers"
            ) from None
        self._db = sqlite3.connect(folder / "jobs.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        if "outcome" not in columns:  # a queue made before jobs had outcomes
            self._db.execute("ALTER TABLE jobs ADD COLUMN outcome TEXT NOT NULL DEFAULT ''")
        self._mutex = threading.Lock()
        self._wake = asyncio.Event()
        # The previous owner is gone: what it had taken and not acknowledged goes back on the queue.
        self._db.execute("UPDATE queue SET claimed_by = NULL WHERE claimed_by IS NOT NULL")

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._tx, fn)

    async def create(self, job: JobRecord, batches: Sequence[bytes]) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO jobs (job_id, created, record, state) VALUES (?, ?, ?, ?)",
                (job["job_id"], time.time(), json.dumps(job), job.get("state", "queued")),
            )
            db.executemany("INSERT INTO queue (job_id, payload) VALUES (?, ?)", [(job["job_id"], b) for b in batches])

        await self._run(write)
        self._wake.set()

    @staticmethod
    def _row(row: sqlite3.Row | tuple) -> JobRecord:
        record, state, started, finished, deleted, error, indexed, unchanged, failed, size, outcome = row
        job = {
            **json.loads(record),
            "state": state,
            "started_at": started,
            "finished_at": finished,
            "deleted": deleted,
            "error": error,
            "indexed": indexed,
            "unchanged": unchanged,
            "failed": failed,
            "bytes": size,
            **(json.loads(outcome) if outcome else {}),
        }
        return cast("JobRecord", job)

    _COLUMNS = "record, state, started_at, finished_at, deleted, error, indexed, unchanged, failed, bytes, outcome"

    async def get(self, job_id: str, *, details: bool = True) -> JobRecord | None:
        def read(db: sqlite3.Connection) -> JobRecord | None:
            row = db.execute(f"SELECT {self._COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            job = self._row(row)
            if details:
                errors = db.execute(
                    "SELECT error FROM items WHERE job_id = ? AND error IS NOT NULL ORDER BY idx LIMIT ?",
                    (job_id, MAX_ERRORS_KEPT),
                ).fetchall()
                job["errors"] = [json.loads(e) for (e,) in errors]
            return job

        return await self._run(read)

    async def list(self, limit: int) -> list[JobRecord]:
        def read(db: sqlite3.Connection) -> list[JobRecord]:
            rows = db.execute(f"SELECT {self._COLUMNS} FROM jobs ORDER BY created DESC LIMIT ?", (limit,))
            return [self._row(r) for r in rows.fetchall()]

        return await self._run(read)

    async def update(self, job_id: str, **fields: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in fields if name in FIELDS)
        await self._run(
            lambda db: db.execute(
                f"UPDATE jobs SET {assignments} WHERE job_id = ?",
                (*[v for k, v in fields.items() if k in FIELDS], job_id),
            )
        )

    async def start(self, job_id: str, started_at: str) -> None:
        await self._run(
            lambda db: db.execute(
                "UPDATE jobs SET state = 'running', started_at = ? WHERE job_id = ? AND state = 'queued'",
                (started_at, job_id),
            )
        )

    async def record(self, job_id: str, results: Sequence[ItemResult]) -> dict[str, int]:
        def write(db: sqlite3.Connection) -> dict[str, int]:
            for r in results:
                inserted = db.execute(
                    "INSERT OR IGNORE INTO items (job_id, idx, status, error) VALUES (?, ?, ?, ?)",
                    (job_id, r.index, r.status, json.dumps(r.error) if r.error else None),
                ).rowcount
                if inserted:
                    db.execute(
                        f"UPDATE jobs SET {r.status} = {r.status} + 1, bytes = bytes + ? WHERE job_id = ?",
                        (r.size, job_id),
                    )
            row = db.execute("SELECT indexed, unchanged, failed FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            return dict(zip(COUNTERS, row or (0, 0, 0), strict=True))

        if any(r.status not in COUNTERS for r in results):
            raise ValueError("unknown item status")
        return await self._run(write)

    async def claim(self, consumer: str, block_seconds: float) -> Message | None:
        def take(db: sqlite3.Connection) -> Message | None:
            row = db.execute(
                "SELECT id, job_id, payload FROM queue WHERE claimed_by IS NULL ORDER BY id LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            db.execute("UPDATE queue SET claimed_by = ? WHERE id = ?", (consumer, row[0]))
            return Message(str(row[0]), row[1], bytes(row[2]))

        message = await self._run(take)
        if message is None:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), block_seconds)
        return message

    async def keep_alive(self, message: Message, consumer: str) -> None:
        return None  # one owner: nobody else would take the batch

    async def ack(self, message: Message) -> None:
        await self._run(lambda db: db.execute("DELETE FROM queue WHERE id = ?", (int(message.id),)))

    async def save_datasource(self, datasource: DatasourceRecord) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO datasources (datasource_id, data) VALUES (?, ?)",
                (datasource["datasource_id"], json.dumps(datasource)),
            )
        )

    async def list_datasources(self) -> builtins.list[DatasourceRecord]:
        rows = await self._run(lambda db: db.execute("SELECT data FROM datasources ORDER BY datasource_id").fetchall())
        return [json.loads(data) for (data,) in rows]

    async def close(self) -> None:
        with self._mutex:
            self._db.close()
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)


# --- Redis Streams (replicas) -----------------------------------------------------------------------------
_GROUP = "indexers"
# Records each result once (HSETNX on the job's items hash) and counts it; atomic, so redelivery is harmless.
_RECORD = """
local n = #ARGV / 4
for i = 0, n - 1 do
  local idx, status, size, err = ARGV[i*4+1], ARGV[i*4+2], ARGV[i*4+3], ARGV[i*4+4]
  if redis.call('HSETNX', KEYS[2], idx, status) == 1 then
    redis.call('HINCRBY', KEYS[1], status, 1)
    redis.call('HINCRBY', KEYS[1], 'bytes', tonumber(size))
    if err ~= '' then redis.call('RPUSH', KEYS[3], err) end
  end
end
return redis.call('HMGET', KEYS[1], 'indexed', 'unchanged', 'failed')
"""
_START = """
if redis.call('HGET', KEYS[1], 'state') == 'queued' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'started_at', ARGV[1])
end
return 1
"""


class RedisJobStore:
    """Jobs on Redis (see the module doc). Keys start with `prefix` (default "ragmesh:")."""

    def __init__(self, url: str, prefix: str, claim_idle_seconds: float) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.from_url(url, decode_responses=False)
        self._prefix = prefix
        self._idle_ms = max(1, int(claim_idle_seconds * 1000))
        self._stream = f"{prefix}jobs:queue"
        self._group_ready = False
        self._record = self._redis.register_script(_RECORD)
        self._start = self._redis.register_script(_START)

    def _key(self, job_id: str, suffix: str = "") -> str:
        return f"{self._prefix}job:{job_id}{suffix}"

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        from redis.exceptions import ResponseError

        try:
            await self._redis.xgroup_create(self._stream, _GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def ping(self) -> None:
        await self._redis.ping()

    async def create(self, job: JobRecord, batches: Sequence[bytes]) -> None:
        await self._ensure_group()
        job_id = job["job_id"]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self._key(job_id),
                mapping={
                    "record": json.dumps(job),
                    "state": job.get("state", "queued"),
                    "started_at": "",
                    "finished_at": "",
                    "deleted": 0,
                    "error": "",
                    "indexed": 0,
                    "unchanged": 0,
                    "failed": 0,
                    "bytes": 0,
                },
            )
            pipe.zadd(f"{self._prefix}jobs", {job_id: time.time()})
            for batch in batches:
                pipe.xadd(self._stream, {"job_id": job_id, "payload": batch})
            await pipe.execute()

    @staticmethod
    def _decode(raw: dict[bytes, bytes]) -> JobRecord:
        values = {k.decode(): v.decode() for k, v in raw.items()}
        job = json.loads(values["record"])
        for name in ("state", "started_at", "finished_at", "error"):
            job[name] = values.get(name, "")
        for name in (*COUNTERS, "bytes", "deleted"):
            job[name] = int(values.get(name) or 0)
        if values.get("outcome"):
            job.update(json.loads(values["outcome"]))
        return job

    async def get(self, job_id: str, *, details: bool = True) -> JobRecord | None:
        # The client is in bytes mode (decode_responses=False); redis-py types its replies for both modes.
        raw = cast("dict[bytes, bytes]", await self._redis.hgetall(self._key(job_id)))
        if not raw:
            return None
        job = self._decode(raw)
        if details:
            errors = await self._redis.lrange(self._key(job_id, ":errors"), 0, MAX_ERRORS_KEPT - 1)
            job["errors"] = [json.loads(e) for e in errors]
        return job

    async def list(self, limit: int) -> list[JobRecord]:
        ids = cast("list[bytes]", await self._redis.zrevrange(f"{self._prefix}jobs", 0, limit - 1))  # bytes mode
        async with self._redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self._key(job_id.decode()))
            rows = await pipe.execute()
        return [self._decode(raw) for raw in rows if raw]

    async def update(self, job_id: str, **fields: Any) -> None:
        await self._redis.hset(self._key(job_id), mapping={k: v for k, v in fields.items() if k in FIELDS})

    async def start(self, job_id: str, started_at: str) -> None:
        await self._start(keys=[self._key(job_id)], args=[started_at])

    async def record(self, job_id: str, results: Sequence[ItemResult]) -> dict[str, int]:
        if any(r.status not in COUNTERS for r in results):
            raise ValueError("unknown item status")
        args: list[Any] = []
        for r in results:
            args += [r.index, r.status, r.size, json.dumps(r.error) if r.error else ""]
        counts = await self._record(
            keys=[self._key(job_id), self._key(job_id, ":items"), self._key(job_id, ":errors")], args=args
        )
        return {name: int(value or 0) for name, value in zip(COUNTERS, counts, strict=True)}

    async def claim(self, consumer: str, block_seconds: float) -> Message | None:
        await self._ensure_group()
        # First, batches a dead consumer left pending past the idle time.
        _, claimed, *_ = await self._redis.xautoclaim(
            self._stream, _GROUP, consumer, self._idle_ms, start_id="0-0", count=1
        )
        entries = [e for e in claimed if e and e[1]]
        if not entries:
            reply = await self._redis.xreadgroup(
                _GROUP, consumer, {self._stream: ">"}, count=1, block=max(1, int(block_seconds * 1000))
            )
            # RESP2's [[stream, entries]] or None (redis-py's type also admits RESP3's dict, which this client is not)
            response = cast("list[Any] | None", reply)
            entries = [e for _, stream_entries in response or [] for e in stream_entries]
        if not entries:
            return None
        entry_id, fields = entries[0]
        return Message(entry_id.decode(), fields[b"job_id"].decode(), fields[b"payload"])

    async def keep_alive(self, message: Message, consumer: str) -> None:
        await self._redis.xclaim(self._stream, _GROUP, consumer, 0, [message.id], justid=True)

    async def ack(self, message: Message) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(self._stream, _GROUP, message.id)
            pipe.xdel(self._stream, message.id)
            await pipe.execute()

    async def save_datasource(self, datasource: DatasourceRecord) -> None:
        await self._redis.hset(f"{self._prefix}datasources", datasource["datasource_id"], json.dumps(datasource))

    async def list_datasources(self) -> builtins.list[DatasourceRecord]:
        raw = await self._redis.hgetall(f"{self._prefix}datasources")
        return sorted((json.loads(v) for v in raw.values()), key=lambda d: d["datasource_id"])

    async def close(self) -> None:
        await self._redis.aclose()


def consumer_name() -> str:
    """A name no other worker (on any machine, before or after a restart) has."""
    return f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
