"""Dynamic batching, made deterministic by a backend that holds the model until the test lets it go.

The hash backend counts words as tokens, so the token budget applies to it as it does to the model."""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from pathlib import Path

import grpc
import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.errors import RagmeshError
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_embedder.backends import HashBackend
from ragmesh_embedder.batcher import WINDOW_BATCHES, Batcher
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.service import Embedder

SETTINGS = EmbedderSettings(port=0, backend="hash")


async def test_queued_requests_share_length_sorted_micro_batches_within_the_token_budget(
    serve, until, gated_backend, vectors
):
    backend = gated_backend(batch_size=6, max_batch_tokens=24)
    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            batcher = running.embedder.batcher
            first = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["first"])))
            await until(backend.entered.is_set, "the model took the first request")
            # Eight requests arrive while the model is busy; words = tokens, from 1 to 12 per text.
            texts = [[f"request {r} " + "word " * ((r * 5 + i) % 11) for i in range(4)] for r in range(8)]
            rest = [asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=t))) for t in texts]
            await until(lambda: batcher.queue_depth == 33, "eight more requests queued")
            backend.gate.set()
            replies = await asyncio.gather(first, *rest)
    finally:
        backend.gate.set()
    reference = HashBackend(384)
    owner = {text: r for r, request in enumerate(texts) for text in request}
    for call in backend.calls[1:]:
        words = [len(reference._words(text)) for text in call]
        # Within the limits: at most 6 texts, and longest x count <= 24 padded tokens (or one long text).
        assert len(call) <= 6
        assert len(call) == 1 or max(words) * len(call) <= 24
        assert words == sorted(words), "a micro-batch holds texts of neighbouring lengths"
    # Requests that waited together shared model calls...
    assert any(len({owner[text] for text in call}) > 1 for call in backend.calls[1:])
    assert batcher.queue_depth == 0 and batcher.texts_processed == 33
    # ...and every caller still got its own vectors, in its own order.
    for request_texts, reply in zip(texts, replies[1:], strict=True):
        np.testing.assert_allclose(vectors(reply.embeddings), reference.embed_texts(request_texts), atol=1e-6)


async def test_an_idle_batcher_runs_a_lone_request_without_waiting_for_company(serve, monkeypatch):
    """The batcher only coalesces what is already queued: a worker never sleeps on a timer hoping that more
    requests arrive (the old design waited up to max_wait_ms on every request)."""
    timed_waits = []
    original = threading.Condition.wait

    def recording_wait(self, timeout=None):
        if timeout is not None and threading.current_thread().name.startswith("embedder-"):
            timed_waits.append(timeout)
        return original(self, timeout)

    monkeypatch.setattr(threading.Condition, "wait", recording_wait)
    async with serve(SETTINGS) as running:
        for text in ("one lone query", "and later another"):
            reply = await running.stub.Embed(pb2.EmbedRequest(texts=[text]))
            assert len(reply.embeddings[0].dense) == 384
        assert list(running.embedder.batcher.last_batch_sizes) == [1, 1]
    assert timed_waits == []


def _record_windows(monkeypatch) -> list[tuple[str, list[int]]]:
    """Every window the batcher cuts from now on, as (the thread that cut it, the texts it took of each request)."""
    windows: list[tuple[str, list[int]]] = []
    original = Batcher._window

    def recording_window(self, parts):
        windows.append((threading.current_thread().name, [count for _, _, count in parts]))
        return original(self, parts)

    monkeypatch.setattr(Batcher, "_window", recording_window)
    return windows


