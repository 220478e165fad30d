"""A store that notes where its calls run: which thread serves each store method of a service."""

from __future__ import annotations

import threading


class ThreadNotingStore:
    """Passes every store call through to the real store, noting (method, thread name) of each in `ran`;
    `holds_gil` as given (whether a service calls it on its event loop's thread)."""

    def __init__(self, target, holds_gil: bool) -> None:
        self._target, self.holds_gil, self.ran = target, holds_gil, []

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def noted(*args, **kwargs):
            self.ran.append((name, threading.current_thread().name))
            return value(*args, **kwargs)

        return noted

    def threads(self) -> set[str]:
        """The names of the threads that served a call."""
        return {thread for _, thread in self.ran}
