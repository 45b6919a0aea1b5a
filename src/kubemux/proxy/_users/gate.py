"""``kubemux proxy --user-tokens``: who each request is from, and whether the cache may
answer it for them.

Every request carries the user's own bearer token for the context's cluster. The
:class:`UserGate` (one per proxy) does, before anything is routed:

1. **authentication**: the context's authorizer (``registry.authorizer(context)``, which
   serves nothing until the context's RBAC informers have synced) asks a TokenReview,
   cached by the token's hash; an invalid token gets the API server's 401;
2. **authorization** of what the proxy may answer itself (a GET, LIST or WATCH of a
   resource, a discovery or OpenAPI document), with the attributes kube-apiserver's
   ``RequestInfoFactory`` reads from the request: local RBAC, then a SubjectAccessReview
   before any denial; a denial is the API server's 403, word for word. It comes before
   routing, so a user who may not list a resource learns nothing of whether it exists.

Everything else is not checked here: it goes upstream with the user's token (the API
server authorizes and audits it as that user). The request's :class:`Caller` is kept in a
context variable for the rest of its handling (the upstream it uses, the audit record).
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import time
import urllib.parse
from collections import OrderedDict

import anyio
import orjson
from starlette.types import Scope

from ..._authz.attributes import Attributes, request_attributes
from ..._authz.authorizer import Authorizer
from ..._authz.user import User
from ..._errors import ContextNotFound, KubemuxError, NotSynced, Unauthorized
from ..._registry.registry import WatcherRegistry
from .._api.paths import ApiPath
from .._api.responses import StatusError

__all__ = ["CALLER", "Caller", "UserGate", "bearer_token", "user_key"]

_CACHED_VERBS = frozenset({"get", "list", "watch"})
_KNOWN_MAX = 65_536  # token hashes remembered as authenticated (connection admission)
_ATTRIBUTES_KEPT = 4096  # requests' attributes kept (a dashboard asks the same few paths)

CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "kubemux_proxy_caller", default=None
)
"""The user the request being handled comes from (``--user-tokens``), else None."""


def user_key(user: User) -> str:
    """A key of the user's whole identity (name, uid, groups, extra): what per-user caps,
    continue tokens and caps are bound to. Two tokens of one user share it."""
    digest = hashlib.sha256(
        orjson.dumps(
            [user.name, user.uid, list(user.groups), sorted(user.extra.items())],
        )
    )
    return "user:" + digest.hexdigest()[:32]


def bearer_token(scope: Scope) -> str | None:
    """The bearer token of the request's ``Authorization`` header, or None."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() != b"bearer":
                return None
            token = token.strip()
            try:
                return token.decode("ascii") if token else None
            except UnicodeDecodeError:
                return None
    return None


@dataclasses.dataclass(slots=True, eq=False)
class Caller:
    """One request's user and what was decided for it (mutable: the audit record).

    Attributes:
        context: The context asked.
        user: Who TokenReview says the token is.
        key: :func:`user_key` of ``user``.
        attrs: The request's attributes, when they could be read.
        decision: ``cache``, ``upstream`` or ``denied`` (what the audit log says).
        by: What decided: the role that allowed, ``review``, ``system:masters``.
    """

    context: str
    user: User
    key: str
    authz: Authorizer = dataclasses.field(repr=False)
    token: str = dataclasses.field(repr=False)
    attrs: Attributes | None = None
    decision: str = "upstream"
    by: str = ""
    started: float = dataclasses.field(default_factory=time.time)