async def test_an_idle_embedder_hands_a_query_straight_to_the_model_thread(
    serve, until, vectors, gated_backend, monkeypatch
):
    """With nothing else queued or running, a query that fits one micro-batch is padded where it arrives and handed
    to a model thread directly (the feeder would only cut a window of that one request). Queries that come while
    the model is busy, and a query too large for one micro-batch, go through the feeder's lane as before."""
    windows = _record_windows(monkeypatch)
    backend = gated_backend(batch_size=4, max_batch_tokens=24)
    first = ["where do glaciers flow", "how old is the moon"]
    busy = ["while the model works", "and another"]
    large = [f"query number {i}" for i in range(6)]

    def query(texts):
        return asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=texts, input_type=pb2.INPUT_TYPE_QUERY)))

    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            batcher = running.embedder.batcher
            replies = [query(first)]
            await until(backend.entered.is_set, "the model took the first query")
            replies += [query([text]) for text in busy]
            await until(lambda: batcher.queue_depth == 4, "two queries queued while the model is busy")
            backend.gate.set()
            replies = await asyncio.gather(*replies)
            replies.append(await query(large))
            assert batcher.queue_depth == 0 and batcher.texts_processed == 10
    finally:
        backend.gate.set()
    caller = threading.current_thread().name
    assert windows[0] == (caller, [2]), windows
    assert windows[1:] and all(name.startswith("embedder-") for name, _ in windows[1:]), windows
    assert backend.calls[0] == first
    assert max(map(len, backend.calls)) <= 4  # the six-text query was cut by the feeder as before
    for texts, reply in zip([first, *([t] for t in busy), large], replies, strict=True):
        np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts(texts), atol=1e-6)


async def test_a_query_whose_slot_the_feeder_took_first_goes_through_the_lane(
    serve, vectors, gated_backend, monkeypatch
):
    """The direct hand-off sees the slot free, but the feeder (which puts without the batcher's lock) fills it before
    the query is put there: the query goes through the queries' lane instead and is answered, never an error (it was
    an INTERNAL `queue.Full` to a search under a re-index's load)."""
    backend = gated_backend()
    backend.gate.set()
    embedder = Embedder(backend, SETTINGS)
    slot = embedder.batcher._ready
    put, lost = slot.put_nowait, []

    def feeder_first(item):
        if not lost:  # the race, made to happen: the slot is taken between the check and this put
            lost.append(item)
            raise queue.Full
        return put(item)

    monkeypatch.setattr(slot, "put_nowait", feeder_first)
    text = "where do glaciers flow"
    async with serve(SETTINGS, embedder) as running:
        reply = await running.stub.Embed(pb2.EmbedRequest(texts=[text], input_type=pb2.INPUT_TYPE_QUERY))
        assert running.embedder.batcher.queue_depth == 0
    assert len(lost) == 1  # the hand-off was tried and lost
    np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts([text]), atol=1e-6)


async def test_a_query_goes_straight_to_a_model_thread_waiting_while_the_other_is_busy(
    serve, until, vectors, gated_backend, monkeypatch
):
    """Two model threads, one running a query: the next query, with nothing queued before it, is padded where it
    arrives and handed to the idle model thread directly (one thread hand-off, not two through the feeder). A query
    that comes while both are busy goes through the feeder's lane."""
    windows = _record_windows(monkeypatch)
    backend = gated_backend(runners=2)
    texts = ["where do glaciers flow", "how old is the moon", "why is the sky blue"]

    def query(text):
        return asyncio.ensure_future(
            running.stub.Embed(pb2.EmbedRequest(texts=[text], input_type=pb2.INPUT_TYPE_QUERY))
        )

    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            batcher = running.embedder.batcher
            replies = [query(texts[0])]
            await until(
                lambda: backend.inside == 1 and batcher._waiting == 1,
                "one model thread busy with the first query, the other waiting",
            )
            replies.append(query(texts[1]))
            await until(lambda: backend.inside == 2, "the second query in the model beside the first")
            replies.append(query(texts[2]))
            await until(lambda: batcher.queue_depth == 3, "the third query queued while both are busy")
            backend.gate.set()
            replies = await asyncio.gather(*replies)
    finally:
        backend.gate.set()
    caller = threading.current_thread().name
    assert windows[:2] == [(caller, [1]), (caller, [1])], windows
    assert [name.startswith("embedder-") for name, _ in windows[2:]] == [True], windows
    for text, reply in zip(texts, replies, strict=True):
        np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts([text]), atol=1e-6)


