"""Dynamic batching: concurrent requests share one queue and one worker thread that runs the model.

The worker takes up to a window of texts from the head of the queue (waiting at most `max_wait` for the
window to fill), sorts them by size so that each micro-batch pads little, runs micro-batches of
`batch_size`, and resolves each request as soon as its last text is embedded. Texts of requests whose
caller gave up (cancelled, deadline passed) are skipped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import numpy as np
from ragmesh_common.errors import RagmeshError, unavailable

from .backends import DenseBackend, Prepared

# The worker sorts this many micro-batches' worth of texts at a time: enough to pad little, small enough
# that a query arriving behind a bulk request waits for a few micro-batches, not for the whole request.
WINDOW_BATCHES = 4


@dataclass(eq=False)
class _Job:
    """One request's texts on their way through the worker."""

    items: Sequence[Prepared]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    rows: list[np.ndarray | None] = field(default_factory=list)
    remaining: int = 0
    # Set when the caller gave up or a micro-batch failed: its other texts are skipped.
    dropped: bool = False

    def __post_init__(self) -> None:
        self.rows = [None] * len(self.items)
        self.remaining = len(self.items)

    def settle(self, result: np.ndarray | None = None, error: BaseException | None = None) -> None:
        """Resolve the caller's future from the worker thread."""
        self.dropped = self.dropped or error is not None

        def _settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(_settle)
        except RuntimeError:  # the caller's event loop is closed: nobody is waiting any more
            pass


class Batcher:
    """One queue, one worker thread. The counters are for the metrics exporter (read without locking)."""

    def __init__(
        self, backend: DenseBackend, *, batch_size: int, max_wait_ms: float, max_queue_texts: int
    ) -> None:
        self._backend = backend
        self.batch_size = batch_size
        self._window = batch_size * WINDOW_BATCHES
        self._max_wait = max_wait_ms / 1000
        self.max_queue_texts = max_queue_texts
        self._cond = threading.Condition()
        self._pending: deque[tuple[_Job, int]] = deque()
        self._closed = False
        # Texts accepted and not embedded yet (waiting or in the model).
        self.queue_depth = 0
        # Model tokens of the texts embedded so far (0 for backends that do not tokenise).
        self.tokens_processed = 0
        self.texts_processed = 0
        self.batches_run = 0
        # Sizes of the most recent micro-batches, newest last.
        self.last_batch_sizes: deque[int] = deque(maxlen=64)
        # Called from the worker thread after each micro-batch with (texts, tokens) (metrics).
        self.on_batch: Callable[[int, int], None] | None = None
        self._thread = threading.Thread(target=self._run, name="embedder-batcher", daemon=True)
        self._thread.start()

    async def embed(self, items: Sequence[Prepared]) -> np.ndarray:
        """Embed the texts together with whatever else is queued; rows in the order of `items`."""
        loop = asyncio.get_running_loop()
        job = _Job(items, loop.create_future(), loop)
        with self._cond:
            if self._closed:
                raise unavailable("EMBEDDER_STOPPING", "the embedder is shutting down")
            if self.queue_depth + len(items) > self.max_queue_texts:
                raise RagmeshError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, "QUEUE_FULL",
                    f"the embedder is busy: {self.queue_depth} texts are queued and the limit is "
                    f"{self.max_queue_texts}; retry with backoff",
                    metadata={"queue_depth": self.queue_depth, "max_queue_texts": self.max_queue_texts},
                )
            self.queue_depth += len(items)
            self._pending.extend((job, index) for index in range(len(items)))
            self._cond.notify()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.dropped = True
            raise

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker after the window it is running; requests still queued fail with UNAVAILABLE."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    # --- the worker thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while (window := self._take()) is not None:
            window.sort(key=lambda entry: entry[0].items[entry[1]].size)
            for start in range(0, len(window), self.batch_size):
                self._run_batch(window[start : start + self.batch_size])

    def _take(self) -> list[tuple[_Job, int]] | None:
        """The next window of texts, or None once closed."""
        with self._cond:
            while True:
                while not self._pending and not self._closed:
                    self._cond.wait()
                deadline = time.monotonic() + self._max_wait
                while len(self._pending) < self._window and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._closed:
                    self._fail_pending()
                    return None
                window = []
                while self._pending and len(window) < self._window:
                    entry = self._pending.popleft()
                    if entry[0].dropped:
                        self.queue_depth -= 1
                    else:
                        window.append(entry)
                if window:
                    return window

    def _fail_pending(self) -> None:
        jobs = {job for job, _ in self._pending}
        self.queue_depth -= len(self._pending)
        self._pending.clear()
        for job in jobs:
            job.settle(error=unavailable("EMBEDDER_STOPPING", "the embedder is shutting down"))

    def _run_batch(self, batch: list[tuple[_Job, int]]) -> None:
        live = [(job, index) for job, index in batch if not job.dropped]
        if live:
            try:
                vectors = self._backend.embed([job.items[index] for job, index in live])
            except Exception as exc:  # noqa: BLE001 - handed to every request in the batch
                for job in {job for job, _ in live}:
                    job.settle(error=exc)
                live = []
            else:
                for (job, index), row in zip(live, vectors, strict=True):
                    job.rows[index] = row
                    job.remaining -= 1
                    if job.remaining == 0:
                        job.settle(np.stack(job.rows))
        tokens = sum(job.items[index].token_count for job, index in live)
        with self._cond:
            self.queue_depth -= len(batch)
            if live:
                self.batches_run += 1
                self.texts_processed += len(live)
                self.tokens_processed += tokens
                self.last_batch_sizes.append(len(live))
        if live and self.on_batch is not None:
            self.on_batch(len(live), tokens)
