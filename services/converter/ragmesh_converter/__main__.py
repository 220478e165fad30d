"""`python -m ragmesh_converter`: run the converter alone until SIGTERM (one service per process)."""

from __future__ import annotations

import asyncio

from ragmesh_common.config import load
from ragmesh_common.logs import setup_logging
from ragmesh_common.server import serve_forever

from .config import ConverterSettings
from .server import create_server


def main() -> None:
    settings = load(ConverterSettings)
    setup_logging("converter", settings.log_level)

    async def run() -> None:
        await serve_forever([create_server(settings)])

    asyncio.run(run())


if __name__ == "__main__":
    main()