def _waiting(batcher) -> list:
    """The requests the batcher holds that the model has not started: queued, or padded and waiting for it."""
    ready = [r for r in list(batcher._ready.queue) if r is not None]
    return [*batcher._urgent, *batcher._pending, *(job for r in ready for job in r.window.jobs)]


async def test_texts_of_a_caller_that_gave_up_are_skipped(serve, rpc_error, until, gated):
    async with serve(SETTINGS, Embedder(gated, SETTINGS)) as running:
        batcher = running.embedder.batcher
        first = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["first"])))
        await until(gated.entered.is_set, "the model took the first request")
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=["late", "later"]), timeout=0.2))
        assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED
        # The server learns of the deadline on its own clock: let it mark the request before the model is free.
        await until(
            lambda: _waiting(batcher) and all(job.dropped for job in _waiting(batcher)),
            "the server saw the caller give up",
        )
        gated.gate.set()
        await first
        await until(lambda: batcher.queue_depth == 0, "the queue drained")
        assert batcher.texts_processed == 1
        assert gated.calls == [["first"]]


async def test_a_request_larger_than_the_window_is_split_and_reassembled_in_order(serve, vectors):
    backend = HashBackend(384, batch_size=3, max_batch_tokens=8)
    settings = EmbedderSettings(port=0, backend="hash", max_texts_per_request=128)
    texts = [f"text {i} " + "more " * (i % 5) for i in range(100)]  # a window holds 16 x 3 texts
    async with serve(settings, Embedder(backend, settings)) as running:
        reply = await running.stub.Embed(pb2.EmbedRequest(texts=texts, kinds=[pb2.VECTOR_KIND_DENSE]))
        batcher = running.embedder.batcher
        assert max(batcher.last_batch_sizes) <= 3 and max(batcher.last_batch_padded_tokens) <= 8
    np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts(texts), atol=1e-6)


async def test_the_batcher_counts_the_padded_tokens_the_model_ran_beside_the_real_ones(serve):
    # What the benchmarks read a service run's padding from: a short and a long text in one micro-batch cost the
    # long one's length twice. Words are tokens here.
    backend = HashBackend(16, batch_size=2, max_batch_tokens=10)
    async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
        await running.stub.Embed(pb2.EmbedRequest(texts=["short", "one two three four five"]))
        batcher = running.embedder.batcher
        assert list(batcher.last_batch_sizes) == [2]
        assert batcher.tokens_processed == 6
        assert batcher.padded_tokens_processed == 10


async def test_a_query_goes_ahead_of_bulk_documents_queued_before_it(serve, until, gated_backend):
    """A search must not wait behind a bulk ingestion: queries have their own lane, taken first."""
    backend = gated_backend(batch_size=4, max_batch_tokens=10_000)
    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            batcher = running.embedder.batcher
            first = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["first"])))
            await until(backend.entered.is_set, "the model took the first request")
            bulk = [f"bulk document {i} about glaciers" for i in range(64)]
            documents = asyncio.ensure_future(
                running.stub.Embed(pb2.EmbedRequest(texts=bulk, input_type=pb2.INPUT_TYPE_DOCUMENT))
            )
            await until(lambda: batcher.queue_depth == 65, "the bulk request queued")
            query = asyncio.ensure_future(
                running.stub.Embed(pb2.EmbedRequest(texts=["where do glaciers flow"], input_type=pb2.INPUT_TYPE_QUERY))
            )
            await until(lambda: batcher.queue_depth == 66, "the query queued behind it")
            backend.gate.set()
            await asyncio.gather(first, documents, query)
    finally:
        backend.gate.set()
    # The model's calls after the first (16 micro-batches of bulk, one with the query). The bulk fits one window
    # (WINDOW_BATCHES x 4 texts), which the feeder may have taken and begun to hand over before the query came;
    # yet the query runs next (the runner takes it), or after the one micro-batch already handed over (when the
    # feeder took it between two micro-batches), never after the window's other 14.
    later = backend.calls[1:]
    assert WINDOW_BATCHES * 4 >= 64
    at = next(i for i, call in enumerate(later) if "where do glaciers flow" in call)
    assert at <= 1, [len(call) for call in later]
    assert sum(len(call) for call in later) == 65


