"""Code every ragmesh process shares: settings, errors, gRPC server and client plumbing, telemetry, logging.

It knows no service and no gateway: those and the `ragmesh` CLI (ragmesh_cli) build on it, never the reverse."""
