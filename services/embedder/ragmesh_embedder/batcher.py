"""Dynamic batching: concurrent requests share one queue per model, cut into micro-batches that keep the model fed.

A *feeder* thread takes whatever is queued (never waiting for more), up to a window of a few micro-batches, sorts
its texts by length and cuts micro-batches within the backend's text limit and padded-token budget (longest text x
texts, as TEI counts), padded with numpy and handed over through a queue of one slot per runner. `backend.runners`
*runner* threads call the model, scatter the rows back and answer each request once its last text is embedded.
Queries (`urgent`) have a lane of their own, taken between micro-batches before any bulk; a lone query on an idle
embedder skips the feeder (`_hand_over`). Requests whose callers gave up are skipped; a full queue is refused with
QUEUE_FULL. The counters (`model_seconds`, `starved_seconds`, ...) feed the metrics. Why the constants are what
they are: docs/decisions/embedder-batching.md.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import grpc
import numpy as np
from ragmesh_common.errors import RagmeshError, unavailable
from ragmesh_common.reasons import Reason
from ragmesh_common.threads import lower_thread_priority, name_os_thread

from .backends import DenseBackend, MicroBatch, Prepared

# The feeder sorts up to this many micro-batches' worth of queued texts at a time, and at least WINDOW_TOKENS,
# so that texts of neighbouring lengths share micro-batches (less padding). Queries do not wait for a window: the
# feeder and the model threads take them between micro-batches.
WINDOW_BATCHES = 16
WINDOW_TOKENS = 16_384
# What a caller refused with QUEUE_FULL is told to wait (google.rpc.RetryInfo; the gateway's Retry-After).
QUEUE_FULL_RETRY_SECONDS = 1.0
# Micro-batches padded and waiting for the model, per runner: one is enough to hide the feeder's work behind
# the model's.
PIPELINE_DEPTH = 1
# Texts that would not fill a micro-batch per runner (a request of a few queries) are spread over the runners, in
# micro-batches of at least this many: no more CPU a text than one large micro-batch, and done sooner.
SPREAD_MIN_TEXTS = 4


@dataclass(eq=False)
class _Job:
    """One request on its way through the pipeline."""

    prepared: Prepared
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    out: np.ndarray | None = None  # (texts, dimension), allocated with the first rows
    taken: int = 0  # texts handed to the feeder's windows so far (a big request spans windows)
    remaining: int = 0  # texts not embedded yet
    # Set when the caller gave up or a micro-batch failed: its other texts are skipped.
    dropped: bool = False
    accepted: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.remaining = len(self.prepared)

    def settle(self, result: np.ndarray | None = None, error: BaseException | None = None) -> None:
        """Resolve the caller's future from a worker thread."""
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


@dataclass(eq=False)
class _Window:
    """Texts from the head of the queue, concatenated: a slice of rows of each of `jobs`, in order."""

    jobs: list[_Job]
    job_of: np.ndarray  # window row -> index into jobs
    row_of: np.ndarray  # window row -> row within its job
    lengths: np.ndarray
    ids: np.ndarray | None  # token backends: the window's ids, concatenated
    starts: np.ndarray | None
    texts: list[str]  # text backends (empty for token backends)
    accepted: float  # when its oldest request was accepted (perf_counter)


@dataclass(eq=False)
class _Ready:
    """A padded micro-batch and where its rows go."""

    window: _Window
    rows: np.ndarray  # window rows in the batch (live ones)
    accounted: int  # texts this batch takes off the queue depth (skipped ones included)
    batch: MicroBatch
    tokens: int
    padded_tokens: int


