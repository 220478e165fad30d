"""The model in a process of its own, one per model thread (RAGMESH_EMBEDDER_MODEL_PROCESSES).

Why: in one process, a model thread needs Python's GIL between two model calls (to scatter the vectors, answer the
callers, take and pad the next micro-batch), and the event loop, which every request passes through, holds it most
of the time under load. The GIL goes to a waiting thread only when its holder blocks or after the switch interval
(5 ms), so the model thread waits with its core idle. A kernel trace of 32 concurrent dense searches on 2 cores
(sched_switch and sched_wakeup) showed the model threads and the feeder woken again and again only to find the GIL
taken, and the cores idle ~20-28 % of the time. A model process has a GIL of its own: its model thread's relay in
the embedder's process sends it the next micro-batch while it runs the current one (`PIPELINE`), so it runs them
back to back whatever the event loop is doing. Off by default: on 2 cores it kept the cores busier (85 against 81 %
at 32 concurrent dense searches) but the relaying and smaller micro-batches cost about as much more CPU a query, and
it measured level with the threads (README, "What the pipeline does for speed").

The protocol, over a socket pair framed by `multiprocessing.connection` (raw bytes, no pickling on the hot path):
- the embedder sends its settings first (pickled, once), then each micro-batch as int64 [rows, width], then the
  input ids and the attention mask (int64, C order);
- the model process answers `V` + the model call's seconds (float64) + the unit vectors (float32, rows x dimension),
  or `E` + a UTF-8 message when the model call raised (the process goes on);
- at start it says `R` once its backend is loaded and warmed up, or `E` + why it could not start, and exits.
It ends when the pipe closes (the embedder stopped, or died: the pipe closes with it). It ignores SIGINT, which a
terminal sends to the whole process group: the embedder decides when it stops.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection

import numpy as np
from ragmesh_common.config import ConfigError
from ragmesh_common.threads import lower_thread_priority, name_os_thread

from .backends import MicroBatch, create_backend, warm_up
from .config import EmbedderSettings

# Micro-batches a model thread keeps sent to its process: the one running and the next, so that the process never
# waits for the embedder's process between two.
PIPELINE = 2
START_TIMEOUT_SECONDS = 300.0  # an ONNX export on first start may take a minute on a slow machine
# What the operating system calls a model process (`top`, /proc/<pid>/comm; 15 bytes at most): its full name, with
# the model's and the runner's, is in the embedder's log lines.
PROCESS_NAME = "embedder-model"
_HEAD = struct.Struct("<qq")
_SECONDS = struct.Struct("<d")


class ModelProcessExited(RuntimeError):
    """The model process is gone (killed, crashed, out of memory); `exitcode` as subprocess reports it (-9: killed
    by signal 9)."""

    def __init__(self, name: str, exitcode: int | None) -> None:
        super().__init__(f"model process {name} exited (exit code {exitcode})")
        self.exitcode = exitcode


class ModelCallFailed(RuntimeError):
    """The model raised on one micro-batch (the process goes on)."""


class ModelProcess:
    """One model process and the embedder's end of its pipe. `start` it, then `wait_ready` (several load at once);
    a process that cannot load the model makes `wait_ready` raise ConfigError with its reason.

    The process is `python -m ragmesh_embedder.model_process` on the same interpreter and import path, not a
    multiprocessing child: that would import the embedding program's main module again in the new process, which
    fails for a program read from stdin or a notebook and runs the top-level code of a script that does not guard
    it."""

    def __init__(self, settings: EmbedderSettings, name: str, nice: int = 0) -> None:
        self.name = name
        self._settings, self._nice = settings, nice
        self._process: subprocess.Popen | None = None
        ours, self._theirs = socket.socketpair()
        self._conn = Connection(ours.detach())

    def start(self) -> ModelProcess:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }  # what this process imports from
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(self._theirs.fileno()), self.name, str(self._nice)],
                pass_fds=[self._theirs.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        finally:
            self._theirs.close()  # the process's end is the process's alone: its exit closes the pipe here
        try:
            self._send(pickle.dumps(self._settings))
        except ModelProcessExited:
            pass  # gone already: wait_ready says so, with its exit code
        return self

    def _send(self, message: bytes) -> None:
        try:
            self._conn.send_bytes(message)
        except (OSError, ValueError):  # EPIPE: the process is gone
            raise self._exited() from None

    def wait_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        try:
            if not self._conn.poll(timeout):
                raise ConfigError(f"model process {self.name} did not load the model within {timeout:g} s")
            answer = self._conn.recv_bytes()
        except (EOFError, OSError):  # the pipe closed: the process is gone
            raise ConfigError(
                f"model process {self.name} exited while loading the model "
                f"(exit code {self._exit_code()}); see its log above"
            ) from None
        except BaseException:
            self.close()
            raise
        if answer[:1] != b"R":
            self.close()
            raise ConfigError(
                f"model process {self.name} could not load the model: {answer[1:].decode(errors='replace')}"
            )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def submit(self, batch: MicroBatch) -> None:
        """Send a micro-batch (returns at once; the answer comes with `collect`, in the order sent)."""
        ids = np.ascontiguousarray(batch.input_ids, dtype=np.int64)
        mask = np.ascontiguousarray(batch.attention_mask, dtype=np.int64)
        self._send(b"".join((_HEAD.pack(*ids.shape), ids.data, mask.data)))

    def collect(self, rows: int) -> tuple[np.ndarray, float]:
        """The unit vectors of the oldest micro-batch sent and not collected, and the model call's seconds."""
        try:
            answer = self._conn.recv_bytes()
        except (EOFError, OSError):
            raise self._exited() from None
        if answer[:1] == b"E":
            raise ModelCallFailed(answer[1:].decode(errors="replace"))
        (seconds,) = _SECONDS.unpack_from(answer, 1)
        vectors = np.frombuffer(answer, dtype=np.float32, offset=1 + _SECONDS.size).reshape(rows, -1)
        return vectors, seconds

    def _exited(self) -> ModelProcessExited:
        return ModelProcessExited(self.name, self._exit_code())

    def _exit_code(self) -> int | None:
        if self._process is None:
            return None
        try:
            return self._process.wait(5)
        except subprocess.TimeoutExpired:
            return None

    def close(self, timeout: float = 10.0) -> None:
        """End the process: its pipe closes, it exits; killed if it has not within `timeout`."""
        self._conn.close()
        if self._process is None:
            return
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout)


