"""API keys with scopes, per-key rate limits, and `require_scope`: the one FastAPI dependency every /api/v1 route
declares.

`RAGMESH_API_KEYS` is a comma-separated list of entries `KEY[:SCOPE[:COLLECTIONS[:RATE]]]`:

    RAGMESH_API_KEYS="k-reader:read, k-notes:write:notes|drafts, k-ops:admin, k-bot:write:*:5, k-legacy"

- SCOPE is `read` (search, fetch, list, convert), `write` (read + ingest and delete documents) or `admin`
  (write + delete collections). A bare KEY (the format before scopes existed) is `admin`.
- COLLECTIONS is `|`-separated collection names the key may touch, or `*` (every collection, the default).
  `GET /api/v1/collections` lists only those.
- RATE is this key's limit in requests per second (burst RAGMESH_RATE_LIMIT_BURST; see `RateLimiter`), overriding
  RAGMESH_RATE_LIMIT_PER_SECOND; 0 means unlimited.

A malformed entry stops start-up with a message naming its position (never the key). Keys are compared in
constant time. Without keys there is no auth (the gateway then binds loopback only unless told otherwise);
RAGMESH_RATE_LIMIT_PER_SECOND still limits each client address.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import grpc
from fastapi import APIRouter, Depends, Request
from fastapi.routing import APIRoute
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.errors import StorageError
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, SecretStr
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason

from .errors import DOMAIN

log = logging.getLogger(__name__)

# How long one rate-limit call to Redis may take before the request is let through without it.
REDIS_TIMEOUT_SECONDS = 0.5

Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
_RANK = {scope: rank for rank, scope in enumerate(SCOPES)}

# The scheme OpenAPI documents when keys are set (the "Authorize" button in /docs), named as FastAPI names an
# HTTPBearer dependency's. The check reads the raw header (`request_principal`).
BEARER_SCHEME = {"HTTPBearer": {"type": "http", "scheme": "bearer", "description": "An API key from RAGMESH_API_KEYS."}}


class ApiKey(BaseModel):
    """One entry of RAGMESH_API_KEYS."""

    model_config = ConfigDict(frozen=True)

    secret: SecretStr
    scope: Scope = "admin"
    collections: frozenset[str] | None = None  # None: every collection
    rate_limit: float | None = None  # requests/s; None: RAGMESH_RATE_LIMIT_PER_SECOND
    position: int = 0  # 1-based, to name the key in logs without its secret

    def get_secret_value(self) -> str:
        return self.secret.get_secret_value()


def parse_api_keys(value: object) -> object:
    """RAGMESH_API_KEYS -> ApiKey entries; ValueError naming the entry's position (never its secret)."""
    if not isinstance(value, str):
        return value
    keys: list[ApiKey] = []
    seen: set[str] = set()
    entries = [entry.strip() for entry in value.split(",")]
    for position, entry in enumerate((e for e in entries if e), start=1):
        parts = [part.strip() for part in entry.split(":")]
        where = f"entry {position}"
        if len(parts) > 4:
            raise ValueError(f"{where} has {len(parts)} ':'-separated fields; use KEY[:SCOPE[:COLLECTIONS[:RATE]]]")
        secret, scope, collections, rate = (parts + ["", "", ""])[:4]
        if not secret:
            raise ValueError(f"{where} has an empty key")
        if secret in seen:
            raise ValueError(f"{where} repeats an earlier key")
        seen.add(secret)
        if scope and scope not in SCOPES:
            raise ValueError(f"{where} has scope {scope[:20]!r}; use read, write or admin")
        names: frozenset[str] | None = None
        if collections and collections != "*":
            names = frozenset(name.strip() for name in collections.split("|"))
            bad = sorted(name for name in names if not validation.COLLECTION_NAME_RE.fullmatch(name))
            if bad:
                raise ValueError(f"{where} names invalid collection(s) {', '.join(repr(b[:40]) for b in bad)}")
        limit: float | None = None
        if rate:
            try:
                limit = float(rate)
            except ValueError:
                limit = -1.0
            if not math.isfinite(limit) or limit < 0:
                raise ValueError(f"{where} has rate {rate[:20]!r}; use requests per second (0 = unlimited)")
        keys.append(
            ApiKey(
                secret=SecretStr(secret), scope=scope or "admin", collections=names, rate_limit=limit, position=position
            )
        )
    return tuple(keys)