class _SteppedBackend(HashBackend):
    """The hash backend, but each model call waits until the test allows one more; records every call's texts and
    counts the calls waiting (`inside`)."""

    def __init__(self, batch_size: int = 4, max_batch_tokens: int = 10_000, runners: int = 1) -> None:
        super().__init__(384, batch_size=batch_size, max_batch_tokens=max_batch_tokens, runners=runners)
        self.allowed = threading.Semaphore(0)
        self.calls: list[list[str]] = []
        self.inside = 0
        self._lock = threading.Lock()

    def embed(self, batch):
        with self._lock:
            self.inside += 1
        if not self.allowed.acquire(timeout=30):
            raise TimeoutError("the test never allowed this model call")
        with self._lock:
            self.inside -= 1
            self.calls.append(list(batch.texts))
        return super().embed(batch)


async def test_bulk_documents_still_progress_while_queries_keep_coming(serve, until):
    """Queries go first, but not forever: with a new query waiting every time the model finishes a call, the bulk
    request queued before them still gets a call at least every fourth, and finishes."""
    backend = _SteppedBackend()
    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            batcher = running.embedder.batcher
            bulk = asyncio.ensure_future(
                running.stub.Embed(
                    pb2.EmbedRequest(
                        texts=[f"bulk document {i} about glaciers" for i in range(32)],
                        input_type=pb2.INPUT_TYPE_DOCUMENT,
                    )
                )
            )
            await until(lambda: batcher.queue_depth == 32, "the bulk request queued")
            queries = []
            for step in range(40):
                if bulk.done():
                    break
                depth = batcher.queue_depth  # the model is held, so only this query changes it
                queries.append(
                    asyncio.ensure_future(
                        running.stub.Embed(pb2.EmbedRequest(texts=[f"query {step}"], input_type=pb2.INPUT_TYPE_QUERY))
                    )
                )
                await until(lambda depth=depth: batcher.queue_depth == depth + 1, "the query queued")
                backend.allowed.release()
                await until(lambda step=step: len(backend.calls) == step + 1, "the model ran one more call")
            assert bulk.done(), f"the bulk request starved: calls {[len(c) for c in backend.calls]}"
            backend.allowed.release(100)
            await asyncio.gather(bulk, *queries)
    finally:
        backend.allowed.release(100)
    # 8 micro-batches of bulk. Between two of them, at most three calls of queries: the model thread's turn, a
    # micro-batch of queries the feeder put in the slot ahead of the next bulk one, the model thread's turn again.
    kinds = ["bulk" if call[0].startswith("bulk") else "query" for call in backend.calls]
    assert kinds.count("bulk") == 8
    last_bulk = max(i for i, kind in enumerate(kinds) if kind == "bulk")
    assert "query, query, query, query" not in ", ".join(kinds[:last_bulk]), kinds


