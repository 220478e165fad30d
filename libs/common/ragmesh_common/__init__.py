"""Code every ragmesh process shares: settings, errors, gRPC server and client plumbing, logging, the CLI."""