class Principal(BaseModel):
    """Who is calling: a key (its scope and collections) or, without keys, an anonymous client."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    collections: frozenset[str] | None = None
    client: str  # the rate limiter's bucket: "key:<position>" or "addr:<client address>"
    rate_limit: float | None = None

    def allows(self, scope: Scope) -> bool:
        return _RANK[self.scope] >= _RANK[scope]

    def require(self, scope: Scope) -> None:
        """PERMISSION_DENIED SCOPE_INSUFFICIENT unless this principal's scope covers `scope`."""
        if not self.allows(scope):
            raise RagmeshError(
                grpc.StatusCode.PERMISSION_DENIED,
                Reason.SCOPE_INSUFFICIENT,
                f"this API key has scope {self.scope!r}; this needs {scope!r}",
                DOMAIN,
                {"scope": self.scope, "required_scope": scope},
            )

    def may_touch(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    def require_collections(self, names: Iterable[str]) -> None:
        """PERMISSION_DENIED COLLECTION_FORBIDDEN for the first collection this key may not touch."""
        for name in names:
            if not self.may_touch(name):
                raise RagmeshError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    Reason.COLLECTION_FORBIDDEN,
                    f"this API key may not use collection {name[:80]!r}",
                    DOMAIN,
                    {"collection": name[:80], "allowed_collections": ",".join(sorted(self.collections or ()))},
                )

    def visible(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if self.may_touch(name)]


def authenticate(authorization: str | None, keys: Sequence[ApiKey], client_address: str = "") -> Principal:
    """The principal for a request: anonymous admin when no keys are configured, else the key presented as
    `Bearer <key>` (UNAUTHENTICATED API_KEY_MISSING / API_KEY_INVALID otherwise). Every key is compared in
    constant time, and all of them are compared whichever matches."""
    if not keys:
        return Principal(scope="admin", client=f"addr:{client_address}")
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise RagmeshError(
            grpc.StatusCode.UNAUTHENTICATED,
            Reason.API_KEY_MISSING,
            "this API needs an API key: send 'Authorization: Bearer <key>'",
            DOMAIN,
        )
    presented = token.encode()
    found: ApiKey | None = None
    for key in keys:
        if hmac.compare_digest(presented, key.get_secret_value().encode()):
            found = key
    if found is None:
        raise RagmeshError(grpc.StatusCode.UNAUTHENTICATED, Reason.API_KEY_INVALID, "the API key is not valid", DOMAIN)
    return Principal(
        scope=found.scope, collections=found.collections, client=f"key:{found.position}", rate_limit=found.rate_limit
    )


def check_api_key(authorization: str | None, keys: Sequence[ApiKey]) -> Principal:
    """`authenticate` without a client address (kept for callers of the pre-scope API)."""
    return authenticate(authorization, keys)


