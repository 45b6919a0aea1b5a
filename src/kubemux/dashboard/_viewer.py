"""What one logged-in user may see (:class:`Viewer`), context by context.

Every answer of the per-user dashboard goes through a viewer: the user each context's
TokenReview said the session's token is, and that context's :class:`~kubemux._authz.
authorizer.Authorizer` (RBAC evaluated locally, a SubjectAccessReview before any denial).
A context is judged on its own: one that refuses the token, cannot be asked, or denies the
resource gives that context's error, never the others'.

What a table shows of a context (:meth:`Viewer.scope`) is rancher/steve's *partition*: all
its objects when the user may list the resource cluster-wide (or in the namespace asked);
else those of the namespaces where local RBAC lets them list it; else nothing, with the API
server's 403 text word for word.
"""

from __future__ import annotations

import dataclasses
import logging

import anyio
from starlette.requests import Request

from kubemux import KubemuxError, Resource, Unauthorized, WatcherRegistry

from .._authz.authorizer import Authorizer, AuthorizerSettings
from .._authz.user import User
from ._responses import Problem
from ._sessions import SESSION_KEY, Session, Sessions
from ._state import dashboard_of

__all__ = [
    "AUTH_TIMEOUT",
    "Denied",
    "Scope",
    "Viewer",
    "authenticate_all",
    "session_of",
    "viewer_of",
]

log = logging.getLogger(__name__)

AUTH_TIMEOUT = 10.0  # seconds a context's authorizer may take to sync (and review a token)
LOGIN_WAIT = 5.0  # seconds a login waits for the contexts; the others are asked on use
REFUSED = "the context did not accept the token (401 Unauthorized)"


@dataclasses.dataclass(frozen=True, slots=True)
class Denied:
    """A context shows nothing: ``message`` says why (the API server's 403 text)."""

    message: str
    status: int = 403


Scope = frozenset[str] | Denied | None
"""What a table shows of a context: None every object, a set of namespaces, or nothing."""


async def _authenticate(
    registry: WatcherRegistry,
    context: str,
    token: str,
    known: dict[str, Authorizer],
    settings: AuthorizerSettings | None,
) -> tuple[User | None, str | None, bool]:
    """``(user, error, retry)`` for one context: retry when it could not be asked."""
    try:
        with anyio.fail_after(AUTH_TIMEOUT):
            authz = await registry.authorizer(context, settings=settings)
            known[context] = authz
            return await authz.authenticate(token), None, False
    except Unauthorized:
        return None, REFUSED, False
    except (KubemuxError, TimeoutError) as exc:
        text = str(exc) or "no answer in time"
        log.info("context %r could not check a token: %s", context, text)
        return None, f"the context could not check the token: {text}", True


async def authenticate_all(
    registry: WatcherRegistry,
    token: str,
    known: dict[str, Authorizer],
    settings: AuthorizerSettings | None = None,
) -> tuple[dict[str, User], dict[str, str], set[str]]:
    """The token's TokenReview in every context at once: ``(users, refused, retry)``;
    a context that has not answered within ``LOGIN_WAIT`` is in ``retry``."""
    users: dict[str, User] = {}
    refused: dict[str, str] = {}
    retry: set[str] = set()

    async def one(context: str) -> None:
        user, error, again = await _authenticate(registry, context, token, known, settings)
        if user is not None:
            users[context] = user
        elif error is not None:
            refused[context] = error
            if again:
                retry.add(context)

    order = list(registry.contexts)
    with anyio.move_on_after(LOGIN_WAIT):  # the slower ones are asked again on use
        async with anyio.create_task_group() as tg:
            for context in order:
                tg.start_soon(one, context)
    for context in order:
        if context not in users and context not in refused:
            refused[context] = f"the context could not check the token within {LOGIN_WAIT:.0f}s"
            retry.add(context)
    return (
        {c: users[c] for c in order if c in users},
        {c: refused[c] for c in order if c in refused},
        retry,
    )


