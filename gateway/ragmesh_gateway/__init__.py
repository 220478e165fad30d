"""ragmesh gateway: REST (FastAPI) in front of the gRPC mesh, with one client layer (`MeshClients`) that the
REST routes and the MCP tools share."""

from .app import create_app, run_gateway
from .clients import MeshClients
from .config import GatewaySettings

__all__ = ["GatewaySettings", "MeshClients", "create_app", "run_gateway"]