class Batcher:
    """One queue, a feeder thread and `backend.runners` runner threads (per model: `name` names the threads).
    `nice`: how far the runners lower their scheduling priority (EmbedderSettings.model_thread_nice). The
    counters are for metrics and tests (read without locking)."""

    def __init__(
        self,
        backend: DenseBackend,
        *,
        max_queue_texts: int,
        name: str = "default",
        nice: int = 0,
    ) -> None:
        self._backend = backend
        self.name = name
        self.nice = nice
        self.batch_size = backend.batch_size
        self.max_batch_tokens = backend.max_batch_tokens
        self.max_queue_texts = max_queue_texts
        self._window_texts = self.batch_size * WINDOW_BATCHES
        self._window_tokens = (
            max(self.max_batch_tokens * WINDOW_BATCHES, WINDOW_TOKENS) if self.max_batch_tokens else None
        )
        self._cond = threading.Condition()
        self._pending: deque[_Job] = deque()
        self._urgent: deque[_Job] = deque()  # queries: taken before anything in _pending
        self._closed = False
        self.runners = max(1, backend.runners)
        self._ready: queue.Queue[_Ready | None] = queue.Queue(maxsize=PIPELINE_DEPTH * self.runners)
        self._waiting = 0  # runners blocked on the slot (written under _cond)
        # Texts accepted and not embedded yet (waiting or in the pipeline): what the HPA scales on.
        self.queue_depth = 0
        # Model tokens of the texts embedded so far, and the padded tokens the model ran for them (longest x texts,
        # each micro-batch as cut; 0 for backends that do not tokenise).
        self.tokens_processed = 0
        self.padded_tokens_processed = 0
        self.texts_processed = 0
        self.batches_run = 0
        # Sizes (texts) and padded tokens of the most recent micro-batches, newest last.
        self.last_batch_sizes: deque[int] = deque(maxlen=64)
        self.last_batch_padded_tokens: deque[int] = deque(maxlen=64)
        # Seconds the runners spent in model calls (over runners x elapsed time: how busy the model was kept), and
        # waiting for a micro-batch whose oldest request was already accepted (starved: the feeder was behind the
        # model; waiting with nothing accepted is idle, not starved).
        self.model_seconds = 0.0
        self.starved_seconds = 0.0
        # Called from the runner after each micro-batch with (texts, tokens, padded tokens, seconds in the model,
        # seconds starved before it) (metrics).
        self.on_batch: Callable[[int, int, int, float, float], None] | None = None
        self._feeder = threading.Thread(target=self._feed, name=f"embedder-feeder-{name}", daemon=True)
        self._threads = [
            threading.Thread(target=self._run, name=f"embedder-runner-{name}" + (f"-{i}" if i else ""), daemon=True)
            for i in range(self.runners)
        ]
        self._feeder.start()
        for runner in self._threads:
            runner.start()

    async def embed(self, prepared: Prepared, *, urgent: bool = False) -> np.ndarray:
        """Embed the texts together with whatever else is queued; rows in the order of the texts. `urgent`
        texts (queries) go ahead of everything queued that is not."""
        loop = asyncio.get_running_loop()
        job = _Job(prepared, loop.create_future(), loop)
        count = len(prepared)
        with self._cond:
            if self._closed:
                raise unavailable(Reason.EMBEDDER_STOPPING, "the embedder is shutting down")
            if self.queue_depth + count > self.max_queue_texts:
                raise RagmeshError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    Reason.QUEUE_FULL,
                    f"the embedder is busy: {self.queue_depth} texts are queued for model {self.name!r} and the "
                    f"limit is {self.max_queue_texts}; retry after {QUEUE_FULL_RETRY_SECONDS:g} s",
                    metadata={
                        "queue_depth": str(self.queue_depth),
                        "max_queue_texts": str(self.max_queue_texts),
                        "retry_after_seconds": str(QUEUE_FULL_RETRY_SECONDS),
                        "model": self.name,
                    },
                    retry_after=QUEUE_FULL_RETRY_SECONDS,
                )
            self.queue_depth += count
            handed = (
                urgent
                and not self._urgent
                and (self.queue_depth == count or self._waiting)
                and not self._ready.full()
                and self._hand_over(job)
            )
            if not handed:
                (self._urgent if urgent else self._pending).append(job)
                self._cond.notify()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.dropped = True
            raise

    def _hand_over(self, job: _Job) -> bool:
        """Idle (nothing else accepted and not embedded), or a model thread waiting for the slot with no query queued
        before this one: a query that fits one micro-batch goes to a model thread directly, padded here, without
        waking the feeder to cut a window of one request. False when it does not fit, or when the slot was taken
        after the caller saw it free (the feeder puts without `_cond`): the caller queues it then. Under `_cond`."""
        count = len(job.prepared)
        if not self._one_batch(job.prepared):
            return False
        ready = self._pad(self._window([(job, 0, count)]), np.arange(count), count)
        try:
            self._ready.put_nowait(ready)
        except queue.Full:
            return False
        job.taken = count
        return True

    def _one_batch(self, prepared: Prepared) -> bool:
        """True when the request's texts fit one micro-batch (count and padded tokens within the budget) that would
        not be spread over the runners."""
        count = len(prepared)
        if count == 1:
            return True
        return (
            count <= self.batch_size
            and self._share(count) == count
            and (self.max_batch_tokens is None or count * max(int(prepared.lengths.max()), 1) <= self.max_batch_tokens)
        )

    def close(self, timeout: float = 30.0) -> None:
        """Stop after the window being fed; requests still queued fail with UNAVAILABLE."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._feeder.join(timeout)
        for runner in self._threads:
            runner.join(timeout)

    def _account(self, texts: int) -> None:
        with self._cond:
            self.queue_depth -= texts

    # --- the feeder thread -------------------------------------------------------------------------
    def _feed(self) -> None:
        name_os_thread()
        try:
            while (window := self._take()) is not None:
                self._cut(window)
        finally:
            for _ in self._threads:  # one end mark per runner
                self._ready.put(None)

    def _take(self, urgent_only: bool = False, share: bool = False) -> _Window | None:
        """Whatever is queued now (no waiting for more), up to a window; None once closed. `urgent_only`: the
        queries' lane only, and None at once when it holds nothing (between the micro-batches of a window).
        `share` (a runner taking queries for itself): at most its share of the queued queries, the rest left in
        the lane for the other runners (and the feeder woken to cut them for a runner waiting on the slot)."""
        with self._cond:
            while True:
                if urgent_only and (self._closed or not self._urgent):
                    return None
                while not self._pending and not self._urgent and not self._closed:
                    self._cond.wait()
                if self._closed:
                    self._fail_pending()
                    return None
                limit = self._window_texts
                if share and self.runners > 1:
                    queued = sum(len(job.prepared) - job.taken for job in self._urgent)
                    limit = min(limit, self._share(queued))
                parts: list[tuple[_Job, int, int]] = []
                texts = tokens = skipped = 0
                while (lane := self._urgent if urgent_only else (self._urgent or self._pending)) and (
                    texts < limit and (self._window_tokens is None or tokens < self._window_tokens)
                ):
                    job = lane[0]
                    left = len(job.prepared) - job.taken
                    if job.dropped:
                        lane.popleft()
                        skipped += left
                        continue
                    count = min(left, limit - texts)
                    lengths = job.prepared.lengths[job.taken : job.taken + count]
                    if self._window_tokens is not None:
                        # As many texts as fit the remaining token room (at least one).
                        room = self._window_tokens - tokens
                        count = max(1, int(np.searchsorted(np.cumsum(lengths), room, side="right")))
                        lengths = lengths[:count]
                    parts.append((job, job.taken, count))
                    job.taken += count
                    texts += count
                    tokens += int(lengths.sum())
                    if job.taken == len(job.prepared):
                        lane.popleft()
                self.queue_depth -= skipped
                if share and self._urgent:
                    self._cond.notify()
                if parts:
                    return self._window(parts)

    def _share(self, texts: int) -> int:
        """How many of `texts` one runner takes when they are spread over every runner: an even share, but
        not below SPREAD_MIN_TEXTS (all of them when they are fewer than two such shares)."""
        if texts < 2 * SPREAD_MIN_TEXTS:
            return texts
        return max(SPREAD_MIN_TEXTS, -(-texts // self.runners))

    def _window(self, parts: list[tuple[_Job, int, int]]) -> _Window:
        counts = np.fromiter((count for _, _, count in parts), dtype=np.int64, count=len(parts))
        job_of = np.repeat(np.arange(len(parts)), counts)
        offsets = np.zeros(len(parts), dtype=np.int64)
        np.cumsum(counts[:-1], out=offsets[1:])
        firsts = np.fromiter((first for _, first, _ in parts), dtype=np.int64, count=len(parts))
        row_of = np.arange(int(counts.sum())) - offsets[job_of] + firsts[job_of]
        lengths = np.concatenate([job.prepared.lengths[first : first + count] for job, first, count in parts])
        ids = starts = None
        texts: list[str] = []
        if self._backend.tokenized:
            slices, bases, base = [], [], 0
            for job, first, count in parts:
                job_ids, job_starts = job.prepared.token_arrays()
                begin = int(job_starts[first])
                end = int(job_starts[first + count - 1] + job.prepared.lengths[first + count - 1])
                slices.append(job_ids[begin:end])
                bases.append(job_starts[first : first + count] - begin + base)
                base += end - begin
            ids, starts = np.concatenate(slices), np.concatenate(bases)
        else:
            texts = list(chain.from_iterable(job.prepared.texts[first : first + count] for job, first, count in parts))
        return _Window(
            [job for job, _, _ in parts],
            job_of,
            row_of,
            lengths,
            ids,
            starts,
            texts,
            min(job.accepted for job, _, _ in parts),
        )

    def _cut(self, window: _Window) -> None:
        """Hand each micro-batch of the window over to the runner (waiting while the slot is taken)."""
        for ready in self._batches(window):
            self._ready.put(ready)

    def _batches(self, window: _Window, preemptible: bool = True, spread: bool = True) -> Iterator[_Ready]:
        """Sort the window by length, cut it into micro-batches within the budget and pad each; before each
        micro-batch after the first, the queries queued meanwhile come first (`preemptible`). `spread`: a window
        that would not fill a micro-batch per runner is cut into one per runner (see SPREAD_MIN_TEXTS), so that
        the runners run it together rather than one alone while the others idle."""
        order = np.argsort(window.lengths, kind="stable")
        sorted_lengths = window.lengths[order]
        begin, total = 0, len(order)
        share = self._share(total) if spread else total  # all of them with one runner
        while begin < total:
            if begin and preemptible and self._urgent and (queries := self._take(urgent_only=True)) is not None:
                yield from self._batches(queries, preemptible=False)
            count = min(self.batch_size, total - begin, share)
            if self.max_batch_tokens is not None:
                # Lengths ascend, so the padded cost k x lengths[begin + k - 1] grows with k.
                cost = np.arange(1, count + 1) * np.maximum(sorted_lengths[begin : begin + count], 1)
                count = max(1, int(np.searchsorted(cost, self.max_batch_tokens, side="right")))
            rows = order[begin : begin + count]
            begin += count
            dropped = np.fromiter((job.dropped for job in window.jobs), dtype=bool, count=len(window.jobs))
            live = rows[~dropped[window.job_of[rows]]]
            if live.size:
                yield self._pad(window, live, len(rows))
            else:
                self._account(len(rows))

    def _pad(self, window: _Window, rows: np.ndarray, accounted: int) -> _Ready:
        lengths = window.lengths[rows]
        tokens = int(lengths.sum()) if self.max_batch_tokens else 0  # budgeted lengths are tokens (or words)
        ids, starts = window.ids, window.starts
        if ids is None or starts is None:
            batch = MicroBatch(len(rows), texts=[window.texts[i] for i in rows])
            return _Ready(window, rows, accounted, batch, tokens, int(lengths.max()) * len(rows))
        width = int(lengths.max())
        columns = np.arange(width)
        mask = columns < lengths[:, None]
        index = starts[rows][:, None] + columns
        np.minimum(index, len(ids) - 1, out=index)
        input_ids = np.where(mask, ids[index], self._backend.pad_id)
        batch = MicroBatch(len(rows), input_ids=input_ids, attention_mask=mask.astype(np.int64))
        return _Ready(window, rows, accounted, batch, tokens, width * len(rows))

    def _fail_pending(self) -> None:
        jobs = [*self._urgent, *self._pending]
        self.queue_depth -= sum(len(job.prepared) - job.taken for job in jobs)
        self._urgent.clear()
        self._pending.clear()
        for job in jobs:
            job.settle(error=unavailable(Reason.EMBEDDER_STOPPING, "the embedder is shutting down"))

    # --- the runner thread -------------------------------------------------------------------------
    def _run(self) -> None:
        name_os_thread()
        lower_thread_priority(self.nice)
        queries_turn = True
        while True:
            batches, starved, queries_turn = self._work(queries_turn)
            if batches is None:
                return
            for ready in batches:
                self._run_batch(ready, starved)

    def _work(self, queries_turn: bool) -> tuple[list[_Ready] | None, float, bool]:
        """A runner's next micro-batches, in turns. On the queries' turn, queries the feeder has not taken (it waits
        for the slot with a padded micro-batch in hand) come first: cut and padded here, they wait only for the
        micro-batch that was running. Then the slot's turn, so that a steady stream of queries never starves the
        bulk queued before it. Returns the micro-batches (None once the batcher is closed), how long this runner
        was starved for them, and whose turn is next."""
        if queries_turn and self._urgent and (queries := self._take(urgent_only=True, share=True)) is not None:
            return list(self._batches(queries, preemptible=False, spread=False)), 0.0, False
        ready, starved = self._next_ready()
        return (None if ready is None else [ready]), starved, True

    def _next_ready(self) -> tuple[_Ready | None, float]:
        """The slot's next micro-batch, and how long this runner waited for it after its oldest request had been
        accepted: starved (0 when it did not wait; a wait before the request came is idle)."""
        try:
            return self._ready.get_nowait(), 0.0
        except queue.Empty:
            pass
        waiting = time.perf_counter()
        with self._cond:
            self._waiting += 1
        try:
            ready = self._ready.get()
        finally:
            with self._cond:
                self._waiting -= 1
        if ready is None:
            return None, 0.0
        return ready, max(0.0, time.perf_counter() - max(waiting, ready.window.accepted))

    def _run_batch(self, ready: _Ready, starved: float = 0.0) -> None:
        if self._abandoned(ready):
            return
        started = time.perf_counter()
        try:
            vectors = self._backend.embed(ready.batch)
        except Exception as exc:  # noqa: BLE001 - handed to every request in the batch
            self._fail(ready, exc)
            return
        self._deliver(ready, vectors, time.perf_counter() - started, starved)

    def _abandoned(self, ready: _Ready) -> bool:
        """True (and the micro-batch accounted for) when every caller gave up while it waited in the pipeline."""
        window = ready.window
        if all(window.jobs[index].dropped for index in np.unique(window.job_of[ready.rows])):
            self._account(ready.accounted)
            return True
        return False

    def _fail(self, ready: _Ready, error: BaseException) -> None:
        for index in np.unique(ready.window.job_of[ready.rows]):
            ready.window.jobs[index].settle(error=error)
        self._account(ready.accounted)

    def _deliver(self, ready: _Ready, vectors: np.ndarray, seconds: float, starved: float) -> None:
        """Count the micro-batch, scatter its vectors to their requests and answer the requests it completes."""
        window, rows = ready.window, ready.rows
        # Counted before the callers are answered, so a caller that got its vectors sees its batch counted.
        with self._cond:
            self.queue_depth -= ready.accounted
            self.batches_run += 1
            self.texts_processed += len(rows)
            self.tokens_processed += ready.tokens
            self.padded_tokens_processed += ready.padded_tokens
            self.last_batch_sizes.append(len(rows))
            self.last_batch_padded_tokens.append(ready.padded_tokens)
            self.model_seconds += seconds
            self.starved_seconds += starved
        if self.on_batch is not None:
            self.on_batch(len(rows), ready.tokens, ready.padded_tokens, seconds, starved)
        parts = window.job_of[rows]
        done: list[_Job] = []
        with self._cond:  # another runner may be scattering rows of the same request
            for index in np.unique(parts):
                job = window.jobs[index]
                if job.dropped:
                    continue
                mine = parts == index
                if job.out is None:
                    job.out = np.empty((len(job.prepared), vectors.shape[1]), dtype=np.float32)
                job.out[window.row_of[rows[mine]]] = vectors[mine]
                job.remaining -= int(mine.sum())
                if job.remaining == 0:
                    done.append(job)
        for job in done:
            job.settle(job.out)
