"""The status a service sends for a failed call: one mapping over gRPC (the server's error interceptor) and in
process (`inprocess`) alike."""

from __future__ import annotations

import logging

import grpc

from .errors import RagmeshError
from .reasons import Reason

# The logger it has always logged under (in `server`, where it was defined): log filters may name it.
log = logging.getLogger("ragmesh_common.server")


def status_error(exc: BaseException, domain: str, method: str) -> RagmeshError:
    """The error a service sends for a call that failed with `exc` (logged): a domain error with its domain
    set, anything else INTERNAL without its details. Over gRPC and in process (`inprocess`) alike."""
    if isinstance(exc, RagmeshError):
        err = exc.with_domain(domain)
        log.info("%s -> %s %s: %s", method, err.code.name, err.reason, err.message)
        return err
    log.error("%s failed unexpectedly", method, exc_info=exc)
    return RagmeshError(
        grpc.StatusCode.INTERNAL,
        Reason.INTERNAL_ERROR,
        f"internal error in {method}: {type(exc).__name__}",
        domain,
    )
