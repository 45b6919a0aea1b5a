"""The proxy's ``--user-tokens`` mode, as the app calls it: admission, revocation of open
watches, the audit log, and the upstream each request is sent to.

:class:`UserMode` is what the app (:mod:`.._serve.app`) holds when
``ProxySettings(user_tokens=True)``. Around each request (:meth:`UserMode.serve`) it counts
the answer and writes the audit line; at the start of its handling (:meth:`admit`) it
authenticates the user and authorizes what the proxy may answer itself (:mod:`.gate`);
a watch runs under :meth:`until_revoked`, which ends it (its last chunk, as a watch that
timed out) once the user may no longer make it; :meth:`upstream` turns the context's
upstream into the user's (their token, no credential of the kubeconfig).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import anyio
import orjson
from starlette.types import Receive, Scope, Send

from ..._http.upstream import Upstream
from ..._registry.registry import WatcherRegistry
from .._api.paths import ApiPath
from .._api.responses import StatusError, send_error
from .._upstream.upgrade import deny
from .audit import AuditLog, Recorder, audit_fields
from .gate import CALLER, Caller, UserGate

__all__ = ["UserMode"]

Handle = Callable[[Scope, Receive, Send], Awaitable[None]]


class UserMode:
    """Per-user serving (see the module docstring).

    Args:
        registry: Whose contexts' authorizers decide.
        start_timeout: Seconds a request waits for its context's RBAC informers.
        audit_log: Where the JSON-lines audit log goes, or None.
    """

    def __init__(
        self,
        registry: WatcherRegistry,
        *,
        start_timeout: float,
        audit_log: str | os.PathLike[str] | None = None,
    ) -> None:
        self.gate = UserGate(registry, start_timeout=start_timeout)
        self.audit = AuditLog(audit_log) if audit_log is not None else None
        self.revoked = 0  # watches ended by a revocation

    def __repr__(self) -> str:
        return f"<UserMode {self.gate!r} audit={self.audit!r} revoked={self.revoked}>"

    async def serve(self, scope: Scope, receive: Receive, send: Send, handle: Handle) -> None:
        """Handle one request (``handle``), answer its StatusError, write its audit line."""
        recorder = Recorder(send)
        reset = CALLER.set(None)
        try:
            await handle(scope, receive, recorder)
        except StatusError as error:
            if scope["type"] == "websocket":
                await deny(scope, recorder, error)
            else:
                await send_error(recorder, error)
        finally:
            caller = CALLER.get()
            CALLER.reset(reset)
            if self.audit is not None:
                raw = scope.get("raw_path") or scope["path"].encode("utf-8")
                method = scope.get("method", "GET")
                fields = audit_fields(caller, method, raw.decode("latin-1"), recorder)
                self.audit.record(caller, fields)

    async def admit(self, context: str, path: ApiPath, scope: Scope) -> Caller:
        """Authenticate the request and authorize what the proxy would answer itself.

        Raises:
            StatusError: 401, 403 (the API server's), 503 (RBAC not synced).
        """
        gate = self.gate
        caller = await gate.authenticate(context, scope)
        CALLER.set(caller)
        method = scope.get("method", "GET")
        attrs = caller.attrs = gate.attributes(method, path, scope.get("query_string", b""))
        if not _impersonating(scope) and gate.answered_here(method, path, attrs):
            assert attrs is not None
            await gate.authorize(caller, attrs)
        return caller

    @staticmethod
    def watches(caller: Caller, scope: Scope) -> bool:
        """Whether the request is a watch whose right is followed (:meth:`until_revoked`)."""
        attrs = caller.attrs
        return (
            attrs is not None
            and attrs.resource_request
            and attrs.verb == "watch"
            and not _impersonating(scope)
        )

    async def until_revoked(
        self, caller: Caller, run: Callable[[], Awaitable[None]], send: Send
    ) -> None:
        """Run a watch (``run``) until it ends or the user's right to it is revoked; then
        end its answer cleanly (the client re-watches and gets the API server's 403).

        Raises:
            StatusError: the 403, when the right went before the answer started.
        """
        attrs = caller.attrs
        assert attrs is not None
        revoked = False
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                nonlocal revoked
                await caller.authz.wait_revoked(caller.user, attrs)
                revoked = True
                tg.cancel_scope.cancel("the user's right to this watch was revoked")

            tg.start_soon(follow)
            await run()
            tg.cancel_scope.cancel()
        if not revoked:
            return
        self.revoked += 1
        caller.by = "revoked"
        if isinstance(send, Recorder) and send.status is not None:
            await send.end()
            return
        decision = caller.authz.decide_locally(caller.user, attrs)
        body = caller.authz.forbidden(caller.user, attrs, decision)
        caller.decision = "denied"
        raise StatusError(403, body["message"], raw=orjson.dumps(body))

    @staticmethod
    def upstream(up: Upstream) -> Upstream:
        """The upstream to send the current request to: the user's own (their token) when
        the request has a caller, else ``up``."""
        caller = CALLER.get()
        return up.as_bearer(caller.token) if caller is not None else up

    @staticmethod
    def caller() -> Caller | None:
        """The current request's caller (None outside one)."""
        return CALLER.get()

    @staticmethod
    def answered_from_cache() -> None:
        """The current request was answered from the cache (its audit line says so)."""
        caller = CALLER.get()
        if caller is not None:
            caller.decision = "cache"


def _impersonating(scope: Scope) -> bool:
    return any(name.startswith(b"impersonate-") for name, _ in scope.get("headers") or ())