# --- rate limits --------------------------------------------------------------------------------------------
class RateLimiter:
    """One budget per client (a key, or an address without keys), kept by the `limits` library: in Redis when
    `redis_url` is set, so every gateway replica charges and reads the same budget, else in this process's memory.

    The strategy is limits' moving window: at most `burst` requests in any `burst / rate` seconds (the window
    rounded up to whole seconds, as Redis expiries are). That is the token bucket's promise where it matters: a
    client may send `burst` requests at once, and its long-run average is `rate` (or a little less when the window
    was rounded). It is exact, where the fixed window lets twice the burst through across a window's edge and the
    sliding window counter estimates; and its state, the times of the last `burst` requests, is what Retry-After
    is computed from (the oldest of them plus the window), so every replica answers the same instant.

    When Redis cannot be reached the request is let through (fail open): the limit protects capacity, it does
    not decide who may call (keys and scopes still do), and a Redis outage should not take the API down with it.
    Each such request is logged and counted (`ragmesh_gateway_rate_limit_store_errors_total`)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        redis_url: str = "",
        redis_prefix: str = "ragmesh:gateway:",
        errors: Counter | None = None,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._errors = errors
        storage: Storage
        if redis_url:
            # redis-py's asyncio client (already a dependency of the mesh), not limits' default coredis. Short
            # socket timeouts: a Redis that hangs costs a request at most this long before it fails open.
            storage = RedisStorage(
                f"async+{redis_url}",
                implementation="redispy",
                key_prefix=f"{redis_prefix}ratelimit",
                wrap_exceptions=True,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
        else:
            storage = MemoryStorage()
        self._limiter = MovingWindowRateLimiter(storage)

    def limit(self, rate: float) -> RateLimitItem:
        """The moving window for `rate` requests/s: `burst` requests (default twice the rate, at least 1) per
        `burst / rate` seconds, rounded up to whole seconds."""
        burst = self.burst or max(1, math.ceil(2 * rate))
        return RateLimitItemPerSecond(burst, max(1, math.ceil(burst / rate)))

    async def acquire(self, client: str, rate: float | None = None) -> float:
        """Charge one request to `client`; returns 0 when allowed, else the seconds until the window has room.
        `rate` overrides the default rate for this client (0: unlimited)."""
        rate = self.rate if rate is None else rate
        if rate <= 0:
            return 0.0
        item = self.limit(rate)
        try:
            if await self._limiter.hit(item, client):
                return 0.0
            stats = await self._limiter.get_window_stats(item, client)
        except StorageError as exc:
            if self._errors is not None:
                self._errors.inc()
            log.warning("rate limit store unreachable; request let through", extra={"error": str(exc.storage_error)})
            return 0.0
        # The window may have freed a slot between the two calls: then a retry right away succeeds.
        return max(0.001, stats.reset_time - time.time())

    async def check(self, principal: Principal) -> None:
        """RESOURCE_EXHAUSTED RATE_LIMITED (429 with Retry-After) when the principal is over its limit."""
        wait = await self.acquire(principal.client, principal.rate_limit)
        if wait > 0:
            raise RagmeshError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                Reason.RATE_LIMITED,
                f"too many requests; retry in {wait:.2f} s",
                DOMAIN,
                {"retry_after_seconds": f"{wait:.3f}"},
                retry_after=wait,
            )


# --- the dependency ------------------------------------------------------------------------------------------
async def touched_collections(request: Request) -> list[str]:
    """The collections a request names: path parameter `name`/`collection`, query `collection(s)`, JSON body
    `collection`/`collections`, or form field `collection`; ["default"] when it names none."""
    names: list[str] = []
    for key in ("name", "collection"):
        if isinstance(request.path_params.get(key), str):
            names.append(request.path_params[key])
    names += request.query_params.getlist("collection") + request.query_params.getlist("collections")
    content_type = request.headers.get("content-type", "")
    body: Any = None
    if content_type.startswith("application/json"):
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            body = None
    elif content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        body = {"collection": (await request.form()).get("collection")}
    if isinstance(body, dict):
        if isinstance(body.get("collection"), str):
            names.append(body["collection"])
        if isinstance(body.get("collections"), list):
            names += [name for name in body["collections"] if isinstance(name, str)]
    return [name or validation.DEFAULT_COLLECTION for name in names] or [validation.DEFAULT_COLLECTION]


async def request_principal(request: Request) -> Principal:
    """Authenticate a request and charge it to its client's rate limit (once per request)."""
    principal = getattr(request.state, "principal", None)
    if principal is None:
        state = request.app.state
        principal = authenticate(
            request.headers.get("authorization"), state.settings.api_keys, request.client.host if request.client else ""
        )
        await state.rate_limiter.check(principal)
        request.state.principal = principal
    return principal


def require_scope(scope: Scope, *, collections: bool = True) -> Any:
    """The dependency every /api/v1 route declares (`dependencies=[require_scope("write")]`, or as a parameter
    `principal: Annotated[Principal, require_scope("read")]`): authenticates the key, enforces its rate limit
    and scope, and, when the key is limited to some collections and `collections` is true, that the
    collections the request names are among them. `create_app` refuses to start when an /api/v1 route
    declares none."""

    async def scoped(request: Request) -> Principal:
        principal = await request_principal(request)
        principal.require(scope)
        if collections and principal.collections is not None:
            principal.require_collections(await touched_collections(request))
        return principal

    scoped.ragmesh_scope = scope  # type: ignore[attr-defined]  # found by create_app's check
    return Depends(scoped)


def document_bearer_auth(schema: dict[str, Any], routers: Iterable[APIRouter]) -> None:
    """Declare bearer auth in an OpenAPI document: the scheme, and on each operation of a route that declares a
    scope (on the route or its router) its requirement. What FastAPI writes for a security dependency, without a
    dependency that FastAPI would solve on every request only for the document."""
    schema.setdefault("components", {}).setdefault("securitySchemes", {}).update(BEARER_SCHEME)
    paths = schema.get("paths", {})
    for router in routers:
        scoped = any(getattr(d.dependency, "ragmesh_scope", None) for d in router.dependencies)
        for route in router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema and (scoped or route_scope(route.dependant)):
                for method in route.methods or ():
                    if (operation := paths.get(route.path_format, {}).get(method.lower())) is not None:
                        operation["security"] = [{name: [] for name in BEARER_SCHEME}]


def route_scope(dependant: Any) -> Scope | None:
    """The scope a route declared with `require_scope` (searching its dependency tree), else None."""
    for dependency in dependant.dependencies:
        scope = getattr(dependency.call, "ragmesh_scope", None) or route_scope(dependency)
        if scope:
            return scope
    return None
