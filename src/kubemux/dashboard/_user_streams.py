"""The per-user dashboard's event streams (:class:`UserStream`): a :class:`~.streams.Stream`
that shows one logged-in user what they may see, and follows their rights live.

A per-user stream reads the same shared stores and the same encoded snapshots as every
stream (:class:`~._snapshots.SnapshotCache`, one entry per context, resource and
namespace), but is a stream of its own (never a shared view of :mod:`._broadcast`: two
users' streams must not share events). For each context it keeps the user's *scope*
(:meth:`~._viewer.Viewer.scope`: everything, some namespaces, or a denial) and:

- replays only what the scope shows (a partition replays each allowed namespace's
  snapshot), and passes on only the live changes inside it;
- shows a denied context's error on its card (the API server's 403 text, or that the
  context refused the token), while the other contexts' rows flow as usual;
- follows the context's RBAC (:meth:`Authorizer.wait_changed`, woken in the step the
  informer applies a change): when the scope changes, the page is told to forget that
  context's rows (a ``RESET`` change) and gets what the new scope shows. A revocation
  therefore leaves the page, and a new grant reaches it, as soon as the RBAC informer has
  the change (well within 2 s). Every ``RECHECK_PERIOD`` the token is checked again too
  (its cached TokenReview expires).

The object page does the same for ``get`` of the object (:meth:`Authorizer.wait_revoked`)
and ``list`` of the events in its namespace. A scope change and a batch of live changes
are written under one lock: no change filtered by a lost right reaches the page after the
``RESET`` that took the right away.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson

from kubemux import Change, MultiTableStore, Resource, TableColumn, TableStore

from .._authz.attributes import Attributes
from .._authz.authorizer import Authorizer
from .._authz.user import User
from ._context import StreamContext
from ._encoding import encode_event
from ._panel import Panel, panel_item
from ._responses import Problem
from ._viewer import Denied, Scope, Viewer
from .streams import Stream

__all__ = ["RECHECK_PERIOD", "UserStream"]

RECHECK_PERIOD = 30.0  # seconds between checks of a user's token and rights without news
_UNKNOWN = Denied("the user's rights in this context are being checked", 503)


class UserStream(Stream):
    """One logged-in user's stream; see the module docstring."""

    def __init__(
        self,
        context: StreamContext,
        write: Callable[[bytes], Awaitable[None]],
        viewer: Viewer,
    ) -> None:
        super().__init__(context, write)
        self.viewer = viewer
        self.scopes: dict[str, Scope] = {}
        self._lock = anyio.Lock()
        self._errors: dict[str, str] = {}  # context -> what the user is told on its card

    # ------------------------------------------------------------------ table
    async def table(self, resource: Resource, namespace: str | None) -> None:
        ns = namespace if resource.namespaced else None
        # the scopes first (a context that cannot say within sync_timeout joins later)
        with anyio.move_on_after(self.dash.sync_timeout):
            async with anyio.create_task_group() as tg:
                for context in list(self.registry.contexts):
                    tg.start_soon(self._rescope, context, resource, ns)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow_rights, resource, ns)
            await super().table(resource, namespace)
            tg.cancel_scope.cancel("the stream ended")

    async def _rescope(self, context: str, resource: Resource, namespace: str | None) -> None:
        """The context's first scope (before anything is replayed)."""
        scope = await self.viewer.scope(context, resource, namespace)
        self._set_scope(context, scope)

    def _set_scope(self, context: str, scope: Scope) -> None:
        self.scopes[context] = scope
        if isinstance(scope, Denied):
            self._errors[context] = scope.message
        else:
            self._errors.pop(context, None)

    async def _follow_rights(self, resource: Resource, namespace: str | None) -> None:
        """One task per context following the user's rights there (contexts added later too)."""
        registry = self.registry
        followed: set[str] = set()
        async with anyio.create_task_group() as tg:
            while True:
                syncs = registry.kubeconfig_syncs
                for context in list(registry.contexts):
                    if context not in followed:
                        followed.add(context)
                        tg.start_soon(self._follow_context, context, resource, namespace)
                await self.wait_sync(syncs)

    async def _follow_context(
        self, context: str, resource: Resource, namespace: str | None
    ) -> None:
        version = await self._apply(context, resource, namespace)
        while True:
            authz = self.viewer.known.get(context)
            # again when the token's cached TokenReview answer expires (or every 30 s)
            period = min(RECHECK_PERIOD, authz.settings.token_ttl) if authz is not None else 2.0
            with anyio.move_on_after(period):
                if authz is not None:  # a change since the scope was computed wakes it
                    await authz.wait_changed(version)
                else:  # not asked yet (refused, unreachable): ask again now and then
                    await anyio.sleep_forever()
            version = await self._apply(context, resource, namespace)

    async def _apply(self, context: str, resource: Resource, namespace: str | None) -> int:
        """The context's scope again; if it changed, the page forgets the context's rows
        and gets what the new scope shows, in one step under the lock. Returns the RBAC
        version the scope was computed at (-1: unknown, compute again)."""
        known = self.viewer.known.get(context)
        version = known.version if known is not None else -1
        scope = await self.viewer.scope(context, resource, namespace)
        async with self._lock:
            before = self.scopes.get(context, _UNKNOWN)
            self._set_scope(context, scope)
            if scope == before:
                return version
            self.sent.pop(context, None)
            reset = [{"type": "RESET", "context": context, "resource": resource.name}]
            await self.write(encode_event("changes", reset))
            store = self.table_store(context, resource)
            if store is not None and not isinstance(scope, Denied):
                await self.replay(context, resource, namespace, store, self.sent)
        return version

    async def replay_table(
        self, resource: Resource, namespace: str | None, defined: Any = None
    ) -> None:
        async with self._lock:
            await super().replay_table(resource, namespace, defined)

    async def replay(
        self,
        context: str,
        resource: Resource,
        namespace: str | None,
        store: TableStore | MultiTableStore,
        sent: dict[str, tuple[TableColumn, ...]],
    ) -> None:
        scope = self.scopes.get(context, _UNKNOWN)
        if isinstance(scope, Denied):
            sent.pop(context, None)
            return
        if scope is None:
            await super().replay(context, resource, namespace, store, sent)
            return
        columns = store.columns
        await self.write(
            self.dash.encodings.columns_event(context, resource, columns, defined=self.defined)
        )
        for ns in sorted(scope):  # steve's partition: each namespace the user may list
            for event in await self.dash.snapshots.events(context, resource, ns, store):
                await self.write(event)
        sent[context] = columns

    def _visible(self, change: Change) -> bool:
        if change.type in ("RESET", "REMOVED"):
            return True
        scope = self.scopes.get(change.context, _UNKNOWN)
        if scope is None:
            return True
        if isinstance(scope, Denied):
            return False
        return change.namespace in scope

    async def send_changes(
        self,
        batch: list[Change],
        resource: Resource,
        namespace: str | None,
        sent: dict[str, tuple[TableColumn, ...]],
    ) -> None:
        async with self._lock:
            shown = [change for change in batch if self._visible(change)]
            if shown:
                await super().send_changes(shown, resource, namespace, sent)

    # ------------------------------------------------------------------ contexts panel
    def contexts_panel(self, version: int) -> Panel:
        """The panel as this user may see it: each context's card with the user's error
        there, and object counts only of what the user may list cluster-wide."""
        shared = self.dash.panel(version)
        status = self.registry.status()
        items: dict[str, bytes] = {}
        for name, ctx in status.contexts.items():
            error = self._errors.get(name) or self.watch_errors.get(name)
            if name in self.viewer.session.refused and name not in self.viewer.session.users:
                error = self.viewer.session.refused[name]
            item = panel_item(ctx, status.current_context, error)
            item["objects"] = {
                r: n for r, n in item["objects"].items() if self.viewer.may_see_counts(name, r)
            }
            items[name] = orjson.dumps(item)
        return Panel(shared.order, items, shared.extras)

    # ------------------------------------------------------------------ object
    async def object(self, context: str, resource: Resource, namespace: str, name: str) -> None:
        """The object while the user may ``get`` it; the API server's 403 while not."""
        ns = namespace if resource.namespaced else ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.contexts_loop, context)
            while True:
                known = self.viewer.known.get(context)
                version = known.version if known is not None else -1
                try:
                    authz, user = await self.viewer.check(
                        context, "get", resource, namespace=ns or None, name=name
                    )
                except Problem as exc:  # the banner and the object's place say it
                    await self.emit("problem", {"message": exc.message, "fatal": False})
                    await self.emit("object", {"object": None, "gone": exc.message})
                    with anyio.move_on_after(RECHECK_PERIOD if known else 2.0):
                        if known is not None:  # a grant wakes this
                            await known.wait_changed(version)
                        else:
                            await anyio.sleep_forever()
                    continue
                attrs = authz.attributes("get", resource, namespace=ns or None, name=name)
                if await self._object_while(authz, user, attrs, (context, resource, ns, name)):
                    break
            tg.cancel_scope.cancel("the registry closed")

    async def _object_while(
        self, authz: Authorizer, user: User, attrs: Attributes, what: tuple[Any, ...]
    ) -> bool:
        """The object page until the right to get it is revoked (False) or the registry
        closes (True)."""
        ended = False
        async with anyio.create_task_group() as tg:

            async def revoked() -> None:
                await authz.wait_revoked(user, attrs)
                tg.cancel_scope.cancel("the right was revoked")

            tg.start_soon(revoked)
            await self.pump_object(*what)
            ended = True
            tg.cancel_scope.cancel("the registry closed")
        return ended

    async def object_events(
        self, context: str, kind: str, namespace: str, name: str
    ) -> list[dict[str, Any]]:
        try:
            await self.viewer.check(context, "list", "events", namespace=namespace or None)
        except Problem as exc:
            await self.emit("problem", {"message": f"events: {exc.message}", "fatal": False})
            return []
        return await super().object_events(context, kind, namespace, name)