class Viewer:
    """A session's view of a registry: its user and authorizer per context."""

    def __init__(
        self,
        registry: WatcherRegistry,
        session: Session,
        known: dict[str, Authorizer],
        *,
        settings: AuthorizerSettings | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self.registry = registry
        self.session = session
        self.known = known  # the dashboard's: context -> its authorizer, once asked
        self.settings = settings
        self.sessions = sessions  # the session ends there once no context takes its token

    def __repr__(self) -> str:
        return f"<Viewer {self.session!r}>"

    async def who(self, context: str) -> tuple[Authorizer, User] | Denied:
        """The context's authorizer and the session's user there, or why there is none.

        A context that could not be asked at login is asked again here; a context whose
        TokenReview answer expired re-reviews the token (the authorizer's cache): a token
        the cluster no longer accepts ends that context for the session.
        """
        session = self.session
        if context not in self.registry.contexts:
            return Denied(f"context {context!r} not found", 404)
        user = session.users.get(context)
        if user is None and context in session.refused and context not in session.retry:
            return Denied(session.refused[context], 401)
        if user is None:
            found, error, again = await _authenticate(
                self.registry, context, session.token, self.known, self.settings
            )
            if found is None:
                session.refused[context] = error or REFUSED
                if not again:
                    session.retry.discard(context)
                return Denied(session.refused[context], 401 if not again else 503)
            session.users[context] = user = found
            session.refused.pop(context, None)
            session.retry.discard(context)
        try:
            with anyio.fail_after(AUTH_TIMEOUT):
                authz = await self.registry.authorizer(context, settings=self.settings)
                self.known[context] = authz
                again_user = await authz.authenticate(session.token)  # cached; re-reviewed
        except Unauthorized:  # the cluster stopped accepting the token
            session.users.pop(context, None)
            session.refused[context] = REFUSED
            if not session.users and not session.retry and self.sessions is not None:
                log.info("%r ends: no context accepts its token any more", session)
                self.sessions.drop(session)
            return Denied(REFUSED, 401)
        except (KubemuxError, TimeoutError) as exc:
            return Denied(f"the context could not check the token: {exc}", 503)
        session.users[context] = again_user
        return authz, again_user

    async def check(
        self,
        context: str,
        verb: str,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> tuple[Authorizer, User]:
        """The authorizer and user when the request is allowed.

        Raises:
            Problem: 401 (token refused), 403 (the API server's text), 404 (no context),
                503 (the context cannot be asked now).
        """
        found = await self.who(context)
        if isinstance(found, Denied):
            raise Problem(
                found.status, found.message, retry_after=1 if found.status == 503 else None
            )
        authz, user = found
        attrs = authz.attributes(
            verb, resource, namespace=namespace, name=name, subresource=subresource
        )
        try:
            decision = await authz.decide(user, attrs)
        except KubemuxError as exc:
            raise Problem(503, str(exc), retry_after=1) from exc
        if not decision.allowed:
            raise Problem(403, authz.forbidden(user, attrs, decision)["message"])
        return authz, user

    async def scope(self, context: str, resource: Resource, namespace: str | None) -> Scope:
        """What a table of ``resource`` (in ``namespace``, or all) shows of ``context``."""
        found = await self.who(context)
        if isinstance(found, Denied):
            return found
        authz, user = found
        ns = namespace if resource.namespaced else None
        attrs = authz.attributes("list", resource, namespace=ns)
        try:
            decision = await authz.decide(user, attrs)
        except KubemuxError as exc:
            return Denied(str(exc), 503)
        if decision.allowed:
            return None
        if ns is None and resource.namespaced:
            names = authz.namespaces(user, "list", resource)
            if names is None:
                return None
            if names:
                return names
        return Denied(authz.forbidden(user, attrs, decision)["message"])

    def may_see_counts(self, context: str, resource: str) -> bool:
        """Whether the contexts panel may show how many ``resource`` objects ``context``
        holds: the user may list them cluster-wide (local RBAC: no wait, no review)."""
        user = self.session.users.get(context)
        if user is None:
            return False
        authz = self.known.get(context)
        if authz is None or not authz.has_synced:
            return False
        plural, _, group = resource.partition(".")
        attrs = authz.attributes("list", f"{plural}.{group}" if group else plural)
        return authz.decide_locally(user, attrs).allowed


def session_of(request: Request) -> Session:
    """The request's session (:class:`~._login.SessionGate` put it there).

    Raises:
        Problem: 401, there is none.
    """
    session = request.scope.get(SESSION_KEY)
    if not isinstance(session, Session):
        raise Problem(401, "log in first")
    return session


def viewer_of(request: Request) -> Viewer | None:
    """The logged-in user's :class:`Viewer` in a per-user dashboard, else None (the
    dashboard serves one identity: the kubeconfig's)."""
    dashboard = dashboard_of(request)
    if not dashboard.user_tokens:
        return None
    return Viewer(
        dashboard.registry,
        session_of(request),
        dashboard.authorizers,
        settings=dashboard.authorizer_settings,
        sessions=dashboard.sessions,
    )
