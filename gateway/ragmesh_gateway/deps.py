"""FastAPI dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from ragmesh_common.errors import invalid_argument
from ragmesh_common.reasons import Reason

from .clients import MeshClients


async def get_clients(request: Request) -> MeshClients:
    """The app's one MeshClients (created in the lifespan, or given to create_app). Async so that FastAPI calls
    it on the event loop: a plain function would be run on a worker thread, a thread hop on every request."""
    return request.app.state.clients


Clients = Annotated[MeshClients, Depends(get_clients)]


def one_value_per_field(*names: str) -> Any:
    """A dependency answering 400 REQUEST_INVALID, naming the field, when one of the form fields `names` is sent
    more than once: each holds one value, and which of several to take would be a guess (found by schemathesis:
    `title` sent three times was taken as the last). Fields a route does not declare are ignored, as before."""

    async def once(request: Request) -> None:
        form = await request.form()
        for name in names:
            if (count := len(form.getlist(name))) > 1:
                raise invalid_argument(
                    Reason.REQUEST_INVALID, f"form field {name!r} was sent {count} times; send it once", field=name
                )

    return Depends(once)