async def test_two_runners_run_two_micro_batches_at_once_and_reassemble_each_request_in_order(
    serve, until, vectors, gated_backend
):
    backend = gated_backend(runners=2, batch_size=3, max_batch_tokens=8)
    settings = EmbedderSettings(port=0, backend="hash", max_texts_per_request=64)
    texts = [f"text {i} " + "more " * (i % 5) for i in range(40)]
    try:
        async with serve(settings, Embedder(backend, settings)) as running:
            reply = asyncio.ensure_future(
                running.stub.Embed(pb2.EmbedRequest(texts=texts, kinds=[pb2.VECTOR_KIND_DENSE]))
            )
            await until(lambda: backend.inside == 2, "two micro-batches in the model at once")
            backend.gate.set()
            reply = await reply
    finally:
        backend.gate.set()
    assert backend.most == 2
    # The request's micro-batches finished on two threads in no set order; its vectors are still in its order.
    np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts(texts), atol=1e-6)


async def test_queries_that_would_fit_one_micro_batch_are_spread_over_both_runners(
    serve, until, vectors, gated_backend
):
    """Twelve queries fit one micro-batch here, but one runner alone would leave the other core idle: they run as
    two micro-batches of six, at once (on 2 cores int8 costs no more CPU a query in sixes than in twelves)."""
    backend = gated_backend(runners=2, batch_size=64, max_batch_tokens=10_000)
    queries = [f"where do glaciers flow {i}" for i in range(12)]
    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            reply = asyncio.ensure_future(
                running.stub.Embed(pb2.EmbedRequest(texts=queries, input_type=pb2.INPUT_TYPE_QUERY))
            )
            await until(lambda: backend.inside == 2, "both runners in the model at once")
            backend.gate.set()
            reply = await reply
    finally:
        backend.gate.set()
    assert sorted(map(len, backend.calls)) == [6, 6]
    np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts(queries), atol=1e-6)


async def test_a_runner_takes_its_share_of_the_queued_queries_and_leaves_the_rest_to_the_other(serve, until, vectors):
    """Queries queued while both runners and the feeder are busy with bulk: the first runner to finish takes
    half of them, not all, so the second runner's next call is the other half."""
    # Two runners; the budget (words are tokens) holds one eight-word text or twelve one-word ones.
    backend = _SteppedBackend(batch_size=64, max_batch_tokens=12, runners=2)
    settings = EmbedderSettings(port=0, backend="hash", max_texts_per_request=64)
    queries = [f"q{i}" for i in range(12)]  # one micro-batch could hold them all
    try:
        async with serve(settings, Embedder(backend, settings)) as running:
            batcher = running.embedder.batcher
            bulk = asyncio.ensure_future(
                running.stub.Embed(
                    pb2.EmbedRequest(
                        texts=[f"bulk document {i} about glaciers and the ice" for i in range(5)],
                        input_type=pb2.INPUT_TYPE_DOCUMENT,
                    )
                )
            )
            # Two bulk texts in the model, two padded in the slot, the fifth in the feeder's hands.
            await until(
                lambda: backend.inside == 2 and batcher._ready.full() and not batcher._pending,
                "both runners, the slot and the feeder busy with bulk",
            )
            asked = asyncio.ensure_future(
                running.stub.Embed(pb2.EmbedRequest(texts=queries, input_type=pb2.INPUT_TYPE_QUERY))
            )
            await until(lambda: batcher.queue_depth == 17, "the queries queued")
            backend.allowed.release(2)  # both runners finish their bulk text and take queries
            await until(lambda: len(backend.calls) == 2 and backend.inside == 2, "both runners took queries")
            backend.allowed.release(100)
            reply, _ = await asyncio.gather(asked, bulk)
    finally:
        backend.allowed.release(100)
    query_calls = [call for call in backend.calls if not call[0].startswith("bulk")]
    assert sorted(map(len, query_calls)) == [6, 6], [len(call) for call in backend.calls]
    np.testing.assert_allclose(vectors(reply.embeddings), backend.embed_texts(queries), atol=1e-6)


