"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .clients import MeshClients


def get_clients(request: Request) -> MeshClients:
    """The app's one MeshClients (created in the lifespan, or given to create_app)."""
    return request.app.state.clients


Clients = Annotated[MeshClients, Depends(get_clients)]
