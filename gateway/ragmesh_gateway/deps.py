"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .clients import MeshClients


async def get_clients(request: Request) -> MeshClients:
    """The app's one MeshClients (created in the lifespan, or given to create_app). Async so that FastAPI calls
    it on the event loop: a plain function would be run on a worker thread, a thread hop on every request."""
    return request.app.state.clients


Clients = Annotated[MeshClients, Depends(get_clients)]
