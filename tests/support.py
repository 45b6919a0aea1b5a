"""What every test file shares: the one bound on a wait, and the one way to wait for a state.

``TIMEOUT`` bounds every wait of a test (generous: the suite runs on loaded machines; a test
that needs more says so with a multiple). ``wait_until`` waits for a condition the way the
house rules ask: on the registry's status signal when there is one (no sleep), by polling
only state that moves without a signal (another process, a file, Redis), and always within
the bound.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from kubemux import Store, StoreChange, StoreListener, WatcherRegistry
from kubemux._registry.status import StatusSignal
from kubemux._wire.codec import Entry
from kubemux.testing import FakeCluster

__all__ = ["TIMEOUT", "add_widget_crd", "wait_until"]

TIMEOUT = 15.0
"""Seconds any single wait of a test may take before the test fails."""


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    registry: WatcherRegistry | StatusSignal | None = None,
    poll: float | None = None,
    timeout: float = TIMEOUT,  # noqa: ASYNC109 - the one bound, overridable per call
) -> None:
    """Return once ``predicate()`` holds; fail the test (``TimeoutError``) after ``timeout``.

    Args:
        predicate: Checked at once, then again at each wakeup; may be async (an HTTP GET).
        registry: Re-check after each of its status changes (``status_version``; taken
            before each check, so a change between the check and the wait is not missed);
            or a bare :class:`StatusSignal` (the lifecycle core's tests).
        poll: Re-check at least this often (seconds): for state that moves without a status
            change (object counts, other processes). Without ``registry`` it
            defaults to 0.02.
    """
    if registry is None and poll is None:
        poll = 0.02
    with anyio.fail_after(timeout):
        while True:
            version = _version(registry)
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            if registry is None:
                assert poll is not None
                await anyio.sleep(poll)
                continue
            with anyio.move_on_after(poll if poll is not None else float("inf")):
                if isinstance(registry, StatusSignal):
                    await registry.wait_change(version)
                else:
                    await registry.wait_status_change(version)


def _version(source: WatcherRegistry | StatusSignal | None) -> int:
    if source is None:
        return 0
    return source.version if isinstance(source, StatusSignal) else source.status_version


def add_widget_crd(cluster: FakeCluster, **options: Any) -> None:
    """The CRD ``widgets.example.com`` (kind Widget, short name ``wd``, category ``all``)
    with printer columns Size, Color (priority 1) and Age; ``options`` go to ``add_crd``."""
    cluster.add_crd(
        "example.com",
        "widgets",
        "Widget",
        short_names=["wd"],
        categories=["all"],
        printer_columns=[
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        **options,
    )


class Calls(StoreListener):
    """A store listener handing each change to ``fn(type, entry, old)``:
    ``store.writer.add_listener(Calls(fn))``."""

    def __init__(self, fn: Callable[[str, Entry, Entry | None], None]) -> None:
        self.fn = fn

    def changed(self, change: StoreChange) -> None:
        self.fn(change.type, change.entry, change.old)


def listen(store: Store, fn: Callable[[str, Entry, Entry | None], None]) -> Store:
    """``store``, with ``fn(type, entry, old)`` called for every change it announces."""
    store.writer.add_listener(Calls(fn))
    return store