def main(argv: list[str]) -> None:
    """`python -m ragmesh_embedder.model_process FD NAME NICE`: the pipe's file descriptor, the process's name (for
    logs) and how far it lowers its priority; the settings come first over the pipe."""
    fd, name, nice = int(argv[0]), argv[1], int(argv[2])
    conn = Connection(fd)
    try:
        settings = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s %(levelname)s {name} %(name)s: %(message)s")
    serve(conn, settings, name, nice)


def serve(conn: Connection, settings: EmbedderSettings, name: str, nice: int) -> None:
    """The model process: load the backend, then answer micro-batches until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_os_thread(PROCESS_NAME)
    lower_thread_priority(nice)
    try:
        backend = create_backend(settings)
        warm_up(backend)
    except BaseException as exc:  # noqa: BLE001 - told to the embedder, which stops its start-up with it
        conn.send_bytes(b"E" + f"{type(exc).__name__}: {exc}".encode())
        return
    conn.send_bytes(b"R")
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        rows, width = _HEAD.unpack_from(message)
        tokens = np.frombuffer(message, dtype=np.int64, offset=_HEAD.size).reshape(2, rows, width)
        started = time.perf_counter()
        try:
            vectors = backend.embed(MicroBatch(rows, input_ids=tokens[0], attention_mask=tokens[1]))
        except Exception as exc:  # noqa: BLE001 - this micro-batch's callers get it; the process goes on
            traceback.print_exc()
            conn.send_bytes(b"E" + f"{type(exc).__name__}: {exc}".encode())
            continue
        seconds = time.perf_counter() - started
        conn.send_bytes(b"".join((b"V", _SECONDS.pack(seconds), np.ascontiguousarray(vectors, np.float32).data)))


if __name__ == "__main__":
    main(sys.argv[1:])
