"""The contexts panel as the page's event streams send it: each context once, then changes.

``/api/contexts`` answers the registry's whole status (:func:`~.views.status_payload`); a
stream sends the *panel*: per context only what the page shows (:func:`panel_item`), and
after its first ``contexts`` event only the contexts whose item changed
(:class:`PanelDiff`). What moves without anything a person sees changing (an informer's
resourceVersion and last event time on every bookmark, a backoff's countdown) is not in
the panel: a fleet of 1,000 idle contexts then sends nothing, where the whole status
(~1 MB) went out every second or so.

Events (``data`` is JSON):

- the first ``contexts`` event of a stream (and of every resynchronisation):
  ``{"contexts": [item, ...], "kubeconfig_errors", "invalid_contexts", "kubeconfig_syncs"}``;
- then ``contexts`` events with ``{"changed": [item, ...], "removed": [name, ...]}``, plus
  ``"order": [name, ...]`` when the set or the order of the contexts changed, and the three
  kubeconfig fields. A changed item replaces the page's item of that name whole.

An item: ``name``, ``state``, ``generation``, ``server`` (no password), ``user_name``,
``namespace``, ``source``, ``current``, ``objects`` (resource -> count, for informers over
everything), ``last_sync``, ``last_error``, ``retry_at`` (wall-clock seconds when a failed
start may be retried, whole seconds; None if none), ``skipped`` (``{"count", "latest"}`` or
None).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import orjson

from kubemux import RegistryStatus

from .._redact import redact_text
from .views import safe_server

__all__ = ["Panel", "PanelDiff", "build_panel", "panel_item"]


def panel_item(ctx: Any, current: str | None, error: str | None = None) -> dict[str, Any]:
    """One context's item (``ctx``: a :class:`~kubemux.ContextStatus`); ``error`` stands
    for its ``last_error`` when it has none (a stream's failure to watch its resource)."""
    objects: dict[str, int] = {}
    syncs = []
    skipped = 0
    latest: tuple[float, str] | None = None
    for i in ctx.informers:
        if i.namespace is None and i.label_selector is None and i.field_selector is None:
            objects[i.resource] = i.objects
        if i.last_sync is not None:
            syncs.append(i.last_sync)
        if i.last_skip:
            skipped += i.skipped_lines
            at = i.last_skip_at or 0.0
            if latest is None or at > latest[0]:
                latest = (at, i.last_skip)
    retry_at = None
    if ctx.retry_in is not None and math.isfinite(ctx.retry_in):
        retry_at = math.ceil(time.time() + ctx.retry_in)
    last_error = ctx.last_error or error
    return {
        "name": ctx.name,
        "state": str(getattr(ctx.state, "value", ctx.state)),
        "generation": ctx.generation,
        "server": safe_server(ctx.server),
        "user_name": ctx.user_name,
        "namespace": ctx.namespace,
        "source": ctx.source,
        "current": ctx.name == current,
        "objects": objects,
        "last_sync": max(syncs) if syncs else None,
        "last_error": None if last_error is None else redact_text(last_error),
        "retry_at": retry_at,
        "skipped": None if latest is None else {"count": skipped, "latest": redact_text(latest[1])},
    }


class Panel:
    """The panel at one instant: each context's item encoded, in kubeconfig order."""

    __slots__ = ("extras", "items", "order")

    def __init__(self, order: tuple[str, ...], items: dict[str, bytes], extras: bytes) -> None:
        self.order = order
        self.items = items
        self.extras = extras  # ',"kubeconfig_errors":...' (JSON members, a leading comma)

    def only(self, name: str) -> Panel:
        """The panel of one context (the object page's): no other context's bytes."""
        if name not in self.items:
            return Panel((), {}, self.extras)
        return Panel((name,), {name: self.items[name]}, self.extras)

    def with_errors(self, status: RegistryStatus, errors: Mapping[str, str]) -> Panel:
        """The panel with a stream's own errors for the contexts that show none."""
        items = dict(self.items)
        for name, error in errors.items():
            ctx = status.contexts.get(name)
            if ctx is not None and not ctx.last_error:
                items[name] = orjson.dumps(panel_item(ctx, status.current_context, error))
        return Panel(self.order, items, self.extras)


def build_panel(status: RegistryStatus) -> Panel:
    current = status.current_context
    items = {name: orjson.dumps(panel_item(ctx, current)) for name, ctx in status.contexts.items()}
    extras = orjson.dumps(
        {
            "kubeconfig_errors": {k: redact_text(v) for k, v in status.kubeconfig_errors.items()},
            "invalid_contexts": {k: redact_text(v) for k, v in status.invalid_contexts.items()},
            "kubeconfig_syncs": status.kubeconfig_syncs,
        }
    )
    return Panel(tuple(status.contexts), items, b"," + extras[1:-1])


class PanelDiff:
    """What one stream has sent of the panel, and the next event to send."""

    __slots__ = ("_sent",)

    def __init__(self) -> None:
        self._sent: Panel | None = None

    def reset(self) -> None:
        """Send the whole panel next (the page resynchronises)."""
        self._sent = None

    def full(self) -> bytes | None:
        """The whole panel as sent so far (for a stream joining), None before the first."""
        sent = self._sent
        if sent is None:
            return None
        items = b",".join(sent.items[name] for name in sent.order)
        return b'{"contexts":[' + items + b"]" + sent.extras + b"}"

    def next(self, panel: Panel) -> bytes | None:
        """The ``contexts`` event's data that brings the page to ``panel``; None when
        nothing it shows changed."""
        sent, self._sent = self._sent, panel
        if sent is None:
            return self.full()
        changed = [item for name, item in panel.items.items() if sent.items.get(name) != item]
        removed = [name for name in sent.order if name not in panel.items]
        reordered = panel.order != sent.order
        if not changed and not removed and not reordered and panel.extras == sent.extras:
            return None
        parts = [b'{"changed":[', b",".join(changed), b'],"removed":', orjson.dumps(removed)]
        if reordered:
            parts += [b',"order":', orjson.dumps(list(panel.order))]
        parts += [panel.extras, b"}"]
        return b"".join(parts)
