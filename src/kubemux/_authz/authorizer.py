"""One context's authorizer: who a token is, and what that user may do, as its API server says.

``authz = await registry.authorizer("prod")`` watches the context's Roles, ClusterRoles,
RoleBindings and ClusterRoleBindings (serving nothing until all four have synced), and:

* ``await authz.authenticate(token)`` asks a TokenReview with the kubeconfig's credentials,
  kept under the token's hash for ``min(token_ttl, the token's own remaining lifetime)``, an
  invalid token for ``token_failure_ttl``; an invalid token raises :class:`Unauthorized`;
* ``await authz.allowed(user, "list", "pods", namespace="web")`` evaluates RBAC locally (a
  permission set per user, microseconds) and, before any denial, asks a
  SubjectAccessReview (the cluster may run a webhook or Node authorizer that allows), kept
  ``allow_ttl`` (5 min) when allowed, ``deny_ttl`` (30 s) when denied, as kube-apiserver's
  webhook authorizer cache does. A request local RBAC allows costs no review;
* ``await authz.wait_revoked(user, attrs)`` returns once that user may no longer do that
  (an open watch ends then): the store listeners change the policy in the step the RBAC
  change is applied, and wake every waiter;
* ``authz.namespaces(user, "list", "pods")`` and ``authz.list_as(...)`` read a store as a
  user: the namespaces they may list (rancher/steve's "partition"), for dashboards.

Consistency: RBAC here is what the context's informers hold, eventually consistent with
the cluster (a change reaches kubemux about when it reaches kube-apiserver's own informers);
a SubjectAccessReview's answer may be ``allow_ttl`` old. See ``docs/many-users.md``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import orjson

from .._cache.history import HistoryEvent
from .._cache.store import Store
from .._errors import KubemuxError, NotSynced, Unauthorized
from .._resources import Resource
from .attributes import Attributes
from .caches import ExpiringCache, token_expiry, token_key
from .forbidden import forbidden_status
from .permissions import PermissionCache
from .rbac import Kind, RbacPolicy
from .reviews import (
    ACCESS_REVIEW_PATH,
    TOKEN_REVIEW_PATH,
    access_review_body,
    read_access_review,
    read_token_review,
    token_review_body,
)
from .settings import RBAC_RESOURCES, AccessDecision, AuthorizerSettings
from .user import User

__all__ = [
    "RBAC_RESOURCES",
    "AccessDecision",
    "Authorizer",
    "AuthorizerSettings",
    "AuthzSource",
]

log = logging.getLogger(__name__)

MAX_TOKEN = 64 * 1024
"""Bytes of a bearer token kubemux sends to a TokenReview at most (longer: 401 at once)."""
_INVALID = object()


class AuthzSource(Protocol):
    """What an authorizer needs of its context (the registry gives it)."""

    async def watch(self, resource: Resource) -> Store:
        """The synced store of ``resource`` (cluster-wide)."""
        ...

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` (JSON) with the context's credentials: ``(status, answer)``."""
        ...


def _resource_parts(resource: str | Resource) -> tuple[str, str]:
    if isinstance(resource, Resource):
        return resource.plural, resource.group
    plural, _, group = resource.partition(".")
    return plural, group


