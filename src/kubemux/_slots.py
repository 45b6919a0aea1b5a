"""Starting informer slots for callers: resolve the name, scope it, wait until synced.

The path behind ``watch()`` and ``table()``: a kubectl-style name is resolved through the
context's connection (built-ins without a request, everything else through discovery), the
slot is created on the live generation under the key's lock (``Generations``), and the
caller waits until the slot's first sync finished. A namespaced resource whose cluster-wide
LIST is forbidden falls back to the namespaces the user may read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

import anyio

from ._errors import ContextRemoved, Forbidden
from ._generations import Generations
from ._informer import InformerKey
from ._kubeconfig import ContextConfig
from ._multistore import MultiStore, MultiTableStore
from ._resources import Resource, known_resource, path_segment
from ._status import ContextState
from ._store import Store

__all__ = ["ResourceSpec", "Starter", "informer_key"]

log = logging.getLogger(__name__)

ResourceSpec = str | Resource


class Starter:
    """Starts (or reuses) slots on the registry's generations and waits for them."""

    def __init__(
        self,
        table: Generations,
        *,
        contexts: Callable[[], Mapping[str, ContextConfig]],
        namespaces: Mapping[str, Sequence[str]],
        stop_timeout: float,
        learn_names: Callable[[Resource], None],
        status_changed: Callable[[], None],
    ) -> None:
        self._table = table
        self._contexts = contexts
        self._namespaces = namespaces
        self._stop_timeout = stop_timeout
        self._learn_names = learn_names
        self._status_changed = status_changed

    async def scoped_store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None,
        namespaces: Sequence[str] | None,
        label_selector: str | None,
        field_selector: str | None,
        view: str,
    ) -> Store:
        if namespaces is not None:
            if namespace is not None:
                raise ValueError("give namespace or namespaces, not both")
            if isinstance(namespaces, str) or not namespaces:
                raise ValueError("namespaces must be a non-empty list of names")
            return await self._union(
                context, resource, namespaces, label_selector, field_selector, view, ""
            )
        try:
            return await self.synced_store(
                context, resource, namespace, label_selector, field_selector, view
            )
        except Forbidden as exc:
            cfg = self._contexts().get(context)
            if namespace is not None or cfg is None:
                raise
            configured = self._namespaces.get(context)
            scope = list(configured or [cfg.namespace or "default"])
            origin = "configured for the context" if configured else "the context's namespace"
            reason = (
                f"listing across all namespaces is forbidden ({exc.message or exc.reason}); "
                f"watching {', '.join(scope)} ({origin})"
            )
            store = await self._union(
                context, resource, scope, label_selector, field_selector, view, reason
            )
            if not store.resource.namespaced:
                raise
            gen = self._table.gens.get(context)
            if gen is not None:
                gen.notes[store.resource.name] = reason
                self._status_changed()
            log.info("context %r: %s: %s", context, store.resource.name, reason)
            return store

    async def _union(
        self,
        context: str,
        resource: ResourceSpec,
        scope: Sequence[str],
        label_selector: str | None,
        field_selector: str | None,
        view: str,
        reason: str,
    ) -> MultiStore:
        parts: dict[str, Store] = {}

        async def one(ns: str) -> None:
            parts[ns] = await self.synced_store(
                context, resource, ns, label_selector, field_selector, view
            )

        try:
            async with anyio.create_task_group() as tg:
                for ns in dict.fromkeys(scope):
                    tg.start_soon(one, ns)
        except BaseExceptionGroup as group:  # the first failure, as watch() raises it
            raise _first(group) from None
        kind = MultiTableStore if view == "table" else MultiStore
        return kind(parts, reason=reason)

    async def synced_store(
        self,
        context: str,
        resource: ResourceSpec,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        view: str,
    ) -> Store:
        stops_seen = self._table.stops.get(context)
        fixed = resource if isinstance(resource, Resource) else known_resource(resource)
        while True:
            if fixed is not None:  # nothing to resolve: check, create and use in one step
                key = informer_key(fixed, namespace, label_selector, field_selector, view)
                self._learn_names(fixed)
                self._raise_pending_failure(context, key)
            async with self._table.lock(context):
                gen = await self._table.current(context, stops_seen)
                if fixed is not None:
                    slot = gen.ensure_slot(key, fixed, persistent=False)
                else:
                    gen.pending += 1
            if fixed is None:
                try:
                    connection = await gen.connection()
                    res = await connection.resolve(str(resource))
                    key = informer_key(res, namespace, label_selector, field_selector, view)
                    self._learn_names(res)
                    self._raise_pending_failure(context, key)
                    slot = gen.ensure_slot(key, res, persistent=False)
                except ContextRemoved:
                    if self._table.stops.get(context) != stops_seen or not gen.is_stopping:
                        raise
                    continue  # reloaded meanwhile: the new generation
                finally:
                    gen.pending -= 1
                    if gen.stop_if_unused():  # nothing to run: no idle session outlives us
                        with anyio.move_on_after(self._stop_timeout, shield=True):
                            await gen.wait_done()
            gen.last_used = time.monotonic()
            if gen.state is ContextState.BACKING_OFF and gen.failure is not None:
                gen.failure.reraise()
            await slot.ready.wait()
            own = slot.failure
            if own is not None and not isinstance(own.error, ContextRemoved):
                if gen.is_stopping:  # let it finish first: no session outlives the call
                    with anyio.move_on_after(self._stop_timeout, shield=True):
                        await gen.wait_done()
                own.reraise()  # this call's own failure: it gets the error
            if gen.is_stopping:
                if (gen.final_change not in ("RESET", None) and not gen.reaped) or (
                    self._table.stops.get(context) != stops_seen
                ):
                    raise ContextRemoved(context, gen.stop_reason or "stopped")
                # reloaded (a new generation takes over) or closing as idle after a failed
                # start: let this generation finish (no session outlives the call), then go
                # round again: the new generation, or the failure inside its backoff window
                with anyio.move_on_after(self._stop_timeout, shield=True):
                    await gen.wait_done()
                continue
            gen.last_used = time.monotonic()
            return slot.store

    def _raise_pending_failure(self, context: str, key: InformerKey) -> None:
        """Inside the backoff window of this informer's failed start: its error, no request."""
        failure = self._table.slot_failures.get(context, {}).get(key)
        gen = self._table.gens.get(context)
        if failure is not None and failure.pending and (gen is None or key not in gen.slots):
            failure.reraise()


def informer_key(
    res: Resource,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    view: str = "objects",
) -> InformerKey:
    """What names one informer of a context: a namespace only for namespaced resources.

    Raises:
        ValueError: the namespace is ``.`` or ``..`` (no URL can hold it; client-go
            refuses it too).
    """
    if namespace and res.namespaced:
        path_segment(namespace, "namespace")
    return InformerKey(
        res.name,
        namespace if res.namespaced else None,
        label_selector or None,
        field_selector or None,
        view,
    )


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