def _runner_threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(f"embedder-runner-{name}")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")
async def test_the_model_threads_and_the_feeder_carry_their_names_for_the_operating_system(until, gated_backend):
    """`top -H`, perf and /proc tell the model threads from the rest of the process (the kernel keeps 15 bytes)."""
    backend = gated_backend(runners=2)
    batcher = Batcher(backend, max_queue_texts=10, name="named")

    def os_names() -> list[str]:
        threads = [
            t
            for t in threading.enumerate()
            if t.name.startswith("embedder-") and t.name.endswith(("-named", "-named-1"))
        ]
        return sorted(Path(f"/proc/self/task/{t.native_id}/comm").read_text().strip() for t in threads)

    try:
        await until(
            lambda: os_names() == ["embedder-feeder", "embedder-runner", "embedder-runner"],
            "the feeder and both model threads named",
        )
    finally:
        backend.gate.set()
        batcher.close()


async def test_closing_ends_every_runner_and_answers_every_request(until, gated_backend):
    """Shut down with both model threads busy and more queued: close() returns with no model thread left, and
    every caller gets its vectors or UNAVAILABLE, none is left waiting."""
    backend = gated_backend(runners=2, batch_size=1, max_batch_tokens=None)
    batcher = Batcher(backend, max_queue_texts=1000, name="closing")
    assert len(_runner_threads("closing")) == 2
    calls = [asyncio.ensure_future(batcher.embed(backend.prepare([f"text {i}"]))) for i in range(40)]
    try:
        await until(lambda: backend.inside == 2, "both model threads busy")
        closing = asyncio.get_running_loop().run_in_executor(None, batcher.close, 30.0)
        backend.gate.set()
        await closing
    finally:
        backend.gate.set()
    assert _runner_threads("closing") == []
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    embedded = [o for o in outcomes if isinstance(o, np.ndarray)]
    refused = [o for o in outcomes if isinstance(o, RagmeshError)]
    assert len(embedded) + len(refused) == 40, outcomes
    assert embedded and all(e.code == grpc.StatusCode.UNAVAILABLE for e in refused)


async def test_metrics_tell_a_busy_model_from_an_idle_one_and_from_one_its_feeder_starves(
    serve, until, gated_backend, monkeypatch
):
    """What an SRE reads off a pod: how long the model ran, and how long it waited for a micro-batch that had
    been accepted (the CPU side behind the model) - never the idle time before a request comes. The feeder is
    slowed by holding its padding step, as a pod short of CPU would."""
    registry = setup_telemetry("embedder").registry

    def sample(name: str) -> float:
        return registry.get_sample_value(name, {"model": "default"}) or 0.0

    busy, starved = "ragmesh_embedder_model_busy_seconds_total", "ragmesh_embedder_model_starved_seconds_total"
    backend = gated_backend(runners=2)
    try:
        async with serve(SETTINGS, Embedder(backend, SETTINGS)) as running:
            assert sample("ragmesh_embedder_runners") == 2
            before = {name: sample(name) for name in (busy, starved)}
            await asyncio.sleep(0.3)  # idle: both model threads wait, nothing is queued
            held = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["held in the model"])))
            await until(backend.entered.is_set, "the model took the request")
            await asyncio.sleep(0.3)
            backend.gate.set()
            await held
            assert sample(busy) - before[busy] >= 0.3, "the model ran for 0.3 s"
            assert sample(starved) - before[starved] < 0.15, "waiting with nothing queued is not starving"

            batcher = running.embedder.batcher
            feeder_gate, pad = threading.Event(), batcher._pad

            def slow_pad(*args):
                feeder_gate.wait(10)
                return pad(*args)

            monkeypatch.setattr(batcher, "_pad", slow_pad)
            before = sample(starved)
            call = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["fed late", "and slowly"])))
            await until(lambda: batcher.queue_depth == 2, "the request accepted")
            await asyncio.sleep(0.3)
            feeder_gate.set()
            assert len((await call).embeddings) == 2
            assert sample(starved) - before >= 0.29, "a model thread waited 0.3 s for an accepted micro-batch"
    finally:
        backend.gate.set()
