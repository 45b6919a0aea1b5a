"""The kubeconfig side of the registry: what it says now, syncs and state-change signals."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio

from ._generations import Generations
from ._kubeconfig import ContextConfig
from ._kubeconfig_watch import ContextDiff, KubeconfigSource

__all__ = ["KubeconfigFollower"]

log = logging.getLogger(__name__)


class KubeconfigFollower:
    """Base of :class:`~kubemux.WatcherRegistry`: follows its :class:`KubeconfigSource`,
    reconciles each diff through the generations table, and signals state changes."""

    _source: KubeconfigSource
    _table: Generations

    def __init__(self, source: KubeconfigSource) -> None:
        self._source = source
        self._reconcile_lock = anyio.Lock()
        self._syncs = 0
        self._sync_event = anyio.Event()
        self._status_version = 0
        self._status_event = anyio.Event()

    # ------------------------------------------------------------------ kubeconfig
    @property
    def contexts(self) -> Mapping[str, ContextConfig]:
        """What the kubeconfig says now: context name -> :class:`ContextConfig`."""
        return self._source.contexts

    @property
    def current_context(self) -> str | None:
        """The kubeconfig's current-context, by kubectl's merge rules."""
        return self._source.current_context

    @property
    def kubeconfig_syncs(self) -> int:
        """How many kubeconfig syncs have been reconciled (including ones that changed nothing)."""
        return self._syncs

    async def wait_kubeconfig_sync(self, after: int) -> int:
        """Wait until more than ``after`` syncs were reconciled; returns the new count.

        Take ``after = registry.kubeconfig_syncs`` *before* editing the file. Cancelling
        only stops the wait.
        """
        while self._syncs <= after:
            await self._sync_event.wait()
        return self._syncs

    async def sync_kubeconfig(self) -> None:
        """Re-read the kubeconfig now and reconcile (also works with ``follow=False``)."""
        before = self._syncs
        await self._source.sync_now()  # its diff reaches _follow like any other
        await self.wait_kubeconfig_sync(before)

    @property
    def status_version(self) -> int:
        """A number that grows whenever what :meth:`status` shows may have changed state
        (context and informer states, errors recorded or cleared, kubeconfig syncs), not
        on every object."""
        return self._status_version

    async def wait_status_change(self, after: int) -> int:
        """Wait until :attr:`status_version` exceeds ``after``; returns the new value.
        Cancelling only stops the wait."""
        while self._status_version <= after:
            await self._status_event.wait()
        return self._status_version

    def _status_changed(self) -> None:
        self._status_version += 1
        event, self._status_event = self._status_event, anyio.Event()
        event.set()

    async def _follow(self, source: KubeconfigSource) -> None:
        async for diff in source.diffs:
            try:
                await self._reconcile(diff)
            except Exception:  # never lose the follower to one bad sync
                log.exception("kubeconfig reconcile failed")

    async def _reconcile(self, diff: ContextDiff) -> None:
        async with self._reconcile_lock:
            if diff.removed:
                log.info("kubeconfig: removing %s", ", ".join(diff.removed))
            table = self._table
            await table.for_each(diff.removed, table.remove)
            await table.for_each([c.name for c in diff.changed], table.reload)
            await table.for_each([c.name for c in diff.added], table.add)
            self._syncs += 1
            event, self._sync_event = self._sync_event, anyio.Event()
            event.set()
            self._status_changed()
