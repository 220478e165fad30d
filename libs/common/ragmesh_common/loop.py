"""The event loop a serving process runs on (`ragmesh up`, `ragmesh serve`): uvloop where it is installed, else
asyncio's own.

One event loop carries a process's HTTP, its gRPC servers and, in `ragmesh up`, the calls its services make to
each other; under load it is what a search waits for. uvloop's loop and transports spend less CPU per request on
it (docs/decisions/uvloop.md). uvloop has no Windows build: there `auto` is asyncio's loop.

  RAGMESH_EVENT_LOOP   auto (default: uvloop when installed), uvloop (required), asyncio
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .config import ConfigError, load
from .threads import named_pool

T = TypeVar("T")
EventLoop = Literal["auto", "uvloop", "asyncio"]


class LoopSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    event_loop: EventLoop = Field(
        "auto",
        validation_alias="RAGMESH_EVENT_LOOP",
        description=(
            "The event loop of `ragmesh up` and `ragmesh serve`: auto (uvloop when installed, else asyncio's), uvloop "
            "(fail at start-up without it) or asyncio."
        ),
    )


def loop_factory(choice: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the loop `choice` names; None for asyncio's default."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                "RAGMESH_EVENT_LOOP=uvloop: uvloop is not installed (pip install uvloop; it has no "
                "Windows build); use auto or asyncio"
            ) from None
        return None
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """Which loop `loop` is, "uvloop" or "asyncio" (for the start-up log)."""
    return "uvloop" if type(loop).__module__.partition(".")[0] == "uvloop" else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the loop RAGMESH_EVENT_LOOP names (a ConfigError when it is not a valid one)."""
    try:
        factory = loop_factory(load(LoopSettings).event_loop)
    except BaseException:
        main.close()  # never awaited: no "coroutine was never awaited" warning on top of the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        # asyncio.to_thread's and run_in_executor(None)'s threads, named for the operating system too (.threads).
        runner.get_loop().set_default_executor(named_pool(prefix="event-loop-pool"))
        return runner.run(main)
