"""RAGMESH_EMBEDDER_MODEL_PROCESSES: the model in a process of its own per runner. The same vectors as the model
threads, processes an operator can see and that go when the embedder goes, a dead one replaced without losing a
request, and clear errors where one cannot start or a model call fails."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.config import ConfigError
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_embedder.backends import MicroBatch
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.model_process import PROCESS_NAME, ModelCallFailed, ModelProcess
from ragmesh_embedder.service import InputType, build_embedder

pytestmark = [
    pytest.mark.e2e,  # the model in child processes
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the processes from /proc"),
]

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "datasets" / "msmarco-5k" / "corpus.jsonl"
FP32 = {"port": 0, "precision": "fp32", "runners": 2, "RAGMESH_EMBEDDER_THREADS": 1}


@pytest.fixture(scope="module")
def passages() -> list[str]:
    if not CORPUS.exists():
        return [
            f"passage {i}: the mercury thermometer was invented by Daniel Fahrenheit in 1714. " * (i % 5 + 1)
            for i in range(48)
        ]
    with CORPUS.open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(48), strict=False)]


@pytest.fixture(scope="module")
def in_threads(passages, local) -> np.ndarray:
    """The passages' fp32 vectors from the model threads (the `local` fixture has exported the model)."""
    embedder = build_embedder(EmbedderSettings(**FP32))
    loop = asyncio.new_event_loop()  # not asyncio.run, which leaves the main thread without a default loop after
    try:
        return loop.run_until_complete(embedder.embed(passages, InputType.DOCUMENT)).dense
    finally:
        loop.close()
        embedder.close()


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the name, None once the process is gone (a zombie counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


async def test_model_processes_give_the_vectors_the_model_threads_give(passages, in_threads, serve, vectors):
    """Through gRPC, as a caller sees it: the same vectors; and as an operator sees it in `ps`/`top`: one process
    per runner, a child of the embedder named embedder-model, giving way like the model threads do (nice +5,
    SCHED_BATCH) while the runner threads, which only relay, keep the process's priority."""
    settings = EmbedderSettings(**FP32, model_processes="on", model_name="processes")
    async with serve(settings) as running:
        batcher = running.embedder.batcher
        pids = batcher.process_ids
        assert len(pids) == 2
        own = os.getpriority(os.PRIO_PROCESS, 0)
        for pid in pids:
            fields = _stat(pid)
            assert fields is not None and int(fields[1]) == os.getpid()  # the embedder's own children
            assert _comm(pid) == PROCESS_NAME
            assert (os.getpriority(os.PRIO_PROCESS, pid), os.sched_getscheduler(pid)) == (
                min(19, own + 5),
                os.SCHED_BATCH,
            )
        runners = [t.native_id for t in threading.enumerate() if t.name.startswith("embedder-runner-processes")]
        assert [(os.getpriority(os.PRIO_PROCESS, t), os.sched_getscheduler(t)) for t in runners] == [
            (own, os.SCHED_OTHER)
        ] * 2
        groups = [passages[i::6] for i in range(6)]
        replies = await asyncio.gather(
            *(running.stub.Embed(pb2.EmbedRequest(texts=group, kinds=[pb2.VECTOR_KIND_DENSE])) for group in groups)
        )
        assert batcher.texts_processed >= len(passages)
        assert batcher.model_seconds > 0  # the processes' model time is counted where the metrics read it
    for group, reply, index in zip(groups, replies, range(6), strict=True):
        np.testing.assert_allclose(vectors(reply.embeddings), in_threads[index::6], atol=1e-5)
        assert len(group) == len(reply.embeddings)
    for pid in pids:  # the server stopped and the embedder closed: the processes are gone
        assert _stat(pid) is None


async def test_a_model_process_killed_mid_request_is_replaced_and_the_request_still_succeeds(
    passages, in_threads, until, caplog
):
    """kill -9 of a model process (the OOM killer, an operator) while a request has micro-batches in it: a new
    process takes over what the dead one held, and the caller gets every vector right; the metrics count it."""
    registry = setup_telemetry("embedder").registry

    def sample(name: str) -> float:
        return registry.get_sample_value(name, {"model": "default"}) or 0.0

    restarts = sample("ragmesh_embedder_model_process_restarts_total")
    embedder = build_embedder(EmbedderSettings(**{**FP32, "runners": 1}, model_processes="on", max_batch_tokens=512))
    try:
        assert sample("ragmesh_embedder_model_processes") == 1
        batcher = embedder.batcher
        (first,) = batcher.process_ids
        request = asyncio.ensure_future(embedder.embed(passages, InputType.DOCUMENT))
        await until(lambda: batcher.batches_run >= 1, "the first micro-batch answered")
        assert not request.done()  # 48 passages in 512-token micro-batches: more are in the process or queued
        os.kill(first, signal.SIGKILL)
        result = await asyncio.wait_for(request, 120)
        np.testing.assert_allclose(result.dense, in_threads, atol=1e-5)
        assert batcher.process_restarts == 1
        assert sample("ragmesh_embedder_model_process_restarts_total") == restarts + 1
        assert sample("ragmesh_embedder_model_processes") == 1
        held = re.search(r"process embedder-model-default-0 exited .* \((\d+) micro-batch\(es\) it held", caplog.text)
        assert held is not None and int(held[1]) >= 1  # the new process ran what the dead one had been sent
        (second,) = batcher.process_ids
        assert second != first and _stat(second) is not None
        again = await embedder.embed(passages[:4], InputType.DOCUMENT)  # the new process serves on
        np.testing.assert_allclose(again.dense, in_threads[:4], atol=1e-5)
    finally:
        embedder.close()
    assert _stat(second) is None


def test_model_processes_leave_with_an_embedder_killed_outright(local):
    """kill -9 of the embedder itself leaves no model process behind: each ends when its pipe closes. (The program
    is read from stdin: a model process does not import the embedding program's main module again.)"""
    script = textwrap.dedent("""
        import time
        from ragmesh_embedder.config import EmbedderSettings
        from ragmesh_embedder.service import build_embedder
        embedder = build_embedder(EmbedderSettings(port=0, runners=2, model_processes="on"))
        print(*embedder.batcher.process_ids, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        proc.stdin.write(script)
        proc.stdin.close()
        pids = [int(pid) for pid in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(_stat(pid) is not None for pid in pids)
    finally:
        proc.kill()
        proc.wait()
    for _ in range(300):  # they notice the closed pipe at once; a slow machine may take a moment to run them
        if all(_stat(pid) is None for pid in pids):
            break
        time.sleep(0.05)
    assert [pid for pid in pids if _stat(pid) is not None] == []


def test_a_model_process_that_cannot_load_the_model_says_why(tmp_path):
    process = ModelProcess(EmbedderSettings(port=0, model_path=str(tmp_path / "no-model")), "embedder-model-test-0")
    with pytest.raises(ConfigError, match=r"process embedder-model-test-0 could not load the model: .*No such file"):
        process.start().wait_ready()


def test_a_failed_model_call_is_told_to_its_callers_and_the_process_goes_on(local):
    """A micro-batch the model refuses (here token ids outside the vocabulary, which the embedder itself never
    sends) fails alone; the next one is answered."""
    process = ModelProcess(EmbedderSettings(**FP32), "embedder-model-test-0").start()
    try:
        process.wait_ready()
        bad = np.full((1, 4), 10**9, dtype=np.int64)
        process.submit(MicroBatch(1, input_ids=bad, attention_mask=np.ones_like(bad)))
        with pytest.raises(ModelCallFailed):
            process.collect(1)
        good = np.array([[101, 7592, 102]], dtype=np.int64)
        process.submit(MicroBatch(1, input_ids=good, attention_mask=np.ones_like(good)))
        vector, seconds = process.collect(1)
        assert vector.shape == (1, 384) and abs(float(np.linalg.norm(vector)) - 1) < 1e-4 and seconds > 0
    finally:
        process.close()


@pytest.mark.parametrize(
    ("settings", "processes", "ignored"),
    [
        ({"runners": 2}, 0, False),  # the default: in the embedder's threads
        ({"model_processes": "on", "runners": 2}, 2, False),
        ({"model_processes": "on", "runners": 1}, 1, False),
        ({"model_processes": "on", "runners": 1, "backend": "hash"}, 0, True),
        ({"model_processes": "on", "runners": 1, "runtime": "torch"}, 0, True),
    ],
)
def test_where_the_model_runs_in_processes(settings, processes, ignored, caplog, local):
    """Off by default; "on" applies to ONNX Runtime on the CPU (elsewhere it is said to be ignored and the model
    runs in the embedder's threads)."""
    embedder = build_embedder(
        EmbedderSettings(
            port=0, precision="fp32" if "backend" not in settings else "auto", RAGMESH_EMBEDDER_THREADS=1, **settings
        )
    )
    try:
        assert len(embedder.batcher.process_ids) == processes
    finally:
        embedder.close()
    assert ("RAGMESH_EMBEDDER_MODEL_PROCESSES applies to ONNX Runtime on the CPU" in caplog.text) == ignored