class UserGate:
    """Authentication and the authorization of cached answers, per request (see the module).

    Args:
        registry: Whose contexts' authorizers decide.
        start_timeout: Seconds a request waits for its context's RBAC informers (then 503).
    """

    def __init__(self, registry: WatcherRegistry, *, start_timeout: float) -> None:
        self.registry = registry
        self.start_timeout = start_timeout
        self._known: OrderedDict[bytes, None] = OrderedDict()
        self._synced: dict[str, Authorizer] = {}  # by context: the fast path
        self._keys: dict[User, str] = {}
        self._attributes: dict[tuple[str, str, str, bytes], Attributes | None] = {}

    def __repr__(self) -> str:
        return f"<UserGate known-tokens={len(self._known)}>"

    # ------------------------------------------------------------------ admission
    def vouches(self, header: bytes) -> bool:
        """Whether an ``Authorization`` header holds a token that authenticated here (the
        server trusts such a connection; see :mod:`..._serve.admission`)."""
        scheme, _, token = header.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hashlib.sha256(token.strip()).digest() in self._known

    def _remember(self, token: str) -> None:
        key = hashlib.sha256(token.encode("ascii")).digest()
        self._known[key] = None
        self._known.move_to_end(key)
        while len(self._known) > _KNOWN_MAX:
            self._known.popitem(last=False)

    async def _authorizer(self, context: str) -> Authorizer:
        found = self._synced.get(context)
        if found is not None and found.has_synced and context in self.registry.contexts:
            return found
        try:
            with anyio.fail_after(self.start_timeout):
                found = self._synced[context] = await self.registry.authorizer(context)
                return found
        except (TimeoutError, NotSynced):
            raise StatusError(
                503,
                f"kubemux proxy: context {context!r}: its RBAC informers have not synced: "
                "no request is answered for a user before they have",
                headers={"Retry-After": "5"},
            ) from None
        except ContextNotFound:
            raise StatusError(
                404, f"kubemux proxy: context {context!r} not found in the kubeconfig"
            ) from None
        except KubemuxError as exc:
            raise StatusError(
                503,
                f"kubemux proxy: context {context!r}: cannot follow its RBAC objects: {exc}",
                headers={"Retry-After": "5"},
            ) from None

    async def authenticate(self, context: str, scope: Scope) -> Caller:
        """The request's :class:`Caller`.

        Raises:
            StatusError: 401 (no bearer token, or one the API server does not accept: its
                own ``Unauthorized`` Status); 503 while the context's RBAC informers have not
                synced, or when the kubeconfig's user may not review tokens.
        """
        token = bearer_token(scope)
        if token is None:
            raise StatusError(401, "Unauthorized")
        authz = await self._authorizer(context)
        try:
            user = await authz.authenticate(token)
        except Unauthorized:
            raise StatusError(401, "Unauthorized") from None
        except KubemuxError as exc:
            raise StatusError(
                503,
                f"kubemux proxy: context {context!r}: cannot review tokens: {exc}",
                headers={"Retry-After": "5"},
            ) from None
        self._remember(token)
        key = self._keys.get(user)
        if key is None:
            if len(self._keys) >= _KNOWN_MAX:
                self._keys.clear()
            key = self._keys[user] = user_key(user)
        return Caller(context, user, key, authz, token)

    # ------------------------------------------------------------------ authorization
    def attributes(self, method: str, path: ApiPath, query: bytes) -> Attributes | None:
        """The request's attributes as the API server reads them; None when it cannot
        (the API server's own answer is then the one to give). Kept per (method, path,
        query), a few thousand at most: they are values, the same for every user."""
        key = (method, path.raw, path.kind, query)
        if key in self._attributes:
            return self._attributes[key]
        attrs = _attributes(method, path, query)
        if len(self._attributes) >= _ATTRIBUTES_KEPT:
            self._attributes.clear()
        self._attributes[key] = attrs
        return attrs

    @staticmethod
    def answered_here(method: str, path: ApiPath, attrs: Attributes | None) -> bool:
        """Whether the proxy may answer this request itself (so must authorize it first)."""
        if method != "GET" or attrs is None:
            return False
        if path.kind == "discovery":
            return True
        return path.kind == "resource" and attrs.verb in _CACHED_VERBS and not attrs.subresource

    async def authorize(self, caller: Caller, attrs: Attributes) -> None:
        """Let the request on, or raise the API server's 403 for it.

        Raises:
            StatusError: 403 with the API server's Status body; 503 when the context's
                RBAC informers are re-listing past the wait.
        """
        try:
            decision = await caller.authz.decide(caller.user, attrs)
        except NotSynced:
            raise StatusError(
                503,
                f"kubemux proxy: context {caller.context!r}: its RBAC informers are re-listing",
                headers={"Retry-After": "5"},
            ) from None
        role = decision.role
        caller.by = decision.by if role is None else "/".join(p for p in role if p)
        if decision.allowed:
            return
        caller.decision = "denied"
        body = caller.authz.forbidden(caller.user, attrs, decision)
        raise StatusError(403, body["message"], raw=orjson.dumps(body))


def _attributes(method: str, path: ApiPath, query: bytes) -> Attributes | None:
    decoded = urllib.parse.unquote(path.raw) if "%" in path.raw else path.raw
    if path.kind != "resource":
        return Attributes.non_resource(method.lower(), decoded)
    text = query.decode("latin-1")
    pairs = urllib.parse.parse_qsl(text, keep_blank_values=True) if text else ()
    try:
        return request_attributes(method, decoded, pairs)
    except ValueError:
        return None
