"""JSON logs on stdout, one implementation for every process."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import queue
import sys
from datetime import UTC, datetime
from typing import TextIO

from opentelemetry import trace

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": getattr(record, "service", None) or self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:  # tracing on and a span current: the log line joins its trace
            entry["trace_id"] = trace.format_trace_id(context.trace_id)
            entry["span_id"] = trace.format_span_id(context.span_id)
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_") and key not in entry:
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _FormattedQueueHandler(logging.handlers.QueueHandler):
    """Formats a record where it is made (so it carries that thread's current trace) and queues the line."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = super().prepare(record)  # the JSON line in `msg`; exception text already in it
        record.stack_info = None
        return record


class _LineWriter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return record.msg


_writer: logging.handlers.QueueListener | None = None


def setup_logging(service: str, level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send every log record to stdout as one JSON object per line. A line is formatted in the thread that
    logs it and written by a thread of its own, as the logging cookbook advises for asyncio code ("Dealing with
    handlers that block"): the event loop never waits on stdout (a pipe, a terminal, a log collector) nor, while
    its write is in the kernel, on the other threads for the GIL. Lines still queued are written at exit.
    `stream`: stderr for processes whose stdout carries a protocol (MCP over stdio)."""
    global _writer
    if _writer is not None:
        _writer.stop()
    lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    output = logging.StreamHandler(stream or sys.stdout)
    output.setFormatter(_LineWriter())
    _writer = logging.handlers.QueueListener(lines, output)
    handler = _FormattedQueueHandler(lines)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    _writer.start()
    for noisy in ("httpx", "httpcore", "urllib3", "filelock", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def log_to_stderr() -> None:
    """Move every log handler that writes to stdout (the writer thread's, or one on the root logger) to stderr:
    for a process whose stdout is about to carry a protocol."""
    handlers = [*logging.getLogger().handlers, *(_writer.handlers if _writer is not None else ())]
    for handler in handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


@atexit.register
def _flush_at_exit() -> None:
    """Write what is still queued (atexit runs before logging's own shutdown, which then flushes stdout)."""
    global _writer
    if _writer is not None:
        _writer.stop()
        _writer = None
