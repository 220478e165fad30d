"""The ONNX Runtime backend: the same vectors as torch, an export cache that survives crashes and corruption,
int8, device selection and the settings that refuse impossible combinations."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.config import ConfigError, load
from ragmesh_embedder import export
from ragmesh_embedder.backends import resolve_plan
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.cpus import available_cpus
from ragmesh_embedder.service import build_embedder

pytestmark = pytest.mark.slow  # the real model, exported to ONNX

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "datasets" / "msmarco-5k" / "corpus.jsonl"


@pytest.fixture(scope="module")
def passages() -> list[str]:
    """Real msmarco passages of mixed lengths (the first 64), or a few real-world texts without shared/."""
    if not CORPUS.exists():
        return [
            "The mercury thermometer was invented by Daniel Gabriel Fahrenheit in 1714.",
            "How long does it take to boil an egg? About nine minutes for a hard yolk.",
            "x y z",
        ]
    with CORPUS.open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(64), strict=False)]


async def test_onnx_vectors_match_torch_on_real_passages(local, vectors, reference, passages):
    reply = await local.stub.Embed(pb2.EmbedRequest(texts=passages, kinds=[pb2.VECTOR_KIND_DENSE]))
    onnx = vectors(reply.embeddings)
    torch = reference.encode(passages, normalize_embeddings=True)
    assert local.embedder.info.runtime == "onnx"
    assert np.min(np.sum(onnx * torch, axis=1)) >= 0.9999


async def test_the_default_on_a_cpu_is_int8_and_stays_close_to_torch(reference, passages, local):
    embedder = build_embedder(EmbedderSettings(port=0))  # quantized once into the default cache
    try:
        assert (embedder.info.runtime, embedder.info.precision) == ("onnx", "int8")
        int8 = (await embedder.embed(passages, _document())).dense
    finally:
        embedder.close()
    cosines = np.sum(int8 * reference.encode(passages, normalize_embeddings=True), axis=1)
    assert cosines.mean() >= 0.98 and cosines.min() >= 0.95
    assert export.is_valid(_default_folder() / "model.int8.onnx")


def test_the_export_cache_is_reused_and_a_broken_file_is_made_again(tmp_path, monkeypatch, local):
    settings = EmbedderSettings()
    cache = _copy_default_cache(tmp_path)
    model_path = Path(settings.model_path)
    fp32 = export.ensure_export(cache, settings.model_id, model_path, "fp32")
    assert fp32.parent.name.startswith("sentence-transformers-all-MiniLM-L6-v2-opset17-v1-")
    stamp = fp32.stat().st_mtime_ns

    # A valid cache is used as it is: no export.
    def no_export(*_):
        raise AssertionError("exported although the cache holds a valid file")

    with monkeypatch.context() as patched:
        patched.setattr(export, "_export_in_subprocess", no_export)
        assert export.ensure_export(cache, settings.model_id, model_path, "fp32") == fp32
    assert fp32.stat().st_mtime_ns == stamp

    # A crash mid-export leaves a temporary file and a truncated model without its manifest: made again.
    fp32.with_name(".model.onnx.4242.tmp").write_bytes(b"half an export")
    fp32.write_bytes(fp32.read_bytes()[:1000])
    Path(str(fp32) + ".json").unlink()
    assert not export.is_valid(fp32)
    assert export.ensure_export(cache, settings.model_id, model_path, "fp32") == fp32
    assert export.is_valid(fp32) and fp32.stat().st_size > 10_000_000

    # Bytes flipped after the manifest was written: the hash no longer matches, so it is made again too.
    data = bytearray(fp32.read_bytes())
    data[5_000_000] ^= 0xFF
    fp32.write_bytes(bytes(data))
    assert not export.is_valid(fp32)
    with monkeypatch.context() as patched:
        # Re-exporting is proven above; here the copy from the default cache stands in for it.
        patched.setattr(export, "_export_in_subprocess", lambda _, target: _restore(target))
        export.ensure_export(cache, settings.model_id, model_path, "fp32")
    assert export.is_valid(fp32)


def test_a_cache_that_cannot_be_written_is_a_clear_start_up_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="RAGMESH_EMBEDDER_MODEL_CACHE_DIR"):
        build_embedder(EmbedderSettings(port=0, model_cache_dir=blocker / "models"))


def test_asking_for_cuda_without_a_gpu_is_a_start_up_error_naming_the_setting():
    with pytest.raises(ConfigError, match="RAGMESH_EMBEDDER_DEVICE=cuda") as error:
        build_embedder(EmbedderSettings(port=0, device="cuda"))
    assert "RAGMESH_EMBEDDER_DEVICE=cpu or auto" in str(error.value)


def test_device_auto_picks_what_the_machine_has():
    auto = EmbedderSettings(port=0)
    assert resolve_plan(auto).device == "cpu"  # this machine: no GPU
    # With a CUDA provider in onnxruntime: onnx on cuda in fp16, GPU-sized micro-batches.
    plan = resolve_plan(auto, ort_cuda=lambda: True, torch_cuda=lambda: False)
    assert (plan.runtime, plan.device, plan.precision, plan.batch_size, plan.max_batch_tokens) == (
        "onnx",
        "cuda",
        "fp16",
        1024,
        131072,
    )
    # Only torch sees the GPU: torch runs the model there.
    plan = resolve_plan(auto, ort_cuda=lambda: False, torch_cuda=lambda: True)
    assert (plan.runtime, plan.device, plan.precision) == ("torch", "cuda", "fp16")
    # Explicit cpu never looks for a GPU; int8 with a GPU found by auto is refused with the fix.
    plan = resolve_plan(EmbedderSettings(port=0, device="cpu"), ort_cuda=lambda: True, torch_cuda=lambda: True)
    assert (plan.device, plan.precision, plan.batch_size, plan.max_batch_tokens) == ("cpu", "int8", 256, 256)
    plan = resolve_plan(EmbedderSettings(port=0, runtime="torch"))
    assert (plan.precision, plan.max_batch_tokens, plan.runners, plan.threads) == ("fp32", 512, available_cpus(), 1)
    plan = resolve_plan(EmbedderSettings(port=0, precision="fp32"), ort_cuda=lambda: False, torch_cuda=lambda: False)
    assert (plan.runtime, plan.max_batch_tokens) == ("onnx", 512)
    with pytest.raises(ConfigError, match="RAGMESH_EMBEDDER_PRECISION=int8"):
        resolve_plan(EmbedderSettings(port=0, precision="int8"), ort_cuda=lambda: True, torch_cuda=lambda: False)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RAGMESH_EMBEDDER_PRECISION": "fp16", "RAGMESH_EMBEDDER_DEVICE": "cpu"}, "RAGMESH_EMBEDDER_DEVICE=cuda"),
        ({"RAGMESH_EMBEDDER_PRECISION": "int8", "RAGMESH_EMBEDDER_RUNTIME": "torch"}, "RAGMESH_EMBEDDER_RUNTIME=onnx"),
        ({"RAGMESH_EMBEDDER_PRECISION": "int8", "RAGMESH_EMBEDDER_DEVICE": "cuda"}, "runs on the CPU only"),
        ({"RAGMESH_EMBEDDER_RUNTIME": "tensorrt"}, "RAGMESH_EMBEDDER_RUNTIME"),
        ({"RAGMESH_EMBEDDER_DEVICE": "gpu"}, "RAGMESH_EMBEDDER_DEVICE"),
        ({"RAGMESH_EMBEDDER_MAX_BATCH_TOKENS": "8"}, "RAGMESH_EMBEDDER_MAX_BATCH_TOKENS"),
        ({"RAGMESH_EMBEDDER_THREADS": "0"}, "RAGMESH_EMBEDDER_THREADS"),
        ({"RAGMESH_EMBEDDER_RUNNERS": "0"}, "RAGMESH_EMBEDDER_RUNNERS"),
    ],
)
def test_impossible_settings_stop_start_up_with_the_variable_named(monkeypatch, env, named):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=named):
        load(EmbedderSettings)


def test_threads_follow_the_cgroup_quota_not_the_host(tmp_path, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(64)))
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert available_cpus(tmp_path) == 2  # a 1.5-CPU limit: 2 threads, not 64
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cpus(tmp_path) == 64
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(tmp_path) == 4  # cgroup v1
    monkeypatch.setenv("RAGMESH_EMBEDDER_THREADS", "3")
    assert resolve_plan(load(EmbedderSettings), ort_cuda=lambda: False, torch_cuda=lambda: False).threads == 3


@pytest.mark.parametrize(
    ("env", "gpu", "expected"),
    [
        # onnx on the CPU: one single-threaded runner per CPU, unless told otherwise; what is unset fills the CPUs.
        ({}, False, (4, 1)),
        ({"RAGMESH_EMBEDDER_THREADS": "2"}, False, (2, 2)),
        ({"RAGMESH_EMBEDDER_THREADS": "8"}, False, (1, 8)),
        ({"RAGMESH_EMBEDDER_RUNNERS": "1"}, False, (1, 4)),
        ({"RAGMESH_EMBEDDER_RUNNERS": "2", "RAGMESH_EMBEDDER_THREADS": "3"}, False, (2, 3)),
        # torch on the CPU likewise; CUDA: one call at a time, unless runners are asked for.
        ({"RAGMESH_EMBEDDER_RUNTIME": "torch"}, False, (4, 1)),
        ({"RAGMESH_EMBEDDER_RUNTIME": "torch", "RAGMESH_EMBEDDER_RUNNERS": "1"}, False, (1, 4)),
        ({}, True, (1, 4)),
        ({"RAGMESH_EMBEDDER_RUNNERS": "2"}, True, (2, 2)),
    ],
)
def test_runners_and_threads_share_the_cpus_this_process_may_use(monkeypatch, env, gpu, expected):
    monkeypatch.setattr("ragmesh_embedder.backends.available_cpus", lambda: 4)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    plan = resolve_plan(load(EmbedderSettings), ort_cuda=lambda: gpu, torch_cuda=lambda: False)
    assert (plan.runners, plan.threads) == expected


@pytest.mark.parametrize("runtime", ["onnx", "torch"])
async def test_two_runners_give_the_vectors_one_runner_gives(passages, local, runtime):
    """Two model threads call one ONNX Runtime session (or one torch module: torch's default on the CPU too) at
    once; every text gets the vector it gets from one. (In fp32: int8's dynamic quantization scales activations
    per call, so there a text's vector moves a little with the texts it shares a micro-batch with, however many
    runners.)"""
    one = build_embedder(
        EmbedderSettings(port=0, runtime=runtime, precision="fp32", runners=1, RAGMESH_EMBEDDER_THREADS=1)
    )
    two = build_embedder(
        EmbedderSettings(port=0, runtime=runtime, precision="fp32", runners=2, RAGMESH_EMBEDDER_THREADS=1)
    )
    try:
        assert (one.batcher.runners, two.batcher.runners) == (1, 2)
        groups = [passages[i::8] for i in range(8)]
        alone = await asyncio.gather(*(one.embed(group, _document()) for group in groups))
        together = await asyncio.gather(*(two.embed(group, _document()) for group in groups))
    finally:
        one.close()
        two.close()
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_allclose(a.dense, b.dense, atol=1e-5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux gives each thread a nice value of its own")
@pytest.mark.parametrize(
    ("settings", "lowered"),
    [
        ({"backend": "local"}, 5),  # the default
        ({"backend": "local", "model_thread_nice": 12}, 12),
        ({"backend": "local", "model_thread_nice": 0}, 0),
        ({"backend": "hash"}, 0),  # no model on the CPU: nothing for the model threads to give way to
    ],
)
async def test_model_threads_on_the_cpu_give_way_to_the_rest_of_the_process(until, settings, lowered):
    """What an operator sees in `top -H` (NI) and `chrt -p`: the model threads of a model on the CPU run at the
    process's nice value plus model_thread_nice, as SCHED_BATCH, so that the event loop, which every request passes
    through, gets a core first when both want one; the feeder and the caller's thread keep the process's."""
    name = f"nice-{settings['backend']}-{lowered}"
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # before the embedder exists
    embedder = await asyncio.to_thread(
        build_embedder,
        EmbedderSettings(port=0, model_name=name, precision="fp32", runners=2, RAGMESH_EMBEDDER_THREADS=1, **settings),
    )

    def scheduling_of(kind: str) -> list[tuple[int, int]]:
        return sorted(
            (os.getpriority(os.PRIO_PROCESS, t.native_id), os.sched_getscheduler(t.native_id))
            for t in threading.enumerate()
            if t.name.startswith(f"embedder-{kind}-{name}")
        )

    model_threads = (min(19, own + lowered), os.SCHED_BATCH if lowered else os.SCHED_OTHER)
    try:
        await embedder.embed([f"text {i} " * (i + 1) for i in range(16)], _document())  # both runners at work
        await until(lambda: scheduling_of("runner") == [model_threads] * 2, f"both model threads at {model_threads}")
        assert scheduling_of("feeder") == [(own, os.SCHED_OTHER)]
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
    finally:
        embedder.close()


def _document():
    from ragmesh_embedder.service import InputType

    return InputType.DOCUMENT


def _default_folder() -> Path:
    settings = EmbedderSettings()
    return export.export_dir(settings.onnx_cache_dir, settings.model_id, Path(settings.model_path))


def _copy_default_cache(tmp_path: Path) -> Path:
    """A private copy of the default cache's fp32 export (the `local` fixture made it), so a test can break it."""
    settings = EmbedderSettings()
    source = _default_folder()
    export.ensure_export(settings.onnx_cache_dir, settings.model_id, Path(settings.model_path), "fp32")
    cache = tmp_path / "models"
    target = cache / source.name
    target.mkdir(parents=True)
    for name in ("model.onnx", "model.onnx.json"):
        shutil.copy2(source / name, target / name)
    return cache


def _restore(target: Path) -> None:
    for name in ("model.onnx", "model.onnx.json"):
        shutil.copy2(_default_folder() / name, target.with_name(name))