class Authorizer:
    """Authentication and authorization for one context; see the module docstring.

    Built and run by the registry (:meth:`WatcherRegistry.authorizer`); one per context,
    shared by everything that serves users of it (the proxy, a dashboard).
    """

    def __init__(
        self,
        context: str,
        source: AuthzSource,
        settings: AuthorizerSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context = context
        self.settings = settings = settings or AuthorizerSettings()
        self._source = source
        self.policy = RbacPolicy()
        self.permissions = PermissionCache(self.policy, max_users=settings.max_users)
        self._tokens: ExpiringCache[bytes, object] = ExpiringCache(settings.max_tokens, clock=clock)
        self._reviews: ExpiringCache[tuple[Any, ...], tuple[bool, str]] = ExpiringCache(
            settings.max_reviews, clock=clock
        )
        self._synced = False
        self._error: BaseException | None = None
        self._state_changed = anyio.Event()
        self._policy_changed = anyio.Event()
        self._reset = anyio.Event()
        self._removers: list[Callable[[], None]] = []
        self.reviews_sent = 0
        self.token_reviews_sent = 0

    def __repr__(self) -> str:
        state = "synced" if self._synced else ("failing" if self._error else "syncing")
        return (
            f"<Authorizer {self.context!r} {state} rbac-version={self.policy.version} "
            f"users={len(self.permissions)} tokens={len(self._tokens)} "
            f"reviews={len(self._reviews)}>"
        )

    # ------------------------------------------------------------------ feeding
    @property
    def has_synced(self) -> bool:
        """True while the four RBAC informers are synced and followed."""
        return self._synced

    @property
    def version(self) -> int:
        """The RBAC policy's version: grows at every change of a right."""
        return self.policy.version

    def _state(self) -> None:
        self._state_changed.set()
        self._state_changed = anyio.Event()

    def _bump(self) -> None:
        self._policy_changed.set()
        self._policy_changed = anyio.Event()

    def _on_event(self, kind: Kind, event: HistoryEvent) -> None:
        if event.type == "RESET":
            self._synced = False
            self._reset.set()
            self._state()
            return
        if event.type == "DELETED":
            changed = self.policy.delete(kind, event.namespace, event.name)
        elif event.type in ("ADDED", "MODIFIED"):
            try:
                obj = orjson.loads(event.raw)
            except orjson.JSONDecodeError:
                return
            changed = isinstance(obj, dict) and self.policy.put(kind, obj)
        else:
            return
        if changed:
            self._bump()

    def _attach(self, stores: dict[Kind, Store]) -> bool:
        """Load the stores and follow them, in one synchronous step (no change between)."""
        if not all(store.has_synced for store in stores.values()):
            return False
        changed = False
        for kind, store in stores.items():
            changed |= self.policy.replace(kind, store.list())
            listener = functools.partial(self._on_event, kind)
            self._removers.append(store.history.add_listener(listener))
        self._synced, self._error = True, None
        if changed:
            self._bump()
        self._state()
        return True

    def _detach(self) -> None:
        for remove in self._removers:
            remove()
        self._removers.clear()
        self._synced = False
        self._reset = anyio.Event()

    async def run(self) -> None:
        """Follow the context's RBAC objects until cancelled (the owner's task group)."""
        delay = 1.0
        try:
            while True:
                try:
                    stores: dict[Kind, Store] = {}
                    for kind, resource in RBAC_RESOURCES.items():
                        stores[kind] = await self._source.watch(resource)
                except KubemuxError as exc:
                    self._error = exc
                    self._state()
                    log.warning("context %r: RBAC informers failed: %s", self.context, exc)
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
                delay = 1.0
                if self._attach(stores):
                    await self._reset.wait()
                self._detach()
                await anyio.lowlevel.checkpoint()
        finally:
            self._detach()

    async def wait_synced(self) -> None:
        """Return once the RBAC informers have synced.

        Raises:
            NotSynced: not within ``sync_timeout`` (chained to the informers' error).
            KubemuxError: the informers' error, when they failed and nothing is known.

        Cancellation just stops the wait.
        """
        with anyio.move_on_after(self.settings.sync_timeout):
            while not self._synced:
                if self._error is not None and self.policy.version == 0:
                    raise self._error
                await self._state_changed.wait()
            return
        raise NotSynced(f"context {self.context!r}: RBAC informers not synced") from self._error

    async def wait_changed(self, version: int) -> int:
        """Return the policy's version once it differs from ``version`` (at once if it
        does). Cancellation just stops the wait."""
        while self.policy.version == version:
            await self._policy_changed.wait()
        return self.policy.version

    # ------------------------------------------------------------------ authentication
    async def authenticate(self, token: str) -> User:
        """The user ``token`` authenticates as, by a TokenReview (cached; see the module).

        Raises:
            Unauthorized: the token is not valid (the API server's 401).
            ApiError: the review failed (403: the kubeconfig's credentials may not create
                TokenReviews). Not cached.
            ClusterUnreachable, ServerTimeout, ProtocolError: likewise.

        Cancellation abandons the review (another caller waiting for it then sends its own).
        """
        if not token or len(token) > MAX_TOKEN or not token.isprintable():
            raise Unauthorized(401, "Unauthorized", "Unauthorized")
        settings = self.settings

        async def review() -> tuple[object, float]:
            self.token_reviews_sent += 1
            body = token_review_body(token, settings.audiences)
            status, answer = await self._source.post(TOKEN_REVIEW_PATH, body)
            user = read_token_review(status, answer)
            if user is None:
                return _INVALID, settings.token_failure_ttl
            ttl = settings.token_ttl
            expiry = token_expiry(token)
            if expiry is not None:
                ttl = min(ttl, expiry - time.time())
            return user, ttl

        found = await self._tokens.get_or_fill(token_key(token), review)
        if not isinstance(found, User):
            raise Unauthorized(401, "Unauthorized", "Unauthorized")
        return found

    # ------------------------------------------------------------------ authorization
    def attributes(
        self,
        verb: str,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Attributes:
        """The attributes of a resource request (``resource``: ``pods``,
        ``deployments.apps`` or a :class:`Resource`)."""
        plural, group = _resource_parts(resource)
        version = resource.version if isinstance(resource, Resource) else ""
        return Attributes(
            verb=verb,
            resource=plural,
            api_group=group,
            api_version=version,
            namespace=namespace or "",
            name=name or "",
            subresource=subresource or "",
        )

    async def allowed(
        self,
        user: User,
        verb: str,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> bool:
        """Whether the API server would allow ``user`` to ``verb`` ``resource``.

        Raises what :meth:`decide` raises.
        """
        attrs = self.attributes(
            verb, resource, namespace=namespace, name=name, subresource=subresource
        )
        return (await self.decide(user, attrs)).allowed

    def decide_locally(self, user: User, attrs: Attributes) -> AccessDecision:
        """``system:masters`` and local RBAC only (no wait, no review)."""
        if user.is_privileged:
            return AccessDecision(True, by="system:masters")
        local = self.permissions.decide(user, attrs)
        return AccessDecision(
            local.allowed, local.reason, "rbac" if local.allowed else "rbac-only", local.role
        )

    async def decide(self, user: User, attrs: Attributes) -> AccessDecision:
        """The API server's decision for ``user`` making request ``attrs``: local RBAC,
        then (before a denial) a SubjectAccessReview, cached.

        Raises:
            NotSynced: the RBAC informers have not synced within ``sync_timeout``.

        A review that fails (unreachable, 403 for the kubeconfig's credentials) leaves
        the local denial standing (logged). Cancellation abandons the review.
        """
        if not self._synced:
            await self.wait_synced()
        local = self.decide_locally(user, attrs)
        if local.by == "system:masters" or not self.settings.review_denials:
            return local
        if local.allowed and self.settings.local_allows:
            return local
        key = (user.name, user.uid, user.groups, tuple(sorted(user.extra.items())), attrs)

        async def review() -> tuple[tuple[bool, str], float]:
            self.reviews_sent += 1
            status, answer = await self._source.post(
                ACCESS_REVIEW_PATH, access_review_body(user, attrs)
            )
            allowed, reason = read_access_review(status, answer)
            ttl = self.settings.allow_ttl if allowed else self.settings.deny_ttl
            return (allowed, reason), ttl

        try:
            allowed, reason = await self._reviews.get_or_fill(key, review)
        except KubemuxError as exc:
            log.warning(
                "context %r: a SubjectAccessReview failed (%s); the local denial stands",
                self.context,
                exc,
            )
            return local
        return AccessDecision(allowed, reason if not allowed else "", "review")

    def forbidden(self, user: User, attrs: Attributes, decision: AccessDecision) -> dict[str, Any]:
        """The 403 Status body the API server writes for this denial."""
        return forbidden_status(user.name, attrs, decision.reason)

    async def wait_revoked(self, user: User, attrs: Attributes) -> AccessDecision:
        """Return the denial once ``user`` may no longer make request ``attrs``.

        Woken by every RBAC change (in the step the informer applies it); a right that
        only a SubjectAccessReview gave is asked again when its answer expires. For an
        open watch: race this against the stream and end the stream when it returns.
        Cancellation just stops the wait.
        """
        while True:
            version = self.policy.version
            decision = await self.decide(user, attrs)
            if not decision.allowed:
                return decision
            if decision.by == "review":
                with anyio.move_on_after(self.settings.allow_ttl):
                    await self.wait_changed(version)
            else:
                await self.wait_changed(version)

    # ------------------------------------------------------------------ reading as a user
    def namespaces(self, user: User, verb: str, resource: str | Resource) -> frozenset[str] | None:
        """The namespaces where local RBAC lets ``user`` ``verb`` every object of
        ``resource``; None: every namespace (a cluster-wide grant). Rights only a
        SubjectAccessReview gives are not seen here."""
        if user.is_privileged:
            return None
        plural, group = _resource_parts(resource)
        return self.permissions.permissions(user).namespaces_with(verb, group, plural)

    async def list_as(
        self, user: User, store: Store, resource: str | Resource, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """``store``'s objects that ``user`` may list: all of them with a cluster-wide
        right (reviewed), else those of the namespaces they may list (steve's partition;
        the Kubernetes API itself answers such a cluster-wide LIST with a 403).

        Raises:
            NotSynced: the RBAC informers have not synced within ``sync_timeout``.
        """
        if namespace is not None:
            allowed = await self.allowed(user, "list", resource, namespace=namespace)
            return store.list(namespace) if allowed else []
        if await self.allowed(user, "list", resource):
            return store.list()
        if isinstance(resource, Resource) and not resource.namespaced:
            return []
        names = self.namespaces(user, "list", resource) or frozenset()
        out: list[dict[str, Any]] = []
        for ns in sorted(names):
            out.extend(store.list(ns))
        return out

    def statistics(self) -> dict[str, float]:
        """Counts for a UI or a benchmark (never a token)."""
        return {
            "rbac_version": self.policy.version,
            "users": len(self.permissions),
            "token_answers": len(self._tokens),
            "review_answers": len(self._reviews),
            "token_reviews_sent": self.token_reviews_sent,
            "reviews_sent": self.reviews_sent,
            "synced": float(self._synced),
        }
